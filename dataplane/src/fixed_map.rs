//! Fixed-capacity open-addressing hash map (linear probing, backward-shift
//! deletion). Allocates once at construction; lookups and updates never
//! allocate, which is what the per-worker tables need.

/// Keys hash themselves: the data path avoids SipHash and per-call state.
pub trait MapKey: Copy + Eq {
    fn hash64(&self) -> u64;

    /// The hash under a per-table seed, mixed into the input (not the
    /// output, which would keep colliding keys colliding): a sender that
    /// crafts keys cannot predict which share a slot.
    #[inline]
    fn hash_seeded(&self, seed: u64) -> u64 {
        (self.hash64() ^ seed).hash64()
    }
}

impl MapKey for u64 {
    /// One 64 x 64 -> 128-bit multiply by an odd constant, the low half
    /// byte-swapped and XORed with the high half. Slots are picked by the
    /// low bits, and the keys here vary in their high ones (a MAC's last
    /// bytes and the VLAN sit at bits 32-63) or step by a power of two (a
    /// /16's addresses): the swapped low half brings its best-mixed top
    /// bytes down, the high half depends on every input bit. (The low
    /// half alone, or XORed unswapped, left such keys in few slots.)
    #[inline]
    fn hash64(&self) -> u64 {
        let p = *self as u128 * 0x9e37_79b9_7f4a_7c15_u128;
        (p as u64).swap_bytes() ^ (p >> 64) as u64
    }

    #[inline]
    fn hash_seeded(&self, seed: u64) -> u64 {
        (self ^ seed).hash64()
    }
}

impl MapKey for u128 {
    #[inline]
    fn hash64(&self) -> u64 {
        self.hash_seeded(0)
    }

    #[inline]
    fn hash_seeded(&self, seed: u64) -> u64 {
        let (lo, hi) = (*self as u64, (*self >> 64) as u64);
        lo.hash_seeded(seed) ^ hi.hash_seeded(seed.rotate_left(29)).rotate_left(17)
    }
}

/// How a slot lies in memory: aligned to its own size, so that a probe
/// reads one cache line, never two (slots packed at 16-byte alignment
/// straddle lines).
pub trait Packing<T> {
    fn new(t: T) -> Self;
    fn get(&self) -> &T;
    fn get_mut(&mut self) -> &mut T;
}

/// A slot on a cache line of its own (slots of up to 64 bytes).
#[derive(Clone)]
#[repr(align(64))]
pub struct Line<T>(T);

/// A slot on half a cache line, for slots of up to 32 bytes: a table of
/// them takes half the cache of `Line`'s (a bridge's MAC tables, looked up
/// for every frame).
#[derive(Clone)]
#[repr(align(32))]
pub struct HalfLine<T>(T);

macro_rules! packing {
    ($line:ident) => {
        impl<T> Packing<T> for $line<T> {
            #[inline(always)]
            fn new(t: T) -> Self {
                $line(t)
            }
            #[inline(always)]
            fn get(&self) -> &T {
                &self.0
            }
            #[inline(always)]
            fn get_mut(&mut self) -> &mut T {
                &mut self.0
            }
        }
    };
}
packing!(Line);
packing!(HalfLine);

/// A map whose slots lie on half cache lines (`HalfLine`).
pub type CompactMap<K, V, C = ()> = FixedMap<K, V, C, HalfLine<Option<(K, V)>>>;

/// `C` is per-entry data kept off the lookup path in a parallel array (read
/// and written by slot, moved with its entry): a slot then holds only what
/// every lookup needs. `L` lays each slot (empty, or a key and its value)
/// out in memory.
#[derive(Clone)]
pub struct FixedMap<K, V, C = (), L = Line<Option<(K, V)>>> {
    slots: Box<[L]>,
    cold: Box<[C]>,
    mask: usize,
    len: usize,
    max_len: usize,
    /// Mixed into every key's hash (`MapKey::hash_seeded`).
    seed: u64,
    entries: std::marker::PhantomData<(K, V)>,
}

impl<K: MapKey, V, C: Default, L: Packing<Option<(K, V)>>> FixedMap<K, V, C, L> {
    /// A map holding up to `capacity` entries (the slot array is at least
    /// twice that, so probes stay short).
    pub fn with_capacity(capacity: usize) -> Self {
        // A slot over a line takes two lines whatever its alignment; under
        // one, its size must be its alignment.
        debug_assert!(
            std::mem::align_of::<L>() == 64 || std::mem::size_of::<L>() == std::mem::align_of::<L>(),
            "a slot of {} bytes straddles lines of {}",
            std::mem::size_of::<L>(),
            std::mem::align_of::<L>()
        );
        let slots = (capacity.max(1) * 2).next_power_of_two();
        let mut v: Vec<L> = Vec::with_capacity(slots);
        crate::dpdk::advise_hugepages(v.spare_capacity_mut());
        v.resize_with(slots, || L::new(None));
        let mut cold: Vec<C> = Vec::with_capacity(slots);
        crate::dpdk::advise_hugepages(cold.spare_capacity_mut());
        cold.resize_with(slots, C::default);
        FixedMap {
            slots: v.into_boxed_slice(),
            cold: cold.into_boxed_slice(),
            mask: slots - 1,
            len: 0,
            max_len: capacity.max(1),
            seed: 0,
            entries: std::marker::PhantomData,
        }
    }

    /// What [`FixedMap::with_capacity`] allocates for `capacity` entries
    /// (None: more than the address space holds).
    pub fn bytes_for(capacity: usize) -> Option<u64> {
        let slots = capacity.max(1).checked_mul(2)?.checked_next_power_of_two()?;
        let each = std::mem::size_of::<L>() + std::mem::size_of::<C>();
        (slots as u64).checked_mul(each as u64)
    }

    /// The same map, its keys hashed under `seed` (empty: nothing moves).
    pub fn with_seed(mut self, seed: u64) -> Self {
        debug_assert!(self.len == 0, "seeded after entries went in");
        self.seed = seed;
        self
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
        let mut i = k.hash_seeded(self.seed) as usize & self.mask;
        loop {
            match self.slots[i].get() {
                Some((kk, _)) if kk == k => return Ok(i),
                Some(_) => i = (i + 1) & self.mask,
                None => return Err(i),
            }
        }
    }

    /// Starts loading the home slot of `k` and the one after it into the
    /// cache: with linear probing at up to half load, a good part of the
    /// lookups go on to the next slot (a 100k-flow table: +8-10 % for L3).
    #[inline]
    pub fn prefetch(&self, k: &K) {
        let i = k.hash_seeded(self.seed) as usize & self.mask;
        crate::dpdk::prefetch_all(&self.slots[i]);
        crate::dpdk::prefetch_all(&self.slots[(i + 1) & self.mask]);
    }

    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        self.find(k).ok().and_then(|i| self.slots[i].get().as_ref().map(|(_, v)| v))
    }

    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match self.find(k) {
            Ok(i) => self.slots[i].get_mut().as_mut().map(|(_, v)| v),
            Err(_) => None,
        }
    }

    /// The slot holding `k`, if any.
    #[inline]
    pub fn slot_of(&self, k: &K) -> Option<usize> {
        self.find(k).ok()
    }

    /// The value in slot `i` (one [`FixedMap::slot_of`] returned).
    #[inline]
    pub fn at_mut(&mut self, i: usize) -> Option<&mut V> {
        self.slots.get_mut(i)?.get_mut().as_mut().map(|(_, v)| v)
    }

    /// The entry in slot `i` with its cold part.
    pub fn at(&self, i: usize) -> Option<(&K, &V, &C)> {
        let (k, v) = self.slots.get(i)?.get().as_ref()?;
        Some((k, v, &self.cold[i]))
    }

    /// The cold part of the entry in slot `i` (None for an empty slot).
    #[inline]
    pub fn cold_mut(&mut self, i: usize) -> Option<&mut C> {
        self.slots.get(i)?.get().as_ref()?;
        Some(&mut self.cold[i])
    }

    /// Inserts or replaces (a replaced entry's cold part starts over). A
    /// full map hands the entry back.
    pub fn insert(&mut self, k: K, v: V) -> Result<Option<V>, (K, V)> {
        self.insert_slot(k, v).map(|(_, old)| old)
    }

    /// As [`FixedMap::insert`], also naming the slot the entry went to (no
    /// second probe for a caller that goes on with it).
    pub fn insert_slot(&mut self, k: K, v: V) -> Result<(usize, Option<V>), (K, V)> {
        let i = match self.find(&k) {
            Ok(i) => i,
            Err(_) if self.len >= self.max_len => return Err((k, v)),
            Err(i) => {
                self.len += 1;
                i
            }
        };
        self.cold[i] = C::default();
        Ok((i, self.slots[i].get_mut().replace((k, v)).map(|(_, old)| old)))
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.take(k).map(|(v, _)| v)
    }

    /// Removes `k`, handing back its value and cold part.
    pub fn take(&mut self, k: &K) -> Option<(V, C)> {
        let i = self.find(k).ok()?;
        let (_, v, c) = self.remove_at(i);
        Some((v, c))
    }

    /// Empties slot `i` and shifts later members of the probe run back so no
    /// lookup stops early.
    fn remove_at(&mut self, mut i: usize) -> (K, V, C) {
        let (k, v) = self.slots[i].get_mut().take().expect("occupied slot");
        let c = std::mem::take(&mut self.cold[i]);
        self.len -= 1;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let home = match self.slots[j].get() {
                None => break,
                Some((k, _)) => k.hash_seeded(self.seed) as usize & self.mask,
            };
            // Move j into the hole at i unless its home lies cyclically in (i, j].
            let in_range = if i <= j { i < home && home <= j } else { i < home || home <= j };
            if !in_range {
                *self.slots[i].get_mut() = self.slots[j].get_mut().take();
                self.cold.swap(i, j);
                i = j;
            }
        }
        (k, v, c)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().filter_map(|s| s.get().as_ref().map(|(k, v)| (k, v)))
    }

    /// Every entry with its cold part.
    pub fn entries(&self) -> impl Iterator<Item = (&K, &V, &C)> {
        self.slots.iter().zip(self.cold.iter()).filter_map(|(s, c)| s.get().as_ref().map(|(k, v)| (k, v, c)))
    }

    pub fn clear(&mut self) {
        for s in self.slots.iter_mut() {
            *s.get_mut() = None;
        }
        self.len = 0;
    }

    /// Visits up to `budget` slots from `cursor`, removing entries for which
    /// `keep` says false. Returns the next cursor and the number removed.
    /// Incremental, so a worker can age a large table a little per poll.
    /// Never inlined: a profile then shows the aging apart from the packets'
    /// work (it runs by the clock, so under valgrind's slowdown it takes a
    /// far larger share a packet than at speed).
    #[inline(never)]
    pub fn sweep(
        &mut self,
        cursor: usize,
        budget: usize,
        mut keep: impl FnMut(&K, &mut V, &mut C) -> bool,
    ) -> (usize, usize) {
        let mut i = cursor & self.mask;
        let mut removed = 0;
        for _ in 0..budget.min(self.slots.len()) {
            let drop_it = match self.slots[i].get_mut() {
                Some((k, v)) => !keep(k, v, &mut self.cold[i]),
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

    /// Mean slots a hit probes, over every key of a full table.
    fn mean_probes(keys: &[u64], capacity: usize) -> f64 {
        let mut m: FixedMap<u64, u16> = FixedMap::with_capacity(capacity);
        for &k in keys {
            m.insert(k, 0).unwrap();
        }
        let mask = m.slots() - 1;
        let probes: usize =
            keys.iter().map(|k| (m.slot_of(k).unwrap().wrapping_sub(k.hash64() as usize) & mask) + 1).sum();
        probes as f64 / keys.len() as f64
    }

    #[test]
    fn keys_that_differ_only_in_high_bits_spread() {
        // MACs and VLANs as mac_table::key packs them: low bytes constant.
        let macs: Vec<u64> = (0..4096u64)
            .flat_map(|i| [100u64, 101].map(|v| 0x0002_0002 | (i >> 8 & 0xff) << 32 | (i & 0xff) << 40 | v << 48))
            .collect();
        assert!(mean_probes(&macs, macs.len()) < 2.0, "{}", mean_probes(&macs, macs.len()));
        // IPv4 addresses in one /16 (neighbour and local tables).
        let ips: Vec<u64> = (0..8192u64).map(|i| 0x0a00_0000 | i << 3).collect();
        assert!(mean_probes(&ips, ips.len()) < 2.0, "{}", mean_probes(&ips, ips.len()));
        // And consecutive ones.
        let ips: Vec<u64> = (0..8192u64).map(|i| 0x0a00_0000 | i).collect();
        assert!(mean_probes(&ips, ips.len()) < 2.0, "{}", mean_probes(&ips, ips.len()));
    }

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
    fn sweep_removes_exactly_the_expired() {
        let mut m: FixedMap<u64, u64> = FixedMap::with_capacity(1000);
        for k in 0..1000 {
            m.insert(k, k).unwrap();
        }
        let mut cursor = 0;
        let mut removed = 0;
        // Several full passes: shifted entries may be seen on a later pass.
        for _ in 0..200 {
            let (c, r) = m.sweep(cursor, 64, |_, v, _| *v % 2 == 0);
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
        fn run<L: Packing<Option<(u64, u64)>>>(mut m: FixedMap<u64, u64, (), L>) {
            let mut r = std::collections::HashMap::new();
            let mut rng = crate::rand::XorShift::new(12345);
            for _ in 0..20_000 {
                let x = rng.next_u64();
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
        run(FixedMap::<u64, u64>::with_capacity(300));
        run(CompactMap::<u64, u64>::with_capacity(300));
    }

    #[test]
    fn compact_slots_take_half_a_line_and_never_straddle_two() {
        let m: CompactMap<u64, u16> = CompactMap::with_capacity(100);
        assert_eq!(std::mem::size_of_val(&m.slots[0]), 32);
        assert_eq!(m.slots.as_ptr() as usize % 32, 0);
        assert_eq!(CompactMap::<u64, u16>::bytes_for(100), Some(256 * 32));
        assert_eq!(FixedMap::<u64, u16>::bytes_for(100), Some(256 * 64));
    }

    #[test]
    fn cold_data_moves_with_its_entry() {
        let mut m: FixedMap<K, u32, u64> = FixedMap::with_capacity(8); // 16 slots
        for (i, k) in [K(1, 3), K(2, 3), K(3, 3)].iter().enumerate() {
            m.insert(*k, i as u32).unwrap();
            let s = m.slot_of(k).unwrap();
            *m.cold_mut(s).unwrap() = 100 + i as u64;
        }
        // The three share a home slot and lie in a row after it.
        let empty = (m.slot_of(&K(1, 3)).unwrap() + 3) & 15;
        assert_eq!(m.cold_mut(empty), None, "an empty slot has no cold part");
        // Removing K(1) shifts K(2) and K(3) back a slot each.
        assert_eq!(m.take(&K(1, 3)), Some((0, 100)));
        for (k, c) in [(K(2, 3), 101), (K(3, 3), 102)] {
            let s = m.slot_of(&k).unwrap();
            assert_eq!(m.at(s).map(|(_, _, c)| *c), Some(c), "{k:?}");
        }
        let (_, r) = m.sweep(0, 16, |k, _, c| {
            assert_eq!(*c, 100 + k.0 - 1);
            k.0 != 2
        });
        assert_eq!(r, 1);
        assert_eq!(m.at(m.slot_of(&K(3, 3)).unwrap()).map(|(_, _, c)| *c), Some(102));
        // A new entry in a reused slot starts from the default.
        m.insert(K(4, 3), 4).unwrap();
        assert_eq!(m.at(m.slot_of(&K(4, 3)).unwrap()).map(|(_, v, c)| (*v, *c)), Some((4, 0)));
        assert_eq!(m.entries().count(), 2);
    }
}
