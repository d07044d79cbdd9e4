#!/usr/bin/env bash
# budget-grid.sh: the budget policy live against ad-hoc, in the same run.
#
# For each emulator roughness, model and load it starts one emulator and
# one `ratebatch serve` (energy from the emulator's metrics), offers Poisson
# load with `ratebatch load`, and alternates the policies in that one proxy
# (PUT /policy): adhoc, budget 1.05x, 1.10x, 1.25x, REPS times each (every
# other time in reverse), SEG
# per segment after WARM of the same load under the new rule. Ad-hoc and budget thus share the machine's moments, which
# on a shared machine is the only fair comparison. Per policy it prints
# one Markdown row: the client's mean and p99 latency, the ratio of the
# means to ad-hoc's (the ratio of the REPS-summed means), requests per
# joule from the emulator's energy counter, the plan's mean latency and its
# ad-hoc reference as /status gave them, the proxy's own latency (arrival to
# answer written, ratebatch_request_duration_seconds), the proxy-internal
# latency (queue wait + upstream round trip) and the live overheads
# (/status rule.outside). Then, per point, `ratebatch sim` on the same rate with
# those overheads (--overheads; client_ms from the ad-hoc segments) and the
# emulator's roughness (--realism), so
# the simulator's absolute latency can be set against the live one.
#
#   scripts/budget-grid.sh                   (defaults below)
#   REALISMS="exact rough" RHOS="0.2 0.5 0.8" MODELS="simple" scripts/budget-grid.sh
#   MODELS="image" PRESET=googlenet-p4 TAU_SCALE=10 scripts/budget-grid.sh   (B_max 32)
#   SIMPLE_MAX=128 TAU_SCALE=4 scripts/budget-grid.sh                  (B_max 128, small rows)
#   BUDGETS=1.10x OTHERS="smdp batchmonitor+" scripts/budget-grid.sh
#   BUDGETS=1.10x OTHERS="adhoc@2" SEG=4s WARM=2s REPS=8 scripts/budget-grid.sh
#                          (an A/A arm: ad-hoc again; short arms, often alternated)
#
# rho is against the capacity the proxy lives (RHO_OF=capacity, the
# default): after a warm-up, ad-hoc is offered 1.5 times the line's
# capacity for CAP_SEG with at most 4 B_max calls out (the rest dropped
# by the client), and the throughput it answers is the capacity:
# rate = rho * capacity. With RHO_OF=line it is against the line as the
# proxy lives it: the emulator's true compute line (GET
# /emulator/models/M) plus the round trip beyond it and the hold the
# proxy measured in a warm-up (/status): rate = rho * B_max /
# tau_live(B_max). On two cores shared by the load generator, the proxy
# and the emulator the line overstates what the host answers when busy
# (rough: rho 0.95 of the line was past capacity, the queue grew for
# minutes and the simulator read 2.3 s), so a point near saturation is
# only one against the capacity measured.
set -euo pipefail
RB=${RB:-bin/ratebatch}
REALISMS=${REALISMS:-"exact rough"}
MODELS=${MODELS:-simple}
PRESET=${PRESET:-googlenet-p4}
TAU_SCALE=${TAU_SCALE:-1}
# The simple model's B_max (the emulator's --simple-max-batch; Triton's
# example has 8): a large B_max without the image model's 602 KB rows.
SIMPLE_MAX=${SIMPLE_MAX:-8}
RHOS=${RHOS:-"0.1 0.3 0.5 0.7 0.9 0.95"}
BUDGETS=${BUDGETS:-"1.05x 1.10x 1.25x"}
# Other policies to run in the same proxy beside them (smdp, batchmonitor+,
# ...): smdp's plan states its mean latency too, so it is checked against
# its plan as the budget is.
OTHERS=${OTHERS:-}
REPS=${REPS:-2}
# More flags for `ratebatch serve` (e.g. "--policy-solve-share 1").
SERVE_ARGS=${SERVE_ARGS:-}
SEG=${SEG:-10s}
RHO_OF=${RHO_OF:-capacity}
CAP_SEG=${CAP_SEG:-8s}
WARM=${WARM:-20s}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

echo "| roughness | model | B_max | rho | rate req/s | policy | mean ms | x ad-hoc | p99 ms | req/J | vs ad-hoc req/J | mean batch | plan ms (ad-hoc) | trim: solved for, lived | proxy ms | proxy-internal ms | sim ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for real in $REALISMS; do
for model in $MODELS; do
for rho in $RHOS; do
	P=$((20000 + RANDOM % 20000))
	"$RB" emulate --listen 127.0.0.1:$P --metrics-listen 127.0.0.1:$((P + 2)) --realism "$real" --preset "$PRESET" \
		--tau-scale "$TAU_SCALE" --simple-max-batch "$SIMPLE_MAX" >"$work/em.log" 2>&1 &
	pids+=($!)
	sleep 0.5
	"$RB" serve --upstream http://127.0.0.1:$P --listen 127.0.0.1:$((P + 10)) --admin-listen 127.0.0.1:$((P + 12)) \
		--admin-token grid --policy adhoc --power-source triton --power-metrics-url http://127.0.0.1:$((P + 2))/metrics \
		--log-level warn $SERVE_ARGS >"$work/serve.log" 2>&1 &
	pids+=($!)
	admin=http://127.0.0.1:$((P + 12))
	target=http://127.0.0.1:$((P + 10))
	# Up when /status lists the model (discovery done); a busy machine
	# may take seconds.
	for _ in $(seq 100); do
		curl -sf "$admin/status" 2>/dev/null | grep -q "\"model\": *\"$model\"" && break
		sleep 0.2
	done
	setpol() {
		local body
		# NAME@TAG runs policy NAME in an arm of its own: OTHERS="adhoc@2"
		# measures ad-hoc twice, an A/A test of the host's spread.
		case ${1%@*} in
		*x | *ms) body="{\"model\":\"$model\",\"policy\":\"budget\",\"latency_budget\":\"${1%@*}\"}" ;;
		*) body="{\"model\":\"$model\",\"policy\":\"${1%@*}\"}" ;;
		esac
		curl -sf -X PUT -H 'Authorization: Bearer grid' "$admin/policy" -d "$body" >/dev/null
	}
	# Warm up at a low rate, then read the live line to size the rate.
	bmax=$(curl -sf "$admin/status" | python3 -c "import json,sys; print([m for m in json.load(sys.stdin)['models'] if m['model']=='$model'][0]['rule']['max_batch_size'])")
	"$RB" load --target "$target" --model "$model" --binary --rate 50 --duration 4s >/dev/null
	# The server's true line (the emulator publishes it) and the round
	# trip and hold the proxy measured around it.
	line=$(curl -sf "http://127.0.0.1:$P/emulator/models/$model")
	rate=$(curl -sf "$admin/status" | python3 -c "
import json, sys
r = [m for m in json.load(sys.stdin)['models'] if m['model'] == '$model'][0]['rule']
t = json.loads('$line')
o = r.get('outside') or {}
b = r['max_batch_size']
tau = t['alpha_ms'] * b + t['tau0_ms'] + (r.get('overhead_ms') or 0) + o.get('hold_merged_ms', 0)
print('%.1f' % ($rho * 1000 * b / tau))")
	setpol adhoc
	if [ "$RHO_OF" = capacity ]; then
		over=$(python3 -c "print('%.1f' % ($rate / $rho * 1.5))")
		cap=$("$RB" load --target "$target" --model "$model" --binary --rate "$over" --duration "$CAP_SEG" \
			--max-inflight $((4 * bmax)) --on-full drop --json | python3 -c "import json,sys; print('%.1f' % json.load(sys.stdin)['throughput_rps'])")
		echo "<!-- $real $model rho $rho: line's capacity $(python3 -c "print('%.1f' % ($rate / $rho))") req/s, lived $cap req/s -->"
		rate=$(python3 -c "print('%.1f' % ($rho * $cap))")
	fi
	"$RB" load --target "$target" --model "$model" --binary --rate "$rate" --duration 4s >/dev/null
	: >"$work/segs"
	for rep in $(seq "$REPS"); do
		# Every other repetition runs the policies in reverse: near
		# saturation the queue drifts over minutes (it grows past
		# capacity), and a fixed order would charge the drift to the
		# policies measured last.
		order="adhoc $BUDGETS $OTHERS"
		[ $((rep % 2)) -eq 0 ] && order=$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')
		for pol in $order; do
			setpol "$pol"
			# The new rule under the same load before measuring: the
			# budget's live trim measures ad-hoc and settles its budget
			# over its first seconds (docs/ALGORITHMS.md, "The live trim").
			"$RB" load --target "$target" --model "$model" --binary --rate "$rate" --duration "$WARM" --seed $((rep + 100)) >/dev/null
			curl -sf "$admin/metrics" >"$work/m0"
			curl -sf "http://127.0.0.1:$((P + 2))/metrics" >"$work/e0"
			"$RB" load --target "$target" --model "$model" --binary --rate "$rate" --duration "$SEG" --seed "$rep" --json >"$work/l.json"
			curl -sf "$admin/metrics" >"$work/m1"
			curl -sf "http://127.0.0.1:$((P + 2))/metrics" >"$work/e1"
			curl -sf "$admin/status" >"$work/s.json"
			sel="\\{model=\"$model\"\\}"
			d() { "$(dirname "$0")"/promdelta.py "$1" "$work/m1" "$work/m0"; }
			wait_s=$(d "ratebatch_queue_wait_seconds_sum$sel"); wait_n=$(d "ratebatch_queue_wait_seconds_count$sel")
			up_s=$(d "ratebatch_upstream_duration_seconds_sum$sel"); up_n=$(d "ratebatch_upstream_duration_seconds_count$sel")
			rows=$(d "ratebatch_batch_size_sum$sel")
			front_s=$(d "ratebatch_request_duration_seconds_sum\\{model=\"$model\",protocol=\"http\"\\}")
			joules=$("$(dirname "$0")"/promdelta.py nv_energy_consumption "$work/e1" "$work/e0")
			python3 - "$pol" "$work/l.json" "$work/s.json" "$model" "$wait_s" "$wait_n" "$up_s" "$up_n" "$rows" "$joules" "$front_s" >>"$work/segs" <<'PY'
import json, re, sys
pol, lf, sf, model = sys.argv[1:5]
wait_s, wait_n, up_s, up_n, rows, joules, front_s = map(float, sys.argv[5:12])
l = json.load(open(lf))
r = [m for m in json.load(open(sf))['models'] if m['model'] == model][0]['rule']
m = re.search(r'mean latency ([\d.]+) ms \(ad-hoc ([\d.]+)\)', r.get('note', ''))
plan, plan_adhoc = (float(m.group(1)), float(m.group(2))) if m else (0, 0)
if not m and pol.split('@')[0] != 'adhoc':
    # smdp's plan: its mean latency, no ad-hoc reference.
    m = re.search(r'mean latency ([\d.]+) ms', r.get('note', ''))
    plan = float(m.group(1)) if m else 0
t = re.search(r'live trim: solved for ([\d.]+)x \(calls lived ([\d.]+)x', r.get('note', ''))
trim = [float(t.group(1)), float(t.group(2))] if t else None
o = r.get('outside') or {}
print(json.dumps({'policy': pol, 'mean': l['mean_latency_ms'], 'p99': l['p99_latency_ms'], 'ok': l['ok'], 'sched': l['scheduled'],
    'rate': l['throughput_rps'], 'joules': joules, 'wait': 1000 * wait_s / max(wait_n, 1), 'up': 1000 * up_s / max(up_n, 1),
    'batch': rows / max(up_n, 1), 'front': 1000 * front_s / max(wait_n, 1), 'plan': plan, 'plan_adhoc': plan_adhoc, 'outside': o,
    'fit': [r['alpha_ms'], r['tau0_ms']], 'trim': trim, 'after': (o.get('after_merged_ms', 0) if up_n and rows / up_n > 1 else o.get('after_lone_ms', 0))}))
PY
		done
	done
	# Pool the segments, run the simulator with the measured overheads.
	python3 - "$real" "$model" "$bmax" "$rho" "$rate" "$work/segs" "$RB" "$BUDGETS $OTHERS" <<'PY'
import json, subprocess, sys
real, model, bmax, rho, rate, segs, rb, budgets = sys.argv[1:9]
rows = [json.loads(l) for l in open(segs)]
pols = ['adhoc'] + budgets.split()
by = {p: [r for r in rows if r['policy'] == p] for p in pols}
mean = lambda xs: sum(xs) / len(xs)
ad = by['adhoc']
ad_mean = mean([r['mean'] for r in ad])
ad_rpj = sum(r['ok'] for r in ad) / max(sum(r['joules'] for r in ad), 1e-12)
# The client's time the proxy does not see, from the ad-hoc segments.
client = max(mean([r['mean'] - r['wait'] - r['up'] - r['after'] for r in ad]), 0)
last = ad[-1]
o, (alpha, tau0) = last['outside'], last['fit']
ovh = 'overhead_ms=%g,overhead_per_row_ms=%g,hold_lone_ms=%g,hold_merged_ms=%g,after_lone_ms=%g,after_merged_ms=%g,client_ms=%g' % (
    o.get('overhead_ms', 0), o.get('overhead_per_row_ms', 0), o.get('hold_lone_ms', 0), o.get('hold_merged_ms', 0),
    o.get('after_lone_ms', 0), o.get('after_merged_ms', 0), client)
def sim(pol):
    pol = pol.split('@')[0]
    # The proxy's fit (the mean line), batches drawn around it as rough as
    # the emulator draws them. 400,000 requests: with the rough emulator's
    # tail (1% of batches 3-10x slower) 40,000 are about 130 slow batches,
    # and one seed's mean at rho 0.8 read 9.59 ms where 2 million read 8.66
    # (docs/SIMULATION.md, "A server's spread"). Above B_max 32 a
    # budget's solves take a second or more each and the simulator solves
    # every plan it needs (minutes for 400,000 requests): 100,000 there.
    n = '400000' if int(bmax) <= 32 else '100000'
    args = [rb, 'sim', '--alpha', str(alpha), '--tau0', str(tau0), '--bmax', bmax, '--rate', rate, '--requests', n,
            '--overheads', ovh, '--realism', real, '--json']
    if pol.endswith('x') or pol.endswith('ms'):
        args += ['--policy', 'budget', '--latency-budget', pol, '--trim']
    else:
        args += ['--policy', pol]
    try:
        return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)['mean_latency_ms']
    except Exception:
        return float('nan')
for p in pols:
    rs = by[p]
    m = mean([r['mean'] for r in rs])
    rpj = sum(r['ok'] for r in rs) / max(sum(r['joules'] for r in rs), 1e-12)
    lost = sum(r['sched'] - r['ok'] for r in rs)
    planned = [r for r in rs if r['plan'] > 0]  # /status read in an ad-hoc slice has no plan
    plan = '%.3g' % mean([r['plan'] for r in planned]) if planned else '-'
    if planned and planned[0]['plan_adhoc']:
        plan += ' (%.3g)' % mean([r['plan_adhoc'] for r in planned])
    trims = [r['trim'] for r in rs if r.get('trim')]
    trim = '%.4gx, %.3gx' % (mean([t[0] for t in trims]), mean([t[1] for t in trims])) if trims else '-'
    print('| %s | %s | %s | %s | %s | %s | %.3f | %.3f | %.2f | %.4g | %+.1f%% | %.2f | %s | %s | %.3f | %.3f | %.3f |%s' % (
        real, model, bmax, rho, rate, p, m, m / ad_mean, mean([r['p99'] for r in rs]), rpj, 100 * (rpj / ad_rpj - 1),
        mean([r['batch'] for r in rs]), plan, trim, mean([r['front'] for r in rs]),
        mean([r['wait'] + r['up'] for r in rs]), sim(p), ' %d unanswered' % lost if lost else ''), flush=True)
print('<!-- %s %s rho %s: --overheads %s; service_scv %.3g -->' % (real, model, rho, ovh, o.get('service_scv', 0)), flush=True)
# Each segment's mean and p99 in the order run: near saturation one
# segment's queue can set an arm's mean, and the others show whether it did.
print('<!-- %s %s rho %s segments (mean/p99 ms): %s -->' % (real, model, rho, '; '.join(
    '%s %s' % (p, ' '.join('%.3g/%.3g' % (r['mean'], r['p99']) for r in by[p])) for p in pols)), flush=True)
PY
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
done
done
done
