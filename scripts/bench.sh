#!/usr/bin/env bash
# Benchmark (not a test): each forwarding mode on one worker core with
# 64-byte frames, next to dpdk-testpmd (io or macswap, see below) on the same
# vdevs with the same traffic, in the same run, at the switch's RX burst (the
# case config's `burst`, 64 by default; testpmd's own default is 32). Source:
# net_pcap replaying a generated pcap (infinite_rx=1); sink: net_null.
# Prints one line per case: case=<name> mpps=<x.xx> ratio=<x.xx>
# testpmd_mpps=<x.xx> testpmd=io|macswap (io for the cross-connect cases,
# which move frames untouched; macswap for the rest); the
# switch's mpps are the frames it received and did not drop, a second.
#
# BENCH_SECONDS (default 8, at least 4) sets each run's length; BENCH_ROUNDS
# (default 1) runs each case's pair that many times, taking turns, and
# prints the medians (the machine's own swings are several percent);
# BENCH_HUGEPAGES=0 skips reserving 2 MiB hugepages (reserved for the run
# and released at exit);
# BENCH_CASES=name,name,... runs only those cases (an export case comes with
# the report-every-packet case it is measured in);
# BENCH_WORKERS=N (default 1) runs N workers, each on a core of its own
# polling an RX queue of the source port (net_pcap: one queue per rx_pcap
# of the same file), against testpmd with N forwarding cores and queues:
# a scaling run, for a machine with more than N cores. Lines then end in
# workers=N.
# The switch measured is the plain release build (cargo build --release;
# lines end in build=release). BENCH_PGO=1 measures the profile-optimised
# build instead (scripts/pgo.sh, trained on traces other than these;
# build=pgo), BENCH_PGO=both measures both in each round and prints the
# PGO line with vs_release=<pgo/release>, BENCH_BIN=PATH a given binary
# (build=given).
# BENCH_KEEP=1 keeps the traces, configs and last logs (the directory is
# printed at exit).
# BENCH_PEERS=0 skips the peers (testpmd, OVS-DPDK, l3fwd; ratio 0.00: pgo.sh's
# training and bench_ab.sh), BENCH_TESTPMD=0 testpmd alone.
# INT-label's cases (intlabel-core, intlabel-core-int-transit,
# intlabel-core-labeled, intlabel-lasthop and their -imix) also run the
# case their goal compares them with in the same rounds: a line
# case=<case>-against-<reference> with both medians and ratio_paired, the
# median of the rounds' own ratios (BENCH_PEERS=0 skips it). The last hop's
# intlabel-lasthop-reports line adds refused=<ours>/<reference> a round:
# the share of reports each one's full ring refused.
# BENCH_TESTPMD_IO=1 also runs testpmd io (frames moved untouched: what
# the harness itself allows) in each round of the cases whose testpmd is
# macswap, on the same trace: a line case=testpmd-io-<case> (ratio: io
# over macswap) and vs_testpmd_io=<ours/io> on the case's line.
# OVS-DPDK (Debian's openvswitch-switch-dpdk, with hugepages, one worker;
# BENCH_OVS=0 skips it) runs beside the cross-connect, bridge and router
# cases, in the same rounds, on the same vdevs and trace, driven by
# scripts/bench_ovs.py: one PMD core, its flows derived from the case's
# config (xconnect: in_port rules; bridge: NORMAL with the static MACs in
# its FDB, and OpenFlow dl_dst rules; router: an OpenFlow rule a route).
# Each such case line gains vs_ovs=<ours / OVS's best config>; each OVS
# config prints its own line (case=ovs-<config>-<case>, build=ovs, with
# tx_share, the frames it sent over those it took) and leaves its
# pmd-stats-show in BENCH_OVS_STATS (default target/bench-ovs/).
# BENCH_SWEEP=1 adds the INT sink analytics sweep (1-5 hops x 1-4
# instructions, each with the 10G line rate of its mean frame), case name
# int-sink-analytics-sweep.
# BENCH_TRAIN=1 (pgo.sh's training) replays traces disjoint from the
# measured ones: 124-byte frames, 48 flows where the cases have 64, other
# routes for L3, half the AM-PM flows, so that the optimised build is not
# tuned to the very frames it is measured on.
# BENCH_PROFILE_DIR=DIR (pgo.sh's training, with an instrumented binary):
# each case's switch runs write their profile and final counters (a JSON
# line a run, counters.jsonl) under DIR/<case>/, so that pgo.sh can weigh
# the cases by the packets they received.
# BENCH_INSTR=1 adds, after each case, the instructions per packet of the
# switch's pipeline on that case's config and trace
# (scripts/stage_instructions.sh: the stage bench under callgrind, exact
# and untouched by the VM's noise; no PMDs): case=<case>-instr
# instructions_per_packet=<n> burst_packets=<n> mispredicted_per_packet=<n>
# (conditional branches, callgrind's model). Needs valgrind.
# BENCH_L3FWD=1 (one worker) also measures DPDK's own l3fwd example, built
# from dpdk-doc's sources, on the same vdevs and traffic: with the L3 case's
# 10k routes (LPM) and 100k flows (exact match), with the realistic router
# cases' 10k IPv4 and 2k IPv6 routes (LPM; lines l3fwd-lpm-l3-router...),
# with the full-size table (FIB; lines l3fwd-fib-l3-router-full...),
# with the realistic router and AM-PM traces' own TCP and UDP flows, IPv4
# and IPv6 (exact match; lines l3fwd-em-l3-router..., l3fwd-em-ampm...,
# l3fwd-em-ampm-v6...),
# and with the AM-PM cases' 10k flows and the 1k-flow INT sink analytics
# trace's flows (exact match: lines l3fwd-em-analytics...). Its lines end in
# build=l3fwd: a reference for what one table lookup a packet costs on this
# harness. l3fwd runs in the rounds of the case it stands beside, on its
# trace (l3fwd-lpm on the router traces beside both l3-router and
# l3-router-routing-only, l3fwd-em beside each case on its trace), and its
# lines end in beside=<case>; that case's line gains vs_l3fwd_em,
# vs_l3fwd_lpm or vs_l3fwd_fib (ours / l3fwd's). With BENCH_TESTPMD_IO=1
# an l3fwd line also gains vs_testpmd_io (l3fwd's / testpmd io's, same
# rounds and trace): how much of what the harness moves untouched is left
# with one lookup a packet.
set -euo pipefail
source "$(dirname "$0")/usage.sh" "$@"
no_arguments "$@"
cd "$(dirname "$0")/.."
secs=${BENCH_SECONDS:-8}
rounds=${BENCH_ROUNDS:-1}
workers=${BENCH_WORKERS:-1}
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
  echo "bench.sh: BENCH_ROUNDS=$rounds: need a whole number, at least 1" >&2
  exit 2
fi
if ! [[ "$workers" =~ ^[1-9][0-9]*$ ]] || (( workers >= $(nproc) )); then
  echo "bench.sh: BENCH_WORKERS=$workers: need 1 to $(( $(nproc) - 1 )) (a core each, and one for the control core)" >&2
  exit 2
fi
# The source port's RX queues (net_pcap: one per rx_pcap, all replaying
# the same file) and, with several workers, what each worker polls.
rx_pcaps() { # pcap
  local i out=""
  for ((i = 0; i < workers; i++)); do out+="rx_pcap=$1,"; done
  printf '%s' "$out"
}
worker_sections() { # extra queue-0 ports for worker 0, e.g. '"p1:0"'
  (( workers > 1 )) || return 0
  local i
  printf '[[worker]]\nlcore = 1\nrx = ["p0:0", %s]\n' "$1"
  for ((i = 1; i < workers; i++)); do
    printf '[[worker]]\nlcore = %d\nrx = ["p0:%d"]\n' $((i + 1)) "$i"
  done
}
l3fwd_ref=${BENCH_L3FWD:-0}
l3fwd_src=/usr/share/dpdk/examples
if [[ "$l3fwd_ref" != 0 ]]; then
  if (( workers > 1 )); then
    echo "bench.sh: BENCH_L3FWD=1 measures one worker only (BENCH_WORKERS=$workers)" >&2
    exit 2
  fi
  if [[ ! -f "$l3fwd_src/l3fwd/main.c" ]] || ! command -v tshark >/dev/null; then
    echo "bench.sh: BENCH_L3FWD=1 needs DPDK's example sources and tshark: apt-get install dpdk-doc tshark" >&2
    exit 2
  fi
fi
# The first two per-second samples are warm-up: fewer than 4 leave too few.
if ! [[ "$secs" =~ ^[0-9]+$ ]] || (( secs < 4 )); then
  echo "bench.sh: BENCH_SECONDS=$secs: need a whole number of seconds, at least 4" >&2
  exit 2
fi
work=$(mktemp -d /tmp/intswitch-bench.XXXXXX)
hp_file=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
hp_before=""
ovs_dir=""
cleanup() {
  [[ -z "$ovs_dir" ]] || python3 scripts/bench_ovs.py stop --dir "$ovs_dir" || true
  # DPDK leaves its hugepage files behind; they keep the pages as surplus
  # until removed.
  rm -f /dev/hugepages/bench-tp-$$map_* /dev/hugepages/bench-is-$$map_* /dev/hugepages/bench-l3-$$map_* 2>/dev/null || true
  [[ -n "$hp_before" ]] && echo "$hp_before" > "$hp_file" 2>/dev/null || true
  if [[ "${BENCH_KEEP:-0}" != 0 ]]; then echo "bench.sh: traces, configs and logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# The builds measured, each case runs them in turn: bins[i] is builds[i].
bins=() builds=()
if [[ -n "${BENCH_BIN:-}" ]]; then
  bins=("$BENCH_BIN") builds=(given)
else
  case "${BENCH_PGO:-0}" in
    0 | 1 | both) ;;
    *) echo "bench.sh: BENCH_PGO=${BENCH_PGO}: need 0, 1 or both" >&2; exit 2 ;;
  esac
  if [[ "${BENCH_PGO:-0}" != 1 ]]; then
    cargo build --release -q --bin intswitch
    bins+=(target/release/intswitch) builds+=(release)
  fi
  if [[ "${BENCH_PGO:-0}" != 0 ]]; then
    scripts/pgo.sh
    bins+=(target/pgo/release/intswitch) builds+=(pgo)
  fi
fi
bin=${bins[0]}
# The traces are written by this tree's generator (BENCH_GEN, else its
# release build): an A/B run measures older builds on the same traces.
gen=${BENCH_GEN:-}
if [[ -z "$gen" ]]; then
  [[ -n "${BENCH_BIN:-}" ]] && cargo build --release -q --bin intswitch
  gen=target/release/intswitch
fi
# The traces: the measured ones, or (BENCH_TRAIN=1) others for training.
if [[ "${BENCH_TRAIN:-0}" != 0 ]]; then
  size=124 flows=48 l3_frames=50000 l3_dst=20.8.0.1 ampm_frames=10000 ampm_flows=5000
  seed=2 imix=128:7,570:4,1500:1
else
  size=60 flows=64 l3_frames=100000 l3_dst=20.0.0.1 ampm_frames=20000 ampm_flows=10000
  seed=1 imix=imix
fi

peers=${BENCH_PEERS:-1}
ovs_wanted() { [[ "$peers" != 0 && "${BENCH_OVS:-1}" != 0 ]] && (( workers == 1 )) && [[ -x /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk ]]; }
ovs_stats=${BENCH_OVS_STATS:-target/bench-ovs}
if [[ "$peers" != 0 && "${BENCH_OVS:-1}" != 0 && ! -x /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk ]]; then
  echo "bench.sh: OVS-DPDK is not installed (apt-get install openvswitch-switch-dpdk): no OVS figures" >&2
fi
mem_args='memory_mb = 2048'
tp_mem=(--no-huge -m 2048)
tp_mbufs=200000
if [[ "${BENCH_HUGEPAGES:-1}" != 0 && -w "$hp_file" ]]; then
  hp_before=$(cat "$hp_file")
  # The 1M-flow analytics case holds a 1M-frame trace in mbufs: 3.5 GiB;
  # l3fwd's full-size FIB takes 3.5 GiB with its pool.
  if [[ -z "${BENCH_CASES:-}" || ",$BENCH_CASES," == *",int-sink-analytics-5x4-1m-flows,"* || ",$BENCH_CASES," == *",l3-router-full"* ]]; then echo 1900 > "$hp_file" || true; else echo 1200 > "$hp_file" || true; fi
  # OVS-DPDK keeps 1 GiB of them (stopped) while the others take turns.
  if ovs_wanted; then echo $(( $(cat "$hp_file") + 600 )) > "$hp_file" || true; fi
  if (( $(cat "$hp_file") >= 1100 )); then
    mem_args=$'memory_mb = 2048\nhuge = true'
    tp_mem=(-m 2048)
    mkdir -p /dev/hugepages; mountpoint -q /dev/hugepages || mount -t hugetlbfs nodev /dev/hugepages
  fi
fi

DUT_MAC=02:00:00:00:be:00
# Average of the per-second samples, skipping the first two (warm-up).
# Samples before the first nonzero one are start-up (a 1M-frame trace takes
# seconds to load into mbufs), not rate.
# A run too short for a busy second past the first two (a slow start-up
# on a loaded machine) reads 0.00, and says so.
avg() {
  awk '!seen && $1 == 0 { next } { seen = 1; if (++k > 2) { s += $1; n++ } }
    END { if (n) printf "%.2f", s/n
          else { print "0.00"; printf "bench.sh: a run had %d busy seconds, none past the first two: it reads 0.00 (raise BENCH_SECONDS)\n", k > "/dev/stderr" } }'
}

testpmd_mode() { # case: io for a cross-connect (it moves frames untouched), macswap for the rest
  if [[ "$1" == xconnect* ]]; then echo io; else echo macswap; fi
}

# The switch's RX burst in a config: its `burst`, else the default that
# configs/reference.toml states. testpmd runs at it (its own default is 32).
burst_of() { # config
  local b
  b=$(sed -nE 's/^burst = ([0-9]+).*/\1/p' "$1" | head -n 1)
  [[ -n "$b" ]] || b=$(sed -nE 's/^burst = ([0-9]+).*/\1/p' configs/reference.toml | head -n 1)
  echo "$b"
}

testpmd_mpps() { # pcap forward-mode burst
  timeout $((secs + 20)) dpdk-testpmd -l "0-$workers" "${tp_mem[@]}" --no-pci --file-prefix "bench-tp-$$" \
    --vdev "net_pcap0,$(rx_pcaps "$1")infinite_rx=1" --vdev "net_null0,no-rx=1" --log-level=error -- \
    --forward-mode="$2" --burst="$3" --stats-period 1 --total-num-mbufs=$tp_mbufs --no-lsc-interrupt \
    --nb-cores="$workers" --rxq="$workers" --txq="$workers" \
    >"$work/tp.log" 2>&1 </dev/null &
  local pid=$! i
  # Time from when forwarding starts: the first run after the reservation
  # spends seconds zeroing fresh hugepages, which left too few samples.
  for ((i = 0; i < 100; i++)); do
    grep -q "start packet forwarding" "$work/tp.log" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.2
  done
  sleep $((secs + 2)); kill -INT $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
  # Port 1 (net_null) is the TX side; its Tx-pps lines are every second block's second entry.
  grep -E "Tx-pps:" "$work/tp.log" | awk 'NR%2==0 {print $2/1e6}' | avg
}

intswitch_mpps() { # config [case]
  local profile=() dir=${BENCH_PROFILE_DIR:+$BENCH_PROFILE_DIR/${2:-}}
  [[ -n "$dir" ]] && mkdir -p "$dir" && profile=("LLVM_PROFILE_FILE=$dir/%p.profraw")
  env "${profile[@]}" timeout $((secs + 30)) "$bin" --config "$1" --duration "$secs" --stats-interval 1 --json \
    >"$work/is.log" 2>&1 </dev/null || true
  [[ -z "$dir" ]] || tail -n 1 "$work/is.log" >>"$dir/counters.jsonl"
  # Frames switched a second: received on p0 less those dropped (a flood's
  # copies count once; testpmd's figure is its one TX port's).
  grep -E "^p0:" "$work/is.log" | sed -E 's/^p0: rx ([0-9.]+) Mpps.* drops ([0-9.]+) Mpps.*/\1 \2/' |
    awk '{ print $1 - $2 }' | avg
}

# DPDK's l3fwd example as shipped, with these changes so that it runs here
# as testpmd and the switch do: RX offloads limited to what the port has
# (net_pcap has no checksum offload, which stock l3fwd asks for and fails
# on), a pool of at least 200000 mbufs (infinite_rx holds the whole pcap in
# mbufs; the same pool as testpmd's and the switch's), and room for a
# full table: 1M IPv4 and 256k IPv6 LPM routes, 256k IPv6 tbl8 groups
# (stock: 1024 routes each, 64k groups); FIB (--lookup=fib): 1M IPv4 and
# 256k IPv6 routes, 512k IPv6 tbl8 groups (stock: 64k routes, 32k groups);
# exact match with both its IPv4 and IPv6 rules (stock: one family a run).
build_l3fwd() {
  local d=$work/examples
  mkdir -p "$d"
  cp -r "$l3fwd_src/l3fwd" "$l3fwd_src/common" "$d/"
  patch_l3fwd l3fwd_lpm.c 's/\(#define IPV4_L3FWD_LPM_MAX_RULES[[:space:]]*\)1024$/\11048576/' \
    'IPV4_L3FWD_LPM_MAX_RULES[[:space:]]*1048576'
  patch_l3fwd l3fwd_lpm.c 's/\(#define IPV6_L3FWD_LPM_MAX_RULES[[:space:]]*\)1024$/\1262144/' \
    'IPV6_L3FWD_LPM_MAX_RULES[[:space:]]*262144'
  patch_l3fwd l3fwd_lpm.c 's/\(#define IPV6_L3FWD_LPM_NUMBER_TBL8S[[:space:]]*\)(1 << 16)$/\1(1 << 18)/' \
    'IPV6_L3FWD_LPM_NUMBER_TBL8S[[:space:]]*(1 << 18)'
  patch_l3fwd l3fwd_fib.c 's/config_ipv4.max_routes = (1 << 16);/config_ipv4.max_routes = (1 << 20);/' \
    'config_ipv4.max_routes = (1 << 20);'
  patch_l3fwd l3fwd_fib.c 's/config.max_routes = (1 << 16) - 1;/config.max_routes = (1 << 18);/' \
    'config.max_routes = (1 << 18);'
  patch_l3fwd l3fwd_fib.c 's/config.trie.num_tbl8 = (1 << 15);/config.trie.num_tbl8 = (1 << 19);/' \
    'config.trie.num_tbl8 = (1 << 19);'
  patch_l3fwd main.c 's/(unsigned)8192)/(unsigned)200000)/' '(unsigned)200000)'
  # Exact match fills its IPv4 table, or with --ipv6 its IPv6 one, never
  # both: the other family's packets all miss. Both, as the traces mix them.
  patch_l3fwd l3fwd_em.c '/if (ipv6 == 0) {/,/populate_ipv6_flow_into_table(/s/} else {/} \/* bench.sh: and IPv6 *\/ {/' \
    '} /\* bench.sh: and IPv6 \*/ {'
  patch_l3fwd l3fwd_em.c 's/if (ipv6 == 0) {/{ \/* bench.sh: IPv4 *\//' '{ /\* bench.sh: IPv4 \*/'
  patch_l3fwd main.c 's/^\([[:space:]]*\)ret = config_port_max_pkt_len(&local_port_conf, &dev_info);/\1local_port_conf.rxmode.offloads \&= dev_info.rx_offload_capa;\n\1port_conf.rxmode.offloads \&= dev_info.rx_offload_capa;\n&/' \
    'port_conf.rxmode.offloads &= dev_info.rx_offload_capa'
  make -s -C "$d/l3fwd" >"$work/l3fwd-build.log" 2>&1 || { cat "$work/l3fwd-build.log" >&2; exit 1; }
  l3fwd_bin=$d/l3fwd/build/l3fwd
  # l3fwd wants IPv6 routes too: one, which no packet here matches.
  echo "R2001:db8::/32 1" >"$work/lpm-v6.cfg"
}
patch_l3fwd() { # file sed-expression what-must-match-after
  sed -i "$2" "$work/examples/l3fwd/$1"
  grep -q "$3" "$work/examples/l3fwd/$1" || {
    echo "bench.sh: DPDK's l3fwd/$1 is not what BENCH_L3FWD expects (DPDK 22.11)" >&2
    exit 1
  }
}

# l3fwd's TX rate, read through DPDK's telemetry socket (l3fwd prints no
# rates), over the run less its first two seconds (the other figures skip
# their first two samples). Both ports count: a packet its table misses
# goes back out the port it came in on (port 0), looked up all the same.
# Its exact match keys IPv6 at fixed offsets, so a packet with a Hop-by-Hop
# header (the v6hbh AM-PM trace) misses its rule; with both families'
# rules loaded (build_l3fwd) every other packet of these traces hits
# (checked by hand through its telemetry: the l3-router trace, 20 % IPv6,
# all out of port 1).
l3fwd_mpps() { # -L|-E|--lookup=fib rules-v4 rules-v6 pcap
  local prefix=bench-l3-$$
  timeout $((secs + 330)) "$l3fwd_bin" -l 1 "${tp_mem[@]}" --no-pci --file-prefix "$prefix" --log-level=error \
    --vdev "net_pcap0,rx_pcap=$4,infinite_rx=1" --vdev "net_null0,no-rx=1" -- \
    -p 0x3 --config "(0,0,1),(1,0,1)" --parse-ptype "$1" --rule_ipv4 "$2" --rule_ipv6 "$3" \
    >"$work/l3fwd.log" 2>&1 </dev/null &
  local pid=$!
  # Ready when its socket answers and port 1 has sent (its stdout is a
  # file, so its own messages come only at exit); then 2 s of warm-up.
  python3 - "/var/run/dpdk/$prefix/dpdk_telemetry.v2" $((secs - 2)) $pid <<'EOF2' 2>"$work/l3fwd-tel.log" || echo 0.00
import json, os, socket, sys, time
path, secs, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
def sent():
    n = 0
    for port in (0, 1):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.recv(1024)
        s.send(b"/ethdev/stats,%d" % port)
        n += json.loads(s.recv(65536))["/ethdev/stats"]["opackets"]
        s.close()
    return n
for _ in range(3000):  # up to 300 s to start (hugepage zeroing; a full table's 1.1M routes take minutes)
    os.kill(pid, 0)  # gone: no figure
    try:
        if sent() > 0:
            break
    except (OSError, KeyError, ValueError):
        pass
    time.sleep(0.1)
else:
    sys.exit("l3fwd never sent")
time.sleep(2)
a, t0 = sent(), time.monotonic()
time.sleep(secs)
b, t1 = sent(), time.monotonic()
print("%.2f" % ((b - a) / (t1 - t0) / 1e6))
EOF2
  kill -INT $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  rm -f /dev/hugepages/${prefix}map_* 2>/dev/null || true
}

# The 5-tuples of a pcap's TCP and UDP packets, IPv4 and IPv6, as l3fwd
# exact-match rules, all to port 1 ("R<dst> <src> <dst port> <src port>
# <proto> <port>"). l3fwd wants a file of each version: one that no packet
# matches stands in for a version the trace lacks.
em_rules() { # pcap v4-rules v6-rules
  tshark -r "$1" -T fields -E separator=, -E occurrence=f -e ip.src -e ip.dst -e ipv6.src -e ipv6.dst \
    -e ip.proto -e ipv6.nxt -e tcp.srcport -e tcp.dstport -e udp.srcport -e udp.dstport 2>/dev/null | sort -u |
    awk -F, -v v4="$2" -v v6="$3" '
      { p = ($5 != "") ? $5 : $6; s = (p == 6) ? $7 : $9; d = (p == 6) ? $8 : $10 }
      (p != 6 && p != 17) || s == "" { next }
      $1 != "" { printf "R%s %s %s %s %d 1\n", $2, $1, d, s, p > v4; n4++ }
      $1 == "" && $3 != "" { printf "R%s %s %s %s %d 1\n", $4, $3, d, s, p > v6; n6++ }
      END {
        if (!n4) print "R192.0.2.1 192.0.2.2 1 1 17 1" > v4
        if (!n6) print "R2001:db8::1 2001:db8::2 1 1 17 1" > v6
      }'
}

# DPDK's l3fwd beside a case (BENCH_L3FWD=1), on the case's trace and in
# its rounds: each round runs testpmd, the switch, then each l3fwd given
# for the case. The case's line gains vs_l3fwd_em, vs_l3fwd_lpm or
# vs_l3fwd_fib (ours / l3fwd's); each l3fwd prints its own line, named
# LINE, ending in build=l3fwd beside=<case>.
declare -A l3fwd_of=()
l3fwd_beside() { # case line -L|-E|--lookup=fib rules-v4 rules-v6 [mem-MB]
  [[ "$l3fwd_ref" != 0 && "$peers" != 0 ]] && want "$1" || return 0
  l3fwd_of[$1]+="$2|$3|$4|$5|${6:-} "
}

# The case a goal compares a case with (INT-label's: README "INT-label"),
# run in the same rounds: each round runs testpmd, the switch on the case,
# then the switch on the reference's config, so that a slow spell touches
# both. A line case=<case>-against-<reference> follows the case's, with
# both medians and the median of the rounds' own ratios (ratio_paired;
# rounds= lists them). Skipped with BENCH_PEERS=0. Also registers the IMIX
# variants (the reference's trace TRACE.pcap becomes TRACE-imix.pcap).
declare -A goal_of=()
goal_beside() { # case reference-case reference-trace-base reference-config
  [[ "$peers" != 0 ]] || return 0
  goal_of[$1]="$2|$4"
  sed "s|$3.pcap|$3-imix.pcap|" "$4" >"${4%.toml}-imix.toml"
  goal_of[$1-imix]="$2-imix|${4%.toml}-imix.toml"
}

# Worker 0's queues besides p0's with several workers: p1's and those of
# the ports a config's tail adds.
extra_queues() { # tail
  local q='"p1:0"' n
  for n in $(grep -o 'name = "p[2-9]"' <<<"$1" | grep -o 'p[2-9]'); do q+=", \"$n:0\""; done
  printf '%s' "$q"
}

config() { # mode pcap extra-port0 extra-port1 tail
  cat <<EOF2
name = "bench"
mode = "$1"
[eal]
lcores = "0-$workers"
$mem_args
file_prefix = "bench-is-$$"
log_level = "error"
[dataplane]
mbufs = 200000
[flow_table]
capacity = 131072
learn = ${6:-false}
[[port]]
name = "p0"
device = "net_pcap0,$(rx_pcaps "$2")infinite_rx=1"
mac = "$DUT_MAC"
$3
[[port]]
name = "p1"
device = "net_null0,no-rx=1"
$4
$5
$(worker_sections "$(extra_queues "$5")")
EOF2
}

# The export figures of the case just run (the last line of each round's
# --json output), each the median over the rounds.
export_line() { # name fields suffix
  for ((r = 0; r < rounds; r++)); do tail -n 1 "$work/is-$r.log"; done | python3 -c "
import json, statistics, sys
rows = []
for line in sys.stdin:
    d = json.loads(line)['int_reports']
    rows.append({'reports_per_s': d['reports'] / $secs, 'packets_per_s': d['packets'] / $secs,
                 'ring_full_per_s': sum(r['ring_full'] for r in d['rings']) / $secs,
                 'send_errors': d['collectors'][0]['send_errors'], 'reports_per_busy_s': d['reports_per_busy_s']})
fields = ' '.join('%s=%.0f' % (k, statistics.median(r[k] for r in rows)) for k in sys.argv[2].split(','))
print('case=%s %s%s' % (sys.argv[1], fields, sys.argv[3]))
" "$@"
}

want() { # case name: in BENCH_CASES, or no BENCH_CASES
  [[ -z "${BENCH_CASES:-}" || ",$BENCH_CASES," == *",$1,"* ]]
}

# The median of its arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# OVS-DPDK for the case about to run, with its configs (ovs_kinds, set by
# the caller: xconnect, normal, dl-dst, routes): started once, stopped
# (SIGSTOP) between its turns. No OVS when it is not wanted, or fails to
# start (the reason goes to stderr).
ovs_start() { # name config
  ovs_on=()
  [[ -n "${ovs_kinds:-}" ]] && ovs_wanted && [[ "$mem_args" == *huge* ]] || return 0
  ovs_dir=$work/ovs-$1
  rm -rf "$ovs_dir"
  if python3 scripts/bench_ovs.py start --dir "$ovs_dir" --config "$2" --kinds "${ovs_kinds// /,}" 2>"$work/ovs-start.log"; then
    read -ra ovs_on <<<"$ovs_kinds"
    mkdir -p "$ovs_stats"
  else
    echo "bench.sh: $1: OVS-DPDK did not start, no OVS figure: $(tail -n 1 "$work/ovs-start.log")" >&2
    ovs_end
  fi
}
ovs_end() {
  [[ -z "$ovs_dir" ]] || python3 scripts/bench_ovs.py stop --dir "$ovs_dir" || true
  ovs_dir=""
}

run_case() { # name pcap config
  want "$1" || return 0
  local theirs=() ours=() r i k first="" best=0 mpps share specs=() p j vs="" saved
  local l3n=() l3a=() l3m=() l3f=() name lookup v4 v6 mem io=()
  local -A ovs_f=() ovs_tx=()
  local gref="" gcfg="" gf=() gr=() mine g burst
  burst=$(burst_of "$3")
  rm -f "$work"/is-ref-*.log
  [[ -z "${goal_of[$1]:-}" ]] || IFS='|' read -r gref gcfg <<<"${goal_of[$1]}"
  # The l3fwds beside this case: line name, lookup and rules, memory.
  read -ra specs <<<"${l3fwd_of[$1]:-}"
  for p in "${specs[@]}"; do
    IFS='|' read -r name lookup v4 v6 mem <<<"$p"
    l3n+=("$name") l3a+=("$lookup $v4 $v6") l3m+=("$mem") l3f+=("")
  done
  if ((${#l3n[@]})) && [[ -z "${l3fwd_bin:-}" ]]; then build_l3fwd; fi
  ovs_start "$1" "$3"
  # testpmd, OVS and each build take turns, so a slow spell of the machine
  # touches all; each figure is the median of its rounds. ours[i] holds
  # build i's figures, space-separated.
  for ((r = 0; r < rounds; r++)); do
    if [[ "$peers" != 0 && "${BENCH_TESTPMD:-1}" != 0 ]]; then theirs+=("$(testpmd_mpps "$2" "$(testpmd_mode "$1")" "$burst")"); else theirs+=(0); fi
    if [[ "$peers" != 0 && "${BENCH_TESTPMD_IO:-0}" != 0 && "$(testpmd_mode "$1")" != io ]]; then
      io+=("$(testpmd_mpps "$2" io "$burst")")
    fi
    for i in "${!bins[@]}"; do
      bin=${bins[$i]}
      g=$(intswitch_mpps "$3" "$1")
      ours[i]+=" $g"
      ((i)) || mine=$g
    done
    cp "$work/is.log" "$work/is-$r.log"
    if [[ -n "$gref" ]]; then
      bin=${bins[0]}
      g=$(intswitch_mpps "$gcfg" "$gref")
      cp "$work/is.log" "$work/is-ref-$r.log"
      gf+=("$g")
      gr+=("$(awk -v a="$mine" -v b="$g" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')")
    fi
    for k in "${ovs_on[@]}"; do
      read -r mpps share < <(python3 scripts/bench_ovs.py run --dir "$ovs_dir" --kind "$k" --seconds "$secs" \
        --stats "$ovs_stats/$1-$k.txt" 2>>"$work/ovs-run.log" || echo "0.00 0.00")
      ovs_f[$k]+=" $mpps" ovs_tx[$k]=$share
    done
    for j in "${!l3n[@]}"; do
      saved=("${tp_mem[@]}")
      [[ -z "${l3m[j]}" ]] || tp_mem=("${tp_mem[@]/2048/${l3m[j]}}")
      # shellcheck disable=SC2086 # lookup and rule files are words
      l3f[j]+=" $(l3fwd_mpps ${l3a[j]} "$2")"
      tp_mem=("${saved[@]}")
    done
  done
  ovs_end
  # Each l3fwd's median, and vs_<kind>=<it> pairs for the lines below.
  for j in "${!l3n[@]}"; do
    # shellcheck disable=SC2086 # the figures are words
    l3f[j]=$(median ${l3f[j]})
    k=${l3n[j]#l3fwd-}
    vs+=" l3fwd_${k%%-*}=${l3f[j]}"
  done
  # testpmd io's median, empty when it did not run.
  local io_mpps=""
  ((${#io[@]} == 0)) || io_mpps=$(median "${io[@]}")
  [[ -z "$io_mpps" ]] || vs+=" testpmd_io=$io_mpps"
  for k in "${ovs_on[@]}"; do
    # shellcheck disable=SC2086 # the figures are words
    ovs_f[$k]=$(median ${ovs_f[$k]})
    best=$(awk -v a="$best" -v b="${ovs_f[$k]}" 'BEGIN { print (b > a ? b : a) }')
  done
  bin=${bins[0]}
  for i in "${!bins[@]}"; do
    # shellcheck disable=SC2086 # the figures are words
    local a; a=$(median ${ours[i]})
    awk -v n="$1" -v a="$a" -v b="$(median "${theirs[@]}")" \
      -v w="$( (( workers > 1 )) && echo " workers=$workers")" -v k="${builds[i]}" -v f="$first" \
      -v m="$(testpmd_mode "$1")" -v o="$best" -v vs="$vs" \
      'BEGIN { printf "case=%s mpps=%.2f ratio=%.2f testpmd_mpps=%.2f testpmd=%s%s build=%s", n, a, (b > 0 ? a / b : 0), b, m, w, k
               if (f != "") printf " vs_release=%.3f", (f > 0 ? a / f : 0)
               if (o > 0) printf " vs_ovs=%.2f", a / o
               np = split(vs, peer, " ")
               for (j = 1; j <= np; j++) { split(peer[j], kv, "="); printf " vs_%s=%.2f", kv[1], (kv[2] > 0 ? a / kv[2] : 0) }
               printf "\n" }'
    [[ -n "$first" ]] || first=$a
  done
  if [[ -n "$gref" ]]; then
    # shellcheck disable=SC2086 # the figures are words
    awk -v n="$1-against-$gref" -v a="$(median ${ours[0]})" -v b="$(median "${gf[@]}")" -v r="$(median "${gr[@]}")" \
      -v l="$(IFS=,; echo "${gr[*]}")" -v c="$1" \
      'BEGIN { printf "case=%s mpps=%.2f against_mpps=%.2f ratio_paired=%.3f rounds=%s beside=%s\n", n, a, b, r, l, c }'
  fi
  for j in "${!l3n[@]}"; do
    awk -v n="${l3n[j]}" -v a="${l3f[j]}" -v b="$(median "${theirs[@]}")" -v c="$1" -v io="$io_mpps" \
      'BEGIN { printf "case=%s mpps=%.2f ratio=%.2f testpmd_mpps=%.2f", n, a, (b > 0 ? a / b : 0), b
               if (io != "") printf " vs_testpmd_io=%.2f", (io > 0 ? a / io : 0)
               printf " build=l3fwd beside=%s\n", c }'
  done
  if [[ -n "$io_mpps" ]]; then
    awk -v a="$io_mpps" -v b="$(median "${theirs[@]}")" -v c="$1" \
      'BEGIN { printf "case=testpmd-io-%s mpps=%.2f ratio=%.2f testpmd_mpps=%.2f build=testpmd beside=%s\n", c, a, (b > 0 ? a / b : 0), b, c }'
  fi
  for k in "${ovs_on[@]}"; do
    awk -v n="ovs-$k-$1" -v a="${ovs_f[$k]}" -v b="$(median "${theirs[@]}")" -v m="$(testpmd_mode "$1")" \
      -v t="${ovs_tx[$k]}" -v s="$ovs_stats/$1-$k.txt" \
      'BEGIN { printf "case=%s mpps=%.2f ratio=%.2f testpmd_mpps=%.2f testpmd=%s tx_share=%.2f build=ovs pmd_stats=%s\n", n, a, (b > 0 ? a / b : 0), b, m, t, s }'
  done
  if [[ "${BENCH_INSTR:-0}" != 0 ]]; then
    scripts/stage_instructions.sh "$3:$2" | sed -E "s/^case=[^ ]+/case=$1-instr/"
  fi
}

# The synthetic cases (names end in -1flow; L3's in -seq): one MAC pair,
# 64 flows in turn (L3: 100k flows in turn over 391 of the routes), 64-byte
# frames. The upper bound of each mode, not what a network sends: the
# realistic cases follow them.
# Cross-connect and L2: one MAC pair, 64 flows.
$gen gen-traffic --out "$work/l2.pcap" --count 4096 --flows $flows --size $size --dst-mac 02:00:00:00:00:02
config xconnect "$work/l2.pcap" 'peer = "p1"' 'peer = "p0"' "" >"$work/xc.toml"
run_case xconnect-1flow "$work/l2.pcap" "$work/xc.toml"
# L2: the destination pinned to p1 (known unicast, the usual case), and
# unknown unicast (flooded to the one other port).
config bridge "$work/l2.pcap" "" "" $'[[bridge.static_mac]]\nmac = "02:00:00:00:00:02"\nport = "p1"' >"$work/br.toml"
run_case l2-bridge-1flow "$work/l2.pcap" "$work/br.toml"
config bridge "$work/l2.pcap" "" "" "" >"$work/br-flood.toml"
run_case l2-bridge-unknown-unicast-flood-1flow "$work/l2.pcap" "$work/br-flood.toml"

# L3: 10k /24 routes via a gateway, 100k flows learned into the flow table.
$gen gen-traffic --out "$work/l3.pcap" --count $l3_frames --flows $l3_frames --size $size \
  --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst $l3_dst --vary-dst
{
  config router "$work/l3.pcap" 'ipv4 = ["10.0.1.1/24"]' 'ipv4 = ["10.0.2.1/24"]' "" true
  printf '[[neighbour]]\nip = "10.0.2.254"\nmac = "02:00:00:00:02:fe"\nport = "p1"\n'
  for i in $(seq 0 9999); do
    printf '[[route]]\nprefix = "20.%d.%d.0/24"\nport = "p1"\nvia = "10.0.2.254"\n' $((i / 256)) $((i % 256))
  done
} >"$work/l3.toml"
if [[ "$l3fwd_ref" != 0 ]] && want l3-10k-routes-100k-flows-seq; then
  for i in $(seq 0 9999); do printf 'R20.%d.%d.0/24 1\n' $((i / 256)) $((i % 256)); done >"$work/lpm-v4.cfg"
  em_rules "$work/l3.pcap" "$work/em-l3.cfg" "$work/em-l3-v6.cfg"
  l3fwd_beside l3-10k-routes-100k-flows-seq l3fwd-lpm-10k-routes -L "$work/lpm-v4.cfg" "$work/lpm-v6.cfg"
  l3fwd_beside l3-10k-routes-100k-flows-seq l3fwd-em-100k-flows -E "$work/em-l3.cfg" "$work/em-l3-v6.cfg"
fi
run_case l3-10k-routes-100k-flows-seq "$work/l3.pcap" "$work/l3.toml"

# INT: 64-byte UDP frames (plus the INT they carry) from p0 to p1.
# Reports go to a bound UDP socket nobody reads (no collector CPU cost; the
# kernel drops what overflows its buffer, the switch's sends still succeed).
python3 -c "import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('127.0.0.1',32766)); time.sleep(100000)" &
sink_pid=$!
trap 'kill $sink_pid 2>/dev/null; cleanup' EXIT
five=node_id,l1_ports,hop_latency,queue,ingress_ts
int_cfg() { # edge-ports extra-int-lines
  printf '[int]\nnode_id = 7\nedge_ports = %s\n%s\n' "$1" "$2"
}
config xconnect "$work/l2.pcap" 'peer = "p1"' 'peer = "p0"' "$(int_cfg '["p0"]' "[[int.watch]]
name = \"all\"
role = \"source\"
proto = \"udp\"
instructions = [\"node_id\", \"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\"]")" >"$work/src.toml"
run_case int-source-1flow "$work/l2.pcap" "$work/src.toml"

$gen gen-traffic --out "$work/int1.pcap" --count 4096 --flows $flows --size $size --dst-mac 02:00:00:00:00:02 \
  --int-hops 1 --int-instructions "$five" --int-rhc 4
config xconnect "$work/int1.pcap" 'peer = "p1"' 'peer = "p0"' "$(int_cfg '[]' '')" >"$work/transit.toml"
run_case int-transit-5-instructions-1flow "$work/int1.pcap" "$work/transit.toml"

$gen gen-traffic --out "$work/int5.pcap" --count 4096 --flows $flows --size $size --dst-mac 02:00:00:00:00:02 \
  --int-hops 5 --int-instructions node_id,l1_ports,hop_latency,queue --int-rhc 3
collector=$'[[int.collector]]\naddress = "127.0.0.1:32766"'
config xconnect "$work/int5.pcap" 'peer = "p1"' 'peer = "p0"' \
  "$(int_cfg '["p1"]' "report_flow_interval_ms = 1000
$collector")" >"$work/sink.toml"
run_case int-sink-5x4-1flow "$work/int5.pcap" "$work/sink.toml"
config xconnect "$work/int5.pcap" 'peer = "p1"' 'peer = "p0"' \
  "$(int_cfg '["p1"]' "report_max_packet = ${BENCH_REPORT_PACKET:-1472}
$collector")" >"$work/sink-all.toml"
run_case int-sink-5x4-report-every-packet "$work/int5.pcap" "$work/sink-all.toml"
# Reports the control core exported per second in that run, what the full
# rings refused (the export rate is the control core's limit when > 0), and
# reports per second of the control core's export work (its capacity: the
# worker, not the exporter, limits the rate when the exporter idles between
# polls).
want int-sink-5x4-report-every-packet && export_line int-report-export \
  reports_per_s,packets_per_s,ring_full_per_s,reports_per_busy_s " max_packet=${BENCH_REPORT_PACKET:-1472}"
# The same, with the collector behind a DPDK port (net_null): the control
# core builds the frames, worker 0 transmits them (no kernel socket). The
# pool is a LIFO stack (mempool_ops = "stack", see README): the control
# core then fills cache-warm buffers.
port_collector=$'[[int.collector]]\naddress = "10.99.0.2:32766"\nport = "p2"\nmac = "02:00:00:00:00:99"\nbind = "10.99.0.1:32766"'
config xconnect "$work/int5.pcap" 'peer = "p1"' 'peer = "p0"' \
  "$(printf '[[port]]\nname = "p2"\ndevice = "net_null1,no-rx=1"\npeer = "p2"\n')
$(int_cfg '["p1"]' "report_max_packet = ${BENCH_REPORT_PACKET:-1472}
$port_collector")" >"$work/sink-port.toml"
sed -i 's/^mbufs = 200000$/&\nmempool_ops = "stack"/' "$work/sink-port.toml"
run_case int-sink-5x4-report-every-packet-via-port "$work/int5.pcap" "$work/sink-port.toml"
want int-sink-5x4-report-every-packet-via-port && export_line int-report-export-via-port \
  reports_per_s,packets_per_s,ring_full_per_s,send_errors,reports_per_busy_s ""

# AM-PM, muxed marking on a DSCP bit, 10k monitored flows (exact 5-tuple
# rules: the per-flow lookup is one tuple-space hash probe, the time-slot
# lookup a direct table), at the initiator (marks + counts) and at the
# terminator (reads, counts, clears).
$gen gen-traffic --out "$work/ampm.pcap" --count $ampm_frames --flows $ampm_flows --size $size --dst-mac 02:00:00:00:00:02 \
  --src 10.1.0.0 --dst 10.2.0.1
ampm_cfg() { # role [v6]: with v6, each flow number also has an IPv6 rule (HBH)
  local i rules=10000
  [[ -z "${2:-}" ]] || rules=20000
  printf '[ampm]\nnode_id = 9\ninterval = "1s"\nmax_flows = %d\n' $rules
  for i in $(seq 0 9999); do
    printf '[[ampm.flow]]\nname = "f%d"\nflow_mon_id = %d\nrole = "%s"\nmethod = "muxed"\ncarrier = "dscp"\nsrc = "10.1.%d.%d/32"\nproto = "udp"\nsrc_port = %d\n' \
      "$i" "$i" "$1" $((i / 256)) $((i % 256)) $((1024 + i))
    [[ -z "${2:-}" ]] ||
      printf '[[ampm.flow]]\nname = "g%d"\nflow_mon_id = %d\nrole = "%s"\nmethod = "muxed"\ncarrier = "ipv6_hbh"\nsrc = "2001:db8:1::%x/128"\nproto = "udp"\nsrc_port = %d\n' \
        "$i" $((10000 + i)) "$1" $((16 + i)) $((1024 + i))
  done
}
if [[ "$l3fwd_ref" != 0 ]] && { want ampm-initiator-1flow || want ampm-terminator-1flow; }; then
  em_rules "$work/ampm.pcap" "$work/em-ampm.cfg" "$work/em-ampm-v6.cfg"
  for c in ampm-initiator-1flow ampm-terminator-1flow; do
    l3fwd_beside $c l3fwd-em-10k-flows -E "$work/em-ampm.cfg" "$work/em-ampm-v6.cfg"
  done
fi
config xconnect "$work/ampm.pcap" 'peer = "p1"' 'peer = "p0"' "$(ampm_cfg initiator)" >"$work/ampm-i.toml"
run_case ampm-initiator-1flow "$work/ampm.pcap" "$work/ampm-i.toml"
config xconnect "$work/ampm.pcap" 'peer = "p1"' 'peer = "p0"' "$(ampm_cfg terminator)" >"$work/ampm-t.toml"
run_case ampm-terminator-1flow "$work/ampm.pcap" "$work/ampm-t.toml"

# ---- The realistic cases: many hosts and flows, shuffled, each at 64-byte
# frames and at IMIX (64:7, 594:4, 1518:1 on the wire; names end in -imix).
# The 4096-frame traces fit the replay in cache (net_pcap's infinite_rx
# keeps every frame in an mbuf of its own); cases ending in -large replay
# 65536 frames, whose mbufs and flows no longer do. Ratios against peers
# hold only on the same trace.
real() { # out frames extra-gen-args...: a 64-byte and an IMIX trace, OUT and OUT-imix
  local out=$1 n=$2
  shift 2
  $gen gen-traffic --out "$out.pcap" --count "$n" --size $size --shuffle $seed "$@"
  $gen gen-traffic --out "$out-imix.pcap" --count "$n" --sizes $imix --shuffle $seed "$@"
}
run_real() { # name trace config: the 64-byte and the IMIX case
  run_case "$1" "$2.pcap" "$3"
  sed "s|$2.pcap|$2-imix.pcap|" "$3" >"${3%.toml}-imix.toml"
  run_case "$1-imix" "$2-imix.pcap" "${3%.toml}-imix.toml"
}
null_ports() { # first last: net_null ports p<first>..p<last>
  local i
  for ((i = $1; i <= $2; i++)); do printf '[[port]]\nname = "p%d"\ndevice = "net_null%d,no-rx=1"\n' "$i" "$i"; done
}

# Cross-connect: 4096 flows of mixed protocols, versions and hosts (the
# cross-connect reads no header; the sizes are what differ).
real "$work/xc-real" 4096 --flows 4096 --macs 4096 --dst-macs 4096 --tcp-share 0.6 --v6-share 0.2 --vary-dst
config xconnect "$work/xc-real.pcap" 'peer = "p1"' 'peer = "p0"' "" >"$work/xc-real.toml"
ovs_kinds=xconnect run_real xconnect "$work/xc-real" "$work/xc-real.toml"

# Bridge: 4 ports, 4096 sending hosts behind p0 (learned), 4096 receiving
# hosts on 2 VLANs pinned to p1-p3 but for 2 % of them (unknown unicast,
# flooded), 1 % broadcast; 16384 host pairs. Learning only: no host is
# known, every frame floods to the 3 other ports.
real "$work/br-real" 4096 --flows 16384 --macs 4096 --src-mac 02:00:01:00:00:00 \
  --dst-macs 4096 --dst-mac 02:00:02:00:00:00 --vlans 2 --broadcast-share 0.01 --tcp-share 0.6 --v6-share 0.2
real "$work/br-real-large" 65536 --flows 16384 --macs 4096 --src-mac 02:00:01:00:00:00 \
  --dst-macs 4096 --dst-mac 02:00:02:00:00:00 --vlans 2 --broadcast-share 0.01 --tcp-share 0.6 --v6-share 0.2
hosts=$(for ((i = 0; i < 4096 * 98 / 100; i++)); do
  for v in 100 101; do
    printf '[[bridge.static_mac]]\nmac = "02:00:02:%02x:%02x:%02x"\nport = "p%d"\nvlan = %d\n' \
      $((i >> 16)) $(((i >> 8) & 255)) $((i & 255)) $((1 + i % 3)) $v
  done
done)
config bridge "$work/br-real.pcap" "" "" "$(null_ports 2 3)
[bridge]
mac_capacity = 16384
$hosts" >"$work/br-real.toml"
ovs_kinds="normal dl-dst" run_real l2-bridge "$work/br-real" "$work/br-real.toml"
sed "s|$work/br-real.pcap|$work/br-real-large.pcap|" "$work/br-real.toml" >"$work/br-real-large.toml"
ovs_kinds="normal dl-dst" run_real l2-bridge-large "$work/br-real-large" "$work/br-real-large.toml"
config bridge "$work/br-real.pcap" "" "" "$(null_ports 2 3)" >"$work/br-flood.toml"
ovs_kinds=normal run_real l2-flood-3-ports "$work/br-real" "$work/br-flood.toml"

# Router: 10k IPv4 /24 and 2k IPv6 /48 routes via 256 neighbours on 3
# ports, destinations over every route, 20 % IPv6, 60 % TCP, 100k flows of
# Zipf popularity (exponent 1) learned into the flow table.
{
  for ((i = 0; i < 10000; i++)); do printf '20.%d.%d.0/24\n' $((i / 256)) $((i % 256)); done
  for ((i = 0; i < 2000; i++)); do printf '2001:db8:%x::/48\n' $((0x8000 + i)); done
} >"$work/routes.txt"
real "$work/l3-real" 4096 --flows 100000 --zipf 1.0 --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst 20.0.0.1 \
  --tcp-share 0.6 --v6-share 0.2 --dst-spread "$work/routes.txt"
real "$work/l3-real-large" 65536 --flows 100000 --zipf 1.0 --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst 20.0.0.1 \
  --tcp-share 0.6 --v6-share 0.2 --dst-spread "$work/routes.txt"
router_cfg() { # pcap extra-tail
  local i p
  config router "$1" 'ipv4 = ["10.0.1.1/24"]
ipv6 = ["2001:db8:1::1/64"]' 'ipv4 = ["10.0.2.1/24"]
ipv6 = ["2001:db8:f1::1/64"]' "$(for p in 2 3; do
    null_ports "$p" "$p"
    printf 'ipv4 = ["10.0.%d.1/24"]\nipv6 = ["2001:db8:f%d::1/64"]\n' $((p + 1)) "$p"
  done)" true
  for ((i = 0; i < 256; i++)); do
    p=$((1 + i % 3))
    printf '[[neighbour]]\nip = "10.0.%d.%d"\nmac = "02:00:00:03:%02x:%02x"\nport = "p%d"\n' $((p + 1)) $((10 + i / 3)) "$p" "$i" "$p"
  done
  for ((i = 0; i < 48; i++)); do
    p=$((1 + i % 3))
    printf '[[neighbour]]\nip = "2001:db8:f%d::%x"\nmac = "02:00:00:06:%02x:%02x"\nport = "p%d"\n' "$p" $((16 + i / 3)) "$p" "$i" "$p"
  done
  for ((i = 0; i < 10000; i++)); do
    p=$((1 + (i % 256) % 3))
    printf '[[route]]\nprefix = "20.%d.%d.0/24"\nport = "p%d"\nvia = "10.0.%d.%d"\n' $((i / 256)) $((i % 256)) "$p" $((p + 1)) $((10 + (i % 256) / 3))
  done
  for ((i = 0; i < 2000; i++)); do
    p=$((1 + (i % 48) % 3))
    printf '[[route]]\nprefix = "2001:db8:%x::/48"\nport = "p%d"\nvia = "2001:db8:f%d::%x"\n' $((0x8000 + i)) "$p" "$p" $((16 + (i % 48) / 3))
  done
  printf '%s\n' "${2:-}"
}
# l3fwd beside the router cases: on a routes file's prefixes (all to port
# 1; no flow table, no next hop to resolve: what routing alone costs in
# DPDK's own example), for a case stem's cases on a trace and its -imix,
# -large and -large-imix variants, lines <line-prefix>-<case>; each also
# beside the routing-only case of the trace.
l3fwd_routes() { # routes-file trace-stem case-stem line-prefix -L|--lookup=fib [mem-MB]
  local t c
  [[ "$l3fwd_ref" != 0 ]] || return 0
  awk '!/^#/ && NF && !/:/ { print "R" $1 " 1" }' "$1" >"$work/$3-v4.cfg"
  awk '!/^#/ && /:/ { print "R" $1 " 1" }' "$1" >"$work/$3-v6.cfg"
  for t in "$2" "$2-imix" "$2-large" "$2-large-imix"; do
    c=$3${t#"$2"}
    l3fwd_beside "$c" "$4-$c" "$5" "$work/$3-v4.cfg" "$work/$3-v6.cfg" "${6:-}"
    l3fwd_beside "${c/l3-router/l3-router-routing-only}" "$4-$c" "$5" "$work/$3-v4.cfg" "$work/$3-v6.cfg" "${6:-}"
  done
}
# l3fwd-em with a trace's own TCP and UDP 5-tuples as its rules (its hash
# table holds each flow of the trace, as the router's flow table learns
# them), beside the cases given on the trace and its -imix, -large and
# -large-imix variants; lines l3fwd-em-<name>[-imix|...].
l3fwd_flows() { # name trace-stem case-stem...
  local name=$1 stem=$2 t v c hit
  shift 2
  [[ "$l3fwd_ref" != 0 ]] || return 0
  for t in "$stem" "$stem-imix" "$stem-large" "$stem-large-imix"; do
    v=${t#"$stem"} hit=0
    for c in "$@"; do want "$c$v" && hit=1; done
    if ((hit)) && [[ -f "$work/$t.pcap" ]]; then
      em_rules "$work/$t.pcap" "$work/em-$t.cfg" "$work/em-$t-v6.cfg"
      for c in "$@"; do l3fwd_beside "$c$v" "l3fwd-em-$name$v" -E "$work/em-$t.cfg" "$work/em-$t-v6.cfg"; done
    fi
  done
}
l3fwd_routes "$work/routes.txt" l3-real l3-router l3fwd-lpm -L
l3fwd_flows l3-router l3-real l3-router
router_cfg "$work/l3-real.pcap" >"$work/l3-real.toml"
ovs_kinds=routes run_real l3-router "$work/l3-real" "$work/l3-real.toml"
sed "s|$work/l3-real.pcap|$work/l3-real-large.pcap|" "$work/l3-real.toml" >"$work/l3-real-large.toml"
ovs_kinds=routes run_real l3-router-large "$work/l3-real-large" "$work/l3-real-large.toml"
# Routing only: the same trace, routes and neighbours with no flow table
# (nothing learned), the work l3fwd-lpm does; compare with its line.
sed 's/^learn = true$/learn = false/' "$work/l3-real.toml" >"$work/l3-route-only.toml"
run_real l3-router-routing-only "$work/l3-real" "$work/l3-route-only.toml"

# Router with a full-size table (scripts/gen_routes.py: 900k IPv4 and 200k
# IPv6 prefixes of today's Internet table's length mix, through the same 256
# + 48 neighbours, a routes_file): destinations over the table (the file is
# in random order), 20 % IPv6, 60 % TCP; 100k flows (Zipf 1) in the 4096-
# frame trace, 1M in the 65536-frame one. l3fwd loads the same prefixes
# (all to port 1) into rte_fib (l3fwd-fib-...: DIR-24-8, rte_lpm's lookup
# layout); rte_lpm itself takes about 5 minutes a start to load them (its
# add scans every rule of the prefix's length), BENCH_L3FWD_LPM_FULL=1
# measures it too (l3fwd-lpm-...).
if want l3-router-full || want l3-router-full-imix || want l3-router-full-large || want l3-router-full-large-imix; then
  python3 scripts/gen_routes.py --seed "$seed" >"$work/routes-full.txt"
  real "$work/l3-full" 4096 --flows 100000 --zipf 1.0 --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst 20.0.0.1 \
    --tcp-share 0.6 --v6-share 0.2 --dst-spread "$work/routes-full.txt"
  real "$work/l3-full-large" 65536 --flows 1000000 --zipf 1.0 --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst 20.0.0.1 \
    --tcp-share 0.6 --v6-share 0.2 --dst-spread "$work/routes-full.txt"
  # The router case's config with the file in place of its [[route]]s.
  router_cfg "$work/l3-full.pcap" | awk '/^\[\[route\]\]$/ { skip = 3; next } skip > 0 { skip--; next } { print }' |
    sed "/^mode = /a routes_file = \"$work/routes-full.txt\"" >"$work/l3-full.toml"
  # l3fwd's pool and tables for the full table want more memory.
  l3fwd_routes "$work/routes-full.txt" l3-full l3-router-full l3fwd-fib --lookup=fib 3584
  if [[ "${BENCH_L3FWD_LPM_FULL:-0}" != 0 ]]; then
    l3fwd_routes "$work/routes-full.txt" l3-full l3-router-full l3fwd-lpm -L 3584
  fi
  run_real l3-router-full "$work/l3-full" "$work/l3-full.toml"
  sed "s|$work/l3-full.pcap|$work/l3-full-large.pcap|" "$work/l3-full.toml" >"$work/l3-full-large.toml"
  run_real l3-router-full-large "$work/l3-full-large" "$work/l3-full-large.toml"
fi

# INT on the router: the source marks every packet from p0 (five
# instructions); the transit trace carries 1 to 7 hops on 70 % of its flows
# (30 % background without INT), metadata varying per packet.
router_cfg "$work/l3-real.pcap" "$(int_cfg '["p0"]' "[[int.watch]]
name = \"all\"
role = \"source\"
instructions = [\"node_id\", \"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\"]")" >"$work/int-src-real.toml"
run_real int-source "$work/l3-real" "$work/int-src-real.toml"
real "$work/int-real" 4096 --flows 100000 --zipf 1.0 --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst 20.0.0.1 \
  --tcp-share 0.6 --v6-share 0.2 --dst-spread "$work/routes.txt" \
  --int-hops 1..7 --int-instructions "$five" --int-rhc 1 --background-share 0.3
router_cfg "$work/int-real.pcap" "$(int_cfg '[]' '')" >"$work/int-transit-real.toml"
run_real int-transit "$work/int-real" "$work/int-transit-real.toml"
# INT-label (README "INT-label"). intlabel-core: the router case's traffic
# and routes with every port labeling (T = 50 ms, Base B with F1): a
# decision on each packet, a label now and then (compare with l3-router).
# intlabel-core-labeled: every frame already a label packet (1-4 labels,
# DSCP 0x17, the label domain's DS ID, 32-byte items), F1 pushes on each
# (compare with int-transit-dscp: the same frames as classic INT of the
# DSCP domain, a push on each). intlabel-lasthop: the same frames leave by
# an edge port: each labeled, exported and restored (compare with
# int-sink-dscp-report-every-packet, the INT sink reporting each); the
# intlabel-lasthop-reports line accounts for every label report. The core
# cases' [int] is there for the node ID, with transit = false (a node of
# the label domain only); intlabel-core-int-transit is intlabel-core on a
# node that is a classic INT transit too (the INT stage's presence test on
# every packet).
label_cfg() { # edge-ports extra
  printf '[label]\ninterval_ms = 50.0\nedge_ports = %s\n%s\n' "$1" "$2"
}
router_cfg "$work/l3-real.pcap" "$(int_cfg '[]' 'transit = false')
$(label_cfg '[]' '')" >"$work/label-core.toml"
goal_beside intlabel-core l3-router "$work/l3-real" "$work/l3-real.toml"
run_real intlabel-core "$work/l3-real" "$work/label-core.toml"
router_cfg "$work/l3-real.pcap" "$(int_cfg '[]' '')
$(label_cfg '[]' '')" >"$work/label-core-int-transit.toml"
goal_beside intlabel-core-int-transit l3-router "$work/l3-real" "$work/l3-real.toml"
run_real intlabel-core-int-transit "$work/l3-real" "$work/label-core-int-transit.toml"
six=node_id,l1_ports,hop_latency,queue,ingress_ts,egress_ts
real "$work/label-real" 4096 --flows 100000 --zipf 1.0 --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst 20.0.0.1 \
  --tcp-share 0.6 --v6-share 0.2 --dst-spread "$work/routes.txt" \
  --int-hops 1..4 --int-instructions "$six" --int-rhc 4 --int-dscp 0x17 --int-domain-id 0x4c42
real "$work/dscp-int-real" 4096 --flows 100000 --zipf 1.0 --dst-mac "$DUT_MAC" --src 10.0.1.10 --dst 20.0.0.1 \
  --tcp-share 0.6 --v6-share 0.2 --dst-spread "$work/routes.txt" \
  --int-hops 1..4 --int-instructions "$six" --int-rhc 4 --int-dscp 0x17
dscp_int=$'presence = "dscp"'
router_cfg "$work/label-real.pcap" "$(int_cfg '[]' 'transit = false')
$(label_cfg '[]' '')" >"$work/label-labeled.toml"
router_cfg "$work/dscp-int-real.pcap" "$(int_cfg '[]' "$dscp_int")" >"$work/int-transit-dscp.toml"
goal_beside intlabel-core-labeled int-transit-dscp "$work/dscp-int-real" "$work/int-transit-dscp.toml"
run_real intlabel-core-labeled "$work/label-real" "$work/label-labeled.toml"
run_real int-transit-dscp "$work/dscp-int-real" "$work/int-transit-dscp.toml"
config xconnect "$work/label-real.pcap" 'peer = "p1"' 'peer = "p0"' \
  "$(int_cfg '["p1"]' "report_max_packet = ${BENCH_REPORT_PACKET:-1472}
$collector")
$(label_cfg '["p1"]' '')" >"$work/label-lasthop.toml"
config xconnect "$work/dscp-int-real.pcap" 'peer = "p1"' 'peer = "p0"' \
  "$(int_cfg '["p1"]' "$dscp_int
report_max_packet = ${BENCH_REPORT_PACKET:-1472}
$collector")" >"$work/sink-dscp-all.toml"
goal_beside intlabel-lasthop int-sink-dscp-report-every-packet "$work/dscp-int-real" "$work/sink-dscp-all.toml"
run_case intlabel-lasthop "$work/label-real.pcap" "$work/label-lasthop.toml"
lasthop_reports() { # case: the label reports of its rounds, accounted for
  want "$1" || return 0
  python3 - "$1" "$work" "$rounds" "$secs" <<'PY'
import json, os, statistics, sys
case, work, rounds, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def last(path):
    if not os.path.exists(path):
        return None
    lines = open(path).read().splitlines()
    return json.loads(lines[-1])['events'] if lines else None
# A round without its counters is not accounted for.
got = [last(f'{work}/is-{r}.log') for r in range(rounds)]
rows = [r or {} for r in got]
k = ['label_sunk', 'label_exported', 'label_report_ring_full']
m = {x: statistics.median(r.get(x, 0) / secs for r in rows) for x in k}
ok = all(r is not None and r.get('label_sunk', 0) == r.get('label_exported', 0) + r.get('label_report_ring_full', 0)
         for r in got)
def refused(full, sunk):
    return '%.2f' % (full / sunk) if sunk else '-'
# Each round's share of reports the full ring refused, the case's / the
# reference's (the INT sink's, run beside it): a refused report costs the
# worker less than an exported one, so the rounds' ratios follow these.
shares = []
for r, row in enumerate(rows):
    ref = last(f'{work}/is-ref-{r}.log') or {}
    theirs = refused(ref.get('int_report_ring_full', 0), ref.get('int_sunk', 0)) if ref else '-'
    shares.append(refused(row.get('label_report_ring_full', 0), row.get('label_sunk', 0)) + '/' + theirs)
print('case=%s-reports %s accounted=%s refused=%s' % (case, ' '.join('%s_per_s=%.0f' % (x, m[x]) for x in k),
      'yes' if ok else 'NO', ','.join(shares)))
PY
}
lasthop_reports intlabel-lasthop
sed "s|$work/label-real.pcap|$work/label-real-imix.pcap|" "$work/label-lasthop.toml" >"$work/label-lasthop-imix.toml"
run_case intlabel-lasthop-imix "$work/label-real-imix.pcap" "$work/label-lasthop-imix.toml"
lasthop_reports intlabel-lasthop-imix
run_real int-sink-dscp-report-every-packet "$work/dscp-int-real" "$work/sink-dscp-all.toml"

# What GPINT costs the traffic that is not GPINT's: the same transit with
# a collector, without and with [gpint] (the SQR stage's claim check on
# every packet; no probes in the trace).
router_cfg "$work/int-real.pcap" "$(int_cfg '[]' "$collector")" >"$work/int-transit-gpint-off.toml"
run_real int-transit-gpint-off "$work/int-real" "$work/int-transit-gpint-off.toml"
router_cfg "$work/int-real.pcap" "$(int_cfg '[]' "$collector
[gpint]")" >"$work/int-transit-gpint-on.toml"
run_real int-transit-gpint-on "$work/int-real" "$work/int-transit-gpint-on.toml"
# GPINT probes through a transit switch (p0 -> p1, then the monitor; 2
# port counters collected): 65536 distinct requests from 16 monitors, 20 %
# IPv6, each probe's feedback 8 probes later (gpint-transit: copy stored
# and freed; frames counted are probes and feedbacks, so probes/s is half
# of them) and without recovery (gpint-transit-no-recovery: probes only,
# no copy, no feedback). hold_ms = 1: the duplicate filter remembers a
# probe for 2 ms, shorter than a replay of the trace, so each pass
# measures first visits (the gpint line after each case says so).
for fb in feedbacks no-recovery; do
  $gen gen-traffic --out "$work/gpint-$fb.pcap" --gpint-probes --count 65536 --v6-share 0.2 \
    --dst-mac "$DUT_MAC" $([[ $fb == feedbacks ]] && echo --gpint-feedbacks)
done
config xconnect "$work/gpint-feedbacks.pcap" 'peer = "p1"' 'peer = "p0"' "$(int_cfg '[]' "$collector
[gpint]
hold_ms = 1")" >"$work/gpint-transit.toml"
config xconnect "$work/gpint-no-recovery.pcap" 'peer = "p1"' 'peer = "p0"' "$(int_cfg '[]' "$collector
[gpint]
recovery = false")" >"$work/gpint-transit-no-recovery.toml"
gpint_line() { # name: the last round's SQR counters a second
  want "$1" || return 0
  tail -n 1 "$work/is.log" | python3 -c "
import json, sys
e = json.loads(sys.stdin.read())['events']
keys = ['gpint_rx', 'gpint_dup', 'gpint_fb_rx', 'sqr_stored', 'sqr_acked', 'sqr_timeouts', 'sqr_buffer_full']
print('case=%s-gpint %s' % (sys.argv[1], ' '.join('%s_per_s=%.0f' % (k, e.get(k, 0) / $secs) for k in keys)))
" "$1"
}
run_case gpint-transit "$work/gpint-feedbacks.pcap" "$work/gpint-transit.toml"
gpint_line gpint-transit
run_case gpint-transit-no-recovery "$work/gpint-no-recovery.pcap" "$work/gpint-transit-no-recovery.toml"
gpint_line gpint-transit-no-recovery

# INT sink at p1's edge (cross-connect), one report per flow per second:
# 4096 flows, and (large) 100k flows over 131072 frames.
real "$work/sink-real" 4096 --flows 4096 --macs 4096 --dst-macs 4096 --tcp-share 0.6 --v6-share 0.2 --vary-dst \
  --int-hops 5 --int-instructions node_id,l1_ports,hop_latency,queue --int-rhc 3
real "$work/sink-real-large" 131072 --flows 100000 --macs 4096 --dst-macs 4096 --tcp-share 0.6 --v6-share 0.2 --vary-dst \
  --int-hops 5 --int-instructions node_id,l1_ports,hop_latency,queue --int-rhc 3
# The sink's report filter holds every flow (1048576 entries, 8 ways: at
# 262144, the 100k flows' fullest rows still thrash, 20 % more reports), so
# the reports per second are flows / interval: printed after the 64-byte
# case of each (int-sink-reports, int-sink-100k-flows-reports).
config xconnect "$work/sink-real.pcap" 'peer = "p1"' 'peer = "p0"' \
  "$(int_cfg '["p1"]' "report_flow_interval_ms = 1000
report_filter_slots = 1048576
$collector")" >"$work/sink-real.toml"
run_case int-sink "$work/sink-real.pcap" "$work/sink-real.toml"
want int-sink && export_line int-sink-reports reports_per_s,ring_full_per_s " flows=4096 interval_s=1"
sed "s|$work/sink-real.pcap|$work/sink-real-imix.pcap|" "$work/sink-real.toml" >"$work/sink-real-imix.toml"
run_case int-sink-imix "$work/sink-real-imix.pcap" "$work/sink-real-imix.toml"
sed "s|$work/sink-real.pcap|$work/sink-real-large.pcap|" "$work/sink-real.toml" >"$work/sink-real-large.toml"
run_case int-sink-100k-flows "$work/sink-real-large.pcap" "$work/sink-real-large.toml"
want int-sink-100k-flows && export_line int-sink-100k-flows-reports reports_per_s,ring_full_per_s " flows=100000 interval_s=1"
sed "s|$work/sink-real.pcap|$work/sink-real-large-imix.pcap|" "$work/sink-real.toml" >"$work/sink-real-large-imix.toml"
run_case int-sink-100k-flows-imix "$work/sink-real-large-imix.pcap" "$work/sink-real-large-imix.toml"
# INT sink analytics (issue 34) on the 4096 flows: the default 65536 x 12
# flow cache tracking 5 hops, histograms per node, records to the collector.
sed 's|^report_filter_slots = 1048576$|[int.analytics]|' "$work/sink-real.toml" >"$work/sink-analytics-4k.toml"
run_case int-sink-analytics "$work/sink-real.pcap" "$work/sink-analytics-4k.toml"
# The same on the 100k flows, past what the CPU caches hold.
sed 's|^report_filter_slots = 1048576$|[int.analytics]|' "$work/sink-real-large.toml" >"$work/sink-analytics.toml"
run_case int-sink-analytics-100k-flows "$work/sink-real-large.pcap" "$work/sink-analytics.toml"
want int-sink-analytics-100k-flows &&
  export_line int-sink-analytics-100k-flows-reports reports_per_s,ring_full_per_s " flows=100000 interval_s=1"
sed "s|$work/sink-real-large.pcap|$work/sink-real-large-imix.pcap|" "$work/sink-analytics.toml" \
  >"$work/sink-analytics-imix.toml"
run_case int-sink-analytics-100k-flows-imix "$work/sink-real-large-imix.pcap" "$work/sink-analytics-imix.toml"
# And with queue T events: the trace's queue values are uniform over
# 0..4095, so a threshold of 4087 fires on 8 values in 4096 per hop, about
# 1 % of the 5-hop packets.
sed 's|^\[int.analytics\]$|[int.analytics]\n[int.analytics.events.queue]\nthreshold = 4087|' \
  "$work/sink-analytics.toml" >"$work/sink-analytics-events.toml"
run_case int-sink-analytics-events-100k-flows "$work/sink-real-large.pcap" "$work/sink-analytics-events.toml"

# INT sink analytics, issue 34's cases: 5 hops x 4 instructions (node ID,
# hop latency, queue, TX utilisation, as smartnic-int-sink), every value
# drawn per packet and hop (gen-traffic --int-values exp, README
# "Telemetry traces"): flow cache, histograms, queue T events (threshold
# 186: about 1 % of the packets raise one) and a per_flow rule on the
# latency sum (T 20 us: about 1 % of the packets reported). 1k flows with
# Zipf(1.1) packet counts in trains (65536 frames), and 1,048,576 flows one
# packet each on the paper's 2^19 x 12 cache (mbufs and hugepages for the
# whole trace). After each: evictions, events, reports a second, ring full
# and the control core's export figures.
an_gen() { # out flows count extra-gen-args...
  local out=$1 flows=$2 count=$3
  shift 3
  $gen gen-traffic --out "$out" --int-values exp --flows "$flows" --count "$count" \
    --int-instructions "${an_instr:-node_id,hop_latency,queue,tx_util}" --int-rhc 3 --shuffle $seed "$@" 2>/dev/null
}
an_cfg() { # pcap queue-threshold extra-analytics-lines
  config xconnect "$1" 'peer = "p1"' 'peer = "p0"' "$(int_cfg '["p1"]' "$collector
[int.analytics]
$3
[int.analytics.events.queue]
threshold = $2
[[int.detect]]
name = \"all\"
algorithm = \"per_flow\"
metric = \"e2e_latency\"
threshold = 20000")"
}
analytics_line() { # name suffix: the analytics figures of the case just run, medians over its rounds
  for ((r = 0; r < rounds; r++)); do tail -n 1 "$work/is-$r.log"; done | python3 -c "
import json, statistics, sys
rows = []
for line in sys.stdin:
    d = json.loads(line)
    e, a = d['events'], d.get('int_analytics') or {}
    dl = a.get('event_delay', {})
    rows.append({'evictions_per_s': e['int_flow_lru'] / $secs, 'events_per_s': e['int_event_exported'] / $secs,
                 'event_ring_full_per_s': e['int_event_ring_full'] / $secs,
                 'flow_ring_full_per_s': e['int_flow_ring_full'] / $secs,
                 'reports_per_s': d['int_reports']['reports'] / $secs,
                 'events_per_busy_s': a.get('records_per_busy_s', 0),
                 'delay_p50_us': dl.get('p50_ns', 0) / 1e3, 'delay_p99_us': dl.get('p99_ns', 0) / 1e3,
                 'delay_max_us': dl.get('max_ns', 0) / 1e3})
print('case=%s %s%s' % (sys.argv[1], ' '.join('%s=%.0f' % (k, statistics.median(r[k] for r in rows)) for k in rows[0]), sys.argv[2]))
" "$@"
}
if want int-sink-analytics-5x4-1k-flows; then
  an_gen "$work/an-1k.pcap" 1000 65536 --zipf 1.1
  an_cfg "$work/an-1k.pcap" 186 "" >"$work/an-1k.toml"
  # l3fwd-em on the trace's flows: one lookup a packet and no INT, the
  # harness's reference for the sink's absolute goal (15 Mpps).
  l3fwd_flows analytics an-1k int-sink-analytics-5x4-1k-flows
  run_case int-sink-analytics-5x4-1k-flows "$work/an-1k.pcap" "$work/an-1k.toml"
  analytics_line int-sink-analytics-5x4-1k-flows-figures " flows=1000"
fi
if want int-sink-analytics-5x4-1m-flows; then
  an_gen "$work/an-1m.pcap" 1048576 1048576
  an_cfg "$work/an-1m.pcap" 186 $'cache_rows = 524288\ncache_ways = 12\ncache_memory_limit = 4294967296' |
    sed 's/^memory_mb = 2048$/memory_mb = 3584/; s/^mbufs = 200000$/mbufs = 1100000/' >"$work/an-1m.toml"
  saved_tp_mem=("${tp_mem[@]}")
  # (and 8 s more a run: loading the trace and touching the 2.8 GiB cache
  # take about 6 s before the first frame moves)
  tp_mem=("${tp_mem[@]/2048/3584}") tp_mbufs=1100000 secs=$((secs + 8))
  run_case int-sink-analytics-5x4-1m-flows "$work/an-1m.pcap" "$work/an-1m.toml"
  # (per second of the whole run, start-up included)
  analytics_line int-sink-analytics-5x4-1m-flows-figures " flows=1048576"
  tp_mem=("${saved_tp_mem[@]}") tp_mbufs=200000 secs=$((secs - 8))
  rm -f "$work/an-1m.pcap"
fi
# BENCH_SWEEP=1: the 1k-flow analytics case over 1-5 hops x 1-4
# instructions (node ID, then hop latency, queue, TX utilisation), each
# with a `-linerate` line: the 10G line rate in Mpps of the trace's mean
# frame (smartnic-int-sink Fig. 3a).
if [[ "${BENCH_SWEEP:-0}" != 0 ]] && want int-sink-analytics-sweep; then
  instr=(node_id hop_latency queue tx_util)
  for h in 1 2 3 4 5; do
    for k in 1 2 3 4; do
      list=$(IFS=,; echo "${instr[*]:0:k}")
      an_instr=$list an_gen "$work/an-sw.pcap" 1000 65536 --zipf 1.1 --int-hops $h
      an_cfg "$work/an-sw.pcap" 186 "" >"$work/an-sw.toml"
      BENCH_CASES= run_case "int-sink-analytics-sweep-${h}x$k" "$work/an-sw.pcap" "$work/an-sw.toml"
      python3 - "$work/an-sw.pcap" "int-sink-analytics-sweep-${h}x$k" <<'EOF2'
import os, struct, sys
data = open(sys.argv[1], "rb").read()
o, n, total = 24, 0, 0
while o + 16 <= len(data):
    incl = struct.unpack_from("<I", data, o + 8)[0]
    o, n, total = o + 16 + incl, n + 1, total + incl
mean = total / n
# On the wire: the frame, its FCS, preamble and gap.
print("case=%s-linerate mean_frame=%.1f linerate_10g_mpps=%.2f" % (sys.argv[2], mean, 10e9 / ((mean + 24) * 8) / 1e6))
EOF2
    done
  done
fi

# The events' export: the queue T threshold swept on the 1k-flow trace
# (about 0.2, 1, 5, 22, 71 and 100 % of the packets raise events; a hop
# record each hop above it): worker Mpps, events exported and refused by a
# full R_I a second, what one control core exports a second of its work,
# and the delivery delay from the worker's RX to the export.
if want int-analytics-events; then
  [[ -f "$work/an-1k.pcap" ]] || an_gen "$work/an-1k.pcap" 1000 65536 --zipf 1.1
  for t in 234 186 138 90 45 1; do
    an_cfg "$work/an-1k.pcap" $t "" >"$work/an-ev-$t.toml"
    BENCH_CASES= run_case "int-analytics-events-t$t" "$work/an-1k.pcap" "$work/an-ev-$t.toml"
    analytics_line "int-analytics-events-t$t-figures" " queue_threshold=$t"
  done
fi

# Report reduction by per-flow detection on microburst traces (web, cache,
# hadoop; 1 and 1000 flows) x per_hop, per_flow, ewma, noop x thresholds
# 1-200 us, with the recall of the bursts above each threshold: see
# scripts/detect_reduction.py (one replay of each trace a run, not timed).
if want int-detect-reduction; then
  cargo build --release -q --bin intctl
  mkdir -p "$work/detred"
  python3 scripts/detect_reduction.py --bin "$bin" --intctl target/release/intctl --work "$work/detred" --seed $seed
fi

# The analytics' accuracy at full rate: the 1k-flow case's kind of trace
# (262144 packets) replayed once through a busy-polling sink, its
# histograms, flow records, events and reports against the trace's ground
# truth and the independent reference detector; then over the rings'
# capacity, every record delivered or counted: see
# scripts/analytics_accuracy.py (not timed; ok=no on any mismatch).
if want int-sink-analytics-accuracy; then
  cargo build --release -q --bin intctl --bin intcollector
  python3 scripts/analytics_accuracy.py --bin "$bin" --intctl target/release/intctl \
    --collector target/release/intcollector --work "$work/anacc" --seed $seed || true
fi

# AM-PM: the 10k monitored flows of the synthetic case, shuffled, among as
# many unmonitored ones, mixed sizes.
real "$work/ampm-real" $ampm_frames --flows $((ampm_flows * 2)) --dst-mac 02:00:00:00:00:02 \
  --src 10.1.0.0 --dst 10.2.0.1
l3fwd_flows ampm ampm-real ampm-initiator ampm-terminator
config xconnect "$work/ampm-real.pcap" 'peer = "p1"' 'peer = "p0"' "$(ampm_cfg initiator)" >"$work/ampm-i-real.toml"
run_real ampm-initiator "$work/ampm-real" "$work/ampm-i-real.toml"
config xconnect "$work/ampm-real.pcap" 'peer = "p1"' 'peer = "p0"' "$(ampm_cfg terminator)" >"$work/ampm-t-real.toml"
run_real ampm-terminator "$work/ampm-real" "$work/ampm-t-real.toml"

# AM-PM with half the monitored flows in IPv6, marked in a Hop-by-Hop
# AltMark option (the IPv4 half on a DSCP bit): the trace draws each flow's
# version, so each of the 10k monitored flow numbers has a rule for either
# version (20k rules, 10k of them see traffic). The terminator reads marks
# the initiator wrote: its trace is the initiator's output, one pass.
if want ampm-initiator-v6hbh || want ampm-terminator-v6hbh || want ampm-initiator-v6hbh-imix || want ampm-terminator-v6hbh-imix; then
  real "$work/ampm-v6" $ampm_frames --flows $((ampm_flows * 2)) --dst-mac 02:00:00:00:00:02 \
    --src 10.1.0.0 --dst 10.2.0.1 --v6-share 0.5
  config xconnect "$work/ampm-v6.pcap" 'peer = "p1"' 'peer = "p0"' "$(ampm_cfg initiator v6)" >"$work/ampm-i-v6.toml"
  # l3fwd-em on the initiator's trace (the terminator's carries the
  # option, whose next header l3fwd's exact match does not walk).
  l3fwd_flows ampm-v6 ampm-v6 ampm-initiator-v6hbh
  run_real ampm-initiator-v6hbh "$work/ampm-v6" "$work/ampm-i-v6.toml"
  for t in ampm-v6 ampm-v6-imix; do
    # One pass through the initiator (read once, written to a pcap).
    sed -e "s|$work/ampm-v6.pcap|$work/$t.pcap|" -e 's|infinite_rx=1||' \
      -e "s|net_null0,no-rx=1|net_pcap1,tx_pcap=$work/${t/ampm-v6/ampm-v6-marked}.pcap|" "$work/ampm-i-v6.toml" >"$work/$t-mark.toml"
    timeout 60 "$bin" --config "$work/$t-mark.toml" --duration 3 --stats-interval 0 >/dev/null 2>&1 </dev/null || true
  done
  config xconnect "$work/ampm-v6-marked.pcap" 'peer = "p1"' 'peer = "p0"' "$(ampm_cfg terminator v6)" >"$work/ampm-t-v6.toml"
  run_real ampm-terminator-v6hbh "$work/ampm-v6-marked" "$work/ampm-t-v6.toml"
fi
