#!/usr/bin/env bash
# cluster.sh: a one-node Kubernetes cluster made by kubeadm, with podlab as
# its container runtime. Its control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) runs as static pods through
# podlab serve, kube-proxy and CoreDNS as the usual DaemonSet and
# Deployment, and pods get podlab's bridge network (10.77.0.0/16).
#
#   scripts/cluster.sh up     make the node (or find it made) and print the
#                             admin kubeconfig's path
#   scripts/cluster.sh down   remove everything up made; leave the host as
#                             up found it
#
# Both are idempotent. Root. Everything offline: the binaries are built
# from the Go module proxy and cached under /var/cache/podlab
# (scripts/build-k8s.sh, build-kubelet.sh, build-etcd-coredns.sh), the
# images kubeadm asks for are built from them (test/clusterimages) into a
# docker-registry on 127.0.0.1, which podlab's mirror config puts in front
# of registry.k8s.io. The apiserver advertises 10.78.0.1 on a dummy
# interface of its own (pods must reach the apiserver, and an Endpoints
# address may not be loopback); no traffic leaves the host.
#
# What up records of the host (sysctls, which dirs existed, cgroups) lives
# in $CLUSTER_DIR/host-state, written before anything changes; down undoes
# what it lists, so a failed up is undone by down.
#
# Env: CLUSTER_DIR (/var/lib/podlab-cluster), PODLAB (bin/podlab of the
# clone; podlab-pause and podlab-shim beside it), CLUSTER_ADDR (10.78.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/opt/podlab/bin
# shellcheck source=scripts/kubelet/lib.sh
. scripts/kubelet/lib.sh
# shellcheck source=scripts/peers/lib.sh
. scripts/peers/lib.sh

dir=${CLUSTER_DIR:-/var/lib/podlab-cluster}
addr=${CLUSTER_ADDR:-10.78.0.1}
link=podlab-k8s
# The node's runtime: podlab, or containerd 2.4 (scripts/build-containerd.sh
# and Debian's runc) for comparison on the same node shape (its own bridge
# and subnet: podlab0 holds 10.77.0.0/16 on the host).
# down takes the one up recorded.
runtime=${CLUSTER_RUNTIME:-$(cat "${CLUSTER_DIR:-/var/lib/podlab-cluster}/runtime" 2>/dev/null || echo podlab)}
case $runtime in
  podlab) sock=/run/podlab/podlab.sock pod_cidr=10.77.0.0/16 ;;
  containerd) sock=/run/podlab-cluster-containerd/containerd.sock pod_cidr=10.79.0.0/16 ;;
  *) echo "cluster.sh: CLUSTER_RUNTIME $runtime is neither podlab nor containerd" >&2; exit 2 ;;
esac
podlab_bin=${PODLAB:-$PWD/bin/podlab}
admin=/etc/kubernetes/admin.conf
k8s_version=v1.34.4
# Tracing: every component sends its spans to podlab serve's OTLP
# receiver (podlab serve --otlp-listen); while nothing listens there they
# drop them.
otlp=127.0.0.1:4317

# Dirs kubeadm, the kubelet, kube-proxy and this script make, removed by
# down when up found them absent.
CLUSTER_DIRS=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /var/log/pods /var/log/containers
  /usr/libexec/kubernetes /run/podlab /run/xtables.lock /etc/cni /opt/cni /run/containerd
  /run/podlab-cluster-containerd /var/lib/cni "$dir")
# Sysctls the kubelet, kube-proxy and podlab's bridge may change.
CLUSTER_SYSCTLS=("${KUBELET_SYSCTLS[@]}" vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.ipv4.ip_forward net.ipv4.conf.all.route_localnet
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables)

say() { printf '== %s\n' "$*" >&2; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"

bins() {
  k8s=$(scripts/build-k8s.sh)
  kubelet=$(scripts/build-kubelet.sh)
  { read -r etcd; read -r coredns; } < <(scripts/build-etcd-coredns.sh)
  # kubeadm's preflight runs `kubelet --version` from PATH.
  mkdir -p "$dir/bin"
  ln -sf "$kubelet" "$dir/bin/kubelet"
  export PATH=$dir/bin:$k8s:$PATH
}

kubectl() { command "$k8s/kubectl" --kubeconfig "$admin" "$@"; }

# ------------------------------------------------------------------ up
up() {
  [ -x "$podlab_bin" ] || die "$podlab_bin not built (make build)"
  say "binaries (built once, cached under /var/cache/podlab)"
  bins
  if [ -f "$dir/host-state" ]; then
    if [ -f "$admin" ] && kill -0 "$(cat "$dir/kubelet.pid" 2>/dev/null)" 2>/dev/null &&
      kubectl get nodes >/dev/null 2>&1; then
      say "the node is up"
      echo "$admin"
      return 0
    fi
    say "a partial node from an earlier up: taking it down first"
    down
  fi
  mkdir -p "$dir"
  save_host
  echo "$runtime" > "$dir/runtime"
  start_registry
  images
  case $runtime in
    podlab) start_podlab ;;
    containerd) start_containerd ;;
  esac
  add_link
  write_configs
  kubeadm_init
  addons
  say "node ready; KUBECONFIG=$admin $k8s/kubectl get nodes"
  echo "$admin"
}

save_host() {
  local state=$dir/host-state.tmp d top
  : > "$state"
  for s in "${CLUSTER_SYSCTLS[@]}"; do
    v=$(sysctl -n "$s" 2>/dev/null) && echo "sysctl $s $v" >> "$state"
  done
  for d in "${CLUSTER_DIRS[@]}" "${KUBELET_DIRS[@]}"; do
    top=
    while [ ! -e "$d" ]; do top=$d; d=$(dirname "$d"); done
    [ -n "$top" ] && echo "dir $top" >> "$state"
  done
  for h in /sys/fs/cgroup/*/; do
    [ -d "${h}kubepods" ] && echo "cgroup-kept ${h}kubepods" >> "$state"
  done
  sort -u "$state" > "$dir/host-state"
  rm -f "$state"
}

# start PIDFILE LOG CMD...: CMD in the background, in a session of its own
# (it outlives this script), its pid in PIDFILE.
start() {
  local pidfile=$1 log=$2
  shift 2
  setsid "$@" </dev/null >"$log" 2>&1 &
  echo $! > "$pidfile"
}

start_registry() {
  local port reg=/var/cache/podlab/cluster-registry
  for _ in $(seq 20); do
    port=$((20000 + RANDOM % 30000))
    ss -ltn | awk '{ print $4 }' | grep -q ":$port\$" || break
  done
  echo "127.0.0.1:$port" > "$dir/registry"
  mkdir -p "$reg"
  printf 'version: 0.1\nlog: {level: error, accesslog: {disabled: true}}\nstorage:\n  filesystem: {rootdirectory: %s}\nhttp:\n  addr: 127.0.0.1:%s\n  secret: podlab-cluster\n' \
    "$reg" "$port" > "$dir/registry.yml"
  start "$dir/registry.pid" "$dir/registry.log" docker-registry serve "$dir/registry.yml"
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "the registry did not start: $(tail -3 "$dir/registry.log")"
}

# images builds the images into the registry's storage when their
# builder or a binary changed.
images() {
  local reg stamp stampf=/var/cache/podlab/cluster-registry/images.stamp
  reg=$(cat "$dir/registry")
  stamp=$( { cat test/clusterimages/*.go; ls -l --time-style=+%s "$k8s"/kube-* "$etcd" "$coredns" "$(dirname "$podlab_bin")/podlab-pause"; } | sha256sum | cut -c1-16)
  [ "$(cat "$stampf" 2>/dev/null)" = "$stamp" ] && return 0
  say "building the control-plane images into the registry on $reg"
  go run ./test/clusterimages -registry "$reg" -k8s "$k8s" -k8s-version "$k8s_version" \
    -etcd "$etcd" -coredns "$coredns" -pause "$(dirname "$podlab_bin")/podlab-pause" >&2
  echo "$stamp" > "$stampf"
}

start_podlab() {
  local reg
  reg=$(cat "$dir/registry")
  # Images in a store of the node's own, removed by down; registry.k8s.io
  # through the loopback registry.
  cat > "$dir/podlab.yaml" <<EOF
stateDir: /run/podlab
imageDir: $dir/images
logDir: $dir/pod-logs
registry:
  hosts:
    registry.k8s.io:
      endpoints:
      - url: http://$reg
# The apiserver's, the kubelet's and etcd's spans, for podlab trace --pod.
otlp:
  listen: $otlp
EOF
  mkdir -p /run/podlab
  start "$dir/podlab.pid" "$dir/podlab-serve.log" "$podlab_bin" --config "$dir/podlab.yaml" serve --listen "unix://$sock"
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  die "podlab serve did not start: $(tail -5 "$dir/podlab-serve.log")"
}

# start_containerd: containerd 2.4 with the node's images through the same
# loopback registry (hosts.toml), its own bridge on $pod_cidr, cgroupfs,
# and the pause image kubeadm names as its sandbox image.
start_containerd() {
  local reg d=$dir/containerd ctd
  reg=$(cat "$dir/registry")
  ctd=$(scripts/build-containerd.sh)
  mkdir -p "$d/certs.d/registry.k8s.io" "$d/cni" "$(dirname "$sock")"
  printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$reg" "$reg" > "$d/certs.d/registry.k8s.io/hosts.toml"
  cat > "$d/cni/10-cluster.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "podlab-cluster-ctd", "plugins": [
  {"type": "bridge", "bridge": "plk8s0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$d/ipam", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
EOF
  # configured as scripts/critest.sh and the peers configure theirs:
  # containerd_config's top (root, state and opt under $d), then the CRI's
  { containerd_config 3 "$d" "$sock"; cat <<EOF; } > "$d/config.toml"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
  enable_tls_streaming = false
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'registry.k8s.io/pause:3.10.1'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '$d/certs.d'
[plugins.'io.containerd.cri.v1.runtime']
  # No CAP_SYS_RESOURCE on this VM: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/opt/podlab/cni/bin']
    conf_dir = '$d/cni'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '$(command -v runc)'
      SystemdCgroup = false
EOF
  PATH=$ctd:$PATH start "$dir/containerd.pid" "$dir/containerd.log" "$ctd/containerd" --config "$d/config.toml"
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  die "containerd did not start: $(tail -5 "$dir/containerd.log")"
}

add_link() {
  # A dummy device where the kernel has the module; else an ifb device (this
  # VM's kernel has no dummy), which holds a local address just as well.
  ip link show "$link" >/dev/null 2>&1 || ip link add "$link" type dummy 2>/dev/null ||
    ip link add "$link" type ifb
  ip addr replace "$addr/32" dev "$link"
  ip link set "$link" up
}

write_configs() {
  mkdir -p /etc/kubernetes/tracing
  cat > /etc/kubernetes/tracing/apiserver-tracing.yaml <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: TracingConfiguration
endpoint: $otlp
samplingRatePerMillion: 1000000
EOF
  # Pods' DNS upstream (CoreDNS forwards what is not cluster.local there):
  # the node's own address, where nothing answers, so that no query leaves
  # the host and no search domain of the host's is appended.
  echo "nameserver $addr" > "$dir/resolv.conf"
  cat > "$dir/kubeadm.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $addr
  bindPort: 6443
nodeRegistration:
  criSocket: unix://$sock
  name: $(hostname)
  imagePullPolicy: IfNotPresent
  # One node runs everything: no control-plane taint.
  taints: []
  kubeletExtraArgs:
  - {name: node-ip, value: "$addr"}
  # No preflight error needs ignoring on this host; kubeadm only warns:
  # Service-Kubelet (no systemd: this script starts the kubelet itself) and
  # SystemVerification (cgroup v1 "in maintenance mode": the host's
  # hybrid layout).
  ignorePreflightErrors: []
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $k8s_version
clusterName: podlab
networking:
  podSubnet: $pod_cidr
  serviceSubnet: 10.96.0.0/12
apiServer:
  extraArgs:
  - {name: bind-address, value: "$addr"}
  - {name: tracing-config-file, value: /etc/kubernetes/tracing/apiserver-tracing.yaml}
  extraVolumes:
  - {name: tracing, hostPath: /etc/kubernetes/tracing, mountPath: /etc/kubernetes/tracing, readOnly: true, pathType: Directory}
etcd:
  local:
    extraArgs:
    - {name: enable-distributed-tracing, value: "true"}
    - {name: distributed-tracing-address, value: "$otlp"}
    - {name: distributed-tracing-sampling-rate, value: "1000000"}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
resolvConf: $dir/resolv.conf
# The kubelet's own iptables chains are not needed: kube-proxy owns the
# node's rules.
makeIPTablesUtilChains: false
# The node's image store is its own, but a busy shared disk must not have
# the kubelet evict pods or delete images under test.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
tracing:
  endpoint: $otlp
  samplingRatePerMillion: 1000000
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $pod_cidr
iptables:
  # A Service's backend on the same bridge answers through the host, where
  # the DNAT is undone, whatever br_netfilter says.
  masqueradeAll: true
  # No route_localnet sysctl on the host.
  localhostNodePorts: false
# 0: leave the host's conntrack sysctls as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# kubeadm_init runs kubeadm init and, once its kubelet-start phase has
# written the kubelet's files (it says "Starting the kubelet" after them,
# and tries systemd), starts the kubelet as kubeadm's systemd drop-in
# (10-kubeadm.conf) would.
kubeadm_init() {
  say "kubeadm init --cri-socket unix://$sock"
  kubeadm init --config "$dir/kubeadm.yaml" >"$dir/kubeadm-init.log" 2>&1 &
  local init=$!
  for _ in $(seq 3000); do
    grep -q '^\[kubelet-start\] Starting the kubelet' "$dir/kubeadm-init.log" && break
    kill -0 "$init" 2>/dev/null || break
    sleep 0.2
  done
  if grep -q '^\[kubelet-start\] Starting the kubelet' "$dir/kubeadm-init.log"; then
    # shellcheck disable=SC1091
    . /var/lib/kubelet/kubeadm-flags.env
    # shellcheck disable=SC2086
    start "$dir/kubelet.pid" "$dir/kubelet.log" "$kubelet" \
      --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
      --kubeconfig=/etc/kubernetes/kubelet.conf \
      --config=/var/lib/kubelet/config.yaml $KUBELET_KUBEADM_ARGS
  fi
  if ! wait "$init"; then
    tail -40 "$dir/kubeadm-init.log" >&2
    die "kubeadm init failed (its log: $dir/kubeadm-init.log; the kubelet's: $dir/kubelet.log)"
  fi
  grep -E '^\[(preflight|WARNING)|Your Kubernetes control-plane' "$dir/kubeadm-init.log" >&2 || true
}

# addons waits for the node to be Ready, kube-proxy's DaemonSet and
# CoreDNS's Deployment to be available.
addons() {
  say "waiting for the node, kube-proxy and CoreDNS"
  kubectl wait --for=condition=Ready node --all --timeout=180s >&2
  kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=180s >&2
  kubectl -n kube-system rollout status deployment/coredns --timeout=180s >&2
  kubectl get nodes -o wide >&2
  kubectl get pods -A -o wide >&2
}

# ---------------------------------------------------------------- down
down() {
  if [ ! -f "$dir/host-state" ]; then
    say "no node made by cluster.sh up: nothing to do"
    return 0
  fi
  local rc=0
  [ -n "${k8s:-}" ] || bins
  say "stopping the kubelet"
  stop_pid "$dir/kubelet.pid"
  if [ -S "$sock" ] && [ -f "$dir/kubeadm.yaml" ]; then
    say "kubeadm reset"
    kubeadm reset --force --cri-socket "unix://$sock" >"$dir/kubeadm-reset.log" 2>&1 ||
      { tail -20 "$dir/kubeadm-reset.log" >&2; rc=1; }
  fi
  if [ -S "$sock" ]; then
    # What reset left (it stops and removes every pod through the CRI):
    # removed through podlab.
    local p
    for p in $("$podlab_bin" --config "$dir/podlab.yaml" pods -o json 2>/dev/null | awk -F'"' '/"id":/ { print $4 }'); do
      "$podlab_bin" --config "$dir/podlab.yaml" rm -f "$p" >/dev/null || rc=1
    done
  fi
  stop_pid "$dir/podlab.pid"
  stop_pid "$dir/containerd.pid"
  ip link del plk8s0 2>/dev/null || true
  stop_pid "$dir/registry.pid"
  [ -f "$dir/podlab.yaml" ] && { "$podlab_bin" --config "$dir/podlab.yaml" gc >/dev/null 2>&1 || rc=1; }
  say "kube-proxy's iptables rules"
  "$k8s/kube-proxy" --cleanup >/dev/null 2>&1 || true
  clean_kube_chains || rc=1
  ip link del "$link" 2>/dev/null || true
  say "the host as up found it"
  restore_host || rc=1
  rm -f "$dir/host-state"
  rm -rf "$dir"
  return $rc
}

# stop_pid PIDFILE: SIGTERM, then SIGKILL after 15 s.
stop_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

# clean_kube_chains removes every KUBE-* chain left in iptables and
# ip6tables (the kubelet's canaries, anything kube-proxy --cleanup left):
# the jumps to them first, then their rules, then the chains.
clean_kube_chains() {
  local ipt t r c
  for ipt in iptables ip6tables; do
    for t in filter nat mangle raw; do
      "$ipt" -t "$t" -S >/dev/null 2>&1 || continue
      "$ipt" -t "$t" -S | grep -E '^-A ' | grep -vE '^-A KUBE-' | grep -E -- '-j KUBE-' |
        while read -r r; do eval "$ipt -t $t ${r/-A/-D}"; done
      for c in $("$ipt" -t "$t" -S | awk '/^-N KUBE-/ { print $2 }'); do "$ipt" -t "$t" -F "$c"; done
      for c in $("$ipt" -t "$t" -S | awk '/^-N KUBE-/ { print $2 }'); do "$ipt" -t "$t" -X "$c"; done
    done
  done
  ! { iptables-save; ip6tables-save; } 2>/dev/null | grep -q 'KUBE-'
}

restore_host() {
  local ok=0 kind a b m
  # mounts the kubelet left under its root (reset unmounts them too), and
  # the root itself, which the kubelet bind-mounts onto itself to make it
  # a shared mount
  awk '$5 == "/var/lib/kubelet" || index($5, "/var/lib/kubelet/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" || true; done
  kubelet_restore_host "$dir/host-state" "" || ok=1
  while read -r kind a b; do
    [ "$kind" = dir ] && rm -rf "$a"
  done < "$dir/host-state"
  return $ok
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: scripts/cluster.sh up|down" >&2; exit 2 ;;
esac
