#!/usr/bin/env bash
# guest-demo.sh: run in a stock Debian 12 guest (scripts/stock-vm.sh run --
# scripts/guest-demo.sh), as its non-root user: the README's `sudo make
# demo` on systemd, pure cgroup v2 and AppArmor (the demo's verify checks
# each container's AppArmor profile and seccomp filter in the live
# process), then the host left alone: the same systemd units running and
# enabled as before, and no podlab cgroup, netns or AppArmor profile other
# than podlab-default, which stays loaded as containerd's does.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "guest-demo: $*"; }

[ -d /run/systemd/system ] || { say "systemd is not PID 1 here: run me in scripts/stock-vm.sh's guest"; exit 1; }
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || { say "/sys/fs/cgroup is not cgroup v2"; exit 1; }
[ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ] || { say "AppArmor is not enabled"; exit 1; }

# running, enabled: the running and the enabled units, less the ones a
# sudo session of this run starts for itself (its user slice and manager)
# and the unit that runs this script.
filter() { grep -Ev '^(user@[0-9]+\.service|user-[0-9]+\.slice|user-runtime-dir@[0-9]+\.service|session-[0-9]+\.scope|podlab-run\.service)$' | sort || true; }
running() { sudo systemctl list-units --state=running --no-legend --plain | awk '{print $1}' | filter; }
enabled() { sudo systemctl list-unit-files --state=enabled --no-legend | awk '{print $1}' | filter; }

running_before=$(running)
enabled_before=$(enabled)
# Kept for scripts/guest-reboot.sh, which compares after a reboot of the
# guest (stock-vm.sh run --reboot).
printf '%s\n' "$running_before" > "$HOME/.units-running-before-demo"
printf '%s\n' "$enabled_before" > "$HOME/.units-enabled-before-demo"
sudo make demo
# A unit that stopped meanwhile by itself (systemd-fsckd exits when idle
# after boot) is not the demo's doing; one that runs now and did not
# before, or a change to what is enabled, is.
new_running=$(comm -13 <(echo "$running_before") <(running))
if [ -n "$new_running" ] || [ "$enabled_before" != "$(enabled)" ]; then
  say "systemd units changed across make demo: running now, not before: ${new_running:-none}"
  diff <(echo "$enabled_before") <(enabled) || true
  exit 1
fi
say "no systemd unit runs or is enabled after make demo that did not before ($(echo "$running_before" | wc -l) running, $(echo "$enabled_before" | wc -l) enabled)"
# podlab's cgroup parent (config cgroupParent, /podlab) and the netns dir.
left=$(ls -d /sys/fs/cgroup/podlab 2>/dev/null; ls /var/run/netns 2>/dev/null)
if [ -n "$left" ]; then
  say "left behind: $left"
  exit 1
fi
sudo grep -q '^podlab-default (enforce)$' /sys/kernel/security/apparmor/profiles ||
  { say "podlab-default is not loaded in enforce mode"; exit 1; }
say "nothing of the demo left (cgroups, netns); podlab-default loaded (enforce)"
