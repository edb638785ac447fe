//! L2 learning table: (VLAN, MAC) -> port, with idle aging.

use crate::fixed_map::FixedMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacEntry {
    pub port: u16,
    pub last_seen: u64,
}

pub struct MacTable {
    map: FixedMap<u64, MacEntry>,
    aging: u64,
    cursor: usize,
}

/// The table key of (VLAN, MAC); static entries in `Tables` use it too.
#[inline]
pub fn key(vlan: u16, mac: &[u8; 6]) -> u64 {
    // Two loads and shifts, not an 8-byte array assembled from pieces: a
    // wide load of narrower stores stalls store forwarding (~40 % of the
    // L2 path's time when the key went through the stack).
    let lo = u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]) as u64;
    let hi = u16::from_le_bytes([mac[4], mac[5]]) as u64;
    lo | hi << 32 | (vlan as u64) << 48
}

/// What a learn call changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    Refreshed,
    New,
    Moved,
    /// Table full: the address is not learned (frames to it are flooded).
    Full,
}

impl MacTable {
    /// `aging` in TSC ticks; 0 disables aging.
    pub fn new(capacity: usize, aging: u64) -> MacTable {
        MacTable { map: FixedMap::with_capacity(capacity), aging, cursor: 0 }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Slots `age` sweeps through.
    pub fn slots(&self) -> usize {
        self.map.slots()
    }

    #[inline]
    pub fn learn(&mut self, vlan: u16, mac: &[u8; 6], port: u16, now: u64) -> Learned {
        self.learn_key(key(vlan, mac), port, now)
    }

    /// `learn` by a `key` already computed.
    #[inline]
    pub fn learn_key(&mut self, k: u64, port: u16, now: u64) -> Learned {
        if let Some(e) = self.map.get_mut(&k) {
            e.last_seen = now;
            if e.port != port {
                e.port = port;
                return Learned::Moved;
            }
            return Learned::Refreshed;
        }
        match self.map.insert(k, MacEntry { port, last_seen: now }) {
            Ok(_) => Learned::New,
            Err(_) => Learned::Full,
        }
    }

    #[inline]
    pub fn lookup(&self, vlan: u16, mac: &[u8; 6]) -> Option<u16> {
        self.lookup_key(key(vlan, mac))
    }

    #[inline]
    pub fn lookup_key(&self, k: u64) -> Option<u16> {
        self.map.get(&k).map(|e| e.port)
    }

    /// Forgets every address learned on `port` (link went down).
    pub fn flush_port(&mut self, port: u16) {
        let cap = usize::MAX;
        self.map.sweep(0, cap, |_, e, _| e.port != port);
    }

    pub fn entries(&self) -> impl Iterator<Item = (u16, [u8; 6], MacEntry)> + '_ {
        self.map.iter().map(|(k, e)| {
            let b = k.to_le_bytes();
            (u16::from_le_bytes([b[6], b[7]]), b[..6].try_into().unwrap(), *e)
        })
    }

    pub fn age(&mut self, now: u64, budget: usize) -> usize {
        if self.aging == 0 || self.map.is_empty() {
            return 0;
        }
        let a = self.aging;
        let (c, n) = self.map.sweep(self.cursor, budget, |_, e, _| now.saturating_sub(e.last_seen) < a);
        self.cursor = c;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    #[test]
    fn learn_move_lookup() {
        let mut t = MacTable::new(8, 0);
        assert_eq!(t.learn(0, &A, 1, 0), Learned::New);
        assert_eq!(t.learn(0, &A, 1, 1), Learned::Refreshed);
        assert_eq!(t.lookup(0, &A), Some(1));
        assert_eq!(t.lookup(5, &A), None, "VLANs are separate");
        assert_eq!(t.learn(0, &A, 2, 2), Learned::Moved);
        assert_eq!(t.lookup(0, &A), Some(2));
        let e: Vec<_> = t.entries().collect();
        assert_eq!(e, vec![(0, A, MacEntry { port: 2, last_seen: 2 })]);
    }

    #[test]
    fn key_layout() {
        // MAC bytes in the low 48 bits (first byte lowest), VLAN above.
        assert_eq!(key(0x0abc, &[1, 2, 3, 4, 5, 6]), 0x0abc_0605_0403_0201);
        assert_ne!(key(1, &A), key(2, &A));
    }

    #[test]
    fn aging_and_flush() {
        let mut t = MacTable::new(8, 10);
        t.learn(0, &A, 1, 0);
        t.learn(0, &B, 2, 8);
        t.age(12, 100);
        assert_eq!(t.lookup(0, &A), None);
        assert_eq!(t.lookup(0, &B), Some(2));
        t.flush_port(2);
        assert!(t.is_empty());
    }

    #[test]
    fn full_table() {
        let mut t = MacTable::new(1, 0);
        t.learn(0, &A, 1, 0);
        assert_eq!(t.learn(0, &B, 1, 0), Learned::Full);
    }
}
