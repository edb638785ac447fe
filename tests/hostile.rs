//! The hostile-packet corpus (tests/hostile_corpus.py, written from the
//! specs) replayed once through a switch in every role, net_pcap in and
//! out: no crash, every received frame transmitted or dropped under a named
//! reason (rx == tx + drops, exactly), and every transmitted frame either a
//! received frame unchanged, one routed (only L2, TTL and the IPv4 checksum
//! rewritten, that checksum right), or well-formed by the corpus script's
//! independent parser (a sink sends no INT).

use std::path::{Path, PathBuf};
use std::process::Command;

use intswitch_tests::{read_pcap, run_for, Scratch};
use serde_json::Value;

const P0_MAC: &str = "02:00:00:00:01:01";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hostile_corpus.py")
}

const ADDR0: &str = "ipv4 = [\"10.0.1.1/24\"]\nipv6 = [\"2001:db8:1::1/64\"]\n";
const ADDR1: &str = "ipv4 = [\"10.0.2.1/24\"]\nipv6 = [\"2001:db8:2::1/64\"]\n";
const XC0: &str = "peer = \"p1\"\n";
const XC1: &str = "peer = \"p0\"\n";
const NEIGHBOURS: &str = "[[neighbour]]\nip = \"10.0.2.10\"\nmac = \"02:00:00:00:02:0a\"\nport = \"p1\"\n\
[[neighbour]]\nip = \"2001:db8:2::10\"\nmac = \"02:00:00:00:02:0a\"\nport = \"p1\"\n";
const AMPM_FLOWS: &str = "[[ampm.flow]]\nname = \"v6\"\nflow_mon_id = 5\nrole = \"ROLE\"\nmethod = \"double\"\n\
carrier = \"ipv6_hbh\"\nsrc = \"2001:db8:1::/64\"\n[[ampm.flow]]\nname = \"v4\"\nflow_mon_id = 6\nrole = \"ROLE\"\n\
method = \"muxed\"\ncarrier = \"dscp\"\nsrc = \"10.0.1.0/24\"\n";

/// (name, mode, p0's and p1's extra keys, further config, sink check) per role.
fn roles() -> Vec<(String, String, String, String, String, bool)> {
    let ampm = |role: &str, node: u32| {
        format!("[ampm]\nnode_id = {node}\ninterval = \"1s\"\n{}", AMPM_FLOWS.replace("ROLE", role))
    };
    let list: Vec<(&str, &str, String, String, String, bool)> = vec![
        ("bridge", "bridge", String::new(), String::new(), String::new(), false),
        ("router", "router", ADDR0.into(), ADDR1.into(), NEIGHBOURS.into(), false),
        (
            "int-source",
            "router",
            ADDR0.into(),
            ADDR1.into(),
            format!("{NEIGHBOURS}[int]\nnode_id = 1\nedge_ports = [\"p0\"]\n[[int.watch]]\nname = \"all\"\nrole = \"source\"\n\
instructions = [\"node_id\", \"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\"]\n"),
            false,
        ),
        ("int-transit", "xconnect", XC0.into(), XC1.into(), "[int]\nnode_id = 2\n".into(), false),
        (
            "int-transit-dscp",
            "xconnect",
            XC0.into(),
            XC1.into(),
            "[int]\nnode_id = 2\npresence = \"dscp\"\ndscp_value = 0x17\n".into(),
            false,
        ),
        (
            "int-sink",
            "xconnect",
            XC0.into(),
            XC1.into(),
            "[int]\nnode_id = 3\nedge_ports = [\"p1\"]\n[[int.collector]]\naddress = \"127.0.0.1:9\"\n".into(),
            true,
        ),
        (
            "int-sink-analytics",
            "xconnect",
            XC0.into(),
            XC1.into(),
            "[int]\nnode_id = 3\nedge_ports = [\"p1\"]\n[[int.collector]]\naddress = \"127.0.0.1:9\"\n\
[int.analytics]\ncache_rows = 1024\n[int.analytics.events.hop_latency]\nthreshold = 1\n"
                .into(),
            true,
        ),
        ("ampm-initiator", "xconnect", XC0.into(), XC1.into(), ampm("initiator", 1), false),
        ("ampm-transit", "xconnect", XC0.into(), XC1.into(), ampm("transit", 2), false),
        ("ampm-terminator", "xconnect", XC0.into(), XC1.into(), ampm("terminator", 3), false),
        (
            "int-label",
            "xconnect",
            XC0.into(),
            XC1.into(),
            "[int]\nnode_id = 4\n[label]\ninterval_ms = 0.001\nseed = 3\n".into(),
            false,
        ),
        // The SQR stage's claim check (and probe parsing, where a frame
        // looks like one) before forwarding.
        (
            "gpint-transit",
            "xconnect",
            XC0.into(),
            XC1.into(),
            "[int]\nnode_id = 5\n[[int.collector]]\naddress = \"127.0.0.1:9\"\n[gpint]\nhold_ms = 1\n".into(),
            false,
        ),
    ];
    list.into_iter().map(|(a, b, c, d, e, f)| (a.into(), b.into(), c, d, e, f)).collect()
}

#[test]
fn the_hostile_corpus_through_every_role_is_forwarded_or_dropped_by_name_and_leaves_well_formed() {
    let d = Scratch::new("hostile");
    let corpus = d.path("corpus.pcap");
    let out =
        Command::new("python3").arg(script()).arg("make").arg(&corpus).args(["--dst-mac", P0_MAC]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made: Value = serde_json::from_slice(&out.stdout).unwrap();
    let frames = made["frames"].as_u64().unwrap();
    assert!(frames > 600, "{made}");
    for (name, mode, p0, p1, extra, sink) in roles() {
        let tx = d.path(&format!("{name}-tx.pcap"));
        let cfg = format!(
            "name = \"{name}\"\nmode = \"{mode}\"\n[eal]\nfile_prefix = \"hostile-{name}-{pid}\"\n[dataplane]\nidle = true\n\
mbufs = 4095\n[control]\nsocket = \"{sock}\"\nmetrics = \"\"\n[[port]]\nname = \"p0\"\n\
device = \"net_pcap0,rx_pcap={corpus}\"\nmac = \"{P0_MAC}\"\n{p0}[[port]]\nname = \"p1\"\n\
device = \"net_pcap1,tx_pcap={tx}\"\n{p1}{extra}",
            pid = std::process::id(),
            sock = d.path(&format!("{name}.sock")).display(),
            corpus = corpus.display(),
            tx = tx.display(),
        );
        let path = d.path(&format!("{name}.toml"));
        std::fs::write(&path, cfg).unwrap();
        let c = run_for(&path, 2.0);
        let ports = c["ports"].as_array().unwrap();
        let rx: u64 = ports.iter().map(|p| p["rx_packets"].as_u64().unwrap()).sum();
        let txn: u64 = ports.iter().map(|p| p["tx_packets"].as_u64().unwrap()).sum();
        let drops = c["total_drops"].as_u64().unwrap();
        let by_name: u64 = c["drops"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        let ev = |k: &str| c["events"][k].as_u64().unwrap_or(0);
        // A GPINT transit's feedbacks are its own; what its SQR stage takes
        // (feedbacks, duplicate and delivered probes) is neither sent nor dropped.
        let injected = ev("injected") + ev("gpint_fb_tx");
        let consumed = ev("gpint_fb_rx") + ev("gpint_dup") + ev("gpint_delivered");
        assert_eq!(rx, frames, "{name}: every corpus frame received: {c}");
        assert_eq!(by_name, drops, "{name}: every drop has its reason: {c}");
        assert_eq!(rx, txn - injected + drops + consumed, "{name}: rx == tx + drops: {c}");
        let sent = read_pcap(&tx);
        assert_eq!(sent.len() as u64, ports[1]["tx_packets"].as_u64().unwrap(), "{name}");
        let mut check = Command::new("python3");
        check.arg(script()).arg("check").arg(&corpus).arg(&tx);
        if sink {
            check.arg("--sink");
        }
        if !extra.contains("[int]") {
            // (No INT domain here: a block to the INT port is only payload.)
            check.args(["--int-port", "0"]);
        }
        let o = check.output().unwrap();
        let verdict: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| panic!("{name}: {}", String::from_utf8_lossy(&o.stderr)));
        assert!(o.status.success(), "{name}: transmitted frames not well-formed: {verdict}");
        let named: Vec<String> = c["drops"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| v.as_u64() != Some(0))
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        eprintln!(
            "{name}: {rx} received, {} sent ({} unchanged, {} routed, {} checked), {drops} dropped: {}",
            sent.len(),
            verdict["unchanged"],
            verdict["routed"],
            verdict["checked"],
            named.join(", ")
        );
    }
}
