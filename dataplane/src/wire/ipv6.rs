//! IPv6 fixed header (RFC 8200) and the walk over extension headers.

use crate::DropReason;

pub const HDR_LEN: usize = 40;
pub const NH_HOP_BY_HOP: u8 = 0;
pub const NH_ROUTING: u8 = 43;
pub const NH_FRAGMENT: u8 = 44;
pub const NH_DEST_OPTS: u8 = 60;
pub const NH_NO_NEXT: u8 = 59;
pub const NH_ICMPV6: u8 = 58;

/// Whether `nh` is an extension header the walk steps over (Hop-by-Hop,
/// Routing, Fragment, Destination Options).
pub fn is_extension(nh: u8) -> bool {
    matches!(nh, NH_HOP_BY_HOP | NH_ROUTING | NH_FRAGMENT | NH_DEST_OPTS)
}
/// Extension headers walked before giving up (bounds the per-packet work).
pub const MAX_EXT_HEADERS: usize = 8;

/// A checked view of an IPv6 header: version 6, 40 bytes present, payload
/// length within the buffer.
#[derive(Debug)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.len() < HDR_LEN {
            return Err(DropReason::Ipv6Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(DropReason::Ipv6BadVersion);
        }
        let plen = u16::from_be_bytes([b[4], b[5]]) as usize;
        if HDR_LEN + plen > b.len() {
            return Err(DropReason::Ipv6BadPayloadLength);
        }
        Ok(Ipv6Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn traffic_class(&self) -> u8 {
        (self.b()[0] << 4) | (self.b()[1] >> 4)
    }

    pub fn payload_len(&self) -> usize {
        u16::from_be_bytes([self.b()[4], self.b()[5]]) as usize
    }

    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    pub fn src(&self) -> [u8; 16] {
        self.b()[8..24].try_into().unwrap()
    }

    pub fn dst(&self) -> [u8; 16] {
        self.b()[24..40].try_into().unwrap()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[7] = h;
    }

    pub fn set_src(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[8..24].copy_from_slice(&a);
    }

    pub fn set_dst(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[24..40].copy_from_slice(&a);
    }

    pub fn set_payload_len(&mut self, l: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&l.to_be_bytes());
    }
}

/// Where the upper layer starts after the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// Offset from the start of the IPv6 header.
    pub offset: usize,
    /// Upper-layer protocol (NH_NO_NEXT when there is none).
    pub protocol: u8,
    /// Set when a Fragment header says this is not the first fragment:
    /// the upper-layer header is not in this packet.
    pub later_fragment: bool,
    /// Offset of the Hop-by-Hop header, if any (telemetry options live there).
    pub hop_by_hop: Option<usize>,
    /// Offset of the first Destination Options header, if any.
    pub dest_opts: Option<usize>,
}

/// Walks Hop-by-Hop, Routing, Fragment and Destination Options headers of
/// `pkt` (IPv6 header at offset 0, bounded by its payload length).
pub fn walk_extensions(pkt: &[u8]) -> Result<UpperLayer, DropReason> {
    let ip = Ipv6Packet::new_checked(pkt)?;
    let end = HDR_LEN + ip.payload_len();
    let mut nh = ip.next_header();
    let mut off = HDR_LEN;
    let mut up = UpperLayer { offset: 0, protocol: 0, later_fragment: false, hop_by_hop: None, dest_opts: None };
    for _ in 0..=MAX_EXT_HEADERS {
        match nh {
            NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS => {
                if nh == NH_HOP_BY_HOP {
                    // RFC 8200 §4.1: Hop-by-Hop only directly after the fixed header.
                    if off != HDR_LEN {
                        return Err(DropReason::Ipv6ExtTruncated);
                    }
                    up.hop_by_hop = Some(off);
                } else if nh == NH_DEST_OPTS && up.dest_opts.is_none() {
                    up.dest_opts = Some(off);
                }
                let h = pkt.get(off..off + 2).filter(|_| off + 2 <= end).ok_or(DropReason::Ipv6ExtTruncated)?;
                let len = (h[1] as usize + 1) * 8;
                if off + len > end {
                    return Err(DropReason::Ipv6ExtTruncated);
                }
                nh = h[0];
                off += len;
            }
            NH_FRAGMENT => {
                if off + 8 > end {
                    return Err(DropReason::Ipv6ExtTruncated);
                }
                let h = &pkt[off..off + 8];
                let frag_off = u16::from_be_bytes([h[2], h[3]]) >> 3;
                up.later_fragment = frag_off != 0;
                nh = h[0];
                off += 8;
            }
            _ => {
                up.offset = off;
                up.protocol = nh;
                return Ok(up);
            }
        }
    }
    Err(DropReason::Ipv6ExtTooMany)
}

/// Fields for building an IPv6 header without extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub next_header: u8,
    pub payload_len: usize,
    pub hop_limit: u8,
}

impl Ipv6Repr {
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
        buf[4..6].copy_from_slice(&(self.payload_len as u16).to_be_bytes());
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src);
        buf[24..40].copy_from_slice(&self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(next: u8, ext: &[u8], upper_len: usize) -> Vec<u8> {
        let mut b = vec![0u8; HDR_LEN];
        Ipv6Repr { src: [1; 16], dst: [2; 16], next_header: next, payload_len: ext.len() + upper_len, hop_limit: 64 }
            .emit(&mut b);
        b.extend_from_slice(ext);
        b.resize(b.len() + upper_len, 0);
        b
    }

    #[test]
    fn plain_udp() {
        let b = pkt(17, &[], 8);
        let ip = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(ip.hop_limit(), 64);
        assert_eq!(ip.src(), [1; 16]);
        let u = walk_extensions(&b).unwrap();
        assert_eq!((u.offset, u.protocol, u.later_fragment), (40, 17, false));
    }

    #[test]
    fn chain_of_hbh_routing_frag_dest() {
        let mut ext = Vec::new();
        ext.extend([NH_ROUTING, 0, 1, 4, 0, 0, 0, 0]); // HbH: 8 bytes, PadN
        ext.extend([NH_FRAGMENT, 0, 0, 0, 0, 0, 0, 0]); // Routing type 0, 8 bytes
        ext.extend([NH_DEST_OPTS, 0, 0, 0, 0, 0, 0, 1]); // Fragment, offset 0
        ext.extend([6, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // DestOpts: 16 bytes
        let b = pkt(NH_HOP_BY_HOP, &ext, 20);
        let u = walk_extensions(&b).unwrap();
        assert_eq!(u.offset, 40 + 8 + 8 + 8 + 16);
        assert_eq!(u.protocol, 6);
        assert_eq!(u.hop_by_hop, Some(40));
        assert_eq!(u.dest_opts, Some(64));
        assert!(!u.later_fragment);
    }

    #[test]
    fn later_fragment_flagged() {
        let b = pkt(NH_FRAGMENT, &[17, 0, 0x00, 0x08, 0, 0, 0, 1], 16);
        assert!(walk_extensions(&b).unwrap().later_fragment);
    }

    #[test]
    fn chains_running_off_the_end() {
        // HbH claims 16 bytes, only 8 present.
        let b = pkt(NH_HOP_BY_HOP, &[17, 1, 0, 0, 0, 0, 0, 0], 0);
        assert_eq!(walk_extensions(&b), Err(DropReason::Ipv6ExtTruncated));
        // Header announced, zero bytes of it present.
        let b = pkt(NH_DEST_OPTS, &[], 0);
        assert_eq!(walk_extensions(&b), Err(DropReason::Ipv6ExtTruncated));
        // Fragment header cut at 4 bytes.
        let b = pkt(NH_FRAGMENT, &[17, 0, 0, 0], 0);
        assert_eq!(walk_extensions(&b), Err(DropReason::Ipv6ExtTruncated));
        // HbH not first.
        let b = pkt(NH_DEST_OPTS, &[NH_HOP_BY_HOP, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0], 8);
        assert_eq!(walk_extensions(&b), Err(DropReason::Ipv6ExtTruncated));
    }

    #[test]
    fn too_many_extension_headers() {
        let mut ext = Vec::new();
        for _ in 0..MAX_EXT_HEADERS + 1 {
            ext.extend([NH_DEST_OPTS, 0, 1, 4, 0, 0, 0, 0]);
        }
        let b = pkt(NH_DEST_OPTS, &ext, 0);
        assert_eq!(walk_extensions(&b), Err(DropReason::Ipv6ExtTooMany));
    }

    #[test]
    fn header_checks() {
        let b = pkt(17, &[], 8);
        assert_eq!(Ipv6Packet::new_checked(&b[..39]).err(), Some(DropReason::Ipv6Truncated));
        let mut v = b.clone();
        v[0] = 0x40;
        assert_eq!(Ipv6Packet::new_checked(&v[..]).err(), Some(DropReason::Ipv6BadVersion));
        assert_eq!(Ipv6Packet::new_checked(&b[..47]).err(), Some(DropReason::Ipv6BadPayloadLength));
    }
}
