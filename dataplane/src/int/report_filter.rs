//! The INT sink's per-flow report filter: at most one report per flow per
//! interval, kept apart from the flow table (no learning, counters or
//! aging needed). Like the per-flow registers an INT sink keeps by flow
//! hash (int-event-detection §III-C), it is a direct-mapped array of slots
//! holding a flow's 64-bit hash and the time of its last report.
//!
//! A flow that finds another flow in its slot takes the slot over and is
//! reported: a collision costs extra reports, never a missed one. Only two
//! live flows with the same 64-bit hash would share an interval.

/// One flow's report state.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    hash: u64,
    /// TSC of the last report (0: none yet).
    last: u64,
}

/// Most slots a filter may have (16 bytes each: 256 MiB).
pub const MAX_SLOTS: usize = 1 << 24;

pub struct ReportFilter {
    slots: Box<[Slot]>,
    mask: usize,
}

impl ReportFilter {
    /// A filter of `slots` slots, rounded up to a power of two (at least 1,
    /// at most [`MAX_SLOTS`]). Allocated once, at worker setup.
    pub fn new(slots: usize) -> ReportFilter {
        let n = slots.clamp(1, MAX_SLOTS).next_power_of_two();
        ReportFilter { slots: vec![Slot::default(); n].into_boxed_slice(), mask: n - 1 }
    }

    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether the flow with `hash` is due a report at `now` (TSC): its
    /// first packet, or `interval` ticks or more after its last report.
    /// A due report is recorded as made.
    #[inline]
    pub fn due(&mut self, hash: u64, now: u64, interval: u64) -> bool {
        let s = &mut self.slots[hash as usize & self.mask];
        if s.hash == hash && s.last != 0 && now.wrapping_sub(s.last) < interval {
            return false;
        }
        *s = Slot { hash, last: now };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_report_per_interval_per_flow() {
        let mut f = ReportFilter::new(16);
        assert!(f.due(7, 1_000, 500), "first packet");
        assert!(!f.due(7, 1_200, 500));
        assert!(!f.due(7, 1_499, 500));
        assert!(f.due(7, 1_500, 500), "an interval after the last report");
        assert!(!f.due(7, 1_600, 500), "the interval restarts at that report");
        assert!(f.due(8, 1_600, 500), "another flow has its own slot");
    }

    #[test]
    fn a_collision_reports_both_flows() {
        let mut f = ReportFilter::new(4);
        // Same slot (low bits), different hashes: each takes the slot over.
        let (a, b) = (0x10, 0x20);
        assert!(f.due(a, 100, 1_000));
        assert!(f.due(b, 101, 1_000));
        assert!(f.due(a, 102, 1_000), "evicted, so reported again rather than missed");
        assert!(!f.due(a, 103, 1_000));
    }

    #[test]
    fn sizes_round_up_and_time_wraps() {
        assert_eq!(ReportFilter::new(0).slots(), 1);
        assert_eq!(ReportFilter::new(1000).slots(), 1024);
        assert_eq!(ReportFilter::new(usize::MAX).slots(), MAX_SLOTS);
        let mut f = ReportFilter::new(1);
        assert!(f.due(3, u64::MAX - 10, 100));
        assert!(!f.due(3, 50, 100), "61 ticks across the counter's wrap");
        assert!(f.due(3, 90, 100));
    }
}
