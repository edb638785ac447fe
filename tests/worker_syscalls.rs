//! A worker makes no system call while it forwards: strace, attached to the
//! worker thread of a running switch (real EAL, net_pcap replaying traffic
//! into net_null), counts none while the worker handles a few million
//! packets, for each kind of per-packet work: routing with flow learning
//! and INT source, INT sink reporting every packet (the report ring and the
//! control core's export), and AM-PM marking and counting. What the worker
//! hands to the control core goes through memory; the control core does
//! the sending.

use intswitch_tests::{
    int_source_section, intctl_bin, intswitch_bin, replay_config, replay_router_config, Scratch, SwitchProcess,
};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const P0_MAC: &str = "02:00:00:00:00:a0";
/// How long strace watches the worker.
const WATCH: Duration = Duration::from_secs(2);

fn gen_traffic(out: &str, args: &[&str]) {
    let st = Command::new(intswitch_bin())
        .args(["gen-traffic", "--out", out, "--count", "2000", "--flows", "1000", "--dst-mac", P0_MAC])
        .args(args)
        .status()
        .expect("run intswitch gen-traffic");
    assert!(st.success(), "gen-traffic {args:?}");
}

fn intctl(d: &Scratch, args: &[&str]) -> Value {
    let out = Command::new(intctl_bin())
        .arg("--socket")
        .arg(d.path("sw.sock"))
        .arg("--json")
        .args(args)
        .output()
        .expect("run intctl");
    assert!(out.status.success(), "intctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("intctl --json prints JSON")
}

/// The thread of the switch's (only) worker, by the name the EAL gives it.
fn worker_thread(pid: u32) -> String {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the switch's threads");
    let names: Vec<(String, String)> = tasks
        .map_while(Result::ok)
        .map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            (t.file_name().to_string_lossy().into_owned(), comm.trim().to_string())
        })
        .collect();
    let workers: Vec<&(String, String)> = names.iter().filter(|(_, n)| n.starts_with("rte-worker")).collect();
    assert_eq!(workers.len(), 1, "one worker thread among {names:?}");
    workers[0].0.clone()
}

/// strace's summary of what thread `tid` called during `WATCH`: the
/// (syscall, calls) rows.
fn syscalls_of(tid: &str) -> Vec<(String, u64)> {
    let out = Command::new("timeout")
        .args(["-s", "INT", &format!("{}", WATCH.as_secs_f64()), "strace", "-c", "-p", tid])
        .output()
        .expect("run strace (scripts/setup.sh installs it)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("Process {tid} attached")), "strace did not attach to {tid}: {err}");
    // Rows: "% time  seconds  usecs/call  calls  [errors]  syscall".
    err.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.last()?;
            let calls = f.get(3)?.parse::<u64>().ok()?;
            (f.first()?.parse::<f64>().is_ok() && name != "total").then(|| (name.to_string(), calls))
        })
        .collect()
}

/// Starts the switch on `cfg`, watches its worker, and checks the worker
/// handled packets through the whole watch and called nothing.
fn watch_worker(d: &Scratch, what: &str, cfg: String, check: impl Fn(&Value)) {
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let sw = SwitchProcess::start(&d.path("c.toml"), None);
    let tid = worker_thread(sw.pid());
    let rx = |v: &Value| v[0]["rx_packets"].as_u64().expect("rx_packets");
    // The worker builds its tables when it starts (allocations, mmap): watch
    // it once it forwards.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut before = rx(&intctl(d, &["show", "workers"]));
    while before < 100_000 {
        assert!(Instant::now() < deadline, "{what}: the worker handled {before} packets in 20 s");
        std::thread::sleep(Duration::from_millis(100));
        before = rx(&intctl(d, &["show", "workers"]));
    }
    let calls = syscalls_of(&tid);
    let after = rx(&intctl(d, &["show", "workers"]));
    let shown = intctl(d, &["show", "counters"]);
    drop(sw.stop());
    assert!(after - before > 200_000, "{what}: the worker handled {} packets while watched", after - before);
    assert!(calls.is_empty(), "{what}: the worker made system calls while forwarding: {calls:?}");
    check(&shown);
}

fn event(counters: &Value, name: &str) -> u64 {
    counters["events"][name].as_u64().unwrap_or_else(|| panic!("event {name} in {counters}"))
}

#[test]
fn workers_make_no_system_call_while_forwarding() {
    let d = Scratch::new("nosys");
    let pcap = |f: &str| d.path(f).display().to_string();

    // Routing 1,000 flows it learns, INT source on the edge port.
    gen_traffic(&pcap("udp.pcap"), &["--src", "10.0.1.10", "--dst", "198.51.100.10", "--vary-dst"]);
    let routed = replay_router_config(
        &d,
        "nosys-rt",
        &d.path("udp.pcap"),
        P0_MAC,
        "198.51.0.0/16",
        &int_source_section(7, "p0", &["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts"]),
    );
    watch_worker(&d, "router with INT source", routed, |c| {
        assert!(event(c, "int_sourced") > 200_000 && event(c, "flow_learned") == 1_000, "{c}")
    });

    // INT sink, a report for every packet to a UDP socket nobody reads.
    let collector = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    gen_traffic(&pcap("int.pcap"), &["--int-hops", "3", "--int-rhc", "2"]);
    // An INT sink at p1's edge replaying int.pcap, with `more` after [int].
    let sink_cfg = |name: &str, more: &str| {
        let int = format!(
            "[int]\nnode_id = 8\nedge_ports = [\"p1\"]\n[[int.collector]]\naddress = \"{}\"\n{more}",
            collector.local_addr().unwrap()
        );
        replay_config(&d, name, "xconnect", &d.path("int.pcap"), P0_MAC, "peer = \"p1\"", "peer = \"p0\"", &int)
    };
    let sink = sink_cfg("nosys-sink", "");
    watch_worker(&d, "INT sink reporting every packet", sink, |c| {
        assert!(event(c, "int_sunk") > 200_000 && event(c, "int_report_queued") > 100_000, "{c}")
    });

    // The same sink with its analytics: flow cache with aging, T events
    // on every packet (the ring fills: counted), histograms, a per_flow
    // and a cnf detection rule, and GPINT's claim check.
    let analytics = sink_cfg(
        "nosys-analytics",
        "[int.analytics]\ncache_rows = 256\nidle_timeout = 1\n[int.analytics.events.hop_latency]\nthreshold = 1\nchange = 1\n\
[[int.expr]]\nname = \"e\"\nexpr = \"hop_latency.max > 0 AND (queue.any.delta > 5 OR e2e_latency.ewma > 1)\"\n\
[[int.detect]]\nname = \"odd\"\npriority = 1\nsrc_port = \"1/1\"\nalgorithm = \"cnf\"\nexpr = \"e\"\n\
[[int.detect]]\nname = \"rest\"\nalgorithm = \"per_flow\"\nthreshold = 10\n[gpint]\n",
    );
    watch_worker(&d, "INT sink with analytics, detection and GPINT", analytics, |c| {
        assert!(event(c, "int_sunk") > 200_000 && event(c, "int_flow_hit") > 200_000, "{c}");
        assert!(event(c, "int_event_hop_latency_t") > 100_000, "{c}");
    });

    // AM-PM initiator, multiplexed marking on a DSCP bit, every flow monitored.
    let ampm = replay_config(
        &d,
        "nosys-ampm",
        "xconnect",
        &d.path("udp.pcap"),
        P0_MAC,
        "peer = \"p1\"",
        "peer = \"p0\"",
        &format!(
            "[ampm]\nnode_id = 9\ninterval = \"1s\"\n[[ampm.flow]]\nname = \"all\"\nflow_mon_id = 1\n\
role = \"initiator\"\nmethod = \"muxed\"\ncarrier = \"dscp\"\nsrc = \"10.0.1.0/24\"\n\
[[ampm.collector]]\naddress = \"{}\"\n",
            collector.local_addr().unwrap()
        ),
    );
    watch_worker(&d, "AM-PM initiator", ampm, |c| assert!(event(c, "ampm_marked") > 200_000, "{c}"));
}
