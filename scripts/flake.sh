#!/usr/bin/env bash
# flake.sh: run the unit tests (those that need no root) many times under CPU
# and I/O load. A test that fails even once here is flaky, and gets fixed at
# its cause, never retried.
#
#   flake.sh [package pattern...]        (default ./...)
#
# PAUSE_RUNS (default 500) runs of the pause package, whose tests race
# signals against a starting process, and UNIT_RUNS (default 50) of every
# other package: `go test -count`. STRESS=0 runs without the load.
#
# Run as root, the tests still run unprivileged: each test binary runs as
# nobody (root tests skip themselves, as for any user; CI is unset for
# them), in a private mount namespace that shows it root's module cache,
# which the pause and sandbox tests need to build the pause. The load is
# stress-ng (CPU, sync(2) and file writes), niced as the tests are, so the
# two compete with each other rather than with the rest of the host.
set -euo pipefail

# go test -exec: run a test binary as nobody, from the package directory.
if [ "${1:-}" = exec ]; then
  bin=$2
  shift 2
  if [ "$(id -u)" != 0 ]; then
    exec "$bin" "$@"
  fi
  # go test's build dir is root's alone (0700).
  copy=$(mktemp "$FLAKE_DIR/bin/$(basename "$bin").XXXXXX")
  install -m 0755 "$bin" "$copy"
  exec unshare --mount --propagation private "$0" as-nobody "$copy" "$@"
fi
if [ "${1:-}" = as-nobody ]; then
  bin=$2
  shift 2
  mount --bind "$ROOT_GOMODCACHE" "$FLAKE_DIR/gomod"
  exec setpriv --reuid=65534 --regid=65534 --clear-groups \
    env -i PATH="$PATH" HOME="$FLAKE_DIR/home" GOCACHE="$FLAKE_DIR/gocache" \
    GOMODCACHE="$FLAKE_DIR/gomod" GOPROXY=off GOFLAGS=-buildvcs=false \
    "$bin" "$@"
fi

cd "$(dirname "$0")/.."
self=$PWD/scripts/flake.sh
PAUSE_RUNS=${PAUSE_RUNS:-500}
UNIT_RUNS=${UNIT_RUNS:-50}
STRESS=${STRESS:-1}
# stress-ng stops by itself after this, whatever happens to this script.
STRESS_MAX=${STRESS_MAX:-900s}
export PATH=$PATH:/usr/local/go/bin

FLAKE_DIR=$(mktemp -d /tmp/podlab-flake.XXXXXX)
export FLAKE_DIR
stress_pid=
cleanup() {
  if [ -n "$stress_pid" ]; then
    kill "$stress_pid" 2>/dev/null || true
    wait "$stress_pid" 2>/dev/null || true
  fi
  rm -rf "$FLAKE_DIR"
}
trap cleanup EXIT
mkdir "$FLAKE_DIR"/{bin,gomod,gocache,home,logs}
chmod 0755 "$FLAKE_DIR" "$FLAKE_DIR/bin"
if [ "$(id -u)" = 0 ]; then
  # The tests run as nobody from the package directories: the tree must
  # be readable to them (a clone in a 0700 mktemp dir is not).
  if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$PWD/go.mod"; then
    echo "flake: $PWD is not readable by nobody, whom the tests run as; make its directories world-readable (chmod o+rx)" >&2
    exit 1
  fi
  chown 65534:65534 "$FLAKE_DIR"/{gocache,home}
  ROOT_GOMODCACHE=$(go env GOMODCACHE)
  export ROOT_GOMODCACHE
fi

# Packages whose every test needs root (the whole e2e suite drives the
# podlab binary against the host): as nobody they only skip, after their
# TestMain built podlab from a cold cache.
ROOT_ONLY=${ROOT_ONLY:-github.com/podlab/podlab/test/e2e}
pkgs=()
for pkg in $(go list "${@:-./...}"); do
  case " $ROOT_ONLY " in
  *" $pkg "*) echo "flake: skipping $pkg (root tests only)" ;;
  *) pkgs+=("$pkg") ;;
  esac
done

load="none"
if [ "$STRESS" != 0 ]; then
  if ! command -v stress-ng >/dev/null; then
    echo "flake: stress-ng not found (make setup installs it; STRESS=0 runs without load)" >&2
    exit 1
  fi
  stress=(stress-ng --cpu "$(nproc)" --io 1 --hdd 1 --hdd-bytes 256M --temp-path "$FLAKE_DIR" --timeout "$STRESS_MAX" --quiet)
  nice -n 19 "${stress[@]}" &
  stress_pid=$!
  load="nice -n 19 ${stress[*]}"
fi

start=$SECONDS
failed=()
total_pass=0 total_fail=0
for pkg in "${pkgs[@]}"; do
  runs=$UNIT_RUNS
  [ "$pkg" = github.com/podlab/podlab/pause ] && runs=$PAUSE_RUNS
  log=$FLAKE_DIR/logs/$(echo "$pkg" | tr / _).log
  t0=$SECONDS
  rc=0
  nice -n 19 go test -tags "${GOTAGS:-seccomp}" -exec "$self exec" -count="$runs" -timeout 60m -v "$pkg" >"$log" 2>&1 || rc=$?
  pass=$(grep -c -- '--- PASS' "$log" || true)
  fail=$(grep -c -- '--- FAIL' "$log" || true)
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + fail))
  if [ "$rc" != 0 ]; then
    failed+=("$pkg")
    kept=/tmp/podlab-flake-$(basename "$log")
    cp "$log" "$kept"
    # go test -v prints a test's log lines before its --- FAIL line.
    grep -B12 -- '--- FAIL' "$log" | grep -v -e '^=== ' -e '--- PASS' -e '--- SKIP' | head -60 || tail -40 "$log"
    echo "flake: FAIL $pkg (${runs}x, $((SECONDS - t0))s): $fail failed tests; log in $kept"
  else
    echo "flake: ok   $pkg (${runs}x, $((SECONDS - t0))s): $pass passed tests and subtests"
  fi
done
echo "flake: ${#pkgs[@]} packages (pause ${PAUSE_RUNS}x, others ${UNIT_RUNS}x): $total_pass passed, $total_fail failed, in $((SECONDS - start))s; load: $load"
if [ "$STRESS" != 0 ] && ! kill -0 "$stress_pid" 2>/dev/null; then
  echo "flake: warning: the load stopped before the tests ended (STRESS_MAX=$STRESS_MAX)" >&2
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "flake: failed: ${failed[*]}" >&2
  exit 1
fi
