"""Simple IMIX (wire sizes 64:7, 594:4, 1518:1, FCS included) over many
UDP flows, IPv4 and IPv6: the mixed-size case for every role.

Tunables: flows (per size, default 1000), v6_share (default 0.2),
src / dst (IPv4 10.1.0.0 -> 10.0.2.10; IPv6 2001:db8:1:: -> 2001:db8:2::10).
The streams' packet rates keep the 7:4:1 mix. IPv6's small frames are 66
bytes: its headers do not fit in 64.
"""
from trex_stl_lib.api import Ether, IP, IPv6, UDP, Raw, STLStream, STLPktBuilder, STLTXCont
from intswitch_trex import flow_vm, udp_type, pad_to, tunables, IMIX, ETH, IPV4, IPV6

DEFAULTS = dict(flows=1000, v6_share=0.2, src="10.1.0.0", dst="10.0.2.10")


class IntswitchImix(object):
    def get_streams(self, direction=0, port_id=0, **kwargs):
        t = tunables(kwargs, DEFAULTS)
        total = sum(w for _, w in IMIX)
        out = []
        for wire, weight in IMIX:
            for v6, share in ((False, 1 - t["v6_share"]), (True, t["v6_share"])):
                if share <= 0:
                    continue
                l3 = IPv6(src="2001:db8:1::", dst="2001:db8:2::10") if v6 else IP(src=t["src"], dst=t["dst"])
                hdr = Ether() / l3 / UDP(sport=1024, dport=5001)
                pkt = hdr / Raw(b"\x00" * pad_to(len(hdr), wire))
                vm = flow_vm(v6, ETH + (IPV6 if v6 else IPV4), t["flows"], udp_type(), "2001:db8:1::" if v6 else t["src"])
                # pps weights: 1000 pps for the whole mix at multiplier 1.
                out.append(STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm),
                                     mode=STLTXCont(pps=1000.0 * weight / total * share)))
        return out


def register():
    return IntswitchImix()
