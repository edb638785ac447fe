//! Fixed-capacity open-addressing hash map (linear probing, backward-shift
//! deletion). Allocates once at construction; lookups and updates never
//! allocate, which is what the per-worker tables need.

/// Keys hash themselves: the data path avoids SipHash and per-call state.
pub trait MapKey: Copy + Eq {
    fn hash64(&self) -> u64;
}

impl MapKey for u64 {
    #[inline]
    fn hash64(&self) -> u64 {
        let mut h = self.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
        h.wrapping_mul(0xbf58_476d_1ce4_e5b9)
    }
}

impl MapKey for u128 {
    #[inline]
    fn hash64(&self) -> u64 {
        ((*self as u64).hash64()) ^ (((*self >> 64) as u64).hash64().rotate_left(17))
    }
}

pub struct FixedMap<K, V> {
    slots: Box<[Option<(K, V)>]>,
    mask: usize,
    len: usize,
    max_len: usize,
}

impl<K: MapKey, V> FixedMap<K, V> {
    /// A map holding up to `capacity` entries (the slot array is at least
    /// twice that, so probes stay short).
    pub fn with_capacity(capacity: usize) -> Self {
        let slots = (capacity.max(1) * 2).next_power_of_two();
        let mut v: Vec<Option<(K, V)>> = Vec::with_capacity(slots);
        crate::dpdk::advise_hugepages(v.spare_capacity_mut());
        v.resize_with(slots, || None);
        FixedMap { slots: v.into_boxed_slice(), mask: slots - 1, len: 0, max_len: capacity.max(1) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.max_len
    }

    /// Slots a full sweep visits (a power of two, about twice the capacity).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn find(&self, k: &K) -> Result<usize, usize> {
        let mut i = k.hash64() as usize & self.mask;
        loop {
            match &self.slots[i] {
                Some((kk, _)) if kk == k => return Ok(i),
                Some(_) => i = (i + 1) & self.mask,
                None => return Err(i),
            }
        }
    }

    /// Starts loading the home slot of `k` into the cache.
    #[inline]
    pub fn prefetch(&self, k: &K) {
        crate::dpdk::prefetch_all(&self.slots[k.hash64() as usize & self.mask]);
    }

    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        self.find(k).ok().and_then(|i| self.slots[i].as_ref().map(|(_, v)| v))
    }

    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match self.find(k) {
            Ok(i) => self.slots[i].as_mut().map(|(_, v)| v),
            Err(_) => None,
        }
    }

    /// The slot holding `k`, if any (a hint for [`FixedMap::get_mut_hinted`]).
    #[inline]
    pub fn slot_of(&self, k: &K) -> Option<usize> {
        self.find(k).ok()
    }

    /// The value in slot `i` (one [`FixedMap::slot_of`] returned).
    #[inline]
    pub fn at_mut(&mut self, i: usize) -> Option<&mut V> {
        self.slots.get_mut(i)?.as_mut().map(|(_, v)| v)
    }

    /// `k`'s value, looked for first in slot `hint` (no hash, no probe when
    /// the hint is right); a stale hint (the entry moved, went, or the slot
    /// holds another key) falls back to a lookup.
    #[inline]
    pub fn get_mut_hinted(&mut self, hint: usize, k: &K) -> Option<&mut V> {
        let i = match self.slots.get(hint) {
            Some(Some((kk, _))) if kk == k => hint,
            _ => self.find(k).ok()?,
        };
        self.slots[i].as_mut().map(|(_, v)| v)
    }

    /// Inserts or replaces. A full map hands the entry back.
    pub fn insert(&mut self, k: K, v: V) -> Result<Option<V>, (K, V)> {
        match self.find(&k) {
            Ok(i) => Ok(self.slots[i].replace((k, v)).map(|(_, old)| old)),
            Err(i) => {
                if self.len >= self.max_len {
                    return Err((k, v));
                }
                self.slots[i] = Some((k, v));
                self.len += 1;
                Ok(None)
            }
        }
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        let i = self.find(k).ok()?;
        Some(self.remove_at(i).1)
    }

    /// Empties slot `i` and shifts later members of the probe run back so no
    /// lookup stops early.
    fn remove_at(&mut self, mut i: usize) -> (K, V) {
        let out = self.slots[i].take().expect("occupied slot");
        self.len -= 1;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let home = match &self.slots[j] {
                None => break,
                Some((k, _)) => k.hash64() as usize & self.mask,
            };
            // Move j into the hole at i unless its home lies cyclically in (i, j].
            let in_range = if i <= j { i < home && home <= j } else { i < home || home <= j };
            if !in_range {
                self.slots[i] = self.slots[j].take();
                i = j;
            }
        }
        out
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(k, v)| (k, v)))
    }

    pub fn clear(&mut self) {
        for s in self.slots.iter_mut() {
            *s = None;
        }
        self.len = 0;
    }

    /// Visits up to `budget` slots from `cursor`, removing entries for which
    /// `keep` says false. Returns the next cursor and the number removed.
    /// Incremental, so a worker can age a large table a little per poll.
    pub fn sweep(&mut self, cursor: usize, budget: usize, mut keep: impl FnMut(&K, &mut V) -> bool) -> (usize, usize) {
        let mut i = cursor & self.mask;
        let mut removed = 0;
        for _ in 0..budget.min(self.slots.len()) {
            let drop_it = match &mut self.slots[i] {
                Some((k, v)) => !keep(k, v),
                None => false,
            };
            if drop_it {
                self.remove_at(i);
                removed += 1;
                // A later entry may have shifted into i: look at it again next time.
            } else {
                i = (i + 1) & self.mask;
            }
        }
        (i, removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key whose hash is chosen by the test, to force collisions.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    struct K(u64, u64);
    impl MapKey for K {
        fn hash64(&self) -> u64 {
            self.1
        }
    }

    #[test]
    fn insert_get_remove() {
        let mut m: FixedMap<u64, u32> = FixedMap::with_capacity(4);
        assert_eq!(m.insert(1, 10), Ok(None));
        assert_eq!(m.insert(1, 11), Ok(Some(10)));
        assert_eq!(m.get(&1), Some(&11));
        for k in 2..=4 {
            m.insert(k, k as u32).unwrap();
        }
        assert_eq!(m.insert(5, 5), Err((5, 5)), "full map hands the entry back");
        assert_eq!(m.remove(&2), Some(2));
        assert_eq!(m.get(&2), None);
        assert_eq!(m.len(), 3);
        m.insert(5, 5).unwrap();
        assert_eq!(m.get(&5), Some(&5));
    }

    #[test]
    fn backward_shift_keeps_probe_runs_intact() {
        let mut m: FixedMap<K, u32> = FixedMap::with_capacity(8); // 16 slots
                                                                  // Three keys with the same home, one with the next home, one wrapping.
        for (i, k) in [K(1, 3), K(2, 3), K(3, 4), K(4, 3), K(5, 15), K(6, 15)].iter().enumerate() {
            m.insert(*k, i as u32).unwrap();
        }
        assert_eq!(m.remove(&K(1, 3)), Some(0));
        for (k, v) in [(K(2, 3), 1), (K(3, 4), 2), (K(4, 3), 3), (K(5, 15), 4), (K(6, 15), 5)] {
            assert_eq!(m.get(&k), Some(&v), "{k:?}");
        }
        assert_eq!(m.remove(&K(5, 15)), Some(4));
        assert_eq!(m.get(&K(6, 15)), Some(&5));
    }

    #[test]
    fn hinted_lookup_survives_a_stale_hint() {
        let mut m: FixedMap<K, u32> = FixedMap::with_capacity(8); // 16 slots
        m.insert(K(1, 3), 1).unwrap();
        m.insert(K(2, 3), 2).unwrap();
        let hint = m.slot_of(&K(2, 3)).unwrap();
        assert_eq!(hint, 4);
        assert_eq!(m.get_mut_hinted(hint, &K(2, 3)), Some(&mut 2));
        // Removing K(1) shifts K(2) back to slot 3: the hint now names an
        // empty slot, then a slot of another key, then lies past the end.
        m.remove(&K(1, 3));
        assert_eq!(m.slot_of(&K(2, 3)), Some(3));
        assert_eq!(m.get_mut_hinted(hint, &K(2, 3)), Some(&mut 2));
        m.insert(K(3, 4), 3).unwrap();
        assert_eq!(m.slot_of(&K(3, 4)), Some(4));
        assert_eq!(m.get_mut_hinted(4, &K(2, 3)), Some(&mut 2));
        assert_eq!(m.get_mut_hinted(99, &K(2, 3)), Some(&mut 2));
        assert_eq!(m.get_mut_hinted(3, &K(9, 3)), None);
    }

    #[test]
    fn sweep_removes_exactly_the_expired() {
        let mut m: FixedMap<u64, u64> = FixedMap::with_capacity(1000);
        for k in 0..1000 {
            m.insert(k, k).unwrap();
        }
        let mut cursor = 0;
        let mut removed = 0;
        // Several full passes: shifted entries may be seen on a later pass.
        for _ in 0..200 {
            let (c, r) = m.sweep(cursor, 64, |_, v| *v % 2 == 0);
            cursor = c;
            removed += r;
        }
        assert_eq!(removed, 500);
        assert_eq!(m.len(), 500);
        assert!(m.iter().all(|(_, v)| v % 2 == 0));
        for k in (0..1000).step_by(2) {
            assert_eq!(m.get(&k), Some(&k));
        }
    }

    #[test]
    fn randomized_against_std_hashmap() {
        let mut m: FixedMap<u64, u64> = FixedMap::with_capacity(300);
        let mut r = std::collections::HashMap::new();
        let mut x: u64 = 12345;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = x % 500;
            if x % 3 == 0 {
                assert_eq!(m.remove(&k), r.remove(&k));
            } else if r.len() < 300 || r.contains_key(&k) {
                assert_eq!(m.insert(k, x).unwrap(), r.insert(k, x));
            }
            assert_eq!(m.len(), r.len());
        }
        for (k, v) in &r {
            assert_eq!(m.get(k), Some(v));
        }
    }
}
