//! intcollector's capacity (not a test): Telemetry Reports decoded per
//! CPU-second of the collector process, for reports of 1 to 4 hops x 1, 2,
//! 4 and 8 metadata words a hop, one report a datagram and batched (as many
//! as fit 1400 bytes), with Kafka off and on (librdkafka's MockCluster in
//! this process, topics created). Batched datagrams are sent one by one
//! (`send=plain`) and, as the switch's exporter sends them, in UDP GSO
//! batches of equal-length datagrams (`send=gso`). The reports are built by
//! the switch's own code (INT source and transits, the exporter's encoder),
//! 64 flows.
//!
//! Run: `cargo bench -p intcollector --bench capacity [-- SECONDS]`
//! (default 2 s a case); `CAPACITY_CASE="hops=1 words=1 per_datagram=8
//! kafka=on"` (any part of a line) runs only the cases that match;
//! `CAPACITY_DEBUG=1` prints the collector's summary after each case. Prints one line per case:
//! `case=collector hops=H words=W per_datagram=N send=plain|gso kafka=off|on
//! reports_per_cpu_s=X reports=R cpu_s=C`. CPU time is the collector's own
//! (user + system, /proc/PID/stat) while a thread of this process sends;
//! a collector faster than the sender waits in the kernel, which costs no
//! CPU, so the figure is its decoding cost, not the sender's speed.

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use control::collector_tx::{CollectorPlan, CollectorTx, NoPorts, GSO_MAX_BYTES, GSO_MAX_SEGMENTS};

use control::int::export::{encode, encoded_len, ReportParts};
use dataplane::int::stage::{ReportRecord, REPORT_MAX};
use dataplane::int::{self, IntParams, Presence};
use dataplane::parse::parse;
use dataplane::pktbuf::{PacketBuf, VecBuf};
use dataplane::wire::int_md::{instr, HopMetadata};
use dataplane::wire::telemetry_report::{emit_group, FLAG_F};

const PRESENCE: Presence = Presence::UdpPort(17768);
/// The report metadata bits the switch's exporter sets by default.
const REP_MD: u16 = 0x6000;

/// Instruction bitmaps of 1, 2, 4 and 8 words a hop.
fn bitmap(words: usize) -> u16 {
    match words {
        1 => instr::NODE_ID,
        2 => instr::NODE_ID | instr::HOP_LATENCY,
        4 => instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE,
        _ => {
            instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE | instr::INGRESS_TS | instr::EGRESS_TS
        }
    }
}

/// The sink's report of flow `f`'s packet: `hops` hops (the source's and
/// transits'), the sink's own metadata in the report.
fn report(f: usize, hops: usize, words: usize) -> ReportRecord {
    let spec = control::traffic::TrafficSpec {
        frame_len: 120,
        flows: 64,
        ..control::traffic::TrafficSpec::udp("10.0.1.2".parse().unwrap(), "10.0.2.2".parse().unwrap(), 64)
    };
    let orig = control::traffic::frame(&spec, f);
    let mut b = VecBuf::new(&orig, 256);
    let md = |n: u32| HopMetadata {
        node_id: n,
        ingress_port: 1,
        egress_port: 2,
        hop_latency_ns: 100 * n + f as u32,
        queue_occupancy: f as u32,
        ..Default::default()
    };
    let p = IntParams {
        presence: PRESENCE,
        bitmap: bitmap(words),
        max_hops: 8,
        domain_id: 3,
        source_pushes: true,
        ds_flags: 0,
    };
    let m = parse(&orig, 0).unwrap();
    int::source(&mut b, &m, &p, &md(1), 1500).unwrap();
    for n in 2..=hops as u32 {
        let m = parse(b.bytes(), 0).unwrap();
        int::transit(&mut b, &m, PRESENCE, &md(n), 1500).unwrap();
    }
    let mut rec =
        ReportRecord { flags: FLAG_F, drop_reason: 0, domain_id: 3, md: md(9), len: 0, data: [0; REPORT_MAX] };
    let n = b.bytes().len();
    rec.data[..n].copy_from_slice(b.bytes());
    rec.len = n as u16;
    rec
}

/// Datagrams of 64 flows' reports, 16 rounds of them (runs long enough for
/// the switch's GSO batches of up to 44 datagrams), `per` a datagram (0: as
/// many as fit 1400 bytes); returns them and the reports they hold.
fn datagrams(hops: usize, words: usize, per: usize) -> (Vec<Vec<u8>>, usize) {
    let one: Vec<ReportRecord> = (0..64).map(|f| report(f, hops, words)).collect();
    let recs: Vec<&ReportRecord> = (0..16).flat_map(|_| one.iter()).collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut seq = 0u32;
    let mut held = 0;
    while i < recs.len() {
        let mut pkt = vec![0u8; 8];
        emit_group(&mut pkt, 1, seq, 9);
        seq += 1;
        let mut n = 0;
        while i < recs.len() && (per == 0 || n < per) {
            let parts = ReportParts::of(recs[i]);
            let len = encoded_len(&parts, REP_MD);
            if per == 0 && n > 0 && pkt.len() + len > 1400 {
                break;
            }
            let at = pkt.len();
            pkt.resize(at + len, 0);
            encode(&parts, REP_MD, &mut pkt[at..]);
            i += 1;
            n += 1;
        }
        held += n;
        out.push(pkt);
    }
    (out, held)
}

/// User + system CPU seconds of process `pid` so far.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name's closing parenthesis: state (field 3), ...,
    // utime (14) and stime (15).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let ticks = field(14) + field(15);
    ticks as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The datagrams as the switch's exporter sends them: runs of equal length
/// joined into one GSO send each (up to its segment and byte limits), with
/// the segment size.
fn gso_batches(dgrams: &[Vec<u8>]) -> Vec<(Vec<u8>, usize)> {
    let mut out: Vec<(Vec<u8>, usize)> = Vec::new();
    let mut n = 0;
    for d in dgrams {
        match out.last_mut() {
            Some((b, seg)) if *seg == d.len() && n < GSO_MAX_SEGMENTS && b.len() + d.len() <= GSO_MAX_BYTES => {
                b.extend_from_slice(d);
                n += 1;
            }
            _ => {
                out.push((d.clone(), d.len()));
                n = 1;
            }
        }
    }
    out
}

/// One case: the collector decodes what a thread sends for `secs`.
fn run(hops: usize, words: usize, per: usize, gso: bool, kafka: Option<&str>, secs: f64) -> (f64, u64, f64) {
    let (dgrams, _) = datagrams(hops, words, per);
    let batches = gso_batches(&dgrams);
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    let listen = probe.local_addr().unwrap();
    drop(probe);
    let mut args = vec!["--listen".to_string(), listen.to_string(), "--quiet".into(), "--json".into()];
    if let Some(b) = kafka {
        args.extend(["--kafka-brokers".into(), b.into(), "--kafka-topic-prefix".into(), "bench-".into()]);
    }
    let child = Command::new(env!("CARGO_BIN_EXE_intcollector"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("intcollector");
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id();
    let mut tx = CollectorTx::open(&CollectorPlan { addr: listen, bind: None, port: None, mac: None }, &NoPorts, false)
        .expect("a socket to the collector");
    let cpu0 = cpu_s(pid);
    let t0 = Instant::now();
    'send: loop {
        if gso {
            for (b, seg) in &batches {
                if tx.send_segments(b, *seg).is_err() {
                    panic!("this kernel refuses UDP GSO: no send=gso case");
                }
            }
        } else {
            for d in &dgrams {
                let _ = tx.send(d, &mut NoPorts);
            }
        }
        if t0.elapsed().as_secs_f64() >= secs {
            break 'send;
        }
    }
    // What is still in the socket is decoded before the count.
    std::thread::sleep(Duration::from_millis(200));
    let cpu = cpu_s(pid) - cpu0;
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if std::env::var("CAPACITY_DEBUG").is_ok() {
        eprintln!("{}", text.lines().last().unwrap_or(""));
    }
    let reports = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["summary"]["reports"].as_u64())
        .unwrap_or(0);
    (if cpu > 0.0 { reports as f64 / cpu } else { 0.0 }, reports, cpu)
}

fn main() {
    let secs: f64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(2.0);
    // CAPACITY_CASE: only the cases whose line contains it.
    let only = std::env::var("CAPACITY_CASE").ok();
    let mock = rdkafka::mocking::MockCluster::new(1).expect("MockCluster");
    for t in ["reports", "events", "flows", "histograms"] {
        mock.create_topic(&format!("bench-{t}"), 1, 1).expect("topic");
    }
    let brokers = mock.bootstrap_servers();
    for kafka in [None, Some(brokers.as_str())] {
        // One a datagram; batched and sent one by one; batched in GSO sends.
        for (per, gso) in [(1usize, false), (0, false), (0, true)] {
            for hops in 1..=4 {
                for words in [1, 2, 4, 8] {
                    let (d, held) = datagrams(hops, words, per);
                    let n = held.div_ceil(d.len());
                    let case = format!(
                        "hops={hops} words={words} per_datagram={n} send={} kafka={}",
                        if gso { "gso" } else { "plain" },
                        if kafka.is_some() { "on" } else { "off" }
                    );
                    if only.as_ref().is_some_and(|o| !case.contains(o.as_str())) {
                        continue;
                    }
                    let (rate, reports, cpu) = run(hops, words, per, gso, kafka, secs);
                    println!("case=collector {case} reports_per_cpu_s={rate:.0} reports={reports} cpu_s={cpu:.2}");
                }
            }
        }
    }
}
