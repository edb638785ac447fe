//! TCP header (RFC 9293): the fields the switch needs.

use crate::DropReason;

pub const MIN_HDR_LEN: usize = 20;

/// A checked view of a TCP segment: 20 bytes present and
/// 5 <= data offset, header within the buffer.
#[derive(Debug)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.len() < MIN_HDR_LEN {
            return Err(DropReason::TcpBadHeader);
        }
        let hl = (b[12] >> 4) as usize * 4;
        if hl < MIN_HDR_LEN || hl > b.len() {
            return Err(DropReason::TcpBadHeader);
        }
        Ok(TcpPacket { buffer })
    }

    pub fn src_port(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn dst_port(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[12] >> 4) as usize * 4
    }

    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[13]
    }

    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[16], b[17]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_bounds() {
        let mut b = [0u8; 24];
        b[0..2].copy_from_slice(&443u16.to_be_bytes());
        b[2..4].copy_from_slice(&50000u16.to_be_bytes());
        b[12] = 6 << 4; // 24-byte header
        b[13] = 0x12; // SYN+ACK
        let t = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port(), t.header_len(), t.flags()), (443, 50000, 24, 0x12));
        assert_eq!(TcpPacket::new_checked(&b[..19]).err(), Some(DropReason::TcpBadHeader));
        assert_eq!(TcpPacket::new_checked(&b[..22]).err(), Some(DropReason::TcpBadHeader));
        b[12] = 4 << 4;
        assert_eq!(TcpPacket::new_checked(&b[..]).err(), Some(DropReason::TcpBadHeader));
    }
}
