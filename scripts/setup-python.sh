#!/usr/bin/env bash
# Creates $(repo)/.venv with the Python packages the Triton compatibility tests
# need (requirements-test.txt): a real Triton server (nvidia-pytriton), Triton's
# client and perf_analyzer. Idempotent; a second run only checks and exits.
#
# The venv is made from Debian's /usr/bin/python3, not a pyenv build: PyTriton's
# Python backend stub links the system libpython3.X.so.1.0, so the venv's
# Python must be the one that library belongs to.
#
# Usage: scripts/setup-python.sh        (prints the venv path when done)
# Env:   RATEBATCH_VENV  venv directory (default $(repo)/.venv)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${RATEBATCH_VENV:-$repo/.venv}
req=$repo/requirements-test.txt
py=/usr/bin/python3
start=$(date +%s)

log() { printf 'setup-python: %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------
# python3, python3-venv: the interpreter and ensurepip for the venv.
# libpython3.X: what PyTriton's triton_python_backend_stub links.
# libb64-0d: libb64.so.0d, which tritonclient's perf_analyzer links.
missing_debs() {
	local pkgs=(python3 python3-venv libb64-0d)
	if [[ -x $py ]]; then
		pkgs+=("libpython$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])')")
	fi
	local p
	for p in "${pkgs[@]}"; do
		if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
			printf '%s\n' "$p"
		fi
	done
}

mapfile -t need < <(missing_debs)
if ((${#need[@]} > 0)); then
	if [[ $(id -u) -ne 0 ]]; then
		log "missing Debian packages: ${need[*]}; run as root or: apt-get install -y ${need[*]}"
		exit 1
	fi
	log "installing Debian packages: ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	# libpython's name depends on the python3 just installed.
	mapfile -t need < <(missing_debs)
	if ((${#need[@]} > 0)); then
		apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	fi
fi

# --- the venv ---------------------------------------------------------------
# A venv made by another interpreter (e.g. pyenv's) is replaced.
if [[ -f $venv/pyvenv.cfg ]] && ! grep -qx 'home = /usr/bin' "$venv/pyvenv.cfg"; then
	log "$venv was not made by $py; recreating it"
	rm -rf "$venv"
fi
if [[ ! -x $venv/bin/python ]]; then
	log "creating $venv with $($py --version)"
	$py -m venv "$venv"
fi

# The stamp records what was installed; it changes when the requirements or
# the interpreter change, and only then does pip run.
stamp=$venv/.ratebatch-requirements.sha256
want=$( (sha256sum "$req" | cut -d' ' -f1; $venv/bin/python -VV) | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/perf_analyzer ]]; then
	log "up to date ($venv)"
else
	log "installing $req"
	# Wheels only: nothing here should ever compile on a CI machine.
	"$venv/bin/python" -m pip install --quiet --no-input --disable-pip-version-check \
		--require-virtualenv --only-binary=:all: -r "$req"
	"$venv/bin/python" -m pip check >/dev/null
	printf '%s\n' "$want" >"$stamp"
	log "installed in $(($(date +%s) - start))s"
fi

echo "$venv"
