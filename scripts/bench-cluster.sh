#!/usr/bin/env bash
# bench-cluster.sh: pod startup on a kubeadm node, podlab against
# containerd 2.4, the same node shape (scripts/cluster.sh up with each
# runtime in turn, back to back in one run; only the CRI socket and the
# pods' subnet differ): the time from `kubectl apply` of a Deployment of
# REPLICAS busybox pods to each pod seen Running, ROUNDS times per
# runtime, after a warm-up round of one pod that pulls the image. The
# Deployment is deleted, and its pods gone from the API, between rounds.
#
# Each pod's steps are stamped as they arrive, in the order they happen:
#   created    the pod's ADDED event on a watch (kubectl get -w, stamped on
#              arrival: the API's own timestamps have a resolution of 1 s):
#              kubectl, the apiserver, the Deployment and ReplicaSet
#              controllers
#   scheduled  PodScheduled=True on the watch: the scheduler's binding
#   ctr created, ctr started
#              the container's CreatedAt and StartedAt as the runtime
#              reports them over the CRI (crictl inspect, ns): the kubelet's
#              pod worker, RunPodSandbox with CNI, CreateContainer, then
#              StartContainer; each runtime stamps them its own way
#   running    phase Running on the watch: the kubelet's PLEG relist (once
#              a second) seeing the container, its status manager's patch
#   ready      Ready=True on the watch (no probes: the same patch, mostly)
# For podlab, `podlab trace --pod` of the median pod of the last round
# (the apiserver's, kubelet's and podlab's spans) is kept too.
#
# Every wait is bounded: a stuck one fails naming what it waited for, and
# the node is taken down (scripts/cluster.sh down) on any exit.
#
# Root. Usage: sudo scripts/bench-cluster.sh [-n REPLICAS] [-r ROUNDS]
#                                             [--out DIR] [--doc FILE] [RUNTIME...]
#   -n REPLICAS  pods per round (default 10)
#   -r ROUNDS    rounds per runtime (default 2)
#   --out DIR    keep samples, watches and logs there (default: a temp dir,
#                kept and printed)
#   --doc FILE   write the generated section into FILE (docs/benchmarks.md)
#                between its cluster markers (after the kubelet section's
#                when absent)
#   RUNTIME...   podlab and/or containerd (default both, podlab first)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/opt/podlab/bin
. scripts/peers/lib.sh
. scripts/lib/docsection.sh

replicas=10 rounds=2 OUT="" DOC=""
runtimes=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) replicas=${2:?}; shift;;
    -r) rounds=${2:?}; shift;;
    --out) OUT=${2:?}; shift;;
    --doc) DOC=${2:?}; shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    podlab|containerd) runtimes+=("$1");;
    *) echo "bench-cluster: unknown argument $1" >&2; exit 2;;
  esac
  shift
done
[ ${#runtimes[@]} -gt 0 ] || runtimes=(podlab containerd)
[[ $replicas =~ ^[1-9][0-9]*$ ]] || { echo "bench-cluster: -n must be a positive integer" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench-cluster: -r must be a positive integer" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-cluster: must run as root" >&2; exit 1; }
command -v crictl >/dev/null || { echo "bench-cluster: crictl missing (scripts/setup.sh critest)" >&2; exit 1; }
command -v jq >/dev/null || { echo "bench-cluster: jq missing" >&2; exit 1; }

say() { echo "bench-cluster: $*" >&2; }
die() { echo "bench-cluster: $*" >&2; exit 1; }

[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/bench-cluster.XXXXXX)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
: > "$OUT/samples.tsv"
k8s=$(scripts/build-k8s.sh)
podlab=$PWD/bin/podlab
cluster_dir=${CLUSTER_DIR:-/var/lib/podlab-cluster}
START_S=$SECONDS
LOAD_BEFORE=$(uptime)

# Cleanup on any exit: the watch of a round cut short, the node.
node_rt="" watch_pids=()
cleanup() {
  local rc=$? p
  for p in "${watch_pids[@]}"; do kill "$p" 2>/dev/null || :; done
  if [ -n "$node_rt" ]; then
    say "taking the $node_rt node down"
    CLUSTER_RUNTIME=$node_rt timeout 300 scripts/cluster.sh down 2>>"$OUT/down-$node_rt.log" ||
      say "cluster.sh down failed: see $OUT/down-$node_rt.log"
  fi
  [ $rc = 0 ] || say "failed (rc $rc); samples and logs in $OUT"
}
trap cleanup EXIT

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

# until_ok SECONDS WHAT CMD...: CMD every 0.2 s until it succeeds; after
# SECONDS, fail naming WHAT.
until_ok() {
  local secs=$1 limit=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    [ $SECONDS -lt $limit ] || die "$rt: gave up waiting for $what after $secs s (samples and logs: $OUT)"
    sleep 0.2
  done
}

# watch_lines FILE: the watch's lines as "µs EVENT POD PHASE T=S;T=S;...",
# from kubectl's "TYPES...|STATUSES..." (a jsonpath {range} makes kubectl
# 1.34's watch exit, silently, at the second event: the conditions come as
# two lists).
watch_lines() {
  awk '{
    c = $0; for (i = 1; i <= 4; i++) sub(/^[^ ]* /, "", c)
    split(c, ts, "|"); nt = split(ts[1], t, " "); split(ts[2], s, " ")
    conds = ""; for (i = 1; i <= nt; i++) conds = conds t[i] "=" s[i] ";"
    print $1, $2, $3, $4, conds
  }' "$1"
}

# seen FILE N WHAT PID: at least N pods have WHAT (Running, Ready) in the
# watch FILE; fails the run if the watch (PID) ended meanwhile.
seen() {
  [ "$(watch_lines "$1" | awk -v w="$3" '($4 == w || index(";" $5, ";" w "=True;")) && !s[$3]++ { n++ } END { print n + 0 }')" -ge "$2" ] && return 0
  kill -0 "$4" 2>/dev/null || die "$rt: the pods' watch ($1) ended before $2 pods were $3: $(cat "$1.err")"
  return 1
}
# no_bench_pods: the API holds no pod of the Deployment.
no_bench_pods() { [ -z "$(kc get pods -l app=bench -o name 2>/dev/null)" ] && kc get ns default >/dev/null 2>&1; }

# round R N: apply a Deployment of N, wait (bounded) until its N pods are
# Ready, append each pod's stamps (µs after the apply) to samples.tsv as
# "rt<TAB>round<TAB>pod<TAB>step<TAB>µs", delete it and wait until its pods
# are gone. The watch is two jobs of their own (kubectl into a fifo, the
# stamping loop reading it), each stopped by its pid: a pipeline in the
# background cannot be, as `wait` on it waits for every process of it, and
# a kubectl -w whose reader was killed lives until its next event.
round() {
  local r=$1 n=$2 w=$OUT/watch-$rt-$1 t0 kpid spid
  rm -f "$OUT/fifo"; mkfifo "$OUT/fifo"
  while IFS= read -r line; do echo "${EPOCHREALTIME//[.,]/} $line"; done < "$OUT/fifo" > "$w" &
  spid=$!
  timeout 600 "$k8s/kubectl" --kubeconfig "$admin" get pods -l app=bench -w --output-watch-events \
    -o 'jsonpath={.type} {.object.metadata.name} {.object.status.phase} {.object.status.conditions[*].type}|{.object.status.conditions[*].status}{"\n"}' \
    > "$OUT/fifo" 2>"$w.err" &
  kpid=$!
  watch_pids=("$kpid" "$spid")
  sleep 1 # the watch is open before the apply
  kill -0 "$kpid" 2>/dev/null || die "$rt round $r: the pods' watch exited: $(cat "$w.err")"
  now t0
  deployment "$n" | kc apply -f - >/dev/null
  until_ok 300 "$n pods of deployment/bench Running (round $r; watch: $w)" seen "$w" "$n" Running "$kpid"
  until_ok 60 "$n pods of deployment/bench Ready (round $r; watch: $w)" seen "$w" "$n" Ready "$kpid"
  kill "$kpid" 2>/dev/null || :
  wait "$kpid" 2>/dev/null || :
  wait "$spid" 2>/dev/null || :
  watch_pids=()
  # the container's CRI stamps, while the pods still exist
  local ids
  ids=$(timeout 60 crictl --runtime-endpoint "unix://$sock" ps -q --label io.kubernetes.pod.namespace=default --label io.kubernetes.container.name=sleep 2>>"$OUT/crictl.err") ||
    die "$rt round $r: crictl ps on $sock failed"
  # shellcheck disable=SC2086
  [ -z "$ids" ] || TZ=UTC timeout 60 crictl --runtime-endpoint "unix://$sock" inspect -o json $ids 2>>"$OUT/crictl.err" |
    jq -r 'def ns: capture("^(?<s>[^.Z]+)(\\.(?<f>[0-9]+))?Z$") | ((.s + "Z" | fromdateiso8601) * 1000000) + ((((.f // "0") + "000000")[0:6]) | tonumber);
      if type == "array" then .[] else . end |
      [.status.labels["io.kubernetes.pod.name"], (.status.createdAt | ns), (.status.startedAt | ns)] | @tsv' > "$w.cri" ||
    die "$rt round $r: crictl inspect on $sock failed"
  [ "$r" = 0 ] || {
    awk -v t0="$t0" -v rt="$rt" -v r="$r" -v cri="$w.cri" -v OFS='\t' '
      BEGIN { while ((getline l < cri) > 0) { split(l, f, "\t"); cc[f[1]] = f[2]; cs[f[1]] = f[3] } }
      { t = $1 - t0; p = $3 }
      $2 == "ADDED" && !(p in created) { created[p] = t }
      index(";" $5, ";PodScheduled=True;") && !(p in sched) { sched[p] = t }
      $4 == "Running" && !(p in run) { run[p] = t }
      index(";" $5, ";Ready=True;") && !(p in ready) { ready[p] = t }
      END {
        for (p in run) {
          print rt, r, p, "created", created[p]
          print rt, r, p, "scheduled", sched[p]
          if (p in cc) { print rt, r, p, "ctr created", cc[p] - t0; print rt, r, p, "ctr started", cs[p] - t0 }
          print rt, r, p, "running", run[p]
          print rt, r, p, "ready", ready[p]
        }
      }' < <(watch_lines "$w") >> "$OUT/samples.tsv"
  }
  timeout 150 "$k8s/kubectl" --kubeconfig "$admin" delete deployment bench --wait=true --timeout=120s >/dev/null ||
    die "$rt round $r: kubectl delete deployment bench did not finish in 120 s"
  until_ok 180 "the pods of deployment/bench gone from the API (round $r)" no_bench_pods
}

kc() { timeout 120 "$k8s/kubectl" --kubeconfig "$admin" "$@"; }

for rt in "${runtimes[@]}"; do
  say "$rt: scripts/cluster.sh up"
  node_rt=$rt
  t_up=$SECONDS
  admin=$(CLUSTER_RUNTIME=$rt timeout 900 scripts/cluster.sh up 2>"$OUT/up-$rt.log") ||
    { tail -20 "$OUT/up-$rt.log" >&2; die "$rt: cluster.sh up failed or took over 900 s (log: $OUT/up-$rt.log)"; }
  say "$rt: node up in $((SECONDS - t_up)) s"
  case $rt in
    podlab) sock=/run/podlab/podlab.sock ;;
    containerd) sock=/run/podlab-cluster-containerd/containerd.sock ;;
  esac
  [ "$rt" != containerd ] || ctd_version=$("$(scripts/build-containerd.sh)/containerd" --version | awk '{ print $3 }')
  say "$rt: warm-up round (1 pod: the image pulled)"
  round 0 1
  for i in $(seq "$rounds"); do
    round "$i" "$replicas"
    say "$rt round $i: apply → Running (s): $(awk -F'\t' -v rt="$rt" -v r="$i" '$1 == rt && $2 == r && $4 == "running" { printf "%.2f\n", $5 / 1e6 }' "$OUT/samples.tsv" | sort -n | tr '\n' ' ')"
  done
  if [ "$rt" = podlab ]; then
    # podlab's waterfall of the last round's median pod
    med=$(awk -F'\t' -v r="$rounds" '$1 == "podlab" && $2 == r && $4 == "running" { print $5, $3 }' "$OUT/samples.tsv" |
      sort -n | awk '{ p[NR] = $2 } END { print p[int((NR + 1) / 2)] }')
    timeout 60 "$podlab" --config "$cluster_dir/podlab.yaml" trace --pod "default/$med" > "$OUT/trace-podlab.txt" 2>&1 ||
      say "podlab trace --pod default/$med failed: $(tail -2 "$OUT/trace-podlab.txt")"
    trace_pod=$med
  fi
  say "$rt: scripts/cluster.sh down"
  CLUSTER_RUNTIME=$rt timeout 300 scripts/cluster.sh down 2>"$OUT/down-$rt.log" ||
    { tail -20 "$OUT/down-$rt.log" >&2; die "$rt: cluster.sh down failed or took over 300 s"; }
  node_rt=""
done
LOAD_AFTER=$(uptime)
TOOK=$((SECONDS - START_S))

# ---------------------------------------------------------------- stats
# segments: the step's stamp minus the previous step's, per pod
awk -F'\t' -v OFS='\t' '
  { v[$1 SUBSEP $2 SUBSEP $3, $4] = $5; pods[$1 SUBSEP $2 SUBSEP $3] = $1 }
  END {
    for (k in pods) {
      rt = pods[k]
      split(k, kk, SUBSEP); id = kk[2] "/" kk[3]
      prev = 0; pname = "apply"
      m = split("created|scheduled|ctr created|ctr started|running|ready", steps, "|")
      for (i = 1; i <= m; i++) {
        s = steps[i]
        if (!((k, s) in v)) continue
        print id, rt "\t" pname " → " s, v[k, s] - prev
        prev = v[k, s]; pname = s
      }
      print id, rt "\tapply → running", v[k, "running"]
      print id, rt "\tapply → running, round " kk[2], v[k, "running"]
      print id, rt "\tapply → ready", v[k, "ready"]
    }
  }' "$OUT/samples.tsv" | awk -F'\t' -v OFS='\t' '{ print $1, $3 "|" $2, $4 }' | stats_tsv > "$OUT/stats.tsv"

declare -A N P50 P90 MAX
while IFS=$'\t' read -r m n p50 p90 p99 mn mx mean; do
  N[$m]=$n P50[$m]=$p50 P90[$m]=$p90 MAX[$m]=$mx
done < "$OUT/stats.tsv"
a=${runtimes[0]} b=${runtimes[1]:-}
cell() { fmt_ms "${P50[$1|$2]:-}"; }
row() { # LABEL METRIC
  if [ -n "$b" ]; then
    printf '| %s | %s | %s | %s |\n' "$1" "$(cell "$2" "$a")" "$(cell "$2" "$b")" "$(ratio "${P50[$2|$a]:-}" "${P50[$2|$b]:-}")"
  else
    printf '| %s | %s |\n' "$1" "$(cell "$2" "$a")"
  fi
}
{
  echo "<!-- cluster: begin (generated by scripts/bench-cluster.sh; do not edit) -->"
  echo "## A kubeadm node: \`kubectl apply\` → Running, podlab vs containerd"
  echo
  echo "One node made by \`scripts/cluster.sh up\` (kubeadm and kubelet ${k8s##*-}, the control plane as static pods, kube-proxy, CoreDNS), once on podlab and once on containerd ${ctd_version:-2.4} (\`CLUSTER_RUNTIME=containerd\`: scripts/build-containerd.sh, Debian's runc, config version 3, the same loopback registry through hosts.toml, the same CNI plugins), back to back in one run; only the CRI socket and the pods' subnet differ. Each round applies a Deployment of $replicas busybox pods (\`sleep\`, \`terminationGracePeriodSeconds: 0\`, image already pulled by a one-pod warm-up round) and deletes it once all are Ready; $rounds rounds per runtime. Milliseconds; p50 per pod; a segment's p50 is taken over its own samples, so the segments' p50s need not add up to the total's. Generated $(date -u +%Y-%m-%d) in ${TOOK} s (\`scripts/bench-cluster.sh -n $replicas -r $rounds\`)."
  echo
  echo "Load: before, \`$(echo "$LOAD_BEFORE" | sed 's/^ *//')\`; after, \`$(echo "$LOAD_AFTER" | sed 's/^ *//')\` (2 cores, shared with other work)."
  echo
  if [ -n "$b" ]; then
    echo "| kubectl apply → Running ($replicas pods × $rounds rounds) | $a | $b | $a/$b |"
    echo "|---|---:|---:|---:|"
    printf '| pods | %s | %s | |\n' "${N[apply → running|$a]:-0}" "${N[apply → running|$b]:-0}"
    row "**p50**" "apply → running"
    printf '| p90 | %s | %s | %s |\n' "$(fmt_ms "${P90[apply → running|$a]:-}")" "$(fmt_ms "${P90[apply → running|$b]:-}")" "$(ratio "${P90[apply → running|$a]:-}" "${P90[apply → running|$b]:-}")"
    printf '| max | %s | %s | %s |\n' "$(fmt_ms "${MAX[apply → running|$a]:-}")" "$(fmt_ms "${MAX[apply → running|$b]:-}")" "$(ratio "${MAX[apply → running|$a]:-}" "${MAX[apply → running|$b]:-}")"
    for i in $(seq "$rounds"); do row "p50, round $i" "apply → running, round $i"; done
    row "p50 apply → Ready" "apply → ready"
    echo
    echo "| p50 of each step (who takes it; source of the stamp) | $a | $b | $a/$b |"
    echo "|---|---:|---:|---:|"
  else
    echo "| p50 ($replicas pods × $rounds rounds) | $a |"
    echo "|---|---:|"
    row "apply → Running" "apply → running"
    row "apply → Ready" "apply → ready"
  fi
  row "apply → pod created: kubectl, apiserver, Deployment and ReplicaSet controllers (watch: ADDED)" "apply → created"
  row "created → scheduled: the scheduler's queue and binding (watch: PodScheduled=True)" "created → scheduled"
  row "scheduled → container created: kubelet's pod worker, RunPodSandbox (CNI), the start of CreateContainer (CRI: CreatedAt)" "scheduled → ctr created"
  row "container created → started: CreateContainer, StartContainer (CRI: CreatedAt → StartedAt)" "ctr created → ctr started"
  row "container started → Running seen: kubelet's PLEG relist (1 s), status patch, watch (watch: phase)" "ctr started → running"
  row "Running → Ready (watch: Ready=True)" "running → ready"
  echo
  echo "- Watch stamps are taken on arrival (a \`kubectl get pods -w\` on the node, stamped by the script, ms resolution); the API's own condition timestamps have a resolution of 1 s and are not used. The CRI stamps are the runtime's own (\`crictl inspect\`: CreatedAt, StartedAt, ns): podlab stamps CreatedAt as CreateContainer begins, containerd as its container record is made, so the split between the two middle rows is each runtime's own and only their sum compares like for like."
  echo "- The kubelet notices a started container at its next PLEG relist (generic PLEG: once a second, plus the relist's own ListPodSandbox, ListContainers and status calls), then patches the pod's status. No span covers that relist, so where \"container started → Running\" differs between the runtimes beyond that second, this table does not say why."
  echo "- The ten pods of a round start at once, so each pod's time includes its wait behind the others (the kubelet's pod workers run in parallel; the runtime's calls contend for the CPUs); the machine is shared, hence the load above, and the later rounds also run beside the earlier rounds' exited sandboxes, which the kubelet removes only at its once-a-minute GC."
  if [ -s "$OUT/trace-podlab.txt" ]; then
    echo "- podlab's waterfall of the median pod of the last round (\`podlab trace --pod default/$trace_pod\`: the apiserver's, kubelet's and podlab's spans; LINK says how each span was tied to the pod):"
    echo
    echo "<details><summary>podlab trace --pod default/$trace_pod</summary>"
    echo
    echo '```'
    cat "$OUT/trace-podlab.txt"
    echo '```'
    echo
    echo "</details>"
  fi
  echo "<!-- cluster: end -->"
} > "$OUT/section.md"
cat "$OUT/section.md"

if [ -n "$DOC" ]; then
  doc_section "$DOC" cluster "$OUT/section.md"
  say "wrote the cluster section of $DOC"
fi
say "samples, watches and logs in $OUT"
