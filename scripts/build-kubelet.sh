#!/usr/bin/env bash
# Builds the kubelet from k8s.io/kubernetes on the Go module proxy and caches
# the binary by version outside the clone, so CI's fresh clones on the same
# machine reuse it (the build takes about 6.5 min on 2 cores).
# The module is made buildable as scripts/k8s/module.sh says.
#
# Usage: scripts/build-kubelet.sh        prints the binary's path
# Env:   KUBELET_VERSION (v1.34.4), KUBELET_CACHE (/var/cache/podlab)
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin

version=${KUBELET_VERSION:-v1.34.4}
cache=${KUBELET_CACHE:-/var/cache/podlab}
out=$cache/kubelet-$version/kubelet

if [[ -x $out ]]; then
	echo "$out"
	exit 0
fi
[[ $version =~ ^v1\.[0-9]+\.[0-9]+$ ]] || {
	echo "build-kubelet: KUBELET_VERSION $version is not v1.MINOR.PATCH" >&2
	exit 1
}
mkdir -p "$cache/kubelet-$version"
work=$(mktemp -d "$cache/kubelet-$version/src.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

. "$(dirname "$0")/k8s/module.sh"
k8s_module_tree "$version" "$work"
cd "$work"

echo "build-kubelet: building kubelet $version (several minutes)" >&2
GOFLAGS=-mod=mod nice -n 10 go build -trimpath \
	-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version" \
	-o "$out.tmp" ./cmd/kubelet
mv "$out.tmp" "$out"
echo "$out"
