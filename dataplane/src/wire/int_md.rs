//! INT-MD v2.1 over TCP/UDP: the 4-byte shim, the 12-byte metadata header
//! and the per-hop metadata stack (newest hop first). Layout: P4.org INT
//! dataplane spec v2.1 §5, summarised in shared/reference/wire-formats.md §1.

use crate::wire::checksum;
use crate::DropReason;

pub const SHIM_LEN: usize = 4;
pub const MD_HDR_LEN: usize = 12;
/// Shim + metadata header: what a source adds before any metadata.
pub const INT_HDR_LEN: usize = SHIM_LEN + MD_HDR_LEN;
pub const INT_TYPE_MD: u8 = 1;
pub const VERSION: u8 = 2;

/// How the INT block is announced (the shim's NPT field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Npt {
    /// DSCP / traffic-class mode: the shim's byte 3 saves the original DSCP.
    Dscp = 0,
    /// UDP with a rewritten destination port, the original saved in the shim.
    UdpPort = 1,
    /// An inserted UDP header; the original IP protocol saved in the shim.
    InsertedUdp = 2,
}

/// Instruction bits (bit 0 = MSB of the 16-bit bitmap).
pub mod instr {
    pub const NODE_ID: u16 = 0x8000;
    pub const L1_PORTS: u16 = 0x4000;
    pub const HOP_LATENCY: u16 = 0x2000;
    pub const QUEUE: u16 = 0x1000;
    pub const INGRESS_TS: u16 = 0x0800;
    pub const EGRESS_TS: u16 = 0x0400;
    pub const L2_PORTS: u16 = 0x0200;
    pub const TX_UTIL: u16 = 0x0100;
    pub const BUFFER: u16 = 0x0080;
    pub const RESERVED: u16 = 0x007e;
    pub const CHECKSUM_COMPLEMENT: u16 = 0x0001;
}

/// Bytes each instruction bit adds per hop, in bitmap order (bit 0 first).
pub const INSTR_BYTES: [usize; 16] = [4, 4, 4, 4, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4];

/// Per-hop metadata length in 4-byte words for a bitmap.
#[inline]
pub fn hop_words(bitmap: u16) -> usize {
    (HOP_WORDS_HI[(bitmap >> 8) as usize] + HOP_WORDS_LO[(bitmap & 0xff) as usize]) as usize
}

/// Words per hop of the instructions in the bitmap's high and low byte:
/// one per set bit, one more for each 8-byte one. Tables, not `count_ones`:
/// the baseline x86-64 target has no POPCNT, and its stand-in costs a
/// dozen instructions on every INT packet.
const HOP_WORDS_HI: [u8; 256] = words_of_byte(8);
const HOP_WORDS_LO: [u8; 256] = words_of_byte(0);

const fn words_of_byte(shift: u32) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut v = 0;
    while v < 256 {
        let b = (v as u16) << shift;
        let mut bit = 0;
        while bit < 16 {
            if b & (1 << bit) != 0 {
                t[v] += 1 + ((WIDE >> bit) & 1) as u8;
            }
            bit += 1;
        }
        v += 1;
    }
    t
}

/// The instructions whose value takes 8 bytes (the two timestamps and the
/// L2 interface pair).
const WIDE: u16 = instr::INGRESS_TS | instr::EGRESS_TS | instr::L2_PORTS;

/// ceil(2^32 / d) for each HopML d (5 bits): dividing by a multiply.
const HOP_ML_RECIP: [u64; 32] = {
    let mut t = [0u64; 32];
    let mut d = 1;
    while d < 32 {
        t[d] = (1u64 << 32) / d as u64 + 1;
        d += 1;
    }
    t
};

/// (hops, words left over) in a stack of `words` 4-byte words of `hop_ml`
/// words each (1..=31). A multiply instead of a divide: the data path asks
/// this of every INT packet, and a divide costs tens of cycles. Exact for
/// any stack the 8-bit shim length allows (unit test below).
#[inline]
pub(crate) fn stack_hops(words: usize, hop_ml: usize) -> (usize, usize) {
    let q = ((words as u64 * HOP_ML_RECIP[hop_ml & 31]) >> 32) as usize;
    (q, words - q * hop_ml)
}

/// A checked view of shim + header + stack at the start of `buffer`.
///
/// `new_checked` guarantees: INT-MD type, version 2, the shim length covers
/// the 12-byte header and lies within the buffer, HopML > 0 and the stack is
/// a whole number of hops.
#[derive(Debug)]
pub struct IntMd<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IntMd<T> {
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        if b.len() < INT_HDR_LEN {
            return Err(DropReason::IntTruncated);
        }
        if b[0] >> 4 != INT_TYPE_MD || b[SHIM_LEN] >> 4 != VERSION {
            return Err(DropReason::IntBadVersion);
        }
        let words = b[1] as usize;
        if words * 4 < MD_HDR_LEN || SHIM_LEN + words * 4 > b.len() {
            return Err(DropReason::IntTruncated);
        }
        let hop_ml = (b[SHIM_LEN + 2] & 0x1f) as usize;
        if hop_ml == 0 {
            return Err(DropReason::IntBadHopMl);
        }
        if stack_hops(words - MD_HDR_LEN / 4, hop_ml).1 != 0 {
            return Err(DropReason::IntBadStack);
        }
        Ok(IntMd { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn npt(&self) -> u8 {
        (self.b()[0] >> 2) & 0x3
    }

    /// Bytes of shim + header + stack.
    pub fn total_len(&self) -> usize {
        SHIM_LEN + self.b()[1] as usize * 4
    }

    /// The shim's bytes 2-3 (saved dport, protocol or DSCP).
    pub fn saved(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }

    pub fn flag_d(&self) -> bool {
        self.b()[SHIM_LEN] & 0x08 != 0
    }

    pub fn flag_e(&self) -> bool {
        self.b()[SHIM_LEN] & 0x04 != 0
    }

    pub fn flag_m(&self) -> bool {
        self.b()[SHIM_LEN] & 0x02 != 0
    }

    pub fn hop_ml(&self) -> usize {
        (self.b()[SHIM_LEN + 2] & 0x1f) as usize
    }

    pub fn rhc(&self) -> u8 {
        self.b()[SHIM_LEN + 3]
    }

    pub fn bitmap(&self) -> u16 {
        u16::from_be_bytes([self.b()[SHIM_LEN + 4], self.b()[SHIM_LEN + 5]])
    }

    pub fn domain_id(&self) -> u16 {
        u16::from_be_bytes([self.b()[SHIM_LEN + 6], self.b()[SHIM_LEN + 7]])
    }

    pub fn stack(&self) -> &[u8] {
        &self.b()[INT_HDR_LEN..self.total_len()]
    }

    /// Hops in the stack.
    pub fn hops(&self) -> usize {
        stack_hops(self.b()[1] as usize - MD_HDR_LEN / 4, self.hop_ml()).0
    }

    /// The metadata of hop `i` (0 = the newest, last pushed).
    pub fn hop(&self, i: usize) -> &[u8] {
        let l = self.hop_ml() * 4;
        &self.stack()[i * l..(i + 1) * l]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IntMd<T> {
    pub fn set_flag_e(&mut self) {
        self.buffer.as_mut()[SHIM_LEN] |= 0x04;
    }

    pub fn set_flag_m(&mut self) {
        self.buffer.as_mut()[SHIM_LEN] |= 0x02;
    }

    pub fn set_rhc(&mut self, rhc: u8) {
        self.buffer.as_mut()[SHIM_LEN + 3] = rhc;
    }

    /// Adds `words` to the shim length (after a push).
    pub fn grow(&mut self, words: u8) {
        let b = self.buffer.as_mut();
        b[1] = b[1].wrapping_add(words);
    }
}

/// Fields of a new INT-MD block (what a source writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntMdRepr {
    pub npt: Npt,
    /// NPT 0: DSCP << 2 in the low byte; 1: UDP dport; 2: IP protocol.
    pub saved: u16,
    pub flag_d: bool,
    pub hop_ml: u8,
    pub rhc: u8,
    pub bitmap: u16,
    pub domain_id: u16,
    pub ds_instruction: u16,
    pub ds_flags: u16,
    /// Words of metadata already in the stack (0 for a fresh block).
    pub stack_words: u8,
}

/// Stores shim + header `words` into `buf[..16]` and returns their
/// one's-complement sum (as `checksum::sum` would give).
#[inline(always)]
pub fn emit_words(words: [u32; 4], buf: &mut [u8]) -> u32 {
    for (w, out) in words.iter().zip(buf[..INT_HDR_LEN].chunks_exact_mut(4)) {
        out.copy_from_slice(&w.to_be_bytes());
    }
    checksum::fold_words(words.iter().map(|&w| w as u64).sum())
}

impl IntMdRepr {
    /// Writes shim + header into `buf[..16]` and returns their
    /// one's-complement sum (as `checksum::sum` would give). Built as four
    /// words and stored word-wise: summing bytes just stored one at a time
    /// would stall on store forwarding.
    pub fn emit(&self, buf: &mut [u8]) -> u32 {
        emit_words(self.words(), buf)
    }

    /// Shim + header as four big-endian words (what `emit` writes; a source
    /// may set flags in them first and store them with [`emit_words`]).
    #[inline(always)]
    pub fn words(&self) -> [u32; 4] {
        let len = (MD_HDR_LEN / 4) as u32 + self.stack_words as u32;
        [
            ((INT_TYPE_MD << 4 | (self.npt as u8) << 2) as u32) << 24 | (len & 0xff) << 16 | self.saved as u32,
            ((VERSION << 4 | if self.flag_d { 0x08 } else { 0 }) as u32) << 24
                | ((self.hop_ml & 0x1f) as u32) << 8
                | self.rhc as u32,
            (self.bitmap as u32) << 16 | self.domain_id as u32,
            (self.ds_instruction as u32) << 16 | self.ds_flags as u32,
        ]
    }
}

/// Values one hop can report; `None` is written as all-ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HopMetadata {
    pub node_id: u32,
    pub ingress_port: u16,
    pub egress_port: u16,
    pub hop_latency_ns: u32,
    pub queue_id: u8,
    pub queue_occupancy: u32,
    pub ingress_ts_ns: u64,
    pub egress_ts_ns: u64,
    pub l2_ingress: u32,
    pub l2_egress: u32,
    pub tx_util: Option<u32>,
    pub buffer_id: u8,
    pub buffer_occupancy: u32,
}

/// Writes the metadata `bitmap` selects, in bitmap order, into `out`
/// (exactly `hop_words(bitmap) * 4` bytes). Reserved bits and the checksum
/// complement are written as 0xFFFFFFFF. Returns the one's-complement sum
/// of what it wrote (as `checksum::sum` would give), summed from the values.
#[inline(always)]
pub fn emit_hop(bitmap: u16, m: &HopMetadata, out: &mut [u8]) -> u32 {
    // The leading instructions in order (node ID, L1 ports, hop latency,
    // queue, the two timestamps: the bitmaps most domains use, INT-label's
    // item among them) at constant offsets behind one bounds check; any
    // other bitmap word by word, out of line. A flow's bitmap does not
    // change, so the dispatch predicts. Inlined: a caller that has just
    // built the metadata writes it without reading it back from memory.
    match bitmap {
        0x8000 => emit_leading::<4>(bitmap, m, out),
        0xc000 => emit_leading::<8>(bitmap, m, out),
        0xe000 => emit_leading::<12>(bitmap, m, out),
        0xf000 => emit_leading::<16>(bitmap, m, out),
        0xf800 => emit_leading::<24>(bitmap, m, out),
        0xfc00 => emit_leading::<32>(bitmap, m, out),
        _ => emit_any(bitmap, m, out),
    }
}

/// `emit_hop` of a bitmap of the first instructions, `B` bytes of them.
#[inline(always)]
fn emit_leading<const B: usize>(bitmap: u16, m: &HopMetadata, out: &mut [u8]) -> u32 {
    let Some(out) = out.first_chunk_mut::<B>() else { return emit_any(bitmap, m, out) };
    let words = [
        m.node_id,
        ((m.ingress_port as u32) << 16) | m.egress_port as u32,
        m.hop_latency_ns,
        ((m.queue_id as u32) << 24) | (m.queue_occupancy & 0xff_ffff),
        (m.ingress_ts_ns >> 32) as u32,
        m.ingress_ts_ns as u32,
        (m.egress_ts_ns >> 32) as u32,
        m.egress_ts_ns as u32,
    ];
    let mut acc = 0u64;
    for (w, o) in words.iter().zip(out.chunks_exact_mut(4)) {
        o.copy_from_slice(&w.to_be_bytes());
        acc += *w as u64;
    }
    checksum::fold_words(acc)
}

/// `emit_hop` of any bitmap.
#[inline(never)]
fn emit_any(bitmap: u16, m: &HopMetadata, out: &mut [u8]) -> u32 {
    // Straight-line, one test per instruction in bitmap order: a flow's
    // bitmap does not change, so every branch predicts (a loop over the set
    // bits dispatched through a jump table mispredicted on each word).
    let (mut o, mut acc) = (0, 0u64);
    let mut put = |w: u32| {
        out[o..o + 4].copy_from_slice(&w.to_be_bytes());
        o += 4;
        acc += w as u64;
    };
    if bitmap & instr::NODE_ID != 0 {
        put(m.node_id);
    }
    if bitmap & instr::L1_PORTS != 0 {
        put(((m.ingress_port as u32) << 16) | m.egress_port as u32);
    }
    if bitmap & instr::HOP_LATENCY != 0 {
        put(m.hop_latency_ns);
    }
    if bitmap & instr::QUEUE != 0 {
        put(((m.queue_id as u32) << 24) | (m.queue_occupancy & 0xff_ffff));
    }
    if bitmap & instr::INGRESS_TS != 0 {
        put((m.ingress_ts_ns >> 32) as u32);
        put(m.ingress_ts_ns as u32);
    }
    if bitmap & instr::EGRESS_TS != 0 {
        put((m.egress_ts_ns >> 32) as u32);
        put(m.egress_ts_ns as u32);
    }
    if bitmap & instr::L2_PORTS != 0 {
        put(m.l2_ingress);
        put(m.l2_egress);
    }
    if bitmap & instr::TX_UTIL != 0 {
        put(m.tx_util.unwrap_or(u32::MAX));
    }
    if bitmap & instr::BUFFER != 0 {
        put(((m.buffer_id as u32) << 24) | (m.buffer_occupancy & 0xff_ffff));
    }
    // Reserved bits and the checksum complement: all ones.
    // (All in the low byte, none of them wide: the table counts them.)
    for _ in 0..HOP_WORDS_LO[(bitmap & (instr::RESERVED | instr::CHECKSUM_COMPLEMENT)) as usize] {
        put(u32::MAX);
    }
    checksum::fold_words(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_hops_divides_exactly() {
        for hop_ml in 1..32 {
            for words in 0..=255 {
                assert_eq!(stack_hops(words, hop_ml), (words / hop_ml, words % hop_ml), "{words} / {hop_ml}");
            }
        }
    }

    /// The spec example (wire-formats.md §1): 2 hops, bitmap 0x9000 (node ID +
    /// queue), HopML 2, RHC 8 -> 6, DSCP mode with DSCP 0x17 saved.
    fn spec_example() -> Vec<u8> {
        let mut b = vec![0x10, 0x07, 0x00, 0x17 << 2];
        b.extend([0x20, 0x00, 0x02, 0x06, 0x90, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00]);
        b.extend([0, 0, 0, 2, 0x01, 0, 0, 0x40]); // hop 2: node 2, qid 1, occupancy 64
        b.extend([0, 0, 0, 1, 0x00, 0, 0, 0x10]); // hop 1: node 1, qid 0, occupancy 16
        b
    }

    #[test]
    fn parses_the_spec_example() {
        let b = spec_example();
        let md = IntMd::new_checked(&b[..]).unwrap();
        assert_eq!((md.npt(), md.total_len(), md.saved()), (0, 32, 0x17 << 2));
        assert_eq!((md.hop_ml(), md.rhc(), md.bitmap(), md.hops()), (2, 6, 0x9000, 2));
        assert!(!md.flag_d() && !md.flag_e() && !md.flag_m());
        assert_eq!(md.hop(0), &[0, 0, 0, 2, 1, 0, 0, 0x40]);
        assert_eq!(md.hop(1), &[0, 0, 0, 1, 0, 0, 0, 0x10]);
    }

    #[test]
    fn emits_the_spec_example_byte_for_byte() {
        let mut b = vec![0u8; 32];
        IntMdRepr {
            npt: Npt::Dscp,
            saved: 0x17 << 2,
            flag_d: false,
            hop_ml: hop_words(0x9000) as u8,
            rhc: 6,
            bitmap: 0x9000,
            domain_id: 0,
            ds_instruction: 0,
            ds_flags: 0,
            stack_words: 4,
        }
        .emit(&mut b);
        for (i, node, qid, occ) in [(16usize, 2u32, 1u8, 64u32), (24, 1, 0, 16)] {
            let m = HopMetadata { node_id: node, queue_id: qid, queue_occupancy: occ, ..Default::default() };
            emit_hop(0x9000, &m, &mut b[i..i + 8]);
        }
        assert_eq!(b, spec_example());
    }

    #[test]
    fn hop_sizes_follow_the_bitmap() {
        assert_eq!(hop_words(0x9000), 2);
        assert_eq!(hop_words(0xff00), 1 + 1 + 1 + 1 + 2 + 2 + 2 + 1);
        assert_eq!(hop_words(0xffff), 11 + 1 + 6 + 1);
        // Every bitmap: the bytes its instructions take (bit 0 the MSB).
        for bm in 0..=u16::MAX {
            let bytes: usize = (0..16).filter(|i| bm & (0x8000 >> i) != 0).map(|i| INSTR_BYTES[i]).sum();
            assert_eq!(hop_words(bm) * 4, bytes, "bitmap {bm:#06x}");
        }
        let m = HopMetadata {
            node_id: 7,
            ingress_port: 1,
            egress_port: 2,
            hop_latency_ns: 1500,
            ingress_ts_ns: 0x0102_0304_0506_0708,
            ..Default::default()
        };
        let bm = instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::INGRESS_TS | instr::TX_UTIL | 0x0040;
        let mut out = vec![0u8; hop_words(bm) * 4];
        emit_hop(bm, &m, &mut out);
        assert_eq!(
            out,
            [
                0, 0, 0, 7, 0, 1, 0, 2, 0, 0, 0x05, 0xdc, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0xff
            ]
        );
    }

    #[test]
    fn every_instruction_in_bitmap_order() {
        let m = HopMetadata {
            node_id: 0x0a0b0c0d,
            ingress_port: 0x1112,
            egress_port: 0x1314,
            hop_latency_ns: 0x21222324,
            queue_id: 0x31,
            queue_occupancy: 0xff32_3334, // 24 bits on the wire
            ingress_ts_ns: 0x4142_4344_4546_4748,
            egress_ts_ns: 0x5152_5354_5556_5758,
            l2_ingress: 0x61626364,
            l2_egress: 0x65666768,
            tx_util: Some(0x71727374),
            buffer_id: 0x81,
            buffer_occupancy: 0x0082_8384,
        };
        let mut out = vec![0u8; hop_words(0xffff) * 4];
        emit_hop(0xffff, &m, &mut out);
        let mut want =
            vec![0x0a, 0x0b, 0x0c, 0x0d, 0x11, 0x12, 0x13, 0x14, 0x21, 0x22, 0x23, 0x24, 0x31, 0x32, 0x33, 0x34];
        want.extend([0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58]);
        want.extend([0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x71, 0x72, 0x73, 0x74, 0x81, 0x82, 0x83, 0x84]);
        want.extend([0xff; 7 * 4]); // six reserved bits and the checksum complement
        assert_eq!(out, want);
        // Egress timestamp and buffer alone; no tx_util reads as all-ones.
        let m = HopMetadata { tx_util: None, ..m };
        let mut out = vec![0u8; 16];
        emit_hop(instr::EGRESS_TS | instr::TX_UTIL | instr::BUFFER, &m, &mut out);
        assert_eq!(
            out,
            [0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0xff, 0xff, 0xff, 0xff, 0x81, 0x82, 0x83, 0x84]
        );
    }

    #[test]
    fn the_leading_bitmaps_write_and_sum_as_any_other() {
        let m = HopMetadata {
            node_id: 0xfedc_ba98,
            ingress_port: 0xfff1,
            egress_port: 3,
            hop_latency_ns: 0xffff_fff0,
            queue_id: 0xee,
            queue_occupancy: 0xffff_ffff,
            ingress_ts_ns: 0xffff_0001_ffff_fffe,
            egress_ts_ns: 0x8000_0000_ffff_ffff,
            ..Default::default()
        };
        for bm in [0x8000, 0xc000, 0xe000, 0xf000, 0xf800, 0xfc00] {
            let n = hop_words(bm) * 4;
            let (mut fast, mut any) = (vec![0u8; n], vec![0u8; n]);
            assert_eq!(emit_hop(bm, &m, &mut fast), emit_any(bm, &m, &mut any), "{bm:#06x}");
            assert_eq!(fast, any, "{bm:#06x}");
        }
    }

    #[test]
    fn malformed_blocks_are_named() {
        let b = spec_example();
        assert_eq!(IntMd::new_checked(&b[..10]).err(), Some(DropReason::IntTruncated));
        let mut v = b.clone();
        v[1] = 9; // shim length past the packet
        assert_eq!(IntMd::new_checked(&v[..]).err(), Some(DropReason::IntTruncated));
        let mut v = b.clone();
        v[6] = 0; // HopML 0
        assert_eq!(IntMd::new_checked(&v[..]).err(), Some(DropReason::IntBadHopMl));
        let mut v = b.clone();
        v[6] = 3; // 16-byte stack is not a multiple of 12
        assert_eq!(IntMd::new_checked(&v[..]).err(), Some(DropReason::IntBadStack));
        let mut v = b.clone();
        v[4] = 0x10; // version 1
        assert_eq!(IntMd::new_checked(&v[..]).err(), Some(DropReason::IntBadVersion));
        let mut v = b.clone();
        v[1] = 2; // length below the 12-byte header
        assert_eq!(IntMd::new_checked(&v[..]).err(), Some(DropReason::IntTruncated));
    }

    #[test]
    fn transit_updates() {
        let mut b = spec_example();
        let mut md = IntMd::new_checked(&mut b[..]).unwrap();
        md.set_flag_e();
        md.set_flag_m();
        md.set_rhc(5);
        md.grow(2);
        assert_eq!(&b[..8], &[0x10, 0x09, 0x00, 0x5c, 0x26, 0x00, 0x02, 0x05]);
    }
}
