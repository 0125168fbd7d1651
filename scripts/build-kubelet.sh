#!/usr/bin/env bash
# Builds the kubelet from k8s.io/kubernetes on the Go module proxy and caches
# the binary by version outside the clone, so CI's fresh clones on the same
# machine reuse it (the build takes about 6.5 min on 2 cores).
#
# The module's zip on the proxy lacks its nested staging/ modules, and its
# go.mod replaces every k8s.io/* module with ./staging/...: in a copy of the
# module, drop go.work/go.work.sum and those replaces and require the
# published k8s.io/* modules of the same minor (v1.34.4 -> v0.34.4).
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
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || {
	echo "build-kubelet: KUBELET_VERSION $version is not v1.MINOR.PATCH" >&2
	exit 1
}
staging=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}

mkdir -p "$cache/kubelet-$version"
work=$(mktemp -d "$cache/kubelet-$version/src.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

dir=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d $dir ]] || {
	echo "build-kubelet: go mod download k8s.io/kubernetes@$version gave no module dir" >&2
	exit 1
}
cp -r "$dir/." "$work/"
chmod -R u+w "$work"
cd "$work"
rm -f go.work go.work.sum

# Every "k8s.io/x => ./staging/src/k8s.io/x" replace becomes a requirement of
# the published module at the staging version.
edits=()
while read -r mod; do
	edits+=("-dropreplace=$mod" "-require=$mod@$staging")
done < <(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*|\1|p' go.mod)
[[ ${#edits[@]} -gt 0 ]] || {
	echo "build-kubelet: found no ./staging replaces in k8s.io/kubernetes@$version's go.mod" >&2
	exit 1
}
go mod edit "${edits[@]}"

echo "build-kubelet: building kubelet $version (several minutes)" >&2
GOFLAGS=-mod=mod nice -n 10 go build -trimpath \
	-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version" \
	-o "$out.tmp" ./cmd/kubelet
mv "$out.tmp" "$out"
echo "$out"
