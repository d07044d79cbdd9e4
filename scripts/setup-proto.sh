#!/usr/bin/env bash
# Installs what `make generate` and the generated-code test
# (kserve/inference) need: protoc (Debian's protobuf-compiler, with
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

if ! command -v protoc >/dev/null; then
	sudo=""
	[[ $(id -u) -ne 0 ]] && sudo=sudo
	printf 'setup-proto: installing protobuf-compiler with apt-get\n' >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq protobuf-compiler >/dev/null
fi

# The Go plugins are pinned with the other Go tools.
scripts_dir=$(dirname "$0")
GO=$go TOOLS_BIN=$bin "$scripts_dir/setup-go-tools.sh" protoc-gen-go protoc-gen-go-grpc
