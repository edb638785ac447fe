//! Longest-prefix match over N-byte addresses: a multibit trie with 8-bit
//! strides and prefix expansion. Built once from a route list and then
//! read-only, so workers share it through a table generation. IPv4 lookups
//! touch at most 4 nodes, IPv6 at most 16.

/// A slot is one u32: with `CHILD` set, the index of the next level's
/// node; else the value of the longest prefix covering it, or `NONE`. A
/// lookup reads values only where it stops, so a slot with a child needs no
/// value: 4 bytes a slot, a node a kilobyte (a full IPv6 table's 190k nodes
/// take 190 MB, as rte_lpm6's tbl8 groups do).
type Slot = u32;
const CHILD: u32 = 1 << 31;
const NONE: u32 = CHILD - 1;

/// Nodes of the levels a lookup walks first, up to this many bytes in all,
/// are taken to stay cached: `prefetch` reads them and prefetches the slot
/// of the first level beyond (half the L2 cache of the machines here).
const HOT_BYTES: usize = 1 << 20;

/// A prefix and the value (e.g. next-hop index) it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix<const N: usize> {
    pub addr: [u8; N],
    pub len: u8,
    pub value: u32,
}

/// Why a build failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LpmError {
    BadLength { len: u8, max: usize },
    ValueReserved,
    TooManyNodes,
}

impl std::fmt::Display for LpmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LpmError::BadLength { len, max } => write!(f, "prefix length {len} exceeds {max}"),
            LpmError::ValueReserved => write!(f, "values from {NONE} on are reserved"),
            LpmError::TooManyNodes => write!(f, "more than {NONE} trie nodes"),
        }
    }
}

pub struct Lpm<const N: usize> {
    nodes: Vec<[Slot; 256]>,
    routes: usize,
    /// Levels whose nodes together take at most `HOT_BYTES`.
    hot_levels: usize,
}

/// Masks `addr` to its first `len` bits.
pub fn mask<const N: usize>(addr: [u8; N], len: u8) -> [u8; N] {
    let mut a = addr;
    for (i, b) in a.iter_mut().enumerate() {
        let bits = (len as i32 - (i as i32) * 8).clamp(0, 8);
        *b &= if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
    }
    a
}

impl<const N: usize> Lpm<N> {
    /// Builds the trie. Later duplicates of the same prefix win.
    pub fn build(prefixes: &[Prefix<N>]) -> Result<Lpm<N>, LpmError> {
        let mut sorted: Vec<Prefix<N>> = Vec::with_capacity(prefixes.len());
        for p in prefixes {
            if p.len as usize > N * 8 {
                return Err(LpmError::BadLength { len: p.len, max: N * 8 });
            }
            if p.value >= NONE {
                return Err(LpmError::ValueReserved);
            }
            sorted.push(Prefix { addr: mask(p.addr, p.len), ..*p });
        }
        // Shorter prefixes first: a longer one then overwrites the slots it
        // covers, and new child nodes inherit the covering value. The sort
        // is stable, so of two equal prefixes the later is set last.
        sorted.sort_by_key(|p| p.len);
        let mut lpm = Lpm { nodes: vec![[NONE; 256]], routes: sorted.len(), hot_levels: 0 };
        let mut per_level = [0usize; N];
        per_level[0] = 1;
        for p in &sorted {
            lpm.insert(p, &mut per_level)?;
        }
        let mut bytes = 0;
        for n in per_level {
            bytes += n * std::mem::size_of::<[Slot; 256]>();
            if bytes > HOT_BYTES {
                break;
            }
            lpm.hot_levels += 1;
        }
        Ok(lpm)
    }

    fn insert(&mut self, p: &Prefix<N>, per_level: &mut [usize; N]) -> Result<(), LpmError> {
        let mut node = 0usize;
        let mut level = 0usize;
        // Descend through full bytes of the prefix.
        while (level + 1) * 8 < p.len as usize {
            let s = p.addr[level] as usize;
            let slot = self.nodes[node][s];
            node = if slot & CHILD != 0 {
                (slot & !CHILD) as usize
            } else {
                if self.nodes.len() >= NONE as usize {
                    return Err(LpmError::TooManyNodes);
                }
                self.nodes.push([slot; 256]);
                let child = self.nodes.len() - 1;
                self.nodes[node][s] = CHILD | child as u32;
                per_level[level + 1] += 1;
                child
            };
            level += 1;
        }
        // Expand the remaining 0..=8 bits over a range of slots at this level.
        let rem = p.len as usize - level * 8;
        let (start, count) = if rem == 0 && p.len == 0 {
            (0, 256)
        } else {
            let base = p.addr[level] as usize;
            (base, 1usize << (8 - rem))
        };
        for s in start..start + count {
            self.set_subtree(node, s, p.value);
        }
        Ok(())
    }

    /// Sets a slot, or every slot below it where it leads to a child.
    fn set_subtree(&mut self, node: usize, s: usize, value: u32) {
        let slot = self.nodes[node][s];
        if slot & CHILD == 0 {
            self.nodes[node][s] = value;
            return;
        }
        for c in 0..256 {
            self.set_subtree((slot & !CHILD) as usize, c, value);
        }
    }

    /// Value of the longest prefix containing `addr`.
    #[inline]
    pub fn lookup(&self, addr: &[u8; N]) -> Option<u32> {
        let mut slot = self.nodes[0][addr[0] as usize];
        for b in &addr[1..] {
            if slot & CHILD == 0 {
                break;
            }
            slot = self.nodes[(slot & !CHILD) as usize][*b as usize];
        }
        // The last level has no children: a slot there is a value.
        (slot != NONE).then_some(slot)
    }

    /// Starts loading the slot `lookup(addr)` will read first outside the
    /// levels that stay cached, so that a burst's lookups overlap their
    /// misses (a no-op for a table that is cached whole).
    #[inline]
    pub fn prefetch(&self, addr: &[u8; N]) {
        if self.hot_levels >= N {
            return;
        }
        let mut node = 0usize;
        for b in &addr[..self.hot_levels] {
            let slot = self.nodes[node][*b as usize];
            if slot & CHILD == 0 {
                return;
            }
            node = (slot & !CHILD) as usize;
        }
        crate::dpdk::prefetch(&self.nodes[node][addr[self.hot_levels] as usize]);
    }

    /// Whether some of the table is expected to miss the caches.
    pub fn larger_than_cache(&self) -> bool {
        self.hot_levels < N && self.nodes.len() * std::mem::size_of::<[Slot; 256]>() > HOT_BYTES
    }

    pub fn routes(&self) -> usize {
        self.routes
    }

    pub fn memory_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<[Slot; 256]>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p4(a: [u8; 4], len: u8, value: u32) -> Prefix<4> {
        Prefix { addr: a, len, value }
    }

    #[test]
    fn longest_wins_in_any_insert_order() {
        let routes = [
            p4([0, 0, 0, 0], 0, 1),
            p4([10, 0, 0, 0], 8, 2),
            p4([10, 1, 0, 0], 16, 3),
            p4([10, 1, 2, 0], 24, 4),
            p4([10, 1, 2, 128], 25, 5),
            p4([10, 1, 2, 200], 32, 6),
            p4([10, 1, 0, 0], 20, 7),
        ];
        for rev in [false, true] {
            let mut r = routes.to_vec();
            if rev {
                r.reverse();
            }
            let l = Lpm::build(&r).unwrap();
            assert_eq!(l.lookup(&[192, 168, 0, 1]), Some(1));
            assert_eq!(l.lookup(&[10, 9, 9, 9]), Some(2));
            assert_eq!(l.lookup(&[10, 1, 200, 1]), Some(3));
            assert_eq!(l.lookup(&[10, 1, 15, 1]), Some(7));
            assert_eq!(l.lookup(&[10, 1, 2, 1]), Some(4));
            assert_eq!(l.lookup(&[10, 1, 2, 129]), Some(5));
            assert_eq!(l.lookup(&[10, 1, 2, 200]), Some(6));
            assert_eq!(l.lookup(&[10, 1, 2, 201]), Some(5));
        }
    }

    #[test]
    fn no_default_means_miss() {
        let l = Lpm::build(&[p4([10, 0, 0, 0], 8, 1)]).unwrap();
        assert_eq!(l.lookup(&[11, 0, 0, 0]), None);
        assert_eq!(l.lookup(&[10, 255, 255, 255]), Some(1));
    }

    #[test]
    fn host_bits_are_masked() {
        let l = Lpm::build(&[p4([10, 1, 2, 3], 16, 1)]).unwrap();
        assert_eq!(l.lookup(&[10, 1, 99, 99]), Some(1));
        assert_eq!(mask([255u8; 4], 12), [255, 240, 0, 0]);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(Lpm::build(&[p4([0; 4], 33, 1)]), Err(LpmError::BadLength { .. })));
        assert_eq!(Lpm::build(&[p4([0; 4], 1, u32::MAX)]).err(), Some(LpmError::ValueReserved));
        assert_eq!(Lpm::build(&[p4([0; 4], 1, NONE)]).err(), Some(LpmError::ValueReserved));
        assert!(Lpm::build(&[p4([0; 4], 1, NONE - 1)]).is_ok());
    }

    #[test]
    fn ipv6() {
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        a[2] = 0x0d;
        a[3] = 0xb8;
        let mut b = a;
        b[7] = 5;
        let l = Lpm::build(&[Prefix { addr: a, len: 32, value: 1 }, Prefix { addr: b, len: 64, value: 2 }]).unwrap();
        let mut x = b;
        x[15] = 9;
        assert_eq!(l.lookup(&x), Some(2));
        x[7] = 6;
        assert_eq!(l.lookup(&x), Some(1));
        assert_eq!(l.lookup(&[0xfe; 16]), None);
    }

    #[test]
    fn matches_linear_scan_on_random_routes() {
        let mut rng = crate::rand::XorShift::new(0x1234_5678);
        let mut next = || rng.next_u64() as u32;
        let routes: Vec<Prefix<4>> = (0..2000).map(|i| p4(next().to_be_bytes(), (next() % 33) as u8, i)).collect();
        let l = Lpm::build(&routes).unwrap();
        for _ in 0..5000 {
            let a = next().to_be_bytes();
            // Reference: longest match, the later route winning ties.
            let mut best: Option<(u8, u32)> = None;
            for r in &routes {
                if mask(a, r.len) == mask(r.addr, r.len) && best.is_none_or(|(bl, _)| r.len >= bl) {
                    best = Some((r.len, r.value));
                }
            }
            assert_eq!(l.lookup(&a), best.map(|b| b.1), "{a:?}");
        }
    }

    #[test]
    fn a_table_beyond_the_cache_prefetches_past_its_hot_levels() {
        // 10k /24s under one /8: 41 nodes, cached whole.
        let small: Vec<Prefix<4>> = (0..10_000u32).map(|i| p4([20, (i >> 8) as u8, i as u8, 0], 24, 1)).collect();
        let l = Lpm::build(&small).unwrap();
        assert!(!l.larger_than_cache());
        assert_eq!(l.hot_levels, 4);
        l.prefetch(&[20, 1, 2, 3]);
        // 200k /24s over the whole space: thousands of third-level nodes.
        let mut rng = crate::rand::XorShift::new(7);
        let big: Vec<Prefix<4>> = (0..200_000).map(|i| p4((rng.next_u64() as u32).to_be_bytes(), 24, i)).collect();
        let l = Lpm::build(&big).unwrap();
        assert!(l.larger_than_cache(), "{} bytes", l.memory_bytes());
        assert_eq!(l.hot_levels, 2, "the root and the second level stay cached");
        for p in big.iter().step_by(97) {
            let a = [p.addr[0], p.addr[1], p.addr[2], 9];
            l.prefetch(&a);
            assert!(l.lookup(&a).is_some());
        }
        l.prefetch(&[0; 4]);
        l.prefetch(&[255; 4]);
    }

    #[test]
    fn ipv6_matches_linear_scan_on_random_routes() {
        let mut rng = crate::rand::XorShift::new(0x6666);
        let addr = |rng: &mut crate::rand::XorShift| {
            // Few distinct leading bytes, so that prefixes nest.
            let mut a = [0u8; 16];
            a[0] = 0x20;
            a[1] = (rng.next_u64() % 3) as u8;
            for b in &mut a[2..] {
                *b = (rng.next_u64() % 4) as u8;
            }
            a
        };
        let routes: Vec<Prefix<16>> =
            (0..3000).map(|i| Prefix { addr: addr(&mut rng), len: (rng.next_u64() % 129) as u8, value: i }).collect();
        let l = Lpm::build(&routes).unwrap();
        for _ in 0..3000 {
            let a = addr(&mut rng);
            let mut best: Option<(u8, u32)> = None;
            for r in &routes {
                if mask(a, r.len) == mask(r.addr, r.len) && best.is_none_or(|(bl, _)| r.len >= bl) {
                    best = Some((r.len, r.value));
                }
            }
            l.prefetch(&a);
            assert_eq!(l.lookup(&a), best.map(|b| b.1), "{a:?}");
        }
    }
}
