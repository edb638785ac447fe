#!/usr/bin/env bash
# Multi-switch testbed in network namespaces (see scripts/testbed.py for the
# commands). Builds the release binaries first unless INTSWITCH_BIN_DIR is set.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ -z "${INTSWITCH_BIN_DIR:-}" && "${1:-}" == "up" ]]; then
  (cd "$here/.." && cargo build --release -q --bins)
fi
exec python3 "$here/testbed.py" "$@"
