//! ARP for Ethernet/IPv4 (RFC 826), the only kind the switch answers.

use crate::DropReason;

pub const LEN: usize = 28;
pub const OP_REQUEST: u16 = 1;
pub const OP_REPLY: u16 = 2;

/// A checked view: htype 1, ptype 0x0800, hlen 6, plen 4, 28 bytes present.
#[derive(Debug)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.len() < LEN || b[0..6] != [0, 1, 8, 0, 6, 4] {
            return Err(DropReason::ArpMalformed);
        }
        Ok(ArpPacket { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn operation(&self) -> u16 {
        u16::from_be_bytes([self.b()[6], self.b()[7]])
    }

    pub fn sender_mac(&self) -> [u8; 6] {
        self.b()[8..14].try_into().unwrap()
    }

    pub fn sender_ip(&self) -> [u8; 4] {
        self.b()[14..18].try_into().unwrap()
    }

    pub fn target_mac(&self) -> [u8; 6] {
        self.b()[18..24].try_into().unwrap()
    }

    pub fn target_ip(&self) -> [u8; 4] {
        self.b()[24..28].try_into().unwrap()
    }
}

/// Fields of an Ethernet/IPv4 ARP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    pub operation: u16,
    pub sender_mac: [u8; 6],
    pub sender_ip: [u8; 4],
    pub target_mac: [u8; 6],
    pub target_ip: [u8; 4],
}

impl ArpRepr {
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0..6].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
        buf[6..8].copy_from_slice(&self.operation.to_be_bytes());
        buf[8..14].copy_from_slice(&self.sender_mac);
        buf[14..18].copy_from_slice(&self.sender_ip);
        buf[18..24].copy_from_slice(&self.target_mac);
        buf[24..28].copy_from_slice(&self.target_ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_reject() {
        let r = ArpRepr {
            operation: OP_REQUEST,
            sender_mac: [2, 0, 0, 0, 0, 1],
            sender_ip: [10, 0, 0, 1],
            target_mac: [0; 6],
            target_ip: [10, 0, 0, 254],
        };
        let mut b = [0u8; LEN];
        r.emit(&mut b);
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.operation(), OP_REQUEST);
        assert_eq!(p.sender_ip(), [10, 0, 0, 1]);
        assert_eq!(p.target_ip(), [10, 0, 0, 254]);
        assert_eq!(p.sender_mac(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(ArpPacket::new_checked(&b[..27]).err(), Some(DropReason::ArpMalformed));
        b[1] = 6; // htype IEEE 802
        assert_eq!(ArpPacket::new_checked(&b[..]).err(), Some(DropReason::ArpMalformed));
    }
}
