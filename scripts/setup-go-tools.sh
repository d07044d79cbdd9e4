#!/usr/bin/env bash
# Installs the project's Go tools, at pinned versions, into $(repo)/bin/tools,
# so a fresh clone (CI) lints and generates with the same tools as a
# developer's machine. Idempotent: a tool already installed at its pinned
# version is left alone. Prints the tools directory when done.
#
# Usage: scripts/setup-go-tools.sh [TOOL...]   (default: every tool below)
# Env:   GO          the go command (default go)
#        TOOLS_BIN   where the tools go (default $(repo)/bin/tools)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
bin=${TOOLS_BIN:-$repo/bin/tools}

# Each tool: the binary name, its package, the pinned module version. Bump a
# version here, not in the Makefile: the check below then reinstalls it.
# protoc-gen-go's version is google.golang.org/protobuf's in go.mod, the
# plugins' the versions the committed gRPC code was generated with.
# govulncheck and indexdb serve scripts/vulncheck.sh: indexdb builds the
# vulnerability database govulncheck reads from the golang.org/x/vulndb
# module, at the version that script pins (bump the two together).
tools=(
	"staticcheck honnef.co/go/tools/cmd/staticcheck v0.8.2"
	"govulncheck golang.org/x/vuln/cmd/govulncheck v1.9.0"
	"indexdb golang.org/x/vulndb/cmd/indexdb v0.0.0-20261105234957-e22db6528018"
	"protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go v1.36.12"
	"protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.5.1"
)

want=" $* "
mkdir -p "$bin"
for t in "${tools[@]}"; do
	read -r name pkg version <<<"$t"
	if (($# > 0)) && [[ $want != *" $name "* ]]; then
		continue
	fi
	exe=$bin/$name
	# `go version -m` prints the module line "mod <path> <version> <sum>";
	# a binary built by another Go or at another version is rebuilt.
	if [[ -x $exe ]] && "$go" version -m "$exe" 2>/dev/null |
		awk -v v="$version" '$1 == "mod" && $3 == v { found = 1 } END { exit !found }'; then
		continue
	fi
	printf 'setup-go-tools: installing %s@%s into %s\n' "$pkg" "$version" "$bin" >&2
	GOBIN=$bin "$go" install "$pkg@$version"
done
echo "$bin"
