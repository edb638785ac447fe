#!/usr/bin/env python3
"""A hostile-packet corpus and an independent check of what a switch sends,
written from the specs (RFC 791/8200/768/793, IEEE 802.1Q, INT-MD v2.1,
RFC 9343), sharing no code with intswitch.

  hostile_corpus.py make OUT.pcap [--seed S] [--mutations N] [--dst-mac MAC]
      Frames each crafted to break one rule (truncated at every header
      boundary, lengths past and short of the frame in every header, IHL < 5
      and past the end, three VLAN tags, IPv6 extension chains over the
      limit, HBH / Destination option lengths past the end, AltMark with
      wrong lengths, v4 and v6 fragments to the INT port, INT with length 0 /
      255 / not HopML x hops, HopML 0 and 31, RHC 0, version 1, NPT 3,
      reserved and checksum-complement bits, stacks at the very end, DSCP
      INT behind TCP options, TTL and hop limit 0 / 1, jumbo frames) plus
      N seeded random mutations of valid INT and AM-PM frames. Prints
      {"frames": n, "by_kind": {...}}.
  hostile_corpus.py check IN.pcap OUT.pcap [--int-port P] [--sink]
      Every frame of OUT is a frame of IN unchanged, or one routed (only its
      Ethernet header, TTL / hop limit and IPv4 checksum rewritten, and that
      checksum right), or well-formed: its
      Ethernet, VLAN, IPv4 (IHL, checksum, total length within the frame) or
      IPv6 (payload length, extension chain) headers, a UDP length within
      the IP payload (RFC 768), and an INT block (on the INT port) whose lengths agree. With
      --sink no frame carries a well-formed INT block. Prints {"frames",
      "unchanged", "routed", "checked", "bad": [first 20 reasons]}.
"""
import argparse
import json
import random
import struct
import sys

# The one's-complement sum and pcap I/O of the other independent decoder.
from int_decode import csum, pcap_frames, write_pcap

SRC4, DST4 = bytes([10, 0, 1, 10]), bytes([10, 0, 2, 10])
SRC6 = bytes.fromhex("20010db8000100000000000000000010")
DST6 = bytes.fromhex("20010db8000200000000000000000010")
INT_PORT = 17768


# ---- builders (from the RFCs) ----

def eth(dst, payload, etype=0x0800, vlans=()):
    h = dst + bytes.fromhex("020000000001")
    for tpid, vid in vlans:
        h += struct.pack("!HH", tpid, vid)
    return h + struct.pack("!H", etype) + payload


IP_ID = [0]


def ipv4(payload, proto=17, ttl=64, dscp=0, ihl=5, opts=b"", total=None, flags_frag=0x4000, fix=True):
    """Each packet its own IP ID: the check maps a sent frame back by it."""
    hdr_len = 20 + len(opts)
    t = hdr_len + len(payload) if total is None else total
    IP_ID[0] += 1
    h = struct.pack("!BBHHHBBH4s4s", (4 << 4) | ihl, dscp << 2, t, IP_ID[0], flags_frag, ttl, proto, 0, SRC4, DST4) + opts
    if fix:
        h = h[:10] + struct.pack("!H", 0xFFFF - csum(h)) + h[12:]
    return h + payload


def ipv6(payload, nh=17, hlim=64, plen=None, tc=0):
    p = len(payload) if plen is None else plen
    return struct.pack("!IHBB16s16s", (6 << 28) | (tc << 20), p, nh, hlim, SRC6, DST6) + payload


def l4_sum(proto, l4, v6):
    if v6:
        pseudo = SRC6 + DST6 + struct.pack("!IxxxB", len(l4), proto)
    else:
        pseudo = SRC4 + DST4 + struct.pack("!BBH", 0, proto, len(l4))
    return 0xFFFF - csum(pseudo + l4)


def udp(payload, sport=1024, dport=5001, length=None, v6=False):
    n = 8 + len(payload) if length is None else length
    u = struct.pack("!HHHH", sport, dport, n, 0) + payload
    c = l4_sum(17, u, v6) if length is None else 0
    return u[:6] + struct.pack("!H", c or 0xFFFF) + u[8:]


def tcp(payload, sport=1024, dport=443, opts=b"", v6=False):
    doff = (20 + len(opts)) // 4
    t = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, doff << 4, 0x10, 65535, 0, 0) + opts + payload
    return t[:16] + struct.pack("!H", l4_sum(6, t, v6)) + t[18:]


def int_block(hops=2, npt=1, saved=5001, hop_ml=None, length=None, ver=2, rhc=6, bitmap=0xF000, type_=1,
              reserved=0):
    """Shim + INT-MD header + stack: bitmap bits 0-3 are one word each."""
    words = bin(bitmap & 0xF000).count("1") + bin(bitmap & 0x00FF).count("1") + 2 * bin(bitmap & 0x0C00).count("1") + \
        2 * bin(bitmap & 0x0200).count("1")
    ml = words if hop_ml is None else hop_ml
    stack = b"".join(struct.pack("!I", (h + 1) << 8 | w) for h in range(hops) for w in range(words))
    ln = 3 + len(stack) // 4 if length is None else length
    shim = struct.pack("!BBH", (type_ << 4) | (npt << 2) | reserved, ln, saved)
    hdr = struct.pack("!BBBBHHHH", (ver << 4) | (reserved & 1), 0, ml & 0x1F, rhc, bitmap, 0, 0, 0)
    return shim + hdr + stack


def altmark(flow_mon_id=5, optlen=4, nh=17, hdr_len=0):
    data = struct.pack("!I", flow_mon_id << 12)
    body = struct.pack("!BB", 0x12, optlen) + data
    h = struct.pack("!BB", nh, hdr_len) + body
    return h + b"\0" * ((-len(h)) % 8)


# ---- the corpus ----

def corpus(dst_mac, seed, mutations):
    frames = []

    def add(kind, f):
        frames.append((kind, f))

    int4 = eth(dst_mac, ipv4(udp(int_block() + b"p" * 32, dport=INT_PORT)))
    int6 = eth(dst_mac, ipv6(udp(int_block() + b"p" * 32, dport=INT_PORT, v6=True)), 0x86DD)
    am6 = eth(dst_mac, ipv6(altmark() + udp(b"a" * 40, v6=True), nh=0), 0x86DD)
    plain4 = eth(dst_mac, ipv4(udp(b"u" * 40)))
    tcp4 = eth(dst_mac, ipv4(tcp(b"t" * 40), proto=6))
    for name, good in (("int4", int4), ("int6", int6), ("altmark6", am6), ("udp4", plain4), ("tcp4", tcp4)):
        add("valid_" + name, good)
        for cut in range(0, len(good), 2 if len(good) < 120 else 4):
            add("truncated_" + name, good[:cut])
    # Lengths past and short of the frame.
    for total in (0, 19, 20, 27, 60, 61, 200, 65535):
        add("ipv4_total_length", eth(dst_mac, ipv4(udp(b"x" * 40), total=total)))
    for plen in (0, 7, 47, 49, 200, 65535):
        add("ipv6_payload_length", eth(dst_mac, ipv6(udp(b"x" * 40, v6=True), plen=plen), 0x86DD))
    for ulen in (0, 7, 8, 47, 49, 300, 65535):
        add("udp_length", eth(dst_mac, ipv4(udp(b"x" * 40, length=ulen))))
        add("udp_length_int", eth(dst_mac, ipv4(udp(int_block(), dport=INT_PORT, length=ulen))))
    for ihl in range(0, 5):
        add("ipv4_ihl_short", eth(dst_mac, ipv4(udp(b"x" * 40), ihl=ihl)))
    add("ipv4_ihl_past_end", eth(dst_mac, ipv4(b"", ihl=15, proto=17))[:34])
    add("ipv4_options", eth(dst_mac, ipv4(udp(int_block(), dport=INT_PORT), ihl=7, opts=b"\x01" * 7 + b"\x00")))
    add("ipv4_bad_checksum", eth(dst_mac, ipv4(udp(b"x" * 40), fix=False)))
    add("ipv4_version_5", eth(dst_mac, bytes([0x55]) + ipv4(udp(b"x" * 40))[1:]))
    # VLANs.
    add("vlan_three_tags", eth(dst_mac, ipv4(udp(b"x" * 40)), vlans=((0x8100, 1), (0x8100, 2), (0x8100, 3))))
    add("vlan_qinq", eth(dst_mac, ipv4(udp(b"x" * 40)), vlans=((0x88A8, 10), (0x8100, 20))))
    add("vlan_cut", eth(dst_mac, b"", etype=0x8100)[:14] + b"\x00")
    # IPv6 extension headers.
    chain = b""
    for i in range(12):
        chain = struct.pack("!BB", 60 if i < 11 else 17, 0) + b"\x01\x04\0\0\0\0" + chain
    add("ipv6_ext_too_many", eth(dst_mac, ipv6(chain + udp(b"x" * 8, v6=True), nh=60), 0x86DD))
    add("ipv6_hbh_past_end", eth(dst_mac, ipv6(struct.pack("!BB", 17, 30) + b"\x01\x04\0\0\0\0", nh=0), 0x86DD))
    add("ipv6_dest_past_end", eth(dst_mac, ipv6(struct.pack("!BB", 17, 255) + b"\x01\x04\0\0\0\0", nh=60), 0x86DD))
    add("ipv6_opt_past_end", eth(dst_mac, ipv6(struct.pack("!BB", 17, 0) + b"\x01\x20\0\0\0\0" + udp(b"x", v6=True),
                                                nh=0), 0x86DD))
    for optlen in (0, 3, 5, 6, 255):
        for nh_hdr in (0, 60):
            add("altmark_bad_length",
                eth(dst_mac, ipv6(altmark(optlen=optlen) + udp(b"a" * 40, v6=True), nh=nh_hdr), 0x86DD))
    # Fragments carrying the INT port.
    add("ipv4_first_fragment_int", eth(dst_mac, ipv4(udp(int_block(), dport=INT_PORT), flags_frag=0x2000)))
    add("ipv4_later_fragment_int", eth(dst_mac, ipv4(udp(int_block(), dport=INT_PORT), flags_frag=0x0010)))
    frag6 = lambda off_m: struct.pack("!BBHI", 17, 0, off_m, 7)  # noqa: E731
    add("ipv6_first_fragment_int", eth(dst_mac, ipv6(frag6(1) + udp(int_block(), dport=INT_PORT, v6=True), nh=44),
                                       0x86DD))
    add("ipv6_later_fragment_int", eth(dst_mac, ipv6(frag6(8 << 3) + udp(int_block(), dport=INT_PORT, v6=True), nh=44),
                                       0x86DD))
    # INT blocks that break one rule each.
    bad_int = {
        "int_length_0": dict(length=0),
        "int_length_255": dict(length=255),
        "int_length_not_hops": dict(length=3 + 4 * 2 + 1),
        "int_hop_ml_0": dict(hop_ml=0),
        "int_hop_ml_31": dict(hop_ml=31),
        "int_rhc_0": dict(rhc=0),
        "int_version_1": dict(ver=1),
        "int_npt_3": dict(npt=3),
        "int_reserved_bits": dict(reserved=3),
        "int_checksum_complement": dict(bitmap=0xF001),
        "int_reserved_instructions": dict(bitmap=0xF07E),
        "int_type_3": dict(type_=3),
        "int_no_hops": dict(hops=0),
    }
    for name, kw in bad_int.items():
        for v6 in (False, True):
            b = int_block(**kw)
            if v6:
                add(name, eth(dst_mac, ipv6(udp(b + b"p" * 16, dport=INT_PORT, v6=True)), 0x86DD))
            else:
                add(name, eth(dst_mac, ipv4(udp(b + b"p" * 16, dport=INT_PORT))))
    add("int_stack_at_frame_end", eth(dst_mac, ipv4(udp(int_block(hops=3), dport=INT_PORT))))
    # DSCP-mode INT behind TCP options (codepoint 0x17).
    opts = b"\x02\x04\x05\xb4\x01\x01\x08\x0a" + b"\0" * 8 + b"\x01\x01\x01\x00"
    add("dscp_int_behind_tcp_options", eth(dst_mac, ipv4(tcp(int_block(npt=0, saved=0) + b"t" * 20, opts=opts), proto=6,
                                                         dscp=0x17)))
    add("dscp_int_cut_behind_tcp_options", eth(dst_mac, ipv4(tcp(int_block(npt=0, saved=0)[:9], opts=opts), proto=6,
                                                             dscp=0x17)))
    add("dscp_int_udp_bad_length", eth(dst_mac, ipv4(udp(int_block(npt=0, saved=0, length=200)), dscp=0x17)))
    # TTL and hop limit.
    for ttl in (0, 1):
        add("ipv4_ttl", eth(dst_mac, ipv4(udp(int_block(), dport=INT_PORT), ttl=ttl)))
        add("ipv6_hop_limit", eth(dst_mac, ipv6(udp(b"x" * 40, v6=True), hlim=ttl), 0x86DD))
    # Jumbo frames (more than one mbuf).
    add("jumbo_ipv4", eth(dst_mac, ipv4(udp(b"j" * 8900))))
    add("jumbo_int", eth(dst_mac, ipv4(udp(int_block() + b"j" * 8900, dport=INT_PORT))))
    # Other ethertypes and runts.
    add("runt", eth(dst_mac, b"")[:10])
    add("unknown_ethertype", eth(dst_mac, b"\0" * 46, etype=0x88B5))
    add("arp_cut", eth(dst_mac, b"\x00\x01\x08\x00\x06\x04", etype=0x0806))
    # Seeded random mutations of valid INT and AM-PM frames.
    rng = random.Random(seed)
    bases = [int4, int6, am6]
    for _ in range(mutations):
        f = bytearray(rng.choice(bases))
        if f[12:14] == b"\x08\x00":
            # A fresh IP ID (checksum fixed) before the damage.
            IP_ID[0] += 1
            f[18:20] = struct.pack("!H", IP_ID[0])
            f[24:26] = b"\0\0"
            f[24:26] = struct.pack("!H", 0xFFFF - csum(bytes(f[14:34])))
        for _ in range(rng.randint(1, 4)):
            what = rng.random()
            at = rng.randrange(len(f))
            if what < 0.5:
                f[at] = rng.randrange(256)
            elif what < 0.8:
                f[at] ^= 1 << rng.randrange(8)
            elif what < 0.9:
                f[at] = rng.choice((0, 0xFF))
            else:
                del f[at:]
                if not f:
                    f = bytearray(b"\0")
        add("mutation", bytes(f))
    return frames


# ---- the check ----

def above_l2(f):
    """The frame from its IP header on, TTL / hop limit and the IPv4
    checksum zeroed (what a router rewrites), or None when not IP."""
    if len(f) < 14:
        return None
    et, o = struct.unpack("!H", f[12:14])[0], 14
    while et in (0x8100, 0x88A8) and o + 4 <= len(f):
        et, o = struct.unpack("!H", f[o + 2:o + 4])[0], o + 4
    b = bytearray(f[o:])
    if et == 0x0800 and len(b) >= 20:
        b[8] = 0
        b[10:12] = b"\0\0"
    elif et == 0x86DD and len(b) >= 40:
        b[7] = 0
    else:
        return None
    return bytes(b)


def routed_ok(f):
    """A routed frame's own part: its IPv4 header checksum verifies."""
    et, o = struct.unpack("!H", f[12:14])[0], 14
    while et in (0x8100, 0x88A8):
        et, o = struct.unpack("!H", f[o + 2:o + 4])[0], o + 4
    if et != 0x0800:
        return True
    ihl = (f[o] & 0xF) * 4
    return len(f) >= o + ihl and csum(f[o:o + ihl]) == 0xFFFF


def well_formed(f, int_port, sink, bad_sum_ids=frozenset()):
    """None when `f` is well-formed, else why not. An IPv4 header checksum
    that was already wrong on the received frame of the same IP ID may stay
    wrong (RFC 1624 updates keep it detectable)."""
    if len(f) < 14:
        return "shorter than an Ethernet header"
    et, o, tags = struct.unpack("!H", f[12:14])[0], 14, 0
    while et in (0x8100, 0x88A8):
        tags += 1
        if tags > 2 or o + 4 > len(f):
            return "VLAN tags"
        et, o = struct.unpack("!H", f[o + 2:o + 4])[0], o + 4
    if et == 0x0800:
        if o + 20 > len(f) or f[o] >> 4 != 4 or f[o] & 0xF < 5:
            return "IPv4 header"
        ihl = (f[o] & 0xF) * 4
        total = struct.unpack("!H", f[o + 2:o + 4])[0]
        if o + ihl > len(f):
            return "IPv4 header past the frame"
        if csum(f[o:o + ihl]) != 0xFFFF and f[o + 4:o + 6] not in bad_sum_ids:
            return "IPv4 header checksum (right on the received frame)"
        if total < ihl or o + total > len(f):
            return "IPv4 total length %d in %d bytes" % (total, len(f) - o)
        proto, l4, end = f[o + 9], o + ihl, o + total
        frag = struct.unpack("!H", f[o + 6:o + 8])[0] & 0x3FFF
    elif et == 0x86DD:
        if o + 40 > len(f) or f[o] >> 4 != 6:
            return "IPv6 header"
        plen = struct.unpack("!H", f[o + 4:o + 6])[0]
        end = o + 40 + plen
        if end > len(f):
            return "IPv6 payload length %d in %d bytes" % (plen, len(f) - o - 40)
        proto, l4, frag, n = f[o + 6], o + 40, 0, 0
        while proto in (0, 43, 60, 44):
            n += 1
            if n > 8 or l4 + 8 > end:
                return "IPv6 extension chain"
            if proto == 44:
                frag = struct.unpack("!H", f[l4 + 2:l4 + 4])[0]
                proto, l4 = f[l4], l4 + 8
            else:
                proto, l4 = f[l4], l4 + 8 * (f[l4 + 1] + 1)
            if l4 > end:
                return "IPv6 extension header past the payload"
    else:
        return None  # not IP: nothing the switch writes
    if proto != 17 or frag:
        return None
    if l4 + 8 > end:
        return "UDP header past the IP payload"
    sport, dport, ulen = struct.unpack("!HHH", f[l4:l4 + 6])
    # RFC 768: the datagram is `ulen` bytes; an IP payload longer than that
    # carries trailing bytes receivers drop (as the sender sent them).
    if ulen < 8 or ulen > end - l4:
        return "UDP length %d, IP payload %d" % (ulen, end - l4)
    end = l4 + ulen
    if dport != int_port:
        return None
    b = l4 + 8
    if b + 16 > end or f[b] >> 4 != 1:
        return None  # not an INT-MD block: plain UDP to the port
    words, hop_ml = f[b + 1], f[b + 6] & 0x1F
    ok = f[b + 4] >> 4 == 2 and words >= 3 and hop_ml and (words - 3) % hop_ml == 0 and b + 4 + 4 * words <= end
    if ok and sink:
        return "a sink sent a well-formed INT block"
    if not ok and f[b + 4] >> 4 == 2:
        return "INT block lengths (length %d, HopML %d)" % (words, hop_ml)
    return None


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    m.add_argument("--seed", type=int, default=37)
    m.add_argument("--mutations", type=int, default=400)
    m.add_argument("--dst-mac", default="02:00:00:00:01:01")
    c = sub.add_parser("check")
    c.add_argument("inp")
    c.add_argument("out")
    c.add_argument("--int-port", type=int, default=INT_PORT)
    c.add_argument("--sink", action="store_true")
    a = ap.parse_args()
    if a.cmd == "make":
        fr = corpus(bytes.fromhex(a.dst_mac.replace(":", "")), a.seed, a.mutations)
        write_pcap(a.out, [f for _, f in fr])
        kinds = {}
        for k, _ in fr:
            kinds[k] = kinds.get(k, 0) + 1
        print(json.dumps({"frames": len(fr), "by_kind": kinds}))
        return
    frames = list(pcap_frames(a.inp))
    inp = set(frames)
    bad_sum_ids = set()
    for f in frames:
        if len(f) >= 34 and f[12:14] == b"\x08\x00" and f[14] >> 4 == 4 and f[14] & 0xF >= 5:
            ihl = (f[14] & 0xF) * 4
            if len(f) < 14 + ihl or csum(f[14:14 + ihl]) != 0xFFFF:
                bad_sum_ids.add(f[18:20])
    routed = {above_l2(f) for f in frames} - {None}
    out = list(pcap_frames(a.out))
    unchanged, l3_only, bad = 0, 0, []
    for i, f in enumerate(out):
        if f in inp:
            unchanged += 1
            continue
        # Routed: only L2, TTL / hop limit and the IPv4 checksum rewritten;
        # what the sender put above that is the sender's (a router does not
        # judge UDP lengths or INT blocks it does not act on).
        if above_l2(f) in routed:
            l3_only += 1
            if not routed_ok(f):
                bad.append("frame %d (%d bytes): routed with a wrong IPv4 checksum" % (i, len(f)))
            continue
        why = well_formed(f, a.int_port, a.sink, bad_sum_ids)
        if why:
            bad.append("frame %d (%d bytes): %s" % (i, len(f), why))
    print(json.dumps({"frames": len(out), "unchanged": unchanged, "routed": l3_only,
                      "checked": len(out) - unchanged - l3_only, "bad": bad[:20], "bad_count": len(bad)}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
