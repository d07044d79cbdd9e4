#!/usr/bin/env bash
# interleave-check.sh: two policies against each other in one long load,
# switched every few seconds, so that a server whose speed drifts over
# minutes does not decide the comparison.
#
# traffic-check.sh runs each policy for a whole perf_analyzer measurement
# (12-15 s) and alternates them a few times. On PyTriton, whose compute on
# this 2-core host moves by half between minutes (9-15 ms of upstream time
# for the same batches), an A/A test of that design (ad-hoc in both arms,
# REPS=6) read 0.903x: a promise of 1.10x cannot be checked by it. Here one
# load runs for DUR seconds and the proxy's policy is switched through PUT
# /policy every SEG seconds, in blocks A B B A so that a drift within a
# block cancels; each segment's calls are read from the proxy's own
# counters (ratebatch_request_duration_seconds, answered in the segment)
# and the first WARM seconds are not counted. It prints per arm the calls,
# mean latency (the proxy's: arrival to answer), p99 (log-interpolated in
# the histogram's buckets, a factor of 2 apart: about +-10%), batch size
# and requests per joule (the emulator's energy counter; on PyTriton,
# requests per second of execution as traffic-check.sh counts them), the
# ratio of the means with a 95% interval over the blocks (each block's
# ratio; mean +- 2 standard errors), and the last note of the second
# arm's rule.
#
# Upstream: UPSTREAM=emulator (--realism REALISM, default rough; EMU_ARGS
# more flags, such as "--tau-scale 4" for a model four times slower, whose
# saturation comes before the host's) or
# UPSTREAM=pytriton (tests/triton/server.py from the venv RATEBATCH_VENV,
# sleeps 4 + 0.5 b ms, B_max 16 or PYTRITON_BMAX). Load: RATE req/s of Poisson arrivals
# sent by perf_analyzer from a `ratebatch load --write-intervals` schedule
# (CLIENT=perf_analyzer, the default) or by `ratebatch load` (CLIENT=load;
# killed when the switching ends; it plays a trace once, where perf_analyzer
# starts it again);
# TRACE=NAME (a built-in of `ratebatch load --trace`: onoff, mmpp, paper300,
# azure2023, or a CSV file; TRACE_ARGS more flags such as "--trace-scale 5
# --speedup 20") sends that trace's arrivals instead, which perf_analyzer
# replays from its start again when they run out: bursts, set against
# each other in blocks as the Poisson arrivals are. A built-in trace is one
# fixed 60-s draw, so a block (4 SEG) that divides 60 s would give each arm
# the same phases of it every cycle: use SEG=7 (28-s blocks that move
# along the trace). A trace whose load moves slowly against the blocks
# (paper300 at --speedup 5, one day a minute) still gives the arms
# different parts of it in a few minutes, and the arms' call counts show
# it: play it faster (--speedup 20, a day in 15 s).
# CONC=N runs N synchronous perf_analyzer clients instead (a closed loop).
# PROTOCOL=grpc sends perf_analyzer's calls to the proxy's gRPC door, which
# forwards them to the upstream's gRPC port (HTTP by default).
# ARMS names the two arms: a policy, or budget:FACTOR, and a second ad-hoc
# arm written adhoc@2 (an A/A test: the spread of one rule measured twice).
#
#   UPSTREAM=pytriton RATEBATCH_VENV=/work/venv RATE=200 scripts/interleave-check.sh
#   UPSTREAM=pytriton RATE=200 ARMS="adhoc adhoc@2" scripts/interleave-check.sh   (A/A)
#   UPSTREAM=pytriton PYTRITON_BMAX=32 RATE=650 scripts/interleave-check.sh   (B_max 32)
#   REALISM=exact RATE=1150 ARMS="adhoc budget:1.25x" scripts/interleave-check.sh
#   UPSTREAM=pytriton CONC=4 PROTOCOL=grpc DUR=150 scripts/interleave-check.sh   (gRPC closed loop)
#   TRACE=mmpp SEG=7 DUR=240 scripts/interleave-check.sh               (bursts, rough emulator)
set -euo pipefail
RB=${RB:-bin/ratebatch}
PA=${PA:-tests/triton/perf_analyzer}
UPSTREAM=${UPSTREAM:-emulator}
REALISM=${REALISM:-rough}
EMU_ARGS=${EMU_ARGS:-}
VENV=${RATEBATCH_VENV:-.venv}
RATE=${RATE:-200}
CONC=${CONC:-}
TRACE=${TRACE:-}
TRACE_ARGS=${TRACE_ARGS:-}
CLIENT=${CLIENT:-perf_analyzer}
PROTOCOL=${PROTOCOL:-http}
DUR=${DUR:-240}
SEG=${SEG:-5}
WARM=${WARM:-20}
ARMS=${ARMS:-"adhoc budget:1.10x"}
# shellcheck source=scripts/upstream.sh
. "$(dirname "$0")/upstream.sh" # $work, pids, the cleanup on exit
P=$((20000 + RANDOM % 20000))
if [ "$UPSTREAM" = pytriton ]; then
	start_pytriton "$VENV" $P 4 0.5
	power=(--power-source none)
else
	# shellcheck disable=SC2086 # EMU_ARGS is a list of flags
	"$RB" emulate --listen 127.0.0.1:$P --grpc-listen 127.0.0.1:$((P + 1)) --metrics-listen 127.0.0.1:$((P + 2)) --realism "$REALISM" \
		--preset googlenet-p4 $EMU_ARGS >"$work/em.log" 2>&1 &
	pids+=($!)
	sleep 0.5
	power=(--power-source triton --power-metrics-url http://127.0.0.1:$((P + 2))/metrics)
fi
"$RB" serve --upstream http://127.0.0.1:$P --upstream-grpc 127.0.0.1:$((P + 1)) --listen 127.0.0.1:$((P + 10)) \
	--grpc-listen 127.0.0.1:$((P + 11)) --admin-listen 127.0.0.1:$((P + 12)) \
	--admin-token check --policy adhoc "${power[@]}" --log-level warn >"$work/serve.log" 2>&1 &
pids+=($!)
admin=http://127.0.0.1:$((P + 12))
await_simple 127.0.0.1:$((P + 10)) "$admin"
target=127.0.0.1:$((P + 10))
[ "$PROTOCOL" = grpc ] && target=127.0.0.1:$((P + 11))
# The load runs a little longer than the switching, so no segment sees
# its end. The open-loop arrivals: a trace's, or Poisson at RATE.
if [ -n "$TRACE" ]; then
	# shellcheck disable=SC2206 # TRACE_ARGS is a list of flags
	arrivals=(--trace "$TRACE" $TRACE_ARGS)
else
	arrivals=(--rate "$RATE" --duration "$((DUR * 2))s")
fi
if [ -n "$CONC" ]; then
	"$PA" -m simple -u "$target" -i "$PROTOCOL" --concurrency-range "$CONC" \
		--measurement-interval $(((DUR + 10) * 1000 / 3)) --stability-percentage 999 --max-trials 3 >"$work/load.out" 2>&1 &
elif [ "$CLIENT" = load ]; then
	form=(--target "$target" --protocol grpc) # tensors as raw bytes
	[ "$PROTOCOL" = http ] && form=(--target "http://$target" --binary)
	"$RB" load "${form[@]}" --model simple "${arrivals[@]}" >"$work/load.out" 2>&1 &
else
	"$RB" load "${arrivals[@]}" --write-intervals "$work/intervals" >/dev/null
	"$PA" -m simple -u "$target" -i "$PROTOCOL" --async --request-intervals "$work/intervals" \
		--measurement-interval $(((DUR + 10) * 1000 / 3)) --stability-percentage 999 --max-trials 3 >"$work/load.out" 2>&1 &
fi
pids+=($!)
python3 - "$admin" "http://127.0.0.1:$((P + 2))/metrics" "$UPSTREAM" "$DUR" "$SEG" "$WARM" $ARMS <<'PY' || { tail -3 "$work/load.out" >&2; exit 1; }
import json, math, sys, time, urllib.request

admin, upmetrics, upstream = sys.argv[1:4]
dur, seg, warm = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
arms = sys.argv[7:9]
SEL = 'model="simple"'


def scrape(url):
    out = {}
    for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
        if line.startswith('#') or SEL not in line and not line.startswith('nv_energy_consumption'):
            continue
        key, _, val = line.rpartition(' ')
        try:
            out[key] = float(val)
        except ValueError:
            pass
    return out


def reading():
    m = scrape(admin + '/metrics')
    r = {'n': 0.0, 's': 0.0, 'rows': 0.0, 'batches': 0.0, 'buckets': {}}
    for k, v in m.items():
        if k.startswith('ratebatch_request_duration_seconds_count{'):
            r['n'] += v
        elif k.startswith('ratebatch_request_duration_seconds_sum{'):
            r['s'] += v
        elif k.startswith('ratebatch_request_duration_seconds_bucket{'):
            le = k.split('le="')[1].split('"')[0]
            le = math.inf if le == '+Inf' else float(le)
            r['buckets'][le] = r['buckets'].get(le, 0) + v
        elif k.startswith('ratebatch_batch_size_sum{'):
            r['rows'] += v
        elif k.startswith('ratebatch_batch_size_count{'):
            r['batches'] += v
    u = scrape(upmetrics)
    inf = sum(v for k, v in u.items() if k.startswith('nv_inference_count{'))
    execs = sum(v for k, v in u.items() if k.startswith('nv_inference_exec_count{'))
    joules = sum(v for k, v in u.items() if k.startswith('nv_energy_consumption'))
    if upstream == 'pytriton':
        joules = (4 * execs + 0.5 * inf) / 1000  # seconds of execution
    r['inf'], r['j'] = inf, joules
    return r


def setpol(arm):
    name = arm.split('@')[0]
    body = {'model': 'simple', 'policy': name}
    if name.startswith('budget'):
        body = {'model': 'simple', 'policy': 'budget', 'latency_budget': name.split(':')[1] if ':' in name else '1.10x'}
    req = urllib.request.Request(admin + '/policy', data=json.dumps(body).encode(), method='PUT',
                                 headers={'Authorization': 'Bearer check'})
    urllib.request.urlopen(req, timeout=5).read()


def diff(a, b):
    return {'n': b['n'] - a['n'], 's': b['s'] - a['s'], 'rows': b['rows'] - a['rows'],
            'batches': b['batches'] - a['batches'], 'inf': b['inf'] - a['inf'], 'j': b['j'] - a['j'],
            'buckets': {le: b['buckets'].get(le, 0) - a['buckets'].get(le, 0) for le in b['buckets']}}


def add(t, d):
    for k in ('n', 's', 'rows', 'batches', 'inf', 'j'):
        t[k] += d[k]
    for le, v in d['buckets'].items():
        t['buckets'][le] = t['buckets'].get(le, 0) + v


def p99(buckets):
    """The 99th percentile in ms, log-interpolated within its bucket of
    the cumulative histogram (the first bucket taken from half its bound)."""
    les = sorted(buckets)
    total = buckets[les[-1]] if les else 0
    if total <= 0:
        return float('nan')
    want, lo, below = 0.99 * total, 0.0, 0.0
    for le in les:
        if buckets[le] >= want:
            if math.isinf(le):
                return lo * 1000
            lo = lo or le / 2
            f = (want - below) / max(buckets[le] - below, 1e-9)
            return lo * (le / lo) ** f * 1000
        lo, below = le, buckets[le]
    return float('nan')


totals = {a: {'n': 0.0, 's': 0.0, 'rows': 0.0, 'batches': 0.0, 'inf': 0.0, 'j': 0.0, 'buckets': {}} for a in arms}
blocks = []  # per A B B A block: the second arm's mean over the first's
block = {a: [0.0, 0.0] for a in arms}
order = [arms[0], arms[1], arms[1], arms[0]]
start = time.time()
i, note = 0, ''
while time.time() - start < dur:
    arm = order[i % 4]
    setpol(arm)
    a = reading()
    time.sleep(seg)
    b = reading()
    if arm == arms[1] and not arm.startswith('adhoc'):
        st = json.load(urllib.request.urlopen(admin + '/status', timeout=5))
        note = [m for m in st['models'] if m['model'] == 'simple'][0]['rule'].get('note', '')
    if time.time() - start > warm:
        d = diff(a, b)
        add(totals[arm], d)
        block[arm][0] += d['s']
        block[arm][1] += d['n']
    i += 1
    if i % 4 == 0:
        x, y = block[arms[0]], block[arms[1]]
        if x[1] > 0 and y[1] > 0:
            blocks.append((y[0] / y[1]) / (x[0] / x[1]))
        block = {a: [0.0, 0.0] for a in arms}

if not all(totals[a]['n'] for a in arms):
    sys.exit('interleave-check: an arm had no answered calls (the load client failed?)')
unit = 'req per exec-s' if upstream == 'pytriton' else 'req/J'
print('| arm | calls | mean ms | p99 ms | mean batch | %s |' % unit)
print('|---|---|---|---|---|---|')
for a in arms:
    t = totals[a]
    print('| %s | %d | %.3f | %.1f | %.2f | %.1f |' % (a, t['n'], 1000 * t['s'] / max(t['n'], 1), p99(t['buckets']),
                                                   t['rows'] / max(t['batches'], 1), t['inf'] / t['j'] if t['j'] > 0 else float('nan')))
x, y = totals[arms[0]], totals[arms[1]]
ratio = (y['s'] / y['n']) / (x['s'] / x['n'])
k = len(blocks)
m = sum(blocks) / k
se = math.sqrt(sum((r - m) ** 2 for r in blocks) / (k - 1) / k) if k > 1 else float('nan')
gain = (y['inf'] / y['j']) / (x['inf'] / x['j']) - 1 if x['j'] > 0 and y['j'] > 0 else float('nan')
print()
print('%s over %s: mean latency %.3fx (blocks: %.3f +- %.3f, %d blocks of 4 x %g s), %s %+.1f%%' % (
    arms[1], arms[0], ratio, m, 2 * se, k, seg, unit, 100 * gain))
if note:
    print('<!-- %s: %s -->' % (arms[1], note[:600]))
PY
