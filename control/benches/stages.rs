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
//! PMDs' noise.
//!
//! Criterion times each case (an iteration is one pass over the case's
//! frames): its estimate with a 95 % confidence interval, its comparison
//! with the previous run (or a named baseline: `STAGES_SAVE=NAME`, then
//! `STAGES_BASELINE=NAME`) and its HTML report in
//! `target/criterion/report/`. `STAGES_SECONDS` (default 3) and
//! `STAGES_SAMPLES` (default 30) size the measurement. After criterion's
//! own lines, one per case:
//! `stage=<name> ns_per_packet=<x.x> ci95=<lo>..<hi> mpps=<x.xx> handled=<share>`,
//! the share of the timed packets the case's stage acted on (1.00: all).
//! `STAGES_PASSES=N` with `STAGES_RUN` times nothing: N passes after the
//! warm-up and `burst_packets=<n>`, the packets run, for
//! `scripts/stage_instructions.sh` (instructions per packet under
//! callgrind: exact where even criterion's intervals are wide).
//!
//! Each packet is copied into its buffer first (what net_pcap's RX does) and
//! handled by the worker's own pipeline (`worker::pipeline`): bursts of 32
//! with one receive time each, a parse-and-prefetch pass for large tables,
//! forwarding, then the AM-PM and INT stages, the INT hop's egress time from
//! the burst's clock (one TSC read per 8 INT packets).
//! Sink reports go into a real report ring; the time spent draining it
//! (the control core's work) is not counted.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};

mod common;

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
use dataplane::pipeline::{Burst, PortLoad, RxTime, Shortcut, VecOut};
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
        // The path the worker takes: a bridge that no stage reads runs on
        // its shortcut.
        let (shortcut, depth) = self.pipe.shortcut::<VecBuf, _>(self.t, &self.out, 0);
        let burst = Burst::received(0, RxTime { tsc: dataplane::dpdk::tsc(), wall_ns: 0 }, depth);
        if shortcut == Shortcut::L2 {
            self.pipe.run_l2(self.t, &mut self.c, &mut self.out, 0, burst.now, &mut self.slots[..n]);
        } else {
            self.pipe.run(self.t, &mut self.c, &mut self.out, &self.load, &burst, &mut self.slots[..n]);
        }
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

/// What shows that the case's stage handled a packet, counted so far.
fn acted(case: &Case, w: &Worker) -> u64 {
    match case.acts {
        Acts::Forwarded => w.forwarded,
        Acts::Counted(e) => w.c.events[e as usize],
        Acts::AmpmMeasured => w.measured(),
    }
}

/// A worker that has run the case's frames once: it has learnt the flows
/// and MACs and faulted the tables in.
fn warmed(case: &Case) -> Worker<'_> {
    let mut w = Worker::new(case);
    if !case.parse_only {
        let mut rec = ReportRecord::empty();
        for chunk in case.frames.chunks(BURST) {
            w.burst(chunk);
            w.drain_reports(&mut rec);
        }
    }
    w
}

/// One pass over the case's frames; returns the time it took less the
/// control core's part (draining the reports), and the frames parse
/// accepted (parse only).
fn pass(case: &Case, w: &mut Worker, rec: &mut ReportRecord) -> (Duration, u64) {
    let mut excluded = Duration::ZERO;
    let mut parsed = 0;
    let t0 = Instant::now();
    for chunk in case.frames.chunks(BURST) {
        if case.parse_only {
            for (b, f) in w.slots.iter_mut().flatten().zip(chunk) {
                b.load(f, 128);
                parsed += black_box(parse(b.bytes(), 0)).is_ok() as u64;
            }
        } else {
            w.burst(chunk);
            excluded += w.drain_reports(rec);
        }
    }
    (t0.elapsed() - excluded, parsed)
}

/// Times one case under criterion (an iteration is a pass over its
/// frames, so throughput is in packets) and returns the share of the
/// packets it ran that the case's stage handled (parse: those parsed).
fn bench_case(c: &mut Criterion, name: &str, case: &Case) -> f64 {
    let mut w = warmed(case);
    let mut rec = ReportRecord::empty();
    let before = acted(case, &w);
    let (mut parsed, mut total) = (0u64, 0u64);
    let mut group = c.benchmark_group("stages");
    group.throughput(Throughput::Elements(case.frames.len() as u64));
    if case.frames.len() >= 1 << 18 {
        // A pass takes most of a second: ten of them, flat.
        group.sample_size(10).sampling_mode(SamplingMode::Flat);
    }
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let (t, p) = pass(case, &mut w, &mut rec);
                spent += t;
                parsed += p;
                total += case.frames.len() as u64;
            }
            spent
        })
    });
    group.finish();
    let handled = if case.parse_only { parsed } else { acted(case, &w) - before };
    handled as f64 / total.max(1) as f64
}

/// Ns a worker loop's SQR poll takes with 64 copies waiting far from
/// their deadline: the timer wheel's scan, which runs every loop, idle too.
fn bench_wheel_scan(c: &mut Criterion, name: &str, case: &Case) {
    let mut w = Worker::new(case);
    for chunk in case.frames[..64].chunks(BURST) {
        w.burst(chunk);
    }
    assert_eq!(w.c.events[Event::SqrStored as usize], 64, "every slot busy");
    c.benchmark_group("stages").bench_function(name, |b| {
        b.iter(|| {
            let now = dataplane::dpdk::tsc();
            dataplane::pipeline::Stage::<VecBuf>::poll(&mut w.pipe.stages, w.t, black_box(now), &mut w.c);
        })
    });
    assert_eq!(w.c.events[Event::SqrTimeouts as usize], 0, "nothing expired");
}

fn env_number(key: &str) -> Option<u64> {
    std::env::var(key).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{key}={v}: need a whole number")))
}

/// `STAGES_PASSES=N`: N untimed passes of each `STAGES_RUN` pair after the
/// warm-up, for `scripts/stage_instructions.sh` (callgrind counts them).
fn count_passes(pairs: &[(String, Case)], passes: u64) {
    for (name, case) in pairs {
        let mut w = warmed(case);
        let mut rec = ReportRecord::empty();
        for _ in 0..passes {
            pass(case, &mut w, &mut rec);
        }
        // Every packet `Worker::burst` ran, warm-up included: what
        // instruction counts of it divide by.
        let runs = (1 + passes as usize) * case.frames.len();
        println!("stage={name} burst_packets={runs}");
    }
}

fn main() {
    // `cargo bench` passes --bench; other arguments name cases to run.
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let chosen = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let run: Option<Vec<(String, Case)>> = std::env::var("STAGES_RUN").ok().map(|run| {
        run.split(',')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (config, trace) =
                    pair.split_once(':').unwrap_or_else(|| panic!("STAGES_RUN: {pair}: need CONFIG:TRACE"));
                let name = Path::new(config).file_stem().map_or(config.into(), |s| s.to_string_lossy().into_owned());
                (name, from_files(config, trace))
            })
            .collect()
    });
    if let (Some(pairs), Some(passes)) = (&run, env_number("STAGES_PASSES")) {
        count_passes(pairs, passes);
        return;
    }
    let dir = common::criterion_home();
    let mut c = Criterion::default()
        .output_directory(&dir)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(env_number("STAGES_SECONDS").unwrap_or(3).max(1)))
        .sample_size(env_number("STAGES_SAMPLES").unwrap_or(30).max(10) as usize);
    if let Ok(b) = std::env::var("STAGES_SAVE") {
        c = c.save_baseline(b);
    }
    if let Ok(b) = std::env::var("STAGES_BASELINE") {
        c = c.retain_baseline(b, true);
    }
    let cases: Vec<(String, Case)> = match run {
        Some(pairs) => pairs,
        None => CASES.iter().filter(|n| chosen(n)).map(|&n| (n.to_string(), build(n))).collect(),
    };
    for (name, case) in &cases {
        if name == "gpint-wheel-scan-64-busy" {
            bench_wheel_scan(&mut c, name, case);
            if let Some((ns, lo, hi)) = common::estimate("stages", name) {
                println!("stage={name} ns_per_poll={ns:.1} ci95={lo:.1}..{hi:.1}");
            }
            continue;
        }
        let handled = bench_case(&mut c, name, case);
        let n = case.frames.len() as f64;
        match common::estimate("stages", name) {
            Some((ns, lo, hi)) => println!(
                "stage={name} ns_per_packet={:.1} ci95={:.1}..{:.1} mpps={:.2} handled={handled:.2}",
                ns / n,
                lo / n,
                hi / n,
                1e3 * n / ns
            ),
            None => println!("stage={name} handled={handled:.2} (no estimate in {})", dir.display()),
        }
        // Frames that miss the stage would time something else.
        assert!(handled > 0.0, "{name}: the stage handled none of the frames");
    }
    c.final_summary();
}
