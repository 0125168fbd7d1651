# shellcheck shell=bash
# k8s_module_tree VERSION DIR: k8s.io/kubernetes at VERSION (v1.MINOR.PATCH)
# from the Go module proxy, copied into DIR and made buildable there.
#
# The module's zip on the proxy lacks its nested staging/ modules, and its
# go.mod replaces every k8s.io/* module with ./staging/...: in the copy,
# drop go.work/go.work.sum and those replaces and require the published
# k8s.io/* modules of the same minor (v1.34.4 -> v0.34.4). Used by
# build-kubelet.sh and build-k8s.sh; errors name $0.
k8s_module_tree() {
	local version=$1 work=$2 staging dir mod edits=()
	[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || {
		echo "$(basename "$0"): version $version is not v1.MINOR.PATCH" >&2
		return 1
	}
	staging=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
	dir=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $dir ]] || {
		echo "$(basename "$0"): go mod download k8s.io/kubernetes@$version gave no module dir" >&2
		return 1
	}
	cp -r "$dir/." "$work/"
	chmod -R u+w "$work"
	rm -f "$work/go.work" "$work/go.work.sum"
	while read -r mod; do
		edits+=("-dropreplace=$mod" "-require=$mod@$staging")
	done < <(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*|\1|p' "$work/go.mod")
	[[ ${#edits[@]} -gt 0 ]] || {
		echo "$(basename "$0"): found no ./staging replaces in k8s.io/kubernetes@$version's go.mod" >&2
		return 1
	}
	(cd "$work" && go mod edit "${edits[@]}")
}
