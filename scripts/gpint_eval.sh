#!/usr/bin/env bash
# GPINT evaluation (see scripts/gpint_eval.py): planner figures on the
# WS(20..100) fixtures, and a loss sweep on a WS(16) testbed with the monitor
# (CSV and SVG into OUT_DIR, default target/gpint-eval). Builds the release
# binaries first unless INTSWITCH_BIN_DIR is set. Needs root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ -z "${INTSWITCH_BIN_DIR:-}" ]]; then
  (cd "$here/.." && cargo build --release -q --bins)
fi
exec python3 "$here/gpint_eval.py" "$@"
