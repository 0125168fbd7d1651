#!/bin/sh
# Regenerates runtime/shim/api from task.proto: protoc (Debian's
# protobuf-compiler) with protoc-gen-go and containerd's protoc-gen-go-ttrpc,
# at the versions go.mod pins.
set -eu
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go
GOBIN=$bin go install github.com/containerd/ttrpc/cmd/protoc-gen-go-ttrpc
PATH=$bin:$PATH protoc -I runtime/shim/api -I /usr/include \
	--go_out=paths=source_relative:runtime/shim/api \
	--go-ttrpc_out=paths=source_relative:runtime/shim/api \
	runtime/shim/api/task.proto
