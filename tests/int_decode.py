#!/usr/bin/env python3
"""Independent decoder for INT-MD v2.1 packets and Telemetry Report v2.0
packets, written from the spec (../shared/reference/wire-formats.md §1-2),
sharing no code with intswitch. The tests use it to check what the switches
put on the wire.

  int_decode.py pcap FILE [--int-port P | --int-dscp V/M]    INT packets in a pcap -> JSON lines
  int_decode.py listen ADDR:PORT --count N [...]             N report packets -> JSON lines
  int_decode.py reports FILE [--int-port P | --int-dscp V/M] report packets in a pcap
                                                             (Ethernet/IP/UDP) -> JSON lines

Presence by UDP port (NPT 1/2: INT after the UDP header) or, with
--int-dscp, by DSCP (NPT 0: INT after the UDP header or after the TCP
header and its options). Each INT packet line also says whether its IPv4
header checksum and its UDP or TCP checksum verify (recomputed here over
the whole packet).
"""
import argparse
import ipaddress
import json
import socket
import struct
import sys

# Instruction bitmap bit -> (name, bytes). Bit 0 is the MSB.
INSTR = [("node_id", 4), ("l1_ports", 4), ("hop_latency", 4), ("queue", 4), ("ingress_ts", 8),
         ("egress_ts", 8), ("l2_ports", 8), ("tx_util", 4), ("buffer", 4)]


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def hop_fields(bitmap, b, bit15_is_drop=False):
    """Decodes one hop (or a report's metadata) the bitmap describes."""
    out, o = {}, 0
    for bit in range(16):
        if not bitmap & (0x8000 >> bit):
            continue
        if bit < len(INSTR):
            name, size = INSTR[bit]
            v = b[o:o + size]
            if len(v) < size:
                raise ValueError("metadata cut short")
            if name == "node_id":
                out["node_id"] = struct.unpack("!I", v)[0]
            elif name == "l1_ports":
                out["ingress_port"], out["egress_port"] = struct.unpack("!HH", v)
            elif name == "hop_latency":
                out["hop_latency_ns"] = struct.unpack("!I", v)[0]
            elif name == "queue":
                w = struct.unpack("!I", v)[0]
                out["queue_id"], out["queue_occupancy"] = w >> 24, w & 0xFFFFFF
            elif name == "ingress_ts":
                out["ingress_ts_ns"] = struct.unpack("!Q", v)[0]
            elif name == "egress_ts":
                out["egress_ts_ns"] = struct.unpack("!Q", v)[0]
            elif name == "l2_ports":
                out["l2_ingress"], out["l2_egress"] = struct.unpack("!II", v)
            elif name == "tx_util":
                out["tx_util"] = struct.unpack("!I", v)[0]
            elif name == "buffer":
                w = struct.unpack("!I", v)[0]
                out["buffer_id"], out["buffer_occupancy"] = w >> 24, w & 0xFFFFFF
            o += size
        else:
            v = b[o:o + 4]
            if bit == 15 and bit15_is_drop:
                out["queue_id"], out["drop_reason"] = v[0], v[1]
            else:
                out["reserved_bit_%d" % bit] = struct.unpack("!I", v)[0]
            o += 4
    return out, o


def int_packet(f, int_port, check_sums=True, dscp=None):
    """Decodes an Ethernet frame carrying INT: over UDP to int_port (NPT 1
    or 2) or, with dscp = (value, mask), marked by DSCP (NPT 0)."""
    (et,) = struct.unpack("!H", f[12:14])
    l3 = 14
    while et in (0x8100, 0x88A8):
        (et,) = struct.unpack("!H", f[l3 + 2:l3 + 4])
        l3 += 4
    r = {}
    if et == 0x0800:
        ihl = (f[l3] & 0xF) * 4
        total = struct.unpack("!H", f[l3 + 2:l3 + 4])[0]
        proto = f[l3 + 9]
        src, dst = ipaddress.ip_address(f[l3 + 12:l3 + 16]), ipaddress.ip_address(f[l3 + 16:l3 + 20])
        l4, end = l3 + ihl, l3 + total
        r["ip_checksum_ok"] = csum(f[l3:l3 + ihl]) == 0xFFFF
        r["dscp"] = f[l3 + 1] >> 2
        pseudo = f[l3 + 12:l3 + 20] + struct.pack("!BBH", 0, proto, end - l4)
    elif et == 0x86DD:
        plen = struct.unpack("!H", f[l3 + 4:l3 + 6])[0]
        proto = f[l3 + 6]
        src, dst = ipaddress.ip_address(f[l3 + 8:l3 + 24]), ipaddress.ip_address(f[l3 + 24:l3 + 40])
        l4, end = l3 + 40, l3 + 40 + plen
        r["dscp"] = ((f[l3] & 0x0F) << 2) | (f[l3 + 1] >> 6)
        pseudo = f[l3 + 8:l3 + 40] + struct.pack("!IxxxB", end - l4, proto)
    else:
        raise ValueError("not IP")
    r.update(src=str(src), dst=str(dst), proto=proto, ip_end=end, frame_len=len(f))
    sport, dport = struct.unpack("!HH", f[l4:l4 + 4])
    if dscp is None:
        if proto != 17 or dport != int_port:
            raise ValueError("not UDP to the INT port %d" % int_port)
    elif r["dscp"] & dscp[1] != dscp[0]:
        raise ValueError("DSCP %#x does not mark INT" % r["dscp"])
    if proto == 17:
        ulen, ucs = struct.unpack("!HH", f[l4 + 4:l4 + 8])
        r["udp_len"] = ulen
        b = l4 + 8
        if check_sums and end <= len(f):
            r["udp_length_ok"] = ulen == end - l4
            r["udp_checksum_ok"] = ucs == 0 or csum(pseudo + f[l4:end]) == 0xFFFF
    elif proto == 6 and dscp is not None:
        b = l4 + (f[l4 + 12] >> 4) * 4  # after the TCP options
        if check_sums and end <= len(f):
            r["tcp_checksum_ok"] = csum(pseudo + f[l4:end]) == 0xFFFF
    else:
        raise ValueError("protocol %d cannot carry INT" % proto)
    shim = f[b:b + 4]
    r["int_type"], r["npt"] = shim[0] >> 4, (shim[0] >> 2) & 3
    length_words = shim[1]
    saved = struct.unpack("!H", shim[2:4])[0]
    h = f[b + 4:b + 16]
    r["version"] = h[0] >> 4
    r["d"], r["e"], r["m"] = bool(h[0] & 8), bool(h[0] & 4), bool(h[0] & 2)
    hop_ml = h[2] & 0x1F
    r["hop_ml"], r["rhc"] = hop_ml, h[3]
    r["bitmap"], r["domain_id"] = struct.unpack("!HH", h[4:8])
    r["ds_instruction"], r["ds_flags"] = struct.unpack("!HH", h[8:12])
    stack = f[b + 16:b + 4 + 4 * length_words]
    if hop_ml == 0 or len(stack) % (4 * hop_ml):
        raise ValueError("bad stack (HopML %d, %d bytes)" % (hop_ml, len(stack)))
    hops = []
    for i in range(0, len(stack), 4 * hop_ml):
        fields, used = hop_fields(r["bitmap"], stack[i:i + 4 * hop_ml])
        if used != 4 * hop_ml:
            raise ValueError("HopML %d does not match bitmap %#06x" % (hop_ml, r["bitmap"]))
        hops.append(fields)
    r["hops"] = hops  # newest first
    after = b + 4 + 4 * length_words
    if r["npt"] == 0:
        r["orig_proto"], r["orig_sport"], r["orig_dport"], r["orig_dscp"] = proto, sport, dport, (saved & 0xFF) >> 2
    elif r["npt"] == 1:
        r["orig_proto"], r["orig_sport"], r["orig_dport"] = 17, sport, saved
    elif r["npt"] == 2:
        r["orig_proto"] = saved & 0xFF
        if r["orig_proto"] in (6, 17) and after + 4 <= len(f):
            r["orig_sport"], r["orig_dport"] = struct.unpack("!HH", f[after:after + 4])
    return r


def report_packet(p, int_port, dscp=None):
    """Decodes a Telemetry Report v2.0 UDP payload."""
    w, node = struct.unpack("!II", p[:8])
    g = {"version": w >> 28, "hw_id": (w >> 22) & 0x3F, "seq": w & 0x3FFFFF, "node_id": node, "reports": []}
    o = 8
    while o + 4 <= len(p):
        b0, length, md_len, flags = p[o], p[o + 1], p[o + 2], p[o + 3]
        end = len(p) if length == 0xFF else o + 4 + 4 * length
        body = p[o + 4:end]
        rep = {"rep_type": b0 >> 4, "in_type": b0 & 0xF, "md_len": md_len,
               "flags": "".join(n for bit, n in ((0x80, "D"), (0x40, "Q"), (0x20, "F"), (0x10, "I")) if flags & bit)}
        bits, dom, _dsb, _dss = struct.unpack("!HHHH", body[:8])
        rep["rep_md_bits"], rep["domain_id"] = bits, dom
        md, used = hop_fields(bits, body[8:8 + 4 * md_len], bit15_is_drop=True)
        if used != 4 * md_len:
            raise ValueError("MD length %d words does not match RepMdBits %#06x" % (md_len, bits))
        rep["metadata"] = md
        inner = body[8 + 4 * md_len:]
        if rep["rep_type"] == 1 and rep["in_type"] == 3:
            rep["inner"] = int_packet(inner, int_port, check_sums=False, dscp=dscp)
        g["reports"].append(rep)
        o = end
    return g


def udp_payload(f):
    """The UDP payload of an Ethernet frame (IPv4 or IPv6, no extension headers)."""
    (et,) = struct.unpack("!H", f[12:14])
    if et == 0x0800:
        l4 = 14 + (f[14] & 0xF) * 4
        if f[23] != 17:
            raise ValueError("not UDP")
    elif et == 0x86DD:
        l4 = 14 + 40
        if f[20] != 17:
            raise ValueError("not UDP")
    else:
        raise ValueError("not IP")
    (ulen,) = struct.unpack("!H", f[l4 + 4:l4 + 6])
    return f[l4 + 8:l4 + ulen]


def pcap_frames(path):
    with open(path, "rb") as fh:
        data = fh.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise ValueError("not a little-endian pcap")
    o = 24
    while o + 16 <= len(data):
        _s, _us, incl, _orig = struct.unpack("<IIII", data[o:o + 16])
        yield data[o + 16:o + 16 + incl]
        o += 16 + incl


def write_pcap(path, frames):
    """A little-endian pcap (Ethernet) of the frames, 1 us apart."""
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, f in enumerate(frames):
            out.write(struct.pack("<IIII", i // 1000000, i % 1000000, len(f), len(f)))
            out.write(f)


def dscp_arg(text):
    """VALUE[/MASK] (mask 0x3f when left out) -> (value, mask)."""
    v, _, m = text.partition("/")
    return int(v, 0), int(m or "0x3f", 0)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("pcap")
    a.add_argument("file")
    a.add_argument("--int-port", type=int, default=17768)
    a.add_argument("--int-dscp", type=dscp_arg)
    c = sub.add_parser("reports")
    c.add_argument("file")
    c.add_argument("--int-port", type=int, default=17768)
    c.add_argument("--int-dscp", type=dscp_arg)
    b = sub.add_parser("listen")
    b.add_argument("addr")
    b.add_argument("--count", type=int, required=True)
    b.add_argument("--timeout", type=float, default=30)
    b.add_argument("--int-port", type=int, default=17768)
    b.add_argument("--int-dscp", type=dscp_arg)
    args = ap.parse_args()
    if args.cmd == "pcap":
        for f in pcap_frames(args.file):
            try:
                print(json.dumps(int_packet(f, args.int_port, dscp=args.int_dscp)))
            except (ValueError, struct.error, IndexError) as e:
                print(json.dumps({"error": str(e), "frame_len": len(f)}))
        return
    if args.cmd == "reports":
        for f in pcap_frames(args.file):
            try:
                print(json.dumps(report_packet(udp_payload(f), args.int_port, args.int_dscp)))
            except (ValueError, struct.error, IndexError) as e:
                print(json.dumps({"error": str(e), "frame_len": len(f)}))
        return
    host, port = args.addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host.strip("[]"), int(port)))
    s.settimeout(args.timeout)
    print(json.dumps({"listening": args.addr}), flush=True)
    for _ in range(args.count):
        try:
            p = s.recv(65536)
        except socket.timeout:
            print(json.dumps({"error": "timeout"}))
            sys.exit(1)
        try:
            print(json.dumps(report_packet(p, args.int_port, args.int_dscp)), flush=True)
        except (ValueError, struct.error, IndexError) as e:
            print(json.dumps({"error": str(e), "bytes": len(p)}), flush=True)


if __name__ == "__main__":
    main()
