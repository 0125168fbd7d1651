#!/usr/bin/env bash
# demo-image.sh: build the image `podlab demo` runs, podlab-demo:latest: the
# busybox rootfs of scripts/busybox-rootfs.sh plus test/tlsprobe (a static Go
# TLS server and client) at /usr/local/bin/tlsprobe, imported with
# `bin/podlab image import`. Needs root, Go and a built bin/podlab.
# Idempotent: does nothing when the image exists, unless --force.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=podlab-demo:latest
say() { echo "demo-image: $*"; }

force=false
case "${1:-}" in
  --force) force=true ;;
  "") ;;
  *) echo "usage: scripts/demo-image.sh [--force]" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
  echo "demo-image.sh must run as root (sudo)" >&2
  exit 1
fi
[ -x bin/podlab ] || { echo "demo-image: bin/podlab not built (make build)" >&2; exit 1; }
if ! command -v go >/dev/null; then
  for d in /usr/local/go/bin /usr/lib/go/bin; do [ -x "$d/go" ] && PATH=$d:$PATH; done
fi

if ! $force && bin/podlab image ls 2>/dev/null | grep -q "^${IMAGE}[[:space:]]"; then
  say "image $IMAGE already imported"
  exit 0
fi
command -v go >/dev/null || { echo "demo-image: Go is required to build test/tlsprobe" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./scripts/busybox-rootfs.sh "$tmp/rootfs"
mkdir -p "$tmp/rootfs/usr/local/bin"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/rootfs/usr/local/bin/tlsprobe" ./test/tlsprobe
bin/podlab image import "$IMAGE" "$tmp/rootfs" >/dev/null
say "imported image $IMAGE (busybox + tlsprobe)"
