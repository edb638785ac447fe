//! Per-worker exact-match flow table: 5-tuple (+ in-port, VLAN) -> action
//! and counters. Fixed capacity, no allocation per packet, incremental idle
//! aging.

use crate::fixed_map::{FixedMap, MapKey};
use crate::parse::FlowKey;

impl MapKey for FlowKey {
    #[inline]
    fn hash64(&self) -> u64 {
        FlowKey::hash64(self)
    }

    #[inline]
    fn hash_seeded(&self, seed: u64) -> u64 {
        FlowKey::hash_seeded(self, seed)
    }
}

/// What to do with a flow's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowAction {
    /// Forward as the switch's mode decides.
    Normal,
    /// Send out this port (L3 mode still rewrites MACs and TTL).
    Forward(u16),
    Drop,
}

/// A flow as the control core sees it (assembled from the table's parts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowEntry {
    pub action: FlowAction,
    pub packets: u64,
    pub bytes: u64,
    /// When the last packet (or the installation) was seen.
    pub seen: Seen,
    /// Installed by the control core (never aged) rather than learned.
    pub installed: bool,
}

/// A TSC reading in units of 2^SEEN_SHIFT ticks, 32 bits wide: about 0.35 ms
/// a unit and 17 days a lap at 3 GHz, so it fits the flow's cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen(u32);

const SEEN_SHIFT: u32 = 20;

/// Idle timeouts are checked on a lap of [`Seen`]: this many seconds, with
/// room to spare for a TSC of up to 5 GHz.
pub const MAX_IDLE_TIMEOUT_S: u64 = 7 * 86_400;

impl Seen {
    pub fn at(tsc: u64) -> Seen {
        Seen((tsc >> SEEN_SHIFT) as u32)
    }

    /// TSC ticks from this to `now` (to a unit; correct within a lap).
    pub fn ticks_until(self, now: u64) -> u64 {
        (Seen::at(now).0.wrapping_sub(self.0) as u64) << SEEN_SHIFT
    }
}

/// What every packet of a flow reads and writes: with the key, one cache
/// line (`FixedMap` aligns slots to lines). The counters are the low 32
/// bits; their carries go to the cold part.
#[derive(Debug, Clone, Copy)]
struct Hot {
    action: FlowAction,
    packets: u32,
    bytes: u32,
    seen: Seen,
}

/// The rest of a flow, in an array beside the slots: read by aging, dumps
/// and removal, and written on a counter's carry, not by every packet.
#[derive(Debug, Clone, Copy, Default)]
struct Cold {
    /// Multiples of 2^32 the hot counters wrapped past.
    packets_hi: u64,
    bytes_hi: u64,
    installed: bool,
}

fn entry(h: &Hot, c: &Cold) -> FlowEntry {
    FlowEntry {
        action: h.action,
        packets: c.packets_hi + h.packets as u64,
        bytes: c.bytes_hi + h.bytes as u64,
        seen: h.seen,
        installed: c.installed,
    }
}

/// Why an insertion failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowTableError {
    Full,
}

#[derive(Clone)]
pub struct FlowTable {
    map: FixedMap<FlowKey, Hot, Cold>,
    idle_timeout: u64,
    cursor: usize,
}

const _: () = assert!(std::mem::size_of::<Option<(FlowKey, Hot)>>() <= 64, "a flow's hot part fits one cache line");

impl FlowTable {
    /// `idle_timeout` is in TSC ticks; 0 disables aging of learned flows
    /// (longer than [`MAX_IDLE_TIMEOUT_S`] is for the config to refuse).
    pub fn new(capacity: usize, idle_timeout: u64) -> FlowTable {
        FlowTable { map: FixedMap::with_capacity(capacity), idle_timeout, cursor: 0 }
    }

    /// The heap a table of `capacity` flows takes (None: beyond any machine).
    pub fn bytes_for(capacity: usize) -> Option<u64> {
        FixedMap::<FlowKey, Hot, Cold>::bytes_for(capacity)
    }

    /// The same (empty) table with its keys hashed under `seed`, so that
    /// which flows share a slot cannot be known outside the process.
    pub fn with_seed(mut self, seed: u64) -> FlowTable {
        self.map = self.map.with_seed(seed);
        self
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.map.capacity()
    }

    /// Slots `age` sweeps through.
    pub fn slots(&self) -> usize {
        self.map.slots()
    }

    /// Starts loading the flow's slot (first pass over a burst).
    #[inline]
    pub fn prefetch(&self, key: &FlowKey) {
        self.map.prefetch(key);
    }

    /// Looks up a flow, accounts one packet of `bytes` to it and returns
    /// its action.
    #[inline]
    pub fn hit(&mut self, key: &FlowKey, bytes: usize, now: u64) -> Option<FlowAction> {
        let i = self.map.slot_of(key)?;
        self.account(i, bytes, now)
    }

    /// As `hit`, for a flow whose action `takes` accepts; one whose action
    /// it refuses is left as it was (`Err`, with that action). Always
    /// inlined: the quick path's `takes` and its match on the answer then
    /// fold into one branch; as a hint, the action's compare and the
    /// `Result` stayed in the code.
    #[inline(always)]
    pub fn hit_if(
        &mut self,
        key: &FlowKey,
        bytes: usize,
        now: u64,
        takes: impl FnOnce(FlowAction) -> bool,
    ) -> Result<Option<FlowAction>, FlowAction> {
        let Some(i) = self.map.slot_of(key) else {
            return Ok(None);
        };
        match self.map.at_mut(i) {
            Some(h) if !takes(h.action) => Err(h.action),
            _ => Ok(self.account(i, bytes, now)),
        }
    }

    /// One packet of `bytes` on the flow in slot `i`; its action.
    #[inline(always)]
    fn account(&mut self, i: usize, bytes: usize, now: u64) -> Option<FlowAction> {
        let h = self.map.at_mut(i)?;
        let (p, p_wrapped) = h.packets.overflowing_add(1);
        let (b, b_wrapped) = h.bytes.overflowing_add(bytes as u32);
        h.packets = p;
        h.bytes = b;
        h.seen = Seen::at(now);
        let action = h.action;
        if p_wrapped | b_wrapped {
            self.carry(i, p_wrapped, b_wrapped);
        }
        Some(action)
    }

    #[cold]
    fn carry(&mut self, i: usize, packets: bool, bytes: bool) {
        if let Some(c) = self.map.cold_mut(i) {
            c.packets_hi += (packets as u64) << 32;
            c.bytes_hi += (bytes as u64) << 32;
        }
    }

    pub fn get(&self, key: &FlowKey) -> Option<FlowEntry> {
        let (_, h, c) = self.map.at(self.map.slot_of(key)?)?;
        Some(entry(h, c))
    }

    /// Installs (or replaces the action of) a control-plane flow.
    pub fn install(&mut self, key: FlowKey, action: FlowAction, now: u64) -> Result<(), FlowTableError> {
        let i = match self.map.slot_of(&key) {
            Some(i) => {
                if let Some(h) = self.map.at_mut(i) {
                    h.action = action;
                }
                i
            }
            None => {
                let hot = Hot { action, packets: 0, bytes: 0, seen: Seen::at(now) };
                self.map.insert_slot(key, hot).map_err(|_| FlowTableError::Full)?.0
            }
        };
        if let Some(c) = self.map.cold_mut(i) {
            c.installed = true;
        }
        Ok(())
    }

    /// Learns a flow seen on a miss (action Normal, aged when idle).
    pub fn learn(&mut self, key: FlowKey, bytes: usize, now: u64) -> Result<(), FlowTableError> {
        let hot = Hot { action: FlowAction::Normal, packets: 1, bytes: bytes as u32, seen: Seen::at(now) };
        self.map.insert_slot(key, hot).map_err(|_| FlowTableError::Full)?;
        Ok(())
    }

    pub fn remove(&mut self, key: &FlowKey) -> Option<FlowEntry> {
        self.map.take(key).map(|(h, c)| entry(&h, &c))
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&FlowKey, FlowEntry)> {
        self.map.entries().map(|(k, h, c)| (k, entry(h, c)))
    }

    /// Ages out learned flows idle for longer than the timeout, visiting at
    /// most `budget` slots. Returns how many were removed.
    pub fn age(&mut self, now: u64, budget: usize) -> usize {
        if self.idle_timeout == 0 || self.map.is_empty() {
            return 0;
        }
        let t = self.idle_timeout;
        let (c, n) = self.map.sweep(self.cursor, budget, |_, h, c| c.installed || h.seen.ticks_until(now) < t);
        self.cursor = c;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FlowKey {
        FlowKey::v4([10, 0, (i >> 8) as u8, i as u8], [10, 1, 0, 1], 17, 1000, 2000)
    }

    #[test]
    fn install_hit_remove() {
        let mut t = FlowTable::new(16, 100);
        t.install(key(1), FlowAction::Forward(2), 0).unwrap();
        assert_eq!(t.hit(&key(1), 64, 5 << 20), Some(FlowAction::Forward(2)));
        let e = t.get(&key(1)).unwrap();
        assert_eq!(
            (e.action, e.packets, e.bytes, e.seen, e.installed),
            (FlowAction::Forward(2), 1, 64, Seen::at(5 << 20), true)
        );
        assert_eq!(e.seen.ticks_until(8 << 20), 3 << 20);
        assert!(t.hit(&key(2), 64, 5).is_none());
        t.install(key(1), FlowAction::Drop, 6).unwrap();
        assert_eq!(t.get(&key(1)).unwrap().action, FlowAction::Drop);
        assert_eq!(t.get(&key(1)).unwrap().packets, 1, "replacing the action keeps counters");
        assert!(t.remove(&key(1)).is_some());
        assert!(t.is_empty());
    }

    #[test]
    fn key_includes_port_and_vlan() {
        let mut t = FlowTable::new(16, 0);
        let mut a = key(1);
        t.install(a, FlowAction::Drop, 0).unwrap();
        a = a.with_scope(1, 0);
        assert!(t.get(&a).is_none());
        a = a.with_scope(0, 7);
        assert!(t.get(&a).is_none());
    }

    #[test]
    fn full_table_refuses() {
        let mut t = FlowTable::new(4, 0);
        for i in 0..4 {
            t.learn(key(i), 60, 0).unwrap();
        }
        assert_eq!(t.learn(key(9), 60, 0).err(), Some(FlowTableError::Full));
        assert_eq!(t.install(key(9), FlowAction::Drop, 0).err(), Some(FlowTableError::Full));
    }

    /// Times in units of `Seen` (2^20 TSC ticks).
    const U: u64 = 1 << 20;

    #[test]
    fn aging_spares_installed_and_recent() {
        let mut t = FlowTable::new(1000, 100 * U);
        for i in 0..500 {
            t.learn(key(i), 60, 0).unwrap();
        }
        t.install(key(900), FlowAction::Normal, 0).unwrap();
        for i in 0..100 {
            t.hit(&key(i), 60, 150 * U);
        }
        let mut removed = 0;
        for _ in 0..100 {
            removed += t.age(180 * U, 128);
        }
        assert_eq!(removed, 400);
        assert_eq!(t.len(), 101);
        assert!(t.get(&key(900)).is_some());
        assert!(t.get(&key(50)).is_some());
        assert!(t.get(&key(450)).is_none());
    }

    #[test]
    fn counters_carry_past_32_bits() {
        let mut t = FlowTable::new(16, 0);
        t.learn(key(1), 60_000, 0).unwrap();
        // 71,583 packets of 60,000 bytes wrap the hot byte counter once.
        for _ in 1..71_583 {
            t.hit(&key(1), 60_000, 0);
        }
        let e = t.get(&key(1)).unwrap();
        assert_eq!((e.packets, e.bytes), (71_583, 71_583 * 60_000));
        assert!(e.bytes > u32::MAX as u64);
        // The carry stays with the flow when it moves or is removed.
        assert_eq!(t.remove(&key(1)).map(|e| e.bytes), Some(71_583 * 60_000));
    }

    #[test]
    fn idle_time_wraps_with_its_lap() {
        let lap = 1u64 << (32 + SEEN_SHIFT);
        let s = Seen::at(lap - U);
        assert_eq!(s.ticks_until(lap + 2 * U), 3 * U, "across the wrap of the 32-bit unit count");
        // Aging with the longest timeout the config allows still works late in a lap.
        let mut t = FlowTable::new(16, MAX_IDLE_TIMEOUT_S * 5_000_000_000);
        t.learn(key(1), 60, lap - U).unwrap();
        assert_eq!(t.age(lap + 10 * U, 64), 0);
        assert_eq!(t.age(lap - U + MAX_IDLE_TIMEOUT_S * 5_000_000_000 + U, 64), 1);
    }
}
