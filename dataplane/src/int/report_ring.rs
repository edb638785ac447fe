//! The lock-free SPSC ring that carries one worker's report records to the
//! control core. A record travels as a small head plus only as many 64-byte
//! chunks as its packet bytes fill: moving whole records (the full
//! truncation buffer, ~600 bytes) made each report store about ten cache
//! lines that the control core then pulled across; the report of a
//! 160-byte packet (the benchmark's 5-hop stack) now stores about five.
//! Capacity counts records, as `ring_size` says; a full ring refuses a
//! record whole and never blocks (as rtrb's push).

use crate::int::stage::{ReportRecord, ReportSink, REPORT_MAX};
use crate::wire::int_md::HopMetadata;

const CHUNK: usize = 64;
/// Chunks of the longest record.
const CHUNKS_MAX: usize = REPORT_MAX.div_ceil(CHUNK);

/// A record without its packet bytes.
#[derive(Clone, Copy, Default)]
struct Head {
    flags: u8,
    drop_reason: u8,
    domain_id: u16,
    md: HopMetadata,
    len: u16,
}

/// 64 packet bytes, one cache line in the ring.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Chunk([u8; CHUNK]);

/// The worker's end.
pub struct ReportProducer {
    heads: rtrb::Producer<Head>,
    chunks: rtrb::Producer<Chunk>,
}

/// The control core's end.
pub struct ReportConsumer {
    heads: rtrb::Consumer<Head>,
    chunks: rtrb::Consumer<Chunk>,
}

/// A ring for up to `records` (at least 1) reports of any length.
pub fn report_ring(records: usize) -> (ReportProducer, ReportConsumer) {
    let records = records.max(1);
    let (hp, hc) = rtrb::RingBuffer::new(records);
    // Room for every record in flight at its longest: the head ring alone
    // decides when the ring is full.
    let (cp, cc) = rtrb::RingBuffer::new(records * CHUNKS_MAX);
    (ReportProducer { heads: hp, chunks: cp }, ReportConsumer { heads: hc, chunks: cc })
}

impl ReportSink for ReportProducer {
    /// The head's slot is claimed first and published last, after the
    /// chunks: the consumer never sees a head whose bytes are missing, and a
    /// refused record leaves nothing behind.
    #[inline]
    fn push(&mut self, r: &ReportRecord) -> bool {
        let Ok(head) = self.heads.write_chunk_uninit(1) else {
            return false;
        };
        let len = (r.len as usize).min(REPORT_MAX);
        let k = len.div_ceil(CHUNK);
        let Ok(body) = self.chunks.write_chunk_uninit(k) else {
            return false;
        };
        body.fill_from_iter(r.data[..k * CHUNK].chunks_exact(CHUNK).map(|c| {
            let mut b = [0u8; CHUNK];
            b.copy_from_slice(c);
            Chunk(b)
        }));
        let h = Head { flags: r.flags, drop_reason: r.drop_reason, domain_id: r.domain_id, md: r.md, len: len as u16 };
        head.fill_from_iter(std::iter::once(h)) == 1
    }
}

impl ReportConsumer {
    /// Records waiting.
    pub fn len(&self) -> usize {
        self.heads.slots()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Records the ring holds when full.
    pub fn capacity(&self) -> usize {
        self.heads.buffer().capacity()
    }

    /// Moves the oldest record into `out`; false when none is waiting.
    pub fn pop_into(&mut self, out: &mut ReportRecord) -> bool {
        let Ok(h) = self.heads.peek().copied() else {
            return false;
        };
        let len = h.len as usize;
        // Published before their head, so they are there (checked all the same).
        let Ok(body) = self.chunks.read_chunk(len.div_ceil(CHUNK)) else {
            return false;
        };
        let (a, b) = body.as_slices();
        for (dst, c) in out.data.chunks_mut(CHUNK).zip(a.iter().chain(b)) {
            let n = dst.len();
            dst.copy_from_slice(&c.0[..n]);
        }
        body.commit_all();
        let _ = self.heads.pop();
        (out.flags, out.drop_reason, out.domain_id, out.md, out.len) =
            (h.flags, h.drop_reason, h.domain_id, h.md, h.len);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(len: usize, tag: u8) -> ReportRecord {
        let mut r = ReportRecord::empty();
        r.flags = tag;
        r.drop_reason = tag ^ 0x55;
        r.domain_id = 0x1200 | tag as u16;
        r.md.node_id = tag as u32 * 7;
        r.len = len as u16;
        for (i, b) in r.data[..len].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31) ^ tag;
        }
        r
    }

    fn same(a: &ReportRecord, b: &ReportRecord) -> bool {
        (a.flags, a.drop_reason, a.domain_id, a.md, a.packet())
            == (b.flags, b.drop_reason, b.domain_id, b.md, b.packet())
    }

    #[test]
    fn records_of_every_length_come_out_as_they_went_in() {
        let (mut p, mut c) = report_ring(4);
        let mut out = ReportRecord::empty();
        // Lengths around chunk edges, wrapping both rings several times.
        for (i, len) in
            [0, 1, 63, 64, 65, 127, 128, 200, REPORT_MAX - 1, REPORT_MAX].iter().cycle().take(40).enumerate()
        {
            let r = rec(*len, i as u8);
            assert!(p.push(&r));
            assert_eq!(c.len(), 1);
            assert!(c.pop_into(&mut out));
            assert!(same(&out, &r), "record {i} of {len} bytes");
        }
        assert!(!c.pop_into(&mut out));
        assert!(c.is_empty());
    }

    #[test]
    fn a_full_ring_refuses_whole_records_and_keeps_what_it_holds() {
        let (mut p, mut c) = report_ring(3);
        assert_eq!(c.capacity(), 3);
        // Longest records: the chunk ring must not be what fills first.
        let recs: Vec<_> = (0..5).map(|i| rec(REPORT_MAX, i)).collect();
        let taken: Vec<bool> = recs.iter().map(|r| p.push(r)).collect();
        assert_eq!(taken, [true, true, true, false, false]);
        let mut out = ReportRecord::empty();
        assert!(c.pop_into(&mut out) && same(&out, &recs[0]));
        // One slot again: a short record fits, in order after the others.
        assert!(p.push(&rec(10, 9)));
        assert!(!p.push(&rec(10, 10)));
        for want in [&recs[1], &recs[2], &rec(10, 9)] {
            assert!(c.pop_into(&mut out));
            assert!(same(&out, want));
        }
        assert!(!c.pop_into(&mut out));
    }
}
