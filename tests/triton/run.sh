#!/usr/bin/env bash
# CI entry for the Triton compatibility tests: installs the Python side
# (scripts/setup-python.sh), then runs pytest on tests/triton against a real
# Triton server on loopback ports. Extra arguments go to pytest.
# Exits with pytest's status; leaves no server running, even when pytest is
# interrupted (every process group the fixtures started is recorded and
# stopped here if it outlived them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"

venv=$(scripts/setup-python.sh)

pids=$(mktemp "${TMPDIR:-/tmp}/ratebatch-triton-pids.XXXXXX")
export RATEBATCH_TEST_PIDS=$pids

# ours: a recorded group leader that is still our server.py, ratebatch or
# the wheel's tritonserver started directly (conformance.py)
ours() {
	local cmd
	cmd=$( (tr '\0' ' ' <"/proc/$1/cmdline") 2>/dev/null) || return 1
	[[ $cmd == *tests/triton/server.py* || $cmd == *ratebatch* || $cmd == *pytriton/tritonserver/bin/tritonserver* ]]
}

cleanup() {
	local pg left=()
	while read -r pg; do
		[[ $pg =~ ^[0-9]+$ ]] || continue
		if ours "$pg"; then
			echo "run.sh: stopping leftover process group $pg" >&2
			kill -TERM -- "-$pg" 2>/dev/null || true
			left+=("$pg")
		fi
	done <"$pids"
	if ((${#left[@]} > 0)); then
		for _ in $(seq 1 100); do # up to 10 s for a clean Triton shutdown
			local alive=0
			for pg in "${left[@]}"; do kill -0 -- "-$pg" 2>/dev/null && alive=1; done
			((alive)) || break
			sleep 0.1
		done
		for pg in "${left[@]}"; do kill -KILL -- "-$pg" 2>/dev/null || true; done
	fi
	rm -f "$pids"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

status=0
"$venv/bin/python" -m pytest tests/triton -q "$@" || status=$?
exit "$status"
