//! Two Linux hosts in network namespaces talk through intswitch running on
//! net_af_packet ports: ping and a TCP transfer, as an L2 bridge and as an
//! L3 router (IPv4 and IPv6). Needs root (CI runs as root).

use intswitch_tests::{control_section, ns, ping, tcp_transfer, Namespaces, Scratch, SwitchProcess, TRANSFER_BYTES};

fn af_packet_port(name: &str, idx: usize, iface: &str, extra: &str) -> String {
    format!("[[port]]\nname = \"{name}\"\ndevice = \"net_af_packet{idx},iface={iface},framecnt=16384\"\n{extra}\n")
}

fn names(tag: &str) -> (String, String, String) {
    let id = std::process::id() % 100_000;
    (format!("ist{tag}h1-{id}"), format!("ist{tag}h2-{id}"), format!("ist{tag}sw-{id}"))
}

#[test]
fn hosts_talk_through_l2_bridge() {
    let (h1, h2, sw) = names("b");
    let nss = Namespaces::create(&[&h1, &h2, &sw]);
    nss.veth(&h1, "eth0", &sw, "sw-h1");
    nss.veth(&h2, "eth0", &sw, "sw-h2");
    ns(&h1, &["ip", "addr", "add", "10.77.0.1/24", "dev", "eth0"]);
    ns(&h2, &["ip", "addr", "add", "10.77.0.2/24", "dev", "eth0"]);
    let d = Scratch::new("nsbr");
    let cfg = format!(
        "name = \"nsbr\"\nmode = \"bridge\"\n[eal]\nfile_prefix = \"nsbr-{}\"\n[dataplane]\nidle = true\nmbufs = 8191\n{}{}{}",
        std::process::id(),
        control_section(&d),
        af_packet_port("p0", 0, "sw-h1", ""),
        af_packet_port("p1", 1, "sw-h2", "")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), Some(&sw));
    ping(&h1, "10.77.0.2");
    ping(&h2, "10.77.0.1");
    tcp_transfer(&h1, &h2, "10.77.0.2", TRANSFER_BYTES);
    let out = s.stop();
    assert!(out["macs_in_use"].as_u64().unwrap() >= 2, "{out}");
    assert!(out["ports"][1]["tx_bytes"].as_u64().unwrap() > TRANSFER_BYTES as u64);
    assert_eq!(out["drops"]["tx_full"], 0);
}

#[test]
fn hosts_talk_through_l3_router() {
    let (h1, h2, sw) = names("r");
    let nss = Namespaces::create(&[&h1, &h2, &sw]);
    nss.veth(&h1, "eth0", &sw, "sw-h1");
    nss.veth(&h2, "eth0", &sw, "sw-h2");
    for (h, n) in [(&h1, 1), (&h2, 2)] {
        ns(h, &["ip", "addr", "add", &format!("10.78.{n}.2/24"), "dev", "eth0"]);
        ns(h, &["ip", "route", "add", "default", "via", &format!("10.78.{n}.1")]);
        ns(h, &["ip", "-6", "addr", "add", &format!("2001:db8:78:{n}::2/64"), "dev", "eth0", "nodad"]);
        ns(h, &["ip", "-6", "route", "add", "default", "via", &format!("2001:db8:78:{n}::1")]);
    }
    let d = Scratch::new("nsrt");
    let cfg = format!(
        "name = \"nsrt\"\nmode = \"router\"\n[eal]\nfile_prefix = \"nsrt-{}\"\n[dataplane]\nidle = true\nmbufs = 8191\n{}{}{}",
        std::process::id(),
        control_section(&d),
        af_packet_port("p0", 0, "sw-h1", "ipv4 = [\"10.78.1.1/24\"]\nipv6 = [\"2001:db8:78:1::1/64\"]"),
        af_packet_port("p1", 1, "sw-h2", "ipv4 = [\"10.78.2.1/24\"]\nipv6 = [\"2001:db8:78:2::1/64\"]")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), Some(&sw));
    ping(&h1, "10.78.1.1"); // the router's own address
    ping(&h1, "10.78.2.2");
    ping(&h2, "10.78.1.2");
    ping(&h1, "2001:db8:78:2::2");
    ping(&h2, "2001:db8:78:1::1");
    tcp_transfer(&h1, &h2, "10.78.2.2", TRANSFER_BYTES);
    tcp_transfer(&h2, &h1, "2001:db8:78:1::2", TRANSFER_BYTES);
    let out = s.stop();
    assert!(out["events"]["arp_replied"].as_u64().unwrap() >= 1, "{out}");
    assert!(out["events"]["nd_replied"].as_u64().unwrap() >= 1, "{out}");
    assert!(out["events"]["icmp_echo_replied"].as_u64().unwrap() >= 3, "{out}");
    let neigh = out["neighbours"].as_array().unwrap();
    assert!(neigh.len() >= 4, "both hosts learned over ARP and ND: {neigh:?}");
    assert_eq!(out["drops"]["ttl_exceeded"], 0);
    assert_eq!(out["drops"]["tx_full"], 0);
}
