//! The ICMP and ICMPv6 messages the switch answers or learns from: echo
//! (RFC 792 / RFC 4443) and neighbour solicitation/advertisement (RFC 4861).

use super::checksum;
use crate::DropReason;

pub const V4_ECHO_REQUEST: u8 = 8;
pub const V4_ECHO_REPLY: u8 = 0;
pub const V6_ECHO_REQUEST: u8 = 128;
pub const V6_ECHO_REPLY: u8 = 129;
pub const V6_NEIGHBOR_SOLICIT: u8 = 135;
pub const V6_NEIGHBOR_ADVERT: u8 = 136;
/// NS/NA: type, code, checksum, flags/reserved (8) + target (16).
pub const ND_BASE_LEN: usize = 24;
/// NA with one target link-layer address option.
pub const NA_LEN: usize = ND_BASE_LEN + 8;
const OPT_SOURCE_LLA: u8 = 1;
const OPT_TARGET_LLA: u8 = 2;

/// Turns a verified ICMPv4 echo request into the reply, in place.
pub fn v4_echo_to_reply(icmp: &mut [u8]) -> Result<(), DropReason> {
    if icmp.len() < 8 || icmp[0] != V4_ECHO_REQUEST || checksum::fold(checksum::sum(0, icmp)) != 0xffff {
        return Err(DropReason::IcmpMalformed);
    }
    let old = u16::from_be_bytes([icmp[0], icmp[1]]);
    icmp[0] = V4_ECHO_REPLY;
    let c = checksum::update16(u16::from_be_bytes([icmp[2], icmp[3]]), old, u16::from_be_bytes([icmp[0], icmp[1]]));
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// True when the ICMPv6 checksum of `msg` between `src` and `dst` verifies.
pub fn v6_checksum_ok(src: &[u8; 16], dst: &[u8; 16], msg: &[u8]) -> bool {
    let ps = checksum::pseudo_v6(src, dst, 58, msg.len() as u32);
    checksum::fold(checksum::sum(ps, msg)) == 0xffff
}

/// Writes the ICMPv6 checksum of `msg` (checksum field at bytes 2..4).
pub fn v6_fill_checksum(src: &[u8; 16], dst: &[u8; 16], msg: &mut [u8]) {
    msg[2..4].copy_from_slice(&[0, 0]);
    let ps = checksum::pseudo_v6(src, dst, 58, msg.len() as u32);
    let c = !checksum::fold(checksum::sum(ps, msg));
    msg[2..4].copy_from_slice(&c.to_be_bytes());
}

/// Turns a verified ICMPv6 echo request into the reply, in place. The
/// pseudo-header sum is unchanged by swapping source and destination.
pub fn v6_echo_to_reply(src: &[u8; 16], dst: &[u8; 16], icmp: &mut [u8]) -> Result<(), DropReason> {
    if icmp.len() < 8 || icmp[0] != V6_ECHO_REQUEST || !v6_checksum_ok(src, dst, icmp) {
        return Err(DropReason::IcmpMalformed);
    }
    let old = u16::from_be_bytes([icmp[0], icmp[1]]);
    icmp[0] = V6_ECHO_REPLY;
    let c = checksum::update16(u16::from_be_bytes([icmp[2], icmp[3]]), old, u16::from_be_bytes([icmp[0], icmp[1]]));
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// A parsed neighbour solicitation or advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdMessage {
    pub kind: u8,
    pub target: [u8; 16],
    /// Source LLA option (NS) or target LLA option (NA).
    pub lla: Option<[u8; 6]>,
}

/// Parses an NS or NA (checksum verified, options walked and bounded).
pub fn parse_nd(src: &[u8; 16], dst: &[u8; 16], msg: &[u8]) -> Result<NdMessage, DropReason> {
    if msg.len() < ND_BASE_LEN
        || (msg[0] != V6_NEIGHBOR_SOLICIT && msg[0] != V6_NEIGHBOR_ADVERT)
        || msg[1] != 0
        || !v6_checksum_ok(src, dst, msg)
    {
        return Err(DropReason::IcmpMalformed);
    }
    let want = if msg[0] == V6_NEIGHBOR_SOLICIT { OPT_SOURCE_LLA } else { OPT_TARGET_LLA };
    let mut lla = None;
    let mut off = ND_BASE_LEN;
    while off + 2 <= msg.len() {
        let olen = msg[off + 1] as usize * 8;
        if olen == 0 || off + olen > msg.len() {
            return Err(DropReason::IcmpMalformed); // RFC 4861 §4.6: length 0 is invalid
        }
        if msg[off] == want && olen >= 8 {
            lla = Some(msg[off + 2..off + 8].try_into().unwrap());
        }
        off += olen;
    }
    Ok(NdMessage { kind: msg[0], target: msg[8..24].try_into().unwrap(), lla })
}

/// Writes a 32-byte neighbour advertisement for `target` with our MAC as the
/// target LLA option. `src`/`dst` are the IPv6 addresses it is sent between.
pub fn emit_na(buf: &mut [u8], target: &[u8; 16], mac: [u8; 6], solicited: bool, src: &[u8; 16], dst: &[u8; 16]) {
    buf[0] = V6_NEIGHBOR_ADVERT;
    buf[1] = 0;
    // R (router) and O (override) always; S when answering a solicitation.
    buf[4] = 0x80 | 0x20 | if solicited { 0x40 } else { 0 };
    buf[5..8].copy_from_slice(&[0, 0, 0]);
    buf[8..24].copy_from_slice(target);
    buf[24] = OPT_TARGET_LLA;
    buf[25] = 1;
    buf[26..32].copy_from_slice(&mac);
    v6_fill_checksum(src, dst, &mut buf[..NA_LEN]);
}

/// Writes a neighbour solicitation for `target` with our MAC as source LLA.
pub fn emit_ns(buf: &mut [u8], target: &[u8; 16], mac: [u8; 6], src: &[u8; 16], dst: &[u8; 16]) {
    buf[0] = V6_NEIGHBOR_SOLICIT;
    buf[1] = 0;
    buf[4..8].copy_from_slice(&[0; 4]);
    buf[8..24].copy_from_slice(target);
    buf[24] = OPT_SOURCE_LLA;
    buf[25] = 1;
    buf[26..32].copy_from_slice(&mac);
    v6_fill_checksum(src, dst, &mut buf[..NA_LEN]);
}

/// Solicited-node multicast address of `a` (ff02::1:ffXX:XXXX).
pub fn solicited_node(a: &[u8; 16]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[0] = 0xff;
    m[1] = 0x02;
    m[11] = 0x01;
    m[12] = 0xff;
    m[13..16].copy_from_slice(&a[13..16]);
    m
}

/// Ethernet multicast MAC for an IPv6 multicast address (33:33 + low 32 bits).
pub fn ipv6_multicast_mac(a: &[u8; 16]) -> [u8; 6] {
    [0x33, 0x33, a[12], a[13], a[14], a[15]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_echo() {
        let mut m = vec![8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'h', b'i'];
        let c = checksum::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        v4_echo_to_reply(&mut m).unwrap();
        assert_eq!(m[0], 0);
        assert_eq!(checksum::fold(checksum::sum(0, &m)), 0xffff);
        // A reply is not answered; a bad checksum is refused.
        assert_eq!(v4_echo_to_reply(&mut m), Err(DropReason::IcmpMalformed));
        let mut bad = vec![8u8, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(v4_echo_to_reply(&mut bad), Err(DropReason::IcmpMalformed));
        assert_eq!(v4_echo_to_reply(&mut [8u8, 0, 0]), Err(DropReason::IcmpMalformed));
    }

    #[test]
    fn v6_echo() {
        let (s, d) = ([0x20u8; 16], [0x30u8; 16]);
        let mut m = vec![128u8, 0, 0, 0, 0, 7, 0, 1, 1, 2, 3];
        v6_fill_checksum(&s, &d, &mut m);
        v6_echo_to_reply(&s, &d, &mut m).unwrap();
        assert_eq!(m[0], 129);
        assert!(v6_checksum_ok(&d, &s, &m));
    }

    #[test]
    fn ns_na_roundtrip() {
        let host = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let gw = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let snm = solicited_node(&gw);
        assert_eq!(ipv6_multicast_mac(&snm), [0x33, 0x33, 0xff, 0, 0, 1]);
        let mut ns = [0u8; NA_LEN];
        emit_ns(&mut ns, &gw, [2, 0, 0, 0, 0, 2], &host, &snm);
        let p = parse_nd(&host, &snm, &ns).unwrap();
        assert_eq!(p, NdMessage { kind: V6_NEIGHBOR_SOLICIT, target: gw, lla: Some([2, 0, 0, 0, 0, 2]) });
        let mut na = [0u8; NA_LEN];
        emit_na(&mut na, &gw, [2, 0, 0, 0, 0, 1], true, &gw, &host);
        let p = parse_nd(&gw, &host, &na).unwrap();
        assert_eq!(p.kind, V6_NEIGHBOR_ADVERT);
        assert_eq!(p.lla, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(na[4], 0xe0);
    }

    #[test]
    fn nd_malformed() {
        let (s, d) = ([1u8; 16], [2u8; 16]);
        let mut ns = [0u8; NA_LEN];
        emit_ns(&mut ns, &[3; 16], [2, 0, 0, 0, 0, 2], &s, &d);
        // Bad checksum.
        assert_eq!(parse_nd(&s, &[9; 16], &ns), Err(DropReason::IcmpMalformed));
        // Truncated.
        assert_eq!(parse_nd(&s, &d, &ns[..20]), Err(DropReason::IcmpMalformed));
        // Zero-length option.
        ns[25] = 0;
        v6_fill_checksum(&s, &d, &mut ns);
        assert_eq!(parse_nd(&s, &d, &ns), Err(DropReason::IcmpMalformed));
    }
}
