//! The SQR stage in a running switch (net_pcap in and out, a UDP socket as
//! the collector): every probe is acknowledged out its ingress port and
//! forwarded by its source route; a copy without feedback comes back to
//! the collector as a recovery notice after `hold_ms` (±10 %), byte for
//! byte the probe as forwarded; a copy whose feedback came is freed; a
//! duplicate is acknowledged again but not forwarded; the path's last hop
//! delivers its probe as a Telemetry Report; a malformed probe is dropped
//! under its reason; other traffic is forwarded as before. The frames are
//! built by `dataplane::gpint::frame`, the reports read with the wire
//! module's parsers.

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dataplane::gpint::frame::{probe_frame, udp_frame, ProbeAddr};
use dataplane::parse::parse;
use dataplane::wire::gpint::{Header, Kind, Probe, ProbeRepr, RequestType, SrEntry, TO_MONITOR};
use dataplane::wire::int_md::{instr, IntMd};
use dataplane::wire::telemetry_report::{parse_group, Individual, FLAG_D, FLAG_I, INDIV_HDR_LEN, INT_MAIN_LEN};
use intswitch_tests::{control_section, intctl_bin, read_pcap, write_pcap, Scratch, SwitchProcess};
use serde_json::Value;

const INT_PORT: u16 = 17768;
/// The tests take turns: a testbed starting four switches starves the
/// other test's worker for tens of milliseconds on two cores, and it
/// measures the notice's timing.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
const GPINT_PORT: u16 = 17900;
const HOLD_MS: u64 = 500;

fn addr() -> ProbeAddr {
    ProbeAddr {
        eth_src: [2, 0, 0, 0, 0, 0xee],
        eth_dst: [2, 0, 0, 0, 0, 0xa0],
        ip_src: "10.99.0.1".parse().unwrap(),
        ip_dst: "10.99.0.2".parse().unwrap(),
        src_port: 40000,
        int_port: INT_PORT,
        gpint_port: GPINT_PORT,
        domain_id: 0x6701,
        bitmap: instr::NODE_ID | instr::EGRESS_TS,
        dscp: None,
    }
}

fn probe(req: u16, entries: &[(u8, u8, u8)]) -> Vec<u8> {
    let e = entries.iter().map(|&(p, f, n)| SrEntry { next_port: p, mea_first: f, mea_count: n }).collect();
    probe_frame(&addr(), &ProbeRepr::new(req, RequestType::PortRx, 0, 0, e).unwrap()).unwrap()
}

fn feedback(req: u16, hop: u8) -> Vec<u8> {
    let h = Header {
        kind: Kind::Feedback,
        flags: 0,
        request_id: req,
        request_type: RequestType::PortRx,
        attempt: 0,
        start_index: hop,
        sr_count: 0,
        sr_left: 0,
    };
    let mut b = [0u8; 8];
    h.emit(&mut b);
    udp_frame(&addr(), GPINT_PORT, &b).unwrap()
}

fn intctl(sock: &std::path::Path, args: &[&str]) -> Value {
    let out = Command::new(intctl_bin()).arg("--socket").arg(sock).arg("--json").args(args).output().unwrap();
    assert!(out.status.success(), "intctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One individual report: its flags, drop reason (bit 15's) and inner packet.
struct Report {
    flags: u8,
    drop_reason: Option<u8>,
    inner: Vec<u8>,
    at_ns: u64,
}

fn reports(packet: &[u8], at_ns: u64) -> Vec<Report> {
    parse_group(packet).unwrap();
    let mut out = Vec::new();
    let mut o = 8;
    while o + INDIV_HDR_LEN + INT_MAIN_LEN <= packet.len() {
        let i = Individual::parse(&packet[o..]).unwrap();
        let end = o + INDIV_HDR_LEN + i.len_words as usize * 4;
        let bits = u16::from_be_bytes([packet[o + 4], packet[o + 5]]);
        let md_end = o + INDIV_HDR_LEN + INT_MAIN_LEN + i.md_len_words as usize * 4;
        let drop_reason = (bits & 1 != 0).then(|| packet[md_end - 3]);
        out.push(Report { flags: i.flags, drop_reason, inner: packet[md_end..end].to_vec(), at_ns });
        o = end;
    }
    out
}

/// One switch on net_pcap replaying `frames` into p0 (p0 and p1 write
/// p0.pcap and p1.pcap), INT node `node_id` reporting to a UDP socket of
/// this test (reads time out after 200 ms), `[gpint]` with `gpint` keys.
fn start_switch(d: &Scratch, name: &str, node_id: u32, gpint: &str, frames: &[Vec<u8>]) -> (SwitchProcess, UdpSocket) {
    let id = std::process::id() % 100_000;
    let p = |f: &str| d.path(f).display().to_string();
    let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
    collector.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    write_pcap(&d.path("in.pcap"), frames);
    let cfg = format!(
        "name = \"{name}\"\nmode = \"xconnect\"\n[eal]\nfile_prefix = \"{name}-{id}\"\n[dataplane]\nidle = true\n\
mbufs = 4095\n{}\n[[port]]\nname = \"p0\"\ndevice = \"net_pcap0,rx_pcap={},tx_pcap={}\"\npeer = \"p1\"\n\
[[port]]\nname = \"p1\"\ndevice = \"net_pcap1,tx_pcap={}\"\npeer = \"p0\"\n[int]\nnode_id = {node_id}\n\
[[int.collector]]\naddress = \"{}\"\n[gpint]\n{gpint}\n",
        control_section(d),
        p("in.pcap"),
        p("p0.pcap"),
        p("p1.pcap"),
        collector.local_addr().unwrap(),
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    (SwitchProcess::start(&d.path("c.toml"), None), collector)
}

/// The reports the collector socket receives until there are `want` (or
/// 10 s pass), each stamped with its arrival (ns since the epoch).
fn collect(collector: &UdpSocket, want: usize) -> Vec<Report> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 65536];
    while got.len() < want && Instant::now() < deadline {
        if let Ok(n) = collector.recv(&mut buf) {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
            got.extend(reports(&buf[..n], now));
        }
    }
    got
}

#[test]
fn probes_are_acknowledged_forwarded_copied_and_recovered() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Scratch::new("gpintsqr");
    let plain = udp_frame(&addr(), 5001, b"background").unwrap();
    let a = probe(1, &[(1, 0, 2), (TO_MONITOR, 0, 0)]);
    let b = probe(2, &[(1, 0, 2), (TO_MONITOR, 0, 0)]);
    let c = probe(3, &[(TO_MONITOR, 0, 1)]);
    let bad = probe(4, &[(9, 0, 0), (TO_MONITOR, 0, 0)]);
    let frames = vec![a.clone(), b.clone(), feedback(2, 1), b.clone(), c.clone(), bad, plain.clone()];
    let (s, collector) = start_switch(&d, "gsqr", 31, &format!("hold_ms = {HOLD_MS}"), &frames);
    let sock = d.path("sw.sock");
    // The delivery comes at once, the notice after hold_ms.
    let mut got = collect(&collector, 2);
    let view = intctl(&sock, &["show", "gpint"]);
    // Nothing else arrives.
    std::thread::sleep(Duration::from_millis(2 * HOLD_MS));
    got.extend(collect(&collector, 3));
    let fin = s.stop();
    assert_eq!(got.len(), 2, "one delivery and one notice");

    let c_ = &view["counters"];
    let want = [
        ("gpint_rx", 5),
        ("gpint_fb_tx", 4),
        ("gpint_fb_rx", 1),
        ("gpint_dup", 1),
        ("gpint_delivered", 1),
        ("sqr_stored", 2),
        ("sqr_acked", 1),
        ("sqr_timeouts", 1),
        ("sqr_buffer_full", 0),
        ("gpint_bad_next_port", 1),
        ("gpint_export_full", 0),
    ];
    for (k, v) in want {
        assert_eq!(c_[k].as_u64(), Some(v), "{k}: {view}");
    }
    assert_eq!((view["delivered"].as_u64(), view["notices"].as_u64()), (Some(1), Some(1)), "{view}");
    assert_eq!(view["workers"][0]["in_use"].as_u64(), Some(0), "{view}");
    assert_eq!(view["workers"][0]["high_water"].as_u64(), Some(2), "{view}");
    assert_eq!(fin["drops"]["gpint_bad_next_port"].as_u64(), Some(1), "{fin}");

    // p0: the four feedbacks (A, B, B's duplicate, C), each kind 2 for hop 0.
    let out0 = read_pcap(&d.path("p0.pcap"));
    assert_eq!(out0.len(), 4);
    for (f, req) in out0.iter().zip([1u16, 2, 2, 3]) {
        let m = parse(f, 0).unwrap();
        // To the sender's MAC, from p0's (the MAC net_pcap gives it).
        assert_eq!((m.key.dst_port(), &f[0..6]), (GPINT_PORT, &a[6..12]));
        let h = Header::parse(&f[m.l4_offset + 8..m.l3_end]).unwrap();
        assert_eq!((h.kind, h.request_id, h.start_index), (Kind::Feedback, req, 0));
    }
    // p1: probes A and B with this hop, and the background frame as it was.
    let out1 = read_pcap(&d.path("p1.pcap"));
    assert_eq!(out1.len(), 3);
    assert_eq!(out1[2], plain);
    for f in &out1[..2] {
        let m = parse(f, 1).unwrap();
        let md = IntMd::new_checked(&f[m.l4_offset + 8..m.l3_end]).unwrap();
        assert_eq!((md.hops(), &md.hop(0)[..4]), (1, &31u32.to_be_bytes()[..]));
        let pr = Probe::new_checked(&f[m.l4_offset + 8 + md.total_len()..m.l3_end]).unwrap();
        let rec = pr.records().next().unwrap();
        assert_eq!((pr.header.sr_left, rec.node_id, rec.count()), (1, 31, 2));
    }
    // The delivery: C with its hop; the notice: A exactly as it left, late
    // by hold_ms after its egress timestamp.
    let delivery = got.iter().find(|r| r.flags == 0).expect("delivery");
    let m = parse(&delivery.inner, 0).unwrap();
    let md = IntMd::new_checked(&delivery.inner[m.l4_offset + 8..m.l3_end]).unwrap();
    assert_eq!(md.hops(), 1);
    let notice = got.iter().find(|r| r.flags == FLAG_I | FLAG_D).expect("notice");
    assert_eq!(notice.drop_reason, Some(dataplane::DropReason::GpintFeedbackTimeout as u8));
    // The copy, untruncated (the report pads it to a word).
    assert_eq!(notice.inner.len(), out1[0].len().div_ceil(4) * 4);
    assert_eq!(&notice.inner[..out1[0].len()], &out1[0][..], "the copy as it left");
    let m = parse(&notice.inner, 1).unwrap();
    let md = IntMd::new_checked(&notice.inner[m.l4_offset + 8..m.l3_end]).unwrap();
    let egress = u64::from_be_bytes(md.hop(0)[4..12].try_into().unwrap());
    let late_ms = (notice.at_ns - egress) as f64 / 1e6;
    let hold = HOLD_MS as f64;
    assert!((0.9 * hold..=1.1 * hold).contains(&late_ms), "notice {late_ms:.1} ms after the probe left");
}

/// `gen-traffic --gpint-probes --gpint-feedbacks` (the trace of
/// `bench.sh`'s gpint-transit) through a switch once: every probe is a
/// first visit, acknowledged and forwarded, and every copy is freed by
/// its feedback; IPv4 and IPv6 alike.
#[test]
fn the_generated_probe_trace_is_first_visits_each_copy_acknowledged() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Scratch::new("gpinttrace");
    const N: u64 = 2000;
    let out = Command::new(intswitch_tests::intswitch_bin())
        .args(["gen-traffic", "--gpint-probes", "--gpint-feedbacks", "--count", &N.to_string()])
        .args(["--v6-share", "0.3", "--gpint-monitors", "5", "--out"])
        .arg(d.path("gen.pcap"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let frames = read_pcap(&d.path("gen.pcap"));
    assert_eq!(frames.len() as u64, 2 * N);
    let (s, _collector) = start_switch(&d, "gtrace", 32, &format!("hold_ms = {HOLD_MS}"), &frames);
    let sock = d.path("sw.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut view = intctl(&sock, &["show", "gpint"]);
    while view["counters"]["gpint_fb_rx"].as_u64() != Some(N) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        view = intctl(&sock, &["show", "gpint"]);
    }
    s.stop();
    for (k, v) in [
        ("gpint_rx", N),
        ("gpint_dup", 0),
        ("gpint_fb_tx", N),
        ("gpint_fb_rx", N),
        ("sqr_stored", N),
        ("sqr_acked", N),
        ("sqr_timeouts", 0),
        ("sqr_buffer_full", 0),
    ] {
        assert_eq!(view["counters"][k].as_u64(), Some(v), "{k}: {view}");
    }
    let probes = read_pcap(&d.path("p1.pcap"));
    assert_eq!(probes.len() as u64, N);
    let v6 = probes.iter().filter(|f| f[12..14] == [0x86, 0xdd]).count() as f64 / N as f64;
    assert!((0.25..0.35).contains(&v6), "IPv6 share {v6}");
    assert_eq!(read_pcap(&d.path("p0.pcap")).len() as u64, N, "one feedback a probe");
}

/// The paper's mode (`classify = "dscp"`) in a running switch: a probe
/// marked 0x17 is acknowledged with a feedback marked 0x19 and forwarded;
/// its copy's notice carries it marked 0x21; a plain frame to the INT port
/// passes as before.
#[test]
fn the_paper_mode_knows_probes_by_codepoint() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Scratch::new("gpintdscp");
    let mut a = addr();
    a.dscp = Some(0x17);
    let e = vec![
        SrEntry { next_port: 1, mea_first: 0, mea_count: 1 },
        SrEntry { next_port: TO_MONITOR, mea_first: 0, mea_count: 0 },
    ];
    let probe = probe_frame(&a, &ProbeRepr::new(5, RequestType::PortRx, 0, 0, e).unwrap()).unwrap();
    let plain = udp_frame(&addr(), INT_PORT, b"not a probe").unwrap();
    let (s, collector) = start_switch(&d, "gdscp", 32, "classify = \"dscp\"\nhold_ms = 200", &[probe, plain.clone()]);
    let got = collect(&collector, 1);
    s.stop();
    let dscp = |f: &[u8]| f[15] >> 2;
    let out0 = read_pcap(&d.path("p0.pcap"));
    assert_eq!(out0.len(), 1, "the feedback");
    assert_eq!((dscp(&out0[0]), parse(&out0[0], 0).unwrap().key.dst_port()), (0x19, GPINT_PORT));
    let out1 = read_pcap(&d.path("p1.pcap"));
    assert_eq!(out1.len(), 2, "the probe and the plain frame");
    assert_eq!(dscp(&out1[0]), 0x17);
    assert_eq!(out1[1], plain);
    assert_eq!(got.len(), 1, "the notice");
    assert_eq!((got[0].flags, dscp(&got[0].inner)), (FLAG_I | FLAG_D, 0x21));
}

/// Runs `intcollector gpint run` in the testbed's mon namespace over `plan`
/// and returns its session lines and summary.
fn monitor(tb: &intswitch_tests::Testbed, plan: &std::path::Path, sessions: u64) -> (Vec<Value>, Value) {
    monitor_of(tb, plan, sessions, 4)
}

/// [`monitor`] on a testbed of `switches` switches s1, s2, ...
fn monitor_of(
    tb: &intswitch_tests::Testbed,
    plan: &std::path::Path,
    sessions: u64,
    switches: usize,
) -> (Vec<Value>, Value) {
    let out = monitor_cmd(tb, plan, switches)
        .args(["--sessions", &sessions.to_string(), "--profile", "fast", "--duration", "120"])
        // (The dashboard runs beside the sessions; it must not disturb them.)
        .args(["--web", "127.0.0.1:0"])
        .output()
        .expect("run intcollector gpint run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "gpint run: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = lines.pop().expect("summary line");
    assert_eq!(summary["summary"], true);
    // The sockets' kernel drops are read in the monitor's namespace.
    assert!(summary["socket_drops"].is_u64(), "{summary}");
    (lines, summary)
}

/// `intcollector gpint run --plan PLAN --via ...` in the testbed's mon
/// namespace, over switches s1, s2, ... (options to add).
fn monitor_cmd(tb: &intswitch_tests::Testbed, plan: &std::path::Path, switches: usize) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &tb.ns("mon")]).arg(intswitch_tests::workspace_bin("intcollector"));
    cmd.args(["gpint", "run", "--plan"]).arg(plan);
    for k in 1..=switches {
        cmd.args(["--via", &format!("s{k}=10.77.{k}.1")]);
    }
    cmd
}

/// `intcollector gpint plan --topology TOPO ARGS` into `d`/plan.json.
fn plan_for(d: &Scratch, topo: &std::path::Path, args: &[&str]) -> std::path::PathBuf {
    let plan = d.path("plan.json");
    let out = Command::new(intswitch_tests::workspace_bin("intcollector"))
        .args(["gpint", "plan", "--topology"])
        .arg(topo)
        .args(args)
        .arg("--out")
        .arg(&plan)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    plan
}

/// A scratch dir `name`, the shipped testbed `topo`, `gpint plan` over it
/// with `args` (into the dir), and the testbed brought up.
fn planned_testbed(
    name: &str,
    topo: &str,
    args: &[&str],
) -> (Scratch, std::path::PathBuf, std::path::PathBuf, intswitch_tests::Testbed) {
    let d = Scratch::new(name);
    let topo = intswitch_tests::Testbed::shipped(topo);
    let plan = plan_for(&d, &topo, args);
    let tb = intswitch_tests::Testbed::up(&topo);
    (d, topo, plan, tb)
}

/// The same link emulation (netem words) on `link` both ways.
fn impair_both(tb: &intswitch_tests::Testbed, link: &str, netem: &[&str]) {
    for rev in [false, true] {
        let mut args = vec!["impair", link];
        if rev {
            args.push("--reverse");
        }
        args.extend(netem);
        let (ok, msg) = tb.run(&args);
        assert!(ok, "{msg}");
    }
}

/// The gpint4 testbed (mon linked to each of s1 - s2 - s3 - s4): sessions
/// over the planner's one path all complete without recovery and every
/// copy is acknowledged, while UDP between h1 and h2 arrives whole; with
/// the s2 - s3 link dropping everything, every session still completes with all four switches' telemetry, by one
/// notice and one recovery probe each, and ends with s2-s3 unavailable;
/// with it only slower than t_f, the link ends congested; with s3 dead,
/// the session ends with the other three and s3 unavailable.
#[test]
fn the_monitor_recovers_every_session_over_a_dead_link() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, topo, plan, tb) = planned_testbed("gpintmon", "gpint4", &["--k", "1"]);
    // Background UDP between h1 and h2 meanwhile, every datagram checked.
    const N: u64 = 1000;
    let (lines, summary) = std::thread::scope(|sc| {
        let bg = sc.spawn(|| intswitch_tests::udp_exchange(&tb.ns("h1"), &tb.ns("h2"), "10.44.2.2", 5001, 300, 0));
        let r = monitor(&tb, &plan, N);
        bg.join().expect("background UDP between h1 and h2, unaffected");
        r
    });
    assert_eq!(lines.len() as u64, N);
    for l in &lines {
        assert_eq!((l["complete"].as_bool(), l["covered"].as_u64()), (Some(true), Some(4)), "{l}");
        assert_eq!(
            (l["probes"].as_u64(), l["recovery_probes"].as_u64(), l["notices"].as_u64()),
            (Some(1), Some(0), Some(0)),
            "{l}"
        );
        assert_eq!(l["telemetry"].as_array().unwrap().len(), 4, "{l}");
    }
    assert_eq!(summary["complete"].as_u64(), Some(N), "{summary}");
    // Every copy the switches kept was acknowledged (the last hop keeps none).
    let mut stored = 0;
    for k in 1..=4 {
        let g = tb.intctl(&format!("s{k}"), &["show", "gpint"]);
        let c = &g["counters"];
        assert_eq!(c["sqr_stored"], c["sqr_acked"], "s{k}: {g}");
        assert_eq!(c["sqr_timeouts"].as_u64(), Some(0), "s{k}: {g}");
        stored += c["sqr_stored"].as_u64().unwrap();
    }
    assert_eq!(stored, 3 * N, "three of the four hops keep a copy");

    // s2 - s3 drops everything, both ways (whichever way the plan runs).
    impair_both(&tb, "s2-s3", &["loss", "100%"]);
    let (lines, summary) = monitor(&tb, &plan, 5);
    for l in &lines {
        assert_eq!((l["complete"].as_bool(), l["covered"].as_u64()), (Some(true), Some(4)), "{l}");
        assert_eq!((l["recovery_probes"].as_u64(), l["notices"].as_u64()), (Some(1), Some(1)), "{l}");
        assert_eq!(l["unavailable"], serde_json::json!(["s2-s3"]), "{l}");
    }
    assert_eq!(summary["unavailable"]["s2-s3"].as_u64(), Some(5), "{summary}");

    // s2 - s3 only slow (600 ms, t_f 400 ms): the notice and the original
    // both arrive; the link ends congested, each session counted once.
    impair_both(&tb, "s2-s3", &["delay", "600ms"]);
    let (lines, summary) = monitor(&tb, &plan, 2);
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!((l["complete"].as_bool(), l["covered"].as_u64()), (Some(true), Some(4)), "{l}");
        assert_eq!(l["congested"], serde_json::json!(["s2-s3"]), "{l}");
        assert_eq!(l["unavailable"], serde_json::json!([]), "{l}");
        assert_eq!((l["notices"].as_u64(), l["deliveries"].as_u64()), (Some(1), Some(2)), "the original too: {l}");
    }
    assert_eq!((summary["sessions"].as_u64(), summary["congested"]["s2-s3"].as_u64()), (Some(2), Some(2)), "{summary}");

    // s3 dead: its hop is given up after r_a + 1 tries over its own link,
    // the session ends with the other three switches' telemetry.
    impair_both(&tb, "s2-s3", &["none"]);
    let (ok, status) = tb.run(&["status", &topo.display().to_string()]);
    assert!(ok, "{status}");
    let st: Value = serde_json::from_str(&status).unwrap();
    let procs = st[0]["processes"].as_array().unwrap_or_else(|| panic!("status: {status}"));
    let pid = procs.iter().find(|p| p["name"] == "s3").unwrap()["pid"].as_u64().unwrap();
    assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    let (lines, _) = monitor(&tb, &plan, 1);
    let l = &lines[0];
    assert_eq!(
        (l["complete"].as_bool(), l["covered"].as_u64(), l["hops_given_up"].as_u64()),
        (Some(false), Some(3), Some(1)),
        "{l}"
    );
    assert_eq!(l["unavailable"], serde_json::json!(["s2-s3", "s3"]), "{l}");
    // The notice's recovery to s3, two more tries there (fast: r_a 2), then s4.
    assert_eq!((l["notices"].as_u64(), l["recovery_probes"].as_u64()), (Some(1), Some(4)), "{l}");
    let (ok, msg) = tb.down();
    assert!(ok, "{msg}");
}

/// ws16 (a shipped Watts-Strogatz WS(16, 4, 0.1) with the monitor linked
/// to every switch), GPINT-3's paths, 10 % loss on every switch link both
/// ways: every session completes with all 16 switches' telemetry, and the
/// recovery probes match the probe transmissions the links lost (L_tx,
/// from the switches' counters: probes forwarded to a switch less probes
/// received from one, which equals the probes their link emulation
/// dropped), within 10 %.
#[test]
fn every_ws16_session_completes_under_loss_with_one_recovery_a_lost_probe() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, topo, plan, tb) = planned_testbed("gpintws16", "ws16", &[]);
    let text = std::fs::read_to_string(&topo).unwrap();
    let links: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("name = \"").and_then(|r| r.strip_suffix('"')))
        .filter(|n| n.starts_with('s') && n.contains('-'))
        .map(str::to_string)
        .collect();
    assert!(links.len() >= 30, "{links:?}");
    for l in &links {
        impair_both(&tb, l, &["loss", "10%"]);
    }
    const N: u64 = 10;
    let (lines, summary) = monitor_of(&tb, &plan, N, 16);
    for l in &lines {
        assert_eq!((l["complete"].as_bool(), l["covered"].as_u64()), (Some(true), Some(16)), "{l}");
    }
    let (mut forwarded, mut received, mut dropped) = (0, 0, 0);
    for k in 1..=16 {
        let c = tb.intctl(&format!("s{k}"), &["show", "gpint"])["counters"].clone();
        forwarded += c["sqr_stored"].as_u64().unwrap() + c["sqr_buffer_full"].as_u64().unwrap();
        received += c["gpint_rx"].as_u64().unwrap();
        dropped += c["impair_lost_gpint_probe"].as_u64().unwrap();
        assert_eq!(c["gpint_dup"].as_u64(), Some(0), "s{k}: {c}");
    }
    let sent = summary["probes"].as_u64().unwrap() + summary["recovery_probes"].as_u64().unwrap();
    let l_tx = forwarded - (received - sent);
    assert_eq!(l_tx, dropped, "what the links' emulation counted as dropped probes");
    let recovery = summary["recovery_probes"].as_u64().unwrap();
    eprintln!("ws16 10 %: L_tx {l_tx}, recovery probes {recovery}, {summary}");
    assert!(l_tx > 0, "10 % loss lost nothing? {summary}");
    assert!(l_tx <= recovery && recovery * 10 <= l_tx * 11, "L_tx {l_tx} vs recovery probes {recovery}: {summary}");
    let (ok, msg) = tb.down();
    assert!(ok, "{msg}");
}

/// The dashboard's GPINT panel in a real browser: `gpint run --web` feeds
/// it sessions over the gpint4 testbed (`--sessions 0`: until `--duration`),
/// and headless Chromium, in the monitor's namespace where the page is
/// served, draws the sessions' coverage.
#[test]
fn chromium_draws_the_gpint_sessions_panel() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use intswitch_tests::KillOnDrop;
    let (d, _, plan, tb) = planned_testbed("gpintweb", "gpint4", &["--k", "1"]);
    // The monitor's namespace is fresh: nothing else listens there.
    let url = "http://127.0.0.1:8080/";
    let mon = monitor_cmd(&tb, &plan, 4)
        .args(["--sessions", "0", "--profile", "fast", "--duration", "90", "--web", "127.0.0.1:8080"])
        .stdout(std::fs::File::create(d.path("mon.out")).unwrap())
        .stderr(std::fs::File::create(d.path("mon.err")).unwrap())
        .spawn()
        .unwrap();
    let mut mon = KillOnDrop(mon);
    let shot = d.path("gpint.png");
    let out = Command::new("ip")
        .args(["netns", "exec", &tb.ns("mon"), "python3"])
        .arg(intswitch_tests::repo_root().join("tests/browser.py"))
        .args([url, shot.to_str().unwrap(), "gpint", "--timeout", "40"])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    let err = std::fs::read_to_string(d.path("mon.err")).unwrap_or_default();
    assert!(out.status.success(), "browser: {seen} {} / monitor: {err}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(seen.trim()).unwrap();
    assert!(v["points"]["gpint"].as_u64().unwrap_or(0) > 0, "the GPINT chart drew nothing: {v}");
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "screenshot of {} bytes", png.len());
    let _ = mon.0.kill();
    let _ = mon.0.wait();
    // What the page drew were real sessions: each covered the 4 switches.
    let text = std::fs::read_to_string(d.path("mon.out")).unwrap();
    let sessions: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("session").is_some())
        .collect();
    assert!(!sessions.is_empty(), "no session line: {err}");
    assert!(sessions.iter().all(|l| l["covered"].as_u64() == Some(4)), "{:?}", &sessions[..1]);
}
