//! The probes a switch has measured lately, so that a duplicate (the same
//! request, attempt and hop index: a retransmitted or duplicated frame) is
//! acknowledged again but neither measured nor forwarded twice. A revisit
//! of the switch at another hop index of the same path is a new hop.
//!
//! Direct-mapped, fixed size: a key is remembered for `window` TSC ticks
//! or until another key takes its slot. Forgetting early only lets a late
//! duplicate through as a new hop (the monitor merges hops by index); it
//! never drops a first visit.

use super::clone_buffer::CopyKey;

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: CopyKey,
    /// TSC when it was seen (0: empty).
    at: u64,
}

pub struct Seen {
    slots: Box<[Entry]>,
}

impl Seen {
    /// Room for `slots` keys (rounded up to a power of two, at least 1).
    pub fn new(slots: usize) -> Seen {
        let n = slots.clamp(1, 1 << 20).next_power_of_two();
        Seen { slots: vec![Entry { key: CopyKey { request_id: 0, attempt: 0, hop_index: 0 }, at: 0 }; n].into() }
    }

    /// Whether `key` was seen within `window` ticks before `now`; if not,
    /// it is remembered as seen now.
    pub fn check(&mut self, key: CopyKey, now: u64, window: u64) -> bool {
        let e = &mut self.slots[key.hash() & (self.slots.len() - 1)];
        if e.at != 0 && e.key == key && now.wrapping_sub(e.at) < window {
            return true;
        }
        *e = Entry { key, at: now.max(1) };
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(r: u16, a: u8, h: u8) -> CopyKey {
        CopyKey { request_id: r, attempt: a, hop_index: h }
    }

    #[test]
    fn a_duplicate_within_the_window_is_seen() {
        let mut s = Seen::new(64);
        assert!(!s.check(key(1, 0, 2), 100, 50));
        assert!(s.check(key(1, 0, 2), 120, 50));
        // Another hop index, attempt or request is a new hop.
        assert!(!s.check(key(1, 0, 3), 120, 50));
        assert!(!s.check(key(1, 1, 2), 120, 50));
        assert!(!s.check(key(2, 0, 2), 120, 50));
        // After the window it is measured again.
        assert!(!s.check(key(9, 9, 9), 1_000, 50));
        assert!(!s.check(key(9, 9, 9), 1_050, 50));
    }

    #[test]
    fn a_key_pushed_out_is_forgotten_never_confused() {
        let mut s = Seen::new(1);
        assert!(!s.check(key(1, 0, 0), 10, 100));
        assert!(!s.check(key(2, 0, 0), 11, 100));
        assert!(!s.check(key(1, 0, 0), 12, 100), "its slot went to another key");
    }
}
