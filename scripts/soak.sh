#!/usr/bin/env bash
# soak.sh [-n N] [-c C] [-f POD.yaml] [-l L]: N full pod cycles (run → first
# container exit → rm) sequentially, then N at concurrency C; afterwards the
# leak check must be clean, the podlab0 bridge must hold no ports and the
# host-local range must hold no leases. Then, unless L is 0, the CRI load
# (TestCRILoad): 8 gRPC clients × L pod cycles against `podlab serve`, with
# its latencies per RPC, RSS and fds. Prints counts and timings. Not run in
# CI (minutes); its figures go in closing notes.
set -euo pipefail
cd "$(dirname "$0")/.."
n=1000 c=4 pod="" l=200
while getopts "n:c:f:l:" o; do case $o in n) n=$OPTARG;; c) c=$OPTARG;; f) pod=$OPTARG;; l) l=$OPTARG;; *) exit 2;; esac; done
bin=./bin/podlab
[ -x "$bin" ] || { echo "build first: make build" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -z "$pod" ]; then
  pod=$tmp/pod.yaml
  cat > "$pod" <<'Y'
apiVersion: v1
kind: Pod
metadata: {name: soak}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - {name: app, image: busybox, command: ["true"], env: [{name: SOAK, value: "1"}]}
Y
fi

failures=$tmp/failures
: > "$failures"
cycle() { # cycle NAME: one line in $failures per failed cycle
  if ! sed "s/name: soak}/name: $1}/" "$pod" | "$bin" run -q -f - >/dev/null; then
    echo "run $1 failed" | tee -a "$failures" >&2
    "$bin" rm -f "$1" >/dev/null 2>&1 || true
    return 0
  fi
  "$bin" rm "$1" >/dev/null || echo "rm $1 failed" | tee -a "$failures" >&2
}
export -f cycle; export bin pod failures

t0=$(date +%s.%N)
for i in $(seq 1 "$n"); do cycle "soak-s$i"; done
t1=$(date +%s.%N)
seq 1 "$n" | xargs -P "$c" -I{} bash -c 'cycle soak-c{}'
t2=$(date +%s.%N)
fail=$(wc -l < "$failures")

# podlab's leak check (internal/leakcheck); it waits for the veths the
# kernel still destroys in the background.
leaks=$("${GO:-go}" run ./test/leakcheck 2>&1) || [ -n "$leaks" ] || leaks="leak check failed to run"
ports=$(ip -o link show master podlab0 2>/dev/null | wc -l)
leases=$(find /var/lib/cni/networks/podlab -maxdepth 1 -type f ! -name 'last_reserved_ip*' ! -name lock 2>/dev/null | wc -l)
printf 'sequential: %d cycles in %.1fs (%.1f/s)\n' "$n" "$(echo "$t1-$t0" | bc)" "$(echo "$n/($t1-$t0)" | bc -l)"
printf 'concurrency %d: %d cycles in %.1fs (%.1f/s)\n' "$c" "$n" "$(echo "$t2-$t1" | bc)" "$(echo "$n/($t2-$t1)" | bc -l)"
echo "failed cycles: $fail; bridge ports left: $ports; leases left: $leases"
if [ -n "$leaks" ]; then echo "leaks:"; echo "$leaks"; fi
[ "$fail" = 0 ] && [ "$ports" = 0 ] && [ "$leases" = 0 ] && [ -z "$leaks" ] || exit 1

# The CRI load: its own served state dir, server and leak check (test/e2e).
if [ "$l" != 0 ]; then
  echo "CRI load: 8 clients × $l pod cycles"
  PODLAB_CRI_LOAD_CYCLES=$l CI=true "${GO:-go}" test -tags "${GOTAGS:-seccomp}" -count=1 -timeout 60m \
    -run '^TestCRILoad$' -v ./test/e2e/ | grep -v '^=== RUN'
fi
