#!/usr/bin/env bash
# capacity-p99.sh: capacity under a p99 bound, as MLPerf's server scenario
# reports it: the highest Poisson rate whose 99th percentile latency stays
# under BOUND (`ratebatch load --find-rate-p99`), for each arm in the same
# run, on the emulator or on a real Triton.
#
#   UPSTREAM=emulator scripts/capacity-p99.sh      (REALISM exact, PRESET googlenet-p4, BOUND 15ms)
#   UPSTREAM=pytriton RATEBATCH_VENV=.venv scripts/capacity-p99.sh   (BOUND 80ms)
#   UPSTREAM=pytriton BOUND=60ms ROUNDS=2 DUR=10s START=300 scripts/capacity-p99.sh
#
# The arms: `ratebatch serve --policy adhoc` and the default policy, each
# in front of the same upstream, and one more proxy per entry of ARMS
# ("name:flags of serve", ';' between entries; e.g. ARMS="slo15:--policy-slo-p99
# 15ms" for the default held to the bound itself); with UPSTREAM=pytriton also the clients
# straight to Triton with its own dynamic batcher (max_queue_delay 0, its
# default; the proxies sit in front of that same Triton). PyTriton is
# tests/triton/server.py from the venv RATEBATCH_VENV: model simple, B_max
# PYTRITON_BMAX (16), each execution sleeping TAU0_MS + ALPHA_MS b ms (4 +
# 0.5 b). Each search starts at START req/s, runs steps of DUR (at least
# 200 arrivals), brackets and bisects to 5% and confirms with another
# seed. The arms run in turns, the order rotating each round, so that a
# drift of a shared machine falls on all of them; one Markdown row per arm
# and round: the capacity found, the lowest rate that missed, and the
# capacity as a ratio of ad-hoc's in that round; then each search's table
# of the rates it tried, their p99 and whether they passed, and for a
# proxy whose policy has phases (the default's learning, holding, adhoc)
# the phases /status showed through each step (sampled every second, the
# reason for adhoc in brackets), so a capacity under ad-hoc's can be told
# from a search whose holds cost it and from one that lost a step to noise.
set -euo pipefail
cd "$(dirname "$0")/.."
RB=${RB:-bin/ratebatch}
UPSTREAM=${UPSTREAM:-emulator}
ROUNDS=${ROUNDS:-1}
DUR=${DUR:-10s}
# A port of its own each run: a server of the run before may still hold
# the last one for a moment after it was told to stop.
P=${PORT:-$((20000 + RANDOM % 20000))}
# shellcheck source=scripts/upstream.sh
source scripts/upstream.sh

case $UPSTREAM in
emulator) BOUND=${BOUND:-15ms} START=${START:-500} ;;
*) BOUND=${BOUND:-80ms} START=${START:-400} ;;
esac
start_upstream capacity-p99.sh $P

# proxy NAME I FLAGS...: a `ratebatch serve` in front of the upstream,
# HTTP door P+10+10I, admin P+12+10I.
proxy() {
	local i=$2
	shift 2
	"$RB" serve --upstream http://127.0.0.1:$P --listen 127.0.0.1:$((P + 10 + 10 * i)) \
		--admin-listen 127.0.0.1:$((P + 12 + 10 * i)) --power-source none --log-level warn "$@" >"$work/serve$i.log" 2>&1 &
	pids+=($!)
	await_simple 127.0.0.1:$((P + 10 + 10 * i)) http://127.0.0.1:$((P + 12 + 10 * i))
}
proxy adhoc 0 --policy adhoc
proxy default 1
arms=("ratebatch-adhoc $((P + 10))" "ratebatch-default $((P + 20))")
i=2
IFS=';' read -ra more <<<"${ARMS:-}"
for a in "${more[@]}"; do
	[ -n "$a" ] || continue
	# shellcheck disable=SC2086 # the flags are words
	proxy "${a%%:*}" $i ${a#*:}
	arms+=("ratebatch-${a%%:*} $((P + 10 + 10 * i))")
	i=$((i + 1))
done
[ "$UPSTREAM" = pytriton ] && arms+=("triton-batcher $P")

# stamp: each line of stdin with the time it came first.
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }

# with_phases STAMPED PHASES: the search's output without its stamps, each
# step's row with the phases sampled since the row before it ended
# (PHASES as phases_of writes it).
with_phases() {
	python3 - "$1" "$2" <<'PY'
import os, sys
rows = [l.rstrip("\n").split(" ", 1) for l in open(sys.argv[1])]
samples = []
if os.path.exists(sys.argv[2]):
    for l in open(sys.argv[2]):
        t, phase, kind, _ = l.rstrip("\n").split("\t", 3)
        if phase != "-":
            samples.append((float(t), phase + (" (" + kind + ")" if kind != "-" else "")))
last = float(rows[0][0]) if rows else 0.0
for t, line in ((float(r[0]), r[1] if len(r) > 1 else "") for r in rows):
    step = line.startswith("| ") and line.split("|")[1].strip().isdigit()
    if samples and line.startswith("| step |"):
        line += " phases (a sample a second) |"
    elif samples and line.startswith("|---"):
        line += "---|"
    elif samples and step:
        seen, order = {}, []
        for ts, ph in samples:
            if last < ts <= t:
                if ph not in seen:
                    order.append(ph)
                seen[ph] = seen.get(ph, 0) + 1
        line += " " + (", ".join("%s %d s" % (ph, seen[ph]) for ph in order) or "-") + " |"
    if step:
        last = t
    print(line)
PY
}

echo "# Capacity with p99 under $BOUND, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "${what^}; \`ratebatch load --binary --find-rate-p99 $BOUND --rate $START --duration $DUR\`."
echo
echo "| round | arm | capacity req/s | lowest rate missed | vs ad-hoc |"
echo "|---|---|---:|---:|---:|"
n=${#arms[@]}
for r in $(seq "$ROUNDS"); do
	declare -A cap=()
	for k in $(seq 0 $((n - 1))); do
		read -r name port <<<"${arms[$(((k + r - 1) % n))]}"
		watcher=
		if [ "$name" != triton-batcher ]; then
			watch_phases "http://127.0.0.1:$((port + 2))" "$work/samples" &
			watcher=$!
		fi
		"$RB" load --target "http://127.0.0.1:$port" --model simple --binary --find-rate-p99 "$BOUND" \
			--rate "$START" --duration "$DUR" --seed "$r" 2>&1 | stamp >"$work/find-$name.ts" || true
		if [ -n "$watcher" ]; then
			kill "$watcher" 2>/dev/null || true
			wait "$watcher" 2>/dev/null || true
			phases_of "$work/samples" >"$work/phases-$name"
		fi
		with_phases "$work/find-$name.ts" "$work/phases-$name" >"$work/find-$name.txt"
		rm -f "$work/phases-$name"
		cap[$name]=$(sed -n -e 's/^capacity: \([0-9.e+]*\) req\/s .*(\([0-9.e+]*\) req\/s missed.*/\1 \2/p' \
			-e 's/^no rate tried.*/0 0/p' "$work/find-$name.txt")
		[ -n "${cap[$name]}" ] || { echo "capacity-p99.sh: $name gave no answer:" >&2; tail -5 "$work/find-$name.txt" >&2; cap[$name]="nan nan"; }
		{ echo; echo "Round $r, $name:"; echo; cat "$work/find-$name.txt"; } >>"$work/steps.md"
	done
	read -r base _ <<<"${cap[ratebatch-adhoc]}"
	for a in "${arms[@]}"; do
		name=${a%% *}
		read -r c above <<<"${cap[$name]}"
		awk -v r="$r" -v a="$name" -v c="$c" -v m="$above" -v b="$base" \
			'BEGIN { printf "| %s | %s | %.4g | %.4g | %s |\n", r, a, c, m, (b + 0 > 0) ? sprintf("%.2fx", c / b) : "n/a" }'
	done
done
echo
echo "## Each search's steps"
cat "$work/steps.md"
