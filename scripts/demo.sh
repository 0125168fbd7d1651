#!/usr/bin/env bash
# demo.sh: run podlab's embedded demo pod and print its stage timings.
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./bin/podlab demo "$@"
