//! The namespace testbed (scripts/testbed.sh) end to end: shipped
//! topologies come up, every host reaches every other, `down` leaves nothing
//! behind even after a failed `up`. Testbeds here run one after another.

use std::process::Command;
use std::sync::Mutex;

use intswitch_tests::{ping, tcp_transfer, Scratch, Testbed};

/// Namespace names are global: one testbed at a time in this binary.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn namespaces_of(tb: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("tb-{tb}-")))
        .map(str::to_string)
        .collect()
}

fn switch_processes(state_hint: &str) -> usize {
    let out = Command::new("pgrep").args(["-f", state_hint]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn chain3_hosts_reach_each_other_through_three_routers() {
    let _g = serial();
    let tb = Testbed::up(&Testbed::shipped("chain3"));
    let (h1, h2) = (tb.ns("h1"), tb.ns("h2"));
    for (from, to) in [(&h1, "10.31.2.2"), (&h2, "10.31.1.2"), (&h1, "2001:db8:31:2::2"), (&h2, "2001:db8:31:1::2")] {
        ping(from, to);
    }
    tcp_transfer(&h1, &h2, "10.31.2.2", 2 << 20);
    tcp_transfer(&h2, &h1, "2001:db8:31:1::2", 2 << 20);
    // Counters through intctl: the transfer crossed s2, with no drop beyond
    // the kernel's own multicast chatter.
    let s2 = tb.intctl("s2", &["show", "counters"]);
    assert!(s2["ports"][1]["tx_bytes"].as_u64().unwrap() > 2 << 20, "{s2}");
    for s in ["s1", "s2", "s3"] {
        let d = tb.intctl(s, &["show", "drops"]);
        for (reason, n) in d["total"].as_object().unwrap() {
            let n = n.as_u64().unwrap();
            assert!(n == 0 || reason == "l3_multicast", "{s}: {reason} = {n}");
        }
    }
    let (ok, out) = tb.run(&["status", &tb.file.display().to_string()]);
    assert!(ok && out.contains("\"alive\": true"), "{out}");
    let (ok, out) = tb.down();
    assert!(ok, "{out}");
    assert!(namespaces_of("chain3").is_empty());
}

#[test]
fn leafspine_every_host_reaches_every_other() {
    let _g = serial();
    let tb = Testbed::up(&Testbed::shipped("leafspine"));
    let hosts = ["h1", "h2", "h3", "h4"];
    for (i, a) in hosts.iter().enumerate() {
        for (j, _) in hosts.iter().enumerate() {
            if i != j {
                ping(&tb.ns(a), &format!("10.33.{}.2", j + 1));
                ping(&tb.ns(a), &format!("2001:db8:33:{}::2", j + 1));
            }
        }
    }
    for (a, b) in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)] {
        tcp_transfer(&tb.ns(hosts[a]), &tb.ns(hosts[b]), &format!("10.33.{}.2", b + 1), 1 << 20);
    }
    tcp_transfer(&tb.ns("h2"), &tb.ns("h3"), "2001:db8:33:3::2", 1 << 20);
    // Both spines carried traffic (the static routes split the paths).
    for sp in ["sp1", "sp2"] {
        let c = tb.intctl(sp, &["show", "counters"]);
        // Transfers run from leaf1's hosts to leaf2's: toward leaf2 is port p1.
        assert!(c["ports"][1]["tx_bytes"].as_u64().unwrap() > 1 << 20, "{sp}: {c}");
    }
}

#[test]
fn down_after_a_failed_up_leaves_nothing() {
    let _g = serial();
    let d = Scratch::new("tb-broken");
    // chain3 under another name, with s2's configuration broken.
    let topo = std::fs::read_to_string(Testbed::shipped("chain3"))
        .unwrap()
        .replace("name = \"chain3\"", "name = \"broken3\"")
        .replace(
            "role = \"int-transit\"\nmode = \"router\"\nconfig = \"\"\"\n",
            "role = \"int-transit\"\nmode = \"router\"\nconfig = \"\"\"\nturbo = true\n",
        );
    assert!(topo.contains("turbo"));
    std::fs::write(d.path("broken3.toml"), topo).unwrap();
    let (tb, msg) = match Testbed::try_up(&d.path("broken3.toml")) {
        Ok(_) => panic!("up with a broken switch config must fail"),
        Err(e) => e,
    };
    assert!(msg.contains("s2") && msg.contains("turbo"), "the failure names the switch and the key: {msg}");
    let (ok, out) = tb.down();
    assert!(ok, "{out}");
    assert!(namespaces_of("broken3").is_empty(), "namespaces left: {:?}", namespaces_of("broken3"));
    assert_eq!(switch_processes("tb-broken3-"), 0, "switch processes left");
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&links.stdout).contains("broken3"));
}

#[test]
fn ampm_link_impairments_change_live() {
    let _g = serial();
    let tb = Testbed::up(&Testbed::shipped("ampm"));
    let (h1, h2) = (tb.ns("h1"), tb.ns("h2"));
    ping(&h1, "10.32.0.2");
    let rtt = |count: &str| -> f64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &h1, "ping", "-c", count, "-i", "0.2", "-W", "3", "10.32.0.2"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        // rtt min/avg/max/mdev = a/b/c/d ms
        s.lines()
            .find(|l| l.contains("min/avg/max"))
            .and_then(|l| l.split('=').nth(1))
            .and_then(|v| v.trim().split('/').next().map(|x| x.parse::<f64>().unwrap()))
            .unwrap_or_else(|| panic!("no rtt in: {s}"))
    };
    assert!(rtt("3") < 10.0);
    // 20 ms one way from MP1 to MP2, 5 ms back: the minimum RTT moves by 25 ms.
    assert!(tb.run(&["impair", "mp1-mp2", "delay", "20ms"]).0);
    assert!(tb.run(&["impair", "mp1-mp2", "--reverse", "delay", "5ms"]).0);
    let with_delay = rtt("5");
    assert!((25.0..32.0).contains(&with_delay), "min rtt {with_delay} ms");
    // Random loss: TCP still delivers every byte, and MP1 counts what it dropped.
    assert!(tb.run(&["impair", "mp1-mp2", "loss", "5%"]).0);
    assert!(tb.run(&["impair", "mp1-mp2", "--reverse", "none"]).0);
    tcp_transfer(&h1, &h2, "10.32.0.2", 1 << 20);
    let lost = tb.intctl("mp1", &["show", "drops"])["total"]["impair_loss"].as_u64().unwrap();
    assert!(lost > 0, "loss was applied");
    assert_eq!(tb.intctl("mp1", &["show", "ports"])[1]["impair"], "loss 5% limit 1000");
    // Removing it restores the plain link.
    assert!(tb.run(&["impair", "mp1-mp2", "none"]).0);
    assert!(rtt("3") < 10.0);
    // A host-side impairment needs kernel netem; the error says how to proceed.
    let (ok, out) = tb.run(&["impair", "h1-mp1", "delay", "1ms"]);
    if !ok {
        assert!(out.contains("impair the direction a switch sends instead"), "{out}");
    }
}
