#!/usr/bin/env bash
# Soak (not a test): every role in turn (bridge, router, INT source,
# transit and sink (with and without analytics), GPINT transit, AM-PM
# initiator and terminator, INT-label core and last hop) at full rate
# on vdevs (net_pcap replaying a realistic trace into net_null) under
# control-plane churn, with the checks of scripts/soak.py: no crash,
# counters that add up, no mbuf leaked (none taken once the ports closed;
# pool use flat while running), RSS flat, every churn operation answered.
#
#   scripts/soak.sh [MINUTES]     MINUTES per role (default 2)
#
# SOAK_ROLES=a,b runs only those roles; SOAK_DIR=DIR keeps the configs,
# traces and logs there. Prints a line per role (packets, Mpps, churn
# operations, pool and RSS figures) and exits 1 if a role failed.
# tests/soak.rs runs a short version in CI (a few million packets a role,
# workers in idle mode).
set -euo pipefail
source "$(dirname "$0")/usage.sh" "$@"
cd "$(dirname "$0")/.."
minutes=${1:-2}
if ! [[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || [[ "$minutes" =~ ^0+([.]0*)?$ ]]; then
  echo "soak.sh: MINUTES=$minutes: need a positive number" >&2
  exit 2
fi
cargo build --release -q --bin intswitch --bin intctl
args=(--bin target/release/intswitch --intctl target/release/intctl --minutes "$minutes")
[[ -z "${SOAK_ROLES:-}" ]] || args+=(--roles "$SOAK_ROLES")
[[ -z "${SOAK_DIR:-}" ]] || args+=(--work "$SOAK_DIR")
exec python3 scripts/soak.py "${args[@]}"
