#!/usr/bin/env bash
# Memory bound of the proxy: the resident set size of
# `ratebatch serve` at rest, with IDLE idle keep-alive client connections
# open, and at its peak while INFLIGHT requests are in flight at once (sent
# together on their own connections while the idle ones stay open).
#
# Two rows, each against its own emulator and proxy:
#   batching     the requests queue in the proxy (model simple, policy adhoc)
#   passthrough  the requests are forwarded one by one (model simple_nobatch)
# The emulator's batches are slowed (--tau-scale $TAU_SCALE) so that the
# requests really are in flight together.
#
# Usage: scripts/bench-memory.sh [--out DIR]
# Environment: BIN (ratebatch binary; default: built from this tree),
#   IDLE [10000] INFLIGHT [1000] TAU_SCALE [20]
# Needs: Go, a file-descriptor limit above IDLE+INFLIGHT (raised with ulimit
# when the hard limit allows). Loopback only; stops what it started on exit.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=""
while (($#)); do
	case $1 in
	--out) out=${2:?--out needs a directory}; shift ;;
	*) echo "usage: $0 [--out DIR]" >&2; exit 2 ;;
	esac
	shift
done
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/ratebatch-mem.XXXXXX")}
mkdir -p "$out"
IDLE=${IDLE:-10000}
INFLIGHT=${INFLIGHT:-1000}
TAU_SCALE=${TAU_SCALE:-20}

need=$((IDLE + INFLIGHT + 1024))
if (($(ulimit -n) < need)); then
	ulimit -n "$need" 2>/dev/null || { echo "bench-memory: need $need file descriptors, have $(ulimit -n)" >&2; exit 1; }
fi

cd "$repo"
if [[ -z ${BIN:-} ]]; then
	BIN=$out/ratebatch
	go build -o "$BIN" ./cmd/ratebatch
fi
go build -o "$out/connhold" ./lab/connhold

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# free_port prints a loopback port nobody listens on.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_up() { # url
	for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench-memory: $1 did not come up" >&2; return 1
}

measure() { # name model policy shape
	local name=$1 model=$2 policy=$3 shape=$4
	local ep pp ap
	ep=$(free_port); pp=$(free_port); ap=$(free_port)
	"$BIN" emulate --listen "127.0.0.1:$ep" --metrics-listen "" --tau-scale "$TAU_SCALE" >"$out/$name-emulator.log" 2>&1 &
	pids+=($!)
	wait_up "http://127.0.0.1:$ep/v2/health/ready"
	"$BIN" serve --upstream "http://127.0.0.1:$ep" --listen "127.0.0.1:$pp" --admin-listen "127.0.0.1:$ap" \
		--policy "$policy" --log-level warn >"$out/$name-proxy.log" 2>&1 &
	local proxy=$!
	pids+=("$proxy")
	wait_up "http://127.0.0.1:$ap/readyz"
	"$out/connhold" -addr "127.0.0.1:$pp" -pid "$proxy" -idle "$IDLE" -inflight "$INFLIGHT" \
		-path "/v2/models/$model/infer" -body "$(body "$shape")" >"$out/$name.json"
	echo "$name $(cat "$out/$name.json")"
}

# body SHAPE: one request of the "simple" models (INT32 inputs of 16 values).
body() {
	local d='[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]'
	printf '{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":%s,"data":%s},{"name":"INPUT1","datatype":"INT32","shape":%s,"data":%s}]}' "$1" "$d" "$1" "$d"
}

measure batching simple adhoc '[1,16]'
measure passthrough simple_nobatch adhoc '[16]'
{
	echo "| case | rest RSS | with $IDLE idle conns | per idle conn | peak with $INFLIGHT in flight | per in-flight request |"
	echo "|---|---|---|---|---|---|"
	for name in batching passthrough; do
		jq -r --arg n "$name" '"| \($n) | \(.rest_kib/1024|floor) MiB | \(.idle_kib/1024|floor) MiB | \(.per_idle_conn_kib*10|round/10) KiB | \(.in_flight_peak_kib/1024|floor) MiB | \(.per_in_flight_request_kib*10|round/10) KiB |"' "$out/$name.json"
	done
} | tee "$out/RESULTS.md"
echo "bench-memory: results in $out" >&2
