#!/usr/bin/env bash
# Runs the embedded demo: no NIC, no hugepages. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -q --bin intswitch
exec target/release/intswitch "$@"
