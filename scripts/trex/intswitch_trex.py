"""Helpers the intswitch TRex profiles share (imported from the profile's
folder, which TRex's loader puts on the path). Frames are built with scapy;
INT-MD and AltMark bytes are written from their specs (INT v2.1 §4-5,
RFC 9343), not from intswitch's code. Field-engine offsets are numeric:
they work with TRex's own scapy and with PyPI's trex-stl-lib alike."""
import ipaddress
import struct

from trex_stl_lib.api import (STLScVmRaw, STLVmFixChecksumHw, STLVmFixIpv4, STLVmFlowVar, STLVmWrFlowVar,
                              CTRexVmInsFixHwCs)

ETH = 14
IPV4 = 20
IPV6 = 40

# Wire sizes (FCS included) of the simple IMIX and their weights.
IMIX = [(64, 7), (594, 4), (1518, 1)]


def flow_vm(v6, l4_offset, flows, l4_type, src):
    """Field engine: `flows` flows by source address (`src` plus 0..flows-1
    in its low 32 bits) and source port, cycled in order; IPv4 header and
    L4 checksums fixed."""
    if not 1 <= flows <= 1 << 24:
        raise ValueError("flows must be 1 to 16777216")
    src_off = ETH + (8 + 12 if v6 else 12)  # the last 4 bytes of the source address
    low = int(ipaddress.ip_address(src)) & 0xFFFFFFFF
    if low + flows > 1 << 32:
        raise ValueError("src + flows must stay within the low 32 bits")
    ins = [
        STLVmFlowVar(name="flow", min_value=0, max_value=flows - 1, size=4, op="inc"),
        STLVmWrFlowVar(fv_name="flow", pkt_offset=src_off, add_val=low),
        STLVmFlowVar(name="sport", min_value=1024, max_value=1024 + min(flows, 64511) - 1, size=2, op="inc"),
        STLVmWrFlowVar(fv_name="sport", pkt_offset=l4_offset),
    ]
    if not v6:
        ins.append(STLVmFixIpv4(offset=ETH))
    ins.append(STLVmFixChecksumHw(l3_offset=ETH, l4_offset=l4_offset, l4_type=l4_type))
    return STLScVmRaw(ins)


def udp_type():
    return CTRexVmInsFixHwCs.L4_TYPE_UDP


def tcp_type():
    return CTRexVmInsFixHwCs.L4_TYPE_TCP


def int_block(orig_dport, hops, bitmap=0xF000, rhc=8, domain_id=0, ds_flags=0, node_base=1):
    """INT-MD v2.1 shim + header + a stack of `hops` hops (newest first),
    NPT 1 (the original UDP destination port saved). Bitmap bits 0-3 are
    the 4-byte node ID, L1 ports, hop latency and queue words."""
    words = bin(bitmap & 0xF000).count("1")
    if bitmap & 0x0FFF:
        raise ValueError("these profiles write the first four instructions only")
    stack = b""
    for h in reversed(range(hops)):  # newest (highest node) first
        vals = {0x8000: node_base + h, 0x4000: (1 << 16) | 2, 0x2000: 1000 * (h + 1), 0x1000: (0 << 24) | (h * 3)}
        for bit in (0x8000, 0x4000, 0x2000, 0x1000):
            if bitmap & bit:
                stack += struct.pack("!I", vals[bit])
    length = 3 + words * hops
    shim = struct.pack("!BBH", (1 << 4) | (1 << 2), length, orig_dport)
    hdr = struct.pack("!BBBBHHHH", 2 << 4, 0, words, max(rhc - hops, 0), bitmap, domain_id, 0, ds_flags)
    return shim + hdr + stack


def altmark_hbh(flow_mon_id, l_bit=0, d_bit=0, nh=17):
    """An 8-byte Hop-by-Hop header with only the AltMark option (RFC 9343)."""
    data = (flow_mon_id << 12) | (l_bit << 11) | (d_bit << 10)
    return struct.pack("!BBBBI", nh, 0, 0x12, 4, data)


def pad_to(pkt_len, wire):
    """Payload bytes that make a frame of `pkt_len` header bytes `wire`
    bytes on the wire (FCS included)."""
    return max(wire - 4 - pkt_len, 0)


def tunables(kwargs, defaults):
    """The profile's tunables from TRex's keyword arguments (the console's
    `-t key=value` gives strings), typed as the defaults; an unknown one is
    an error naming it."""
    out = dict(defaults)
    for k, v in kwargs.items():
        if k not in defaults:
            raise ValueError("unknown tunable '%s' (known: %s)" % (k, ", ".join(sorted(defaults))))
        t = type(defaults[k])
        out[k] = (v.lower() in ("1", "true", "yes")) if t is bool and isinstance(v, str) else t(v)
    return out
