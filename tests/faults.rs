//! Faults around a running switch (issue 37 §4): a switch killed with
//! SIGKILL starts again on the same config; a collector killed and
//! restarted mid-run sees the reports it missed as a sequence gap while the
//! switch goes on forwarding; the control core stalled for 2 s (its thread
//! alone stopped with ptrace) leaves the workers forwarding, their report
//! rings full and counted; a collector that does not read loses reports
//! only as counted sequence gaps, and one behind a DPDK port whose TX is
//! full only as counted `tx_full` drops. (Clock steps: the AM-PM exporter's unit
//! tests; export paused: int_reports' paused-export test.) A switch
//! stopped with its export paused sends what its rings hold.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use intswitch_tests::{
    collector_reports, intctl_bin, intswitch_bin, replay_config, workspace_bin, KillOnDrop, Scratch, SwitchProcess,
};
use serde_json::Value;

fn intctl(sock: &Path, args: &[&str]) -> Value {
    let out = Command::new(intctl_bin()).arg("--socket").arg(sock).arg("--json").args(args).output().unwrap();
    assert!(out.status.success(), "intctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn p0_rx(sock: &Path) -> u64 {
    intctl(sock, &["show", "ports"])
        .as_array()
        .and_then(|a| a.first())
        .and_then(|p| p["rx_packets"].as_u64())
        .expect("p0's rx_packets")
}

fn gen(out: &Path, args: &[&str]) {
    let st = Command::new(intswitch_bin()).arg("gen-traffic").arg("--out").arg(out).args(args).status().unwrap();
    assert!(st.success());
}

/// A cross-connect switch replaying `pcap` from p0 to p1, with `extra`.
fn xconnect_config(d: &Scratch, name: &str, pcap: &Path, extra: &str) -> std::path::PathBuf {
    let cfg = d.path("sw.toml");
    let text = replay_config(d, name, "xconnect", pcap, "02:00:00:00:01:01", "peer = \"p1\"", "peer = \"p0\"", extra);
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// 256 frames of 64 flows, each carrying two INT hops.
fn int_trace(d: &Scratch) -> std::path::PathBuf {
    int_frames(d, 256)
}

/// `count` frames of 64 flows, each carrying two INT hops.
fn int_frames(d: &Scratch, count: u64) -> std::path::PathBuf {
    let pcap = d.path("int.pcap");
    let count = count.to_string();
    let args = ["--count", &count, "--flows", "64", "--int-hops", "2", "--int-instructions", "node_id,hop_latency"];
    gen(&pcap, &[&args[..], &["--int-rhc", "3"]].concat());
    pcap
}

/// An INT sink at p1 reporting to `collector`, with `extra` [int] lines.
fn sink_section(collector: &str, extra: &str) -> String {
    format!("[int]\nnode_id = 3\nedge_ports = [\"p1\"]\n{extra}[[int.collector]]\naddress = \"{collector}\"\n")
}

fn sigkill(pid: u32) {
    assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
}

/// intcollector on `listen`, JSON lines into `log`, with `extra` options.
fn collector(listen: &str, log: &Path, extra: &[&str]) -> KillOnDrop {
    let child = Command::new(workspace_bin("intcollector"))
        .args(["--listen", listen, "--json", "--duration", "120"])
        .args(extra)
        .stdout(File::create(log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    KillOnDrop(child)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn exited(c: &mut Child) -> bool {
    c.try_wait().unwrap().is_some()
}

#[test]
fn a_switch_killed_with_sigkill_starts_again_on_the_same_config() {
    let d = Scratch::new("faults-kill");
    let pcap = d.path("t.pcap");
    gen(&pcap, &["--count", "512", "--flows", "512", "--sizes", "imix", "--shuffle", "1"]);
    let cfg = xconnect_config(&d, "faults-kill", &pcap, "");
    let sock = d.path("sw.sock");
    let first = SwitchProcess::start(&cfg, None);
    wait_until("traffic", || p0_rx(&sock) > 0);
    sigkill(first.pid());
    drop(first);
    // The dead switch left its socket file (and its EAL runtime files).
    assert!(sock.exists(), "the killed switch's socket file stays behind");
    let second = SwitchProcess::start(&cfg, None);
    let before = p0_rx(&sock);
    wait_until("traffic after the restart", || p0_rx(&sock) > before);
    let fin = second.stop();
    let ports = fin["ports"].as_array().unwrap();
    assert!(ports[0]["rx_packets"].as_u64().unwrap() > 0, "{fin}");
    assert_eq!(ports[0]["rx_packets"], ports[1]["tx_packets"], "{fin}");
    assert_eq!(fin["mempool_in_use_at_exit"], 0, "{fin}");
}

#[test]
fn a_collector_killed_and_restarted_mid_run_sees_the_gap_and_forwarding_goes_on() {
    let d = Scratch::new("faults-collector");
    let pcap = int_trace(&d);
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let sink = sink_section(&listen, "report_flow_interval_ms = 20\n");
    let cfg = xconnect_config(&d, "faults-coll", &pcap, &sink);
    let sock = d.path("sw.sock");
    let (log1, log2) = (d.path("c1.jsonl"), d.path("c2.jsonl"));
    let mut c1 = collector(&listen, &log1, &[]);
    let sw = SwitchProcess::start(&cfg, None);
    wait_until("reports at the first collector", || collector_reports(&log1, 0).len() >= 50);
    sigkill(c1.0.id());
    wait_until("the first collector gone", || exited(&mut c1.0));
    let seen1 = collector_reports(&log1, 0);
    // A second without a collector: the switch goes on forwarding (its
    // reports meet a closed port).
    let rx_gone = p0_rx(&sock);
    std::thread::sleep(Duration::from_secs(1));
    let rx_back = p0_rx(&sock);
    assert!(rx_back > rx_gone, "forwarding stopped with the collector gone: {rx_gone} -> {rx_back}");
    let mut c2 = collector(&listen, &log2, &[]);
    wait_until("reports at the restarted collector", || collector_reports(&log2, 0).len() >= 50);
    let fin = sw.stop();
    sigkill(c2.0.id());
    wait_until("the second collector gone", || exited(&mut c2.0));
    let seen2 = collector_reports(&log2, 0);

    let seq = |v: &Value| v["seq"].as_u64().expect("seq");
    let last1 = seen1.iter().map(seq).max().unwrap();
    let first2 = seen2.iter().map(seq).min().unwrap();
    assert!(first2 > last1 + 1, "the reports sent while no collector ran show as a gap: {last1} -> {first2}");
    // The restarted collector decodes from the report it first gets: every
    // line is a decoded report with hops (collector_reports rejects errors).
    assert!(seen2.iter().all(|v| v["hops"].as_array().is_some_and(|h| !h.is_empty())));
    // Forwarding never stopped: every received frame went out.
    let ports = fin["ports"].as_array().unwrap();
    assert_eq!(ports[0]["rx_packets"], ports[1]["tx_packets"], "{fin}");
    let r = &fin["int_reports"];
    let next = r["collectors"][0]["next_seq"].as_u64().unwrap();
    assert!(next > first2, "{r}");
}

/// Stops one thread (the control core: the process's main thread) for
/// `secs`, the others running on: ptrace is per thread, SIGSTOP is not.
fn stall_thread(tid: u32, secs: f64) {
    use nix::sys::ptrace;
    use nix::sys::wait::{waitpid, WaitPidFlag};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(tid as i32);
    ptrace::seize(pid, ptrace::Options::empty()).expect("PTRACE_SEIZE (root)");
    ptrace::interrupt(pid).expect("PTRACE_INTERRUPT");
    waitpid(pid, Some(WaitPidFlag::__WALL)).expect("the thread stops");
    std::thread::sleep(Duration::from_secs_f64(secs));
    ptrace::detach(pid, None).expect("PTRACE_DETACH");
}

/// An INT sink reporting every packet of `int_trace` (rings of 1024
/// records) to a socket nobody reads: (that socket, the switch, its
/// control socket).
fn reporting_sink(d: &Scratch, name: &str) -> (std::net::UdpSocket, SwitchProcess, std::path::PathBuf) {
    let pcap = int_trace(d);
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sink = sink_section(&rx.local_addr().unwrap().to_string(), "ring_size = 1024\n");
    let cfg = xconnect_config(d, name, &pcap, &sink);
    (rx, SwitchProcess::start(&cfg, None), d.path("sw.sock"))
}

/// `field` of every report ring in a `show reports` view, added up.
fn rings_sum(v: &Value, field: &str) -> u64 {
    v["rings"].as_array().unwrap().iter().map(|r| r[field].as_u64().unwrap()).sum()
}

#[test]
fn a_stalled_control_core_leaves_the_workers_forwarding_and_their_full_rings_counted() {
    let d = Scratch::new("faults-stall");
    // Every packet reported: the workers fill their rings within
    // milliseconds once the control core stops draining them.
    let (_rx, sw, sock) = reporting_sink(&d, "faults-stall");
    wait_until("traffic", || p0_rx(&sock) > 100_000);
    let full = |v: &Value| rings_sum(v, "ring_full");
    // Read in this order, the refused reports' window lies within rx's.
    let rx_before = p0_rx(&sock);
    let before = intctl(&sock, &["show", "reports"]);
    stall_thread(sw.pid(), 2.0);
    // The control core answers again.
    let after = intctl(&sock, &["show", "reports"]);
    let rx_after = p0_rx(&sock);
    let refused = full(&after) - full(&before);
    eprintln!("control core stalled 2 s: p0 rx {rx_before} -> {rx_after}, reports refused by full rings {refused}");
    assert!(
        refused > 100_000,
        "the workers went on (their full rings refused {refused} reports in the 2 s; rx {rx_before} -> {rx_after})"
    );
    assert!(rx_after - rx_before > refused, "every refused report is a packet forwarded: {rx_before} -> {rx_after}");
    let fin = sw.stop();
    let ports = fin["ports"].as_array().unwrap();
    assert_eq!(ports[0]["rx_packets"], ports[1]["tx_packets"], "nothing dropped: {fin}");
    let r = &fin["int_reports"];
    // Every packet raised a report: taken by the control core or refused.
    let taken = rings_sum(r, "received");
    assert_eq!(taken + full(r), ports[0]["rx_packets"].as_u64().unwrap(), "{r}");
}

/// A switch stopped while its export is paused: what the rings hold is
/// sent at stop, not dropped with them (a pause holds records back).
#[test]
fn a_switch_stopped_with_its_export_paused_sends_what_its_rings_hold() {
    let d = Scratch::new("faults-paused-stop");
    let (_rx, sw, sock) = reporting_sink(&d, "faults-paused-stop");
    assert_eq!(intctl(&sock, &["int", "export", "pause"])["paused"], true);
    let pending = |v: &Value| rings_sum(v, "pending");
    wait_until("the paused ring full", || pending(&intctl(&sock, &["show", "reports"])) == 1024);
    let before = intctl(&sock, &["show", "reports"])["reports"].as_u64().unwrap();
    let fin = sw.stop();
    let r = &fin["int_reports"];
    assert_eq!(pending(r), 0, "nothing left in the rings: {r}");
    let taken = rings_sum(r, "received");
    assert_eq!(r["reports"].as_u64().unwrap(), taken, "every record taken was sent: {r}");
    assert!(taken >= before + 1024, "the 1024 held at stop went out: {before} before, {taken} taken: {r}");
    assert_eq!(r["collectors"][0]["send_errors"], 0, "{r}");
}

/// Report export slower than the workers: the collector's socket, with a
/// small receive buffer, is not read while the switch floods it
/// (intcollector stopped with SIGSTOP, so its kernel buffer fills and the
/// rest is dropped there). The workers
/// forward every frame; every report the switch raised is accounted for
/// exactly: refused by a full ring, a send error, or sent with a sequence
/// number, and every sent one the collector lacks is a gap in those numbers
/// (one report a packet, so packets and reports count alike).
#[test]
fn a_collector_that_does_not_read_loses_reports_only_as_counted_gaps() {
    const FRAMES: u64 = 50_000;
    let d = Scratch::new("faults-slow");
    let pcap = int_frames(&d, FRAMES);
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    // A report of these frames is about 110 bytes: one a packet.
    let sink = sink_section(&listen, "ring_size = 1024\nreport_max_packet = 200\n");
    let cfg = xconnect_config(&d, "faults-slow", &pcap, &sink);
    // Read once: a known number of frames, every one reported.
    let text = std::fs::read_to_string(&cfg).unwrap().replace(",infinite_rx=1", "");
    std::fs::write(&cfg, text).unwrap();
    let sock = d.path("sw.sock");
    let log = d.path("c.jsonl");
    // A small receive buffer (64 KiB asked; the kernel doubles it).
    let mut c = collector(&listen, &log, &["--rcvbuf", "65536"]);
    let signal = |sig: &str, pid: u32| {
        assert!(Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success());
    };
    signal("-STOP", c.0.id());
    let sw = SwitchProcess::start(&cfg, None);
    wait_until("the trace replayed", || p0_rx(&sock) == FRAMES);
    let fin = sw.stop();
    signal("-CONT", c.0.id());
    // The collector reads what its socket buffer kept, then goes quiet.
    let mut seen = 0;
    wait_until("the collector done reading", || {
        std::thread::sleep(Duration::from_millis(500));
        let n = std::fs::read_to_string(&log).unwrap().lines().count();
        std::mem::replace(&mut seen, n) == n && n > 0
    });
    signal("-TERM", c.0.id());
    wait_until("the collector's summary", || exited(&mut c.0));
    let text = std::fs::read_to_string(&log).unwrap();
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let sequence = &summary["summary"]["sequence"][0];

    let ports = fin["ports"].as_array().unwrap();
    assert_eq!(
        (ports[0]["rx_packets"].as_u64(), ports[1]["tx_packets"].as_u64()),
        (Some(FRAMES), Some(FRAMES)),
        "{fin}"
    );
    let r = &fin["int_reports"];
    let sum = |k: &str| r["rings"].as_array().unwrap().iter().map(|x| x[k].as_u64().unwrap()).sum::<u64>();
    let (taken, ring_full) = (sum("received"), sum("ring_full"));
    let col = &r["collectors"][0];
    let (sent, packets, errors, next) = (
        col["reports"].as_u64().unwrap(),
        col["packets"].as_u64().unwrap(),
        col["send_errors"].as_u64().unwrap(),
        col["next_seq"].as_u64().unwrap(),
    );
    assert_eq!(taken + ring_full, FRAMES, "every frame raised a report: {r}");
    assert_eq!((sent, packets, next), (taken - errors, sent, sent), "one report a packet, each numbered: {r}");
    let mut seqs: Vec<u64> = collector_reports(&log, 0).iter().map(|v| v["seq"].as_u64().expect("seq")).collect();
    let got = seqs.len() as u64;
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len() as u64, got, "a sequence number twice");
    assert!(seqs.last().is_some_and(|&s| s < next), "numbers the switch never sent: {:?} vs {next}", seqs.last());
    // The collector's own count: gaps between the numbers it got, and after
    // its last one those the switch says it sent (the tail of the flood).
    let (gaps, last) = (sequence["gaps"].as_u64().unwrap(), sequence["last_seq"].as_u64().unwrap());
    assert_eq!((summary["summary"]["reports"].as_u64(), last), (Some(got), *seqs.last().unwrap()), "{summary}");
    let tail = next - 1 - last;
    eprintln!(
        "collector stopped during the replay: {FRAMES} reports raised = {got} delivered + {gaps} sequence gaps + \
         {tail} after the last one delivered + {ring_full} ring full + {errors} send errors"
    );
    assert!(gaps + tail > 0, "the stopped collector lost nothing: {got} of {next}");
    assert_eq!(got + gaps + tail + ring_full + errors, FRAMES);
}

#[test]
fn a_collector_behind_a_port_whose_tx_is_full_loses_reports_only_as_counted_drops() {
    const FRAMES: u64 = 20_000;
    let d = Scratch::new("faults-txfull");
    let pcap = int_frames(&d, FRAMES);
    // p2 is a memif server no client ever connects to: its TX refuses every
    // frame, a link whose queue never drains. The collector is behind it.
    let memif = d.path("memif.sock");
    let extra = format!(
        "[[port]]\nname = \"p2\"\ndevice = \"net_memif0,role=server,socket={}\"\nipv4 = [\"192.0.2.1/24\"]\npeer = \"p3\"\n\
[[port]]\nname = \"p3\"\ndevice = \"net_null2,no-rx=1\"\npeer = \"p2\"\n\
[int]\nnode_id = 3\nedge_ports = [\"p1\"]\nring_size = 1024\nreport_max_packet = 200\n\
[[int.collector]]\naddress = \"192.0.2.50:32766\"\nport = \"p2\"\nmac = \"02:00:00:00:00:32\"\n",
        memif.display()
    );
    let cfg = xconnect_config(&d, "faults-txfull", &pcap, &extra);
    let text = std::fs::read_to_string(&cfg).unwrap().replace(",infinite_rx=1", "");
    std::fs::write(&cfg, text).unwrap();
    let sock = d.path("sw.sock");
    let sw = SwitchProcess::start(&cfg, None);
    wait_until("the trace replayed", || p0_rx(&sock) == FRAMES);
    // Until every report is in a packet and every packet with worker 0.
    wait_until("the reports handed over", || {
        let (c, r) = (intctl(&sock, &["show", "counters"]), intctl(&sock, &["show", "reports"]));
        let col = &r["collectors"][0];
        let done = col["reports"].as_u64().unwrap() + col["send_errors"].as_u64().unwrap();
        let rings = r["rings"].as_array().unwrap();
        let raised: u64 =
            rings.iter().map(|x| x["received"].as_u64().unwrap() + x["ring_full"].as_u64().unwrap()).sum();
        raised == FRAMES
            && done + rings.iter().map(|x| x["ring_full"].as_u64().unwrap()).sum::<u64>() == FRAMES
            && c["events"]["injected"].as_u64().unwrap_or(0) == col["packets"].as_u64().unwrap()
    });
    let fin = sw.stop();

    let ports = fin["ports"].as_array().unwrap();
    assert_eq!(
        (ports[0]["rx_packets"].as_u64(), ports[1]["tx_packets"].as_u64(), ports[2]["tx_packets"].as_u64()),
        (Some(FRAMES), Some(FRAMES), Some(0)),
        "the workers forwarded every frame; nothing left p2: {fin}"
    );
    let r = &fin["int_reports"];
    let sum = |k: &str| r["rings"].as_array().unwrap().iter().map(|x| x[k].as_u64().unwrap()).sum::<u64>();
    let (taken, ring_full) = (sum("received"), sum("ring_full"));
    let col = &r["collectors"][0];
    let (sent, packets, errors) =
        (col["reports"].as_u64().unwrap(), col["packets"].as_u64().unwrap(), col["send_errors"].as_u64().unwrap());
    let injected = fin["events"]["injected"].as_u64().unwrap_or(0);
    let tx_full = fin["drops"]["tx_full"].as_u64().unwrap_or(0);
    eprintln!(
        "collector behind a full port: {FRAMES} reports raised = {ring_full} ring full + {errors} send errors + \
         {packets} handed to the port, of which {tx_full} refused by it ({injected} injected)"
    );
    assert_eq!(taken + ring_full, FRAMES, "every frame raised a report: {r}");
    assert_eq!((sent, packets), (taken - errors, taken - errors), "one report a packet: {r}");
    assert!(packets > 0, "some reports reached the port: {r}");
    assert_eq!(
        (injected, tx_full),
        (packets, packets),
        "each report packet handed over was refused and counted: {fin}"
    );
}
