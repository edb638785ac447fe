//! Ethernet II header and 802.1Q / 802.1ad tags.

use crate::DropReason;

pub const ETH_HDR_LEN: usize = 14;
pub const VLAN_TAG_LEN: usize = 4;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
pub const BROADCAST: [u8; 6] = [0xff; 6];

mod field {
    use std::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
}

/// A checked view of an Ethernet II header.
#[derive(Debug)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < ETH_HDR_LEN {
            return Err(DropReason::EthTruncated);
        }
        Ok(EthernetFrame { buffer })
    }

    pub fn dst(&self) -> [u8; 6] {
        self.buffer.as_ref()[field::DST].try_into().unwrap()
    }

    pub fn src(&self) -> [u8; 6] {
        self.buffer.as_ref()[field::SRC].try_into().unwrap()
    }

    pub fn ethertype(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::ETHERTYPE];
        u16::from_be_bytes([b[0], b[1]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac);
    }

    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac);
    }
}

pub fn is_multicast(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

/// L2 header summary: where L3 starts, its ethertype and the outer VLAN id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Header {
    pub l3_offset: usize,
    pub ethertype: u16,
    /// Outer VLAN id, 0 when untagged.
    pub vlan: u16,
}

/// Walks the Ethernet header and up to two VLAN tags.
#[inline(always)]
pub fn parse_l2(frame: &[u8]) -> Result<L2Header, DropReason> {
    let eth = EthernetFrame::new_checked(frame)?;
    let mut ethertype = eth.ethertype();
    let mut off = ETH_HDR_LEN;
    let mut vlan = 0u16;
    let mut tags = 0;
    while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        if tags == 2 {
            return Err(DropReason::VlanTooDeep);
        }
        let tag = frame.get(off..off + VLAN_TAG_LEN).ok_or(DropReason::EthTruncated)?;
        if tags == 0 {
            vlan = u16::from_be_bytes([tag[0], tag[1]]) & 0x0fff;
        }
        ethertype = u16::from_be_bytes([tag[2], tag[3]]);
        off += VLAN_TAG_LEN;
        tags += 1;
    }
    Ok(L2Header { l3_offset: off, ethertype, vlan })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ethertype: u16, extra: &[u8]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend([2, 0, 0, 0, 0, 1]);
        f.extend(ethertype.to_be_bytes());
        f.extend(extra);
        f
    }

    #[test]
    fn untagged() {
        let f = frame(ETHERTYPE_IPV4, &[0; 20]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.dst(), BROADCAST);
        assert_eq!(e.src(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(parse_l2(&f).unwrap(), L2Header { l3_offset: 14, ethertype: ETHERTYPE_IPV4, vlan: 0 });
    }

    #[test]
    fn truncated() {
        assert_eq!(parse_l2(&[0u8; 13]), Err(DropReason::EthTruncated));
        // A VLAN tag announced but cut.
        let f = frame(ETHERTYPE_VLAN, &[0, 5]);
        assert_eq!(parse_l2(&f), Err(DropReason::EthTruncated));
    }

    #[test]
    fn one_and_two_tags() {
        let f = frame(ETHERTYPE_VLAN, &[0x20, 0x64, 0x86, 0xdd]);
        assert_eq!(parse_l2(&f).unwrap(), L2Header { l3_offset: 18, ethertype: ETHERTYPE_IPV6, vlan: 100 });
        let f = frame(ETHERTYPE_QINQ, &[0x00, 0x0a, 0x81, 0x00, 0x00, 0x14, 0x08, 0x00]);
        assert_eq!(parse_l2(&f).unwrap(), L2Header { l3_offset: 22, ethertype: ETHERTYPE_IPV4, vlan: 10 });
        let f = frame(ETHERTYPE_QINQ, &[0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3, 8, 0]);
        assert_eq!(parse_l2(&f), Err(DropReason::VlanTooDeep));
    }

    #[test]
    fn set_macs() {
        let mut f = frame(ETHERTYPE_IPV4, &[]);
        let mut e = EthernetFrame::new_checked(&mut f[..]).unwrap();
        e.set_dst([1, 2, 3, 4, 5, 6]);
        e.set_src([7, 8, 9, 10, 11, 12]);
        assert_eq!(&f[..12], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(is_multicast(&BROADCAST));
        assert!(!is_multicast(&[2, 0, 0, 0, 0, 1]));
    }
}
