#!/usr/bin/env bash
# bench-peers.sh: run the same pod work with podlab and with the tools a user
# would otherwise pick, interleaved, and print a ratio table against podlab.
#
# Usage: sudo scripts/bench-peers.sh [--install] [-n N] [--warmup K] [--out DIR]
#                                    [--only PEER,...] [--podlab BIN]
#
#   --install   apt-get install the peers that are missing (runc, podman +
#               catatonit for its infra image); without it a missing peer is
#               skipped with a note. containerd 2.4 and ctr are built once
#               into the cache by scripts/build-containerd.sh (about 45 s).
#   -n N        measured rounds (default 20); every round runs every peer once
#   --warmup K  unmeasured rounds first (default 1: page cache, podman's infra
#               image build, the bridge creation)
#   --out DIR   keep the results there (default: a new /tmp/pbp-results.XXXXXX)
#   --only L    a subset of: floor runc cni scripted ctr podman podlab warm pull
#
# Peers, all on the same busybox rootfs (scripts/busybox-rootfs.sh), each
# with private state (runc --root, a containerd started here with its own
# config/root/state/socket, podman with its own CONTAINERS_CONF and
# --root/--runroot, podlab with its own --config and image store):
#   floor     unshare -n -p -f -i -u --mount-proc true
#   runc      runc run of a bundle (runc spec; rootfs, args ["true"], terminal false)
#   cni       ip netns add, cnitool ADD, cnitool DEL, ip netns del — podlab's
#             default conflist (podlab config → cni.conflist), same plugins
#   scripted  the scripted floor: ip netns add + cnitool ADD + runc run joined
#             to that netns (then DEL + netns del, for the full cycle)
#   ctr       ctr run --rm --rootfs --with-ns network:<pre-made netns> /bin/true
#   podman    podman pod create + run --pod P --rootfs true (+ infra) + pod rm -f
#   pull      image pull from one loopback registry (Debian's docker-registry
#             on 127.0.0.1, plain HTTP) of the same 4-layer image (busybox +
#             3 × 8 MiB layers, built and pushed by podman here), cold cache
#             each round, by podlab image pull, ctr image pull --plain-http
#             (the private containerd) and podman pull --tls-verify=false
#             (private storage), in rotating order; then a second image
#             sharing all but its last layer. Bytes transferred come from
#             the registry's access log.
#   podlab    podlab run -q (one busybox `true`, env + CA injection) → its
#             container has exited; podlab rm -f --stages
#   warm      the same podlab run, claiming a warm sandbox that `podlab pool
#             fill 1` made before the clock starts (issue 35: the pool's
#             refill is off the pod's path); a round whose pod was not
#             claimed fails
#
# Rounds are interleaved (A B C … A B C …, the starting peer rotating every
# round) so machine noise hits every peer alike. Times are wall-clock around
# each command (bash EPOCHREALTIME, µs); medians/p90 are nearest-rank.
#
# Output in DIR: samples.tsv (round, metric, µs), stats.tsv, table.md (the
# ratio table, also printed), targets.md, stages.md (podlab's per-stage
# breakdown from its own traces), machine.md, versions.md, notes.md.
#
# Cleans up after itself on any exit: netns, veths, leases, runc/containerd/
# podman state, cgroups, processes, and the host-wide leftovers those peers
# create (podman's cni-podman0 bridge, firewall chains, libpod_parent cgroup,
# /dev/shm/libpod_lock; containerd's /run/containerd/s), when they did not
# exist before the run.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO=$PWD
. scripts/peers/lib.sh

ALL_PEERS=(floor runc cni scripted ctr podman podlab warm pull)
N=20 WARMUP=1 INSTALL=0 OUT="" ONLY="" PODLAB=$REPO/bin/podlab
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --install) INSTALL=1;;
    -n) N=${2:?-n needs a number}; shift;;
    --warmup) WARMUP=${2:?--warmup needs a number}; shift;;
    --out) OUT=${2:?--out needs a directory}; shift;;
    --only) ONLY=${2:?--only needs a list}; shift;;
    --podlab) PODLAB=${2:?}; shift;;
    -h|--help) usage;;
    *) echo "bench-peers: unknown argument $1" >&2; usage 2 >&2;;
  esac
  shift
done
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "bench-peers: -n must be a positive integer" >&2; exit 2; }
[[ $WARMUP =~ ^[0-9]+$ ]] || { echo "bench-peers: --warmup must be an integer" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-peers: must run as root (sudo)" >&2; exit 1; }

# The script's own stdout/stderr, restored in the EXIT trap (a signal can
# land while a command's output is redirected to the tool log).
exec {OUT_FD}>&1 {ERR_FD}>&2
say() { echo "bench-peers: $*" >&2; }
NOTES=()
note() { NOTES+=("$*"); say "$*"; }

START_S=$SECONDS
# ---------------------------------------------------------------- install
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if [ "$INSTALL" = 1 ]; then
  # catatonit: podman builds its infra (pause) image from it, locally.
  want=(util-linux iproute2 busybox-static runc podman catatonit docker-registry)
  missing=()
  for p in "${want[@]}"; do pkg_installed "$p" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# ---------------------------------------------------------------- peers
declare -A ENABLED=()
if [ -n "$ONLY" ]; then
  for p in ${ONLY//,/ }; do
    [[ " ${ALL_PEERS[*]} " == *" $p "* ]] || { echo "bench-peers: unknown peer $p" >&2; exit 2; }
    ENABLED[$p]=1
  done
else
  for p in "${ALL_PEERS[@]}"; do ENABLED[$p]=1; done
fi
skip() { # skip PEER WHY
  [ -n "${ENABLED[$1]:-}" ] || return 0
  unset "ENABLED[$1]"
  note "skipped $1: $2"
}
have() { command -v "$1" >/dev/null 2>&1; }
hint=" (run with --install)"
have unshare || skip floor "unshare not found$hint"
# containerd 2.4 (its shim and ctr too), first in PATH: containerd looks its
# shim up there before its own dir.
if [ -n "${ENABLED[ctr]:-}${ENABLED[pull]:-}" ]; then
  if CTD_BIN=$(scripts/build-containerd.sh); then
    PATH=$CTD_BIN:$PATH
  else
    skip ctr "scripts/build-containerd.sh failed"; skip pull "scripts/build-containerd.sh failed"
  fi
fi
have busybox || { echo "bench-peers: busybox-static is needed for the rootfs$hint" >&2; exit 1; }
have runc || { skip runc "runc not found$hint"; skip scripted "runc not found$hint"; }
have ip || { skip cni "ip (iproute2) not found$hint"; skip scripted "ip not found$hint"; skip ctr "ip not found$hint"; }
if ! have containerd || ! have ctr || ! have containerd-shim-runc-v2 || ! have runc; then
  skip ctr "containerd/ctr/containerd-shim-runc-v2/runc not all found$hint"
fi
if ! have podman || ! have runc || ! have conmon; then
  skip podman "podman/conmon/runc not all found$hint"
elif ! have catatonit; then
  skip podman "catatonit not found: podman builds its infra image from it$hint"
fi
if ! have docker-registry || ! have podman || ! have containerd || ! have ctr; then
  skip pull "docker-registry, podman and containerd/ctr are all needed$hint"
fi
if [ ! -x "$PODLAB" ]; then
  skip podlab "$PODLAB not built (make build)"; skip pull "$PODLAB not built (make build)"
fi
pod_peers=0
for p in floor runc cni scripted ctr podman; do [ -n "${ENABLED[$p]:-}" ] && pod_peers=1; done
if [ -z "${ENABLED[podlab]:-}" ] && { [ "$pod_peers" = 1 ] || [ -z "${ENABLED[pull]:-}" ]; }; then
  echo "bench-peers: podlab is the reference of every ratio: it cannot be skipped" >&2; exit 1
fi

# podlab's network: its binDirs and its default conflist, for cnitool.
CNI_BIN=$("$PODLAB" config | awk '/^  binDirs:/ { b = 1; next } b && /^  - / { print $2; exit }')
CNI_BIN=${CNI_BIN:-/opt/podlab/cni/bin}
CONFLIST=$("$PODLAB" config | awk '/^  conflist: \|/ { c = 1; next } c && /^    / { sub(/^    /, ""); print; next } c { exit }')
NETNAME=$(printf '%s\n' "$CONFLIST" | awk -F'"' '/"name"/ { print $4; exit }')
if [ -n "${ENABLED[cni]:-}${ENABLED[scripted]:-}" ]; then
  if [ -z "$CONFLIST" ] || [ -z "$NETNAME" ]; then
    skip cni "no cni.conflist in \`podlab config\` (cni.confDir set?)"; skip scripted "no cni.conflist"
  else
    for p in $(printf '%s\n' "$CONFLIST" | awk -F'"' '/"type"/ { print $4 }'); do
      [ -x "$CNI_BIN/$p" ] || { skip cni "CNI plugin $CNI_BIN/$p missing (make setup)"; skip scripted "CNI plugin $p missing"; break; }
    done
  fi
fi

# cnitool, built from the containernetworking/cni version pinned in go.mod
# into a private cache (never on PATH).
CNI_VERSION=$(awk '$1 == "github.com/containernetworking/cni" { print $2; exit }' go.mod)
CACHE=${PODLAB_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podlab-peers}
CNITOOL=$CACHE/cnitool-$CNI_VERSION/cnitool
GO=$(command -v go || ls /usr/local/go/bin/go 2>/dev/null || true)
if [ -n "${ENABLED[cni]:-}${ENABLED[scripted]:-}" ] && [ ! -x "$CNITOOL" ]; then
  if [ -z "$GO" ]; then
    skip cni "cnitool not built and Go not found"; skip scripted "cnitool not built and Go not found"
  else
    say "building cnitool $CNI_VERSION into $(dirname "$CNITOOL")"
    (cd / && GOBIN=$(dirname "$CNITOOL") GOFLAGS='' "$GO" install "github.com/containernetworking/cni/cnitool@$CNI_VERSION") ||
      { skip cni "cnitool build failed"; skip scripted "cnitool build failed"; }
  fi
fi

PEERS=()
for p in "${ALL_PEERS[@]}"; do [ -n "${ENABLED[$p]:-}" ] && PEERS+=("$p"); done

# ---------------------------------------------------------------- work dirs
# Names avoid "podlab" (other engineers' leak checks grep for it) and carry
# our pid, so concurrent runs and leftovers are told apart.
TAG=pbp$$
WORK=$(mktemp -d /tmp/pbp.XXXXXX)
trap 'rm -rf "$WORK"' EXIT   # until the full cleanup below is armed
if [ -z "$OUT" ]; then OUT=$(mktemp -d /tmp/pbp-results.XXXXXX); fi
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
# a previous run's results in the same DIR (only the files this script writes)
rm -rf "$OUT/podlab" "$OUT"/{samples,stats,stages,stages.samples}.tsv "$OUT/stages.order" \
  "$OUT"/{table,targets,stages,machine,versions,notes,pull-bytes}.md "$OUT/pull-bytes.tsv"
LOG=$WORK/tools.log; : > "$LOG"
ROOTFS=$WORK/rootfs
exec {SAMPLES_FD}>"$OUT/samples.tsv"
open_sleep_fd "$WORK"
# A snapshot of podlab (and the pause next to it): bin/ may be rebuilt while
# we run, and every round must use the same binary.
snapshot_podlab "$PODLAB" "$WORK/bin"; PODLAB=$WORK/bin/podlab

# Host-wide things the peers may create, and whether they existed before.
declare -A PRE=()
pre() { if eval "$2" >/dev/null 2>&1; then PRE[$1]=1; else PRE[$1]=0; fi; }
pre run_containerd '[ -e /run/containerd ]'
pre run_containerd_s '[ -e /run/containerd/s ]'
pre run_runc '[ -e /run/runc ]'
pre shm_libpod '[ -e /dev/shm/libpod_lock ]'
pre cni_podman0 'ip link show cni-podman0'
pre cni_forward 'iptables -w -n -L CNI-FORWARD'
pre cni_admin 'iptables -w -n -L CNI-ADMIN'
pre libpod_parent '[ -d /sys/fs/cgroup/memory/libpod_parent ] || [ -d /sys/fs/cgroup/unified/libpod_parent ] || [ -d /sys/fs/cgroup/libpod_parent ]'
pre cni_podman_dir '[ -e /var/lib/cni/networks/podman ]'
pre var_lib_containers '[ -e /var/lib/containers ]'

CONTAINERD_PID=""
REGISTRY_PID=""
PODLAB_PODS=()
cleanup_done=0
cleanup() {
  local rc=$?
  [ "$cleanup_done" = 1 ] && return
  cleanup_done=1
  set +e
  exec 1>&"$OUT_FD" 2>&"$ERR_FD"
  trap - INT TERM
  say "cleaning up"
  # podlab pods (idempotent; -f: a missing pod is fine)
  if [ ${#PODLAB_PODS[@]} -gt 0 ]; then
    "$PODLAB" --config "$PL_CFG" rm -f "${PODLAB_PODS[@]}" >>"$LOG" 2>&1
  fi
  [ -z "${PL_CFG:-}" ] || "$PODLAB" --config "$PL_CFG" pool drain >>"$LOG" 2>&1
  # runc containers under our private root
  if [ -d "$WORK/runc" ]; then
    for c in $(runc --root "$WORK/runc" list -q 2>/dev/null); do runc --root "$WORK/runc" delete -f "$c" >>"$LOG" 2>&1; done
  fi
  # podman: everything in our private storage, then its host-wide leftovers
  if [ -n "${PM_CONF:-}" ] && [ -e "$PM_CONF" ]; then
    pm pod rm -fa >>"$LOG" 2>&1
    pm rm -fa >>"$LOG" 2>&1
    pm system reset -f >>"$LOG" 2>&1
  fi
  # the pull peer's registry
  if [ -n "$REGISTRY_PID" ]; then kill "$REGISTRY_PID" 2>/dev/null; wait "$REGISTRY_PID" 2>/dev/null; fi
  # containerd: tasks and containers of our namespace, then the daemon
  if [ -n "$CONTAINERD_PID" ]; then
    for c in $(cctr containers ls -q 2>/dev/null); do
      cctr tasks kill -s SIGKILL "$c" >>"$LOG" 2>&1; sleep 0.1
      cctr tasks rm -f "$c" >>"$LOG" 2>&1; cctr containers rm "$c" >>"$LOG" 2>&1
    done
    kill -TERM "$CONTAINERD_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$CONTAINERD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$CONTAINERD_PID" 2>/dev/null
    wait "$CONTAINERD_PID" 2>/dev/null
  fi
  # our network namespaces: CNI DEL (releases the lease, the veth, the
  # iptables chains), then the netns itself
  for f in /var/run/netns/"$TAG"-*; do
    [ -e "$f" ] || continue
    case $f in
      *-cni-*|*-fl-*) CNI_PATH=$CNI_BIN NETCONFPATH=$WORK/netconf "$CNITOOL" del "$NETNAME" "$f" >>"$LOG" 2>&1;;
    esac
    ip netns del "$(basename "$f")" >>"$LOG" 2>&1
  done
  # our cgroups: runc uses the container id, ctr /<namespace>/<id>
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    for g in "$h$TAG"*; do [ -d "$g" ] && find "$g" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  done
  # host-wide leftovers of the peers, only when this run created them
  if [ "${PRE[libpod_parent]}" = 0 ]; then
    for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
      [ -d "${h}libpod_parent" ] && find "${h}libpod_parent" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
  fi
  if [ "${PRE[cni_podman0]}" = 0 ] && ip link show cni-podman0 >/dev/null 2>&1; then ip link del cni-podman0; fi
  if [ "${PRE[cni_forward]}" = 0 ] && iptables -w -n -L CNI-FORWARD >/dev/null 2>&1; then
    iptables -w -D FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD 2>/dev/null
    iptables -w -F CNI-FORWARD; iptables -w -X CNI-FORWARD
  fi
  if [ "${PRE[cni_admin]}" = 0 ] && iptables -w -n -L CNI-ADMIN >/dev/null 2>&1; then
    iptables -w -F CNI-ADMIN; iptables -w -X CNI-ADMIN
  fi
  [ "${PRE[shm_libpod]}" = 0 ] && rm -f /dev/shm/libpod_lock
  if [ "${PRE[cni_podman_dir]}" = 0 ] && [ -d /var/lib/cni/networks/podman ]; then
    rm -f /var/lib/cni/networks/podman/{lock,last_reserved_ip.0}; rmdir /var/lib/cni/networks/podman 2>/dev/null
  fi
  if [ "${PRE[var_lib_containers]}" = 0 ] && [ -d /var/lib/containers ]; then
    rm -f /var/lib/containers/cache/blob-info-cache-v1.boltdb
    rmdir /var/lib/containers/cache /var/lib/containers 2>/dev/null
  fi
  [ "${PRE[run_containerd_s]}" = 0 ] && rmdir /run/containerd/s 2>/dev/null
  [ "${PRE[run_containerd]}" = 0 ] && rmdir /run/containerd 2>/dev/null
  [ "${PRE[run_runc]}" = 0 ] && rmdir /run/runc 2>/dev/null
  # anything still mounted under our work dir (podman's overlays), then it
  grep -F " $WORK/" /proc/self/mountinfo | awk '{ print $5 }' | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run CMD...: a peer's command, its output to the tool log.
run() { "$@" </dev/null >>"$LOG" 2>&1; }
# rec METRIC µs: one sample (warm-up rounds are not recorded).
rec() { [ "$ROUND" -gt 0 ] && printf '%s\t%s\t%s\n' "$ROUND" "$1" "$2" >&"$SAMPLES_FD"; return 0; }

# ---------------------------------------------------------------- setup
say "rootfs: busybox $(busybox 2>&1 | head -1 | awk '{ print $2 }') → $ROOTFS"
scripts/busybox-rootfs.sh "$ROOTFS"

# runc bundles: `runc spec`, then rootfs (absolute), args ["true"], no
# terminal; the scripted floor's bundle joins a netns by path instead of
# creating one.
if [ -n "${ENABLED[runc]:-}${ENABLED[scripted]:-}" ]; then
  mkdir -p "$WORK/runc" "$WORK/bundle" "$WORK/bundle-net"
  (cd "$WORK/bundle" && runc spec)
  sed -i -e 's/"terminal": true/"terminal": false/' -e 's/^\(\s*\)"sh"$/\1"true"/' \
    -e "s|\"path\": \"rootfs\"|\"path\": \"$ROOTFS\"|" "$WORK/bundle/config.json"
  sed -e 's|"type": "network"$|"type": "network", "path": "@NETNS@"|' "$WORK/bundle/config.json" > "$WORK/bundle-net/config.tmpl"
  grep -q '"terminal": false' "$WORK/bundle/config.json" && grep -q '"true"' "$WORK/bundle/config.json" &&
    grep -q "\"path\": \"$ROOTFS\"" "$WORK/bundle/config.json" && grep -q '@NETNS@' "$WORK/bundle-net/config.tmpl" ||
    { echo "bench-peers: unexpected \`runc spec\` output, cannot edit the bundle" >&2; exit 1; }
fi

if [ -n "${ENABLED[cni]:-}${ENABLED[scripted]:-}" ]; then
  mkdir -p "$WORK/netconf"
  printf '%s\n' "$CONFLIST" > "$WORK/netconf/$NETNAME.conflist"
fi
cnitool() { CNI_PATH=$CNI_BIN NETCONFPATH=$WORK/netconf "$CNITOOL" "$@" </dev/null >>"$LOG" 2>&1; }

# containerd: our own daemon, config (version 3), root, state, sockets; the
# CRI plugins, NRI (used only by the CRI; its socket would be the host's
# default) and the snapshotters we do not use are off; /opt/containerd
# moved in too.
cctr() { ctr -a "$WORK/containerd/containerd.sock" -n "$TAG" "$@"; }
if [ -n "${ENABLED[ctr]:-}${ENABLED[pull]:-}" ]; then
  C=$WORK/containerd
  mkdir -p "$C/fifo" "$C/runc" "$C/opt"
  containerd_config 3 "$C" "$C/containerd.sock" io.containerd.grpc.v1.cri io.containerd.cri.v1.images \
    io.containerd.cri.v1.runtime io.containerd.podsandbox.controller.v1.podsandbox io.containerd.nri.v1.nri > "$C/config.toml"
  containerd --config "$C/config.toml" </dev/null >"$C/containerd.log" 2>&1 &
  CONTAINERD_PID=$!
  for _ in $(seq 100); do [ -S "$C/containerd.sock" ] && break; sleep 0.05; done
  if ! cctr version >/dev/null 2>&1; then
    skip ctr "private containerd did not start: $(tail -1 "$C/containerd.log")"
    skip pull "private containerd did not start"
  fi
  if [ -n "${ENABLED[ctr]:-}" ]; then
    CTR_NETNS=$TAG-ctr
    ip netns add "$CTR_NETNS"
  fi
fi

# podman: its own containers.conf (runc; ulimits under this host's hard
# limits; cgroupfs; file events; every directory private), storage, netconf.
pm() { CONTAINERS_CONF=$PM_CONF podman --root "$WORK/podman/root" --runroot "$WORK/podman/runroot" "$@"; }
if [ -n "${ENABLED[podman]:-}${ENABLED[pull]:-}" ]; then
  P=$WORK/podman
  mkdir -p "$P/tmp" "$P/net"
  PM_CONF=$P/containers.conf
  # podman creates mount points in a --rootfs (/etc/hosts, /etc/resolv.conf,
  # /etc/hostname, /etc/mtab, /run/.containerenv): it gets its own identical
  # copy, so the others keep an untouched one.
  PM_ROOTFS=$P/rootfs
  cp -a "$ROOTFS" "$PM_ROOTFS"
  hard_nofile=$(ulimit -Hn); hard_nproc=$(ulimit -Hu)
  [ "$hard_nofile" = unlimited ] && hard_nofile=1048576
  [ "$hard_nproc" = unlimited ] && hard_nproc=4194304
  nofile=$(( hard_nofile < 20000 ? hard_nofile : 20000 )); nproc=$(( hard_nproc < 32768 ? hard_nproc : 32768 ))
  cat > "$PM_CONF" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$P/events.log"
tmp_dir = "$P/tmp"
static_dir = "$P/root/libpod"
volume_path = "$P/root/volumes"
init_path = "$(command -v catatonit)"
[network]
network_config_dir = "$P/net"
EOF
fi

# podlab: private config + image store holding the same rootfs.
if [ -n "${ENABLED[podlab]:-}${ENABLED[pull]:-}" ]; then
  podlab_setup "$PODLAB" "$WORK" "$ROOTFS"
  mkdir -p "$OUT/podlab"
fi

# pull: a registry on 127.0.0.1 (plain HTTP, access log for the bytes),
# two images built and pushed by podman: busybox + 3 × 8 MiB layers (half
# random, half text, so gzip has work), and one whose last layer differs.
if [ -n "${ENABLED[pull]:-}" ]; then
  R=$WORK/registry
  mkdir -p "$R/storage" "$R/ctx"
  for _ in $(seq 20); do
    REG_PORT=$((20000 + RANDOM % 30000))
    ss -ltn 2>/dev/null | awk '{ print $4 }' | grep -q ":$REG_PORT\$" || break
  done
  REG=127.0.0.1:$REG_PORT
  printf 'version: 0.1\nlog: {level: error, accesslog: {disabled: false}}\nstorage:\n  filesystem: {rootdirectory: %s}\nhttp:\n  addr: %s\n  secret: bench-peers\n' \
    "$R/storage" "$REG" > "$R/config.yml"
  # The access log (stdout or stderr, by version) is where the bytes are.
  docker-registry serve "$R/config.yml" </dev/null >"$R/access.log" 2>&1 &
  REGISTRY_PID=$!
  for _ in $(seq 100); do curl -fs "http://$REG/v2/" >/dev/null 2>&1 && break; sleep 0.05; done
  cp -a "$ROOTFS" "$R/ctx/rootfs"
  for l in l1 l2 l3 l3b; do
    mkdir -p "$R/ctx/$l"
    head -c $((4 << 20)) /dev/urandom > "$R/ctx/$l/random.bin"
    { for _ in $(seq 40); do cat "$REPO"/README.md "$REPO"/docs/*.md; done | head -c $((4 << 20)) > "$R/ctx/$l/text.txt"; } || :
    echo "$l" > "$R/ctx/$l/name"
  done
  printf 'FROM scratch\nCOPY rootfs/ /\nCOPY l1/ /l1/\nCOPY l2/ /l2/\nCOPY l3/ /l3/\nCMD ["sh"]\n' > "$R/ctx/A"
  printf 'FROM scratch\nCOPY rootfs/ /\nCOPY l1/ /l1/\nCOPY l2/ /l2/\nCOPY l3b/ /l3/\nCMD ["sh"]\n' > "$R/ctx/B"
  : > "$LOG"
  if run pm build --layers -f "$R/ctx/A" -t "$REG/bench/app:1" "$R/ctx" &&
     run pm build --layers -f "$R/ctx/B" -t "$REG/bench/app:2" "$R/ctx" &&
     run pm push --tls-verify=false "$REG/bench/app:1" && run pm push --tls-verify=false "$REG/bench/app:2"; then
    run pm rmi -f "$REG/bench/app:1" "$REG/bench/app:2" || :
    PULL_A=$REG/bench/app:1 PULL_B=$REG/bench/app:2
  else
    skip pull "building or pushing the test images failed: $(tail -2 "$LOG" | tr '\n' ' ')"
    PEERS=(); for p in "${ALL_PEERS[@]}"; do [ -n "${ENABLED[$p]:-}" ] && PEERS+=("$p"); done
  fi
  : > "$OUT/pull-bytes.tsv"
fi

# ---------------------------------------------------------------- rounds
# Each function runs one sample of its peer; a failure returns non-zero
# after undoing what it did.
declare -A FIRST_ERR=()
fail() {
  local msg
  msg="$1 failed: $(tail -3 "$LOG" | tr '\n' ' ')"
  say "round $ROUND: $msg"
  [ -n "${FIRST_ERR[$CUR_PEER]:-}" ] || FIRST_ERR[$CUR_PEER]="round $ROUND: $msg"
  return 1
}

round_floor() {
  local t0 t1
  now t0; run unshare -n -p -f -i -u --mount-proc true || { fail floor; return 1; }; now t1
  rec floor.unshare $((t1 - t0))
}

round_runc() {
  local id=$TAG-runc-$SEQ t0 t1
  now t0
  run runc --root "$WORK/runc" run --bundle "$WORK/bundle" "$id" || { fail runc; runc --root "$WORK/runc" delete -f "$id" >>"$LOG" 2>&1; return 1; }
  now t1
  rec runc.run $((t1 - t0))
}

round_cni() {
  local ns=$TAG-cni-$SEQ t0 t1 t2 t3 t4
  now t0
  run ip netns add "$ns" || { fail "ip netns add"; return 1; }
  now t1
  cnitool add "$NETNAME" "/var/run/netns/$ns" || { fail "cnitool add"; cnitool del "$NETNAME" "/var/run/netns/$ns"; run ip netns del "$ns"; return 1; }
  now t2
  cnitool del "$NETNAME" "/var/run/netns/$ns" || { fail "cnitool del"; run ip netns del "$ns"; return 1; }
  now t3
  run ip netns del "$ns" || { fail "ip netns del"; return 1; }
  now t4
  rec cni.netns_add $((t1 - t0)); rec cni.add $((t2 - t1)); rec cni.del $((t3 - t2))
  rec cni.netns_del $((t4 - t3)); rec cni.teardown $((t4 - t2)); rec cni.cycle $((t4 - t0))
}

round_scripted() {
  local ns=$TAG-fl-$SEQ id=$TAG-fl-$SEQ t0 t1 t2 t3 t4 t5
  sed "s|@NETNS@|/var/run/netns/$ns|" "$WORK/bundle-net/config.tmpl" > "$WORK/bundle-net/config.json"
  now t0
  run ip netns add "$ns" || { fail "scripted: ip netns add"; return 1; }
  now t1
  cnitool add "$NETNAME" "/var/run/netns/$ns" || { fail "scripted: cnitool add"; cnitool del "$NETNAME" "/var/run/netns/$ns"; run ip netns del "$ns"; return 1; }
  now t2
  run runc --root "$WORK/runc" run --bundle "$WORK/bundle-net" "$id" ||
    { fail "scripted: runc run"; runc --root "$WORK/runc" delete -f "$id" >>"$LOG" 2>&1; cnitool del "$NETNAME" "/var/run/netns/$ns"; run ip netns del "$ns"; return 1; }
  now t3
  cnitool del "$NETNAME" "/var/run/netns/$ns" || { fail "scripted: cnitool del"; run ip netns del "$ns"; return 1; }
  now t4
  run ip netns del "$ns" || { fail "scripted: ip netns del"; return 1; }
  now t5
  rec scripted.up $((t3 - t0)); rec scripted.runc $((t3 - t2)); rec scripted.teardown $((t5 - t3)); rec scripted.cycle $((t5 - t0))
}

round_ctr() {
  local id=$TAG-ctr-$SEQ t0 t1
  now t0
  run cctr run --rm --fifo-dir "$WORK/containerd/fifo" --runc-root "$WORK/containerd/runc" \
    --with-ns "network:/var/run/netns/$CTR_NETNS" --rootfs "$ROOTFS" "$id" /bin/true ||
    { fail ctr; cctr tasks rm -f "$id" >>"$LOG" 2>&1; cctr containers rm "$id" >>"$LOG" 2>&1; return 1; }
  now t1
  rec ctr.run $((t1 - t0))
}

round_podman() {
  local pod=$TAG-pm-$SEQ t0 t1 t2 t3
  now t0
  run pm pod create --name "$pod" || { fail "podman pod create"; pm pod rm -f "$pod" >>"$LOG" 2>&1; return 1; }
  now t1
  run pm run --pod "$pod" --rootfs "$PM_ROOTFS" true || { fail "podman run"; pm pod rm -f "$pod" >>"$LOG" 2>&1; return 1; }
  now t2
  run pm pod rm -f "$pod" || { fail "podman pod rm"; return 1; }
  now t3
  rec podman.create $((t1 - t0)); rec podman.run $((t2 - t1)); rec podman.up $((t2 - t0))
  rec podman.rm $((t3 - t2)); rec podman.cycle $((t3 - t0))
}

# reg_bytes: bytes the registry sent (2xx bodies, from its access log)
# since the last call, into REPLY.
REG_SEEN=0
reg_bytes() {
  local lines
  lines=$(wc -l < "$R/access.log")
  REPLY=$(awk -v from="$REG_SEEN" -v to="$lines" 'NR > from && NR <= to && $9 ~ /^2/ && $10 ~ /^[0-9]+$/ { n += $10 } END { print n + 0 }' "$R/access.log")
  REG_SEEN=$lines
}
# pull_cmd TOOL REF: one tool's pull.
pull_cmd() {
  case $1 in
    podlab) run "$PODLAB" --config "$PL_CFG" image pull "$2";;
    ctr) run cctr image pull --plain-http "$2";;
    podman) run pm pull --tls-verify=false "$2";;
  esac
}
# pull_one TOOL: cold cache (both images removed, with their content), a
# pull of image A, then of B, which shares all but its last layer; the
# times, and the bytes the registry sent for each.
pull_one() {
  local tool=$1 t0 t1 t2 bytes_a
  case $tool in
    podlab) run "$PODLAB" --config "$PL_CFG" image rm "$PULL_A" || :; run "$PODLAB" --config "$PL_CFG" image rm "$PULL_B" || :;;
    ctr) run cctr image rm --sync "$PULL_A" "$PULL_B" || :;;
    podman) run pm rmi -f "$PULL_A" "$PULL_B" || :;;
  esac
  reg_bytes
  now t0
  pull_cmd "$tool" "$PULL_A" || { fail "$tool pull"; return 1; }
  now t1
  reg_bytes; bytes_a=$REPLY
  pull_cmd "$tool" "$PULL_B" || { fail "$tool pull (second image)"; return 1; }
  now t2
  reg_bytes
  rec "pull.$tool" $((t1 - t0)); rec "pull2.$tool" $((t2 - t1))
  if [ "$ROUND" -gt 0 ]; then printf '%s\t%s\t%s\t%s\n' "$ROUND" "$tool" "$bytes_a" "$REPLY" >> "$OUT/pull-bytes.tsv"; fi
  return 0
}
round_pull() {
  local tools=(podlab ctr podman) k rc=0 t
  k=$(( (SEQ - 1) % 3 ))
  for t in "${tools[@]:k}" "${tools[@]:0:k}"; do
    : > "$LOG"
    pull_one "$t" || rc=1
  done
  return $rc
}

podlab_undo() { "$PODLAB" --config "$PL_CFG" rm -f "$1" </dev/null >>"$LOG" 2>&1 || :; }
round_podlab() {
  local name=$TAG-pl-$SEQ mf=$WORK/podlab/pod.yaml id pid t0 t1 t2 t3 t4
  podlab_manifest "$name" true > "$mf"
  PODLAB_PODS+=("$name")
  now t0
  "$PODLAB" --config "$PL_CFG" run -q -f "$mf" </dev/null >"$WORK/podlab/id" 2>>"$LOG" || { fail "podlab run"; podlab_undo "$name"; return 1; }
  now t1
  read -r id < "$WORK/podlab/id"
  podlab_ctr_pid "$id" && pid=$REPLY && wait_gone "$pid" || { fail "podlab: waiting for the container to exit"; podlab_undo "$name"; return 1; }
  now t2
  # untimed: the stored spans of this pod's creation (kept for measured rounds)
  local keep=$OUT/podlab; [ "$ROUND" -gt 0 ] || keep=$WORK/podlab/warmup
  mkdir -p "$keep"
  "$PODLAB" --config "$PL_CFG" trace "$name" >"$keep/run-$ROUND.txt" 2>>"$LOG" || :
  now t3
  "$PODLAB" --config "$PL_CFG" rm -f --stages "$name" </dev/null >>"$LOG" 2>"$keep/rm-$ROUND.txt" || { fail "podlab rm: $(tail -2 "$keep/rm-$ROUND.txt" | tr "\n" " ")"; return 1; }
  now t4
  unset 'PODLAB_PODS[-1]'
  rec podlab.run $((t1 - t0)); rec podlab.up $((t2 - t0)); rec podlab.rm $((t4 - t3))
  rec podlab.cycle $((t2 - t0 + t4 - t3))
}

# warm: podlab run claiming a sandbox filled, untimed, before the clock.
round_warm() {
  local name=$TAG-plw-$SEQ mf=$WORK/podlab/warm.yaml id pid t0 t1 t2 t3 t4
  podlab_manifest "$name" true > "$mf"
  "$PODLAB" --config "$PL_CFG" pool fill 1 </dev/null >>"$LOG" 2>&1 || { fail "podlab pool fill"; return 1; }
  PODLAB_PODS+=("$name")
  now t0
  "$PODLAB" --config "$PL_CFG" run -q -f "$mf" </dev/null >"$WORK/podlab/id" 2>>"$LOG" || { fail "podlab run (warm)"; podlab_undo "$name"; return 1; }
  now t1
  read -r id < "$WORK/podlab/id"
  podlab_ctr_pid "$id" && pid=$REPLY && wait_gone "$pid" || { fail "podlab (warm): waiting for the container to exit"; podlab_undo "$name"; return 1; }
  now t2
  mkdir -p "$WORK/podlab/warm"
  "$PODLAB" --config "$PL_CFG" trace "$name" >"$WORK/podlab/warm/run-$ROUND.txt" 2>>"$LOG" || :
  grep -q "paid ahead" "$WORK/podlab/warm/run-$ROUND.txt" || { fail "podlab (warm): the pod did not claim a warm sandbox"; podlab_undo "$name"; return 1; }
  now t3
  "$PODLAB" --config "$PL_CFG" rm -f "$name" </dev/null >>"$LOG" 2>&1 || { fail "podlab rm (warm)"; return 1; }
  now t4
  unset 'PODLAB_PODS[-1]'
  rec warm.run $((t1 - t0)); rec warm.up $((t2 - t0)); rec warm.rm $((t4 - t3))
  rec warm.cycle $((t2 - t0 + t4 - t3))
}

declare -A FAILS=()
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
say "peers: ${PEERS[*]}; $WARMUP warm-up + $N measured rounds, interleaved"
for ((ROUND = 1 - WARMUP; ROUND <= N; ROUND++)); do
  SEQ=$((ROUND + WARMUP))   # ≥ 1: in resource names (ROUND ≤ 0 while warming up)
  k=$(( (SEQ - 1) % ${#PEERS[@]} ))
  order=("${PEERS[@]:k}" "${PEERS[@]:0:k}")
  for p in "${order[@]}"; do
    CUR_PEER=$p
    : > "$LOG"   # the tool log holds this sample's output only
    if ! "round_$p"; then
      FAILS[$p]=$(( ${FAILS[$p]:-0} + 1 ))
      if [ "${FAILS[$p]}" -ge 3 ]; then
        note "$p failed 3 times: dropped from the remaining rounds"
        rest=(); for q in "${PEERS[@]}"; do [ "$q" = "$p" ] || rest+=("$q"); done; PEERS=("${rest[@]}")
      fi
    fi
  done
  if [ "$ROUND" -gt 0 ] && [ -t 2 ]; then printf '\rbench-peers: round %d/%d' "$ROUND" "$N" >&2; fi
done
[ -t 2 ] && echo >&2
exec {SAMPLES_FD}>&-
for p in "${!FAILS[@]}"; do note "$p: ${FAILS[$p]} failed sample(s); first: ${FIRST_ERR[$p]:-?}"; done

# ---------------------------------------------------------------- report
stats_tsv < "$OUT/samples.tsv" > "$OUT/stats.tsv"
declare -A P50=() P90=() NS=()
while IFS=$'\t' read -r m n p50 p90 _; do P50[$m]=$p50; P90[$m]=$p90; NS[$m]=$n; done < "$OUT/stats.tsv"

# podlab's own stage spans (creation from `podlab trace`, teardown from
# `rm --stages`), per round.
for f in "$OUT"/podlab/run-*.txt; do [ -e "$f" ] || continue; r=${f##*-}; parse_stage_table run "${r%.txt}" < "$f"; done > "$OUT/stages.samples.tsv"
for f in "$OUT"/podlab/rm-*.txt; do [ -e "$f" ] || continue; r=${f##*-}; parse_stage_table teardown "${r%.txt}" < "$f"; done >> "$OUT/stages.samples.tsv"
declare -A S50=() S90=()
if [ -s "$OUT/stages.samples.tsv" ]; then
  # keep the first-seen stage order (the order podlab runs them)
  awk -F'\t' '!seen[$2]++ { print $2 }' "$OUT/stages.samples.tsv" > "$OUT/stages.order"
  stats_tsv < "$OUT/stages.samples.tsv" > "$OUT/stages.tsv"
  while IFS=$'\t' read -r m n p50 p90 _; do S50[$m]=$p50; S90[$m]=$p90; done < "$OUT/stages.tsv"
fi

# row WORK LABEL METRIC REF [P50 P90 N]: one line of the ratio table; REF is
# the podlab metric of the same work (ratio = peer / podlab).
row() {
  local work=$1 label=$2 m=$3 ref=$4 a b n
  a=${5:-${P50[$m]:-}} b=${6:-${P90[$m]:-}} n=${7:-${NS[$m]:-0}}
  [ -n "$a" ] || return 0
  local r50 r90
  if [ "$m" = "$ref" ]; then r50="**1.00**"; r90="**1.00**"; else
    r50=$(ratio "$a" "${P50[$ref]:-${S50[$ref]:-}}"); r90=$(ratio "$b" "${P90[$ref]:-${S90[$ref]:-}}"); fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$work" "$label" "$n" "$(fmt_ms "$a")" "$(fmt_ms "$b")" "$r50" "$r90"
}
srow() { # a podlab stage span as a row: srow WORK LABEL STAGE REF
  [ -n "${S50[$3]:-}" ] || return 0
  row "$1" "$2" "$3" "$4" "${S50[$3]}" "${S90[$3]}" "$(awk -F'\t' -v s="$3" '$2 == s { n++ } END { print n + 0 }' "$OUT/stages.samples.tsv")"
}
{
  echo "| Work | Command | n | p50 ms | p90 ms | ratio p50 | ratio p90 |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
  W="Pod up → first container exited"
  row "$W" "podlab run (sandbox + pause + 1 container, env + CA injected), until \`true\` exited" podlab.up podlab.up
  row "$W" "podlab run claiming a warm sandbox (pool fill 1 before the clock)" warm.up podlab.up
  row "$W" "podman pod create + podman run --pod --rootfs true (starts the infra)" podman.up podlab.up
  row "$W" "scripted floor: ip netns add + cnitool ADD + runc run (joins the netns)" scripted.up podlab.up
  row "$W" "ctr run --rm --rootfs --with-ns network:… /bin/true (pre-made netns, no CNI)" ctr.run podlab.up
  row "$W" "runc run of a bundle, busybox true (own netns, no CNI)" runc.run podlab.up
  row "$W" "unshare -n -p -f -i -u --mount-proc true" floor.unshare podlab.up
  W="Full cycle (up + teardown)"
  row "$W" "podlab run … + podlab rm -f" podlab.cycle podlab.cycle
  row "$W" "podlab run (warm sandbox claimed) + podlab rm -f" warm.cycle podlab.cycle
  row "$W" "podman pod create + run --pod --rootfs true + pod rm -f" podman.cycle podlab.cycle
  row "$W" "scripted floor + cnitool DEL + ip netns del" scripted.cycle podlab.cycle
  row "$W" "ip netns add + cnitool ADD + DEL + ip netns del (network only)" cni.cycle podlab.cycle
  W="Image pull, cold cache (busybox + 3 × 8 MiB layers)"
  row "$W" "podlab image pull (loopback docker-registry)" pull.podlab pull.podlab
  row "$W" "ctr image pull --plain-http (containerd, private root)" pull.ctr pull.podlab
  row "$W" "podman pull --tls-verify=false (private storage)" pull.podman pull.podlab
  W="Image pull, second image sharing all but one layer"
  row "$W" "podlab image pull" pull2.podlab pull2.podlab
  row "$W" "ctr image pull --plain-http" pull2.ctr pull2.podlab
  row "$W" "podman pull --tls-verify=false" pull2.podman pull2.podlab
  W="Teardown"
  row "$W" "podlab rm -f (containers, pause, CNI DEL, netns, cgroups, state)" podlab.rm podlab.rm
  row "$W" "podman pod rm -f" podman.rm podlab.rm
  row "$W" "cnitool DEL + ip netns del" cni.teardown podlab.rm
  W="Network stages (vs podlab's own span)"
  # The sandbox's stages are under RunPodSandbox and RemovePodSandbox
  # since podlab run calls the CRI operations; top-level before.
  NETNS=run/netns
  [ -n "${S50[run/RunPodSandbox › netns]:-}" ] && NETNS="run/RunPodSandbox › netns"
  NETNS_RM="teardown/netns remove"
  [ -n "${S50[teardown/RemovePodSandbox › netns remove]:-}" ] && NETNS_RM="teardown/RemovePodSandbox › netns remove"
  srow "$W" "podlab span: netns" "$NETNS" "$NETNS"
  row "$W" "ip netns add" cni.netns_add "$NETNS"
  srow "$W" "podlab span: cni bridge ADD" "run/cni › cni bridge ADD" "run/cni › cni bridge ADD"
  row "$W" "cnitool ADD (bridge + host-local)" cni.add "run/cni › cni bridge ADD"
  srow "$W" "podlab span: cni bridge DEL" "teardown/cni teardown › cni bridge DEL" "teardown/cni teardown › cni bridge DEL"
  row "$W" "cnitool DEL" cni.del "teardown/cni teardown › cni bridge DEL"
  srow "$W" "podlab span: netns remove" "$NETNS_RM" "$NETNS_RM"
  row "$W" "ip netns del" cni.netns_del "$NETNS_RM"
} > "$OUT/table.md"

# The issue's targets that this run can check.
target() { # target LABEL VALUE LIMIT-DESCRIPTION OK
  printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$([ "$4" = 1 ] && echo met || echo "**missed**")"
}
le() { awk -v a="$1" -v b="$2" 'BEGIN { print (a != "" && b != "" && a + 0 <= b + 0) ? 1 : 0 }'; }
# A ratio target is judged on the unrounded p50s (ratio_le) and shown with
# three decimals, so that the verdict can be read off the table.
{
  echo "| Target (issue) | This run (p50) | Limit | |"
  echo "| --- | --- | --- | --- |"
  if [ -n "${P50[podman.up]:-}" ]; then
    target "pod up ≤ 0.15× podman's (5)" "$(ratio "${P50[podlab.up]}" "${P50[podman.up]}" 3)×" "0.15×" "$(ratio_le "${P50[podlab.up]}" "${P50[podman.up]}" 0.15)"
  fi
  if [ -n "${P50[scripted.up]:-}" ]; then
    target "pod up ≤ scripted floor (5)" "$(fmt_ms "${P50[podlab.up]}") ms vs $(fmt_ms "${P50[scripted.up]}") ms" "≤ 1.00×" "$(le "${P50[podlab.up]}" "${P50[scripted.up]}")"
  fi
  # Issue 18's: the CRI split's cost bounded by the figures committed
  # before it.
  if [ -n "${P50[podman.up]:-}" ]; then
    target "pod up ≤ 0.16× podman's (18)" "$(ratio "${P50[podlab.up]}" "${P50[podman.up]}" 3)×" "0.16×" "$(ratio_le "${P50[podlab.up]}" "${P50[podman.up]}" 0.16)"
  fi
  if [ -n "${P50[scripted.up]:-}" ]; then
    target "pod up ≤ 1.18× scripted floor (18)" "$(ratio "${P50[podlab.up]}" "${P50[scripted.up]}" 3)×" "1.18×" "$(ratio_le "${P50[podlab.up]}" "${P50[scripted.up]}" 1.18)"
  fi
  if [ -n "${P50[podman.cycle]:-}" ]; then
    target "full cycle ≤ 0.15× podman's (5)" "$(ratio "${P50[podlab.cycle]}" "${P50[podman.cycle]}" 3)×" "0.15×" "$(ratio_le "${P50[podlab.cycle]}" "${P50[podman.cycle]}" 0.15)"
  fi
  if [ -n "${P50[cni.teardown]:-}" ]; then
    target "teardown ≤ 0.6× cnitool DEL + ip netns del (5)" "$(ratio "${P50[podlab.rm]}" "${P50[cni.teardown]}" 3)×" "0.6×" "$(ratio_le "${P50[podlab.rm]}" "${P50[cni.teardown]}" 0.6)"
  fi
  if [ -n "${P50[pull.ctr]:-}" ] && [ -n "${P50[pull.podlab]:-}" ]; then
    target "image pull ≤ 1.0× containerd's (issue 19)" "$(ratio "${P50[pull.podlab]}" "${P50[pull.ctr]}" 3)×" "1.0×" "$(ratio_le "${P50[pull.podlab]}" "${P50[pull.ctr]}" 1.0)"
  fi
  s=${S50[run/RunPodSandbox › pause]:-${S50[run/pause]:-}}
  [ -n "$s" ] && target "pause start ≤ 5 ms, span \`pause\` (5)" "$(fmt_ms "$s") ms" "5 ms" "$(le "$s" 5000)"
  # runc create + runc start of the one container, summed per round.
  c=$(awk -F'\t' -v OFS='\t' '$2 ~ /^run\/(.* › )?ctr [^ ]+ (create|start)$/ { t[$1] += $3 } END { for (r in t) print r, "ctr", t[r] }' "$OUT/stages.samples.tsv" 2>/dev/null | stats_tsv | cut -f3)
  [ -n "$c" ] && target "container start ≤ 10 ms, spans \`ctr … create\` + \`ctr … start\` (5)" "$(fmt_ms "$c") ms" "10 ms" "$(le "$c" 10000)"
  # The podman bounds were set on another machine, where the floor was a
  # smaller share of podman's time: say where they fall against this
  # run's floor, which does less than podlab (no pause, no pod cgroup, no
  # injection, lo left down).
  if [ -n "${P50[podman.up]:-}" ] && [ -n "${P50[scripted.up]:-}" ]; then
    echo
    awk -v f="${P50[scripted.up]}" -v p="${P50[podman.up]}" 'BEGIN {
      printf "In this run the scripted floor is itself %.3f× podman'"'"'s pod up (%.1f ms vs %.1f ms). ", f / p, f / 1000, p / 1000
      n = split("0.15 0.16", b, " ")
      for (i = 1; i <= n; i++) {
        d = f - b[i] * p
        printf "The %s× bound is %.1f ms, %.1f ms %s the floor%s", b[i], b[i] * p / 1000, (d < 0 ? -d : d) / 1000, (d > 0 ? "below" : "above"), (i < n ? ". " : ".\n")
      }
    }'
  fi
} > "$OUT/targets.md"

# podlab's per-stage breakdown (from the same rounds).
if [ -s "$OUT/stages.samples.tsv" ]; then
  {
    echo "| Phase | Stage | n | p50 ms | p90 ms | p99 ms | max ms |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    while IFS= read -r s; do
      awk -F'\t' -v s="$s" '$1 == s' "$OUT/stages.tsv" | while IFS=$'\t' read -r m n p50 p90 p99 _ mx _; do
        ph=${m%%/*} st=${m#*/}
        [[ $st == *" › "* ]] && st="&nbsp;&nbsp;↳ ${st#* › }"
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$ph" "$st" "$n" "$(fmt_ms "$p50")" "$(fmt_ms "$p90")" "$(fmt_ms "$p99")" "$(fmt_ms "$mx")"
      done
    done < "$OUT/stages.order"
    for m in podlab.run podlab.up podlab.rm; do
      [ -n "${P50[$m]:-}" ] || continue
      case $m in
        podlab.run) l="\`podlab run -q\` wall time (process start → exit)";;
        podlab.up) l="… until its container exited";;
        podlab.rm) l="\`podlab rm -f\` wall time";;
      esac
      awk -F'\t' -v m="$m" '$1 == m' "$OUT/stats.tsv" | while IFS=$'\t' read -r _ n p50 p90 p99 _ mx _; do
        printf '| total | %s | %s | %s | %s | %s | %s |\n' "$l" "$n" "$(fmt_ms "$p50")" "$(fmt_ms "$p90")" "$(fmt_ms "$p99")" "$(fmt_ms "$mx")"
      done
    done
  } > "$OUT/stages.md"
fi

# Bytes the registry sent per pull (median over rounds): the second image
# should cost only its own last layer (and its manifest and config).
if [ -s "${OUT}/pull-bytes.tsv" ]; then
  {
    echo "| Tool | image A, cold (bytes) | image B after A (bytes) |"
    echo "| --- | ---: | ---: |"
    for t in podlab ctr podman; do
      awk -F'\t' -v t="$t" '$2 == t { a[++n] = $3; b[n] = $4 }
        function med(x, n,   i, j, v) { for (i = 2; i <= n; i++) { v = x[i]; for (j = i - 1; j >= 1 && x[j] > v; j--) x[j + 1] = x[j]; x[j + 1] = v } return x[int((n + 1) / 2)] }
        END { if (n) printf "| %s | %d | %d |\n", t, med(a, n), med(b, n) }' "$OUT/pull-bytes.tsv"
    done
  } > "$OUT/pull-bytes.md"
fi

# Machine and versions.
machine_md > "$OUT/machine.md"
echo "- Load average (1/5/15 min) before the rounds: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.md"
{
  echo "- podlab: $("$PODLAB" --version 2>/dev/null | awk '{ print $NF }') (libcontainer $(awk '$1 == "github.com/opencontainers/runc" { print $2 }' go.mod), libcni $CNI_VERSION, $(${GO:-go} version "$PODLAB" 2>/dev/null | awk '{ print $2 }' || true))"
  echo "- CNI plugins: $(awk '$1 == "github.com/containernetworking/plugins" { print $2 }' go.mod) from $CNI_BIN ($(printf '%s\n' "$CONFLIST" | awk -F'"' '/"type"/ { printf "%s%s", s, $4; s = " + " }')); cnitool $CNI_VERSION"
  have runc && echo "- runc: $(runc --version | awk 'NR == 1 { print $3 }') (system, /usr/sbin/runc; used by runc, scripted, ctr and podman)"
  have containerd && echo "- containerd: $(containerd --version | awk '{ print $3 }'), ctr $(ctr --version | awk '{ print $3 }') ($(command -v containerd): scripts/build-containerd.sh, config version 3)"
  have podman && echo "- podman: $(podman --version | awk '{ print $3 }'), conmon $(conmon --version 2>/dev/null | awk 'NR == 1 { print $3 }'), catatonit $(catatonit --version 2>&1 | awk '{ print $3 }')$(pm info --format ' (network backend {{.Host.NetworkBackend}}, storage {{.Store.GraphDriverName}})' 2>/dev/null || true)"
  echo "- iproute2: $(ip -V 2>/dev/null | grep -o "iproute2-[^ ,]*" | sed "s/iproute2-//"); util-linux: $(unshare --version 2>/dev/null | awk '{ print $NF }'); busybox: $(busybox 2>&1 | head -1 | awk '{ print $2 }')"
} > "$OUT/versions.md"

ELAPSED=$((SECONDS - START_S))
{
  echo "- $N measured rounds (+ $WARMUP warm-up), peers interleaved, starting peer rotating each round; peers: ${PEERS[*]}"
  echo "- bench-peers.sh took ${ELAPSED} s"
  for n in "${NOTES[@]}"; do echo "- $n"; done
} > "$OUT/notes.md"

echo
cat "$OUT/table.md"
echo
cat "$OUT/targets.md"
if [ -s "$OUT/pull-bytes.md" ]; then echo; cat "$OUT/pull-bytes.md"; fi
echo
say "results in $OUT (took ${ELAPSED} s)"
