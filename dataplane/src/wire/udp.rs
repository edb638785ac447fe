//! UDP header (RFC 768).

use crate::DropReason;

pub const HDR_LEN: usize = 8;

/// A checked view of a UDP datagram: 8 header bytes present and
/// 8 <= length field <= buffer length.
#[derive(Debug)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.len() < HDR_LEN {
            return Err(DropReason::UdpBadLength);
        }
        let len = u16::from_be_bytes([b[4], b[5]]) as usize;
        if len < HDR_LEN || len > b.len() {
            return Err(DropReason::UdpBadLength);
        }
        Ok(UdpPacket { buffer })
    }

    pub fn src_port(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn dst_port(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    pub fn len(&self) -> usize {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]]) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == HDR_LEN
    }

    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }
}

/// Fields for building a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload_len: usize,
}

impl UdpRepr {
    /// Writes the header; `pseudo` is the pseudo-header sum, payload must already
    /// be in `buf[8..]`. A computed 0 becomes 0xffff (RFC 768).
    pub fn emit(&self, buf: &mut [u8], pseudo: u32) {
        let payload_sum = super::checksum::sum(pseudo, &buf[HDR_LEN..HDR_LEN + self.payload_len]);
        self.emit_header(buf, payload_sum);
    }

    /// Writes the header into `buf[..8]` given `payload_sum`, the checksum
    /// sum of the pseudo-header and the payload (`checksum::sum(pseudo,
    /// payload)`): a sender that still holds the payload in cache sums it
    /// there instead of reading back the packet buffer it copied it to.
    pub fn emit_header(&self, buf: &mut [u8], payload_sum: u32) {
        let len = HDR_LEN + self.payload_len;
        buf[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        buf[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        buf[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        buf[6..8].copy_from_slice(&[0, 0]);
        let mut c = !super::checksum::fold(super::checksum::sum(payload_sum, &buf[..HDR_LEN]));
        if c == 0 {
            c = 0xffff;
        }
        buf[6..8].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::checksum;

    #[test]
    fn parse_and_bounds() {
        let b = [0x30, 0x39, 0x00, 0x35, 0x00, 0x0a, 0, 0, 0xaa, 0xbb];
        let u = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (12345, 53, 10));
        assert_eq!(UdpPacket::new_checked(&b[..7]).err(), Some(DropReason::UdpBadLength));
        assert_eq!(UdpPacket::new_checked(&b[..9]).err(), Some(DropReason::UdpBadLength));
        let mut short = b;
        short[5] = 7;
        assert_eq!(UdpPacket::new_checked(&short[..]).err(), Some(DropReason::UdpBadLength));
    }

    #[test]
    fn emitted_checksum_verifies() {
        let mut b = [0u8; 12];
        b[8..].copy_from_slice(b"ping");
        let ps = checksum::pseudo_v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 12);
        UdpRepr { src_port: 1000, dst_port: 2000, payload_len: 4 }.emit(&mut b, ps);
        assert_eq!(checksum::fold(checksum::sum(ps, &b)), 0xffff);
    }

    #[test]
    fn header_from_payload_sum_matches_emit() {
        // Odd payload lengths too: the payload starts at an even offset, so
        // summing it on its own pads the same last byte.
        for len in [0usize, 1, 5, 64, 1471] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let ps = checksum::pseudo_v4([192, 0, 2, 1], [198, 51, 100, 7], 17, (8 + len) as u16);
            let r = UdpRepr { src_port: 32766, dst_port: 32767, payload_len: len };
            let mut a = vec![0u8; 8 + len];
            a[8..].copy_from_slice(&payload);
            let mut b = a.clone();
            r.emit(&mut a, ps);
            r.emit_header(&mut b, checksum::sum(ps, &payload));
            assert_eq!(a, b, "payload of {len} bytes");
            assert_eq!(checksum::fold(checksum::sum(ps, &b)), 0xffff);
        }
    }
}
