//! INT sink analytics on one switch (net_pcap in and out): every packet of
//! many flows, each with its own per-packet hop values, lands in a flow
//! cache too small for them, so entries leave by LRU and, at `intctl int
//! flows flush`, the rest. The int_flow records intcollector receives,
//! merged per flow, equal the values the frames carried, exactly; the
//! switch's counters account for every record.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use control::traffic::{int_frame, IntTraffic, TrafficSpec};
use intswitch_tests::{control_section, intctl_bin, read_pcap, write_pcap, KillOnDrop, Scratch, SwitchProcess};
use serde_json::Value;

const FLOWS: usize = 24;
const SENT: usize = 24 * 20;
const HOPS: usize = 3;
/// Where the stack starts: Ethernet 14, IPv4 20, UDP 8, shim 4, INT-MD header 12.
const STACK: usize = 58;
/// node_id, l1_ports, hop_latency, queue: 16 bytes a hop.
const HOP_LEN: usize = 16;

fn intctl(sock: &std::path::Path, args: &[&str]) -> Value {
    let out = Command::new(intctl_bin()).arg("--socket").arg(sock).arg("--json").args(args).output().unwrap();
    assert!(out.status.success(), "intctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// intcollector on `listen`, printing JSON lines until told to stop,
/// and a thread reading them as they come (a full pipe would stall it).
fn start_collector(listen: &str) -> (std::process::Child, std::thread::JoinHandle<String>) {
    start_collector_with(listen, &[])
}

/// The same with more arguments.
fn start_collector_with(listen: &str, more: &[&str]) -> (std::process::Child, std::thread::JoinHandle<String>) {
    let c = spawn_collector(&[&["--listen", listen, "--json", "--duration", "60"], more].concat(), false);
    std::thread::sleep(Duration::from_millis(300));
    c
}

/// intcollector with `args`, its stdout read by a thread; its stderr piped
/// to the caller or thrown away.
fn spawn_collector(args: &[&str], stderr: bool) -> (std::process::Child, std::thread::JoinHandle<String>) {
    let mut child = Command::new(intswitch_tests::workspace_bin("intcollector"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(if stderr { std::process::Stdio::piped() } else { std::process::Stdio::null() })
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    (child, reader)
}

/// Stops intcollector (SIGTERM: it prints its summary) and returns every
/// JSON line it printed (reports, records, summaries).
fn collected_lines((mut c, reader): (std::process::Child, std::thread::JoinHandle<String>)) -> Vec<Value> {
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill").args(["-TERM", &c.id().to_string()]).status().unwrap();
    c.wait().unwrap();
    let text = reader.join().unwrap();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The analytics records intcollector printed (int_flow, int_event,
/// int_hist) and its analytics summary.
fn collected_all(c: (std::process::Child, std::thread::JoinHandle<String>)) -> (Vec<Value>, Value) {
    let lines = collected_lines(c);
    let summary = lines.iter().find_map(|v| v.get("int_flow_summary").cloned()).unwrap_or(Value::Null);
    (lines.into_iter().filter(|v| v["type"].as_str().is_some_and(|t| t.starts_with("int_"))).collect(), summary)
}

/// The int_flow records only, and the summary.
fn collected(c: (std::process::Child, std::thread::JoinHandle<String>)) -> (Vec<Value>, Value) {
    let (records, summary) = collected_all(c);
    (records.into_iter().filter(|v| v["type"] == "int_flow").collect(), summary)
}

/// Hop `p`'s (path order) latency and queue in frame `i`; None: all ones.
fn values(i: usize, p: usize) -> (u32, Option<u32>) {
    let lat = 1_000 + ((i * 37 + p * 101) % 5_000) as u32;
    let q = (i % 50 != 0 || p != 1).then_some(((i * 13 + p) % 300) as u32);
    (lat, q)
}

/// Per flow (src address, src port): packets, per hop (latency sum/count,
/// queue sum/count), e2e latency sum.
#[derive(Debug, Default, PartialEq, Eq)]
struct Truth {
    packets: u64,
    hops: [[u64; 4]; HOPS],
    e2e: u64,
}

/// A flow by its source address and port (the rest is common).
type FlowId = (String, u64);

fn frames() -> (Vec<Vec<u8>>, BTreeMap<FlowId, Truth>) {
    let spec = TrafficSpec {
        flows: FLOWS,
        frame_len: 100,
        ..TrafficSpec::udp("10.80.0.1".parse().unwrap(), "10.80.1.1".parse().unwrap(), SENT)
    };
    let t = IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap: 0xf000, hops: HOPS as u8, rhc: 2 };
    let mut truth: BTreeMap<FlowId, Truth> = BTreeMap::new();
    let frames = (0..SENT)
        .map(|i| {
            let mut f = int_frame(&spec, i, &t).unwrap();
            f[40..42].fill(0); // UDP checksum off: the values below change the stack
            let src = std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]).to_string();
            let sport = u16::from_be_bytes([f[34], f[35]]) as u64;
            let e = truth.entry((src, sport)).or_default();
            e.packets += 1;
            for p in 0..HOPS {
                // The stack holds the newest hop first.
                let at = STACK + (HOPS - 1 - p) * HOP_LEN;
                let (lat, q) = values(i, p);
                f[at + 8..at + 12].copy_from_slice(&lat.to_be_bytes());
                f[at + 13..at + 16].copy_from_slice(&q.unwrap_or(0xff_ffff).to_be_bytes()[1..]);
                e.hops[p][0] += lat as u64;
                e.hops[p][1] += 1;
                if let Some(q) = q {
                    e.hops[p][2] += q as u64;
                    e.hops[p][3] += 1;
                }
                e.e2e += lat as u64;
            }
            f
        })
        .collect();
    (frames, truth)
}

/// A sink on net_pcap (p0 replays `frames`, p1 writes out.pcap, the INT
/// edge) with the `[int]` body given, its collector, and every frame sunk.
struct Sink {
    d: Scratch,
    s: SwitchProcess,
    sock: std::path::PathBuf,
    collector: (std::process::Child, std::thread::JoinHandle<String>),
}

/// A sink's config: p0 replays `in.pcap` of `d`, p1 writes `out.pcap`
/// and is the INT edge, `int` the `[int]` body, reports and records to
/// `listen`.
fn sink_config(name: &str, d: &Scratch, listen: &str, int: &str) -> String {
    let id = std::process::id() % 100_000;
    let p = |f: &str| d.path(f).display().to_string();
    format!(
        "name = \"{name}\"\nmode = \"xconnect\"\n[eal]\nlcores = \"0-1\"\nfile_prefix = \"{name}-{id}\"\n\
[dataplane]\nidle = true\nmbufs = 4095\n[flow_table]\nlearn = false\n{}\n[[port]]\nname = \"p0\"\n\
device = \"net_pcap0,rx_pcap={}\"\npeer = \"p1\"\n[[port]]\nname = \"p1\"\ndevice = \"net_pcap1,tx_pcap={}\"\n\
peer = \"p0\"\n[int]\n{int}\n[[int.collector]]\naddress = \"{listen}\"\n",
        control_section(d),
        p("in.pcap"),
        p("out.pcap"),
    )
}

fn start_sink(name: &str, port: u32, frames: &[Vec<u8>], int: &str) -> Sink {
    let id = std::process::id() % 100_000;
    let d = Scratch::new(name);
    write_pcap(&d.path("in.pcap"), frames);
    let listen = format!("127.0.0.1:{}", 20_000 + (id + port) % 30_000);
    let collector = start_collector(&listen);
    std::fs::write(d.path("c.toml"), sink_config(name, &d, &listen, int)).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), None);
    let sock = d.path("sw.sock");
    wait_for("every frame sunk", || {
        intctl(&sock, &["show", "int"])["counters"]["int_sunk"].as_u64() == Some(frames.len() as u64)
    });
    Sink { d, s, sock, collector }
}

#[test]
fn flow_records_merge_to_exactly_what_the_packets_carried() {
    let (frames, truth) = frames();
    assert_eq!(truth.len(), FLOWS);
    // 4 x 4 = 16 entries for 24 flows: LRU exports all along.
    let Sink { d, s, sock, collector } = start_sink(
        "intana",
        11,
        &frames,
        "node_id = 9\nedge_ports = [\"p1\"]\nreport_flow_interval_ms = 600000\n\
[int.analytics]\ncache_rows = 4\ncache_ways = 4\ncache_max_hops = 2\nidle_timeout = 0\nflow_ring_size = 4096",
    );
    // The last frame's flow is in the cache, with its 3 hops, 2 tracked.
    let last = &frames[SENT - 1];
    let src = std::net::Ipv4Addr::new(last[26], last[27], last[28], last[29]).to_string();
    let sport = u16::from_be_bytes([last[34], last[35]]).to_string();
    let shown = intctl(&sock, &["int", "flow", "show", &src, "10.80.1.1", "udp", &sport, "5001"]);
    let e = &shown["entries"][0];
    assert_eq!((e["hops"].as_u64(), e["hop"].as_array().map(Vec::len)), (Some(3), Some(2)), "{shown}");
    assert!(e["packets"].as_u64() >= Some(1), "{shown}");
    let flushed = intctl(&sock, &["int", "flows", "flush"])["flushed"].as_u64().unwrap();
    assert!((1..=16).contains(&flushed), "{flushed}");
    // The worker publishes its counters on its next polls.
    let mut a = Value::Null;
    wait_for("the flush counted", || {
        a = intctl(&sock, &["show", "int", "analytics"]);
        a["counters"]["int_flow_flushed"].as_u64() == Some(flushed)
    });
    let ev = |k: &str| a["counters"][k].as_u64().unwrap();
    assert_eq!((a["entries"].as_u64(), ev("int_flow_flushed")), (Some(0), flushed), "{a}");
    assert!(ev("int_flow_lru") > 0, "{a}");
    assert_eq!(ev("int_flow_inserted"), ev("int_flow_lru") + flushed, "every entry left by LRU or flush: {a}");
    assert_eq!(ev("int_flow_hit") + ev("int_flow_inserted"), SENT as u64, "{a}");
    assert_eq!(ev("int_flow_exported"), ev("int_flow_lru") + flushed, "{a}");
    assert_eq!((ev("int_flow_ring_full"), ev("int_analytics_bad_hop_ml")), (0, 0), "{a}");
    assert_eq!(ev("int_hops_untracked"), SENT as u64, "one hop a packet beyond cache_max_hops");
    assert_eq!(ev("int_value_absent"), (0..SENT).filter(|i| i % 50 == 0).count() as u64, "{a}");
    let exported = ev("int_flow_exported");

    // Merge what arrived: per flow, per tracked hop.
    let mut got: BTreeMap<FlowId, Truth> = BTreeMap::new();
    let out = s.stop();
    assert_eq!(out["events"]["int_flow_stopped"].as_u64().unwrap_or(0), 0, "flushed before: {out}");
    assert_eq!(read_pcap(&d.path("out.pcap")).len(), SENT, "every frame sunk and forwarded");
    let (all, summary) = collected_all(collector);
    assert_eq!(summary["records"].as_u64(), Some(exported), "{summary}");
    assert_eq!((summary["records_lost"].as_u64(), summary["bad_records"].as_u64()), (Some(0), Some(0)), "{summary}");
    // Histogram snapshots share the sequence.
    let seqs: Vec<u64> = all.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..all.len() as u64).collect::<Vec<_>>(), "one gapless sequence");
    let records: Vec<&Value> = all.iter().filter(|v| v["type"] == "int_flow").collect();
    assert_eq!(records.len() as u64, exported);
    for v in records {
        {
            assert_eq!((v["type"].as_str(), v["node"].as_u64()), (Some("int_flow"), Some(9)), "{v}");
            assert!(matches!(v["reason"].as_str(), Some("lru" | "flush")), "{v}");
            assert_eq!(v["path"], serde_json::json!([1, 2]), "{v}");
            assert_eq!(v["flow"]["dst_port"], 5001, "the original destination port: {v}");
            let key = (v["flow"]["src"].as_str().unwrap().to_string(), v["flow"]["src_port"].as_u64().unwrap());
            let g = got.entry(key).or_default();
            g.packets += v["packets"].as_u64().unwrap();
            g.e2e += v["e2e_latency"]["sum"].as_u64().unwrap();
            for (p, h) in v["hop"].as_array().unwrap().iter().enumerate() {
                g.hops[p][0] += h["hop_latency"]["sum"].as_u64().unwrap();
                g.hops[p][1] += h["hop_latency"]["count"].as_u64().unwrap();
                g.hops[p][2] += h["queue"]["sum"].as_u64().unwrap();
                g.hops[p][3] += h["queue"]["count"].as_u64().unwrap();
            }
        }
    }
    // Only two hops are tracked: the third's truth is left out of the
    // comparison, but its latency is in the e2e sum.
    let tracked: BTreeMap<_, _> = truth
        .into_iter()
        .map(|(k, mut t)| {
            t.hops[2] = [0; 4];
            (k, t)
        })
        .collect();
    assert_eq!(got, tracked);
}

/// Stopping the switch exports what the cache holds (reason stop), and
/// the records reach the collector before the switch is gone.
#[test]
fn a_stopping_switch_exports_its_flows() {
    let (frames, truth) = frames();
    let Sink { d: _d, s, sock: _sock, collector } =
        start_sink("intstop", 13, &frames, "node_id = 4\nedge_ports = [\"p1\"]\n[int.analytics]\ncache_rows = 64");
    let out = s.stop();
    assert_eq!(out["events"]["int_flow_stopped"].as_u64(), Some(FLOWS as u64), "{out}");
    let (records, summary) = collected(collector);
    assert_eq!(summary["by_reason"]["stop"].as_u64(), Some(FLOWS as u64), "{summary}");
    let mut packets = BTreeMap::new();
    for v in &records {
        assert_eq!(v["reason"], "stop", "{v}");
        let key = (v["flow"]["src"].as_str().unwrap().to_string(), v["flow"]["src_port"].as_u64().unwrap());
        packets.insert(key, v["packets"].as_u64().unwrap());
    }
    let want: BTreeMap<_, _> = truth.iter().map(|(k, t)| (k.clone(), t.packets)).collect();
    assert_eq!(packets, want);
}

/// T and C events end to end: queue T and C on the two tracked hops, and
/// an edge-mode T on the end-to-end latency. The records intcollector
/// receives are, in order, exactly those a reference written from the
/// rules here computes from the frames; a run-time change reaches the
/// workers and a value beyond the field is refused.
#[test]
fn events_match_a_reference_exactly() {
    let (frames, _) = frames();
    let (q_t, q_c, e2e_t, e2e_reset) = (250u32, 200u32, 14_000u64, 9_000u64);
    // The reference: per flow, the last present queue per tracked hop and
    // the e2e edge state; records as (src, sport, hop or None, events, value).
    let mut want: Vec<(FlowId, Option<u64>, Vec<String>, u64)> = Vec::new();
    let mut state: BTreeMap<FlowId, ([Option<u32>; 2], bool)> = BTreeMap::new();
    for (i, f) in frames.iter().enumerate() {
        let src = std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]).to_string();
        let flow = (src, u16::from_be_bytes([f[34], f[35]]) as u64);
        let (last, fired) = state.entry(flow.clone()).or_insert(([None; 2], false));
        for (hop, last) in last.iter_mut().enumerate() {
            let Some(q) = values(i, hop).1 else { continue };
            let mut ev = Vec::new();
            if q > q_t {
                ev.push("queue_t".to_string());
            }
            if last.is_some_and(|l| l.abs_diff(q) > q_c) {
                ev.push("queue_c".to_string());
            }
            *last = Some(q);
            if !ev.is_empty() {
                want.push((flow.clone(), Some(hop as u64), ev, q as u64));
            }
        }
        let e2e: u64 = (0..HOPS).map(|h| values(i, h).0 as u64).sum();
        if e2e > e2e_t && !*fired {
            *fired = true;
            want.push((flow.clone(), None, vec!["e2e_latency_t".to_string()], e2e));
        } else if e2e < e2e_reset {
            *fired = false;
        }
    }
    assert!(want.len() > 50, "the reference raises events: {}", want.len());
    let Sink { d: _d, s, sock, collector } = start_sink(
        "intev",
        17,
        &frames,
        &format!(
            "node_id = 9\nedge_ports = [\"p1\"]\n\
[int.analytics]\ncache_rows = 64\ncache_ways = 4\ncache_max_hops = 2\nidle_timeout = 0\n\
[int.analytics.events.queue]\nthreshold = {q_t}\nchange = {q_c}\n\
[int.analytics.events.e2e_latency]\nthreshold = {e2e_t}\nmode = \"edge\"\nreset = {e2e_reset}"
        ),
    );
    let mut shown = Value::Null;
    wait_for("the events counted", || {
        shown = intctl(&sock, &["int", "event", "show"]);
        shown["counters"]["int_event_exported"].as_u64() == Some(want.len() as u64)
    });
    let count = |name: &str| want.iter().map(|w| w.2.iter().filter(|e| *e == name).count() as u64).sum::<u64>();
    for (counter, name) in [
        ("int_event_queue_t", "queue_t"),
        ("int_event_queue_c", "queue_c"),
        ("int_event_e2e_latency_t", "e2e_latency_t"),
    ] {
        assert_eq!(shown["counters"][counter].as_u64(), Some(count(name)), "{counter}: {shown}");
    }
    assert_eq!(shown["counters"]["int_event_ring_full"].as_u64(), Some(0), "{shown}");
    let rules = shown["rules"].as_array().unwrap();
    let queue = rules.iter().find(|r| r["metric"] == "queue").unwrap();
    assert_eq!((queue["threshold"].as_u64(), queue["change"].as_u64()), (Some(q_t as u64), Some(q_c as u64)));
    // At run time: a value beyond the 24-bit queue is refused, naming it;
    // a valid change is a new generation the workers use.
    let out = Command::new(intctl_bin())
        .arg("--socket")
        .arg(&sock)
        .args(["int", "event", "set", "queue", "--threshold", "16777216"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("threshold"), "{out:?}");
    let g = intctl(&sock, &["int", "event", "set", "queue", "--threshold", "0", "--change", "0"]);
    assert!(g["generation"].as_u64() > Some(1), "{g}");
    // path_change takes --on or --off and nothing else; they, no other.
    for (args, says) in [
        (&["path_change"][..], "path_change: give --on or --off"),
        (&["queue", "--on"][..], "--on/--off: path_change only"),
        (&["path_change", "--on", "--threshold", "5"][..], "threshold"),
    ] {
        let out = Command::new(intctl_bin())
            .arg("--socket")
            .arg(&sock)
            .args(["int", "event", "set"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(says), "{args:?}: {out:?}");
    }
    intctl(&sock, &["int", "event", "set", "path_change", "--on"]);
    let after = intctl(&sock, &["int", "event", "show"]);
    assert_eq!(after["path_change"], true, "{after}");
    let queue = after["rules"].as_array().unwrap().iter().find(|r| r["metric"] == "queue").unwrap().clone();
    assert_eq!((queue["threshold"].as_u64(), queue["change"].as_u64()), (Some(0), Some(0)), "{after}");
    let _ = s.stop();
    let (records, summary) = collected_all(collector);
    let got: Vec<(FlowId, Option<u64>, Vec<String>, u64)> = records
        .iter()
        .filter(|v| v["type"] == "int_event")
        .map(|v| {
            let flow = (v["flow"]["src"].as_str().unwrap().to_string(), v["flow"]["src_port"].as_u64().unwrap());
            let names = v["events"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
            let value = if v["hop"].is_null() { v["e2e_latency"].as_u64() } else { v["queue"].as_u64() };
            (flow, v["hop"].as_u64(), names, value.unwrap())
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(summary["events"].as_u64(), Some(want.len() as u64), "{summary}");
    assert_eq!(summary["records_lost"].as_u64(), Some(0), "{summary}");
}

/// The edges of `kind` bins as the README defines them: linear, `count`
/// bins of `width`; log2, one bin per value below `sub`, then each power
/// of two in `sub` equal parts, up to 2^32.
fn edges(kind: &str, a: u64, b: u64) -> Vec<u64> {
    if kind == "linear" {
        return (0..b).map(|i| i * a).collect();
    }
    let mut e: Vec<u64> = (0..a).collect();
    let mut base = a;
    while base < 1 << 32 {
        e.extend((0..a).map(|r| base + r * (base / a)));
        base *= 2;
    }
    e
}

/// The bin of `v`: the last edge at or below it.
fn bin_of(edges: &[u64], v: u64) -> usize {
    edges.iter().rposition(|e| *e <= v).unwrap()
}

/// Histograms end to end: per node, hop latency (log2, 4 sub-bins) and
/// queue (linear 10 x 20) of every hop, tracked by the cache or not, and
/// the end-to-end latency; `show int histograms` and the snapshot the
/// collector gets at stop equal a reference binned by the README's edges.
#[test]
fn histograms_equal_a_reference_binned_by_the_edges() {
    let (frames, _) = frames();
    let (lat_e, q_e, e2e_e) = (edges("log2", 4, 0), edges("linear", 10, 20), edges("log2", 8, 0));
    // (node ID or None for e2e, metric) -> counts per bin.
    let mut want: BTreeMap<(Option<u64>, String), Vec<u64>> = BTreeMap::new();
    let mut add = |node: Option<u64>, metric: &str, e: &[u64], v: u64| {
        want.entry((node, metric.to_string())).or_insert_with(|| vec![0; e.len()])[bin_of(e, v)] += 1;
    };
    for i in 0..frames.len() {
        let mut e2e = 0;
        for hop in 0..HOPS {
            let (lat, q) = values(i, hop);
            add(Some(hop as u64 + 1), "hop_latency", &lat_e, lat as u64);
            if let Some(q) = q {
                add(Some(hop as u64 + 1), "queue", &q_e, q as u64);
            }
            e2e += lat as u64;
        }
        add(None, "e2e_latency", &e2e_e, e2e);
    }
    let Sink { d: _d, s, sock, collector } = start_sink(
        "inthist",
        19,
        &frames,
        "node_id = 9\nedge_ports = [\"p1\"]\n\
[int.analytics]\ncache_rows = 64\ncache_max_hops = 2\nhistogram_nodes = 8\n\
[int.analytics.bins.hop_latency]\nkind = \"log2\"\nsub = 4\n\
[int.analytics.bins.queue]\nkind = \"linear\"\nwidth = 10\ncount = 20",
    );
    let shown = intctl(&sock, &["show", "int", "histograms", "--node", "2", "--metric", "queue"]);
    let hs = shown["histograms"].as_array().unwrap();
    assert_eq!(hs.len(), 1, "{shown}");
    let q2 = &want[&(Some(2), "queue".to_string())];
    let nonzero: Vec<Value> =
        q2.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| serde_json::json!([q_e[i], c])).collect();
    assert_eq!(hs[0]["counts"], Value::Array(nonzero), "{shown}");
    assert_eq!(hs[0]["total"].as_u64(), Some(q2.iter().sum()), "{shown}");
    assert_eq!(shown["counters"]["int_hist_node_untracked"].as_u64(), Some(0), "{shown}");
    let _ = s.stop();
    let (records, summary) = collected_all(collector);
    let mut got: BTreeMap<(Option<u64>, String), Vec<u64>> = BTreeMap::new();
    for v in records.iter().filter(|v| v["type"] == "int_hist") {
        let key = (v["node_id"].as_u64(), v["metric"].as_str().unwrap().to_string());
        let len = want.get(&key).map_or(0, Vec::len);
        let h = got.entry(key).or_insert_with(|| vec![0; len]);
        let first = v["first"].as_u64().unwrap() as usize;
        // Snapshots are cumulative: the last line of a chunk holds its counts.
        for (i, c) in v["counts"].as_array().unwrap().iter().enumerate() {
            h[first + i] = c.as_u64().unwrap();
        }
    }
    assert_eq!(got, want, "{summary}");
    assert_eq!(summary["records_lost"].as_u64(), Some(0), "{summary}");
}

/// Per-flow detection end to end: flows with an even source port are
/// decided by per_flow on the queue sum (T 150), the others by ewma on the
/// hop-latency sum (T 800, weight 64). The reports intcollector decodes
/// fall on exactly the packets a reference computed from the algorithms'
/// definitions marks, with F (and Q for the queue rule), and each rule's
/// counters add up.
#[test]
fn detection_reports_fall_on_the_reference_packets() {
    let (frames, _) = frames();
    // The reference: per flow P (and the EWMA M with 8 fractional bits).
    let mut state: BTreeMap<FlowId, (u64, i64)> = BTreeMap::new();
    let mut want: BTreeMap<usize, &str> = BTreeMap::new();
    let mut per_rule = [[0u64; 3]; 2];
    for (i, f) in frames.iter().enumerate() {
        let src = std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]).to_string();
        let sport = u16::from_be_bytes([f[34], f[35]]) as u64;
        let (p, m) = state.entry((src, sport)).or_insert((0, 0));
        let (lat, queue): (u64, u64) = (0..HOPS).fold((0, 0), |(l, q), h| {
            let (lat, qv) = values(i, h);
            (l + lat as u64, q + qv.unwrap_or(0) as u64)
        });
        let (rule, fired) = if sport % 2 == 0 {
            let fire = queue.abs_diff(*p) > 150;
            if fire {
                *p = queue;
            }
            (0, fire)
        } else {
            *m += (64 * ((lat as i64) * 256 - *m)) >> 8;
            let v = (*m >> 8) as u64;
            let fire = v.abs_diff(*p) > 800;
            if fire {
                *p = v;
            }
            (1, fire)
        };
        per_rule[rule][0] += 1;
        per_rule[rule][if fired { 1 } else { 2 }] += 1;
        if fired {
            // (intcollector writes the flags in header order: D Q F I.)
            want.insert(i, if rule == 0 { "QF" } else { "F" });
        }
    }
    assert!(per_rule[0][1] > 10 && per_rule[0][2] > 10 && per_rule[1][1] > 10 && per_rule[1][2] > 10, "{per_rule:?}");
    let Sink { d: _d, s, sock, collector } = start_sink(
        "intdet",
        23,
        &frames,
        "node_id = 9\nedge_ports = [\"p1\"]\n[int.analytics]\ncache_rows = 64\ncache_max_hops = 2\n\
[[int.detect]]\nname = \"even\"\npriority = 10\nsrc_port = \"0/1\"\nalgorithm = \"per_flow\"\nmetric = \"queue\"\nthreshold = 150\n\
[[int.detect]]\nname = \"rest\"\nalgorithm = \"ewma\"\nmetric = \"e2e_latency\"\nthreshold = 800\nweight = 64",
    );
    let shown = intctl(&sock, &["int", "detect", "show"]);
    let rules = shown["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{shown}");
    for (r, want) in rules.iter().zip(per_rule) {
        let got = [&r["evaluated"], &r["reported"], &r["suppressed"]].map(|v| v.as_u64().unwrap());
        assert_eq!(got, want, "{r}");
        assert_eq!(r["metric_absent"].as_u64(), Some(0), "{r}");
    }
    // Refused at run time, naming the argument; a rule that is not there.
    let bad = Command::new(intctl_bin())
        .arg("--socket")
        .arg(&sock)
        .args(["int", "detect", "add", "x", "--algorithm", "ewma", "--weight", "300"])
        .output()
        .unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("weight"), "{bad:?}");
    let gone =
        Command::new(intctl_bin()).arg("--socket").arg(&sock).args(["int", "detect", "del", "nope"]).output().unwrap();
    assert!(!gone.status.success(), "{gone:?}");
    let _ = s.stop();
    let lines = collected_lines(collector);
    let mut got: BTreeMap<usize, String> = BTreeMap::new();
    for v in lines.iter().filter(|v| v.get("flags").is_some()) {
        // Hop 0's latency names the frame: 1000 + (37 i) mod 5000, i < 5000.
        let lat = v["hops"][0]["hop_latency_ns"].as_u64().unwrap();
        let i = (0..frames.len()).find(|&i| values(i, 0).0 as u64 == lat).unwrap_or_else(|| panic!("{v}"));
        got.insert(i, v["flags"].as_str().unwrap().to_string());
    }
    let want: BTreeMap<usize, String> = want.into_iter().map(|(i, f)| (i, f.to_string())).collect();
    assert_eq!(got, want);
}

/// A `cnf` rule: the condition of an `[[int.expr]]` decides the reports,
/// on exactly the frames a reference evaluating the README's definition
/// marks (max over the hops, `any.delta` against each tracked hop's value
/// in the flow's previous packet, the integer EWMA of the e2e latency);
/// expressions are listed, refused with their position, and protected
/// from deletion while a rule uses them.
#[test]
fn cnf_reports_fall_on_the_reference_packets() {
    let (frames, _) = frames();
    const TRACKED: usize = 2;
    // Per flow: each tracked hop's last present queue, and the EWMA M. (A
    // flow's queues step by +12 and wrap from 299: `delta < -100` holds at
    // a wrap.)
    let mut state: BTreeMap<FlowId, ([Option<u32>; TRACKED], i64)> = BTreeMap::new();
    let mut want: BTreeMap<usize, &str> = BTreeMap::new();
    for (i, f) in frames.iter().enumerate() {
        let src = std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]).to_string();
        let sport = u16::from_be_bytes([f[34], f[35]]) as u64;
        let (prev, m) = state.entry((src, sport)).or_insert(([None; TRACKED], 0));
        let hops: Vec<(u32, Option<u32>)> = (0..HOPS).map(|h| values(i, h)).collect();
        let max = hops.iter().map(|h| h.0).max().unwrap();
        let mut grew = false;
        for (h, &(_, q)) in hops.iter().enumerate().take(TRACKED) {
            if let Some(q) = q {
                if let Some(p) = prev[h] {
                    grew |= (q as i64 - p as i64) < -100;
                }
                prev[h] = Some(q);
            }
        }
        let e2e: i64 = hops.iter().map(|h| h.0 as i64).sum();
        *m += (64 * (e2e * 256 - *m)) >> 8;
        let smooth = (*m >> 8) > 11_000;
        if max > 4_500 && (grew || smooth) {
            want.insert(i, if grew { "QF" } else { "F" });
        }
    }
    let fired = want.len();
    assert!(fired > 20 && SENT - fired > 20, "{fired} of {SENT}");
    assert!(want.values().any(|f| *f == "F") && want.values().any(|f| *f == "QF"), "both clauses' literals fire");
    let Sink { d: _d, s, sock, collector } = start_sink(
        "intcnf",
        27,
        &frames,
        "node_id = 9\nedge_ports = [\"p1\"]\n[int.analytics]\ncache_rows = 64\ncache_max_hops = 2\n\
[[int.expr]]\nname = \"deep\"\nexpr = \"hop_latency.max > 4500 and (queue.any.delta < -100 or e2e_latency.ewma > 11000)\"\n\
[[int.detect]]\nname = \"all\"\nalgorithm = \"cnf\"\nexpr = \"deep\"",
    );
    let shown = intctl(&sock, &["int", "detect", "show"]);
    let r = &shown["rules"][0];
    assert_eq!((r["algorithm"].as_str(), r["expr"].as_str()), (Some("cnf"), Some("deep")), "{shown}");
    let got = [&r["evaluated"], &r["reported"], &r["suppressed"], &r["metric_absent"]].map(|v| v.as_u64().unwrap());
    assert_eq!(got, [SENT as u64, fired as u64, (SENT - fired) as u64, 0], "{r}");
    let exprs = intctl(&sock, &["int", "expr", "show"]);
    assert_eq!(
        exprs["exprs"][0]["expr"].as_str(),
        Some("hop_latency.max > 4500 AND (queue.any.delta < -100 OR e2e_latency.ewma > 11000)"),
        "{exprs}"
    );
    assert_eq!(exprs["exprs"][0]["rules"], serde_json::json!(["all"]));
    let run = |args: &[&str]| Command::new(intctl_bin()).arg("--socket").arg(&sock).args(args).output().unwrap();
    let fails_with = |args: &[&str], what: &str| {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success() && err.contains(what), "{args:?}: {err}");
    };
    fails_with(&["int", "expr", "del", "deep"], "used by rule(s) all");
    fails_with(&["int", "expr", "add", "bad", "queue.max >"], "at 12: a number was expected");
    fails_with(&["int", "detect", "add", "x", "--algorithm", "cnf", "--expr", "nope"], "no expression named 'nope'");
    assert!(run(&["int", "expr", "add", "spare", "queue.hop0 == 1"]).status.success());
    assert!(run(&["int", "expr", "del", "spare"]).status.success());
    fails_with(&["int", "expr", "del", "spare"], "no expression named");
    let _ = s.stop();
    let mut got: BTreeMap<usize, String> = BTreeMap::new();
    for v in collected_lines(collector).iter().filter(|v| v.get("flags").is_some()) {
        let lat = v["hops"][0]["hop_latency_ns"].as_u64().unwrap();
        let i = (0..frames.len()).find(|&i| values(i, 0).0 as u64 == lat).unwrap_or_else(|| panic!("{v}"));
        got.insert(i, v["flags"].as_str().unwrap().to_string());
    }
    let want: BTreeMap<usize, String> = want.into_iter().map(|(i, f)| (i, f.to_string())).collect();
    assert_eq!(got, want);
}

/// One command to the Redis at `sock`; its integer reply.
/// A real redis-server on a unix socket in `d` (no TCP port, no
/// persistence), up and answering, and its socket.
fn start_redis(d: &Scratch) -> (std::process::Child, std::path::PathBuf) {
    let rsock = d.path("redis.sock");
    let redis = Command::new("redis-server")
        .args(["--port", "0", "--unixsocket"])
        .arg(&rsock)
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(d.path(""))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server (scripts/setup.sh installs it)");
    wait_for("redis up", || rsock.exists() && std::os::unix::net::UnixStream::connect(&rsock).is_ok());
    (redis, rsock)
}

fn redis_int(sock: &std::path::Path, args: &[&str]) -> i64 {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd += &format!("${}\r\n{a}\r\n", a.len());
    }
    s.write_all(cmd.as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    line.trim().strip_prefix(':').unwrap_or_else(|| panic!("{args:?}: {line}")).parse().unwrap()
}

/// intcollector stores what it decodes in a real Redis: reports, events,
/// flow records and histograms land in their streams as it counted them;
/// when Redis dies, the records after it are dropped and counted while the
/// decoding goes on.
#[test]
fn redis_holds_what_intcollector_decoded_and_a_dead_store_costs_counted_records() {
    let (frames, _) = frames();
    let id = std::process::id() % 100_000;
    let rd = Scratch::new("redis");
    let (mut redis, rsock) = start_redis(&rd);
    let listen = format!("127.0.0.1:{}", 20_000 + (id + 29) % 30_000);
    let url = format!("redis+unix://{}", rsock.display());
    let ours = start_collector_with(&listen, &["--quiet", "--redis", &url]);
    // Every packet reported; queue T events; histograms at stop.
    let int = format!(
        "node_id = 9\nedge_ports = [\"p1\"]\n[int.analytics]\ncache_rows = 64\nhistogram_interval = 0\n\
         [int.analytics.events.queue]\nthreshold = 250\n[[int.collector]]\naddress = \"{listen}\""
    );
    // (start_sink adds a collector of its own: this one is ours.)
    let Sink { d: _d, s, sock, collector: other } = start_sink("intredis", 31, &frames, &int);
    let events = intctl(&sock, &["int", "event", "show"])["counters"]["int_event_exported"].as_u64().unwrap();
    assert!(events > 10, "{events}");
    wait_for("reports and events in Redis", || {
        redis_int(&rsock, &["XLEN", "int:reports"]) == SENT as i64
            && redis_int(&rsock, &["XLEN", "int:events"]) == events as i64
    });
    // Redis goes; the switch stops: its flow records and histograms are
    // still decoded, and what could not be stored is counted.
    redis.kill().unwrap();
    redis.wait().unwrap();
    let _ = s.stop();
    let _ = collected_lines(other);
    let lines = collected_lines(ours);
    let find = |k: &str| lines.iter().find_map(|v| v.get(k).cloned()).unwrap_or(Value::Null);
    let (fl, rs) = (find("int_flow_summary"), find("redis_summary"));
    let u = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert_eq!((u(&fl, "events"), u(&fl, "records")), (events, FLOWS as u64), "{fl}");
    assert!(u(&fl, "hist_lines") > 0, "{fl}");
    let commands = SENT as u64 + events + FLOWS as u64 + 2 * u(&fl, "hist_lines");
    assert_eq!(u(&rs, "written") + u(&rs, "dropped"), commands, "{rs}");
    assert_eq!(u(&rs, "written"), SENT as u64 + events, "what came before Redis died: {rs}");
    assert_eq!(u(&rs, "errors"), 0, "{rs}");
    assert!(u(&rs, "connection_lost") >= 1, "{rs}");
}

/// Every message of the topics `prefix`* on `brokers` (partition 0 of
/// each), read until `want` of each have come or 20 s pass: (topic, key,
/// payload).
fn kafka_messages(brokers: &str, prefix: &str, want: &[(&str, usize)]) -> BTreeMap<String, Vec<(String, Value)>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "intswitch-test")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for (t, _) in want {
        tpl.add_partition_offset(&format!("{prefix}{t}"), 0, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut got: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let done = |got: &BTreeMap<String, Vec<(String, Value)>>| {
        want.iter().all(|(t, n)| got.get(&format!("{prefix}{t}")).map_or(0, |v| v.len()) >= *n)
    };
    while !done(&got) && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            let key = String::from_utf8_lossy(m.key().unwrap_or(b"")).to_string();
            let v: Value = serde_json::from_slice(m.payload().unwrap_or(b"null")).unwrap_or(Value::Null);
            got.entry(m.topic().to_string()).or_default().push((key, v));
        }
    }
    got
}

/// The key intcollector gives a record: its flow, or a histogram's node.
fn kafka_key(v: &Value) -> String {
    let f = &v["flow"];
    if f.is_object() {
        return format!(
            "{}:{}>{}:{}/{}",
            f["src"].as_str().unwrap(),
            f["src_port"],
            f["dst"].as_str().unwrap(),
            f["dst_port"],
            f["proto"]
        );
    }
    v["node_id"].as_u64().map_or("e2e".into(), |n| n.to_string())
}

/// intcollector sends what it decodes to Kafka (librdkafka's MockCluster
/// here): every report, event, flow record and histogram line lands in its
/// topic under its flow's (or node's) key, as many as it decoded and the
/// switch exported; when the brokers fail every produce request, the
/// failures are counted message by message while the decoding goes on.
#[test]
fn kafka_holds_what_intcollector_decoded_and_failed_deliveries_are_counted() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let (frames, _) = frames();
    let id = std::process::id() % 100_000;
    const TOPICS: [&str; 4] = ["reports", "events", "flows", "histograms"];
    let run = |name: &str, port: u32, brokers: &str| {
        // (start_sink's own collector listens at port's offset: ours next to it.)
        let listen = format!("127.0.0.1:{}", 20_000 + (id + port + 1) % 30_000);
        let ours =
            start_collector_with(&listen, &["--quiet", "--kafka-brokers", brokers, "--kafka-topic-prefix", "t-"]);
        let int = format!(
            "node_id = 9\nedge_ports = [\"p1\"]\n[int.analytics]\ncache_rows = 64\nhistogram_interval = 0\n\
             [int.analytics.events.queue]\nthreshold = 250\n[[int.collector]]\naddress = \"{listen}\""
        );
        let Sink { d: _d, s, sock, collector: other } = start_sink(name, port, &frames, &int);
        let events = intctl(&sock, &["int", "event", "show"])["counters"]["int_event_exported"].as_u64().unwrap();
        let _ = s.stop();
        let _ = collected_lines(other);
        let lines = collected_lines(ours);
        let find = |k: &str| lines.iter().find_map(|v| v.get(k).cloned()).unwrap_or(Value::Null);
        (events, find("int_flow_summary"), find("kafka_summary"), find("summary"))
    };
    let u = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));

    let good = MockCluster::new(1).unwrap();
    for t in TOPICS {
        good.create_topic(&format!("t-{t}"), 1, 1).unwrap();
    }
    let (events, fl, ks, sm) = run("intkafka", 33, &good.bootstrap_servers());
    assert!(events > 10, "{events}");
    assert_eq!((u(&fl, "events"), u(&fl, "records")), (events, FLOWS as u64), "{fl}");
    let hist = u(&fl, "hist_lines");
    assert!(hist > 0, "{fl}");
    assert_eq!(u(&sm, "reports"), SENT as u64, "{sm}");
    // Report packets and JSON datagrams, taken by batched receive calls.
    assert!(u(&sm, "datagrams") > u(&sm, "packets") && u(&sm, "recv_batches") >= 1, "{sm}");
    assert!(u(&sm, "recv_batches") <= u(&sm, "datagrams"), "{sm}");
    let total = SENT as u64 + events + FLOWS as u64 + hist;
    assert_eq!((u(&ks, "queued"), u(&ks, "delivered")), (total, total), "{ks}");
    for k in ["delivery_failed", "queue_full", "send_errors", "undelivered_at_exit"] {
        assert_eq!(u(&ks, k), 0, "{k}: {ks}");
    }
    let want = [("reports", SENT), ("events", events as usize), ("flows", FLOWS), ("histograms", hist as usize)];
    let got = kafka_messages(&good.bootstrap_servers(), "t-", &want);
    for (t, n) in want {
        let msgs = got.get(&format!("t-{t}")).map_or(&[][..], |v| &v[..]);
        assert_eq!(msgs.len(), n, "topic t-{t}");
        for (key, v) in msgs {
            assert_eq!(key, &kafka_key(v), "t-{t}: {v}");
        }
    }
    // One flow's messages share one key: 24 flows, 24 keys.
    let keys: std::collections::BTreeSet<_> = got["t-reports"].iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), FLOWS);

    // Every produce request fails for good: each message's delivery report
    // says so, and the collector decodes on.
    let bad = MockCluster::new(1).unwrap();
    for t in TOPICS {
        bad.create_topic(&format!("t-{t}"), 1, 1).unwrap();
    }
    bad.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 4096]);
    let (events, fl, ks, sm) = run("intkafkabad", 37, &bad.bootstrap_servers());
    assert_eq!((u(&sm, "reports"), u(&fl, "records"), u(&fl, "events")), (SENT as u64, FLOWS as u64, events), "{fl}");
    let total = SENT as u64 + events + FLOWS as u64 + u(&fl, "hist_lines");
    // (Once a topic's produce failed for good, librdkafka refuses its next
    // messages at once: send errors.)
    assert_eq!(u(&ks, "queued") + u(&ks, "send_errors") + u(&ks, "queue_full"), total, "{ks}");
    assert_eq!(u(&ks, "delivered"), 0, "{ks}");
    assert_eq!(u(&ks, "delivery_failed") + u(&ks, "undelivered_at_exit"), u(&ks, "queued"), "{ks}");
    assert!(u(&ks, "delivery_failed") > 0, "{ks}");
}

/// `rate_budget`: with the trace replayed without end, the queue T events
/// (values 0..299, T at 250) run far over a budget of 1000 a second, so
/// the control core doubles the threshold to 500, where none fire, and
/// halves it back to the configured 250; `int event show` follows it, and
/// a budget of 0 stops it.
#[test]
fn a_rate_budget_moves_the_t_threshold_both_ways() {
    let (frames, _) = frames();
    let id = std::process::id() % 100_000;
    let d = Scratch::new("intbudget");
    write_pcap(&d.path("in.pcap"), &frames);
    let cfg = format!(
        "name = \"intbudget\"\nmode = \"xconnect\"\n[eal]\nlcores = \"0-1\"\nfile_prefix = \"intbudget-{id}\"\n\
[dataplane]\nidle = true\nmbufs = 4095\n[flow_table]\nlearn = false\n{}\n[[port]]\nname = \"p0\"\n\
device = \"net_pcap0,rx_pcap={},infinite_rx=1\"\npeer = \"p1\"\n[[port]]\nname = \"p1\"\ndevice = \"net_null0,no-rx=1\"\n\
peer = \"p0\"\n[int]\nnode_id = 9\nedge_ports = [\"p1\"]\nreport_flow_interval_ms = 1000\n[int.analytics]\ncache_rows = 64\n\
[int.analytics.events.queue]\nthreshold = 250\nrate_budget = 1000\n[[int.collector]]\naddress = \"127.0.0.1:9\"\n",
        control_section(&d),
        d.path("in.pcap").display(),
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), None);
    let sock = d.path("sw.sock");
    let queue = || {
        let v = intctl(&sock, &["int", "event", "show"]);
        v["rules"].as_array().unwrap().iter().find(|r| r["metric"] == "queue").unwrap().clone()
    };
    let mut seen = std::collections::BTreeSet::new();
    wait_for("the threshold up and back down", || {
        let q = queue();
        seen.insert(q["threshold"].as_u64().unwrap());
        q["budget_changes"].as_u64().unwrap() >= 2
    });
    let q = queue();
    assert!(seen.contains(&500), "doubled: {seen:?} {q}");
    assert!(seen.iter().all(|t| [250, 500].contains(t)), "between the base and one doubling: {seen:?}");
    assert_eq!((q["rate_budget"].as_u64(), q["base_threshold"].as_u64()), (Some(1000), Some(250)), "{q}");
    // Off: the threshold stays where it is.
    intctl(&sock, &["int", "event", "set", "queue", "--rate-budget", "0", "--threshold", "250"]);
    let before = queue()["budget_changes"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let q = queue();
    assert_eq!((q["threshold"].as_u64(), q["budget_changes"].as_u64()), (Some(250), Some(before)), "{q}");
    assert!(q["rate_budget"].is_null(), "{q}");
    let _ = s.stop();
}

/// Link latency events: frames of 2 hops carrying both timestamps, hop 1
/// stamped 2 us after hop 0 sent until frame 240, then 9 us (a delay step
/// on the link). With T at 5 us and C at 1 us, every frame after the step
/// raises T on hop 1's record and each flow's first frame after it C, with
/// the link latency and the previous packet's in the int_event line.
#[test]
fn a_link_delay_step_raises_link_latency_events_between_the_two_hops() {
    let spec = TrafficSpec {
        flows: FLOWS,
        frame_len: 100,
        ..TrafficSpec::udp("10.80.0.1".parse().unwrap(), "10.80.1.1".parse().unwrap(), SENT)
    };
    let bitmap = 0x8000 | 0x0800 | 0x0400; // node ID, ingress and egress timestamps
    let t = IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap, hops: 2, rhc: 2 };
    const HOP: usize = 20;
    const STEP: usize = 240;
    let frames: Vec<Vec<u8>> = (0..SENT)
        .map(|i| {
            let mut f = int_frame(&spec, i, &t).unwrap();
            f[40..42].fill(0);
            let sent = 1_000_000 + i as u64 * 10_000;
            let link = if i < STEP { 2_000 } else { 9_000 };
            // Newest first: hop 1, then hop 0 (node ID, ingress, egress).
            let (h1, h0) = (STACK, STACK + HOP);
            f[h0..h0 + 4].copy_from_slice(&1u32.to_be_bytes());
            f[h0 + 4..h0 + 12].copy_from_slice(&(sent - 500).to_be_bytes());
            f[h0 + 12..h0 + 20].copy_from_slice(&sent.to_be_bytes());
            f[h1..h1 + 4].copy_from_slice(&2u32.to_be_bytes());
            f[h1 + 4..h1 + 12].copy_from_slice(&(sent + link).to_be_bytes());
            f[h1 + 12..h1 + 20].copy_from_slice(&(sent + link + 300).to_be_bytes());
            f
        })
        .collect();
    let Sink { d: _d, s, sock, collector } = start_sink(
        "intlink",
        41,
        &frames,
        "node_id = 9\nedge_ports = [\"p1\"]\nreport_flow_interval_ms = 600000\n[int.analytics]\ncache_rows = 64\n\
[int.analytics.events.link_latency]\nthreshold = 5000\nchange = 1000",
    );
    let shown = intctl(&sock, &["int", "event", "show"]);
    let _ = s.stop();
    let c = &shown["counters"];
    let after = (SENT - STEP) as u64;
    assert_eq!(
        (c["int_event_link_latency_t"].as_u64(), c["int_event_link_latency_c"].as_u64()),
        (Some(after), Some(FLOWS as u64)),
        "{shown}"
    );
    let events: Vec<Value> = collected_lines(collector).into_iter().filter(|v| v["type"] == "int_event").collect();
    assert_eq!(events.len() as u64, after);
    for e in &events {
        assert_eq!(
            (e["hop"].as_u64(), e["node_id"].as_u64(), e["link_latency"].as_u64()),
            (Some(1), Some(2), Some(9_000)),
            "{e}"
        );
    }
    let steps: Vec<&Value> =
        events.iter().filter(|e| e["events"].as_array().unwrap().iter().any(|n| n == "link_latency_c")).collect();
    assert_eq!(steps.len(), FLOWS);
    assert!(steps.iter().all(|e| e["prev"]["link_latency"] == 2_000), "{steps:?}");
}

/// `tests/telemetry_ref.py`, the independent reference (README "Telemetry
/// traces").
fn telemetry_ref() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("telemetry_ref.py")
}

/// The §9 value models against the independent reference: `gen-traffic
/// --int-values web` and the Python generator write the same bytes and
/// the same ground truth; a sink with analytics reads the trace once and
/// its flow records (after a flush), histograms, events and the reports of
/// four detection algorithms (one per destination port) equal what the
/// truth and the Python detector say, exactly.
#[test]
fn a_modelled_trace_matches_the_independent_reference_exactly() {
    let d = Scratch::new("telref");
    let (ours, theirs) = (d.path("ours.pcap"), d.path("ref.pcap"));
    let gen = Command::new(intswitch_tests::workspace_bin("intswitch"))
        .args(["gen-traffic", "--int-values", "web", "--count", "4000", "--flows", "48", "--zipf", "1.1"])
        .args(["--int-instructions", "node_id,hop_latency,queue,tx_util", "--int-rhc", "3", "--shuffle", "5"])
        .arg("--out")
        .arg(&ours)
        .arg("--truth")
        .arg(d.path("ours.json"))
        .output()
        .unwrap();
    assert!(gen.status.success(), "{gen:?}");
    let py = Command::new("python3")
        .arg(telemetry_ref())
        .args(["gen", "--model", "web", "--packets", "4000", "--flows", "48", "--zipf", "1.1", "--bitmap", "0xb100"])
        .args(["--rhc", "3", "--seed", "5", "--out"])
        .arg(&theirs)
        .arg("--truth")
        .arg(d.path("ref.json"))
        .output()
        .unwrap();
    assert!(py.status.success(), "{py:?}");
    assert!(std::fs::read(&ours).unwrap() == std::fs::read(&theirs).unwrap(), "the two generators' pcaps differ");
    let truth: Value = serde_json::from_slice(&std::fs::read(d.path("ours.json")).unwrap()).unwrap();
    let ref_truth: Value = serde_json::from_slice(&std::fs::read(d.path("ref.json")).unwrap()).unwrap();
    assert_eq!(truth, ref_truth, "the two generators' ground truths differ");
    assert!(truth["bursts"].as_array().unwrap().len() >= 3, "{}", truth["bursts"]);

    let rules =
        ["per_hop:hop_latency:20000@80", "per_flow:e2e_latency:20000@81", "ewma:queue:100:64@5000", "noop:queue:0"];
    let mut det = Command::new("python3");
    det.arg(telemetry_ref()).arg("detect").arg("--pcap").arg(&ours);
    for r in rules {
        det.args(["--rule", r]);
    }
    det.args(["--event", "queue:250:100", "--event", "hop_latency:0:40000", "--event", "e2e_latency:60000:0"]);
    let out = det.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let want: Value = serde_json::from_slice(&out.stdout).unwrap();
    let frames = read_pcap(&ours);
    assert_eq!(want["packets"].as_u64(), Some(frames.len() as u64));

    let Sink { d: _sd, s, sock, collector } = start_sink(
        "inttelref",
        43,
        &frames,
        "node_id = 9\nedge_ports = [\"p1\"]\n[int.analytics]\ncache_rows = 1024\ncache_max_hops = 5\n\
[int.analytics.events.queue]\nthreshold = 250\nchange = 100\n\
[int.analytics.events.hop_latency]\nchange = 40000\n[int.analytics.events.e2e_latency]\nthreshold = 60000\n\
[[int.detect]]\nname = \"a\"\npriority = 4\ndst_port = \"80\"\nalgorithm = \"per_hop\"\nmetric = \"hop_latency\"\nthreshold = 20000\n\
[[int.detect]]\nname = \"b\"\npriority = 3\ndst_port = \"81\"\nalgorithm = \"per_flow\"\nmetric = \"e2e_latency\"\nthreshold = 20000\n\
[[int.detect]]\nname = \"c\"\npriority = 2\ndst_port = \"5000\"\nalgorithm = \"ewma\"\nmetric = \"queue\"\nthreshold = 100\nweight = 64\n\
[[int.detect]]\nname = \"d\"\npriority = 1\nalgorithm = \"noop\"",
    );
    let shown = intctl(&sock, &["int", "detect", "show"]);
    for (r, name) in shown["rules"].as_array().unwrap().iter().zip(rules) {
        assert_eq!(r["reported"].as_u64(), want["rules"][name].as_array().map(|v| v.len() as u64), "{name}: {r}");
    }
    intctl(&sock, &["int", "flows", "flush"]);
    let flows = truth["flow"].as_array().unwrap().len() as u64;
    wait_for("every flow flushed", || {
        intctl(&sock, &["show", "int", "analytics"])["counters"]["int_flow_flushed"].as_u64() == Some(flows)
    });
    let fin = s.stop();
    // Every event's delivery delay was measured; the control core's export
    // work was timed.
    let (ex, n_events) = (&fin["int_analytics"], want["events"].as_array().unwrap().len() as u64);
    let delay = |k: &str| ex["event_delay"][k].as_u64().unwrap();
    assert_eq!((delay("count"), ex["events"].as_u64()), (n_events, Some(n_events)), "{fin}");
    assert!(delay("p50_ns") <= delay("p99_ns") && delay("p99_ns") <= delay("max_ns") && delay("max_ns") > 0, "{ex}");
    assert!(ex["busy_s"].as_f64().unwrap() > 0.0 && ex["records_per_busy_s"].as_u64().unwrap() > 0, "{ex}");
    let lines = collected_lines(collector);
    let summary = lines.iter().find_map(|v| v.get("int_flow_summary").cloned()).unwrap_or(Value::Null);
    assert_eq!(summary["records_lost"].as_u64(), Some(0), "{summary}");
    let records: Vec<&Value> =
        lines.iter().filter(|v| v["type"].as_str().is_some_and(|t| t.starts_with("int_"))).collect();

    // Flow records: one each (nothing left by LRU), equal to the truth.
    let metrics = ["hop_latency", "queue", "tx_util"];
    let mut got_flows: Vec<Value> = records
        .iter()
        .filter(|v| v["type"] == "int_flow")
        .map(|v| {
            let hop: Vec<Value> = v["hop"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    let mut o = serde_json::json!({"node_id": h["node_id"]});
                    for m in metrics {
                        o[m] = serde_json::json!({"last": h[m]["last"], "sum": h[m]["sum"]});
                    }
                    o
                })
                .collect();
            let f = &v["flow"];
            serde_json::json!({
                "flow": {"src": f["src"], "dst": f["dst"], "proto": f["proto"], "src_port": f["src_port"], "dst_port": f["dst_port"]},
                "packets": v["packets"], "hop": hop,
                "e2e_latency": {"last": v["e2e_latency"]["last"], "sum": v["e2e_latency"]["sum"]},
            })
        })
        .collect();
    let mut want_flows: Vec<Value> = truth["flow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let mut f = f.clone();
            let o = f.as_object_mut().unwrap();
            o.remove("first");
            o.remove("last");
            f
        })
        .collect();
    let key = |v: &Value| v["flow"].to_string();
    got_flows.sort_by_key(key);
    want_flows.sort_by_key(key);
    assert_eq!(got_flows.len(), want_flows.len());
    for (g, w) in got_flows.iter().zip(&want_flows) {
        assert_eq!(g, w);
    }

    // Histograms: the stop snapshot's cumulative counts, as [edge, count].
    let mut hist: BTreeMap<(Option<u64>, String), BTreeMap<u64, u64>> = BTreeMap::new();
    for v in records.iter().filter(|v| v["type"] == "int_hist") {
        let bins = control::traffic::telemetry::default_bins(v["metric"].as_str().unwrap()).unwrap();
        let h = hist.entry((v["node_id"].as_u64(), v["metric"].as_str().unwrap().to_string())).or_default();
        let first = v["first"].as_u64().unwrap() as usize;
        for (i, c) in v["counts"].as_array().unwrap().iter().enumerate() {
            let c = c.as_u64().unwrap();
            if c > 0 {
                h.insert(bins.lower_edge(first + i), c);
            } else {
                h.remove(&bins.lower_edge(first + i));
            }
        }
    }
    let want_hist: BTreeMap<(Option<u64>, String), BTreeMap<u64, u64>> = truth["histograms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let counts =
                h["counts"].as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap()));
            ((h["node_id"].as_u64(), h["metric"].as_str().unwrap().to_string()), counts.collect())
        })
        .collect();
    assert_eq!(hist, want_hist);

    // Events: the same multiset of records.
    let mut got_events: Vec<Value> = records
        .iter()
        .filter(|v| v["type"] == "int_event")
        .map(|v| {
            let f = &v["flow"];
            let (vals, prev) = if v["hop"].is_null() {
                (serde_json::json!([v["e2e_latency"]]), serde_json::json!([v["e2e_latency_prev"]]))
            } else {
                (
                    Value::Array(metrics.iter().map(|m| v[m].clone()).collect()),
                    Value::Array(metrics.iter().map(|m| v["prev"][m].clone()).collect()),
                )
            };
            serde_json::json!([
                f["src"],
                f["dst"],
                f["proto"],
                f["src_port"],
                f["dst_port"],
                v["hop"],
                v["node_id"],
                v["bits"],
                vals,
                prev
            ])
        })
        .collect();
    let mut want_events = want["events"].as_array().unwrap().clone();
    got_events.sort_by_key(Value::to_string);
    want_events.sort_by_key(Value::to_string);
    assert!(want_events.len() > 50, "{}", want_events.len());
    assert_eq!(got_events, want_events);

    // Reports: on exactly the packets the reference marks (by the inner
    // IPv4 ID, the packet's index).
    let mut got_reports: Vec<u64> =
        lines.iter().filter(|v| v.get("flags").is_some()).map(|v| v["ip_id"].as_u64().unwrap()).collect();
    let mut want_reports: Vec<u64> =
        rules.iter().flat_map(|r| want["rules"][r].as_array().unwrap().iter().map(|i| i.as_u64().unwrap())).collect();
    got_reports.sort_unstable();
    want_reports.sort_unstable();
    assert!(want_reports.len() > 50, "{}", want_reports.len());
    assert_eq!(got_reports, want_reports);
}

/// Export paused before the first frame (the switch reads its trace from a
/// FIFO the test feeds after `int export pause`): R_I and R_G fill to
/// their capacity and refuse the rest, counted; after resume exactly what
/// they held arrives, so delivered + ring full = the records the packets
/// raised (events: a reference count of T events; flow records: the
/// entries the cache let go), per ring, exactly.
#[test]
fn with_export_paused_every_record_is_delivered_or_counted_ring_full() {
    let (frames, _) = frames();
    // T events on the queue of the two tracked hops (level mode: one per
    // packet and hop above it, whatever the cache holds).
    let want_events =
        (0..SENT).flat_map(|i| (0..2).map(move |p| values(i, p).1)).filter(|q| q.is_some_and(|q| q > 150)).count()
            as u64;
    let id = std::process::id() % 100_000;
    let d = Scratch::new("intpause");
    let fifo = d.path("in.pcap");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let writer = {
        let (fifo, frames) = (fifo.clone(), frames.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            // Blocks until the switch opens the FIFO to read.
            let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let mut hdr = Vec::new();
            for v in
                [0xa1b2_c3d4u32.to_le_bytes().to_vec(), vec![2, 0, 4, 0], vec![0; 8], 65535u32.to_le_bytes().to_vec()]
            {
                hdr.extend(v);
            }
            hdr.extend(1u32.to_le_bytes());
            w.write_all(&hdr).unwrap();
            w.flush().unwrap();
            // The frames only once export is paused (or the test gave up).
            let _ = go_rx.recv_timeout(Duration::from_secs(60));
            for (i, f) in frames.iter().enumerate() {
                let mut rec = Vec::with_capacity(16 + f.len());
                for v in [0u32, i as u32, f.len() as u32, f.len() as u32] {
                    rec.extend(v.to_le_bytes());
                }
                rec.extend(f);
                if w.write_all(&rec).is_err() {
                    return;
                }
            }
        })
    };
    let listen = format!("127.0.0.1:{}", 20_000 + (id + 45) % 30_000);
    let collector = start_collector(&listen);
    let int = "node_id = 9\nedge_ports = [\"p1\"]\nreport_flow_interval_ms = 600000\n\
[int.analytics]\ncache_rows = 4\ncache_ways = 4\ncache_max_hops = 2\nflow_ring_size = 32\nevent_ring_size = 64\n\
histogram_nodes = 0\n[int.analytics.events.queue]\nthreshold = 150";
    std::fs::write(d.path("c.toml"), sink_config("intpause", &d, &listen, int)).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), None);
    let sock = d.path("sw.sock");
    assert_eq!(intctl(&sock, &["int", "export", "pause"])["paused"], true);
    go_tx.send(()).unwrap();
    wait_for("every frame sunk", || {
        intctl(&sock, &["show", "int"])["counters"]["int_sunk"].as_u64() == Some(SENT as u64)
    });
    writer.join().unwrap();
    let mut a = Value::Null;
    wait_for("the counters published", || {
        a = intctl(&sock, &["show", "int", "analytics"]);
        a["counters"]["int_flow_hit"].as_u64().unwrap_or(0) + a["counters"]["int_flow_inserted"].as_u64().unwrap_or(0)
            == SENT as u64
    });
    let ring = |k: &str, f: &str| a["export"][k][0][f].as_u64().unwrap();
    let (ecap, fcap) = (ring("event_rings", "capacity"), ring("rings", "capacity"));
    let lru = a["counters"]["int_flow_lru"].as_u64().unwrap();
    assert!(want_events > 2 * ecap && lru > 2 * fcap, "the rings overflow: {want_events} {lru} {a}");
    assert_eq!((ring("event_rings", "pending"), ring("event_rings", "ring_full")), (ecap, want_events - ecap), "{a}");
    assert_eq!((ring("rings", "pending"), ring("rings", "ring_full")), (fcap, lru - fcap), "{a}");
    assert_eq!(a["counters"]["int_event_ring_full"].as_u64(), Some(want_events - ecap), "{a}");
    assert_eq!(a["counters"]["int_flow_ring_full"].as_u64(), Some(lru - fcap), "{a}");

    intctl(&sock, &["int", "export", "resume"]);
    wait_for("the rings drained", || {
        let v = intctl(&sock, &["show", "int", "analytics"]);
        v["export"]["rings"][0]["pending"] == 0 && v["export"]["event_rings"][0]["pending"] == 0
    });
    let _ = s.stop();
    let lines = collected_lines(collector);
    let count = |t: &str| lines.iter().filter(|v| v["type"] == t).count() as u64;
    // What the cache still held leaves at stop (reason stop) with room in
    // the ring: 16 entries, 32 slots.
    let stopped = lines.iter().filter(|v| v["type"] == "int_flow" && v["reason"] == "stop").count() as u64;
    assert_eq!(count("int_event"), ecap, "delivered + ring full = {want_events}");
    assert_eq!(count("int_flow") - stopped, fcap, "delivered + ring full = {lru} LRU exports");
    assert_eq!(stopped, 16);
}

/// Sends `n` 200-byte UDP datagrams from `host` to h2's port 5555 in the
/// ana3 testbed, `gap` seconds apart (0: back to back), from source port
/// 40000: every call is the same flow.
fn send_udp(host: &str, n: usize, gap: f64) {
    let py = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',40000))\n\
         for i in range({n}):\n    s.sendto(b'x'*200,('10.31.2.2',5555))\n    time.sleep({gap})\n"
    );
    let (ok, out) = intswitch_tests::ns_try(host, &["timeout", "60", "python3", "-c", &py]);
    assert!(ok, "{out}");
}

/// The analytics on the chain3 testbed (h1 - s1 - s2 - s3 - h2; s3 the sink
/// with events and a per_flow rule on h1's flow): a rate limit on s1's
/// egress (`impair rate`) builds a queue, which raises queue T and C
/// events naming s1 (node 1) at hop 0, and the per_flow rule reports while
/// the queue moves but not while traffic is steady; a 30 ms delay step on
/// the s1 -> s2 link raises a link-latency C event between s1 and s2 (hop
/// 1, node 2). The events intcollector decodes are all in Redis and in
/// Kafka (a MockCluster run inside s3's namespace).
#[test]
fn chain3_queue_and_link_delay_events_reach_redis_and_kafka() {
    use intswitch_tests::Testbed;
    use rdkafka::mocking::MockCluster;
    let s3_end = "[[int.collector]]\naddress = \"127.0.0.1:32767\"\n\"\"\"";
    let topo = std::fs::read_to_string(Testbed::shipped("chain3"))
        .unwrap()
        .replace("name = \"chain3\"", "name = \"ana3\"")
        .replace(
            "node_id = 3\nedge_ports = [\"p1\"]\n",
            "node_id = 3\nedge_ports = [\"p1\"]\nreport_flow_interval_ms = 600000\n",
        )
        .replace(
            "instructions = [\"node_id\", \"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\"]",
            "instructions = [\"node_id\", \"hop_latency\", \"queue\", \"ingress_ts\", \"egress_ts\"]",
        )
        .replace(
            s3_end,
            "[[int.collector]]\naddress = \"127.0.0.1:32767\"\n\
             [int.analytics]\n[int.analytics.events.queue]\nthreshold = 20\nchange = 10\n\
             [int.analytics.events.link_latency]\nchange = 5000000\n\
             [[int.detect]]\nname = \"h1\"\nsrc = \"10.31.1.2/32\"\ndst_port = \"5555\"\nalgorithm = \"per_flow\"\n\
             metric = \"queue\"\nthreshold = 5\n\"\"\"",
        );
    assert!(
        topo.contains("[int.analytics]") && topo.contains("egress_ts") && topo.contains("600000"),
        "the chain3 file changed"
    );
    let d = Scratch::new("ana3");
    std::fs::write(d.path("ana3.toml"), &topo).unwrap();
    let tb = Testbed::up(&d.path("ana3.toml"));
    let (h1, s3) = (tb.ns("h1"), tb.ns("s3"));
    intswitch_tests::wait_reachable(&h1, "10.31.2.2");

    // Kafka inside s3's namespace, where intcollector runs.
    let (boot_tx, boot_rx) = std::sync::mpsc::channel();
    let (want_tx, want_rx) = std::sync::mpsc::channel::<usize>();
    let ns_path = format!("/var/run/netns/{s3}");
    let kafka = std::thread::spawn(move || {
        let f = std::fs::File::open(&ns_path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let cluster = MockCluster::new(1).unwrap();
        // One partition each: the read-back takes partition 0.
        for t in ["reports", "events", "flows", "histograms"] {
            cluster.create_topic(&format!("int-{t}"), 1, 1).unwrap();
        }
        boot_tx.send(cluster.bootstrap_servers()).unwrap();
        let want = want_rx.recv_timeout(Duration::from_secs(300)).unwrap_or(0);
        kafka_messages(&cluster.bootstrap_servers(), "int-", &[("events", want)])
    });
    let brokers = boot_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let (redis, rsock) = start_redis(&d);
    // Killed by PID however the test ends.
    let _redis = KillOnDrop(redis);
    let collector = Command::new("ip")
        .args(["netns", "exec", &s3])
        .arg(intswitch_tests::workspace_bin("intcollector"))
        .args(["--listen", "127.0.0.1:32767", "--json", "--duration", "120"])
        .args(["--redis", &format!("redis+unix://{}", rsock.display()), "--kafka-brokers", &brokers])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut collector = KillOnDrop(collector);
    let mut stdout = collector.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    std::thread::sleep(Duration::from_millis(500));
    let reported = || tb.intctl("s3", &["int", "detect", "show"])["rules"][0]["reported"].as_u64().unwrap();

    // Steady traffic: no queue, nothing reported.
    send_udp(&h1, 30, 0.02);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(reported(), 0, "steady traffic reports nothing");
    // A 1 Mbit/s bottleneck at s1's egress: two bursts build a queue (and
    // the pause between them drains part of it: a step down).
    assert!(tb.run(&["impair", "s1-s2", "rate", "1mbit"]).0);
    send_udp(&h1, 100, 0.0);
    std::thread::sleep(Duration::from_millis(100));
    send_udp(&h1, 100, 0.0);
    std::thread::sleep(Duration::from_millis(1500));
    let during_queue = reported();
    assert!(during_queue > 3, "the rule reports while the queue moves: {during_queue}");
    assert!(tb.run(&["impair", "s1-s2", "none"]).0);
    // Steady again, then a 30 ms delay step on the s1 -> s2 link.
    send_udp(&h1, 20, 0.02);
    let steady = reported();
    send_udp(&h1, 20, 0.02);
    assert_eq!(reported(), steady, "steady traffic reports nothing");
    assert!(tb.run(&["impair", "s1-s2", "delay", "30ms"]).0);
    send_udp(&h1, 20, 0.02);
    std::thread::sleep(Duration::from_millis(500));

    Command::new("kill").args(["-TERM", &collector.0.id().to_string()]).status().unwrap();
    collector.0.wait().unwrap();
    let lines: Vec<Value> = reader.join().unwrap().lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let events: Vec<&Value> = lines.iter().filter(|v| v["type"] == "int_event").collect();
    let named = |name: &str, hop: u64, node: u64| {
        events.iter().any(|e| {
            e["hop"] == hop && e["node_id"] == node && e["events"].as_array().unwrap().iter().any(|n| n == name)
        })
    };
    assert!(named("queue_t", 0, 1) && named("queue_c", 0, 1), "queue T and C at s1: {events:?}");
    // The step's packet: its link at least the delay (under 80 ms: the rate
    // limit's queue gave 200 ms and more, but only by small steps) and up
    // from the previous packet's. The previous packet's own link is not
    // bounded: a loaded host may have held it in s2 for milliseconds.
    let step: Vec<&&Value> = events
        .iter()
        .filter(|e| e["events"].as_array().unwrap().iter().any(|n| n == "link_latency_c"))
        .filter(|e| {
            let (link, prev) = (e["link_latency"].as_u64().unwrap(), e["prev"]["link_latency"].as_u64().unwrap());
            (30_000_000..80_000_000).contains(&link) && link > prev
        })
        .collect();
    assert!(
        step.iter().any(|e| e["hop"] == 1 && e["node_id"] == 2),
        "a link-latency C event into s2 at the step: {events:?}"
    );
    let summary = lines.iter().find_map(|v| v.get("redis_summary").cloned()).unwrap_or(Value::Null);
    let n = events.len();
    assert_eq!(redis_int(&rsock, &["XLEN", "int:events"]), n as i64, "{summary}");
    want_tx.send(n).unwrap();
    let got = kafka.join().unwrap();
    let ks = lines.iter().find_map(|v| v.get("kafka_summary").cloned()).unwrap_or(Value::Null);
    assert_eq!(got.get("int-events").map_or(0, Vec::len), n, "every event in Kafka: {ks}");
    let (ok, out) = tb.down();
    assert!(ok, "{out}");
}

/// `scripts/analytics_accuracy.py` (bench.sh's `int-sink-analytics-accuracy`)
/// on a small trace, the worker in idle mode: its histograms, flow records,
/// events and reports equal the ground truth and the reference detector, and
/// over the rings' capacity every record is delivered or counted.
#[test]
fn the_accuracy_run_finds_exact_histograms_and_accounts_every_record() {
    let d = Scratch::new("anacc");
    let out = Command::new("python3")
        .arg(intswitch_tests::repo_root().join("scripts/analytics_accuracy.py"))
        .arg("--bin")
        .arg(intswitch_tests::workspace_bin("intswitch"))
        .arg("--intctl")
        .arg(intctl_bin())
        .arg("--collector")
        .arg(intswitch_tests::workspace_bin("intcollector"))
        .arg("--work")
        .arg(d.path("w"))
        .args(["--packets", "20000", "--flows", "200", "--idle"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("case=int-sink-analytics-accuracy")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    for l in &lines {
        for want in ["hist_error_pct=0.00", "collector_lost=0", "ok=yes"] {
            assert!(l.contains(want), "{want}: {l}");
        }
    }
    for want in ["flows_equal=yes", "events_equal=yes", "reports_equal=yes"] {
        assert!(lines[0].contains(want), "{want}: {}", lines[0]);
    }
    // Above capacity the rings did refuse records, each one counted.
    let field = |l: &str, k: &str| -> u64 {
        l.split(' ').find_map(|f| f.strip_prefix(&format!("{k}="))).unwrap().parse().unwrap()
    };
    assert!(field(lines[1], "events_ring_full") > 0 && field(lines[1], "flows_ring_full") > 0, "{}", lines[1]);
    for want in ["events_accounted=yes", "flows_accounted=yes", "delivery_accounted=yes"] {
        assert!(lines[1].contains(want), "{want}: {}", lines[1]);
    }
}

/// intcollector on an ephemeral port, its stdout read by a thread; the
/// port from its start-up line on stderr.
fn collector_on_any_port() -> (std::process::Child, std::thread::JoinHandle<String>, String) {
    collector_on_any_port_with(&[])
}

/// `collector_on_any_port` with more arguments.
fn collector_on_any_port_with(more: &[&str]) -> (std::process::Child, std::thread::JoinHandle<String>, String) {
    let mut args = vec!["--listen", "127.0.0.1:0", "--json", "--quiet", "--duration", "60"];
    args.extend_from_slice(more);
    let (mut child, reader) = spawn_collector(&args, true);
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    for _ in 0..8 {
        let mut l = String::new();
        if std::io::BufRead::read_line(&mut err, &mut l).unwrap() == 0 {
            break;
        }
        if let Some(rest) = l.strip_prefix("intcollector: listening on ") {
            addr = rest.split_whitespace().next().map(str::to_string);
            break;
        }
    }
    let addr = addr.expect("intcollector printed no listening line");
    // The rest of stderr (a warning at most) is read away in the background.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (child, reader, addr)
}

fn signal(c: &std::process::Child, sig: &str) {
    assert!(Command::new("kill").args([sig, &c.id().to_string()]).status().unwrap().success());
}

/// Records sent before a stop are counted, not left in the socket: the
/// collector, stopped (SIGSTOP) while a burst of records queues on its
/// socket, is told to stop (SIGTERM) and resumed; it drains the socket
/// before its summary, so every record is counted and none is lost. Two
/// stop signals (SIGINT, SIGTERM) end it at once: status 1, no summary.
#[test]
fn a_stopping_collector_counts_what_its_socket_already_holds() {
    const BURST: u64 = 2_000;
    let (c, reader, addr) = collector_on_any_port();
    signal(&c, "-STOP");
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..BURST {
        let r = format!(
            "{{\"type\":\"int_flow\",\"node\":7,\"seq\":{seq},\"reason\":\"stop\",\"packets\":1,\"hop\":[],\
\"flow\":{{\"src\":\"10.0.0.1\",\"dst\":\"10.0.0.2\",\"proto\":17,\"sport\":{seq},\"dport\":5001}}}}"
        );
        tx.send_to(r.as_bytes(), &addr).unwrap();
    }
    signal(&c, "-TERM");
    signal(&c, "-CONT");
    let mut c = c;
    assert!(c.wait().unwrap().success());
    let text = reader.join().unwrap();
    let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let f = lines
        .iter()
        .find_map(|v| v.get("int_flow_summary"))
        .unwrap_or_else(|| panic!("no record taken: those queued at the stop were left in the socket: {text}"));
    let s = lines.iter().find_map(|v| v.get("summary")).expect(&text);
    assert_eq!(f["records"].as_u64(), Some(BURST), "{text}");
    assert_eq!(f["records_lost"].as_u64(), Some(0), "{text}");
    assert_eq!(s["datagrams"].as_u64(), Some(BURST), "{text}");
    // At most one receive call's batch (32) may have been under way at the stop.
    assert!(s["drained"].as_u64().unwrap() >= BURST - 32, "{text}");
    assert_eq!(s["socket_drops"].as_u64(), Some(0), "{text}");

    // The same burst onto a receive buffer of 4 KiB: the kernel drops most
    // of it, and what it dropped is counted, so every record sent is a
    // number in the summary (sequence gaps cannot see a burst's tail).
    let (c, reader, addr) = collector_on_any_port_with(&["--rcvbuf", "4096"]);
    signal(&c, "-STOP");
    for seq in 0..BURST {
        tx.send_to(format!("{{\"type\":\"int_flow\",\"node\":7,\"seq\":{seq}}}").as_bytes(), &addr).unwrap();
    }
    signal(&c, "-TERM");
    signal(&c, "-CONT");
    let mut c = c;
    assert!(c.wait().unwrap().success());
    let text = reader.join().unwrap();
    let s = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|v| v.get("summary").cloned());
    let s = s.expect(&text);
    let (got, dropped) = (s["datagrams"].as_u64().unwrap(), s["socket_drops"].as_u64().unwrap());
    assert!(dropped > 0, "{text}");
    assert_eq!(got + dropped, BURST, "{text}");

    let (c, reader, addr) = collector_on_any_port();
    signal(&c, "-STOP");
    for seq in 0..BURST {
        tx.send_to(format!("{{\"type\":\"int_flow\",\"node\":7,\"seq\":{seq}}}").as_bytes(), &addr).unwrap();
    }
    signal(&c, "-INT");
    signal(&c, "-TERM");
    signal(&c, "-CONT");
    let mut c = c;
    assert_eq!(c.wait().unwrap().code(), Some(1));
    let text = reader.join().unwrap();
    assert!(!text.contains("summary"), "{text}");
}
