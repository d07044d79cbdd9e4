#!/usr/bin/env bash
# Installs what `make generate` needs: protoc (Debian protobuf-compiler) and
# the Go plugins at the versions the committed code was generated with.
# Idempotent: installs only what is missing or at another version.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO=v1.36.12     # = google.golang.org/protobuf in go.mod
PROTOC_GEN_GO_GRPC=v1.5.1  # google.golang.org/grpc/cmd/protoc-gen-go-grpc

if ! command -v protoc >/dev/null; then
	sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq protobuf-compiler >/dev/null
fi

gobin="$(go env GOPATH)/bin"
have() { [ -x "$gobin/$1" ] && go version -m "$gobin/$1" 2>/dev/null | grep -q "mod.*$2"; }
have protoc-gen-go "$PROTOC_GEN_GO" || go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO"
have protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC" || go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"
echo "protoc $(protoc --version | cut -d' ' -f2), protoc-gen-go $PROTOC_GEN_GO, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC in $gobin"
