#!/usr/bin/env bash
# gRPC floods against the memory budget (docs/results/memory-under-attack.md,
# "gRPC floods"): `ratebatch serve` with its gRPC door and --limits-memory
# $MEMORY, in front of the emulator (HTTP: the batched model simple) and of
# a gRPC upstream that takes every relayed call and never reads or answers
# it (lab/grpcflood -stub); then lab/grpcflood's floods, one after the
# other, each against a fresh proxy, each printing its JSON line:
#
#   inputs-1024   64 callers, ModelInfer of 1024 one-byte inputs, back to back
#   inputs-40000  the same with 40,000 inputs (past the 1024 both doors allow)
#   streams-64k   8 connections x 1024 ModelStreamInfer streams, a 64 KiB
#                 message each, held by the upstream
#   streams-1m    2 connections x 512 streams, a 1 MiB message each
#
# Usage: scripts/grpcflood.sh   Environment: BIN (ratebatch binary; default
#   built from this tree), MEMORY [256MiB], DURATION [10s], CASES (names
#   above, space-separated; default all), SERVE_FLAGS (more serve flags).
# Loopback only; stops what it started on exit.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
MEMORY=${MEMORY:-256MiB}
DURATION=${DURATION:-10s}
CASES=${CASES:-inputs-1024 inputs-40000 streams-64k streams-1m}
out=$(mktemp -d "${TMPDIR:-/tmp}/ratebatch-grpcflood.XXXXXX")
cd "$repo"
if [[ -z ${BIN:-} ]]; then
	BIN=$out/ratebatch
	go build -o "$BIN" ./cmd/ratebatch
fi
go build -o "$out/grpcflood" ./lab/grpcflood
if (($(ulimit -n) < 8192)); then ulimit -n 8192 2>/dev/null || true; fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() {
	for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "grpcflood: $1 did not come up" >&2; return 1
}

ep=$(free_port); sp=$(free_port)
"$BIN" emulate --listen "127.0.0.1:$ep" --metrics-listen "" >"$out/emulator.log" 2>&1 &
pids+=($!)
"$out/grpcflood" -stub "127.0.0.1:$sp" >"$out/stub.log" 2>&1 &
pids+=($!)
wait_up "http://127.0.0.1:$ep/v2/health/ready"

# flood NAME FLAGS...: a fresh proxy, the flood, the proxy's refusals.
flood() {
	local name=$1 pp ap gp proxy
	shift
	pp=$(free_port); ap=$(free_port); gp=$(free_port)
	"$BIN" serve --upstream "http://127.0.0.1:$ep" --listen "127.0.0.1:$pp" --admin-listen "127.0.0.1:$ap" \
		--grpc-listen "127.0.0.1:$gp" --upstream-grpc "127.0.0.1:$sp" --limits-memory "$MEMORY" \
		--policy adhoc --log-level warn ${SERVE_FLAGS:-} >"$out/proxy-$name.log" 2>&1 &
	proxy=$!
	pids+=("$proxy")
	wait_up "http://127.0.0.1:$ap/readyz"
	printf '%s ' "$name"
	"$out/grpcflood" -addr "127.0.0.1:$gp" -pid "$proxy" -duration "$DURATION" "$@" | tr -d '\n '
	echo
	curl -fsS "http://127.0.0.1:$ap/metrics" | grep -E '^ratebatch_(memory_held_peak_bytes|front_rejected_total|panics_total)|^go_memstats_heap_inuse_bytes|^go_goroutines' | sed "s/^/$name   /" || true
	kill "$proxy" 2>/dev/null || true
	wait "$proxy" 2>/dev/null || true
}

for c in $CASES; do
	case $c in
	inputs-1024) flood "$c" -mode inputs -callers 64 -inputs 1024 ;;
	inputs-40000) flood "$c" -mode inputs -callers 64 -inputs 40000 ;;
	streams-64k) flood "$c" -mode streams -conns 8 -streams 1024 -msg 65536 ;;
	streams-1m) flood "$c" -mode streams -conns 2 -streams 512 -msg 1048576 ;;
	streams-1) flood "$c" -mode streams -conns 8 -streams 1024 -msg 1 ;;
	*) echo "grpcflood: unknown case $c" >&2; exit 2 ;;
	esac
done
