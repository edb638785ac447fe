#!/usr/bin/env python3
"""int-detect-reduction (scripts/bench.sh; not a test): how far per-flow
event detection cuts the reports an INT sink sends, and whether it still
reports every microburst (int-event-detection section IV-B).

For each microburst trace (gen-traffic --int-values web|cache|hadoop, one
flow and 1000 flows, 5 hops: README "Telemetry traces") and each algorithm
(per_hop on each hop's latency; per_flow and ewma on the latency sum; noop;
rising, the cnf rule "hop_latency.max > T AND hop_latency.max.delta > R":
some hop above T and the highest hop latency up by more than R, --rise-us,
since the flow's previous packet) and threshold, a sink replays the trace once (net_pcap) with that one
[[int.detect]] rule and sends its reports through a DPDK port into a pcap
(no socket buffer to lose them in). Printed per run:

  case=int-detect-reduction trace=web flows=1 algorithm=per_flow threshold_us=10
       packets=P reports=R reduction=P/R bursts=B recall=H/B

reports: the reports the switch sent; bursts: the trace's bursts whose
queueing delay rose by more than the threshold above the delay before them
(ground truth); recall: the share of those with a report on one of their
packets (the report's inner IPv4 ID is the packet's index). A threshold no
burst exceeds prints recall=n/a.
"""

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import time


def reported_ids(path):
    """The inner IPv4 IDs of every report in a pcap of TR v2.0 packets."""
    data = open(path, "rb").read()
    o, ids = 24, []
    while o + 16 <= len(data):
        incl = struct.unpack_from("<I", data, o + 8)[0]
        f = data[o + 16 : o + 16 + incl]
        o += 16 + incl
        if len(f) < 42 + 8 or f[12:14] != b"\x08\x00" or f[23] != 17:
            continue
        p = f[14 + (f[14] & 0xF) * 4 + 8 :]
        r = 8
        while r + 4 <= len(p):
            length, md_len = p[r + 1], p[r + 2]
            end = len(p) if length == 0xFF else r + 4 + 4 * length
            inner = p[r + 4 + 8 + 4 * md_len : end]
            if len(inner) >= 20 and inner[12:14] == b"\x08\x00":
                ids.append(struct.unpack_from("!H", inner, 18)[0])
            r = end
    return ids


def rule(algo, thr_ns, rise_ns):
    """The [[int.detect]] rule (and the [[int.expr]] it names) of `algo`."""
    if algo == "rising":
        expr = "hop_latency.max > %d AND hop_latency.max.delta > %d" % (thr_ns, rise_ns)
        return '[[int.expr]]\nname = "rise"\nexpr = "%s"\n\n[[int.detect]]\nname = "r"\nalgorithm = "cnf"\nexpr = "rise"\n' % expr
    metric = "hop_latency" if algo == "per_hop" else "e2e_latency"
    r = '[[int.detect]]\nname = "r"\nalgorithm = "%s"\n' % algo
    if algo != "noop":
        r += 'metric = "%s"\nthreshold = %d\n' % (metric, thr_ns)
    return r


def sink_config(name, pcap, sock, idle, ports, int_tail):
    """A sink's config: p0 replays `pcap` once into p1, the INT edge
    (node 9); `ports` more [[port]] sections, `int_tail` the rest of
    [int] (collectors, analytics, rules). analytics_accuracy.py uses it too."""
    return f"""name = "{name}"
mode = "xconnect"
[eal]
lcores = "0-1"
memory_mb = 512
file_prefix = "{name}-{os.getpid()}"
log_level = "error"
[dataplane]
idle = {"true" if idle else "false"}
mbufs = 16383
[flow_table]
learn = false
[control]
socket = "{sock}"
metrics = ""
[[port]]
name = "p0"
device = "net_pcap0,rx_pcap={pcap}"
peer = "p1"
[[port]]
name = "p1"
device = "net_null0,no-rx=1"
peer = "p0"
{ports}[int]
node_id = 9
edge_ports = ["p1"]
{int_tail}"""


def run(args, work, pcap, packets, algo, thr_ns):
    sock = os.path.join(work, "sw.sock")
    out = os.path.join(work, "reports.pcap")
    ports = f"""[[port]]
name = "p2"
device = "net_pcap2,tx_pcap={out}"
peer = "p2"
"""
    cfg = sink_config(
        "detred",
        pcap,
        sock,
        True,
        ports,
        f"""[[int.collector]]
address = "10.99.0.2:32766"
port = "p2"
mac = "02:00:00:00:00:99"
bind = "10.99.0.1:32766"
[int.analytics]
histogram_nodes = 0

{rule(algo, thr_ns, args.rise_us * 1000)}""",
    )
    conf = os.path.join(work, "c.toml")
    open(conf, "w").write(cfg)
    sw = subprocess.Popen(
        [args.bin, "--config", conf, "--json", "--stats-interval", "0", "--duration", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 110
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if sw.poll() is not None:
                sys.exit("detect_reduction: the switch stopped early")
            q = subprocess.run([args.intctl, "--socket", sock, "--json", "show", "int"], capture_output=True, text=True)
            if q.returncode == 0 and json.loads(q.stdout)["counters"].get("int_sunk") == packets:
                break
        else:
            sys.exit("detect_reduction: the trace was not sunk in time")
    finally:
        sw.send_signal(signal.SIGTERM)
        final = json.loads(sw.communicate(timeout=60)[0].strip().splitlines()[-1])
    return final["int_reports"]["reports"], reported_ids(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="intswitch")
    ap.add_argument("--intctl", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--traces", default="web,cache,hadoop")
    ap.add_argument("--flows", default="1,1000")
    ap.add_argument("--algorithms", default="per_hop,per_flow,ewma,rising,noop")
    ap.add_argument("--rise-us", type=int, default=2, help="rising: R, the rise since the flow's previous packet (us)")
    ap.add_argument("--thresholds-us", default="1,2,5,10,20,50,100,200")
    ap.add_argument("--packets", type=int, default=65000, help="at most 65536 (reports name packets by IPv4 ID)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.packets > 65536:
        sys.exit("--packets: at most 65536")
    for model in args.traces.split(","):
        for flows in map(int, args.flows.split(",")):
            pcap = os.path.join(args.work, "%s-%d.pcap" % (model, flows))
            truth_path = pcap + ".json"
            g = [args.bin, "gen-traffic", "--out", pcap, "--int-values", model, "--flows", str(flows)]
            g += ["--count", str(args.packets), "--int-instructions", "node_id,hop_latency,queue,tx_util"]
            g += ["--int-rhc", "3", "--shuffle", str(args.seed), "--truth", truth_path]
            subprocess.run(g, check=True, stderr=subprocess.DEVNULL)
            truth = json.load(open(truth_path))
            packets = truth["packets"]
            for algo in args.algorithms.split(","):
                for t_us in map(int, args.thresholds_us.split(",")) if algo != "noop" else [0]:
                    reports, ids = run(args, args.work, pcap, packets, algo, t_us * 1000)
                    hit = set(ids)
                    above = [b for b in truth["bursts"] if b["peak_ns"] - b["pre_ns"] > t_us * 1000]
                    found = sum(1 for b in above if any(i % 65536 in hit for i in range(b["first"], b["last"] + 1)))
                    print(
                        "case=int-detect-reduction trace=%s flows=%d algorithm=%s threshold_us=%d packets=%d "
                        "reports=%d reduction=%.1f bursts=%d recall=%s collected=%d"
                        % (
                            model,
                            flows,
                            algo,
                            t_us,
                            packets,
                            reports,
                            packets / max(reports, 1),
                            len(above),
                            "%.3f" % (found / len(above)) if above else "n/a",
                            len(ids),
                        ),
                        flush=True,
                    )


if __name__ == "__main__":
    main()
