//! Ternary classifier over a fixed key of header fields, receive-timestamp
//! bits, mark bits and per-flow register bits (AM-PM paper §3.1: "time bit
//! as a match criterion" and "stateful behaviour").
//!
//! Rules are (value, mask, priority, action); the highest priority matching
//! rule wins, equal priorities go to the rule added first. A rule set is
//! compiled once by the control core and published with the tables:
//! - when all rules together care about at most `DIRECT_MAX_BITS` key bits
//!   (the time-slot tables: a few timestamp bits, the mark, a register bit),
//!   those bits are gathered into an index of a direct table: O(1);
//! - otherwise a tuple-space search: one hash table per distinct mask,
//!   visited in order of the best priority they hold (large per-flow rule
//!   sets). A table keys its rules by only the key words its mask cares
//!   about, in slots of one cache line.
//!
//! Lookups allocate nothing.

/// Words of a key.
pub const KEY_WORDS: usize = 8;
/// Most key bits a direct table indexes (4096 entries).
pub const DIRECT_MAX_BITS: u32 = 12;

/// Where each field sits in the key.
pub mod field {
    /// Receive time, nanoseconds since the Unix epoch.
    pub const TS_NS: usize = 0;
    /// Receive time as 32.32 fixed point seconds (the seconds / second
    /// fraction split of the paper: bit 32 is the seconds LSB).
    pub const TS_FIX: usize = 1;
    /// Word 2: mark bits (bit 0 = L, bit 1 = D), register bits << 8, DSCP <<
    /// 16, protocol << 24, input port << 32, IP version << 48.
    pub const META: usize = 2;
    pub const MARK_SHIFT: u32 = 0;
    pub const REG_SHIFT: u32 = 8;
    pub const DSCP_SHIFT: u32 = 16;
    pub const PROTO_SHIFT: u32 = 24;
    pub const IN_PORT_SHIFT: u32 = 32;
    pub const IP_VERSION_SHIFT: u32 = 48;
    /// Word 3: source port, destination port << 16.
    pub const PORTS: usize = 3;
    /// Words 4-5 / 6-7: source / destination address (high word first;
    /// IPv4 as IPv4-mapped IPv6).
    pub const SRC: usize = 4;
    pub const DST: usize = 6;
}

/// A classifier key.
#[derive(Debug, Clone, Copy, Eq, Default)]
pub struct Key(pub [u64; KEY_WORDS]);

// Equal keys have equal words, so hashing the words agrees with `eq`.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h);
    }
}

impl PartialEq for Key {
    /// Branch-free over the eight words: the derived slice comparison
    /// calls memcmp, a measurable share of a tuple-space probe.
    #[inline]
    fn eq(&self, o: &Key) -> bool {
        self.0.iter().zip(o.0.iter()).fold(0, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl Key {
    #[inline]
    pub fn set_meta(&mut self, shift: u32, width: u32, v: u64) {
        let m = ((1u64 << width) - 1) << shift;
        self.0[field::META] = (self.0[field::META] & !m) | ((v << shift) & m);
    }

    #[inline]
    pub fn set_addr(&mut self, at: usize, a: u128) {
        self.0[at] = (a >> 64) as u64;
        self.0[at + 1] = a as u64;
    }
}

/// One rule. `value` bits outside `mask` are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule<A> {
    pub name: String,
    pub priority: u32,
    pub value: Key,
    pub mask: Key,
    pub action: A,
}

impl<A> Rule<A> {
    #[inline]
    pub fn matches(&self, k: &Key) -> bool {
        k.0.iter().zip(self.mask.0.iter()).zip(self.value.0.iter()).all(|((k, m), v)| k & m == v & m)
    }
}

/// A contiguous run of cared-about bits: `len` bits of word `word` from bit
/// `shift` go to index bits from `at`.
#[derive(Debug, Clone, Copy)]
struct Run {
    word: u8,
    shift: u8,
    len: u8,
    at: u8,
}

const NONE: u32 = u32::MAX;

enum Lookup<A> {
    Direct { runs: Vec<Run>, table: Box<[u32]> },
    Tuples { groups: Vec<Group<A>> },
}

struct Group<A> {
    mask: Key,
    best: u32,
    /// The bits every rule of the group has alike, and their values: a key
    /// that differs there matches none (an IPv4 key and a group of IPv6
    /// rules), so the search skips the group without hashing.
    shared_mask: Key,
    shared_value: Key,
    /// No later group may match a key this one may match (their shared
    /// bits disagree: IPv4 rules before IPv6 ones), so a probe that found
    /// this group need not screen the rest.
    alone: bool,
    /// For a narrow table: the mask and shared bits in its packed order.
    packed: PackedScreen,
    /// Masked value -> the best rule of equal keys.
    table: GroupTable<A>,
}

impl<A> Group<A> {
    #[inline]
    fn may_match(&self, k: &Key) -> bool {
        let words = k.0.iter().zip(self.shared_mask.0.iter()).zip(self.shared_value.0.iter());
        words.fold(0, |acc, ((k, m), v)| acc | ((k ^ v) & m)) == 0
    }

    /// No key matches both groups: a bit both share holds different values.
    fn disjoint(&self, o: &Group<A>) -> bool {
        let (m, v) = (&self.shared_mask.0, &self.shared_value.0);
        (0..KEY_WORDS).any(|w| m[w] & o.shared_mask.0[w] & (v[w] ^ o.shared_value.0[w]) != 0)
    }
}

/// A narrow group's mask and shared bits, word j from key word `from[j]`
/// as its table packs keys. The shared bits are mask bits, so the words
/// the table packs hold all of them: one pass over those four words packs
/// a key and screens it as `Group::may_match` does over all eight.
#[derive(Debug, Clone, Copy, Default)]
struct PackedScreen {
    mask: [u64; 4],
    shared_mask: [u64; 4],
    shared_value: [u64; 4],
}

impl PackedScreen {
    fn new(from: &[u8; 4], mask: &Key, shared_mask: &Key, shared_value: &Key) -> PackedScreen {
        let at = |k: &Key| std::array::from_fn(|j| k.0[from[j] as usize]);
        PackedScreen { mask: at(mask), shared_mask: at(shared_mask), shared_value: at(shared_value) }
    }

    /// `k`'s packed words, None where the group's shared bits rule it out.
    #[inline(always)]
    fn pack(&self, from: &[u8; 4], k: &Key) -> Option<[u64; 4]> {
        let mut differ = 0;
        let words = std::array::from_fn(|j| {
            // `from` names key words (below KEY_WORDS): the mask only spares a bounds check.
            let w = k.0[from[j] as usize & (KEY_WORDS - 1)];
            differ |= (w ^ self.shared_value[j]) & self.shared_mask[j];
            w & self.mask[j]
        });
        (differ == 0).then_some(words)
    }
}

/// A group's rules, by how many key words its mask cares about.
enum GroupTable<A> {
    /// Up to 4 words (an IPv4 5-tuple, ports, a prefix and the protocol).
    Narrow(PackedTable<A, 4>),
    Wide(PackedTable<A, KEY_WORDS>),
}

impl<A> GroupTable<A> {
    #[inline]
    fn get(&self, k: &Key, mask: &Key) -> Option<&Entry<A>> {
        match self {
            GroupTable::Narrow(t) => t.get(k, mask),
            GroupTable::Wide(t) => t.get(k, mask),
        }
    }

    #[inline]
    fn prefetch(&self, k: &Key, mask: &Key) {
        match self {
            GroupTable::Narrow(t) => t.prefetch(k, mask),
            GroupTable::Wide(t) => t.prefetch(k, mask),
        }
    }
}

/// A tuple group's copy of what a lookup needs of its rule: with thousands
/// of rules, reading them from the rule list would be one more cache miss
/// per packet after the (prefetched) table slot.
#[derive(Debug, Clone, Copy)]
struct Entry<A> {
    priority: u32,
    index: u32,
    action: A,
}

/// One slot of a `PackedTable`: the masked key words and the entry, on a
/// cache line of its own (a narrow slot is 56 bytes of 64), so a probe
/// reads one line where a full 64-byte key beside its entry took two.
#[derive(Clone)]
#[repr(C, align(64))]
struct PackedSlot<A, const N: usize> {
    words: [u64; N],
    entry: Option<Entry<A>>,
}

/// Open addressing (linear probing) over the `N` key words a mask cares
/// about, built once per rule set (no removal: a change compiles anew).
struct PackedTable<A, const N: usize> {
    /// Key word each packed word comes from; unused ones name a word the
    /// mask ignores, which packs to 0 for rule and packet alike.
    from: [u8; N],
    slots: Box<[PackedSlot<A, N>]>,
    index_mask: usize,
}

impl<A: Clone> PackedTable<A, 4> {
    /// A table for `len` rules of `mask`, None if the mask cares about
    /// more than 4 words.
    fn narrow(mask: &Key, len: usize) -> Option<Self> {
        let cared: Vec<u8> = (0..KEY_WORDS as u8).filter(|&w| mask.0[w as usize] != 0).collect();
        if cared.len() > 4 {
            return None;
        }
        // With at most 4 of 8 words cared about, some word is ignored.
        let ignored = (0..KEY_WORDS as u8).find(|&w| mask.0[w as usize] == 0)?;
        let mut from = [ignored; 4];
        from[..cared.len()].copy_from_slice(&cared);
        Some(PackedTable::with_words(from, len))
    }
}

impl<A: Clone> PackedTable<A, KEY_WORDS> {
    /// A table for `len` rules over the whole key.
    fn wide(len: usize) -> Self {
        PackedTable::with_words(std::array::from_fn(|w| w as u8), len)
    }
}

impl<A: Clone, const N: usize> PackedTable<A, N> {
    fn with_words(from: [u8; N], len: usize) -> Self {
        // Four slots a rule at least (at most a quarter in use): probes
        // stay short, and a key no rule holds (a packet of a flow not
        // measured) soon meets an empty slot; the table is built once a
        // rule set, and a lookup touches one line all the same.
        let size = (len.max(1) * 4).next_power_of_two();
        let slots = vec![PackedSlot { words: [0; N], entry: None }; size].into_boxed_slice();
        PackedTable { from, slots, index_mask: size - 1 }
    }
}

/// MurmurHash3's 64-bit finalizer (every output bit depends on every
/// input bit): the packed home's own mix, where `u64`'s key hash (one
/// wide multiply, for the tables' keys) took more instructions.
#[inline(always)]
fn murmur_mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl<A, const N: usize> PackedTable<A, N> {
    #[inline]
    fn pack(&self, k: &Key, mask: &Key) -> [u64; N] {
        std::array::from_fn(|j| {
            let w = self.from[j] as usize;
            k.0[w] & mask.0[w]
        })
    }

    /// Each word times an odd constant of its own, summed, then one
    /// finalizer (not one per word: a lookup hashes twice a packet with the
    /// prefetch pass): words that differ in one place never share a home,
    /// and every bit reaches the index.
    #[inline]
    fn home(words: &[u64; N]) -> usize {
        const K: [u64; KEY_WORDS] = [
            0x9e37_79b9_7f4a_7c15,
            0xbf58_476d_1ce4_e5b9,
            0x94d0_49bb_1331_11eb,
            0xd6e8_feb8_6659_fd93,
            0xa076_1d64_78bd_642f,
            0xe703_7ed1_a0b4_28db,
            0x8ebc_6af0_9c88_c6e3,
            0x5899_65cc_7537_4cc3,
        ];
        let sum = words.iter().zip(K.iter()).fold(0u64, |h, (w, k)| h.wrapping_add(w.wrapping_mul(*k)));
        murmur_mix(sum) as usize
    }

    /// The slot holding `words`, or the empty slot where they would go.
    #[inline]
    fn find(&self, words: &[u64; N]) -> usize {
        self.find_from(Self::home(words), words)
    }

    /// `find` with the home already known.
    #[inline]
    fn find_from(&self, home: usize, words: &[u64; N]) -> usize {
        let mut i = home & self.index_mask;
        loop {
            let s = &self.slots[i];
            if s.entry.is_none() || s.words == *words {
                return i;
            }
            i = (i + 1) & self.index_mask;
        }
    }

    #[inline]
    fn get(&self, k: &Key, mask: &Key) -> Option<&Entry<A>> {
        self.slots[self.find(&self.pack(k, mask))].entry.as_ref()
    }

    #[inline]
    fn prefetch(&self, k: &Key, mask: &Key) {
        crate::dpdk::prefetch(&self.slots[Self::home(&self.pack(k, mask)) & self.index_mask]);
    }

    /// Stores `e` for `value` unless the entry already there has at least
    /// its priority (rules come in order: on a tie the earlier stays).
    fn insert(&mut self, value: &Key, mask: &Key, e: Entry<A>) {
        let words = self.pack(value, mask);
        let i = self.find(&words);
        let s = &mut self.slots[i];
        if s.entry.as_ref().is_none_or(|old| e.priority > old.priority) {
            *s = PackedSlot { words, entry: Some(e) };
        }
    }
}

/// A lookup begun by [`Classifier::probe`]: the key's packed words and
/// the slot its probe starts at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Probe {
    /// The one group the key may match.
    group: u32,
    words: [u64; 4],
    /// `NO_PROBE`: the shared-bits screen ruled the key out.
    home: u32,
}

const NO_PROBE: u32 = u32::MAX;

/// A compiled rule set.
pub struct Classifier<A> {
    rules: Vec<Rule<A>>,
    lookup: Lookup<A>,
}

impl<A: Clone> Classifier<A> {
    /// Compiles `rules` (their order breaks priority ties: earlier wins).
    pub fn new(rules: Vec<Rule<A>>) -> Classifier<A> {
        let union = cared_bits(&rules);
        let lookup = if is_direct(&union) { direct(&rules, &union) } else { tuples(&rules) };
        Classifier { rules, lookup }
    }

    pub fn rules(&self) -> &[Rule<A>] {
        &self.rules
    }

    /// "direct" or "tuple-space": which lookup the compiler chose.
    pub fn kind(&self) -> &'static str {
        match self.lookup {
            Lookup::Direct { .. } => "direct",
            Lookup::Tuples { .. } => "tuple-space",
        }
    }

    /// Index of the winning rule.
    #[inline]
    pub fn lookup_index(&self, k: &Key) -> Option<usize> {
        match &self.lookup {
            Lookup::Direct { runs, table } => {
                let i = table[gather(runs, k)];
                (i != NONE).then_some(i as usize)
            }
            Lookup::Tuples { groups } => best_entry(groups, k).map(|e| e.index as usize),
        }
    }

    /// Starts loading what a lookup of `k` reads first (the slot of the
    /// best group it may match), so a lookup a few packets later finds it
    /// in the cache; and keeps what that lookup needs when the key may
    /// match one tuple group only (per-flow rules of one shape; AM-PM's IPv4 and
    /// IPv6 flows make one group each): `lookup_probe` then neither
    /// builds, packs nor hashes the key again. None where the key may
    /// match several groups, its group keys more than 4 words, or the rule
    /// set is a direct table: look those up by key.
    #[inline]
    pub fn probe(&self, k: &Key) -> Option<Probe> {
        let Lookup::Tuples { groups } = &self.lookup else { return None };
        for (at, g) in groups.iter().enumerate() {
            let GroupTable::Narrow(t) = &g.table else {
                if g.may_match(k) {
                    g.table.prefetch(k, &g.mask);
                    return None;
                }
                continue;
            };
            let Some(words) = g.packed.pack(&t.from, k) else { continue };
            let home = PackedTable::<A, 4>::home(&words) & t.index_mask;
            crate::dpdk::prefetch(&t.slots[home]);
            let alone = g.alone || !groups[at + 1..].iter().any(|g| g.may_match(k));
            return alone.then_some(Probe { group: at as u32, words, home: home as u32 });
        }
        Some(Probe { group: 0, words: [0; 4], home: NO_PROBE })
    }

    /// The winning rule's action for the key `p` was probed with, by this
    /// rule set's `probe`.
    #[inline]
    pub fn lookup_probe(&self, p: &Probe) -> Option<&A> {
        let Lookup::Tuples { groups } = &self.lookup else { return None };
        match groups.get(p.group as usize).filter(|_| p.home != NO_PROBE) {
            Some(Group { table: GroupTable::Narrow(t), .. }) => {
                t.slots[t.find_from(p.home as usize, &p.words)].entry.as_ref().map(|e| &e.action)
            }
            _ => None,
        }
    }

    /// The winning rule's action.
    #[inline]
    pub fn lookup(&self, k: &Key) -> Option<&A> {
        match &self.lookup {
            Lookup::Direct { .. } => self.lookup_index(k).map(|i| &self.rules[i].action),
            Lookup::Tuples { groups } => best_entry(groups, k).map(|e| &e.action),
        }
    }
}

/// The highest-priority match over the tuple groups (the earlier rule on a
/// tie); groups are sorted by their best priority, so the search stops at
/// the first group that cannot beat what was found.
#[inline]
fn best_entry<'a, A>(groups: &'a [Group<A>], k: &Key) -> Option<&'a Entry<A>> {
    let mut best: Option<&Entry<A>> = None;
    for g in groups {
        if best.is_some_and(|b| g.best < b.priority) {
            break;
        }
        if !g.may_match(k) {
            continue;
        }
        if let Some(e) = g.table.get(k, &g.mask) {
            if best.is_none_or(|b| e.priority > b.priority || (e.priority == b.priority && e.index < b.index)) {
                best = Some(e);
            }
        }
    }
    best
}

/// Every key bit some rule looks at.
fn cared_bits<A>(rules: &[Rule<A>]) -> Key {
    let mut union = Key::default();
    for r in rules {
        for (u, m) in union.0.iter_mut().zip(r.mask.0.iter()) {
            *u |= m;
        }
    }
    union
}

fn is_direct(union: &Key) -> bool {
    union.0.iter().map(|w| w.count_ones()).sum::<u32>() <= DIRECT_MAX_BITS
}

/// The lookup `Classifier::new` would choose for `rules`, without building it.
pub fn kind_of<A>(rules: &[Rule<A>]) -> &'static str {
    if is_direct(&cared_bits(rules)) {
        "direct"
    } else {
        "tuple-space"
    }
}

#[inline]
fn gather(runs: &[Run], k: &Key) -> usize {
    let mut idx = 0usize;
    for r in runs {
        let v = (k.0[r.word as usize] >> r.shift) & ((1u64 << r.len) - 1);
        idx |= (v as usize) << r.at;
    }
    idx
}

/// Index of the best rule among those matching `k` (linear; build time only).
fn best_of<A>(rules: &[Rule<A>], k: &Key) -> u32 {
    let mut best: Option<usize> = None;
    for (i, r) in rules.iter().enumerate() {
        if r.matches(k) && best.is_none_or(|b| r.priority > rules[b].priority) {
            best = Some(i);
        }
    }
    best.map_or(NONE, |i| i as u32)
}

fn direct<A>(rules: &[Rule<A>], union: &Key) -> Lookup<A> {
    let mut runs = Vec::new();
    let mut at = 0u8;
    for (w, &m) in union.0.iter().enumerate() {
        let mut bit = 0u32;
        while bit < 64 {
            if m >> bit & 1 == 0 {
                bit += 1;
                continue;
            }
            let len = (m >> bit).trailing_ones().min(64 - bit);
            runs.push(Run { word: w as u8, shift: bit as u8, len: len as u8, at });
            at += len as u8;
            bit += len;
        }
    }
    let size = 1usize << at;
    let mut table = vec![NONE; size].into_boxed_slice();
    for (idx, slot) in table.iter_mut().enumerate() {
        // Scatter the index back into a key and find its best rule.
        let mut k = Key::default();
        for r in &runs {
            let v = (idx as u64 >> r.at) & ((1u64 << r.len) - 1);
            k.0[r.word as usize] |= v << r.shift;
        }
        *slot = best_of(rules, &k);
    }
    Lookup::Direct { runs, table }
}

fn tuples<A: Clone>(rules: &[Rule<A>]) -> Lookup<A> {
    let mut masks: Vec<Key> = Vec::new();
    for r in rules {
        if !masks.contains(&r.mask) {
            masks.push(r.mask);
        }
    }
    let mut groups: Vec<Group<A>> = masks
        .into_iter()
        .map(|mask| {
            let members: Vec<usize> = (0..rules.len()).filter(|&i| rules[i].mask == mask).collect();
            let mut table = match PackedTable::narrow(&mask, members.len()) {
                Some(t) => GroupTable::Narrow(t),
                None => GroupTable::Wide(PackedTable::wide(members.len())),
            };
            let mut best = 0;
            let first = rules[members[0]].value;
            let mut shared_mask = mask;
            // Members in rule order: an equal key of equal priority keeps the earlier rule.
            for &i in &members {
                for ((s, v), f) in shared_mask.0.iter_mut().zip(rules[i].value.0.iter()).zip(first.0.iter()) {
                    *s &= !(v ^ f);
                }
                best = best.max(rules[i].priority);
                let e = Entry { priority: rules[i].priority, index: i as u32, action: rules[i].action.clone() };
                match &mut table {
                    GroupTable::Narrow(t) => t.insert(&rules[i].value, &mask, e),
                    GroupTable::Wide(t) => t.insert(&rules[i].value, &mask, e),
                }
            }
            let mut shared_value = first;
            for (v, m) in shared_value.0.iter_mut().zip(shared_mask.0.iter()) {
                *v &= m;
            }
            let packed = match &table {
                GroupTable::Narrow(t) => PackedScreen::new(&t.from, &mask, &shared_mask, &shared_value),
                GroupTable::Wide(_) => PackedScreen::default(),
            };
            Group { mask, best, shared_mask, shared_value, alone: false, packed, table }
        })
        .collect();
    groups.sort_by_key(|g| std::cmp::Reverse(g.best));
    for i in 0..groups.len() {
        groups[i].alone = groups[i + 1..].iter().all(|h| groups[i].disjoint(h));
    }
    Lookup::Tuples { groups }
}

/// Parses a ternary bit string such as `01*` (most significant bit first)
/// into (value, mask) shifted left by `lsb`.
pub fn parse_bits(s: &str, lsb: u32) -> Result<(u64, u64), String> {
    let s = s.trim().trim_start_matches("0b");
    if s.is_empty() || s.len() as u32 + lsb > 64 {
        return Err(format!("`{s}`: a bit string of 1 to {} characters of 0, 1 or *", 64 - lsb.min(63)));
    }
    let (mut v, mut m) = (0u64, 0u64);
    for ch in s.chars() {
        v <<= 1;
        m <<= 1;
        match ch {
            '0' => m |= 1,
            '1' => {
                v |= 1;
                m |= 1
            }
            '*' | 'x' | 'X' => {}
            _ => return Err(format!("`{s}`: '{ch}' is not 0, 1 or *")),
        }
    }
    Ok((v << lsb, m << lsb))
}

/// The inverse of `parse_bits` for `width` bits from `lsb`.
pub fn format_bits(value: u64, mask: u64, lsb: u32, width: u32) -> String {
    (0..width)
        .rev()
        .map(|i| {
            let b = lsb + i;
            if mask >> b & 1 == 0 {
                '*'
            } else if value >> b & 1 == 1 {
                '1'
            } else {
                '0'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, priority: u32, word: usize, v: u64, m: u64) -> Rule<u32> {
        let mut value = Key::default();
        let mut mask = Key::default();
        value.0[word] = v;
        mask.0[word] = m;
        Rule { name: name.into(), priority, value, mask, action: priority }
    }

    fn key(word: usize, v: u64) -> Key {
        let mut k = Key::default();
        k.0[word] = v;
        k
    }

    #[test]
    fn priorities_and_overlapping_masks() {
        let rules = vec![
            rule("any", 1, 2, 0, 0),
            rule("low-bit", 5, 2, 1, 1),
            rule("two-bits", 9, 2, 3, 3),
            rule("tie-first", 5, 2, 4, 4),
            rule("tie-second", 5, 2, 4, 4),
        ];
        let c = Classifier::new(rules.clone());
        assert_eq!(c.kind(), "direct");
        assert_eq!(kind_of(c.rules()), "direct");
        assert_eq!(c.lookup(&key(2, 0)), Some(&1));
        assert_eq!(c.lookup(&key(2, 1)), Some(&5));
        assert_eq!(c.lookup(&key(2, 3)), Some(&9));
        assert_eq!(c.lookup(&key(2, 7)), Some(&9));
        assert_eq!(c.rules()[c.lookup_index(&key(2, 4)).unwrap()].name, "tie-first");
        // Same answers from the tuple-space search (forced by a wide rule).
        let mut wide = rules;
        wide.push(rule("wide", 0, 3, 0xffff_0000, 0xffff_0000));
        let t = Classifier::new(wide);
        assert_eq!(t.kind(), "tuple-space");
        for v in 0..16u64 {
            assert_eq!(t.lookup(&key(2, v)), c.lookup(&key(2, v)), "v={v}");
        }
        assert_eq!(t.rules()[t.lookup_index(&key(2, 4)).unwrap()].name, "tie-first");
        assert_eq!(Classifier::<u32>::new(vec![]).lookup(&key(2, 1)), None);
    }

    #[test]
    fn periodic_match_on_time_bits_over_a_simulated_clock() {
        // Bit 32 of the 32.32 time toggles every second.
        let (v0, m) = parse_bits("0", 32).unwrap();
        let (v1, _) = parse_bits("1", 32).unwrap();
        let c = Classifier::new(vec![rule("even", 1, field::TS_FIX, v0, m), rule("odd", 1, field::TS_FIX, v1, m)]);
        let mut seen = Vec::new();
        for ms in (0..4000u64).step_by(250) {
            let fix = ((ms / 1000) << 32) | (((ms % 1000) << 32) / 1000);
            seen.push(c.rules()[c.lookup_index(&key(field::TS_FIX, fix)).unwrap()].name.clone());
        }
        let expect: Vec<&str> = (0..16).map(|i| if (i / 4) % 2 == 0 { "even" } else { "odd" }).collect();
        assert_eq!(seen, expect);
    }

    #[test]
    fn large_exact_rule_sets_use_tuple_space() {
        let rules: Vec<Rule<u32>> = (0..10_000u64)
            .map(|i| {
                let mut r = rule(&format!("f{i}"), 10, field::PORTS, i << 16, 0xffff << 16);
                r.action = i as u32;
                r
            })
            .chain(std::iter::once(rule("catch", 1, field::PORTS, 0, 0)))
            .collect();
        let c = Classifier::new(rules);
        assert_eq!(c.kind(), "tuple-space");
        assert_eq!(c.lookup(&key(field::PORTS, 1234 << 16 | 7)), Some(&1234));
        assert_eq!(c.lookup(&key(field::PORTS, 20_000 << 16)), Some(&1));
    }

    /// The best rule by a linear scan (highest priority, then the earlier).
    fn scan(rules: &[Rule<u32>], k: &Key) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, r) in rules.iter().enumerate() {
            if r.matches(k) && best.is_none_or(|b| r.priority > rules[b].priority) {
                best = Some(i);
            }
        }
        best
    }

    #[test]
    fn narrow_and_wide_tables_agree_with_a_linear_scan() {
        // Masks over 2, 4, 5 and all 8 key words: packed tables of 4 and of
        // 8 words. Wider masks hold more rules and higher priorities, so
        // every table decides some keys; values are 0 or 1, so rules repeat
        // (equal key and priority: the earlier wins) and overlap.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let groups: [(&[usize], usize); 4] =
            [(&[2, 3], 3), (&[2, 3, 4, 5], 12), (&[0, 2, 3, 5, 7], 24), (&[0, 1, 2, 3, 4, 5, 6, 7], 200)];
        let mut rules = Vec::new();
        for (g, (words, n)) in groups.iter().enumerate() {
            for i in 0..*n {
                let (mut value, mut mask) = (Key::default(), Key::default());
                for &w in words.iter() {
                    mask.0[w] = 0xff;
                    value.0[w] = next(2);
                }
                let priority = g as u32 * 2 + next(3) as u32;
                rules.push(Rule { name: format!("g{g}r{i}"), priority, value, mask, action: rules.len() as u32 });
            }
        }
        let c = Classifier::new(rules.clone());
        assert_eq!(c.kind(), "tuple-space");
        let mut won = [0u32; 4];
        for _ in 0..20_000 {
            let k = Key(std::array::from_fn(|_| next(2) | next(2) << 8));
            let want = scan(&rules, &k);
            assert_eq!(c.lookup_index(&k), want, "{k:?}");
            if let Some(i) = want {
                won[rules[i].name[1..2].parse::<usize>().unwrap()] += 1;
            }
        }
        assert!(won.iter().all(|&w| w > 100), "every table decides keys: {won:?}");
    }

    /// IPv4 and IPv6 flow rules of one priority make two tuple groups; a
    /// key of one version cannot match the other group, so that group is
    /// skipped without a probe, and every answer stays the linear scan's.
    #[test]
    fn a_group_the_key_cannot_match_is_skipped() {
        let flow = |i: u64, v6: bool| {
            let (mut value, mut mask) = (Key::default(), Key::default());
            value.set_meta(field::IP_VERSION_SHIFT, 4, if v6 { 6 } else { 4 });
            mask.set_meta(field::IP_VERSION_SHIFT, 4, 0xf);
            // (IPv4 in the low 32 bits, as AM-PM's flow rules hold it.)
            let (addr, bits) = if v6 {
                (0x2001_0db8_0001_u128 << 80 | i as u128, u128::MAX)
            } else {
                (0x0a01_0000 | i as u128, 0xffff_ffff)
            };
            value.set_addr(field::SRC, addr);
            mask.set_addr(field::SRC, bits);
            value.0[field::PORTS] = 1024 + i;
            mask.0[field::PORTS] = 0xffff;
            (value, mask)
        };
        let rules: Vec<Rule<u32>> = (0..200u64)
            .map(|i| {
                let (value, mask) = flow(i / 2, i % 2 == 1);
                Rule { name: format!("r{i}"), priority: 5, value, mask, action: i as u32 }
            })
            .collect();
        let c = Classifier::new(rules.clone());
        let Lookup::Tuples { groups } = &c.lookup else { panic!("{}", c.kind()) };
        assert_eq!(groups.len(), 2);
        let (v4, v6) = (flow(7, false).0, flow(7, true).0);
        let (g4, g6) = if groups[0].may_match(&v4) { (&groups[0], &groups[1]) } else { (&groups[1], &groups[0]) };
        assert!(g4.may_match(&v4) && !g4.may_match(&v6) && g6.may_match(&v6) && !g6.may_match(&v4));
        for i in 0..120u64 {
            for v6 in [false, true] {
                let k = flow(i, v6).0;
                assert_eq!(c.lookup_index(&k), scan(&rules, &k), "flow {i} v6 {v6}");
            }
        }
        assert_eq!(c.lookup(&flow(3, true).0), Some(&7));
    }

    /// Keys that differ in one word never share a home, wherever the
    /// difference lies; and AM-PM's flow rules (source address and port,
    /// consecutive numbers) spread over the table: a probe reads about one
    /// slot.
    #[test]
    fn homes_separate_one_word_differences_and_flow_rules_probe_short() {
        let base = [0x0a01_0203u64, 17 << 24 | 4 << 48, 1024 | 80 << 16, 0xffff_0000_0000];
        let h0 = PackedTable::<u32, 4>::home(&base);
        for w in 0..4 {
            for bit in 0..64 {
                let mut k = base;
                k[w] ^= 1 << bit;
                assert_ne!(PackedTable::<u32, 4>::home(&k), h0, "word {w} bit {bit}");
            }
        }
        let rules: Vec<Rule<u32>> = (0..10_000u64)
            .map(|i| {
                let (mut value, mut mask) = (Key::default(), Key::default());
                value.set_addr(field::SRC, 0x0a01_0000 | i as u128);
                mask.set_addr(field::SRC, 0xffff_ffff);
                value.0[field::PORTS] = 1024 + i;
                mask.0[field::PORTS] = 0xffff;
                Rule { name: format!("f{i}"), priority: 1, value, mask, action: i as u32 }
            })
            .collect();
        let c = Classifier::new(rules.clone());
        let Lookup::Tuples { groups } = &c.lookup else { panic!("{}", c.kind()) };
        let GroupTable::Narrow(t) = &groups[0].table else { panic!("a 2-word mask packs narrow") };
        let mut probes = 0;
        for r in &rules {
            let words = t.pack(&r.value, &groups[0].mask);
            let (home, at) = (PackedTable::<u32, 4>::home(&words) & t.index_mask, t.find(&words));
            probes += (at.wrapping_sub(home) & t.index_mask) + 1;
            assert_eq!(c.lookup(&r.value), Some(&r.action));
        }
        let mean = probes as f64 / rules.len() as f64;
        assert!(mean < 1.5, "{mean} slots a lookup");
    }

    /// A key that may match one narrow group (AM-PM's flow rules) gets a
    /// probe that answers as its key lookup does: flows found, keys that
    /// pass the shared-bits screen and miss, keys every group's screen
    /// rules out. A key two groups may match, a wide group and a direct
    /// table get none.
    #[test]
    fn probes_answer_as_key_lookups() {
        let flow = |i: u64, proto: u64| {
            let (mut value, mut mask) = (Key::default(), Key::default());
            value.set_addr(field::SRC, 0x0a01_0000 | i as u128);
            mask.set_addr(field::SRC, 0xffff_ffff);
            value.0[field::PORTS] = 1024 + i;
            mask.0[field::PORTS] = 0xffff;
            value.set_meta(field::PROTO_SHIFT, 8, proto);
            mask.set_meta(field::PROTO_SHIFT, 8, 0xff);
            (value, mask)
        };
        let flows: Vec<Rule<u32>> = (0..5000u64)
            .map(|i| {
                let (value, mask) = flow(i, 17);
                Rule { name: format!("f{i}"), priority: 1 + (i % 3) as u32, value, mask, action: i as u32 }
            })
            .collect();
        // A second group, of source port 1030 (flow 6's) alone.
        let mut two = flows.clone();
        two.push(rule("port-only", 9, field::PORTS, 1030, 0xffff));
        // A later group no flow key may match (TCP where every flow is
        // UDP): the flows' group needs no screen of it.
        let mut disjoint = flows.clone();
        for i in 0..40u64 {
            let (mut value, mut mask) = flow(i, 6);
            mask.0[field::PORTS] = 0xff;
            value.0[field::PORTS] &= 0xff;
            disjoint.push(Rule { name: format!("tcp{i}"), priority: 1, value, mask, action: 90_000 + i as u32 });
        }
        for (rules, groups) in [(flows, 1), (two, 2), (disjoint, 1)] {
            let c = Classifier::new(rules);
            let Lookup::Tuples { groups: g } = &c.lookup else { panic!("tuple-space") };
            let alone: Vec<bool> = g.iter().map(|g| g.alone).collect();
            assert_eq!(
                alone,
                (if groups == 2 { [false, true] } else { [true, true] })[..g.len()],
                "{} groups",
                g.len()
            );
            let (mut found, mut screened, mut by_key) = (0, 0, 0);
            for i in (0..12_000u64).step_by(3) {
                for proto in [17, 6] {
                    let mut k = flow(i, proto).0;
                    k.0[field::TS_NS] = i * 977; // a word no rule looks at
                    match c.probe(&k) {
                        Some(p) => {
                            assert_eq!(c.lookup_probe(&p), c.lookup(&k), "flow {i} proto {proto}");
                            screened += (p.home == NO_PROBE) as u32;
                        }
                        None => by_key += 1,
                    }
                    found += c.lookup(&k).is_some() as u32;
                }
            }
            assert!(found > 1000 && screened > 2000, "found {found} screened {screened}");
            assert_eq!(by_key, if groups == 2 { 1 } else { 0 }, "only flow 6 may match both groups");
        }
        assert!(Classifier::new(vec![rule("d", 1, 2, 1, 1)]).probe(&key(2, 1)).is_none());
        let wide =
            Rule { name: "w".into(), priority: 1, value: Key([1; KEY_WORDS]), mask: Key([!0; KEY_WORDS]), action: 0 };
        assert!(Classifier::new(vec![wide]).probe(&Key([1; KEY_WORDS])).is_none());
    }

    #[test]
    fn bit_strings() {
        assert_eq!(parse_bits("01*", 34).unwrap(), (0b010 << 34, 0b110 << 34));
        assert_eq!(format_bits(0b010 << 34, 0b110 << 34, 34, 3), "01*");
        assert!(parse_bits("012", 0).is_err());
        assert!(parse_bits("", 0).is_err());
        assert!(parse_bits("11", 63).is_err());
    }
}
