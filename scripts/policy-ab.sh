#!/usr/bin/env bash
# policy-ab.sh: proxies side by side on one emulator, the same Poisson load
# sent to each in turn, round after round.
#
#   scripts/policy-ab.sh RATE DURATION ROUNDS VARIANT...
#   scripts/policy-ab.sh 1600 20s 3 "adhoc:--policy adhoc" \
#       "old@/tmp/rb-old:--policy budget --policy-latency-budget 1.10x" \
#       "new:--policy budget --policy-latency-budget 1.10x"
#
# A VARIANT is NAME[@BINARY]:SERVE-FLAGS: one `ratebatch serve` per variant
# (BINARY, default $RB or bin/ratebatch: a build of another commit compares
# code, not settings), all started at once and kept for the whole run, so
# each keeps what it learnt (fit, trim) from round to round as a long-lived
# proxy would. Each round sends `ratebatch load --binary --rate RATE
# --duration DURATION --seed ROUND` to each proxy in turn; on a shared
# machine the ratio within a round is the comparison, the rounds its spread.
# The emulator (REALISM, default exact; PRESET, default googlenet-p4; model
# MODEL, default simple; TAU_SCALE, default 1, times the preset's batch
# time) counts the energy. Per round and variant it prints
# the client's mean and p99 latency and requests per joule, with the steal
# time the host took meanwhile and its load average at the end (a
# disturbed round shows them), and what the proxy's /status says of the
# model then: the p99 its plan predicts and the p99 its calls lived inside
# it (decayed over the last seconds), and its phase (learning, holding,
# adhoc; policies that earn their holds); last, per variant, the ratio of
# its summed means to the first variant's and its requests per joule
# against the first's. With ROUNDS 1 every proxy is fresh: run it twice
# for two alternating repeats of a fresh proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
RB=${RB:-bin/ratebatch}
REALISM=${REALISM:-exact}
PRESET=${PRESET:-googlenet-p4}
MODEL=${MODEL:-simple}
TAU_SCALE=${TAU_SCALE:-1}
PORT=${PORT:-9500}
[[ $# -ge 4 ]] || { sed -n '2,21p' "$0" >&2; exit 2; }
rate=$1 dur=$2 rounds=$3
shift 3

work=$(mktemp -d "${TMPDIR:-/tmp}/policy-ab.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

"$RB" emulate --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$((PORT + 2))" \
	--realism "$REALISM" --preset "$PRESET" --tau-scale "$TAU_SCALE" >"$work/emulator.log" 2>&1 &
pids+=($!)
names=()
i=0
for v in "$@"; do
	head=${v%%:*} flags=${v#*:}
	name=${head%%@*} bin=$RB
	[[ $head == *@* ]] && bin=${head#*@}
	# shellcheck disable=SC2086 # the flags are words
	"$bin" serve --upstream "http://127.0.0.1:$PORT" --listen "127.0.0.1:$((PORT + 10 + 10 * i))" \
		--admin-listen "127.0.0.1:$((PORT + 12 + 10 * i))" $flags --log-level warn >"$work/$name.log" 2>&1 &
	pids+=($!)
	names+=("$name")
	i=$((i + 1))
done
for _ in $(seq 50); do
	curl -fsS "127.0.0.1:$((PORT + 12))/readyz" >/dev/null 2>&1 && break
	sleep 0.2
done

energy() { python3 scripts/promdelta.py '^nv_energy_consumption' <(curl -fsS "127.0.0.1:$((PORT + 2))/metrics"); }
steal() { awk '/^cpu /{print $9}' /proc/stat; }
for r in $(seq "$rounds"); do
	for i in "${!names[@]}"; do
		name=${names[$i]}
		e0=$(energy) s0=$(steal)
		"$RB" load --target "http://127.0.0.1:$((PORT + 10 + 10 * i))" --model "$MODEL" --binary \
			--rate "$rate" --duration "$dur" --seed "$r" --json >"$work/$name-$r.json"
		e1=$(energy) s1=$(steal)
		curl -fsS "127.0.0.1:$((PORT + 12 + 10 * i))/status" >"$work/$name-$r.status" 2>/dev/null || echo '{}' >"$work/$name-$r.status"
		python3 - "$work/$name-$r.json" "$r" "$name" "$e0" "$e1" "$s0" "$s1" "$(getconf CLK_TCK)" "$dur" "$work/$name-$r.status" "$MODEL" <<'EOF' | tee -a "$work/rows"
import json, sys
f, r, name, e0, e1, s0, s1, hz, dur, status, model = sys.argv[1:]
d = json.load(open(f))
secs = float(dur.rstrip('s'))
rule = ([m['rule'] for m in json.load(open(status)).get('models', []) if m.get('model') == model] or [{}])[0]
print('%s %s mean %.3f p99 %.2f ok %d req/J %.3f steal %.0f%% load %s | p99 planned %.2f lived %.2f ms, phase %s' % (
    r, name, d['mean_latency_ms'], d['p99_latency_ms'], d['ok'], d['ok'] / (float(e1) - float(e0)),
    100 * (int(s1) - int(s0)) / int(hz) / secs / 2, open('/proc/loadavg').read().split()[0],
    rule.get('planned_p99_ms') or 0, rule.get('lived_p99_ms') or 0, rule.get('phase') or '-'))
EOF
	done
done
python3 - "$work/rows" "${names[@]}" <<'EOF'
import collections, sys
rows = [l.split() for l in open(sys.argv[1])]
mean, rpj = collections.defaultdict(float), collections.defaultdict(list)
for f in rows:
    mean[f[1]] += float(f[3])
    rpj[f[1]].append(float(f[9]))
first = sys.argv[2]
for n in sys.argv[2:]:
    r = sum(rpj[n]) / len(rpj[n])
    r0 = sum(rpj[first]) / len(rpj[first])
    print('%s: mean %.3f ms over the rounds, %.3fx %s; %.3f req/J, %+.1f%%' % (
        n, mean[n] / len(rpj[n]), mean[n] / mean[first], first, r, 100 * (r / r0 - 1)))
EOF
