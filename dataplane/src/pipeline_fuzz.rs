//! Robustness of the whole per-packet pipeline, no EAL: frames of every
//! kind the stages act on (plain UDP/TCP over IPv4 and IPv6, VLAN, IPv4
//! options, INT in each presence method, AltMark options, ARP, ICMP echo)
//! are mutated at random (bytes rewritten, bits flipped, length fields set
//! to edge values, frames cut short) and go through parsing, forwarding in
//! every mode, the AM-PM stage in every role, method and carrier, and the
//! INT stage in every role, a sink with every analytics feature on among
//! them, and a worker's whole pipeline with GPINT's SQR stage on. Nothing
//! may panic (a malformed frame is a
//! counted drop or passes untouched), and where a mutant is still a
//! well-formed UDP packet, INT source -> transit -> sink gives its bytes
//! back exactly. Seeded: a failure repeats.

use crate::ampm::{self, tests::Mp, Carrier, Method, MpRole};
use crate::counters::{CounterValues, Event};
use crate::flow_table::FlowTable;
use crate::forward::{self, ControlEvent, ControlSink, Ctx, Verdict};
use crate::gpint::frame::{probe_frame, ProbeAddr};
use crate::gpint::stage::{GpintRecord, GpintSetup};
use crate::gpint::GpintSpec;
use crate::int::analytics::cache::{HOP_LATENCY, QUEUE};
use crate::int::analytics::cnf::Cnf;
use crate::int::analytics::detect::{Algorithm, DetectRule};
use crate::int::analytics::events::{event_ring, EventConsumer, EventRule, EventSpec, HOP_E2E};
use crate::int::analytics::flow_ring::{flow_ring, FlowConsumer, FlowRecord};
use crate::int::analytics::histogram::{HistSpec, HistWriter, WorkerHist};
use crate::int::analytics::{rule_counters, AnalyticsSetup};
use crate::int::stage::tests::{spec as int_spec, Node};
use crate::int::stage::Hop;
use crate::int::watch::{Role, SourceParams, Ternary, WatchRule};
use crate::int::{self, Presence};
use crate::mac_table::MacTable;
use crate::parse::tests::{udp4, udp6};
use crate::parse::{parse, PacketMeta};
use crate::pipeline::{Burst, Depth, PortLoad, RxTime, Stage, VecOut};
use crate::pktbuf::{PacketBuf, VecBuf};
use crate::rand::XorShift;
use crate::tables::tests::{two_port_router, two_port_router_v6_routed};
use crate::tables::{Mode, RouteSpec, Tables};
use crate::wire::gpint::{ProbeRepr, RequestType, SrEntry, TO_MONITOR};
use crate::worker::{self, FlowSetup, LabelSetup, MacSetup, StageSetup, WorkerPipeline, WorkerShared};
use crate::DropReason;

/// Control events are dropped: the tables never change behind the test.
struct Discard;

impl ControlSink for Discard {
    fn send(&mut self, _ev: ControlEvent) -> bool {
        true
    }
}

const V6_A: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const V6_B: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const SEC: u64 = 1_000_000_000;
/// Mutants per test (about 0.1 s each in an optimised build).
const ROUNDS: usize = 100_000;

fn hop() -> Hop {
    Hop { in_port: 0, out_port: 1, rx_tsc: 1_000, tx_tsc: 2_500, queue_id: 0, queue_occupancy: 3, ..Default::default() }
}

/// An INT node whose watchlist sources every protocol (TCP gets NPT 2).
fn int_node(node: u32, edge: u32, presence: Presence) -> Node {
    let mut spec = int_spec(node, edge);
    spec.presence = presence;
    for r in spec.watch.iter_mut() {
        r.proto = Default::default();
    }
    Node::new(spec)
}

/// Tracked hops of the analytics sink's cache.
const ANALYTICS_HOPS: usize = 3;

/// What an analytics sink hands the control core.
struct AnalyticsOut {
    flows: FlowConsumer,
    events: EventConsumer,
}

/// An INT sink with everything its analytics do on: a cache of 4 rows x 2
/// ways (rows fill, evict and age), events on every metric, end to end,
/// path and link latency (level and edge), histograms of 2 nodes (more
/// are counted, not binned), and detection rules of each algorithm,
/// CNF among them, picked by the flow's ports and protocol.
fn analytics_sink(presence: Presence) -> (Node, AnalyticsOut) {
    let mut spec = int_node(3, 0b10, presence).spec().clone();
    let rule = |threshold, change, edge| EventRule { threshold, change, edge, reset: threshold / 2 };
    spec.events = EventSpec {
        hop: [rule(1_500, 1_000, false), rule(4, 2, true), rule(5_000, 1_000, false)],
        e2e: rule(3_000, 500, true),
        path_change: true,
        link: rule(100, 50, false),
    };
    let cnf = Cnf::parse("hop_latency.max > 1000 AND (queue.any.delta > 2 OR e2e_latency > 5000)").expect("CNF");
    let algorithms = [
        (Algorithm::Cnf { weight: 64 }, Some(Box::new(("fuzz".to_string(), cnf)))),
        (Algorithm::PerHop, None),
        (Algorithm::PerFlow, None),
        (Algorithm::Ewma { weight: 64 }, None),
    ];
    for (i, (algorithm, cnf)) in algorithms.into_iter().enumerate() {
        let mut m = WatchRule::any(&format!("d{i}"), Role::None);
        // Rule i takes source ports i mod 4; the last, every flow.
        if i < 3 {
            m.src_port = Ternary { value: i as u16, mask: 3 };
        }
        m.priority = 10 - i as u32;
        let metric = if i % 2 == 0 { HOP_LATENCY } else { QUEUE };
        spec.detect.upsert(DetectRule { matcher: m, algorithm, metric, threshold: 500, slot: i, cnf });
    }
    let (fp, flows) = flow_ring(16, ANALYTICS_HOPS);
    let (ep, events) = event_ring(64);
    let hist = WorkerHist::new(HistSpec { bins: HistSpec::default_bins(), nodes: 2 });
    let setup = AnalyticsSetup {
        rows: 4,
        ways: 2,
        max_hops: ANALYTICS_HOPS,
        idle_tsc: 50,
        active_tsc: 20,
        ring: Some(fp),
        events: Some(ep),
        hist: Some(HistWriter::new(std::sync::Arc::new(hist))),
        rule_counters: rule_counters(),
        per_hop_flow: false,
    };
    (Node::with_analytics(spec, setup), AnalyticsOut { flows, events })
}

/// Reads what the analytics sinks exported; their records describe at
/// most the hops the cache tracks (a flow whose path got shorter keeps the
/// sums of the hops it had), and count no value more often than packets.
/// Returns how many flow records and events it read.
fn drain(outs: &mut [AnalyticsOut]) -> (u64, u64) {
    let mut rec = FlowRecord::empty();
    let mut n = (0, 0);
    for o in outs {
        while o.flows.pop_into(&mut rec) {
            n.0 += 1;
            let h = &rec.head;
            assert!(h.packets >= 1, "an exported flow without packets: {h:?}");
            assert!(h.tracked as usize <= ANALYTICS_HOPS, "more hops than the cache tracks: {h:?}");
            assert!(h.e2e.count <= h.packets, "more latency sums than packets: {h:?}");
            for hop in rec.hops() {
                assert!(hop.count.iter().all(|&c| c <= h.packets), "more values than packets: {h:?} {hop:?}");
            }
        }
        while let Some(e) = o.events.pop() {
            n.1 += 1;
            assert_ne!(e.bits, 0, "an event record without an event: {e:?}");
            assert!(e.hop == HOP_E2E || (e.hop as usize) < ANALYTICS_HOPS, "an event past the tracked hops: {e:?}");
        }
    }
    n
}

const GPINT_PORT: u16 = 17900;
const INT_PORT: u16 = 17768;
/// TSC ticks a second of the GPINT role's pipeline.
const HZ: u64 = 1_000_000;

/// A worker's whole pipeline with one feature stage on.
///
/// GPINT (`gpint`): router mode, the test router's tables, GPINT's SQR
/// stage with recovery, in the domain's presence method: probes are
/// acknowledged, measured, forwarded with a copy kept (4 slots: they fill)
/// or delivered; the wheel expires copies as the clock moves on.
///
/// INT-label (`label`): cross-connect (every frame leaves by the other
/// port), Base B with F1 and a rest time, a watchlist rule that exempts
/// one destination port, a specific-flow rule; p1 an edge port (the last
/// hop: labels exported, packet restored) or p0 (the first hop, where
/// specific flows enter). Its label reports go to `labels`.
struct WholeRole {
    t: Tables,
    pipe: WorkerPipeline,
    out: VecOut<VecBuf>,
    c: CounterValues,
    exports: rtrb::Consumer<GpintRecord>,
    labels: crate::int::report_ring::ReportConsumer,
    /// The label domain's presence and whether p1 is its edge.
    label: Option<(Presence, bool)>,
}

/// The label domain's DS ID: the INT seeds' domain, so that they and
/// their mutants are label packets too.
const LABEL_DS: u16 = 7;

impl WholeRole {
    /// `dscp`: the probe codepoint of the paper's mode (None: the INT port).
    fn gpint(dscp: Option<u8>) -> WholeRole {
        let mut s = two_port_router();
        let dscp = dscp.map(|probe| crate::gpint::GpintDscp { probe, feedback: 0x19, notice: 0x21 });
        s.gpint = Some(GpintSpec {
            int_port: INT_PORT,
            udp_port: GPINT_PORT,
            domain_id: 0x6701,
            node_id: 42,
            recovery: true,
            hold_tsc: HZ / 100,
            mtu: [1500; crate::counters::MAX_PORTS],
            dscp,
        });
        WholeRole::build(s, None)
    }

    /// A label switch in `presence`; `last_hop`: p1 is an edge port (else p0).
    fn label(presence: Presence, last_hop: bool) -> WholeRole {
        let mut s = two_port_router();
        s.mode = Mode::CrossConnect;
        s.label = Some(Self::label_spec(presence, last_hop));
        WholeRole::build(s, Some((presence, last_hop)))
    }

    /// The label roles' domain: Base B with F1 and a rest time, a watchlist
    /// rule that exempts one destination port, a specific-flow rule; p1 an
    /// edge port when `last_hop` (else p0).
    fn label_spec(presence: Presence, last_hop: bool) -> crate::label::LabelSpec {
        let mut exempt = WatchRule::any("exempt", Role::None);
        exempt.dst_port = Ternary::exact(5002);
        exempt.priority = 1;
        let mut specific = WatchRule::any("specific", Role::None);
        specific.src_port = Ternary { value: 1, mask: 1 };
        crate::label::LabelSpec {
            node_id: 60 + last_hop as u32,
            ds_id: LABEL_DS,
            presence,
            bitmap: 0xfc00,
            max_labels: 4,
            times: crate::label::Times { interval: HZ / 200, rest: HZ / 1000 },
            f: crate::label::Thresholds::new(&crate::label::LabelFn::F1, 5),
            edge_ports: if last_hop { 0b10 } else { 0b01 },
            mtu: [1500; crate::counters::MAX_PORTS],
            truncate: 64,
            watch: vec![exempt, WatchRule::any("all", Role::Transit)],
            flows: vec![crate::label::FlowRule { rule: specific, interval_tsc: HZ / 100 }],
        }
    }

    /// A router with INT (a transit; p1, where the routes lead, the sink's
    /// edge) in `int_presence` and INT-label (Base B with F1 and a rest
    /// time, DSCP presence, the INT seeds' domain) on, and a default route
    /// for each family: its bursts run at `Depth::L3`, the quick path
    /// taking the packets both stages let pass. `transit` false: a node of
    /// the label domain only (no classic INT transit, edge port or rule).
    fn router_int_label(int_presence: Presence, transit: bool) -> WholeRole {
        let mut s = two_port_router_v6_routed();
        for (prefix, gw) in [("0.0.0.0", "10.0.2.254"), ("::", "2001:db8:2::fe")] {
            let gateway = Some(gw.parse().expect("gateway"));
            s.routes.upsert(RouteSpec { prefix: prefix.parse().expect("prefix"), len: 0, port: 1, gateway });
        }
        let mut int = int_node(5, 0b10, int_presence).spec().clone();
        int.label_ds_id = LABEL_DS;
        if !transit {
            (int.transit, int.edge_ports, int.watch) = (false, 0, Vec::new());
        }
        s.int = Some(int);
        let presence = Presence::Dscp { value: 0x17, mask: 0x3f };
        let mut label = Self::label_spec(presence, false);
        (label.flows, label.edge_ports) = (Vec::new(), 0);
        s.label = Some(label);
        WholeRole::build(s, Some((presence, false)))
    }

    fn build(s: crate::tables::TableSpec, label: Option<(Presence, bool)>) -> WholeRole {
        let (p, exports) = rtrb::RingBuffer::new(16);
        let (reports, labels) = crate::int::report_ring::report_ring(16);
        let stages = StageSetup {
            analytics: AnalyticsSetup::interval_only(16),
            reports: crate::int::report_ring::report_ring(4).0,
            clock: crate::int::stage::WallClock::new(0, 1_700_000_000 * SEC, HZ),
            gpint: GpintSetup { slots: 4, exports: Some(p), worker: 0, workers: Vec::new() },
            label: LabelSetup { reports, ports: std::sync::Arc::default(), seed: 5 },
        };
        let flows = FlowSetup { capacity: 64, idle_timeout_s: 0, learn: false, hash_seed: 1 };
        let macs = MacSetup { capacity: 64, aging_s: 0, share: false };
        let pipe = worker::pipeline(std::sync::Arc::new(WorkerShared::new(0)), flows, macs, stages, HZ);
        let t = Tables::build(&s, 1).expect("test tables");
        WholeRole { t, pipe, out: VecOut::new(8, 8), c: CounterValues::default(), exports, labels, label }
    }

    /// One frame in on `port` at `tsc`, then the stage's timer work; what
    /// left (a reply at its length), and the records exported.
    fn run(&mut self, f: &[u8], port: u16, tsc: u64) -> (Vec<(Vec<u8>, Verdict)>, Vec<GpintRecord>) {
        // At the depth the worker would run the burst at.
        let depth = self.pipe.shortcut::<VecBuf, _>(&self.t, &self.out, port as usize).1;
        self.run_at(f, port, tsc, depth)
    }

    /// `run` at `depth`.
    fn run_at(&mut self, f: &[u8], port: u16, tsc: u64, depth: Depth) -> (Vec<(Vec<u8>, Verdict)>, Vec<GpintRecord>) {
        let rx = RxTime { tsc, wall_ns: 1_700_000_000 * SEC + tsc };
        let mut pkts = [Some(VecBuf::new(f, 128))];
        let b = Burst::received(port, rx, depth);
        self.pipe.run(&self.t, &mut self.c, &mut self.out, &PortLoad::default(), &b, &mut pkts);
        Stage::<VecBuf>::poll(&mut self.pipe.stages, &self.t, tsc, &mut self.c);
        self.out.held.clear();
        let sent = self
            .out
            .out
            .drain(..)
            .map(|(m, v)| {
                let mut f = m.bytes().to_vec();
                if let Verdict::TxLen(_, n) = v {
                    // As the worker cuts or pads (with zeros) a reply.
                    f.resize(n as usize, 0);
                }
                (f, v)
            })
            .collect();
        (sent, std::iter::from_fn(|| self.exports.pop().ok()).collect())
    }
}

/// GPINT probes (IPv4 and IPv6; through this switch or to the monitor
/// here; in UDP port and DSCP mode) and the feedback a probe gets. (Not
/// among `seeds`: a claimed probe's feedback is a duplicate of its buffer,
/// which a test buffer makes on the heap, so the allocation test leaves
/// them out.)
fn gpint_seeds() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for dscp in [None, Some(0x2e)] {
        for v6 in [false, true] {
            let (src, dst): (std::net::IpAddr, std::net::IpAddr) = if v6 {
                (std::net::Ipv6Addr::from(V6_A).into(), std::net::Ipv6Addr::from(V6_B).into())
            } else {
                ([10, 0, 1, 2].into(), [10, 0, 2, 2].into())
            };
            let a = ProbeAddr {
                eth_src: [2, 0, 0, 0, 0, 0xee],
                eth_dst: [2, 0, 0, 0, 0, 0xa0],
                ip_src: src,
                ip_dst: dst,
                src_port: 40000,
                int_port: INT_PORT,
                gpint_port: GPINT_PORT,
                domain_id: 0x6701,
                bitmap: crate::wire::int_md::instr::NODE_ID | crate::wire::int_md::instr::QUEUE,
                dscp,
            };
            for hops in [&[(1u8, 0u8, 2u8), (TO_MONITOR, 0, 0)][..], &[(TO_MONITOR, 0, 1)][..]] {
                let entries =
                    hops.iter().map(|&(p, f, n)| SrEntry { next_port: p, mea_first: f, mea_count: n }).collect();
                let repr = ProbeRepr::new(7, RequestType::PortRx, 1, 0, entries).expect("a probe");
                let probe = probe_frame(&a, &repr).expect("a probe frame");
                let (sent, _) = WholeRole::gpint(dscp).run(&probe, 0, 1_000);
                v.push(probe);
                v.extend(sent.into_iter().map(|(f, _)| f));
            }
        }
    }
    v
}

/// A drop report for a frame that parses (as if forwarding dropped it),
/// then the INT stage on it.
fn run_int(n: &mut Node, pkt: &mut VecBuf) -> Option<Result<(), DropReason>> {
    parse(pkt.bytes(), 0).ok()?;
    n.drop_report(pkt.bytes(), hop(), DropReason::TtlExceeded);
    let r = n.run(pkt, hop());
    // Reports only pile up in a test.
    n.reports.clear();
    Some(r)
}

fn int_events(n: &Node, e: Event) -> u64 {
    n.c.events[e as usize]
}

/// The AM-PM stage on a frame that parses.
fn run_ampm(mp: &mut Mp, pkt: &mut VecBuf, at_ns: u64) -> Option<ampm::Outcome> {
    parse(pkt.bytes(), 0).ok()?;
    Some(mp.run(pkt, at_ns).0)
}

fn all_ampm_nodes() -> Vec<Mp> {
    let carriers = [
        Carrier::Dscp { l_bit: 0, d_bit: 1 },
        Carrier::Ipv4Flag { d_bit: 0 },
        Carrier::Ipv6HopByHop,
        Carrier::Ipv6DestOpts,
    ];
    let mut v = Vec::new();
    for r in MpRole::ALL {
        for m in Method::ALL {
            for c in carriers {
                v.push(Mp::new(r, m, c));
            }
        }
    }
    v
}

/// Valid frames of every kind the stages look into.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let payload = b"0123456789abcdefghijklmnopqrstuv";
    let plain4 = udp4([10, 0, 1, 2], [172, 16, 0, 9], 4000, 5001, payload);
    let plain6 = udp6(V6_A, V6_B, 4000, 5001, payload);
    // TCP: the UDP frame with protocol 6 and a 20-byte TCP header.
    let mut tcp4 = plain4.clone();
    tcp4[23] = 6;
    tcp4[46] = 0x50;
    // IPv4 with 4 bytes of options (NOP x 3, EOL).
    let mut opt4 = plain4[..34].to_vec();
    opt4[14] = 0x46;
    opt4.extend_from_slice(&[1, 1, 1, 0]);
    opt4.extend_from_slice(&plain4[34..]);
    let tl = u16::from_be_bytes([opt4[16], opt4[17]]) + 4;
    opt4[16..18].copy_from_slice(&tl.to_be_bytes());
    // 802.1Q tag, VLAN 10.
    let mut vlan = plain4[..12].to_vec();
    vlan.extend_from_slice(&[0x81, 0, 0, 10]);
    vlan.extend_from_slice(&plain4[12..]);
    // ARP request for the router's p0 address, and an echo request to it.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 1, 2]);
    arp.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 1, 1]);
    let mut icmp = udp4([10, 0, 1, 2], [10, 0, 1, 1], 0, 0, payload);
    icmp[23] = 1;
    icmp[34..38].copy_from_slice(&[8, 0, 0, 0]);
    // IPv6 extension chains: Hop-by-Hop, Destination, Routing; a fragment.
    let ext6 = |exts: &[[u8; 8]]| {
        let mut f = plain6[..54].to_vec();
        let first = exts.first().map_or(17, |_| f[20]);
        let mut nhs: Vec<u8> = exts.iter().map(|e| e[0]).collect();
        nhs.push(17);
        f[20] = if exts.is_empty() { first } else { nhs[0] };
        for (i, e) in exts.iter().enumerate() {
            let mut e = *e;
            e[0] = nhs[i + 1];
            f.extend_from_slice(&e);
        }
        f.extend_from_slice(&plain6[54..]);
        let pl = u16::from_be_bytes([f[18], f[19]]) + 8 * exts.len() as u16;
        f[18..20].copy_from_slice(&pl.to_be_bytes());
        f
    };
    // Each header's first byte is the next one's type (rewritten above).
    let chain = ext6(&[[60, 0, 1, 4, 0, 0, 0, 0], [43, 0, 1, 4, 0, 0, 0, 0], [17, 0, 4, 0, 0, 0, 0, 0]]);
    let frag = ext6(&[[44, 0, 0, 0, 0, 0, 0, 1]]);
    let mut v = vec![plain4.clone(), plain6.clone(), tcp4.clone(), opt4, vlan, arp, icmp, chain, frag];
    // INT in each presence method, after a source and a transit; and with
    // every defined instruction (timestamps and TX utilisation: what the
    // analytics' link latency and tx_util read).
    for presence in [Presence::UdpPort(17768), Presence::Dscp { value: 0x17, mask: 0x3f }] {
        let mut all = int_node(1, 0b01, presence).spec().clone();
        for r in all.watch.iter_mut() {
            r.role = Role::Source(SourceParams { bitmap: 0xff80, max_hops: 8, domain_id: 7 });
        }
        for f in [&plain4, &plain6, &tcp4] {
            let mut b = VecBuf::new(f, 256);
            run_int(&mut int_node(1, 0b01, presence), &mut b);
            v.push(b.bytes().to_vec());
            run_int(&mut int_node(2, 0, presence), &mut b);
            v.push(b.bytes().to_vec());
            let mut b = VecBuf::new(f, 512);
            run_int(&mut Node::new(all.clone()), &mut b);
            run_int(&mut int_node(2, 0, presence), &mut b);
            v.push(b.bytes().to_vec());
        }
    }
    // AM-PM marks: an IPv4 DSCP mark, and the AltMark option in both headers.
    for carrier in [Carrier::Dscp { l_bit: 0, d_bit: 1 }, Carrier::Ipv6HopByHop, Carrier::Ipv6DestOpts] {
        for f in [&plain4, &plain6] {
            let mut b = VecBuf::new(f, 256);
            run_ampm(&mut Mp::new(MpRole::Initiator, Method::Double, carrier), &mut b, 1_700_000_000 * SEC);
            v.push(b.bytes().to_vec());
        }
    }
    v
}

/// A mutant of `seed`: one to four edits, mostly in the headers.
pub(crate) fn mutate(rng: &mut XorShift, seed: &[u8]) -> Vec<u8> {
    let mut f = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if f.is_empty() {
            break;
        }
        let at = if rng.below(5) > 0 { rng.below(f.len().min(110)) } else { rng.below(f.len()) };
        match rng.below(6) {
            0 => f[at] = rng.next_u64() as u8,
            1 => f[at] ^= 1 << rng.below(8),
            // Edge values where lengths, counts and types live.
            2 => f[at] = [0, 1, 2, 3, 4, 0x0f, 0x10, 0x12, 0x3f, 0x40, 0x7f, 0x80, 0xfe, 0xff][rng.below(14)],
            3 => {
                let v = [0u16, 1, 8, 20, 40, 0xffff][rng.below(6)].to_be_bytes();
                let n = v.len().min(f.len() - at);
                f[at..at + n].copy_from_slice(&v[..n]);
            }
            4 => f.truncate(at),
            _ => f.push(rng.next_u64() as u8),
        }
    }
    f
}

/// The per-role pipeline on one frame at a time, for coverage-guided
/// fuzzing (tests/fuzz's `pipeline` target, whose corpus `cargo test`
/// replays): the first byte of an input picks the role, the rest is the
/// frame. Roles: forwarding in each mode (cross-connect, bridge, router:
/// the test router's tables), INT source, transit and sink in each presence
/// method (the sink also with every analytics feature on), and every AM-PM
/// point (role x method x carrier). Each keeps its
/// state across inputs, as a worker does. Beyond "no panic", for a frame
/// that parses and is not dropped: the frame sent parses again; an IPv4
/// header checksum right on input is right on output; the IP packet's
/// length fields still end where the IP packet ends (bytes after it stay
/// as many), and a UDP length that matched the IP payload still does (if
/// still UDP);
/// an INT sink's output carries no INT; the analytics' records stay within
/// the hops they track.
pub struct Roles {
    envs: Vec<(Tables, FlowTable, MacTable)>,
    int_nodes: Vec<Node>,
    analytics: Vec<AnalyticsOut>,
    /// Flow records and events the analytics sinks exported.
    analytics_read: (u64, u64),
    ampm_nodes: Vec<Mp>,
    gpint: Vec<WholeRole>,
    label: Vec<WholeRole>,
    /// `router_int_label` twins: the first runs at the depth the worker
    /// would take (`L3`), the second at `Full`.
    routed: Vec<(WholeRole, WholeRole)>,
    /// Inputs the twins took.
    routed_n: u64,
    c: CounterValues,
    n: u64,
}

impl Default for Roles {
    fn default() -> Self {
        Self::new()
    }
}

/// What the invariants compare before and after a stage.
struct Shape {
    /// Bytes after the IP packet (Ethernet padding).
    trailer: usize,
    v4_sum_ok: bool,
    udp_len_ok: bool,
    proto: u8,
}

fn shape(f: &[u8], m: &PacketMeta) -> Shape {
    let l3 = m.l3_offset;
    let v4_sum_ok = m.l3 == crate::parse::L3Kind::Ipv4 && {
        let ihl = (f[l3] & 0x0f) as usize * 4;
        f.len() >= l3 + ihl && crate::wire::checksum::checksum(&f[l3..l3 + ihl]) == 0
    };
    let udp_len_ok = m.key.proto() == 17
        && m.l4_offset > 0
        && f.len() >= m.l4_offset + 8
        && u16::from_be_bytes([f[m.l4_offset + 4], f[m.l4_offset + 5]]) as usize == m.l3_end - m.l4_offset;
    Shape { trailer: f.len() - m.l3_end, v4_sum_ok, udp_len_ok, proto: m.key.proto() }
}

/// A sink (INT's, or an INT-label last hop) gives back the packet the INT
/// block carried: when that packet's own transport header is malformed or
/// missing (damaged after the source, which only takes packets that
/// parse), it leaves as it came, as a router forwards a damaged segment. True when everything after `out`'s plain
/// IPv4 or IPv6 header is the tail of `input`, verbatim (the sink wrote
/// none of it).
fn carried_inner_header(input: &[u8], out: &[u8]) -> bool {
    // After the VLAN tags, if any.
    let mut l3 = 14;
    while matches!(out.get(l3 - 2..l3), Some([0x81, 0x00] | [0x88, 0xa8])) {
        l3 += 4;
    }
    let l4 = match out.get(l3).map(|b| b >> 4) {
        Some(4) => l3 + (out[l3] & 0x0f) as usize * 4,
        Some(6) => l3 + 40,
        _ => return false,
    };
    out.get(l4..).is_some_and(|tail| input.ends_with(tail))
}

/// The invariants on a frame a stage let through.
fn check_sent(role: &str, before: &Shape, input: &[u8], out: &[u8]) {
    let m = match parse(out, 0) {
        Ok(m) => m,
        Err(DropReason::TcpBadHeader)
            if matches!(role, "INT sink" | "INT-label") && carried_inner_header(input, out) =>
        {
            return
        }
        Err(r) => panic!("{role}: the frame sent does not parse ({r:?}): in {input:02x?} out {out:02x?}"),
    };
    let after = shape(out, &m);
    assert_eq!(after.trailer, before.trailer, "{role}: IP length fields moved: in {input:02x?} out {out:02x?}");
    assert!(!before.v4_sum_ok || after.v4_sum_ok, "{role}: IPv4 checksum broken: in {input:02x?} out {out:02x?}");
    // (A sink restoring an NPT 2 packet gives it back its own protocol.)
    assert!(
        !before.udp_len_ok || after.udp_len_ok || after.proto != 17,
        "{role}: UDP length broken: in {input:02x?} out {out:02x?}"
    );
}

/// In router mode, `frame` addressed to p0's MAC (most mutants then reach
/// the routing): the quick path routes it only as the full path does, and
/// otherwise leaves it as it came; with a NIC's checksum verdict (p0's
/// device checks them) of none, good or bad, by the frame's length, whether
/// or not the header agrees.
fn quick_route_agrees(t: &Tables, flows: &mut FlowTable, macs: &mut MacTable, learn: bool, now: u64, frame: &[u8]) {
    if t.mode != Mode::Router || frame.len() < 6 {
        return;
    }
    let mut input = frame.to_vec();
    input[..6].copy_from_slice(&t.ports[0].mac);
    let nic = [None, Some(true), Some(false)][frame.len() % 3];
    forward::quick::assert_as_the_full_path(t, flows, macs, learn, now, &input, nic);
}

impl Roles {
    pub fn new() -> Roles {
        let envs = [Mode::CrossConnect, Mode::Bridge, Mode::Router]
            .into_iter()
            .map(|mode| {
                let mut s = two_port_router_v6_routed();
                s.mode = mode;
                s.ports[0].nic_checks_ipv4 = true;
                (Tables::build(&s, 1).expect("test tables"), FlowTable::new(256, 0), MacTable::new(256, 0))
            })
            .collect();
        let presences = [Presence::UdpPort(17768), Presence::Dscp { value: 0x17, mask: 0x3f }];
        let mut int_nodes: Vec<Node> =
            presences.iter().flat_map(|&p| [int_node(1, 0b01, p), int_node(2, 0, p), int_node(3, 0b10, p)]).collect();
        let mut analytics = Vec::new();
        for p in presences {
            let (n, out) = analytics_sink(p);
            int_nodes.push(n);
            analytics.push(out);
        }
        Roles {
            envs,
            int_nodes,
            analytics,
            analytics_read: (0, 0),
            ampm_nodes: all_ampm_nodes(),
            gpint: vec![WholeRole::gpint(None), WholeRole::gpint(Some(0x2e))],
            label: presences.iter().flat_map(|&p| [WholeRole::label(p, false), WholeRole::label(p, true)]).collect(),
            routed: presences
                .iter()
                .flat_map(|&p| [(p, true), (p, false)])
                .map(|(p, tr)| (WholeRole::router_int_label(p, tr), WholeRole::router_int_label(p, tr)))
                .collect(),
            routed_n: 0,
            c: CounterValues::default(),
            n: 0,
        }
    }

    /// How many roles an input's first byte picks among.
    pub fn count(&self) -> usize {
        self.envs.len()
            + self.int_nodes.len()
            + self.ampm_nodes.len()
            + self.gpint.len()
            + self.label.len()
            + self.routed.len()
    }

    /// Runs `data[1..]` through the role `data[0]` picks; panics when an
    /// invariant breaks.
    pub fn run(&mut self, data: &[u8]) {
        let Some((&pick, frame)) = data.split_first() else { return };
        self.n += 1;
        let mut role = pick as usize % self.count();
        if let Some((t, flows, macs)) = self.envs.get_mut(role) {
            // As received: a vdev may hand over a frame under 60 bytes.
            let mut f = frame.to_vec();
            let meta = parse(&f, 0);
            let before = meta.as_ref().ok().map(|m| shape(&f, m));
            let input = f.clone();
            let mut ctl = Discard;
            let mut ctx = Ctx::new(t, flows, macs, &mut self.c, &mut ctl, self.n, self.n % 2 == 0);
            let v = forward::process_parsed(&mut ctx, &mut f, 0, &meta);
            quick_route_agrees(t, flows, macs, self.n % 2 == 1, self.n, &input);
            match (v, before) {
                (forward::Verdict::Tx(_) | forward::Verdict::Flood, Some(b)) => check_sent("forward", &b, &input, &f),
                (forward::Verdict::TxLen(_, len), Some(_)) => {
                    // Cut to its length, or padded with zeros as the worker
                    // pads a reply to Ethernet's 60 bytes (Mbuf::set_len).
                    let mut out = f.clone();
                    out.resize(len as usize, 0);
                    assert!(parse(&out, 0).is_ok(), "a reply that does not parse: in {input:02x?} out {out:02x?}");
                }
                (forward::Verdict::Drop(_) | forward::Verdict::Consumed, _) => {}
                (v, None) => panic!("an unparsable frame was not dropped ({v:?}): {input:02x?}"),
            }
            return;
        }
        let Ok(meta) = parse(frame, 0) else { return };
        let before = shape(frame, &meta);
        role -= self.envs.len();
        if let Some(n) = self.int_nodes.get_mut(role) {
            let mut b = VecBuf::new(frame, 256);
            let sunk = int_events(n, Event::IntSunk);
            if run_int(n, &mut b) == Some(Ok(())) {
                let role = if int_events(n, Event::IntSunk) > sunk { "INT sink" } else { "INT" };
                check_sent(role, &before, frame, b.bytes());
                if let (true, Ok(m)) = (int_events(n, Event::IntSunk) > sunk, parse(b.bytes(), 0)) {
                    assert!(
                        int::find(b.bytes(), &m, n.spec().presence).is_none(),
                        "a sink sent INT: in {frame:02x?} out {:02x?}",
                        b.bytes()
                    );
                }
            }
            let (f, e) = drain(&mut self.analytics);
            self.analytics_read = (self.analytics_read.0 + f, self.analytics_read.1 + e);
            return;
        }
        role -= self.int_nodes.len();
        if let Some(mp) = self.ampm_nodes.get_mut(role) {
            let mut b = VecBuf::new(frame, 128);
            let at = 1_700_000_000 * SEC + (self.n * 7_919_000_011) % (4 * SEC);
            let (outcome, _) = mp.run(&mut b, at);
            if outcome != ampm::Outcome::Skipped || b.bytes() != frame {
                check_sent("AM-PM", &before, frame, b.bytes());
            }
            return;
        }
        role -= self.ampm_nodes.len();
        if let Some(g) = self.gpint.get_mut(role) {
            // A millisecond an input: copies wait, and expire as notices.
            let (sent, records) = g.run(frame, (self.n % 2) as u16, self.n * HZ / 1000);
            for (out, v) in sent {
                match v {
                    Verdict::Tx(_) | Verdict::Flood => check_sent("GPINT", &before, frame, &out),
                    Verdict::TxLen(..) => {
                        assert!(
                            parse(&out, 0).is_ok(),
                            "GPINT: a reply that does not parse: in {frame:02x?} out {out:02x?}"
                        )
                    }
                    _ => {}
                }
            }
            for r in records {
                let f = r.frame.bytes();
                assert!(parse(f, 0).is_ok(), "GPINT: an exported probe that does not parse: in {frame:02x?} {f:02x?}");
            }
            return;
        }
        role -= self.gpint.len();
        if let Some(l) = self.label.get_mut(role) {
            let (presence, last_hop) = l.label.expect("a label role");
            let sunk = l.c.events[Event::LabelSunk as usize];
            let (sent, _) = l.run(frame, 0, self.n * HZ / 1000);
            let restored = l.c.events[Event::LabelSunk as usize] > sunk;
            for (out, v) in sent {
                if !matches!(v, Verdict::Tx(_) | Verdict::Flood) {
                    continue;
                }
                check_sent("INT-label", &before, frame, &out);
                if let (true, Ok(m)) = (last_hop && restored, parse(&out, 0)) {
                    assert!(
                        int::find(&out, &m, presence).is_none(),
                        "a last hop sent its labels on: in {frame:02x?} out {out:02x?}"
                    );
                }
            }
            let mut r = crate::int::stage::ReportRecord::empty();
            while l.labels.pop_into(&mut r) {
                assert!(
                    r.domain_id == LABEL_DS && (r.len as usize) <= crate::int::stage::REPORT_MAX && last_hop,
                    "a label report out of place: in {frame:02x?}"
                );
            }
            return;
        }
        role -= self.label.len();
        if let Some((quick, full)) = self.routed.get_mut(role) {
            // A millisecond an input of its own: the label interval (5 ms)
            // leaves the port quiet between its labels.
            self.routed_n += 1;
            routed_as_at_full_depth(quick, full, frame, self.routed_n * HZ / 1000);
        }
    }
}

/// `frame`, addressed to p0's MAC, through a router with INT and label at
/// the depth the worker takes (the quick path where both let it) and at
/// full depth: the same verdicts, lengths, label reports and counters, and
/// the same bytes where the packet leaves without INT (metadata's
/// timestamps read the clock).
fn routed_as_at_full_depth(quick: &mut WholeRole, full: &mut WholeRole, frame: &[u8], tsc: u64) {
    let mut f = frame.to_vec();
    if let Some(dst) = f.get_mut(..6) {
        dst.copy_from_slice(&quick.t.ports[0].mac);
    }
    let depth = quick.pipe.shortcut::<VecBuf, _>(&quick.t, &quick.out, 0).1;
    assert_eq!(depth, Depth::L3, "a router with INT and label runs at L3");
    let (a, _) = quick.run_at(&f, 0, tsc, depth);
    let (b, _) = full.run_at(&f, 0, tsc, Depth::Full);
    assert_eq!(a.len(), b.len(), "L3 and full depth sent otherwise: {f:02x?}");
    for ((qa, va), (fb, vb)) in a.iter().zip(&b) {
        assert_eq!((va, qa.len()), (vb, fb.len()), "L3 and full depth differ: in {f:02x?}");
        if !carries_int(qa) {
            assert_eq!(qa, fb, "L3 and full depth wrote otherwise: in {f:02x?}");
        }
    }
    let counters = |c: &CounterValues| (c.drops, c.events, c.tx_packets, c.rx_packets);
    assert_eq!(counters(&quick.c), counters(&full.c), "L3 and full depth counted otherwise: in {f:02x?}");
    let (mut ra, mut rb) = (crate::int::stage::ReportRecord::empty(), crate::int::stage::ReportRecord::empty());
    loop {
        match (quick.labels.pop_into(&mut ra), full.labels.pop_into(&mut rb)) {
            (false, false) => break,
            (true, true) => assert_eq!(ra.len, rb.len, "label reports differ: in {f:02x?}"),
            _ => panic!("label reports at L3 and full depth differ in number: in {f:02x?}"),
        }
    }
}

/// Whether a frame parses and carries an INT block by either presence.
fn carries_int(f: &[u8]) -> bool {
    let presences = [Presence::UdpPort(INT_PORT), Presence::Dscp { value: 0x17, mask: 0x3f }];
    parse(f, 0).is_ok_and(|m| presences.iter().any(|&p| int::find(f, &m, p).is_some()))
}

/// The kept corpus of the `pipeline` target, through [`Roles`].
#[test]
fn the_pipeline_fuzz_corpus_replays_clean() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz/corpus/pipeline");
    let mut roles = Roles::new();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("tests/fuzz/corpus/pipeline") {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        roles.run(&data);
        n += 1;
    }
    assert!(n > 100, "{n} corpus files");
}

/// The seeds through every role, mutated: what the fuzz target starts from.
#[test]
fn every_role_keeps_the_invariants_on_mutated_seeds() {
    let mut seeds = seeds();
    seeds.extend(gpint_seeds());
    let mut rng = XorShift::new(0x0f22_5eed);
    let mut roles = Roles::new();
    for _ in 0..ROUNDS {
        let seed = &seeds[rng.below(seeds.len())];
        let f = mutate(&mut rng, seed);
        let mut data = vec![rng.below(roles.count()) as u8];
        data.extend_from_slice(&f);
        roles.run(&data);
    }
    let (flows, events) = roles.analytics_read;
    assert!(flows > 100 && events > 100, "the analytics sinks exported {flows} flow records and {events} events");
    // The GPINT roles took probes and feedbacks, kept, freed and expired copies.
    let ev = |e: Event| roles.gpint.iter().map(|g| g.c.events[e as usize]).sum::<u64>();
    for e in [Event::GpintRx, Event::GpintFeedbackRx, Event::GpintDelivered, Event::SqrStored, Event::SqrTimeouts] {
        assert!(ev(e) > 10, "GPINT roles: {} {}", e.name(), ev(e));
    }
    // The label roles (the routers' too) labeled by every rule, pushed onto
    // labels carried, exported and restored.
    let labelling = roles.label.iter().chain(roles.routed.iter().map(|(quick, _)| quick));
    let ev = |e: Event| labelling.clone().map(|l| l.c.events[e as usize]).sum::<u64>();
    for e in [
        Event::LabelInterval,
        Event::LabelProbabilistic,
        Event::LabelSpecific,
        Event::LabelSunk,
        Event::LabelExported,
        Event::LabelPassedMalformed,
    ] {
        assert!(ev(e) > 10, "label roles: {} {}", e.name(), ev(e));
    }
}

#[test]
fn mutated_frames_never_panic_any_stage() {
    let seeds = seeds();
    let mut rng = XorShift::new(0x1d5e_a5e5_0f1a_7e00);
    let mut envs: Vec<(Tables, FlowTable, MacTable)> = [Mode::CrossConnect, Mode::Bridge, Mode::Router]
        .into_iter()
        .map(|mode| {
            let mut s = two_port_router_v6_routed();
            s.mode = mode;
            s.ports[0].nic_checks_ipv4 = true;
            (Tables::build(&s, 1).unwrap(), FlowTable::new(256, 0), MacTable::new(256, 0))
        })
        .collect();
    let mut ampm_nodes = all_ampm_nodes();
    let presences = [Presence::UdpPort(17768), Presence::Dscp { value: 0x17, mask: 0x3f }];
    let mut int_nodes: Vec<Node> =
        presences.iter().flat_map(|&p| [int_node(1, 0b01, p), int_node(2, 0, p), int_node(3, 0b10, p)]).collect();
    let mut c = CounterValues::default();
    let (mut parsed, mut int_acted, mut ampm_measured) = (0u64, 0u64, 0u64);
    for i in 0..ROUNDS as u64 {
        let seed = &seeds[rng.below(seeds.len())];
        let f = mutate(&mut rng, seed);
        let meta: Result<PacketMeta, DropReason> = parse(&f, 0);
        parsed += meta.is_ok() as u64;
        for (t, flows, macs) in envs.iter_mut() {
            let mut frame = f.clone();
            frame.resize(frame.len().max(128), 0);
            let mut ctl = Discard;
            let mut ctx = Ctx::new(t, flows, macs, &mut c, &mut ctl, i, i % 2 == 0);
            let m = parse(&frame, 0);
            forward::process_parsed(&mut ctx, &mut frame, 0, &m);
            quick_route_agrees(t, flows, macs, i % 2 == 1, i, &f);
        }
        // Every AM-PM point sees a few mutants each, at a time in any slot.
        let k = rng.below(ampm_nodes.len());
        let at = 1_700_000_000 * SEC + rng.next_u64() % (4 * SEC);
        let mut b = VecBuf::new(&f, 128);
        ampm_measured += (run_ampm(&mut ampm_nodes[k], &mut b, at) == Some(ampm::Outcome::Measured)) as u64;
        for n in int_nodes.iter_mut() {
            let mut b = VecBuf::new(&f, 256);
            let acts = |n: &Node| [Event::IntSourced, Event::IntTransited, Event::IntSunk].map(|e| int_events(n, e));
            let before = acts(n);
            run_int(n, &mut b);
            let after = acts(n);
            int_acted += (before != after) as u64;
        }
    }
    // The mutants reached the stages' work, not just the parser's checks.
    assert!(parsed > ROUNDS as u64 / 2, "{parsed} of {ROUNDS} mutants parsed");
    assert!(
        int_acted > ROUNDS as u64 && ampm_measured > ROUNDS as u64 / 5,
        "INT acted on {int_acted}, AM-PM measured {ampm_measured}"
    );
}

#[test]
fn int_precheck_skips_only_what_the_stage_leaves_alone() {
    let seeds = seeds();
    let mut rng = XorShift::new(0x5c1f_7e57);
    let presences = [Presence::UdpPort(17768), Presence::Dscp { value: 0x17, mask: 0x3f }];
    // Source (edge in), transit, sink (edge out), and an edge node without rules.
    let mut nodes: Vec<Node> = presences
        .iter()
        .flat_map(|&p| {
            let mut bare = int_node(4, 0b01, p);
            bare.clear_watch();
            [int_node(1, 0b01, p), int_node(2, 0, p), int_node(3, 0b10, p), bare]
        })
        .collect();
    let (mut skipped, mut kept) = (0u64, 0u64);
    for _ in 0..ROUNDS {
        let seed = &seeds[rng.below(seeds.len())];
        let f = mutate(&mut rng, seed);
        let Ok(meta) = parse(&f, 0) else { continue };
        for n in nodes.iter_mut() {
            if crate::int::stage::may_act(n.spec(), &f, &meta, 0) {
                kept += 1;
                continue;
            }
            skipped += 1;
            let before = (n.c.events, n.c.drops);
            let mut b = VecBuf::new(&f, 256);
            n.drop_report(b.bytes(), hop(), DropReason::TtlExceeded);
            assert_eq!(n.run(&mut b, hop()), Ok(()), "skipped, but the stage dropped {f:02x?}");
            assert_eq!(b.bytes(), &f[..], "skipped, but the stage changed {f:02x?}");
            assert!((n.c.events, n.c.drops) == before, "skipped, but the stage counted something for {f:02x?}");
            assert!(n.reports.is_empty(), "skipped, but the stage reported {f:02x?}");
        }
    }
    assert!(skipped > ROUNDS as u64 && kept > ROUNDS as u64, "skipped {skipped}, kept {kept}");
}

#[test]
fn int_round_trip_restores_every_wellformed_mutant() {
    let seeds = seeds();
    for (presence, seed) in
        [(Presence::UdpPort(17768), 0x0ddb_a11c_0ffe), (Presence::Dscp { value: 0x17, mask: 0x3f }, 7)]
    {
        let mut rng = XorShift::new(seed);
        let (mut s1, mut s2, mut s3) =
            (int_node(1, 0b01, presence), int_node(2, 0, presence), int_node(3, 0b10, presence));
        let mut checked = 0;
        for _ in 0..ROUNDS {
            let seed = &seeds[rng.below(seeds.len())];
            let f = mutate(&mut rng, seed);
            let Ok(meta) = parse(&f, 0) else { continue };
            if int::find(&f, &meta, presence).is_some() {
                continue;
            }
            // 0xffff in an IPv4 header or TCP checksum is 0x0000's other
            // one's-complement form (no sender computes it): incremental
            // updates (RFC 1624) give back 0x0000, an equal checksum.
            let ffff = |at: usize| f.get(at..at + 2) == Some(&[0xff, 0xff][..]);
            if (meta.key.ip_version() == 4 && ffff(meta.l3_offset + 10))
                || (meta.key.proto() == 6 && ffff(meta.l4_offset + 16))
            {
                continue;
            }
            let mut b = VecBuf::new(&f, 256);
            let sourced = int_events(&s1, Event::IntSourced);
            run_int(&mut s1, &mut b);
            if int_events(&s1, Event::IntSourced) == sourced {
                continue;
            }
            let (transited, sunk) = (int_events(&s2, Event::IntTransited), int_events(&s3, Event::IntSunk));
            assert_eq!(run_int(&mut s2, &mut b), Some(Ok(())), "transit of {f:02x?}");
            assert_eq!(int_events(&s2, Event::IntTransited), transited + 1, "transit of {f:02x?}");
            assert_eq!(run_int(&mut s3, &mut b), Some(Ok(())), "sink of {f:02x?}");
            assert_eq!(int_events(&s3, Event::IntSunk), sunk + 1, "sink of {f:02x?}");
            assert_eq!(b.bytes(), &f[..], "{presence:?}: source, transit and sink give back {f:02x?}");
            checked += 1;
        }
        assert!(checked > ROUNDS / 8, "{presence:?}: {checked} mutants went through the round trip");
    }
}

#[test]
fn altmark_option_round_trip_restores_every_wellformed_mutant() {
    let seeds = seeds();
    let mut rng = XorShift::new(0xa17_3a4c);
    for carrier in [Carrier::Ipv6HopByHop, Carrier::Ipv6DestOpts] {
        let mut mp1 = Mp::new(MpRole::Initiator, Method::Muxed, carrier);
        let mut mp2 = Mp::new(MpRole::Terminator, Method::Muxed, carrier);
        let mut checked = 0;
        for _ in 0..ROUNDS {
            let seed = &seeds[rng.below(seeds.len())];
            let f = mutate(&mut rng, seed);
            let at = 1_700_000_000 * SEC + rng.next_u64() % (4 * SEC);
            let mut b = VecBuf::new(&f, 128);
            let inserted = mp1.event(Event::AmpmOptionInserted);
            run_ampm(&mut mp1, &mut b, at);
            if mp1.event(Event::AmpmOptionInserted) == inserted {
                continue;
            }
            let removed = mp2.event(Event::AmpmOptionRemoved);
            assert_eq!(run_ampm(&mut mp2, &mut b, at + 1_000), Some(ampm::Outcome::Measured), "{carrier:?}: {f:02x?}");
            assert_eq!(mp2.event(Event::AmpmOptionRemoved), removed + 1, "{carrier:?}: {f:02x?}");
            assert_eq!(b.bytes(), &f[..], "{carrier:?}: initiator and terminator give back {f:02x?}");
            checked += 1;
        }
        assert!(checked > ROUNDS / 20, "{carrier:?}: {checked} mutants went through the round trip");
    }
}
