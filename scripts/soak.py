#!/usr/bin/env python3
"""Soak: every role in turn on vdevs (net_pcap replaying a realistic trace
into net_null), at full rate, under control-plane churn, with checks.

For each role a switch runs until it has received --packets frames (and
was sampled 6 times) or --minutes passed, whichever comes first. Meanwhile,
once a second, the churn (through intctl, as an operator would) adds and
removes what the role has: routes and neighbours (router, INT source),
exact flows (every role), INT watch rules (INT roles), AM-PM flows (AM-PM
roles), the report export paused and resumed (INT sink), the analytics'
event thresholds, detection rules and CNF expressions changed and the flow
cache flushed (INT sink with analytics), the label shift (INT-label; at
the last hop also the report export paused and resumed and the ports'
label state shown), the clone buffer shown (GPINT transit), and a capture
is started and ends every other second.
Every second the switch's mempool use and the process's RSS are sampled.

A role passes when:
  - the switch exits 0 (no crash) and received at least the packets asked;
  - its counters add up: rx == tx - injected + drops over all ports (a
    GPINT transit's feedbacks count as injected; the feedbacks, duplicate
    and delivered probes it takes count beside the drops), and every drop
    has its reason;
  - no mbuf leaked: after every worker stopped and every port closed, no
    packet buffer is still taken (mempool_in_use_at_exit == 0), and while
    it ran the pool's use never grew past its first samples by more than
    what can be in flight (a burst per port per worker);
  - no heap growth: RSS over the last third of the run is within
    --rss-slack-mib of its level over the middle third (the first third is
    warm-up: the flow and MAC tables fill in that time);
  - every churn operation was answered without error;
  - at an INT-label last hop, every label report is accounted for
    (label_sunk == label_exported + label_report_ring_full, none of them 0
    but the refused), every one queued was sent (the exporter's reports ==
    label_exported) and the collector received report packets.

Prints one line per role and a JSON summary (--json FILE). Exit status 1
if any role failed. scripts/soak.sh runs it on the release build;
tests/soak.rs a short version in CI (workers in idle mode).
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

DUT_MAC = "02:00:00:00:be:00"
FIVE = "node_id,l1_ports,hop_latency,queue,ingress_ts"
SIX = FIVE + ",egress_ts"
ROLES = ["bridge", "router", "int-source", "int-transit", "int-sink", "int-sink-analytics", "gpint-transit",
         "ampm-initiator", "ampm-terminator", "int-label", "int-label-lasthop"]


def routes_file(path):
    with open(path, "w") as f:
        for i in range(1000):
            f.write("20.%d.%d.0/24\n" % (i // 256, i % 256))
        for i in range(200):
            f.write("2001:db8:%x::/48\n" % (0x8000 + i))


def traffic(role, work):
    """gen-traffic arguments of the role's trace: many hosts and flows,
    shuffled, IMIX sizes, TCP and IPv6 mixed in."""
    mixed = ["--sizes", "imix", "--shuffle", "7", "--tcp-share", "0.6", "--v6-share", "0.2"]
    if role == "bridge":
        return mixed + ["--count", "8192", "--flows", "8192", "--macs", "1024", "--src-mac", "02:00:01:00:00:00",
                        "--dst-macs", "1024", "--dst-mac", "02:00:02:00:00:00"]
    if role in ("router", "int-source"):
        return mixed + ["--count", "8192", "--flows", "20000", "--zipf", "1.0", "--dst-mac", DUT_MAC,
                        "--src", "10.0.1.10", "--dst", "20.0.0.1", "--dst-spread", f"{work}/routes.txt"]
    if role in ("int-transit", "int-sink", "int-sink-analytics"):
        # The analytics see values drawn per packet and hop (which takes
        # one hop count, and a packet a flow at least: 16384 for 10000 flows).
        # (--int-values draws its own frames: UDP over IPv4, no sizes,
        # addresses or background to mix in; gen-traffic refuses them.)
        if role == "int-sink-analytics":
            return ["--int-hops", "4", "--int-values", "exp", "--count", "16384", "--flows", "10000",
                    "--zipf", "1.0", "--shuffle", "7", "--int-instructions", FIVE, "--int-rhc", "3"]
        return mixed + ["--flows", "10000", "--zipf", "1.0", "--dst-mac", "02:00:00:00:00:02",
                        "--int-hops", "1..5", "--count", "8192", "--int-instructions", FIVE, "--int-rhc", "3",
                        "--background-share", "0.3"]
    if role == "int-label-lasthop":
        # Label packets of the label domain (1-4 labels of the paper's 32
        # bytes, DSCP 0x17) and 30 % without a label: the last hop labels,
        # exports and restores the first, and labels by its interval (and
        # exports at once) some of the others.
        return mixed + ["--flows", "10000", "--zipf", "1.0", "--dst-mac", "02:00:00:00:00:02",
                        "--int-hops", "1..4", "--count", "8192", "--int-instructions", SIX, "--int-rhc", "4",
                        "--int-dscp", "0x17", "--int-domain-id", "0x4c42", "--background-share", "0.3"]
    if role == "gpint-transit":
        # Probes of distinct requests from many monitors (a fifth IPv6),
        # each followed 8 probes later by its next hop's feedback (16384
        # frames: the replay holds them in the pool).
        return ["--gpint-probes", "--gpint-feedbacks", "--count", "8192", "--v6-share", "0.2",
                "--dst-mac", DUT_MAC]
    # AM-PM and INT-label: 2000 flows from 10.1.0.0 (the AM-PM rules
    # monitor their first half by source address), mixed sizes.
    return ["--sizes", "imix", "--shuffle", "7", "--count", "8192", "--flows", "2000",
            "--dst-mac", "02:00:00:00:00:02", "--src", "10.1.0.0", "--dst", "10.2.0.1"]


def config(role, work, trace, sock, collector_port, idle):
    router = role in ("router", "int-source")
    mode = "bridge" if role == "bridge" else ("router" if router else "xconnect")
    out = [f'name = "soak-{role}"', f'mode = "{mode}"', "[eal]", f'file_prefix = "soak-{role}-{os.getpid()}"',
           'log_level = "error"', "[dataplane]", "mbufs = 32768", f"idle = {'true' if idle else 'false'}",
           "[flow_table]", "capacity = 65536", f"learn = {'true' if router else 'false'}",
           "[control]", f'socket = "{sock}"', 'metrics = ""',
           "[[port]]", 'name = "p0"', f'device = "net_pcap0,rx_pcap={trace},infinite_rx=1"', f'mac = "{DUT_MAC}"']
    if router:
        out += ['ipv4 = ["10.0.1.1/24"]', 'ipv6 = ["2001:db8:1::1/64"]']
    elif mode == "xconnect":
        out += ['peer = "p1"']
    out += ["[[port]]", 'name = "p1"', 'device = "net_null0,no-rx=1"']
    if router:
        out += ['ipv4 = ["10.0.2.1/24"]', 'ipv6 = ["2001:db8:2::1/64"]']
    elif mode == "xconnect":
        out += ['peer = "p0"']
    if role == "bridge":
        out += ["[bridge]", "mac_capacity = 8192"]
        for i in range(1024):
            out += ["[[bridge.static_mac]]", 'mac = "02:00:02:%02x:%02x:%02x"' % (i >> 16, (i >> 8) & 255, i & 255),
                    'port = "p1"']
    if router:
        out += ["[[neighbour]]", 'ip = "10.0.2.10"', 'mac = "02:00:00:00:02:0a"', 'port = "p1"',
                "[[neighbour]]", 'ip = "2001:db8:2::10"', 'mac = "02:00:00:00:02:0a"', 'port = "p1"']
        with open(f"{work}/routes.txt") as f:
            for p in f.read().split():
                via = "2001:db8:2::10" if ":" in p else "10.0.2.10"
                out += ["[[route]]", f'prefix = "{p}"', 'port = "p1"', f'via = "{via}"']
    if role == "int-source":
        out += ["[int]", "node_id = 1", 'edge_ports = ["p0"]', "[[int.watch]]", 'name = "all"', 'role = "source"',
                f"instructions = {json.dumps(FIVE.split(','))}"]
    if role == "int-transit":
        out += ["[int]", "node_id = 2"]
    if role == "int-sink":
        out += ["[int]", "node_id = 3", 'edge_ports = ["p1"]', "report_flow_interval_ms = 100",
                "[[int.collector]]", f'address = "127.0.0.1:{collector_port}"']
    if role == "int-sink-analytics":
        # A cache smaller than the 10000 flows (rows evict), aging, events,
        # histograms and a detection rule: the churn changes them.
        out += ["[int]", "node_id = 3", 'edge_ports = ["p1"]',
                "[[int.collector]]", f'address = "127.0.0.1:{collector_port}"',
                "[int.analytics]", "cache_rows = 1024", "cache_ways = 4", "idle_timeout = 2", "active_timeout = 1",
                "histogram_interval = 1", "[int.analytics.events.queue]", "threshold = 150", "change = 100",
                "[int.analytics.events.e2e_latency]", "threshold = 20000",
                "[[int.detect]]", 'name = "all"', 'algorithm = "per_flow"', 'metric = "e2e_latency"',
                "threshold = 20000"]
    if role.startswith("ampm-"):
        r = role.split("-", 1)[1]
        out += ["[ampm]", "node_id = 9", 'interval = "1s"', "[[ampm.flow]]", 'name = "half"', "flow_mon_id = 1",
                f'role = "{r}"', 'method = "muxed"', 'carrier = "dscp"', 'src = "10.1.0.0/22"']
    if role == "int-label":
        out += ["[int]", "node_id = 4", "[label]", "interval_ms = 0.01", "seed = 3"]
    if role == "int-label-lasthop":
        out += ["[int]", "node_id = 6", "[[int.collector]]", f'address = "127.0.0.1:{collector_port}"',
                "[label]", "interval_ms = 0.01", 'edge_ports = ["p1"]', "seed = 3"]
    if role == "gpint-transit":
        out += ["[int]", "node_id = 5", "[[int.collector]]", f'address = "127.0.0.1:{collector_port}"',
                "[gpint]", "hold_ms = 1"]
    return "\n".join(out) + "\n"


class Churn:
    """Once a second, add and remove what the role has; every other
    second a capture. Each operation is one intctl call."""

    def __init__(self, role, intctl, sock, work):
        self.role, self.intctl, self.sock, self.work = role, intctl, sock, work
        self.ops = self.errors = 0
        self.last_error = ""
        self.tick = 0

    def call(self, *args):
        r = subprocess.run([self.intctl, "--socket", self.sock, *args], capture_output=True, text=True, timeout=30)
        self.ops += 1
        if r.returncode != 0:
            self.errors += 1
            self.last_error = f"intctl {' '.join(args)}: {r.stderr.strip()}"

    def step(self):
        t, role, c = self.tick, self.role, self.call
        self.tick += 1
        # An add at even ticks, the matching delete at the next one.
        add = t % 2 == 0
        n = (t // 2) % 200
        # Exact flows: every role has a flow table.
        flow = ["--in-port", "p0", "--src", f"10.9.{n}.1", "--dst", "10.9.0.2", "--proto", "udp",
                "--src-port", "1000", "--dst-port", "2000"]
        if add:
            c("flow", "add", *flow, "--action", "drop")
        else:
            c("flow", "del", *flow)
        if role in ("router", "int-source"):
            # An unused prefix, and one the traffic uses (its packets are
            # dropped as no_route while it is gone: counted, not lost).
            spare, used, nbr = f"30.{n}.0.0/16", f"20.0.{n}.0/24", f"10.0.2.{100 + n % 100}"
            via = ["--port", "p1", "--via", "10.0.2.10"]
            if add:
                c("route", "add", spare, *via)
                c("route", "del", used)
                c("neighbour", "add", nbr, "02:00:00:00:09:%02x" % (n % 100), "--port", "p1")
            else:
                c("route", "del", spare)
                c("route", "add", used, *via)
                c("neighbour", "del", nbr)
        if role.startswith("int-") and not role.startswith("int-label"):
            r = {"int-source": "source", "int-transit": "transit", "int-sink": "sink",
                 "int-sink-analytics": "sink"}[role]
            if add:
                only_source = ["--instructions", "node_id,hop_latency"] if r == "source" else []
                c("int", "watch", "add", "churn", "--role", r, "--priority", "5", "--dst", f"20.{n}.0.0/16",
                  *only_source)
            else:
                c("int", "watch", "del", "churn")
        if role in ("int-sink", "int-sink-analytics", "int-label-lasthop"):
            c("int", "export", "pause" if t % 4 == 1 else "resume")
        if role == "int-sink-analytics":
            # Thresholds up and down; a CNF rule for a slice of the flows
            # with its expression, then both gone; the cache flushed.
            c("int", "event", "set", "hop_latency", "--threshold", str(5000 + 1000 * (n % 5)), "--change", "2000",
              "--mode", "edge" if add else "level")
            if add:
                c("int", "expr", "add", "churn", f"hop_latency.max > {8000 + n} AND (queue.any.delta > 50 OR "
                  "e2e_latency > 30000)")
                c("int", "detect", "add", "churn", "--algorithm", "cnf", "--expr", "churn", "--priority", "5",
                  "--src-port", f"{n % 16}/15")
            else:
                c("int", "detect", "del", "churn")
                c("int", "expr", "del", "churn")
            if t % 5 == 4:
                c("int", "flows", "flush")
        if role.startswith("ampm-"):
            r = role.split("-", 1)[1]
            if add:
                c("ampm", "add", "churn", "--flow-mon-id", str(100 + n), "--role", r, "--method", "muxed",
                  "--carrier", "dscp", "--src", f"10.1.{4 + n % 4}.0/24")
            else:
                c("ampm", "del", "churn")
        if role in ("int-label", "int-label-lasthop"):
            c("label", "set-shift", "p1", str(t % 3))
        if role == "int-label-lasthop":
            c("show", "label")
        if role == "gpint-transit":
            # The clone buffer's slots, as an operator watches them.
            c("show", "gpint")
        if t % 2 == 1:
            c("capture", "p0", "--rx", "--count", "200", "--out", f"{self.work}/cap.pcap", "--timeout", "1")


def metric(text, name, label=None):
    total = 0
    for m in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\d+)", text, re.M):
        if label is None or label in (m.group(1) or ""):
            total += int(m.group(2))
    return total


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def drain(sock, stop, counter):
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            sock.recv(65536)
            counter[0] += 1
        except (socket.timeout, BlockingIOError):
            pass


def run_role(role, a, work):
    sock = f"{work}/{role}.sock"
    trace = f"{work}/{role}.pcap"
    r = subprocess.run([a.bin, "gen-traffic", "--out", trace, *traffic(role, work)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"role": role, "ok": False, "why": f"gen-traffic: {r.stderr.strip()}"}
    coll = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    coll.bind(("127.0.0.1", 0))
    cfg = f"{work}/{role}.toml"
    with open(cfg, "w") as f:
        f.write(config(role, work, trace, sock, coll.getsockname()[1], a.idle))
    limit_s = a.minutes * 60 if a.minutes else 3600
    log = open(f"{work}/{role}.log", "w")
    p = subprocess.Popen([a.bin, "--config", cfg, "--json", "--stats-interval", "0"], stdout=subprocess.PIPE,
                         stderr=log, text=True)
    stop, received = threading.Event(), [0]
    th = threading.Thread(target=drain, args=(coll, stop, received), daemon=True)
    th.start()
    churn = Churn(role, a.intctl, sock, work)
    pool, rss, rx = [], [], 0
    t0 = time.monotonic()
    why = ""
    try:
        for _ in range(600):  # up to 60 s to come up
            if os.path.exists(sock) or p.poll() is not None:
                break
            time.sleep(0.1)
        while p.poll() is None and time.monotonic() - t0 < limit_s:
            tick = time.monotonic()
            m = subprocess.run([a.intctl, "--socket", sock, "show", "metrics"], capture_output=True, text=True,
                               timeout=30)
            if m.returncode == 0:
                pool.append(metric(m.stdout, "intswitch_mempool_in_use"))
                rx = metric(m.stdout, "intswitch_port_rx_packets_total", 'port="p0"')
                rss.append(rss_kib(p.pid))
            if a.packets and rx >= a.packets and len(pool) >= 6:
                break
            churn.step()
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    finally:
        if p.poll() is None:
            p.send_signal(2)
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            why = "did not stop within 120 s of SIGINT"
        stop.set()
        th.join()
        coll.close()
        log.close()
    secs = time.monotonic() - t0
    line = next((l for l in reversed(out.splitlines()) if l.startswith("{")), None)
    res = {"role": role, "seconds": round(secs, 1), "churn_ops": churn.ops, "churn_errors": churn.errors,
           "samples": len(pool), "reports_received": received[0]}
    if p.returncode != 0 or line is None:
        res.update(ok=False, why=why or f"exit {p.returncode}; see {work}/{role}.log")
        return res
    fin = json.loads(line)
    ports = fin["ports"]
    rx_all = sum(x["rx_packets"] for x in ports)
    tx_all = sum(x["tx_packets"] for x in ports)
    injected = fin["events"].get("injected", 0)
    # Taken by the SQR stage, neither sent on nor dropped: feedbacks (each
    # frees its copy), duplicate probes, probes delivered to the collector.
    consumed = sum(fin["events"].get(k, 0) for k in ("gpint_fb_rx", "gpint_dup", "gpint_delivered"))
    # Made by it and sent: a feedback for every probe.
    injected += fin["events"].get("gpint_fb_tx", 0)
    drops, by_name = fin["total_drops"], sum(fin["drops"].values())
    p0 = ports[0]["rx_packets"]
    # In flight at most: a burst per port per worker, and a capture's worth.
    slack = 64 * len(ports) + 256
    third = max(1, len(pool) // 3)
    pool_growth = (max(pool[-third:]) - max(pool[:third])) if len(pool) >= 3 else 0
    rss_growth = (statistics.median(rss[-third:]) - statistics.median(rss[third:2 * third])) // 1024 \
        if len(rss) >= 3 else 0
    res.update(packets=p0, mpps=round(p0 / secs / 1e6, 2), drops=drops,
               pool_first=pool[0] if pool else None, pool_max=max(pool) if pool else None,
               pool_at_exit=fin.get("mempool_in_use_at_exit"), rss_first_mib=rss[0] // 1024 if rss else None,
               rss_last_mib=rss[-1] // 1024 if rss else None, rss_growth_mib=rss_growth)
    checks = [
        (p0 >= a.packets, f"received {p0} < {a.packets}"),
        (rx_all == tx_all - injected + drops + consumed,
         f"rx {rx_all} != tx {tx_all} - injected {injected} + drops {drops} + consumed {consumed}"),
        (by_name == drops, f"drops by name {by_name} != {drops}"),
        (fin.get("mempool_in_use_at_exit") == 0, f"{fin.get('mempool_in_use_at_exit')} mbufs taken at exit"),
        (pool_growth <= slack, f"mempool use grew by {pool_growth} (> {slack} in flight)"),
        (rss_growth <= a.rss_slack_mib, f"RSS grew by {rss_growth} MiB"),
        (churn.errors == 0, churn.last_error),
    ]
    if role == "int-label-lasthop":
        ev = fin["events"]
        sunk, exported, refused = (ev.get(k, 0) for k in ("label_sunk", "label_exported", "label_report_ring_full"))
        sent = (fin.get("int_reports") or {}).get("reports", 0)
        res.update(label_sunk=sunk, label_exported=exported, label_refused=refused, reports_sent=sent)
        checks += [
            (sunk > 0 and exported > 0, f"label reports: sunk {sunk}, exported {exported}"),
            (sunk == exported + refused, f"label_sunk {sunk} != exported {exported} + refused {refused}"),
            # The only reports of the role: each queued one was sent (the
            # rings are drained at stop, paused or not).
            (sent == exported, f"reports sent {sent} != label_exported {exported}"),
            (received[0] > 0, "the collector received no report packet"),
        ]
    failed = [w for ok, w in checks if not ok]
    res.update(ok=not failed, why="; ".join(failed))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="intswitch")
    ap.add_argument("--intctl", required=True)
    ap.add_argument("--minutes", type=float, default=0, help="per role (0: until --packets)")
    ap.add_argument("--packets", type=int, default=0, help="per role: stop once p0 received this many")
    ap.add_argument("--roles", default=",".join(ROLES), help="comma-separated, of: " + ", ".join(ROLES))
    ap.add_argument("--idle", action="store_true", help="workers in idle mode (tests on a shared machine)")
    ap.add_argument("--rss-slack-mib", type=int, default=8)
    ap.add_argument("--work", help="keep configs, traces and logs here (default: a temporary directory)")
    ap.add_argument("--json", help="write the per-role results here")
    a = ap.parse_args()
    if not a.minutes and not a.packets:
        ap.error("give --minutes, --packets or both")
    roles = a.roles.split(",")
    bad = [r for r in roles if r not in ROLES]
    if bad:
        ap.error(f"unknown role(s) {', '.join(bad)}; roles: {', '.join(ROLES)}")
    work = a.work or tempfile.mkdtemp(prefix="intswitch-soak.")
    os.makedirs(work, exist_ok=True)
    routes_file(f"{work}/routes.txt")
    results = []
    for role in roles:
        res = run_role(role, a, work)
        results.append(res)
        print(" ".join(f"{k}={v}" for k, v in res.items() if k != "why") +
              ("" if res["ok"] else f" FAILED: {res['why']}"), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if not a.work:
        if all(r["ok"] for r in results):
            shutil.rmtree(work)
        else:
            print(f"soak.py: configs, traces and logs kept in {work}", file=sys.stderr)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
