# shellcheck shell=bash
# scripts/kubelet/lib.sh: run the real kubelet standalone (no API server,
# static pods only) against a CRI socket, and undo what it does to the host.
# Sourced by kubelet-demo.sh and bench-kubelet.sh; never run.
#
# What this VM needs of the kubelet's configuration, and why (see
# kubelet_write_config): staticPodPath (no API server: the manifest dir is
# the only pod source); cgroupDriver the runtime's (podlab's configured
# driver: cgroupfs, or systemd where systemd is PID 1; a kubelet >= 1.31
# also asks the runtime's RuntimeConfig); failSwapOn false (the kubelet
# refuses swap by default; kept false so a host with swap runs too); anonymous auth, AlwaysAllow and
# enableServer false (no API server to check tokens, and no port 10250 to
# share with other users of the host); healthz on 127.0.0.1 on a port of
# its own; makeIPTablesUtilChains false (the kubelet would add its
# KUBE-FIREWALL chains to the host's iptables); podLogsDir and
# volumePluginDir under its root dir (not /var/log/pods and
# /usr/libexec/kubernetes); imageGC thresholds at 100% (its image GC would
# otherwise delete "unused" images from the runtime's store, shared with
# every other podlab user of the host); evictionHard with nothing set to
# evict on (a busy shared disk must not have it evict the pod under test);
# fileCheckFrequency 1s (a missed inotify event still shows within a second).

# The side effects of a kubelet run on this VM, whatever its root dir.
KUBELET_SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)
KUBELET_DIRS=(/var/log/pods /var/log/containers /usr/libexec/kubernetes /var/lib/kubelet/device-plugins)

# kubelet_write_config DIR SOCKET HEALTHZ_PORT [CGROUP_DRIVER]:
# DIR/kubelet.yaml, with the kubelet's root dir DIR/root and static pods in
# DIR/manifests; CGROUP_DRIVER (cgroupfs) must be the runtime's.
kubelet_write_config() {
  local dir=$1 sock=$2 port=$3 driver=${4:-cgroupfs}
  mkdir -p "$dir/manifests" "$dir/root"
  cat > "$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $dir/manifests
fileCheckFrequency: 1s
cgroupDriver: $driver
failSwapOn: false
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
enableServer: false
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
healthzPort: $port
readOnlyPort: 0
makeIPTablesUtilChains: false
podLogsDir: $dir/root/pod-logs
volumePluginDir: $dir/root/volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
YAML
}

# The kubelet's QoS slices with the systemd driver: transient units it
# starts and never stops (kubepods.slice holds the others).
kubelet_units() {
  [ -d /run/systemd/system ] || return 0
  systemctl list-units --no-legend --plain 'kubepods*.slice' | awk '{ print $1 }'
}

# kubelet_save_host STATE: record the sysctls, which of KUBELET_DIRS' top
# missing ancestors exist, and which kubepods cgroups (cgroupfs: a
# kubepods dir in a hierarchy, or at the root of cgroup v2) and systemd
# slices exist, in STATE.
kubelet_save_host() {
  local state=$1 d top
  : > "$state"
  for s in "${KUBELET_SYSCTLS[@]}"; do
    echo "sysctl $s $(sysctl -n "$s")" >> "$state"
  done
  for d in "${KUBELET_DIRS[@]}"; do
    # the topmost ancestor the kubelet would create
    top=
    while [ ! -e "$d" ]; do top=$d; d=$(dirname "$d"); done
    [ -n "$top" ] && echo "dir $top" >> "$state"
  done
  for h in /sys/fs/cgroup/ /sys/fs/cgroup/*/; do
    [ -d "${h}kubepods" ] && echo "cgroup-kept ${h}kubepods" >> "$state"
  done
  kubelet_units | sed 's/^/unit-kept /' >> "$state"
  return 0
}

# rmdir_tree DIR: remove an empty cgroup tree, leaves first.
rmdir_tree() {
  [ -d "$1" ] || return 0
  find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
  [ ! -d "$1" ]
}

# kubelet_restore_host STATE ROOTDIR: undo a kubelet run recorded by
# kubelet_save_host (the kubelet must have stopped): sysctls back, the dirs
# it created gone, its kubepods cgroups and slices gone, no mount left
# under ROOTDIR.
kubelet_restore_host() {
  local state=$1 root=$2 ok=0 kind a b
  while read -r kind a b; do
    case $kind in
      sysctl) sysctl -qw "$a=$b" || ok=1 ;;
      dir) rm -rf "$a" ;;
    esac
  done < "$state"
  for h in /sys/fs/cgroup/ /sys/fs/cgroup/*/; do
    grep -qx "cgroup-kept ${h}kubepods" "$state" && continue
    rmdir_tree "${h}kubepods" || { echo "kubelet: cgroup ${h}kubepods is not empty" >&2; ok=1; }
  done
  # (the runtime's pods are gone by now: stopping kubepods.slice would
  # kill what is left in it)
  local u
  for u in $(kubelet_units); do
    grep -qx "unit-kept $u" "$state" || systemctl stop "$u" || ok=1
  done
  if [ -n "$root" ]; then
    awk -v r="$root/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
      while read -r m; do umount -l "$m" || true; done
  fi
  return $ok
}

# kubelet_start BIN DIR LOG: start the kubelet in the background (its pid
# in KUBELET_PID) and wait until its healthz answers.
kubelet_start() {
  local bin=$1 dir=$2 log=$3 port
  port=$(awk '/^healthzPort:/ { print $2 }' "$dir/kubelet.yaml")
  "$bin" --config "$dir/kubelet.yaml" --root-dir "$dir/root" --v=2 > "$log" 2>&1 &
  KUBELET_PID=$!
  for _ in $(seq 1 1200); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$KUBELET_PID" 2>/dev/null; then
      echo "kubelet exited; its log ($log):" >&2
      tail -30 "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "kubelet: healthz on 127.0.0.1:$port did not answer in 120 s; its log:" >&2
  tail -30 "$log" >&2
  return 1
}

# kubelet_stop: SIGTERM the kubelet started by kubelet_start, SIGKILL after
# 10 s. Its pods stay (as a kubelet restart leaves them).
kubelet_stop() {
  [ -n "${KUBELET_PID:-}" ] || return 0
  kill "$KUBELET_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$KUBELET_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$KUBELET_PID" 2>/dev/null || true
  wait "$KUBELET_PID" 2>/dev/null || true
  KUBELET_PID=
}
