#!/usr/bin/env bash
# guest-handlers.sh: run in the stock Debian 12 guest (scripts/stock-vm.sh
# run -- scripts/guest-handlers.sh), as its non-root user, after
# guest-demo.sh in the same boot (it reuses the demo's build and images;
# alone it builds podlab and runs scripts/setup.sh demo first). podlab's
# CRI runtime handlers where cgroups are pure v2, so that Debian's crun
# 1.8.1, which refuses the CI host's hybrid layout, runs:
#   - podlab serve offers crun (CRI Status runtime_handlers, crictl info);
#     a pod on it (crictl runp --runtime crun) whose container is crun's
#     (its state under <stateDir>/oci/crun): logs (stdout and stderr), exec
#     -s and exec's exit code, stats (cpu and memory), crictl update of its
#     memory.max, and a container over its memory limit exits OOMKilled,
#     137; then rmp leaves no crun state; under the cgroupfs driver and
#     then the systemd one (crun --systemd-cgroup, the pod's scopes);
#   - `podlab run` of a Pod with spec.runtimeClassName: crun: podlab pods
#     shows the handler, exec's exit code, logs, rm -f;
#   - the same busybox `true` pod on each handler (libcontainer, Debian's
#     runc 1.1.5, crun; each must run here: a handler the node refuses
#     fails the script with the runtime's reason, as runc was refused
#     until the probe's container had its own /dev): `podlab bench -n
#     GUEST_HANDLERS_N` (default 5), p50 of pod up
#     → first exit, the full cycle and the OCI runtime's create and start
#     (a markdown table; TCG times, to compare within the table only);
#   - the leak check (systemd units included) is clean after each part.
# Each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "guest-handlers: $*"; }
fail() { say "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || fail "/sys/fs/cgroup is not cgroup v2"
command -v crun >/dev/null || fail "no crun in this guest"
t0=$(now)
t=$(now)
[ -x bin/podlab ] || sudo make -s build >/dev/null
sudo bin/podlab image ls 2>/dev/null | grep -q '^busybox' || sudo scripts/setup.sh demo >/dev/null
work=$(mktemp -d)
chmod 711 "$work"
serve_pid=
. scripts/lib/serve.sh # stop_serve
trap 'stop_serve; sudo rm -rf "$work"' EXIT
go build -o "$work/leakcheck" ./test/leakcheck
tools=/var/cache/podlab/stock-vm/go/bin
[ -x /opt/podlab/bin/crictl ] || sudo install -D -m 0755 -t /opt/podlab/bin "$tools/crictl"
say "setup: $(since "$t") s; $(crun --version | head -1), $(runc --version | head -1)"
leakcheck() { sudo "$work/leakcheck" -settle 10s || fail "leak check after $1: see the leak: lines above"; }
crun_state() { sudo sh -c "ls -A /run/podlab/oci/crun 2>/dev/null" || true; }

# crictl_part DRIVER: a crun pod through podlab serve.
crictl_part() {
  local driver=$1 t sock cid oom pod out rc
  t=$(now)
  echo "cgroupDriver: $driver" > "$work/config-$driver.yaml"
  sock=$work/cri-$driver.sock
  sudo bin/podlab --config "$work/config-$driver.yaml" serve --listen "unix://$sock" >"$work/serve-$driver.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 300); do sudo test -S "$sock" && break; sleep 0.1; done
  sudo test -S "$sock" || { tail "$work/serve-$driver.log"; fail "podlab serve did not start"; }
  crictl() { sudo /opt/podlab/bin/crictl --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 60s "$@"; }
  out=$(crictl info)
  grep -q '"name": "crun"' <<<"$out" || { echo "$out" | grep -A3 -i handler; fail "$driver: crun is not among the runtime handlers podlab serve offers"; }
  cat > "$work/pod.json" <<EOF
{"metadata": {"name": "crunpod-$driver", "namespace": "default", "uid": "crunpod-$driver-uid", "attempt": 0},
 "log_directory": "$work/crunpod-$driver-logs", "linux": {}}
EOF
  cat > "$work/web.json" <<'EOF'
{"metadata": {"name": "web"}, "image": {"image": "busybox:latest"},
 "command": ["sh", "-c", "echo up-crun; echo err-crun >&2; sleep 600"], "log_path": "web.log", "linux": {}}
EOF
  cat > "$work/oom.json" <<'EOF'
{"metadata": {"name": "oom"}, "image": {"image": "busybox:latest"},
 "command": ["sh", "-c", "dd if=/dev/zero of=/dev/null bs=20M"], "log_path": "oom.log",
 "linux": {"resources": {"memory_limit_in_bytes": 15728640, "memory_swap_limit_in_bytes": 15728640}}}
EOF
  pod=$(crictl runp --runtime crun "$work/pod.json")
  crictl inspectp "$pod" | grep -q '"runtimeHandler": "crun"' || fail "$driver: the pod's runtime handler is not crun"
  cid=$(crictl create --no-pull "$pod" "$work/web.json" "$work/pod.json")
  crictl start "$cid" >/dev/null
  sudo test -e "/run/podlab/oci/crun/$cid" || fail "$driver: no crun state for container $cid"
  [ "$(crictl exec -s "$cid" sh -c 'echo hi')" = hi ] || fail "$driver: exec -s"
  rc=0; crictl exec "$cid" sh -c 'exit 3' >/dev/null 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "$driver: exec of 'exit 3' succeeded"
  for _ in $(seq 50); do out=$(crictl logs "$cid" 2>&1); grep -q err-crun <<<"$out" && break; sleep 0.1; done
  grep -q up-crun <<<"$out" && grep -q err-crun <<<"$out" || fail "$driver: logs: $out"
  out=$(crictl stats -o json --id "$cid")
  awk '/"usageCoreNanoSeconds"|"workingSetBytes"/ { l = $0; if (l !~ /value/) getline l; if (l ~ /"value": *"?[1-9]/) n++ } END { exit n < 2 }' <<<"$out" ||
    fail "$driver: stats without cpu or memory: $out"
  crictl update --memory 67108864 "$cid" >/dev/null
  [ "$(crictl exec -s "$cid" cat /sys/fs/cgroup/memory.max)" = 67108864 ] || fail "$driver: memory.max after crictl update"
  oom=$(crictl create --no-pull "$pod" "$work/oom.json" "$work/pod.json")
  crictl start "$oom" >/dev/null
  for _ in $(seq 300); do crictl inspect "$oom" | grep -q '"state": "CONTAINER_EXITED"' && break; sleep 0.1; done
  out=$(crictl inspect "$oom")
  grep -q '"reason": "OOMKilled"' <<<"$out" && grep -q '"exitCode": 137' <<<"$out" ||
    fail "$driver: the container over its limit: $(grep -E '"(state|reason|exitCode)"' <<<"$out" | tr -s ' \n' ' ')"
  crictl stopp "$pod" >/dev/null
  crictl rmp "$pod" >/dev/null
  stop_serve
  [ -z "$(crun_state)" ] || fail "$driver: crun state left after rmp: $(crun_state)"
  say "$driver driver: crictl runp --runtime crun: logs, exec -s, exec exit code, stats, update (memory.max), OOMKilled 137, rmp: $(since "$t") s"
  leakcheck "the $driver crictl pod"
}
crictl_part cgroupfs
crictl_part systemd

# podlab run of a Pod with runtimeClassName: crun
t=$(now)
cat > "$work/run.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: crun-run}
spec:
  runtimeClassName: crun
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo via-crun; sleep 300"]
EOF
sudo bin/podlab run -q -f "$work/run.yaml" >/dev/null
sudo bin/podlab pods -o json | grep -qi '"runtimeHandler": "crun"' || fail "podlab pods does not show the crun handler: $(sudo bin/podlab pods -o json)"
rc=0; out=$(sudo bin/podlab exec crun-run -- sh -c 'echo in; exit 5') || rc=$?
[ "$rc" = 5 ] && [ "$out" = in ] || fail "podlab exec on crun: exit $rc, $out"
for _ in $(seq 50); do out=$(sudo bin/podlab logs crun-run); [ -n "$out" ] && break; sleep 0.1; done
[ "$out" = via-crun ] || fail "podlab logs: $out"
sudo bin/podlab rm -f crun-run >/dev/null
[ -z "$(crun_state)" ] || fail "crun state left after podlab rm: $(crun_state)"
say "podlab run (runtimeClassName: crun): pods, exec exit code 5, logs, rm -f: $(since "$t") s"
leakcheck "podlab run on crun"

# The same pod on each handler: podlab bench
t=$(now)
n=${GUEST_HANDLERS_N:-5}
echo "| handler (guest, TCG) | up → first exit p50 | full cycle p50 | ctr create p50 | ctr start p50 |"
echo "|---|---:|---:|---:|---:|"
for h in libcontainer runc crun; do
  {
    echo "apiVersion: v1"
    echo "kind: Pod"
    echo "metadata: {name: gh-$h}"
    echo "spec:"
    [ "$h" = libcontainer ] || echo "  runtimeClassName: $h"
    echo "  restartPolicy: Never"
    echo "  terminationGracePeriodSeconds: 0"
    echo "  securityContext: {seccompProfile: {type: Unconfined}}"
    echo "  containers:"
    echo "  - {name: app, image: busybox, command: [\"true\"]}"
  } > "$work/bench-$h.yaml"
  sudo bin/podlab bench -f "$work/bench-$h.yaml" -n "$n" --warmup 1 --no-progress > "$work/bench-$h.txt" 2>&1 ||
    { cat "$work/bench-$h.txt"; fail "podlab bench on $h"; }
  awk -v h="$h" '/^STAGE/ { on = 1 } on && NF >= 7 { name = $1; for (i = 2; i <= NF - 6; i++) name = name " " $i; p[name] = $(NF - 3) }
    END { printf "| %s | %s | %s | %s | %s |\n", h, p["first exit"], p["full cycle"], p["ctr app create"], p["ctr app start"] }' "$work/bench-$h.txt"
done
say "podlab bench -n $n on libcontainer, runc, crun (ms): $(since "$t") s"
leakcheck "podlab bench"
say "all passed in $(since "$t0") s"
