#!/usr/bin/env bash
# peers/scale-curve.sh: how podlab's pod-up and teardown latency grow with the
# number of pods already alive on the node — the `--live` curve, measured
# with the CLI (`podlab run` / `podlab rm`) for when `podlab bench` is absent.
#
# Usage: sudo scripts/peers/scale-curve.sh [--levels 0,10,50,100] [-n N] [--out DIR] [--podlab BIN]
#
# For each level L (ascending), background pods (busybox `sleep 3600`) are
# added until L are alive; then N probe pods (one busybox `true` container,
# as in bench-peers.sh) are run to their container's exit and removed, one
# at a time. At each level it also checks that every live pod is Ready and
# reads the pause and shim RSS of the live pods. At the end all live pods
# are removed in one `podlab rm -f` (timed). Everything runs with a private
# --config and image store; pods are named pbp<pid>-…; all are removed on
# exit.
#
# Output in DIR: curve.tsv (level, metric, µs/kB samples), curve.md.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/../.."
. scripts/peers/lib.sh

LEVELS=0,10,50,100 N=10 OUT="" PODLAB=$PWD/bin/podlab
while [ $# -gt 0 ]; do
  case $1 in
    --levels) LEVELS=${2:?}; shift;;
    -n) N=${2:?}; shift;;
    --out) OUT=${2:?}; shift;;
    --podlab) PODLAB=${2:?}; shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) echo "scale-curve: unknown argument $1" >&2; exit 2;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "scale-curve: must run as root" >&2; exit 1; }
[ -x "$PODLAB" ] || { echo "scale-curve: $PODLAB not built (make build)" >&2; exit 1; }
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "scale-curve: -n must be a positive integer" >&2; exit 2; }
say() { echo "scale-curve: $*" >&2; }
START_S=$SECONDS

TAG=pbp$$
WORK=$(mktemp -d /tmp/pbp.XXXXXX)
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/pbp-results.XXXXXX)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
LOG=$WORK/podlab.log; : > "$LOG"
LIVE=()
PROBE=""
cleanup() {
  local rc=$?
  set +e
  trap - INT TERM
  if [ ${#LIVE[@]} -gt 0 ] || [ -n "$PROBE" ]; then
    say "removing ${#LIVE[@]} live pod(s)"
    "$PODLAB" --config "$PL_CFG" rm -f "${LIVE[@]}" ${PROBE:+"$PROBE"} >>"$LOG" 2>&1
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

scripts/busybox-rootfs.sh "$WORK/rootfs"
snapshot_podlab "$PODLAB" "$WORK/bin"; PODLAB=$WORK/bin/podlab
podlab_setup "$PODLAB" "$WORK" "$WORK/rootfs"
open_sleep_fd "$WORK"
exec {SAMPLES_FD}>"$OUT/curve.tsv"
rec() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >&"$SAMPLES_FD"; }

start_live() { # start_live I
  local name=$TAG-live-$1 t0 t1
  podlab_manifest "$name" sleep 3600 > "$WORK/live.yaml"
  LIVE+=("$name")
  now t0
  "$PODLAB" --config "$PL_CFG" run -q -f "$WORK/live.yaml" </dev/null >/dev/null 2>>"$LOG" ||
    { say "live pod $name failed: $(tail -2 "$LOG" | tr '\n' ' ')"; return 1; }
  now t1
  rec "$(( ${#LIVE[@]} ))" live.create $((t1 - t0))
}

probe() { # probe LEVEL I
  local name=$TAG-probe-$1-$2 id pid t0 t1 t2 t3
  podlab_manifest "$name" true > "$WORK/probe.yaml"
  PROBE=$name
  now t0
  "$PODLAB" --config "$PL_CFG" run -q -f "$WORK/probe.yaml" </dev/null >"$WORK/id" 2>>"$LOG" ||
    { say "probe $name: run failed: $(tail -2 "$LOG" | tr '\n' ' ')"; return 1; }
  read -r id < "$WORK/id"
  podlab_ctr_pid "$id" && pid=$REPLY && wait_gone "$pid" || { say "probe $name: no exit"; return 1; }
  now t1
  now t2
  "$PODLAB" --config "$PL_CFG" rm -f "$name" </dev/null >>"$LOG" 2>&1 || { say "probe $name: rm failed"; return 1; }
  now t3
  PROBE=""
  rec "$1" up $((t1 - t0)); rec "$1" rm $((t3 - t2)); rec "$1" cycle $((t1 - t0 + t3 - t2))
}

# rss_of PID: VmRSS in kB
rss_of() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

declare -A READY=()
IFS=, read -r -a levels <<< "$LEVELS"
for L in "${levels[@]}"; do
  [[ $L =~ ^[0-9]+$ ]] || { echo "scale-curve: bad level $L" >&2; exit 2; }
  while [ ${#LIVE[@]} -lt "$L" ]; do start_live $(( ${#LIVE[@]} + 1 )) || break; done
  [ ${#LIVE[@]} -ge "$L" ] || { say "could not reach $L live pods"; break; }
  # every live pod Ready, its app container running; pause and shim RSS
  ready=0
  for f in "$PL_STATE"/pods/*/pod.json; do
    read -r name st pp sp cp < <(awk -F'"' '
      /^  "name":/ { n = $4 } /^  "state":/ { s = $4 }
      /^  "pausePid":/ { p = $3 } /^  "shimPid":/ { h = $3 } /^      "pid":/ && c == "" { c = $3 }
      END { gsub(/[^0-9]/, "", p); gsub(/[^0-9]/, "", h); gsub(/[^0-9]/, "", c); print n, s, p + 0, h + 0, c + 0 }' "$f" 2>/dev/null) || continue
    [[ $name == "$TAG"-live-* ]] || continue
    if [ "$st" = Ready ] && [ "$cp" != 0 ] && [ -d "/proc/$cp" ]; then ready=$((ready + 1)); fi
    r=$(rss_of "$pp"); [ -n "$r" ] && rec "$L" pause.rss_kb "$r"
    r=$(rss_of "$sp"); [ -n "$r" ] && rec "$L" shim.rss_kb "$r"
  done
  READY[$L]=$ready
  say "$L live pods ($ready Ready, running): $N probes"
  for ((i = 1; i <= N; i++)); do probe "$L" "$i" || true; done
done
if [ ${#LIVE[@]} -gt 0 ]; then
  now t0
  "$PODLAB" --config "$PL_CFG" rm -f "${LIVE[@]}" </dev/null >>"$LOG" 2>&1 || say "removing the live pods failed: $(tail -2 "$LOG" | tr '\n' ' ')"
  now t1
  rec "${#LIVE[@]}" rm_all $((t1 - t0))
  n_live=${#LIVE[@]}
  LIVE=()
fi
exec {SAMPLES_FD}>&-

# curve.md
awk -F'\t' -v OFS='\t' '{ print "x", $1 "|" $2, $3 }' "$OUT/curve.tsv" | stats_tsv > "$WORK/stats.tsv"
declare -A P50=() P90=() MAX=() NS=()
while IFS=$'\t' read -r m n p50 p90 _ _ mx _; do P50[$m]=$p50; P90[$m]=$p90; MAX[$m]=$mx; NS[$m]=$n; done < "$WORK/stats.tsv"
base=${P50[${levels[0]}|up]:-}
{
  echo "| Live pods | all Ready | n | pod up p50 ms | p90 ms | × at ${levels[0]} | rm p50 ms | p90 ms | pause RSS p50 / max | shim RSS p50 |"
  echo "| ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for L in "${levels[@]}"; do
    [ -n "${P50[$L|up]:-}" ] || continue
    rdy="–"; [ "$L" -gt 0 ] && rdy="$( [ "${READY[$L]}" = "$L" ] && echo "yes" || echo "**${READY[$L]}/$L**")"
    prss="–"; [ -n "${P50[$L|pause.rss_kb]:-}" ] && prss="${P50[$L|pause.rss_kb]} / ${MAX[$L|pause.rss_kb]} kB"
    srss="–"; [ -n "${P50[$L|shim.rss_kb]:-}" ] && srss="${P50[$L|shim.rss_kb]} kB"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$L" "$rdy" "${NS[$L|up]}" \
      "$(fmt_ms "${P50[$L|up]}")" "$(fmt_ms "${P90[$L|up]}")" "$(ratio "${P50[$L|up]}" "$base")" \
      "$(fmt_ms "${P50[$L|rm]}")" "$(fmt_ms "${P90[$L|rm]}")" "$prss" "$srss"
  done
  last=${levels[-1]}
  if [ "$last" != "${levels[0]}" ] && [ -n "${P50[$last|up]:-}" ]; then
    echo
    r=$(ratio "${P50[$last|up]}" "$base")
    echo "- Pod up p50 with $last live pods: ${r}× the p50 with ${levels[0]} (issue 5 target: ≤ 1.5× with 100 live pods: $(if [ "$last" -lt 100 ]; then echo "not checked, fewer than 100 live pods"; elif [ "$(ratio_le "${P50[$last|up]}" "$base" 1.5)" = 1 ]; then echo met; else echo "**missed**"; fi))."
    if [ -n "${P50[$last|pause.rss_kb]:-}" ]; then
      echo "- Pause RSS with $last live pods: p50 ${P50[$last|pause.rss_kb]} kB, max ${MAX[$last|pause.rss_kb]} kB (target ≤ 1 MB = 1024 kB each: $([ "${MAX[$last|pause.rss_kb]}" -le 1024 ] && echo met || echo "**missed**")); all Ready: $([ "${READY[$last]}" = "$last" ] && echo "yes" || echo "**no, ${READY[$last]}/$last**")."
    fi
  fi
  if [ -n "${n_live:-}" ]; then
    echo
    c50=$(awk -F'\t' '$2 == "live.create"' "$OUT/curve.tsv" | stats_tsv | cut -f3)
    echo "Starting the $n_live live pods (\`sleep 3600\`) one by one took $(fmt_ms "$c50") ms p50 each; removing them with one \`podlab rm -f\` took $(awk -v u="${P50[$n_live|rm_all]}" 'BEGIN { printf "%.1f", u / 1e6 }') s ($(awk -v u="${P50[$n_live|rm_all]}" -v n="$n_live" 'BEGIN { printf "%.1f", u / n / 1e3 }') ms per pod)."
  fi
} > "$OUT/curve.md"
echo "- scale-curve.sh (levels $LEVELS, $N probes each) took $((SECONDS - START_S)) s" > "$OUT/curve-notes.md"
cat "$OUT/curve.md"
say "results in $OUT (took $((SECONDS - START_S)) s)"
