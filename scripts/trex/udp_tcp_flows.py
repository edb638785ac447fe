"""Plain UDP and TCP traffic over many flows: the router or bridge case.

Tunables (TRex: -t flows=100000,size=128,tcp_share=0.6,v6_share=0.2):
  flows      distinct flows per stream, 1k to 1M (source address + port)
  size       frame size on the wire, FCS included (64-1518)
  tcp_share  share of TCP (ACK segments to port 443); the rest UDP to 5001
  v6_share   share of IPv6 (2001:db8:1::/64 -> 2001:db8:2::10)
  src, dst   IPv4 source base and destination (10.1.0.0 -> 10.0.2.10)
Each stream's field engine walks the flows in order; the streams' rates
keep the shares.
"""
from trex_stl_lib.api import Ether, IP, IPv6, TCP, UDP, Raw, STLStream, STLPktBuilder, STLTXCont, STLProfile
from intswitch_trex import flow_vm, udp_type, tcp_type, pad_to, tunables, ETH, IPV4, IPV6

DEFAULTS = dict(flows=1000, size=64, tcp_share=0.6, v6_share=0.2, src="10.1.0.0", dst="10.0.2.10")


class IntswitchFlows(object):
    def streams(self, flows=1000, size=64, tcp_share=0.6, v6_share=0.2, src="10.1.0.0", dst="10.0.2.10"):
        out = []
        for v6, vshare in ((False, 1 - v6_share), (True, v6_share)):
            for tcp, tshare in ((False, 1 - tcp_share), (True, tcp_share)):
                share = vshare * tshare
                if share <= 0:
                    continue
                l3 = IPv6(src="2001:db8:1::", dst="2001:db8:2::10") if v6 else IP(src=src, dst=dst)
                l4 = TCP(sport=1024, dport=443, flags="A") if tcp else UDP(sport=1024, dport=5001)
                hdr = Ether() / l3 / l4
                pkt = hdr / Raw(b"\x00" * pad_to(len(hdr), size))
                l4_off = ETH + (IPV6 if v6 else IPV4)
                vm = flow_vm(v6, l4_off, flows, tcp_type() if tcp else udp_type(), "2001:db8:1::" if v6 else src)
                out.append(STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(percentage=100 * share)))
        return out

    def get_streams(self, direction=0, port_id=0, **kwargs):
        return self.streams(**tunables(kwargs, DEFAULTS))


def register():
    return IntswitchFlows()
