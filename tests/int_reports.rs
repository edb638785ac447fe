//! The INT sink on one switch fed raw frames through net_af_packet: the
//! report ring overflows exactly while export is paused, and malformed INT
//! blocks are dropped under their named reasons; reports leave through a
//! DPDK port; and, on net_pcap, two workers' rings make one sequence, and
//! the report interval reports each flow once without flow learning.

use std::process::Command;
use std::time::{Duration, Instant};

use control::traffic::{int_frame, IntTraffic, TrafficSpec};
use intswitch_tests::{control_section, intctl_bin, ns, read_pcap, write_pcap, Namespaces, Scratch, SwitchProcess};
use serde_json::Value;

const RING: u64 = 64;
const SENT: u64 = 300;

fn watched_frame(i: usize) -> Vec<u8> {
    let spec = TrafficSpec {
        flows: 8,
        frame_len: 120,
        ..TrafficSpec::udp("10.70.0.1".parse().unwrap(), "10.70.0.2".parse().unwrap(), 1)
    };
    int_frame(&spec, i, &IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap: 0xf000, hops: 1, rhc: 7 })
        .unwrap()
}

fn intctl(sock: &std::path::Path, args: &[&str]) -> Value {
    let out = Command::new(intctl_bin()).arg("--socket").arg(sock).arg("--json").args(args).output().unwrap();
    assert!(out.status.success(), "intctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Sends the frames of a pcap out of `iface` in namespace `netns` (AF_PACKET).
fn send_raw(netns: &str, iface: &str, pcap: &std::path::Path) {
    let py = format!(
        "import socket,struct\nd=open('{}','rb').read()\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n\
s.bind(('{iface}',0))\no=24\nwhile o+16<=len(d):\n  n=struct.unpack('<I',d[o+8:o+12])[0]\n  \
s.send(d[o+16:o+16+n])\n  o+=16+n\n",
        pcap.display()
    );
    ns(netns, &["python3", "-c", &py]);
}

/// intcollector, in namespace `netns` or on this host, printing JSON lines
/// (`--quiet`: only the summary) until it has `count` reports (or 60 s
/// pass); given 300 ms to bind.
fn start_collector(netns: Option<&str>, listen: &str, count: u64, quiet: bool) -> std::process::Child {
    let bin = intswitch_tests::workspace_bin("intcollector");
    let mut cmd = match netns {
        Some(n) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", n]).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let child = cmd
        .args(["--listen", listen, "--json", "--count", &count.to_string(), "--duration", "60"])
        .args(quiet.then_some("--quiet"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    child
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn report_ring_overflow_is_counted_exactly_and_malformed_int_is_dropped_by_reason() {
    let id = std::process::id() % 100_000;
    let (h, sw) = (format!("istirh-{id}"), format!("istirs-{id}"));
    let nss = Namespaces::create(&[&h, &sw]);
    // No IPv6 autoconf chatter: the port counters must count our frames only.
    for n in [&h, &sw] {
        ns(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        ns(n, &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
    }
    nss.veth(&h, "eth0", &sw, "sw-in");
    nss.veth(&h, "eth1", &sw, "sw-out");
    let d = Scratch::new("intrep");
    let cfg = format!(
        "name = \"intrep\"\nmode = \"xconnect\"\n[eal]\nfile_prefix = \"intrep-{id}\"\n[dataplane]\nidle = true\n\
mbufs = 4095\n{}\n[[port]]\nname = \"p0\"\ndevice = \"net_af_packet0,iface=sw-in,framecnt=16384\"\npeer = \"p1\"\n\
[[port]]\nname = \"p1\"\ndevice = \"net_af_packet1,iface=sw-out,framecnt=16384\"\npeer = \"p0\"\n\
[int]\nnode_id = 9\nedge_ports = [\"p1\"]\nring_size = {RING}\n[[int.collector]]\naddress = \"127.0.0.1:32766\"\n",
        control_section(&d)
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), Some(&sw));
    let sock = d.path("sw.sock");
    let collector = start_collector(Some(&sw), "127.0.0.1:32766", RING, true);

    // Export paused: the ring takes RING records, every further one is refused and counted.
    assert_eq!(intctl(&sock, &["int", "export", "pause"])["paused"], true);
    let frames: Vec<Vec<u8>> = (0..SENT as usize).map(watched_frame).collect();
    write_pcap(&d.path("int.pcap"), &frames);
    send_raw(&h, "eth0", &d.path("int.pcap"));
    let sunk = |v: &Value| v["counters"]["int_sunk"].as_u64().unwrap();
    wait_for("every frame sunk", || sunk(&intctl(&sock, &["show", "int"])) == SENT);
    let r = intctl(&sock, &["show", "reports"]);
    assert_eq!(r["paused"], true);
    assert_eq!(r["rings"][0]["pending"].as_u64(), Some(RING), "{r}");
    assert_eq!(r["rings"][0]["ring_full"].as_u64(), Some(SENT - RING), "{r}");
    assert_eq!(r["reports"].as_u64(), Some(0), "{r}");

    // Resumed: exactly what the ring held goes out, nothing more.
    intctl(&sock, &["int", "export", "resume"]);
    wait_for("ring drained", || intctl(&sock, &["show", "reports"])["rings"][0]["pending"].as_u64() == Some(0));
    let r = intctl(&sock, &["show", "reports"]);
    assert_eq!(r["rings"][0]["received"].as_u64(), Some(RING), "{r}");
    assert_eq!(r["collectors"][0]["reports"].as_u64(), Some(RING), "{r}");
    assert_eq!(r["collectors"][0]["send_errors"].as_u64(), Some(0), "{r}");
    let out = collector.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["summary"]["reports"].as_u64(), Some(RING), "{text}");
    assert_eq!(summary["summary"]["sequence"][0]["gaps"].as_u64(), Some(0), "{text}");

    // The restored packets left by p1 without INT: what h sees on eth1 is
    // checked by the counters (every frame forwarded, none dropped so far).
    let c = intctl(&sock, &["show", "counters"]);
    assert_eq!(c["ports"][1]["tx_packets"].as_u64(), Some(SENT), "{c}");

    // Malformed INT at the sink: dropped under the named reason, never a panic.
    let good = watched_frame(0);
    let blk = 14 + 20 + 8;
    let mut bad = Vec::new();
    let mut f = good.clone();
    f[blk + 4] = 0x10; // INT-MD version 1
    bad.push(f);
    let mut f = good.clone();
    f[blk + 6] = 0; // HopML 0
    bad.push(f);
    let mut f = good.clone();
    f[blk + 1] += 1; // stack not a multiple of HopML
    bad.push(f);
    let mut f = good.clone();
    f[blk + 1] = 0xff; // shim length past the packet
    bad.push(f);
    write_pcap(&d.path("bad.pcap"), &bad);
    send_raw(&h, "eth0", &d.path("bad.pcap"));
    wait_for("malformed frames counted", || {
        let dr = intctl(&sock, &["show", "drops"]);
        ["int_bad_version", "int_bad_hop_ml", "int_bad_stack", "int_truncated"]
            .iter()
            .all(|r| dr["total"][r].as_u64() == Some(1))
    });
    let out = s.stop();
    assert_eq!(out["events"]["int_report_ring_full"].as_u64(), Some(SENT - RING), "{out}");
    assert_eq!(out["total_drops"].as_u64(), Some(4), "{out}");
}

/// Reports leave through a DPDK port (`[[int.collector]] port = ...`): the
/// control core builds Ethernet/IPv4/UDP frames and worker 0 sends them out
/// of p2 to a collector host's kernel stack (its UDP checksum verified
/// there: offloads are off), where intcollector receives every report.
#[test]
fn reports_leave_through_a_dpdk_port_to_a_host_collector() {
    const N: u64 = 120;
    let id = std::process::id() % 100_000;
    let (h, sw, col) = (format!("istph-{id}"), format!("istps-{id}"), format!("istpc-{id}"));
    let nss = Namespaces::create(&[&h, &sw, &col]);
    for n in [&h, &sw, &col] {
        ns(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        ns(n, &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
    }
    nss.veth(&h, "eth0", &sw, "sw-in");
    nss.veth(&h, "eth1", &sw, "sw-out");
    nss.veth(&col, "eth0", &sw, "sw-mgmt");
    ns(&col, &["ip", "addr", "add", "10.72.0.2/24", "dev", "eth0"]);
    let link: Value = serde_json::from_str(&ns(&col, &["ip", "-j", "link", "show", "eth0"])).unwrap();
    let mac = link[0]["address"].as_str().unwrap().to_string();
    let d = Scratch::new("intport");
    // p2 only sends (its cross-connect peer is itself; nothing arrives on it).
    let cfg = format!(
        "name = \"intport\"\nmode = \"xconnect\"\n[eal]\nfile_prefix = \"intport-{id}\"\n[dataplane]\nidle = true\n\
mbufs = 4095\n{}\n[[port]]\nname = \"p0\"\ndevice = \"net_af_packet0,iface=sw-in,framecnt=16384\"\npeer = \"p1\"\n\
[[port]]\nname = \"p1\"\ndevice = \"net_af_packet1,iface=sw-out,framecnt=16384\"\npeer = \"p0\"\n\
[[port]]\nname = \"p2\"\ndevice = \"net_af_packet2,iface=sw-mgmt,framecnt=16384\"\npeer = \"p2\"\n\
[int]\nnode_id = 9\nedge_ports = [\"p1\"]\nreport_max_packet = 600\n[[int.collector]]\naddress = \"10.72.0.2:32766\"\n\
port = \"p2\"\nmac = \"{mac}\"\nbind = \"10.72.0.1:40000\"\n",
        control_section(&d)
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), Some(&sw));
    let sock = d.path("sw.sock");
    let collector = start_collector(Some(&col), "10.72.0.2:32766", N, true);
    let frames: Vec<Vec<u8>> = (0..N as usize).map(watched_frame).collect();
    write_pcap(&d.path("int.pcap"), &frames);
    send_raw(&h, "eth0", &d.path("int.pcap"));

    let out = collector.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["summary"]["reports"].as_u64(), Some(N), "{text}");
    assert_eq!(summary["summary"]["bad_packets"].as_u64(), Some(0), "{text}");
    assert_eq!(summary["summary"]["sequence"][0]["gaps"].as_u64(), Some(0), "{text}");
    let r = intctl(&sock, &["show", "reports"]);
    let c0 = &r["collectors"][0];
    assert_eq!(c0["via"], "port 2 from 10.72.0.1:40000", "{r}");
    assert_eq!((c0["reports"].as_u64(), c0["send_errors"].as_u64()), (Some(N), Some(0)), "{r}");
    let packets = c0["packets"].as_u64().unwrap();
    // (Port counters are published by the worker once per burst: wait for it.)
    wait_for("every report packet counted on p2", || {
        intctl(&sock, &["show", "counters"])["ports"][2]["tx_packets"].as_u64() == Some(packets)
    });
    let out = s.stop();
    assert_eq!(out["total_drops"].as_u64(), Some(0), "{out}");
}

/// Two workers sink INT (each from its own RX queue of p0: net_pcap gives a
/// queue per `rx_pcap`) and fill their own report rings; the control core
/// drains both into one report stream with one sequence, so intcollector
/// sees every report and no gap. lcore 2 shares CPU 1 with lcore 1.
#[test]
fn two_workers_rings_make_one_gapless_report_sequence() {
    const A: usize = 200;
    const B: usize = 300;
    let id = std::process::id() % 100_000;
    let d = Scratch::new("int2w");
    let p = |f: &str| d.path(f).display().to_string();
    write_pcap(&d.path("a.pcap"), &(0..A).map(watched_frame).collect::<Vec<_>>());
    write_pcap(&d.path("b.pcap"), &(A..A + B).map(watched_frame).collect::<Vec<_>>());
    let listen = format!("127.0.0.1:{}", 20_000 + id % 30_000);
    let cfg = format!(
        "name = \"int2w\"\nmode = \"xconnect\"\n[eal]\nlcores = \"0@0,1@1,2@1\"\nfile_prefix = \"int2w-{id}\"\n\
[dataplane]\nidle = true\nmbufs = 4095\n{}\n[[port]]\nname = \"p0\"\n\
device = \"net_pcap0,rx_pcap={},rx_pcap={},tx_pcap={},tx_pcap={}\"\npeer = \"p1\"\n\
[[port]]\nname = \"p1\"\ndevice = \"net_pcap1,tx_pcap={},tx_pcap={}\"\npeer = \"p0\"\n\
[[worker]]\nlcore = 1\nrx = [\"p0:0\", \"p1:0\"]\n[[worker]]\nlcore = 2\nrx = [\"p0:1\"]\n\
[int]\nnode_id = 9\nedge_ports = [\"p1\"]\n[[int.collector]]\naddress = \"{listen}\"\n",
        control_section(&d),
        p("a.pcap"),
        p("b.pcap"),
        p("o0a.pcap"),
        p("o0b.pcap"),
        p("o1a.pcap"),
        p("o1b.pcap"),
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    // The collector listens before the switch starts: the frames are read at once.
    let collector = start_collector(None, &listen, (A + B) as u64, true);
    let s = SwitchProcess::start(&d.path("c.toml"), None);
    let sock = d.path("sw.sock");
    wait_for("every report sent", || {
        intctl(&sock, &["show", "reports"])["collectors"][0]["reports"].as_u64() == Some((A + B) as u64)
    });
    let r = intctl(&sock, &["show", "reports"]);
    let received: Vec<Option<u64>> = (0..2).map(|w| r["rings"][w]["received"].as_u64()).collect();
    assert_eq!(received, [Some(A as u64), Some(B as u64)], "{r}");
    assert_eq!(r["collectors"][0]["send_errors"].as_u64(), Some(0), "{r}");
    let out = collector.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["summary"]["reports"].as_u64(), Some((A + B) as u64), "{text}");
    assert_eq!(summary["summary"]["sequence"][0]["gaps"].as_u64(), Some(0), "{text}");
    let out = s.stop();
    assert_eq!(out["total_drops"].as_u64(), Some(0), "{out}");
    // Each worker's sunk frames leave through its own TX queue of p1.
    assert_eq!((read_pcap(&d.path("o1a.pcap")).len(), read_pcap(&d.path("o1b.pcap")).len()), (A, B));
}

/// With `report_flow_interval_ms` and no flow learning, the sink's report
/// filter reports each flow once per interval: 8 flows in 400 frames read at
/// once make 8 reports, each flagged F, while every frame is sunk and
/// forwarded.
#[test]
fn report_interval_reports_each_flow_once_without_flow_learning() {
    const SENT: usize = 400;
    let id = std::process::id() % 100_000;
    let d = Scratch::new("intivl");
    let p = |f: &str| d.path(f).display().to_string();
    write_pcap(&d.path("in.pcap"), &(0..SENT).map(watched_frame).collect::<Vec<_>>());
    let listen = format!("127.0.0.1:{}", 20_000 + (id + 7) % 30_000);
    let cfg = format!(
        "name = \"intivl\"\nmode = \"xconnect\"\n[eal]\nlcores = \"0-1\"\nfile_prefix = \"intivl-{id}\"\n\
[dataplane]\nidle = true\nmbufs = 4095\n[flow_table]\nlearn = false\n{}\n[[port]]\nname = \"p0\"\n\
device = \"net_pcap0,rx_pcap={}\"\npeer = \"p1\"\n[[port]]\nname = \"p1\"\ndevice = \"net_pcap1,tx_pcap={}\"\n\
peer = \"p0\"\n[int]\nnode_id = 9\nedge_ports = [\"p1\"]\nreport_flow_interval_ms = 600000\n\
report_filter_slots = 1024\n[[int.collector]]\naddress = \"{listen}\"\n",
        control_section(&d),
        p("in.pcap"),
        p("out.pcap"),
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let collector = start_collector(None, &listen, 8, false);
    let s = SwitchProcess::start(&d.path("c.toml"), None);
    let sock = d.path("sw.sock");
    wait_for("the first reports sent", || {
        intctl(&sock, &["show", "reports"])["collectors"][0]["reports"].as_u64() == Some(8)
    });
    let out = collector.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let reports: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("flags").is_some())
        .collect();
    assert_eq!(reports.len(), 8, "{text}");
    assert!(reports.iter().all(|r| r["flags"] == "F"), "{text}");
    let flows: std::collections::HashSet<String> = reports.iter().map(|r| r["flow"].to_string()).collect();
    assert_eq!(flows.len(), 8, "one report a flow: {text}");
    let out = s.stop();
    assert_eq!(out["events"]["int_sunk"].as_u64(), Some(SENT as u64), "{out}");
    assert_eq!(out["events"]["int_report_queued"].as_u64(), Some(8), "{out}");
    assert_eq!(out["events"]["flow_learned"].as_u64().unwrap_or(0), 0, "{out}");
    assert_eq!(read_pcap(&d.path("out.pcap")).len(), SENT);
}
