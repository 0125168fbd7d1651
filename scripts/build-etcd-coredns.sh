#!/usr/bin/env bash
# Builds etcd (go.etcd.io/etcd/server/v3, whose root package is the etcd
# binary) and CoreDNS (github.com/coredns/coredns) from the Go module proxy,
# at the versions kubeadm v1.34 deploys (its constants: DefaultEtcdVersion
# 3.6.5-0, CoreDNSVersion v1.12.1), cached by version outside the clone.
#
# etcd's server module replaces its sibling modules with ../api and the
# like (its repository's layout, absent from the proxy's zip): in a copy,
# those replaces are dropped and the published modules of the same version
# required, as scripts/build-kubelet.sh does for k8s.io/kubernetes.
#
# Usage: scripts/build-etcd-coredns.sh   prints the etcd and coredns paths
# Env:   ETCD_VERSION (v3.6.5), COREDNS_VERSION (v1.12.1), K8S_CACHE (/var/cache/podlab)
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin

etcd_version=${ETCD_VERSION:-v3.6.5}
coredns_version=${COREDNS_VERSION:-v1.12.1}
cache=${K8S_CACHE:-/var/cache/podlab}

# build MODULE@VERSION OUT DROP-REPLACES: go build the module's root
# package into OUT in a writable copy of the module.
build() {
	local mv=$1 out=$2 fix=$3 work dir
	[[ -x $out ]] && return 0
	mkdir -p "$(dirname "$out")"
	work=$(mktemp -d "$(dirname "$out")/src.XXXXXX")
	dir=$(cd "$work" && go mod download -json "$mv" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $dir ]] || { echo "build-etcd-coredns: go mod download $mv gave no module dir" >&2; rm -rf "$work"; return 1; }
	cp -r "$dir/." "$work/"
	chmod -R u+w "$work"
	if [[ -n $fix ]]; then
		local edits=() mod
		while read -r mod; do
			edits+=("-dropreplace=$mod" "-require=$mod@${mv#*@}")
		done < <(sed -n 's|^[[:space:]]*\(go\.etcd\.io/[^[:space:]]*\) => \.\./.*|\1|p' "$work/go.mod")
		(cd "$work" && go mod edit "${edits[@]}")
	fi
	echo "build-etcd-coredns: building $mv (minutes)" >&2
	(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out.tmp" .) ||
		{ rm -rf "$work"; return 1; }
	mv "$out.tmp" "$out"
	rm -rf "$work"
}

build "go.etcd.io/etcd/server/v3@$etcd_version" "$cache/etcd-$etcd_version/etcd" fix
build "github.com/coredns/coredns@$coredns_version" "$cache/coredns-$coredns_version/coredns" ""
echo "$cache/etcd-$etcd_version/etcd"
echo "$cache/coredns-$coredns_version/coredns"
