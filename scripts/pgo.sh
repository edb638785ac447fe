#!/usr/bin/env bash
# The deployment build of intswitch, optimised with a profile of its own
# data path (profile-guided optimisation). An instrumented build first runs
# a training set on vdevs (no NIC, no hugepages):
#   - every case of scripts/bench.sh on traces other than the measured ones
#     (BENCH_TRAIN=1: 124-byte frames, 48 flows, other routes, half the
#     AM-PM flows), so that bench.sh's figures for this build are not taken
#     on the frames it was trained on: cross-connect, bridge (known unicast
#     and flooding), router with 10k routes and learned flows, INT
#     source / transit / sink (with and without a report per packet, to a
#     socket and through a port), AM-PM muxed initiator and terminator;
#   - the demo's IPv4 + IPv6 router with flow rules (configs/demo.toml);
#   - INT in DSCP mode, and AM-PM double marking in the IPv6 Hop-by-Hop
#     option over IPv6 traffic (the other presence method and carrier).
# Each run is weighted by the packets it received (see below). LLVM then
# lays out, inlines and orders the per-packet code by what it really does:
# BENCH_PGO=both scripts/bench.sh measures its gain over the plain build.
# Paths outside the training set are laid out as cold code.
#
# Output: target/pgo/release/intswitch (the plain release build stays in
# target/release). Needs root for EAL (as bench.sh), and llvm-profdata of
# rustc's LLVM version: rustup's llvm-tools component (added here when
# rustup is installed) or LLVM_PROFDATA=/path/to/llvm-profdata.
# PGO_SECONDS (default 4) sets each training run's length.
set -euo pipefail
source "$(dirname "$0")/usage.sh" "$@"
no_arguments "$@"
cd "$(dirname "$0")/.."
secs=${PGO_SECONDS:-4}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || (( secs < 3 )); then
  echo "pgo.sh: PGO_SECONDS=$secs: need a whole number of seconds, at least 3" >&2
  exit 2
fi

profdata=${LLVM_PROFDATA:-}
if [[ -z "$profdata" ]]; then
  profdata="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"
  if [[ ! -x "$profdata" ]] && command -v rustup >/dev/null; then
    echo "pgo.sh: adding rustup's llvm-tools component (llvm-profdata)" >&2
    rustup component add llvm-tools >&2 || true
  fi
fi
if [[ ! -x "$profdata" ]]; then
  echo "pgo.sh: llvm-profdata not found at $profdata: run 'rustup component add llvm-tools' or set LLVM_PROFDATA" >&2
  exit 1
fi

out=$PWD/target/pgo
data=$out/profraw
work=$(mktemp -d /tmp/intswitch-pgo.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "pgo.sh: instrumented build (target/pgo-gen)" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$data" CARGO_TARGET_DIR=target/pgo-gen \
  cargo build --release -q --bin intswitch
gen=target/pgo-gen/release/intswitch

# The profile is made again only when the instrumented binary or the
# training set (this script, bench.sh's cases) changed.
profile=$out/intswitch.profdata
if [[ ! -f "$profile" || "$gen" -nt "$profile" || "$0" -nt "$profile" || scripts/bench.sh -nt "$profile" ]]; then
  rm -rf "$data"
  mkdir -p "$data"
  echo "pgo.sh: training: bench.sh's cases (${secs}s each)" >&2
  BENCH_BIN=$gen BENCH_GEN=$gen BENCH_SECONDS=$secs BENCH_HUGEPAGES=0 BENCH_PEERS=0 BENCH_TRAIN=1 BENCH_PROFILE_DIR=$data/cases \
    scripts/bench.sh >/dev/null

  echo "pgo.sh: training: the demo, INT in DSCP mode, AM-PM on IPv6" >&2
  train() { # name config-text
    printf '%s\n' "$2" >"$work/$1.toml"
    mkdir -p "$data/cases/$1"
    LLVM_PROFILE_FILE="$data/cases/$1/%p.profraw" \
      "$gen" --config "$work/$1.toml" --duration "$secs" --stats-interval 0 --json >"$work/$1.log" 2>&1 </dev/null ||
      { echo "pgo.sh: training run $1 failed:" >&2; tail -n 5 "$work/$1.log" >&2; exit 1; }
    tail -n 1 "$work/$1.log" >"$data/cases/$1/counters.jsonl"
  }
  # (The demo's pcap path is relative to the repository root, where this runs.)
  train demo "$(cat configs/demo.toml)"
  "$gen" gen-traffic --out "$work/v4.pcap" --count 4096 --flows 48 --size 124 --dst-mac 02:00:00:00:00:02
  "$gen" gen-traffic --out "$work/v6.pcap" --count 4096 --flows 48 --size 144 --dst-mac 02:00:00:00:00:02 \
    --src 2001:db8:1::10 --dst 2001:db8:2::10
  ports() { # pcap
    printf '[[port]]\nname = "p0"\ndevice = "net_pcap0,rx_pcap=%s,infinite_rx=1"\npeer = "p1"\n' "$1"
    printf '[[port]]\nname = "p1"\ndevice = "net_null0,no-rx=1"\npeer = "p0"\n'
  }
  preamble() { # name
    printf 'name = "pgo-%s"\nmode = "xconnect"\n[eal]\nlcores = "0-1"\nmemory_mb = 1024\nfile_prefix = "pgo-%s-%s"\n' \
      "$1" "$1" "$$"
    printf '[control]\nsocket = "%s/%s.sock"\nmetrics = ""\n' "$work" "$1"
  }
  train int-dscp "$(preamble int-dscp; ports "$work/v4.pcap"
    printf '[int]\nnode_id = 7\npresence = "dscp"\nedge_ports = ["p0"]\n'
    printf '[[int.watch]]\nname = "all"\nrole = "source"\ninstructions = ["node_id", "l1_ports", "hop_latency", "queue", "egress_ts", "tx_util", "buffer"]\n')"
  for role in initiator terminator; do
    train "ampm-v6-$role" "$(preamble "ampm-v6-$role"; ports "$work/v6.pcap"
      printf '[ampm]\nnode_id = 9\ninterval = "1s"\n'
      printf '[[ampm.flow]]\nname = "v6"\nflow_mon_id = 1\nrole = "%s"\nmethod = "double"\ncarrier = "ipv6_hbh"\nsrc = "2001:db8:1::/64"\n' "$role")"
  done
  # Each training run counts the same packets in the profile, however
  # fast it ran: a run's counts grow with its packet rate and with how much
  # of the CPU it got, and a slow run's per-packet path could fall under
  # LLVM's hot-code threshold (and be laid out and inlined as cold code)
  # on one build and not the next. A run's weight scales the packets its
  # ports received up to the largest run's (x10, for 10 % steps); the
  # set-up runs (pcap generation, outside any case) count once. A run that
  # received nothing would leave its path out: that fails the build.
  shopt -s nullglob
  declare -A received
  max=0
  for d in "$data"/cases/*/; do
    run=$(basename "$d")
    rx=$(python3 -c '
import json, sys
print(sum(p["rx_packets"] for line in open(sys.argv[1]) for p in json.loads(line)["ports"]))
' "$d/counters.jsonl" 2>/dev/null) || rx=0
    if (( rx == 0 )) || [[ -z "$(echo "$d"*.profraw)" ]]; then
      echo "pgo.sh: training run $run received no packets (another DPDK process on the vdevs?)" >&2
      exit 1
    fi
    "$profdata" merge -o "$data/$run.profdata" "$d"*.profraw
    received[$run]=$rx
    max=$(( rx > max ? rx : max ))
  done
  weighted=()
  for run in "${!received[@]}"; do
    rx=${received[$run]}
    weighted+=("--weighted-input=$(( (10 * max + rx / 2) / rx )),$data/$run.profdata")
  done
  "$profdata" merge -o "$profile" "${weighted[@]}" "$data"/*.profraw
fi

echo "pgo.sh: optimised build (target/pgo)" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" CARGO_TARGET_DIR=target/pgo \
  cargo build --release -q --bin intswitch
echo "pgo.sh: built target/pgo/release/intswitch" >&2
