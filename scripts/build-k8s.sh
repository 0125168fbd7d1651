#!/usr/bin/env bash
# Builds the Kubernetes binaries a kubeadm node needs (kubeadm,
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
# kubectl) from k8s.io/kubernetes on the Go module proxy, in one go build so
# they share their compile work, from the module made buildable as
# scripts/k8s/module.sh says. Cached by version outside the clone.
#
# Usage: scripts/build-k8s.sh        prints the directory holding the binaries
# Env:   K8S_VERSION (v1.34.4), K8S_CACHE (/var/cache/podlab)
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin

version=${K8S_VERSION:-v1.34.4}
cache=${K8S_CACHE:-/var/cache/podlab}
out=$cache/k8s-$version
cmds=(kubeadm kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl)

done=1
for c in "${cmds[@]}"; do [[ -x $out/$c ]] || done=; done
if [[ -n $done ]]; then
	echo "$out"
	exit 0
fi
[[ $version =~ ^v1\.[0-9]+\.[0-9]+$ ]] || {
	echo "build-k8s: K8S_VERSION $version is not v1.MINOR.PATCH" >&2
	exit 1
}
mkdir -p "$out"
work=$(mktemp -d "$out/src.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

. "$(dirname "$0")/k8s/module.sh"
k8s_module_tree "$version" "$work"
cd "$work"

# Static binaries (CGO_ENABLED=0, as the release builds them): the
# control-plane images hold nothing but the binary.
echo "build-k8s: building ${cmds[*]} $version (many minutes)" >&2
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("./cmd/$c"); done
mkdir -p "$work/bin"
CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath \
	-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitVersion=$version" \
	-o "$work/bin/" "${pkgs[@]}"
for c in "${cmds[@]}"; do mv "$work/bin/$c" "$out/$c"; done
echo "$out"
