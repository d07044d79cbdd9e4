# upstream.sh: sourced by the lab scripts that run a proxy in front of an
# upstream (traffic-check.sh, interleave-check.sh, status-watch.sh), so
# that starting PyTriton, teaching the proxy its model and watching its
# phases live in one place.
# It makes the scratch directory $work and the array pids, whose processes
# are killed and $work removed when the script exits.

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# start_pytriton VENV PORT TAU0_MS ALPHA_MS [SERVER-FLAGS...]: a real Triton
# (tests/triton/server.py, B_max $PYTRITON_BMAX, 16 unless set, each
# execution sleeping tau0 + alpha b ms; more flags of server.py after
# the four, such as --dynamic-batching on) on HTTP PORT, gRPC PORT+1 and
# metrics PORT+2; returns once it serves. Its files are named for PORT, so
# one script may start several.
start_pytriton() {
	local at=$work/triton-$2
	"$1/bin/python" tests/triton/server.py --http-port "$2" --grpc-port $(($2 + 1)) --metrics-port $(($2 + 2)) \
		--workspace "$at" --max-batch-size "${PYTRITON_BMAX:-16}" --tau0-ms "$3" --alpha-ms "$4" --ready-file "$at.ready" "${@:5}" >"$at.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 900); do [ -e "$at.ready" ] && return 0; sleep 0.1; done
	echo "PyTriton on port $2 did not start:" >&2
	tail -20 "$at.log" >&2
	exit 1
}

# start_upstream NAME PORT: the upstream UPSTREAM names (emulator, the
# default, or pytriton) on PORT, for the script NAME's messages: the
# emulator (REALISM exact, PRESET googlenet-p4, TAU_SCALE 1), or PyTriton
# from the venv RATEBATCH_VENV (TAU0_MS 4 + ALPHA_MS 0.5 b ms) with
# Triton's dynamic batcher at delay 0. Sets what, a line that names it.
start_upstream() {
	case ${UPSTREAM:-emulator} in
	emulator)
		"${RB:-bin/ratebatch}" emulate --listen 127.0.0.1:"$2" --metrics-listen 127.0.0.1:$(($2 + 2)) \
			--realism "${REALISM:-exact}" --preset "${PRESET:-googlenet-p4}" --tau-scale "${TAU_SCALE:-1}" >"$work/em.log" 2>&1 &
		pids+=($!)
		for _ in $(seq 100); do curl -sf "127.0.0.1:$2/v2/health/ready" >/dev/null 2>&1 && break; sleep 0.1; done
		what="the emulator (${REALISM:-exact}, ${PRESET:-googlenet-p4}, tau x${TAU_SCALE:-1}), model simple"
		;;
	pytriton)
		local venv=${RATEBATCH_VENV:?UPSTREAM=pytriton needs RATEBATCH_VENV, a venv with nvidia-pytriton}
		start_pytriton "$venv" "$2" "${TAU0_MS:-4}" "${ALPHA_MS:-0.5}" --dynamic-batching on --max-queue-delay-us 0
		what="PyTriton, simple, B_max ${PYTRITON_BMAX:-16}, tau(b) = ${TAU0_MS:-4} + ${ALPHA_MS:-0.5} b ms, Triton's dynamic batcher at delay 0"
		;;
	*)
		echo "$1: UPSTREAM is emulator or pytriton, not $UPSTREAM" >&2
		exit 2
		;;
	esac
}

# await_simple PROXY ADMIN: waits until the proxy at PROXY (host:port of
# its HTTP door) lists the simple model in ADMIN/status. PyTriton's
# repository index is empty, so the proxy learns a model at its first
# request: one is sent every try.
await_simple() {
	for _ in $(seq 100); do
		curl -sf -X POST "http://$1/v2/models/simple/infer" -d '{"inputs":[
			{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},
			{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]}' >/dev/null 2>&1 || true
		curl -sf "$2/status" 2>/dev/null | grep -q '"model": *"simple"' && return 0
		sleep 0.2
	done
}

# watch_phases ADMIN DIR: every second until killed, saves the proxy's
# ADMIN/status in DIR (emptied first), a file per sample named for its time. Only curl runs
# per sample, and the samples are read after the run (phases_of): a Python
# started every second takes enough of a two-core host, in bursts, to move
# the p99 of the proxy it watches against an upstream on the same host, and
# the straight arms it does not watch would not pay it.
watch_phases() {
	rm -rf "$2"
	mkdir -p "$2"
	while sleep 1; do
		curl -sf "$1/status" -o "$2/${EPOCHREALTIME:-$(date +%s.%N)}.json" 2>/dev/null || true
	done
}

# phases_of DIR: one line per sample watch_phases saved in DIR, in time
# order, for the simple model's phase (the budget's learning, holding or
# adhoc), tab-separated: the time, the phase ("-" for a policy without
# phases), for adhoc the kind of its reason with the figures left out
# ("N arrivals over the last N s"; "-" otherwise), and the reason.
phases_of() {
	python3 - "$1" <<'PY'
import json, os, re, sys
d = sys.argv[1]
for f in sorted(os.listdir(d) if os.path.isdir(d) else [], key=lambda f: float(f[:-5])):
    try:
        m = [m for m in json.load(open(os.path.join(d, f)))["models"] if m["model"] == "simple"]
    except (ValueError, KeyError):
        continue
    r = m[0]["rule"] if m else {}
    phase, why = r.get("phase") or "-", r.get("phase_reason") or ""
    kind = "-"
    if phase == "adhoc":
        kind = re.sub(r"\([^()]*\)|\([^()]*\([^()]*\)[^()]*\)", "", why)
        kind = re.sub(r"[0-9][0-9.,]*", "N", kind).split(":")[0].split(";")[0].split(",")[0].strip() or "-"
    print(f[:-5], phase, kind, why.replace("\t", " "), sep="\t")
PY
}
