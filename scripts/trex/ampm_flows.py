"""Flows for AM-PM: IPv6 UDP flows that an initiator's [[ampm.flow]] rules
match (to dport 5001 and 5002 by default), and, with marked=1, the same
flows already carrying the RFC 9343 AltMark option in a Hop-by-Hop header
(what a transit or terminator receives; FlowMonID flow_mon_id, L and D 0).

Tunables: flows (per stream, default 100), size (default 128), ports
(comma-separated destination ports, default "5001,5002"), marked (0|1),
flow_mon_id (default 1), pps per stream (default 1000).
"""
from trex_stl_lib.api import Ether, IPv6, UDP, Raw, STLStream, STLPktBuilder, STLTXCont
from intswitch_trex import flow_vm, udp_type, altmark_hbh, pad_to, tunables, ETH, IPV6

DEFAULTS = dict(flows=100, size=128, ports="5001,5002", marked=False, flow_mon_id=1, pps=1000)


class IntswitchAmpm(object):
    def get_streams(self, direction=0, port_id=0, **kwargs):
        t = tunables(kwargs, DEFAULTS)
        out = []
        for port in [int(p) for p in str(t["ports"]).split(",") if p]:
            if t["marked"]:
                # nh 0: Hop-by-Hop, then the raw 8-byte header, then UDP.
                hbh = altmark_hbh(t["flow_mon_id"])
                l3 = IPv6(src="2001:db8:1::", dst="2001:db8:2::10", nh=0)
                hdr = Ether() / l3 / Raw(hbh) / UDP(sport=1024, dport=port)
                l4 = ETH + IPV6 + len(hbh)
            else:
                hdr = Ether() / IPv6(src="2001:db8:1::", dst="2001:db8:2::10") / UDP(sport=1024, dport=port)
                l4 = ETH + IPV6
            pkt = hdr / Raw(b"\x00" * pad_to(len(hdr), t["size"]))
            vm = flow_vm(True, l4, t["flows"], udp_type(), "2001:db8:1::")
            out.append(STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(pps=t["pps"])))
        return out


def register():
    return IntswitchAmpm()
