//! What an operator sees: the telemetry demo (`scripts/demo.sh`, README's
//! first command) brings up its INT + AM-PM network, intcollector's
//! dashboard fills from the real switches, headless Chromium (Debian's
//! `chromium` through `chromedriver`) draws every chart, and Ctrl-C prints
//! the summary and leaves no namespace or process behind. Needs root.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use intswitch_tests::{workspace_bin, KillOnDrop, Scratch};
use serde_json::Value;

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET `path`; the body, or None while nothing answers.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// The flows of the dashboard's ticks, as (name, flow) pairs, tick by tick.
fn tick_flows(ticks: &[Value]) -> impl Iterator<Item = (String, Value)> + '_ {
    ticks.iter().flat_map(|k| k["flows"].as_object().cloned().unwrap_or_default())
}

fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("tb-demo-"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_demo_feeds_the_dashboard_and_chromium_draws_every_chart() {
    let d = Scratch::new("dashboard");
    let port = free_port();
    let web = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(d.path("demo.out")).unwrap();
    let bin_dir = workspace_bin("intswitch").parent().unwrap().to_path_buf();
    let t0 = Instant::now();
    let demo = Command::new("bash")
        .arg(repo().join("scripts/demo.sh"))
        .args(["--seconds", "120", "--web", &web])
        .env("INTSWITCH_BIN_DIR", &bin_dir)
        .env("INTSWITCH_TESTBED_DIR", d.path("tb"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut demo = KillOnDrop(demo);
    let output = || std::fs::read_to_string(d.path("demo.out")).unwrap_or_default();

    // Up: the dashboard has the INT flows over s1 > s2 > s3 and joined AM-PM intervals.
    let ticks =
        |p| -> Vec<Value> { get(p, "/api/ticks").and_then(|b| serde_json::from_str(&b).ok()).unwrap_or_default() };
    let mut first_report = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = ticks(port);
        if first_report.is_none() && t.iter().any(|k| k["flows"].as_object().is_some_and(|f| !f.is_empty())) {
            first_report = Some(t0.elapsed());
        }
        let ampm = t.iter().flat_map(|k| k["ampm"].as_array().cloned().unwrap_or_default());
        if first_report.is_some() && ampm.filter(|a| a["partial"] == false).count() >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "the dashboard got no reports and intervals; demo said:\n{}", output());
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("demo: first report on the dashboard {:?} after start", first_report.unwrap());
    let mut t = ticks(port);
    let flows: std::collections::BTreeMap<String, Value> = tick_flows(&t).collect();
    assert_eq!(flows.len(), 4, "{flows:?}");
    for (name, f) in &flows {
        assert!(name.contains(">10.33.2.2:510"), "{name}");
        assert_eq!(f["path"], serde_json::json!([1, 2, 3]), "{name}: {f}");
        assert!(f["hops"].as_array().unwrap().iter().all(|h| h["lat"].as_u64().is_some()), "{f}");
    }
    // The impaired link's 2 ms is in the path latency (first to last hop's
    // ingress), in the flows' means of the newest ticks. A loaded host may
    // hold the first packets for hundreds of milliseconds (under a busy
    // loop the first ticks' median was 507 ms), so the ticks are read again
    // until those settle: at most 12 s, inside the demo's first phase (20 s).
    let newest_median = |t: &[Value]| {
        let newest = &t[t.len().saturating_sub(5)..];
        let mut v: Vec<u64> = tick_flows(newest).filter_map(|(_, f)| f["path_ns"].as_u64()).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    };
    let settle = Instant::now() + Duration::from_secs(12);
    loop {
        let median = newest_median(&t);
        if median.is_some_and(|m| (1_500_000..20_000_000).contains(&m)) {
            break;
        }
        assert!(Instant::now() < settle, "path latency median of the newest ticks {median:?} ns");
        std::thread::sleep(Duration::from_millis(500));
        t = ticks(port);
    }
    assert!(t.iter().all(|k| k["totals"]["bad_packets"] == 0), "undecodable reports");

    // Chromium draws it: every chart the demo feeds has points.
    let shot = d.path("dashboard.png");
    let charts = "hop-latency,hop-queue,path-latency,reports,ampm-loss,ampm-delay,evictions";
    let out = Command::new("python3")
        .arg(repo().join("tests/browser.py"))
        .args([&format!("http://{web}/"), shot.to_str().unwrap(), charts, "--timeout", "40"])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser: {seen} {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(seen.trim()).unwrap();
    assert_eq!(v["flows"], 4, "{v}");
    for c in charts.split(',') {
        assert!(v["points"][c].as_u64().unwrap_or(0) > 0, "{c} drew nothing: {v}");
    }
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "screenshot of {} bytes", png.len());
    let _ = std::fs::copy(&shot, repo().join("target/dashboard.png"));
    let stats: Value = serde_json::from_str(&get(port, "/api/stats").unwrap()).unwrap();
    assert!(stats["requests"].as_u64().unwrap() >= 4, "{stats}");

    // The terminal view shows reports, intervals and the sink analytics'
    // flow records (every 5 s), and survives every line the collector prints.
    let lines = |p: &str| output().lines().filter(|l| l.starts_with(p)).count();
    let deadline = Instant::now() + Duration::from_secs(30);
    while lines("FLOW  ") == 0 {
        assert!(Instant::now() < deadline, "the view showed no flow record:\n{}", output());
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(lines("INT   ") > 0 && lines("AM-PM ") > 0, "{}", output());
    assert!(!output().contains("Traceback") && lines("demo_view:") == 0, "{}", output());

    // Ctrl-C: the summary, then nothing left.
    assert!(namespaces().len() >= 6, "{:?}", namespaces());
    Command::new("kill").args(["-INT", &demo.0.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while demo.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the demo did not stop on SIGINT:\n{}", output());
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = output();
    assert!(text.contains("=== summary") && text.contains("INT reports") && text.contains("AM-PM intervals"), "{text}");
    assert!(text.contains("0 lost (sequence gaps)"), "{text}");
    // The switches stop before the collector: their last flow records (reason stop) arrive.
    assert!(text.lines().any(|l| l.starts_with("analytics: ") && l.contains("stop ")), "{text}");
    assert!(namespaces().is_empty(), "{:?}", namespaces());
    assert!(get(port, "/").is_none(), "the collector still serves");
}
