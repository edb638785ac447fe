//! The embedded demo: routes a generated IPv4+IPv6 UDP mix, replayed
//! forever by net_pcap, out of a net_null port. Needs no NIC and no hugepages.

use std::path::{Path, PathBuf};

use crate::traffic::{self, TrafficSpec};

pub const DEMO_MAC_P0: [u8; 6] = [0x02, 0x49, 0x4e, 0x54, 0x00, 0x00];

/// The demo configuration (router mode), with `pcap` as p0's input.
pub fn config(pcap: &Path) -> String {
    format!(
        r#"name = "demo"
mode = "router"

[eal]
lcores = "0-1"
memory_mb = 512
file_prefix = "intswitch-demo-{pid}"

[dataplane]
mbufs = 8191

[flow_table]
learn = true

[[port]]
name = "p0"
device = "net_pcap0,rx_pcap={pcap},infinite_rx=1"
mac = "02:49:4e:54:00:00"
ipv4 = ["10.0.1.1/24"]
ipv6 = ["2001:db8:1::1/64"]

[[port]]
name = "p1"
device = "net_null0,no-rx=1"
ipv4 = ["10.0.2.1/24"]
ipv6 = ["2001:db8:2::1/64"]

[[route]]
prefix = "198.51.100.0/24"
port = "p1"
via = "10.0.2.254"

[[neighbour]]
ip = "10.0.2.254"
mac = "02:00:00:00:02:fe"
port = "p1"

[[neighbour]]
ip = "2001:db8:2::100"
mac = "02:00:00:00:02:64"
port = "p1"

[[flow]]
in_port = "p0"
src = "10.0.1.10"
dst = "198.51.100.10"
proto = "udp"
src_port = 1024
dst_port = 5001
action = "drop"
"#,
        pid = std::process::id(),
        pcap = pcap.display()
    )
}

/// Writes the demo traffic into `dir` and returns the pcap path: 64 IPv4
/// flows routed via a gateway (one of them dropped by a flow rule) and 64
/// IPv6 flows to a directly connected neighbour.
pub fn write_traffic(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("demo.pcap");
    let v4 = TrafficSpec {
        count: 64,
        flows: 64,
        frame_len: 60,
        src_mac: [0x02, 0, 0, 0, 1, 0x0a],
        dst_mac: DEMO_MAC_P0,
        src: "10.0.1.10".parse().unwrap(),
        dst: "198.51.100.10".parse().unwrap(),
        vary_dst: true,
    };
    let v6 = TrafficSpec {
        src: "2001:db8:1::10".parse().unwrap(),
        dst: "2001:db8:2::100".parse().unwrap(),
        vary_dst: false,
        frame_len: 124,
        ..v4.clone()
    };
    let mut w = dataplane::pcap::PcapWriter::new(std::io::BufWriter::new(std::fs::File::create(&path)?), 65535)?;
    for i in 0..64 {
        w.write(i * 2000, &traffic::frame(&v4, i as usize))?;
        w.write(i * 2000 + 1000, &traffic::frame(&v6, i as usize))?;
    }
    std::io::Write::flush(&mut w.into_inner())?;
    Ok(path)
}
