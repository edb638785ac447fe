#!/usr/bin/env python3
"""int-sink-analytics-accuracy (scripts/bench.sh; not a test): what the INT
sink's analytics export when a trace goes through at full rate, against the
trace's ground truth (issue 34, "accuracy run").

The trace is issue 34's 1k-flow case (gen-traffic --int-values exp: 1000
flows with Zipf(1.1) packet counts, 5 hops x node ID, hop latency, queue,
TX utilisation, values drawn per packet and hop) with its ground truth
(histograms, per-flow aggregates). A sink whose worker busy-polls (no idle
mode) replays it once from net_pcap, as fast as the worker takes it, with
the benchmark's analytics (queue T events at 186, a per_flow rule on the
latency sum at 20 us), exports to intcollector, flushes its flows and
stops. Two runs:

  below: the default rings. Histograms (the stop snapshot) must equal the
         truth bin for bin (error 0.00 %), the flow records the truth's
         aggregates, the events and reports what tests/telemetry_ref.py
         (the independent reference detector) computes from the same pcap.
  above: a queue threshold that raises about 22 % of the packets' events
         (90) into an R_I of 64 records, and a flow cache of 64 x 1 entries
         into an R_G of 16: more than the rings hold. Histograms must still
         equal the truth, and each step accounts for what it lost: every
         event the reference computes was taken by R_I or counted
         int_event_ring_full, every entry that left the cache (LRU, flush)
         taken by R_G or counted int_flow_ring_full, the control core sent
         all that the rings took, and every record it sent reached
         intcollector or is one of its counted sequence gaps (its socket's
         drops when it falls behind, as it does on long traces).

The switch runs until every packet is sunk; intcollector until it has
printed every record the switch sent, or nothing more for 5 s.

Printed per run:

  case=int-sink-analytics-accuracy run=below packets=P sunk=P rx_missed=0
       hist_bins=B hist_error_pct=0.00 flows=F/F flows_equal=yes
       events=E/E events_equal=yes reports=R/R reports_equal=yes
       collector_lost=0 ok=yes
  case=int-sink-analytics-accuracy run=above ... hist_error_pct=0.00
       events_expected=E events_ring_full=N events_delivered=D
       events_accounted=yes flows_left=L flows_ring_full=N
       flows_delivered=D flows_accounted=yes records_sent=S
       records_delivered=D delivery_accounted=yes collector_lost=G ok=yes

--packets, --flows and --seed size the trace; --idle runs the worker in
idle mode (it still takes frames as fast as it can while they come; for a
smoke run on a machine whose cores are shared, as the test suite's).

hist_error_pct: sum over every (node, metric, bin) of |exported - truth|
over the truth's total count, in percent. ok=no (and exit status 1) when a
check fails.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from detect_reduction import sink_config

METRICS = ["hop_latency", "queue", "tx_util"]
# The switch's default bins (README "INT sink analytics"): (kind, width
# or sub). The last bin's count is not needed for its lower edge.
BINS = {
    "hop_latency": ("log2", 8),
    "e2e_latency": ("log2", 8),
    "queue": ("linear", 1),
    "tx_util": ("linear", 100),
}


def lower_edge(metric, i):
    kind, p = BINS[metric]
    if kind == "linear":
        return i * p
    return i if i < p else (p + i % p) << (i // p - 1)


def config(args, pcap, sock, listen, queue_t, extra):
    return sink_config(
        "anacc",
        pcap,
        sock,
        args.idle,
        "",
        f"""[[int.collector]]
address = "{listen}"
[int.analytics]
{extra}
[int.analytics.events.queue]
threshold = {queue_t}
[[int.detect]]
name = "all"
algorithm = "per_flow"
metric = "e2e_latency"
threshold = 20000
""",
    )


def records_sent(final):
    """The analytics records the switch's control core sent its collectors."""
    return sum(c["records"] for c in final.get("int_analytics", {}).get("collectors", []))


def intctl(args, sock, *cmd):
    q = subprocess.run([args.intctl, "--socket", sock, "--json", *cmd], capture_output=True, text=True)
    return json.loads(q.stdout) if q.returncode == 0 else None


def wait(what, f, secs=120):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        v = f()
        if v:
            return v
        time.sleep(0.1)
    sys.exit("analytics_accuracy: %s: not in %d s" % (what, secs))


def run(args, work, name, pcap, packets, queue_t, extra):
    """One replay: the switch's final JSON line and intcollector's lines."""
    sock = os.path.join(work, name + ".sock")
    listen = "127.0.0.1:%d" % (20000 + (os.getpid() + len(name)) % 30000)
    conf = os.path.join(work, name + ".toml")
    open(conf, "w").write(config(args, pcap, sock, listen, queue_t, extra))
    # (Into a file: a pipe nobody reads until the end would stall it.)
    col_out = open(os.path.join(work, name + ".collector.jsonl"), "w+")
    col = subprocess.Popen(
        [args.collector, "--listen", listen, "--json", "--rcvbuf", str(64 << 20), "--duration", "300"],
        stdout=col_out,
        stderr=subprocess.DEVNULL,
    )
    sw = None
    try:
        time.sleep(0.3)
        sw = subprocess.Popen(
            [args.bin, "--config", conf, "--json", "--stats-interval", "0", "--duration", "280"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

        def sunk():
            if sw.poll() is not None:
                sys.exit("analytics_accuracy: the switch stopped early")
            s = intctl(args, sock, "show", "int")
            return s is not None and s["counters"].get("int_sunk") == packets

        wait("every packet sunk", sunk)
        # Every entry out, then the stop snapshot of the histograms.
        intctl(args, sock, "int", "flows", "flush")

        def flushed():
            a = intctl(args, sock, "show", "int", "analytics")
            return a is not None and a["counters"].get("int_flow_flushed", 0) > 0

        wait("the flush", flushed)
        time.sleep(0.5)
        sw.send_signal(signal.SIGTERM)
        final = json.loads(sw.communicate(timeout=60)[0].strip().splitlines()[-1])
        sw = None
        # intcollector prints more slowly than the switch sends: stopped
        # early, it would leave the last records in its socket. Until it
        # has printed every record the switch sent, or printed nothing
        # more for 5 s (the rest lost, which the check then shows).
        sent = records_sent(final)
        size, still = -1, time.monotonic()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and time.monotonic() - still < 5:
            text = open(col_out.name, "rb").read()
            if text.count(b'"type":"int_') >= sent:
                break
            if len(text) != size:
                size, still = len(text), time.monotonic()
            time.sleep(0.5)
    finally:
        if sw is not None:
            sw.kill()
            sw.wait()
        col.send_signal(signal.SIGTERM)
        col.wait(timeout=60)
    col_out.seek(0)
    lines = []
    for l in col_out:
        try:
            lines.append(json.loads(l))
        except ValueError:
            pass
    return final, lines


def hist_error(truth, records):
    """(bins compared, error %): the last snapshot of each histogram
    against the truth's counts."""
    got = {}
    for v in records:
        if v.get("type") != "int_hist":
            continue
        # (A snapshot comes in chunks of bins, each cumulative.)
        h = got.setdefault((v["node_id"], v["metric"]), {})
        for i, c in enumerate(v["counts"]):
            e = lower_edge(v["metric"], v["first"] + i)
            if c:
                h[e] = c
            else:
                h.pop(e, None)
    want = {(h["node_id"], h["metric"]): {e: c for e, c in h["counts"]} for h in truth["histograms"]}
    diff = total = bins = 0
    for k in set(got) | set(want):
        g, w = got.get(k, {}), want.get(k, {})
        for e in set(g) | set(w):
            bins += 1
            diff += abs(g.get(e, 0) - w.get(e, 0))
            total += w.get(e, 0)
    return bins, 100.0 * diff / max(total, 1)


def flow_view(v):
    f = v["flow"]
    return json.dumps(
        {
            "flow": [f["src"], f["dst"], f["proto"], f["src_port"], f["dst_port"]],
            "packets": v["packets"],
            "hop": [[h["node_id"]] + [[h[m]["last"], h[m]["sum"]] for m in METRICS] for h in v["hop"]],
            "e2e": [v["e2e_latency"]["last"], v["e2e_latency"]["sum"]],
        },
        sort_keys=True,
    )


def truth_flow_view(f):
    return json.dumps(
        {
            "flow": [f["flow"][k] for k in ("src", "dst", "proto", "src_port", "dst_port")],
            "packets": f["packets"],
            "hop": [[h["node_id"]] + [[h[m]["last"], h[m]["sum"]] for m in METRICS] for h in f["hop"]],
            "e2e": [f["e2e_latency"]["last"], f["e2e_latency"]["sum"]],
        },
        sort_keys=True,
    )


def event_view(v):
    f = v["flow"]
    if v["hop"] is None:
        vals, prev = [v["e2e_latency"]], [v["e2e_latency_prev"]]
    else:
        vals, prev = [v[m] for m in METRICS], [v["prev"][m] for m in METRICS]
    return json.dumps([f["src"], f["dst"], f["proto"], f["src_port"], f["dst_port"], v["hop"], v["node_id"], v["bits"], vals, prev])


def reference(args, pcap, queue_t):
    out = subprocess.run(
        ["python3", args.reference, "detect", "--pcap", pcap, "--event", "queue:%d:0" % queue_t, "--rule", "per_flow:e2e_latency:20000"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="intswitch")
    ap.add_argument("--intctl", required=True)
    ap.add_argument("--collector", required=True, help="intcollector")
    ap.add_argument("--reference", default=os.path.join(os.path.dirname(__file__), "..", "tests", "telemetry_ref.py"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--packets", type=int, default=262144, help="asked of gen-traffic (it writes about that many)")
    ap.add_argument("--flows", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", default="below,above")
    ap.add_argument("--idle", action="store_true", help="the worker in idle mode (a smoke run beside other busy processes)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    pcap, truth_path = os.path.join(args.work, "acc.pcap"), os.path.join(args.work, "acc.json")
    g = [args.bin, "gen-traffic", "--out", pcap, "--int-values", "exp", "--flows", str(args.flows), "--zipf", "1.1"]
    g += ["--count", str(args.packets), "--int-instructions", "node_id,hop_latency,queue,tx_util"]
    g += ["--int-rhc", "3", "--shuffle", str(args.seed), "--truth", truth_path]
    subprocess.run(g, check=True, stderr=subprocess.DEVNULL)
    truth = json.load(open(truth_path))
    packets = truth["packets"]
    failed = False
    for name in args.runs.split(","):
        if name == "below":
            queue_t, extra = 186, ""
        elif name == "above":
            queue_t = 90
            extra = "cache_rows = 64\ncache_ways = 1\nevent_ring_size = 64\nflow_ring_size = 16"
        else:
            sys.exit("analytics_accuracy: --runs: below or above, not %s" % name)
        want = reference(args, pcap, queue_t)
        final, lines = run(args, args.work, name, pcap, packets, queue_t, extra)
        ev = final["events"]
        records = [v for v in lines if str(v.get("type", "")).startswith("int_")]
        summary = next((v["int_flow_summary"] for v in lines if "int_flow_summary" in v), {})
        # Records the switch sent, and those intcollector counts lost (its
        # sequence gaps: the socket's drops when it falls behind).
        sent = records_sent(final)
        lost = summary.get("records_lost", 0)
        rx_missed = sum(p["ethdev"]["imissed"] + p["ethdev"]["rx_nombuf"] for p in final["ports"])
        sunk = final["int"]["counters"]["int_sunk"] if "int" in final else ev["int_sunk"]
        bins, err = hist_error(truth, records)
        got_events = sorted(event_view(v) for v in records if v["type"] == "int_event")
        want_events = sorted(json.dumps(e) for e in want["events"])
        flows = [v for v in records if v["type"] == "int_flow"]
        ok = err == 0 and rx_missed == 0 and sunk == packets
        line = "case=int-sink-analytics-accuracy run=%s packets=%d sunk=%d rx_missed=%d hist_bins=%d hist_error_pct=%.2f" % (
            name,
            packets,
            sunk,
            rx_missed,
            bins,
            err,
        )
        if name == "below":
            got_f = sorted(flow_view(v) for v in flows)
            want_f = sorted(truth_flow_view(f) for f in truth["flow"])
            got_r = sorted(v["ip_id"] for v in lines if "flags" in v)
            want_r = sorted(i % 65536 for i in want["rules"]["per_flow:e2e_latency:20000"])
            checks = {"flows": got_f == want_f, "events": got_events == want_events, "reports": got_r == want_r}
            ok = ok and all(checks.values()) and lost == 0 and len(records) == sent
            ok = ok and ev["int_event_ring_full"] == 0 and ev["int_flow_ring_full"] == 0
            line += " flows=%d/%d flows_equal=%s events=%d/%d events_equal=%s reports=%d/%d reports_equal=%s" % (
                len(got_f),
                len(want_f),
                "yes" if checks["flows"] else "no",
                len(got_events),
                len(want_events),
                "yes" if checks["events"] else "no",
                len(got_r),
                len(want_r),
                "yes" if checks["reports"] else "no",
            )
        else:
            # Each step accounts for what it lost: every expected event
            # taken by R_I or refused full (int_event_ring_full), every
            # entry that left the cache taken by R_G or refused full; the
            # control core sends all that the rings took; and what it sent
            # reached intcollector or shows as its sequence gap.
            ia = final.get("int_analytics", {})
            e_ok = ev["int_event_exported"] + ev["int_event_ring_full"] == len(want_events)
            e_ok = e_ok and ev["int_event_exported"] == ia.get("events")
            left = ev["int_flow_lru"] + ev["int_flow_flushed"] + ev.get("int_flow_stopped", 0) - ev.get("int_flow_empty", 0)
            f_ok = ev["int_flow_exported"] + ev["int_flow_ring_full"] == left and ev["int_flow_exported"] == ia.get("records")
            d_ok = len(records) + lost == sent
            ok = ok and e_ok and f_ok and d_ok
            line += (
                " events_expected=%d events_ring_full=%d events_delivered=%d events_accounted=%s"
                " flows_left=%d flows_ring_full=%d flows_delivered=%d flows_accounted=%s"
                " records_sent=%d records_delivered=%d delivery_accounted=%s"
            ) % (
                len(want_events),
                ev["int_event_ring_full"],
                len(got_events),
                "yes" if e_ok else "no",
                left,
                ev["int_flow_ring_full"],
                len(flows),
                "yes" if f_ok else "no",
                sent,
                len(records),
                "yes" if d_ok else "no",
            )
        line += " collector_lost=%d ok=%s" % (lost, "yes" if ok else "no")
        print(line, flush=True)
        failed |= not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
