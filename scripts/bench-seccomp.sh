#!/usr/bin/env bash
# bench-seccomp.sh: what podlab's default seccomp profile costs a pod, whole
# process: `podlab run -q` of a one-container busybox `true` pod, then
# `podlab rm -f`, under RuntimeDefault and under Unconfined, interleaved
# (the first variant rotating every round), and the ratio of the p50s.
#
# Usage: sudo scripts/bench-seccomp.sh [-n N] [--podlab BIN] [--baseline BIN]
#                                      [--out DIR]
#
#   -n N        measured rounds (default 21); one warm-up round first (it
#               compiles the profile into podlab's seccomp cache)
#   --podlab B  the podlab binary (default bin/podlab; its shim and pause
#               beside it)
#   --baseline B  another podlab build (e.g. one without the precompiled
#               seccomp path) run the same way in the same rounds, with its
#               own ratio
#   --out DIR   keep samples.tsv (round, variant, µs) there (default: a
#               new /tmp/pbs-results.XXXXXX)
#
# podlab runs with a private config: state, images and logs under a
# temporary directory, removed on exit with whatever pods are left.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
N=21 PODLAB=$PWD/bin/podlab BASELINE="" OUT=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    -n) N=${2:?}; shift;;
    --podlab) PODLAB=${2:?}; shift;;
    --baseline) BASELINE=${2:?}; shift;;
    --out) OUT=${2:?}; shift;;
    -h|--help) usage;;
    *) echo "bench-seccomp: unknown argument $1" >&2; usage 2 >&2;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "bench-seccomp: needs root" >&2; exit 1; }
for b in "$PODLAB" $BASELINE; do [ -x "$b" ] || { echo "bench-seccomp: $b not built (make build)" >&2; exit 1; }; done
OUT=${OUT:-$(mktemp -d /tmp/pbs-results.XXXXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/pbs-work.XXXXXX)
CFG=$WORK/config.yaml
cleanup() {
  "$PODLAB" --config "$CFG" rm -f pbs-runtimedefault pbs-unconfined </dev/null >/dev/null 2>&1 || :
  rm -rf "$WORK"
}
trap cleanup EXIT
cat > "$CFG" <<EOF
stateDir: $WORK/state
imageDir: $WORK/images
logDir: $WORK/logs
EOF
scripts/busybox-rootfs.sh "$WORK/rootfs" >/dev/null
"$PODLAB" --config "$CFG" image import busybox:latest "$WORK/rootfs" >/dev/null
for profile in RuntimeDefault Unconfined; do
  cat > "$WORK/$profile.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: pbs-$(tr A-Z a-z <<<"$profile"), namespace: default}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  securityContext: {seccompProfile: {type: $profile}}
  containers:
  - {name: app, image: busybox, command: ["true"]}
EOF
done

# cycle BIN PROFILE: one run + rm -f; the µs it took in REPLY.
cycle() {
  local t0=$EPOCHREALTIME id t1
  id=$("$1" --config "$CFG" run -q -f "$WORK/$2.yaml" </dev/null)
  "$1" --config "$CFG" rm -f "$id" </dev/null >/dev/null
  t1=$EPOCHREALTIME
  REPLY=$(( ${t1/./} - ${t0/./} ))
}
variants=(podlab:RuntimeDefault podlab:Unconfined)
[ -z "$BASELINE" ] || variants+=(baseline:RuntimeDefault baseline:Unconfined)
bin() { if [ "${1%%:*}" = podlab ]; then echo "$PODLAB"; else echo "$BASELINE"; fi; }
for v in "${variants[@]}"; do cycle "$(bin "$v")" "${v#*:}"; done   # warm-up
: > "$OUT/samples.tsv"
for ((r = 1; r <= N; r++)); do
  for ((i = 0; i < ${#variants[@]}; i++)); do   # the first variant rotates
    v=${variants[$(( (r + i) % ${#variants[@]} ))]}
    cycle "$(bin "$v")" "${v#*:}"; printf '%d\t%s\t%d\n' "$r" "$v" "$REPLY" >> "$OUT/samples.tsv"
  done
done
# nearest-rank p50 and p90 per variant, then each build's ratio of p50s
awk -F'\t' '
  { v[$2, ++c[$2]] = $3 }
  function q(p, f,   i, j, t, a) { for (i = 1; i <= c[p]; i++) a[i] = v[p, i]
    for (i = 2; i <= c[p]; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return a[int(f * c[p] + 0.9999)] / 1000 }
  END {
    for (p in c) printf "%-24s p50 %7.1f ms  p90 %7.1f ms  (n=%d)\n", p, q(p, 0.5), q(p, 0.9), c[p]
    split("podlab baseline", builds, " ")
    for (i = 1; i <= 2; i++) if ((builds[i] ":Unconfined") in c)
      printf "%s: RuntimeDefault / Unconfined (p50) = %.3f\n", builds[i], q(builds[i] ":RuntimeDefault", 0.5) / q(builds[i] ":Unconfined", 0.5)
  }' "$OUT/samples.tsv" | tee "$OUT/summary.txt"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cpus; samples in $OUT" | tee -a "$OUT/summary.txt"
