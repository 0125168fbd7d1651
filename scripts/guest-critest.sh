#!/usr/bin/env bash
# guest-critest.sh: run in the stock Debian 12 guest (scripts/stock-vm.sh
# run -- scripts/guest-critest.sh), as its non-root user: critest against
# podlab through `sudo make critest` (scripts/critest.sh), on systemd, pure
# cgroup v2 and AppArmor, where critest's 9 AppArmor specs run instead of
# skipping; fails unless all 9 ran and passed, besides critest.sh's own
# target (test/critest-target) and leak check.
#
#   scripts/guest-critest.sh [CRITEST.SH ARGS...]
#
# The arguments go to scripts/critest.sh (default: --only podlab --no-doc;
# e.g. `--benchmark-only --rounds 1` for podlab's and containerd 2.4's
# -benchmark in the guest). The guest has no network: stock-vm.sh puts in
# it what critest.sh would build or download, built on the host with the
# same Go: the CNI plugins, crictl and critest (installed below into
# setup.sh's dirs, where setup.sh then finds them), containerd 2.4 (its
# build cache) and the test images' registry (the clone's last critest
# run on the host: run `make critest` there first).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "guest-critest: $*"; }

[ -d /run/systemd/system ] || { say "systemd is not PID 1 here: run me in scripts/stock-vm.sh's guest"; exit 1; }
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || { say "/sys/fs/cgroup is not cgroup v2"; exit 1; }
[ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ] || { say "AppArmor is not enabled"; exit 1; }
[ -f build/critest/images.stamp ] || { say "no critest images in build/critest: run make critest on the host first"; exit 1; }

tools=/var/cache/podlab/stock-vm/go/bin
for t in crictl critest cni/bridge; do
  [ -x "$tools/$t" ] || { say "$tools/$t missing (scripts/stock-vm.sh builds it on the host)"; exit 1; }
done
sudo install -D -m 0755 -t /opt/podlab/bin "$tools/crictl" "$tools/critest"
sudo mkdir -p /opt/podlab/cni/bin
sudo cp -a "$tools/cni/." /opt/podlab/cni/bin/

[ $# -gt 0 ] || set -- --only podlab --no-doc
# critest -benchmark's time limits (a pod and container started within 5 s,
# 10 s between two image results) are pass/fail thresholds made for real
# hardware; TCG stretches every time 6-30 times: the same params, with
# limits that leave the measurement to the tables.
# GUEST_CRITEST_CYCLES=N runs N cycles of each lifecycle instead of the
# params' 20 (a quicker, rougher figure).
params=test/critest-benchmark.yaml
case " $* " in *" --benchmark"*)
  params=$(mktemp)
  trap 'rm -f "$params"' EXIT
  n=${GUEST_CRITEST_CYCLES:-20}
  [[ $n =~ ^[1-9][0-9]*$ ]] || { say "GUEST_CRITEST_CYCLES must be a positive integer"; exit 2; }
  {
    sed -E "s/^(podsNumber|containersNumber|imagesNumber): .*/\1: $n/" test/critest-benchmark.yaml
    cat <<'EOF'
# scripts/guest-critest.sh: time limits for the guest's TCG
containerBenchmarkTimeoutSeconds: 600
podBenchmarkTimeoutSeconds: 600
imageBenchmarkTimeoutSeconds: 300
podContainerStartBenchmarkTimeoutSeconds: 120
EOF
  } > "$params"
  set -- "$@" --params "$params" ;;
esac
t0=$SECONDS rc=0
sudo make critest CRITEST_FLAGS="$*" || rc=$?
say "make critest CRITEST_FLAGS=\"$*\" exited $rc after $((SECONDS - t0)) s"
res=build/critest/results
if [ "$rc" != 0 ]; then
  # Nothing in the guest comes back to the host: critest's failures, here.
  for log in "$res"/*.log; do
    sudo test -f "$log" || continue
    sudo grep -q -E '\[FAIL\]|\[PANICKED\]|\[TIMEDOUT\]' "$log" || continue
    say "$log: critest's failures"
    sudo sed -n '/^Summarizing [0-9]* Failure/,$p' "$log" | head -n 40
    sudo grep -E -B 2 -A 12 '^  \[(FAILED|PANICKED|TIMEDOUT)\]' "$log" | head -n 80
  done
fi

junit=build/critest/results/podlab-junit/junit.xml
if sudo test -f "$junit"; then
  # One <testcase> line per spec ([It]; not the suite's setup nodes), with its status.
  specs=$(sudo grep -o '<testcase name="\[It\] [^"]*" classname="[^"]*" status="[a-z]*"' "$junit")
  count() { grep -c "$1" <<<"$specs" || true; }
  say "podlab: $(count .) specs: $(count 'status="passed"') passed, $(count 'status="failed"') failed, $(count 'status="skipped"') skipped"
  apparmor=$(grep 'AppArmor' <<<"$specs" || true)
  passed=$(grep -c 'status="passed"' <<<"$apparmor" || true)
  grep -v 'status="passed"' <<<"$apparmor" | sed 's/^/guest-critest: not passed: /' || true
  [ "$passed" = 9 ] || { say "$passed of critest's 9 AppArmor specs passed for podlab"; exit 1; }
  say "all 9 of critest's AppArmor specs ran and passed for podlab"
fi
# -benchmark of both runtimes (e.g. --benchmark-only): critest.sh writes
# no doc for a partial run, and nothing in the guest comes back to the
# host, so the "Through the CRI" tables are printed here.
if sudo test -d "$res/podlab-benchmark" && sudo test -d "$res/containerd-benchmark"; then
  doc=$(mktemp)
  cp docs/benchmarks.md "$doc"
  # critest writes its results 0600, root's: the report runs as root.
  go build -o "$doc.report" ./test/critestreport
  sudo "$doc.report" benchmark -podlab "$res/podlab-benchmark" -containerd "$res/containerd-benchmark" \
    -doc "$doc" -params "$params" \
    -containerd-version "$("$(scripts/build-containerd.sh)/containerd" --version | awk '{ print $3 }')"
  say "critest -benchmark in this guest:"
  sed -n '/^### Pod lifecycle/,/^<!-- critest-benchmark: end/p' "$doc"
  sudo rm -f "$doc" "$doc.report"
fi
exit "$rc"
