//! Whole GPINT frames: what the monitor sends (a probe: Ethernet, IP, UDP
//! to the INT port, INT-MD with D set and RHC = SR count, the GPINT block
//! as payload) and what a switch sends back (a feedback). Written from the
//! layout in `wire::gpint` and the INT-MD encoder, so the monitor and the
//! tests build the frames the switch reads.

use std::net::IpAddr;

use crate::int::{self, IntParams, Presence};
use crate::parse::{self, PacketMeta, PROTO_UDP};
use crate::pktbuf::{PacketBuf, VecBuf};
use crate::wire::checksum;
use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::gpint::ProbeRepr;
use crate::wire::int_md::{HopMetadata, SHIM_LEN};
use crate::wire::ipv4::Ipv4Repr;
use crate::wire::ipv6::Ipv6Repr;
use crate::wire::udp::UdpRepr;

/// Addresses and domain of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeAddr {
    pub eth_src: [u8; 6],
    pub eth_dst: [u8; 6],
    /// Both of one IP version.
    pub ip_src: IpAddr,
    pub ip_dst: IpAddr,
    pub src_port: u16,
    /// The INT domain's UDP port.
    pub int_port: u16,
    /// `gpint.udp_port`.
    pub gpint_port: u16,
    pub domain_id: u16,
    /// INT instruction bitmap.
    pub bitmap: u16,
    /// The paper's mode: the probe codepoint (the INT block then follows
    /// the UDP header to `gpint_port`, NPT 0); None: to the INT port.
    pub dscp: Option<u8>,
}

/// A plain Ethernet / IP / UDP frame carrying `payload` (no INT yet).
pub fn udp_frame(a: &ProbeAddr, dport: u16, payload: &[u8]) -> Result<Vec<u8>, String> {
    let (l3_len, ethertype) = match (a.ip_src, a.ip_dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (20, ETHERTYPE_IPV4),
        (IpAddr::V6(_), IpAddr::V6(_)) => (40, ETHERTYPE_IPV6),
        _ => return Err("probe source and destination must be of one IP version".into()),
    };
    let mut f = vec![0u8; 14 + l3_len + 8 + payload.len()];
    f[0..6].copy_from_slice(&a.eth_dst);
    f[6..12].copy_from_slice(&a.eth_src);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    let l4 = 14 + l3_len;
    f[l4 + 8..].copy_from_slice(payload);
    let udp_len = 8 + payload.len();
    let pseudo = match (a.ip_src, a.ip_dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let (s, d) = (s.octets(), d.octets());
            Ipv4Repr { src: s, dst: d, protocol: PROTO_UDP, payload_len: udp_len, ttl: 64, tos: 0 }.emit(&mut f[14..]);
            checksum::pseudo_v4(s, d, PROTO_UDP, udp_len as u16)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let (s, d) = (s.octets(), d.octets());
            Ipv6Repr { src: s, dst: d, next_header: PROTO_UDP, payload_len: udp_len, hop_limit: 64 }.emit(&mut f[14..]);
            checksum::pseudo_v6(&s, &d, PROTO_UDP, udp_len as u32)
        }
        _ => unreachable!("checked above"),
    };
    UdpRepr { src_port: a.src_port, dst_port: dport, payload_len: payload.len() }.emit(&mut f[l4..], pseudo);
    Ok(f)
}

/// A probe as the monitor sends it: the GPINT block behind an INT-MD
/// header with no hop yet (NPT 1 saving `gpint_port`, or NPT 0 marked with
/// the probe codepoint; D = 1, RHC = SR count).
pub fn probe_frame(a: &ProbeAddr, repr: &ProbeRepr) -> Result<Vec<u8>, String> {
    let mut block = vec![0u8; repr.buffer_len()];
    repr.emit(&mut block);
    let f = udp_frame(a, a.gpint_port, &block)?;
    let mut b = VecBuf::new(&f, 64);
    let meta = parse::parse(b.bytes(), 0).map_err(|r| format!("probe frame: {}", r.name()))?;
    let presence = match a.dscp {
        None => Presence::UdpPort(a.int_port),
        Some(code) => Presence::Dscp { value: code & 0x3f, mask: 0x3f },
    };
    let p = IntParams {
        presence,
        bitmap: a.bitmap,
        max_hops: repr.header.sr_count,
        domain_id: a.domain_id,
        source_pushes: false,
        ds_flags: 0,
    };
    int::source(&mut b, &meta, &p, &HopMetadata::default(), usize::MAX)
        .map_err(|s| format!("probe frame: INT source skipped ({s:?})"))?;
    let meta = parse::parse(b.bytes(), 0).map_err(|r| format!("probe frame: {}", r.name()))?;
    let at = meta.l4_offset + 8;
    // D: the last switch exports the probe and discards it.
    b.bytes_mut()[at + SHIM_LEN] |= 0x08;
    refresh_udp_checksum(b.bytes_mut(), &meta);
    Ok(b.bytes().to_vec())
}

/// Recomputes the UDP checksum of a parsed packet from scratch (an IPv4
/// checksum of 0, "none", stays 0).
pub fn refresh_udp_checksum(b: &mut [u8], meta: &PacketMeta) {
    let (l3, l4, end) = (meta.l3_offset, meta.l4_offset, meta.l3_end);
    let len = end - l4;
    let pseudo = if meta.key.ip_version() == 4 {
        if b[l4 + 6..l4 + 8] == [0, 0] {
            return;
        }
        let s: [u8; 4] = b[l3 + 12..l3 + 16].try_into().expect("4 bytes");
        let d: [u8; 4] = b[l3 + 16..l3 + 20].try_into().expect("4 bytes");
        checksum::pseudo_v4(s, d, PROTO_UDP, len as u16)
    } else {
        let s: [u8; 16] = b[l3 + 8..l3 + 24].try_into().expect("16 bytes");
        let d: [u8; 16] = b[l3 + 24..l3 + 40].try_into().expect("16 bytes");
        checksum::pseudo_v6(&s, &d, PROTO_UDP, len as u32)
    };
    let (sport, dport) = (meta.key.src_port(), meta.key.dst_port());
    UdpRepr { src_port: sport, dst_port: dport, payload_len: len - 8 }.emit(&mut b[l4..end], pseudo);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::gpint::{Probe, RequestType, SrEntry, TO_MONITOR};
    use crate::wire::int_md::{instr, IntMd};

    pub(crate) fn addr(v6: bool) -> ProbeAddr {
        let (s, d): (IpAddr, IpAddr) = if v6 {
            ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap())
        } else {
            ("10.9.0.1".parse().unwrap(), "10.9.0.2".parse().unwrap())
        };
        ProbeAddr {
            eth_src: [2, 0, 0, 0, 0, 0xee],
            eth_dst: [2, 0, 0, 0, 0, 0xa0],
            ip_src: s,
            ip_dst: d,
            src_port: 40000,
            int_port: 17768,
            gpint_port: 17900,
            domain_id: 0x6701,
            bitmap: instr::NODE_ID | instr::L1_PORTS | instr::QUEUE,
            dscp: None,
        }
    }

    #[test]
    fn a_probe_frame_is_int_md_with_the_block_as_payload() {
        for v6 in [false, true] {
            let e = vec![
                SrEntry { next_port: 1, mea_first: 0, mea_count: 2 },
                SrEntry { next_port: TO_MONITOR, mea_first: 0, mea_count: 0 },
            ];
            let repr = ProbeRepr::new(77, RequestType::PortRx, 1, 0, e.clone()).unwrap();
            let f = probe_frame(&addr(v6), &repr).unwrap();
            let meta = parse::parse(&f, 0).unwrap();
            assert_eq!(meta.key.dst_port(), 17768);
            let at = int::find(&f, &meta, Presence::UdpPort(17768)).unwrap();
            let md = IntMd::new_checked(&f[at..]).unwrap();
            assert_eq!((md.saved(), md.domain_id(), md.rhc(), md.flag_d()), (17900, 0x6701, 2, true));
            assert_eq!(md.hops(), 0);
            let p = Probe::new_checked(&f[at + md.total_len()..meta.l3_end]).unwrap();
            assert_eq!(p.header, repr.header);
            assert_eq!(p.current().unwrap(), e[0]);
            // The checksum is valid: summing the segment with the pseudo-header gives 0xffff.
            let mut g = f.clone();
            refresh_udp_checksum(&mut g, &meta);
            assert_eq!(f, g);
        }
    }
}
