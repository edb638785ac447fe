//! The shipped monitoring files (`configs/monitoring/`) against a running
//! switch: every metric the Grafana dashboard queries exists on its
//! /metrics, every event a query names is one the switch counts, and the
//! Prometheus scrape configuration points at the default metrics address;
//! the sink analytics' and INT-label's state is on /metrics.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;

use intswitch_tests::{replay_config, Scratch, SwitchProcess};
use serde_json::Value;

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Every `expr` of the dashboard's panels.
fn exprs(dash: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    out
}

/// Names starting with `prefix` in `text` (letters, digits, '_').
fn names(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The event names an `event="..."` / `event=~"..."` matcher stands for:
/// literals, `p(a|b)` alternatives, or a `p.*` prefix.
fn event_matchers(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in expr.split("event=").skip(1) {
        let v = part.trim_start_matches('~').trim_start_matches('"');
        let v = &v[..v.find('"').unwrap()];
        match (v.find('('), v.strip_suffix(".*")) {
            (Some(open), _) => {
                let close = v.find(')').unwrap();
                for alt in v[open + 1..close].split('|') {
                    out.push(format!("{}{alt}{}", &v[..open], &v[close + 1..]));
                }
            }
            (None, Some(prefix)) => out.push(format!("{prefix}*")),
            (None, None) => out.push(v.to_string()),
        }
    }
    out
}

/// A cross-connect `name` replaying `gen-traffic TRAFFIC` from p0 to p1,
/// with the config lines `extra`.
fn start_replay(d: &Scratch, name: &str, traffic: &[&str], extra: &str) -> SwitchProcess {
    let pcap = d.path("in.pcap");
    let st = std::process::Command::new(intswitch_tests::intswitch_bin())
        .args(["gen-traffic", "--out"])
        .arg(&pcap)
        .args(traffic)
        .output()
        .unwrap();
    assert!(st.status.success());
    let cfg = replay_config(d, name, "xconnect", &pcap, "02:00:00:00:01:01", "peer = \"p1\"", "peer = \"p0\"", extra);
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    SwitchProcess::start(&d.path("c.toml"), None)
}

#[test]
fn every_metric_and_event_the_grafana_dashboard_queries_exists_on_a_running_switch() {
    let d = Scratch::new("monitoring");
    // Telemetry on, so its families are there: an INT source and sink with
    // analytics, INT-label, and an AM-PM initiator exporting to a collector.
    let extra = "[int]\nnode_id = 1\nedge_ports = [\"p0\", \"p1\"]\n[[int.watch]]\nname = \"v4\"\nrole = \"source\"\n\
src = \"10.0.1.0/24\"\ninstructions = [\"node_id\", \"hop_latency\"]\n[[int.collector]]\naddress = \"127.0.0.1:9\"\n\
[int.analytics]\ncache_rows = 1024\n[label]\ninterval_ms = 50.0\n\
[ampm]\nnode_id = 1\ninterval = \"1s\"\n[[ampm.flow]]\nname = \"v6\"\nflow_mon_id = 5\nrole = \"initiator\"\n\
method = \"double\"\ncarrier = \"ipv6_dest\"\nsrc = \"2001:db8:1::/64\"\n[[ampm.collector]]\naddress = \"127.0.0.1:9\"\n";
    let sw = start_replay(&d, "monitoring", &["--count", "64", "--flows", "8", "--v6-share", "0.5"], extra);
    let metrics = scrape(&sw.metrics_addr());
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    let families: BTreeSet<String> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    let events: BTreeSet<String> = metrics
        .lines()
        .filter(|l| l.starts_with("intswitch_events_total{"))
        .filter_map(|l| l.split("event=\"").nth(1).and_then(|r| r.split('"').next()))
        .map(str::to_string)
        .collect();

    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("configs/monitoring/grafana-intswitch.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(dash["uid"], "intswitch");
    let all = exprs(&dash);
    assert!(all.len() >= 20, "{} queries", all.len());
    let mut queried = BTreeSet::new();
    for e in &all {
        for n in names(e, "intswitch_") {
            assert!(families.contains(&n), "the dashboard queries {n}, which /metrics lacks ({e})");
            queried.insert(n);
        }
        for ev in event_matchers(e) {
            match ev.strip_suffix('*') {
                Some(p) => assert!(events.iter().any(|x| x.starts_with(p)), "no event matches {ev} ({e})"),
                None => assert!(events.contains(&ev), "the dashboard queries event {ev}, which the switch lacks ({e})"),
            }
        }
    }
    eprintln!("{} queries over {} metric families: {queried:?}", all.len(), queried.len());
    // Ports, drops, INT and AM-PM export are all on the dashboard.
    for n in [
        "intswitch_port_rx_packets_total",
        "intswitch_drops_total",
        "intswitch_int_report_send_errors_total",
        "intswitch_ampm_flow_packets_total",
        "intswitch_ampm_send_errors_total",
        "intswitch_int_flow_cache_entries",
        "intswitch_label_shift",
    ] {
        assert!(queried.contains(n), "{n} is not on the dashboard");
    }
    // The scrape configuration's target is the default metrics address.
    let prom = std::fs::read_to_string(repo().join("configs/monitoring/prometheus.yml")).unwrap();
    assert!(prom.contains("metrics_path: /metrics") && prom.contains("127.0.0.1:9417"), "{prom}");
    sw.stop();
}

/// The value of the one metric line that starts with `series` (None: absent).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn sink_analytics_and_label_state_are_on_metrics() {
    let d = Scratch::new("monitoring-label");
    // INT flows from upstream hops sunk at p1 into the analytics, the
    // others labeled by INT-label (p1 its last hop).
    let extra = "[int]\nnode_id = 1\nedge_ports = [\"p1\"]\n[[int.collector]]\naddress = \"127.0.0.1:9\"\n\
[int.analytics]\ncache_rows = 1024\n[label]\ninterval_ms = 50.0\nedge_ports = [\"p1\"]\n";
    let sw = start_replay(
        &d,
        "monitoring-label",
        &["--count", "64", "--flows", "16", "--int-hops", "2", "--background-share", "0.5"],
        extra,
    );
    let addr = sw.metrics_addr();
    let mut m = String::new();
    for _ in 0..100 {
        m = scrape(&addr);
        if sample(&m, "intswitch_label_labels_total{port=\"p1\",worker=\"0\"}").is_some_and(|n| n >= 2.0)
            && sample(&m, "intswitch_int_flow_cache_entries").is_some_and(|n| n >= 1.0)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(sample(&m, "intswitch_label_labels_total{port=\"p1\",worker=\"0\"}").unwrap() >= 2.0, "{m}");
    assert!(sample(&m, "intswitch_label_last_age_seconds{port=\"p1\"}").is_some_and(|s| s < 5.0), "{m}");
    // p0 sends nothing, so it never labels: no age line.
    assert_eq!(sample(&m, "intswitch_label_last_age_seconds{port=\"p0\"}"), None, "{m}");
    assert_eq!(sample(&m, "intswitch_label_shift{port=\"p1\"}"), Some(0.0), "{m}");
    assert!(sample(&m, "intswitch_int_flow_cache_entries").is_some_and(|n| (1.0..16.0).contains(&n)), "{m}");
    assert_eq!(sample(&m, "intswitch_int_flow_cache_capacity"), Some(1024.0 * 12.0), "{m}");
    assert!(sample(&m, "intswitch_int_flow_exported_total{record=\"flow\"}").is_some(), "{m}");
    assert!(sample(&m, "intswitch_int_flow_send_errors_total{collector=\"127.0.0.1:9\"}").is_some(), "{m}");
    let out = std::process::Command::new(intswitch_tests::intctl_bin())
        .arg("--socket")
        .arg(d.path("sw.sock"))
        .args(["label", "set-shift", "p1", "3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(sample(&scrape(&addr), "intswitch_label_shift{port=\"p1\"}"), Some(3.0));
    // A source rule in the label domain (the config refuses it; the API
    // took it): its packets would be taken for labels.
    let out = std::process::Command::new(intswitch_tests::intctl_bin())
        .arg("--socket")
        .arg(d.path("sw.sock"))
        .args(["int", "watch", "add", "src", "--role", "source", "--instructions", "node_id", "--domain-id", "0x4c42"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("0x4c42 is label.label_domain_id"), "{err}");
    sw.stop();
}
