#!/usr/bin/env bash
# gen-docs.sh: regenerate docs/*.md from docs/src/*.md.in. In a template,
#   <!-- include NAME -->  becomes the snippet NAME: a command this script ran
#                          ("$ sudo podlab ...") and its real output, masked;
#   <!-- file PATH -->     becomes the content of PATH (a manifest, a config).
#
#   sudo scripts/gen-docs.sh              rewrite docs/*.md (not docs/benchmarks.md)
#   sudo scripts/gen-docs.sh --out DIR    write the docs to DIR instead
#   sudo scripts/gen-docs.sh --examples   also run every examples/*.yaml (run,
#                                         wait, check its output, rm)
#   sudo scripts/gen-docs.sh --snippets DIR   also copy every snippet to DIR
#
# Needs root, bin/podlab, and the images busybox:latest and podlab-demo:latest
# (scripts/setup.sh, scripts/demo-image.sh). Pods run under a private
# configuration: state and logs on a tmpfs mounted at /run/podlab-docs (so
# file system types are the same on every host), pod names starting with
# docs-, examples in namespace podlab-docs. Runs are serialized by a lock;
# every pod is removed at exit, failure or not. Output is masked (docs/src/
# mask.pl: ids, pids, IPs, timings, dates; tables re-aligned) so that two
# runs give the same bytes: scripts/check-docs.sh relies on it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

OUT=docs
EXAMPLES=false
SNIPPETS_OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --examples) EXAMPLES=true; shift ;;
    --snippets) SNIPPETS_OUT=${2:?--snippets needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gen-docs: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "gen-docs: $*" >&2; }
die() { echo "gen-docs: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (sudo)"
[ -x bin/podlab ] || die "bin/podlab is not built (make build)"
command -v perl >/dev/null || die "perl is required"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PODLAB_BIN=$REPO/bin/podlab

ROOT=/run/podlab-docs
WORK=$ROOT/work
SNIP=$WORK/snippets
IDS=$WORK/ids
BASE=$WORK/config.yaml
NS=podlab-docs # the examples' namespace

exec 9>/run/podlab-docs.lock
flock -w 300 9 || die "another gen-docs run holds /run/podlab-docs.lock"

# remove_pods removes every pod of the private state, by id (idempotent,
# and it finishes what a killed run left half made).
remove_pods() {
  local d
  for d in "$ROOT"/state/pods/*/; do
    [ -d "$d" ] || continue
    "$PODLAB_BIN" --config "$BASE" rm -f "$(basename "$d")" >/dev/null 2>&1 ||
      say "could not remove pod $(basename "$d")"
  done
}

cleanup() {
  local rc=$?
  set +e
  cd "$REPO"
  remove_pods
  if [ -n "$(ls -A "$ROOT/state/pods" 2>/dev/null)" ]; then
    say "pods left in $ROOT/state/pods; remove them with: sudo bin/podlab --config $BASE rm -f ID"
    [ "$rc" = 0 ] && rc=1
  elif mountpoint -q "$ROOT"; then
    umount "$ROOT" && rmdir "$ROOT"
  fi
  exit "$rc"
}

mkdir -p "$ROOT"
mountpoint -q "$ROOT" || mount -t tmpfs -o mode=0755,size=256m podlab-docs "$ROOT"
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$WORK"
cat > "$BASE" <<EOF
# scripts/gen-docs.sh's private configuration: podlab's defaults, with the
# state and logs on its own tmpfs.
stateDir: $ROOT/state
logDir: $ROOT/logs
EOF
remove_pods # a killed earlier run's
rm -rf "$SNIP" "$IDS"
mkdir -p "$SNIP"
: > "$IDS"

# The list is read whole: `image ls | grep -q` fails under pipefail when
# grep exits before podlab has written its last line (SIGPIPE).
images=$("$PODLAB_BIN" --config "$BASE" image ls)
for img in busybox:latest podlab-demo:latest; do
  grep -q "^$img " <<<"$images" ||
    die "image $img is missing: run sudo scripts/setup.sh and sudo scripts/demo-image.sh"
done

# podlab, in snippets, is bin/podlab under the current configuration.
CFG=$BASE
podlab() { "$PODLAB_BIN" --config "$CFG" "$@"; }

# register records the ids of every pod and container in the private state,
# for the masker: pods become <pod-id>, containers <ctr-id>.
register() {
  local f
  for f in "$ROOT"/state/pods/*/pod.json; do
    [ -f "$f" ] || continue
    perl -0777 -ne '
      my $first = 1;
      while (/"id":\s*"([0-9a-f]{64})",\s*"name":\s*"[^"]*"/g) {
        print "$1 ", ($first ? "<pod-id>" : "<ctr-id>"), "\n";
        $first = 0;
      }' "$f"
  done | sort -u - "$IDS" > "$IDS.new"
  mv "$IDS.new" "$IDS"
}

# ALIAS: "from=to|..." pairs applied to the shown command and the output:
# pods that must not collide with a user's (network namespaces are named
# after pods) run as docs-NAME and are shown under their usual name.
ALIAS=""
mask() {
  MASK_IDS=$IDS \
    MASK_PATHS="$ROOT/state=/run/podlab|$ROOT/logs=/var/log/podlab/pods${ALIAS:+|$ALIAS}|$WORK=/tmp/docs" \
    perl docs/src/mask.pl
}

# snap [-c CONFIG] [-x STATUS] [-s SHOWN] NAME COMMAND
# runs COMMAND (bash; podlab is bin/podlab with the private configuration,
# plus examples/config/CONFIG.yaml with -c) and saves the snippet NAME:
# "$ sudo COMMAND" (or SHOWN), then the masked stdout and stderr. The exit
# status must be STATUS (default 0); a non-zero one is shown.
snap() {
  local conf="" want=0 shown="" OPTIND=1 opt
  while getopts c:x:s: opt; do
    case $opt in
      c) conf=$OPTARG ;;
      x) want=$OPTARG ;;
      s) shown=$OPTARG ;;
      *) die "snap: bad option" ;;
    esac
  done
  shift $((OPTIND - 1))
  local name=$1 cmd=$2 rc=0 pair
  if [ -z "$shown" ]; then
    shown=$cmd
    # ALIAS pairs ("from=to|..."): what the reader should see instead
    local IFS='|'
    for pair in $ALIAS; do shown=${shown//"${pair%%=*}"/"${pair#*=}"}; done
    unset IFS
  fi
  CFG=$BASE
  if [ -n "$conf" ]; then
    CFG=$WORK/config-$conf.yaml
    cat "$BASE" "examples/config/$conf.yaml" > "$CFG"
    shown=${shown/podlab /podlab --config examples/config/$conf.yaml }
  fi
  (eval "$cmd") > "$WORK/raw" 2>&1 || rc=$?
  CFG=$BASE
  if [ "$rc" != "$want" ]; then
    cat "$WORK/raw" >&2
    die "snippet $name: '$cmd' exited with status $rc, want $want"
  fi
  register
  {
    printf '$ sudo %s\n' "$shown"
    mask < "$WORK/raw"
    [ "$rc" = 0 ] || printf '(exit status %d)\n' "$rc"
  } > "$SNIP/$name"
}

# demo_section N: the snippet demo-N, section N of the demo's output.
demo_section() {
  local n=$1
  {
    printf '$ sudo podlab demo\n…\n'
    awk -v n="$n" '/^── [0-9]+\. /{p = ($2 == n ".")} p' "$SNIP/demo" | perl -0777 -pe 's/\n+\z/\n/'
    printf '…\n'
  } > "$SNIP/demo-$n"
}

gen_walkthrough() {
  say "walkthrough"
  snap wt-run 'podlab run -f docs/src/walkthrough.yaml'
  snap wt-podspec 'podlab inspect docs-walkthrough --layer podspec'
  snap wt-options 'podlab inspect docs-walkthrough --layer options'
  snap wt-cri 'podlab inspect docs-walkthrough --layer cri'
  snap wt-oci 'podlab inspect docs-walkthrough --layer oci'
  snap wt-process 'podlab inspect docs-walkthrough --layer process'
  snap wt-diff-options 'podlab inspect docs-walkthrough --diff --layer options'
  snap wt-diff-oci 'podlab inspect docs-walkthrough --diff --layer oci'
  snap wt-visibility "podlab inspect docs-walkthrough | sed -n '/injected items/,\$p'"
  snap wt-verify 'podlab verify docs-walkthrough'
  snap wt-exec "podlab exec docs-walkthrough -- sh -c 'echo \$MESSAGE; echo NVIDIA_VISIBLE_DEVICES=\$NVIDIA_VISIBLE_DEVICES; ls /etc/app'"
  snap wt-logs 'podlab logs docs-walkthrough'
  snap wt-trace 'podlab trace docs-walkthrough'
  snap wt-rm 'podlab rm --stages docs-walkthrough'

  say "demo"
  ALIAS="docs-demo=podlab-demo"
  snap -s 'podlab demo' demo 'podlab demo --name docs-demo'
  ALIAS=""
  for n in 3 4 6; do demo_section "$n"; done
}

gen_env_merge() {
  say "env-merge"
  local ex=$WORK/env-override.yaml
  sed 's/^  name: gpu-job$/  name: docs-gpu-job/' examples/env-override.yaml > "$ex"
  ALIAS="$ex=examples/env-override.yaml|docs-gpu-job=gpu-job"
  snap env-kubelet-run "podlab run -f $ex"
  snap env-kubelet-exec "podlab exec docs-gpu-job -- sh -c 'echo \$NVIDIA_VISIBLE_DEVICES'"
  snap env-kubelet-options 'podlab inspect docs-gpu-job --layer options | sed -n 1,8p'
  snap env-kubelet-verify 'podlab verify docs-gpu-job | tail -n 3'
  snap env-kubelet-rm 'podlab rm docs-gpu-job'
  snap -c platform-wins env-pw-run "podlab run -q -f $ex"
  snap -c platform-wins env-pw-exec "podlab exec docs-gpu-job -- sh -c 'echo \$NVIDIA_VISIBLE_DEVICES'"
  snap -c platform-wins env-pw-options 'podlab inspect docs-gpu-job --layer options | sed -n 1,8p'
  snap env-pw-rm 'podlab rm docs-gpu-job'
  snap -c reject -x 1 env-reject-run "podlab run -f $ex"
  snap env-reject-pods 'podlab pods'
  ALIAS=""
}

gen_ca_injection() {
  say "ca-injection"
  snap ca-config "podlab config | sed -n '/^injection:/,/^[a-z]/p' | sed '\$d'"
  snap -c injection-points ca-run 'podlab run -q -f docs/src/ca-pod.yaml'
  snap -c injection-points ca-visibility "podlab inspect docs-ca | sed -n '/injected items/,\$p'"
  snap -c injection-points ca-diff-oci 'podlab inspect docs-ca --diff --layer oci'
  snap -c injection-points ca-oci 'podlab inspect docs-ca --layer oci'
  snap -c injection-points ca-process "podlab inspect docs-ca --layer process | sed -n '/MOUNT/,\$p'"
  snap -c injection-points ca-exec "podlab exec docs-ca -- sh -c 'echo \$SSL_CERT_FILE \$RUNTIME_INJECTED; ls /etc/platform /etc/hooked; grep -c BEGIN /etc/ssl/certs/ca-certificates.crt >/dev/null && echo bundle ok'"
  snap -c injection-points ca-verify 'podlab verify docs-ca'
  snap -c injection-points ca-init "podlab inspect docs-ca -c setup | sed -n '/injected items/,\$p'"
  snap ca-rm 'podlab rm docs-ca'
  snap ca-system-run 'podlab run -q -f docs/src/ca-pod-system.yaml'
  snap ca-system-verify 'podlab verify -n kube-system docs-ca-system'
  snap ca-system-rm 'podlab rm -n kube-system docs-ca-system'
}

gen_stages() {
  say "stages"
  snap st-failpoints 'podlab failpoints'
  snap st-run 'podlab run -f docs/src/stages.yaml'
  snap st-trace 'podlab trace docs-stages'
  snap st-rm 'podlab rm --stages docs-stages'
  snap -x 1 st-failpoint 'PODLAB_FAILPOINT=after-pause podlab run -f docs/src/stages.yaml'
  snap st-failpoint-pods 'podlab pods'
}

# render TEMPLATE OUTPUT
render() {
  SNIP=$SNIP perl -e '
    use strict; use warnings;
    my ($src, $dst) = @ARGV;
    sub slurp { my $f = shift; open(my $fh, "<", $f) or die "gen-docs: $src: cannot read $f: $!\n"; local $/; my $s = <$fh>; return $s }
    my %lang = (yaml => "yaml", yml => "yaml", sh => "sh", go => "go", json => "json");
    open(my $in, "<", $src) or die "$src: $!\n";
    my $out = "<!-- Generated by scripts/gen-docs.sh from $src: edit that file, then run sudo scripts/gen-docs.sh. -->\n";
    while (my $line = <$in>) {
      if ($line =~ /^<!-- include (\S+) -->\s*$/) {
        my $s = slurp("$ENV{SNIP}/$1");
        $s .= "\n" unless $s =~ /\n\z/;
        $out .= "```console\n$s```\n";
      } elsif ($line =~ /^<!-- file (\S+) -->\s*$/) {
        my $f = $1;
        my ($ext) = $f =~ /\.(\w+)$/;
        my $s = slurp($f);
        $s .= "\n" unless $s =~ /\n\z/;
        $out .= "```" . ($lang{$ext // ""} // "") . "\n$s```\n";
      } else {
        $out .= $line;
      }
    }
    open(my $o, ">", "$dst.tmp") or die "$dst: $!\n";
    print $o $out;
    close $o or die "$dst: $!\n";
    rename("$dst.tmp", $dst) or die "$dst: $!\n";
  ' "$1" "$2"
}

# ---- examples ----------------------------------------------------------

# ctr_states POD: "name state exitcode" per container of POD (namespace $NS).
ctr_states() {
  podlab ps -a -o json | POD="$NS/$1" perl -0777 -ne '
    while (/\{([^{}]*)\}/g) {
      my $o = $1;
      my ($pod) = $o =~ /"pod":\s*"([^"]*)"/;
      next unless $pod eq $ENV{POD};
      my ($name) = $o =~ /"name":\s*"([^"]*)"/;
      my ($state) = $o =~ /"state":\s*"([^"]*)"/;
      my ($code) = $o =~ /"exitCode":\s*(-?\d+|null)/;
      print "$name $state $code\n";
    }'
}

# expect_out POD SUBSTRING COMMAND...: retry COMMAND (podlab is namespaced) for
# up to 10 s until its output contains SUBSTRING.
expect_out() {
  local pod=$1 want=$2 out=""
  shift 2
  for _ in $(seq 50); do
    out=$("$@" 2>&1 || true)
    case $out in *"$want"*) return 0 ;; esac
    sleep 0.2
  done
  say "example $pod: '$*' never printed '$want'; last output:"
  printf '%s\n' "$out" >&2
  return 1
}

check_example() {
  local file=$1 pod=$2
  local p="podlab -n $NS"
  case $(basename "$file") in
    pod.yaml) expect_out "$pod" "hello from web" $p logs "$pod" ;;
    shared-volume.yaml) expect_out "$pod" "Hello from the writer container" $p exec "$pod" -c web -- wget -qO- http://localhost/ ;;
    share-process-namespace.yaml)
      expect_out "$pod" "/pause" $p exec "$pod" -c shell -- ps &&
        expect_out "$pod" "httpd -f -p 80" $p exec "$pod" -c shell -- ps ;;
    init-containers.yaml) expect_out "$pod" "The app is running!" $p logs "$pod" ;;
    projected-secret.yaml)
      expect_out "$pod" "123456" $p logs "$pod" &&
        expect_out "$pod" "color.good=purple" $p logs "$pod" &&
        expect_out "$pod" 'app="secret-volume"' $p logs "$pod" ;;
    downward-api.yaml)
      expect_out "$pod" "$NS/$pod at 10.77." $p logs "$pod" &&
        expect_out "$pod" 'zone="asia-taipei"' $p logs "$pod" ;;
    env-override.yaml) expect_out "$pod" "NVIDIA_VISIBLE_DEVICES=all" $p logs "$pod" ;;
    *) say "example $file: no output check, only run and rm" ;;
  esac
}

# run_example FILE: run it in namespace $NS, wait until every container is
# running or has exited 0, check its output, remove it.
run_example() {
  local f=$1 pod ok=true states
  if grep -q '^  namespace:' "$f"; then
    cp "$f" "$WORK/example.yaml"
  else
    sed '/^metadata:/a\  namespace: '"$NS" "$f" > "$WORK/example.yaml"
  fi
  pod=$(awk '/^kind: *Pod/{p=1} p && /^  name:/{print $2; exit}' "$WORK/example.yaml")
  if ! podlab run -q -f "$WORK/example.yaml" > "$WORK/example.out" 2>&1; then
    say "example $f: run failed:"
    cat "$WORK/example.out" >&2
    ok=false
  fi
  if $ok; then
    for _ in $(seq 50); do
      states=$(ctr_states "$pod")
      echo "$states" | awk '$2 != "Running" && !($2 == "Exited" && $3 == "0") {bad=1} END {exit bad}' && break
      sleep 0.2
    done
    if ! echo "$states" | awk '$2 != "Running" && !($2 == "Exited" && $3 == "0") {bad=1} END {exit bad}'; then
      say "example $f: containers not running or exited 0:"
      echo "$states" >&2
      ok=false
    fi
  fi
  $ok && { check_example "$f" "$pod" || ok=false; }
  # The default grace period, as a user's `podlab rm` would: the examples'
  # shells trap SIGTERM and exit at once.
  if [ -n "$pod" ] && ! podlab -n "$NS" rm "$pod" > "$WORK/example.out" 2>&1; then
    say "example $f: rm failed:"
    cat "$WORK/example.out" >&2
    podlab -n "$NS" rm -f "$pod" > /dev/null 2>&1 || true
    ok=false
  fi
  if podlab -n "$NS" pods 2>/dev/null | awk -v p="$pod" '$2 == p' | grep -q .; then
    say "example $f: pod still listed after rm"
    ok=false
  fi
  if $ok; then say "example $f: ok"; else say "example $f: FAILED"; return 1; fi
}

# ---- main --------------------------------------------------------------

started=$(date +%s)
gen_walkthrough
gen_env_merge
gen_ca_injection
gen_stages
for t in docs/src/*.md.in; do
  render "$t" "$OUT/$(basename "$t" .in)"
done
if [ -n "$SNIPPETS_OUT" ]; then mkdir -p "$SNIPPETS_OUT" && cp "$SNIP"/* "$SNIPPETS_OUT"/; fi
say "wrote $(ls docs/src/*.md.in | sed 's|docs/src/||; s|\.in$||' | tr '\n' ' ')to $OUT"

failed=0
if $EXAMPLES; then
  for f in examples/*.yaml; do
    run_example "$f" || failed=$((failed + 1))
  done
fi
say "done in $(( $(date +%s) - started ))s"
[ "$failed" = 0 ] || die "$failed example(s) failed"
