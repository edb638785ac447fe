"""UDP frames that already carry INT-MD v2.1 (NPT 1, the original
destination port saved in the shim): what an INT transit or sink receives
from the hops before it. Written from the spec in intswitch_trex.int_block.

Tunables: flows (default 1000), hops already in the stack (1-8, default 2),
bitmap (instruction bits 0-3: 0xF000 = node ID, L1 ports, hop latency,
queue; default), rhc (remaining hop count the source set, default 8),
int_port (the switches' int.udp_port, default 17768), size (frame bytes on
the wire, at least what the headers take; default 128), src / dst.
Hop k of the stack carries node ID k+1 (the source is node 1).
"""
from trex_stl_lib.api import Ether, IP, UDP, Raw, STLStream, STLPktBuilder, STLTXCont
from intswitch_trex import flow_vm, udp_type, int_block, pad_to, tunables, ETH, IPV4

DEFAULTS = dict(flows=1000, hops=2, bitmap=0xF000, rhc=8, int_port=17768, size=128, src="10.1.0.0",
                dst="10.0.2.10")


class IntswitchIntFrames(object):
    def get_streams(self, direction=0, port_id=0, **kwargs):
        t = tunables(kwargs, DEFAULTS)
        if not 1 <= t["hops"] <= 8:
            raise ValueError("hops must be 1 to 8")
        block = int_block(5001, t["hops"], bitmap=t["bitmap"], rhc=t["rhc"])
        hdr = Ether() / IP(src=t["src"], dst=t["dst"]) / UDP(sport=1024, dport=t["int_port"])
        pkt = hdr / Raw(block + b"\x00" * pad_to(len(hdr) + len(block), t["size"]))
        vm = flow_vm(False, ETH + IPV4, t["flows"], udp_type(), t["src"])
        return [STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(pps=1000))]


def register():
    return IntswitchIntFrames()
