#!/usr/bin/env bash
# status-watch.sh: what the proxy plans and what it learns of its callers,
# read from /status while a Poisson load runs.
#
# Starts one emulator (--realism REAL) or, UPSTREAM=pytriton, a real
# Triton (tests/triton/server.py from the venv RATEBATCH_VENV: sleeps
# 4 + 0.5 b ms, B_max 16) and one `ratebatch serve` with POLICY (default
# budget; BUDGET its --latency-budget; SERVE_FLAGS more flags of serve, such as
# "--policy-slo-p99 10ms") on the simple model, offers Poisson arrivals at RATE for DUR
# seconds, and for every EVERY seconds prints one line (once the load is
# over: only curl runs while it does): the rule's note (the
# plan, its load and rho, the live trim), the callers as the dispatcher
# has learnt them (population by kind, think time, feedback score), the
# fitted line tau(b) = alpha b + tau0, and the round trip beyond compute and the round trips' spread (rule.outside:
# overhead line, service_scv, the timers' lateness), the planned and the lived p99 inside the proxy (decayed over about 70 plans),
# the phase and why (policies that earn their holds);
# the note cut at NOTE_CHARS, default 240. The
# arrivals come from `ratebatch load` (CLIENT=load) or from perf_analyzer
# replaying the same schedule (CLIENT=perf_analyzer, tests/triton's), or
# CONC synchronous clients of perf_analyzer (CONC=16: a closed loop; RATE
# is then unused). Last it prints the proxy's CPU time per request.
# UPSTREAM_GRPC=1 has the proxy send its batches over Triton's gRPC (as
# scripts/vs-triton.sh's proxies do); PYTRITON_FLAGS are more flags of the
# PyTriton (its dynamic batcher: "--dynamic-batching on --max-queue-delay-us 0").
# IDLE=S waits S seconds between the call that teaches the proxy the model
# and the load, as a benchmark that starts after a readiness check does.
# PROFILE=S takes a CPU profile of the proxy over S seconds from the
# second reading on (to PROFILE_OUT, default /tmp/status-watch.pprof;
# read it with `go tool pprof -top bin/ratebatch FILE`).
#
#   RATE=1910 scripts/status-watch.sh                        (the budget near saturation)
#   RATE=358 REAL=rough POLICY=adhoc scripts/status-watch.sh   (the callers' feedback)
#   RATE=358 CLIENT=perf_analyzer scripts/status-watch.sh
#   CONC=16 REAL=rough scripts/status-watch.sh                (a closed loop)
#   UPSTREAM=pytriton RATE=200 CLIENT=perf_analyzer scripts/status-watch.sh
#
# The capacity a plan read is its rate over its rho ("at 1961 req/s (rho
# 0.914)": 2,145 req/s of full batches).
set -euo pipefail
RB=${RB:-bin/ratebatch}
RATE=${RATE:-358}
REAL=${REAL:-exact}
POLICY=${POLICY:-budget}
DUR=${DUR:-40}
EVERY=${EVERY:-2}
CLIENT=${CLIENT:-load}
CONC=${CONC:-}
PA=${PA:-tests/triton/perf_analyzer}
UPSTREAM=${UPSTREAM:-emulator}
VENV=${RATEBATCH_VENV:-.venv}
# shellcheck source=scripts/upstream.sh
. "$(dirname "$0")/upstream.sh" # $work, pids, the cleanup on exit

P=$((20000 + RANDOM % 20000))
if [ "$UPSTREAM" = pytriton ]; then
	# shellcheck disable=SC2086 # the flags are words
	start_pytriton "$VENV" $P 4 0.5 ${PYTRITON_FLAGS:-}
else
	"$RB" emulate --listen 127.0.0.1:$P --metrics-listen 127.0.0.1:$((P + 2)) --realism "$REAL" --preset googlenet-p4 >"$work/em.log" 2>&1 &
	pids+=($!)
	sleep 0.5
fi
# shellcheck disable=SC2086 # SERVE_FLAGS are words
# The profiler asks for the admin token: one for this run, in the environment.
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
RATEBATCH_ADMIN_TOKEN=$token "$RB" serve --upstream http://127.0.0.1:$P --listen 127.0.0.1:$((P + 10)) --admin-listen 127.0.0.1:$((P + 12)) \
	${UPSTREAM_GRPC:+--upstream-grpc 127.0.0.1:$((P + 1))} --policy "$POLICY" ${BUDGET:+--policy-latency-budget "$BUDGET"} ${SERVE_FLAGS:-} --log-level warn --admin-pprof >"$work/serve.log" 2>&1 &
serve=$!
pids+=($serve)
admin=http://127.0.0.1:$((P + 12))
await_simple 127.0.0.1:$((P + 10)) "$admin"
sleep "${IDLE:-0}"
if [ -n "$CONC" ]; then
	CLIENT=concurrency
fi
case $CLIENT in
concurrency)
	"$PA" -m simple -u 127.0.0.1:$((P + 10)) -i http --concurrency-range "$CONC" \
		--measurement-interval $((DUR * 1000 / 4)) --stability-percentage 999 --max-trials 3 >"$work/pa.out" 2>&1 & ;;
load) "$RB" load --target http://127.0.0.1:$((P + 10)) --model simple --binary --rate "$RATE" --duration "${DUR}s" --json >"$work/load.json" & ;;
perf_analyzer)
	"$RB" load --rate "$RATE" --duration "${DUR}s" --write-intervals "$work/intervals" >/dev/null
	"$PA" -m simple -u 127.0.0.1:$((P + 10)) -i http --async --request-intervals "$work/intervals" \
		--measurement-interval $((DUR * 1000 / 4)) --stability-percentage 999 --max-trials 3 >"$work/pa.out" 2>&1 & ;;
*) echo "unknown CLIENT $CLIENT (load or perf_analyzer)" >&2; exit 2 ;;
esac
client=$!
pids+=("$client")
# Only curl runs while the load does: the samples are read after it (a
# Python started per sample takes enough of a two-core host to move the
# proxy's p99, as upstream.sh's watch_phases says).
for i in $(seq $((DUR / EVERY))); do
	sleep "$EVERY"
	curl -sf "$admin/status" -o "$work/status-$i.json" || true
	if [ -n "${PROFILE:-}" ] && [ "$i" -eq 2 ]; then
		# A CPU profile of the proxy over the next PROFILE seconds.
		curl -sf -H "Authorization: Bearer $token" -o "${PROFILE_OUT:-/tmp/status-watch.pprof}" "$admin/debug/pprof/profile?seconds=$PROFILE" &
		prof=$!
	fi
done
wait "$client" || true
[ -z "${prof:-}" ] || wait "$prof" || true
python3 - "$work" $((DUR / EVERY)) "$EVERY" "${NOTE_CHARS:-240}" <<'PY'
import json, os, sys
work, n, every, chars = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(1, n + 1):
    f = os.path.join(work, "status-%d.json" % i)
    try:
        d = json.load(open(f))
    except (OSError, ValueError):
        print("%3d s | no /status" % (i * every))
        continue
    rule = [m for m in d['models'] if m['model'] == 'simple'][0]['rule']
    q = [m for m in d.get('queues', []) if m.get('model') == 'simple']
    s = (q[0] if q else {}).get('sources', {})
    fb = s.get('feedback')
    think = s.get('think_ms')
    o = rule.get('outside') or {}
    print('%3d s | callers %s: %s closed-loop, %s open-loop, think %s ms, feedback %s | line %.3f b + %.3f ms, overhead %.3f + %.3f b ms, service scv %.3f, timers late %.2f ms | p99 planned %.2f, lived %.2f ms | %s: %s | %s' % (
        i * every, s.get('population'), s.get('closed_loop'), s.get('open_loop'),
        '-' if think is None else '%.1f' % think, '-' if fb is None else '%.2f' % fb,
        rule.get('alpha_ms', 0), rule.get('tau0_ms', 0), o.get('overhead_ms', 0), o.get('overhead_per_row_ms', 0), o.get('service_scv', 0),
        o.get('timer_late_ms', 0), rule.get('planned_p99_ms') or 0, rule.get('lived_p99_ms') or 0,
        rule.get('phase') or '-', (rule.get('phase_reason') or '')[:chars], rule.get('note', '')[:chars]))
PY
answered=$(curl -sf "$admin/metrics" | awk '/^ratebatch_requests_answered_total\{model="simple"/ {n += $2} END {print n + 0}')
ticks=$(awk '{print $14 + $15}' /proc/$serve/stat)
python3 -c "print('proxy: %d requests answered, %.1f s of CPU, %.0f µs per request' % ($answered, $ticks / $(getconf CLK_TCK), 1e6 * $ticks / $(getconf CLK_TCK) / max($answered, 1)))"

