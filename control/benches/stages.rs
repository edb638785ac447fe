//! The data path's per-packet cost without DPDK: the stages a worker runs
//! on each packet (parse, flow table, forwarding, AM-PM, INT), on the
//! traffic and tables of `scripts/bench.sh`'s cases, one core, no ports.
//! `scripts/bench.sh` measures the switch as a whole against testpmd; this
//! says what the stages themselves cost, with far less noise than a run
//! through the PMDs (no mbufs, no RX/TX bursts), so a change to a stage can
//! be compared here first.
//!
//! Run: `cargo bench -p control --bench stages [-- CASE...]`
//! Prints one line per case:
//! `stage=<name> ns_per_packet=<x.x> mpps=<x.xx> handled=<share>`, the
//! fastest of several timed passes over the case's frames, and the share of
//! them the case's stage acted on (1.00: all of them).
//!
//! Each packet is copied into its buffer first (what net_pcap's RX does) and
//! handled as the worker's loop handles it: bursts of 32 with one receive
//! time each, a parse-and-prefetch pass for large flow tables, forwarding,
//! then the AM-PM and INT stages, the INT hop's egress time from the burst's
//! clock (one TSC read per 8 INT packets).
//! Sink reports go into a real report ring; the time spent draining it
//! (the control core's work) is not counted.

use std::hint::black_box;
use std::time::{Duration, Instant};

use control::config::Config;
use control::traffic::{frame, int_frame, IntTraffic, TrafficSpec};
use dataplane::ampm::{self, AmpmCtx, BurstTime, FlowCounters, SlotMemo};
use dataplane::counters::{CounterValues, Event};
use dataplane::flow_table::FlowTable;
use dataplane::forward::{self, ControlEvent, ControlSink, Ctx, Verdict};
use dataplane::int_stage::{self, BurstClock, Hop, HopSource, IntCtx, ReportRecord, WallClock};
use dataplane::mac_table::MacTable;
use dataplane::parse::{parse, PacketMeta};
use dataplane::pktbuf::{PacketBuf, VecBuf};
use dataplane::report_filter::ReportFilter;
use dataplane::report_ring::{report_ring, ReportConsumer, ReportProducer};
use dataplane::tables::Tables;
use dataplane::wire::int_md::instr;
use dataplane::worker::Prefetch;
use dataplane::DropReason;

const BURST: usize = 32;
const DUT_MAC: &str = "02:00:00:00:be:00";
/// A nominal TSC rate for the INT clock and report intervals.
const HZ: u64 = 2_500_000_000;

/// Control events the bench does not act on (the worker's queue, drained).
struct Discard;

impl ControlSink for Discard {
    fn send(&mut self, _: ControlEvent) -> bool {
        true
    }
}

/// The INT hop as the worker measures it: the egress time comes from the
/// burst's clock when the stage acts on the packet.
struct BenchHop<'a>(&'a BurstClock);

impl HopSource for BenchHop<'_> {
    fn ports(&self) -> (u16, u16) {
        (0, 1)
    }
    fn rx_tsc(&self) -> u64 {
        self.0.rx_tsc
    }
    fn measure(&self) -> Hop {
        Hop {
            in_port: 0,
            out_port: 1,
            rx_tsc: self.0.rx_tsc,
            tx_tsc: self.0.egress_tsc(dataplane::dpdk::tsc),
            queue_id: 0,
            queue_occupancy: 7,
            tx_util: None,
            buffer_occupancy: 1000,
        }
    }
}

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

fn tables(toml: &str) -> Tables {
    let plan = Config::from_toml(toml).and_then(|c| c.validate()).unwrap_or_else(|e| panic!("bench config: {e:?}"));
    let macs: Vec<[u8; 6]> = plan.ports.iter().map(|p| p.mac.unwrap_or([2, 0, 0, 0, 0, 1])).collect();
    Tables::build(&plan.table_spec(&macs, HZ), 1).expect("bench tables")
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
const CASES: [&str; 9] = [
    "parse",
    "xconnect-flow-table",
    "l3-10k-routes-100k-flows",
    "int-source",
    "int-transit-5-instructions",
    "int-sink-5x4",
    "int-sink-5x4-report-every-packet",
    "ampm-initiator",
    "ampm-terminator",
];

fn build(name: &'static str) -> Case {
    let l2 = || frames(&traffic(4096, 64, "10.0.0.1", "10.1.0.1", [2, 0, 0, 0, 0, 2], false));
    let case = |learn, toml: String, frames| Case {
        tables: tables(&toml),
        frames,
        learn,
        parse_only: false,
        acts: Acts::Forwarded,
    };
    let xc = |learn, tail: &str| config("xconnect", learn, XC[0], XC[1], tail);
    let int = |edge: &str, more: &str| format!("[int]\nnode_id = 7\nedge_ports = {edge}\n{more}\n");
    let collector = "[[int.collector]]\naddress = \"127.0.0.1:32766\"";
    let five_hops = || {
        let four = instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE;
        let t = traffic(4096, 64, "10.0.0.1", "10.1.0.1", [2, 0, 0, 0, 0, 2], false);
        int_frames(&t, &IntTraffic { udp_port: 17768, bitmap: four, hops: 5, rhc: 3 })
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
    match name {
        "parse" => Case { parse_only: true, ..case(false, xc(false, ""), l2()) },
        "xconnect-flow-table" => case(true, xc(true, ""), l2()),
        "l3-10k-routes-100k-flows" => {
            let l3 = traffic(100_000, 100_000, "10.0.1.10", "20.0.0.1", [2, 0, 0, 0, 0xbe, 0], true);
            let mut routes =
                String::from("[[neighbour]]\nip = \"10.0.2.254\"\nmac = \"02:00:00:00:02:fe\"\nport = \"p1\"\n");
            for i in 0..10_000 {
                routes += &format!(
                    "[[route]]\nprefix = \"20.{}.{}.0/24\"\nport = \"p1\"\nvia = \"10.0.2.254\"\n",
                    i / 256,
                    i % 256
                );
            }
            case(
                true,
                config("router", true, "ipv4 = [\"10.0.1.1/24\"]", "ipv4 = [\"10.0.2.1/24\"]", &routes),
                frames(&l3),
            )
        }
        "int-source" => {
            let source = "[[int.watch]]\nname = \"all\"\nrole = \"source\"\nproto = \"udp\"\n\
                          instructions = [\"node_id\", \"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\"]";
            Case { acts: Acts::Counted(Event::IntSourced), ..case(false, xc(false, &int("[\"p0\"]", source)), l2()) }
        }
        "int-transit-5-instructions" => {
            let t = traffic(4096, 64, "10.0.0.1", "10.1.0.1", [2, 0, 0, 0, 0, 2], false);
            let one_hop = IntTraffic { udp_port: 17768, bitmap: FIVE, hops: 1, rhc: 4 };
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
        "ampm-initiator" => ampm("initiator"),
        "ampm-terminator" => ampm("terminator"),
        other => unreachable!("case {other} is not in CASES"),
    }
}

/// A worker's state for one case.
struct Worker<'a> {
    t: &'a Tables,
    flows: FlowTable,
    filter: ReportFilter,
    macs: MacTable,
    c: CounterValues,
    clock: WallClock,
    reports: ReportProducer,
    drain: ReportConsumer,
    regs: Vec<u8>,
    ampm: Vec<FlowCounters>,
    bufs: Vec<VecBuf>,
    metas: Vec<Result<PacketMeta, DropReason>>,
    learn: bool,
    /// Packets that left with a Tx verdict.
    forwarded: u64,
    /// Packets AM-PM measured.
    measured: u64,
}

impl<'a> Worker<'a> {
    fn new(case: &'a Case) -> Worker<'a> {
        let slots = case.tables.ampm.as_ref().map_or(0, |a| a.capacity);
        let (reports, drain) = report_ring(1024);
        Worker {
            t: &case.tables,
            flows: FlowTable::new(131_072, 0),
            filter: ReportFilter::new(65_536),
            macs: MacTable::new(4096, 0),
            c: CounterValues::default(),
            clock: WallClock::new(0, 1_700_000_000_000_000_000, HZ),
            reports,
            drain,
            regs: vec![0; slots],
            ampm: (0..slots).map(|_| FlowCounters::default()).collect(),
            bufs: (0..BURST).map(|_| VecBuf::new(&[0; 256], 128)).collect(),
            metas: vec![Err(DropReason::EthTruncated); BURST],
            learn: case.learn,
            forwarded: 0,
            measured: 0,
        }
    }

    /// One burst, as the worker's loop handles it.
    fn burst(&mut self, frames: &[Vec<u8>]) {
        let t = self.t;
        let n = frames.len();
        let rx_tsc = dataplane::dpdk::tsc();
        let ampm_now =
            t.ampm.as_ref().filter(|a| !a.flows.is_empty()).map(|a| BurstTime::new(&a.timing, realtime_ns()));
        let mut memo = SlotMemo::default();
        for (b, f) in self.bufs.iter_mut().zip(frames) {
            b.load(f, 128);
        }
        let prefetch = Prefetch::for_burst(&self.flows, t);
        let two_pass = prefetch.any();
        if two_pass {
            for i in 0..n {
                self.metas[i] = parse(self.bufs[i].bytes(), 0);
                if let Ok(meta) = &self.metas[i] {
                    prefetch.packet(&self.flows, t, self.bufs[i].bytes(), meta);
                }
            }
        }
        let mut sink = Discard;
        let times = BurstClock::new(rx_tsc);
        for i in 0..n {
            let b = &mut self.bufs[i];
            let mut meta = if two_pass { self.metas[i] } else { parse(b.bytes(), 0) };
            let mut ctx = Ctx::new(t, &mut self.flows, &mut self.macs, &mut self.c, &mut sink, rx_tsc, self.learn);
            let mut v = forward::process_parsed(&mut ctx, b.bytes_mut(), 0, &meta);
            if let (Some(a), Some(now), Ok(meta), Verdict::Tx(_) | Verdict::Flood) =
                (t.ampm.as_ref(), ampm_now.as_ref(), &mut meta, v)
            {
                let mut actx = AmpmCtx {
                    spec: a,
                    regs: &mut self.regs,
                    counters: &self.ampm,
                    c: &mut self.c,
                    now,
                    memo: &mut memo,
                };
                self.measured += (ampm::apply(&mut actx, b, meta) == ampm::Outcome::Measured) as u64;
            }
            if let (Some(spec), Ok(meta), Verdict::Tx(_)) = (t.int.as_ref(), &meta, v) {
                // As the worker: only packets the stage may act on go in.
                if int_stage::may_act(spec, b.bytes(), meta, 0) {
                    let mut ictx = IntCtx {
                        spec,
                        clock: &self.clock,
                        filter: &mut self.filter,
                        counters: &mut self.c,
                        reports: &mut self.reports,
                    };
                    if let Err(r) = int_stage::apply(&mut ictx, b, meta, &BenchHop(&times)) {
                        v = Verdict::Drop(r);
                    }
                }
            }
            self.forwarded += matches!(v, Verdict::Tx(_)) as u64;
            black_box(b.bytes().len());
        }
    }

    /// Empties the report ring (the control core's part); returns the time it took.
    fn drain_reports(&mut self, rec: &mut ReportRecord) -> Duration {
        let t0 = Instant::now();
        while self.drain.pop_into(rec) {}
        t0.elapsed()
    }
}

fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
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
        Acts::AmpmMeasured => w.measured,
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
                    for (b, f) in w.bufs.iter_mut().zip(chunk) {
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
    for name in CASES {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let case = build(name);
        let (ns, handled) = measure(&case, 21, 100_000);
        println!("stage={name} ns_per_packet={ns:.1} mpps={:.2} handled={handled:.2}", 1e3 / ns);
        // Frames that miss the stage would time something else.
        assert!(handled > 0.0, "{name}: the stage handled none of the frames");
    }
}
