#!/usr/bin/env bash
# whatif-check.sh: does the what-if predict what a setting lives? On the
# emulator, per traffic shape and round:
#
#   1. run load A through the proxy (the setting in force: serve's default,
#      budget 1.10x), then ask GET /whatif for exactly A's minutes: its
#      replay of the setting in force against what A lived (the proxy's
#      own latency, arrival to answer written, and the meter's requests per
#      joule over the same minutes);
#   2. PUT the setting it recommends (the most requests per joule whose
#      p99 stays within P99_FACTOR, default 1.5, times the setting in
#      force's), run load B with the same arrivals (same seed), ask again
#      for B's minutes: the first what-if's prediction for that setting
#      against what B lived;
#   3. put serve's default back for the next shape (budget, its options
#      unset: PUT /policy keeps what an earlier PUT set for the model).
#
#   scripts/whatif-check.sh [ROUNDS]        (default 2)
#
# Shapes (SHAPES): poisson (RHO, default 0.5, of the emulated GPU's
# capacity at B_max 8) and mmpp (the built-in two-state load scaled to
# 0.7 and 0.1 of it). Each load lasts DURATION (default 60s). The emulator
# (PRESET googlenet-p4, TAU_SCALE 4: batches of milliseconds, above the
# host's noise; IDLE_WATTS 20; REALISM exact) counts the energy; the proxy
# reads it as Triton's metrics (power.source triton). The proxy first idles
# (the meter learns the idle power) and warms up (the line and the energy
# line). Prints one Markdown row per shape and round: predicted / lived
# for mean, p99 and requests per joule, for the setting in force (A), for
# the recommended one (A's prediction, B's life) and, apart, B's own
# what-if of the recommended setting over B: the replay's error on B's
# minutes, which tells the model's error from the host's, whose stalls in
# B's minutes A could not foresee. The host's load average is printed
# with each row: on a shared machine it moves the lived figures most.
set -euo pipefail
cd "$(dirname "$0")/.."
RB=${RB:-bin/ratebatch}
ROUNDS=${1:-2}
SHAPES=${SHAPES:-poisson mmpp}
RHO=${RHO:-0.5}
DURATION=${DURATION:-60s}
PRESET=${PRESET:-googlenet-p4}
TAU_SCALE=${TAU_SCALE:-4}
IDLE_WATTS=${IDLE_WATTS:-20}
REALISM=${REALISM:-exact}
P99_FACTOR=${P99_FACTOR:-1.5}
PORT=${PORT:-9600}
TOKEN=whatif-check
ADMIN="http://127.0.0.1:$((PORT + 12))"

work=$(mktemp -d "${TMPDIR:-/tmp}/whatif-check.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n ${KEEP:-} ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

"$RB" emulate --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$((PORT + 2))" --preset "$PRESET" \
	--tau-scale "$TAU_SCALE" --idle-watts "$IDLE_WATTS" --realism "$REALISM" >"$work/emulator.log" 2>&1 &
pids+=($!)
"$RB" serve --upstream "http://127.0.0.1:$PORT" --listen "127.0.0.1:$((PORT + 10))" --admin-listen "127.0.0.1:$((PORT + 12))" \
	--power-source triton --power-metrics-url "http://127.0.0.1:$((PORT + 2))/metrics" --admin-token "$TOKEN" \
	--log-level warn >"$work/proxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	curl -fsS "$ADMIN/readyz" >/dev/null 2>&1 && break
	sleep 0.2
done

# The simple model's capacity at B_max 8 on the emulated line, req/s.
mu=$(python3 -c "
a, t0 = {'googlenet-p4': (0.3051, 1.052)}.get('$PRESET', (0.3051, 1.052))
print(1000 * 8 / ($TAU_SCALE * (a * 8 + t0)))")
rate=$(python3 -c "print(round($RHO * $mu, 1))")
mmpp_scale=$(python3 -c "print(0.7 * $mu / 1400)")

idle_known() {
	curl -fsS "$ADMIN/status" | python3 -c "
import json, sys
gpus = json.load(sys.stdin)['energy']['gpus']
sys.exit(0 if any(g.get('idle_power_watts') is not None for g in gpus) else 1)"
}
for _ in $(seq 100); do idle_known && break; sleep 0.2; done
"$RB" load --target "http://127.0.0.1:$((PORT + 10))" --model simple --binary --rate "$rate" --duration 15s --seed 99 >/dev/null

# load SHAPE SEED: one load of the shape; prints its start (epoch s).
load() {
	local args=(--target "http://127.0.0.1:$((PORT + 10))" --model simple --binary --seed "$2" --json)
	if [[ $1 == poisson ]]; then
		args+=(--rate "$rate" --duration "$DURATION")
	else
		args+=(--trace "$1" --trace-scale "$mmpp_scale" --duration "$DURATION")
	fi
	sleep 1.2 # a sample of the meter between the loads
	date +%s.%N
	"$RB" load "${args[@]}" >"$work/load.json"
	sleep 1.2 # the last second's sample
}

# whatif START [SECONDS [P99_MS]]: the what-if, as JSON, of the window
# from a second before START (the pause before each load: no call of the
# load is left out of it) to now; given SECONDS, of that long a window,
# asked once it has passed, so that two windows hold as much idle time
# after their loads, which counts in requests per joule.
whatif() {
	local secs=${2:-}
	if [[ -z $secs ]]; then
		secs=$(python3 -c "import time; print(time.time() - $1 + 1)")
	fi
	python3 -c "import time; time.sleep(max(0, $1 - 1 + $secs - time.time()))"
	local args=(--admin "$ADMIN" --model simple --minutes "$(python3 -c "print($secs / 60)")" --json)
	[[ -n ${3:-} ]] && args+=(--p99-ms "$3")
	"$RB" whatif "${args[@]}"
}

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); rate $rate req/s (rho $RHO of $mu), mmpp x$mmpp_scale, $DURATION a load"
echo
echo "| round | shape | load | in force | mean | p99 | req/J | recommended | mean | p99 | req/J | B's own: mean | p99 | req/J |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
	for shape in $SHAPES; do
		seed=$((r * 10))
		start=$(load "$shape" "$seed" | head -1)
		# The p99 the recommendation keeps within: P99_FACTOR times the
		# replay of the setting in force; then the what-if of A that
		# recommends within it, its window from a second before A to now.
		a=$work/$r-$shape-a.json b=$work/$r-$shape-b.json
		whatif "$start" >"$work/$r-$shape-a0.json"
		p99=$(python3 -c "
import json; d = json.load(open('$work/$r-$shape-a0.json'))
print(round($P99_FACTOR * d['points'][0]['p99_ms'], 3))")
		secs=$(python3 -c "import time; print(time.time() - $start + 1)")
		whatif "$start" "$secs" "$p99" >"$a"
		body=$(python3 -c "
import json; d = json.load(open('$a')); i = d['recommended']
p = d['points'][i] if i >= 0 else d['points'][0]
b = dict(p.get('options') or {}); b.update(model='simple', policy=p['policy']); print(json.dumps(b))")
		curl -fsS -X PUT -H "Authorization: Bearer $TOKEN" -d "$body" "$ADMIN/policy" >/dev/null
		start=$(load "$shape" "$seed" | head -1)
		whatif "$start" "$secs" >"$b"
		curl -fsS -X PUT -H "Authorization: Bearer $TOKEN" \
			-d '{"model":"simple","policy":"budget","latency_budget":"","tail_budget":"","slo_p99":"0s"}' "$ADMIN/policy" >/dev/null
		python3 - "$a" "$b" "$r" "$shape" "$(cut -d' ' -f1 /proc/loadavg)" <<'EOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
def ratios(pred, lived):
    out = []
    for k, l in (('mean_ms', 'mean_ms'), ('p99_ms', 'p99_ms'), ('requests_per_joule', 'requests_per_joule')):
        p, v = pred.get(k), lived.get(l)
        out.append('-' if p is None or not v else '%.3f (%.4g / %.4g)' % (p / v, p, v))
    return out
cur = a['points'][0]
i = a['recommended']
rec = a['points'][i] if i >= 0 else cur
own = b['check_vs_lived']
print('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (sys.argv[3], sys.argv[4], sys.argv[5], cur['label'],
      *ratios(cur, a['lived']), rec['label'] + (' (in force)' if rec.get('current') else ''), *ratios(rec, b['lived']),
      *('-' if own.get(k) is None else '%.3f' % own[k] for k in ('mean', 'p99', 'requests_per_joule'))))
EOF
	done
done
