#!/usr/bin/env bash
# The long soak: the proxy in front of the emulator at a high steady rate
# with random upstream faults (500s, dropped connections, slow and hung
# batches, a restart every 20 s), checking that nothing is lost, the books
# balance, every 10 s window keeps a bounded p99, and nothing leaks.
#
#   scripts/soak.sh [DURATION] [RATE]      e.g. scripts/soak.sh 2h 800
#
# DURATION defaults to 30m, RATE (requests per second) to 500. RACE=1 adds
# the race detector (slower: keep RATE at 300 or below). CI runs the same
# test for 60 s within `go test ./...`.
set -euo pipefail
duration=${1:-30m}
rate=${2:-500}
cd "$(dirname "$0")/.."
race=()
if [[ "${RACE:-0}" == 1 ]]; then race=(-race); fi
# The run lasts DURATION; the go test timeout (SOAK_TIMEOUT, default 24h,
# raise it for longer runs) only catches a hang.
export RATEBATCH_SOAK="$duration" RATEBATCH_SOAK_RATE="$rate"
exec go test "${race[@]}" -run '^TestSoak$' -count=1 -v -timeout "${SOAK_TIMEOUT:-24h}" ./server
