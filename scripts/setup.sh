#!/usr/bin/env bash
# setup.sh [demo|test|critest]: install what podlab needs on a fresh
# Debian/Ubuntu host for that purpose, then build the CNI reference plugins
# from the containernetworking/plugins version pinned in go.mod into
# podlab's own CNI bin dir (never /opt/cni/bin).
#
#   demo     what `make demo` needs: build tools, libseccomp, iptables,
#            busybox, the CNI plugins, the demo's images
#   test     (the default) that, plus what the tests drive: crictl, runc,
#            a registry and htpasswd for the pull tests, Debian's
#            containerd for the pull comparison, stress-ng for make flake
#   critest  that, plus critest (containerd 2.4 is built by critest.sh)
#
# A package that ships a service (containerd, docker-registry on :5000) is
# installed without it starting (policy-rc.d), and on a systemd host the
# units its install enabled are disabled again: the tests start private
# instances, and the host's set of enabled and running units stays as it
# was. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# --apt-packages: print the purpose's apt packages and exit (stock-vm.sh
# puts critest's, the superset, in its guest image).
PRINT_PACKAGES=0
if [ "${1:-}" = --apt-packages ]; then PRINT_PACKAGES=1; shift; fi
PURPOSE=${1:-test}
case $PURPOSE in
  demo | test | critest) ;;
  *) echo "usage: setup.sh [--apt-packages] [demo|test|critest]" >&2; exit 2;;
esac

CNI_BIN_DIR=${CNI_BIN_DIR:-/opt/podlab/cni/bin}
PLUGINS=(loopback bridge host-local portmap)
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
CRICTL_BIN_DIR=${CRICTL_BIN_DIR:-/opt/podlab/bin}
# libseccomp-dev and pkg-config: podlab builds libcontainer with seccomp (cgo).
APT_PACKAGES=(iptables busybox-static iproute2 gcc make libc6-dev libseccomp-dev pkg-config ca-certificates util-linux)
if [ "$PURPOSE" != demo ]; then
  # runc and crun: the tests run podlab's bundles with them too, as the
  # runc and crun runtime handlers (runc's 1.1.5, crun's 1.8.1); docker-registry and
  # apache2-utils (htpasswd): the pull e2e test runs a private TLS +
  # htpasswd registry on 127.0.0.1, critest one for its images;
  # containerd: the CRI pull comparison runs a private one; stress-ng:
  # make flake runs the unit tests beside it; curl: critest.sh,
  # bench-peers.sh and the kubelet scripts probe their servers with it.
  APT_PACKAGES+=(runc crun docker-registry apache2-utils containerd stress-ng curl)
fi
# The units those packages enable on install.
SERVICE_UNITS=(containerd.service docker-registry.service)
if [ "$PRINT_PACKAGES" = 1 ]; then
  echo "${APT_PACKAGES[@]}"
  exit 0
fi

say() { echo "setup: $*"; }

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh must run as root (sudo)" >&2
  exit 1
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# systemd_running: the host's PID 1 is systemd (not just installed).
systemd_running() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Which service units were enabled before, so that only what this
  # install enabled is disabled again.
  was_enabled=()
  if systemd_running; then
    for u in "${SERVICE_UNITS[@]}"; do
      if systemctl is-enabled --quiet "$u" 2>/dev/null; then was_enabled+=("$u"); fi
    done
  fi
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
  if systemd_running; then
    for u in "${SERVICE_UNITS[@]}"; do
      case " ${was_enabled[*]} " in *" $u "*) continue;; esac
      if systemctl is-enabled --quiet "$u" 2>/dev/null; then
        systemctl disable --quiet "$u"
        say "disabled $u (its package enables it; podlab's tests run private instances)"
      fi
    done
  fi
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
if [ "$PURPOSE" != demo ]; then
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
fi
# critest, the CRI validation suite, pinned to crictl's version. It is a
# Go test binary: built with `go test -c` inside the module's directory in
# the module cache, its version stamped where `critest -version` prints it.
CRITEST_VERSION=${CRITEST_VERSION:-$CRICTL_VERSION}
if [ "$PURPOSE" != critest ]; then
  :
elif [ "$("$CRICTL_BIN_DIR/critest" -version 2>/dev/null | awk '/^critest version:/ {print $3}')" = "$CRITEST_VERSION" ]; then
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
