//! Per-worker exact-match flow table: 5-tuple (+ in-port, VLAN) -> action,
//! counters and state slots for the telemetry stages. Fixed capacity, no
//! allocation per packet, incremental idle aging.

use crate::fixed_map::{FixedMap, MapKey};
use crate::parse::FlowKey;

impl MapKey for FlowKey {
    #[inline]
    fn hash64(&self) -> u64 {
        FlowKey::hash64(self)
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

/// Per-flow state slots reserved for telemetry stages (INT, AM-PM, ...).
pub const STATE_SLOTS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowEntry {
    pub action: FlowAction,
    pub packets: u64,
    pub bytes: u64,
    /// TSC of the last packet (or of installation).
    pub last_seen: u64,
    /// Installed by the control core (never aged) rather than learned.
    pub installed: bool,
    pub state: [u64; STATE_SLOTS],
}

impl FlowEntry {
    pub fn new(action: FlowAction, now: u64, installed: bool) -> FlowEntry {
        FlowEntry { action, packets: 0, bytes: 0, last_seen: now, installed, state: [0; STATE_SLOTS] }
    }
}

/// Why an insertion failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowTableError {
    Full,
}

pub struct FlowTable {
    map: FixedMap<FlowKey, FlowEntry>,
    idle_timeout: u64,
    cursor: usize,
    /// Slot of the last flow `hit` or `learn` found: the stages that read
    /// state slots after forwarding ask for the same flow right away.
    last: usize,
}

impl FlowTable {
    /// `idle_timeout` is in TSC ticks; 0 disables aging of learned flows.
    pub fn new(capacity: usize, idle_timeout: u64) -> FlowTable {
        FlowTable { map: FixedMap::with_capacity(capacity), idle_timeout, cursor: 0, last: 0 }
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

    /// Looks up a flow and accounts one packet of `bytes` to it.
    #[inline]
    pub fn hit(&mut self, key: &FlowKey, bytes: usize, now: u64) -> Option<&mut FlowEntry> {
        self.last = self.map.slot_of(key)?;
        let e = self.map.at_mut(self.last)?;
        e.packets += 1;
        e.bytes += bytes as u64;
        e.last_seen = now;
        Some(e)
    }

    /// The telemetry state slots of a flow (no packet accounted).
    #[inline]
    pub fn state_mut(&mut self, key: &FlowKey) -> Option<&mut [u64; STATE_SLOTS]> {
        self.map.get_mut_hinted(self.last, key).map(|e| &mut e.state)
    }

    pub fn get(&self, key: &FlowKey) -> Option<&FlowEntry> {
        self.map.get(key)
    }

    /// Installs (or replaces the action of) a control-plane flow.
    pub fn install(&mut self, key: FlowKey, action: FlowAction, now: u64) -> Result<(), FlowTableError> {
        if let Some(e) = self.map.get_mut(&key) {
            e.action = action;
            e.installed = true;
            return Ok(());
        }
        self.map.insert(key, FlowEntry::new(action, now, true)).map(|_| ()).map_err(|_| FlowTableError::Full)
    }

    /// Learns a flow seen on a miss (action Normal, aged when idle).
    pub fn learn(&mut self, key: FlowKey, bytes: usize, now: u64) -> Result<&mut FlowEntry, FlowTableError> {
        let mut e = FlowEntry::new(FlowAction::Normal, now, false);
        e.packets = 1;
        e.bytes = bytes as u64;
        self.map.insert(key, e).map_err(|_| FlowTableError::Full)?;
        self.last = self.map.slot_of(&key).expect("just inserted");
        Ok(self.map.at_mut(self.last).expect("just inserted"))
    }

    pub fn remove(&mut self, key: &FlowKey) -> Option<FlowEntry> {
        self.map.remove(key)
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&FlowKey, &FlowEntry)> {
        self.map.iter()
    }

    /// Ages out learned flows idle for longer than the timeout, visiting at
    /// most `budget` slots. Returns how many were removed.
    pub fn age(&mut self, now: u64, budget: usize) -> usize {
        if self.idle_timeout == 0 || self.map.is_empty() {
            return 0;
        }
        let t = self.idle_timeout;
        let (c, n) = self.map.sweep(self.cursor, budget, |_, e| e.installed || now.saturating_sub(e.last_seen) < t);
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
        let e = t.hit(&key(1), 64, 5).unwrap();
        assert_eq!((e.action, e.packets, e.bytes, e.last_seen), (FlowAction::Forward(2), 1, 64, 5));
        assert!(t.hit(&key(2), 64, 5).is_none());
        t.install(key(1), FlowAction::Drop, 6).unwrap();
        assert_eq!(t.get(&key(1)).unwrap().action, FlowAction::Drop);
        assert_eq!(t.get(&key(1)).unwrap().packets, 1, "replacing the action keeps counters");
        assert!(t.remove(&key(1)).is_some());
        assert!(t.is_empty());
    }

    #[test]
    fn state_follows_the_flow_not_the_last_hit() {
        let mut t = FlowTable::new(16, 0);
        t.learn(key(1), 60, 0).unwrap();
        t.learn(key(2), 60, 0).unwrap();
        t.state_mut(&key(1)).unwrap()[0] = 11;
        t.hit(&key(2), 60, 1).unwrap();
        t.state_mut(&key(2)).unwrap()[0] = 22;
        assert_eq!(t.state_mut(&key(1)).unwrap()[0], 11, "not the last hit's slot");
        t.remove(&key(2));
        assert!(t.state_mut(&key(2)).is_none(), "a removed flow has no state");
        assert_eq!(t.get(&key(1)).unwrap().state[0], 11);
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

    #[test]
    fn aging_spares_installed_and_recent() {
        let mut t = FlowTable::new(1000, 100);
        for i in 0..500 {
            t.learn(key(i), 60, 0).unwrap();
        }
        t.install(key(900), FlowAction::Normal, 0).unwrap();
        for i in 0..100 {
            t.hit(&key(i), 60, 150);
        }
        let mut removed = 0;
        for _ in 0..100 {
            removed += t.age(180, 128);
        }
        assert_eq!(removed, 400);
        assert_eq!(t.len(), 101);
        assert!(t.get(&key(900)).is_some());
        assert!(t.get(&key(50)).is_some());
        assert!(t.get(&key(450)).is_none());
    }
}
