# shellcheck shell=bash
# scripts/peers/lib.sh: helpers shared by bench-peers.sh, peers/scale-curve.sh,
# gen-benchmarks-doc.sh, bench-kubelet.sh and critest.sh. Sourced, never run. Pure bash + awk: the timing
# loops fork nothing beyond the command being timed.
#
# Times are integers in microseconds, from bash's EPOCHREALTIME (µs
# resolution, no fork). Percentiles are nearest-rank (the smallest sample
# such that at least p% of the samples are ≤ it — always an observed value),
# the same definition as `podlab bench`.

# now: the current time in µs, into the variable named by $1.
now() { printf -v "$1" '%s' "${EPOCHREALTIME//[.,]/}"; }

# stats_tsv < "round<TAB>metric<TAB>µs" lines: one line per metric,
# "metric n p50 p90 p99 min max mean" (µs, tab-separated), metrics sorted.
stats_tsv() {
  LC_ALL=C sort -t "$(printf '\t')" -k2,2 -k3,3n | awk -F '\t' -v OFS='\t' '
    function rank(p,   k) { k = int((p * n + 99) / 100); if (k < 1) k = 1; if (k > n) k = n; return v[k] }
    function flush() {
      if (n == 0) return
      printf "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", m, n, rank(50), rank(90), rank(99), v[1], v[n], sum / n
    }
    $2 != m { flush(); m = $2; n = 0; sum = 0 }
    { v[++n] = $3; sum += $3 }
    END { flush() }'
}

# fmt_ms US: µs as milliseconds, 2 decimals under 10 ms, 1 above.
fmt_ms() {
  awk -v u="$1" 'BEGIN { if (u == "") { print "–"; exit } ms = u / 1000; if (ms < 10) printf "%.2f", ms; else printf "%.1f", ms }'
}

# ratio A B [DECIMALS]: A/B with 2 decimals, or DECIMALS ("–" when either
# is missing or B is 0).
ratio() {
  awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "–"; else printf "%.*f", d, a / b }'
}

# ratio_le A B LIMIT: 1 if A/B ≤ LIMIT, judged unrounded (0.151 is not
# ≤ 0.15), else 0.
ratio_le() {
  awk -v a="$1" -v b="$2" -v l="$3" 'BEGIN { print (a != "" && b + 0 > 0 && a / b <= l) ? 1 : 0 }'
}

# parse_stage_table PHASE ROUND < podlab's stage table (trace.WriteTable:
# "STAGE START DURATION WATERFALL", durations in ms, child stages indented
# by two spaces per level): "round<TAB>phase/stage<TAB>µs" lines, children
# as "parent › child" (the immediate parent: "cni › cni bridge ADD" also
# where cni is itself under RunPodSandbox).
parse_stage_table() {
  awk -v phase="$1" -v round="$2" -v OFS='\t' '
    NR == 1 && $1 == "STAGE" { next }
    {
      if (!match($0, /[ ]+[0-9.]+ms[ ]+[0-9.]+ms/)) next
      name = substr($0, 1, RSTART - 1); rest = substr($0, RSTART, RLENGTH)
      match(name, /^ */); depth = int(RLENGTH / 2)
      sub(/^ +/, "", name); sub(/ +$/, "", name)
      split(rest, f, " "); d = f[2]; sub(/ms$/, "", d)
      stack[depth] = name
      if (depth > 0) name = stack[depth - 1] " › " name
      printf "%s\t%s/%s\t%d\n", round, phase, name, d * 1000 + 0.5
    }'
}

# machine_md: a markdown description of this host (one bullet per line).
machine_md() {
  local cpu cores mem kernel os cg virt
  cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  cores=$(nproc)
  mem=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
  kernel="$(uname -sr) ($(uname -m))"
  os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
  if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
    cg="v2 (unified)"
  elif [ -d /sys/fs/cgroup/unified ] && [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
    cg="hybrid: $(awk '$3 == "cgroup" { n++ } END { print n + 0 }' /proc/mounts) v1 hierarchies (controllers + name=systemd) and v2 at /sys/fs/cgroup/unified"
  else
    cg="v1"
  fi
  virt=$(grep -qw hypervisor /proc/cpuinfo && echo "virtual machine (hypervisor flag set)" || echo "no hypervisor flag")
  echo "- CPU: ${cpu:-unknown}, ${cores} cores online ($virt)"
  echo "- Memory: $mem"
  echo "- Kernel: $kernel; OS: $os"
  echo "- cgroups: $cg"
  # Without favordynmods, moving a task into a cgroup after a quiet spell
  # first waits for an RCU grace period (7-30 ms on these VMs). runc run,
  # containerd's runc and podman wait for it in line; podlab overlaps it
  # (docs/stages.md), so the ratios to them depend on it. The mount option
  # does not tell for sure (on 6.18 the cheap path stays after a remount
  # without it), so the move is timed.
  if grep -qE '^cgroup2 .*favordynmods' /proc/mounts; then
    echo "- cgroup2 mounted with favordynmods"
  else
    echo "- cgroup2 without favordynmods"
  fi
  echo "- $(cgroup_attach_probe)"
  # Removed memory cgroups whose pages are still cached stay as "dying"
  # ones; thousands of them slow every memcg operation, so a machine that
  # has run many containers since its last reboot measures slower.
  local memcgs live
  memcgs=$(awk '$1 == "memory" { print $3 }' /proc/cgroups 2>/dev/null)
  if [ -n "$memcgs" ] && [ -d /sys/fs/cgroup/memory ]; then
    live=$(find /sys/fs/cgroup/memory -type d 2>/dev/null | wc -l)
    echo "- memory cgroups (v1): $memcgs in the kernel, $live in the hierarchy (the rest are removed ones still holding cached pages)"
  fi
}

# cgroup_attach_probe: one line saying how long moving a process into a
# new cgroup takes after 0.3 s of quiet (median of 3), the wait that runc
# and the other peers make at each container's start. The probe's cgroup
# and process are gone when it returns.
cgroup_attach_probe() {
  local root cg i pid t0 t1 times=()
  if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
    root=/sys/fs/cgroup
  elif [ -d /sys/fs/cgroup/pids ]; then
    root=/sys/fs/cgroup/pids
  else
    echo "cgroup attach after a quiet spell: not measured (no pids hierarchy)"; return 0
  fi
  cg=$root/podlab-attach-probe.$$
  mkdir "$cg" 2>/dev/null || { echo "cgroup attach after a quiet spell: not measured (cannot create $cg)"; return 0; }
  for i in 1 2 3; do
    sleep 30 & pid=$!
    sleep 0.3
    t0=$EPOCHREALTIME
    if echo "$pid" 2>/dev/null > "$cg/cgroup.procs"; then
      t1=$EPOCHREALTIME
      times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) * 1000 }')")
    fi
    kill "$pid" 2>/dev/null || :
    wait "$pid" 2>/dev/null || :
  done
  for i in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.02; done
  [ ! -d "$cg" ] || echo "bench-peers: could not remove the probe cgroup $cg" >&2
  if [ ${#times[@]} -eq 0 ]; then
    echo "cgroup attach after a quiet spell: not measured (the move was refused)"; return 0
  fi
  local med
  med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  if awk -v m="$med" 'BEGIN { exit !(m >= 2) }'; then
    echo "cgroup attach after 0.3 s of quiet: $med ms (median of ${#times[@]}): an RCU grace period, which the scripted floor's runc, containerd and podman wait for at each container's start and podlab overlaps"
  else
    echo "cgroup attach after 0.3 s of quiet: $med ms (median of ${#times[@]}): no grace period on this host: runc, containerd and podman start containers without that wait, so their ratios to podlab are lower than on a host with it"
  fi
}

# snapshot_podlab BIN DIR: copy podlab and the podlab-pause and podlab-shim
# next to it (podlab looks for them there) into DIR.
snapshot_podlab() {
  mkdir -p "$2"
  cp "$1" "$2/podlab"
  local b
  for b in podlab-pause podlab-shim; do
    if [ -x "$(dirname "$1")/$b" ]; then cp "$(dirname "$1")/$b" "$2/$b"; fi
  done
}

# podlab_setup PODLAB WORK ROOTFS: a private podlab config (image and log dirs
# under WORK; state, netns and CNI are the defaults: they are host-wide by
# nature) with ROOTFS imported as busybox:latest. Sets PL_CFG, PL_STATE.
podlab_setup() {
  local podlab=$1 work=$2 rootfs=$3
  mkdir -p "$work/podlab"
  PL_CFG=$work/podlab/config.yaml
  cat > "$PL_CFG" <<EOF
# bench-peers: private image store and logs, defaults for everything else.
imageDir: $work/podlab/images
logDir: $work/podlab/logs
EOF
  "$podlab" --config "$PL_CFG" image import busybox:latest "$rootfs" >/dev/null
  PL_STATE=$("$podlab" --config "$PL_CFG" config | awk '$1 == "stateDir:" { print $2 }')
  PL_STATE=${PL_STATE:-/run/podlab}
}

# podlab_manifest NAME COMMAND...: a one-container pod, busybox, restartPolicy
# Never, with an env var (CA injection comes from podlab's default config).
# Unconfined, as the runc, ctr and scripted-floor peers run theirs (runc
# spec's config and ctr run set no seccomp profile): `podlab run` applies
# RuntimeDefault otherwise, whose filter libseccomp compiles in every
# container's init, 30-38 ms here (docs/benchmarks.md).
podlab_manifest() {
  local name=$1; shift
  local args="" a
  for a in "$@"; do args+="${args:+, }\"$a\""; done
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: default
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  securityContext:
    seccompProfile:
      type: Unconfined
  containers:
  - name: app
    image: busybox
    command: [$args]
    env:
    - name: GREETING
      value: hello
EOF
}

# podlab_ctr_pid ID: the first container's pid from the pod's state record
# (bash builtins only: this runs inside a timed region). Sets REPLY.
podlab_ctr_pid() {
  local line re='^[[:space:]]*"pid":[[:space:]]*([0-9]+)'
  REPLY=""
  while IFS= read -r line; do
    if [[ $line =~ $re ]]; then REPLY=${BASH_REMATCH[1]}; return 0; fi
  done < "$PL_STATE/pods/$1/pod.json"
  return 1
}

# wait_gone PID: until PID has exited (gone or a zombie), polling every
# 0.2 ms without forking. Needs SLEEP_FD (a fifo opened read-write).
wait_gone() {
  local st rest i
  for ((i = 0; i < 50000; i++)); do   # ≤ ~10 s
    { read -r _ _ st rest < "/proc/$1/stat"; } 2>/dev/null || return 0
    [ "$st" = Z ] && return 0
    read -r -t 0.0002 -u "$SLEEP_FD" _ || :
  done
  return 1
}

# open_sleep_fd DIR: the fifo wait_gone sleeps on.
open_sleep_fd() {
  mkfifo "$1/sleep.fifo"
  exec {SLEEP_FD}<>"$1/sleep.fifo"
}

# containerd_config VERSION DIR SOCK [PLUGIN...]: the top of a private
# containerd's config.toml on stdout, config VERSION (3 for containerd 2.x,
# 2 for 1.6): root, state and opt under DIR, its gRPC and ttrpc sockets at
# SOCK, no debug or metrics endpoint, and the snapshotters and tracing this
# host has no use for disabled, with the extra PLUGINs. Callers append
# their own plugin sections (the CRI's), named as VERSION names them.
containerd_config() {
  local version=$1 dir=$2 sock=$3 p disabled=""
  shift 3
  for p in "$@" io.containerd.snapshotter.v1.btrfs io.containerd.snapshotter.v1.zfs \
    io.containerd.snapshotter.v1.devmapper io.containerd.snapshotter.v1.aufs \
    io.containerd.tracing.processor.v1.otlp io.containerd.internal.v1.tracing; do
    disabled+="${disabled:+, }\"$p\""
  done
  cat <<EOF
version = $version
root = "$dir/root"
state = "$dir/state"
disabled_plugins = [$disabled]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
EOF
}
