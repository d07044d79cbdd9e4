#!/usr/bin/env bash
# Memory budget under large bodies (docs/RELIABILITY.md): starts
# the emulator (preset resnet50-v100: the "image" model takes 128 rows, so
# a 100-row, 60.2 MB request is valid) and `ratebatch serve` with
# --limits-memory $MEMORY on loopback, then runs scripts/memload.py: $BIG
# clients at once each posting one request of $ROWS image rows beside a
# stream of small requests at $RATE/s, after the same stream alone. Prints
# the driver's JSON (answers, the small stream's success and p99 alone and
# beside, the proxy's peak RSS).
#
# Usage: scripts/memload.sh   Environment: BIN (default: built from this
#   tree), MEMORY [512MiB] BIG [400] ROWS [100] RATE [50] DURATION [10]
#   RETRY_FOR [0]: seconds a refused large request keeps retrying after
#   its Retry-After (0: one attempt each); SMALL_DIRECT=1 sends the small
#   stream to the emulator itself, past the proxy (what the upstream alone
#   costs it); POLICY [adhoc]: the proxy's batching policy. Ad-hoc, so that
#   the small stream's tail is the memory path's: the default (budget) at
#   50 req/s now and then waits for a partner (a randomised wait of about
#   one request in a hundred, tens of milliseconds), which alone set the
#   stream's p99 in some runs and not in others (docs/RELIABILITY.md);
#   RUNS [1]: the whole run made RUNS times, each with a new emulator and
#   proxy (so each meets the load cold, as the first does), then the runs
#   summarised together (memload.py --pool: each run's ratio and the p99 of
#   all runs' small requests, alone and beside); BIG_NICE [0]: the large
#   clients' nice value (19: they take only the CPU the rest leaves, as
#   clients on other hosts would); ARMS: settings to run in turns and pool
#   apart (below)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
MEMORY=${MEMORY:-512MiB}
BIG=${BIG:-400}
ROWS=${ROWS:-100}
RATE=${RATE:-50}
DURATION=${DURATION:-10}
RETRY_FOR=${RETRY_FOR:-0}
out=$(mktemp -d "${TMPDIR:-/tmp}/ratebatch-memload.XXXXXX")
cd "$repo"
if [[ -z ${BIN:-} ]]; then
	BIN=$out/ratebatch
	go build -o "$BIN" ./cmd/ratebatch
fi
if (($(ulimit -n) < 4096)); then ulimit -n 4096 2>/dev/null || true; fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() {
	for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "memload: $1 did not come up" >&2; return 1
}
RUNS=${RUNS:-1}
# run DIR N: one emulator and one proxy, the driver against them, then both
# stopped; leaves result-N.json, raw-N.jsonl and metrics-N.txt in DIR.
run() {
	local dir=$1 n=$2 ep pp ap emu proxy
	mkdir -p "$dir"
	ep=$(free_port); pp=$(free_port); ap=$(free_port)
	"$BIN" emulate --preset resnet50-v100 --listen "127.0.0.1:$ep" --metrics-listen "" >"$dir/emulator-$n.log" 2>&1 &
	emu=$!
	pids+=("$emu")
	wait_up "http://127.0.0.1:$ep/v2/health/ready"
	"$BIN" serve --upstream "http://127.0.0.1:$ep" --listen "127.0.0.1:$pp" --admin-listen "127.0.0.1:$ap" \
		--limits-memory "$MEMORY" --policy "${POLICY:-adhoc}" --log-level warn ${SERVE_FLAGS:-} >"$dir/proxy-$n.log" 2>&1 &
	proxy=$!
	pids+=("$proxy")
	wait_up "http://127.0.0.1:$ap/readyz"
	python3 "$repo/scripts/memload.py" --addr "127.0.0.1:$pp" --pid "$proxy" --big "$BIG" --rows "$ROWS" \
		--rate "$RATE" --duration "$DURATION" --retry-for "$RETRY_FOR" --raw "$dir/raw-$n.jsonl" --big-nice "${BIG_NICE:-0}" \
		${SMALL_DIRECT:+--small-addr "127.0.0.1:$ep"} | tee "$dir/result-$n.json"
	curl -fsS "http://127.0.0.1:$ap/metrics" | grep -E '^ratebatch_(memory_|front_rejected_total|panics_total)' | tee "$dir/metrics-$n.txt" || true
	kill "$proxy" "$emu" 2>/dev/null || true
	wait "$proxy" "$emu" 2>/dev/null || true
}
# ARMS: settings run in turns, one run of each per round, each arm's runs
# pooled apart (e.g. ARMS="SMALL_DIRECT= SMALL_DIRECT=1",
# ARMS="BIG_NICE=0 BIG_NICE=19", or two builds of the proxy,
# ARMS="BIN=/tmp/rb-a BIN=/tmp/rb-b"): a comparison that the machine's
# load over the minutes reaches alike.
read -r -a arms <<<"${ARMS:-}"
((${#arms[@]})) || arms=("")
# armdir K: where arm K's runs go ($out itself when there is one arm).
armdir() { if ((${#arms[@]} == 1)); then echo "$out"; else echo "$out/arm-$1"; fi; }
for n in $(seq 1 "$RUNS"); do
	for k in "${!arms[@]}"; do
		dir=$(armdir "$k")
		((RUNS == 1 && ${#arms[@]} == 1)) || echo "memload: run $n of $RUNS${arms[k]:+, ${arms[k]}}" >&2
		# A subshell, so that the arm's setting stays in it; its own trap
		# stops its emulator and proxy if the driver fails.
		# shellcheck disable=SC2163 # the arm is NAME=VALUE
		(
			trap cleanup EXIT
			if [[ -n ${arms[k]} ]]; then export "${arms[k]}"; fi
			run "$dir" "$n"
		)
	done
done
if ((RUNS > 1 || ${#arms[@]} > 1)); then
	for k in "${!arms[@]}"; do
		dir=$(armdir "$k")
		echo "memload: the $RUNS runs${arms[k]:+ of ${arms[k]}} together:" >&2
		python3 "$repo/scripts/memload.py" --pool "$dir" | tee "$dir/pooled.json"
	done
fi
echo "memload: logs and results in $out" >&2
