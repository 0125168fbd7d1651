#!/usr/bin/env bash
# bench-cluster.sh: pod startup on a kubeadm node, podlab against
# containerd 2.4, the same node shape (scripts/cluster.sh up with each
# runtime in turn, in one run): the time from `kubectl apply` of a
# Deployment of REPLICAS busybox pods to each pod seen Running by a watch
# (kubectl get -w, each event stamped on arrival: the API's own timestamps
# have a resolution of 1 s), ROUNDS times, after a warm-up round that pulls
# the image. Prints p50/p90/max per runtime and their ratio.
#
# Root. Usage: scripts/bench-cluster.sh [-n REPLICAS] [-r ROUNDS] [RUNTIME...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-cluster.sh must run as root" >&2; exit 1; }
replicas=10 rounds=3
while getopts n:r: o; do
  case $o in
    n) replicas=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
runtimes=(podlab containerd)
[ $# = 0 ] || runtimes=("$@")
k8s=$(scripts/build-k8s.sh)
out=$(mktemp -d /tmp/bench-cluster.XXXXXX)

deployment() {
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: bench}
spec:
  replicas: $1
  selector: {matchLabels: {app: bench}}
  template:
    metadata: {labels: {app: bench}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: sleep
        image: registry.k8s.io/e2e-test-images/busybox:1.36.1-1
        command: [sleep, "100000"]
EOF
}

# round N FILE: apply a Deployment of N, append each pod's apply→Running
# seconds to FILE, delete it and wait until its pods are gone.
round() {
  local n=$1 file=$2 watch t0
  kc get pods -l app=bench -w --output-watch-events -o 'jsonpath={.object.metadata.name} {.object.status.phase}{"\n"}' |
    while read -r name phase; do echo "$EPOCHREALTIME $name $phase"; done > "$out/watch" &
  watch=$!
  sleep 1 # the watch is open before the apply
  t0=$EPOCHREALTIME
  deployment "$n" | kc apply -f - >/dev/null
  kc rollout status deployment/bench --timeout=300s >/dev/null
  sleep 0.5
  kill "$watch" 2>/dev/null; wait "$watch" 2>/dev/null || true
  awk -v t0="$t0" '$3 == "Running" && !seen[$2]++ { printf "%.3f\n", $1 - t0 }' "$out/watch" >> "$file"
  kc delete deployment bench --wait=true >/dev/null
  kc wait --for=delete pod -l app=bench --timeout=300s >/dev/null 2>&1 || true
}

stats() {
  sort -n "$1" | awk '{ v[NR] = $1 } END {
    p50 = v[int((NR + 1) / 2)]; p90 = v[int(NR * 0.9 + 0.999)]
    printf "%d pods  p50 %.2f s  p90 %.2f s  max %.2f s\n", NR, p50, p90, v[NR] }'
}

for rt in "${runtimes[@]}"; do
  echo "== $rt: scripts/cluster.sh up"
  admin=$(CLUSTER_RUNTIME=$rt scripts/cluster.sh up 2>"$out/up-$rt.log")
  kc() { "$k8s/kubectl" --kubeconfig "$admin" "$@"; }
  round 1 /dev/null # the image pulled
  : > "$out/$rt"
  for i in $(seq "$rounds"); do
    round "$replicas" "$out/$rt"
    echo "round $i: $(tail -n "$replicas" "$out/$rt" | sort -n | tr '\n' ' ')"
  done
  echo "$rt: $(stats "$out/$rt")"
  CLUSTER_RUNTIME=$rt scripts/cluster.sh down 2>"$out/down-$rt.log"
done
echo "== kubectl apply -> Running, $replicas replicas x $rounds rounds"
for rt in "${runtimes[@]}"; do printf '%-10s %s\n' "$rt" "$(stats "$out/$rt")"; done
echo "(samples in $out)"
