//! The INT sink's T and C events (smartnic-int-sink §III-C): per switch
//! (each tracked hop's hop latency, queue occupancy and TX utilisation) and
//! end to end (the sum of the hop latencies, the path).
//!
//! T fires when a value is strictly above its threshold, on every such
//! packet (`level`), or once on crossing and again only after the value
//! fell below `reset` (`edge`). C fires when a value differs from the same
//! flow's value at the same hop in its previous packet by more than
//! `change`; a flow's first packet in the cache has no previous value.
//! Path change fires when a packet's node-ID list differs from the
//! previous packet's. Records go to the control core through R_I, a
//! per-worker SPSC ring that refuses a record when full (counted).

use crate::int::analytics::cache::METRICS;
use crate::parse::FlowKey;

/// One metric's event settings; 0 turns a class off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventRule {
    /// T: value > threshold.
    pub threshold: u32,
    /// C: |value - previous| > change.
    pub change: u32,
    /// T fires once on crossing, re-armed when the value falls below `reset`.
    pub edge: bool,
    pub reset: u32,
}

impl EventRule {
    pub fn is_off(&self) -> bool {
        self.threshold == 0 && self.change == 0
    }
}

/// The events a sink raises, per metric: the per-hop ones by metric index
/// (`cache::HOP_LATENCY`, ...), end-to-end latency, and path change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventSpec {
    pub hop: [EventRule; METRICS],
    pub e2e: EventRule,
    pub path_change: bool,
    /// Link latency into each tracked hop after the first: its ingress
    /// timestamp less the previous hop's egress timestamp.
    pub link: EventRule,
}

impl EventSpec {
    /// Whether any event is on (packets skip the checks otherwise).
    pub fn any(&self) -> bool {
        self.on_hops() || !self.e2e.is_off() || self.path_change
    }

    /// Whether a per-hop or link rule is on (events a packet's hops raise
    /// one by one).
    pub fn on_hops(&self) -> bool {
        self.hop.iter().any(|r| !r.is_off()) || !self.link.is_off()
    }
}

/// The event bitmap of a record: T and C of each per-hop metric (T of
/// metric m at bit 2m, C at 2m + 1), then end to end, path change, and the
/// link-latency pair.
pub mod bit {
    pub const E2E_T: u16 = 1 << 6;
    pub const E2E_C: u16 = 1 << 7;
    pub const PATH: u16 = 1 << 8;
    pub const LINK_T: u16 = 1 << 9;
    pub const LINK_C: u16 = 1 << 10;

    /// T of per-hop metric `m`.
    pub const fn t(m: usize) -> u16 {
        1 << (2 * m)
    }

    /// C of per-hop metric `m`.
    pub const fn c(m: usize) -> u16 {
        1 << (2 * m + 1)
    }

    /// Bits in use, and their names by bit index.
    pub const COUNT: usize = 11;
    pub const NAMES: [&str; COUNT] = [
        "hop_latency_t",
        "hop_latency_c",
        "queue_t",
        "queue_c",
        "tx_util_t",
        "tx_util_c",
        "e2e_latency_t",
        "e2e_latency_c",
        "path_change",
        "link_latency_t",
        "link_latency_c",
    ];
}

/// `EventRecord::present`'s bits for the link latency and its previous.
pub const LINK_PRESENT: u8 = 1 << 3;
pub const LINK_PREV_PRESENT: u8 = 1 << 7;

/// `hop` of the end-to-end record.
pub const HOP_E2E: u8 = 0xff;

/// One R_I record: one (packet, hop) with an event, or the packet's
/// end-to-end record (`hop` = HOP_E2E: `value[0]` and `prev[0]` are the
/// end-to-end latency, `node_id` is 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventRecord {
    pub key: FlowKey,
    /// The sink's time (ns since the Unix epoch) and its RX TSC.
    pub sink_ns: u64,
    pub rx_tsc: u64,
    pub value: [u32; METRICS],
    pub prev: [u32; METRICS],
    pub node_id: u32,
    /// The link latency into this hop (from the previous hop), and the
    /// flow's previous packet's.
    pub link: u32,
    pub link_prev: u32,
    pub bits: u16,
    /// Bit m: `value[m]` is present; bit 4 + m: `prev[m]` is; bits 3 and 7:
    /// `link` and `link_prev`.
    pub present: u8,
    /// Hop index in path order (source side first), or HOP_E2E.
    pub hop: u8,
}

impl EventRecord {
    pub fn has_value(&self, m: usize) -> bool {
        self.present & (1 << m) != 0
    }

    pub fn has_prev(&self, m: usize) -> bool {
        self.present & (1 << (4 + m)) != 0
    }

    pub fn has_link(&self) -> bool {
        self.present & LINK_PRESENT != 0
    }

    pub fn has_link_prev(&self) -> bool {
        self.present & LINK_PREV_PRESENT != 0
    }
}

/// Which events `v` (with the flow's previous value `prev` at this hop)
/// raises under `r`, as (T, C); `armed` is the rule's edge state for this
/// flow and hop (true: T may fire), updated.
#[inline(always)]
pub fn check(r: &EventRule, v: u32, prev: Option<u32>, armed: &mut bool) -> (bool, bool) {
    let over = r.threshold != 0 && v > r.threshold;
    let t = if r.edge {
        let fire = over && *armed;
        if fire {
            *armed = false;
        } else if v < r.reset {
            *armed = true;
        }
        fire
    } else {
        over
    };
    let c = r.change != 0 && prev.is_some_and(|p| p.abs_diff(v) > r.change);
    (t, c)
}

/// The worker's end of R_I.
pub struct EventProducer(rtrb::Producer<EventRecord>);

/// The control core's end.
pub struct EventConsumer(rtrb::Consumer<EventRecord>);

/// A ring of `records` (at least 1) event records.
pub fn event_ring(records: usize) -> (EventProducer, EventConsumer) {
    let (p, c) = rtrb::RingBuffer::new(records.max(1));
    (EventProducer(p), EventConsumer(c))
}

impl EventProducer {
    /// Queues a record; false (the record dropped) when the ring is full.
    #[inline]
    pub fn push(&mut self, r: EventRecord) -> bool {
        self.0.push(r).is_ok()
    }
}

impl EventConsumer {
    pub fn len(&self) -> usize {
        self.0.slots()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.0.buffer().capacity()
    }

    pub fn pop(&mut self) -> Option<EventRecord> {
        self.0.pop().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(threshold: u32, change: u32) -> EventRule {
        EventRule { threshold, change, ..EventRule::default() }
    }

    #[test]
    fn t_is_strictly_above_the_threshold_on_every_packet() {
        let r = level(100, 0);
        let mut armed = true;
        assert_eq!(check(&r, 99, None, &mut armed), (false, false));
        assert_eq!(check(&r, 100, None, &mut armed), (false, false), "at the threshold: no");
        assert_eq!(check(&r, 101, None, &mut armed), (true, false));
        assert_eq!(check(&r, 101, Some(101), &mut armed), (true, false), "level: every packet above");
        assert_eq!(check(&level(0, 0), u32::MAX, Some(0), &mut armed), (false, false), "0 is off");
    }

    #[test]
    fn c_is_a_difference_above_change_either_way_and_needs_a_previous_value() {
        let r = level(0, 10);
        let mut armed = true;
        assert_eq!(check(&r, 60, Some(50), &mut armed), (false, false), "|d| = change: no");
        assert_eq!(check(&r, 61, Some(50), &mut armed), (false, true));
        assert_eq!(check(&r, 40, Some(50), &mut armed), (false, false));
        assert_eq!(check(&r, 39, Some(50), &mut armed), (false, true), "downwards too");
        assert_eq!(check(&r, 1000, None, &mut armed), (false, false), "no previous packet");
        assert_eq!(check(&r, u32::MAX, Some(0), &mut armed), (false, true), "no overflow");
    }

    #[test]
    fn edge_fires_on_crossing_and_rearms_below_reset() {
        let r = EventRule { threshold: 100, change: 0, edge: true, reset: 50 };
        let mut armed = true;
        let fired: Vec<bool> =
            [90, 101, 150, 101, 60, 200, 49, 120, 100, 130].iter().map(|&v| check(&r, v, None, &mut armed).0).collect();
        assert_eq!(fired, [false, true, false, false, false, false, false, true, false, false]);
    }

    #[test]
    fn a_full_ring_hands_the_record_back_as_refused() {
        let (mut p, mut c) = event_ring(2);
        let r = EventRecord { hop: 1, bits: bit::t(0), ..EventRecord::default() };
        assert!(p.push(r) && p.push(EventRecord { hop: 2, ..r }));
        assert!(!p.push(EventRecord { hop: 3, ..r }), "full");
        assert_eq!((c.len(), c.capacity()), (2, 2));
        assert_eq!(c.pop().map(|r| r.hop), Some(1));
        assert_eq!(c.pop().map(|r| r.hop), Some(2));
        assert!(c.pop().is_none() && c.is_empty());
        assert_eq!(bit::NAMES[bit::c(2).trailing_zeros() as usize], "tx_util_c");
        assert_eq!(bit::NAMES[bit::PATH.trailing_zeros() as usize], "path_change");
    }
}
