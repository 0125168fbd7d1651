#!/usr/bin/env bash
# guest-reboot.sh: run in the stock Debian 12 guest at the second boot of
# `scripts/stock-vm.sh run --reboot`, after guest-demo.sh (and whatever ran
# after it) at the first: the units running and enabled after a reboot are
# those of before `sudo make demo`: nothing podlab's set-up installed
# (containerd, docker-registry, ...) was left enabled to start at boot,
# and nothing of podlab's (cgroups, netns, pinned namespaces, state) is
# back or left.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "guest-reboot: $*"; }

[ "${STOCK_VM_BOOT:-}" = 2 ] || { say "run me at the second boot of scripts/stock-vm.sh run --reboot (STOCK_VM_BOOT=${STOCK_VM_BOOT:-unset})"; exit 1; }
for f in running enabled; do
  [ -f "$HOME/.units-$f-before-demo" ] || { say "no units list from guest-demo.sh at the first boot (~/.units-$f-before-demo)"; exit 1; }
done
# As guest-demo.sh lists them.
filter() { grep -Ev '^(user@[0-9]+\.service|user-[0-9]+\.slice|user-runtime-dir@[0-9]+\.service|session-[0-9]+\.scope|podlab-run\.service)$' | sort || true; }
running() { sudo systemctl list-units --state=running --no-legend --plain | awk '{print $1}' | filter; }
enabled() { sudo systemctl list-unit-files --state=enabled --no-legend | awk '{print $1}' | filter; }

fail=0
# A unit that ran at the first boot and not now may be one that exits when
# idle (systemd-fsckd); one that runs now and did not then is a change.
new_running=$(comm -13 "$HOME/.units-running-before-demo" <(running))
if [ -n "$new_running" ]; then
  say "running after the reboot, not before make demo: $new_running"
  fail=1
fi
if ! diff "$HOME/.units-enabled-before-demo" <(enabled); then
  say "the enabled units differ from before make demo (above: < before, > now)"
  fail=1
fi
left=$(ls -d /sys/fs/cgroup/podlab /sys/fs/cgroup/*podlab*.slice 2>/dev/null; ls /var/run/netns /var/run/ipcns /var/run/utsns /run/podlab/pods 2>/dev/null || true)
if [ -n "$left" ]; then
  say "podlab's left after the reboot: $left"
  fail=1
fi
[ "$fail" = 0 ] || exit 1
say "after a reboot: the same units run and are enabled as before make demo ($(wc -l < "$HOME/.units-running-before-demo") running, $(wc -l < "$HOME/.units-enabled-before-demo") enabled); no podlab cgroup, netns or state"
