#!/usr/bin/env bash
# Proxy overhead harness: offers the same open-loop Poisson load
# (`ratebatch load`, model `simple`, in three forms: HTTP with JSON tensors,
# HTTP with Triton's binary tensors, and KServe v2 gRPC with raw tensors)
# four ways in one run, and reports added latency and the highest
# sustainable rate as ratios:
#
#   direct       client -> emulator
#   nginx        client -> nginx (Debian's, reverse proxy) -> emulator
#   passthrough  client -> ratebatch serve --policy passthrough -> emulator
#   batching     client -> ratebatch serve --policy $POLICY -> emulator
#
# Two phases, each against its own emulator:
#   overhead  emulator --tau-scale 0 (batches take no time): what the proxy adds
#   e2e       emulator --preset $E2E_PRESET (real tau(b)): what a client sees
#
# Each phase runs a rate ladder per target and form: the first step
# ($LAT_RATE / $E2E_LAT_RATE, $LAT_DURATION long) gives the latency figures,
# then the rate goes up ($STEP_DURATION per step) until a step is not
# sustained. A step is SUSTAINED when at most 0.1% of the scheduled
# requests (and at least one may) were not answered 200 (dropped by the
# client or failed), and the p99 latency is at most $P99_BOUND_MS. The one
# allowed loss is for `ratebatch load`, which can drop the first arrival of
# a run when its workers have not all started yet (seen with PIN=1); an
# overloaded step loses hundreds. With RETRY=1 a
# step that fails is tried once more before the ladder stops (on a shared
# machine one burst of someone else's work can fail a step; the median over
# repeats already discounts one such ladder). The highest sustainable rate
# of a ladder is its last sustained step (0 if none). Every try is kept in
# runs.jsonl; the latency tables use the first try of the first step.
# Every step first offers its rate for $WARMUP on the connections it then
# uses, unrecorded (`ratebatch load --warmup`): a load generator started
# cold at 15,000 req/s opens its connections all at once, and the queue a
# proxy builds while it accepts them (and, passing through, dials the
# upstream for each) failed steps it sustains once they are open
# (docs/results/benchmarks.md, "The highest sustainable rate"). CPU per
# request counts the warm-up's requests with the step's.
# Ladders are repeated $REPEAT times, targets in a rotated order each time so
# that a change in the machine's background load hits every target alike;
# tables give medians over the repeats. Added latency is paired per repeat:
# p50(target) - p50(direct) of the same repeat and form, then the median.
#
# nginx: installed with apt-get if missing (apt-get update once when the
# package is unknown; a policy-rc.d that forbids starting services is put in
# place for the install if the system has none, so no system nginx starts).
# It runs in the foreground from a temporary prefix (-p, -c, pid, logs and
# temp paths there), listening on 127.0.0.1 only, with worker_processes equal
# to the CPUs it may use (2 here, as GOMAXPROCS of the Go proxy), upstream
# keepalive 256 (ratebatch keeps 256 idle upstream connections per host),
# proxy_http_version 1.1, access log off (ratebatch logs no requests).
# The gRPC form goes to each server's gRPC port: the emulator's
# (--grpc-listen), nginx's grpc_pass on an HTTP/2 listener (upstream
# keepalive 256, http2_max_concurrent_streams 1024 so that nginx, not the
# load generator's 4 connections, sets the limit), and both proxies'
# (--grpc-listen, --upstream-grpc the emulator's gRPC port; the
# passthrough proxy relays ModelInfer to it, the batching proxy batches it
# with the HTTP door's queues and sends batches over HTTP).
#
# CPU: the load generator runs on the same cores. Each run records the CPU
# time (utime+stime from /proc) of the client, the proxy (nginx: master and
# workers) and the emulator, as % of one core over the run's wall time,
# the proxy's user-mode share of it, and its threads' context switches
# (ctxt_switches of /proc/PID/task/*/status) per request.
# PIN=1 pins the client to CPU 0 and every server to CPU 1 (taskset); the
# default (PIN=0) leaves scheduling to the kernel, as in production.
#
# Usage: scripts/bench-proxy.sh [--quick] [--out DIR]
#   --quick   one repeat, shorter steps (a smoke run, ~1.5 minutes)
#   --out DIR where runs.jsonl, RESULTS.md, env.txt and logs go
#             (default: a new directory under ${TMPDIR:-/tmp}, printed)
# Environment (defaults in brackets):
#   BIN           ratebatch binary [built from this tree into the out dir]
#   REPEAT [3]  FORMS ["json binary grpc"]  PIN [0]  P99_BOUND_MS [100]
#   RETRY [0]               extra tries of a step that is not sustained
#   POLICY [adhoc]          batching policy (adhoc: work-conserving, so the
#                           figures are the proxy's, not a policy's waiting)
#   E2E_POLICY [$POLICY]    batching policy of the e2e phase
#   PROXY_FLAGS [""]        extra flags for both ratebatch serve processes
#   LAT_RATE [2000] LAT_DURATION [2s] STEP_DURATION [1.5s] WARMUP [0.5s]
#   RATES ["5000 10000 15000 20000 25000 30000 40000"]  ladder above LAT_RATE
#   E2E_PRESET [googlenet-p4] E2E_LAT_RATE [300]
#   E2E_RATES ["450 600 900 1200 1500 1800 2400"] E2E_FORMS ["binary grpc"]
#   NGINX_WORKERS [CPUs usable by the servers]
#   BASE_BIN      a second ratebatch binary (say, main's, before a change):
#                 adds the targets passthrough-base and batching-base, run
#                 from it with the same flags, so before and after are
#                 measured in one run against the same direct and nginx
#
# Needs: Debian (apt-get), go (unless BIN is given), jq and curl (installed
# with apt-get when missing). Loopback only. Stops everything it started on
# exit (trap). A manual command, not part of CI.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=""
quick=0
while (($#)); do
	case $1 in
	--quick) quick=1 ;;
	--out)
		out=${2:?--out needs a directory}
		shift
		;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "bench-proxy: unknown argument $1 (see --help)" >&2
		exit 2
		;;
	esac
	shift
done

REPEAT=${REPEAT:-3}
FORMS=${FORMS:-json binary grpc}
PIN=${PIN:-0}
P99_BOUND_MS=${P99_BOUND_MS:-100}
RETRY=${RETRY:-0}
POLICY=${POLICY:-adhoc}
E2E_POLICY=${E2E_POLICY:-$POLICY}
PROXY_FLAGS=${PROXY_FLAGS:-}
LAT_RATE=${LAT_RATE:-2000}
LAT_DURATION=${LAT_DURATION:-2s}
STEP_DURATION=${STEP_DURATION:-1.5s}
WARMUP=${WARMUP:-0.5s}
RATES=${RATES:-5000 10000 15000 20000 25000 30000 40000}
E2E_PRESET=${E2E_PRESET:-googlenet-p4}
E2E_LAT_RATE=${E2E_LAT_RATE:-300}
E2E_RATES=${E2E_RATES:-450 600 900 1200 1500 1800 2400}
E2E_FORMS=${E2E_FORMS:-binary grpc}
if ((quick)); then
	REPEAT=1 LAT_DURATION=2s STEP_DURATION=1s
fi
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || {
	echo "bench-proxy: REPEAT must be a positive integer, got $REPEAT" >&2
	exit 2
}

log() { printf 'bench-proxy: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# --- tools ---------------------------------------------------------------------
apt_updated=0
apt_install() { # PACKAGE...: installs what is missing, apt-get update once if needed
	local missing=() p
	for p; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	command -v apt-get >/dev/null || die "need ${missing[*]} and there is no apt-get: install them by hand"
	local sudo=()
	((EUID == 0)) || sudo=(sudo)
	if ((!apt_updated)) && ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
		log "apt-get update (package lists do not know ${missing[*]})"
		"${sudo[@]}" apt-get update -qq
		apt_updated=1
	fi
	# Installing must not start a system nginx on port 80: forbid service
	# starts for the install unless the system already has a policy.
	local policy=/usr/sbin/policy-rc.d made_policy=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
		"${sudo[@]}" chmod +x "$policy"
		made_policy=1
	fi
	log "apt-get install ${missing[*]}"
	local rc=0
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || rc=$?
	((made_policy)) && "${sudo[@]}" rm -f "$policy"
	((rc == 0)) || die "apt-get install ${missing[*]} failed ($rc)"
}

apt_install nginx jq curl
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x $NGINX ]] || die "nginx is not installed at $NGINX"

if [[ -z $out ]]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/ratebatch-bench-proxy.XXXXXX")
fi
mkdir -p "$out/logs" "$out/runs"
work=$(mktemp -d "${TMPDIR:-/tmp}/ratebatch-bench-work.XXXXXX")
chmod 755 "$work" # nginx workers may run as another user

if [[ -z ${BIN:-} ]]; then
	log "building ratebatch from $repo"
	(cd "$repo" && go build -o "$out/ratebatch" ./cmd/ratebatch)
	BIN=$out/ratebatch
fi
[[ -x $BIN ]] || die "BIN=$BIN is not an executable"

# --- processes -----------------------------------------------------------------
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

client_pin=() server_pin=()
if [[ $PIN == 1 ]]; then
	command -v taskset >/dev/null || die "PIN=1 needs taskset (util-linux)"
	client_pin=(taskset -c 0) server_pin=(taskset -c 1)
fi
server_cpus=$(nproc)
[[ $PIN == 1 ]] && server_cpus=1
NGINX_WORKERS=${NGINX_WORKERS:-$server_cpus}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
next_port=$((10000 + RANDOM % 20000)) # below the ephemeral range (32768+), where a port with only outgoing sockets looks free but cannot be bound
port() { # port VAR...: sets each VAR to a free loopback port
	local v
	for v; do
		while ! port_free "$next_port"; do next_port=$((next_port + 1)); done
		printf -v "$v" %d "$next_port"
		next_port=$((next_port + 1))
	done
}

# start NAME CMD...: runs CMD in the background on the server CPUs; sets $pid.
start() {
	local name=$1
	shift
	"${server_pin[@]}" "$@" >"$out/logs/$name.log" 2>&1 &
	pid=$!
	pids+=("$pid")
}

wait_ok() { # URL NAME: waits up to 20 s for a 200
	local i
	for ((i = 0; i < 200; i++)); do
		curl -sf -o /dev/null --max-time 1 "$1" && return 0
		sleep 0.1
	done
	die "$2 did not answer $1 in 20 s; see $out/logs/$2.log"
}

# cpu_ticks PID...: summed utime+stime of the processes (clock ticks),
# then their utime alone, then their threads' context switches (voluntary
# and not): each is a thread put to sleep or off its CPU, which the kernel
# charges for on both sides.
cpu_ticks() {
	local sum=0 user=0 sw=0 p f n
	for p; do
		f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		f=${f##*) } # fields from 3 on; comm may hold spaces
		set -- $f
		sum=$((sum + ${12} + ${13})) # fields 14 and 15
		user=$((user + ${12}))
		n=$(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }')
		sw=$((sw + n))
	done
	echo "$sum $user $sw"
}

declare -A url grpc_addr cpu_pids emu_pid admin admin_of

# target_args PHASE TARGET FORM: the load generator's flags for one target
# and form.
target_args() {
	case $3 in
	grpc) echo --protocol grpc --target "${grpc_addr[$1/$2]}" ;;
	binary) echo --target "${url[$1/$2]}" --binary ;;
	*) echo --target "${url[$1/$2]}" ;;
	esac
}

# phase_up PHASE EMULATOR_FLAGS BATCH_POLICY: starts an emulator, nginx and
# both proxies in front of it.
phase_up() {
	local phase=$1 emu_flags=$2 policy=$3
	local pe pm pn peg png
	port pe pm pn peg png
	# shellcheck disable=SC2086
	start "$phase-emulator" "$BIN" emulate --listen "127.0.0.1:$pe" --metrics-listen "127.0.0.1:$pm" \
		--grpc-listen "127.0.0.1:$peg" $emu_flags
	emu_pid[$phase]=$pid
	wait_ok "http://127.0.0.1:$pe/v2/health/ready" "$phase-emulator"
	url[$phase/direct]=http://127.0.0.1:$pe
	grpc_addr[$phase/direct]=127.0.0.1:$peg
	cpu_pids[$phase/direct]=""

	mkdir -p "$work/$phase"
	cat >"$work/$phase/nginx.conf" <<EOF
# written by scripts/bench-proxy.sh
daemon off;
master_process on;
worker_processes $NGINX_WORKERS;
$( ((EUID == 0)) && echo "user root;" || true)
pid $work/$phase/nginx.pid;
error_log $work/$phase/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $work/$phase/body;
  proxy_temp_path $work/$phase/proxy;
  fastcgi_temp_path $work/$phase/fastcgi;
  uwsgi_temp_path $work/$phase/uwsgi;
  scgi_temp_path $work/$phase/scgi;
  client_max_body_size 64m;        # ratebatch's limits.max_body_bytes
  client_body_buffer_size 1m;      # bodies stay in memory
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  upstream emulator {
    server 127.0.0.1:$pe;
    keepalive 256;
  }
  server {
    listen 127.0.0.1:$pn reuseport;
    location / {
      proxy_pass http://emulator;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
    }
  }
  upstream emulator_grpc {
    server 127.0.0.1:$peg;
    keepalive 256;
  }
  server {
    listen 127.0.0.1:$png http2 reuseport;
    http2_max_concurrent_streams 1024;
    location / {
      grpc_pass grpc://emulator_grpc;
    }
  }
}
EOF
	start "$phase-nginx" "$NGINX" -p "$work/$phase" -c "$work/$phase/nginx.conf" -e "$work/$phase/error.log"
	local master=$pid
	wait_ok "http://127.0.0.1:$pn/v2/health/ready" "$phase-nginx"
	url[$phase/nginx]=http://127.0.0.1:$pn
	grpc_addr[$phase/nginx]=127.0.0.1:$png
	cpu_pids[$phase/nginx]="$master $(ps -o pid= --ppid "$master" | tr '\n' ' ')"

	proxy_up "$phase" passthrough "$BIN" passthrough "$pe" "$peg"
	proxy_up "$phase" batching "$BIN" "$policy" "$pe" "$peg"
	admin[$phase]=${admin_of[$phase/batching]}
	if [[ -n ${BASE_BIN:-} ]]; then
		proxy_up "$phase" passthrough-base "$BASE_BIN" passthrough "$pe" "$peg"
		proxy_up "$phase" batching-base "$BASE_BIN" "$policy" "$pe" "$peg"
	fi
}

# proxy_up PHASE TARGET BINARY POLICY EMULATOR_PORT EMULATOR_GRPC_PORT:
# starts `BINARY serve` in front of the phase's emulator as TARGET.
proxy_up() {
	local phase=$1 target=$2 bin=$3 policy=$4 pe=$5 peg=$6 pl pa pg
	port pl pa pg
	# shellcheck disable=SC2086
	start "$phase-$target" "$bin" serve --upstream "http://127.0.0.1:$pe" --listen "127.0.0.1:$pl" \
		--admin-listen "127.0.0.1:$pa" --grpc-listen "127.0.0.1:$pg" --upstream-grpc "127.0.0.1:$peg" \
		--policy "$policy" --log-level warn $PROXY_FLAGS
	cpu_pids[$phase/$target]=$pid
	url[$phase/$target]=http://127.0.0.1:$pl
	grpc_addr[$phase/$target]=127.0.0.1:$pg
	admin_of[$phase/$target]=http://127.0.0.1:$pa
	wait_ok "http://127.0.0.1:$pa/readyz" "$phase-$target"
}

targets=(direct nginx passthrough batching)
[[ -n ${BASE_BIN:-} ]] && targets+=(passthrough-base batching-base)
ncpu_tick=$(getconf CLK_TCK)

# load PHASE TARGET FORM RATE DURATION REP STEP [TRY]: one run; appends a record
# to runs.jsonl and sets $sustained (1 or 0).
load() {
	local phase=$1 target=$2 form=$3 rate=$4 dur=$5 rep=$6 step=$7 try=${8:-1}
	local f="$out/runs/$phase-$target-$form-r$rep-$rate-t$try"
	local la s0 u0 w0 e0 t0 t1 s1 u1 w1 e1 cticks _
	la=$(cut -d' ' -f1 /proc/loadavg)
	read -r s0 u0 w0 < <(cpu_ticks ${cpu_pids[$phase/$target]})
	read -r e0 _ < <(cpu_ticks "${emu_pid[$phase]}")
	t0=$(date +%s%N)
	# The shell's cutime+cstime after the load command is its CPU time.
	cticks=$("${client_pin[@]}" sh -c '"$@" >"$0.json" 2>"$0.err"; read -r s </proc/$$/stat; set -- ${s##*) }; echo $((${14} + ${15}))' \
		"$f" "$BIN" load $(target_args "$phase" "$target" "$form") --model simple --rate "$rate" --duration "$dur" --warmup "$WARMUP" --json)
	t1=$(date +%s%N)
	read -r s1 u1 w1 < <(cpu_ticks ${cpu_pids[$phase/$target]})
	read -r e1 _ < <(cpu_ticks "${emu_pid[$phase]}")
	if ! jq -e .ok "$f.json" >/dev/null 2>&1; then
		log "load failed ($phase $target $form $rate/s): $(tail -n 3 "$f.err")"
		printf '{}' >"$f.json"
	fi
	local proxy_ticks=null proxy_user=null proxy_switches=null
	[[ -n ${cpu_pids[$phase/$target]} ]] && proxy_ticks=$((s1 - s0)) proxy_user=$((u1 - u0)) proxy_switches=$((w1 - w0))
	jq -c --arg phase "$phase" --arg target "$target" --arg form "$form" --argjson rate "$rate" \
		--argjson rep "$rep" --argjson step "$step" --argjson attempt "$try" --argjson loadavg "$la" \
		--argjson bound "$P99_BOUND_MS" --argjson wall_ns $((t1 - t0)) --argjson hz "$ncpu_tick" \
		--argjson client "$cticks" --argjson proxy "$proxy_ticks" --argjson proxy_user "$proxy_user" --argjson proxy_switches "$proxy_switches" --argjson emulator $((e1 - e0)) \
		'def pct(t): if t == null then null else (1000 * 100 * t / $hz / ($wall_ns / 1e9) | round) / 1000 end;
		 def sent: (.sent // 0) + (.warmup.sent // 0);
		 def usreq(t): if t == null or sent == 0 then null else (1000 * 1e6 * t / $hz / sent | round) / 1000 end;
		 {phase: $phase, target: $target, form: $form, rate: $rate, rep: $rep, step: $step, attempt: $attempt, loadavg: $loadavg,
		  client_cpu_pct: pct($client), proxy_cpu_pct: pct($proxy), emulator_cpu_pct: pct($emulator),
		  client_cpu_us_per_req: usreq($client), proxy_cpu_us_per_req: usreq($proxy), emulator_cpu_us_per_req: usreq($emulator),
		  proxy_user_us_per_req: usreq($proxy_user),
		  proxy_switches_per_req: (if $proxy_switches == null or sent == 0 then null else $proxy_switches / sent end),
		  sustained: (.scheduled != null and (.scheduled - .ok) <= ([1, 0.001 * .scheduled] | max) and .p99_latency_ms <= $bound),
		  load: .}' "$f.json" >>"$out/runs.jsonl"
	sustained=$(tail -n 1 "$out/runs.jsonl" | jq -r 'if .sustained then 1 else 0 end')
	tail -n 1 "$out/runs.jsonl" | jq -r '"\(.phase) r\(.rep) \(.form) \(.target) \(.rate)/s: ok \(.load.ok)/\(.load.scheduled) dropped \(.load.dropped_by_client) p50 \(.load.p50_latency_ms*1000|round/1000) p99 \(.load.p99_latency_ms*1000|round/1000) ms; cpu % client \(.client_cpu_pct) proxy \(.proxy_cpu_pct) emulator \(.emulator_cpu_pct); proxy \(.proxy_cpu_us_per_req) us/req; load \(.loadavg) -> \(if .sustained then "sustained" else "NOT sustained" end)"' >&2
}

# step PHASE TARGET FORM RATE DURATION REP STEP: a ladder step; a step that
# is not sustained is run once more ($RETRY times) before the ladder stops,
# so that one burst of the machine's background load does not end it.
step() {
	local try
	for ((try = 1; try <= 1 + RETRY; try++)); do
		load "$@" "$try"
		((sustained)) && return
		sleep 1 # let the backlog drain
	done
}

# ladder PHASE TARGET FORM REP FIRST_RATE "RATES": the latency step, then up
# the rates until one is not sustained.
ladder() {
	local phase=$1 target=$2 form=$3 rep=$4 first=$5 rates=$6 n=0 r
	step "$phase" "$target" "$form" "$first" "$LAT_DURATION" "$rep" $n
	((sustained)) || return 0
	for r in $rates; do
		n=$((n + 1))
		step "$phase" "$target" "$form" "$r" "$STEP_DURATION" "$rep" $n
		((sustained)) || return 0
	done
}

# run_phase PHASE LAT_RATE "RATES" "FORMS"
run_phase() {
	local phase=$1 first=$2 rates=$3 forms=$4 rep form i t
	for form in $forms; do # warm-up: connections, JIT-free but pools and caches
		for t in "${targets[@]}"; do
			# shellcheck disable=SC2046
			"${client_pin[@]}" "$BIN" load $(target_args "$phase" "$t" "$form") --model simple --rate "$first" --duration 1s \
				--json >/dev/null 2>&1 || log "warm-up of $t ($form) failed"
		done
	done
	for ((rep = 1; rep <= REPEAT; rep++)); do
		for form in $forms; do
			for ((i = 0; i < ${#targets[@]}; i++)); do
				t=${targets[$(((i + rep - 1) % ${#targets[@]}))]}
				ladder "$phase" "$t" "$form" "$rep" "$first" "$rates"
			done
		done
	done
}

# --- run -----------------------------------------------------------------------
start_s=$(date +%s)
: >"$out/runs.jsonl"
{
	echo "date: $(date -u +%FT%TZ)"
	echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "kernel: $(uname -r)"
	echo "go: $(go version 2>/dev/null || echo n/a)"
	echo "ratebatch: $("$BIN" version 2>/dev/null | head -n 1) ($BIN)"
	echo "nginx: $("$NGINX" -v 2>&1), worker_processes $NGINX_WORKERS"
	echo "git: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "pin: $([[ $PIN == 1 ]] && echo 'client on CPU 0, servers on CPU 1 (taskset)' || echo none)"
	echo "repeat: $REPEAT; forms: $FORMS (e2e: $E2E_FORMS); p99 bound: $P99_BOUND_MS ms"
	echo "overhead: emulator --tau-scale 0; batching policy $POLICY; ladder $LAT_RATE ($LAT_DURATION) then $RATES ($STEP_DURATION each, after a warm-up of $WARMUP)"
	echo "e2e: emulator --preset $E2E_PRESET; batching policy $E2E_POLICY; ladder $E2E_LAT_RATE ($LAT_DURATION) then $E2E_RATES ($STEP_DURATION each, after a warm-up of $WARMUP)"
	echo "proxy flags: ${PROXY_FLAGS:-none}"
	[[ -n ${BASE_BIN:-} ]] && echo "base: $("$BASE_BIN" version 2>/dev/null | head -n 1) ($BASE_BIN)"
	echo "uptime at start: $(uptime)"
} >"$out/env.txt"
cat "$out/env.txt" >&2

phase_up overhead "--tau-scale 0" "$POLICY"
phase_up e2e "--preset $E2E_PRESET" "$E2E_POLICY"
log "servers up; results in $out"

run_phase overhead "$LAT_RATE" "$RATES" "$FORMS"
curl -sf "${admin[overhead]}/status" >"$out/overhead-batching-status.json" || true
run_phase e2e "$E2E_LAT_RATE" "$E2E_RATES" "$E2E_FORMS"
curl -sf "${admin[e2e]}/status" >"$out/e2e-batching-status.json" || true
echo "uptime at end: $(uptime)" >>"$out/env.txt"
echo "wall time: $(($(date +%s) - start_s)) s" >>"$out/env.txt"

# --- tables --------------------------------------------------------------------
jq -rs --argjson bound "$P99_BOUND_MS" --argjson tries $((1 + RETRY)) --argjson targets "$(printf '%s\n' "${targets[@]}" | jq -R . | jq -s .)" -f /dev/stdin "$out/runs.jsonl" >"$out/RESULTS.md" <<'JQ'
def median: map(select(. != null)) | sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
def r(n): if . == null then "n/a" else (. * pow(10; n) | round) / pow(10; n) | tostring end;
def ratio(a; b): if a == null or b == null or b == 0 then null else a / b end;
def targets: $targets[];
def p50: .load.p50_latency_ms;
def p99: .load.p99_latency_ms;
. as $all
| ($all | map(.phase) | unique | sort_by(if . == "overhead" then 0 else 1 end)) as $phases
| "Medians over the repeats. Added latency and ratios are paired per repeat (target minus, or over, direct or nginx of the same repeat and form), then the median is taken. Sustainable: at most 0.1% (at least 1) of the scheduled requests not answered 200 and p99 <= \($bound) ms, \(if $tries == 1 then "on its one try" else "in one of \($tries) tries" end). CPU: % of one core over the run, and CPU time per request sent, warm-up included (client = the load generator; proxy = ratebatch, or nginx's master and workers); user: the proxy's user-mode share of it (the rest is the kernel's); switches: the proxy's threads' context switches per request.",
  "",
  ( $phases[] as $ph
  | ($all | map(select(.phase == $ph))) as $P
  | ($P | map(.form) | unique) as $forms
  | "### \($ph): latency at \($P | map(select(.step == 0)) | .[0].rate) req/s",
    "",
    "| form | target | p50 ms | p99 ms | added p50 ms | added p99 ms | p50 / direct | p99 / direct | p50 / nginx | p99 / nginx | proxy CPU us/req | CPU / nginx | user us/req | user / nginx | switches/req | client CPU % | proxy CPU % | emulator CPU % | load avg |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ( $forms[] as $f
    | ($P | map(select(.form == $f and .step == 0 and .attempt == 1))) as $L
    | targets as $t
    | ($L | map(select(.target == $t))) as $T
    # paired(base; f): median over repeats of f applied to [target run, base run]
    | def paired($base; f): [ $T[] as $x | ($L | map(select(.target == $base and .rep == $x.rep)) | .[0]) as $b
                             | select($b != null) | [$x, $b] | f ] | median;
      def vs($base; f; n): if $t == $base or ($base == "nginx" and $t == "direct") then "-" else paired($base; f) | r(n) end;
      "| \($f) | \($t) | \($T | map(p50) | median | r(3)) | \($T | map(p99) | median | r(3)) | \(vs("direct"; (.[0] | p50) - (.[1] | p50); 3)) | \(vs("direct"; (.[0] | p99) - (.[1] | p99); 3)) | \(vs("direct"; ratio(.[0] | p50; .[1] | p50); 2)) | \(vs("direct"; ratio(.[0] | p99; .[1] | p99); 2)) | \(vs("nginx"; ratio(.[0] | p50; .[1] | p50); 2)) | \(vs("nginx"; ratio(.[0] | p99; .[1] | p99); 2)) | \($T | map(.proxy_cpu_us_per_req) | median | r(0)) | \(vs("nginx"; ratio(.[0].proxy_cpu_us_per_req; .[1].proxy_cpu_us_per_req); 2)) | \($T | map(.proxy_user_us_per_req) | median | r(0)) | \(vs("nginx"; ratio(.[0].proxy_user_us_per_req; .[1].proxy_user_us_per_req); 2)) | \($T | map(.proxy_switches_per_req) | median | r(2)) | \($T | map(.client_cpu_pct) | median | r(0)) | \($T | map(.proxy_cpu_pct) | median | r(0)) | \($T | map(.emulator_cpu_pct) | median | r(0)) | \($T | map(.loadavg) | median | r(2)) |"
    ),
    "",
    "### \($ph): highest sustainable rate",
    "",
    "| form | target | max sustained req/s | per repeat | / direct | / nginx | proxy CPU us/req | CPU / nginx's at its max | user us/req | client CPU % | proxy CPU % | emulator CPU % | load avg |",
    "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ( $forms[] as $f
    | ($P | map(select(.form == $f))) as $F
    | ($F | map(.rep) | unique) as $reps
    | def best($t; $rep): [ $F[] | select(.target == $t and .rep == $rep and .sustained) | .rate ] | max // 0;
      def maxrate($t): [ $reps[] as $rep | best($t; $rep) ] | median;
      def pairedmax($t; $base): [ $reps[] as $rep | ratio(best($t; $rep); best($base; $rep)) ] | median;
      def atmax($t): maxrate($t) as $m | $F | map(select(.target == $t and .sustained and .rate == $m));
      (atmax("nginx") | map(.proxy_cpu_us_per_req) | median) as $cpun
    | targets as $t
    | maxrate($t) as $m
    | ($F | map(select(.target == $t and .sustained and .rate == $m))) as $at
    | "| \($f) | \($t) | \($m) | \([ $reps[] as $rep | best($t; $rep) | tostring ] | join(", ")) | \(if $t == "direct" then "-" else pairedmax($t; "direct") | r(2) end) | \(if $t == "nginx" or $t == "direct" then "-" else pairedmax($t; "nginx") | r(2) end) | \($at | map(.proxy_cpu_us_per_req) | median | r(0)) | \(if $t == "nginx" or $t == "direct" then "-" else ratio($at | map(.proxy_cpu_us_per_req) | median; $cpun) | r(2) end) | \($at | map(.proxy_user_us_per_req) | median | r(0)) | \($at | map(.client_cpu_pct) | median | r(0)) | \($at | map(.proxy_cpu_pct) | median | r(0)) | \($at | map(.emulator_cpu_pct) | median | r(0)) | \($at | map(.loadavg) | median | r(2)) |"
    ),
    ""
  )
JQ
cat "$out/RESULTS.md"
log "done in $(($(date +%s) - start_s)) s: $out/RESULTS.md, $out/runs.jsonl, $out/env.txt"
