#!/usr/bin/env bash
# kubelet-demo.sh: the seeds' chain driven by the real kubelet. The kubelet
# (scripts/build-kubelet.sh) runs standalone against `podlab serve` and
# starts a static pod: an init container writing into an emptyDir the app
# container reads, an env from a fieldRef, an env colliding with a
# device-plugin-style platform env, and podlab's runtime-point CA rule.
# Then podlab verify, inspect (the kubelet's ContainerConfig as the CRI
# layer, what podlab added after it) and trace (the kubelet's CRI calls as
# spans over podlab's stages, a waterfall and a Chrome trace); removing the
# manifest has the kubelet stop and remove the pod through podlab; the host
# is left as found (sysctls, dirs, cgroups, mounts; leak checks).
#
# Root. Private state dir, socket and kubelet root under $KDEMO_DIR
# (default /run/podlab-kdemo); images from podlab's store, never pulled.
# Env: KDEMO_KEEP_TRACE=FILE also writes the Chrome trace there;
# KDEMO_LOGS=DIR keeps the kubelet's and podlab serve's logs there;
# KDEMO_CGROUP_DRIVER=systemd runs podlab and the kubelet with the systemd
# cgroup driver (where systemd is PID 1: scripts/guest-kubelet.sh) and
# shows the pod's units under the kubelet's slices.
# KDEMO_WARM_POOL=N fills N warm sandboxes before the kubelet starts and
# runs podlab serve with --warm-pool N (issue 35): the static pod must
# claim one (its trace shows the fill, paid ahead); with the systemd
# driver the claim moves the pause into the kubelet's pod slice. The
# pool is drained at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/opt/podlab/bin
# shellcheck source=scripts/kubelet/lib.sh
. scripts/kubelet/lib.sh

[ "$(id -u)" = 0 ] || { echo "kubelet-demo.sh must run as root" >&2; exit 1; }
[ -x bin/podlab ] || { echo "kubelet-demo: bin/podlab not built (make build)" >&2; exit 1; }
say() { printf '\n== %s\n' "$*"; }

kubelet=$(scripts/build-kubelet.sh)
dir=${KDEMO_DIR:-/run/podlab-kdemo}
sock=$dir/podlab.sock
rm -rf "$dir"
mkdir -p "$dir"
{
  echo "stateDir: $dir/state"
  [ -z "${KDEMO_CGROUP_DRIVER:-}" ] || echo "cgroupDriver: $KDEMO_CGROUP_DRIVER"
  cat scripts/kubelet/podlab-rules.yaml
} > "$dir/podlab.yaml"
podlab() { bin/podlab --config "$dir/podlab.yaml" "$@"; }
# The kubelet's driver must be podlab's.
driver=$(podlab config | awk '$1 == "cgroupDriver:" { gsub(/"/, "", $2); print $2 }')
driver=${driver:-cgroupfs}
crictl() { command crictl --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 30s "$@"; }

# busybox in podlab's store, imported from the host's static busybox.
if ! podlab image ls | grep -q '^busybox:latest[[:space:]]'; then
  scripts/busybox-rootfs.sh "$dir/busybox"
  podlab image import busybox:latest "$dir/busybox" >/dev/null
  rm -rf "$dir/busybox"
fi

pool=${KDEMO_WARM_POOL:-0}
serve_pid=
cleanup() {
  local rc=$?
  set +e
  kubelet_stop
  if [ -n "$serve_pid" ]; then
    # what the kubelet left (a failed run): removed through podlab
    for id in $(podlab pods -o json 2>/dev/null | awk -F'"' '/"id":/ { print $4 }'); do podlab rm -f "$id" >/dev/null; done
    kill "$serve_pid"; wait "$serve_pid"
  fi
  [ "$pool" = 0 ] || podlab pool drain >/dev/null
  kubelet_restore_host "$dir/host-state" "$dir/kubelet" || rc=1
  if [ $rc != 0 ]; then
    echo "--- podlab serve log (tail)"; tail -20 "$dir/serve.log"
    echo "--- kubelet log (errors)"; grep -E '^E' "$dir/kubelet.log" | tail -20
  fi
  if [ -n "${KDEMO_LOGS:-}" ]; then
    mkdir -p "$KDEMO_LOGS" && cp "$dir/serve.log" "$dir/kubelet.log" "$KDEMO_LOGS/"
  fi
  rm -rf "$dir"
  exit $rc
}
trap cleanup EXIT

kubelet_save_host "$dir/host-state"
if [ "$pool" != 0 ]; then
  say "warm pool: $pool sandboxes filled before the kubelet starts"
  podlab pool fill "$pool" >/dev/null
  podlab pool ls
fi
bin/podlab --config "$dir/podlab.yaml" serve --listen "unix://$sock" --log-level debug --warm-pool "$pool" > "$dir/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
kubelet_write_config "$dir/kubelet" "$sock" 20248 "$driver"
say "kubelet $("$kubelet" --version | awk '{ print $2 }') standalone on podlab serve ($sock), cgroupDriver: $driver"
kubelet_start "$kubelet" "$dir/kubelet" "$dir/kubelet.log"

cp scripts/kubelet/kdemo.yaml "$dir/kdemo.yaml"
say "manifest written: $dir/kubelet/manifests/kdemo.yaml"
# renamed in, so that the kubelet's inotify watch never reads a half-written file
mv "$dir/kdemo.yaml" "$dir/kubelet/manifests/kdemo.yaml"
running=
for _ in $(seq 1 1800); do
  running=$(crictl ps -q --name '^app$' --state Running 2>/dev/null || true)
  [ -n "$running" ] && break
  sleep 0.1
done
[ -n "$running" ] || { echo "kubelet-demo: the app container did not run within 180 s" >&2; exit 1; }
crictl pods
crictl ps -a
pod=$(crictl pods -q --name kdemo | head -1)
if [ "$pool" != 0 ]; then
  # Claimed, not made cold: the trace shows the fill under "(paid ahead)"
  # and the claim's steps, no PoolMiss.
  # (into a variable first: grep -q ending the pipe early would fail it)
  stages=$(podlab trace "$pod")
  grep -q '(paid ahead)' <<<"$stages" ||
    { echo "kubelet-demo: the static pod did not claim a warm sandbox (no fill paid ahead in its trace)" >&2; echo "$stages" >&2; grep -i 'pool' "$dir/serve.log" | tail -5 >&2; exit 1; }
  say "warm pool: the static pod claimed a warm sandbox"
  grep -E 'paid ahead|claim|cgroup move' <<<"$stages"
fi

if [ "$driver" = systemd ]; then
  # The kubelet made the pod's slice (kubepods-besteffort-pod<uid>.slice,
  # its cgroup_parent); podlab's scopes for the pause and the app are in it.
  say "systemd: the pod's slice, made by the kubelet, holds podlab's scopes"
  pid=$(crictl inspect -o go-template --template '{{.info.pid}}' "$running")
  cg=$(awk -F: '$1 == 0 { print $3 }' "/proc/$pid/cgroup")
  echo "app (pid $pid): $cg"
  [[ $cg =~ ^/kubepods\.slice/kubepods-besteffort\.slice/(kubepods-besteffort-pod[0-9a-f_]+\.slice)/podlab-$running\.scope$ ]] ||
    { echo "kubelet-demo: the app's cgroup $cg is not podlab-$running.scope in the kubelet's besteffort pod slice" >&2; exit 1; }
  slice=${BASH_REMATCH[1]}
  systemctl status --no-pager --lines=0 "$slice"
  systemctl status --no-pager --lines=0 "$slice" | grep -q "podlab-$pod\.scope" ||
    { echo "kubelet-demo: $slice does not list the pause's scope podlab-$pod.scope" >&2; exit 1; }
fi

say "the app's log (init's greeting through the emptyDir)"
for _ in $(seq 1 50); do crictl logs "$running" 2>/dev/null | grep -q gpu && break; sleep 0.1; done
crictl logs "$running"

say "podlab verify"
podlab verify "$pod"

say "podlab inspect: the kubelet's ContainerConfig (cri), what podlab added (oci), the process"
podlab inspect "$pod" -c app --layer all

say "podlab trace: the kubelet's CRI calls over podlab's stages"
podlab trace "$pod"
podlab trace "$pod" -o chrome > "$dir/kdemo-trace.json"
if [ -n "${KDEMO_KEEP_TRACE:-}" ]; then cp "$dir/kdemo-trace.json" "$KDEMO_KEEP_TRACE"; fi
echo "Chrome trace: $(grep -c '"ph": "X"' "$dir/kdemo-trace.json") spans"

say "manifest removed: the kubelet stops the pod, then removes it (its GC runs once a minute)"
rm "$dir/kubelet/manifests/kdemo.yaml"
t0=$EPOCHREALTIME
# (pods, not the warm pool's entries, namespace "(pool)")
pods_left() { podlab pods -o json | grep '"namespace":' | grep -vc '"(pool)"' || true; }
for _ in $(seq 1 1500); do
  [ "$(pods_left)" = 0 ] && break
  sleep 0.1
done
[ "$(pods_left)" = 0 ] || { echo "kubelet-demo: pods left 150 s after the manifest's removal:" >&2; podlab pods >&2; exit 1; }
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "pod gone %.1f s after the manifest\n", b - a }'
kubelet_stop
kill "$serve_pid"; wait "$serve_pid" || true; serve_pid=
[ "$pool" = 0 ] || { say "warm pool drained"; podlab pool drain; }
kubelet_restore_host "$dir/host-state" "$dir/kubelet"

say "leak checks"
go run ./test/leakcheck -dir "$dir"
echo "kubelet-demo: OK"
