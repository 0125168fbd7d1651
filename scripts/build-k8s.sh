#!/usr/bin/env bash
# Builds the Kubernetes binaries a kubeadm node needs (kubeadm,
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
# kubectl) from k8s.io/kubernetes on the Go module proxy, in one go build so
# they share their compile work, with the recipe of scripts/build-kubelet.sh
# (drop go.work and the ./staging replaces, require the published k8s.io/*
# modules of the same minor). Cached by version outside the clone.
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
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || {
	echo "build-k8s: K8S_VERSION $version is not v1.MINOR.PATCH" >&2
	exit 1
}
staging=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}

mkdir -p "$out"
work=$(mktemp -d "$out/src.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

dir=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d $dir ]] || {
	echo "build-k8s: go mod download k8s.io/kubernetes@$version gave no module dir" >&2
	exit 1
}
cp -r "$dir/." "$work/"
chmod -R u+w "$work"
cd "$work"
rm -f go.work go.work.sum

edits=()
while read -r mod; do
	edits+=("-dropreplace=$mod" "-require=$mod@$staging")
done < <(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*|\1|p' go.mod)
[[ ${#edits[@]} -gt 0 ]] || {
	echo "build-k8s: found no ./staging replaces in k8s.io/kubernetes@$version's go.mod" >&2
	exit 1
}
go mod edit "${edits[@]}"

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
