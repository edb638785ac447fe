#!/usr/bin/env bash
# INT-label fidelity on the Clos testbed (see scripts/intlabel_eval.py):
# coverage against rate, exported packets Base A/B, labels per packet, the
# rest-time and f sweeps, Pro under congestion and i.i.d. loss (CSV and SVG
# into --out, default target/intlabel-eval; --quick: one short point of
# each). Builds the release binaries first unless INTSWITCH_BIN_DIR is set.
# Needs root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ -z "${INTSWITCH_BIN_DIR:-}" ]]; then
  (cd "$here/.." && cargo build --release -q --bins)
fi
exec python3 "$here/intlabel_eval.py" "$@"
