#!/usr/bin/env bash
# guest-platform.sh: run in the stock Debian 12 guest (scripts/stock-vm.sh
# run -- scripts/guest-platform.sh), as its non-root user, after
# guest-demo.sh in the same boot (it reuses the demo's build and images;
# alone it builds podlab and runs scripts/setup.sh demo first). With
# cgroupDriver: systemd it shows, on systemd and pure cgroup v2:
#   - the pod's slice lists the pause's and each container's scope
#     (systemctl status), as containerd's SystemdCgroup = true makes them;
#   - the container sees its memory and cpu limits in its own
#     /sys/fs/cgroup/memory.max and cpu.max;
#   - a container over its memory limit exits OOMKilled, 137 (memory.events),
#     with root's inotify instances (fs.inotify.max_user_instances) limited
#     to those in use plus two: the shim's OOM watches share one instance,
#     where one per container would leave the third container unwatched;
#   - podlab rm stops the pod's containers in parallel: two that ignore
#     SIGTERM take one grace period, not two (the time is printed);
#   - crictl update (UpdateContainerResources, through podlab serve) changes
#     the live scope: memory.max and cpu.max in its cgroup, systemd's own
#     MemoryMax and CPUQuotaPerSecUSec (which it would otherwise write back
#     over the files at its next reload), and what the container reads;
#   - a warm sandbox (podlab pool fill) claimed by crictl runp with a
#     cgroup_parent slice made beforehand, as the kubelet makes the pod's:
#     the pause moves from the fill's slice to its scope in that slice, the
#     fill's slice goes, and the pod's container runs in that slice too;
#   - nothing of podlab's is left in systemd (units) or in the cgroup tree
#     after podlab rm, and after podlab gc of a run killed (SIGKILL, a
#     failpoint) between its pause and its containers;
#   - the leak check (internal/leakcheck, systemd units included) is clean.
# Each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "guest-platform: $*"; }
fail() { say "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

[ -d /run/systemd/system ] || fail "systemd is not PID 1 here: run me in scripts/stock-vm.sh's guest"
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || fail "/sys/fs/cgroup is not cgroup v2"

t0=$(now)
t=$(now)
# Alone (no guest-demo.sh before it): podlab built, then setup.sh demo
# (CNI plugins, the demo's images: it imports them once bin/podlab exists).
[ -x bin/podlab ] || sudo make -s build >/dev/null
sudo bin/podlab image ls 2>/dev/null | grep -q '^busybox' || sudo scripts/setup.sh demo >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The leak check, built once (the Go caches are warm; bin/ is root's).
go build -o "$work/leakcheck" ./test/leakcheck
say "setup: $(since "$t") s"
conf=$work/config.yaml
echo "cgroupDriver: systemd" > "$conf"
podlab() { sudo bin/podlab --config "$conf" "$@"; }
# Active, activating or failed units (a stopped transient unit may stay
# loaded, inactive, until systemd's next garbage collection).
# podlab's units only: the guest runs this script in podlab-run.service.
units() { sudo systemctl list-units --no-legend --plain 'podlab-*.scope' 'podlab-*.slice' podlab.slice | awk '{print $1}'; }
leakcheck() { sudo "$work/leakcheck" -settle 10s || fail "leak check: see the leak: lines above"; }
nothing_left() {
  local left
  left=$(units)
  [ -z "$left" ] || fail "$1: systemd units left: $left"
  left=$(ls -d /sys/fs/cgroup/podlab.slice /sys/fs/cgroup/podlab 2>/dev/null || true)
  [ -z "$left" ] || fail "$1: cgroups left: $left"
  leakcheck
  say "$1: no podlab unit or cgroup left, leak check clean"
}

[ -z "$(units)" ] || fail "podlab units before the test: $(units)"
podlab config | grep -qx 'cgroupDriver: systemd' || fail "podlab config does not show cgroupDriver: systemd"

cat > "$work/pod.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: sdpod
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 10
  containers:
  - name: app
    image: busybox:latest
    command: [sleep, "3600"]
    resources:
      limits: {memory: 64Mi, cpu: 500m}
  - name: side
    image: busybox:latest
    command: [sleep, "3600"]
  - name: oom
    image: busybox:latest
    command: [sh, -c, "dd if=/dev/zero of=/dev/null bs=64M"]
    resources:
      limits: {memory: 16Mi}
EOF

# Root's inotify instances, counted by descriptor (an instance shared by
# two processes counts twice: the limit can only come out higher).
# find exits 1 when a process it walks exits meanwhile: its count stands.
instances() { { sudo find /proc/[0-9]*/fd -lname 'anon_inode:inotify' -user root 2>/dev/null || true; } | wc -l; }
max_instances=$(cat /proc/sys/fs/inotify/max_user_instances)
restore_instances() { sudo sysctl -q fs.inotify.max_user_instances="$max_instances"; }
trap 'restore_instances; rm -rf "$work"' EXIT
limit=$(( $(instances) + 2 ))
sudo sysctl -q fs.inotify.max_user_instances="$limit"
say "fs.inotify.max_user_instances: $limit (root's in use + 2) for the pod's run and OOM kill"

t=$(now)
id=$(podlab run -q -f "$work/pod.yaml")
say "podlab run (systemd driver): pod $id in $(since "$t") s"

# The pod's slice holds the pause's scope and each container's.
slice=podlab-pod$id.slice
status=$(systemctl status --no-pager --lines=0 "$slice")
echo "$status"
grep -q "podlab-$id.scope" <<<"$status" || fail "$slice does not list the pause's scope podlab-$id.scope"
for c in app side; do
  cid=$(podlab ps -o json | tr -d ' \n' | grep -o "\"id\":\"[0-9a-f]*\",\"pod\":\"default/sdpod\",\"name\":\"$c\"" | grep -o '[0-9a-f]\{64\}')
  [ -n "$cid" ] || fail "no running container $c"
  grep -q "podlab-$cid.scope" <<<"$status" || fail "$slice does not list $c's scope podlab-$cid.scope"
done
say "systemctl status $slice lists the pause's scope and the containers' (app, side)"

# The limits, as the container sees them.
mem=$(podlab exec sdpod -c app -- cat /sys/fs/cgroup/memory.max)
cpu=$(podlab exec sdpod -c app -- cat /sys/fs/cgroup/cpu.max)
[ "$mem" = 67108864 ] || fail "app's memory.max is $mem, want 67108864 (64Mi)"
[ "$cpu" = "50000 100000" ] || fail "app's cpu.max is $cpu, want 50000 100000 (500m)"
say "inside app: memory.max $mem, cpu.max $cpu"

# The OOM kill, from memory.events.
t=$(now)
for _ in $(seq 120); do
  row=$(podlab ps -a -o json | tr -d ' \n' | grep -o '{[^{}]*"name":"oom"[^{}]*}' || true)
  grep -q '"state":"Exited"' <<<"$row" && break
  sleep 1
done
grep -q '"exitCode":137' <<<"$row" && grep -q '"reason":"OOMKilled"' <<<"$row" ||
  fail "oom container: $row, want exited 137 OOMKilled"
# Which read saw it: the watch's (memory.events, on inotify) or, when the
# scope went with its last process first, the kernel log's summary line.
how="memory.events"
sudo sh -c 'grep -qs "OOM kill found in the kernel log" /run/podlab/pods/*/shim.log' && how="the kernel log (the scope had gone)"
say "oom container: exited 137, OOMKilled, read from $how ($(since "$t") s)"
restore_instances

# app and side are sleeps, PID 1 of their PID namespaces: they ignore
# SIGTERM and are killed after the grace period, both at once.
t=$(now)
podlab rm sdpod >/dev/null
say "podlab rm: $(since "$t") s (two containers ignoring SIGTERM, grace period 10 s)"
nothing_left "after rm"

# UpdateContainerResources through podlab serve and crictl: the new limits
# must reach systemd's view of the scope, as libcontainer's systemd
# manager Set does (SetUnitProperties, then the files), not only the files.
tools=/var/cache/podlab/stock-vm/go/bin
[ -x /opt/podlab/bin/crictl ] || sudo install -D -m 0755 -t /opt/podlab/bin "$tools/crictl"
t=$(now)
sock=$work/cri.sock
sudo bin/podlab --config "$conf" serve --listen "unix://$sock" >"$work/serve.log" 2>&1 &
serve_pid=$!
. scripts/lib/serve.sh # stop_serve
trap 'stop_serve; sudo rm -rf "$work"' EXIT
for _ in $(seq 300); do sudo test -S "$sock" && break; sleep 0.1; done
sudo test -S "$sock" || { tail "$work/serve.log"; fail "podlab serve did not start"; }
crictl() { sudo /opt/podlab/bin/crictl --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 60s "$@"; }
cat > "$work/upd-pod.json" <<EOF
{"metadata": {"name": "updpod", "namespace": "default", "uid": "updpod-uid", "attempt": 0},
 "log_directory": "$work/updpod-logs", "linux": {}}
EOF
cat > "$work/upd-ctr.json" <<'EOF'
{"metadata": {"name": "upd"}, "image": {"image": "busybox:latest"}, "command": ["sleep", "3600"],
 "log_path": "upd.log",
 "linux": {"resources": {"memory_limit_in_bytes": 67108864, "cpu_quota": 50000, "cpu_period": 100000}}}
EOF
cid=$(crictl run --no-pull "$work/upd-ctr.json" "$work/upd-pod.json")
scope=podlab-$cid.scope
# limits MEMORY CPU_MAX QUOTA_PER_SEC WHEN: the scope's files, systemd's
# properties and the container's own view all agree.
limits() {
  local cg got
  cg=/sys/fs/cgroup$(systemctl show -P ControlGroup "$scope")
  got="$(cat "$cg/memory.max") / $(cat "$cg/cpu.max")"
  [ "$got" = "$1 / $2" ] || fail "$4: $cg: memory.max / cpu.max are $got, want $1 / $2"
  got=$(systemctl show -p MemoryMax -p CPUQuotaPerSecUSec "$scope" | sort | tr '\n' ' ')
  [ "$got" = "CPUQuotaPerSecUSec=$3 MemoryMax=$1 " ] ||
    fail "$4: systemctl show $scope: $got, want CPUQuotaPerSecUSec=$3 MemoryMax=$1"
  got="$(crictl exec "$cid" cat /sys/fs/cgroup/memory.max) / $(crictl exec "$cid" cat /sys/fs/cgroup/cpu.max)"
  [ "$got" = "$1 / $2" ] || fail "$4: inside the container: memory.max / cpu.max are $got, want $1 / $2"
  say "$4: $scope: memory.max $1, cpu.max $2; systemd: MemoryMax=$1 CPUQuotaPerSecUSec=$3; the same inside"
}
limits 67108864 "50000 100000" 500ms "crictl run"
crictl update --memory 134217728 --cpu-quota 30000 --cpu-period 100000 "$cid" >/dev/null
limits 134217728 "30000 100000" 300ms "crictl update"
crictl rmp -f "$(crictl pods -q --name updpod)" >/dev/null

# A warm sandbox (issue 35) claimed by a pod whose cgroup_parent is a slice
# its owner made, as the kubelet's systemd cgroup manager makes
# kubepods-…-pod<uid>.slice before RunPodSandbox: the pause leaves the
# fill's slice for a scope in the pod's, the fill's slice goes, and the
# pod's container runs in the pod's slice too.
t=$(now)
podlab pool fill 1 >/dev/null
wid=$(podlab pool ls | awk 'NR == 2 { print $1 }')
[ -n "$wid" ] || fail "podlab pool fill 1 made no warm sandbox"
fillslice=$(units | grep '^podlab-pod' || true)
[ -n "$fillslice" ] || fail "the warm sandbox $wid has no slice of its own: $(units)"
parent=claimtest.slice
sudo busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager \
  StartTransientUnit 'ssa(sv)a(sa(sv))' "$parent" fail 0 0 >/dev/null
for _ in $(seq 50); do [ "$(systemctl is-active "$parent")" = active ] && break; sleep 0.1; done
trap 'stop_serve; sudo systemctl stop claimtest.slice 2>/dev/null; sudo rm -rf "$work"' EXIT
cat > "$work/claim-pod.json" <<EOF
{"metadata": {"name": "claimpod", "namespace": "default", "uid": "claimpod-uid", "attempt": 0},
 "log_directory": "$work/claimpod-logs", "linux": {"cgroup_parent": "$parent"}}
EOF
cat > "$work/claim-ctr.json" <<'EOF'
{"metadata": {"name": "app"}, "image": {"image": "busybox:latest"}, "command": ["sleep", "3600"], "log_path": "app.log"}
EOF
pod=$(crictl runp "$work/claim-pod.json")
[ "${pod:0:12}" = "$wid" ] || fail "crictl runp made pod $pod, not the warm sandbox $wid: the claim was missed"
podlab trace -n default claimpod | grep -q 'cgroup move' || fail "claimpod's trace has no cgroup move"
pause=$(podlab pods | awk '$2 == "claimpod" { print $6 }')
want="0::/$parent/podlab-$pod.scope"
got=$(cat "/proc/$pause/cgroup")
[ "$got" = "$want" ] || fail "the claimed pod's pause (PID $pause) is in $got, want $want"
left=$(units | grep -Fx "$fillslice" || true)
[ -z "$left" ] || fail "the fill's slice $fillslice is still there after the claim"
cid=$(crictl create "$pod" "$work/claim-ctr.json" "$work/claim-pod.json")
crictl start "$cid" >/dev/null
cpid=$(crictl inspect "$cid" | tr -d ' \n' | grep -o '"pid":[0-9]*' | head -1 | cut -d: -f2)
got=$(cat "/proc/$cpid/cgroup")
[ "$got" = "0::/$parent/podlab-$cid.scope" ] || fail "the claimed pod's container (PID $cpid) is in $got, want 0::/$parent/podlab-$cid.scope"
status=$(systemctl status --no-pager --lines=0 "$parent")
grep -q "podlab-$pod.scope" <<<"$status" && grep -q "podlab-$cid.scope" <<<"$status" ||
  fail "$parent does not list the pause's and the container's scopes: $status"
say "warm sandbox $wid claimed under cgroup_parent $parent: pause in $want, container in its scope there, the fill's $fillslice gone ($(since "$t") s)"
crictl rmp -f "$pod" >/dev/null
sudo systemctl stop "$parent"
stop_serve
say "crictl run, update, rmp (systemd driver): $(since "$t") s"
nothing_left "after crictl rmp"

# A run killed (SIGKILL) after its pause started: its slice and the
# pause's scope stay in systemd until podlab gc.
t=$(now)
rc=0
sudo PODLAB_FAILPOINT=after-pause:kill bin/podlab --config "$conf" run -q -f "$work/pod.yaml" >/dev/null 2>&1 || rc=$?
[ "$rc" = 137 ] || fail "the killed run exited $rc, want 137 (SIGKILL)"
left=$(units)
grep -q "podlab-pod" <<<"$left" || fail "after the kill, no pod slice in systemd: $left"
say "run killed after its pause: units left: $(echo $left)"
podlab gc
say "podlab gc: $(since "$t") s"
nothing_left "after gc of a killed run"

say "passed in $(since "$t0") s"
