#!/usr/bin/env bash
# Instructions per packet of the worker pipeline (not a test): the stage
# bench's STAGES_RUN cases under callgrind, counting only `Worker::burst`
# (the pipeline and the copy of each frame into its buffer; the tables'
# build and the trace's load are left out). Exact and repeatable where
# timings on a shared VM swing by 20 % or more; it counts work, not
# cache misses, so a pair of configs that differ in one section shows
# what that section adds to every packet. With the instructions it counts
# conditional branches mispredicted a packet (callgrind's branch
# simulation: a data-dependent branch such as TCP-or-UDP on a mixed trace
# shows there, not in the instructions); that model has no branch
# history and moves with code layout, so take it as a place to look and
# keep a change only on a timed A/B (scripts/bench_ab.sh).
#
#   scripts/stage_instructions.sh CONFIG.toml:TRACE.pcap [...]   (relative paths: from the repository root)
#
# Configs and traces: any the switch takes; BENCH_KEEP=1 scripts/bench.sh
# leaves those of its cases. Needs valgrind. Prints per pair:
# case=<config name> instructions_per_packet=<n> burst_packets=<n>
#   mispredicted_per_packet=<n>
set -euo pipefail
source "$(dirname "$0")/usage.sh" "$@"
cd "$(dirname "$0")/.."
if (( $# < 1 )); then
  echo "usage: scripts/stage_instructions.sh CONFIG.toml:TRACE.pcap [...]" >&2
  exit 2
fi
# Refused before the stage bench's build (minutes). Relative paths are
# from the repository's root.
for pair in "$@"; do
  [[ "$pair" == *:* ]] || { echo "stage_instructions.sh: $pair: need CONFIG:TRACE" >&2; exit 2; }
  for f in "${pair%%:*}" "${pair#*:}"; do
    [[ -f "$f" ]] || { echo "stage_instructions.sh: $f: no such file" >&2; exit 2; }
  done
done
command -v valgrind >/dev/null || { echo "stage_instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
bench=$(cargo bench -p control --bench stages --no-run 2>&1 | sed -nE 's/.*Executable .*\((.*)\)$/\1/p' | tail -n 1)
[[ -x "$bench" ]] || { echo "stage_instructions.sh: the stage bench did not build" >&2; exit 1; }
out=$(mktemp -d /tmp/intswitch-instr.XXXXXX)
trap 'rm -rf "$out"' EXIT
for pair in "$@"; do
  line=$(STAGES_RUN="$pair" STAGES_PASSES=3 valgrind --tool=callgrind --branch-sim=yes --callgrind-out-file="$out/cg.out" \
    --toggle-collect='*Worker*burst*' "$bench" 2>"$out/vg.log" | grep '^stage=') ||
    { tail -n 20 "$out/vg.log" >&2; exit 1; }
  # (events Ir Bc Bcm Bi Bim: instructions, then conditional branches
  # and those mispredicted)
  read -r ir _ bcm _ < <(sed -nE 's/.*Collected : ([0-9 ]+).*/\1/p' "$out/vg.log")
  name=$(sed -E 's/^stage=([^ ]+).*/\1/' <<<"$line")
  packets=$(sed -E 's/.*burst_packets=([0-9]+).*/\1/' <<<"$line")
  awk -v n="$name" -v i="$ir" -v m="$bcm" -v p="$packets" \
    'BEGIN { printf "case=%s instructions_per_packet=%.1f burst_packets=%d mispredicted_per_packet=%.2f\n", n, i / p, p, m / p }'
done
