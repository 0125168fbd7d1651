#!/usr/bin/env bash
# guest-kubelet.sh: run in the stock Debian 12 guest (scripts/stock-vm.sh
# run -- scripts/guest-kubelet.sh), as its non-root user: `make
# kubelet-demo`'s static pod through podlab with the systemd cgroup driver
# (scripts/kubelet-demo.sh with KDEMO_CGROUP_DRIVER=systemd), the kubelet's
# cgroupDriver: systemd too, as kubeadm sets it. The demo checks that the
# app's cgroup is podlab's scope in the kubelet's pod slice
# (kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice)
# and that the slice lists the pause's scope; here, after it, nothing of
# the kubelet's or podlab's is left in systemd or in the cgroup tree.
# Then again with a warm pool (KDEMO_WARM_POOL=1, issue 35): the static pod
# claims the warm sandbox, whose pause moves from the fill's slice to its
# scope in the kubelet's pod slice, which the demo checks as before.
# The kubelet comes from the host's scripts/build-kubelet.sh cache
# (stock-vm.sh copies it in; the guest cannot build it).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "guest-kubelet: $*"; }
fail() { say "FAIL: $*"; exit 1; }

[ -d /run/systemd/system ] || fail "systemd is not PID 1 here: run me in scripts/stock-vm.sh's guest"
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || fail "/sys/fs/cgroup is not cgroup v2"
kubelet=$(scripts/build-kubelet.sh 2>/dev/null) || fail "no kubelet in /var/cache/podlab: run scripts/build-kubelet.sh on the host"
tools=/var/cache/podlab/stock-vm/go/bin
[ -x /opt/podlab/bin/crictl ] || sudo install -D -m 0755 -t /opt/podlab/bin "$tools/crictl"
# podlab built and set up (CNI plugins, busybox), as guest-platform.sh
# does when guest-demo.sh did not run before it.
[ -x bin/podlab ] || sudo make -s build >/dev/null
sudo bin/podlab image ls 2>/dev/null | grep -q '^busybox' || sudo scripts/setup.sh demo >/dev/null

units() {
  sudo systemctl list-units --no-legend --plain 'kubepods*' 'podlab-*.scope' 'podlab-*.slice' podlab.slice | awk '{ print $1 }'
}
[ -z "$(units)" ] || fail "kubelet or podlab units before the demo: $(units)"

t0=$SECONDS
sudo KDEMO_CGROUP_DRIVER=systemd scripts/kubelet-demo.sh
say "kubelet-demo.sh (systemd driver, $("$kubelet" --version)): $((SECONDS - t0)) s"

nothing_left() {
  local left
  left=$(units)
  [ -z "$left" ] || fail "units left after the demo$1: $left"
  left=$(ls -d /sys/fs/cgroup/kubepods* /sys/fs/cgroup/podlab* 2>/dev/null || true)
  [ -z "$left" ] || fail "cgroups left after the demo$1: $left"
  say "no kubepods or podlab unit or cgroup left$1"
}
nothing_left ""

t0=$SECONDS
sudo KDEMO_CGROUP_DRIVER=systemd KDEMO_WARM_POOL=1 scripts/kubelet-demo.sh
say "kubelet-demo.sh with a warm pool (systemd driver): $((SECONDS - t0)) s"
nothing_left " with a warm pool"
