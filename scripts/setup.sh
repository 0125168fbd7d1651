#!/usr/bin/env bash
# setup.sh: install what podlab needs on a fresh Debian/Ubuntu host, then
# build the CNI reference plugins from the containernetworking/plugins
# version pinned in go.mod into podlab's own CNI bin dir (never /opt/cni/bin).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

CNI_BIN_DIR=${CNI_BIN_DIR:-/opt/podlab/cni/bin}
PLUGINS=(loopback bridge host-local portmap)
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
CRICTL_BIN_DIR=${CRICTL_BIN_DIR:-/opt/podlab/bin}
# libseccomp-dev and pkg-config: podlab builds libcontainer with seccomp (cgo).
# docker-registry (the CNCF distribution registry) and apache2-utils
# (htpasswd): the pull e2e test runs a private TLS + htpasswd registry on
# 127.0.0.1; containerd: the CRI pull comparison runs a private one.
# stress-ng: make flake runs the unit tests beside it.
APT_PACKAGES=(iptables busybox-static iproute2 gcc make libc6-dev libseccomp-dev pkg-config ca-certificates util-linux runc
  docker-registry apache2-utils containerd stress-ng)

say() { echo "setup: $*"; }

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh must run as root (sudo)" >&2
  exit 1
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Packages that ship a service (docker-registry on :5000, containerd)
  # are installed without starting it: the tests start private instances.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"
  fi
  rc=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  [ -z "$policy" ] || rm -f "$policy"
  [ "$rc" = 0 ] || exit "$rc"
fi

if ! command -v go >/dev/null; then
  for d in /usr/local/go/bin /usr/lib/go/bin; do [ -x "$d/go" ] && PATH=$d:$PATH; done
fi
command -v go >/dev/null || { echo "setup: Go is required (https://go.dev/doc/install)" >&2; exit 1; }

version=$(go list -m -f '{{.Version}}' github.com/containernetworking/plugins)
stamp="$CNI_BIN_DIR/.podlab-plugins-$version"
if [ -f "$stamp" ] && for p in "${PLUGINS[@]}"; do [ -x "$CNI_BIN_DIR/$p" ] || exit 1; done; then
  say "CNI plugins $version already in $CNI_BIN_DIR"
else
  say "building CNI plugins $version (${PLUGINS[*]}) into $CNI_BIN_DIR"
  mkdir -p "$CNI_BIN_DIR"
  pkgs=()
  for p in "${PLUGINS[@]}"; do
    case $p in
      loopback|bridge) pkgs+=("github.com/containernetworking/plugins/plugins/main/$p@$version");;
      host-local) pkgs+=("github.com/containernetworking/plugins/plugins/ipam/$p@$version");;
      portmap) pkgs+=("github.com/containernetworking/plugins/plugins/meta/$p@$version");;
    esac
  done
  GOBIN="$CNI_BIN_DIR" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "${pkgs[@]}"
  rm -f "$CNI_BIN_DIR"/.podlab-plugins-*
  touch "$stamp"
fi
# crictl, the CRI client the e2e tests drive `podlab serve` with, pinned. A
# `go install` build says "version unknown"; the module version is in the
# binary's build info.
if [ "$(go version -m "$CRICTL_BIN_DIR/crictl" 2>/dev/null | awk '$1 == "mod" && $2 == "sigs.k8s.io/cri-tools" {print $3}')" = "$CRICTL_VERSION" ]; then
  say "crictl $CRICTL_VERSION already in $CRICTL_BIN_DIR"
else
  say "building crictl $CRICTL_VERSION into $CRICTL_BIN_DIR"
  mkdir -p "$CRICTL_BIN_DIR"
  GOBIN="$CRICTL_BIN_DIR" go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
fi
# critest, the CRI validation suite, pinned to crictl's version. It is a
# Go test binary: built with `go test -c` inside the module's directory in
# the module cache, its version stamped where `critest -version` prints it.
CRITEST_VERSION=${CRITEST_VERSION:-$CRICTL_VERSION}
if [ "$("$CRICTL_BIN_DIR/critest" -version 2>/dev/null | awk '/^critest version:/ {print $3}')" = "$CRITEST_VERSION" ]; then
  say "critest $CRITEST_VERSION already in $CRICTL_BIN_DIR"
else
  say "building critest $CRITEST_VERSION into $CRICTL_BIN_DIR"
  mkdir -p "$CRICTL_BIN_DIR"
  critest_src=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cri-tools@$CRITEST_VERSION" | awk -F'"' '$2 == "Dir" {print $4}')
  (cd "$critest_src" && GOFLAGS=-mod=mod go test -c -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRITEST_VERSION" \
    -o "$CRICTL_BIN_DIR/critest" ./cmd/critest)
fi
# The default busybox image, built from the host's static busybox, once
# podlab is built (make demo/test run setup, build, then this again).
if [ -x bin/podlab ]; then
  if bin/podlab image ls 2>/dev/null | grep -q '^busybox:latest'; then
    say "image busybox:latest already imported"
  else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    ./scripts/busybox-rootfs.sh "$tmp/rootfs"
    bin/podlab image import busybox:latest "$tmp/rootfs" >/dev/null
    say "imported image busybox:latest from $(command -v busybox)"
  fi
fi
# The demo's image podlab-demo:latest (busybox + test/tlsprobe), once podlab is built.
if [ -x bin/podlab ]; then ./scripts/demo-image.sh; fi
say "done"
