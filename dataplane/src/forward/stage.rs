//! Forwarding as the pipeline's first stage: the worker's flow table and
//! MAC table, the decision of `forward`, holding packets whose next hop is
//! being resolved, and the shortcuts only forwarding can allow (a
//! cross-connect's wire, a bridge's Ethernet-only path, a router's quick
//! path at `Depth::L3`).

use crate::counters::CounterValues;
use crate::flow_table::{FlowAction, FlowTable};
use crate::mac_table::MacTable;
use crate::parse::{L3Kind, PacketMeta};
use crate::pipeline::{Burst, Cx, Depth, Output, Packet, QuickConsent, Stage, Step};
use crate::pktbuf::PacketBuf;
use crate::tables::{Mode, Tables};
use crate::DropReason;

use super::{ControlSink, Ctx, Verdict};

/// Flow-table size from which a burst is parsed and prefetched first.
pub const PREFETCH_MIN_FLOWS: usize = 4096;

/// A worker's forwarding state.
pub struct ForwardStage<C: ControlSink> {
    pub flows: FlowTable,
    pub macs: MacTable,
    /// Learn a flow entry on a miss.
    pub learn: bool,
    /// Where requests to the control core go (neighbours, resolution, MACs).
    pub control: C,
    /// The burst's port verifies IPv4 header checksums
    /// (`Tables::nic_checks_ipv4`), set in `begin`.
    nic_checks: bool,
}

impl<C: ControlSink> ForwardStage<C> {
    pub fn new(flows: FlowTable, macs: MacTable, learn: bool, control: C) -> ForwardStage<C> {
        ForwardStage { flows, macs, learn, control, nic_checks: false }
    }

    /// Whether the flow table has anything to do (entries, or learning):
    /// the full path's lookup, and the quick path's for a burst.
    #[inline(always)]
    pub fn flows_in_use(&self) -> bool {
        self.learn || !self.flows.is_empty()
    }

    /// The peer a cross-connect passes `in_port`'s frames to untouched.
    #[inline]
    pub fn wire_peer(&self, t: &Tables, in_port: usize) -> Option<usize> {
        if self.flows_in_use() {
            return None;
        }
        t.wire_peer(in_port)
    }

    /// Where a cross-connect sends every packet from `in_port` that parses
    /// (no flow entries, no learning; the peer up): the port a feature
    /// stage's quick path hands its packets to
    /// ([`crate::pipeline::Stage::quick_packet`]).
    #[inline]
    pub fn quick_peer(&self, t: &Tables, in_port: u16) -> Option<u16> {
        if t.mode != Mode::CrossConnect || self.flows_in_use() {
            return None;
        }
        match super::cross_connect(t, in_port, FlowAction::Normal) {
            Verdict::Tx(p) => Some(p),
            _ => None,
        }
    }

    /// Whether forwarding itself runs at `Depth::L3` this generation: a
    /// router whose route tables fit the caches.
    #[inline(always)]
    pub fn routes_quickly(&self, t: &Tables) -> bool {
        t.mode == Mode::Router && !t.routes_beyond_cache
    }

    /// The router's quick path on a frame at `Depth::L3`: the output port
    /// when it routed the frame (rewritten, accounted to its flow), else
    /// None and the frame as it came, for the full path. `flows`: what
    /// `flows_in_use` said at the start of the burst; `consent`: what the
    /// feature stages let it take.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn quick_route<B: PacketBuf>(
        &mut self,
        t: &Tables,
        c: &mut CounterValues,
        now: u64,
        m: &mut B,
        in_port: u16,
        flows: bool,
        consent: &QuickConsent,
    ) -> Option<u16> {
        if !m.single_segment() {
            return None;
        }
        let nic = self.nic_verdict(m);
        let mut f = super::quick::Flows { table: &mut self.flows, learn: self.learn, now, counters: c };
        if flows {
            super::quick::route::<true>(t, m.bytes_mut(), in_port, &mut f, consent, nic)
        } else {
            super::quick::route::<false>(t, m.bytes_mut(), in_port, &mut f, consent, nic)
        }
    }

    /// Whether the quick path's burst takes a first pass that prefetches
    /// flow-table slots (as the full path's two passes do).
    #[inline(always)]
    pub fn quick_prefetch_pass(&self) -> bool {
        self.flows.len() >= PREFETCH_MIN_FLOWS
    }

    /// What the NIC that received `m` found of its IPv4 header checksum,
    /// where the burst's port checks them; None: sum it here.
    #[inline(always)]
    pub fn nic_verdict<B: PacketBuf>(&self, m: &B) -> Option<bool> {
        if self.nic_checks {
            m.ipv4_checksum_by_nic()
        } else {
            None
        }
    }

    /// The quick path's first pass on a frame.
    #[inline(always)]
    pub fn quick_prefetch<B: PacketBuf>(&self, m: &B, in_port: u16) {
        if m.single_segment() {
            super::quick::prefetch_flow(&self.flows, m.bytes(), in_port);
        }
    }

    /// A frame's verdict from its Ethernet header alone (below `Depth::L3`:
    /// a bridge, or a cross-connect with nothing reading past it).
    #[inline(always)]
    pub fn l2_verdict(&mut self, t: &Tables, c: &mut CounterValues, frame: &[u8], in_port: u16, now: u64) -> Verdict {
        if t.mode == Mode::CrossConnect {
            return super::cross_connect(t, in_port, FlowAction::Normal);
        }
        let mut ctx = Ctx::new(t, &mut self.flows, &mut self.macs, c, &mut self.control, now, false);
        super::bridge_l2(&mut ctx, frame, in_port)
    }
}

impl<B: PacketBuf, C: ControlSink> Stage<B> for ForwardStage<C> {
    #[inline]
    fn depth<O: Output<B>>(&self, t: &Tables, _out: &O) -> Option<Depth> {
        Some(match t.mode {
            // The quick path prefetches flows, not routes: tables beyond
            // the cache keep the full path's two passes.
            Mode::Router if self.routes_quickly(t) => Depth::L3,
            Mode::Router => Depth::Full,
            _ if self.flows_in_use() => Depth::Full,
            Mode::CrossConnect => Depth::Wire,
            Mode::Bridge => Depth::L2,
        })
    }

    #[inline(always)]
    fn begin(&mut self, t: &Tables, burst: &Burst) {
        self.nic_checks = t.nic_checks_ipv4(burst.in_port);
    }

    #[inline(always)]
    fn prefetch_pass(&self, t: &Tables) -> bool {
        self.flows.len() >= PREFETCH_MIN_FLOWS || (t.mode == Mode::Router && t.routes_beyond_cache)
    }

    #[inline(always)]
    fn prefetch(&mut self, t: &Tables, _frame: &[u8], meta: &PacketMeta, _index: usize) {
        if self.flows.len() >= PREFETCH_MIN_FLOWS {
            self.flows.prefetch(&meta.key);
        }
        if t.mode == Mode::Router && t.routes_beyond_cache {
            match meta.l3 {
                L3Kind::Ipv4 => t.lpm4.prefetch(&(meta.key.dst as u32).to_be_bytes()),
                L3Kind::Ipv6 => t.lpm6.prefetch(&meta.key.dst.to_be_bytes()),
                _ => {}
            }
        }
    }

    /// At `Depth::L3`, the pipeline tried [`ForwardStage::quick_route`]
    /// first (where no stage is active) and parsed what it left: from L3 on,
    /// a packet here has its parse.
    #[inline(always)]
    fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
        let (t, burst) = (cx.tables, cx.burst);
        if burst.depth < Depth::L3 {
            p.verdict = self.l2_verdict(t, cx.c, m.bytes(), burst.in_port, burst.now);
            return Step::Next;
        }
        let nic = self.nic_verdict(m);
        let mut ctx = Ctx::new(t, &mut self.flows, &mut self.macs, cx.c, &mut self.control, burst.now, self.learn);
        ctx.nic_ipv4_checksum = nic;
        p.verdict = super::process_parsed(&mut ctx, m.bytes_mut(), burst.in_port, &p.meta);
        if p.verdict == Verdict::Drop(DropReason::NeighbourUnresolved) {
            // Held while the control core resolves the next hop; once only
            // (a reinjected packet that misses again is dropped), and only
            // while there is room (else dropped, and later stages see it so).
            if let (false, true, Some(hop)) = (burst.reinjected, cx.out.can_hold(), ctx.unresolved.take()) {
                return Step::Hold(hop);
            }
        }
        Step::Next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::quick::tests::corpus;
    use crate::forward::{process, ControlEvent};
    use crate::pipeline::RxTime;
    use crate::pktbuf::VecBuf;
    use crate::tables::tests::two_port_router_v6_routed;

    struct Discard;
    impl ControlSink for Discard {
        fn send(&mut self, _ev: ControlEvent) -> bool {
            true
        }
    }

    /// A frame with what its NIC marked of the IPv4 header checksum.
    struct Marked(VecBuf, Option<bool>);
    impl PacketBuf for Marked {
        fn bytes(&self) -> &[u8] {
            self.0.bytes()
        }
        fn bytes_mut(&mut self) -> &mut [u8] {
            self.0.bytes_mut()
        }
        fn grow_front(&mut self, n: usize) -> bool {
            self.0.grow_front(n)
        }
        fn shrink_front(&mut self, n: usize) -> bool {
            self.0.shrink_front(n)
        }
        fn ipv4_checksum_by_nic(&self) -> Option<bool> {
            self.1
        }
    }

    /// A NIC's checksum verdict stands for the header's sum, on the quick
    /// and the full path, only where the receiving port's device checks
    /// them: a good header it marks bad is dropped as `ipv4_bad_checksum`,
    /// a header it marks good is not summed again; from other ports, and
    /// unmarked, the header is summed.
    #[test]
    fn a_nic_checksum_verdict_counts_only_where_the_port_checks() {
        const ETH_IP_CSUM: usize = 14 + 10;
        let good = corpus()[2].clone();
        let mut bad = good.clone();
        bad[ETH_IP_CSUM] ^= 0x40;
        let mut s = two_port_router_v6_routed();
        let unchecked = Tables::build(&s, 1).unwrap();
        s.ports[0].nic_checks_ipv4 = true;
        let checked = Tables::build(&s, 1).unwrap();
        // (tables, frame, the NIC's mark, routed to port 1)
        let cases = [
            (&unchecked, &good, Some(false), true),
            (&unchecked, &bad, Some(true), false),
            (&unchecked, &bad, None, false),
            (&checked, &good, Some(false), false),
            (&checked, &bad, Some(true), true),
            (&checked, &good, None, true),
            (&checked, &bad, None, false),
        ];
        for (i, (t, f, mark, routes)) in cases.into_iter().enumerate() {
            let mut m = Marked(VecBuf::new(f, 64), mark);
            let mut fs = ForwardStage::new(FlowTable::new(16, 0), MacTable::new(16, 0), false, Discard);
            let mut c = CounterValues::default();
            Stage::<Marked>::begin(&mut fs, t, &Burst::received(0, RxTime { tsc: 0, wall_ns: 0 }, Depth::L3));
            let quick = fs.quick_route(t, &mut c, 0, &mut m, 0, false, &QuickConsent::ALL);
            assert_eq!(quick, routes.then_some(1), "case {i}: quick path");
            let mut full = Marked(VecBuf::new(f, 64), mark);
            let (mut ft, mut mt, mut sink) = (FlowTable::new(16, 0), MacTable::new(16, 0), Discard);
            let mut ctx = Ctx::new(t, &mut ft, &mut mt, &mut c, &mut sink, 0, false);
            ctx.nic_ipv4_checksum = fs.nic_verdict(&full);
            let want = if routes { Verdict::Tx(1) } else { Verdict::Drop(DropReason::Ipv4BadChecksum) };
            assert_eq!(process(&mut ctx, full.bytes_mut(), 0), want, "case {i}: full path");
            if routes {
                assert_eq!(m.bytes(), full.bytes(), "case {i}: the same bytes");
            }
        }
    }
}
