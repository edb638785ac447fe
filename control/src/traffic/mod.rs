//! Generates pcap files of test traffic (demo, benchmarks, tests): UDP over
//! IPv4 or IPv6, a chosen number of flows and frame size; with a [`Mix`],
//! traces that look like a network's traffic (see `mix`).

pub mod gpint;
pub mod mix;
pub mod telemetry;

use std::io::Write;
use std::net::IpAddr;

use dataplane::pcap::PcapWriter;
use dataplane::wire::checksum;
use dataplane::wire::ipv4::Ipv4Repr;
use dataplane::wire::ipv6::Ipv6Repr;
use dataplane::wire::udp::UdpRepr;
pub use gpint::{write_gpint_pcap, GpintTraffic};
pub use mix::{Flow, Mix, Prefixes, Sizes};
pub use telemetry::{Model, TelemetryTrace};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficSpec {
    pub count: usize,
    pub flows: usize,
    /// Frame size without FCS (64-byte wire frames are 60 here).
    pub frame_len: usize,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Base source address; flow i adds i to its low bits.
    pub src: IpAddr,
    /// Base destination address; flow i adds i to its low bits.
    pub dst: IpAddr,
    /// Vary destinations across flows (else only the source varies).
    pub vary_dst: bool,
}

impl TrafficSpec {
    /// One flow of `count` 64-byte UDP frames from `src` to `dst`.
    pub fn udp(src: IpAddr, dst: IpAddr, count: usize) -> TrafficSpec {
        TrafficSpec {
            count,
            flows: 1,
            frame_len: 60,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src,
            dst,
            vary_dst: false,
        }
    }
}

fn add(ip: IpAddr, n: u32) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::from(std::net::Ipv4Addr::from(u32::from(a).wrapping_add(n))),
        IpAddr::V6(a) => IpAddr::from(std::net::Ipv6Addr::from(u128::from(a).wrapping_add(n as u128))),
    }
}

/// Builds frame number `i`.
pub fn frame(spec: &TrafficSpec, i: usize) -> Vec<u8> {
    let flow = (i % spec.flows.max(1)) as u32;
    let f = Flow {
        src_mac: spec.src_mac,
        dst_mac: spec.dst_mac,
        vlan: None,
        src: add(spec.src, flow),
        dst: if spec.vary_dst { add(spec.dst, flow) } else { spec.dst },
        proto: 17,
        src_port: mix::src_port(flow as usize),
        dst_port: 5001,
        int_hops: 0,
    };
    flow_frame(&f, spec.frame_len, i)
}

/// A frame of `flow` of `len` bytes (without FCS; at least its headers),
/// its payload a pattern shifted by `seq`. TCP segments carry ACK and a
/// sequence number that advances with `seq`.
pub fn flow_frame(flow: &Flow, len: usize, seq: usize) -> Vec<u8> {
    let l2 = if flow.vlan.is_some() { 18 } else { 14 };
    let l3_hdr = if flow.src.is_ipv4() { 20 } else { 40 };
    let l4_hdr = if flow.proto == 6 { 20 } else { 8 };
    let min = l2 + l3_hdr + l4_hdr;
    let len = len.max(min);
    let l4_len = len - l2 - l3_hdr;
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&flow.dst_mac);
    f[6..12].copy_from_slice(&flow.src_mac);
    if let Some(vid) = flow.vlan {
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        f[14..16].copy_from_slice(&vid.to_be_bytes());
    }
    for (k, b) in f[min..].iter_mut().enumerate() {
        *b = (k as u8).wrapping_add(seq as u8);
    }
    let l4 = l2 + l3_hdr;
    let pseudo = match (flow.src, flow.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f[l2 - 2..l2].copy_from_slice(&0x0800u16.to_be_bytes());
            Ipv4Repr { src: s.octets(), dst: d.octets(), protocol: flow.proto, payload_len: l4_len, ttl: 64, tos: 0 }
                .emit(&mut f[l2..l4]);
            checksum::pseudo_v4(s.octets(), d.octets(), flow.proto, l4_len as u16)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f[l2 - 2..l2].copy_from_slice(&0x86ddu16.to_be_bytes());
            Ipv6Repr { src: s.octets(), dst: d.octets(), next_header: flow.proto, payload_len: l4_len, hop_limit: 64 }
                .emit(&mut f[l2..l4]);
            checksum::pseudo_v6(&s.octets(), &d.octets(), flow.proto, l4_len as u32)
        }
        _ => unreachable!("validated: same IP version"),
    };
    if flow.proto == 6 {
        let t = &mut f[l4..];
        t[0..2].copy_from_slice(&flow.src_port.to_be_bytes());
        t[2..4].copy_from_slice(&flow.dst_port.to_be_bytes());
        t[4..8].copy_from_slice(&(1 + seq as u32 * 1448).to_be_bytes());
        t[8..12].copy_from_slice(&1u32.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = 0x10; // ACK
        t[14..16].copy_from_slice(&65535u16.to_be_bytes());
        let c = !checksum::fold(checksum::sum(pseudo, t));
        t[16..18].copy_from_slice(&c.to_be_bytes());
    } else {
        UdpRepr { src_port: flow.src_port, dst_port: flow.dst_port, payload_len: l4_len - 8 }
            .emit(&mut f[l4..], pseudo);
    }
    f
}

/// INT already on the generated frames (for transit and sink benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntTraffic {
    pub udp_port: u16,
    /// Presence by this DSCP codepoint instead of the UDP port (NPT 0).
    pub dscp: Option<u8>,
    /// The INT-MD header's Domain Specific ID (an INT-label domain's: the
    /// frames are label packets).
    pub domain_id: u16,
    pub bitmap: u16,
    /// Hops already on the stack (node IDs 1..=hops); at least 1.
    pub hops: u8,
    /// Remaining hop count left after them.
    pub rhc: u8,
}

impl IntTraffic {
    /// The shim's length (8 bits of 4-byte words) covers the shim and the
    /// header (4 words) and the stack: a transit past it would set M and
    /// push nothing, and the frames would carry fewer hops than asked for.
    pub fn check(&self) -> Result<(), String> {
        let words = dataplane::wire::int_md::hop_words(self.bitmap);
        if words == 0 {
            return Err("no instructions: hops would carry no metadata (HopML 0)".into());
        }
        let max_hops = (255 - 4) / words;
        if self.hops == 0 || self.hops as usize > max_hops {
            return Err(format!("{} hops: from 1 to {max_hops} of {words} words fit the INT header", self.hops));
        }
        Ok(())
    }
}

/// Frame number `i` carrying an INT-MD block: sourced by node 1, then
/// transited by nodes 2..=hops, with metadata values a switch would write.
pub fn int_frame(spec: &TrafficSpec, i: usize, t: &IntTraffic) -> Result<Vec<u8>, String> {
    t.check()?;
    let md = |n: u32| dataplane::wire::int_md::HopMetadata {
        node_id: n,
        ingress_port: 0,
        egress_port: 1,
        hop_latency_ns: 1_000 + n,
        queue_occupancy: n,
        ingress_ts_ns: 1_700_000_000_000_000_000 + n as u64 * 1_000,
        egress_ts_ns: 1_700_000_000_000_001_000 + n as u64 * 1_000,
        ..Default::default()
    };
    push_int(&frame(spec, i), t, t.hops, md)
}

/// `f` with an INT-MD block of `hops` hops (1 ..= t.hops) pushed by nodes
/// 1..=hops, hop n's metadata from `md(n)`.
fn push_int(
    f: &[u8],
    t: &IntTraffic,
    hops: u8,
    md: impl Fn(u32) -> dataplane::wire::int_md::HopMetadata,
) -> Result<Vec<u8>, String> {
    use dataplane::pktbuf::PacketBuf;
    let mut b = dataplane::pktbuf::VecBuf::new(f, 24 + hops as usize * 64);
    let presence = match t.dscp {
        Some(value) => dataplane::int::Presence::Dscp { value, mask: 0x3f },
        None => dataplane::int::Presence::UdpPort(t.udp_port),
    };
    let p = dataplane::int::IntParams {
        presence,
        bitmap: t.bitmap,
        max_hops: hops.max(1).saturating_add(t.rhc),
        domain_id: t.domain_id,
        source_pushes: true,
        ds_flags: 0,
    };
    let meta = dataplane::parse::parse(f, 0).map_err(|r| r.name().to_string())?;
    dataplane::int::source(&mut b, &meta, &p, &md(1), 9000).map_err(|e| format!("INT source: {e:?}"))?;
    for n in 2..=hops as u32 {
        let meta = dataplane::parse::parse(b.bytes(), 0).map_err(|r| r.name().to_string())?;
        match dataplane::int::transit(&mut b, &meta, p.presence, &md(n), 9000).map_err(|r| r.name().to_string())? {
            dataplane::int::Transit::Pushed => {}
            other => return Err(format!("hop {n}: transit did not push ({other:?})")),
        }
    }
    Ok(b.bytes().to_vec())
}

/// Writes `spec.count` frames with INT as a pcap.
pub fn write_int_pcap(spec: &TrafficSpec, t: &IntTraffic, out: impl Write) -> std::io::Result<()> {
    spec.check().and_then(|()| t.check()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(out), 65535)?;
    for i in 0..spec.count {
        let f = int_frame(spec, i, t).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        w.write(i as u64 * 1000, &f)?;
    }
    w.into_inner().flush()
}

/// Largest frame: the pcap's snapshot length, which also keeps the IP
/// length fields (16 bits) exact.
pub const MAX_FRAME_LEN: usize = 65535;

impl TrafficSpec {
    /// Refuses what `frame` cannot build as asked: frames shorter than their
    /// headers are padded up to them instead.
    pub fn check(&self) -> Result<(), String> {
        if self.src.is_ipv4() != self.dst.is_ipv4() {
            return Err("--src and --dst are of different IP versions".into());
        }
        if self.count == 0 || self.flows == 0 {
            return Err("--count and --flows must be at least 1".into());
        }
        if self.frame_len > MAX_FRAME_LEN {
            return Err(format!("--size {}: at most {MAX_FRAME_LEN} bytes", self.frame_len));
        }
        Ok(())
    }
}

/// Writes `spec.count` frames as a pcap.
pub fn write_pcap(spec: &TrafficSpec, out: impl Write) -> std::io::Result<()> {
    spec.check().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(out), 65535)?;
    for i in 0..spec.count {
        w.write(i as u64 * 1000, &frame(spec, i))?;
    }
    w.into_inner().flush()
}

/// Largest frame with INT that the mixed traces write (a 1500-byte MTU):
/// a flow's INT block and the hops still to come are taken from the
/// payload, as a source within the MTU would.
const MIX_MAX_FRAME: usize = 1514;

/// Writes `spec.count` frames of `spec.flows` flows shaped by `mix`, with
/// INT on the flows `mix` picks when `int` is given.
pub fn write_mixed_pcap(
    spec: &TrafficSpec,
    mix: &Mix,
    int: Option<&IntTraffic>,
    out: impl Write,
) -> std::io::Result<()> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    spec.check().and_then(|()| mix.check(spec)).map_err(invalid)?;
    if let Some(t) = int {
        t.check().map_err(invalid)?;
        if mix.int_min_hops.is_some_and(|m| m == 0 || m > t.hops) {
            return Err(invalid(format!("--int-hops: the least hop count is from 1 to {}", t.hops)));
        }
    }
    let mut w = PcapWriter::new(std::io::BufWriter::new(out), 65535)?;
    let mut r = mix.packet_rng();
    let hop_len = int.map_or(0, |t| dataplane::wire::int_md::hop_words(t.bitmap) * 4);
    for (i, &fi) in mix.order(spec.count, spec.flows).iter().enumerate() {
        let mut flow = mix.flow(spec, int.map(|t| t.hops), fi as usize);
        if mix.is_broadcast(&mut r) {
            flow.dst_mac = [0xff; 6];
        }
        let mut len = mix.sizes.as_ref().map_or(spec.frame_len, |s| s.pick(&mut r));
        let f = match int {
            Some(t) if flow.int_hops > 0 => {
                let inserted_udp = flow.proto == 6 && t.dscp.is_none();
                let block = 16 + (flow.int_hops + t.rhc) as usize * hop_len + if inserted_udp { 8 } else { 0 };
                if len + block > MIX_MAX_FRAME {
                    len = MIX_MAX_FRAME.saturating_sub(block);
                }
                let salt = r.next_u64();
                let md = |n: u32| {
                    let v = salt.rotate_left(n * 7);
                    dataplane::wire::int_md::HopMetadata {
                        node_id: n,
                        ingress_port: (v % 4) as u16,
                        egress_port: ((v >> 2) % 4) as u16,
                        hop_latency_ns: 200 + (v >> 8) as u32 % 50_000,
                        queue_occupancy: (v >> 24) as u32 % 4096,
                        ingress_ts_ns: 1_700_000_000_000_000_000 + i as u64 * 1_000 + n as u64 * 10_000,
                        egress_ts_ns: 1_700_000_000_000_000_500 + i as u64 * 1_000 + n as u64 * 10_000,
                        ..Default::default()
                    }
                };
                push_int(&flow_frame(&flow, len, i), t, flow.int_hops, md).map_err(invalid)?
            }
            _ => flow_frame(&flow, len, i),
        };
        w.write(i as u64 * 1000, &f)?;
    }
    w.into_inner().flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::parse;

    #[test]
    fn frames_parse_and_vary_by_flow() {
        let spec = TrafficSpec {
            flows: 4,
            vary_dst: true,
            ..TrafficSpec::udp("10.0.1.10".parse().unwrap(), "10.0.2.10".parse().unwrap(), 10)
        };
        let a = frame(&spec, 1);
        assert_eq!(a.len(), 60);
        let m = parse::parse(&a, 0).unwrap();
        assert_eq!(m.key.src_ip(), "10.0.1.11".parse::<IpAddr>().unwrap());
        assert_eq!(m.key.dst_ip(), "10.0.2.11".parse::<IpAddr>().unwrap());
        assert_eq!(parse::parse(&frame(&spec, 5), 0).unwrap().key, m.key);
        let v6 = TrafficSpec { src: "2001:db8:1::10".parse().unwrap(), dst: "2001:db8:2::10".parse().unwrap(), ..spec };
        let b = frame(&v6, 2);
        assert_eq!(b.len(), 62);
        assert_eq!(parse::parse(&b, 0).unwrap().key.ip_version(), 6);
        let t = IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap: 0xf000, hops: 5, rhc: 3 };
        let f = int_frame(&spec, 1, &t).unwrap();
        assert_eq!(f.len(), 60 + 16 + 5 * 16);
        let m = parse::parse(&f, 0).unwrap();
        let v = dataplane::wire::int_md::IntMd::new_checked(&f[m.l4_offset + 8..]).unwrap();
        assert_eq!((v.hops(), v.rhc(), m.key.dst_port()), (5, 3, 17768));
    }

    #[test]
    fn what_cannot_be_built_as_asked_is_refused() {
        let ok = TrafficSpec::udp("10.0.1.10".parse().unwrap(), "10.0.2.10".parse().unwrap(), 10);
        assert_eq!(ok.check(), Ok(()));
        for (bad, want) in [
            (TrafficSpec { count: 0, ..ok.clone() }, "at least 1"),
            (TrafficSpec { flows: 0, ..ok.clone() }, "at least 1"),
            // Its IPv4 total length would not fit 16 bits.
            (TrafficSpec { frame_len: 100_000, ..ok.clone() }, "at most 65535"),
            (TrafficSpec { dst: "::1".parse().unwrap(), ..ok.clone() }, "IP versions"),
        ] {
            let e = bad.check().unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
            assert!(write_pcap(&bad, Vec::new()).is_err());
        }
        // The largest frame keeps exact IP and UDP lengths.
        let big = frame(&TrafficSpec { frame_len: MAX_FRAME_LEN, ..ok.clone() }, 0);
        let m = parse::parse(&big, 0).unwrap();
        assert_eq!((big.len(), m.l3_end), (MAX_FRAME_LEN, MAX_FRAME_LEN));
        // 6 words a hop (ingress_ts takes two): 41 hops fit the 251 words after
        // shim and header.
        let t = |hops| IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap: 0xf800, hops, rhc: 0 };
        let f = int_frame(&ok, 0, &t(41)).unwrap();
        let m = parse::parse(&f, 0).unwrap();
        let v = dataplane::wire::int_md::IntMd::new_checked(&f[m.l4_offset + 8..]).unwrap();
        assert_eq!(v.hops(), 41);
        for (hops, bitmap, want) in [(42, 0xf800, "from 1 to 41"), (0, 0xf800, "from 1 to 41"), (1, 0, "HopML 0")] {
            let e = int_frame(&ok, 0, &IntTraffic { bitmap, ..t(hops) }).unwrap_err();
            assert!(e.contains(want), "{hops} hops, bitmap {bitmap:#x}: {e}");
        }
    }

    #[test]
    fn mixed_traces_parse_and_keep_their_shares() {
        let spec = TrafficSpec {
            count: 4000,
            flows: 500,
            ..TrafficSpec::udp("10.0.1.10".parse().unwrap(), "10.0.2.10".parse().unwrap(), 1)
        };
        let mix = Mix {
            macs: 64,
            dst_macs: 32,
            vlans: 2,
            sizes: Some(Sizes::parse("imix").unwrap()),
            zipf: None,
            shuffle: Some(7),
            tcp_share: 0.6,
            v6_share: 0.2,
            dst_spread: Some(Prefixes::parse("20.0.0.0/24\n20.0.1.0/24\n2001:db8:20::/48\n").unwrap()),
            broadcast_share: 0.05,
            int_min_hops: Some(1),
            background_share: 0.3,
        };
        let t = IntTraffic { udp_port: 17768, dscp: None, domain_id: 0, bitmap: 0xf000, hops: 8, rhc: 2 };
        let mut out = Vec::new();
        write_mixed_pcap(&spec, &mix, Some(&t), &mut out).unwrap();
        let mut again = Vec::new();
        write_mixed_pcap(&spec, &mix, Some(&t), &mut again).unwrap();
        assert!(out == again, "seeded: the same options write the same bytes");
        let frames = dataplane::pcap::read_all(&out[..]).unwrap();
        assert_eq!(frames.len(), 4000);
        let (mut v6, mut tcp, mut int, mut bcast, mut big) = (0, 0, 0, 0, 0);
        for (_, f) in &frames {
            let m = parse::parse(f, 0).unwrap();
            assert!(f.len() <= 1514, "{}", f.len());
            assert!(m.key.vlan() == 100 || m.key.vlan() == 101);
            v6 += (m.key.ip_version() == 6) as u32;
            bcast += (f[0..6] == [0xff; 6]) as u32;
            big += (f.len() > 1000) as u32;
            if m.key.proto() == 17 && m.key.dst_port() == 17768 {
                let v = dataplane::wire::int_md::IntMd::new_checked(&f[m.l4_offset + 8..]).unwrap();
                assert!((1..=8).contains(&v.hops()) && v.rhc() == 2);
                int += 1;
                tcp += (v.npt() == 2) as u32;
            } else {
                tcp += (m.key.proto() == 6) as u32;
            }
            let dst = m.key.dst_ip();
            assert!(match dst {
                IpAddr::V4(a) => a.octets()[..2] == [20, 0],
                IpAddr::V6(a) => a.segments()[..3] == [0x2001, 0xdb8, 0x20],
            });
        }
        // Shares of 500 flows, each 8 packets.
        assert!((600..1000).contains(&v6), "{v6}");
        assert!((2100..2700).contains(&tcp), "{tcp}");
        assert!((2500..3100).contains(&int), "{int}");
        assert!((120..300).contains(&bcast), "{bcast}");
        assert!(big > 100, "IMIX's large frames: {big}");
        assert!(Mix::default().is_plain());
        let skewed = Mix { zipf: Some(1.0), ..mix };
        let mut out = Vec::new();
        write_mixed_pcap(&spec, &skewed, Some(&t), &mut out).unwrap();
        assert_eq!(dataplane::pcap::read_all(&out[..]).unwrap().len(), 4000);
    }
}
