#!/usr/bin/env bash
# Runs the whole test suite: unit tests (no EAL), then integration and
# end-to-end tests that start intswitch on vdevs and in network namespaces
# (the latter need root).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The `ci` profile: release optimisation, lighter LTO (see Cargo.toml).
cargo build --profile ci --bins
# Integration tests start several switch processes; keep them from
# starving each other on small machines.
cargo test --profile ci --workspace -- --test-threads="${TEST_THREADS:-2}"
