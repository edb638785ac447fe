#!/usr/bin/env python3
"""Turns a TRex STL profile into a pcap, offline: PyPI's trex-stl-lib loads
the profile (STLProfile.load_py, as TRex's console does), and this script
plays each stream's field engine (the instructions of its JSON, which TRex's
server would run) over the stream's packet, interleaving the streams by
their rates. Run it with the Python of a venv that has trex-stl-lib.

  trex_replay.py PROFILE OUT.pcap --count N [--tunable KEY=VALUE ...]
                 [--src-mac MAC] [--dst-mac MAC]

Prints one JSON line: streams (rate, packet length, instruction types),
packets written, distinct 5-tuples, frames by wire size. Field-engine
instructions it does not know are an error (exit 1) naming them.
"""
import argparse
import base64
import json
import struct
import sys

from trex_stl_lib.api import STLProfile

from int_decode import csum, write_pcap  # (this folder's independent decoder)


def l4_of(f):
    """(l3 offset, version, L4 protocol, L4 offset) of an Ethernet frame;
    IPv6 extension headers (Hop-by-Hop, Destination) are skipped."""
    et = struct.unpack("!H", f[12:14])[0]
    if et == 0x0800:
        return 14, 4, f[23], 14 + (f[14] & 0xF) * 4
    if et == 0x86DD:
        nh, o = f[20], 54
        while nh in (0, 60):
            nh, o = f[o], o + 8 * (f[o + 1] + 1)
        return 14, 6, nh, o
    raise ValueError("not IP")


def fix_checksums(f, ipv4_only=False):
    l3, ver, proto, l4 = l4_of(f)
    if ver == 4:
        f[l3 + 10:l3 + 12] = b"\0\0"
        f[l3 + 10:l3 + 12] = struct.pack("!H", 0xFFFF - csum(bytes(f[l3:l4])))
    if ipv4_only or proto not in (6, 17):
        return
    if ver == 4:
        end = l3 + struct.unpack("!H", f[l3 + 2:l3 + 4])[0]
        pseudo = bytes(f[l3 + 12:l3 + 20]) + struct.pack("!BBH", 0, proto, end - l4)
    else:
        end = l3 + 40 + struct.unpack("!H", f[l3 + 4:l3 + 6])[0]
        pseudo = bytes(f[l3 + 8:l3 + 40]) + struct.pack("!IxxxB", end - l4, proto)
    at = l4 + (6 if proto == 17 else 16)
    f[at:at + 2] = b"\0\0"
    c = 0xFFFF - csum(pseudo + bytes(f[l4:end]))
    f[at:at + 2] = struct.pack("!H", c or 0xFFFF if proto == 17 else c)


class Stream:
    def __init__(self, j):
        self.pkt = bytearray(base64.b64decode(j["packet"]["binary"]))
        self.rate = float(j["mode"]["rate"]["value"])
        self.ins = j["vm"]["instructions"]
        known = {"flow_var", "write_flow_var", "fix_checksum_ipv4", "fix_checksum_hw"}
        bad = [i["type"] for i in self.ins if i["type"] not in known]
        if bad:
            raise SystemExit("unknown field-engine instructions: %s" % ", ".join(bad))
        self.vars = {}
        self.seed = 1

    def next(self):
        f = bytearray(self.pkt)
        for i in self.ins:
            t = i["type"]
            if t == "flow_var":
                n, lo, hi = i["name"], i["min_value"], i["max_value"]
                if n not in self.vars:
                    v = i["init_value"]
                elif i["op"] == "inc":
                    v = self.vars[n] + i["step"]
                    v = lo if v > hi else v
                elif i["op"] == "dec":
                    v = self.vars[n] - i["step"]
                    v = hi if v < lo else v
                else:
                    self.seed = (self.seed * 1103515245 + 12345) & 0x7FFFFFFF
                    v = lo + self.seed % (hi - lo + 1)
                self.vars[n] = v
                self.sizes = getattr(self, "sizes", {})
                self.sizes[n] = i["size"]
            elif t == "write_flow_var":
                n, size = i["name"], self.sizes[i["name"]]
                v = (self.vars[n] + i["add_value"]) % (1 << (8 * size))
                b = v.to_bytes(size, "big" if i["is_big_endian"] else "little")
                o = i["pkt_offset"]
                f[o:o + size] = b
            elif t == "fix_checksum_ipv4":
                fix_checksums(f, ipv4_only=True)
            else:
                fix_checksums(f)
        return bytes(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("out")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--tunable", action="append", default=[])
    ap.add_argument("--src-mac", default="02:00:00:00:00:01")
    ap.add_argument("--dst-mac", default="02:00:00:00:00:02")
    a = ap.parse_args()
    kw = dict(t.split("=", 1) for t in a.tunable)
    profile = STLProfile.load_py(a.profile, **kw)
    streams = [Stream(s.to_json()) for s in profile.get_streams()]
    macs = bytes.fromhex(a.dst_mac.replace(":", "")) + bytes.fromhex(a.src_mac.replace(":", ""))
    # Smooth weighted round robin over the streams' rates.
    credit = [0.0] * len(streams)
    total = sum(s.rate for s in streams)
    frames = []
    for _ in range(a.count):
        for k, s in enumerate(streams):
            credit[k] += s.rate
        k = max(range(len(streams)), key=lambda i: credit[i])
        credit[k] -= total
        f = bytearray(streams[k].next())
        f[0:12] = macs
        frames.append(bytes(f))
    write_pcap(a.out, frames)
    tuples, sizes = set(), {}
    for f in frames:
        l3, ver, proto, l4 = l4_of(f)
        src, dst = (f[26:30], f[30:34]) if ver == 4 else (f[22:38], f[38:54])
        tuples.add((bytes(src), bytes(dst), proto, bytes(f[l4:l4 + 4])))
        sizes[len(f) + 4] = sizes.get(len(f) + 4, 0) + 1
    print(json.dumps({
        "streams": [{"rate": s.rate, "len": len(s.pkt), "instructions": [i["type"] for i in s.ins]} for s in streams],
        "packets": len(frames),
        "flows": len(tuples),
        "wire_sizes": {str(k): v for k, v in sorted(sizes.items())},
    }))


if __name__ == "__main__":
    main()
