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
use intswitch_tests::{control_section, intctl_bin, read_pcap, write_pcap, Scratch, SwitchProcess};
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
    let mut child = Command::new(intswitch_tests::workspace_bin("intcollector"))
        .args(["--listen", listen, "--json", "--duration", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    std::thread::sleep(Duration::from_millis(300));
    (child, reader)
}

/// Stops intcollector (SIGTERM: it prints its summary) and returns the
/// int_flow records it printed and its int_flow summary.
fn collected((mut c, reader): (std::process::Child, std::thread::JoinHandle<String>)) -> (Vec<Value>, Value) {
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill").args(["-TERM", &c.id().to_string()]).status().unwrap();
    c.wait().unwrap();
    let text = reader.join().unwrap();
    let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let summary = lines.iter().find_map(|v| v.get("int_flow_summary").cloned()).unwrap_or(Value::Null);
    (lines.into_iter().filter(|v| v["type"] == "int_flow").collect(), summary)
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
    let t = IntTraffic { udp_port: 17768, bitmap: 0xf000, hops: HOPS as u8, rhc: 2 };
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

#[test]
fn flow_records_merge_to_exactly_what_the_packets_carried() {
    let id = std::process::id() % 100_000;
    let d = Scratch::new("intana");
    let p = |f: &str| d.path(f).display().to_string();
    let (frames, truth) = frames();
    assert_eq!(truth.len(), FLOWS);
    write_pcap(&d.path("in.pcap"), &frames);
    let listen = format!("127.0.0.1:{}", 20_000 + (id + 11) % 30_000);
    let collector = start_collector(&listen);
    // 4 x 4 = 16 entries for 24 flows: LRU exports all along.
    let cfg = format!(
        "name = \"intana\"\nmode = \"xconnect\"\n[eal]\nlcores = \"0-1\"\nfile_prefix = \"intana-{id}\"\n\
[dataplane]\nidle = true\nmbufs = 4095\n[flow_table]\nlearn = false\n{}\n[[port]]\nname = \"p0\"\n\
device = \"net_pcap0,rx_pcap={}\"\npeer = \"p1\"\n[[port]]\nname = \"p1\"\ndevice = \"net_pcap1,tx_pcap={}\"\n\
peer = \"p0\"\n[int]\nnode_id = 9\nedge_ports = [\"p1\"]\nreport_flow_interval_ms = 600000\n\
[int.analytics]\ncache_rows = 4\ncache_ways = 4\ncache_max_hops = 2\nidle_timeout = 0\nflow_ring_size = 4096\n\
[[int.collector]]\naddress = \"{listen}\"\n",
        control_section(&d),
        p("in.pcap"),
        p("out.pcap"),
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), None);
    let sock = d.path("sw.sock");
    wait_for("every frame sunk", || {
        intctl(&sock, &["show", "int"])["counters"]["int_sunk"].as_u64() == Some(SENT as u64)
    });
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
    let (records, summary) = collected(collector);
    assert_eq!(summary["records"].as_u64(), Some(exported), "{summary}");
    assert_eq!((summary["records_lost"].as_u64(), summary["bad_records"].as_u64()), (Some(0), Some(0)), "{summary}");
    let mut seqs = Vec::new();
    for v in &records {
        {
            assert_eq!((v["type"].as_str(), v["node"].as_u64()), (Some("int_flow"), Some(9)), "{v}");
            assert!(matches!(v["reason"].as_str(), Some("lru" | "flush")), "{v}");
            assert_eq!(v["path"], serde_json::json!([1, 2]), "{v}");
            assert_eq!(v["flow"]["dst_port"], 5001, "the original destination port: {v}");
            seqs.push(v["seq"].as_u64().unwrap());
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
    assert_eq!(seqs, (0..exported).collect::<Vec<_>>(), "one gapless sequence");
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
    let id = std::process::id() % 100_000;
    let d = Scratch::new("intstop");
    let p = |f: &str| d.path(f).display().to_string();
    let (frames, truth) = frames();
    write_pcap(&d.path("in.pcap"), &frames);
    let listen = format!("127.0.0.1:{}", 20_000 + (id + 13) % 30_000);
    let collector = start_collector(&listen);
    let cfg = format!(
        "name = \"intstop\"\nmode = \"xconnect\"\n[eal]\nlcores = \"0-1\"\nfile_prefix = \"intstop-{id}\"\n\
[dataplane]\nidle = true\nmbufs = 4095\n{}\n[[port]]\nname = \"p0\"\ndevice = \"net_pcap0,rx_pcap={}\"\n\
peer = \"p1\"\n[[port]]\nname = \"p1\"\ndevice = \"net_pcap1,tx_pcap={}\"\npeer = \"p0\"\n[int]\nnode_id = 4\n\
edge_ports = [\"p1\"]\n[int.analytics]\ncache_rows = 64\n[[int.collector]]\naddress = \"{listen}\"\n",
        control_section(&d),
        p("in.pcap"),
        p("out.pcap"),
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), None);
    let sock = d.path("sw.sock");
    wait_for("every frame sunk", || {
        intctl(&sock, &["show", "int"])["counters"]["int_sunk"].as_u64() == Some(SENT as u64)
    });
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
