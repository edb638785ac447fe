//! The TRex STL profiles (`scripts/trex/`) checked offline: PyPI's
//! trex-stl-lib (in a venv under target/) loads each profile as TRex's
//! console would, `tests/trex_replay.py` plays the streams' field engines
//! into a pcap, and the pcap goes once through a switch in the role the
//! profile is for (net_pcap in and out): every frame is forwarded, and the
//! frames carry INT, AltMark or labels as intended and decode.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use intswitch_tests::{int_decode, read_pcap, run_for, Scratch};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The venv with trex-stl-lib (made once, kept in target/).
fn venv_python() -> PathBuf {
    let venv = repo().join("target/trex-venv");
    let py = venv.join("bin/python");
    if !py.exists() {
        let st = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().unwrap();
        assert!(st.success(), "python3 -m venv (python3-venv, installed by scripts/setup.sh)");
        let out = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check", "trex-stl-lib==0.3"])
            .output()
            .unwrap();
        assert!(out.status.success(), "pip install trex-stl-lib: {}", String::from_utf8_lossy(&out.stderr));
    }
    py
}

/// Plays `profile` into `out` (count frames); the replay's summary.
fn replay(profile: &str, out: &Path, count: usize, tunables: &[&str]) -> Value {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo().join("tests/trex_replay.py")).arg(repo().join("scripts/trex").join(profile)).arg(out);
    cmd.args(["--count", &count.to_string()]);
    for t in tunables {
        cmd.args(["--tunable", t]);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{profile}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// One pass of `input` through an xconnect switch (p0 -> p1, net_pcap both
/// ways) with `extra` config: its final counters and what p1 sent.
fn through_switch(d: &Scratch, name: &str, input: &Path, extra: &str) -> (Value, Vec<Vec<u8>>) {
    let out = d.path(&format!("{name}-out.pcap"));
    let cfg = format!(
        "name = \"{name}\"\nmode = \"xconnect\"\n[eal]\nfile_prefix = \"{name}-{pid}\"\n[dataplane]\nidle = true\n\
mbufs = 8191\n[control]\nsocket = \"{sock}\"\nmetrics = \"\"\n[[port]]\nname = \"p0\"\n\
device = \"net_pcap0,rx_pcap={input}\"\npeer = \"p1\"\n[[port]]\nname = \"p1\"\ndevice = \"net_pcap1,tx_pcap={out}\"\n\
peer = \"p0\"\n{extra}",
        pid = std::process::id(),
        sock = d.path(&format!("{name}.sock")).display(),
        input = input.display(),
        out = out.display(),
    );
    let path = d.path(&format!("{name}.toml"));
    std::fs::write(&path, cfg).unwrap();
    let counters = run_for(&path, 2.0);
    (counters, read_pcap(&out))
}

fn forwarded_all(c: &Value, n: usize, what: &str) {
    assert_eq!(c["ports"][0]["rx_packets"].as_u64(), Some(n as u64), "{what}: {c}");
    assert_eq!(c["ports"][1]["tx_packets"].as_u64(), Some(n as u64), "{what}: {c}");
    assert_eq!(c["total_drops"], 0, "{what}: {c}");
}

/// The AltMark option's data word in an IPv6 frame's Hop-by-Hop header.
fn altmark(f: &[u8]) -> Option<u32> {
    if f[12..14] != [0x86, 0xdd] || f[20] != 0 {
        return None;
    }
    let (mut o, end) = (56, 54 + 8 * (f[55] as usize + 1));
    while o + 2 <= end {
        match f[o] {
            0 => o += 1,
            0x12 => return Some(u32::from_be_bytes(f[o + 2..o + 6].try_into().unwrap())),
            _ => o += 2 + f[o + 1] as usize,
        }
    }
    None
}

#[test]
fn every_trex_profile_loads_and_its_frames_go_through_the_switch_as_intended() {
    let d = Scratch::new("trex");

    // Plain UDP/TCP over 1000 flows (v4 and v6): forwarded byte for byte.
    let p = d.path("flows.pcap");
    let s = replay("udp_tcp_flows.py", &p, 4000, &["flows=1000"]);
    assert!(s["flows"].as_u64().unwrap() >= 1000, "the field engine varies the flows: {s}");
    let (c, out) = through_switch(&d, "trexflows", &p, "");
    forwarded_all(&c, 4000, "udp_tcp_flows");
    assert_eq!(out, read_pcap(&p), "a cross-connect forwards the frames unchanged");

    // IMIX: the three sizes in 7:4:1.
    let p = d.path("imix.pcap");
    let s = replay("imix.py", &p, 1200, &[]);
    // (IPv6's smallest frame is 66 bytes: its headers do not fit in 64.)
    let n = |k: &str| s["wire_sizes"][k].as_u64().unwrap_or(0);
    assert_eq!((n("64") + n("66"), n("594"), n("1518")), (700, 400, 100), "{s}");
    let (c, _) = through_switch(&d, "treximix", &p, "");
    forwarded_all(&c, 1200, "imix");

    // Frames already carrying 2 hops of INT: a transit pushes the third.
    let p = d.path("int.pcap");
    let s = replay("int_frames.py", &p, 1000, &["hops=2", "flows=500"]);
    assert_eq!(s["flows"], 500, "{s}");
    let (c, out) = through_switch(&d, "trextransit", &p, "[int]\nnode_id = 3\n");
    forwarded_all(&c, 1000, "int transit");
    intswitch_tests::write_pcap(&d.path("transit-out.pcap"), &out);
    for f in int_decode("pcap", &d.path("transit-out.pcap"), &[]) {
        assert!(f.get("error").is_none(), "{f}");
        let nodes: Vec<u64> = f["hops"].as_array().unwrap().iter().map(|h| h["node_id"].as_u64().unwrap()).collect();
        assert_eq!(nodes, [3, 2, 1], "{f}");
        assert_eq!((f["udp_checksum_ok"].as_bool(), f["ip_checksum_ok"].as_bool()), (Some(true), Some(true)), "{f}");
    }
    // ... and a sink at its edge takes it off again.
    let (c, out) = through_switch(&d, "trexsink", &p, "[int]\nnode_id = 3\nedge_ports = [\"p1\"]\n");
    forwarded_all(&c, 1000, "int sink");
    assert!(out.iter().all(|f| f[23] == 17 && f[36..38] == 5001u16.to_be_bytes()), "restored to UDP port 5001");

    // AM-PM: an initiator marks the flows to 5001 in a Hop-by-Hop option ...
    let p = d.path("ampm.pcap");
    replay("ampm_flows.py", &p, 1000, &["flows=50"]);
    let flow =
        "[[ampm.flow]]\nname = \"f\"\nflow_mon_id = 77\nrole = \"ROLE\"\nmethod = \"double\"\ncarrier = \"ipv6_hbh\"\n\
src = \"2001:db8:1::/64\"\nproto = \"udp\"\ndst_port = 5001\n";
    let init = format!("[ampm]\nnode_id = 1\ninterval = \"1s\"\n{}", flow.replace("ROLE", "initiator"));
    let (c, out) = through_switch(&d, "trexampm", &p, &init);
    forwarded_all(&c, 1000, "ampm initiator");
    let marked: Vec<u32> = out.iter().filter_map(|f| altmark(f)).collect();
    assert_eq!(marked.len(), 500, "the 5001 half is marked, the 5002 half is not");
    assert!(marked.iter().all(|v| v >> 12 == 77));
    // ... and pre-marked frames (marked=1) lose the option at a terminator.
    let p = d.path("ampm-marked.pcap");
    replay("ampm_flows.py", &p, 1000, &["flows=50", "marked=1", "flow_mon_id=77"]);
    assert!(read_pcap(&p).iter().all(|f| altmark(f).is_some_and(|v| v >> 12 == 77)));
    let term = format!("[ampm]\nnode_id = 2\ninterval = \"1s\"\n{}", flow.replace("ROLE", "terminator"));
    let (c, out) = through_switch(&d, "trexterm", &p, &term);
    forwarded_all(&c, 1000, "ampm terminator");
    assert_eq!(out.iter().filter(|f| altmark(f).is_some()).count(), 500, "the 5001 half is cleared");

    // INT-label: a switch labels the domain's traffic (DSCP presence, DS ID 0x4c42).
    let p = d.path("label.pcap");
    let s = replay("label_domain.py", &p, 3000, &["flows=200"]);
    assert!(s["flows"].as_u64().unwrap() >= 600, "{s}");
    let lab = "[int]\nnode_id = 21\n[label]\ninterval_ms = 0.001\nseed = 7\n";
    let (c, out) = through_switch(&d, "trexlabel", &p, lab);
    forwarded_all(&c, 3000, "label");
    intswitch_tests::write_pcap(&d.path("label-out.pcap"), &out);
    let decoded = int_decode("pcap", &d.path("label-out.pcap"), &["--int-dscp", "0x17"]);
    let labeled: Vec<&Value> = decoded.iter().filter(|f| f.get("error").is_none()).collect();
    assert!(!labeled.is_empty(), "some packets carry a label");
    let protos: BTreeSet<u64> = labeled.iter().map(|f| f["proto"].as_u64().unwrap()).collect();
    for f in &labeled {
        assert_eq!((f["domain_id"].as_u64(), f["hops"][0]["node_id"].as_u64()), (Some(0x4c42), Some(21)), "{f}");
    }
    eprintln!("label: {} of 3000 packets labeled, protocols {protos:?}", labeled.len());
}
