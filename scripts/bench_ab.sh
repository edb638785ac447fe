#!/usr/bin/env bash
# A/B benchmark (not a test): the switch built at a git revision against
# the working tree, on bench.sh's cases, in one run with interleaved rounds
# (round r runs every case with A, then with B), so that a slow spell of a
# shared machine touches both. Prints, per case, both medians, B/A, the
# fastest round of each side and their ratio (interference on a shared
# machine only slows a round: where rounds fall into a slow and a fast
# group, the medians follow how many rounds each side had in the slow one,
# the fastest rounds do not), and every round's figure; flags a case whose
# median B lost more than AB_FLAG %.
#
#   scripts/bench_ab.sh REV         # REV against the working tree
#   scripts/bench_ab.sh REV_A REV_B # two revisions
#
# AB_ROUNDS (default 5) rounds; each side is built as bench.sh measures
# it by default, the plain release build; AB_PGO=1 builds each with its own
# scripts/pgo.sh instead; AB_FLAG (default 3) the loss in % that is flagged. BENCH_CASES and BENCH_SECONDS (default 4) go to bench.sh,
# which runs from the working tree for both sides (its traffic and configs)
# without testpmd. A revision is built in a git worktree of its own under
# a temporary directory (removed at exit).
set -euo pipefail
cd "$(dirname "$0")/.."
source "$(dirname "$0")/usage.sh" "$@"
if (( $# < 1 || $# > 2 )); then
  echo "usage: scripts/bench_ab.sh REV_A [REV_B]  (B defaults to the working tree)" >&2
  exit 2
fi
rounds=${AB_ROUNDS:-5}
pgo=${AB_PGO:-0}
flag=${AB_FLAG:-3}
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
  echo "bench_ab.sh: AB_ROUNDS=$rounds: need a whole number, at least 1" >&2
  exit 2
fi
if ! [[ "$flag" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "bench_ab.sh: AB_FLAG=$flag: need a percentage" >&2
  exit 2
fi
work=$(mktemp -d /tmp/intswitch-ab.XXXXXX)
trees=()
cleanup() {
  local t
  for t in "${trees[@]}"; do git worktree remove --force "$t" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# build NAME TREE: the switch as bench.sh would measure it, copied to $work/NAME.
build() {
  local name=$1 tree=$2
  echo "bench_ab.sh: building $name in $tree ($([[ $pgo != 0 ]] && echo pgo || echo release))" >&2
  if [[ "$pgo" != 0 ]]; then
    (cd "$tree" && scripts/pgo.sh >"$work/$name-build.log" 2>&1) ||
      { tail -n 20 "$work/$name-build.log" >&2; exit 1; }
    cp "$tree/target/pgo/release/intswitch" "$work/$name"
  else
    (cd "$tree" && cargo build --release -q --bin intswitch) >"$work/$name-build.log" 2>&1 ||
      { tail -n 20 "$work/$name-build.log" >&2; exit 1; }
    cp "$tree/target/release/intswitch" "$work/$name"
  fi
}

# checkout REV: a worktree of REV (its own target directory) in $tree.
checkout() {
  tree=$work/tree-${#trees[@]}
  git worktree add --detach -q "$tree" "$1"
  trees+=("$tree")
}

label_a=$(git rev-parse --short "$1^{commit}")
checkout "$1"
build A "$tree"
if (( $# == 2 )); then
  label_b=$(git rev-parse --short "$2^{commit}")
  checkout "$2"
  build B "$tree"
else
  label_b="working-tree"
  build B "$PWD"
fi

# Both sides replay the traces the working tree's generator writes (an
# older build may lack its options).
if (( $# == 2 )); then
  (cargo build --release -q --bin intswitch) >"$work/gen-build.log" 2>&1 ||
    { tail -n 20 "$work/gen-build.log" >&2; exit 1; }
fi
gen=$PWD/target/release/intswitch

for ((r = 1; r <= rounds; r++)); do
  for side in A B; do
    echo "bench_ab.sh: round $r/$rounds, $side" >&2
    BENCH_SECONDS=${BENCH_SECONDS:-4} BENCH_PEERS=0 BENCH_GEN=$gen BENCH_BIN="$work/$side" scripts/bench.sh |
      sed -n "s/^case=\([^ ]*\) mpps=\([0-9.]*\).*/$side \1 \2/p" >>"$work/results"
  done
done

python3 - "$work/results" "$label_a" "$label_b" "$flag" <<'EOF'
import statistics, sys
path, a_label, b_label, flag = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
runs = {}
for line in open(path):
    side, case, mpps = line.split()
    runs.setdefault(case, {"A": [], "B": []})[side].append(float(mpps))
print(f"A = {a_label}, B = {b_label}; Mpps, medians and fastest rounds")
print(f"{'case':48} {'A':>7} {'B':>7} {'B/A':>6} {'best A':>7} {'best B':>7} {'B/A':>6}  rounds A | B")
for case, v in runs.items():
    if not v["A"] or not v["B"]:
        print(f"{case:48} missing on one side")
        continue
    a, b = statistics.median(v["A"]), statistics.median(v["B"])
    ratio = b / a if a > 0 else 0.0
    best_a, best_b = max(v["A"]), max(v["B"])
    best = best_b / best_a if best_a > 0 else 0.0
    mark = "  <- loses more than %g %%" % flag if ratio < 1 - flag / 100 else ""
    each = lambda xs: " ".join(f"{x:.2f}" for x in xs)
    print(f"{case:48} {a:7.2f} {b:7.2f} {ratio:6.3f} {best_a:7.2f} {best_b:7.2f} {best:6.3f}  {each(v['A'])} | {each(v['B'])}{mark}")
EOF
