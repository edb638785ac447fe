//! R_G: the lock-free SPSC ring that carries one worker's exported flow
//! records to the control core. A record is a head plus one 64-byte hop
//! aggregate per tracked hop, in a second ring (as the report ring keeps a
//! record's bytes); a full ring refuses a record whole and never blocks.

use crate::int::analytics::cache::{Agg, FlowEntry, HopAgg, Reason, MAX_HOPS};
use crate::parse::FlowKey;

/// A flow record without its hops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowHead {
    pub key: FlowKey,
    /// `Reason` as a number.
    pub reason: u8,
    /// Hops in the flow's latest packet.
    pub hops: u8,
    /// Hop aggregates that follow (path order, source side first).
    pub tracked: u8,
    pub packets: u64,
    /// First and last packet, nanoseconds since the Unix epoch.
    pub first_ns: u64,
    pub last_ns: u64,
    pub e2e: Agg,
}

impl FlowHead {
    pub fn of(e: &FlowEntry, reason: Reason, ns: impl Fn(u64) -> u64) -> FlowHead {
        FlowHead {
            key: e.key,
            reason: reason as u8,
            hops: e.hops,
            tracked: e.tracked,
            packets: e.packets,
            first_ns: ns(e.first_tsc),
            last_ns: ns(e.last_tsc),
            e2e: e.e2e,
        }
    }

    pub fn reason(&self) -> Option<Reason> {
        Reason::from_u8(self.reason)
    }
}

/// One record as the control core reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRecord {
    pub head: FlowHead,
    pub hops: [HopAgg; MAX_HOPS],
}

impl FlowRecord {
    pub fn empty() -> FlowRecord {
        FlowRecord { head: FlowHead::default(), hops: [HopAgg::default(); MAX_HOPS] }
    }

    /// The tracked hops.
    pub fn hops(&self) -> &[HopAgg] {
        &self.hops[..(self.head.tracked as usize).min(MAX_HOPS)]
    }
}

/// The worker's end.
pub struct FlowProducer {
    heads: rtrb::Producer<FlowHead>,
    hops: rtrb::Producer<HopAgg>,
}

/// The control core's end.
pub struct FlowConsumer {
    heads: rtrb::Consumer<FlowHead>,
    hops: rtrb::Consumer<HopAgg>,
}

/// A ring for `records` (at least 1) records of up to `max_hops` hops.
pub fn flow_ring(records: usize, max_hops: usize) -> (FlowProducer, FlowConsumer) {
    let records = records.max(1);
    let (hp, hc) = rtrb::RingBuffer::new(records);
    let (op, oc) = rtrb::RingBuffer::new((records * max_hops.min(MAX_HOPS)).max(1));
    (FlowProducer { heads: hp, hops: op }, FlowConsumer { heads: hc, hops: oc })
}

impl FlowProducer {
    /// Queues a record of `head.tracked` of `hops`; false when full.
    /// The head is claimed first and published last, after its hops.
    #[inline]
    pub fn push(&mut self, head: FlowHead, hops: &[HopAgg]) -> bool {
        let Ok(h) = self.heads.write_chunk_uninit(1) else {
            return false;
        };
        let n = (head.tracked as usize).min(hops.len());
        let Ok(body) = self.hops.write_chunk_uninit(n) else {
            return false;
        };
        body.fill_from_iter(hops[..n].iter().copied());
        h.fill_from_iter(std::iter::once(FlowHead { tracked: n as u8, ..head })) == 1
    }
}

impl FlowConsumer {
    pub fn len(&self) -> usize {
        self.heads.slots()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.heads.buffer().capacity()
    }

    /// Moves the oldest record into `out`; false when none is waiting.
    pub fn pop_into(&mut self, out: &mut FlowRecord) -> bool {
        let Ok(h) = self.heads.peek().copied() else {
            return false;
        };
        let n = h.tracked as usize;
        let Ok(body) = self.hops.read_chunk(n) else {
            return false;
        };
        let (a, b) = body.as_slices();
        for (dst, src) in out.hops.iter_mut().zip(a.iter().chain(b)) {
            *dst = *src;
        }
        body.commit_all();
        let _ = self.heads.pop();
        out.head = h;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(i: u8, tracked: u8) -> FlowHead {
        FlowHead {
            key: FlowKey::v4([1, 2, 3, i], [4, 5, 6, 7], 6, 1, 2),
            tracked,
            packets: i as u64,
            ..Default::default()
        }
    }

    fn hops(i: u8) -> Vec<HopAgg> {
        (0..5).map(|h| HopAgg { node_id: i as u32 * 10 + h, ..Default::default() }).collect()
    }

    #[test]
    fn records_come_out_whole_and_in_order_and_a_full_ring_refuses() {
        let (mut p, mut c) = flow_ring(2, 5);
        assert_eq!(c.capacity(), 2);
        assert!(p.push(head(1, 5), &hops(1)));
        assert!(p.push(head(2, 0), &hops(2)));
        assert!(!p.push(head(3, 3), &hops(3)), "full");
        let mut out = FlowRecord::empty();
        assert!(c.pop_into(&mut out));
        assert_eq!((out.head, out.hops()), (head(1, 5), &hops(1)[..]));
        assert!(p.push(head(4, 3), &hops(4)));
        assert!(c.pop_into(&mut out));
        assert_eq!((out.head.packets, out.hops().len()), (2, 0));
        assert!(c.pop_into(&mut out));
        assert_eq!((out.head.packets, out.hops()), (4, &hops(4)[..3]));
        assert!(!c.pop_into(&mut out));
        // Many times round: the hop ring wraps with the heads.
        for i in 0..50u8 {
            assert!(p.push(head(i, i % 6), &hops(i)));
            assert!(c.pop_into(&mut out));
            assert_eq!(out.hops(), &hops(i)[..(i % 6).min(5) as usize]);
        }
    }
}
