//! AM-PM as a pipeline stage: per worker, the flows' registers and
//! counters; per burst, its receive time as the measurement points see it.

use std::sync::Arc;

use crate::counters::CounterValues;
use crate::parse::PacketMeta;
use crate::pipeline::{Burst, Cx, Depth, Output, Packet, Stage, Step};
use crate::pktbuf::PacketBuf;
use crate::tables::Tables;

use super::{AmpmCtx, BurstTime, FlowCounters, FlowLookup, FlowRef, SlotMemo};
use crate::classifier::Probe;
use crate::dpdk::MAX_BURST;

/// Flow rule sets from which a burst is parsed and prefetched first.
const PREFETCH_MIN_FLOWS: usize = 4096;

/// A worker's AM-PM state.
pub struct AmpmStage {
    /// Registers per flow slot (this worker's own).
    regs: Vec<u8>,
    /// Counters per flow slot, written by this worker, read by the exporter.
    counters: Arc<[FlowCounters]>,
    /// The burst's time, when there are flows to measure.
    now: Option<BurstTime>,
    memo: SlotMemo,
    /// The flow lookups the burst's prefetch pass began, by packet index;
    /// bit i of `probed` says whether `probes[i]` is this burst's.
    probes: [Probe; MAX_BURST],
    probed: u64,
    /// Whether `prefetch_deeper` has looked up the probed packets' flows,
    /// and what it found, by packet index.
    found: bool,
    flows: [Option<FlowRef>; MAX_BURST],
}

impl AmpmStage {
    pub fn new(counters: Arc<[FlowCounters]>) -> AmpmStage {
        AmpmStage {
            regs: vec![0; counters.len()],
            counters,
            now: None,
            memo: SlotMemo::default(),
            probes: [Probe::default(); MAX_BURST],
            probed: 0,
            found: false,
            flows: [None; MAX_BURST],
        }
    }
}

impl<B: PacketBuf> Stage<B> for AmpmStage {
    #[inline(always)]
    fn depth<O: Output<B>>(&self, t: &Tables, _out: &O) -> Option<Depth> {
        t.ampm.as_ref().map(|_| Depth::Full)
    }

    #[inline(always)]
    fn prefetch_pass(&self, t: &Tables) -> bool {
        t.ampm.as_ref().is_some_and(|a| a.flows.len() >= PREFETCH_MIN_FLOWS)
    }

    #[inline(always)]
    fn prefetch(&mut self, t: &Tables, frame: &[u8], meta: &PacketMeta, index: usize) {
        if let Some(a) = t.ampm.as_ref().filter(|a| a.flows.len() >= PREFETCH_MIN_FLOWS) {
            if let (Some(p), Some(slot)) = (super::prefetch(a, frame, meta), self.probes.get_mut(index)) {
                *slot = p;
                self.probed |= 1 << index;
            }
        }
    }

    /// The flow rules' slots have had the rest of the pass to arrive: the
    /// probed packets' flows are looked up, and the counters they name
    /// start loading now, not when each packet reaches its count.
    #[inline(always)]
    fn prefetch_deeper(&mut self, t: &Tables) {
        let Some(a) = t.ampm.as_ref() else { return };
        let mut probed = self.probed;
        while probed != 0 {
            let i = probed.trailing_zeros() as usize;
            probed &= probed - 1;
            let flow = a.flow_rules.lookup_probe(&self.probes[i]).copied();
            self.flows[i] = flow;
            if let Some(fc) = flow.and_then(|f| self.counters.get(f.slot as usize)) {
                crate::dpdk::prefetch(fc);
            }
        }
        self.found = true;
    }

    /// AM-PM's time bits: CLOCK_REALTIME itself (vDSO, once per burst), not
    /// the TSC extrapolation: MPs in other processes and on other hosts
    /// (PTP-disciplined) must agree on interval edges and timestamps. With
    /// no monitored flows yet (they come at run time) there is nothing to
    /// do: no clock read, no per-packet key.
    #[inline(always)]
    fn begin(&mut self, t: &Tables, burst: &Burst) {
        self.now = t.ampm.as_ref().filter(|a| !a.flows.is_empty()).map(|a| BurstTime::new(&a.timing, burst.wall_ns()));
        self.memo = SlotMemo::default();
        self.probed = 0;
        self.found = false;
    }

    /// With flows to measure, a cross-connect's packets are AM-PM's alone
    /// to handle: the common IPv4 or IPv6 frame is measured from its
    /// fixed-offset parse, which is the full parse's answer for it.
    #[inline(always)]
    fn quick_packets(&self, t: &Tables) -> bool {
        t.ampm.as_ref().is_some_and(|a| !a.flows.is_empty())
    }

    /// The frames `parse::untagged_v4` or `untagged_v6` answers for (IPv4
    /// without options, IPv6 with at most a Hop-by-Hop header): their
    /// parse kept in `p.meta`, their flow lookups begun.
    #[inline(always)]
    fn quick_takes(&mut self, t: &Tables, m: &B, in_port: u16, p: &mut Packet, prefetch: bool) -> bool {
        let meta = match quick_meta(m, in_port) {
            Some(meta) => meta,
            None => return false,
        };
        if prefetch {
            Stage::<B>::prefetch(self, t, m.bytes(), &meta, p.index as usize);
        }
        p.meta = Ok(meta);
        true
    }

    /// What `packet` does to a packet the cross-connect sends to its peer.
    #[inline(always)]
    fn quick_packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) {
        if let (Ok(meta), Some(mut ctx)) = (&mut p.meta, self.ctx(cx.tables, cx.c, p.index as usize)) {
            super::apply_inline(&mut ctx, m, meta);
        }
    }

    /// Measures a packet that is being forwarded (not drops, nor the
    /// switch's own replies).
    #[inline(always)]
    fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
        use crate::forward::Verdict;
        if matches!(p.verdict, Verdict::Tx(_) | Verdict::Flood) {
            if let (Ok(meta), Some(mut ctx)) = (&mut p.meta, self.ctx(cx.tables, cx.c, p.index as usize)) {
                super::apply(&mut ctx, m, meta);
            }
        }
        Step::Next
    }
}

impl AmpmStage {
    /// What AM-PM works with on the burst's `i`th packet; None with no
    /// flows to measure.
    #[inline(always)]
    fn ctx<'a>(&'a mut self, t: &'a Tables, c: &'a mut CounterValues, i: usize) -> Option<AmpmCtx<'a>> {
        let (spec, now) = (t.ampm.as_ref()?, self.now.as_ref()?);
        let flow = match (self.probed >> i & 1 != 0, self.found) {
            (false, _) => FlowLookup::ByKey,
            (true, false) => FlowLookup::Probed(&self.probes[i]),
            (true, true) => FlowLookup::Found(self.flows[i].as_ref()),
        };
        Some(AmpmCtx { spec, regs: &mut self.regs, counters: &self.counters, c, now, memo: &mut self.memo, flow })
    }
}

/// The quick path's parse: a single-segment frame's, where the
/// fixed-offset parse answers.
#[inline(always)]
fn quick_meta<B: PacketBuf>(m: &B, in_port: u16) -> Option<PacketMeta> {
    if m.single_segment() {
        let b = m.bytes();
        crate::parse::untagged_v4(b, in_port).or_else(|| crate::parse::untagged_v6(b, in_port))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;

    use super::PREFETCH_MIN_FLOWS;
    use crate::ampm::{flow_key, AmpmFlow, AmpmSetup, Carrier, FlowRef, Method, MpRole, TimeFormat, Timing};
    use crate::classifier::{field, Key};
    use crate::counters::CounterValues;
    use crate::parse::parse;
    use crate::parse::tests::{udp4, udp6};
    use crate::pipeline::tests::pipeline_sharing;
    use crate::pipeline::{Burst, Depth, PortLoad, RxTime, Stage, VecOut};
    use crate::pktbuf::{PacketBuf, VecBuf};
    use crate::tables::tests::two_port_router;
    use crate::tables::{Mode, Tables};
    use crate::worker::WorkerShared;

    /// Flow `i`: UDP from 10.1.x.y port 1024 + i (IPv6: 2001:db8:1::i).
    fn frame(i: u16, v6: bool, sport_delta: u16) -> Vec<u8> {
        let sport = 1024 + i + sport_delta;
        if v6 {
            let mut src = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            src[14..].copy_from_slice(&i.to_be_bytes());
            udp6(src, [0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], sport, 7, b"ampm")
        } else {
            udp4([10, 1, (i >> 8) as u8, i as u8], [10, 2, 0, 1], sport, 7, b"ampm")
        }
    }

    /// The exact rule of flow `i`: source address, protocol, source port.
    fn rule(i: u16, v6: bool, slot: u32) -> AmpmFlow {
        let f = frame(i, v6, 0);
        let k = flow_key(&f, &parse(&f, 0).unwrap());
        let mut mask = Key::default();
        mask.0[field::SRC] = !0;
        mask.0[field::SRC + 1] = !0;
        mask.0[field::PORTS] = 0xffff;
        mask.set_meta(field::PROTO_SHIFT, 8, 0xff);
        let value = Key(std::array::from_fn(|w| k.0[w] & mask.0[w]));
        let carrier = if v6 { Carrier::Ipv6HopByHop } else { Carrier::Dscp { l_bit: 0, d_bit: 1 } };
        let mp =
            FlowRef { slot, flow_mon_id: slot, role: MpRole::Initiator, method: Method::Muxed, carrier, clear: false };
        AmpmFlow { name: format!("f{slot}"), mp, priority: 1, value, mask }
    }

    /// Runs `bursts` through a cross-connect measuring `flows`: what left,
    /// the counters, each flow slot's counters.
    fn run(flows: Vec<AmpmFlow>, bursts: &[Vec<Vec<u8>>]) -> (Vec<Vec<u8>>, CounterValues, Vec<[u64; 4]>) {
        run_paths(flows, bursts, true)
    }

    /// `run`; `quick`: whether AM-PM may take packets on its quick path
    /// (without, a capture of port 1's receive side, which sees none of
    /// these packets, makes a second stage active, and every packet takes
    /// the full path).
    fn run_paths(
        flows: Vec<AmpmFlow>,
        bursts: &[Vec<Vec<u8>>],
        quick: bool,
    ) -> (Vec<Vec<u8>>, CounterValues, Vec<[u64; 4]>) {
        let timing = Timing { format: TimeFormat::SecFrac, interval_bit: 32, sub_bits: 2 };
        let mut setup = AmpmSetup::new(1, timing, flows.len());
        setup.flows = flows;
        let mut s = two_port_router();
        s.mode = Mode::CrossConnect;
        s.ampm = Some(setup);
        let t = Tables::build(&s, 1).unwrap();
        let shared = Arc::new(WorkerShared::new(t.ampm.as_ref().unwrap().capacity));
        let mut p = pipeline_sharing(false, shared.clone());
        let mut out = VecOut::<VecBuf>::new(64, 0);
        if !quick {
            out.capture = (1 << 1, 0);
        }
        let mut c = CounterValues::default();
        let mut sent = Vec::new();
        for (n, b) in bursts.iter().enumerate() {
            let rx = RxTime { tsc: n as u64, wall_ns: 1_700_000_000_000_000_000 + n as u64 * 300_000_000 };
            let mut pkts: Vec<Option<VecBuf>> = b.iter().map(|f| Some(VecBuf::new(f, 64))).collect();
            p.run(&t, &mut c, &mut out, &PortLoad::default(), &Burst::received(0, rx, Depth::Full), &mut pkts);
            sent.extend(out.out.drain(..).map(|(m, v)| {
                let mut bytes = m.bytes().to_vec();
                bytes.extend_from_slice(format!("{v:?}").as_bytes());
                bytes
            }));
        }
        let active = Stage::<VecBuf>::active(&p.stages, &t, &out);
        assert_eq!(Stage::<VecBuf>::quick_packets_active(&p.stages, active, &t), quick, "the path asked for");
        assert!(out.mirrored.borrow().is_empty());
        let per_slot = shared
            .ampm
            .iter()
            .map(|f| {
                let [a, b] = &f.color;
                [a.packets.load(Relaxed), b.packets.load(Relaxed), a.bytes.load(Relaxed), b.ts_offset_sum.load(Relaxed)]
            })
            .collect();
        (sent, c, per_slot)
    }

    /// A rule set large enough for the prefetch pass, of one shape: the
    /// lookups begun there (probes, by packet index) answer as key lookups
    /// do; the same rules plus a group every frame may match too (so
    /// lookups by key) must write the same bytes and counts. Bursts mix
    /// monitored and unmonitored IPv4 and IPv6 flows and frames that do
    /// not parse, which the prefetch pass skips.
    #[test]
    fn probed_lookups_measure_as_key_lookups() {
        let n = PREFETCH_MIN_FLOWS as u16 + 100;
        let one_shape: Vec<AmpmFlow> = (0..n).map(|i| rule(i, i % 2 == 1, i as u32)).collect();
        // Rules for destination ports 5 and 6: every frame here (port 7)
        // may match their group (they share all bits but the lowest two),
        // none does, and each frame is looked up by key.
        let mut two_shapes = one_shape.clone();
        for port in [5, 6] {
            let mut other = rule(0, false, two_shapes.len() as u32);
            other.mask = Key::default();
            other.mask.0[field::PORTS] = 0xffff << 16;
            other.value = Key::default();
            other.value.0[field::PORTS] = port << 16;
            other.priority = 0;
            two_shapes.push(other);
        }
        let mut seed = 0x9e37_79b9u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let bursts: Vec<Vec<Vec<u8>>> = (0..12)
            .map(|_| {
                (0..64)
                    .map(|_| {
                        let r = next();
                        let i = (r % n as u32) as u16;
                        match r >> 28 {
                            0 => vec![0u8; 10],           // truncated
                            1 => frame(i, i % 2 == 1, 1), // unmonitored port
                            2 => frame(i, i % 2 == 0, 0), // other version
                            _ => frame(i, i % 2 == 1, 0), // monitored
                        }
                    })
                    .collect()
            })
            .collect();
        let (probed, key) = (run(one_shape, &bursts), run(two_shapes, &bursts));
        let differ = probed.0.iter().zip(&key.0).position(|(a, b)| a != b);
        assert!(probed.0.len() == key.0.len() && differ.is_none(), "frames out differ from frame {differ:?}");
        assert_eq!((probed.1.events, probed.1.drops), (key.1.events, key.1.drops));
        assert_eq!(probed.2[..n as usize], key.2[..n as usize]);
        let counted: u64 = probed.2.iter().map(|s| s[0] + s[1]).sum();
        assert!(counted > 500, "most frames measured: {counted}");
    }

    /// AM-PM's quick path on a cross-connect measures, marks, counts and
    /// sends exactly as the full path: on rule sets below and above the
    /// prefetch pass's size, bursts that mix monitored and unmonitored IPv4
    /// (UDP, TCP, options, fragments, VLAN tags: the quick path's and the
    /// full path's) and IPv6 flows, and frames that do not parse.
    #[test]
    fn the_quick_path_measures_as_the_full_path() {
        for n in [40u16, PREFETCH_MIN_FLOWS as u16 + 100] {
            let rules: Vec<AmpmFlow> = (0..n).map(|i| rule(i, i % 2 == 1, i as u32)).collect();
            let mut rng = crate::rand::XorShift::new(0x2545_f491 ^ n as u64);
            let bursts: Vec<Vec<Vec<u8>>> = (0..10)
                .map(|_| {
                    (0..64)
                        .map(|_| {
                            let r = (rng.next_u64() >> 32) as u32;
                            let i = (r % n as u32) as u16;
                            let mut f = frame(i, i % 2 == 1, 0);
                            match r >> 28 {
                                0 => f.truncate(10),
                                1 => f = frame(i, i % 2 == 1, 1), // unmonitored port
                                2 => f.splice(12..12, [0x81, 0, 0, 7]).for_each(drop), // VLAN
                                3 if i % 2 == 0 => f[20] = 0x20,  // first fragment (MF)
                                4 if i % 2 == 0 => f[21] = 1,     // later fragment
                                5 if i % 2 == 0 => f[16] = 0xff,  // total length too long
                                6 if i % 2 == 0 => f[15] = 0x04,  // a DSCP mark already set
                                _ => {}
                            }
                            f
                        })
                        .collect()
                })
                .collect();
            let (quick, full) = (run_paths(rules.clone(), &bursts, true), run_paths(rules, &bursts, false));
            let differ = quick.0.iter().zip(&full.0).position(|(a, b)| a != b);
            assert!(quick.0.len() == full.0.len() && differ.is_none(), "{n} rules: frames out differ from {differ:?}");
            assert_eq!((quick.1.events, quick.1.drops), (full.1.events, full.1.drops), "{n} rules");
            assert_eq!((quick.1.tx_packets, quick.1.tx_bytes), (full.1.tx_packets, full.1.tx_bytes));
            assert_eq!((quick.1.rx_packets, quick.1.rx_bytes), (full.1.rx_packets, full.1.rx_bytes));
            assert_eq!(quick.2, full.2, "{n} rules: per-slot counters");
            let counted: u64 = quick.2.iter().map(|s| s[0] + s[1]).sum();
            assert!(counted > 300, "{n} rules: most frames measured: {counted}");
        }
    }
}
