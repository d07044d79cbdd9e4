#!/usr/bin/env bash
# budget-check.sh: the budget policy at 1.10x in simulation against the
# exact constrained optimum (ratebatch smdp --latency-budget) and against
# ad-hoc on the same arrivals, per preset and load; then paper300 as
# published and loaded: ad-hoc, batchmonitor, budget 1.10x and budget at
# batchmonitor's latency. Prints Markdown table rows (docs/SIMULATION.md,
# "The budget policy against the constrained optimum").
#
#   scripts/budget-check.sh [preset...]     (default: the three energy presets)
#   RB=bin/ratebatch scripts/budget-check.sh googlenet-p4
#   PART=grid or PART=trace runs one half.
set -euo pipefail
RB=${RB:-bin/ratebatch}
PART=${PART:-all}
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(googlenet-p4 resnet50-v100 resnet50-p4)
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
if [ "$PART" != trace ]; then
echo "| preset | rho | requests | ad-hoc sim ms | budget ms (exact) | budget sim ms | vs 1.10 x ad-hoc sim | vs exact budget | optimum req/J | sim req/J | gap |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for p in "${presets[@]}"; do
  bmax=$("$RB" smdp --preset "$p" --rho 0.5 --json | field bmax)
  smax=$(( bmax * 2 > 200 ? bmax * 2 : 200 ))
  for r in 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9; do
    n=$(python3 -c "print(int(200000*max(1, 0.5/(1-$r))))")
    s=$("$RB" sim --preset "$p" --rho "$r" --policy budget --latency-budget 1.10x --requests "$n" --json)
    a=$("$RB" sim --preset "$p" --rho "$r" --policy adhoc --requests "$n" --json)
    o=$("$RB" smdp --preset "$p" --rho "$r" --latency-budget 1.10x --smax "$smax" --json)
    python3 - "$p" "$r" "$n" "$s" "$a" "$o" <<'PY'
import json, sys
p, r, n = sys.argv[1:4]
s, a, o = (json.loads(x) for x in sys.argv[4:7])
base = 1.1 * a['mean_latency_ms']
print('| %s | %s | %s | %.4g | %.4g | %.4g | %+.2f%% | %+.2f%% | %.4g | %.4g | %+.2f%% |' % (
    p, r, n, a['mean_latency_ms'], o['budget_ms'], s['mean_latency_ms'],
    100 * (s['mean_latency_ms'] / base - 1), 100 * (s['mean_latency_ms'] / o['budget_ms'] - 1),
    o['requests_per_joule'], s['requests_per_joule'], 100 * (s['requests_per_joule'] / o['requests_per_joule'] - 1)))
PY
  done
done
echo
fi
[ "$PART" != grid ] || exit 0
echo "| trace | preset | policy | mean ms | x ad-hoc | p99 ms | req/J | vs ad-hoc |"
echo "|---|---|---|---|---|---|---|---|"
for p in "${presets[@]}"; do
  mu=$("$RB" smdp --preset "$p" --rho 0.5 --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['rate_rps']/0.5)")
  for scale in 1 $(python3 -c "print(0.8*$mu/240)"); do
    run() { "$RB" sim --preset "$p" --trace paper300 --trace-scale "$scale" "$@" --json; }
    a=$(run --policy adhoc); b=$(run --policy batchmonitor); g=$(run --policy budget --latency-budget 1.10x)
    f=$(python3 -c "import json,sys; print('%.4fx' % max(1.0, json.loads(sys.argv[1])['mean_latency_ms']/json.loads(sys.argv[2])['mean_latency_ms']))" "$b" "$a")
    m=$(run --policy budget --latency-budget "$f")
    python3 - "$p" "$scale" "$f" "$a" "$b" "$g" "$m" <<'PY'
import json, sys
p, scale, f = sys.argv[1:4]
rows = [json.loads(x) for x in sys.argv[4:8]]
names = ['adhoc', 'batchmonitor', 'budget 1.10x', 'budget ' + f]
base = rows[0]
for name, d in zip(names, rows):
    print('| paper300 x%.3g | %s | %s | %.4g | %.2f | %.4g | %.2f | %+.2f%% |' % (float(scale), p, name, d['mean_latency_ms'],
          d['mean_latency_ms'] / base['mean_latency_ms'], d['p99_latency_ms'], d['requests_per_joule'],
          100 * (d['requests_per_joule'] / base['requests_per_joule'] - 1)))
PY
  done
done
