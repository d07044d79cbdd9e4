#!/usr/bin/env bash
# Installs what `make generate` and the generated-code test
# (grpcproxy/inference) need: protoc (Debian's protobuf-compiler, with
# apt-get) and the Go plugins, at the versions the committed code was
# generated with, into $(repo)/bin/tools beside the lint tools. Idempotent:
# installs only what is missing or at another version.
#
# Usage: scripts/setup-proto.sh
# Env:   GO          the go command (default go)
#        TOOLS_BIN   where the plugins go (default $(repo)/bin/tools)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
bin=${TOOLS_BIN:-$repo/bin/tools}

# protoc-gen-go's version is google.golang.org/protobuf's in go.mod.
plugins=(
	"protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go v1.36.12"
	"protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.5.1"
)

if ! command -v protoc >/dev/null; then
	sudo=""
	[[ $(id -u) -ne 0 ]] && sudo=sudo
	printf 'setup-proto: installing protobuf-compiler with apt-get\n' >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq protobuf-compiler >/dev/null
fi

mkdir -p "$bin"
for p in "${plugins[@]}"; do
	read -r name pkg version <<<"$p"
	exe=$bin/$name
	if [[ -x $exe ]] && "$go" version -m "$exe" 2>/dev/null |
		awk -v v="$version" '$1 == "mod" && $3 == v { found = 1 } END { exit !found }'; then
		continue
	fi
	printf 'setup-proto: installing %s@%s into %s\n' "$pkg" "$version" "$bin" >&2
	GOBIN=$bin "$go" install "$pkg@$version"
done
echo "$bin"
