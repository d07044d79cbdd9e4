#!/usr/bin/env bash
# The long soak: the proxy in front of the emulator with every kind of
# client at once (HTTP JSON and binary, gRPC, large bodies, a closed loop)
# while, every 20 s, the upstream is killed and restarted, answers 500,
# hangs, and the policy is switched (PUT /policy). It checks that every
# accepted request is answered exactly once, errors come only inside the
# fault windows, nothing panics, and RSS, live heap, goroutines and open
# files stay flat after the first cycle (server/soak_test.go).
#
#   scripts/soak.sh [DURATION] [RATE]      e.g. scripts/soak.sh 2h 300
#
# DURATION defaults to 30m, RATE (open-loop requests per second over the
# small-body clients) to 200. RACE=1 adds the race detector (slower). CI
# runs the same test for 60 s within `go test ./...`.
set -euo pipefail
duration=${1:-30m}
rate=${2:-200}
cd "$(dirname "$0")/.."
race=()
if [[ "${RACE:-0}" == 1 ]]; then race=(-race); fi
# The run lasts DURATION; the go test timeout (SOAK_TIMEOUT, default 24h,
# raise it for longer runs) only catches a hang.
export RATEBATCH_SOAK="$duration" RATEBATCH_SOAK_RATE="$rate"
exec go test "${race[@]}" -run '^TestSoak$' -count=1 -v -timeout "${SOAK_TIMEOUT:-24h}" ./server
