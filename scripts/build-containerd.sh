#!/usr/bin/env bash
# Builds containerd, its runc shim and ctr from github.com/containerd/
# containerd/v2 on the Go module proxy and caches the binaries by version
# outside the clone, so CI's fresh clones on the same machine reuse them
# (about 45 s on 2 cores). The runtime they drive is Debian's runc (apt,
# scripts/setup.sh). no_btrfs: the btrfs snapshotter needs libbtrfs headers
# and this host has no use for it.
#
# Usage: scripts/build-containerd.sh     prints the directory of the binaries
#                                        (containerd, containerd-shim-runc-v2, ctr)
# Env:   CONTAINERD_VERSION (v2.4.2), CONTAINERD_CACHE (/var/cache/podlab)
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin

version=${CONTAINERD_VERSION:-v2.4.2}
cache=${CONTAINERD_CACHE:-/var/cache/podlab}
dir=$cache/containerd-$version
bins=(containerd containerd-shim-runc-v2 ctr)

built() {
	local b
	for b in "${bins[@]}"; do [[ -x $dir/bin/$b ]] || return 1; done
}
if built; then
	echo "$dir/bin"
	exit 0
fi
[[ $version =~ ^v2\.[0-9]+\.[0-9]+$ ]] || {
	echo "build-containerd: CONTAINERD_VERSION $version is not v2.MINOR.PATCH" >&2
	exit 1
}

mkdir -p "$dir"
# One build at a time (CI and a developer on one machine): the second
# waits, then finds the first's.
exec {lock}>"$dir/.lock"
flock "$lock"
if built; then
	echo "$dir/bin"
	exit 0
fi
work=$(mktemp -d "$dir/bin.XXXXXX")
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

echo "build-containerd: building containerd $version (about a minute)" >&2
pkgs=()
for b in "${bins[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$b@$version"); done
# go install of a module@version ignores the clone's go.mod; GOFLAGS from the
# caller (-mod=vendor and the like) would not apply to it.
GOFLAGS= GOBIN=$work CGO_ENABLED=1 nice -n 10 go install -trimpath -tags no_btrfs \
	-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$version" "${pkgs[@]}"
for b in "${bins[@]}"; do
	[[ -x $work/$b ]] || {
		echo "build-containerd: go install gave no $b" >&2
		exit 1
	}
done
# One rename, so an interrupted build never leaves a partial bin/.
rm -rf "$dir/bin"
mv -T "$work" "$dir/bin"
trap - EXIT
echo "$dir/bin"
