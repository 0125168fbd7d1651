#!/usr/bin/env bash
# bench-warm-pool.sh: what the warm sandbox pool (issue 35) buys and costs,
# from one run, written as the warm-pool section of docs/benchmarks.md:
#
#  1. pods per second at concurrency 1, 4 and 16 (`podlab bench`): cold,
#     with a pool as large as the round (every cycle can claim), and with
#     a pool as large as the concurrency, refilled during the round by the
#     server's refiller (`bench --pool`): the curve from warm to cold as
#     the pool drains; and the refill rate one refiller makes;
#  2. what a warm sandbox costs while it waits: pause and shim RSS and PSS,
#     their CPU while idle, the veth and lease on the bridge;
#  3. a warm `podlab run` stage by stage (`podlab trace`), cold beside it,
#     and both against the scripted floor (scripts/bench-peers.sh --only
#     scripted,podlab,warm), the issue's ≤ 0.5× target.
#
# Usage: sudo scripts/bench-warm-pool.sh [-n N] [--peers-n N] [--doc FILE]
#                                        [--keep DIR] [--podlab BIN]
#
#   -n N         cycles per bench round (default 16)
#   --peers-n N  bench-peers rounds, and traced warm/cold runs (default 8)
#   --doc FILE   where to write the section (default docs/benchmarks.md)
#   --keep DIR   keep the raw results there
#   --podlab BIN the podlab to measure (default bin/podlab)
#
# Pods and warm sandboxes use the host's default state, netns and CNI (as
# bench-peers does); every one is removed before the script ends.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. scripts/peers/lib.sh
. scripts/lib/docsection.sh

ARGS=("$@")
N=16 PEERS_N=8 DOC=docs/benchmarks.md KEEP="" PODLAB=$PWD/bin/podlab
while [ $# -gt 0 ]; do
  case $1 in
    -n) N=${2:?}; shift;;
    --peers-n) PEERS_N=${2:?}; shift;;
    --doc) DOC=${2:?}; shift;;
    --keep) KEEP=${2:?}; shift;;
    --podlab) PODLAB=${2:?}; shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) echo "bench-warm-pool: unknown argument $1" >&2; exit 2;;
  esac
  shift
done
[[ $N =~ ^[1-9][0-9]*$ && $PEERS_N =~ ^[1-9][0-9]*$ ]] || { echo "bench-warm-pool: -n and --peers-n must be positive integers" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-warm-pool: must run as root (sudo)" >&2; exit 1; }
[ -x "$PODLAB" ] || { echo "bench-warm-pool: $PODLAB not built (make build)" >&2; exit 1; }
say() { echo "bench-warm-pool: $*" >&2; }
START_S=$SECONDS
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

if [ -n "$KEEP" ]; then RES=$KEEP; mkdir -p "$RES"; else RES=$(mktemp -d /tmp/pbw.XXXXXX); fi
RES=$(cd "$RES" && pwd)
TAG=pbw$$
cleanup() {
  local rc=$?
  set +e
  "$PODLAB" --config "$PL_CFG" rm -f $(ls "$RES"/pods 2>/dev/null) >/dev/null 2>&1
  "$PODLAB" --config "$PL_CFG" pool drain >/dev/null 2>&1
  [ -n "$KEEP" ] || rm -rf "$RES"
  exit "$rc"
}
PL_CFG=/dev/null
trap cleanup EXIT

snapshot_podlab "$PODLAB" "$RES/bin"; PODLAB=$RES/bin/podlab
scripts/busybox-rootfs.sh "$RES/rootfs"
podlab_setup "$PODLAB" "$RES" "$RES/rootfs"
open_sleep_fd "$RES"
mkdir -p "$RES/pods"
pl() { "$PODLAB" --config "$PL_CFG" "$@"; }
[ -z "$(pl pool ls -o json | grep '"id"' || :)" ] || { echo "bench-warm-pool: the pool is not empty (podlab pool drain first)" >&2; exit 1; }

# ------------------------------------------------------------ 1. pods/s
podlab_manifest "$TAG" true > "$RES/pod.yaml"
bench() { # bench OUT ARGS...: podlab bench, its JSON kept
  local out=$1; shift
  # The kernel tears down the last run's netns and veths in the background
  # (cleanup_net): without a settle the next run pays for it, and a pool
  # = C round after the burst's 32 sandboxes read 14% slower than cold.
  sync; sleep 5
  say "podlab bench $*"
  pl bench -f "$RES/pod.yaml" -n "$N" --warmup 1 --no-progress -o json "$@" > "$RES/$out.json" 2> "$RES/$out.err" ||
    { say "podlab bench $* failed: $(tail -3 "$RES/$out.err" | tr '\n' ' ')"; return 1; }
}
bench cold -c 1,4,16
bench burst -c 1,4,16 --pool "$N"
for c in 1 4 16; do bench "pool$c" -c "$c" --pool "$c"; done
# a claim with no refiller: one warm sandbox filled before each cycle, in
# line (bench --warm), the reference for a claim with the refiller kept
bench warm1 -c 1 --warm
# one refiller's rate on a quiet node: fills one at a time, as KeepPool
t0=$EPOCHREALTIME
pl pool fill "$N" > /dev/null
t1=$EPOCHREALTIME
FILL_RATE=$(awk -v a="$t0" -v b="$t1" -v n="$N" 'BEGIN { printf "%.1f", n / (b - a) }')
FILL_MS=$(awk -v a="$t0" -v b="$t1" -v n="$N" 'BEGIN { printf "%.1f", (b - a) * 1000 / n }')

# ------------------------------------------------------------ 2. cost
# The N warm sandboxes just filled, idle: memory now, CPU over 10 s.
pss_of() { awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null; }
rss_of() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
ticks_of() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null; }
pl pool ls -o json > "$RES/pool.json"
mapfile -t PIDS < <(awk -F'[:,]' '/"pausePid"|"shimPid"/ { gsub(/[^0-9]/, "", $2); print $1 "\t" $2 }' "$RES/pool.json" | tr -d ' "')
: > "$RES/cost.tsv"
declare -A T0=()
for l in "${PIDS[@]}"; do
  IFS=$'\t' read -r what pid <<< "$l"
  printf 'x\t%s.rss\t%s\nx\t%s.pss\t%s\n' "$what" "$(rss_of "$pid")" "$what" "$(pss_of "$pid")" >> "$RES/cost.tsv"
  T0[$pid]=$(ticks_of "$pid")
done
sleep 10
IDLE_TICKS=0
for pid in "${!T0[@]}"; do IDLE_TICKS=$((IDLE_TICKS + $(ticks_of "$pid") - T0[$pid])); done
BRIDGE=$(pl config | awk '$1 == "bridge:" { print $2 }'); BRIDGE=${BRIDGE:-podlab0}
VETHS=$(ip -o link show master "$BRIDGE" 2>/dev/null | wc -l)
WARM_N=$(grep -c '"id"' "$RES/pool.json" || :)
stats_tsv < "$RES/cost.tsv" > "$RES/cost.stats"
cost() { awk -F'\t' -v m="$1" -v f="$2" '$1 == m { print $f }' "$RES/cost.stats"; }
pl pool drain > /dev/null

# ------------------------------------------------------------ 3. where a warm run goes
# Warm and cold `podlab run`, in turn, each traced; the pool filled with one
# before each warm run, off the clock.
: > "$RES/stages.tsv"
run_traced() { # run_traced warm|cold I
  local name=$TAG-$1-$2 id pid
  podlab_manifest "$name" true > "$RES/run.yaml"
  [ "$1" = cold ] || pl pool fill 1 > /dev/null
  touch "$RES/pods/$name"
  pl run -q -f "$RES/run.yaml" </dev/null > "$RES/id"
  read -r id < "$RES/id"
  podlab_ctr_pid "$id" && pid=$REPLY && wait_gone "$pid" || :
  pl trace "$name" > "$RES/trace-$1-$2.txt"
  # without the fill a claimed pod's trace links to (paid ahead, off its path)
  awk '/^[^ ].*\(paid ahead\)/ { skip = 1; next } /^[^ ]/ { skip = 0 } !skip' "$RES/trace-$1-$2.txt" |
    parse_stage_table "$1" "$2" >> "$RES/stages.tsv"
  pl rm -f "$name" > /dev/null
  rm -f "$RES/pods/$name"
}
for ((i = 1; i <= PEERS_N; i++)); do run_traced cold "$i"; run_traced warm "$i"; done
stats_tsv < "$RES/stages.tsv" > "$RES/stages.stats"

# the scripted floor, podlab cold and warm, interleaved
scripts/bench-peers.sh --only scripted,runc,podlab,warm -n "$PEERS_N" --out "$RES/peers" --podlab "$PODLAB" > "$RES/peers.log" 2>&1 ||
  say "bench-peers failed: $(tail -3 "$RES/peers.log" | tr '\n' ' ')"
peer() { awk -F'\t' -v m="$1" -v f="$2" '$1 == m { print $f }' "$RES/peers/stats.tsv" 2>/dev/null; }
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
TOTAL_S=$((SECONDS - START_S))

# ------------------------------------------------------------ the section
jq_rounds() { # jq_rounds FILE: "c claimed missed refilled pods/s ready-p50 cycle-p50" per round
  python3 - "$1" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
for r in rep["rounds"]:
    st = {s["stage"]: s for s in r["stages"] if s["phase"] == "total"}
    run = {s["stage"]: s for s in r["stages"] if s["phase"] == "run"}
    print(r["concurrency"], r.get("claimed", 0), r.get("missed", 0), r.get("refilled", 0), "%.2f" % r["podsPerSecond"],
          st.get("pod ready", {}).get("p50Ns", 0), st.get("cycle", {}).get("p50Ns", 0), r["cycles"] - r["failed"],
          run.get("RunPodSandbox", {}).get("p50Ns", 0))
EOF
}
for f in cold burst pool1 pool4 pool16 warm1; do [ -s "$RES/$f.json" ] && jq_rounds "$RES/$f.json" > "$RES/$f.rounds" || : > "$RES/$f.rounds"; done
row_of() { awk -v c="$2" '$1 == c' "$RES/$1.rounds"; }
msf() { awk -v n="$1" 'BEGIN { if (n == "" || n == 0) print "–"; else printf (n < 1e7 ? "%.2f" : "%.1f"), n / 1e6 }'; }
shown=()
for ((i = 0; i < ${#ARGS[@]}; i++)); do
  case ${ARGS[i]} in --keep|--doc|--podlab) i=$((i + 1));; *) shown+=("${ARGS[i]}");; esac
done
{
  echo "<!-- warm-pool: begin (generated by scripts/bench-warm-pool.sh; do not edit) -->"
  echo "## A warm sandbox pool (issue 35)"
  echo
  echo "Generated $(date -u '+%Y-%m-%d %H:%M UTC') in $TOTAL_S s by \`make build && sudo scripts/bench-warm-pool.sh${shown[*]:+ ${shown[*]}}\`,"
  echo "on the machine above (loadavg $LOAD_BEFORE before, $LOAD_AFTER after: the machine is shared, absolute"
  echo "times move with its load; the runs of each table are back to back). One busybox \`true\` container"
  echo "per pod (\`pod.yaml\` of the peer comparison); times in ms, p50 unless said."
  echo
  echo "### Pods per second"
  echo
  echo "\`podlab bench -n $N -c C\` (each round: $N pods run to their container's exit and removed, C at a"
  echo "time). **cold**: no pool. **pool = n**: \`--pool $N\`, the pool filled with $N before the round, off its"
  echo "clock, so every pod can claim (a burst the pool was sized for). **pool = C**: \`--pool C\`, C warm"
  echo "sandboxes at the start, refilled during the round by the server's refiller (\`serve --warm-pool\`'s"
  echo "KeepPool: one at a time, each after 150 ms without a state-changing call): the round's cycles come"
  echo "back to back and leave it no such spell, so after C claims the rest are made cold, as under a steady"
  echo "load on \`serve\`, which refills between pods, never beside one. claimed/cold count the round's"
  echo "RunPodSandbox calls, refilled the refiller's fills during the round (it runs in the pool = n rounds too)."
  echo "Each \`podlab bench\` run (cold, pool = n, and pool = C for each C) starts after a 5 s settle, so that"
  echo "the kernel's teardown of the previous run's network namespaces does not land on it."
  echo
  echo "| C | cold pods/s | pool = n pods/s | claimed/cold, refilled | pool = C pods/s | claimed/cold, refilled | RunPodSandbox cold | pool = n | pool = C | pod ready cold | pool = n | pool = C |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  brun1=$(row_of burst 1 | awk '{ print $9 }')
  for c in 1 4 16; do
    read -r _ _ _ _ cps cready _ _ crun <<< "$(row_of cold "$c")" || :
    read -r _ bcl bmi bref bps bready _ _ brun <<< "$(row_of burst "$c")" || :
    read -r _ pcl pmi pref pps pready _ _ prun <<< "$(row_of "pool$c" "$c")" || :
    echo "| $c | ${cps:-–} | ${bps:-–} | ${bcl:-–}/${bmi:-–}, ${bref:-–} | ${pps:-–} | ${pcl:-–}/${pmi:-–}, ${pref:-–} | $(msf "${crun:-}") | $(msf "${brun:-}") | $(msf "${prun:-}") | $(msf "${cready:-}") | $(msf "${bready:-}") | $(msf "${pready:-}") |"
    unset cps cready crun bcl bmi bref bps bready brun pcl pmi pref pps pready prun
  done
  read -r _ wcl wmi _ wps wready _ _ wrun <<< "$(row_of warm1 1)" || :
  echo
  echo "A claim with no refill beside it (\`podlab bench -c 1 --warm\`: one warm sandbox filled before each"
  echo "cycle, in line, off its clock): RunPodSandbox p50 $(msf "${wrun:-}") ms, pod ready $(msf "${wready:-}") ms"
  echo "(${wcl:-–} claimed, ${wmi:-–} cold), against $(msf "${brun1:-}") ms with the refiller kept, waiting"
  echo "for a quiet spell, beside the claims (pool = n at C = 1)."
  echo
  echo "One refiller on the same node, the run otherwise quiet (\`podlab pool fill $N\`, one at a time):"
  echo "$FILL_RATE warm sandboxes/s ($FILL_MS ms each). A pool sustains a rate of claims up to"
  echo "what its refiller makes between them, each fill after 150 ms without a state-changing call:"
  echo "a steady load above it drains the pool, and the pods"
  echo "beyond it take the cold path (\"pool = C\" above), at the cold path's own time: a miss costs"
  echo "the pool index's read, no more. The \"pool = n\" column is the rate a pool sized for the"
  echo "burst gives while it lasts; its refill needs the same number of fills afterwards."
  echo
  echo "### What a warm sandbox costs while it waits"
  echo
  echo "$WARM_N warm sandboxes (\`podlab pool fill $N\`), idle; p50 / max over them, kB:"
  echo
  echo "| process | VmRSS p50 | max | PSS p50 | max |"
  echo "|---|---:|---:|---:|---:|"
  echo "| pause (podlab-pause) | $(cost pausePid.rss 3) | $(cost pausePid.rss 7) | $(cost pausePid.pss 3) | $(cost pausePid.pss 7) |"
  echo "| shim (podlab-shim) | $(cost shimPid.rss 3) | $(cost shimPid.rss 7) | $(cost shimPid.pss 3) | $(cost shimPid.pss 7) |"
  echo
  echo "- PSS divides shared pages (the shim's Go binary text, shared by every shim) among the"
  echo "  processes that map them: it is what one more warm sandbox adds; RSS counts them in full."
  echo "- CPU while idle: $IDLE_TICKS clock ticks ($(getconf CLK_TCK)/s) over 10 s for all $WARM_N pauses and shims together."
  echo "- Network: one veth pair each (the bridge $BRIDGE had $VETHS ports with the pool full), one"
  echo "  host-local lease (one address of the pod subnet) and one network namespace each."
  echo "- Making one: the fill's stages, $FILL_MS ms of wall time each here (the refill above)."
  echo
  echo "### A warm \`podlab run\`, stage by stage"
  echo
  echo "$PEERS_N \`podlab run\` of the pod, cold and warm in turn (warm: \`podlab pool fill 1\` before it, off"
  echo "the clock), each traced (\`podlab trace POD\`); p50 of each stage, ms; \`a › b\` is stage b inside a. The"
  echo "fill a claimed pod's trace links to (\`(paid ahead)\`) is left out: it is not on the pod's path."
  echo
  echo "| stage | cold | warm |"
  echo "|---|---:|---:|"
  # the warm run's stages in its trace's order, then the cold path's own
  awk -F'\t' 'FNR == NR { p50[$1] = $3; next }
    { ph = substr($2, 1, index($2, "/") - 1); s = substr($2, length(ph) + 2)
      if (s in seen) next; seen[s] = 1; order[++n] = s }
    END { for (i = 1; i <= n; i++) { s = order[i]; c = p50["cold/" s]; w = p50["warm/" s]
            printf "| %s | %s | %s |\n", s, c == "" ? "–" : sprintf("%.2f", c / 1000), w == "" ? "–" : sprintf("%.2f", w / 1000) } }' \
    "$RES/stages.stats" <(awk -F'\t' '$1 == 1 && $2 ~ /^warm\//' "$RES/stages.tsv"; awk -F'\t' '$1 == 1 && $2 ~ /^cold\//' "$RES/stages.tsv")
  echo
  echo "One warm run's trace (the last):"
  echo
  echo '```'
  cat "$RES/trace-warm-$PEERS_N.txt"
  echo '```'
  echo
  echo "### Against the scripted floor"
  echo
  echo "\`scripts/bench-peers.sh --only scripted,runc,podlab,warm -n $PEERS_N\` (interleaved; whole-process wall"
  echo "times, as a user sees them: process start, manifest, image, sandbox or claim, container create and start):"
  echo
  echo "| | podlab cold p50 / p90 | podlab warm p50 / p90 | scripted floor p50 / p90 | warm / floor | target |"
  echo "|---|---:|---:|---:|---:|---|"
  for w in up cycle; do
    label="pod up → first container exited"; [ "$w" = up ] || label="full cycle (up + rm)"
    target="–"
    if [ "$w" = up ] && [ -n "$(peer warm.up 3)" ]; then
      target="≤ 0.5×: $([ "$(ratio_le "$(peer warm.up 3)" "$(peer scripted.up 3)" 0.5)" = 1 ] && echo met || echo "**not met**")"
    fi
    echo "| $label | $(fmt_ms "$(peer "podlab.$w" 3)") / $(fmt_ms "$(peer "podlab.$w" 4)") | $(fmt_ms "$(peer "warm.$w" 3)") / $(fmt_ms "$(peer "warm.$w" 4)") | $(fmt_ms "$(peer "scripted.$w" 3)") / $(fmt_ms "$(peer "scripted.$w" 4)") | $(ratio "$(peer "warm.$w" 3)" "$(peer "scripted.$w" 3)")× | $target |"
  done
  echo
  echo "\`runc run\` of the same busybox \`true\` alone (its own netns, no CNI, no pause), the container"
  echo "part every row above includes: $(fmt_ms "$(peer runc.run 3)") / $(fmt_ms "$(peer runc.run 4)") ms, $(ratio "$(peer runc.run 3)" "$(peer scripted.up 3)")× the floor."
  echo
  echo "<!-- warm-pool: end -->"
} > "$RES/section.md"

doc_section "$DOC" warm-pool "$RES/section.md"
cat "$RES/section.md"
say "wrote the warm-pool section of $DOC (took $TOTAL_S s)"
