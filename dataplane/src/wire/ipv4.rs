//! IPv4 header (RFC 791), options included.

use super::checksum;
use crate::DropReason;

pub const MIN_HDR_LEN: usize = 20;

mod field {
    use std::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// A checked view of an IPv4 header at the start of `buffer`.
///
/// `new_checked` guarantees: version 4, 5 <= IHL, header within the buffer,
/// header length <= total length <= buffer length.
#[derive(Debug)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.len() < MIN_HDR_LEN {
            return Err(DropReason::Ipv4Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(DropReason::Ipv4BadVersion);
        }
        let hl = ((b[field::VER_IHL] & 0x0f) as usize) * 4;
        if hl < MIN_HDR_LEN || hl > b.len() {
            return Err(DropReason::Ipv4BadIhl);
        }
        let total = u16::from_be_bytes([b[2], b[3]]) as usize;
        if total < hl || total > b.len() {
            return Err(DropReason::Ipv4BadTotalLength);
        }
        Ok(Ipv4Packet { buffer })
    }

    /// A view of a header some earlier `new_checked` accepted (the router's
    /// of a packet `parse` took): its checks are not repeated. Accessors
    /// still index safely; a buffer that was never checked may panic.
    #[inline(always)]
    pub fn new_unchecked(buffer: T) -> Self {
        debug_assert!(Ipv4Packet::new_checked(buffer.as_ref()).is_ok());
        Ipv4Packet { buffer }
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn header_len(&self) -> usize {
        ((self.b()[field::VER_IHL] & 0x0f) as usize) * 4
    }

    pub fn tos(&self) -> u8 {
        self.b()[field::TOS]
    }

    pub fn total_len(&self) -> usize {
        u16::from_be_bytes(self.b()[field::LENGTH].try_into().unwrap()) as usize
    }

    pub fn ident(&self) -> u16 {
        u16::from_be_bytes(self.b()[field::IDENT].try_into().unwrap())
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        u16::from_be_bytes(self.b()[field::FLG_OFF].try_into().unwrap()) & 0x1fff
    }

    pub fn more_fragments(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }

    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes(self.b()[field::CHECKSUM].try_into().unwrap())
    }

    pub fn src(&self) -> [u8; 4] {
        self.b()[field::SRC].try_into().unwrap()
    }

    pub fn dst(&self) -> [u8; 4] {
        self.b()[field::DST].try_into().unwrap()
    }

    /// True when the header checksum verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let b = self.b();
        // Nearly every header has no options: five fixed words, no loop.
        match b.first_chunk::<MIN_HDR_LEN>() {
            Some(h) if b[field::VER_IHL] == 0x45 => checksum::header_verifies(h),
            _ => checksum::fold(checksum::sum(0, &b[..self.header_len()])) == 0xffff,
        }
    }

    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Decrements the TTL and patches the checksum incrementally. The
    /// TTL/protocol word drops by 0x0100, so RFC 1624's HC' = ~(~HC + ~m + m')
    /// has ~m + m' = 0xfeff whatever the TTL: one add and one fold.
    #[inline]
    pub fn decrement_ttl(&mut self) {
        let b = self.bm();
        // TTL 0 is never decremented (callers drop TTL <= 1 first).
        let (Some(ttl @ 1..), Some(sum)) = (b.get(field::TTL).copied(), b.get(field::CHECKSUM)) else { return };
        let c = checksum::ttl_decremented(u16::from_be_bytes([sum[0], sum[1]]));
        b[field::TTL] = ttl.wrapping_sub(1);
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    pub fn set_ttl(&mut self, ttl: u8) {
        self.bm()[field::TTL] = ttl;
    }

    pub fn set_src(&mut self, a: [u8; 4]) {
        self.bm()[field::SRC].copy_from_slice(&a);
    }

    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.bm()[field::DST].copy_from_slice(&a);
    }

    pub fn set_total_len(&mut self, len: u16) {
        self.bm()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        self.bm()[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&self.b()[..hl]);
        self.bm()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &mut self.bm()[h..t]
    }
}

/// High-level fields of an option-less header, for building packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub protocol: u8,
    pub payload_len: usize,
    pub ttl: u8,
    pub tos: u8,
}

impl Ipv4Repr {
    /// Writes a 20-byte header with a valid checksum into `buf[..20]`.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = 0x45;
        buf[1] = self.tos;
        buf[2..4].copy_from_slice(&((MIN_HDR_LEN + self.payload_len) as u16).to_be_bytes());
        buf[4..6].copy_from_slice(&[0, 0]);
        buf[6..8].copy_from_slice(&[0x40, 0]); // DF
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        buf[10..12].copy_from_slice(&[0, 0]);
        buf[12..16].copy_from_slice(&self.src);
        buf[16..20].copy_from_slice(&self.dst);
        let c = checksum::checksum(&buf[..MIN_HDR_LEN]);
        buf[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut b = vec![0u8; 28];
        Ipv4Repr { src: [10, 0, 0, 1], dst: [10, 0, 1, 2], protocol: 17, payload_len: 8, ttl: 64, tos: 0 }.emit(&mut b);
        b
    }

    #[test]
    fn parse_emitted() {
        let b = sample();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.src(), [10, 0, 0, 1]);
        assert_eq!(p.dst(), [10, 0, 1, 2]);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn known_checksum() {
        // Header from RFC 1071-style worked examples (wikipedia IPv4 checksum example).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        let mut b = h.to_vec();
        b.resize(0x73, 0);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.checksum(), 0xb861);
    }

    #[test]
    fn rejects_truncated_and_bad_fields() {
        let b = sample();
        assert_eq!(Ipv4Packet::new_checked(&b[..19]).err(), Some(DropReason::Ipv4Truncated));
        let mut v = b.clone();
        v[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&v[..]).err(), Some(DropReason::Ipv4BadVersion));
        let mut v = b.clone();
        v[0] = 0x44; // IHL 4
        assert_eq!(Ipv4Packet::new_checked(&v[..]).err(), Some(DropReason::Ipv4BadIhl));
        let mut v = b.clone();
        v[0] = 0x4f; // IHL 15 = 60 bytes > 28
        assert_eq!(Ipv4Packet::new_checked(&v[..]).err(), Some(DropReason::Ipv4BadIhl));
        let mut v = b.clone();
        v[2..4].copy_from_slice(&29u16.to_be_bytes()); // past the buffer
        assert_eq!(Ipv4Packet::new_checked(&v[..]).err(), Some(DropReason::Ipv4BadTotalLength));
        let mut v = b.clone();
        v[2..4].copy_from_slice(&19u16.to_be_bytes()); // below the header
        assert_eq!(Ipv4Packet::new_checked(&v[..]).err(), Some(DropReason::Ipv4BadTotalLength));
    }

    #[test]
    fn options_are_skipped() {
        let mut b = [0u8; 32];
        b[0] = 0x46; // IHL 6: 4 bytes of options
        b[2..4].copy_from_slice(&32u16.to_be_bytes());
        b[9] = 6;
        b[20..24].copy_from_slice(&[1, 1, 1, 0]); // NOPs + EOL
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.payload().len(), 8);
        assert!(p.verify_checksum());
    }

    #[test]
    fn ttl_decrement_keeps_checksum_valid() {
        let mut b = sample();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        for _ in 0..63 {
            p.decrement_ttl();
            assert!(p.verify_checksum());
        }
        assert_eq!(p.ttl(), 1);
    }

    #[test]
    fn ttl_decrement_is_rfc1624_for_every_checksum_and_ttl() {
        let mut b = sample();
        for ttl in [2u8, 64, 128, 255] {
            for hc in 0..=u16::MAX {
                b[8] = ttl;
                b[10..12].copy_from_slice(&hc.to_be_bytes());
                let old = u16::from_be_bytes([ttl, b[9]]);
                Ipv4Packet::new_checked(&mut b[..]).unwrap().decrement_ttl();
                let want = checksum::update16(hc, old, old - 0x0100);
                assert_eq!((b[8], u16::from_be_bytes([b[10], b[11]])), (ttl - 1, want), "ttl {ttl} checksum {hc:#06x}");
            }
        }
        // Headers whose checksum is right stay right, whatever the sum.
        for src in 0..4096u32 {
            b[12..16].copy_from_slice(&src.wrapping_mul(0x0010_0f01).to_be_bytes());
            b[8] = 64;
            let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
            p.fill_checksum();
            p.decrement_ttl();
            assert!(p.verify_checksum(), "src {src}");
        }
    }

    #[test]
    fn ttl_zero_is_left_alone() {
        let mut b = sample();
        b[8] = 0;
        let before = b.clone();
        Ipv4Packet::new_checked(&mut b[..]).unwrap().decrement_ttl();
        assert_eq!(b, before);
    }

    #[test]
    fn fragments() {
        let mut b = sample();
        b[6] = 0x20; // MF
        b[7] = 0x10;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.more_fragments());
        assert_eq!(p.frag_offset(), 0x10);
    }
}
