#!/usr/bin/env bash
# Coverage-guided fuzzing of intswitch's parsers with cargo-fuzz (libFuzzer):
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      every target (or those named), SECONDS each (default 60)
#
# Targets (bodies in tests/fuzz_targets.rs): wire (the packet parser, INT
# block, Telemetry Report, GPINT and ND views), collector (intcollector's
# report decoder), collector_records (AM-PM and analytics record lines),
# config (the TOML loader), control_request (the control protocol's parser).
# Works on stable Rust with `--sanitizer none` (no ASan: the code under test
# has no unsafe); installs cargo-fuzz when missing. Each run starts from the
# kept corpus (tests/fuzz/corpus/TARGET, read only) and writes what it finds
# new to target/fuzz-corpus/TARGET; a crash or broken invariant leaves its
# input in tests/fuzz/artifacts/TARGET/ and fails the script. Prints one
# line per target: {"target", "seconds", "execs", "execs_per_s", "corpus",
# "new_units", "finding"}. `cargo test` replays the kept corpora
# (tests/fuzz_replay.rs); copy a finding there as a regression test.
# FUZZ_CHECKS=1 builds with debug assertions and overflow checks (what the
# release build wraps silently or leaves unchecked then panics).
set -euo pipefail
source "$(dirname "$0")/usage.sh" "$@"
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
all=(wire pipeline collector collector_records config control_request)
((${#targets[@]})) || targets=("${all[@]}")
# Refused before cargo-fuzz's install and the targets' build (minutes).
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: SECONDS=$secs: need a positive whole number (see --help)" >&2
  exit 2
fi
for t in "${targets[@]}"; do
  [[ -d "tests/fuzz/corpus/$t" ]] || { echo "fuzz.sh: no target '$t' (targets: ${all[*]})" >&2; exit 2; }
done
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
build=(--fuzz-dir fuzz --sanitizer none -O)
[[ "${FUZZ_CHECKS:-0}" == 1 ]] && build+=(--debug-assertions)
(cd tests && cargo fuzz build "${build[@]}")
fail=0
for t in "${targets[@]}"; do
  kept="tests/fuzz/corpus/$t"
  work="target/fuzz-corpus/$t"
  mkdir -p "$work" "tests/fuzz/artifacts/$t"
  before=$(ls "$work" | wc -l)
  log=$(mktemp)
  set +e
  (cd tests && cargo fuzz run "${build[@]}" "$t" "../$work" "../$kept" -- \
      -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1)
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  after=$(ls "$work" | wc -l)
  finding=null
  if ((rc != 0)); then
    finding="\"$(ls -t "tests/fuzz/artifacts/$t" | head -1)\""
    tail -30 "$log" >&2
    fail=1
  fi
  printf '{"target":"%s","seconds":%s,"execs":%s,"execs_per_s":%s,"corpus":%s,"new_units":%s,"finding":%s}\n' \
    "$t" "$secs" "${execs:-0}" "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" "$(ls "$kept" | wc -l)" \
    "$((after - before))" "$finding"
  rm -f "$log"
done
exit $fail
