#!/usr/bin/env bash
# Runs every Go fuzz target in the module (any package, any *_test.go with
# a `func FuzzX`) for the given time each (default 30s), one after the
# other, and prints one line per target with its executions. A failing
# target does not stop the others; the script fails at the end if any did
# (the failing input is kept in that package's testdata/fuzz, as go test
# does).
#
# Go before 1.27 can fail a target at the -fuzztime boundary with a bare
# "context deadline exceeded" and no input written: a race in the fuzzing
# coordinator (golang/go#75804, fixed in Go 1.27), not a finding (CI saw
# it once on FuzzVerifyAnswer under load). Such a run, and only such a
# run (no "Failing input written", no panic, no test error), is tried
# once more; a second one fails the target like any other failure.
#
# Usage: scripts/fuzz.sh [FUZZTIME [WORKERS]]   (make fuzz FUZZTIME=5m; CI: make fuzz-ci)
# WORKERS: go test's -parallel, the fuzzing processes per target (default
# GOMAXPROCS).
set -uo pipefail
t=${1:-30s}
workers=()
[[ -n ${2:-} ]] && workers=(-parallel "$2")
cd "$(dirname "$0")/.."
failed=()
n=0
# deadline_race LOG: the failure in LOG is only the coordinator's race.
deadline_race() {
	grep -q 'context deadline exceeded' "$1" &&
		! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$1"
}
while read -r dir; do
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		n=$((n + 1))
		rel=${dir#"$PWD"/}
		log=$(mktemp)
		# -ldflags=-w: no DWARF (a debugger's) in the binary linked per target.
		fuzz() { (cd "$dir" && go test -run '^$' -ldflags=-w -fuzz "^$f\$" -fuzztime "$t" "${workers[@]}" .) >"$log" 2>&1; }
		fuzz
		rc=$?
		# The race can strike a run again: up to three more tries.
		for try in 1 2 3; do
			((rc != 0)) && deadline_race "$log" || break
			echo "note $rel $f: the fuzzing coordinator's deadline race (golang/go#75804, no input written); try $try more"
			fuzz
			rc=$?
		done
		if ((rc == 0)); then
			echo "ok   $rel $f ($t): $(grep -o 'execs: [0-9]*' "$log" | tail -1)"
		else
			echo "FAIL $rel $f ($t)"
			cat "$log"
			failed+=("$rel $f")
		fi
		rm -f "$log"
	done
done < <(go list -f '{{.Dir}}' ./...)
echo "fuzz: $n targets, ${#failed[@]} failed"
((${#failed[@]} == 0))
