//! The INT sink's flow cache H_P (smartnic-int-sink §III-B): one worker's
//! per-flow state, set-associative, with the exact least-recently-updated
//! order of each row's ways.
//!
//! A row is one cache line: the ways' 32-bit tags (hash bits the row index
//! does not use), their order as 4-bit way indexes in one u64 (most
//! recently updated first) and a valid bitmap. A lookup reads that line,
//! then only the entry whose tag matched, where the full key confirms it.
//! Entries and their per-hop aggregates live in arrays of their own.

use crate::parse::FlowKey;

/// Most ways a row has (12 x 4-bit indexes fit the order word).
pub const MAX_WAYS: usize = 12;
/// Most rows a cache has.
pub const MAX_ROWS: usize = 1 << 22;
/// Most hops an entry tracks.
pub const MAX_HOPS: usize = 16;

/// The metrics an entry aggregates per hop, by index.
pub const HOP_LATENCY: usize = 0;
pub const QUEUE: usize = 1;
pub const TX_UTIL: usize = 2;
pub const METRICS: usize = 3;
/// Their names, by index (export and CLI).
pub const METRIC_NAMES: [&str; METRICS] = ["hop_latency", "queue", "tx_util"];

#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Row {
    tags: [u32; MAX_WAYS],
    /// Way indexes, most recently updated at the low nibble.
    order: u64,
    /// Bit per way holding a flow.
    valid: u16,
}

impl Row {
    fn new(ways: usize) -> Row {
        Row { tags: [0; MAX_WAYS], order: (0..ways as u64).fold(0, |o, w| o | w << (4 * w)), valid: 0 }
    }

    /// Moves way `w` to the front of the order.
    #[inline]
    fn move_to_front(&mut self, w: usize, ways: usize) {
        // The position of `w`: the lowest zero nibble of order ^ w repeated
        // (exact for the lowest; nibbles past `ways` are never below it).
        const ONES: u64 = 0x1111_1111_1111_1111;
        let x = self.order ^ (w as u64).wrapping_mul(ONES);
        let zero = x.wrapping_sub(ONES) & !x & (ONES << 3);
        let p = (zero.trailing_zeros() / 4) as usize;
        debug_assert!(p < ways, "way {w} is in the order");
        if p == 0 {
            return;
        }
        let below = self.order & ((1u64 << (4 * p)) - 1);
        let above = self.order & !((1u64 << (4 * (p + 1))) - 1);
        self.order = above | below << 4 | w as u64;
    }

    /// The least recently updated way.
    #[inline]
    fn last(&self, ways: usize) -> usize {
        ((self.order >> (4 * (ways - 1))) & 0xf) as usize
    }
}

/// One value's aggregate: the latest, and the sum and count of the present
/// ones (an average is `sum / count`, worked out on export).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Agg {
    pub last: u32,
    pub sum: u64,
    pub count: u64,
}

impl Agg {
    #[inline(always)]
    pub fn add(&mut self, v: u32) {
        self.last = v;
        self.sum += v as u64;
        self.count += 1;
    }
}

/// One hop of a flow's path (source side first): the node the latest
/// packet named there, and each metric's aggregate. One cache line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct HopAgg {
    pub node_id: u32,
    pub last: [u32; METRICS],
    pub sum: [u64; METRICS],
    pub count: [u64; METRICS],
}

impl HopAgg {
    pub fn metric(&self, m: usize) -> Agg {
        Agg { last: self.last[m], sum: self.sum[m], count: self.count[m] }
    }
}

/// A flow's entry: two cache lines, the first holding what every packet
/// reads (the key, the report interval's time) and the time aging reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct FlowEntry {
    /// The flow as its source saw it (`stage::original_flow`).
    pub key: FlowKey,
    /// When the last report of the flow's interval went out (0: none).
    pub report_tsc: u64,
    pub last_tsc: u64,
    /// Packets the analytics took.
    pub packets: u64,
    pub first_tsc: u64,
    /// When the last active-timeout snapshot went out (else `first_tsc`).
    pub snap_tsc: u64,
    /// End-to-end latency: the sum of a packet's hop latencies.
    pub e2e: Agg,
    /// Hops in the latest packet's stack.
    pub hops: u8,
    /// Leading hop aggregates that hold something (at most `max_hops`).
    pub tracked: u8,
    /// A hash of the latest packet's node-ID list (path change events).
    pub path_hash: u32,
    /// Edge-mode T events that fired and wait for their reset: bit
    /// 3 x hop + metric, and `E2E_DISARMED`.
    pub disarmed: u64,
}

/// `FlowEntry::disarmed`'s bit for the end-to-end latency.
pub const E2E_DISARMED: u64 = 1 << (3 * MAX_HOPS);

/// `FlowEntry::disarmed`'s bit for the link into hop `p` (1..MAX_HOPS).
pub const fn link_disarmed(p: usize) -> u64 {
    E2E_DISARMED << p
}

/// Why an entry left the cache (or was copied out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reason {
    /// Its row was full and it was the least recently updated.
    Lru,
    /// Idle for `idle_timeout`.
    Aged,
    /// A snapshot of a long-lived flow (`active_timeout`); the entry stays.
    Active,
    /// `intctl int flows flush`.
    Flush,
    /// The switch is stopping.
    Stop,
}

impl Reason {
    pub const ALL: [Reason; 5] = [Reason::Lru, Reason::Aged, Reason::Active, Reason::Flush, Reason::Stop];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Lru => "lru",
            Reason::Aged => "aged",
            Reason::Active => "active",
            Reason::Flush => "flush",
            Reason::Stop => "stop",
        }
    }

    pub fn from_u8(v: u8) -> Option<Reason> {
        Reason::ALL.get(v as usize).copied()
    }
}

/// What `touch` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    Hit,
    /// A new entry in a free way.
    Inserted,
    /// A new entry in place of the row's least recently updated one.
    Replaced,
}

/// `n` copies of `v`, the memory backed by transparent huge pages where the
/// kernel has them: lookups land anywhere in tables of many megabytes, and
/// 4 KiB pages would cost a TLB miss on most of them.
fn huge_boxed<T: Clone>(n: usize, v: T) -> Box<[T]> {
    let mut b = Vec::with_capacity(n);
    crate::dpdk::advise_hugepages(b.spare_capacity_mut());
    b.resize(n, v);
    b.into_boxed_slice()
}

pub struct FlowCache {
    rows: Box<[Row]>,
    entries: Box<[FlowEntry]>,
    hops: Box<[HopAgg]>,
    ways: usize,
    max_hops: usize,
    mask: usize,
    len: usize,
    /// The next row the sweep visits.
    sweep_at: usize,
}

impl FlowCache {
    /// Bytes one entry takes: its row's share, the entry and its hops.
    pub fn entry_bytes(ways: usize, max_hops: usize) -> usize {
        std::mem::size_of::<Row>() / ways.max(1)
            + std::mem::size_of::<FlowEntry>()
            + max_hops * std::mem::size_of::<HopAgg>()
    }

    /// Bytes a cache of this geometry allocates.
    pub fn memory_bytes(rows: usize, ways: usize, max_hops: usize) -> usize {
        rows * std::mem::size_of::<Row>()
            + rows * ways * (std::mem::size_of::<FlowEntry>() + max_hops * std::mem::size_of::<HopAgg>())
    }

    /// `rows` (rounded up to a power of two, at most MAX_ROWS) x `ways`
    /// (1..=MAX_WAYS) entries tracking `max_hops` (0..=MAX_HOPS) hops each.
    /// The configuration checks the geometry and its memory first.
    pub fn new(rows: usize, ways: usize, max_hops: usize) -> FlowCache {
        let rows = rows.clamp(1, MAX_ROWS).next_power_of_two();
        let ways = ways.clamp(1, MAX_WAYS);
        let max_hops = max_hops.min(MAX_HOPS);
        FlowCache {
            rows: huge_boxed(rows, Row::new(ways)),
            entries: huge_boxed(rows * ways, FlowEntry::default()),
            hops: huge_boxed(rows * ways * max_hops, HopAgg::default()),
            ways,
            max_hops,
            mask: rows - 1,
            len: 0,
            sweep_at: 0,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    pub fn ways(&self) -> usize {
        self.ways
    }

    pub fn max_hops(&self) -> usize {
        self.max_hops
    }

    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Entries holding a flow.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn split(&self, hash: u64) -> (usize, u32) {
        (hash as usize & self.mask, (hash >> 32) as u32)
    }

    /// Starts loading the row `hash` picks (a burst's prefetch pass, so
    /// that the rows of a burst's flows load together).
    #[inline(always)]
    pub fn prefetch_row(&self, hash: u64) {
        crate::dpdk::prefetch(&self.rows[hash as usize & self.mask]);
    }

    /// Starts loading the entry (and its hops) that `hash`'s row names by
    /// its tag: the second level of a burst's prefetch, once the row is in.
    #[inline(always)]
    pub fn prefetch_entry(&self, hash: u64) {
        let (r, tag) = self.split(hash);
        let hits = self.tag_hits(r, tag);
        if hits != 0 {
            let i = r * self.ways + hits.trailing_zeros() as usize;
            crate::dpdk::prefetch_all(&self.entries[i]);
            for h in &self.hops[i * self.max_hops..(i + 1) * self.max_hops] {
                crate::dpdk::prefetch(h);
            }
        }
    }

    /// The valid ways of row `r` whose tag is `tag`, as bits: the tags
    /// compared all at once (no branch per way).
    #[inline(always)]
    fn tag_hits(&self, r: usize, tag: u32) -> u16 {
        let row = &self.rows[r];
        let mut hits = 0u16;
        for (w, t) in row.tags.iter().enumerate() {
            hits |= ((*t == tag) as u16) << w;
        }
        hits & row.valid
    }

    /// The way of `row` holding `key`: the key of each way whose tag
    /// matched.
    #[inline(always)]
    fn find_in(&self, r: usize, tag: u32, key: &FlowKey) -> Option<usize> {
        let mut hits = self.tag_hits(r, tag);
        let base = r * self.ways;
        while hits != 0 {
            let w = hits.trailing_zeros() as usize;
            if self.entries[base + w].key == *key {
                return Some(w);
            }
            hits &= hits - 1;
        }
        None
    }

    /// The flow's entry index, moved to the front of its row's order; a
    /// new flow gets a free way, or the least recently updated one's after
    /// `evict` has seen it. A new entry starts at `now` with nothing counted.
    #[inline]
    pub fn touch(
        &mut self,
        key: &FlowKey,
        hash: u64,
        now: u64,
        evict: impl FnOnce(&FlowEntry, &[HopAgg]),
    ) -> (usize, Touch) {
        let (r, tag) = self.split(hash);
        let ways = self.ways;
        if let Some(w) = self.find_in(r, tag, key) {
            let i = r * ways + w;
            self.rows[r].move_to_front(w, ways);
            return (i, Touch::Hit);
        }
        let row = &mut self.rows[r];
        let free = !row.valid & ((1u16 << ways) - 1);
        let (w, how) = if free != 0 {
            self.len += 1;
            (free.trailing_zeros() as usize, Touch::Inserted)
        } else {
            let w = row.last(ways);
            let i = r * ways + w;
            evict(&self.entries[i], &self.hops[i * self.max_hops..(i + 1) * self.max_hops]);
            (w, Touch::Replaced)
        };
        let row = &mut self.rows[r];
        row.tags[w] = tag;
        row.valid |= 1 << w;
        row.move_to_front(w, ways);
        let i = r * ways + w;
        self.entries[i] = FlowEntry { key: *key, first_tsc: now, last_tsc: now, snap_tsc: now, ..FlowEntry::default() };
        self.hops[i * self.max_hops..(i + 1) * self.max_hops].fill(HopAgg::default());
        (i, how)
    }

    /// Entry `i` (from `touch`) and its hops, to update.
    #[inline(always)]
    pub fn entry_mut(&mut self, i: usize) -> (&mut FlowEntry, &mut [HopAgg]) {
        let h = self.max_hops;
        (&mut self.entries[i], &mut self.hops[i * h..(i + 1) * h])
    }

    /// The flow's entry and hops, if it has one (no change to the order).
    pub fn get(&self, key: &FlowKey, hash: u64) -> Option<(&FlowEntry, &[HopAgg])> {
        let (r, tag) = self.split(hash);
        let i = r * self.ways + self.find_in(r, tag, key)?;
        Some((&self.entries[i], &self.hops[i * self.max_hops..(i + 1) * self.max_hops]))
    }

    /// Visits the next `rows` rows: an entry idle for `idle` ticks or more
    /// (0: never) goes to `export` as aged and is freed; one whose last
    /// snapshot is `active` ticks old or more (0: never) goes as a snapshot
    /// and stays. Returns the entries exported.
    pub fn sweep(
        &mut self,
        rows: usize,
        now: u64,
        idle: u64,
        active: u64,
        mut export: impl FnMut(&FlowEntry, &[HopAgg], Reason),
    ) -> usize {
        let mut n = 0;
        for _ in 0..rows.min(self.rows.len()) {
            let r = self.sweep_at;
            self.sweep_at = (r + 1) & self.mask;
            let mut valid = self.rows[r].valid;
            while valid != 0 {
                let w = valid.trailing_zeros() as usize;
                valid &= valid - 1;
                let i = r * self.ways + w;
                let hops = &self.hops[i * self.max_hops..(i + 1) * self.max_hops];
                let e = &mut self.entries[i];
                if idle > 0 && now.wrapping_sub(e.last_tsc) >= idle {
                    export(e, hops, Reason::Aged);
                    self.rows[r].valid &= !(1 << w);
                    self.len -= 1;
                    n += 1;
                } else if active > 0 && now.wrapping_sub(e.snap_tsc) >= active {
                    export(e, hops, Reason::Active);
                    e.snap_tsc = now;
                    n += 1;
                }
            }
        }
        n
    }

    /// Exports every entry with `reason` and frees it. Returns how many.
    pub fn flush(&mut self, reason: Reason, mut export: impl FnMut(&FlowEntry, &[HopAgg], Reason)) -> usize {
        let mut n = 0;
        for r in 0..self.rows.len() {
            let mut valid = self.rows[r].valid;
            while valid != 0 {
                let w = valid.trailing_zeros() as usize;
                valid &= valid - 1;
                let i = r * self.ways + w;
                export(&self.entries[i], &self.hops[i * self.max_hops..(i + 1) * self.max_hops], reason);
                n += 1;
            }
            self.rows[r].valid = 0;
        }
        self.len = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FlowKey {
        FlowKey::v4([10, 0, (i >> 8) as u8, i as u8], [10, 1, 0, 1], 17, 1000 + i as u16, 53)
    }

    /// A hash that puts every flow in row 0 with its own tag.
    fn row0(i: u32) -> u64 {
        (i as u64 + 1) << 32
    }

    #[test]
    fn the_order_word_moves_to_front_exactly() {
        let mut r = Row::new(12);
        assert_eq!(r.last(12), 11);
        r.move_to_front(11, 12);
        assert_eq!(r.order & 0xf, 11);
        assert_eq!(r.last(12), 10);
        r.move_to_front(0, 12);
        r.move_to_front(5, 12);
        // Front to back: 5, 0, 11, 1, 2, 3, 4, 6, 7, 8, 9, 10.
        let order: Vec<u64> = (0..12).map(|p| (r.order >> (4 * p)) & 0xf).collect();
        assert_eq!(order, [5, 0, 11, 1, 2, 3, 4, 6, 7, 8, 9, 10]);
        r.move_to_front(5, 12);
        assert_eq!((r.order >> 4) & 0xf, 0, "the front staying at the front changes nothing");
        let mut one = Row::new(1);
        one.move_to_front(0, 1);
        assert_eq!((one.order, one.last(1)), (0, 0));
    }

    #[test]
    fn a_full_row_evicts_exactly_the_least_recently_updated() {
        let ways = 4;
        let mut c = FlowCache::new(8, ways, 2);
        for i in 0..ways as u32 {
            let (_, how) = c.touch(&key(i), row0(i), 100 + i as u64, |_, _| panic!("room left"));
            assert_eq!(how, Touch::Inserted);
            let at = c.touch(&key(i), row0(i), 100 + i as u64, |_, _| unreachable!()).0;
            let (e, h) = c.entry_mut(at);
            e.packets += 1;
            h[0].add(0, i * 10);
        }
        // Updating flow 0 makes flow 1 the least recently updated.
        assert_eq!(c.touch(&key(0), row0(0), 200, |_, _| unreachable!()).1, Touch::Hit);
        let mut evicted = None;
        let (i, how) = c.touch(&key(9), row0(9), 300, |e, h| evicted = Some((*e, h.to_vec())));
        assert_eq!(how, Touch::Replaced);
        let (e, h) = evicted.expect("one evicted");
        assert_eq!(e.key, key(1));
        assert_eq!((e.packets, e.first_tsc), (1, 101));
        assert_eq!(h[0].metric(HOP_LATENCY), Agg { last: 10, sum: 10, count: 1 });
        let (e, h) = c.entry_mut(i);
        assert_eq!((e.key, e.packets, e.first_tsc, h[0]), (key(9), 0, 300, HopAgg::default()), "starts afresh");
        assert!(c.get(&key(1), row0(1)).is_none());
        assert_eq!(c.len(), ways);
        // Then 2, 3, 0 in that order.
        let mut gone = Vec::new();
        for j in 10..13 {
            c.touch(&key(j), row0(j), 400, |e, _| gone.push(e.key));
        }
        assert_eq!(gone, [key(2), key(3), key(0)]);
    }

    impl HopAgg {
        fn add(&mut self, m: usize, v: u32) {
            self.last[m] = v;
            self.sum[m] += v as u64;
            self.count[m] += 1;
        }
    }

    #[test]
    fn a_matching_tag_is_confirmed_against_the_key() {
        let mut c = FlowCache::new(1, 2, 0);
        let h = 7u64 << 32;
        c.touch(&key(1), h, 1, |_, _| {});
        assert_eq!(c.touch(&key(2), h, 2, |_, _| {}).1, Touch::Inserted, "same tag, other flow");
        assert_eq!(c.touch(&key(1), h, 3, |_, _| {}).1, Touch::Hit);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn aging_frees_exactly_the_idle_entries_and_snapshots_keep_them() {
        let mut c = FlowCache::new(4, 3, 1);
        for i in 0..6u32 {
            c.touch(&key(i), i as u64 | (i as u64 + 1) << 32, 1_000 + i as u64 * 100, |_, _| unreachable!());
        }
        assert_eq!(c.len(), 6);
        // At 1_600 with idle 300: last updates at 1_000..=1_500, so flows 0-3
        // (idle 600, 500, 400, 300) go, 4 and 5 (200, 100) stay.
        let mut out = Vec::new();
        let n = c.sweep(4, 1_600, 300, 0, |e, _, r| out.push((e.key, r)));
        out.sort_by_key(|(k, _)| k.src_port());
        assert_eq!(n, 4);
        assert_eq!(out, (0..4).map(|i| (key(i), Reason::Aged)).collect::<Vec<_>>());
        assert_eq!(c.len(), 2);
        assert!(c.get(&key(4), 4 | 5 << 32).is_some());
        // Active snapshots: 4 and 5 were first seen 500 and 600 ago.
        let mut snaps = Vec::new();
        c.sweep(4, 2_000, 0, 500, |e, _, r| snaps.push((e.key, r)));
        snaps.sort_by_key(|(k, _)| k.src_port());
        assert_eq!(snaps, [(key(4), Reason::Active), (key(5), Reason::Active)]);
        assert_eq!(c.len(), 2, "snapshots keep their entries");
        assert_eq!(c.sweep(4, 2_100, 0, 500, |_, _, _| panic!("snapshot just taken")), 0);
        // A sweep visits at most the rows asked for, then goes on from there:
        // row 0 holds flow 4, row 1 flow 5, rows 2 and 3 nothing now.
        let mut aged = Vec::new();
        for rows in [1, 1, 2] {
            c.sweep(rows, 9_000, 1, 0, |e, _, _| aged.push(e.key));
            aged.push(FlowKey::default());
        }
        assert_eq!(aged, [key(4), FlowKey::default(), key(5), FlowKey::default(), FlowKey::default()]);
    }

    #[test]
    fn flush_exports_every_entry_and_empties_the_cache() {
        let mut c = FlowCache::new(16, 4, 0);
        for i in 0..40u32 {
            c.touch(&key(i), key(i).hash64(), 1, |_, _| {});
        }
        let held = c.len();
        let mut seen = Vec::new();
        assert_eq!(c.flush(Reason::Flush, |e, _, r| seen.push((e.key, r))), held);
        assert!(seen.iter().all(|(_, r)| *r == Reason::Flush));
        assert!(c.is_empty());
        assert_eq!(c.flush(Reason::Stop, |_, _, _| panic!("empty")), 0);
    }

    #[test]
    fn geometry_and_memory() {
        let c = FlowCache::new(1000, 20, 40);
        assert_eq!((c.rows(), c.ways(), c.max_hops(), c.capacity()), (1024, MAX_WAYS, MAX_HOPS, 1024 * 12));
        assert_eq!(std::mem::size_of::<Row>(), 64, "a row is one cache line");
        assert_eq!(std::mem::size_of::<HopAgg>(), 64);
        assert_eq!(std::mem::size_of::<FlowEntry>(), 128, "two cache lines");
        assert_eq!(std::mem::offset_of!(FlowEntry, last_tsc), 56, "the per-packet fields in the first line");
        let per = FlowCache::entry_bytes(12, 5);
        assert_eq!(FlowCache::memory_bytes(1 << 16, 12, 5) / ((1 << 16) * 12), per);
    }
}
