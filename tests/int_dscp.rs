//! INT with DSCP presence (NPT=0) end to end: the chain3 testbed with
//! `presence = "dscp"` on all three switches. h2 must receive every byte and
//! the DSCP h1 sent (the sink restores it); the INT block must sit after the
//! TCP options / UDP header with valid TCP and UDP checksums on the wire,
//! checked by the independent decoder (tests/int_decode.py); intcollector
//! (`--int-dscp`) must see three hops per report.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread::JoinHandle;
use std::time::Duration;

use intswitch_tests::{
    collector_reports, intctl_bin, report_flow, tcp_transfer, udp_exchange, wait_reachable, Testbed, CHAIN3_FLOWS,
};
use serde_json::Value;

const DATAGRAMS: usize = 100;

fn decoder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("int_decode.py")
}

/// chain3 as shipped, turned into a DSCP domain (codepoint 0x17).
fn dscp_topology() -> PathBuf {
    let text = std::fs::read_to_string(Testbed::shipped("chain3")).unwrap();
    let text = text
        .replace("name = \"chain3\"", "name = \"chain3d\"")
        .replace("[int]\n", "[int]\npresence = \"dscp\"\ndscp_value = 0x17\n")
        .replace("--json\"", "--json --int-dscp 0x17\"");
    assert_eq!(text.matches("presence = \"dscp\"").count(), 3);
    let path = std::env::temp_dir().join(format!("chain3d-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// `intctl capture` of `count` frames s2 sends to s3, in the background.
fn capture(tb: &Testbed, out: &Path, count: usize) -> JoinHandle<Output> {
    let (sock, file) = (tb.socket("s2"), out.to_path_buf());
    let h = std::thread::spawn(move || {
        Command::new(intctl_bin())
            .arg("--socket")
            .arg(sock)
            .args(["capture", "p1", "--tx", "--count", &count.to_string(), "--timeout", "60", "--out"])
            .arg(file)
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(500));
    h
}

/// The independent decoder's view of a capture: one JSON value per frame.
fn decode(capture: JoinHandle<Output>, pcap: &Path) -> Vec<Value> {
    let out = capture.join().unwrap();
    assert!(out.status.success(), "capture: {}", String::from_utf8_lossy(&out.stderr));
    let dec =
        Command::new("python3").arg(decoder()).arg("pcap").arg(pcap).args(["--int-dscp", "0x17"]).output().unwrap();
    assert!(dec.status.success(), "{}", String::from_utf8_lossy(&dec.stderr));
    let _ = std::fs::remove_file(pcap);
    String::from_utf8_lossy(&dec.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// What every INT packet between s2 and s3 must look like.
fn check_on_wire(p: &Value) {
    assert!(p.get("error").is_none(), "{p}");
    assert_eq!((p["npt"].as_u64(), p["dscp"].as_u64(), p["version"].as_u64()), (Some(0), Some(0x17), Some(2)), "{p}");
    let nodes: Vec<u64> = p["hops"].as_array().unwrap().iter().map(|h| h["node_id"].as_u64().unwrap()).collect();
    assert_eq!(nodes, vec![2, 1], "{p}");
    if p["src"].as_str().unwrap().contains('.') {
        assert_eq!(p["ip_checksum_ok"], true, "{p}");
    }
}

#[test]
fn chain3_int_by_dscp_over_tcp_and_udp() {
    let file = dscp_topology();
    let tb = Testbed::up(&file);
    for to in ["10.31.2.2", "2001:db8:31:2::2"] {
        wait_reachable(&tb.ns("h1"), to);
    }
    let (h1, h2) = (tb.ns("h1"), tb.ns("h2"));
    let s3 = tb.intctl("s3", &["show", "int"]);
    assert_eq!(s3["presence"]["method"], "dscp", "{s3}");
    let s3ns = tb.ns("s3");
    let listener = std::thread::spawn(move || {
        Command::new("ip")
            .args(["netns", "exec", &s3ns, "python3"])
            .arg(decoder())
            .args(["listen", "127.0.0.1:32767", "--count", "10", "--timeout", "60", "--int-dscp", "0x17"])
            .output()
            .unwrap()
    });

    // TCP first, with the capture on: segments with options (SYN, and the
    // timestamps option on every segment), INT after them.
    let pcap = std::env::temp_dir().join(format!("int-dscp-tcp-{}.pcap", std::process::id()));
    let cap = capture(&tb, &pcap, 20);
    tcp_transfer(&h1, &h2, "10.31.2.2", 1 << 20);
    let tcp = decode(cap, &pcap);
    assert_eq!(tcp.len(), 20);
    let mut with_payload = 0;
    for p in &tcp {
        check_on_wire(p);
        assert_eq!(
            (p["proto"].as_u64(), p["orig_dport"].as_u64(), p["orig_dscp"].as_u64()),
            (Some(6), Some(5201), Some(0))
        );
        assert_eq!(p["tcp_checksum_ok"], true, "{p}");
        with_payload += (p["ip_end"].as_u64().unwrap() > 300) as u32;
    }
    assert!(with_payload > 0, "the capture saw data segments");

    // UDP with a DSCP of its own (AF11 = 10): marked 0x17 on the wire, 10
    // again at h2.
    let pcap = std::env::temp_dir().join(format!("int-dscp-udp-{}.pcap", std::process::id()));
    // 60 frames of the 100 datagrams: the TCP flow's late segments (14 of
    // 20 frames once in CI) cannot crowd the UDP flow out of the capture.
    let cap = capture(&tb, &pcap, 60);
    udp_exchange(&h1, &h2, "10.31.2.2", 5001, DATAGRAMS, 10 << 2);
    let mut udp = 0;
    for p in &decode(cap, &pcap) {
        check_on_wire(p);
        // The TCP transfer's closing segments can still cross after it
        // returned: INT-marked TCP of that flow, checked as such.
        if p["proto"].as_u64() == Some(6) {
            assert_eq!((p["orig_dport"].as_u64(), p["orig_dscp"].as_u64()), (Some(5201), Some(0)), "{p}");
            assert_eq!(p["tcp_checksum_ok"], true, "{p}");
            continue;
        }
        assert_eq!(
            (p["proto"].as_u64(), p["orig_dport"].as_u64(), p["orig_dscp"].as_u64()),
            (Some(17), Some(5001), Some(10))
        );
        assert_eq!((p["udp_length_ok"].as_bool(), p["udp_checksum_ok"].as_bool()), (Some(true), Some(true)), "{p}");
        udp += 1;
    }
    assert!(udp >= 15, "the capture holds the UDP flow: {udp} of 60 frames");
    udp_exchange(&h1, &h2, "2001:db8:31:2::2", 5002, DATAGRAMS, 46 << 2);
    tcp_transfer(&h1, &h2, "2001:db8:31:2::2", 1 << 20);
    std::thread::sleep(Duration::from_millis(500));

    // Every packet s1 sourced was transited and sunk; nothing malformed.
    let ev = |sw: &str, name: &str| {
        let v = tb.intctl(sw, &["show", "int"]);
        v["counters"][name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {v}"))
    };
    let sourced = ev("s1", "int_sourced");
    assert!(sourced >= 2 * DATAGRAMS as u64 + 700, "sourced {sourced}");
    assert_eq!((ev("s2", "int_transited"), ev("s3", "int_sunk")), (sourced, sourced));
    for sw in ["s1", "s2", "s3"] {
        for name in ["int_passed_truncated", "int_passed_bad_version", "int_passed_bad_hop_ml", "int_passed_bad_stack"]
        {
            assert_eq!(ev(sw, name), 0, "{sw} {name}");
        }
    }

    // intcollector with --int-dscp: three hops per report, each flow with
    // its own protocol and ports.
    let reports = collector_reports(&tb.log("c3"), sourced);
    for v in &reports {
        let nodes: Vec<u64> = v["hops"].as_array().unwrap().iter().map(|h| h["node_id"].as_u64().unwrap()).collect();
        assert_eq!(nodes, vec![1, 2, 3], "{v}");
    }
    assert_eq!(reports.len() as u64, sourced, "intcollector decoded every report\n{}", tb.report_path("s3"));
    let flows: HashSet<_> = reports.iter().map(report_flow).collect();
    for f in CHAIN3_FLOWS {
        assert!(flows.contains(&(f.0.to_string(), f.1, f.2)), "flow {f:?} not reported: {flows:?}");
    }

    // The independent decoder on report packets: inner packets found by DSCP.
    let out = listener.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for line in text.lines().skip(1) {
        let g: Value = serde_json::from_str(line).unwrap();
        assert!(g.get("error").is_none(), "{g}");
        for r in g["reports"].as_array().unwrap() {
            assert_eq!((r["inner"]["npt"].as_u64(), r["inner"]["dscp"].as_u64()), (Some(0), Some(0x17)), "{r}");
            assert_eq!(r["inner"]["hops"].as_array().unwrap().len(), 2, "{r}");
        }
    }
    let (ok, out) = tb.down();
    assert!(ok, "{out}");
    let _ = std::fs::remove_file(file);
}
