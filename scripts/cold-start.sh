#!/usr/bin/env bash
# cold-start.sh: the default policy against ad-hoc from a cold start, on a
# real Triton (PyTriton): does the plan hold its budgets in the first
# seconds, before the live trim has anything to correct?
#
# Starts one PyTriton (tests/triton/server.py from the venv RATEBATCH_VENV;
# model simple, B_max $BMAX, each execution sleeping 4 + 0.5 b ms, Triton's
# batcher off). Then per rate in RATES, REPS times, each policy in turn
# (the order swapped every other repetition): a new `ratebatch serve`
# with that policy, which has learnt nothing, one request to teach it the
# model (PyTriton's repository index is empty), then Poisson load from
# `ratebatch load --binary` for DUR with no warm-up; the proxy is stopped
# after. Prints one Markdown row per rate: each policy's mean and p99 as
# the client saw them (means over the repetitions), the default's ratios
# to ad-hoc's, and the GPU time per request from Triton's statistics
# (compute_infer over the inferences counted in the run).
#
#   RATEBATCH_VENV=/work/venv scripts/cold-start.sh
#   RATES="650" REPS=3 DUR=20s scripts/cold-start.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RB=${RB:-bin/ratebatch}
VENV=${RATEBATCH_VENV:-.venv}
RATES=${RATES:-"200 650"}
REPS=${REPS:-2}
DUR=${DUR:-20s}
export PYTRITON_BMAX=${BMAX:-16}
# shellcheck source=scripts/upstream.sh
. scripts/upstream.sh # $work, pids, the cleanup on exit, start_pytriton, await_simple
P=$((20000 + RANDOM % 20000))
start_pytriton "$VENV" $P 4 0.5

gpu_ns() { # compute_infer ns summed over simple's batch_stats, and its inference count
	curl -sf "http://127.0.0.1:$P/v2/models/simple/stats" | "$VENV/bin/python" -c '
import json, sys
s = json.load(sys.stdin)["model_stats"][0]
print(sum(int(b["compute_infer"]["ns"]) for b in s.get("batch_stats", [])), int(s.get("inference_count", 0)))'
}

# run POLICY RATE PORT: one cold proxy, one run; prints mean p99 gpu_ms.
run() {
	"$RB" serve --upstream "http://127.0.0.1:$P" --listen "127.0.0.1:$3" --admin-listen "127.0.0.1:$(($3 + 2))" \
		--policy "$1" --power-source none --log-level warn >"$work/serve-$1.log" 2>&1 &
	local pid=$!
	await_simple "127.0.0.1:$3" "http://127.0.0.1:$(($3 + 2))"
	local ns0 n0 ns1 n1
	read -r ns0 n0 <<<"$(gpu_ns)"
	"$RB" load --target "http://127.0.0.1:$3" --model simple --binary --rate "$2" --duration "$DUR" --json >"$work/load.json"
	read -r ns1 n1 <<<"$(gpu_ns)"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
ns0, n0, ns1, n1 = map(int, sys.argv[2:6])
print("%.3f %.3f %.4f" % (s["mean_latency_ms"], s["p99_latency_ms"], (ns1 - ns0) / max(n1 - n0, 1) / 1e6))' \
		"$work/load.json" "$ns0" "$n0" "$ns1" "$n1"
}

echo "PyTriton, simple, B_max $PYTRITON_BMAX, tau(b) = 4 + 0.5 b ms; a new proxy per run, $DUR of Poisson load, no warm-up; $REPS repetitions, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| rate req/s | ad-hoc mean ms | ad-hoc p99 ms | default mean ms | default p99 ms | mean x ad-hoc | p99 x ad-hoc | GPU ms/request ad-hoc | default | GPU x ad-hoc |"
echo "|---|---|---|---|---|---|---|---|---|---|"
port=$((P + 10))
for rate in $RATES; do
	: >"$work/rows"
	for rep in $(seq "$REPS"); do
		order="adhoc budget"
		[ $((rep % 2)) -eq 0 ] && order="budget adhoc"
		for pol in $order; do
			port=$((port + 4))
			echo "$pol $(run "$pol" "$rate" "$port")" >>"$work/rows"
		done
	done
	python3 - "$rate" "$work/rows" <<'PY'
import sys
rate, f = sys.argv[1:3]
rows = [l.split() for l in open(f)]
def agg(p):
    rs = [[float(x) for x in r[1:]] for r in rows if r[0] == p]
    return [sum(c) / len(rs) for c in zip(*rs)]
a, b = agg('adhoc'), agg('budget')
print('| %s | %.2f | %.2f | %.2f | %.2f | %.3fx | %.3fx | %.3f | %.3f | %.2fx |' % (
    rate, a[0], a[1], b[0], b[1], b[0] / a[0], b[1] / a[1], a[2], b[2], b[2] / a[2]), flush=True)
PY
done
