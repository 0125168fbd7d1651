#!/usr/bin/env bash
# critest.sh: run critest (cri-tools' CRI validation suite, built by
# setup.sh) against `podlab serve` and then against containerd 2.4 (built
# from its module by scripts/build-containerd.sh, cached outside the
# clone), each on a private socket and state, both pulling the test images
# from one registry on 127.0.0.1 through their mirror configs (no image
# renamed, no -registry-prefix); write docs/conformance.md from the junit
# reports; with --benchmark, also run critest -benchmark against both and
# write the "Through the CRI" section of docs/benchmarks.md.
#
# Usage: sudo scripts/critest.sh [--only podlab|containerd|containerd16]
#                                [--benchmark] [--containerd16]
#                                [--no-doc] [--target FILE] [--podlab BIN]
#                                [--benchmark-only] [--rounds N]
#                                [--focus REGEX] [--runtime-handler NAME]
#                                [--warm-pool N] [--params FILE]
#                                [--benchmark-doc]
#
# --benchmark-doc: with --benchmark-only, still write the "Through the
# CRI" section of docs/benchmarks.md (not docs/conformance.md).
#
# --warm-pool N runs podlab serve with N warm sandboxes kept ready (issue
# 35): its RunPodSandbox claims one for every request the pool can serve.
# With --benchmark, the benchmark rounds run podlab twice, cold and with
# the pool ("podlab-warm", its pool full before critest starts), beside
# containerd; the doc gains the warm column and how many RunPodSandbox
# calls claimed a warm sandbox and how many were made cold (PoolMiss).
#
# --params FILE: critest -benchmark's params (default
# test/critest-benchmark.yaml; scripts/guest-critest.sh passes one with
# longer time limits for the guest's TCG).
# --runtime-handler NAME runs podlab's pods with that CRI runtime handler
# (critest -runtime-handler: runc, crun; see README, Runtime handlers).
#
# --focus REGEX runs only the specs it matches (critest's -ginkgo.focus,
# e.g. --focus NRI), with no doc and no target check: to work on a few.
#
# --containerd16 also runs Debian's containerd 1.6 (apt), the previous
# peer, as a second column of the counts (and of the benchmark rounds);
# off by default: it adds about 90 s to a run and is not the peer.
#
# --rounds N (default 3) runs the benchmark N times, podlab and containerd
# in turn, after a sync each: the doc pools the rounds' cycles and gives
# each round's ratio, so that one noisy minute on a shared machine does not
# decide the figure.
#
# Results (console logs, junit reports, benchmark data) are kept under
# build/critest/results. Exit status: 1 when podlab passes fewer specs than
# the target file's count (test/critest-target), or on a leak.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO=$PWD
. scripts/peers/lib.sh
export PATH=$PATH:/usr/local/go/bin

ONLY="" BENCH=0 VALIDATE=1 DOC=1 BENCH_DOC=0 TARGET=test/critest-target PODLAB=$REPO/bin/podlab ROUNDS=3 CTD16=0 HANDLER="" FOCUS="" WARM=0 PARAMS=test/critest-benchmark.yaml
while [ $# -gt 0 ]; do
  case $1 in
    --only) ONLY=${2:?}; shift;;
    --benchmark) BENCH=1;;
    --containerd16) CTD16=1;;
    --benchmark-only) BENCH=1 VALIDATE=0 DOC=0;;
    --no-doc) DOC=0;;
    --benchmark-doc) BENCH_DOC=1;;
    --target) TARGET=${2:?}; shift;;
    --podlab) PODLAB=${2:?}; shift;;
    --rounds) ROUNDS=${2:?}; shift;;
    --runtime-handler) HANDLER=${2:?}; shift;;
    --warm-pool) WARM=${2:?}; shift;;
    --params) PARAMS=${2:?}; shift;;
    --focus) FOCUS=${2:?} DOC=0 TARGET=""; shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) echo "critest: unknown argument $1" >&2; exit 2;;
  esac
  shift
done
say() { echo "critest: $*" >&2; }
[ "$(id -u)" = 0 ] || { echo "critest.sh must run as root (sudo)" >&2; exit 1; }

CRITEST=${CRITEST:-/opt/podlab/bin/critest}
BUILD=$REPO/build/critest
OUT=${CRITEST_OUT:-$BUILD/results}
for t in "$CRITEST" "$PODLAB"; do [ -x "$t" ] || { echo "critest: $t missing (make setup build)" >&2; exit 1; }; done
for t in docker-registry runc ipcs; do command -v "$t" >/dev/null || { echo "critest: $t missing (make setup)" >&2; exit 1; }; done
RUNTIMES=(podlab containerd)
[ "$CTD16" = 0 ] || RUNTIMES+=(containerd16)
[ -z "$ONLY" ] || RUNTIMES=("$ONLY")
for rt in "${RUNTIMES[@]}"; do
  case $rt in
    podlab) ;;
    containerd)
      # The peer: containerd 2.4 and its runc shim, built once into the
      # cache (about 45 s) and found there, first in PATH, by containerd
      # (it looks its shim up in PATH before its own dir); runc is Debian's.
      CTD_BIN=$(scripts/build-containerd.sh)
      CTD_VERSION=$("$CTD_BIN/containerd" --version | awk '{ print $3 }');;
    containerd16)
      command -v containerd >/dev/null || { echo "critest: containerd (apt) missing (make setup)" >&2; exit 1; }
      CTD16_VERSION=$(containerd --version | awk '{ print $3 }');;
    *) echo "critest: --only $rt: not podlab, containerd or containerd16" >&2; exit 2;;
  esac
done
# The only spec skipped by name: the pull of upstream's image by its digest
# (test-image-digest@sha256:…) cannot pass offline.
SKIP='public image with digest'
mkdir -p "$BUILD" "$OUT"

RUN=$(mktemp -d /tmp/plcritest.XXXXXX)
# Searchable by others, as /run and /var/lib are: a user-namespaced pod's
# root reaches its rootfs and the pause through the state and image dirs.
chmod 711 "$RUN"
REGISTRY_PID="" SERVER_PID=""
stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || :
  wait "$pid" 2>/dev/null || :
}
cleanup() {
  stop_pid "$SERVER_PID"; SERVER_PID=""
  stop_pid "$REGISTRY_PID"; REGISTRY_PID=""
  rm -rf "$RUN"
}
trap cleanup EXIT

# What critest leaves on the host itself: its HostIpc spec makes shared
# memory segments with the host's ipcmk, and its mount specs bind-mount
# under their os.MkdirTemp("", "test"+podID) dirs (only those: other
# mounts under /tmp are not ours).
# (its segments: `ipcmk -M 1048576`, unattached)
shm_ids() { ipcs -m | awk '$2 ~ /^[0-9]+$/ && $5 == 1048576 && $6 == 0 { print $2 }' | sort; }
tmp_mounts() { awk '$5 ~ "^/tmp/test[0-9a-f]+(/|$)" { print $5 }' /proc/self/mountinfo | sort -u; }
SHM_BEFORE=$(shm_ids) MOUNTS_BEFORE=$(tmp_mounts)
tidy_host() {
  local id m
  for id in $(comm -13 <(echo "$SHM_BEFORE") <(shm_ids)); do ipcrm -m "$id" 2>/dev/null || :; done
  # deepest first
  for m in $(comm -13 <(echo "$MOUNTS_BEFORE") <(tmp_mounts) | sort -r); do
    umount -l "$m" 2>/dev/null || :
  done
}

# ---------------------------------------------------------------- registry
# The images live in build/critest/registry, rebuilt only when their
# builder changed (a stamp of its sources).
for _ in $(seq 20); do
  REG_PORT=$((20000 + RANDOM % 30000))
  ss -ltn 2>/dev/null | awk '{ print $4 }' | grep -q ":$REG_PORT\$" || break
done
REG=127.0.0.1:$REG_PORT
stamp=$(cat test/critestimages/*.go test/critestimages/*/*.go pause/*.go | sha256sum | cut -c1-16)
if [ "$(cat "$BUILD/images.stamp" 2>/dev/null)" != "$stamp" ]; then rm -rf "$BUILD/registry" "$BUILD/images.stamp"; fi
mkdir -p "$BUILD/registry"
printf 'version: 0.1\nlog: {level: error, accesslog: {disabled: true}}\nstorage:\n  filesystem: {rootdirectory: %s}\nhttp:\n  addr: %s\n  secret: critest\n' \
  "$BUILD/registry" "$REG" > "$RUN/registry.yml"
docker-registry serve "$RUN/registry.yml" </dev/null >"$OUT/registry.log" 2>&1 &
REGISTRY_PID=$!
for _ in $(seq 100); do curl -fs "http://$REG/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "http://$REG/v2/" >/dev/null || { echo "critest: the registry did not start: $(tail -3 "$OUT/registry.log")" >&2; exit 1; }
if [ ! -f "$BUILD/images.stamp" ]; then
  say "building the test images into $BUILD/registry"
  go run ./test/critestimages -registry "$REG" -work "$BUILD" >"$OUT/images.log"
  echo "$stamp" > "$BUILD/images.stamp"
fi
MIRRORED=(registry.k8s.io k8s.gcr.io gcr.io docker.io public.ecr.aws)

# ---------------------------------------------------------------- runtimes
start_podlab() { # start_podlab [DIR-NAME [POOL-SIZE]]
  local d=$RUN/${1:-podlab} warm=${2:-$WARM}
  mkdir -p "$d"
  {
    echo "stateDir: $d/state"
    echo "imageDir: $d/images"
    echo "logDir: $d/logs"
    echo "warmPool: $warm"
    # NRI on (podlab's default) with a socket and plugin dirs of its own,
    # handed to critest's -nri-socket as containerd's.
    echo "nri:"
    echo "  enable: true"
    echo "  socketPath: $d/nri.sock"
    echo "  pluginPath: $d/nri/plugins"
    echo "  pluginConfigPath: $d/nri/conf.d"
    # critest's synchronization specs hold a late plugin's Synchronize open
    # for 2 s while they create containers, as long as NRI's default
    # request timeout: at 2 s the plugin is dropped before it could learn
    # of them (containerd 2.4.2 skips both specs so). Longer here, so the
    # specs test what they mean to: no container lost around a sync.
    echo "  requestTimeoutSeconds: 5"
    echo "registry:"
    echo "  hosts:"
    local h
    for h in "${MIRRORED[@]}"; do
      echo "    $h:"
      echo "      endpoints:"
      echo "      - url: http://$REG"
    done
  } > "$d/config.yaml"
  SOCK=$d/cri.sock NRI_SOCK=$d/nri.sock
  "$PODLAB" --config "$d/config.yaml" serve --listen "unix://$SOCK" >"$OUT/${1:-podlab}-serve.log" 2>&1 &
  SERVER_PID=$!
  [ "$warm" -gt 0 ] && [ "${1:-podlab}" = podlab-warm ] || return 0
  # the benchmark's warm rounds start with the pool full, as a server
  # that has been up a while has it
  local i ready=0
  for i in $(seq 600); do
    ready=$("$PODLAB" --config "$d/config.yaml" pool ls -o json 2>/dev/null | grep -c '"state": "Warm"' || :)
    [ "$ready" -lt "$warm" ] || break
    sleep 0.1
  done
  say "podlab-warm: $ready of $warm warm sandboxes ready"
}

# containerd_dirs D: what both containerds share: hosts.toml mirrors to the
# loopback registry under D/certs.d, and a CNI config of their own (their
# own bridge and subnet, leases in D) under D/cni.
containerd_dirs() {
  local d=$1 h
  mkdir -p "$d/cni" "$d/certs.d"
  for h in "${MIRRORED[@]}"; do
    mkdir -p "$d/certs.d/$h"
    printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$REG" "$REG" > "$d/certs.d/$h/hosts.toml"
  done
  cat > "$d/cni/10-critest.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "critest-ctd", "plugins": [
  {"type": "bridge", "bridge": "plctd0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$d/ipam", "ranges": [[{"subnet": "10.98.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
EOF
}

# start_containerd: containerd 2.4, configured as its docs (docs/cri/
# config.md, docs/NRI.md) say for version 3: the CRI's images, runtime and
# gRPC plugins each in its own section, NRI on with a socket of its own
# (NRI_SOCK, handed to critest's -nri-socket) and its plugin dirs private
# (none are pre-registered).
start_containerd() {
  local d=$RUN/containerd
  containerd_dirs "$d"
  mkdir -p "$d/nri/plugins" "$d/nri/conf.d"
  SOCK=$d/containerd.sock NRI_SOCK=$d/nri.sock
  { containerd_config 3 "$d" "$SOCK"; cat <<EOF; } > "$d/config.toml"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
  enable_tls_streaming = false
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'registry.k8s.io/pause:3.9'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '$d/certs.d'
[plugins.'io.containerd.cri.v1.runtime']
  # This host withholds CAP_SYS_RESOURCE even from root: runc cannot lower
  # a sandbox's oom_score_adj to -998 ("failed to update
  # /proc/self/oom_score_adj: Permission denied"); containerd's own option
  # keeps it at containerd's.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/opt/podlab/cni/bin']
    conf_dir = '$d/cni'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '$(command -v runc)'
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  disable_connections = false
  socket_path = '$NRI_SOCK'
  plugin_path = '$d/nri/plugins'
  plugin_config_path = '$d/nri/conf.d'
EOF
  PATH=$CTD_BIN:$PATH "$CTD_BIN/containerd" --config "$d/config.toml" </dev/null >"$OUT/containerd-daemon.log" 2>&1 &
  SERVER_PID=$!
}

# start_containerd16: Debian's containerd 1.6 (apt), the previous peer
# (--containerd16), configured as before (config version 2).
start_containerd16() {
  local d=$RUN/containerd16
  containerd_dirs "$d"
  SOCK=$d/containerd.sock
  { containerd_config 2 "$d" "$SOCK"; cat <<EOF; } > "$d/config.toml"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  sandbox_image = "registry.k8s.io/pause:3.9"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/podlab/cni/bin"
    conf_dir = "$d/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$d/certs.d"
EOF
  containerd --config "$d/config.toml" </dev/null >"$OUT/containerd16-daemon.log" 2>&1 &
  SERVER_PID=$!
}

# containerd_remove_all: what critest left in containerd (a failed spec may
# leave its pod), before containerd stops, so no mount or netns outlives it.
remove_all() {
  local ep=unix://$SOCK id
  for id in $(/opt/podlab/bin/crictl -r "$ep" pods -q 2>/dev/null); do
    /opt/podlab/bin/crictl -r "$ep" stopp "$id" >/dev/null 2>&1 || :
    /opt/podlab/bin/crictl -r "$ep" rmp -f "$id" >/dev/null 2>&1 || :
  done
}

# pool_counts RT: serve's last count of its warm pool (filled, claimed,
# missed), logged as it stopped; empty when it logged none.
pool_counts() {
  grep 'warm pool stopped' "$OUT/$1-serve.log" 2>/dev/null | tail -1 || :
}

stop_runtime() {
  local rt=$1
  remove_all
  stop_pid "$SERVER_PID"; SERVER_PID=""
  # the warm sandboxes the server kept
  case $rt in podlab*) "$PODLAB" --config "$RUN/$rt/config.yaml" pool drain >/dev/null || :;; esac
  # anything left mounted under its root (remove_all stopped the pods, so
  # their shims have exited)
  local d=$RUN/$rt
  awk -v d="$d/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" || :; done
  case $rt in podlab*) ;; *) ip link del plctd0 2>/dev/null || :;; esac
  tidy_host
}

# run_critest RUNTIME [benchmark ROUND]: the validation suite (or the
# benchmarks, into results/RUNTIME-benchmark/round-ROUND) against RUNTIME,
# console to results/RUNTIME[-benchmark].log.
run_critest() {
  local rt=$1 mode=${2:-validate} round=${3:-1} log
  NRI_SOCK=""
  case $rt in
    podlab) start_podlab;;
    podlab-cold) start_podlab podlab-cold 0;;
    podlab-warm) start_podlab podlab-warm "$WARM";;
    containerd) start_containerd;;
    containerd16) start_containerd16;;
  esac
  for _ in $(seq 300); do [ -S "$SOCK" ] && break; sleep 0.1; done
  [ -S "$SOCK" ] || { echo "critest: $rt did not start" >&2; stop_runtime "$rt"; return 1; }
  local args=(-runtime-endpoint "unix://$SOCK" -image-endpoint "unix://$SOCK")
  # NRI's specs run where the runtime serves NRI: podlab and containerd
  # 2.4 (containerd 1.6's is off).
  [ -z "$NRI_SOCK" ] || args+=(-nri-socket "$NRI_SOCK")
  case $rt in podlab*) [ -z "$HANDLER" ] || args+=(-runtime-handler "$HANDLER");; esac
  [ -z "$FOCUS" ] || args+=(-ginkgo.focus "$FOCUS")
  local t0=$SECONDS rc=0 from=0
  if [ "$mode" = benchmark ]; then
    log=$OUT/$rt-benchmark.log
    [ "$round" -gt 1 ] || : > "$log"
    from=$(wc -l < "$log")
    rm -rf "$OUT/$rt-benchmark/round-$round"; mkdir -p "$OUT/$rt-benchmark/round-$round"
    say "critest -benchmark against $rt, round $round of $ROUNDS (params: $PARAMS)"
    "$CRITEST" "${args[@]}" -benchmark -benchmarking-params-file "$PARAMS" \
      -benchmarking-output-dir "$OUT/$rt-benchmark/round-$round" -ginkgo.no-color >>"$log" 2>&1 || rc=$?
  else
    log=$OUT/$rt.log
    rm -rf "$OUT/$rt-junit"; mkdir -p "$OUT/$rt-junit"
    say "critest against $rt"
    "$CRITEST" "${args[@]}" -ginkgo.skip="$SKIP" -ginkgo.no-color -ginkgo.junit-report "$OUT/$rt-junit/junit.xml" >"$log" 2>&1 || rc=$?
  fi
  echo "$((SECONDS - t0))" > "$OUT/$rt-$mode.seconds"
  # the ginkgo summary
  tail -n +"$((from + 1))" "$log" | grep -E '^(Ran [0-9]+ of|FAIL!|SUCCESS!|PASS|FAIL)|Passed \| [0-9]+ Failed' | sed "s/^/critest [$rt]: /" >&2 || :
  say "$rt: critest exited $rc after $((SECONDS - t0)) s (log $log)"
  stop_runtime "$rt"
  # the pool's own count, logged by serve as it stops
  if [ "$mode" = benchmark ] && [ "$rt" = podlab-warm ]; then
    pool_counts "$rt" | sed "s/^/round $round: /" >> "$OUT/$rt-pool.log"
  fi
}

for rt in "${RUNTIMES[@]}"; do
  [ "$VALIDATE" = 1 ] || break
  run_critest "$rt"
  if [ "$rt" = podlab ]; then
    say "leak check after podlab"
    go run ./test/leakcheck
  fi
done
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$BENCH" = 1 ]; then
  # With a pool, podlab's benchmark rounds run cold (podlab) and warm
  # (podlab-warm) in turn.
  BENCH_RUNTIMES=("${RUNTIMES[@]}")
  if [ "$WARM" -gt 0 ] && [[ " ${RUNTIMES[*]} " == *" podlab "* ]]; then
    BENCH_RUNTIMES=()
    for rt in "${RUNTIMES[@]}"; do
      if [ "$rt" = podlab ]; then BENCH_RUNTIMES+=(podlab-cold podlab-warm); else BENCH_RUNTIMES+=("$rt"); fi
    done
  fi
  for rt in "${BENCH_RUNTIMES[@]}"; do rm -rf "$OUT/$rt-benchmark"; done
  rm -f "$OUT/podlab-warm-pool.log"
  for round in $(seq "$ROUNDS"); do
    for rt in "${BENCH_RUNTIMES[@]}"; do
      # The previous run's deleted files and cgroups are written back and
      # freed in the background: let that not land on the next runtime.
      sync
      run_critest "$rt" benchmark "$round"
    done
  done
fi

# ---------------------------------------------------------------- reports
if [ "$DOC" = 1 ] && [ -z "$ONLY" ]; then
  c16=()
  if [ "$CTD16" = 1 ]; then
    c16=(-containerd16 "$OUT/containerd16-junit" -containerd16-version "$CTD16_VERSION"
      -seconds-containerd16 "$(cat "$OUT/containerd16-validate.seconds")")
  fi
  go run ./test/critestreport conformance -podlab "$OUT/podlab-junit" -containerd "$OUT/containerd-junit" \
    -causes test/critest-causes.txt -seconds-podlab "$(cat "$OUT/podlab-validate.seconds")" \
    -seconds-containerd "$(cat "$OUT/containerd-validate.seconds")" -containerd-version "$CTD_VERSION" \
    "${c16[@]}" -podlab-version "$(git describe --always --dirty)" > docs/conformance.md.tmp
  mv docs/conformance.md.tmp docs/conformance.md
  say "wrote docs/conformance.md"
fi
if [ "$BENCH" = 1 ] && [ -z "$ONLY" ] && { [ "$DOC" = 1 ] || [ "$BENCH_DOC" = 1 ]; }; then
  b16=() warm=(-podlab "$OUT/podlab-benchmark")
  [ "$CTD16" = 0 ] || b16=(-containerd16 "$OUT/containerd16-benchmark" -containerd16-version "$CTD16_VERSION")
  [ "$WARM" = 0 ] || warm=(-podlab "$OUT/podlab-cold-benchmark" -podlab-warm "$OUT/podlab-warm-benchmark"
    -warm-pool "$WARM" -pool-log "$OUT/podlab-warm-pool.log")
  go run ./test/critestreport benchmark "${warm[@]}" -containerd "$OUT/containerd-benchmark" \
    -load "$LOAD_BEFORE before the benchmark, $(cut -d' ' -f1-3 /proc/loadavg) after" -doc docs/benchmarks.md -params "$PARAMS" -containerd-version "$CTD_VERSION" "${b16[@]}"
  say "wrote the \"Through the CRI\" section of docs/benchmarks.md"
fi

# ---------------------------------------------------------------- target
if [ "$VALIDATE" = 1 ] && [ -d "$OUT/podlab-junit" ] && [ -f "$TARGET" ]; then
  want=$(grep -v '^#' "$TARGET" | head -1)
  passed=$(go run ./test/critestreport count -junit "$OUT/podlab-junit")
  if [ "$passed" -lt "$want" ]; then
    echo "critest: podlab passed $passed specs, fewer than the target $want ($TARGET)" >&2
    exit 1
  fi
  say "podlab passed $passed specs (target $want)"
fi
# With a pool, the suite proves something only if its pods claimed warm
# sandboxes: serve counts them as it stops.
if [ "$VALIDATE" = 1 ] && [ "$WARM" -gt 0 ] && [ -f "$OUT/podlab-serve.log" ]; then
  counts=$(pool_counts podlab)
  claimed=$(sed -n 's/.* claimed=\([0-9]*\).*/\1/p' <<<"$counts")
  if [ -z "$claimed" ] || [ "$claimed" -eq 0 ]; then
    echo "critest: with --warm-pool $WARM no RunPodSandbox claimed a warm sandbox (serve: ${counts:-no count logged})" >&2
    exit 1
  fi
  say "podlab's pool: ${counts#*msg=\"warm pool stopped\" }"
fi
