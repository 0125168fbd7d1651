#!/usr/bin/env bash
# bench-handlers.sh: the same pod through each of podlab's CRI runtime
# handlers (libcontainer in the shim, the default; the runc and crun
# binaries through their command lines), in one run, next to containerd:
#
#   1. whole process: `podlab run -q` of a one-container busybox `true` pod
#      with spec.runtimeClassName: H until its container has exited (pod up
#      → first exit), then `podlab rm -f` (the cycle); the handlers
#      interleaved, the first one rotating every round;
#   2. stage by stage: `podlab bench -f pod-H.yaml -n N` per handler, the
#      p50 of every stage side by side (where each spends its time: the
#      OCI runtime's create, its init included, and its start);
#   3. through the CRI: critest -benchmark (scripts/critest.sh
#      --benchmark-only) against podlab serve with each handler and against
#      containerd 2.4 (its runc shim, Debian's runc), in turn, ROUNDS times:
#      the pod cycle and the container cycle operation by operation.
#
# A handler this host cannot run (crun 1.8.1 on a hybrid cgroup layout) is
# left out with the reason its warm-up pod gave. Writes the "Runtime
# handlers" section of docs/benchmarks.md (between its markers), unless
# --no-doc.
#
# Usage: sudo scripts/bench-handlers.sh [-n N] [--rounds R] [--handlers L]
#                                       [--podlab BIN] [--out DIR] [--no-doc]
#
#   -n N          whole-process rounds and `podlab bench` cycles (default 15)
#   --rounds R    critest -benchmark rounds (default 2; 20 pod and 20
#                 container cycles each, test/critest-benchmark.yaml)
#   --handlers L  comma-separated handlers (default libcontainer,runc,crun;
#                 libcontainer is the default handler, no runtimeClassName)
#   --no-critest  skip step 3 (no containerd)
#   --out DIR     keep the results (default: a new /tmp/pbh-results.XXXXXX)
#   --no-doc      print the section, do not write docs/benchmarks.md
#   --guest-log F the output of a scripts/guest-handlers.sh run (through
#                 scripts/stock-vm.sh): its crun checks and its per-handler
#                 table go in the section as the stock guest's figures
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO=$PWD
. scripts/peers/lib.sh

ARGS=("$@")
N=15 ROUNDS=2 HANDLERS=libcontainer,runc,crun PODLAB=$REPO/bin/podlab OUT="" DOC=docs/benchmarks.md CRI=1 GUEST_LOG=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    -n) N=${2:?}; shift;;
    --rounds) ROUNDS=${2:?}; shift;;
    --handlers) HANDLERS=${2:?}; shift;;
    --podlab) PODLAB=${2:?}; shift;;
    --out) OUT=${2:?}; shift;;
    --no-doc) DOC="";;
    --no-critest) CRI=0;;
    --guest-log) GUEST_LOG=${2:?}; shift;;
    -h|--help) usage;;
    *) echo "bench-handlers: unknown argument $1" >&2; usage 2 >&2;;
  esac
  shift
done
[[ $N =~ ^[1-9][0-9]*$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench-handlers: -n and --rounds take positive integers" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-handlers: needs root" >&2; exit 1; }
[ -x "$PODLAB" ] || { echo "bench-handlers: $PODLAB not built (make build)" >&2; exit 1; }
[ -z "$GUEST_LOG" ] || grep -q '^guest-handlers: all passed' "$GUEST_LOG" ||
  { echo "bench-handlers: $GUEST_LOG is not the log of a passing scripts/guest-handlers.sh run" >&2; exit 2; }
say() { echo "bench-handlers: $*" >&2; }
START_S=$SECONDS
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

OUT=${OUT:-$(mktemp -d /tmp/pbh-results.XXXXXX)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/pbh-work.XXXXXX)
IDS=()
cleanup() {
  local id
  for id in "${IDS[@]}"; do "$PODLAB" --config "$PL_CFG" rm -f "$id" </dev/null >/dev/null 2>&1 || :; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# one podlab binary for the whole run (bin/ may be rebuilt meanwhile)
snapshot_podlab "$PODLAB" "$OUT/bin"; PODLAB=$OUT/bin/podlab
scripts/busybox-rootfs.sh "$WORK/rootfs" >/dev/null
podlab_setup "$PODLAB" "$WORK" "$WORK/rootfs"
open_sleep_fd "$WORK"
IFS=, read -r -a WANT <<<"$HANDLERS"

# manifest H NAME: podlab_manifest's pod (Unconfined, as bench-peers runs
# it: runc and crun compile a RuntimeDefault filter per container, which
# would hide the handler's own cost) on handler H.
manifest() {
  podlab_manifest "$2" true | if [ "$1" = libcontainer ]; then cat; else
    sed "s/^spec:\$/spec:\n  runtimeClassName: $1/"; fi
}

# cycle H ROUND: one whole-process pod on H; µs to first exit in UP, to the
# end of rm -f in REPLY. Returns 1 (output in $WORK/err) when the pod fails.
cycle() {
  local h=$1 name="pbh-$1-$2" t0 t1 t2 id
  manifest "$h" "$name" > "$WORK/pod.yaml"
  now t0
  id=$("$PODLAB" --config "$PL_CFG" run -q -f "$WORK/pod.yaml" </dev/null 2>"$WORK/err") || {
    "$PODLAB" --config "$PL_CFG" rm -f "$name" </dev/null >/dev/null 2>&1 || :; return 1; }
  IDS+=("$id")
  podlab_ctr_pid "$id" && wait_gone "$REPLY"
  now t1
  "$PODLAB" --config "$PL_CFG" rm -f "$id" </dev/null >/dev/null
  now t2
  unset 'IDS[-1]'
  UP=$((t1 - t0)) REPLY=$((t2 - t0))
}

# 0. which handlers run here: a warm-up pod each
HS=()
declare -A SKIP
for h in "${WANT[@]}"; do
  if cycle "$h" 0; then HS+=("$h"); else
    SKIP[$h]=$(grep -v '^\s*$' "$WORK/err" | tail -1)
    say "$h: not measured: ${SKIP[$h]}"
  fi
done
[ ${#HS[@]} -gt 0 ] || { say "no handler runs a pod here"; exit 1; }
say "handlers measured: ${HS[*]}"

# 1. whole process, interleaved
T0=$SECONDS
: > "$OUT/samples.tsv"
for ((r = 1; r <= N; r++)); do
  for ((i = 0; i < ${#HS[@]}; i++)); do
    h=${HS[$(( (r + i) % ${#HS[@]} ))]}
    cycle "$h" "$r" || { say "$h round $r failed: $(tail -1 "$WORK/err")"; exit 1; }
    printf '%d\trun.%s.up\t%d\n%d\trun.%s.cycle\t%d\n' "$r" "$h" "$UP" "$r" "$h" "$REPLY" >> "$OUT/samples.tsv"
  done
done
RUN_S=$((SECONDS - T0))

# 2. stage by stage
T0=$SECONDS
for h in "${HS[@]}"; do
  manifest "$h" "pbh-$h" > "$WORK/bench-$h.yaml"
  say "podlab bench on $h (-n $N)"
  "$PODLAB" --config "$PL_CFG" bench -f "$WORK/bench-$h.yaml" -n "$N" --no-progress > "$OUT/bench-$h.txt"
done
BENCH_S=$((SECONDS - T0))

# 3. through the CRI, with containerd
T0=$SECONDS
CTD_VERSION=""
if [ "$CRI" = 1 ]; then
  for ((r = 1; r <= ROUNDS; r++)); do
    for h in "${HS[@]}"; do
      args=(--benchmark-only --rounds 1 --podlab "$PODLAB")
      # containerd once a round, beside the default handler
      if [ "$h" = libcontainer ]; then d=$OUT/critest-$r; else d=$OUT/critest-$r-$h; args+=(--only podlab --runtime-handler "$h"); fi
      sync
      CRITEST_OUT=$d scripts/critest.sh "${args[@]}" 2>>"$OUT/critest.log" ||
        { say "critest.sh ($h, round $r) failed: $(tail -3 "$OUT/critest.log" | tr '\n' ' ')"; exit 1; }
      # critest's samples as "round metric µs": cri.<runtime>.<cycle|op>
      for f in pod container; do
        for rt in podlab containerd; do
          [ -f "$d/$rt-benchmark/round-1/${f}_benchmark_data.json" ] || continue
          k=$h; [ "$rt" = podlab ] || k=containerd
          jq -r --arg r "$r" --arg m "cri.$k.$f" '.operationsNames as $n | .datapoints[] |
            ($r + "\t" + $m + ".cycle\t" + ((.operationsDurationsNs | add) / 1000 | floor | tostring)),
            (range(0; $n | length) as $i | $r + "\t" + $m + "." + $n[$i] + "\t" + (.operationsDurationsNs[$i] / 1000 | floor | tostring))' \
            "$d/$rt-benchmark/round-1/${f}_benchmark_data.json" >> "$OUT/samples.tsv"
        done
      done
    done
  done
  CTD_VERSION=$("$(scripts/build-containerd.sh)/containerd" --version | awk '{ print $3 }')
fi
CRI_S=$((SECONDS - T0))
TOTAL_S=$((SECONDS - START_S))
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

stats_tsv < "$OUT/samples.tsv" > "$OUT/stats.tsv"
declare -A P50 P90
while IFS=$'\t' read -r m n p50 p90 _; do P50[$m]=$p50 P90[$m]=$p90; done < "$OUT/stats.tsv"
# the stage tables' p50 column (c=1, no live pods): BENCH[h|stage]
declare -A BENCH
STAGES=()
for h in "${HS[@]}"; do
  while IFS=$'\t' read -r stage p50; do
    BENCH[$h|$stage]=$p50
    [ "$h" != "${HS[0]}" ] || STAGES+=("$stage")
  done < <(awk -v OFS='\t' '/^STAGE/ { on = 1; next } on && NF == 0 { exit }
    on && NF == 1 { print $1, "" }
    on && NF >= 7 { p50 = $(NF - 3); match($0, /^ */); name = substr($0, 1, RLENGTH)
      for (i = 1; i <= NF - 6; i++) name = name (i > 1 ? " " : "") $i
      print name, p50 }' "$OUT/bench-$h.txt")
done

version() {
  case $1 in
    libcontainer) awk '/^versions:/ { for (i = 1; i <= NF; i++) if ($i == "runc") { v = $(i + 1); sub(/,$/, "", v); print "libcontainer " v " (in the shim)" } }' "$OUT/bench-libcontainer.txt" 2>/dev/null;;
    runc) echo "$(runc --version | head -1) (Debian's binary)";;
    crun) echo "$(crun --version | head -1) (Debian's binary)";;
    *) echo "$1";;
  esac
}
ms() { fmt_ms "${1:-}"; }
base=${HS[0]}
{
  echo "<!-- handlers: begin (generated by scripts/bench-handlers.sh; do not edit) -->"
  echo "## Runtime handlers: libcontainer, runc and crun (issue 32)"
  echo
  shown=()
  for ((i = 0; i < ${#ARGS[@]}; i++)); do
    case ${ARGS[i]} in --out|--podlab|--guest-log) i=$((i + 1));; --no-doc) ;; *) shown+=("${ARGS[i]}");; esac
  done
  echo "Generated $(date -u '+%Y-%m-%d %H:%M UTC') by \`make build && sudo scripts/bench-handlers.sh${shown[*]:+ ${shown[*]}}\` in $TOTAL_S s (whole process ${RUN_S} s, podlab bench ${BENCH_S} s, critest ${CRI_S} s); load average (1, 5, 15 min) $LOAD_BEFORE before, $LOAD_AFTER after, on $(nproc) CPUs shared with other work: ratios within this run are the figures to compare."
  echo
  echo "The pod: one busybox \`true\` container, Unconfined (as bench-peers runs it: runc and crun compile a RuntimeDefault filter in every container's init, libcontainer's shim hands over a precompiled one), \`spec.runtimeClassName\` naming the handler (none for libcontainer, the default). Handlers:"
  echo
  for h in "${HS[@]}"; do echo "- **$h**: $(version "$h")"; done
  for h in "${WANT[@]}"; do [ -z "${SKIP[$h]:-}" ] || echo "- **$h**: not measured on this host: \`${SKIP[$h]}\`"; done
  [ -z "$CTD_VERSION" ] || echo "- **containerd** $CTD_VERSION (scripts/build-containerd.sh, its runc shim v2 and Debian's runc), through the CRI only"
  echo
  machine_md
  echo
  echo "### Whole process: \`podlab run\` → first exit, then \`podlab rm -f\`"
  echo
  echo "$N rounds, the handlers interleaved (the first rotating), after one warm-up pod each; wall-clock around the commands, p50 and p90 nearest-rank, ms; ratio = handler ÷ $base (p50)."
  echo
  echo "| handler | up → first exit p50 | p90 | ratio | up + rm -f p50 | p90 | ratio |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for h in "${HS[@]}"; do
    printf '| %s | %s | %s | %s× | %s | %s | %s× |\n' "$h" "$(ms "${P50[run.$h.up]}")" "$(ms "${P90[run.$h.up]}")" \
      "$(ratio "${P50[run.$h.up]}" "${P50[run.$base.up]}")" "$(ms "${P50[run.$h.cycle]}")" "$(ms "${P90[run.$h.cycle]}")" \
      "$(ratio "${P50[run.$h.cycle]}" "${P50[run.$base.cycle]}")"
  done
  echo
  echo "### Stage by stage: \`podlab bench -f pod.yaml -n $N\` per handler"
  echo
  echo "p50 of each stage, ms (c=1, no live pods; one \`podlab bench\` per handler, in turn). \`ctr app create\` is the OCI runtime's create as the shim times it: for libcontainer its fork and \`runc init\` up to the wait for start, in the shim's process; for runc and crun the whole \`create\` command (the binary's start, its init, and its exit). \`ctr app start\` is \`start\`."
  echo
  printf '| stage |'; for h in "${HS[@]}"; do printf ' %s |' "$h"; done; echo
  printf '|---|'; for h in "${HS[@]}"; do printf -- '---:|'; done; echo
  for s in "${STAGES[@]}"; do
    depth=${s%%[! ]*}; label=${s#"$depth"}
    for ((i = 2; i < ${#depth}; i += 2)); do label="&emsp;$label"; done
    case $label in run|wait|teardown|total) printf '| **%s** |' "$label"; for h in "${HS[@]}"; do printf ' |'; done; echo; continue;; esac
    printf '| %s |' "$label"
    for h in "${HS[@]}"; do printf ' %s |' "${BENCH[$h|$s]:-–}"; done; echo
  done
  if [ "$CRI" = 1 ]; then
    echo
    echo "### Through the CRI: critest -benchmark, with containerd"
    echo
    echo "\`scripts/critest.sh --benchmark-only --rounds 1\` $ROUNDS times per handler (\`--runtime-handler H\` for runc and crun; containerd in the libcontainer run), in turn; 20 sequential cycles each (test/critest-benchmark.yaml), p50 over all rounds, ms; ratio = ÷ containerd's p50."
    echo
    for f in pod container; do
      # critest's operations, in its order
      ops=$(jq -r '.operationsNames[]' "$OUT/critest-1/containerd-benchmark/round-1/${f}_benchmark_data.json" 2>/dev/null || :)
      [ -n "$ops" ] || continue
      printf '| %s |' "$f"; for h in "${HS[@]}"; do printf ' %s | ÷ ctrd |' "$h"; done; echo ' containerd |'
      printf '|---|'; for h in "${HS[@]}"; do printf -- '---:|---:|'; done; echo '---:|'
      for op in cycle $ops; do
        if [ "$op" = cycle ]; then printf '| **%s cycle** |' "$f"; else printf '| %s |' "$op"; fi
        c=${P50[cri.containerd.$f.$op]:-}
        for h in "${HS[@]}"; do printf ' %s | %s× |' "$(ms "${P50[cri.$h.$f.$op]:-}")" "$(ratio "${P50[cri.$h.$f.$op]:-}" "$c")"; done
        printf ' %s |\n' "$(ms "$c")"
      done
      echo
    done
    best="" bestr=""
    for h in "${HS[@]}"; do
      r=$(ratio "${P50[cri.$h.container.cycle]:-}" "${P50[cri.containerd.container.cycle]:-}" 3)
      [ "$(ratio_le "${P50[cri.$h.container.cycle]:-}" "${P50[cri.containerd.container.cycle]:-}" 0.25)" = 1 ] && best+="${best:+, }$h ($r×)"
      bestr+="${bestr:+, }$h $r×"
    done
    echo "Container cycle ÷ containerd's (issue 32's bound: ≤ 0.25×): $bestr; $([ -n "$best" ] && echo "within the bound: $best" || echo "no handler within the bound in this run")."
  fi
  if [ -n "$GUEST_LOG" ]; then
    echo
    echo "### In the stock Debian 12 guest (pure cgroup v2, qemu TCG): crun"
    echo
    echo "\`scripts/stock-vm.sh run -- scripts/guest-handlers.sh\`, $(sed -n 's/^guest-handlers: setup: [0-9.]* s; //p' "$GUEST_LOG"); the guest's checks as it printed them:"
    echo
    sed -n 's/^guest-handlers: \(.*driver: crictl runp.*\|podlab run (runtimeClassName.*\|all passed.*\)$/- \1/p' "$GUEST_LOG"
    echo
    echo "\`podlab bench\` of the same pod per handler there (ms, p50; TCG is some 10× slower than the host: compare within the table):"
    echo
    grep '^| ' "$GUEST_LOG"
  fi
  echo
  echo "### Notes"
  echo
  for h in "${HS[@]}"; do
    [ "$h" != "$base" ] || continue
    d() { awk -v a="${BENCH[$h|$1]:-}" -v b="${BENCH[$base|$1]:-}" 'BEGIN { if (a == "" || b == "") print "–"; else printf "%+.1f", a - b }'; }
    echo "- $h against $base, stage by stage (p50, ms): the OCI create $(d '    ctr app create'), start $(d '    ctr app start'), the pod's removal (its containers' \`kill\` and \`delete\`) $(d '    remove containers'), first exit $(d '  first exit'), full cycle $(d '  full cycle'): a binary started per operation, its own init and its exit, where libcontainer runs in the shim's process and its init waits on a fifo."
  done
  if [ -n "$DOC" ] && [ "$CRI" = 1 ]; then
    # the committed "Through the CRI" figures (libcontainer, before the seams)
    then_sec=$(awk '/^<!-- critest-benchmark: begin/ { on = 1 } on { print } /^<!-- critest-benchmark: end -->/ { exit }' "$DOC")
    then_when=$(grep -o 'run, [0-9-]* [0-9:]* UTC' <<<"$then_sec" | head -1 | sed 's/^run, //')
    then_pod=$(awk -F' *\\| *' '/\*\*pod cycle\*\*/ { print $3, $5; exit }' <<<"$then_sec")
    then_ctr=$(awk -F' *\\| *' '/\*\*container cycle\*\*/ { print $3, $5; exit }' <<<"$then_sec")
    if [ -n "$then_pod" ] && [ -n "$then_ctr" ]; then
      read -r tp tpc <<<"$then_pod"; read -r tc tcc <<<"$then_ctr"
      echo "- Against the committed \"Through the CRI\" figures ($then_when, libcontainer before the handler seam): pod cycle p50 $tp ms then (containerd $tpc, $(ratio "$tp" "$tpc")×), $(ms "${P50[cri.$base.pod.cycle]:-}") now (containerd $(ms "${P50[cri.containerd.pod.cycle]:-}"), $(ratio "${P50[cri.$base.pod.cycle]:-}" "${P50[cri.containerd.pod.cycle]:-}")×); container cycle $tc then (containerd $tcc, $(ratio "$tc" "$tcc")×), $(ms "${P50[cri.$base.container.cycle]:-}") now (containerd $(ms "${P50[cri.containerd.container.cycle]:-}"), $(ratio "${P50[cri.$base.container.cycle]:-}" "${P50[cri.containerd.container.cycle]:-}")×). The ratios to containerd are the comparable figures: the machine's load differs between the runs."
    fi
  fi
  echo "- The critest rows run each handler's pods through \`podlab serve\` (critest \`-runtime-handler\`); containerd runs Debian's runc through its runc shim v2, so its rows compare with podlab's runc column for the OCI runtime and with the libcontainer column for the runtime around it."
  echo "<!-- handlers: end -->"
} > "$OUT/section.md"
cat "$OUT/section.md"

if [ -n "$DOC" ]; then
  if grep -q '^<!-- handlers: begin' "$DOC"; then
    awk -v sec="$OUT/section.md" '
      /^<!-- handlers: begin/ { while ((getline l < sec) > 0) print l; skip = 1; next }
      /^<!-- handlers: end -->/ { skip = 0; next }
      !skip' "$DOC" > "$DOC.tmp"
  elif grep -q '^<!-- stock-guest: begin' "$DOC"; then
    # before the guest's section, where gen-benchmarks-doc.sh keeps it
    awk -v sec="$OUT/section.md" '
      /^<!-- stock-guest: begin/ { while ((getline l < sec) > 0) print l; print "" }
      { print }' "$DOC" > "$DOC.tmp"
  else
    { cat "$DOC"; echo; cat "$OUT/section.md"; } > "$DOC.tmp"
  fi
  mv "$DOC.tmp" "$DOC"
  say "wrote the handlers section of $DOC"
fi
say "results in $OUT"
