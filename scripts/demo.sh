#!/usr/bin/env bash
# The telemetry demo (README's first command): no NIC, no hugepages.
#
#   scripts/demo.sh [--web ADDR:PORT] [--seconds N]   INT + AM-PM end to end (root)
#   scripts/demo.sh router [intswitch args...]        the routing demo (any user)
#
# The telemetry demo builds configs/testbed/demo.toml in network namespaces:
# h1 - s1 (INT source, AM-PM initiator) - impaired link - s2 (INT transit) -
# s3 (INT sink, AM-PM terminator) - h2, with intcollector decoding the
# reports and the interval records and serving its dashboard (default
# http://127.0.0.1:8080/). h1 sends 4 IPv4 flows (INT) and 2 IPv6 flows
# (AM-PM) to h2; every 20 s the s1 -> s2 link changes delay and loss.
# Ctrl-C (or --seconds) stops it and prints the collector's summary;
# everything it started is stopped, also when the script is killed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "router" ]]; then
  shift
  scripts/setup.sh
  cargo build --release -q --bin intswitch
  exec target/release/intswitch "$@"
fi

web="127.0.0.1:8080"
seconds=0
while (($#)); do
  case "$1" in
    --web) web="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ $(id -u) -ne 0 ]]; then
  echo "demo: the telemetry demo builds network namespaces and needs root;" >&2
  echo "      'scripts/demo.sh router' runs the routing demo as any user" >&2
  exit 1
fi

scripts/setup.sh
# (INTSWITCH_BIN_DIR set: binaries built elsewhere, e.g. the test suite's.)
if [[ -z "${INTSWITCH_BIN_DIR:-}" ]]; then
  cargo build --release -q --bins
  export INTSWITCH_BIN_DIR="$PWD/target/release"
fi
export TESTBED_WEB="$web"
state="${INTSWITCH_TESTBED_DIR:-/run/intswitch-testbed}/demo"
topo=configs/testbed/demo.toml
t0=$(date +%s)

pids=()
cleaned=0
cleanup() {
  ((cleaned)) && return
  cleaned=1
  trap - INT TERM HUP EXIT
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  python3 scripts/testbed.py down "$topo" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -f "$state/col.log" ]]; then
    echo
    echo "=== summary (intcollector) ==="
    tail -n 20 "$state/col.log" | python3 scripts/demo_view.py summary || true
    if grep '^{' "$state/col.log" | "$INTSWITCH_BIN_DIR/intcollector" plot --in - --out "$state/demo.png" 2>/dev/null; then
      echo "charts (AM-PM loss and delay per interval, hop latency CDF): $state/demo.png"
    fi
  fi
  [[ -n "${watchdog:-}" ]] && kill "$watchdog" 2>/dev/null || true
  echo "demo: stopped; namespaces and processes removed"
}
trap cleanup INT TERM HUP EXIT

# Also cleaned up when this script is killed with SIGKILL: a watchdog in its
# own session waits for this shell to go and then takes the testbed down.
setsid bash -c "while kill -0 $$ 2>/dev/null; do sleep 1; done; python3 scripts/testbed.py down $topo >/dev/null 2>&1" \
  </dev/null >/dev/null 2>&1 &
watchdog=$!

python3 scripts/testbed.py down "$topo" >/dev/null 2>&1 || true
python3 scripts/testbed.py up "$topo"

dests="10.33.2.2:5101,10.33.2.2:5102,10.33.2.2:5103,10.33.2.2:5104,[2001:db8:33:2::2]:5001,[2001:db8:33:2::2]:5002"
long=$((seconds > 0 ? seconds + 5 : 86400))
ip netns exec tb-demo-h2 python3 scripts/udp_traffic.py sink 5101,5102,5103,5104 --seconds "$long" >/dev/null &
pids+=($!)
ip netns exec tb-demo-h2 python3 scripts/udp_traffic.py sink 5001,5002 --v6 --seconds "$long" >/dev/null &
pids+=($!)
ip netns exec tb-demo-h1 python3 scripts/udp_traffic.py send "$dests" --pps 600 --seconds "$long" >/dev/null &
pids+=($!)

echo
echo "demo: up in $(( $(date +%s) - t0 )) s. Dashboard: http://$web/"
echo "demo: h1 sends 600 packets/s to h2: 4 IPv4 flows (INT: s1 source, s2 transit, s3 sink)"
echo "      and 2 IPv6 flows (AM-PM: s1 initiator, s3 terminator). Ctrl-C stops everything."
echo "demo: decoded reports (one per flow a second) and AM-PM intervals follow."
echo
tail -n +1 -F --pid=$$ "$state/col.log" 2>/dev/null | python3 scripts/demo_view.py live &
pids+=($!)

phases=("delay 2ms 200us loss 1%" "delay 5ms 1ms loss 3%" "delay 500us loss 0%")
phase=0
start=$(date +%s)
while :; do
  for _ in $(seq 20); do
    sleep 1
    if ((seconds > 0 && $(date +%s) - start >= seconds)); then exit 0; fi
  done
  phase=$(((phase + 1) % ${#phases[@]}))
  # shellcheck disable=SC2086
  python3 scripts/testbed.py impair demo/s1-s2 ${phases[$phase]} >/dev/null
  echo "demo: the s1 -> s2 link is now: ${phases[$phase]}"
done
