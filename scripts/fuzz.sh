#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each (default 30s).
set -euo pipefail
t=${1:-30s}
cd "$(dirname "$0")/.."
go list -f '{{.Dir}}' ./... | while read -r dir; do
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "== $dir $f ($t)"
    (cd "$dir" && go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" .)
  done
done
