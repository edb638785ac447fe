#!/usr/bin/env python3
"""The telemetry demo's terminal view of intcollector's --json lines.

  demo_view.py live      one line per INT report, AM-PM interval, sink
                         analytics flow record and event
  demo_view.py summary   the collector's exit summary, a few lines

Reads the lines on stdin; lines that are not JSON pass through unchanged.
"""
import json
import sys


def us(ns):
    return "-" if ns is None else f"{ns / 1000:.1f}"


def ms(ns):
    return "-" if ns is None else f"{ns / 1e6:.2f} ms"


def endpoints(f):
    return f"{f.get('src')}:{f.get('src_port')} > {f.get('dst')}:{f.get('dst_port')}"


def report(v):
    f = v.get("flow", {})
    hops = v.get("hops", [])
    path = " > ".join(str(h.get("node_id", "?")) for h in hops)
    lat = " | ".join(us(h.get("hop_latency_ns")) for h in hops)
    q = " | ".join(str(h.get("queue_occupancy", "-")) for h in hops)
    ts = [h.get("ingress_ts_ns") for h in hops]
    span = f"  path {ms(ts[-1] - ts[0])}" if len(ts) > 1 and None not in ts else ""
    return (f"INT   {endpoints(f)}  "
            f"nodes {path}  hop latency {lat} us  queue {q}{span}")


def mean_us(agg):
    n = (agg or {}).get("count") or 0
    return us(agg.get("sum", 0) / n if n else None)


def flow(v):
    """An int_flow record of the sink analytics (its `hops` is a count, its
    `hop` the tracked hops' aggregates)."""
    hops = v.get("hop", [])
    path = " > ".join(str(h.get("node_id", "?")) for h in hops)
    lat = " | ".join(mean_us(h.get("hop_latency")) for h in hops)
    return (f"FLOW  {endpoints(v.get('flow', {}))}  {v.get('reason')}  {v.get('packets')} packets  nodes {path}  "
            f"mean hop latency {lat} us  mean e2e {mean_us(v.get('e2e_latency'))} us")


def event(v):
    hop = v.get("hop")
    where = "end to end" if hop is None else f"hop {hop} (node {v.get('node_id')})"
    return f"EVENT {','.join(v.get('events', []))} at {where}  {endpoints(v.get('flow', {}))}"


def interval(v):
    pk, loss = v.get("packets") or 0, v.get("loss_packets")
    pct = f" ({100 * loss / pk:.1f} %)" if pk and loss is not None else ""
    part = "  (partial)" if v.get("partial") else ""
    return (f"AM-PM {v.get('flow')}  interval {v.get('interval')}  {pk} packets  loss {loss}{pct}  "
            f"delay {ms(v.get('delay_ns'))}  mean delay {ms(v.get('mean_delay_ns'))}{part}")


def line_of(v):
    """The view's line for one decoded JSON line, or None (histogram
    snapshots and the rest are the dashboard's)."""
    kind = v.get("type")
    if kind == "int_flow":
        return flow(v)
    if kind == "int_event":
        return event(v)
    if kind is None and isinstance(v.get("hops"), list):
        return report(v)
    if "loss_packets" in v and "interval" in v:
        return interval(v)
    return None


def live():
    for line in sys.stdin:
        try:
            v = json.loads(line)
        except ValueError:
            if line.startswith("intcollector:"):
                print(line, end="", flush=True)
            continue
        try:
            out = line_of(v) if isinstance(v, dict) else None
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            # One odd line must not end the view.
            out = f"demo_view: a line it could not show ({type(e).__name__}: {e})"
        if out is not None:
            print(out, flush=True)


def summary():
    for line in sys.stdin:
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if "summary" in v:
            s = v["summary"]
            gaps = sum(g.get("gaps", 0) for g in s.get("sequence", []))
            print(f"INT reports {s.get('reports')} in {s.get('packets')} packets, "
                  f"{gaps} lost (sequence gaps), {s.get('bad_packets')} undecodable")
            for h in s.get("hops", []):
                print(f"  node {h['node_id']}: {h['samples']} samples, hop latency min {us(h['latency_min_ns'])} "
                      f"mean {us(h['latency_mean_ns'])} max {us(h['latency_max_ns'])} us, queue max {h['queue_max']}")
        elif "ampm_summary" in v:
            a = v["ampm_summary"]
            print(f"AM-PM intervals {a.get('intervals_joined')} joined ({a.get('intervals_partial')} partial), "
                  f"loss {a.get('loss_packets')} packets, mean delay {ms(a.get('delay_mean_ns'))}, "
                  f"records lost {a.get('records_lost')}")
        elif "int_flow_summary" in v:
            a = v["int_flow_summary"]
            kinds = lambda d: ", ".join(f"{k} {n}" for k, n in sorted((d or {}).items()))
            print(f"analytics: {a.get('records')} flow records ({kinds(a.get('by_reason')) or 'none'}), "
                  f"{a.get('events')} events ({kinds(a.get('by_event')) or 'none'}), "
                  f"{a.get('hist_lines')} histogram lines, {a.get('records_lost')} lost (sequence gaps)")
        elif "web_summary" in v:
            w = v["web_summary"]
            print(f"dashboard: {w.get('requests')} requests, {w.get('skipped')} points skipped, "
                  f"{w.get('client_dropped')} ticks a browser missed")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "live":
        live()
    elif mode == "summary":
        summary()
    elif mode in ("-h", "--help"):
        print(__doc__)
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
