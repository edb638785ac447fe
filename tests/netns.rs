//! Two Linux hosts in network namespaces talk through intswitch running on
//! net_af_packet ports: ping and a TCP transfer, as an L2 bridge and as an
//! L3 router (IPv4 and IPv6). Needs root (CI runs as root).

use intswitch_tests::{control_section, ns, ns_try, Namespaces, Scratch, SwitchProcess};

const TRANSFER_BYTES: usize = 4 * 1024 * 1024;

/// Sends TRANSFER_BYTES from h1 to `dst` on h2 over TCP; checks the SHA-256
/// on both ends with Python's own TCP stack.
fn tcp_transfer(h1: &str, h2: &str, dst: &str) {
    let server = format!(
        "import socket,hashlib\ns=socket.socket(socket.AF_INET6 if ':' in '{dst}' else socket.AF_INET)\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('{dst}',5201))\ns.listen(1)\ns.settimeout(60)\nc,_=s.accept()\nc.settimeout(60)\nh=hashlib.sha256()\nn=0\nwhile True:\n  b=c.recv(65536)\n  if not b: break\n  h.update(b); n+=len(b)\nprint(n,h.hexdigest())\n"
    );
    let client = format!(
        "import socket,hashlib,time,os\ndata=bytes((i*7)%251 for i in range({TRANSFER_BYTES}))\nfor i in range(50):\n  try:\n    c=socket.create_connection(('{dst}',5201),timeout=5); break\n  except OSError: time.sleep(0.2)\nc.settimeout(60)\nc.sendall(data)\nc.close()\nprint({TRANSFER_BYTES},hashlib.sha256(data).hexdigest())\n"
    );
    let h2n = h2.to_string();
    let srv = std::thread::spawn(move || ns_try(&h2n, &["timeout", "90", "python3", "-c", &server]));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (ok, sent) = ns_try(h1, &["timeout", "90", "python3", "-c", &client]);
    let (sok, got) = srv.join().unwrap();
    assert!(ok && sok, "client: {sent}\nserver: {got}");
    assert_eq!(sent.trim(), got.trim(), "received bytes differ from sent");
}

fn ping(from: &str, to: &str) {
    // One warm-up (address resolution), then three that must all come back.
    let _ = ns_try(from, &["ping", "-c", "1", "-W", "2", to]);
    ns(from, &["ping", "-c", "3", "-i", "0.2", "-W", "2", to]);
}

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
    tcp_transfer(&h1, &h2, "10.77.0.2");
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
    tcp_transfer(&h1, &h2, "10.78.2.2");
    tcp_transfer(&h2, &h1, "2001:db8:78:1::2");
    let out = s.stop();
    assert!(out["events"]["arp_replied"].as_u64().unwrap() >= 1, "{out}");
    assert!(out["events"]["nd_replied"].as_u64().unwrap() >= 1, "{out}");
    assert!(out["events"]["icmp_echo_replied"].as_u64().unwrap() >= 3, "{out}");
    let neigh = out["neighbours"].as_array().unwrap();
    assert!(neigh.len() >= 4, "both hosts learned over ARP and ND: {neigh:?}");
    assert_eq!(out["drops"]["ttl_exceeded"], 0);
    assert_eq!(out["drops"]["tx_full"], 0);
}
