#!/usr/bin/env bash
# check-docs.sh: fail when the committed docs drift from what podlab prints
# now, or when an example does not run. It reruns scripts/gen-docs.sh into a
# temporary directory, with --examples (every examples/*.yaml is run, its
# containers waited for, its output checked, and removed), diffs each
# generated page against docs/, and checks that no pod, network namespace or
# mount of the run is left. Exit 0 when all is well, 1 with the diff or the
# failure otherwise. Needs root, bin/podlab and the images of make demo.
# To accept a drift: sudo scripts/gen-docs.sh, then review and commit docs/.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "check-docs.sh must run as root (sudo)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

if ! ./scripts/gen-docs.sh --out "$tmp" --examples; then
  echo "check-docs: scripts/gen-docs.sh failed" >&2
  status=1
fi

for t in docs/src/*.md.in; do
  page=$(basename "$t" .in)
  if [ ! -f "$tmp/$page" ]; then
    [ "$status" = 1 ] || echo "check-docs: $page was not generated" >&2
    status=1
  elif [ ! -f "docs/$page" ]; then
    echo "check-docs: docs/$page is missing: run sudo scripts/gen-docs.sh and commit it" >&2
    status=1
  elif ! diff -u "docs/$page" "$tmp/$page" > "$tmp/diff"; then
    echo "check-docs: docs/$page drifted from podlab's output (- committed, + now):" >&2
    cat "$tmp/diff" >&2
    status=1
  fi
done
for page in docs/*.md; do
  case $page in docs/architecture.md | docs/benchmarks.md | docs/conformance.md | docs/README.md) continue ;; esac
  [ -f "docs/src/$(basename "$page").in" ] ||
    { echo "check-docs: $page has no template docs/src/$(basename "$page").in" >&2; status=1; }
done

# Nothing of the run may remain: gen-docs removes its pods and unmounts its
# tmpfs; its network namespaces are named <namespace>_<pod name>.
leaks=$(ls /var/run/netns 2>/dev/null | grep -E '^(default|kube-system)_docs-|^podlab-docs_' || true)
if [ -n "$leaks" ]; then
  echo "check-docs: network namespaces left behind: $leaks" >&2
  status=1
fi
if mountpoint -q /run/podlab-docs 2>/dev/null; then
  echo "check-docs: /run/podlab-docs is still mounted (pods left in it?)" >&2
  status=1
fi

if [ "$status" = 0 ]; then
  echo "check-docs: docs match podlab's output; every example ran"
fi
exit "$status"
