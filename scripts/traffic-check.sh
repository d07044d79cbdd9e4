#!/usr/bin/env bash
# traffic-check.sh: the budget policy against ad-hoc, live, in one proxy,
# on every traffic shape, with Triton's own client.
#
# Starts one upstream and one `ratebatch serve`: UPSTREAM=emulator (the
# default; --realism REALISM, default rough; --idle-watts IDLE_WATTS) or
# UPSTREAM=pytriton, a real Triton (tests/triton/server.py from the venv
# RATEBATCH_VENV, whose executions sleep 4 + 0.5 b ms, B_max 16, as the
# issue's figures used). Then for each shape in SHAPES it runs
# perf_analyzer (tests/triton/perf_analyzer; PROTOCOL http or grpc)
# against adhoc and budget 1.10x, alternated REPS times in the one proxy
# (PUT /policy), the order swapped every other repetition so that no drift
# of the machine favours either. The shapes:
#
#   cN           N synchronous clients (--concurrency-range N): closed loops
#   poisson:R    open Poisson arrivals at R req/s
#   onoff, mmpp  the built-in bursty traces (ratebatch load -h), open loop
#   paper300     the built-in day, its rates x5, played 20x faster (15 s)
#   azure2023    the built-in recorded trace (Azure's LLM code service,
#                CC-BY 4.0), its rates x150, played 120x faster (29 s)
#   curl         one client calling in a shell loop of curl (a new process
#                and connection per call), for SEQ_S seconds (default 15)
#   post:T       one Python client opening a new connection per call
#                (urllib, as requests.post without a Session), thinking
#                T ms between an answer and its next call (post:0: none)
#
# The sequential shapes (curl, post:T) run scripts/seqclient.py over HTTP
# whatever PROTOCOL says: a client without keep-alive is an HTTP client.
#
# The open shapes are schedules written by `ratebatch load
# --write-intervals` and sent by perf_analyzer --request-intervals: the
# same arrivals `ratebatch load` would send. Per shape it prints one
# Markdown row: perf_analyzer's mean and p99 latency per policy (the mean
# of the repetitions), the ratio of the means, the throughput, requests
# per joule from the emulator's own counters (nv_inference_count over
# nv_energy_consumption; PyTriton has no energy counter, so there it is
# requests per second of execution, nv_inference_count over
# tau0 * nv_inference_exec_count + alpha * nv_inference_count, the energy
# of a GPU whose power is constant while it executes), and the proxy's CPU
# per request. Last, per shape, what `ratebatch sim` predicts for both
# policies on the same shape (--clients N, --rate R, --trace), given the
# server's line (the emulator's true mean line; PyTriton's as the proxy
# fitted it), the overheads the proxy measured (/status rule.outside, as
# --overheads) and the client's own time from the ad-hoc segments
# (client_ms: its mean latency less the proxy's queue wait, upstream round
# trip and answer), so the simulator can be set against the live proxy.
#
#   RATEBATCH_VENV=/work/venv scripts/traffic-check.sh
#   SHAPES="c1 c4 onoff" REPS=3 PROTOCOL=grpc IDLE_WATTS=20 scripts/traffic-check.sh
#   SHAPES="onoff" BUDGET=adhoc scripts/traffic-check.sh        (A/A: ad-hoc in both arms)
set -euo pipefail
RB=${RB:-bin/ratebatch}
PA=${PA:-tests/triton/perf_analyzer}
SHAPES=${SHAPES:-"c1 c2 c4 c8 c16 c64 poisson:800 onoff mmpp paper300"}
REPS=${REPS:-2}
REALISM=${REALISM:-rough}
PRESET=${PRESET:-googlenet-p4}
IDLE_WATTS=${IDLE_WATTS:-0}
PROTOCOL=${PROTOCOL:-http}
UPSTREAM=${UPSTREAM:-emulator}
VENV=${RATEBATCH_VENV:-.venv}
TAU0_MS=4 ALPHA_MS=0.5
INTERVAL_MS=${INTERVAL_MS:-4000}
SEQ_S=${SEQ_S:-15}
# The second arm's latency budget; BUDGET=adhoc runs ad-hoc in both arms,
# an A/A test: the spread of one rule measured twice on this host, against
# which a policy's difference is read.
BUDGET=${BUDGET:-1.10x}
# shellcheck source=scripts/upstream.sh
. "$(dirname "$0")/upstream.sh" # $work, pids, the cleanup on exit
P=$((20000 + RANDOM % 20000))
power=(--power-source triton --power-metrics-url http://127.0.0.1:$((P + 2))/metrics)
if [ "$UPSTREAM" = pytriton ]; then
	start_pytriton "$VENV" $P $TAU0_MS $ALPHA_MS
	power=(--power-source none)
else
	"$RB" emulate --listen 127.0.0.1:$P --grpc-listen 127.0.0.1:$((P + 1)) --metrics-listen 127.0.0.1:$((P + 2)) \
		--realism "$REALISM" --preset "$PRESET" --idle-watts "$IDLE_WATTS" >"$work/em.log" 2>&1 &
	pids+=($!)
fi
"$RB" serve --upstream http://127.0.0.1:$P --upstream-grpc 127.0.0.1:$((P + 1)) --listen 127.0.0.1:$((P + 10)) \
	--grpc-listen 127.0.0.1:$((P + 11)) --admin-listen 127.0.0.1:$((P + 12)) \
	--admin-token check --policy adhoc "${power[@]}" --log-level warn >"$work/serve.log" 2>&1 &
pids+=($!)
serve_pid=$!
admin=http://127.0.0.1:$((P + 12))
target=127.0.0.1:$((P + 10))
[ "$PROTOCOL" = grpc ] && target=127.0.0.1:$((P + 11))
await_simple 127.0.0.1:$((P + 10)) "$admin"
setpol() {
	local body='{"model":"simple","policy":"adhoc"}'
	[ "$1" = adhoc ] || [ "$BUDGET" = adhoc ] || body='{"model":"simple","policy":"budget","latency_budget":"'$BUDGET'"}'
	curl -sf -X PUT -H 'Authorization: Bearer check' "$admin/policy" -d "$body" >/dev/null
}
cpu() { # the proxy's CPU seconds so far (user + system)
	awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$serve_pid/stat"
}
counters() { # inferences joules (PyTriton: seconds of execution)
	curl -sf "http://127.0.0.1:$((P + 2))/metrics" | python3 -c "
import sys
n = j = x = 0.0
for l in sys.stdin:
    if 'model=\"simple\"' in l and l.startswith('nv_inference_count{'): n += float(l.split()[-1])
    if 'model=\"simple\"' in l and l.startswith('nv_inference_exec_count{'): x += float(l.split()[-1])
    if l.startswith('nv_energy_consumption'): j += float(l.split()[-1])
if '$UPSTREAM' == 'pytriton': j = ($TAU0_MS * x + $ALPHA_MS * n) / 1000
print(n, j)"
}
# load_flags SHAPE: perf_analyzer's load flags for a shape (writes the
# schedule of an open shape first).
load_flags() {
	local s=$1 f=$work/$1.intervals
	case $s in
	c[0-9]*) echo "--concurrency-range ${s#c} --measurement-interval $INTERVAL_MS" ;;
	# Open shapes run asynchronously: perf_analyzer's synchronous mode
	# has at most --max-threads (4) requests out, a closed loop paced by
	# the schedule, not the schedule itself.
	poisson:*) "$RB" load --rate "${s#poisson:}" --duration 60s --write-intervals "$f" >/dev/null
		echo "--async --request-intervals $f --measurement-interval $INTERVAL_MS" ;;
	onoff | mmpp) "$RB" load --trace "$s" --write-intervals "$f" >/dev/null
		echo "--async --request-intervals $f --measurement-interval $INTERVAL_MS" ;;
	paper300) "$RB" load --trace paper300 --trace-scale 5 --speedup 20 --write-intervals "$f" >/dev/null
		echo "--async --request-intervals $f --measurement-interval 15000" ;; # one window, one day
	azure2023) "$RB" load --trace azure2023 --trace-scale 150 --speedup 120 --write-intervals "$f" >/dev/null
		echo "--async --request-intervals $f --measurement-interval 28000" ;; # one window, the whole trace
	curl) echo "curl 0" ;;
	post:*) echo "urllib ${s#post:}" ;;
	*) echo "unknown shape $s" >&2; return 1 ;;
	esac
}
unit="req/J"
[ "$UPSTREAM" = pytriton ] && unit="req per exec-s"
echo "| shape | ad-hoc mean ms | budget $BUDGET mean ms | x ad-hoc | ad-hoc p99 ms | budget p99 ms | ad-hoc req/s | budget req/s | ad-hoc $unit | budget $unit | vs ad-hoc $unit | proxy CPU µs/req ad-hoc | budget | sim ad-hoc ms | sim budget ms | sim ad-hoc $unit | sim budget $unit |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
# sim_flags SHAPE: the simulator's arrivals for a shape.
sim_flags() {
	case $1 in
	c[0-9]*) echo "--clients ${1#c} --requests 400000" ;;
	poisson:*) echo "--rate ${1#poisson:} --requests 400000" ;;
	onoff | mmpp) echo "--trace $1" ;;
	paper300) echo "--trace paper300 --trace-scale 5 --speedup 20" ;;
	azure2023) echo "--trace azure2023 --trace-scale 150 --speedup 120" ;;
	curl) echo "--clients 1 --requests 100000" ;;
	post:*) echo "--clients 1 --think ${1#post:}ms --requests 100000" ;;
	esac
}
# client SHAPE FLAGS: runs the shape's client against the proxy and writes
# its mean and p99 latency (ms) and throughput to $work/client.json.
client() {
	case $1 in
	curl | post:*)
		# shellcheck disable=SC2086 # flags are words
		python3 "$(dirname "$0")/seqclient.py" "http://127.0.0.1:$((P + 10))/v2/models/simple/infer" "$SEQ_S" $2 \
			>"$work/client.json" 2>"$work/pa.out" || { tail -3 "$work/pa.out" >&2; return 1; }
		;;
	*)
		# shellcheck disable=SC2086 # flags are words
		"$PA" -m simple -u "$target" -i "$PROTOCOL" $2 --stability-percentage 999 --max-trials 3 \
			--percentile 99 -f "$work/pa.csv" >"$work/pa.out" 2>&1 || { tail -3 "$work/pa.out" >&2; return 1; }
		python3 - "$work/pa.csv" >"$work/client.json" <<'PY'
import csv, json, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
lat = (int(r['Client Send']) + int(r['Network+Server Send/Recv']) + int(r['Server Queue']) + int(r['Server Compute Input'])
       + int(r['Server Compute Infer']) + int(r['Server Compute Output']) + int(r['Client Recv'])) / 1000
print(json.dumps({'avg': lat, 'p99': int(r['p99 latency']) / 1000, 'rps': float(r['Inferences/Second'])}))
PY
		;;
	esac
}
for s in $SHAPES; do
	flags=$(load_flags "$s")
	: >"$work/rows"
	for rep in $(seq "$REPS"); do
		order="adhoc budget"
		[ $((rep % 2)) -eq 0 ] && order="budget adhoc" # no drift favours either
		for pol in $order; do
			setpol "$pol"
			sleep 1.5
			read -r n0 j0 < <(counters)
			curl -sf "$admin/metrics" >"$work/m0"
			c0=$(cpu)
			client "$s" "$flags" || continue
			read -r n1 j1 < <(counters)
			c1=$(cpu)
			curl -sf "$admin/metrics" >"$work/m1"
			sel='\{model="simple"\}'
			d() { "$(dirname "$0")"/promdelta.py "$1" "$work/m1" "$work/m0"; }
			wait_s=$(d "ratebatch_queue_wait_seconds_sum$sel") wait_n=$(d "ratebatch_queue_wait_seconds_count$sel")
			up_s=$(d "ratebatch_upstream_duration_seconds_sum$sel") up_n=$(d "ratebatch_upstream_duration_seconds_count$sel")
			brows=$(d "ratebatch_batch_size_sum$sel")
			python3 - "$pol" "$work/client.json" "$n0" "$n1" "$j0" "$j1" "$c0" "$c1" "$wait_s" "$wait_n" "$up_s" "$up_n" "$brows" >>"$work/rows" <<'PY'
import json, sys
pol, f = sys.argv[1:3]
n0, n1, j0, j1, c0, c1, wait_s, wait_n, up_s, up_n, brows = map(float, sys.argv[3:14])
c = json.load(open(f))
print(json.dumps({'policy': pol, 'avg': c['avg'], 'p99': c['p99'], 'rps': c['rps'],
                  'n': n1 - n0, 'j': j1 - j0, 'cpu': c1 - c0, 'wait': 1000 * wait_s / max(wait_n, 1),
                  'up': 1000 * up_s / max(up_n, 1), 'batch': brows / max(up_n, 1)}))
PY
		done
	done
	curl -sf "$admin/status" >"$work/status.json"
	truth=null
	[ "$UPSTREAM" = pytriton ] || truth=$(curl -sf "http://127.0.0.1:$P/emulator/models/simple")
	# shellcheck disable=SC2046 # flags are words
	python3 - "$s" "$work/rows" "$work/status.json" "$truth" "$RB" "$BUDGET" "$UPSTREAM" "$IDLE_WATTS" "$PRESET" "$TAU0_MS" "$ALPHA_MS" "$REALISM" $(sim_flags "$s") <<'PY'
import json, subprocess, sys
s, f, sf, truth, rb, budget, upstream, idle, preset, tau0_ms, alpha_ms, realism = sys.argv[1:13]
simflags = sys.argv[13:]
rows = [json.loads(l) for l in open(f)]
rule = [m for m in json.load(open(sf))['models'] if m['model'] == 'simple'][0]['rule']
o = rule.get('outside') or {}
ad = [r for r in rows if r['policy'] == 'adhoc']
after = lambda r: o.get('after_merged_ms', 0) if r['batch'] > 1 else o.get('after_lone_ms', 0)
client = max(sum(r['avg'] - r['wait'] - r['up'] - after(r) for r in ad) / len(ad), 0)
ovh = ','.join('%s=%g' % (k, o.get(k, 0)) for k in ('overhead_ms', 'overhead_per_row_ms', 'hold_lone_ms', 'hold_merged_ms',
                                                  'after_lone_ms', 'after_merged_ms')) + ',client_ms=%g' % client
args = [rb, 'sim', '--bmax', str(rule['max_batch_size']), '--overheads', ovh, '--json'] + simflags
if upstream == 'pytriton':
    # The line as the proxy fitted it (Triton's compute statistics, which
    # take in PyTriton's Python side); energy as the server's execution
    # time, zeta(b) = 4 + 0.5 b mJ at 1 W, so that requests per joule read
    # as the live column's requests per second of execution.
    args += ['--alpha', str(rule['alpha_ms']), '--tau0', str(rule['tau0_ms']), '--beta', alpha_ms, '--zeta0', tau0_ms]
else:
    # The emulator's mean line, its batches drawn around it as rough as
    # the emulator draws them.
    t = json.loads(truth)
    args += ['--preset', preset, '--alpha', str(t['alpha_ms']), '--tau0', str(t['tau0_ms']), '--idle-watts', idle, '--realism', realism]
def sim(pol):
    a = args + (['--policy', 'adhoc'] if pol == 'adhoc' or budget == 'adhoc' else ['--policy', 'budget', '--latency-budget', budget, '--trim'])
    try:
        r = json.loads(subprocess.run(a, capture_output=True, text=True, check=True).stdout)
        return r['mean_latency_ms'], r.get('requests_per_joule') or float('nan')
    except Exception as e:
        print('sim failed: %s' % e, file=sys.stderr)
        return float('nan'), float('nan')
json.dump({'sim': [sim('adhoc'), sim('budget')], 'overheads': ovh}, open(f + '.sim', 'w'))
PY
	python3 - "$s" "$work/rows" <<'PY'
import json, sys
s, f = sys.argv[1:3]
rows = [json.loads(l) for l in open(f)]
sim = json.load(open(f + '.sim'))
(sa, ja), (sb, jb) = sim['sim']
def agg(p):
    rs = [r for r in rows if r['policy'] == p]
    mean = lambda k: sum(r[k] for r in rs) / len(rs)
    return (mean('avg'), mean('p99'), mean('rps'), sum(r['n'] for r in rs) / max(sum(r['j'] for r in rs), 1e-12),
            1e6 * sum(r['cpu'] for r in rs) / max(sum(r['n'] for r in rs), 1))
a, b = agg('adhoc'), agg('budget')
print('| %s | %.3f | %.3f | %.3f | %.2f | %.2f | %.0f | %.0f | %.4g | %.4g | %+.1f%% | %.0f | %.0f | %.3f | %.3f | %.4g | %.4g |' % (
    s, a[0], b[0], b[0] / a[0], a[1], b[1], a[2], b[2], a[3], b[3], 100 * (b[3] / a[3] - 1), a[4], b[4], sa, sb, ja, jb), flush=True)
print('<!-- %s: --overheads %s -->' % (s, sim['overheads']), flush=True)
PY
done
