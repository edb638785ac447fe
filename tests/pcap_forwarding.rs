//! End-to-end on vdevs: frames in from net_pcap files, the expected bytes out
//! on the expected port (net_pcap tx files), counters equal. Expected output
//! is built here byte by byte, not with the switch's own encoders.

use std::time::Duration;

use control::client::Client;
use intswitch_tests::{control_section, inet_checksum, read_pcap, run_for, write_pcap, Scratch, SwitchProcess};
use serde_json::{json, Value};

const P0_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xa0, 0];
const P1_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xa1, 0];
const H1: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const H2: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

/// Ethernet + IPv4 (+ UDP with payload), checksums computed here.
fn ipv4_udp(dst_mac: [u8; 6], src_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], ttl: u8, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let mut f = Vec::new();
    f.extend(dst_mac);
    f.extend(src_mac);
    f.extend([0x08, 0x00]);
    let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, ttl, 17, 0, 0];
    ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    ip.extend(src);
    ip.extend(dst);
    let c = inet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend(&ip);
    f.extend([0x30, 0x39, 0x13, 0x89]);
    f.extend((udp_len as u16).to_be_bytes());
    f.extend([0, 0]); // UDP checksum 0: not used over IPv4
    f.extend(payload);
    f
}

fn ipv6_udp(dst_mac: [u8; 6], src_mac: [u8; 6], src: [u8; 16], dst: [u8; 16], hop: u8, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let mut f = Vec::new();
    f.extend(dst_mac);
    f.extend(src_mac);
    f.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend((udp_len as u16).to_be_bytes());
    f.extend([17, hop]);
    f.extend(src);
    f.extend(dst);
    let mut pseudo = Vec::new();
    pseudo.extend(src);
    pseudo.extend(dst);
    pseudo.extend((udp_len as u32).to_be_bytes());
    pseudo.extend([0, 0, 0, 17]);
    let mut udp = vec![0x30, 0x39, 0x13, 0x89];
    udp.extend((udp_len as u16).to_be_bytes());
    udp.extend([0, 0]);
    udp.extend(payload);
    pseudo.extend(&udp);
    let c = inet_checksum(&pseudo);
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f.extend(udp);
    f
}

fn v6(last: u8, net: u8) -> [u8; 16] {
    [0x20, 0x01, 0x0d, 0xb8, 0, net, 0, 0, 0, 0, 0, 0, 0, 0, 0, last]
}

fn pad60(mut f: Vec<u8>) -> Vec<u8> {
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

fn port_cfg(name: &str, idx: usize, dir: &Scratch, extra: &str) -> String {
    let device = format!(
        "net_pcap{idx},rx_pcap={},tx_pcap={}",
        dir.path(&format!("in{idx}.pcap")).display(),
        dir.path(&format!("out{idx}.pcap")).display()
    );
    port_with_device(name, &device, extra)
}

fn port_with_device(name: &str, device: &str, extra: &str) -> String {
    format!("[[port]]\nname = \"{name}\"\ndevice = \"{device}\"\n{extra}\n")
}

/// The router tests' ports: p0 towards H1, p1 towards H2, and H2's
/// addresses as static neighbours on p1.
const P0_ROUTER: &str = "mac = \"02:00:00:00:a0:00\"\nipv4 = [\"10.0.1.1/24\"]\nipv6 = [\"2001:db8:1::1/64\"]";
const P1_ROUTER: &str = "mac = \"02:00:00:00:a1:00\"\nipv4 = [\"10.0.2.1/24\"]\nipv6 = [\"2001:db8:2::1/64\"]";
const H2_NEIGHBOURS: &str = "[[neighbour]]\nip = \"10.0.2.2\"\nmac = \"02:00:00:00:00:02\"\nport = \"p1\"\n[[neighbour]]\nip = \"2001:db8:2::2\"\nmac = \"02:00:00:00:00:02\"\nport = \"p1\"\n";

fn header(name: &str, mode: &str, dir: &Scratch) -> String {
    format!(
        "name = \"{name}\"\nmode = \"{mode}\"\n[eal]\nfile_prefix = \"{name}-{}\"\n[dataplane]\nidle = true\nmbufs = 4095\n{}",
        std::process::id(),
        control_section(dir)
    )
}

/// An ARP request from `mac` (`sender`) for `target`, unpadded.
fn arp_request(mac: [u8; 6], sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend(mac);
    f.extend([0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend(mac);
    f.extend(sender);
    f.extend([0; 6]);
    f.extend(target);
    f
}

/// Frames for the cross-connect tests: good IPv4, a bad IPv4 total length,
/// IPv6, a truncated IPv4 header, ARP, VLAN-tagged, and one a flow rule
/// drops (from 10.0.0.9).
fn xconnect_frames() -> [Vec<u8>; 7] {
    let good = ipv4_udp(H2, H1, [10, 0, 0, 1], [10, 0, 0, 2], 64, b"hello");
    let v6f = ipv6_udp(H2, H1, v6(1, 1), v6(2, 1), 64, b"six");
    let arp = arp_request(H1, [10, 0, 0, 1], [10, 0, 0, 2]);
    let mut vlan = good[..12].to_vec();
    vlan.extend([0x81, 0x00, 0x00, 0x64]);
    vlan.extend(&good[12..]);
    let mut bad_len = good.clone();
    bad_len[16..18].copy_from_slice(&1500u16.to_be_bytes());
    let truncated = good[..20].to_vec();
    let dropped_by_flow = ipv4_udp(H2, H1, [10, 0, 0, 9], [10, 0, 0, 2], 64, b"x");
    [good, bad_len, v6f, truncated, arp, vlan, dropped_by_flow]
}

/// Runs a cross-connect p0 <-> p1 over the frames (p1 sends one IPv6 frame
/// back); `flows` is appended to the config. `name` keeps the EAL file
/// prefix apart from the other tests running at the same time.
fn run_xconnect(name: &str, d: &Scratch, flows: &str) -> (serde_json::Value, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let frames = xconnect_frames();
    write_pcap(&d.path("in0.pcap"), &frames);
    write_pcap(&d.path("in1.pcap"), std::slice::from_ref(&frames[2]));
    let cfg = format!(
        "{}{}{}{flows}",
        header(name, "xconnect", d),
        port_cfg("p0", 0, d, "peer = \"p1\""),
        port_cfg("p1", 1, d, "peer = \"p0\"")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let out = run_for(&d.path("c.toml"), 2.0);
    let v6_back = read_pcap(&d.path("out0.pcap"));
    assert_eq!(v6_back, vec![frames[2].clone()]);
    assert_eq!(out["ports"][0]["rx_packets"], 7);
    assert_eq!(out["ports"][0]["tx_packets"], 1);
    (out, read_pcap(&d.path("out1.pcap")), frames.to_vec())
}

#[test]
fn xconnect_passes_bytes_unchanged_and_drops_malformed() {
    let d = Scratch::new("xc");
    let rule = "[[flow]]\nin_port = \"p0\"\nsrc = \"10.0.0.9\"\ndst = \"10.0.0.2\"\nproto = \"udp\"\nsrc_port = 12345\ndst_port = 5001\naction = \"drop\"\n";
    let (out, sent, f) = run_xconnect("xc", &d, rule);
    // A flow rule makes the cross-connect parse: malformed frames are dropped.
    assert_eq!(sent, vec![f[0].clone(), f[2].clone(), f[4].clone(), f[5].clone()]);
    assert_eq!(out["ports"][1]["tx_packets"], 4);
    assert_eq!(out["drops"]["ipv4_bad_total_length"], 1);
    assert_eq!(out["drops"]["eth_truncated"].as_u64().unwrap() + out["drops"]["ipv4_truncated"].as_u64().unwrap(), 1);
    assert_eq!(out["drops"]["flow_drop"], 1);
    assert_eq!(out["total_drops"], 3);
    // ethdev's own counters agree with ours.
    assert_eq!(out["ports"][1]["ethdev"]["opackets"], 4);
}

#[test]
fn xconnect_without_flow_rules_is_a_wire() {
    let d = Scratch::new("xcw");
    let (out, sent, f) = run_xconnect("xcw", &d, "");
    // Nothing reads the packets: every frame passes as it came, malformed too.
    assert_eq!(sent, f);
    let bytes: usize = f.iter().map(|x| x.len()).sum();
    assert_eq!(out["ports"][0]["rx_bytes"], bytes);
    assert_eq!(out["ports"][1]["tx_packets"], 7);
    assert_eq!(out["ports"][1]["tx_bytes"], bytes);
    assert_eq!(out["ports"][1]["ethdev"]["opackets"], 7);
    assert_eq!(out["total_drops"], 0);
}

/// A three-port bridge fed `in0` on p0 and `in1` on p1 (p2 receives
/// nothing); p0's burst is processed before p1's in the same poll.
fn run_bridge3(name: &str, d: &Scratch, in0: &[Vec<u8>], in1: &[Vec<u8>]) -> serde_json::Value {
    write_pcap(&d.path("in0.pcap"), in0);
    write_pcap(&d.path("in1.pcap"), in1);
    write_pcap(&d.path("in2.pcap"), &[]);
    let cfg = format!(
        "{}{}{}{}",
        header(name, "bridge", d),
        port_cfg("p0", 0, d, ""),
        port_cfg("p1", 1, d, ""),
        port_cfg("p2", 2, d, "")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    run_for(&d.path("c.toml"), 2.0)
}

#[test]
fn bridge_floods_unknown_then_forwards_learned() {
    let d = Scratch::new("br");
    let a_to_b = ipv4_udp(H2, H1, [10, 0, 0, 1], [10, 0, 0, 2], 64, b"ab");
    let bcast = ipv4_udp([0xff; 6], H1, [10, 0, 0, 1], [10, 0, 0, 255], 64, b"bc");
    let b_to_a = ipv4_udp(H1, H2, [10, 0, 0, 2], [10, 0, 0, 1], 64, b"ba");
    // p0's burst is processed before p1's in the same poll: H1 is learned first.
    let out = run_bridge3("br", &d, &[a_to_b.clone(), bcast.clone()], std::slice::from_ref(&b_to_a));
    assert_eq!(read_pcap(&d.path("out0.pcap")), vec![b_to_a]);
    assert_eq!(read_pcap(&d.path("out1.pcap")), vec![a_to_b.clone(), bcast.clone()]);
    assert_eq!(read_pcap(&d.path("out2.pcap")), vec![a_to_b, bcast]);
    assert_eq!(out["events"]["flooded"], 2);
    assert_eq!(out["events"]["mac_learned"], 2);
    assert_eq!(out["macs_in_use"], 2);
    assert_eq!(out["total_drops"], 0);
}

/// The bridge reuses a verdict for frames whose first bytes repeat, and
/// moves a burst that all leaves by one port in one piece: a learn between
/// two equal frames, and a tagged frame with the same MACs, must still be
/// decided afresh.
#[test]
fn bridge_repeated_frames_follow_learning_within_a_burst() {
    let d = Scratch::new("brm");
    const H3: [u8; 6] = [0x02, 0, 0, 0, 0, 3];
    const H9: [u8; 6] = [0x02, 0, 0, 0, 0, 9];
    let a_to_c = ipv4_udp(H3, H1, [10, 0, 0, 1], [10, 0, 0, 3], 64, b"ac");
    let c_to_x = ipv4_udp(H9, H3, [10, 0, 0, 3], [10, 0, 0, 9], 64, b"cx");
    // A to C again, 802.1Q VLAN 5: the MACs repeat, the VLAN differs.
    let mut a_to_c_vlan = a_to_c[..12].to_vec();
    a_to_c_vlan.extend([0x81, 0x00, 0x00, 0x05]);
    a_to_c_vlan.extend(&a_to_c[12..]);
    let b_to_a = ipv4_udp(H1, H2, [10, 0, 0, 2], [10, 0, 0, 1], 64, b"ba");
    // One burst on p0: C is unknown (flooded), then learned on p0, so the
    // same A-to-C frames are now for their own segment (dropped).
    let in0 = [a_to_c.clone(), c_to_x.clone(), a_to_c.clone(), a_to_c.clone(), a_to_c.clone(), a_to_c_vlan.clone()];
    // Then a uniform burst on p1, all to A (learned on p0 just before).
    let out = run_bridge3("brm", &d, &in0, &[b_to_a.clone(), b_to_a.clone(), b_to_a.clone()]);
    assert_eq!(read_pcap(&d.path("out0.pcap")), vec![b_to_a.clone(), b_to_a.clone(), b_to_a]);
    let flooded = vec![a_to_c, c_to_x, a_to_c_vlan];
    assert_eq!(read_pcap(&d.path("out1.pcap")), flooded);
    assert_eq!(read_pcap(&d.path("out2.pcap")), flooded);
    assert_eq!(out["drops"]["l2_same_segment"], 3);
    assert_eq!(out["total_drops"], 3);
    assert_eq!(out["events"]["flooded"], 3);
    // A and C on p0, A again in VLAN 5, B on p1.
    assert_eq!(out["events"]["mac_learned"], 4);
    assert_eq!(out["ports"][0]["tx_packets"], 3);
}

/// A two-port bridge floods a burst of unknown unicast to the one other
/// port in one piece: every frame out, each counted as flooded.
#[test]
fn two_port_bridge_floods_a_burst_to_the_other_port() {
    let d = Scratch::new("br2");
    let a_to_b = ipv4_udp(H2, H1, [10, 0, 0, 1], [10, 0, 0, 2], 64, b"ab");
    let frames = vec![a_to_b.clone(), a_to_b.clone(), a_to_b.clone(), a_to_b];
    write_pcap(&d.path("in0.pcap"), &frames);
    write_pcap(&d.path("in1.pcap"), &[]);
    let cfg = format!("{}{}{}", header("br2", "bridge", &d), port_cfg("p0", 0, &d, ""), port_cfg("p1", 1, &d, ""));
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let out = run_for(&d.path("c.toml"), 2.0);
    assert_eq!(read_pcap(&d.path("out1.pcap")), frames);
    assert_eq!(read_pcap(&d.path("out0.pcap")), Vec::<Vec<u8>>::new());
    assert_eq!(out["events"]["flooded"], 4);
    assert_eq!(out["events"]["mac_learned"], 1);
    assert_eq!(out["ports"][1]["tx_packets"], 4);
    let bytes: usize = frames.iter().map(|f| f.len()).sum();
    assert_eq!(out["ports"][1]["tx_bytes"], bytes);
    assert_eq!(out["total_drops"], 0);
}

/// A burst that leaves whole by the port the last one from its input port
/// did is received straight into that port's TX buffer; every other kind
/// is taken back out and bridged frame by frame. Bursts of 64 (the pcap
/// is read 64 frames a poll): each kind of turn the expectation can take,
/// with every frame out in order, by the right port, counted once.
#[test]
fn bridge_bursts_received_into_the_expected_port_and_taken_back_out() {
    let d = Scratch::new("brx");
    const H3: [u8; 6] = [0x02, 0, 0, 0, 0, 3];
    let mut seq = 0u32;
    let mut frames = |dst: [u8; 6], n: usize| -> Vec<Vec<u8>> {
        (0..n)
            .map(|_| {
                seq += 1;
                // Frames differ past their first 16 bytes only.
                ipv4_udp(dst, H1, [10, 0, 0, 1], [10, 0, 0, 9], 64, &seq.to_be_bytes())
            })
            .collect()
    };
    let to_b1 = frames(H2, 64); // uniform, to p1: expected from now on
    let to_b2 = frames(H2, 64); // the same: received into p1's buffer
    let mixed = [frames(H2, 32), frames(H3, 32)].concat(); // taken back out
    let to_c = frames(H3, 64); // uniform, to p2: expected from now on
    let to_b3 = frames(H2, 64); // expected p2, goes to p1: taken back out
    let bcast = frames([0xff; 6], 64); // flooded to two ports: taken back out
    let own = frames(H1, 10); // H1 is on p0 itself: dropped
    let in0 = [to_b1.clone(), to_b2.clone(), mixed.clone(), to_c.clone(), to_b3.clone(), bcast.clone(), own].concat();
    write_pcap(&d.path("in0.pcap"), &in0);
    write_pcap(&d.path("in1.pcap"), &[]);
    write_pcap(&d.path("in2.pcap"), &[]);
    let statics = "[[bridge.static_mac]]\nmac = \"02:00:00:00:00:02\"\nport = \"p1\"\n\
                   [[bridge.static_mac]]\nmac = \"02:00:00:00:00:03\"\nport = \"p2\"\n";
    let cfg = format!(
        "{}{}{}{}{statics}",
        header("brx", "bridge", &d),
        port_cfg("p0", 0, &d, ""),
        port_cfg("p1", 1, &d, ""),
        port_cfg("p2", 2, &d, "")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let out = run_for(&d.path("c.toml"), 2.0);
    let want1 = [to_b1, to_b2, mixed[..32].to_vec(), to_b3, bcast.clone()].concat();
    let want2 = [mixed[32..].to_vec(), to_c, bcast].concat();
    assert_eq!(read_pcap(&d.path("out1.pcap")), want1);
    assert_eq!(read_pcap(&d.path("out2.pcap")), want2);
    assert_eq!(read_pcap(&d.path("out0.pcap")), Vec::<Vec<u8>>::new());
    assert_eq!(out["ports"][0]["rx_packets"], in0.len());
    assert_eq!(out["ports"][1]["tx_packets"], want1.len());
    assert_eq!(out["ports"][2]["tx_packets"], want2.len());
    let bytes: usize = want1.iter().map(|f| f.len()).sum();
    assert_eq!(out["ports"][1]["tx_bytes"], bytes);
    assert_eq!(out["events"]["flooded"], 64);
    assert_eq!(out["drops"]["l2_same_segment"], 10);
    assert_eq!(out["total_drops"], 10);
}

/// What the router sends to H2 out of p1 for `f` (IPv4 or IPv6 from H1):
/// MACs rewritten, TTL / hop limit one less, IPv4 header checksum
/// recomputed here.
fn routed_to_h2(f: &[u8]) -> Vec<u8> {
    let mut want = f.to_vec();
    want[0..6].copy_from_slice(&H2);
    want[6..12].copy_from_slice(&P1_MAC);
    if want[12..14] == [0x86, 0xdd] {
        want[21] -= 1;
    } else {
        want[22] -= 1;
        want[24..26].copy_from_slice(&[0, 0]);
        let c = inet_checksum(&want[14..34]);
        want[24..26].copy_from_slice(&c.to_be_bytes());
    }
    want
}

/// The router on p0 and p1 (their pcaps in `d`) with `extra`, run 2.5 s:
/// its final counters.
fn run_router(d: &Scratch, name: &str, extra: &str) -> Value {
    let cfg = format!(
        "{}{}{}{extra}",
        header(name, "router", d),
        port_cfg("p0", 0, d, P0_ROUTER),
        port_cfg("p1", 1, d, P1_ROUTER)
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    run_for(&d.path("c.toml"), 2.5)
}

/// A reply padded to Ethernet's 60 bytes carries zeros there, not what an
/// earlier packet left in its buffer: 64 frames full of 0xee that the
/// router drops (no route) come first, so the unpadded ARP request after
/// them lands in one of their buffers.
#[test]
fn a_padded_reply_carries_zeros_not_an_earlier_packets_bytes() {
    let d = Scratch::new("pad");
    let mut frames: Vec<Vec<u8>> =
        (0..64).map(|_| ipv4_udp(P0_MAC, H1, [10, 0, 1, 2], [8, 8, 8, 8], 64, &[0xee; 200])).collect();
    frames.push(arp_request(H1, [10, 0, 1, 2], [10, 0, 1, 1]));
    write_pcap(&d.path("in0.pcap"), &frames);
    write_pcap(&d.path("in1.pcap"), &[]);
    let out = run_router(&d, "pad", "");
    assert_eq!((out["drops"]["no_route"].as_u64(), out["events"]["arp_replied"].as_u64()), (Some(64), Some(1)));
    let out0 = read_pcap(&d.path("out0.pcap"));
    assert_eq!(out0.len(), 1, "the ARP reply");
    assert_eq!(out0[0].len(), 60);
    assert!(out0[0][42..].iter().all(|&b| b == 0), "padding: {:02x?}", &out0[0][42..]);
}

#[test]
fn router_rewrites_answers_and_drops_with_reasons() {
    let d = Scratch::new("rt");
    let fwd = ipv4_udp(P0_MAC, H1, [10, 0, 1, 2], [10, 0, 2, 2], 64, b"routed");
    let ttl1 = ipv4_udp(P0_MAC, H1, [10, 0, 1, 2], [10, 0, 2, 2], 1, b"t");
    let noroute = ipv4_udp(P0_MAC, H1, [10, 0, 1, 2], [8, 8, 8, 8], 64, b"n");
    let unresolved = ipv4_udp(P0_MAC, H1, [10, 0, 1, 2], [10, 0, 2, 3], 64, b"u");
    let mut badsum = fwd.clone();
    badsum[24] ^= 0x55;
    let fwd6 = ipv6_udp(P0_MAC, H1, v6(2, 1), v6(2, 2), 64, b"routed6");
    // ARP request for the router's p0 address.
    let arp = arp_request(H1, [10, 0, 1, 2], [10, 0, 1, 1]);
    let arp = pad60(arp);
    // ICMP echo request to the router.
    let mut ping = Vec::new();
    ping.extend(P0_MAC);
    ping.extend(H1);
    ping.extend([0x08, 0x00]);
    let mut ip = vec![0x45, 0, 0, 36, 0, 1, 0, 0, 64, 1, 0, 0, 10, 0, 1, 2, 10, 0, 1, 1];
    let c = inet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut icmp = vec![8, 0, 0, 0, 0x11, 0x22, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8];
    let c = inet_checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    ping.extend(&ip);
    ping.extend(&icmp);
    let ping = pad60(ping);
    write_pcap(&d.path("in0.pcap"), &[fwd.clone(), ttl1, noroute, unresolved, badsum, fwd6.clone(), arp, ping]);
    write_pcap(&d.path("in1.pcap"), &[]);
    let out = run_router(&d, "rt", H2_NEIGHBOURS);

    let (want, want6) = (routed_to_h2(&fwd), routed_to_h2(&fwd6));
    // ARP request the router sent to resolve 10.0.2.3, from p1.
    let arpq = arp_request(P1_MAC, [10, 0, 2, 1], [10, 0, 2, 3]);
    let arpq = pad60(arpq);
    let out1 = read_pcap(&d.path("out1.pcap"));
    assert_eq!(out1[..2], [want, want6]);
    // The unresolved packet is held and retried once, so 1 or 2 requests.
    assert!((1..=2).contains(&out1[2..].len()) && out1[2..].iter().all(|f| *f == arpq), "{out1:?}");

    let out0 = read_pcap(&d.path("out0.pcap"));
    assert_eq!(out0.len(), 2, "ARP reply and echo reply");
    let mut arp_reply = H1.to_vec();
    arp_reply.extend(P0_MAC);
    arp_reply.extend([0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2]);
    arp_reply.extend(P0_MAC);
    arp_reply.extend([10, 0, 1, 1]);
    arp_reply.extend(H1);
    arp_reply.extend([10, 0, 1, 2]);
    assert_eq!(&out0[0][..42], &arp_reply[..]);
    let echo = &out0[1];
    assert_eq!(&echo[0..12], &[H1, P0_MAC].concat()[..]);
    assert_eq!(&echo[26..34], &[10, 0, 1, 1, 10, 0, 1, 2]);
    assert_eq!(inet_checksum(&echo[14..34]), 0, "IPv4 header checksum");
    assert_eq!(echo[34], 0, "echo reply");
    assert_eq!(inet_checksum(&echo[34..50]), 0, "ICMP checksum");
    assert_eq!(&echo[38..50], &icmp[4..]);

    assert_eq!(out["drops"]["ttl_exceeded"], 1);
    assert_eq!(out["drops"]["no_route"], 1);
    assert_eq!(out["drops"]["neighbour_unresolved"], 1);
    assert_eq!(out["drops"]["ipv4_bad_checksum"], 1);
    assert_eq!(out["total_drops"], 4);
    assert_eq!(out["events"]["arp_replied"], 1);
    assert_eq!(out["events"]["icmp_echo_replied"], 1);
    assert_eq!(out["ports"][0]["rx_packets"], 8);
    assert_eq!(out["ports"][1]["tx_packets"].as_u64(), Some(out1.len() as u64));
    assert_eq!(out["events"]["held_for_resolution"], 1);
    assert_eq!(out["ports"][0]["tx_packets"], 2);
    // The ARP request taught the router H1's address.
    let n = out["neighbours"].as_array().unwrap();
    assert!(
        n.iter().any(|x| x["ip"] == "10.0.1.2" && x["mac"] == "02:00:00:00:00:01" && x["permanent"] == false),
        "{n:?}"
    );
}

/// A packet still held for its next hop's MAC when the switch stops (run
/// shorter than the hold time, its next hop never answering) is a drop
/// under `neighbour_unresolved` in the final counters, which add up: it
/// is not lost uncounted with the queue that held it.
#[test]
fn a_packet_held_for_resolution_at_stop_is_counted_as_a_drop() {
    let d = Scratch::new("rt-held");
    let unresolved = ipv4_udp(P0_MAC, H1, [10, 0, 1, 2], [10, 0, 2, 3], 64, b"u");
    write_pcap(&d.path("in0.pcap"), &[unresolved]);
    write_pcap(&d.path("in1.pcap"), &[]);
    let cfg = format!(
        "{}{}{}{H2_NEIGHBOURS}",
        header("rt-held", "router", &d),
        port_cfg("p0", 0, &d, P0_ROUTER),
        port_cfg("p1", 1, &d, P1_ROUTER)
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let out = run_for(&d.path("c.toml"), 0.3);
    assert_eq!(out["events"]["held_for_resolution"], 1, "{out}");
    assert_eq!(out["ports"][0]["rx_packets"], 1, "{out}");
    assert_eq!(out["drops"]["neighbour_unresolved"], 1, "{out}");
    assert_eq!(out["total_drops"], 1, "{out}");
    // Only the ARP request for 10.0.2.3 left (injected, not forwarded).
    let injected = out["events"]["injected"].as_u64().unwrap_or(0);
    assert_eq!(out["ports"][1]["tx_packets"].as_u64(), Some(injected), "{out}");
}

/// Two workers, each with an RX queue of p0 (net_pcap: one queue per
/// `rx_pcap`) and its own TX queue on every port (one per `tx_pcap`): each
/// queue's frames leave, rewritten, through the TX queue of the worker that
/// received them, in order; each worker learns only its own flows. Both
/// workers share CPU 1 (lcore 2 is mapped onto it), so this runs on two cores.
#[test]
fn two_workers_each_own_an_rx_queue_and_a_tx_queue() {
    let d = Scratch::new("rt2w");
    let a: Vec<Vec<u8>> =
        (0..30).map(|i| ipv4_udp(P0_MAC, H1, [10, 0, 1, 10 + i], [10, 0, 2, 2], 64, &[b'a', i])).collect();
    let b: Vec<Vec<u8>> = (0..40)
        .map(|i| match i % 2 {
            0 => ipv4_udp(P0_MAC, H1, [10, 0, 1, 100 + i], [10, 0, 2, 2], 17, &[b'b', i]),
            _ => ipv6_udp(P0_MAC, H1, v6(100 + i, 1), v6(2, 2), 9, &[b'b', i]),
        })
        .collect();
    write_pcap(&d.path("in0a.pcap"), &a);
    write_pcap(&d.path("in0b.pcap"), &b);
    let p = |f: &str| d.path(f).display().to_string();
    // lcore 2 shares CPU 1 with lcore 1.
    let header = header("rt2w", "router", &d).replace("[eal]\n", "[eal]\nlcores = \"0@0,1@1,2@1\"\n");
    let p0 = format!(
        "net_pcap0,rx_pcap={},rx_pcap={},tx_pcap={},tx_pcap={}",
        p("in0a.pcap"),
        p("in0b.pcap"),
        p("out0a.pcap"),
        p("out0b.pcap")
    );
    let p1 = format!("net_pcap1,tx_pcap={},tx_pcap={}", p("out1a.pcap"), p("out1b.pcap"));
    let cfg = format!(
        "{header}[flow_table]\nlearn = true\n{}{}{H2_NEIGHBOURS}[[worker]]\nlcore = 1\nrx = [\"p0:0\", \"p1:0\"]\n[[worker]]\nlcore = 2\nrx = [\"p0:1\"]\n",
        port_with_device("p0", &p0, P0_ROUTER),
        port_with_device("p1", &p1, P1_ROUTER),
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let sw = SwitchProcess::start(&d.path("c.toml"), None);
    let mut c = Client::connect(&p("sw.sock")).unwrap();
    // Both workers report, each with its own queues, frames and flows; a
    // route added now is a table generation both acknowledge.
    let mut workers = Value::Null;
    for _ in 0..100 {
        workers = c.call("show_workers", json!({})).unwrap();
        if workers[0]["flows"] == 30 && workers[1]["flows"] == 40 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(workers[0]["rx_queues"], json!(["p0:0", "p1:0"]), "{workers}");
    assert_eq!(workers[1]["rx_queues"], json!(["p0:1"]), "{workers}");
    assert_eq!((workers[0]["rx_packets"].as_u64(), workers[1]["rx_packets"].as_u64()), (Some(30), Some(40)));
    assert_eq!((workers[0]["flows"].as_u64(), workers[1]["flows"].as_u64()), (Some(30), Some(40)), "{workers}");
    let before = workers[1]["table_generation"].as_u64().unwrap();
    c.call("route_add", json!({"prefix": "192.0.2.0/24", "port": "p1", "via": "10.0.2.2"})).unwrap();
    let after = c.call("show_workers", json!({})).unwrap();
    for w in 0..2 {
        assert!(after[w]["table_generation"].as_u64().unwrap() > before, "worker {w}: {after}");
    }
    drop(c);
    let out = sw.stop();
    let want_a: Vec<Vec<u8>> = a.iter().map(|f| routed_to_h2(f)).collect();
    let want_b: Vec<Vec<u8>> = b.iter().map(|f| routed_to_h2(f)).collect();
    assert_eq!(read_pcap(&d.path("out1a.pcap")), want_a, "worker 0's TX queue on p1");
    assert_eq!(read_pcap(&d.path("out1b.pcap")), want_b, "worker 1's TX queue on p1");
    assert!(read_pcap(&d.path("out0a.pcap")).is_empty() && read_pcap(&d.path("out0b.pcap")).is_empty());
    assert_eq!(out["total_drops"], 0, "{out}");
    assert_eq!(out["ports"][0]["rx_packets"], 70);
    assert_eq!(out["ports"][1]["tx_packets"], 70);
    assert_eq!(out["flows_in_use"], 70);
}

#[test]
fn broken_config_is_refused_with_the_key() {
    let d = Scratch::new("badcfg");
    std::fs::write(d.path("c.toml"), "name = \"x\"\nmode = \"router\"\nturbo = true\n").unwrap();
    let out = std::process::Command::new(intswitch_tests::intswitch_bin())
        .arg("--config")
        .arg(d.path("c.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("turbo"), "{e}");
}

#[test]
fn net_ring_port_loops_back_through_the_switch() {
    // p1 is a net_ring vdev whose TX ring feeds its own RX: frames from
    // in0.pcap cross p0 -> p1, come back on p1 and are cross-connected to p0.
    let d = Scratch::new("ring");
    let frames: Vec<Vec<u8>> =
        (0..50u8).map(|i| ipv4_udp(H2, H1, [10, 0, 0, 1], [10, 0, 0, 2], 64, &[i; 20])).collect();
    write_pcap(&d.path("in0.pcap"), &frames);
    let cfg = format!(
        "{}{}[[port]]\nname = \"p1\"\ndevice = \"net_ring0\"\npeer = \"p0\"\n",
        header("ring", "xconnect", &d),
        port_cfg("p0", 0, &d, "peer = \"p1\"")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let out = run_for(&d.path("c.toml"), 2.0);
    assert_eq!(read_pcap(&d.path("out0.pcap")), frames);
    for (port, field) in [(0, "rx_packets"), (1, "tx_packets"), (1, "rx_packets"), (0, "tx_packets")] {
        assert_eq!(out["ports"][port][field], 50, "port {port} {field}: {out}");
    }
    assert_eq!(out["total_drops"], 0);
}

/// Frames the router, INT source and AM-PM initiator all act on, mutated
/// at random (bytes rewritten, bits flipped, cut short, lengthened), go
/// through a running switch: it counts every one in, forwards, answers or
/// drops each under a named reason, and stops cleanly. (The stages'
/// behaviour on mutants is checked frame by frame in dataplane's
/// pipeline_fuzz tests; this covers the worker around them.)
#[test]
fn mutated_frames_through_router_int_and_ampm() {
    let d = Scratch::new("fz");
    let fwd = ipv4_udp(P0_MAC, H1, [10, 0, 1, 2], [10, 0, 2, 2], 64, b"0123456789abcdef");
    let fwd6 = ipv6_udp(P0_MAC, H1, v6(2, 1), v6(2, 2), 64, b"0123456789abcdef");
    let arp = arp_request(H1, [10, 0, 1, 2], [10, 0, 1, 1]);
    let mut ping = fwd.clone();
    ping[23] = 1;
    ping[30..34].copy_from_slice(&[10, 0, 1, 1]);
    ping[34..38].copy_from_slice(&[8, 0, 0, 0]);
    ping[24..26].fill(0);
    let c = inet_checksum(&ping[14..34]);
    ping[24..26].copy_from_slice(&c.to_be_bytes());
    let c = inet_checksum(&ping[34..]);
    ping[36..38].copy_from_slice(&c.to_be_bytes());
    let seeds = [fwd, fwd6, pad60(arp), ping];
    let mut rng = dataplane::rand::XorShift::new(0x1234_5678_9abc_def1);
    let mut rnd = move |n: usize| rng.below(n);
    let frames: Vec<Vec<u8>> = (0..3000)
        .map(|_| {
            let mut f = seeds[rnd(seeds.len())].clone();
            for _ in 0..1 + rnd(3) {
                let at = rnd(f.len().min(80));
                match rnd(5) {
                    0 => f[at] = rnd(256) as u8,
                    1 => f[at] ^= 1 << rnd(8),
                    2 => f[at] = [0, 1, 0x3f, 0x40, 0x80, 0xff][rnd(6)],
                    3 => f.truncate(at.max(1)),
                    _ => f.push(rnd(256) as u8),
                }
            }
            f
        })
        .collect();
    write_pcap(&d.path("in0.pcap"), &frames);
    write_pcap(&d.path("in1.pcap"), &[]);
    let cfg = format!(
        "{}{}{}[[neighbour]]\nip = \"10.0.2.2\"\nmac = \"02:00:00:00:00:02\"\nport = \"p1\"\n\
         [[neighbour]]\nip = \"2001:db8:2::2\"\nmac = \"02:00:00:00:00:02\"\nport = \"p1\"\n\
         [int]\nnode_id = 1\nedge_ports = [\"p0\"]\n[[int.watch]]\nname = \"udp\"\nrole = \"source\"\n\
         proto = \"udp\"\ninstructions = [\"node_id\", \"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\"]\n\
         [ampm]\nnode_id = 1\ninterval = \"1s\"\n\
         [[ampm.flow]]\nname = \"v4\"\nflow_mon_id = 1\nrole = \"initiator\"\nmethod = \"muxed\"\ncarrier = \"dscp\"\n\
         src = \"10.0.1.0/24\"\n\
         [[ampm.flow]]\nname = \"v6\"\nflow_mon_id = 2\nrole = \"initiator\"\nmethod = \"double\"\n\
         carrier = \"ipv6_hbh\"\nsrc = \"2001:db8:1::/64\"\n",
        header("fz", "router", &d),
        port_cfg("p0", 0, &d, "mac = \"02:00:00:00:a0:00\"\nipv4 = [\"10.0.1.1/24\"]\nipv6 = [\"2001:db8:1::1/64\"]"),
        port_cfg("p1", 1, &d, "mac = \"02:00:00:00:a1:00\"\nipv4 = [\"10.0.2.1/24\"]\nipv6 = [\"2001:db8:2::1/64\"]")
    );
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let out = run_for(&d.path("c.toml"), 3.0);
    assert_eq!(out["ports"][0]["rx_packets"], frames.len(), "{out}");
    let drops = out["total_drops"].as_u64().unwrap();
    let named: u64 = out["drops"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
    assert_eq!(named, drops, "every drop under a named reason");
    let forwarded = read_pcap(&d.path("out1.pcap"));
    assert_eq!(out["ports"][1]["tx_packets"].as_u64(), Some(forwarded.len() as u64));
    assert!(drops > 100 && forwarded.len() > 100, "{drops} dropped, {} forwarded", forwarded.len());
    // What leaves has a valid IPv4 header checksum (the router checked the
    // one that came in; TTL, INT and AM-PM changes updated it).
    for f in forwarded.iter().filter(|f| f.len() >= 34 && f[12..14] == [8, 0]) {
        let ihl = (f[14] & 0x0f) as usize * 4;
        assert_eq!(inet_checksum(&f[14..14 + ihl]), 0, "{f:02x?}");
    }
    // Well-formed mutants (a payload byte changed) still went through the stages.
    assert!(out["events"]["int_sourced"].as_u64() > Some(100), "{}", out["events"]);
    assert!(out["events"]["ampm_marked"].as_u64() > Some(100), "{}", out["events"]);
    assert!(out["events"]["icmp_echo_replied"].as_u64() > Some(50), "{}", out["events"]);
}
