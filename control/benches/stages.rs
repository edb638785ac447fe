//! The data path's per-packet cost without DPDK: the stages a worker runs
//! on each packet (parse, flow table, forwarding, AM-PM, INT), on the
//! traffic and tables of `scripts/bench.sh`'s cases, one core, no ports.
//! `scripts/bench.sh` measures the switch as a whole against testpmd; this
//! says what the stages themselves cost, with far less noise than a run
//! through the PMDs (no mbufs, no RX/TX bursts), so a change to a stage can
//! be compared here first.
//!
//! Run: `cargo bench -p control --bench stages [-- CASE...]`
//! `STAGES_RUN=CONFIG.toml:TRACE.pcap[,...]` runs, instead of the built-in
//! cases, the pipeline of each switch config on its trace (any config the
//! switch takes; `BENCH_KEEP=1 scripts/bench.sh` leaves its cases' configs
//! and traces), named by the config's file name; a pair that differs in
//! one config section shows that section's per-packet cost without the
//! PMDs' noise. `STAGES_PASSES` (default 21) sets the timed passes, and
//! `burst_packets` says how many packets ran in all: where even the
//! fastest pass swings, `scripts/stage_instructions.sh` counts the
//! instructions per packet under callgrind instead (exact, noise-free).
//! Prints one line per case:
//! `stage=<name> ns_per_packet=<x.x> mpps=<x.xx> handled=<share>`, the
//! fastest of several timed passes over the case's frames, and the share of
//! them the case's stage acted on (1.00: all of them).
//!
//! Each packet is copied into its buffer first (what net_pcap's RX does) and
//! handled by the worker's own pipeline (`worker::pipeline`): bursts of 32
//! with one receive time each, a parse-and-prefetch pass for large tables,
//! forwarding, then the AM-PM and INT stages, the INT hop's egress time from
//! the burst's clock (one TSC read per 8 INT packets).
//! Sink reports go into a real report ring; the time spent draining it
//! (the control core's work) is not counted.

use std::hint::black_box;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use control::config::Config;
use control::int::analytics::config::AnalyticsPlan;
use control::traffic::{frame, int_frame, IntTraffic, TrafficSpec};
use dataplane::counters::{CounterValues, Event};
use dataplane::forward::Verdict;
use dataplane::int::analytics::events::event_ring;
use dataplane::int::analytics::flow_ring::flow_ring;
use dataplane::int::analytics::histogram::{HistWriter, WorkerHist};
use dataplane::int::analytics::{rule_counters, AnalyticsSetup};
use dataplane::int::report_ring::{report_ring, ReportConsumer};
use dataplane::int::stage::{ReportRecord, WallClock};
use dataplane::parse::parse;
use dataplane::pipeline::{Burst, PortLoad, RxTime, VecOut};
use dataplane::pktbuf::{PacketBuf, VecBuf};
use dataplane::tables::Tables;
use dataplane::wire::int_md::instr;
use dataplane::worker::{self, FlowSetup, MacSetup, StageSetup, WorkerPipeline, WorkerShared};

const BURST: usize = 32;
const DUT_MAC: &str = "02:00:00:00:be:00";
/// A nominal TSC rate for the INT clock and report intervals.
const HZ: u64 = 2_500_000_000;

/// One case: tables from a config, the frames it replays.
struct Case {
    tables: Tables,
    frames: Vec<Vec<u8>>,
    learn: bool,
    /// Only parse (no forwarding or stages).
    parse_only: bool,
    /// What shows that the case's stage handled a packet: a case whose
    /// frames miss the stage fails.
    acts: Acts,
    /// The INT sink's analytics (flow cache, events, histograms,
    /// detection) as the config's `[int.analytics]` sizes them.
    analytics: Option<AnalyticsPlan>,
}

#[derive(Clone, Copy)]
enum Acts {
    Forwarded,
    Counted(Event),
    AmpmMeasured,
}

/// A config as `scripts/bench.sh` writes it: p0 (where traffic enters) and p1.
fn config(mode: &str, learn: bool, p0: &str, p1: &str, tail: &str) -> String {
    format!(
        "name = \"bench\"\nmode = \"{mode}\"\n[eal]\nlcores = \"0-1\"\n[flow_table]\ncapacity = 131072\nlearn = {learn}\n\
         [[port]]\nname = \"p0\"\ndevice = \"net_null0\"\nmac = \"{DUT_MAC}\"\n{p0}\n\
         [[port]]\nname = \"p1\"\ndevice = \"net_null1\"\nmac = \"02:00:00:00:be:01\"\n{p1}\n{tail}\n"
    )
}

fn tables(toml: &str) -> (Tables, Option<AnalyticsPlan>) {
    let plan = Config::from_toml(toml).and_then(|c| c.validate()).unwrap_or_else(|e| panic!("bench config: {e:?}"));
    let macs: Vec<[u8; 6]> = plan.ports.iter().map(|p| p.mac.unwrap_or([2, 0, 0, 0, 0, 1])).collect();
    (Tables::build(&plan.table_spec(&macs, HZ), 1).expect("bench tables"), plan.int.as_ref().and_then(|i| i.analytics))
}

/// A `STAGES_RUN` case: a switch config and the trace its p0 receives.
fn from_files(config: &str, trace: &str) -> Case {
    let toml = std::fs::read_to_string(config).unwrap_or_else(|e| panic!("{config}: {e}"));
    let learn = Config::from_toml(&toml).unwrap_or_else(|e| panic!("{config}: {e:?}")).flow_table.learn;
    let file = std::fs::File::open(trace).unwrap_or_else(|e| panic!("{trace}: {e}"));
    let frames: Vec<Vec<u8>> = dataplane::pcap::read_all(file)
        .unwrap_or_else(|e| panic!("{trace}: {e}"))
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert!(!frames.is_empty(), "{trace}: no frames");
    let (tables, analytics) = tables(&toml);
    Case { tables, frames, learn, parse_only: false, acts: Acts::Forwarded, analytics }
}

fn traffic(count: usize, flows: usize, src: &str, dst: &str, dst_mac: [u8; 6], vary_dst: bool) -> TrafficSpec {
    TrafficSpec {
        count,
        flows,
        frame_len: 60,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac,
        src: src.parse().expect("address"),
        dst: dst.parse().expect("address"),
        vary_dst,
    }
}

fn frames(t: &TrafficSpec) -> Vec<Vec<u8>> {
    (0..t.count).map(|i| frame(t, i)).collect()
}

fn int_frames(t: &TrafficSpec, it: &IntTraffic) -> Vec<Vec<u8>> {
    (0..t.count).map(|i| int_frame(t, i, it).expect("INT frame")).collect()
}

const XC: [&str; 2] = ["peer = \"p1\"", "peer = \"p0\""];
const FIVE: u16 = instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE | instr::INGRESS_TS;

/// The cases, in the order they run.
const CASES: [&str; 19] = [
    "parse",
    "xconnect-flow-table",
    "l3-10k-routes-100k-flows",
    "int-source",
    "int-transit-5-instructions",
    "int-sink-5x4",
    "int-sink-5x4-report-every-packet",
    "int-sink-analytics-5x4",
    "int-sink-analytics-5x4-1k-flows",
    "int-sink-analytics-5x4-1m-flows",
    "ampm-initiator",
    "ampm-terminator",
    "gpint-transit",
    "gpint-transit-no-recovery",
    "gpint-wheel-scan-64-busy",
    "intlabel-core",
    "int-transit-dscp",
    "intlabel-core-labeled",
    "intlabel-lasthop",
];

/// The L3 case's config: 10k /24 routes via one neighbour.
fn config_text_l3() -> String {
    let mut routes = String::from("[[neighbour]]\nip = \"10.0.2.254\"\nmac = \"02:00:00:00:02:fe\"\nport = \"p1\"\n");
    for i in 0..10_000 {
        routes +=
            &format!("[[route]]\nprefix = \"20.{}.{}.0/24\"\nport = \"p1\"\nvia = \"10.0.2.254\"\n", i / 256, i % 256);
    }
    config("router", true, "ipv4 = [\"10.0.1.1/24\"]", "ipv4 = [\"10.0.2.1/24\"]", &routes)
}

fn build(name: &'static str) -> Case {
    let l2 = || frames(&traffic(4096, 64, "10.0.0.1", "10.1.0.1", [2, 0, 0, 0, 0, 2], false));
    let case = |learn, toml: String, frames| {
        let (tables, analytics) = tables(&toml);
        Case { tables, frames, learn, parse_only: false, acts: Acts::Forwarded, analytics }
    };
    let xc = |learn, tail: &str| config("xconnect", learn, XC[0], XC[1], tail);
    let int = |edge: &str, more: &str| format!("[int]\nnode_id = 7\nedge_ports = {edge}\n{more}\n");
    let collector = "[[int.collector]]\naddress = \"127.0.0.1:32766\"";
    let five_hops = || {
        let four = instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE;
        let t = traffic(4096, 64, "10.0.0.1", "10.1.0.1", [2, 0, 0, 0, 0, 2], false);
        int_frames(&t, &IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap: four, hops: 5, rhc: 3 })
    };
    let ampm = |role: &str| {
        let mut s = String::from("[ampm]\nnode_id = 9\ninterval = \"1s\"\nmax_flows = 10000\n");
        for i in 0..10_000 {
            s += &format!(
                "[[ampm.flow]]\nname = \"f{i}\"\nflow_mon_id = {i}\nrole = \"{role}\"\nmethod = \"muxed\"\ncarrier = \"dscp\"\n\
                 src = \"10.1.{}.{}/32\"\nproto = \"udp\"\nsrc_port = {}\n",
                i / 256,
                i % 256,
                1024 + i
            );
        }
        let am = traffic(20_000, 10_000, "10.1.0.0", "10.2.0.1", [2, 0, 0, 0, 0, 2], false);
        Case { acts: Acts::AmpmMeasured, ..case(false, xc(false, &s), frames(&am)) }
    };
    // Label packets (DSCP 0x17, the label domain's DS ID, one 32-byte
    // label), or the same frames as classic INT of a DSCP domain (ds 0).
    let labeled = |ds: u16| {
        let t = traffic(4096, 64, "10.0.0.1", "10.1.0.1", [2, 0, 0, 0, 0, 2], false);
        let six = FIVE | instr::EGRESS_TS;
        int_frames(&t, &IntTraffic { udp_port: 17768, dscp: Some(0x17), domain_id: ds, bitmap: six, hops: 1, rhc: 4 })
    };
    let label = |edge: &str| format!("[label]\ninterval_ms = 50.0\nedge_ports = {edge}\n");
    match name {
        "intlabel-core" => {
            let mut c = build("l3-10k-routes-100k-flows");
            let toml = config_text_l3() + &int("[]", "") + &label("[]");
            c.tables = tables(&toml).0;
            c
        }
        "int-transit-dscp" => Case {
            acts: Acts::Counted(Event::IntTransited),
            ..case(false, xc(false, &int("[]", "presence = \"dscp\"")), labeled(0))
        },
        "intlabel-core-labeled" => Case {
            acts: Acts::Counted(Event::LabelProbabilistic),
            ..case(false, xc(false, &(int("[]", "") + &label("[]"))), labeled(0x4c42))
        },
        "intlabel-lasthop" => {
            let sink = int("[\"p1\"]", &format!("report_max_packet = 1472\n{collector}")) + &label("[\"p1\"]");
            Case { acts: Acts::Counted(Event::LabelSunk), ..case(false, xc(false, &sink), labeled(0x4c42)) }
        }
        "parse" => Case { parse_only: true, ..case(false, xc(false, ""), l2()) },
        "xconnect-flow-table" => case(true, xc(true, ""), l2()),
        "l3-10k-routes-100k-flows" => {
            let l3 = traffic(100_000, 100_000, "10.0.1.10", "20.0.0.1", [2, 0, 0, 0, 0xbe, 0], true);
            case(true, config_text_l3(), frames(&l3))
        }
        "int-source" => {
            let source = "[[int.watch]]\nname = \"all\"\nrole = \"source\"\nproto = \"udp\"\n\
                          instructions = [\"node_id\", \"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\"]";
            Case { acts: Acts::Counted(Event::IntSourced), ..case(false, xc(false, &int("[\"p0\"]", source)), l2()) }
        }
        "int-transit-5-instructions" => {
            let t = traffic(4096, 64, "10.0.0.1", "10.1.0.1", [2, 0, 0, 0, 0, 2], false);
            let one_hop = IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap: FIVE, hops: 1, rhc: 4 };
            Case {
                acts: Acts::Counted(Event::IntTransited),
                ..case(false, xc(false, &int("[]", "")), int_frames(&t, &one_hop))
            }
        }
        "int-sink-5x4" => {
            let sink = int("[\"p1\"]", &format!("report_flow_interval_ms = 1000\n{collector}"));
            Case { acts: Acts::Counted(Event::IntSunk), ..case(false, xc(false, &sink), five_hops()) }
        }
        "int-sink-5x4-report-every-packet" => {
            let sink = int("[\"p1\"]", &format!("report_max_packet = 1472\n{collector}"));
            Case { acts: Acts::Counted(Event::IntSunk), ..case(false, xc(false, &sink), five_hops()) }
        }
        "int-sink-analytics-5x4" => {
            // The 5x4 sink with [int.analytics]: queue T events and a
            // per_flow rule on the latency sum decide the reports.
            let sink = int(
                "[\"p1\"]",
                &format!(
                    "{collector}\n[int.analytics]\n[int.analytics.events.queue]\nthreshold = 100\n\
                     [[int.detect]]\nname = \"all\"\nalgorithm = \"per_flow\"\nthreshold = 1000"
                ),
            );
            Case { acts: Acts::Counted(Event::IntFlowHit), ..case(false, xc(false, &sink), five_hops()) }
        }
        // scripts/bench.sh's analytics cases: the exp value model (README
        // "Telemetry traces"), 5 hops x node ID, hop latency, queue and TX
        // utilisation; queue T events on about 1 % of the packets, a
        // per_flow rule reporting about 1 %. 1k flows (Zipf) in 65536
        // frames; 1,048,576 flows a frame each on the 2^19 x 12 cache.
        "int-sink-analytics-5x4-1k-flows" | "int-sink-analytics-5x4-1m-flows" => {
            let big = name.ends_with("1m-flows");
            let trace = control::traffic::TelemetryTrace {
                model: control::traffic::Model::Exp,
                flows: if big { 1 << 20 } else { 1000 },
                packets: if big { 1 << 20 } else { 65_536 },
                zipf: (!big).then_some(1.1),
                hops: 5,
                paths: 4,
                bitmap: 0xb100,
                rhc: 3,
                int_port: 17768,
                seed: 1,
            };
            let mut pcap = Vec::new();
            trace.write(&mut pcap).expect("analytics trace");
            let frames = dataplane::pcap::read_all(&pcap[..]).expect("pcap").into_iter().map(|(_, f)| f).collect();
            let geometry = if big { "cache_rows = 524288\ncache_memory_limit = 4294967296\n" } else { "" };
            let sink = int(
                "[\"p1\"]",
                &format!(
                    "{collector}\n[int.analytics]\n{geometry}[int.analytics.events.queue]\nthreshold = 186\n\
                     [[int.detect]]\nname = \"all\"\nalgorithm = \"per_flow\"\nmetric = \"e2e_latency\"\nthreshold = 20000"
                ),
            );
            Case { acts: Acts::Counted(Event::IntSunk), ..case(false, xc(false, &sink), frames) }
        }
        "ampm-initiator" => ampm("initiator"),
        "ampm-terminator" => ampm("terminator"),
        // A transit switch's probes (SR: out p1, then the monitor; 4 MEA
        // values), each followed by the next hop's feedback that frees its
        // copy: ns_per_packet is per frame, handled the share of probes.
        "gpint-transit" => {
            let g = format!("{collector}\n[gpint]\nhold_ms = 1");
            Case { acts: Acts::Counted(Event::GpintRx), ..case(false, xc(false, &int("[]", &g)), gpint_frames(true)) }
        }
        "gpint-transit-no-recovery" => {
            let g = format!("{collector}\n[gpint]\nrecovery = false");
            Case { acts: Acts::Counted(Event::GpintRx), ..case(false, xc(false, &int("[]", &g)), gpint_frames(false)) }
        }
        // Timed apart (`wheel_scan`): the per-loop scan with every slot busy.
        "gpint-wheel-scan-64-busy" => {
            let g = format!("{collector}\n[gpint]\nhold_ms = 60000");
            Case {
                acts: Acts::Counted(Event::SqrStored),
                ..case(false, xc(false, &int("[]", &g)), gpint_frames(false))
            }
        }
        other => unreachable!("case {other} is not in CASES"),
    }
}

/// 2048 GPINT probes of distinct requests into p0 (SR entries: out p1,
/// then the monitor; 4 port RX values), each followed by the feedback p1's
/// switch sends back (`feedbacks`).
fn gpint_frames(feedbacks: bool) -> Vec<Vec<u8>> {
    use dataplane::gpint::frame::{probe_frame, udp_frame, ProbeAddr};
    use dataplane::wire::gpint::{ProbeRepr, RequestType, SrEntry, TO_MONITOR};
    let a = ProbeAddr {
        eth_src: [2, 0, 0, 0, 0, 1],
        eth_dst: [2, 0, 0, 0, 0xbe, 0],
        ip_src: "10.77.1.2".parse().expect("address"),
        ip_dst: "10.77.1.1".parse().expect("address"),
        src_port: 17900,
        int_port: 17768,
        gpint_port: 17900,
        domain_id: 0x6701,
        bitmap: instr::NODE_ID | instr::L1_PORTS | instr::QUEUE | instr::INGRESS_TS,
        dscp: None,
    };
    let e = vec![
        SrEntry { next_port: 1, mea_first: 0, mea_count: 2 },
        SrEntry { next_port: TO_MONITOR, mea_first: 0, mea_count: 2 },
    ];
    let mut out = Vec::new();
    for req in 1..=2048u16 {
        let p = ProbeRepr::new(req, RequestType::PortRx, 0, 0, e.clone()).expect("probe");
        out.push(probe_frame(&a, &p).expect("probe frame"));
        if feedbacks {
            let mut fb = [0u8; 8];
            dataplane::wire::gpint::Header { start_index: 1, ..p.header.feedback() }.emit(&mut fb);
            out.push(udp_frame(&a, 17900, &fb).expect("feedback frame"));
        }
    }
    out
}

/// Ns a worker loop's SQR poll takes with 64 copies waiting far from
/// their deadline: the timer wheel's scan, which runs every loop, idle too.
fn wheel_scan(case: &Case) -> f64 {
    let mut w = Worker::new(case);
    for chunk in case.frames[..64].chunks(BURST) {
        w.burst(chunk);
    }
    assert_eq!(w.c.events[Event::SqrStored as usize], 64, "every slot busy");
    let mut best = f64::MAX;
    for _ in 0..21 {
        let t0 = Instant::now();
        for _ in 0..100_000 {
            let now = dataplane::dpdk::tsc();
            dataplane::pipeline::Stage::<VecBuf>::poll(&mut w.pipe.stages, w.t, black_box(now), &mut w.c);
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / 100_000.0);
    }
    assert_eq!(w.c.events[Event::SqrTimeouts as usize], 0, "nothing expired");
    best
}

/// The analytics as the config sizes them (flow cache, R_G and R_I with
/// their far ends dropped: a full ring is counted, as the worker does;
/// histograms), without aging (the trace is replayed faster than time).
fn analytics(a: &AnalyticsPlan) -> AnalyticsSetup {
    let (ring, _) = flow_ring(a.ring_size, a.max_hops);
    let (events, _) = event_ring(a.event_ring_size);
    AnalyticsSetup {
        rows: a.rows,
        ways: a.ways,
        max_hops: a.max_hops,
        idle_tsc: 0,
        active_tsc: 0,
        ring: Some(ring),
        events: Some(events),
        hist: a.hist.map(|h| HistWriter::new(Arc::new(WorkerHist::new(h)))),
        rule_counters: rule_counters(),
        per_hop_flow: a.per_hop_flow,
    }
}

/// A worker's pipeline for one case, and what its output side keeps.
struct Worker<'a> {
    t: &'a Tables,
    pipe: WorkerPipeline,
    me: Arc<WorkerShared>,
    c: CounterValues,
    drain: ReportConsumer,
    label_drain: ReportConsumer,
    out: VecOut<VecBuf>,
    load: PortLoad,
    slots: Vec<Option<VecBuf>>,
    /// Packets that left with a Tx verdict.
    forwarded: u64,
}

impl<'a> Worker<'a> {
    fn new(case: &'a Case) -> Worker<'a> {
        let slots = case.tables.ampm.as_ref().map_or(0, |a| a.capacity);
        let me = Arc::new(WorkerShared::new(slots));
        let (reports, drain) = report_ring(1024);
        let (label_reports, label_drain) = report_ring(1024);
        let stages = StageSetup {
            analytics: case.analytics.as_ref().map_or_else(|| AnalyticsSetup::interval_only(65_536), analytics),
            reports,
            clock: WallClock::new(0, 1_700_000_000_000_000_000, HZ),
            gpint: match case.tables.gpint {
                Some(_) => {
                    let (p, _) = rtrb::RingBuffer::new(4096);
                    dataplane::gpint::stage::GpintSetup { slots: 64, exports: Some(p), worker: 0, workers: Vec::new() }
                }
                None => dataplane::gpint::stage::GpintSetup::off(),
            },
            label: dataplane::worker::LabelSetup { reports: label_reports, ports: Default::default(), seed: 1 },
        };
        let flows = FlowSetup { capacity: 131_072, idle_timeout_s: 0, learn: case.learn, hash_seed: 1 };
        let macs = MacSetup { capacity: 4096, aging_s: 0, share: false };
        let mut out = VecOut::new(BURST, 0);
        out.occupancy = 7;
        Worker {
            t: &case.tables,
            pipe: worker::pipeline(me.clone(), flows, macs, stages, HZ),
            me,
            c: CounterValues::default(),
            drain,
            label_drain,
            out,
            load: PortLoad::default(),
            slots: (0..BURST).map(|_| Some(VecBuf::new(&[0; 256], 128))).collect(),
            forwarded: 0,
        }
    }

    /// One burst, run by the worker's pipeline.
    fn burst(&mut self, frames: &[Vec<u8>]) {
        let n = frames.len();
        for (b, f) in self.slots.iter_mut().zip(frames) {
            b.as_mut().expect("buffer").load(f, 128);
        }
        let (_, depth) = self.pipe.shortcut::<VecBuf, _>(self.t, &self.out, 0);
        let burst = Burst::received(0, RxTime { tsc: dataplane::dpdk::tsc(), wall_ns: 0 }, depth);
        self.pipe.run(self.t, &mut self.c, &mut self.out, &self.load, &burst, &mut self.slots[..n]);
        for (slot, (b, v)) in self.slots.iter_mut().zip(self.out.out.drain(..)) {
            self.forwarded += matches!(v, Verdict::Tx(_)) as u64;
            black_box(b.bytes().len());
            *slot = Some(b);
        }
    }

    /// Packets AM-PM counted, all flows and colours.
    fn measured(&self) -> u64 {
        self.me.ampm.iter().flat_map(|f| &f.color).map(|c| c.packets.load(Ordering::Relaxed)).sum()
    }

    /// Empties the report ring and the control queue (the control core's
    /// part); returns the time it took.
    fn drain_reports(&mut self, rec: &mut ReportRecord) -> Duration {
        let t0 = Instant::now();
        while self.drain.pop_into(rec) {}
        while self.label_drain.pop_into(rec) {}
        while self.me.events.pop().is_some() {}
        t0.elapsed()
    }
}

/// Ns per packet of the fastest of `passes` timed passes of at least
/// `min_packets` (what the machine does besides, a VM's steal time above
/// all, only ever adds), and the share of the timed packets the case's stage
/// handled (parse: those parsed).
fn measure(case: &Case, passes: usize, min_packets: usize) -> (f64, f64) {
    let mut w = Worker::new(case);
    let mut rec = ReportRecord::empty();
    let rounds = min_packets.div_ceil(case.frames.len()).max(1);
    // Warm-up: learns the flows and MACs, faults the tables in.
    if !case.parse_only {
        for chunk in case.frames.chunks(BURST) {
            w.burst(chunk);
            w.drain_reports(&mut rec);
        }
    }
    let acted = |w: &Worker| match case.acts {
        Acts::Forwarded => w.forwarded,
        Acts::Counted(e) => w.c.events[e as usize],
        Acts::AmpmMeasured => w.measured(),
    };
    let before = acted(&w);
    let (mut parsed, mut total) = (0u64, 0u64);
    let mut samples = Vec::with_capacity(passes);
    for _ in 0..passes {
        let mut packets = 0usize;
        let mut excluded = Duration::ZERO;
        let t0 = Instant::now();
        for _ in 0..rounds {
            for chunk in case.frames.chunks(BURST) {
                if case.parse_only {
                    for (b, f) in w.slots.iter_mut().flatten().zip(chunk) {
                        b.load(f, 128);
                        parsed += black_box(parse(b.bytes(), 0)).is_ok() as u64;
                    }
                } else {
                    w.burst(chunk);
                    excluded += w.drain_reports(&mut rec);
                }
                packets += chunk.len();
            }
        }
        let ns = (t0.elapsed() - excluded).as_nanos() as f64;
        samples.push(ns / packets as f64);
        total += packets as u64;
    }
    samples.sort_by(f64::total_cmp);
    let handled = if case.parse_only { parsed } else { acted(&w) - before };
    (samples[0], handled as f64 / total as f64)
}

fn main() {
    // `cargo bench` passes --bench; other arguments name cases to run.
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if let Ok(run) = std::env::var("STAGES_RUN") {
        let passes = std::env::var("STAGES_PASSES").ok().and_then(|p| p.parse().ok()).filter(|&p| p > 0).unwrap_or(21);
        for pair in run.split(',').filter(|p| !p.is_empty()) {
            let (config, trace) =
                pair.split_once(':').unwrap_or_else(|| panic!("STAGES_RUN: {pair}: need CONFIG:TRACE"));
            let name = std::path::Path::new(config).file_stem().map_or(config.into(), |s| s.to_string_lossy());
            let case = from_files(config, trace);
            let (ns, handled) = measure(&case, passes, 100_000);
            // Every packet `Worker::burst` ran, warm-up included: what
            // instruction counts of it divide by.
            let runs = (1 + passes * 100_000usize.div_ceil(case.frames.len())) * case.frames.len();
            println!(
                "stage={name} ns_per_packet={ns:.1} mpps={:.2} handled={handled:.2} burst_packets={runs}",
                1e3 / ns
            );
        }
        return;
    }
    for name in CASES {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let case = build(name);
        if name == "gpint-wheel-scan-64-busy" {
            println!("stage={name} ns_per_poll={:.1}", wheel_scan(&case));
            continue;
        }
        let (ns, handled) = measure(&case, 21, 100_000);
        println!("stage={name} ns_per_packet={ns:.1} mpps={:.2} handled={handled:.2}", 1e3 / ns);
        // Frames that miss the stage would time something else.
        assert!(handled > 0.0, "{name}: the stage handled none of the frames");
    }
}
