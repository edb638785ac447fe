//! Longest-prefix match over N-byte addresses: a multibit trie with prefix
//! expansion, its root indexed by the first byte, 8-bit strides below.
//! Built from a route list and then read-only, so workers share it
//! through a table generation; a route change rebuilds the region of its
//! prefix in a copy (`duplicate`, `rebuild_region`), not the whole table.
//! An IPv4 table of `WIDE_ROOT_MIN_ROUTES` or more gets a root of 2^24 slots (DIR-24-8, as rte_lpm and rte_fib lay it
//! out: 64 MiB, one access for a prefix up to /24, two beyond): on a full
//! table that halves a lookup's misses. IPv6 keeps the byte root, its upper
//! levels cached (a 24-bit root there would add a miss to each lookup).

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

/// IPv4 routes from which the root indexes the first 24 bits.
pub const WIDE_ROOT_MIN_ROUTES: usize = 65_536;

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
    BadLength {
        len: u8,
        max: usize,
    },
    ValueReserved,
    TooManyNodes,
    /// A route given for a region lies outside it.
    OutsideRegion,
}

impl std::fmt::Display for LpmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LpmError::BadLength { len, max } => write!(f, "prefix length {len} exceeds {max}"),
            LpmError::ValueReserved => write!(f, "values from {NONE} on are reserved"),
            LpmError::TooManyNodes => write!(f, "more than {NONE} trie nodes"),
            LpmError::OutsideRegion => write!(f, "a route outside the region rebuilt"),
        }
    }
}

pub struct Lpm<const N: usize> {
    /// The first level: 2^(8 x root_bytes) slots.
    root: Vec<Slot>,
    root_bytes: usize,
    /// The levels below, a byte each; a child index points in here.
    nodes: Vec<[Slot; 256]>,
    /// Nodes a region's rebuild let go, taken again before new ones.
    free: Vec<u32>,
    routes: usize,
    /// Levels (the root first) whose slots together take at most `HOT_BYTES`.
    hot_levels: usize,
}

/// `n` slots holding `value`, in memory backed by huge pages where the
/// kernel has them (a 24-bit root is 64 MiB).
fn slots(n: usize, value: Slot) -> Vec<Slot> {
    let mut v = Vec::with_capacity(n);
    if n * std::mem::size_of::<Slot>() > HOT_BYTES {
        crate::dpdk::advise_hugepages(v.spare_capacity_mut());
    }
    v.resize(n, value);
    v
}

/// A copy of `from`, with the memory advice of `slots`.
fn copied<T: Copy>(from: &[T]) -> Vec<T> {
    let mut v = Vec::with_capacity(from.len());
    if std::mem::size_of_val(from) > HOT_BYTES {
        crate::dpdk::advise_hugepages(v.spare_capacity_mut());
    }
    v.extend_from_slice(from);
    v
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
        Lpm::build_rooted(prefixes, Self::root_bytes_for(prefixes.len()))
    }

    /// The root's bytes a build of `routes` routes takes.
    fn root_bytes_for(routes: usize) -> usize {
        if N == 4 && routes >= WIDE_ROOT_MIN_ROUTES {
            3
        } else {
            1
        }
    }

    /// `prefixes` masked to their lengths and in the order they are
    /// inserted: shorter first, so that a longer one then overwrites the
    /// slots it covers and new child nodes inherit the covering value; the
    /// sort is stable, so of two equal prefixes the later is set last.
    fn sorted(prefixes: &[Prefix<N>]) -> Result<Vec<Prefix<N>>, LpmError> {
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
        sorted.sort_by_key(|p| p.len);
        Ok(sorted)
    }

    /// What `build` of `prefixes` takes (its `memory_bytes`), counted
    /// without building it: the root, and a node for each distinct run of
    /// leading bytes that a longer prefix descends through. A tenth of a
    /// build's time on a full table; prefixes `build` refuses count nothing.
    pub fn bytes_for(prefixes: &[Prefix<N>]) -> usize {
        let root_bytes = Self::root_bytes_for(prefixes.len());
        let mut keys: Vec<(u8, [u8; N])> = Vec::new();
        for p in prefixes.iter().filter(|p| p.len as usize <= N * 8) {
            let a = mask(p.addr, p.len);
            // The node of byte b is reached through bytes 0..b.
            let mut b = root_bytes;
            while b * 8 < p.len as usize {
                let mut k = [0u8; N];
                k[..b].copy_from_slice(&a[..b]);
                keys.push((b as u8, k));
                b += 1;
            }
        }
        keys.sort_unstable();
        keys.dedup();
        (1usize << (8 * root_bytes)) * std::mem::size_of::<Slot>() + keys.len() * std::mem::size_of::<[Slot; 256]>()
    }

    fn build_rooted(prefixes: &[Prefix<N>], root_bytes: usize) -> Result<Lpm<N>, LpmError> {
        let sorted = Self::sorted(prefixes)?;
        let mut lpm = Lpm {
            root: slots(1 << (8 * root_bytes), NONE),
            root_bytes,
            nodes: Vec::new(),
            free: Vec::new(),
            routes: sorted.len(),
            hot_levels: 0,
        };
        // Slots of each level: the root's, then 256 a node.
        let mut per_level = [0usize; N];
        per_level[0] = lpm.root.len();
        for p in &sorted {
            lpm.insert(p, &mut per_level)?;
        }
        if lpm.nodes.len() * std::mem::size_of::<[Slot; 256]>() > HOT_BYTES {
            // Into memory backed by huge pages where the kernel has them:
            // a lookup's TLB miss costs as much as its cache miss.
            lpm.nodes = copied(&lpm.nodes);
        }
        let mut bytes = 0;
        for slots in &per_level[..lpm.levels()] {
            bytes += slots * std::mem::size_of::<Slot>();
            if bytes > HOT_BYTES {
                break;
            }
            lpm.hot_levels += 1;
        }
        Ok(lpm)
    }

    /// The root, then a level per byte after its bytes.
    fn levels(&self) -> usize {
        1 + N - self.root_bytes
    }

    /// `addr`'s root slot and the bytes the levels below take. Two fixed
    /// shapes rather than a loop over `root_bytes`: each unrolls, and the
    /// branch goes the same way for every lookup.
    #[inline(always)]
    fn split<'a>(&self, addr: &'a [u8; N]) -> (usize, &'a [u8]) {
        if self.root_bytes == 1 {
            (addr[0] as usize, &addr[1..])
        } else {
            ((addr[0] as usize) << 16 | (addr[1] as usize) << 8 | addr[2] as usize, &addr[3..])
        }
    }

    /// The node a slot leads to, made (inheriting the slot's value) if none.
    fn child(
        nodes: &mut Vec<[Slot; 256]>,
        free: &mut Vec<u32>,
        slot: &mut Slot,
        count: &mut usize,
    ) -> Result<usize, LpmError> {
        if *slot & CHILD != 0 {
            return Ok((*slot & !CHILD) as usize);
        }
        let n = match free.pop() {
            Some(n) => {
                nodes[n as usize] = [*slot; 256];
                n as usize
            }
            None if nodes.len() >= NONE as usize => return Err(LpmError::TooManyNodes),
            None => {
                nodes.push([*slot; 256]);
                nodes.len() - 1
            }
        };
        *slot = CHILD | n as u32;
        *count += 256;
        Ok(n)
    }

    /// The node holding the slots of `addr`/`len` (longer than the root's
    /// bits), made along the way where missing, and the byte it indexes.
    fn descend(&mut self, addr: &[u8; N], len: usize, per_level: &mut [usize; N]) -> Result<(usize, usize), LpmError> {
        let (i, _) = self.split(addr);
        let mut node = Self::child(&mut self.nodes, &mut self.free, &mut self.root[i], &mut per_level[1])?;
        // Descend through the further full bytes of the prefix.
        let mut byte = self.root_bytes;
        while (byte + 1) * 8 < len {
            // `node` is on level byte - root_bytes + 1; its children one below.
            let level = byte - self.root_bytes + 1;
            let s = addr[byte] as usize;
            let mut slot = self.nodes[node][s];
            let next = Self::child(&mut self.nodes, &mut self.free, &mut slot, &mut per_level[level + 1])?;
            self.nodes[node][s] = slot;
            node = next;
            byte += 1;
        }
        Ok((node, byte))
    }

    fn insert(&mut self, p: &Prefix<N>, per_level: &mut [usize; N]) -> Result<(), LpmError> {
        let root_bits = 8 * self.root_bytes;
        let len = p.len as usize;
        if len <= root_bits {
            // Expanded over a range of root slots.
            let (i, _) = self.split(&p.addr);
            for i in i..i + (1usize << (root_bits - len)) {
                self.root[i] = self.covered(self.root[i], p.value);
            }
            return Ok(());
        }
        // Expand the remaining 1..=8 bits over a range of slots of a node.
        let (node, byte) = self.descend(&p.addr, len, per_level)?;
        let rem = len - byte * 8;
        let base = p.addr[byte] as usize;
        for s in base..base + (1usize << (8 - rem)) {
            self.nodes[node][s] = self.covered(self.nodes[node][s], p.value);
        }
        Ok(())
    }

    /// A copy to change while this one serves lookups.
    pub fn duplicate(&self) -> Lpm<N> {
        Lpm {
            root: copied(&self.root),
            root_bytes: self.root_bytes,
            nodes: copied(&self.nodes),
            free: self.free.clone(),
            routes: self.routes,
            hot_levels: self.hot_levels,
        }
    }

    /// Makes the addresses in `at`/`len` look up as a build of the whole
    /// table would after a change to the routes inside them: `cover` (the
    /// value of the longest route strictly containing the region, if any)
    /// everywhere, then `inside` (every route within the region, `at`/`len`
    /// itself included; of equal prefixes the later wins) on top. The rest
    /// of the table is untouched; `routes` is its new route count. The root
    /// keeps its width, whatever the new count.
    pub fn rebuild_region(
        &mut self,
        at: [u8; N],
        len: u8,
        cover: Option<u32>,
        inside: &[Prefix<N>],
        routes: usize,
    ) -> Result<(), LpmError> {
        let max = N * 8;
        if len as usize > max {
            return Err(LpmError::BadLength { len, max });
        }
        if cover.is_some_and(|c| c >= NONE) {
            return Err(LpmError::ValueReserved);
        }
        let at = mask(at, len);
        let sorted = Self::sorted(inside)?;
        if sorted.iter().any(|p| p.len < len || mask(p.addr, len) != at) {
            return Err(LpmError::OutsideRegion);
        }
        let cover = cover.unwrap_or(NONE);
        // Level sizes only matter to a build's choice of hot levels, kept.
        let mut per_level = [0usize; N];
        let (root_bits, len) = (8 * self.root_bytes, len as usize);
        if len <= root_bits {
            let (i, _) = self.split(&at);
            for i in i..i + (1usize << (root_bits - len)) {
                self.release(self.root[i]);
                self.root[i] = cover;
            }
        } else {
            let (node, byte) = self.descend(&at, len, &mut per_level)?;
            let base = at[byte] as usize;
            for s in base..base + (1usize << (8 - (len - byte * 8))) {
                self.release(self.nodes[node][s]);
                self.nodes[node][s] = cover;
            }
        }
        for p in &sorted {
            self.insert(p, &mut per_level)?;
        }
        self.routes = routes;
        Ok(())
    }

    /// Frees the nodes below `slot` (nothing for a value).
    fn release(&mut self, slot: Slot) {
        if slot & CHILD == 0 {
            return;
        }
        let n = (slot & !CHILD) as usize;
        for c in 0..256 {
            self.release(self.nodes[n][c]);
        }
        self.free.push(n as u32);
    }

    /// `slot` once a prefix covering it sets `value`: the value where the
    /// slot holds one; where it leads to a child, the slot itself, with
    /// `value` set in every slot below that holds one.
    #[inline(always)]
    fn covered(&mut self, slot: Slot, value: u32) -> Slot {
        if slot & CHILD == 0 {
            return value;
        }
        self.cover_below((slot & !CHILD) as usize, value);
        slot
    }

    fn cover_below(&mut self, node: usize, value: u32) {
        for c in 0..256 {
            self.nodes[node][c] = self.covered(self.nodes[node][c], value);
        }
    }

    /// Value of the longest prefix containing `addr`.
    #[inline]
    pub fn lookup(&self, addr: &[u8; N]) -> Option<u32> {
        let (first, rest) = self.split(addr);
        let mut slot = self.root[first];
        for b in rest {
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
        if self.hot_levels >= self.levels() {
            return;
        }
        let (first, rest) = self.split(addr);
        // Read through the cached levels (fewer than all: rest has a byte
        // for each level below the root).
        let mut at = &self.root[first];
        for b in &rest[..self.hot_levels] {
            if *at & CHILD == 0 {
                return;
            }
            at = &self.nodes[(*at & !CHILD) as usize][*b as usize];
        }
        crate::dpdk::prefetch(at);
    }

    /// Whether some of the table is expected to miss the caches.
    pub fn larger_than_cache(&self) -> bool {
        self.hot_levels < self.levels() && self.memory_bytes() > HOT_BYTES
    }

    /// Bits the root indexes (8, or 24 for a large IPv4 table).
    pub fn root_bits(&self) -> usize {
        8 * self.root_bytes
    }

    pub fn routes(&self) -> usize {
        self.routes
    }

    pub fn memory_bytes(&self) -> usize {
        self.root.len() * std::mem::size_of::<Slot>() + self.nodes.len() * std::mem::size_of::<[Slot; 256]>()
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
            for root in [1, 3] {
                let l = Lpm::build_rooted(&r, root).unwrap();
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
        let (l, wide) = (Lpm::build(&routes).unwrap(), Lpm::build_rooted(&routes, 3).unwrap());
        assert_eq!((l.root_bits(), wide.root_bits()), (8, 24));
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
            assert_eq!(wide.lookup(&a), best.map(|b| b.1), "wide root: {a:?}");
        }
    }

    #[test]
    fn bytes_for_counts_what_a_build_takes() {
        let mut rng = crate::rand::XorShift::new(0xb17e5);
        for n in [0, 1, 500, 70_000] {
            // /8 and longer: a short prefix in a 24-bit root writes millions of slots.
            let v4: Vec<Prefix<4>> =
                (0..n).map(|i| p4((rng.next_u64() as u32).to_be_bytes(), 8 + (rng.next_u64() % 25) as u8, i)).collect();
            assert_eq!(Lpm::bytes_for(&v4), Lpm::build(&v4).unwrap().memory_bytes(), "{n} IPv4 routes");
            let v6: Vec<Prefix<16>> = (0..n.min(5000))
                .map(|i| {
                    let mut a = [0u8; 16];
                    a[..8].copy_from_slice(&(rng.next_u64() & 0x2003_0f0f_0000_ffff).to_be_bytes());
                    Prefix { addr: a, len: (rng.next_u64() % 129) as u8, value: i }
                })
                .collect();
            assert_eq!(Lpm::bytes_for(&v6), Lpm::build(&v6).unwrap().memory_bytes(), "{n} IPv6 routes");
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
        assert_eq!((l.root_bits(), l.hot_levels), (24, 0), "DIR-24-8: the 64 MiB root is prefetched");
        let l = Lpm::build_rooted(&big, 1).unwrap();
        assert!(l.larger_than_cache(), "{} bytes", l.memory_bytes());
        assert_eq!((l.root_bits(), l.hot_levels), (8, 2), "the root and the second level stay cached");
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

    /// `routes` after a change to `at`/`len`: its region rebuilt in a copy
    /// of `l`, from the routes inside and the longest one around it.
    fn changed<const N: usize>(l: &Lpm<N>, routes: &[Prefix<N>], at: [u8; N], len: u8) -> Lpm<N> {
        let (mut inside, mut cover) = (Vec::new(), None::<(u8, u32)>);
        for r in routes {
            if r.len >= len && mask(r.addr, len) == mask(at, len) {
                inside.push(*r);
            } else if r.len < len && mask(at, r.len) == mask(r.addr, r.len) && cover.is_none_or(|c| r.len >= c.0) {
                cover = Some((r.len, r.value));
            }
        }
        let mut next = l.duplicate();
        next.rebuild_region(at, len, cover.map(|c| c.1), &inside, routes.len()).unwrap();
        next
    }

    #[test]
    fn a_rebuilt_region_looks_up_as_a_whole_build_does() {
        let mut rng = crate::rand::XorShift::new(0x5eed);
        // Few distinct leading bytes, so that prefixes nest and share nodes.
        let addr = |rng: &mut crate::rand::XorShift| {
            let x = rng.next_u64() as u32;
            [10 + (x % 3) as u8, (x >> 8) as u8 % 4, (x >> 16) as u8, (x >> 24) as u8]
        };
        let mut routes: Vec<Prefix<4>> = (0..400).map(|i| p4(addr(&mut rng), (rng.next_u64() % 33) as u8, i)).collect();
        for root in [1, 3] {
            let mut l = Lpm::build_rooted(&routes, root).unwrap();
            // A 24-bit root is 64 MiB a copy: fewer steps.
            for step in 0..if root == 1 { 300u32 } else { 25 } {
                // Add a route, change one's value or remove one.
                let (at, len) = match rng.next_u64() % 3 {
                    0 => {
                        let p = p4(addr(&mut rng), (rng.next_u64() % 33) as u8, 1000 + step);
                        routes.push(p);
                        (p.addr, p.len)
                    }
                    1 => {
                        let i = rng.next_u64() as usize % routes.len();
                        routes[i].value = 2000 + step;
                        (routes[i].addr, routes[i].len)
                    }
                    _ => {
                        let p = routes.remove(rng.next_u64() as usize % routes.len());
                        (p.addr, p.len)
                    }
                };
                l = changed(&l, &routes, at, len);
                let whole = Lpm::build_rooted(&routes, root).unwrap();
                assert_eq!(l.routes(), whole.routes());
                for _ in 0..200 {
                    let a = addr(&mut rng);
                    assert_eq!(l.lookup(&a), whole.lookup(&a), "root {root} step {step} {a:?}");
                }
                // The changed region's edges and the addresses just outside.
                let first = u32::from_be_bytes(mask(at, len));
                let last = first | (u32::MAX.checked_shr(len as u32).unwrap_or(0));
                for a in [first.wrapping_sub(1), first, last, last.wrapping_add(1)] {
                    let a = a.to_be_bytes();
                    assert_eq!(l.lookup(&a), whole.lookup(&a), "root {root} step {step} edge {a:?}");
                }
            }
            // Freed nodes are taken again: the table does not grow without bound.
            assert!(l.nodes.len() <= 2 * Lpm::build_rooted(&routes, root).unwrap().nodes.len() + 64);
        }
    }

    #[test]
    fn an_ipv6_region_and_the_default_route_rebuild_too() {
        let mut a = [0u8; 16];
        a[0] = 0x20;
        let mut routes = vec![Prefix { addr: a, len: 8, value: 1 }];
        let mut b = a;
        b[5] = 7;
        routes.push(Prefix { addr: b, len: 48, value: 2 });
        let mut l = Lpm::build(&routes).unwrap();
        // A /64 under the /48, then the /48 removed, then a default route.
        let mut c = b;
        c[7] = 1;
        routes.push(Prefix { addr: c, len: 64, value: 3 });
        l = changed(&l, &routes, c, 64);
        assert_eq!((l.lookup(&c), l.lookup(&b)), (Some(3), Some(2)));
        routes.remove(1);
        l = changed(&l, &routes, b, 48);
        assert_eq!((l.lookup(&c), l.lookup(&b)), (Some(3), Some(1)));
        routes.push(Prefix { addr: [0; 16], len: 0, value: 9 });
        l = changed(&l, &routes, [0; 16], 0);
        assert_eq!((l.lookup(&c), l.lookup(&b), l.lookup(&[0xfe; 16])), (Some(3), Some(1), Some(9)));
        assert_eq!(l.routes(), 3);
    }

    #[test]
    fn a_region_refuses_routes_outside_it() {
        let mut l = Lpm::build(&[p4([10, 0, 0, 0], 8, 1)]).unwrap();
        let outside = [p4([11, 0, 0, 0], 16, 2)];
        assert_eq!(l.rebuild_region([10, 0, 0, 0], 8, None, &outside, 1), Err(LpmError::OutsideRegion));
        let shorter = [p4([10, 0, 0, 0], 7, 2)];
        assert_eq!(l.rebuild_region([10, 0, 0, 0], 8, None, &shorter, 1), Err(LpmError::OutsideRegion));
        assert!(matches!(l.rebuild_region([10, 0, 0, 0], 33, None, &[], 1), Err(LpmError::BadLength { .. })));
        assert_eq!(l.rebuild_region([10, 0, 0, 0], 8, Some(NONE), &[], 1), Err(LpmError::ValueReserved));
    }
}
