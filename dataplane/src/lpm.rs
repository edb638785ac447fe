//! Longest-prefix match over N-byte addresses: a multibit trie with 8-bit
//! strides and prefix expansion. Built once from a route list and then
//! read-only, so workers share it through a table generation. IPv4 lookups
//! touch at most 4 nodes, IPv6 at most 16.

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    /// Value of the longest prefix covering this slot (NONE if none).
    value: u32,
    /// Index of the next-level node, 0 if none (node 0 is the root).
    child: u32,
}

const EMPTY: Slot = Slot { value: NONE, child: 0 };

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
}

impl std::fmt::Display for LpmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LpmError::BadLength { len, max } => write!(f, "prefix length {len} exceeds {max}"),
            LpmError::ValueReserved => write!(f, "value u32::MAX is reserved"),
        }
    }
}

pub struct Lpm<const N: usize> {
    nodes: Vec<[Slot; 256]>,
    routes: usize,
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
            if p.value == NONE {
                return Err(LpmError::ValueReserved);
            }
            sorted.push(Prefix { addr: mask(p.addr, p.len), ..*p });
        }
        // Shorter prefixes first: a longer one then overwrites the slots it
        // covers, and new child nodes inherit the covering value.
        sorted.sort_by_key(|p| p.len);
        let mut lpm = Lpm { nodes: vec![[EMPTY; 256]], routes: sorted.len() };
        for p in &sorted {
            lpm.insert(p);
        }
        Ok(lpm)
    }

    fn insert(&mut self, p: &Prefix<N>) {
        let mut node = 0usize;
        let mut level = 0usize;
        // Descend through full bytes of the prefix.
        while (level + 1) * 8 < p.len as usize {
            let s = p.addr[level] as usize;
            let mut child = self.nodes[node][s].child as usize;
            if child == 0 {
                let inherited = self.nodes[node][s].value;
                self.nodes.push([Slot { value: inherited, child: 0 }; 256]);
                child = self.nodes.len() - 1;
                self.nodes[node][s].child = child as u32;
            }
            node = child;
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
    }

    /// Sets a slot and every slot below it (children inherit covering values).
    fn set_subtree(&mut self, node: usize, s: usize, value: u32) {
        self.nodes[node][s].value = value;
        let child = self.nodes[node][s].child as usize;
        if child != 0 {
            for c in 0..256 {
                self.set_subtree(child, c, value);
            }
        }
    }

    /// Value of the longest prefix containing `addr`.
    #[inline]
    pub fn lookup(&self, addr: &[u8; N]) -> Option<u32> {
        let mut node = 0usize;
        for b in addr.iter() {
            let slot = self.nodes[node][*b as usize];
            if slot.child == 0 {
                return (slot.value != NONE).then_some(slot.value);
            }
            node = slot.child as usize;
        }
        None // unreachable for len <= N*8: the last level never has children
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
}
