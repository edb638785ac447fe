"""Traffic for an INT-label domain: UDP and TCP flows from many sources to
several destinations, so that every egress port of the fabric carries user
packets to label (INT-label labels packets of the flows, it adds none).

Tunables: flows (per destination and protocol, default 500), dsts
(comma-separated IPv4 destinations, default "10.0.2.10,10.0.3.10,10.0.4.10"),
tcp_share (default 0.5), size (default 256), src (default 10.1.0.0),
pps per destination (default 1000).
"""
from trex_stl_lib.api import Ether, IP, TCP, UDP, Raw, STLStream, STLPktBuilder, STLTXCont
from intswitch_trex import flow_vm, udp_type, tcp_type, pad_to, tunables, ETH, IPV4

DEFAULTS = dict(flows=500, dsts="10.0.2.10,10.0.3.10,10.0.4.10", tcp_share=0.5, size=256, src="10.1.0.0", pps=1000)


class IntswitchLabel(object):
    def get_streams(self, direction=0, port_id=0, **kwargs):
        t = tunables(kwargs, DEFAULTS)
        out = []
        for dst in [d for d in str(t["dsts"]).split(",") if d]:
            for tcp, share in ((False, 1 - t["tcp_share"]), (True, t["tcp_share"])):
                if share <= 0:
                    continue
                l4 = TCP(sport=1024, dport=443, flags="A") if tcp else UDP(sport=1024, dport=5001)
                hdr = Ether() / IP(src=t["src"], dst=dst) / l4
                pkt = hdr / Raw(b"\x00" * pad_to(len(hdr), t["size"]))
                vm = flow_vm(False, ETH + IPV4, t["flows"], tcp_type() if tcp else udp_type(), t["src"])
                out.append(STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(pps=t["pps"] * share)))
        return out


def register():
    return IntswitchLabel()
