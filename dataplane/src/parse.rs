//! One pass over a frame that yields the metadata every later stage uses:
//! header offsets and the 5-tuple flow key. Malformed headers become a drop
//! with a named reason.

use crate::wire::ethernet::{self, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6;
use crate::DropReason;

pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;

/// Exact-match key of a flow: 5-tuple plus input port and VLAN.
///
/// Stored as whole words built in registers (addresses as big-endian
/// integers, IPv4 in the low 32 bits; ports, protocol and IP version packed
/// in `tuple`; input port and VLAN in `scope`): the hash and the compare
/// then read exactly what was written, with no store-forwarding stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: u128,
    pub dst: u128,
    tuple: u64,
    scope: u32,
}

impl FlowKey {
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn new(
        src: u128,
        dst: u128,
        proto: u8,
        src_port: u16,
        dst_port: u16,
        ip_version: u8,
        in_port: u16,
        vlan: u16,
    ) -> FlowKey {
        FlowKey {
            src,
            dst,
            tuple: src_port as u64 | (dst_port as u64) << 16 | (proto as u64) << 32 | (ip_version as u64) << 40,
            scope: in_port as u32 | (vlan as u32) << 16,
        }
    }

    pub fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, src_port: u16, dst_port: u16) -> FlowKey {
        let (s, d) = (u32::from_be_bytes(src) as u128, u32::from_be_bytes(dst) as u128);
        FlowKey::new(s, d, proto, src_port, dst_port, 4, 0, 0)
    }

    pub fn v6(src: [u8; 16], dst: [u8; 16], proto: u8, src_port: u16, dst_port: u16) -> FlowKey {
        FlowKey::new(u128::from_be_bytes(src), u128::from_be_bytes(dst), proto, src_port, dst_port, 6, 0, 0)
    }

    pub fn src_port(&self) -> u16 {
        self.tuple as u16
    }

    pub fn dst_port(&self) -> u16 {
        (self.tuple >> 16) as u16
    }

    pub fn proto(&self) -> u8 {
        (self.tuple >> 32) as u8
    }

    /// Whether the packet is UDP to `port`: protocol and destination port
    /// in one masked compare of the packed tuple.
    #[inline(always)]
    pub fn is_udp_to(&self, port: u16) -> bool {
        self.tuple & 0xff_ffff_0000 == (PROTO_UDP as u64) << 32 | (port as u64) << 16
    }

    /// 4, 6, or 0 for non-IP frames.
    pub fn ip_version(&self) -> u8 {
        (self.tuple >> 40) as u8
    }

    pub fn in_port(&self) -> u16 {
        self.scope as u16
    }

    pub fn vlan(&self) -> u16 {
        (self.scope >> 16) as u16
    }

    pub fn with_scope(mut self, in_port: u16, vlan: u16) -> FlowKey {
        self.scope = in_port as u32 | (vlan as u32) << 16;
        self
    }

    /// Fast 64-bit hash for open addressing: three independent multiplies
    /// (short dependency chain) and a final fold so the low index bits depend
    /// on every input bit.
    #[inline(always)]
    pub fn hash64(&self) -> u64 {
        self.hash_seeded(0)
    }

    /// The hash with `seed` mixed into each lane before its multiply, so
    /// that colliding keys cannot be made without the seed.
    #[inline]
    pub fn hash_seeded(&self, seed: u64) -> u64 {
        const K1: u64 = 0x9e37_79b9_7f4a_7c15;
        const K2: u64 = 0xbf58_476d_1ce4_e5b9;
        const K3: u64 = 0x94d0_49bb_1331_11eb;
        let x = (self.src as u64 ^ ((self.dst >> 64) as u64).rotate_left(23) ^ seed).wrapping_mul(K1);
        let y = (self.dst as u64 ^ ((self.src >> 64) as u64).rotate_left(41) ^ seed.rotate_left(19)).wrapping_mul(K2);
        let z = (self.tuple ^ (self.scope as u64).rotate_left(48) ^ seed.rotate_left(37)).wrapping_mul(K3);
        let h = x ^ y.rotate_left(21) ^ z.rotate_left(43);
        h ^ (h >> 32) ^ (h >> 47)
    }

    fn addr(&self, a: u128) -> std::net::IpAddr {
        if self.ip_version() == 6 {
            std::net::Ipv6Addr::from(a).into()
        } else {
            std::net::Ipv4Addr::from(a as u32).into()
        }
    }

    pub fn src_ip(&self) -> std::net::IpAddr {
        self.addr(self.src)
    }

    pub fn dst_ip(&self) -> std::net::IpAddr {
        self.addr(self.dst)
    }
}

/// What the network layer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L3Kind {
    Ipv4,
    Ipv6,
    Arp,
    Other,
}

/// Parsed view of a frame's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketMeta {
    pub l3: L3Kind,
    pub ethertype: u16,
    pub l3_offset: usize,
    /// Start of the TCP/UDP/ICMP header (0 when there is none in this packet).
    pub l4_offset: usize,
    /// End of the IP packet within the frame (Ethernet padding excluded).
    pub l3_end: usize,
    /// TTL or hop limit.
    pub ttl: u8,
    pub key: FlowKey,
}

/// Parses `frame` received on `in_port`.
#[inline(always)]
pub fn parse(frame: &[u8], in_port: u16) -> Result<PacketMeta, DropReason> {
    let l2 = ethernet::parse_l2(frame)?;
    let l3 = &frame[l2.l3_offset..];
    // Fields are gathered in locals and the result built in one expression:
    // piecewise stores into a struct that is then read back with wider loads
    // stall store forwarding on the hot path.
    let (kind, ttl, l3_end, ip_version, proto, src, dst, l4_offset) = match l2.ethertype {
        ETHERTYPE_IPV4 => {
            let ip = Ipv4Packet::new_checked(l3)?;
            let l4 = if ip.frag_offset() == 0 { l2.l3_offset + ip.header_len() } else { 0 };
            let (src, dst) = (u32::from_be_bytes(ip.src()) as u128, u32::from_be_bytes(ip.dst()) as u128);
            (L3Kind::Ipv4, ip.ttl(), l2.l3_offset + ip.total_len(), 4, ip.protocol(), src, dst, l4)
        }
        ETHERTYPE_IPV6 => {
            let ip = ipv6::Ipv6Packet::new_checked(l3)?;
            let up = ipv6::walk_extensions(l3)?;
            let l4 = if up.later_fragment { 0 } else { l2.l3_offset + up.offset };
            let (src, dst) = (u128::from_be_bytes(ip.src()), u128::from_be_bytes(ip.dst()));
            let end = l2.l3_offset + ipv6::HDR_LEN + ip.payload_len();
            (L3Kind::Ipv6, ip.hop_limit(), end, 6, up.protocol, src, dst, l4)
        }
        ETHERTYPE_ARP => (L3Kind::Arp, 0, frame.len(), 0, 0, 0, 0, 0),
        _ => (L3Kind::Other, 0, frame.len(), 0, 0, 0, 0, 0),
    };
    let (src_port, dst_port) = if l4_offset != 0 { parse_l4(&frame[l4_offset..l3_end], proto)? } else { (0, 0) };
    Ok(PacketMeta {
        l3: kind,
        ethertype: l2.ethertype,
        l3_offset: l2.l3_offset,
        l4_offset,
        l3_end,
        ttl,
        key: FlowKey::new(src, dst, proto, src_port, dst_port, ip_version, in_port, l2.vlan),
    })
}

/// `parse`'s answer for the common frame, read at fixed offsets: untagged
/// IPv4 without options, TCP or UDP, not a later fragment, its transport
/// header whole. None for any other frame, which `parse` then takes; where
/// this answers, `parse` gives the same (the checks are its own, in fewer
/// branches: no VLAN walk, no error to name).
#[inline(always)]
pub fn untagged_v4(frame: &[u8], in_port: u16) -> Option<PacketMeta> {
    const ETH: usize = ethernet::ETH_HDR_LEN;
    let eth = frame.first_chunk::<ETH>()?;
    let ip: &[u8; 20] = frame.get(ETH..)?.first_chunk()?;
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let proto = ip[9];
    // Version 4, IHL 5; the total length as `Ipv4Packet::new_checked`
    // takes it; the fragment offset 0 (the MF flag may be set).
    let first = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff == 0;
    if u16::from_be_bytes([eth[12], eth[13]]) != ETHERTYPE_IPV4 || ip[0] != 0x45 || !tcp_or_udp(proto) || !first {
        return None;
    }
    if total < 20 || total > frame.len() - ETH {
        return None;
    }
    let l3_end = ETH + total;
    let l4 = &frame[ETH + 20..l3_end];
    if !l4_header_fits(proto == PROTO_TCP, l4) {
        return None;
    }
    // A header that fits holds at least 8 bytes.
    let p = l4.first_chunk::<4>()?;
    let addr = |at: usize| u32::from_be_bytes([ip[at], ip[at + 1], ip[at + 2], ip[at + 3]]) as u128;
    let (sp, dp) = (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]));
    Some(PacketMeta {
        l3: L3Kind::Ipv4,
        ethertype: ETHERTYPE_IPV4,
        l3_offset: ETH,
        l4_offset: ETH + 20,
        l3_end,
        ttl: ip[8],
        key: FlowKey::new(addr(12), addr(16), proto, sp, dp, 4, in_port, 0),
    })
}

/// `untagged_v4` for IPv6: untagged, TCP or UDP right after the fixed
/// header or after one Hop-by-Hop options header (where AM-PM's AltMark
/// option travels), its transport header whole. None for any other
/// frame (other extension headers, fragments), which `parse` then takes.
#[inline(always)]
pub fn untagged_v6(frame: &[u8], in_port: u16) -> Option<PacketMeta> {
    const ETH: usize = ethernet::ETH_HDR_LEN;
    const L3: usize = ETH + ipv6::HDR_LEN;
    let eth = frame.first_chunk::<ETH>()?;
    let ip: &[u8; ipv6::HDR_LEN] = frame.get(ETH..)?.first_chunk()?;
    if u16::from_be_bytes([eth[12], eth[13]]) != ETHERTYPE_IPV6 || ip[0] >> 4 != 6 {
        return None;
    }
    // The payload length as `Ipv6Packet::new_checked` takes it.
    let l3_end = L3 + u16::from_be_bytes([ip[4], ip[5]]) as usize;
    if l3_end > frame.len() {
        return None;
    }
    let (proto, l4_offset) = match ip[6] {
        ipv6::NH_HOP_BY_HOP => {
            // Its next header and length, within the payload.
            let h = frame.get(L3..l3_end)?.first_chunk::<2>()?;
            (h[0], L3 + (h[1] as usize + 1) * 8)
        }
        nh => (nh, L3),
    };
    if !tcp_or_udp(proto) || l4_offset > l3_end {
        return None;
    }
    let l4 = &frame[l4_offset..l3_end];
    if !l4_header_fits(proto == PROTO_TCP, l4) {
        return None;
    }
    let p = l4.first_chunk::<4>()?;
    let addr = |at: usize| u128::from_be_bytes(std::array::from_fn(|i| ip[at + i]));
    let (sp, dp) = (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]));
    Some(PacketMeta {
        l3: L3Kind::Ipv6,
        ethertype: ETHERTYPE_IPV6,
        l3_offset: ETH,
        l4_offset,
        l3_end,
        ttl: ip[7],
        key: FlowKey::new(addr(8), addr(24), proto, sp, dp, 6, in_port, 0),
    })
}

/// Ports of a TCP or UDP header (0, 0 for other protocols), checked as
/// `TcpPacket::new_checked` and `UdpPacket::new_checked` check them.
#[inline(always)]
fn parse_l4(l4: &[u8], proto: u8) -> Result<(u16, u16), DropReason> {
    let tcp = proto == PROTO_TCP;
    if !tcp_or_udp(proto) {
        return Ok((0, 0));
    }
    match (l4_header_fits(tcp, l4), l4.first_chunk::<4>()) {
        (true, Some(p)) => Ok((u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]))),
        _ if tcp => Err(DropReason::TcpBadHeader),
        _ => Err(DropReason::UdpBadLength),
    }
}

/// Whether `proto` is TCP or UDP, as a bit of a mask: comparisons with
/// each become two branches, the first of which a mix of TCP and UDP
/// mispredicts.
#[inline(always)]
pub fn tcp_or_udp(proto: u8) -> bool {
    const TCP_UDP: u64 = 1 << PROTO_TCP | 1 << PROTO_UDP;
    ((TCP_UDP >> (proto & 63)) & 1 != 0) & (proto < 64)
}

/// Whether a TCP (`tcp`) or UDP header is whole in `l4`: its fixed part,
/// and the length it declares (TCP's data offset, UDP's length field) at
/// least that and within `l4`. From 20 bytes on, both protocols take the
/// same instructions (a branch on which one it is mispredicts on a mix of
/// the two).
#[inline(always)]
pub(crate) fn l4_header_fits(tcp: bool, l4: &[u8]) -> bool {
    let len = l4.len();
    match l4.first_chunk::<20>() {
        Some(h) => {
            // Masks, not `if`: LLVM turns a select between two loads
            // into a branch (std's select_unpredictable is past the MSRV).
            let m = (tcp as usize).wrapping_neg();
            let min = 8 + (12 & m);
            let data_offset = (h[12] >> 4) as usize * 4;
            let declared = (data_offset & m) | (u16::from_be_bytes([h[4], h[5]]) as usize & !m);
            // min <= 20 <= len: one compare for min <= declared <= len.
            declared.wrapping_sub(min) <= len - min
        }
        // Shorter than TCP's fixed header: a UDP header with little data.
        None => !tcp && len >= 8 && (8..=len).contains(&(u16::from_be_bytes([l4[4], l4[5]]) as usize)),
    }
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod tests {
    use super::*;
    use crate::wire::checksum;
    use crate::wire::ipv4::Ipv4Repr;
    use crate::wire::ipv6::Ipv6Repr;
    use crate::wire::udp::UdpRepr;

    /// Ethernet + IPv4 + UDP frame, for tests across the crate.
    pub fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + payload.len()];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xfe]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        Ipv4Repr { src, dst, protocol: PROTO_UDP, payload_len: 8 + payload.len(), ttl: 64, tos: 0 }.emit(&mut f[14..]);
        f[42..].copy_from_slice(payload);
        let ps = checksum::pseudo_v4(src, dst, PROTO_UDP, (8 + payload.len()) as u16);
        UdpRepr { src_port: sport, dst_port: dport, payload_len: payload.len() }.emit(&mut f[34..], ps);
        f
    }

    pub fn udp6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + 8 + payload.len()];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xfe]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        Ipv6Repr { src, dst, next_header: PROTO_UDP, payload_len: 8 + payload.len(), hop_limit: 64 }.emit(&mut f[14..]);
        f[62..].copy_from_slice(payload);
        let ps = checksum::pseudo_v6(&src, &dst, PROTO_UDP, (8 + payload.len()) as u32);
        UdpRepr { src_port: sport, dst_port: dport, payload_len: payload.len() }.emit(&mut f[54..], ps);
        f
    }

    #[test]
    fn ipv4_udp_key() {
        let f = udp4([10, 0, 0, 1], [10, 0, 1, 2], 1234, 80, b"abcd");
        let m = parse(&f, 3).unwrap();
        assert_eq!(m.l3, L3Kind::Ipv4);
        assert_eq!((m.l3_offset, m.l4_offset, m.l3_end, m.ttl), (14, 34, f.len(), 64));
        let want = FlowKey::v4([10, 0, 0, 1], [10, 0, 1, 2], 17, 1234, 80).with_scope(3, 0);
        assert_eq!(m.key, want);
    }

    #[test]
    fn udp_to_a_port_is_protocol_and_destination_port_only() {
        let k = FlowKey::new(1, 2, PROTO_UDP, 0xffff, 5000, 6, 0xffff, 0xffff);
        assert!(k.is_udp_to(5000));
        assert!(!k.is_udp_to(5001) && !k.is_udp_to(5000 ^ 0x8000) && !k.is_udp_to(0));
        // The source port, IP version and scope around the fields do not count.
        assert!(FlowKey::v4([1; 4], [2; 4], PROTO_UDP, 5000, 7).is_udp_to(7));
        assert!(!FlowKey::v4([1; 4], [2; 4], PROTO_UDP, 7, 5000).is_udp_to(7));
        for proto in [PROTO_TCP, 0, 16, 18, 17 | 0x80] {
            assert!(!FlowKey::v4([1; 4], [2; 4], proto, 1, 7).is_udp_to(7), "protocol {proto}");
        }
        assert!(!FlowKey::default().is_udp_to(0));
    }

    #[test]
    fn ethernet_padding_is_not_ip() {
        let mut f = udp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"");
        f.resize(60, 0); // minimum frame
        let m = parse(&f, 0).unwrap();
        assert_eq!(m.l3_end, 14 + 28);
    }

    #[test]
    fn ipv6_udp_key() {
        let f = udp6([1; 16], [2; 16], 5, 6, b"x");
        let m = parse(&f, 0).unwrap();
        assert_eq!(m.key, FlowKey::v6([1; 16], [2; 16], 17, 5, 6));
        assert_eq!(m.l4_offset, 54);
    }

    #[test]
    fn malformed_become_named_drops() {
        let f = udp4([10, 0, 0, 1], [10, 0, 1, 2], 1234, 80, b"abcd");
        assert_eq!(parse(&f[..10], 0), Err(DropReason::EthTruncated));
        assert_eq!(parse(&f[..30], 0), Err(DropReason::Ipv4Truncated));
        let mut g = f.clone();
        g[14] = 0x43;
        assert_eq!(parse(&g, 0), Err(DropReason::Ipv4BadIhl));
        let mut g = f.clone();
        g[16..18].copy_from_slice(&500u16.to_be_bytes());
        assert_eq!(parse(&g, 0), Err(DropReason::Ipv4BadTotalLength));
        // IP total length cuts the UDP header.
        let mut g = f.clone();
        g[16..18].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(parse(&g, 0), Err(DropReason::UdpBadLength));
        // TCP with data offset 2.
        let mut g = f.clone();
        g[23] = PROTO_TCP;
        assert_eq!(parse(&g, 0), Err(DropReason::TcpBadHeader));
        let f6 = udp6([1; 16], [2; 16], 5, 6, b"x");
        assert_eq!(parse(&f6[..50], 0), Err(DropReason::Ipv6Truncated));
        let mut g = f6.clone();
        g[20] = ipv6::NH_HOP_BY_HOP; // 8 bytes of "HbH" would be the UDP header, claims 8*(1+len)
        g[54 + 1] = 200;
        assert_eq!(parse(&g, 0), Err(DropReason::Ipv6ExtTruncated));
    }

    #[test]
    fn later_fragments_have_no_ports() {
        let mut f = udp4([10, 0, 0, 1], [10, 0, 1, 2], 1234, 80, b"abcd");
        f[20] = 0;
        f[21] = 3; // offset 3*8
        let m = parse(&f, 0).unwrap();
        assert_eq!((m.key.src_port(), m.key.dst_port(), m.l4_offset), (0, 0, 0));
    }

    #[test]
    fn arp_and_unknown() {
        let mut f = vec![0xffu8; 14 + 28];
        f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        assert_eq!(parse(&f, 0).unwrap().l3, L3Kind::Arp);
        f[12..14].copy_from_slice(&0x88ccu16.to_be_bytes());
        assert_eq!(parse(&f, 0).unwrap().l3, L3Kind::Other);
    }

    #[test]
    fn hash_spreads() {
        // 10k keys into 64k buckets, varying low address bits, high address
        // bits, ports only, or an IPv6 prefix: a good hash leaves few collisions.
        let cases: [Box<dyn Fn(u32) -> FlowKey>; 4] = [
            Box::new(|i| FlowKey::v4([10, 0, (i >> 8) as u8, i as u8], [10, 1, 0, 1], 17, 1000, 2000)),
            Box::new(|i| FlowKey::v4([(i >> 8) as u8, i as u8, 0, 1], [10, 1, 0, 1], 17, 1000, 2000)),
            Box::new(|i| FlowKey::v4([10, 0, 0, 1], [10, 1, 0, 1], 6, i as u16, (i >> 16) as u16 + 80)),
            Box::new(|i| {
                let mut a = [0x20u8; 16];
                a[2] = (i >> 8) as u8;
                a[3] = i as u8;
                FlowKey::v6(a, [0x30; 16], 17, 1, 2)
            }),
        ];
        for (n, mk) in cases.iter().enumerate() {
            let seen: std::collections::HashSet<u64> = (0..10_000u32).map(|i| mk(i).hash64() & 0xffff).collect();
            assert!(seen.len() > 9_000, "case {n}: {}", seen.len());
        }
    }

    /// `base` with each of its first `bytes` bytes set to each of `values`,
    /// then cut to each shorter length.
    fn mutants(base: &[u8], bytes: usize, values: &[u8]) -> Vec<Vec<u8>> {
        let mut frames = vec![];
        for at in 0..bytes {
            for &v in values {
                let mut f = base.to_vec();
                f[at] = v;
                frames.push(f);
            }
        }
        frames.extend((0..base.len()).map(|len| base[..len].to_vec()));
        frames
    }

    /// Runs a fixed-offset parse `quick` on `base` and its `mutants`:
    /// where it answers, `parse` answers the same. How many it answered.
    fn answers_as_parse(
        base: &[u8],
        bytes: usize,
        values: &[u8],
        quick: impl Fn(&[u8]) -> Option<PacketMeta>,
    ) -> usize {
        assert_eq!(quick(base).map(Ok), Some(parse(base, 3)), "the plain frame");
        let mut answered = 0;
        for f in &mutants(base, bytes, values) {
            if let Some(m) = quick(f) {
                assert_eq!(Ok(m), parse(f, 3), "{f:02x?}");
                answered += 1;
            }
        }
        answered
    }

    /// Where `untagged_v4` answers, `parse` answers the same; it answers
    /// the plain TCP and UDP frames. Frames: UDP and TCP, and each with
    /// every byte of its first 60 set to each of a few values that hit the
    /// checks' edges, and cut to every length.
    #[test]
    fn the_fixed_offset_parse_agrees_with_parse() {
        let udp = udp4([10, 0, 0, 1], [10, 0, 1, 2], 1234, 80, b"abcdefghijklmnopqrstuvwxyz");
        let mut tcp = udp.clone();
        tcp[23] = PROTO_TCP;
        tcp[34 + 12] = 5 << 4;
        let edges = [0u8, 1, 2, 5, 6, 0x11, 0x20, 0x40, 0x45, 0x46, 0x50, 0x81, 0xff];
        let answered: usize = [&udp, &tcp].iter().map(|b| answers_as_parse(b, 60, &edges, |f| untagged_v4(f, 3))).sum();
        assert!(answered > 1000, "{answered}");
        let mut vlan = udp.clone();
        vlan.splice(12..12, [0x81, 0, 0, 5]);
        assert!(parse(&vlan, 0).is_ok() && untagged_v4(&vlan, 0).is_none());
    }

    /// `untagged_v6` as `untagged_v4` above: UDP and TCP, each without and
    /// with a Hop-by-Hop header, every byte of the first 80 set to values
    /// at the checks' edges (next headers among them), every length.
    #[test]
    fn the_fixed_offset_v6_parse_agrees_with_parse() {
        let udp = udp6([0x20; 16], [0x30; 16], 1234, 80, b"abcdefghijklmnopqrstuvwxyz");
        let mut tcp = udp.clone();
        tcp[20] = PROTO_TCP;
        tcp[54 + 12] = 5 << 4;
        let hbh = |f: &Vec<u8>| {
            let mut g = f.clone();
            let plen = u16::from_be_bytes([g[18], g[19]]) + 8;
            g[18..20].copy_from_slice(&plen.to_be_bytes());
            let nh = std::mem::replace(&mut g[20], ipv6::NH_HOP_BY_HOP);
            g.splice(54..54, [nh, 0, 1, 4, 0, 0, 0, 0]); // a PadN of 4
            g
        };
        let (udp_hbh, tcp_hbh) = (hbh(&udp), hbh(&tcp));
        let edges = [0u8, 1, 2, 4, 5, 6, 0x11, 0x2b, 0x2c, 0x3a, 0x3c, 0x40, 0x60, 0x86, 0xdd, 0xff];
        let quick = |f: &[u8]| {
            assert_eq!(untagged_v4(f, 3), None, "not IPv4");
            untagged_v6(f, 3)
        };
        let answered: usize =
            [&udp, &tcp, &udp_hbh, &tcp_hbh].iter().map(|b| answers_as_parse(b, 80, &edges, quick)).sum();
        assert!(answered > 2000, "{answered}");
        let mut vlan = udp.clone();
        vlan.splice(12..12, [0x81, 0, 0, 5]);
        assert!(parse(&vlan, 0).is_ok() && untagged_v6(&vlan, 0).is_none());
        assert_eq!(untagged_v6(&udp4([1; 4], [2; 4], 1, 2, b""), 0), None);
    }

    #[test]
    fn tcp_or_udp_is_those_two() {
        for p in 0..=255u8 {
            assert_eq!(tcp_or_udp(p), p == PROTO_TCP || p == PROTO_UDP, "{p}");
        }
    }

    /// The one check for both protocols accepts exactly what each
    /// protocol's checked view does, on every length up to 70 bytes and
    /// every value of the length field's byte that decides it.
    #[test]
    fn l4_header_fits_as_the_checked_views() {
        use crate::wire::tcp::TcpPacket;
        use crate::wire::udp::UdpPacket;
        for len in 0..70usize {
            for v in 0..=255u8 {
                let mut tcp = vec![0u8; len];
                if let Some(b) = tcp.get_mut(12) {
                    *b = v;
                }
                assert_eq!(l4_header_fits(true, &tcp), TcpPacket::new_checked(&tcp[..]).is_ok(), "tcp {len} {v}");
                let mut udp = vec![0u8; len];
                if let Some(b) = udp.get_mut(5) {
                    *b = v;
                }
                assert_eq!(l4_header_fits(false, &udp), UdpPacket::new_checked(&udp[..]).is_ok(), "udp {len} {v}");
                let mut big = udp.clone();
                if let Some(b) = big.get_mut(4) {
                    *b = 1;
                }
                assert_eq!(l4_header_fits(false, &big), UdpPacket::new_checked(&big[..]).is_ok(), "udp 256+ {len} {v}");
            }
        }
    }
}
