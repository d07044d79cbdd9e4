#!/usr/bin/env bash
# closed-loop-check.sh: the budget policy against ad-hoc for synchronous
# clients (issue 32), live, in one proxy.
#
# Starts one emulator (--realism, default rough; --idle-watts as IDLE_WATTS)
# and one `ratebatch serve`, then for each concurrency runs perf_analyzer
# (tests/triton/perf_analyzer: HTTP, concurrency mode, the client waits for
# each answer before its next request) against adhoc and budget 1.10x,
# alternated REPS times. Per concurrency it prints one Markdown row: the
# mean of perf_analyzer's average latency per policy, their ratio, the
# throughput and requests per joule from the emulator's own counters
# (nv_inference_count over nv_energy_consumption).
#
#   RATEBATCH_VENV=/work/venv scripts/closed-loop-check.sh
#   CONCURRENCY="1 2 4 8 16 64" REPS=2 REALISM=rough IDLE_WATTS=20 scripts/closed-loop-check.sh
set -euo pipefail
RB=${RB:-bin/ratebatch}
PA=${PA:-tests/triton/perf_analyzer}
CONCURRENCY=${CONCURRENCY:-"1 2 4 8 16 64"}
REPS=${REPS:-2}
REALISM=${REALISM:-rough}
PRESET=${PRESET:-googlenet-p4}
IDLE_WATTS=${IDLE_WATTS:-0}
INTERVAL_MS=${INTERVAL_MS:-4000}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
P=$((20000 + RANDOM % 20000))
"$RB" emulate --listen 127.0.0.1:$P --metrics-listen 127.0.0.1:$((P + 2)) --realism "$REALISM" --preset "$PRESET" \
	--idle-watts "$IDLE_WATTS" >"$work/em.log" 2>&1 &
pids+=($!)
"$RB" serve --upstream http://127.0.0.1:$P --listen 127.0.0.1:$((P + 10)) --admin-listen 127.0.0.1:$((P + 12)) \
	--admin-token check --policy adhoc --power-source triton --power-metrics-url http://127.0.0.1:$((P + 2))/metrics \
	--log-level warn >"$work/serve.log" 2>&1 &
pids+=($!)
admin=http://127.0.0.1:$((P + 12))
for _ in $(seq 100); do
	curl -sf "$admin/status" 2>/dev/null | grep -q '"model": *"simple"' && break
	sleep 0.2
done
setpol() {
	local body='{"model":"simple","policy":"adhoc"}'
	[ "$1" = adhoc ] || body='{"model":"simple","policy":"budget","latency_budget":"1.10x"}'
	curl -sf -X PUT -H 'Authorization: Bearer check' "$admin/policy" -d "$body" >/dev/null
}
counters() { # inferences joules
	curl -sf "http://127.0.0.1:$((P + 2))/metrics" | python3 -c "
import re, sys
n = j = 0.0
for l in sys.stdin:
    if l.startswith('nv_inference_count{') and 'model=\"simple\"' in l: n += float(l.split()[-1])
    if l.startswith('nv_energy_consumption'): j += float(l.split()[-1])
print(n, j)"
}
echo "| concurrency | ad-hoc avg ms | budget 1.10x avg ms | x ad-hoc | ad-hoc req/s | budget req/s | ad-hoc req/J | budget req/J | vs ad-hoc req/J |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in $CONCURRENCY; do
	: >"$work/rows"
	for rep in $(seq "$REPS"); do
		for pol in adhoc budget; do
			setpol "$pol"
			sleep 1.5
			read -r n0 j0 < <(counters)
			"$PA" -m simple -u 127.0.0.1:$((P + 10)) -i http --concurrency-range "$c" --measurement-interval "$INTERVAL_MS" \
				--stability-percentage 999 --max-trials 3 -f "$work/pa.csv" >"$work/pa.out" 2>&1 || { tail -3 "$work/pa.out" >&2; continue; }
			read -r n1 j1 < <(counters)
			python3 - "$pol" "$work/pa.csv" "$n0" "$n1" "$j0" "$j1" >>"$work/rows" <<'PY'
import csv, json, sys
pol, f = sys.argv[1:3]
n0, n1, j0, j1 = map(float, sys.argv[3:7])
r = list(csv.DictReader(open(f)))[0]
lat = (int(r['Client Send']) + int(r['Network+Server Send/Recv']) + int(r['Server Queue']) + int(r['Server Compute Input'])
       + int(r['Server Compute Infer']) + int(r['Server Compute Output']) + int(r['Client Recv'])) / 1000
print(json.dumps({'policy': pol, 'avg': lat, 'rps': float(r['Inferences/Second']), 'n': n1 - n0, 'j': j1 - j0}))
PY
		done
	done
	python3 - "$c" "$work/rows" <<'PY'
import json, sys
c, f = sys.argv[1:3]
rows = [json.loads(l) for l in open(f)]
def agg(p):
    rs = [r for r in rows if r['policy'] == p]
    return (sum(r['avg'] for r in rs) / len(rs), sum(r['rps'] for r in rs) / len(rs),
            sum(r['n'] for r in rs) / max(sum(r['j'] for r in rs), 1e-12))
a, b = agg('adhoc'), agg('budget')
print('| %s | %.3f | %.3f | %.3f | %.0f | %.0f | %.4g | %.4g | %+.1f%% |' % (c, a[0], b[0], b[0] / a[0], a[1], b[1], a[2], b[2], 100 * (b[2] / a[2] - 1)), flush=True)
PY
done
