//! Telemetry Report v2.0: the 8-byte group header and individual reports
//! (P4.org Telemetry Report Format v2.0; wire-formats.md §2).

use crate::DropReason;

pub const GROUP_HDR_LEN: usize = 8;
pub const INDIV_HDR_LEN: usize = 4;
/// RepMdBits + DS ID + DSMdBits + DSMdStatus.
pub const INT_MAIN_LEN: usize = 8;
pub const VERSION: u8 = 2;
pub const REP_TYPE_INT: u8 = 1;
pub const IN_TYPE_NONE: u8 = 0;
pub const IN_TYPE_ETHERNET: u8 = 3;
pub const IN_TYPE_IPV4: u8 = 4;
pub const IN_TYPE_IPV6: u8 = 5;
pub const FLAG_D: u8 = 0x80;
pub const FLAG_Q: u8 = 0x40;
pub const FLAG_F: u8 = 0x20;
pub const FLAG_I: u8 = 0x10;
/// RepMdBits bit 15: queue ID (8) + drop reason (8) + padding (16).
pub const REPMD_DROP_REASON: u16 = 0x0001;

/// Writes a group header.
pub fn emit_group(buf: &mut [u8], hw_id: u8, seq: u32, node_id: u32) {
    let w = (VERSION as u32) << 28 | ((hw_id as u32) & 0x3f) << 22 | (seq & 0x3f_ffff);
    buf[0..4].copy_from_slice(&w.to_be_bytes());
    buf[4..8].copy_from_slice(&node_id.to_be_bytes());
}

/// A parsed group header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub hw_id: u8,
    pub seq: u32,
    pub node_id: u32,
}

pub fn parse_group(b: &[u8]) -> Result<Group, DropReason> {
    if b.len() < GROUP_HDR_LEN {
        return Err(DropReason::IntTruncated);
    }
    let w = u32::from_be_bytes(b[0..4].try_into().unwrap());
    if w >> 28 != VERSION as u32 {
        return Err(DropReason::IntBadVersion);
    }
    Ok(Group {
        hw_id: ((w >> 22) & 0x3f) as u8,
        seq: w & 0x3f_ffff,
        node_id: u32::from_be_bytes(b[4..8].try_into().unwrap()),
    })
}

/// The header of one individual report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Individual {
    pub rep_type: u8,
    pub in_type: u8,
    /// 4-byte words after the first word (0xFF: to the end of the payload).
    pub len_words: u8,
    pub md_len_words: u8,
    pub flags: u8,
}

impl Individual {
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.rep_type << 4 | (self.in_type & 0xf);
        buf[1] = self.len_words;
        buf[2] = self.md_len_words;
        buf[3] = self.flags & 0xf0;
    }

    pub fn parse(b: &[u8]) -> Result<Individual, DropReason> {
        if b.len() < INDIV_HDR_LEN {
            return Err(DropReason::IntTruncated);
        }
        Ok(Individual {
            rep_type: b[0] >> 4,
            in_type: b[0] & 0xf,
            len_words: b[1],
            md_len_words: b[2],
            flags: b[3] & 0xf0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_header_roundtrip() {
        let mut b = [0u8; 8];
        emit_group(&mut b, 5, 0x3f_fffe, 0xdead_beef);
        assert_eq!(b, [0x21, 0x7f, 0xff, 0xfe, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(parse_group(&b).unwrap(), Group { hw_id: 5, seq: 0x3f_fffe, node_id: 0xdead_beef });
        let mut v = b;
        v[0] = 0x11;
        assert_eq!(parse_group(&v), Err(DropReason::IntBadVersion));
        assert_eq!(parse_group(&b[..7]), Err(DropReason::IntTruncated));
    }

    /// The spec example (wire-formats.md §2): `14 0E 02 20 | 50 00 00 00 | 00 00 00 00 |
    /// <ig|eg IF> | <qid|qocc> | 40 bytes IPv4+TCP`.
    #[test]
    fn individual_report_spec_example() {
        let ind =
            Individual { rep_type: REP_TYPE_INT, in_type: IN_TYPE_IPV4, len_words: 14, md_len_words: 2, flags: FLAG_F };
        let mut b = [0u8; 4];
        ind.emit(&mut b);
        assert_eq!(b, [0x14, 0x0e, 0x02, 0x20]);
        assert_eq!(Individual::parse(&b).unwrap(), ind);
        // 2 words of main contents + 2 of metadata + 40 bytes of packet = 14 words.
        assert_eq!((INT_MAIN_LEN + 8 + 40) / 4, 14);
    }
}
