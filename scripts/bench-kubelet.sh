#!/usr/bin/env bash
# bench-kubelet.sh: the real kubelet (scripts/build-kubelet.sh) on podlab
# and on containerd 2.4 (scripts/build-containerd.sh, Debian's runc), the
# same build and the same static pod
# (busybox `sh -c 'echo hello; sleep 3600'`, terminationGracePeriodSeconds
# 0, images pre-imported: no registry), the kubelet restarted between
# runtimes, rounds interleaved. Per round and runtime:
#   up       manifest renamed into staticPodPath → container Running (crictl poll)
#   down     manifest removed (2 s after it was written) → sandbox NotReady (crictl poll)
#   runtime  time inside the kubelet's RunPodSandbox + CreateContainer +
#            StartContainer: podlab's trace of the calls; containerd's log
#            (the CRI plugin logs each call's start and return)
# The sandbox's final removal waits for the kubelet's once-a-minute GC and
# says nothing of the runtime: not measured.
#
# Usage: sudo scripts/bench-kubelet.sh [-n ROUNDS] [--warm-pool N] [--out DIR] [--doc FILE]
#   -n N        rounds per runtime (default 10)
#   --warm-pool N
#               a third runtime in the same rounds: a second podlab serve
#               (its own state, images and socket) with --warm-pool N, so the
#               kubelet's RunPodSandbox claims a warm sandbox (issue 35)
#   --out DIR   keep samples and logs there (default: a temp dir, removed)
#   --doc FILE  write the generated section into FILE (docs/benchmarks.md),
#               between its kubelet markers (appended when absent)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/opt/podlab/bin
. scripts/peers/lib.sh
. scripts/lib/docsection.sh
. scripts/kubelet/lib.sh

N=10 OUT="" DOC="" WARM=0
while [ $# -gt 0 ]; do
  case $1 in
    -n) N=${2:?}; shift;;
    --warm-pool) WARM=${2:?}; shift;;
    --out) OUT=${2:?}; shift;;
    --doc) DOC=${2:?}; shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) echo "bench-kubelet: unknown argument $1" >&2; exit 2;;
  esac
  shift
done
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "bench-kubelet: -n must be a positive integer" >&2; exit 2; }
[[ $WARM =~ ^[0-9]+$ ]] || { echo "bench-kubelet: --warm-pool must be a non-negative integer" >&2; exit 2; }
RUNTIMES="podlab containerd"; [ "$WARM" -gt 0 ] && RUNTIMES="podlab podlab-warm containerd"
[ "$(id -u)" = 0 ] || { echo "bench-kubelet: must run as root" >&2; exit 1; }
[ -x bin/podlab ] || { echo "bench-kubelet: bin/podlab not built (make build)" >&2; exit 1; }
# containerd 2.4, its shim and ctr, built once into the cache: first in
# PATH, so containerd finds its own shim there too.
CTD_BIN=$(scripts/build-containerd.sh)
export PATH=$CTD_BIN:$PATH
for t in containerd containerd-shim-runc-v2 runc ctr crictl catatonit busybox; do
  command -v $t >/dev/null || { echo "bench-kubelet: $t not found (apt-get install runc catatonit busybox-static; scripts/setup.sh)" >&2; exit 1; }
done
say() { echo "bench-kubelet: $*" >&2; }

KUBELET=$(scripts/build-kubelet.sh)
WORK=$(mktemp -d /run/pkb.XXXXXX)   # short: unix socket paths
RES=${OUT:-$WORK/res}
mkdir -p "$RES"
RES=$(cd "$RES" && pwd)
NODE=$(hostname | tr '[:upper:]' '[:lower:]')
PRE_RUN_CONTAINERD=0; [ -e /run/containerd ] && PRE_RUN_CONTAINERD=1
PRE_RUN_CONTAINERD_S=0; [ -e /run/containerd/s ] && PRE_RUN_CONTAINERD_S=1

PL=$WORK/podlab PLW=$WORK/podlab-warm C=$WORK/ctd
PL_SOCK=$PL/podlab.sock PLW_SOCK=$PLW/podlab.sock C_SOCK=$C/c.sock
SERVE_PID="" WARM_SERVE_PID="" CONTAINERD_PID=""
crictl_at() { local sock=$1; shift; crictl --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 30s "$@" 2>/dev/null; }
sock_of() { case $1 in podlab) echo "$PL_SOCK";; podlab-warm) echo "$PLW_SOCK";; containerd) echo "$C_SOCK";; esac; }

cleanup() {
  local rc=$?
  set +e
  kubelet_stop
  # every pod left (the NotReady sandboxes the kubelet's GC had no time for)
  if [ -n "$SERVE_PID" ]; then
    for id in $(crictl_at "$PL_SOCK" pods -q); do crictl_at "$PL_SOCK" stopp "$id" >/dev/null; crictl_at "$PL_SOCK" rmp "$id" >/dev/null; done
    kill "$SERVE_PID"; wait "$SERVE_PID"
  fi
  if [ -n "$WARM_SERVE_PID" ]; then
    for id in $(crictl_at "$PLW_SOCK" pods -q); do crictl_at "$PLW_SOCK" stopp "$id" >/dev/null; crictl_at "$PLW_SOCK" rmp "$id" >/dev/null; done
    # serve stops its refills before it exits; its warm sandboxes stay
    # (state on disk, as pods do) until drained.
    kill "$WARM_SERVE_PID"; wait "$WARM_SERVE_PID"
    bin/podlab --config "$PLW/podlab.yaml" pool drain >/dev/null
  fi
  if [ -n "$CONTAINERD_PID" ]; then
    for id in $(crictl_at "$C_SOCK" pods -q); do crictl_at "$C_SOCK" stopp "$id" >/dev/null; crictl_at "$C_SOCK" rmp "$id" >/dev/null; done
    kill "$CONTAINERD_PID"
    for _ in $(seq 50); do kill -0 "$CONTAINERD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$CONTAINERD_PID" 2>/dev/null; wait "$CONTAINERD_PID"
  fi
  ip link show kbench0 >/dev/null 2>&1 && ip link del kbench0
  rm -rf /var/lib/cni/networks/kbench
  [ -f "$WORK/host" ] && { kubelet_restore_host "$WORK/host" "$WORK" || rc=1; }
  [ "$PRE_RUN_CONTAINERD_S" = 0 ] && rmdir /run/containerd/s 2>/dev/null
  [ "$PRE_RUN_CONTAINERD" = 0 ] && rmdir /run/containerd 2>/dev/null
  grep -F " $WORK/" /proc/self/mountinfo | awk '{ print $5 }' | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

# Images: busybox (and, for containerd, a pause: static catatonit -P, as
# podman's infra containers run) made from the host's static binaries.
scripts/busybox-rootfs.sh "$WORK/busybox"
mkdir -p "$WORK/pause" && cp "$(command -v catatonit)" "$WORK/pause/catatonit"
go build -o "$WORK/imagetar" ./test/imagetar
"$WORK/imagetar" -rootfs "$WORK/busybox" -ref docker.io/library/busybox:latest -cmd sh -o "$WORK/busybox.tar"
"$WORK/imagetar" -rootfs "$WORK/pause" -ref registry.k8s.io/pause:3.6 -entrypoint /catatonit,-P -o "$WORK/pause.tar"

# podlab: a private state dir and socket; images in a private store.
mkdir -p "$PL"
printf 'stateDir: %s\nimageDir: %s\nlogDir: %s\n' "$PL/state" "$PL/images" "$PL/logs" > "$PL/podlab.yaml"
bin/podlab --config "$PL/podlab.yaml" image import busybox:latest "$WORK/busybox" >/dev/null
bin/podlab --config "$PL/podlab.yaml" serve --listen "unix://$PL_SOCK" > "$RES/podlab-serve.log" 2>&1 &
SERVE_PID=$!
if [ "$WARM" -gt 0 ]; then
  mkdir -p "$PLW"
  printf 'stateDir: %s\nimageDir: %s\nlogDir: %s\n' "$PLW/state" "$PLW/images" "$PLW/logs" > "$PLW/podlab.yaml"
  bin/podlab --config "$PLW/podlab.yaml" image import busybox:latest "$WORK/busybox" >/dev/null
  bin/podlab --config "$PLW/podlab.yaml" serve --listen "unix://$PLW_SOCK" --warm-pool "$WARM" > "$RES/podlab-warm-serve.log" 2>&1 &
  WARM_SERVE_PID=$!
fi

# containerd: private config, root, state, sockets; CRI on, its CNI a
# bridge of its own (kbench0) with podlab's plugins; restrict_oom_score_adj
# as this VM needs (no CAP_SYS_RESOURCE).
mkdir -p "$C/net.d" "$C/opt" "$C/runc" "$C/nri/plugins" "$C/nri/conf.d"
cat > "$C/net.d/10-kbench.conflist" <<'EOF'
{"cniVersion": "1.0.0", "name": "kbench", "plugins": [
  {"type": "bridge", "bridge": "kbench0", "isGateway": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.79.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
# Config version 3, as containerd 2.x's docs give it; NRI on, as 2.x
# ships it, on a socket of its own (no plugin connects).
{ containerd_config 3 "$C" "$C_SOCK"; cat <<EOF; } > "$C/config.toml"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'registry.k8s.io/pause:3.6'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/opt/podlab/cni/bin']
    conf_dir = '$C/net.d'
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      Root = '$C/runc'
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '$C/nri.sock'
  plugin_path = '$C/nri/plugins'
  plugin_config_path = '$C/nri/conf.d'
EOF
containerd --config "$C/config.toml" </dev/null > "$RES/containerd.log" 2>&1 &
CONTAINERD_PID=$!
for _ in $(seq 100); do [ -S "$C_SOCK" ] && [ -S "$PL_SOCK" ] && { [ "$WARM" = 0 ] || [ -S "$PLW_SOCK" ]; } && break; sleep 0.1; done
for img in busybox pause; do
  ctr -a "$C_SOCK" -n k8s.io images import "$WORK/$img.tar" >/dev/null
done

# the host as found, before any kubelet run
kubelet_save_host "$WORK/host"
for rt in $RUNTIMES; do
  kubelet_write_config "$WORK/kubelet-$rt" "$(sock_of $rt)" 20448
done

manifest() { # NAME
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: busybox:latest
    imagePullPolicy: Never
    command: [sh, -c, 'echo hello; sleep 3600']
EOF
}

# ts_us "2026-11-24T19:40:37.123456789Z": µs since midnight (the runs are
# minutes long; containerd logs UTC).
ts_us() { awk -v t="$1" 'BEGIN { split(substr(t, 12), a, ":"); sub(/Z.*/, "", a[3]); printf "%.0f\n", ((a[1] * 60 + a[2]) * 60 + a[3]) * 1e6 }'; }

# call_us RT POD_ID CTR_ID CALL: µs inside one of the kubelet's CRI calls on
# the pod (run, create, start, stop-ctr, stop-pod), "" when not (yet)
# recorded: podlab's trace of the calls, containerd's log lines at each
# call's start and return.
call_us() {
  local rt=$1 pod=$2 ctr=$3 call=$4 s e
  if [ $rt != containerd ]; then
    local cfg=$PL/podlab.yaml; [ $rt = podlab-warm ] && cfg=$PLW/podlab.yaml
    local span
    case $call in
      run) span="RunPodSandbox";; create) span="CreateContainer app";; start) span="StartContainer app";;
      stop-ctr) span="StopContainer app";; stop-pod) span="StopPodSandbox";;
    esac
    bin/podlab --config "$cfg" trace "$pod" 2>/dev/null |
      awk -v span="CRI $span" 'index($0, span " ") == 1 {
             n = 0
             for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+ms$/ && ++n == 2) { v = $i; sub(/ms$/, "", v); printf "%.0f\n", v * 1000; exit }
           }'
    return
  fi
  local l=$RES/containerd.log meta
  case $call in
    run)
      e=$(grep -F "returns sandbox id \\\"$pod\\\"" "$l" | head -1)
      meta=${e#*RunPodSandbox for }; meta=${meta%% returns*}
      s=$(grep -F "RunPodSandbox for $meta\"" "$l" | head -1);;
    create)
      s=$(grep -F "CreateContainer within sandbox \\\"$pod\\\"" "$l" | grep -v returns | head -1)
      e=$(grep -F "returns container id \\\"$ctr\\\"" "$l" | head -1);;
    start)
      s=$(grep -F "StartContainer for \\\"$ctr\\\"" "$l" | grep -v returns | head -1)
      e=$(grep -F "StartContainer for \\\"$ctr\\\" returns successfully" "$l" | head -1);;
    stop-ctr)
      s=$(grep -F "StopContainer for \\\"$ctr\\\" with timeout" "$l" | head -1)
      e=$(grep -F "StopContainer for \\\"$ctr\\\" returns successfully" "$l" | head -1);;
    stop-pod)
      s=$(grep -F "StopPodSandbox for \\\"$pod\\\"" "$l" | grep -v returns | head -1)
      e=$(grep -F "StopPodSandbox for \\\"$pod\\\" returns successfully" "$l" | head -1);;
  esac
  s=$(sed -n 's/^time="\([^"]*\)".*/\1/p' <<< "$s"); e=$(sed -n 's/^time="\([^"]*\)".*/\1/p' <<< "$e")
  [ -n "$s" ] && [ -n "$e" ] && echo $(($(ts_us "$e") - $(ts_us "$s")))
  return 0
}

# calls_us RT POD CTR CALL...: the sum of call_us over CALLs, waiting up to
# 5 s for each to be recorded (a call is written down once it returns,
# which may be just after the state it made shows); "" if one never is.
calls_us() {
  local rt=$1 pod=$2 ctr=$3 sum=0 v; shift 3
  for c in "$@"; do
    v=""
    for _ in $(seq 1 50); do
      v=$(call_us "$rt" "$pod" "$ctr" "$c")
      [ -n "$v" ] && break
      sleep 0.1
    done
    [ -n "$v" ] || { echo ""; return; }
    sum=$((sum + v))
  done
  echo $sum
}

# round RT I: one static pod up and down under RT's kubelet.
round() {
  local rt=$1 i=$2 sock kd name t0 t1 t2 t3 ctr pod rtp rtd
  sock=$(sock_of $rt)
  kd=$WORK/kubelet-$rt name=kb-$rt-$i
  kubelet_start "$KUBELET" "$kd" "$RES/kubelet-$rt.log.$i"
  # past the kubelet's first runtime and PLEG checks (it skips pod syncs
  # until both have passed once)
  sleep 3
  manifest "$name" > "$kd/$name.yaml"
  now t0; mv "$kd/$name.yaml" "$kd/manifests/$name.yaml"
  ctr=""
  for _ in $(seq 1 3000); do
    ctr=$(crictl_at "$sock" ps -q --name '^app$' --label "io.kubernetes.pod.name=$name-$NODE" --state Running)
    [ -n "$ctr" ] && break
    sleep 0.01
  done
  now t1
  [ -n "$ctr" ] || { say "$rt round $i: the container did not run within 30 s"; return 1; }
  pod=$(crictl_at "$sock" pods -q --label "io.kubernetes.pod.name=$name-$NODE" | head -1)
  # Removed 2 s after it was written, whatever the runtime: the kubelet
  # acts on a removal at its next PLEG relist (once a second, counted from
  # its start), so removing it as soon as the container runs would time
  # each runtime from another phase of that cycle, and a faster start
  # would show as a slower stop.
  now t2
  [ $((t0 + 2000000 - t2)) -gt 0 ] && sleep "$(awk -v us=$((t0 + 2000000 - t2)) 'BEGIN { printf "%.6f", us / 1e6 }')"
  now t2; rm "$kd/manifests/$name.yaml"
  for _ in $(seq 1 3000); do
    [ -n "$(crictl_at "$sock" pods -q --label "io.kubernetes.pod.name=$name-$NODE" --state NotReady)" ] && break
    sleep 0.01
  done
  now t3
  rtp=$(calls_us "$rt" "$pod" "$ctr" run create start)
  rtd=$(calls_us "$rt" "$pod" "$ctr" stop-ctr stop-pod)
  kubelet_stop
  printf '%s\tup.%s\t%s\n%s\tdown.%s\t%s\n' "$i" "$rt" $((t1 - t0)) "$i" "$rt" $((t3 - t2)) >> "$RES/samples.tsv"
  [ -n "$rtp" ] && printf '%s\truntime.%s\t%s\n' "$i" "$rt" "$rtp" >> "$RES/samples.tsv"
  [ -n "$rtd" ] && printf '%s\truntime-down.%s\t%s\n' "$i" "$rt" "$rtd" >> "$RES/samples.tsv"
  say "$rt round $i: up $(fmt_ms $((t1 - t0))) ms (runtime $(fmt_ms "$rtp")), NotReady $(fmt_ms $((t3 - t2))) ms (runtime $(fmt_ms "$rtd"))"
}

: > "$RES/samples.tsv"
START_S=$SECONDS
for i in $(seq 0 "$N"); do   # round 0: warm-up, not counted
  # each round in another order: the runtimes take turns at going first
  order=$RUNTIMES
  for _ in $(seq $((i % $(wc -w <<< "$RUNTIMES")))); do order="${order#* } ${order%% *}"; done
  for rt in $order; do round "$rt" "$i"; done
done
TOOK=$((SECONDS - START_S))
grep -v '^0	' "$RES/samples.tsv" | stats_tsv > "$RES/stats.tsv"

declare -A P50
while IFS=$'\t' read -r m n p50 p90 p99 mn mx mean; do P50[$m]=$p50; done < "$RES/stats.tsv"
row() { # LABEL METRIC
  printf '| %s | %s | %s | %s |\n' "$1" "$(fmt_ms "${P50[$2.podlab]:-}")" "$(fmt_ms "${P50[$2.containerd]:-}")" "$(ratio "${P50[$2.podlab]:-}" "${P50[$2.containerd]:-}")"
}
target() { # WHAT RATIO LIMIT OK
  printf '| %s | %s× | %s | %s |\n' "$1" "$2" "$3" "$([ "$4" = 1 ] && echo met || echo "**not met**")"
}
{
  echo "<!-- kubelet: begin (generated by scripts/bench-kubelet.sh; do not edit) -->"
  echo "## The real kubelet: podlab vs containerd"
  echo
  echo "kubelet $("$KUBELET" --version | awk '{ print $2 }') standalone (static pods, no API server), restarted between runtimes; containerd $(containerd --version | awk '{ print $3 }') (scripts/build-containerd.sh, Debian's runc, config version 3, CRI plugins, private root/state/socket, \`restrict_oom_score_adj\`); the same static pod: busybox \`sh -c 'echo hello; sleep 3600'\`, \`terminationGracePeriodSeconds: 0\`, images imported offline. $N rounds each, interleaved (+1 warm-up); p50 in ms. Generated $(date -u +%Y-%m-%d) in ${TOOK} s."
  echo
  echo "| p50 | podlab | containerd | podlab/containerd |"
  echo "|---|---:|---:|---:|"
  row "manifest → container Running (crictl poll)" up
  row "runtime's part: RunPodSandbox + CreateContainer + StartContainer" runtime
  row "manifest removed (2 s after written) → sandbox NotReady (crictl poll)" down
  row "runtime's part: StopContainer (the kubelet's 2 s minimum grace) + StopPodSandbox" runtime-down
  echo
  echo "| target (issue 21) | ratio | limit | |"
  echo "|---|---:|---:|---|"
  target "runtime's part ≤ 0.25× containerd's" "$(ratio "${P50[runtime.podlab]:-}" "${P50[runtime.containerd]:-}")" "0.25×" "$(ratio_le "${P50[runtime.podlab]:-}" "${P50[runtime.containerd]:-}" 0.25)"
  target "manifest → running ≤ 0.75× containerd's" "$(ratio "${P50[up.podlab]:-}" "${P50[up.containerd]:-}")" "0.75×" "$(ratio_le "${P50[up.podlab]:-}" "${P50[up.containerd]:-}" 0.75)"
  target "manifest removed → NotReady ≤ 1× containerd's" "$(ratio "${P50[down.podlab]:-}" "${P50[down.containerd]:-}")" "1×" "$(ratio_le "${P50[down.podlab]:-}" "${P50[down.containerd]:-}" 1.0)"
  echo
  echo "- The runtime's part is the time inside the three CRI calls that start the pod: for podlab from its trace of the kubelet's calls (\`podlab trace\`), for containerd from its CRI plugin's log lines at each call's start and return. The rest of \"manifest → Running\" is the kubelet's (its pod workers, PLEG relist, status manager) and crictl's polling."
  echo "- \"Manifest removed → NotReady\" is mostly the kubelet's: its pod worker waits for the next PLEG relist (once a second) before it stops the pod, then StopContainer waits the kubelet's minimum grace period (2 s, for \`terminationGracePeriodSeconds: 0\` too) for \`sh\`, which ignores SIGTERM as PID 1; the runtime's part is the last row."
  echo "- The sandbox's removal after NotReady waits for the kubelet's once-a-minute GC and is not measured."
  echo "- containerd's sandbox image is static \`catatonit -P\` (no registry here); podlab runs its own pause binary."
  if [ "$WARM" -gt 0 ]; then
    echo
    echo "With a warm pool (\`--warm-pool $WARM\`: a second podlab serve, its own state, \`serve --warm-pool $WARM\`), in the same rounds; its RunPodSandbox claims a warm sandbox ($(awk -v n="$WARM" -F'made=' '/warm pool refilled/ { split($2, a, " "); s += a[1] } END { print s - n }' "$RES/podlab-warm-serve.log") sandboxes refilled after claims, in $((N + 1)) rounds with the warm-up):"
    echo
    echo "| p50 | podlab, warm pool | podlab, cold | containerd | warm/cold | warm/containerd |"
    echo "|---|---:|---:|---:|---:|---:|"
    for m in "up:manifest → container Running" "runtime:runtime's part: RunPodSandbox + CreateContainer + StartContainer"; do
      k=${m%%:*}
      printf '| %s | %s | %s | %s | %s | %s |\n' "${m#*:}" "$(fmt_ms "${P50[$k.podlab-warm]:-}")" "$(fmt_ms "${P50[$k.podlab]:-}")" "$(fmt_ms "${P50[$k.containerd]:-}")" \
        "$(ratio "${P50[$k.podlab-warm]:-}" "${P50[$k.podlab]:-}")" "$(ratio "${P50[$k.podlab-warm]:-}" "${P50[$k.containerd]:-}")"
    done
  fi
  echo "<!-- kubelet: end -->"
} > "$RES/section.md"
cat "$RES/section.md"

if [ -n "$DOC" ]; then
  doc_section "$DOC" kubelet "$RES/section.md"
  say "wrote the kubelet section of $DOC"
fi
