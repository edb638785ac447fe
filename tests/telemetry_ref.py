#!/usr/bin/env python3
"""Independent reference for INT sink analytics (issue 34 section 9).

Written from README's "Telemetry traces" section and the papers, not from
the switch's code: standard library only (struct, math, json).

  telemetry_ref.py gen --model exp|web|cache|hadoop --flows N --packets P
                       [--zipf A] [--hops H] [--paths K] [--bitmap B]
                       [--rhc R] [--int-port U] [--seed S] --out PCAP --truth JSON
  telemetry_ref.py detect --pcap PCAP [--int-port U] [--rule ALGO:METRIC:T[:W][@DPORT]]...
                       [--event METRIC:THRESHOLD:CHANGE]... [--tracked N]

`gen` writes the trace and its ground truth (the same bytes and truth as
`intswitch gen-traffic --int-values`). `detect` reads a pcap of INT frames
and prints, as JSON, for each rule the packet indices it reports (a
flow takes the first rule whose @DPORT, the original destination port,
matches, or that has none), and the event records a sink raises (level mode, one worker,
every flow staying in the cache).
"""

import argparse
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import int_decode  # noqa: E402  (the spec-written decoder next to this file)

MASK = (1 << 64) - 1


class SplitMix:
    def __init__(self, seed, n):
        self.s = (seed + (n << 44)) & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def unit(self):
        return (self.next() >> 11) * (1.0 / float(1 << 53))

    def texp(self, mx, scale):
        u = self.unit()
        x = -scale * math.log(1.0 - u * (1.0 - math.exp(-float(mx) / scale)))
        return min(int(math.floor(x)), mx)

    def lognormal(self, median, p90):
        mu = math.log(median)
        sigma = (math.log(p90) - mu) / 1.2815515655446004
        u1 = 1.0 - self.unit()
        u2 = self.unit()
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        return math.exp(mu + sigma * z)


# name: (ON median, p90), (OFF median, p90) in us, (rho ON, rho OFF)
BURSTS = {
    "web": ((20.0, 60.0), (500.0, 2000.0), (1.5, 0.2)),
    "cache": ((40.0, 200.0), (300.0, 1000.0), (1.8, 0.4)),
    "hadoop": ((50.0, 500.0), (200.0, 1000.0), (2.0, 0.5)),
}

# Instruction bits (0 = MSB) and their sizes in bytes.
SIZES = {0: 4, 1: 4, 2: 4, 3: 4, 4: 8, 5: 8, 6: 8, 7: 4, 8: 4}
HOP_LATENCY, QUEUE, TX_UTIL = 2, 3, 7
METRICS = ["hop_latency", "queue", "tx_util"]
METRIC_BIT = {"hop_latency": HOP_LATENCY, "queue": QUEUE, "tx_util": TX_UTIL}


def has(bitmap, bit):
    return bitmap & (0x8000 >> bit) != 0


def hop_words(bitmap):
    return sum(SIZES[b] for b in SIZES if has(bitmap, b)) // 4


def csum(data):
    """The Internet checksum of `data` (the one's complement of the sum
    tests/int_decode.py folds)."""
    return ~int_decode.csum(data) & 0xFFFF


def ip4(a):
    return struct.pack("!I", a)


def ip4_text(a):
    return ".".join(str(b) for b in struct.pack("!I", a))


def flow_of(k):
    j = k >> 1
    tcp = j % 10 != 9
    return {
        "src": (10 << 24 | 64 << 16) + j + 1,
        "dst": (10 << 24 | 200 << 16) + j % 4096 + 1,
        "proto": 6 if tcp else 17,
        "src_port": 1024 + j % 50000,
        "dst_port": (80 if tcp else 5000) + (k & 1),
    }


def node_of(p, h, hops):
    return 16 * (h + 1) + (0 if h == hops // 2 else p % (h + 1))


# Default bins: latencies log2 with 8 sub-bins, queue linear 1 x 512,
# tx_util linear 100 x 101 (README "Histograms").
def lower_edge(metric, v):
    if metric == "queue":
        return min(v, 511)
    if metric == "tx_util":
        return min(v // 100, 100) * 100
    if v < 8:
        return v
    k = v.bit_length() - 1  # 2^k <= v < 2^(k+1)
    width = (1 << k) // 8
    return (1 << k) + (v - (1 << k)) // width * width


def frame(args, k, i, ts, hv):
    f = flow_of(k)
    tcp = f["proto"] == 6
    words = hop_words(args.bitmap)
    hops = len(hv)
    payload = bytes((n + i) % 256 for n in range(6 if tcp else 18))
    block = 16 + hops * words * 4
    udp_len = 8 + block + (20 if tcp else 0) + len(payload)
    ip = struct.pack("!BBHHHBBH", 0x45, 0, 20 + udp_len, i % 65536, 0, 64, 17, 0) + ip4(f["src"]) + ip4(f["dst"])
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    sport = (0xC000 | (k % (1 << 14))) if tcp else f["src_port"]
    udp = struct.pack("!HHHH", sport, args.int_port, udp_len, 0)
    npt = 2 if tcp else 1
    shim = struct.pack("!BBH", 0x10 | npt << 2, 3 + hops * words, 6 if tcp else f["dst_port"])
    md = struct.pack("!BBBBHHHH", 0x20, 0, words, args.rhc, args.bitmap, 0, 0, 0)
    times = []
    egress = 0
    for h, v in enumerate(hv):
        ingress = 1_700_000_000_000_000_000 + ts if h == 0 else egress + 5000
        egress = ingress + v["lat"]
        times.append((ingress, egress))
    stack = b""
    for h in reversed(range(hops)):
        v = hv[h]
        for bit in range(9):
            if not has(args.bitmap, bit):
                continue
            stack += {
                0: lambda: struct.pack("!I", v["node"]),
                1: lambda: struct.pack("!HH", 1, 2),
                2: lambda: struct.pack("!I", v["lat"]),
                3: lambda: struct.pack("!I", v["queue"]),
                4: lambda: struct.pack("!Q", times[h][0]),
                5: lambda: struct.pack("!Q", times[h][1]),
                6: lambda: struct.pack("!II", 1, 2),
                7: lambda: struct.pack("!I", v["tx"]),
                8: lambda: struct.pack("!I", v["queue"]),
            }[bit]()
    if tcp:
        seg = struct.pack("!HHIIBBHHH", f["src_port"], f["dst_port"], i % (1 << 32), 1, 0x50, 0x10, 65535, 0, 0)
        seg += payload
        pseudo = ip4(f["src"]) + ip4(f["dst"]) + struct.pack("!BBH", 0, 6, len(seg))
        c = csum(pseudo + seg)
        seg = seg[:16] + struct.pack("!H", c) + seg[18:]
    else:
        seg = payload
    eth = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0])
    return eth + ip + udp + shim + md + stack + seg


def gen(args):
    n = args.flows
    if args.zipf is not None:
        w = [float(k + 1) ** -args.zipf for k in range(n)]
        total = 0.0
        for x in w:
            total += x
        counts = [max(1, int(math.floor(args.packets * x / total))) for x in w]
    else:
        counts = [args.packets // n + (1 if k < args.packets % n else 0) for k in range(n)]
    trains = SplitMix(args.seed, 1)
    values = SplitMix(args.seed, 2)
    burst = BURSTS.get(args.model)
    q_rng = SplitMix(args.seed, 3)
    b = {"t": 0.0, "last": 0.0, "on": False, "period": 0, "q": 0.0}
    if burst:
        b["end"] = q_rng.lognormal(*burst[1]) * 1000.0
    hops = args.hops
    bn = hops // 2
    tried = [0] * n
    flows = [None] * n
    hist = {}
    bursts = []
    current = None
    prev_delay = 0
    written = dropped = 0
    out = open(args.out, "wb")
    out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
    metric_on = {m: has(args.bitmap, METRIC_BIT[m]) for m in METRICS}

    def count(node, metric, v):
        key = (node, metric)
        e = lower_edge(metric, v)
        hist.setdefault(key, {})
        hist[key][e] = hist[key].get(e, 0) + 1

    active = list(range(n))
    while active:
        still = []
        for k in active:
            train = 1 + trains.next() % 8
            for _ in range(min(train, counts[k] - tried[k])):
                switch = k % 8 == 5 and counts[k] >= 2 and tried[k] >= counts[k] // 2
                path = (k % args.paths + (1 if switch else 0)) % args.paths
                tried[k] += 1
                seen = None
                if burst:
                    while True:
                        rho = burst[2][0] if b["on"] else burst[2][1]
                        gap = -(1200.0 / rho) * math.log(1.0 - q_rng.unit())
                        if b["t"] + gap < b["end"]:
                            b["t"] += gap
                            break
                        b["t"] = b["end"]
                        b["on"] = not b["on"]
                        b["period"] += 1
                        b["end"] = b["t"] + q_rng.lognormal(*(burst[0] if b["on"] else burst[1])) * 1000.0
                    b["q"] = max(0.0, b["q"] - (b["t"] - b["last"]) * 1.25)
                    b["last"] = b["t"]
                    seen = {
                        "delay": int(math.floor(b["q"] / 1.25)),
                        "queue": int(math.floor(b["q"] / 1500.0)),
                        "on": b["on"],
                        "period": b["period"],
                        "t": b["t"],
                    }
                    if b["q"] + 1500.0 > 2000000.0:
                        dropped += 1
                        continue
                    b["q"] += 1500.0
                i = written
                hv = []
                for h in range(hops):
                    hv.append(
                        {
                            "node": node_of(path, h, hops),
                            "lat": values.texp(100000, 2000.0),
                            "queue": values.texp(300, 30.0),
                            "tx": values.texp(10000, 1500.0),
                        }
                    )
                if seen:
                    v = hv[bn]
                    v["lat"] = min(v["lat"] + seen["delay"], (1 << 32) - 1)
                    v["queue"] = seen["queue"]
                    rho = burst[2][0] if seen["on"] else burst[2][1]
                    v["tx"] = min(10000, int(rho * 10000.0))
                    new_on = seen["on"] and (current is None or current["period"] != seen["period"])
                    if current is not None and not new_on and (seen["on"] or seen["delay"] > 0):
                        current["last"] = i
                        current["peak_ns"] = max(current["peak_ns"], seen["delay"])
                    else:
                        if current is not None:
                            bursts.append(current)
                            current = None
                        if seen["on"]:
                            current = {
                                "first": i,
                                "last": i,
                                "peak_ns": seen["delay"],
                                "pre_ns": prev_delay,
                                "period": seen["period"],
                            }
                    prev_delay = seen["delay"]
                    ts = int(seen["t"])
                else:
                    ts = i * 1000
                fr = frame(args, k, i, ts, hv)
                out.write(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(fr), len(fr)) + fr)
                written += 1
                fl = flows[k]
                if fl is None:
                    fl = flows[k] = {"packets": 0, "first": i, "hop": [None] * hops, "e2e": [0, 0]}
                    fl["sums"] = [[0, 0, 0] for _ in range(hops)]
                fl["packets"] += 1
                fl["last"] = i
                e2e = 0
                for h, v in enumerate(hv):
                    vals = [v["lat"], v["queue"], v["tx"]]
                    for m in range(3):
                        fl["sums"][h][m] += vals[m]
                        if metric_on[METRICS[m]]:
                            count(v["node"], METRICS[m], vals[m])
                    fl["hop"][h] = (v["node"], vals)
                    e2e += v["lat"]
                fl["e2e"] = [e2e, fl["e2e"][1] + e2e]
                if metric_on["hop_latency"]:
                    count(None, "e2e_latency", min(e2e, (1 << 32) - 1))
            if tried[k] < counts[k]:
                still.append(k)
        active = still
    if current is not None:
        bursts.append(current)
    out.close()
    flow_list = []
    for k, fl in enumerate(flows):
        if fl is None:
            continue
        f = flow_of(k)
        hop = []
        for h in range(hops):
            node, vals = fl["hop"][h]
            o = {"node_id": node}
            for m in range(3):
                if metric_on[METRICS[m]]:
                    o[METRICS[m]] = {"last": vals[m], "sum": fl["sums"][h][m]}
            hop.append(o)
        rec = {
            "flow": {
                "src": ip4_text(f["src"]),
                "dst": ip4_text(f["dst"]),
                "proto": f["proto"],
                "src_port": f["src_port"],
                "dst_port": f["dst_port"],
            },
            "packets": fl["packets"],
            "first": fl["first"],
            "last": fl["last"],
            "hop": hop,
        }
        if metric_on["hop_latency"]:
            rec["e2e_latency"] = {"last": fl["e2e"][0], "sum": fl["e2e"][1]}
        flow_list.append(rec)
    order = {"hop_latency": 0, "queue": 1, "tx_util": 2, "e2e_latency": 3}
    keys = sorted(hist, key=lambda nm: (nm[0] is not None, nm[0] or 0, order[nm[1]]))
    histograms = [
        {"node_id": node, "metric": metric, "counts": [[e, c] for e, c in sorted(hist[(node, metric)].items())]}
        for node, metric in keys
    ]
    truth = {
        "model": args.model,
        "seed": args.seed,
        "flows": n,
        "hops": hops,
        "paths": args.paths,
        "bitmap": args.bitmap,
        "packets": written,
        "bottleneck_drops": dropped,
        "bottleneck_hop": bn,
        "flow": flow_list,
        "histograms": histograms,
        "bursts": [{k: v for k, v in x.items() if k != "period"} for x in bursts],
    }
    with open(args.truth, "w") as t:
        json.dump(truth, t)
        t.write("\n")


def read_pcap(path):
    data = open(path, "rb").read()
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic not in (0xA1B23C4D, 0xA1B2C3D4):
        raise SystemExit("%s: not a little-endian pcap" % path)
    o = 24
    while o + 16 <= len(data):
        _, _, cap, _ = struct.unpack_from("<IIII", data, o)
        yield data[o + 16 : o + 16 + cap]
        o += 16 + cap


def decode(fr, int_port):
    """(index, flow key, [(node, {metric: value})] in path order) or None."""
    if struct.unpack_from("!H", fr, 12)[0] != 0x0800:
        return None
    ihl = (fr[14] & 0xF) * 4
    ip_id = struct.unpack_from("!H", fr, 18)[0]
    proto = fr[23]
    src, dst = fr[26:30], fr[30:34]
    l4 = 14 + ihl
    if proto != 17 or struct.unpack_from("!H", fr, l4 + 2)[0] != int_port:
        return None
    blk = l4 + 8
    npt = (fr[blk] >> 2) & 3
    length = fr[blk + 1] * 4
    saved = struct.unpack_from("!H", fr, blk + 2)[0]
    words = fr[blk + 6] & 0x1F
    bitmap = struct.unpack_from("!H", fr, blk + 8)[0]
    stack = fr[blk + 16 : blk + 4 + length]
    after = blk + 4 + length
    if npt == 1:
        key = (src, dst, 17, struct.unpack_from("!H", fr, l4)[0], saved)
    else:
        key = (src, dst, saved & 0xFF) + struct.unpack_from("!HH", fr, after)
    hops = []
    for h in range(len(stack) // (words * 4)):
        o = h * words * 4
        vals = {}
        node = None
        for bit in range(16):
            if not has(bitmap, bit):
                continue
            size = SIZES.get(bit, 4)
            if bit == 0:
                node = struct.unpack_from("!I", stack, o)[0]
            elif bit in (HOP_LATENCY, TX_UTIL):
                v = struct.unpack_from("!I", stack, o)[0]
                vals[METRICS[[HOP_LATENCY, QUEUE, TX_UTIL].index(bit)]] = None if v == 0xFFFFFFFF else v
            elif bit == QUEUE:
                v = struct.unpack_from("!I", stack, o)[0] & 0xFFFFFF
                vals["queue"] = None if v == 0xFFFFFF else v
            o += size
        hops.append((node, vals))
    hops.reverse()  # newest first on the wire; path order here
    return ip_id, key, hops


def detect(args):
    rules = []
    for r in args.rule:
        spec, _, dport = r.partition("@")
        parts = spec.split(":")
        algo, metric, t = parts[0], parts[1], int(parts[2])
        w = int(parts[3]) if len(parts) > 3 else 64
        if metric == "e2e_latency":
            metric = "hop_latency"
        rules.append({"name": r, "dport": int(dport) if dport else None, "algo": algo, "metric": metric, "t": t, "w": w, "reg": {}, "flow": {}, "fired": []})
    events = {}
    for e in args.event:
        m, thr, ch = e.split(":")
        events[m] = (int(thr), int(ch))
    prev = {}  # (flow, hop) -> {metric: last value}
    prev_e2e = {}
    records = []
    index = 0
    for fr in read_pcap(args.pcap):
        d = decode(fr, args.int_port)
        if d is None:
            continue
        ip_id, key, hops = d
        # A flow's rule: the first whose destination port matches.
        for r in [next((r for r in rules if r["dport"] in (None, key[4])), None)]:
            if r is None:
                continue
            m = r["metric"]
            fired = False
            if r["algo"] == "noop":
                fired = True
            elif r["algo"] == "per_hop":
                for node, vals in hops:
                    v = vals.get(m)
                    if v is None or node is None:
                        continue
                    reg = r["reg"].get(node, 0)
                    if abs(v - reg) > r["t"]:
                        r["reg"][node] = v
                        fired = True
            else:
                s = sum(v.get(m) or 0 for _, v in hops)
                st = r["flow"].setdefault(key, [0, 0])  # P, M (8 fractional bits)
                if r["algo"] == "per_flow":
                    cur = s
                else:
                    st[1] += (r["w"] * (s * 256 - st[1])) >> 8
                    cur = st[1] >> 8
                if abs(cur - st[0]) > r["t"]:
                    st[0] = cur
                    fired = True
            if fired:
                r["fired"].append(index)
        if events:
            for h, (node, vals) in enumerate(hops[: args.tracked]):
                bits = 0
                last = prev.get((key, h), {})
                for mi, m in enumerate(METRICS):
                    if m not in events or vals.get(m) is None:
                        continue
                    thr, ch = events[m]
                    v = vals[m]
                    if thr and v > thr:
                        bits |= 1 << (2 * mi)
                    if ch and m in last and abs(v - last[m]) > ch:
                        bits |= 1 << (2 * mi + 1)
                if bits:
                    p = {m: last.get(m) for m in METRICS}
                    records.append([list(key[:2]), key[2:], h, node, bits, [vals.get(m) for m in METRICS], [p[m] for m in METRICS]])
                for m in METRICS:
                    if vals.get(m) is not None:
                        last[m] = vals[m]
                prev[(key, h)] = last
            if "e2e_latency" in events:
                thr, ch = events["e2e_latency"]
                e2e = sum(v.get("hop_latency") or 0 for _, v in hops)
                bits = 0
                if thr and e2e > thr:
                    bits |= 1 << 6
                if ch and key in prev_e2e and abs(e2e - prev_e2e[key]) > ch:
                    bits |= 1 << 7
                if bits:
                    records.append([list(key[:2]), key[2:], None, 0, bits, [e2e], [prev_e2e.get(key)]])
                prev_e2e[key] = e2e
        index += 1
    out = {
        "packets": index,
        "rules": {r["name"]: r["fired"] for r in rules},
        "events": [[ip4_text(struct.unpack("!I", bytes(r[0][0]))[0]), ip4_text(struct.unpack("!I", bytes(r[0][1]))[0])] + list(r[1]) + r[2:] for r in records],
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--model", required=True, choices=["exp"] + sorted(BURSTS))
    g.add_argument("--flows", type=int, required=True)
    g.add_argument("--packets", type=int, required=True)
    g.add_argument("--zipf", type=float)
    g.add_argument("--hops", type=int, default=5)
    g.add_argument("--paths", type=int, default=4)
    g.add_argument("--bitmap", type=lambda s: int(s, 0), default=0xB100)
    g.add_argument("--rhc", type=int, default=4)
    g.add_argument("--int-port", type=int, default=17768)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--out", required=True)
    g.add_argument("--truth", required=True)
    d = sub.add_parser("detect")
    d.add_argument("--pcap", required=True)
    d.add_argument("--int-port", type=int, default=17768)
    d.add_argument("--rule", action="append", default=[])
    d.add_argument("--event", action="append", default=[])
    d.add_argument("--tracked", type=int, default=5)
    args = ap.parse_args()
    gen(args) if args.cmd == "gen" else detect(args)


if __name__ == "__main__":
    main()
