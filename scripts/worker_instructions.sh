#!/usr/bin/env bash
# Instructions per packet of the switch's worker thread, drivers included
# (not a test): `intswitch -c CONFIG` under callgrind for a while, the
# busiest thread's instructions over the packets the ports received, split
# into the PMDs' share (the librte_net_* drivers and the thread-local
# lookups they make) and the switch's own. With a peer, dpdk-testpmd or
# DPDK's l3fwd runs the same way on the trace of the config's net_pcap
# port (as bench.sh runs them: that pcap in, net_null out), so the two
# counts compare what each executes for a packet on the same trace and
# drivers; against the timed ratio of bench.sh, what is left over is
# stalls (cache misses, mispredicted branches), not instructions. Exact
# and repeatable where timings on a shared VM swing by 20 % or more.
#
#   scripts/worker_instructions.sh CONFIG.toml [io|macswap|l3fwd-lpm|l3fwd-em]
#   (a relative path: from the repository root)
#
# CONFIG: any the switch takes (BENCH_KEEP=1 scripts/bench.sh leaves those
# of its cases); it runs with `huge = false` and a file prefix of its own,
# the rest as written. WORKER_SECONDS (default 20) sets each run's length
# under callgrind (start-up takes seconds of it). Needs valgrind.
#
# l3fwd needs L3FWD_BIN (BENCH_L3FWD=1 BENCH_KEEP=1 scripts/bench.sh leaves
# it at <kept folder>/examples/l3fwd/build/l3fwd) and L3FWD_RULES="IPV4
# IPV6", its rule files (that folder's l3-router-v4.cfg l3-router-v6.cfg
# for lpm on the router traces, em-<trace>.cfg em-<trace>-v6.cfg for em).
# Its thread is counted from when it forwards (callgrind_control -i on),
# its packets by its per-packet calls (processx4_step3, four a call; its
# net_pcap port's counters under valgrind fall short of what it sends).
#
# WORKER_CACHE=1 also simulates this machine's L1 data cache and its
# per-core L2 (their sizes from /sys; valgrind's default where unreadable)
# and adds the misses a packet, split the same way: what instructions do
# not show (a table that spills out of L1, a frame read first here). A
# model (no hardware prefetcher, no overlap out of order): a place to
# look; keep a change on a timed A/B (scripts/bench_ab.sh) only.
#
# The switch's own includes the aging sweeps of its flow and MAC tables
# (aging_per_packet): they run by the clock, a slice a millisecond, so
# under valgrind, which slows the packets tens of times and the clock not
# at all, they take a far larger share a packet than at speed (where it
# is well under one instruction).
#
# Prints: who=intswitch|testpmd-<mode>|l3fwd-<lookup> packets=<n>
#   instructions_per_packet=<n> pmd_per_packet=<n> own_per_packet=<n>
#   aging_per_packet=<n>
#   [l1d_misses_per_packet=<n> l1d_misses_pmd=<n> l1d_misses_own=<n>
#    l2_misses_per_packet=<n> l2_misses_pmd=<n> l2_misses_own=<n>]
set -euo pipefail
source "$(dirname "$0")/usage.sh" "$@"
cd "$(dirname "$0")/.."
if (( $# < 1 || $# > 2 )); then
  echo "usage: scripts/worker_instructions.sh CONFIG.toml [io|macswap|l3fwd-lpm|l3fwd-em]" >&2
  exit 2
fi
cfg=$1 peer=${2:-}
[[ -f "$cfg" ]] || { echo "worker_instructions.sh: $cfg: no such file" >&2; exit 2; }
case "$peer" in
  "" | io | macswap) ;;
  l3fwd-lpm | l3fwd-em)
    [[ -x "${L3FWD_BIN:-}" ]] || { echo "worker_instructions.sh: $peer needs L3FWD_BIN, an l3fwd binary (see --help)" >&2; exit 2; }
    read -r -a rules <<<"${L3FWD_RULES:-}"
    (( ${#rules[@]} == 2 )) && [[ -f "${rules[0]}" && -f "${rules[1]}" ]] ||
      { echo "worker_instructions.sh: $peer needs L3FWD_RULES=\"IPV4 IPV6\", two rule files (see --help)" >&2; exit 2; }
    ;;
  *) echo "worker_instructions.sh: peer $peer: io, macswap, l3fwd-lpm or l3fwd-em" >&2; exit 2 ;;
esac
secs=${WORKER_SECONDS:-20}
cache=${WORKER_CACHE:-0}
[[ "$cache" == 0 || "$cache" == 1 ]] || { echo "worker_instructions.sh: WORKER_CACHE=$cache: 0 or 1" >&2; exit 2; }
[[ "$secs" =~ ^[0-9]+$ ]] && (( secs >= 5 )) ||
  { echo "worker_instructions.sh: WORKER_SECONDS=$secs: a whole number of seconds, at least 5" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "worker_instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
# A peer replays the config's net_pcap trace: refused before the switch's
# run (minutes) when there is none.
if [[ -n "$peer" ]]; then
  pcap=$(sed -nE 's/.*rx_pcap=([^,"]+).*/\1/p' "$cfg" | head -n 1)
  [[ -f "$pcap" ]] || { echo "worker_instructions.sh: the config has no net_pcap port with an rx_pcap to replay" >&2; exit 2; }
  # The peer's ports, as bench.sh gives them: the trace in, net_null out.
  vdevs=(--vdev "net_pcap0,rx_pcap=$pcap,infinite_rx=1" --vdev "net_null0,no-rx=1")
fi
out=$(mktemp -d /tmp/intswitch-winstr.XXXXXX)
trap 'rm -rf "$out"' EXIT

# This machine's L1 data cache and per-core L2 as valgrind's --D1 and --LL
# (size,associativity,line); nothing where /sys does not say.
cache_geometry() {
  local d level type size ways line
  for d in /sys/devices/system/cpu/cpu0/cache/index*; do
    level=$(cat "$d/level" 2>/dev/null) type=$(cat "$d/type" 2>/dev/null) size=$(cat "$d/size" 2>/dev/null)
    ways=$(cat "$d/ways_of_associativity" 2>/dev/null) line=$(cat "$d/coherency_line_size" 2>/dev/null)
    [[ "$ways" =~ ^[0-9]+$ && "$line" =~ ^[0-9]+$ && "$size" =~ ^([0-9]+)K$ ]] || continue
    size=$((BASH_REMATCH[1] * 1024))
    case "$level/$type" in
      1/Data) echo "--D1=$size,$ways,$line" ;;
      2/Unified) echo "--LL=$size,$ways,$line" ;;
    esac
  done
}
vg=(--tool=callgrind --separate-threads=yes)
events=Ir nevents=1
if [[ "$cache" == 1 ]]; then
  mapfile -t geometry < <(cache_geometry)
  vg+=(--cache-sim=yes "${geometry[@]}")
  events=Ir,D1mr,D1mw,DLmr,DLmw nevents=5
fi

# The busiest thread's callgrind file of a run.
busiest() {
  for t in "$out/$1".cg-*; do echo "$(sed -nE 's/^totals: ([0-9]+).*/\1/p' "$t") $t"; done | sort -n | tail -n 1 | cut -d' ' -f2
}
# That file's counts (instructions, and with WORKER_CACHE the misses),
# split by object: prints the totals, then the PMDs' share (their code
# and ld.so's thread-local lookups, which only the drivers' mbuf frees
# and allocations make per packet), then the instructions of the tables'
# aging sweeps (FixedMap::sweep, part of the switch's own).
split() {
  local f
  f=$(busiest "$1")
  callgrind_annotate --show="$events" --show-percs=no --threshold=100 --auto=no "$f" 2>/dev/null | python3 -c '
import re, sys
n = int(sys.argv[1])
total, pmd, aging = [0] * n, [0] * n, 0
for line in sys.stdin:
    t = line.split()
    if len(t) <= n or not all(re.fullmatch(r"[\d,]+|\.", v) for v in t[:n]):
        continue
    counts = [0 if v == "." else int(v.replace(",", "")) for v in t[:n]]
    what = " ".join(t[n:])
    if "PROGRAM TOTALS" in what:
        total = counts
    elif "librte_net_" in what or "ld-linux" in what:
        pmd = [a + b for a, b in zip(pmd, counts)]
    elif re.search(r":dataplane::fixed_map::FixedMap<[^>]*>::sweep\b", what):
        aging += counts[0]
print(*total, *pmd, aging)' "$nevents"
}

report() { # who packets "totals pmd aging"
  (( $2 > 0 )) || { echo "worker_instructions.sh: $1 received no packets" >&2; exit 1; }
  # Ir [D1mr D1mw DLmr DLmw], the totals then the PMDs', then the aging's
  # Ir: L1 misses are reads and writes, L2 (valgrind's last level) the same.
  awk -v w="$1" -v p="$2" -v c="$3" 'BEGIN {
    k = split(c, v, " "); n = (k - 1) / 2
    printf "who=%s packets=%d instructions_per_packet=%.1f pmd_per_packet=%.1f own_per_packet=%.1f aging_per_packet=%.1f", w, p, v[1] / p, v[n + 1] / p, (v[1] - v[n + 1]) / p, v[k] / p
    if (n == 5) {
      l1 = v[2] + v[3]; l1d = v[7] + v[8]; l2 = v[4] + v[5]; l2d = v[9] + v[10]
      printf " l1d_misses_per_packet=%.2f l1d_misses_pmd=%.2f l1d_misses_own=%.2f", l1 / p, l1d / p, (l1 - l1d) / p
      printf " l2_misses_per_packet=%.2f l2_misses_pmd=%.2f l2_misses_own=%.2f", l2 / p, l2d / p, (l2 - l2d) / p
    }
    printf "\n" }'
}

sed -E "s/^huge = true/huge = false/; s/^file_prefix = .*/file_prefix = \"winstr-$$\"/" "$cfg" >"$out/cfg.toml"
cargo build --release -q --bin intswitch
valgrind "${vg[@]}" --callgrind-out-file="$out/is.cg" \
  target/release/intswitch -c "$out/cfg.toml" --duration "$secs" --json >"$out/is.json" 2>"$out/is.log" ||
  { tail -n 20 "$out/is.log" >&2; exit 1; }
packets=$(tail -n 1 "$out/is.json" | python3 -c 'import json, sys; print(sum(p["rx_packets"] for p in json.load(sys.stdin)["ports"]))')
report intswitch "$packets" "$(split is)"

[[ -n "$peer" ]] || exit 0
if [[ "$peer" == l3fwd-* ]]; then
  prefix=winstr-l3-$$
  lookup=-E
  [[ "$peer" == l3fwd-lpm ]] && lookup=-L
  valgrind "${vg[@]}" --instr-atstart=no --callgrind-out-file="$out/l3.cg" \
    "$L3FWD_BIN" -l 1 --no-huge -m 2048 --no-pci --file-prefix "$prefix" --log-level=error "${vdevs[@]}" -- \
    -p 0x3 --config "(0,0,1),(1,0,1)" --parse-ptype "$lookup" \
    --rule_ipv4 "${rules[0]}" --rule_ipv6 "${rules[1]}" >"$out/l3.log" 2>&1 </dev/null &
  pid=$!
  # Counted from once it has sent (its telemetry socket answers) until
  # before the stop.
  python3 - "/var/run/dpdk/$prefix/dpdk_telemetry.v2" "$secs" "$pid" <<'PY' ||
import json, os, socket, subprocess, sys, time
path, secs, pid = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def sent():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    s.recv(1024)
    s.send(b"/ethdev/stats,1")
    n = json.loads(s.recv(65536))["/ethdev/stats"]["opackets"]
    s.close()
    return n
for _ in range(1200):  # up to 10 minutes to start under valgrind (a large rule set loads slowly)
    os.kill(int(pid), 0)
    try:
        if sent() > 0:
            break
    except OSError:
        pass
    time.sleep(0.5)
else:
    sys.exit("l3fwd did not start forwarding")
subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
time.sleep(secs)
subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
PY
    { kill -INT "$pid" 2>/dev/null; wait "$pid"; tail -n 20 "$out/l3.log" >&2; exit 1; }
  kill -INT "$pid"
  wait "$pid" || true
  # processx4_step3's calls, from each of its callers.
  packets=$(callgrind_annotate --show=Ir --tree=caller "$(busiest l3)" 2>/dev/null | python3 -c '
import re, sys
calls = pending = 0
for line in sys.stdin:
    m = re.match(r"\s*[\d,]+ \([^)]*\)\s+<\s.*\(([\d,]+)x\)", line)
    if m:
        pending += int(m.group(1).replace(",", ""))
        continue
    if re.match(r"\s*[\d,]+ \([^)]*\)\s+\*\s.*:processx4_step3 ", line):
        calls += pending
    pending = 0
print(calls * 4)')
  report "$peer" "${packets:-0}" "$(split l3)"
  exit 0
fi
mbufs=$(sed -nE 's/^mbufs = ([0-9]+)/\1/p' "$cfg" | head -n 1)
# At the switch's RX burst, as bench.sh runs it (testpmd's default is 32).
burst=$(sed -nE 's/^burst = ([0-9]+).*/\1/p' "$cfg" configs/reference.toml | head -n 1)
timeout -s INT $((secs + 30)) valgrind "${vg[@]}" --callgrind-out-file="$out/tp.cg" \
  dpdk-testpmd -l 0-1 --no-huge -m 2048 --no-pci --file-prefix "winstr-tp-$$" "${vdevs[@]}" --log-level=error -- \
  --forward-mode="$peer" --burst="$burst" --stats-period 5 --total-num-mbufs="${mbufs:-200000}" --no-lsc-interrupt \
  --nb-cores=1 --rxq=1 --txq=1 >"$out/tp.log" 2>&1 </dev/null || true
# Port 0's RX total at exit: the packets testpmd forwarded.
packets=$(sed -nE 's/.*RX-packets: *([0-9]+).*/\1/p' "$out/tp.log" | sort -n | tail -n 1)
report "testpmd-$peer" "${packets:-0}" "$(split tp)"
