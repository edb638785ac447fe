//! L2 learning table: (VLAN, MAC) -> port, with idle aging. Each worker
//! has its own; with several workers, what one learns from frames is
//! announced to the others (through the control core) and taken with
//! `sync_key`, so a worker that never sees a host's frames still forwards
//! to it instead of flooding.

use crate::fixed_map::{CompactMap, HalfLine};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacEntry {
    pub port: u16,
    pub last_seen: u64,
    /// When the other workers were last told about this address (or, for
    /// one learned from them, when they saw it).
    pub announced: u64,
}

/// What every frame reads and writes of an entry; `announced` is the
/// entry's cold part, read only with peers: a slot then takes half a cache
/// line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hot {
    port: u16,
    last_seen: u64,
}

const _: () = assert!(std::mem::size_of::<HalfLine<Option<(u64, Hot)>>>() == 32);

pub struct MacTable {
    map: CompactMap<u64, Hot, u64>,
    aging: u64,
    /// Other workers keep tables too: what this one learns is announced.
    peers: bool,
    /// Re-announce an address this long after the last announcement, so
    /// the other workers' copies do not age out while it is active (0:
    /// no peers, or no aging: no renewal needed).
    renew: u64,
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

/// Whether a key's MAC is a group (multicast or broadcast) address: its
/// first byte's lowest bit, the key's lowest.
#[inline(always)]
pub fn is_group(key: u64) -> bool {
    key & 1 != 0
}

/// `key(vlan, mac)` of the MAC at `at` in `frame` (0: the destination, 6:
/// the source), read as one 8-byte load from the frame and masked; None
/// when the frame ends before `at + 8` (an Ethernet header holds both).
#[inline(always)]
pub fn key_in(vlan: u16, frame: &[u8], at: usize) -> Option<u64> {
    let w = u64::from_le_bytes(*frame.get(at..)?.first_chunk::<8>()?);
    Some(w & 0xffff_ffff_ffff | (vlan as u64) << 48)
}

/// What a learn call changed.
/// An address seen on a port: what one worker's bridge tells the others
/// (through the control core), taken there with `MacTable::sync_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting {
    /// The table key (VLAN and MAC, see `key`).
    pub key: u64,
    pub port: u16,
    /// TSC of the sighting.
    pub seen: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    Refreshed,
    /// Refreshed, and a quarter of the aging time has passed since the
    /// other workers were told: time to tell them again.
    Renewed,
    New,
    Moved,
    /// Table full: the address is not learned (frames to it are flooded).
    Full,
}

impl Learned {
    /// Whether the other workers should hear of it.
    pub fn announce(self) -> bool {
        matches!(self, Learned::New | Learned::Moved | Learned::Renewed)
    }
}

impl MacTable {
    /// `aging` in TSC ticks; 0 disables aging.
    pub fn new(capacity: usize, aging: u64) -> MacTable {
        MacTable { map: CompactMap::with_capacity(capacity), aging, peers: false, renew: 0, cursor: 0 }
    }

    /// The heap a table of `capacity` entries takes (None: beyond any machine).
    pub fn bytes_for(capacity: usize) -> Option<u64> {
        CompactMap::<u64, Hot, u64>::bytes_for(capacity)
    }

    /// The same (empty) table with its keys hashed under `seed`.
    pub fn with_seed(mut self, seed: u64) -> MacTable {
        self.map = self.map.with_seed(seed);
        self
    }

    /// The table of one of several workers: learning reports what the
    /// others should hear of (`Learned::announce`), renewals included.
    pub fn with_peers(mut self) -> MacTable {
        self.peers = true;
        self.renew = self.aging / 4;
        self
    }

    pub fn has_peers(&self) -> bool {
        self.peers
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
        match self.refresh_key(k, port, now) {
            Some(l) => l,
            None => self.insert_key(k, port, now),
        }
    }

    /// `learn_key` for an address already in the table (refreshed, moved
    /// or renewed); None when it is not, and nothing changes.
    #[inline]
    pub fn refresh_key(&mut self, k: u64, port: u16, now: u64) -> Option<Learned> {
        let renew = self.renew;
        let i = self.map.slot_of(&k)?;
        let e = self.map.at_mut(i)?;
        e.last_seen = now;
        let learned = if e.port != port {
            e.port = port;
            Learned::Moved
        } else if renew != 0 {
            Learned::Renewed
        } else {
            return Some(Learned::Refreshed);
        };
        // A move or a renewal due: the cold part, with peers only.
        let announced = self.map.cold_mut(i)?;
        if learned == Learned::Renewed && now.wrapping_sub(*announced) < renew {
            return Some(Learned::Refreshed);
        }
        *announced = now;
        Some(learned)
    }

    /// `learn_key` for an address `refresh_key` did not find.
    #[inline]
    pub fn insert_key(&mut self, k: u64, port: u16, now: u64) -> Learned {
        match self.map.insert_slot(k, Hot { port, last_seen: now }) {
            Ok((i, _)) => {
                if let Some(announced) = self.map.cold_mut(i) {
                    *announced = now;
                }
                Learned::New
            }
            Err(_) => Learned::Full,
        }
    }

    /// Takes what another worker learned: `k` seen on `port` at `seen` (a
    /// TSC; the cores' TSCs agree). The later sighting wins, so two
    /// announcements that cross (a host moving between ports) settle on
    /// where it was seen last. Returns whether the table changed.
    pub fn sync_key(&mut self, k: u64, port: u16, seen: u64) -> bool {
        if let Some(i) = self.map.slot_of(&k) {
            let Some(e) = self.map.at_mut(i).filter(|e| seen > e.last_seen) else { return false };
            e.port = port;
            e.last_seen = seen;
            if let Some(announced) = self.map.cold_mut(i) {
                *announced = (*announced).max(seen);
            }
            return true;
        }
        self.insert_key(k, port, seen) == Learned::New
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
        self.map.entries().map(|(k, e, announced)| {
            let b = k.to_le_bytes();
            let entry = MacEntry { port: e.port, last_seen: e.last_seen, announced: *announced };
            (u16::from_le_bytes([b[6], b[7]]), b[..6].try_into().unwrap(), entry)
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
        assert_eq!(e, vec![(0, A, MacEntry { port: 2, last_seen: 2, announced: 2 })]);
    }

    #[test]
    fn key_layout() {
        // MAC bytes in the low 48 bits (first byte lowest), VLAN above.
        assert_eq!(key(0x0abc, &[1, 2, 3, 4, 5, 6]), 0x0abc_0605_0403_0201);
        assert_ne!(key(1, &A), key(2, &A));
    }

    #[test]
    fn key_in_a_frame_is_key() {
        let f: Vec<u8> = (1..=14).collect();
        assert_eq!(key_in(0x0abc, &f, 0), Some(key(0x0abc, &[1, 2, 3, 4, 5, 6])));
        assert_eq!(key_in(7, &f, 6), Some(key(7, &[7, 8, 9, 10, 11, 12])));
        assert_eq!(key_in(7, &f[..13], 6), None, "the load needs two bytes past the MAC");
        assert_eq!(key_in(7, &f, 7), None);
        assert!(!is_group(key(0xfff, &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff])));
        assert!(is_group(key(0, &[0x01, 0, 0x5e, 0, 0, 1])) && is_group(key(0, &[0xff; 6])));
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

    #[test]
    fn renewed_a_quarter_aging_after_the_last_announcement() {
        let mut t = MacTable::new(8, 400).with_peers();
        assert_eq!(t.learn(0, &A, 1, 1000), Learned::New);
        assert_eq!(t.learn(0, &A, 1, 1099), Learned::Refreshed);
        assert_eq!(t.learn(0, &A, 1, 1100), Learned::Renewed);
        assert_eq!(t.learn(0, &A, 1, 1150), Learned::Refreshed, "counted from the renewal");
        assert_eq!(t.learn(0, &A, 2, 1160), Learned::Moved);
        assert_eq!(t.learn(0, &A, 2, 1259), Learned::Refreshed, "counted from the move");
        assert!(Learned::Renewed.announce() && Learned::New.announce() && Learned::Moved.announce());
        assert!(!Learned::Refreshed.announce() && !Learned::Full.announce());
        // Without aging, or alone, there is nothing to renew.
        let mut alone = MacTable::new(8, 400);
        alone.learn(0, &A, 1, 1000);
        assert_eq!(alone.learn(0, &A, 1, 1100), Learned::Refreshed);
        let mut t = MacTable::new(8, 0).with_peers();
        t.learn(0, &A, 1, 0);
        assert_eq!(t.learn(0, &A, 1, u64::MAX / 2), Learned::Refreshed);
    }

    #[test]
    fn sync_takes_the_later_sighting() {
        let mut t = MacTable::new(8, 400).with_peers();
        // Unknown here: taken as announced (no echo back to the others).
        assert!(t.sync_key(key(0, &A), 3, 500));
        assert_eq!(t.lookup(0, &A), Some(3));
        assert_eq!(t.learn(0, &A, 3, 599), Learned::Refreshed);
        // An older sighting elsewhere (announcements that crossed) loses...
        assert!(!t.sync_key(key(0, &A), 1, 590));
        assert_eq!(t.lookup(0, &A), Some(3));
        // ...a later one wins.
        assert!(t.sync_key(key(0, &A), 1, 700));
        assert_eq!(t.lookup(0, &A), Some(1));
        // A synced address ages like a learned one.
        assert_eq!(t.age(700 + 399, 64), 0);
        assert_eq!(t.age(700 + 400, 64), 1);
        assert_eq!(t.lookup(0, &A), None);
        // A full table takes no more.
        let mut t = MacTable::new(1, 0);
        assert!(t.sync_key(key(0, &A), 1, 1));
        assert!(!t.sync_key(key(0, &B), 1, 1));
    }
}
