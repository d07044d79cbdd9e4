#!/usr/bin/env bash
# p99-ladder.sh: the p99 against the rate, for ad-hoc and the default (and
# more arms) in front of one emulator, each rate of a ladder run PASSES
# times per arm in alternating turns, and the capacity under a p99 bound
# read off the ladder.
#
#   scripts/p99-ladder.sh                       (RATES "400 600 800 1000 1200", PASSES 4, BOUND 15)
#   RATES="300 600 900" PASSES=6 BOUND=12 ARMS="slo12:--policy-slo-p99 12ms" scripts/p99-ladder.sh
#
# A search for the highest rate under a bound (capacity-p99.sh) decides
# each step on one run. Where the bound lies near the p99 a shared host
# gives any arm at light load, one stall in a run decides the step, and
# the search's answer moves by a factor of two between searches. The
# ladder instead runs every arm at every rate, PASSES runs of DUR each,
# the arms in turns whose order alternates, every proxy fresh at the
# start and kept for the ladder (each step a new rate, as in a search),
# and reads per rate and arm the median of the runs' p99 and the p99 of
# all their calls pooled. The capacity it prints per arm is the highest
# rung whose median p99 stays under BOUND ms with every rung below it
# under too, and the pooled p99s side by side at each rung say by how
# much an arm lies over or under another's.
#
# The emulator: REALISM (exact), PRESET (googlenet-p4), model simple; or,
# UPSTREAM=pytriton, a real Triton (tests/triton/server.py from the venv
# RATEBATCH_VENV: B_max PYTRITON_BMAX (16), each execution sleeping
# TAU0_MS + ALPHA_MS b ms (4 + 0.5 b), Triton's dynamic batcher at delay
# 0, as capacity-p99.sh starts it):
#
#   UPSTREAM=pytriton RATEBATCH_VENV=.venv RATES="640 720 800" PASSES=3 BOUND=80 scripts/p99-ladder.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RB=${RB:-bin/ratebatch}
RATES=${RATES:-400 600 800 1000 1200}
PASSES=${PASSES:-4}
DUR=${DUR:-10s}
BOUND=${BOUND:-15}
P=${PORT:-$((20000 + RANDOM % 20000))}
# shellcheck source=scripts/upstream.sh
source scripts/upstream.sh

start_upstream p99-ladder.sh $P

arms=("adhoc:--policy adhoc" "default:")
IFS=';' read -ra more <<<"${ARMS:-}"
for a in "${more[@]}"; do [ -n "$a" ] && arms+=("$a"); done
names=()
for i in "${!arms[@]}"; do
	a=${arms[$i]}
	# shellcheck disable=SC2086 # the flags are words
	"$RB" serve --upstream http://127.0.0.1:$P --listen 127.0.0.1:$((P + 10 + 10 * i)) \
		--admin-listen 127.0.0.1:$((P + 12 + 10 * i)) --power-source none --log-level warn ${a#*:} >"$work/serve$i.log" 2>&1 &
	pids+=($!)
	await_simple 127.0.0.1:$((P + 10 + 10 * i)) http://127.0.0.1:$((P + 12 + 10 * i))
	names+=("${a%%:*}")
done

echo "# p99 against the rate, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "${what^}; \`ratebatch load --binary --duration $DUR\`, $PASSES passes per rate and arm in alternating turns."
echo
n=${#arms[@]}
seed=0
for rate in $RATES; do
	for pass in $(seq "$PASSES"); do
		seed=$((seed + 1))
		for k in $(seq 0 $((n - 1))); do
			i=$(((k + pass) % n))
			"$RB" load --target http://127.0.0.1:$((P + 10 + 10 * i)) --model simple --binary --rate "$rate" \
				--duration "$DUR" --seed "$seed" --json --csv "$work/lat-${names[$i]}-$rate-$pass.csv" >"$work/run-${names[$i]}-$rate-$pass.json"
		done
	done
done
python3 - "$work" "$BOUND" "$PASSES" "$RATES" "${names[@]}" <<'EOF'
import csv, json, math, statistics, sys
work, bound, passes, rates, names = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), [float(r) for r in sys.argv[4].split()], sys.argv[5:]
def p99(xs):
    xs = sorted(xs)
    return xs[max(math.ceil(0.99 * len(xs)) - 1, 0)]
print('| req/s | ' + ' | '.join('%s p99 ms, median (runs) | %s pooled' % (n, n) for n in names) + ' | ' +
      ' | '.join('%s pooled vs %s' % (n, names[0]) for n in names[1:]) + ' |')
print('|---:|' + '---|---:|' * len(names) + '---:|' * (len(names) - 1))
cap = {n: 0.0 for n in names}
open_ = {n: True for n in names}
curve = {n: [] for n in names}
for rate in rates:
    cells, pooled = [], {}
    for n in names:
        runs, calls = [], []
        for p in range(1, passes + 1):
            r = '%g' % rate
            runs.append(json.load(open('%s/run-%s-%s-%d.json' % (work, n, r, p)))['p99_latency_ms'])
            with open('%s/lat-%s-%s-%d.csv' % (work, n, r, p)) as f:
                for row in csv.DictReader(f):  # a failed call counts as later than any bound
                    calls.append(float(row['latency_ms']) if not row['error'] else math.inf)
        med = statistics.median(runs)
        pooled[n] = p99(calls)
        curve[n].append((rate, pooled[n]))
        if open_[n] and med <= bound:
            cap[n] = rate
        else:
            open_[n] = False
        cells.append('%.2f (%s)' % (med, ' '.join('%.1f' % x for x in runs)))
        cells.append('%.2f' % pooled[n])
    ratios = ['%.2fx' % (pooled[n] / pooled[names[0]]) for n in names[1:]]
    print('| %g | %s | %s |' % (rate, ' | '.join(cells), ' | '.join(ratios)))
print()
print('Capacity under a median p99 of %g ms (the highest rung under it, every rung below under too): ' % bound +
      ', '.join('%s %g req/s' % (n, cap[n]) for n in names) + '.')
# Between the last rung whose pooled p99 is under the bound (every one
# below it under too) and the next, the rate where the line between their
# pooled p99s crosses the bound.
def crossing(c):
    for (r0, q0), (r1, q1) in zip(c, c[1:]):
        if q0 > bound:
            return None
        if q1 > bound:
            return r0 + (r1 - r0) * (bound - q0) / (q1 - q0) if math.isfinite(q1) else r0
    return None
x = {n: crossing(curve[n]) for n in names}
if all(v is not None for v in x.values()):
    print('Pooled p99 crossing %g ms, between rungs: ' % bound + ', '.join(
        '%s %.0f req/s%s' % (n, x[n], '' if n == names[0] else ' (%.2fx %s)' % (x[n] / x[names[0]], names[0])) for n in names) + '.')
EOF
