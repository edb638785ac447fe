//! The GPINT block (gpint-sqr-reliable-int §III-B, laid out by issue 33):
//! the UDP payload of a GPINT probe after its INT-MD stack, and the whole
//! UDP payload of a feedback. 4-byte words, big-endian:
//!
//! ```text
//! w0   ver 4 | kind 4 | flags 8 | request ID 15 | type 1
//! w1   attempt 8 | start index 8 | SR count 8 | SR left 8
//!      SR count x (next port 8 | MEA first 8 | MEA count 8 | reserved 8)
//!      MEA records, one a hop: node ID 32 | hop index 8 | count 8 |
//!      reserved 16, then count x 32-bit values
//! ```
//!
//! A switch works on the entry `SR count - SR left` and decrements SR left
//! (no entry is popped, so nothing moves). A hop's index on the planned
//! path is `start index` (non-zero for a recovery probe that starts part
//! way) plus that entry's position. A feedback is w0 (kind 2) and a w1 of
//! attempt | acked hop index | 0 | 0.

use crate::DropReason;

pub const VERSION: u8 = 1;
/// w0 and w1.
pub const HDR_LEN: usize = 8;
pub const SR_ENTRY_LEN: usize = 4;
/// A MEA record's node ID, hop index, count and reserved bytes.
pub const MEA_HDR_LEN: usize = 8;
/// A feedback's whole block.
pub const FEEDBACK_LEN: usize = HDR_LEN;
/// The next port of a path's last SR entry: deliver to the monitor.
pub const TO_MONITOR: u8 = 0xFF;
/// Flags: a probe the monitor sent to recover a lost part of a path.
pub const FLAG_RECOVERY: u8 = 0x80;

/// What the block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Probe = 1,
    Feedback = 2,
    Notice = 3,
}

/// Which counters a probe's MEA ranges index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestType {
    /// The switch's rule-hit (flow entry) counters.
    RuleHits = 0,
    /// Per-port received-packet counters.
    PortRx = 1,
}

/// w0 and w1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    /// 15 bits.
    pub request_id: u16,
    pub request_type: RequestType,
    pub attempt: u8,
    /// Probe: the planned path's hop index of SR entry 0. Feedback: the
    /// acknowledged hop index.
    pub start_index: u8,
    pub sr_count: u8,
    pub sr_left: u8,
}

impl Header {
    /// Reads w0 and w1 (no check of what follows).
    pub fn parse(b: &[u8]) -> Result<Header, DropReason> {
        let h = b.first_chunk::<HDR_LEN>().ok_or(DropReason::GpintMalformed)?;
        if h[0] >> 4 != VERSION {
            return Err(DropReason::GpintMalformed);
        }
        let kind = match h[0] & 0x0f {
            1 => Kind::Probe,
            2 => Kind::Feedback,
            3 => Kind::Notice,
            _ => return Err(DropReason::GpintMalformed),
        };
        let rt = u16::from_be_bytes([h[2], h[3]]);
        Ok(Header {
            kind,
            flags: h[1],
            request_id: rt >> 1,
            request_type: if rt & 1 == 0 { RequestType::RuleHits } else { RequestType::PortRx },
            attempt: h[4],
            start_index: h[5],
            sr_count: h[6],
            sr_left: h[7],
        })
    }

    /// Writes w0 and w1 into the first 8 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        let rt = (self.request_id & 0x7fff) << 1 | self.request_type as u16;
        let [r0, r1] = rt.to_be_bytes();
        b[..HDR_LEN].copy_from_slice(&[
            VERSION << 4 | self.kind as u8,
            self.flags,
            r0,
            r1,
            self.attempt,
            self.start_index,
            self.sr_count,
            self.sr_left,
        ]);
    }

    /// The SR entry this switch works on (None: none left).
    pub fn current(&self) -> Option<usize> {
        (self.sr_left > 0 && self.sr_left <= self.sr_count).then(|| (self.sr_count - self.sr_left) as usize)
    }

    /// The planned path's index of the hop that works on the current entry.
    pub fn hop_index(&self) -> u8 {
        self.start_index.wrapping_add(self.sr_count.wrapping_sub(self.sr_left))
    }

    /// The feedback acknowledging this probe's current hop.
    pub fn feedback(&self) -> Header {
        Header { kind: Kind::Feedback, flags: 0, start_index: self.hop_index(), sr_count: 0, sr_left: 0, ..*self }
    }
}

/// One source-route entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrEntry {
    /// The port to forward out of; [`TO_MONITOR`] at the path's end.
    pub next_port: u8,
    /// The first counter whose value this hop reports.
    pub mea_first: u8,
    pub mea_count: u8,
}

impl SrEntry {
    pub fn parse(b: &[u8; SR_ENTRY_LEN]) -> SrEntry {
        SrEntry { next_port: b[0], mea_first: b[1], mea_count: b[2] }
    }

    pub fn emit(&self, b: &mut [u8]) {
        b[..SR_ENTRY_LEN].copy_from_slice(&[self.next_port, self.mea_first, self.mea_count, 0]);
    }

    /// Whether this entry ends the path.
    pub fn is_last(&self) -> bool {
        self.next_port == TO_MONITOR
    }

    /// The counters it asks for, when a switch with `registers` of them
    /// has them all.
    pub fn mea_range(&self, registers: usize) -> Result<std::ops::Range<usize>, DropReason> {
        let r = self.mea_first as usize..self.mea_first as usize + self.mea_count as usize;
        if r.end > registers {
            return Err(DropReason::GpintMeaRange);
        }
        Ok(r)
    }
}

/// One hop's MEA record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeaRecord<'a> {
    pub node_id: u32,
    pub hop_index: u8,
    values: &'a [u8],
}

impl MeaRecord<'_> {
    pub fn count(&self) -> usize {
        self.values.len() / 4
    }

    pub fn value(&self, i: usize) -> u32 {
        u32::from_be_bytes(self.values[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
    }

    pub fn values(&self) -> impl Iterator<Item = u32> + '_ {
        self.values.chunks_exact(4).map(|v| u32::from_be_bytes(v.try_into().expect("4 bytes")))
    }
}

/// Bytes of a MEA record with `count` values.
pub const fn mea_record_len(count: usize) -> usize {
    MEA_HDR_LEN + 4 * count
}

/// Writes a MEA record (header and values) at the start of `b`, which
/// holds exactly [`mea_record_len`]`(values.len())` bytes or more.
pub fn emit_mea_record(b: &mut [u8], node_id: u32, hop_index: u8, values: impl ExactSizeIterator<Item = u32>) {
    let n = values.len().min(u8::MAX as usize);
    b[..4].copy_from_slice(&node_id.to_be_bytes());
    b[4..MEA_HDR_LEN].copy_from_slice(&[hop_index, n as u8, 0, 0]);
    for (slot, v) in b[MEA_HDR_LEN..mea_record_len(n)].chunks_exact_mut(4).zip(values) {
        slot.copy_from_slice(&v.to_be_bytes());
    }
}

/// A checked view of a probe's (or notice's) block: the header, SR count
/// entries within the bytes, SR left at most SR count, and whole MEA
/// records to the end.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    pub header: Header,
    b: &'a [u8],
}

impl<'a> Probe<'a> {
    pub fn new_checked(b: &'a [u8]) -> Result<Probe<'a>, DropReason> {
        let header = Header::parse(b)?;
        if header.kind == Kind::Feedback {
            return Err(DropReason::GpintMalformed);
        }
        if HDR_LEN + SR_ENTRY_LEN * header.sr_count as usize > b.len() || header.sr_left > header.sr_count {
            return Err(DropReason::GpintSrBeyondBytes);
        }
        let p = Probe { header, b };
        let mut at = p.records_start();
        while at < b.len() {
            let count = *b.get(at + 5).ok_or(DropReason::GpintMalformed)? as usize;
            at += mea_record_len(count);
        }
        if at != b.len() {
            return Err(DropReason::GpintMalformed);
        }
        Ok(p)
    }

    /// Where the MEA records start.
    pub fn records_start(&self) -> usize {
        HDR_LEN + SR_ENTRY_LEN * self.header.sr_count as usize
    }

    pub fn entry(&self, i: usize) -> Option<SrEntry> {
        (i < self.header.sr_count as usize)
            .then(|| SrEntry::parse(self.b[HDR_LEN + i * SR_ENTRY_LEN..].first_chunk().expect("checked")))
    }

    /// The entry this switch works on; Err when none is left.
    pub fn current(&self) -> Result<SrEntry, DropReason> {
        self.header.current().and_then(|i| self.entry(i)).ok_or(DropReason::GpintSrExhausted)
    }

    /// The hops' MEA records, in the order the hops added them.
    pub fn records(&self) -> impl Iterator<Item = MeaRecord<'a>> + 'a {
        let b = self.b;
        let mut at = self.records_start();
        std::iter::from_fn(move || {
            let h = b.get(at..at + MEA_HDR_LEN)?;
            let end = at + mea_record_len(h[5] as usize);
            let r = MeaRecord {
                node_id: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
                hop_index: h[4],
                values: &b[at + MEA_HDR_LEN..end],
            };
            at = end;
            Some(r)
        })
    }

    /// The block's bytes.
    pub fn len(&self) -> usize {
        self.b.len()
    }

    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

/// Fields for building a probe (the monitor's side, and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRepr {
    pub header: Header,
    pub entries: Vec<SrEntry>,
}

impl ProbeRepr {
    /// A fresh probe over `entries` (SR left = SR count); None for more
    /// entries than SR count's 8 bits hold.
    pub fn new(
        request_id: u16,
        request_type: RequestType,
        attempt: u8,
        start_index: u8,
        entries: Vec<SrEntry>,
    ) -> Option<Self> {
        let n = u8::try_from(entries.len()).ok()?;
        Some(ProbeRepr {
            header: Header {
                kind: Kind::Probe,
                flags: 0,
                request_id,
                request_type,
                attempt,
                start_index,
                sr_count: n,
                sr_left: n,
            },
            entries,
        })
    }

    pub fn buffer_len(&self) -> usize {
        HDR_LEN + SR_ENTRY_LEN * self.entries.len()
    }

    pub fn emit(&self, b: &mut [u8]) {
        self.header.emit(b);
        for (e, chunk) in self.entries.iter().zip(b[HDR_LEN..self.buffer_len()].chunks_exact_mut(SR_ENTRY_LEN)) {
            e.emit(chunk);
        }
    }
}

/// Sets a probe block's SR left (after a hop worked on its entry).
pub fn set_sr_left(b: &mut [u8], left: u8) {
    b[7] = left;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<SrEntry> {
        vec![
            SrEntry { next_port: 1, mea_first: 0, mea_count: 2 },
            SrEntry { next_port: 3, mea_first: 1, mea_count: 1 },
            SrEntry { next_port: TO_MONITOR, mea_first: 0, mea_count: 0 },
        ]
    }

    fn probe_bytes() -> Vec<u8> {
        let r = ProbeRepr::new(0x1234, RequestType::PortRx, 2, 5, entries()).unwrap();
        let mut b = vec![0; r.buffer_len()];
        r.emit(&mut b);
        b
    }

    #[test]
    fn header_round_trip_and_bit_layout() {
        let h = Header {
            kind: Kind::Notice,
            flags: FLAG_RECOVERY,
            request_id: 0x7fff,
            request_type: RequestType::PortRx,
            attempt: 9,
            start_index: 4,
            sr_count: 6,
            sr_left: 2,
        };
        let mut b = [0u8; HDR_LEN];
        h.emit(&mut b);
        assert_eq!(b, [0x13, 0x80, 0xff, 0xff, 9, 4, 6, 2]);
        assert_eq!(Header::parse(&b), Ok(h));
        // The request ID keeps 15 bits; the type is the last bit.
        let h2 = Header { request_id: 0x8001, request_type: RequestType::RuleHits, ..h };
        h2.emit(&mut b);
        assert_eq!(&b[2..4], &[0x00, 0x02]);
        assert_eq!(Header::parse(&b).unwrap().request_id, 1);
    }

    #[test]
    fn more_entries_than_sr_count_holds_are_refused() {
        let e = SrEntry { next_port: 0, mea_first: 0, mea_count: 0 };
        assert!(ProbeRepr::new(1, RequestType::RuleHits, 0, 0, vec![e; 255]).is_some());
        assert!(ProbeRepr::new(1, RequestType::RuleHits, 0, 0, vec![e; 256]).is_none());
    }

    #[test]
    fn bad_version_kind_or_length_is_malformed() {
        let mut b = probe_bytes();
        assert_eq!(Header::parse(&b[..7]), Err(DropReason::GpintMalformed));
        b[0] = 0x21;
        assert_eq!(Header::parse(&b), Err(DropReason::GpintMalformed));
        b[0] = 0x14;
        assert_eq!(Header::parse(&b), Err(DropReason::GpintMalformed));
    }

    #[test]
    fn probe_walks_its_entries_by_sr_left() {
        let mut b = probe_bytes();
        let p = Probe::new_checked(&b).unwrap();
        assert_eq!(p.header.hop_index(), 5);
        assert_eq!(p.current(), Ok(entries()[0]));
        assert_eq!(p.records().count(), 0);
        set_sr_left(&mut b, 1);
        let p = Probe::new_checked(&b).unwrap();
        assert_eq!(p.current(), Ok(entries()[2]));
        assert!(p.current().unwrap().is_last());
        assert_eq!(p.header.hop_index(), 7);
        set_sr_left(&mut b, 0);
        assert_eq!(Probe::new_checked(&b).unwrap().current(), Err(DropReason::GpintSrExhausted));
    }

    #[test]
    fn sr_beyond_the_bytes_is_named() {
        let mut b = probe_bytes();
        b[6] = 4; // SR count 4, three entries' bytes
        b[7] = 4;
        assert_eq!(Probe::new_checked(&b).unwrap_err(), DropReason::GpintSrBeyondBytes);
        let mut b = probe_bytes();
        b[7] = 4; // SR left above SR count
        assert_eq!(Probe::new_checked(&b).unwrap_err(), DropReason::GpintSrBeyondBytes);
    }

    #[test]
    fn mea_records_append_and_read_back() {
        let mut b = probe_bytes();
        for (node, hop, vals) in [(0x0a0b0c0d, 5u8, vec![1u32, 2]), (7, 6, vec![0xdead_beef])] {
            let at = b.len();
            b.resize(at + mea_record_len(vals.len()), 0);
            emit_mea_record(&mut b[at..], node, hop, vals.into_iter());
        }
        let p = Probe::new_checked(&b).unwrap();
        let recs: Vec<_> = p.records().collect();
        assert_eq!(recs.len(), 2);
        assert_eq!((recs[0].node_id, recs[0].hop_index, recs[0].count()), (0x0a0b0c0d, 5, 2));
        assert_eq!(recs[0].values().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(recs[1].value(0), 0xdead_beef);
        // A record cut short, or stray bytes after the last one.
        assert_eq!(Probe::new_checked(&b[..b.len() - 1]).unwrap_err(), DropReason::GpintMalformed);
        b.push(0);
        assert_eq!(Probe::new_checked(&b).unwrap_err(), DropReason::GpintMalformed);
    }

    #[test]
    fn mea_range_beyond_the_registers_is_named() {
        let e = SrEntry { next_port: 0, mea_first: 2, mea_count: 3 };
        assert_eq!(e.mea_range(5), Ok(2..5));
        assert_eq!(e.mea_range(4), Err(DropReason::GpintMeaRange));
        assert_eq!(SrEntry { mea_count: 0, ..e }.mea_range(0), Err(DropReason::GpintMeaRange));
        assert_eq!(SrEntry { mea_first: 0, mea_count: 0, ..e }.mea_range(0), Ok(0..0));
    }

    #[test]
    fn feedback_acks_the_current_hop() {
        let b = probe_bytes();
        let p = Probe::new_checked(&b).unwrap();
        let fb = p.header.feedback();
        let mut out = [0u8; FEEDBACK_LEN];
        fb.emit(&mut out);
        let back = Header::parse(&out).unwrap();
        assert_eq!((back.kind, back.request_id, back.attempt, back.start_index), (Kind::Feedback, 0x1234, 2, 5));
        // A feedback is not a probe.
        assert_eq!(Probe::new_checked(&out).unwrap_err(), DropReason::GpintMalformed);
    }

    #[test]
    fn no_input_panics() {
        // Every byte string up to 3 words over a few seeds of content.
        let mut x = 0x9e37_79b9u32;
        for len in 0..=24 {
            for _ in 0..200 {
                let b: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        (x >> 8) as u8
                    })
                    .collect();
                if let Ok(p) = Probe::new_checked(&b) {
                    let _ = p.current();
                    assert!(p.records().all(|r| r.values().count() == r.count()));
                }
            }
        }
    }
}
