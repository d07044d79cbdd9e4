#!/usr/bin/env bash
# vs-triton.sh: Triton's own dynamic batcher against ratebatch's default in
# front of it, on a real Triton (PyTriton), as a Triton user would compare
# them: the same clients straight to Triton, and through `ratebatch serve`.
#
# Starts two PyTritons (tests/triton/server.py from the venv RATEBATCH_VENV;
# model simple, B_max $BMAX, each execution sleeping TAU0_MS + ALPHA_MS b ms,
# one instance), both with Triton's dynamic batcher: one with
# max_queue_delay_microseconds 0 (Triton's default), one with a tuned delay
# (TUNED_US), and one `ratebatch serve` with the default policy in front of
# the first; ADHOC=1 adds a `ratebatch serve --policy adhoc` in front of it
# too, which tells the proxy's hop from the policy; ARMS="NAME:FLAGS;..."
# (as scripts/p99-ladder.sh takes them) adds a `ratebatch serve FLAGS` in
# front of it per arm, named ratebatch-NAME (ARMS="floor-off:--policy-capacity-floor off":
# the default without its capacity floor; NAME@BINARY:FLAGS runs another
# build, as scripts/policy-ab.sh takes it: "old@/tmp/rb-old:"). Then per
# load, its arms
# in an order that rotates from load to load, every proxy fresh for each
# load (started before it, stopped after it, as a user's benchmark of a
# new proxy reads it):
#
#   poisson:R   open Poisson arrivals at R req/s for DUR (`ratebatch load`,
#               after a WARMUP of the same rate on the same connections)
#   cN          N synchronous clients (perf_analyzer --concurrency-range N,
#               over PROTOCOL, http or grpc)
#
# and prints one Markdown table: mean and p99 latency as the client saw
# them, and the GPU time per request, from Triton's own statistics
# (GET /v2/models/simple/stats: the sum over batch_stats of compute_infer
# ns, over the requests counted, both as deltas across the measurement),
# each arm also as a ratio of Triton's batcher with delay 0; then, for
# each proxy under a Poisson load, the phases /status showed through the
# run in the order they first came (sampled every second: learning,
# holding, adhoc; PHASE_LOG=FILE appends each sample's phase and why to
# FILE). One pass, on whatever machine it runs: read the ratios, and run
# it again to see their spread.
#
#   RATEBATCH_VENV=/work/venv scripts/vs-triton.sh
#   LOADS="poisson:200 c4" DUR=10s TUNED_US=1000 scripts/vs-triton.sh
set -euo pipefail
RB=${RB:-bin/ratebatch}
PA=${PA:-tests/triton/perf_analyzer}
VENV=${RATEBATCH_VENV:-.venv}
LOADS=${LOADS:-"poisson:200 poisson:650 c1 c4 c16"}
DUR=${DUR:-20s}
WARMUP=${WARMUP:-3s}
BMAX=${BMAX:-16}
TAU0_MS=${TAU0_MS:-4}
ALPHA_MS=${ALPHA_MS:-0.5}
TUNED_US=${TUNED_US:-2000}
PROTOCOL=${PROTOCOL:-http}
INTERVAL_MS=${INTERVAL_MS:-5000}
# shellcheck source=scripts/upstream.sh
. "$(dirname "$0")/upstream.sh" # $work, pids, the cleanup on exit, start_pytriton, await_simple
P=$((20000 + RANDOM % 20000))

# The two Tritons, both with the dynamic batcher: HTTP PORT, gRPC PORT+1,
# metrics PORT+2 (start_pytriton).
PYTRITON_BMAX=$BMAX start_pytriton "$VENV" $P "$TAU0_MS" "$ALPHA_MS" --dynamic-batching on --max-queue-delay-us 0
PYTRITON_BMAX=$BMAX start_pytriton "$VENV" $((P + 20)) "$TAU0_MS" "$ALPHA_MS" --dynamic-batching on --max-queue-delay-us "$TUNED_US"

# proxy NAME[@BINARY] PORT FLAGS...: a `ratebatch serve` (of BINARY, else
# RB) in front of the delay-0 Triton, HTTP door PORT, gRPC PORT+1, admin
# PORT+2; returns once it serves.
proxy_pids=()
proxy() {
	local name=${1%%@*} port=$2 bin=$RB
	[[ $1 == *@* ]] && bin=${1#*@}
	shift 2
	"$bin" serve --upstream http://127.0.0.1:$P --upstream-grpc 127.0.0.1:$((P + 1)) --listen 127.0.0.1:$port \
		--grpc-listen 127.0.0.1:$((port + 1)) --admin-listen 127.0.0.1:$((port + 2)) --admin-token check \
		--power-source none --log-level warn "$@" >>"$work/serve-$name.log" 2>&1 &
	pids+=($!)
	proxy_pids+=($!)
	await_simple 127.0.0.1:$port http://127.0.0.1:$((port + 2))
}

# The arms: a name, the HTTP port the clients use (gRPC is the next), and
# the Triton whose statistics count its GPU time; the proxies' specs
# (NAME[@BINARY]:FLAGS, and their ports).
arms=("triton-delay-0 $P $P" "triton-delay-${TUNED_US}us $((P + 20)) $((P + 20))" "ratebatch-default $((P + 10)) $P")
specs=("default:" "$((P + 10))")
# ADHOC=1 is the first of the ARMS.
more=()
[ "${ADHOC:-}" = 1 ] && more+=("adhoc:--policy adhoc")
IFS=';' read -ra given <<<"${ARMS:-}"
more+=("${given[@]}")
for i in "${!more[@]}"; do
	a=${more[$i]}
	[ -n "$a" ] || continue
	name=${a%%:*}
	specs+=("$a" $((P + 30 + 10 * i)))
	arms+=("ratebatch-${name%%@*} $((P + 30 + 10 * i)) $P")
done
n=${#arms[@]}

# fresh_proxies: stops the proxies of the load before and starts every
# proxy arm afresh.
fresh_proxies() {
	local p j
	for p in "${proxy_pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	proxy_pids=()
	for ((j = 0; j < ${#specs[@]}; j += 2)); do
		# shellcheck disable=SC2086 # the flags are words
		proxy "${specs[$j]%%:*}" "${specs[$((j + 1))]}" ${specs[$j]#*:}
	done
}

# gpu_ns PORT: the sum of compute_infer ns over simple's batch_stats, and
# its inference count, on the Triton at PORT.
gpu_ns() {
	curl -sf "http://127.0.0.1:$1/v2/models/simple/stats" | "$VENV/bin/python" -c '
import json, sys
s = json.load(sys.stdin)["model_stats"][0]
print(sum(int(b["compute_infer"]["ns"]) for b in s.get("batch_stats", [])), int(s.get("inference_count", 0)))'
}

# measure LOAD PORT: runs LOAD against the door at PORT and prints its
# mean and p99 latency in ms.
measure() {
	case $1 in
	poisson:*)
		"$RB" load --target "http://127.0.0.1:$2" --model simple --binary --rate "${1#poisson:}" --duration "$DUR" \
			--warmup "$WARMUP" --json >"$work/load.json" || { echo nan nan; return 0; }
		"$VENV/bin/python" -c '
import json, sys
s = json.load(open(sys.argv[1]))
print("%.3f %.3f" % (s["mean_latency_ms"], s["p99_latency_ms"]))' "$work/load.json"
		;;
	c*)
		local u=127.0.0.1:$2
		[ "$PROTOCOL" = grpc ] && u=127.0.0.1:$(($2 + 1))
		"$PA" -m simple -u "$u" -i "$PROTOCOL" --concurrency-range "${1#c}" -p "$INTERVAL_MS" \
			--stability-percentage 999 --max-trials 3 -f "$work/pa.csv" >"$work/pa.log" 2>&1 ||
			{ tail -3 "$work/pa.log" >&2; echo nan nan; return 0; }
		# The mean is the log's "Client Average Batch Latency" line (this
		# perf_analyzer's CSV has no average column), the p99 the CSV's.
		"$VENV/bin/python" -c '
import csv, re, sys
row = next(csv.DictReader(open(sys.argv[1])))
mean = re.findall(r"throughput: [0-9.]+ infer/sec, latency ([0-9]+) usec", open(sys.argv[2]).read())[-1]
print("%.3f %.3f" % (int(mean) / 1000, int(row["p99 latency"]) / 1000))' "$work/pa.csv" "$work/pa.log"
		;;
	*)
		echo "vs-triton.sh: unknown load $1 (poisson:R or cN)" >&2
		exit 2
		;;
	esac
}

echo "# ratebatch's default against Triton's dynamic batcher, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "PyTriton (tests/triton/server.py): simple, B_max $BMAX, tau(b) = $TAU0_MS + $ALPHA_MS b ms, one instance;"
echo "Poisson: \`ratebatch load --binary\`, $DUR after $WARMUP of warm-up; closed loops: perf_analyzer -i $PROTOCOL."
echo
echo "| load | arm | mean ms | p99 ms | GPU ms/request | mean vs delay 0 | p99 vs delay 0 | GPU vs delay 0 |"
echo "|---|---|---|---|---|---|---|---|"
rot=0
phases=()
for load in $LOADS; do
	fresh_proxies
	lines=()
	for i in $(seq 0 $((n - 1))); do
		read -r name port stats <<<"${arms[$(((i + rot) % n))]}"
		read -r ns0 n0 <<<"$(gpu_ns "$stats")"
		watcher=
		if [[ $name == ratebatch-* && $load == poisson:* ]]; then
			watch_phases "http://127.0.0.1:$((port + 2))" "$work/samples" &
			watcher=$!
		fi
		read -r mean p99 <<<"$(measure "$load" "$port")"
		if [ -n "$watcher" ]; then
			kill "$watcher" 2>/dev/null || true
			wait "$watcher" 2>/dev/null || true
			phases_of "$work/samples" >"$work/phases"
			[ -n "${PHASE_LOG:-}" ] && awk -F'\t' -v tag="$load $name" '{ print tag, $2, $4 }' "$work/phases" >>"$PHASE_LOG"
			awk -F'\t' '$2 != "-"' "$work/phases" | grep -q . &&
				phases+=("$load $name: $(awk -F'\t' '!($2 in c) { order[++k] = $2 } { c[$2]++ } END { for (i = 1; i <= k; i++) printf "%s%s %d s", (i > 1 ? ", " : ""), order[i], c[order[i]] }' "$work/phases")")
		fi
		read -r ns1 n1 <<<"$(gpu_ns "$stats")"
		gpu=$(awk -v a="$ns0" -v b="$ns1" -v m="$n0" -v n="$n1" 'BEGIN { if (n > m) printf "%.3f", (b - a) / (n - m) / 1e6; else print "nan" }')
		lines[$(((i + rot) % n))]="$name $mean $p99 $gpu"
	done
	read -r _ bm bp bg <<<"${lines[0]}"
	for i in $(seq 0 $((n - 1))); do
		read -r name mean p99 gpu <<<"${lines[$i]}"
		awk -v l="$load" -v a="$name" -v m="$mean" -v p="$p99" -v g="$gpu" -v bm="$bm" -v bp="$bp" -v bg="$bg" \
			'BEGIN { printf "| %s | %s | %.3f | %.3f | %s | %.2fx | %.2fx | %s |\n", l, a, m, p, g, m / bm, p / bp, (bg + 0 > 0 && g != "nan") ? sprintf("%.2fx", g / bg) : "n/a" }'
	done
	rot=$((rot + 1))
done
if [ ${#phases[@]} -gt 0 ]; then
	echo
	echo "The phases /status showed each proxy in, sampled every second of the warm-up and the run:"
	echo
	for l in "${phases[@]}"; do echo "- $l"; done
fi
