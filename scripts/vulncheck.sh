#!/usr/bin/env bash
# Runs govulncheck ./... against the Go vulnerability database, offline.
#
# The database is not fetched from vuln.go.dev (not reachable from every
# machine that builds ratebatch) but built from the golang.org/x/vulndb
# module, which the Go module proxy serves like any module: its data/osv
# holds every report as OSV JSON, and vulndb's own cmd/indexdb turns that
# folder into the database govulncheck reads (-db file://...). The module
# version below is the database's date; bump it (and indexdb's pin in
# scripts/setup-go-tools.sh, the same version) to learn newer reports.
# The built database is kept in bin/tools/vulndb/VERSION (about 40 MB).
#
# What fails: a vulnerability in a required module that ratebatch's code
# reaches (govulncheck's symbol-level finding): `go get MODULE@FIXED`
# fixes it. A finding in the standard library is printed and fails only
# with VULNCHECK_STRICT=1: its fix is a newer Go release, which go.mod's
# toolchain line names and the machines that build ratebatch must have.
# Without the module proxy (no tool, no database) the check is skipped
# with a message, never failed: lint does not depend on the network.
#
# Usage: scripts/vulncheck.sh
# Env:   GO                 the go command (default go)
#        VULNCHECK_STRICT   1: standard-library findings fail too
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
vulndb=golang.org/x/vulndb
version=v0.0.0-20261105234957-e22db6528018

skip() {
	printf 'vulncheck: SKIPPED: %s\n' "$*" >&2
	exit 0
}

tools=$(GO=$go "$repo/scripts/setup-go-tools.sh" govulncheck indexdb 2>/dev/null) ||
	skip "govulncheck or indexdb could not be installed (no Go module proxy?)"
db=$tools/vulndb/$version
if [[ ! -s $db/index/db.json ]]; then
	# Downloaded outside the module, so go.mod and go.sum stay as they are.
	src=$(cd "$(mktemp -d)" && GOFLAGS= "$go" mod download -json "$vulndb@$version" 2>/dev/null |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	[[ -n $src && -d $src/data/osv ]] || skip "$vulndb@$version could not be downloaded (no Go module proxy?)"
	rm -rf "$db.tmp"
	"$tools/indexdb" -vulns "$src/data/osv" -out "$db.tmp" || { rm -rf "$db.tmp"; exit 1; }
	mv "$db.tmp" "$db"
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
(cd "$repo" && "$tools/govulncheck" -db "file://$db" ./...) >"$out" 2>&1
rc=$?
cat "$out"
case $rc in
0) exit 0 ;;
3) ;; # vulnerabilities found: which kind, below
*) echo "vulncheck: govulncheck failed (exit $rc)" >&2; exit 1 ;;
esac
# "Found in: PACKAGE@VERSION": a module's version starts with v, the
# standard library's with go.
modules=$(grep -E '^[[:space:]]+Found in: ' "$out" | grep -vE '@go[0-9]' | sort -u)
stdlib=$(grep -E '^[[:space:]]+Found in: ' "$out" | grep -E '@go[0-9]' | sort -u)
if [[ -n $modules ]]; then
	printf 'vulncheck: FAIL: vulnerable modules reached by the code (go get MODULE@FIXED):\n%s\n' "$modules" >&2
	exit 1
fi
if [[ -n $stdlib ]]; then
	printf 'vulncheck: the Go toolchain %s has advisories that reach the code; a newer Go release fixes them (toolchain line in go.mod):\n%s\n' \
		"$("$go" env GOVERSION)" "$stdlib" >&2
	[[ ${VULNCHECK_STRICT:-} == 1 ]] && exit 1
	echo "vulncheck: standard-library findings reported, not failed (VULNCHECK_STRICT=1 fails them)" >&2
fi
exit 0
