#!/usr/bin/env bash
# Runs every Go fuzz target in the module (any package, any *_test.go with
# a `func FuzzX`) for the given time each (default 30s), one after the
# other, and prints one line per target with its executions. A failing
# target does not stop the others; the script fails at the end if any did
# (the failing input is kept in that package's testdata/fuzz, as go test
# does).
#
# Usage: scripts/fuzz.sh [FUZZTIME]   (make fuzz FUZZTIME=5m; CI: make fuzz-ci)
set -uo pipefail
t=${1:-30s}
cd "$(dirname "$0")/.."
failed=()
n=0
while read -r dir; do
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		n=$((n + 1))
		rel=${dir#"$PWD"/}
		log=$(mktemp)
		if (cd "$dir" && go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" .) >"$log" 2>&1; then
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
