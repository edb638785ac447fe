//! Two Linux hosts in network namespaces talk through intswitch running on
//! net_af_packet ports: ping and a TCP transfer, as an L2 bridge and as an
//! L3 router (IPv4 and IPv6); and a three-port bridge whose two workers
//! share what they learn. Needs root (CI runs as root).

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

/// A three-port bridge with two workers: worker 0 polls h1's port, worker 1
/// those of h2 and h3. Neither sees the other's hosts' frames, so each
/// forwards to them only because the other announced what it learned: once
/// h1 and h2 have spoken, unicast between them no longer reaches h3.
#[test]
fn two_workers_bridge_share_what_they_learn() {
    let id = std::process::id() % 100_000;
    let [h1, h2, h3, sw] = ["h1", "h2", "h3", "sw"].map(|n| format!("istm{n}-{id}"));
    let nss = Namespaces::create(&[&h1, &h2, &h3, &sw]);
    // No IPv6: its multicast chatter would be flooded to h3 too.
    for n in [&h1, &h2, &h3, &sw] {
        ns(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        ns(n, &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
    }
    for (h, i) in [(&h1, 1), (&h2, 2), (&h3, 3)] {
        nss.veth(h, "eth0", &sw, &format!("sw-h{i}"));
        ns(h, &["ip", "addr", "add", &format!("10.79.0.{i}/24"), "dev", "eth0"]);
    }
    let d = Scratch::new("nsbr2w");
    let cfg = format!(
        "name = \"nsbr2w\"\nmode = \"bridge\"\n[eal]\nlcores = \"0@0,1@1,2@1\"\nfile_prefix = \"nsbr2w-{id}\"\n\
[dataplane]\nidle = true\nmbufs = 8191\n{}{}{}{}\
[[worker]]\nlcore = 1\nrx = [\"p0:0\", \"p0:1\"]\n[[worker]]\nlcore = 2\nrx = [\"p1:0\", \"p1:1\", \"p2:0\", \"p2:1\"]\n",
        control_section(&d),
        // Two queue pairs: a TX queue for each worker (and two RX queues the
        // kernel's fanout spreads frames over, both polled by the port's worker).
        af_packet_port("p0", 0, "sw-h1,qpairs=2", ""),
        af_packet_port("p1", 1, "sw-h2,qpairs=2", ""),
        af_packet_port("p2", 2, "sw-h3,qpairs=2", "")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let s = SwitchProcess::start(&d.path("c.toml"), Some(&sw));
    // Learned: h1 (worker 0, from its ARP request) and h2 (worker 1, from its reply).
    ping(&h1, "10.79.0.2");
    let mut c = control::client::Client::connect(&d.path("sw.sock").display().to_string()).unwrap();
    let mut to_h3 = || c.call("show_counters", serde_json::json!({})).unwrap()["ports"][2]["tx_packets"].as_u64();
    let before = to_h3();
    // Twenty more echo requests and replies, none of them for h3.
    ns(&h1, &["ping", "-c", "20", "-i", "0.01", "-W", "1", "-q", "10.79.0.2"]);
    let after = to_h3();
    // Each worker's table has both hosts: its own from frames, the other's
    // from the announcement.
    let macs = c.call("show_macs", serde_json::json!({})).unwrap();
    let mac_of = |h: &str| ns(h, &["cat", "/sys/class/net/eth0/address"]).trim().to_string();
    for w in 0..2 {
        for (h, port) in [(&h1, "p0"), (&h2, "p1")] {
            let mac = mac_of(h);
            assert!(
                macs.as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["worker"] == w && m["mac"] == mac.as_str() && m["port"] == port),
                "worker {w} lacks {h} ({mac}) on {port}: {macs}"
            );
        }
    }
    drop(c);
    let out = s.stop();
    assert_eq!(after, before, "unicast between h1 and h2 flooded to h3: {out}");
    assert!(out["events"]["mac_synced"].as_u64().unwrap() >= 2, "{out}");
    assert_eq!(out["macs_in_use"].as_u64(), Some(4), "h1 and h2 in both workers' tables: {out}");
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

/// Sends IPv4 UDP frames on `tx` (raw, to the router's MAC `dmac`): `good`
/// of them whole, `bad` with a header checksum one bit off, each marked by
/// its payload; prints the markers of the good ones that came out of `rx`
/// routed (TTL 63, a valid checksum, to MAC `nmac`) within 3 s, one a line.
const TAP_FRAMES: &str = r#"
import socket, struct, sys, time
tx, rx, dmac, nmac, good, bad = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
mac = lambda s: bytes.fromhex(s.replace(":", ""))
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def frame(i, ok):
    payload = b"tap%05d" % i
    udp = struct.pack("!HHHH", 4000, 5000, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0, 64, 17, 0,
                     bytes([10, 78, 0, 2]), bytes([10, 78, 1, 2]))
    c = csum(ip) ^ (0 if ok else 0x0100)
    ip = ip[:10] + struct.pack("!H", c) + ip[12:]
    return mac(dmac) + mac("02:00:00:00:78:10") + b"\x08\x00" + ip + udp
r = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
r.bind((rx, 0))
r.settimeout(0.2)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((tx, 0))
for i in range(good + bad):
    s.send(frame(i, i < good))
seen, end = set(), time.time() + 3
while time.time() < end and len(seen) < good + bad:
    try:
        f = r.recv(2048)
    except socket.timeout:
        continue
    ip = f[14:34]
    if f[:6] == mac(nmac) and f[12:14] == b"\x08\x00" and ip[8] == 63 and csum(ip) == 0 and f[42:45] == b"tap":
        seen.add(int(f[45:50]))
for i in sorted(seen):
    print(i)
"#;

/// A router on two net_tap ports, whose device verifies IPv4 header
/// checksums in its receive path: the ports say so (`rx_checksum_offload`,
/// or not where the config turns it off), and either way whole headers are
/// routed and headers with a bad checksum dropped as `ipv4_bad_checksum`,
/// none lost or let through. Raw frames from the kernel's side of one tap
/// to the router's MAC, read back on the other's.
#[test]
fn a_router_on_tap_ports_takes_the_nics_checksum_verdict() {
    let (_, _, sw) = names("t");
    let _nss = Namespaces::create(&[&sw]);
    ns(&sw, &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
    let id = std::process::id() % 100_000;
    let (tap0, tap1) = (format!("istap0-{id}"), format!("istap1-{id}"));
    for offload in [true, false] {
        let d = Scratch::new("nstap");
        let port = |name: &str, idx: usize, iface: &str, n: u8, extra: &str| {
            format!(
                "[[port]]\nname = \"{name}\"\ndevice = \"net_tap{idx},iface={iface}\"\nmac = \"02:00:00:00:78:0{n}\"\n\
                 ipv4 = [\"10.78.{idx}.1/24\"]\n{extra}\n"
            )
        };
        let cfg = format!(
            "name = \"nstap\"\nmode = \"router\"\n[eal]\nfile_prefix = \"nstap-{}\"\n[dataplane]\nidle = true\n\
             mbufs = 8191\n{}{}{}[[neighbour]]\nip = \"10.78.1.2\"\nmac = \"02:00:00:00:78:22\"\nport = \"t1\"\n",
            std::process::id(),
            control_section(&d),
            port("t0", 0, &tap0, 1, &format!("rx_checksum_offload = {offload}")),
            port("t1", 1, &tap1, 2, "")
        );
        std::fs::write(d.path("c.toml"), cfg).unwrap();
        let s = SwitchProcess::start(&d.path("c.toml"), Some(&sw));
        let out = std::process::Command::new(intswitch_tests::intctl_bin())
            .arg("--socket")
            .arg(d.path("sw.sock"))
            .args(["--json", "show", "ports"])
            .output()
            .unwrap();
        let ports: serde_json::Value = serde_json::from_slice(&out.stdout).expect("show ports");
        assert_eq!(ports[0]["driver"], "net_tap", "{ports}");
        assert_eq!(ports[0]["rx_checksum_offload"], offload, "{ports}");
        assert_eq!(ports[1]["rx_checksum_offload"], true, "{ports}");
        let (good, bad) = (40, 9);
        let args = [&tap0, &tap1, "02:00:00:00:78:01", "02:00:00:00:78:22", &good.to_string(), &bad.to_string()]
            .map(|a| a.to_string());
        let mut cmd = vec!["python3", "-c", TAP_FRAMES];
        cmd.extend(args.iter().map(|a| a.as_str()));
        let routed: Vec<usize> = ns(&sw, &cmd).lines().map(|l| l.trim().parse().unwrap()).collect();
        assert_eq!(routed, (0..good).collect::<Vec<_>>(), "offload {offload}: every whole header routed, no bad one");
        let out = s.stop();
        assert_eq!(out["drops"]["ipv4_bad_checksum"], bad, "offload {offload}: {out}");
    }
}
