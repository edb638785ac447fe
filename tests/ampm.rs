//! AM-PM end to end on the `ampm` testbed (h1 -> MP1 -> impaired link ->
//! MP2 -> h2): eight flows at once, one per method (step, pulse, double,
//! muxed) and carrier family (IPv4 DSCP / reserved flag, IPv6 AltMark in
//! Hop-by-Hop / Destination options); both MPs export interval records to
//! intcollector, which joins them. Three phases: no impairment (no loss),
//! loss on the MP1->MP2 link (summed loss = the link emulation's drops),
//! delay (measured one-way delay follows the configured one). A second
//! test runs the no-impairment phase with `time_format = "ns"` (interval
//! 2^29 ns) instead of the paper's seconds/fraction split. A third, on
//! net_pcap, has two workers count one AM-PM flow between them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use intswitch_tests::{control_section, ns, ping, repo_root, write_pcap, Scratch, SwitchProcess, Testbed};
use serde_json::Value;

const T_NS: u64 = 500_000_000;
/// The `ns` variant's interval: 2^29 ns.
const T_NS_POW2: u64 = 1 << 29;

/// The two tests run one after the other: the delay phase's precision
/// needs the machine to itself.
static SERIAL: Mutex<()> = Mutex::new(());
const PPS: f64 = 1600.0;
const SECS: f64 = 4.0;

struct Flow {
    name: &'static str,
    dest: &'static str,
    port: u16,
    loss: bool,
    delay: bool,
}

const FLOWS: [Flow; 8] = [
    Flow { name: "v4-muxed", dest: "10.32.0.2:5001", port: 5001, loss: true, delay: true },
    Flow { name: "v4-double", dest: "10.32.0.2:5002", port: 5002, loss: true, delay: true },
    Flow { name: "v4-step", dest: "10.32.0.2:5003", port: 5003, loss: true, delay: false },
    Flow { name: "v4-pulse", dest: "10.32.0.2:5004", port: 5004, loss: false, delay: true },
    Flow { name: "v6-muxed", dest: "[2001:db8:32::2]:5011", port: 5011, loss: true, delay: true },
    Flow { name: "v6-double", dest: "[2001:db8:32::2]:5012", port: 5012, loss: true, delay: true },
    Flow { name: "v6-step", dest: "[2001:db8:32::2]:5013", port: 5013, loss: true, delay: false },
    Flow { name: "v6-pulse", dest: "[2001:db8:32::2]:5014", port: 5014, loss: false, delay: true },
];

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

fn script() -> String {
    repo_root().join("scripts/udp_traffic.py").display().to_string()
}

/// Receives on h2 for one `send`: its SECS, the wait for an interval start
/// (under a second) and the setup around them.
fn sink(h2: &str) -> Child {
    let ports: Vec<String> = FLOWS.iter().map(|f| f.port.to_string()).collect();
    let child = Command::new("ip")
        .args(["netns", "exec", h2, "python3", &script(), "sink", &ports.join(","), "--v6", "--seconds"])
        .arg(format!("{}", SECS + 3.0))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Bound before the first datagram arrives.
    std::thread::sleep(Duration::from_millis(700));
    child
}

/// Sends the given flows from h1, starting at the next interval start (of
/// `t_ns`): the multiplexed method assumes steady traffic (README, AM-PM);
/// returns (phase start, phase end, sent per flow name).
fn send(h1: &str, flows: &[&Flow], t_ns: u64) -> (u64, u64, HashMap<String, u64>) {
    let dests: Vec<&str> = flows.iter().map(|f| f.dest).collect();
    let t0 = now_ns();
    let out = ns(
        h1,
        &[
            "python3",
            &script(),
            "send",
            &dests.join(","),
            "--pps",
            &format!("{}", PPS * flows.len() as f64 / 8.0),
            "--seconds",
            &format!("{SECS}"),
            "--start-on",
            &t_ns.to_string(),
        ],
    );
    let t1 = now_ns();
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let sent = flows.iter().map(|f| (f.name.to_string(), v["sent"][f.dest].as_u64().unwrap())).collect();
    (t0, t1, sent)
}

/// Joined intervals of a phase, by flow (waits for the last exports).
/// `t_ns`: the interval.
fn intervals(tb: &Testbed, t0: u64, t1: u64, t_ns: u64) -> HashMap<String, Vec<Value>> {
    let want_last = t1 / t_ns;
    let mut out: HashMap<String, Vec<Value>> = HashMap::new();
    for _ in 0..40 {
        out.clear();
        let log = std::fs::read_to_string(tb.log("col")).unwrap_or_default();
        for l in log.lines().filter(|l| l.contains("\"loss_packets\"") && !l.contains("ampm_summary")) {
            let v: Value = serde_json::from_str(l).unwrap();
            let start = v["start_ns"].as_u64().unwrap();
            assert_eq!(v["interval"].as_u64().unwrap() * t_ns, start, "interval index and start agree: {l}");
            if start + t_ns >= t0 && start <= t1 {
                out.entry(v["flow"].as_str().unwrap().to_string()).or_default().push(v);
            }
        }
        let done = FLOWS
            .iter()
            .all(|f| out.get(f.name).is_some_and(|v| v.iter().any(|x| x["interval"].as_u64() == Some(want_last))));
        if done {
            return out;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("intervals up to {want_last} not all joined: {out:?}");
}

fn sum(v: &[Value], k: &str) -> i64 {
    v.iter().map(|x| x[k].as_i64().unwrap()).sum()
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort();
    v[v.len() / 2]
}

/// Per-interval pulse delays of the flows that measure delay.
fn delays(iv: &HashMap<String, Vec<Value>>) -> Vec<i64> {
    FLOWS.iter().filter(|f| f.delay).flat_map(|f| iv[f.name].iter().filter_map(|x| x["delay_ns"].as_i64())).collect()
}

fn impair_loss(tb: &Testbed) -> u64 {
    tb.intctl("mp1", &["show", "drops"])["total"]["impair_loss"].as_u64().unwrap()
}

fn p1_tx(tb: &Testbed, sw: &str) -> u64 {
    tb.intctl(sw, &["show", "counters"])["ports"][1]["tx_packets"].as_u64().unwrap()
}

/// Static neighbours both ways: no ARP/ND crosses the lossy link.
fn pin_neighbours(tb: &Testbed) {
    let mac = |h: &str| ns(&tb.ns(h), &["cat", "/sys/class/net/eth0/address"]).trim().to_string();
    let (m1, m2) = (mac("h1"), mac("h2"));
    for (h, ips, m) in [("h1", ["10.32.0.2", "2001:db8:32::2"], &m2), ("h2", ["10.32.0.1", "2001:db8:32::1"], &m1)] {
        for ip in ips {
            ns(&tb.ns(h), &["ip", "neigh", "replace", ip, "lladdr", m, "dev", "eth0", "nud", "permanent"]);
        }
    }
}

/// Phase 1 (no impairment): every interval of every loss flow loses 0 and
/// the initiator counted exactly what h1 sent, which h2 received. Returns
/// the pulse delays (the baseline).
fn no_loss_phase(tb: &Testbed, t_ns: u64) -> Vec<i64> {
    let (h1, h2) = (tb.ns("h1"), tb.ns("h2"));
    for (from, to) in [(&h1, "10.32.0.2"), (&h1, "2001:db8:32::2"), (&h2, "10.32.0.1"), (&h2, "2001:db8:32::1")] {
        ping(from, to);
    }
    pin_neighbours(tb);
    let all: Vec<&Flow> = FLOWS.iter().collect();
    let s = sink(&h2);
    let (t0, t1, sent) = send(&h1, &all, t_ns);
    let got = s.wait_with_output().unwrap();
    let received: Value = serde_json::from_slice(&got.stdout).unwrap();
    let iv = intervals(tb, t0, t1, t_ns);
    for f in FLOWS.iter().filter(|f| f.loss) {
        let v = &iv[f.name];
        assert!(v.iter().all(|x| x["loss_packets"] == 0 && x["loss_bytes"] == 0), "{}: {v:?}", f.name);
        assert_eq!(sum(v, "packets") as u64, sent[f.name], "{}", f.name);
        assert_eq!(received["received"][f.port.to_string()].as_u64(), Some(sent[f.name]), "{}", f.name);
    }
    let base = delays(&iv);
    assert!(base.len() >= 6 * 6, "pulses in most intervals: {base:?}");
    // A scheduling stall (a loaded CI host, two switches and their hosts on
    // two cores) may hold a packet several milliseconds. How many pulses
    // it hits depends on the host, not on the switch; the median, which the
    // delay phase measures against, must be an unstalled pulse.
    assert!(base.iter().all(|d| (0..20_000_000).contains(d)), "{base:?}");
    assert!(base.iter().filter(|&&d| d >= 2_000_000).count() * 2 < base.len(), "{base:?}");
    base
}

#[test]
fn ampm_loss_and_delay_every_method_and_carrier() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = Testbed::up(&Testbed::shipped("ampm"));
    let (h1, h2) = (tb.ns("h1"), tb.ns("h2"));
    let all: Vec<&Flow> = FLOWS.iter().collect();
    let base = no_loss_phase(&tb, T_NS);
    let (base_median, base_min) = (median(base.clone()), base.iter().copied().min().unwrap_or(0));

    // Phase 2: 10 % loss on MP1 -> MP2: the loss summed over intervals and
    // flows is exactly what the link emulation dropped, and the initiator's
    // and terminator's counts match the ports'.
    assert!(tb.run(&["impair", "mp1-mp2", "loss", "10%"]).0);
    let loss_flows: Vec<&Flow> = FLOWS.iter().filter(|f| f.loss).collect();
    let (drop0, tx1_0, tx2_0) = (impair_loss(&tb), p1_tx(&tb, "mp1"), p1_tx(&tb, "mp2"));
    let s = sink(&h2);
    let (t0, t1, sent) = send(&h1, &loss_flows, T_NS);
    let _ = s.wait_with_output();
    let iv = intervals(&tb, t0, t1, T_NS);
    let dropped = impair_loss(&tb) - drop0;
    let (tx1, tx2) = (p1_tx(&tb, "mp1") - tx1_0, p1_tx(&tb, "mp2") - tx2_0);
    let total_loss: i64 = loss_flows.iter().map(|f| sum(&iv[f.name], "loss_packets")).sum();
    let init_pkts: i64 = loss_flows.iter().map(|f| sum(&iv[f.name], "packets")).sum();
    let term_pkts = init_pkts - total_loss;
    assert!(dropped > 100, "10 % of {} packets: {dropped}", init_pkts);
    assert_eq!(init_pkts as u64, sent.values().sum::<u64>());
    // Packets the hosts' kernels send on their own (an MLD report, say)
    // also cross the link: the port counters see them, AM-PM does not.
    let noise = (tx1 + dropped) - init_pkts as u64;
    assert!(noise <= 3, "initiator count {init_pkts} vs MP1 port p1 sent {tx1} + emulated loss {dropped}");
    assert!(tx2 >= term_pkts as u64 && tx2 - term_pkts as u64 <= noise, "terminator {term_pkts} vs MP2 port p1 {tx2}");
    if noise == 0 {
        assert_eq!(total_loss as u64, dropped, "AM-PM loss vs impair_loss");
    } else {
        assert!(
            dropped - total_loss as u64 <= noise,
            "AM-PM loss {total_loss} vs impair_loss {dropped} (noise {noise})"
        );
    }
    for f in &loss_flows {
        for x in &iv[f.name] {
            let l = x["loss_packets"].as_i64().unwrap();
            assert!(l >= 0 && l <= x["packets"].as_i64().unwrap(), "{}: {x}", f.name);
        }
    }

    // Phase 3: 20 ms delay: the pulse pairs' one-way delay follows it.
    assert!(tb.run(&["impair", "mp1-mp2", "delay", "20ms"]).0);
    let s = sink(&h2);
    let (t0, t1, _) = send(&h1, &all, T_NS);
    let _ = s.wait_with_output();
    let iv = intervals(&tb, t0, t1, T_NS);
    let d = delays(&iv);
    assert!(d.len() >= 6 * 6, "{d:?}");
    // Never below the configured delay, but for the time MP1 took from
    // reading the packet's burst (the time the impairment delays it from)
    // to stamping it (CI once saw 19.99944 ms): the issue's 50 us. A
    // scheduling stall on a loaded host may hold a packet tens of
    // milliseconds (CI once saw 9 of 47 pairs over 25 ms, the worst 43.8
    // ms), so the bound on each pair is loose, and the figure that counts
    // is the median: fewer than half the pairs may be late.
    assert!(d.iter().all(|x| (19_950_000..100_000_000).contains(x)), "{d:?}");
    let late = d.iter().filter(|&&x| x >= 25_000_000).count();
    assert!(late * 2 < d.len(), "{late} of {} pairs over 25 ms: {d:?}", d.len());
    // netem's timer itself overshoots by tens of microseconds (CI: median
    // 20.06 ms with the 20 ms delay), and load adds more: 2.5 % of the
    // delay still tells a right measurement from a wrong one.
    let added = median(d.clone()) - base_median;
    assert!((added - 20_000_000).abs() <= 500_000, "median delay {} - baseline {base_median} = {added} ns", median(d));
    // The issue's 50 us, on the least delayed pair of each phase: a pair's
    // delay is the path, the configured delay and the time the packet
    // waited at MP2 before its burst was read (MP1 stamps a packet when it
    // forwards it, so a wait there delays both ends alike); stalls only add
    // to it, and the least delayed pairs of both phases waited about nothing.
    let least = d.iter().copied().min().unwrap_or(0);
    let added_least = least - base_min;
    assert!(
        (added_least - 20_000_000).abs() <= 50_000,
        "least delay {least} - least baseline {base_min} = {added_least} ns"
    );
    let means: Vec<i64> = FLOWS
        .iter()
        .filter(|f| f.loss)
        .flat_map(|f| iv[f.name].iter().filter_map(|x| x["mean_delay_ns"].as_i64()))
        .collect();
    assert!((median(means.clone()) - 20_000_000).abs() <= 1_000_000, "{means:?}");
    for f in FLOWS.iter().filter(|f| f.loss) {
        assert!(iv[f.name].iter().all(|x| x["loss_packets"] == 0), "{}: {:?}", f.name, iv[f.name]);
    }
    eprintln!(
        "ampm: baseline delay median {base_median} ns, least {base_min} ns; with 20 ms: median {} ns, least {least} ns",
        median(d)
    );

    // The MPs' own view.
    let show = tb.intctl("mp2", &["ampm", "show"]);
    assert_eq!(show["flows"].as_array().unwrap().len(), 8);
    assert_eq!(show["export"]["collectors"][0]["send_errors"], 0);
    let rules = tb.intctl("mp1", &["rule", "show", "muxed-initiator"]);
    assert_eq!(rules["tables"][0]["rules"].as_array().unwrap().len(), 6);
    assert_eq!(rules["tables"][0]["lookup"], "direct");
    let (ok, out) = tb.down();
    assert!(ok, "{out}");
}

/// The same testbed with CLOCK_REALTIME nanoseconds as the time bits
/// (`time_format = "ns"`, T = 2^29 ns) on both MPs: no loss, exact counts.
#[test]
fn ampm_ns_time_format_no_loss() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let text = std::fs::read_to_string(Testbed::shipped("ampm")).unwrap();
    let text = text.replace("name = \"ampm\"", "name = \"ampmns\"").replace(
        "interval = \"500ms\"\ntime_format = \"sec_frac\"",
        "interval = \"536870912ns\"\ntime_format = \"ns\"",
    );
    assert_eq!(text.matches("time_format = \"ns\"").count(), 2);
    let file = std::env::temp_dir().join(format!("ampmns-{}.toml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let tb = Testbed::up(&file);
    let show = tb.intctl("mp1", &["ampm", "show"]);
    assert_eq!((show["time_format"].as_str(), show["interval_ns"].as_u64()), (Some("ns"), Some(T_NS_POW2)), "{show}");
    no_loss_phase(&tb, T_NS_POW2);
    let (ok, out) = tb.down();
    assert!(ok, "{out}");
    let _ = std::fs::remove_file::<PathBuf>(file);
}

/// `n` frames of 10 UDP flows from 10.70.0.1, 100 bytes each: the traffic
/// of the initiator flow `initiator_xconnect` monitors.
fn initiator_frames(n: usize) -> Vec<Vec<u8>> {
    let spec = control::traffic::TrafficSpec {
        flows: 10,
        frame_len: 100,
        ..control::traffic::TrafficSpec::udp("10.70.0.1".parse().unwrap(), "10.71.0.1".parse().unwrap(), n)
    };
    (0..n).map(|i| control::traffic::frame(&spec, i)).collect()
}

/// The devices of `initiator_xconnect`'s ports, and what goes with them.
struct Devices<'a> {
    /// [eal] lines (lcores).
    eal: &'a str,
    p0: String,
    p1: String,
    /// After the ports ([[worker]] sections).
    workers: &'a str,
}

/// A cross-connect switch `name` (its files in `d`) on `dev`, with one
/// AM-PM initiator flow (FlowMonID `id`, step method, DSCP) over
/// 10.70.0.0/16, its records to `collector` every `interval`.
fn initiator_xconnect(
    d: &Scratch,
    name: &str,
    dev: &Devices,
    id: u32,
    interval: &str,
    collector: std::net::SocketAddr,
) -> PathBuf {
    let Devices { eal, p0: p0_dev, p1: p1_dev, workers } = dev;
    let cfg = format!(
        r#"name = "{name}"
mode = "xconnect"
[eal]
{eal}file_prefix = "{name}-{pid}"
[dataplane]
idle = true
mbufs = 4095
{control}
[[port]]
name = "p0"
device = "{p0_dev}"
peer = "p1"
[[port]]
name = "p1"
device = "{p1_dev}"
peer = "p0"
{workers}[ampm]
node_id = 5
interval = "{interval}"
[[ampm.flow]]
name = "all"
flow_mon_id = {id}
role = "initiator"
method = "step"
carrier = "dscp"
src = "10.70.0.0/16"
[[ampm.collector]]
address = "{collector}"
"#,
        pid = std::process::id(),
        control = control_section(d),
    );
    let path = d.path("c.toml");
    std::fs::write(&path, cfg).unwrap();
    path
}

/// One AM-PM flow (a /16 of sources) whose packets arrive on two workers
/// (an RX queue of p0 each; net_pcap gives a queue per `rx_pcap`; lcore 2
/// shares CPU 1 with lcore 1): the records the control core exports count
/// every packet and byte of both workers' counters.
#[test]
fn ampm_records_sum_the_workers() {
    const A: usize = 120;
    const B: usize = 80;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Scratch::new("ampm2w");
    let p = |f: &str| d.path(f).display().to_string();
    let frames = initiator_frames(A + B);
    write_pcap(&d.path("a.pcap"), &frames[..A]);
    write_pcap(&d.path("b.pcap"), &frames[A..]);
    // IPv4 length of each frame: what AM-PM counts as bytes.
    let l3_bytes: u64 = frames.iter().map(|f| u16::from_be_bytes([f[16], f[17]]) as u64).sum();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let cfg = initiator_xconnect(
        &d,
        "ampm2w",
        &Devices {
            eal: "lcores = \"0@0,1@1,2@1\"\n",
            p0: format!(
                "net_pcap0,rx_pcap={},rx_pcap={},tx_pcap={},tx_pcap={}",
                p("a.pcap"),
                p("b.pcap"),
                p("o0a.pcap"),
                p("o0b.pcap")
            ),
            p1: format!("net_pcap1,tx_pcap={},tx_pcap={}", p("o1a.pcap"), p("o1b.pcap")),
            workers: "[[worker]]\nlcore = 1\nrx = [\"p0:0\", \"p1:0\"]\n[[worker]]\nlcore = 2\nrx = [\"p0:1\"]\n",
        },
        77,
        "1s",
        sock.local_addr().unwrap(),
    );
    let sw = SwitchProcess::start(&cfg, None);
    // A second flow of FlowMonID 77, and a carrier the flow's family lacks,
    // are refused (the collector could not tell the first's records apart;
    // the second would mark nothing); so is a mark written by a reader's
    // slot table (only an initiator's writes them).
    let flow = ["--role", "initiator", "--method", "step"];
    for (args, want) in [
        (
            [&["ampm", "add", "b", "--flow-mon-id", "77", "--carrier", "dscp"][..], &flow].concat(),
            "flow_mon_id: 77 is flow 'all''s too",
        ),
        (
            [&["ampm", "add", "b", "--flow-mon-id", "78", "--carrier", "ipv6_hbh", "--src", "10.70.0.0/16"][..], &flow]
                .concat(),
            "carrier: 'ipv6_hbh'",
        ),
        (
            vec!["rule", "add", "step-terminator", "r", "--set-l", "true"],
            "set_l: only an initiator's table writes marks",
        ),
    ] {
        let out = std::process::Command::new(intswitch_tests::intctl_bin())
            .arg("--socket")
            .arg(d.path("sw.sock"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
    }
    // Every packet arrives at once; its interval's record leaves in the
    // middle of the next one. Read records until they hold every packet
    // (bounded: 6 s of 1 s intervals).
    let (mut packets, mut bytes, mut records) = (0u64, 0u64, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    let mut buf = [0u8; 65536];
    while packets < (A + B) as u64 && std::time::Instant::now() < deadline {
        let Ok(n) = sock.recv(&mut buf) else { continue };
        for line in String::from_utf8_lossy(&buf[..n]).lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            assert_eq!((r["type"].as_str(), r["flow_mon_id"].as_u64()), (Some("ampm"), Some(77)), "{r}");
            packets += r["packets"].as_u64().unwrap();
            bytes += r["bytes"].as_u64().unwrap();
            records += 1;
        }
    }
    let out = sw.stop();
    assert!(records > 0, "no record arrived");
    assert_eq!((packets, bytes), ((A + B) as u64, l3_bytes), "records summed over {records}: {out}");
    assert_eq!(out["total_drops"].as_u64(), Some(0), "{out}");
    assert_eq!(out["ports"][1]["tx_packets"].as_u64(), Some((A + B) as u64), "{out}");
}

/// A switch stopped before its AM-PM intervals' records were due (4 s
/// intervals, stopped within a second of counting) sends them at stop,
/// marked partial: the records hold every packet it counted.
#[test]
fn ampm_records_not_yet_due_at_stop_are_sent_partial() {
    const N: usize = 100;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Scratch::new("ampmstop");
    let p = |f: &str| d.path(f).display().to_string();
    write_pcap(&d.path("a.pcap"), &initiator_frames(N));
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let cfg = initiator_xconnect(
        &d,
        "ampmstop",
        &Devices {
            eal: "",
            p0: format!("net_pcap0,rx_pcap={},tx_pcap={}", p("a.pcap"), p("o0.pcap")),
            p1: format!("net_pcap1,tx_pcap={}", p("o1.pcap")),
            workers: "",
        },
        78,
        "4s",
        sock.local_addr().unwrap(),
    );
    let sw = SwitchProcess::start(&cfg, None);
    let rx = || -> u64 {
        let out = Command::new(intswitch_tests::intctl_bin())
            .arg("--socket")
            .arg(d.path("sw.sock"))
            .args(["--json", "show", "ports"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v[0]["rx_packets"].as_u64().unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while rx() < N as u64 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = sw.stop();
    assert_eq!(out["ports"][0]["rx_packets"].as_u64(), Some(N as u64), "{out}");
    let (mut packets, mut records) = (0u64, Vec::new());
    let mut buf = [0u8; 65536];
    for _ in 0..10 {
        let Ok(n) = sock.recv(&mut buf) else { break };
        for line in String::from_utf8_lossy(&buf[..n]).lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            packets += r["packets"].as_u64().unwrap();
            records.push(r);
        }
    }
    assert_eq!(packets, N as u64, "records: {records:?}");
    assert!(records.iter().all(|r| r["partial"] == true), "{records:?}");
    assert_eq!(out["ampm_export"]["records"].as_u64(), Some(records.len() as u64), "{out}");
}
