//! Per-switch histograms (smartnic-int-sink §III-D, Fig. 6): for each node
//! ID a sink sees, the distribution of its hop latency, queue occupancy and
//! TX utilisation, and one of the end-to-end latency.
//!
//! Each worker counts into its own table (single writer: a relaxed load and
//! store per count, no locked read-modify-write); the control core sums the
//! workers' tables for a snapshot. A worker tracks at most a fixed number
//! of node IDs, given slots in the order it meets them; hops of further
//! nodes are counted, not binned.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::Release};

use crate::int::analytics::cache::METRICS;
use crate::int::analytics::node_index::NodeIndex;

/// How a metric's values fall into bins. The last bin holds everything at
/// or above its lower edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bins {
    /// `count` bins of `width`: [0, width), [width, 2 width), ...
    Linear { width: u32, count: u32 },
    /// Powers of two, each split into `sub` (a power of two) equal bins;
    /// below `sub`, one bin per value. Covers all of u32.
    Log2 { sub: u32 },
}

impl Bins {
    /// Bins a histogram of this kind has.
    pub fn len(&self) -> usize {
        match *self {
            Bins::Linear { count, .. } => count as usize,
            Bins::Log2 { sub } => (sub + (32 - sub.trailing_zeros()) * sub) as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bin of `v`.
    #[inline(always)]
    pub fn index(&self, v: u32) -> usize {
        match *self {
            Bins::Linear { width, count } => ((v / width.max(1)) as usize).min(count as usize - 1),
            Bins::Log2 { sub } => {
                if v < sub {
                    return v as usize;
                }
                let s = sub.trailing_zeros();
                let k = 31 - v.leading_zeros();
                ((k - s + 1) * sub + ((v >> (k - s)) - sub)) as usize
            }
        }
    }

    /// What `index_by` multiplies by for this kind: ceil(2^64 / width) for
    /// linear bins wider than 1, else 0. Exact for every u32: the product's
    /// error stays below 2^-32 < 1/width, so the floor never moves.
    pub fn reciprocal(&self) -> u64 {
        match *self {
            Bins::Linear { width, .. } if width > 1 => u64::MAX / width as u64 + 1,
            _ => 0,
        }
    }

    /// `index` with the division by a linear width done as a multiply by
    /// `reciprocal()` (a division takes tens of cycles, per value binned).
    #[inline(always)]
    pub fn index_by(&self, recip: u64, v: u32) -> usize {
        match *self {
            Bins::Linear { count, .. } => {
                let q = if recip == 0 { v as u64 } else { ((v as u128 * recip as u128) >> 64) as u64 };
                (q as usize).min(count as usize - 1)
            }
            Bins::Log2 { .. } => self.index(v),
        }
    }

    /// The smallest value of bin `i`.
    pub fn lower_edge(&self, i: usize) -> u64 {
        match *self {
            Bins::Linear { width, .. } => i as u64 * width as u64,
            Bins::Log2 { sub } => {
                let (sub, i) = (sub as u64, i as u64);
                if i < sub {
                    i
                } else {
                    (sub + i % sub) << (i / sub - 1)
                }
            }
        }
    }

    /// `linear:WIDTHxCOUNT` or `log2:SUB` (export and CLI).
    pub fn describe(&self) -> String {
        match *self {
            Bins::Linear { width, count } => format!("linear:{width}x{count}"),
            Bins::Log2 { sub } => format!("log2:{sub}"),
        }
    }
}

/// The histogram index of the end-to-end latency (after the per-hop metrics).
pub const E2E: usize = METRICS;

/// The bins of each histogram: per-hop metrics by index, then E2E.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistSpec {
    pub bins: [Bins; METRICS + 1],
    /// Node IDs a worker bins.
    pub nodes: usize,
}

impl HistSpec {
    /// Queue linear 1 x 512, tx_util linear 100 x 101, latencies log2 / 8.
    pub fn default_bins() -> [Bins; METRICS + 1] {
        let lat = Bins::Log2 { sub: 8 };
        [lat, Bins::Linear { width: 1, count: 512 }, Bins::Linear { width: 100, count: 101 }, lat]
    }
}

/// One worker's histograms, shared with the control core.
pub struct WorkerHist {
    pub spec: HistSpec,
    /// Where each per-hop metric's bins start in a node's block, and the
    /// block's length.
    offset: [usize; METRICS],
    per_node: usize,
    /// Each metric's `Bins::reciprocal`.
    recip: [u64; METRICS + 1],
    /// Node IDs by slot, `nodes_used` of them published.
    node_ids: Box<[AtomicU32]>,
    nodes_used: AtomicUsize,
    counts: Box<[AtomicU64]>,
    e2e: Box<[AtomicU64]>,
}

impl WorkerHist {
    pub fn new(spec: HistSpec) -> WorkerHist {
        let mut offset = [0; METRICS];
        let mut per_node = 0;
        for (m, o) in offset.iter_mut().enumerate() {
            *o = per_node;
            per_node += spec.bins[m].len();
        }
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        WorkerHist {
            spec,
            offset,
            per_node,
            recip: spec.bins.map(|b| b.reciprocal()),
            node_ids: (0..spec.nodes).map(|_| AtomicU32::new(0)).collect(),
            nodes_used: AtomicUsize::new(0),
            counts: zeros(spec.nodes * per_node),
            e2e: zeros(spec.bins[E2E].len()),
        }
    }

    /// Bytes the counters take.
    pub fn memory_bytes(spec: &HistSpec) -> usize {
        let per_node: usize = spec.bins[..METRICS].iter().map(Bins::len).sum();
        (spec.nodes * per_node + spec.bins[E2E].len()) * 8 + spec.nodes * 4
    }

    /// The node IDs binned so far, by slot.
    pub fn nodes(&self) -> Vec<u32> {
        let n = self.nodes_used.load(std::sync::atomic::Ordering::Acquire);
        self.node_ids[..n].iter().map(|a| a.load(Relaxed)).collect()
    }

    /// Adds histogram `metric` (E2E: the end-to-end one, `slot` unused) of
    /// node `slot` to `out` (one count per bin).
    pub fn add_to(&self, slot: usize, metric: usize, out: &mut [u64]) {
        let src = if metric == E2E {
            &self.e2e[..]
        } else {
            let at = slot * self.per_node + self.offset[metric];
            &self.counts[at..at + self.spec.bins[metric].len()]
        };
        for (o, c) in out.iter_mut().zip(src) {
            *o += c.load(Relaxed);
        }
    }
}

/// The worker's side: its shared table and the private index of its nodes.
pub struct HistWriter {
    pub table: std::sync::Arc<WorkerHist>,
    index: NodeIndex,
}

/// What a hop's binning found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeSlot {
    Slot(usize),
    /// The worker tracks `nodes` IDs already.
    Untracked,
}

impl HistWriter {
    pub fn new(table: std::sync::Arc<WorkerHist>) -> HistWriter {
        let index = NodeIndex::new(table.spec.nodes);
        HistWriter { table, index }
    }

    /// Node `id`'s slot, given one if there is room (and published to the
    /// control core).
    #[inline]
    pub fn slot(&mut self, id: u32) -> NodeSlot {
        match self.index.slot(id) {
            Some((s, false)) => NodeSlot::Slot(s),
            Some((s, true)) => {
                let t = &self.table;
                t.node_ids[s].store(id, Relaxed);
                t.nodes_used.store(s + 1, Release);
                NodeSlot::Slot(s)
            }
            None => NodeSlot::Untracked,
        }
    }

    /// Counts value `v` of per-hop `metric` at node `slot`.
    #[inline(always)]
    pub fn add(&self, slot: usize, metric: usize, v: u32) {
        let t = &*self.table;
        let i = slot * t.per_node + t.offset[metric] + t.spec.bins[metric].index_by(t.recip[metric], v);
        super::bump(&t.counts[i]);
    }

    /// Counts an end-to-end latency.
    #[inline(always)]
    pub fn add_e2e(&self, v: u32) {
        let t = &*self.table;
        super::bump(&t.e2e[t.spec.bins[E2E].index_by(t.recip[E2E], v)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The bin of `v` found by walking the edges (the definition).
    fn by_edges(b: &Bins, v: u32) -> usize {
        (0..b.len()).rev().find(|&i| b.lower_edge(i) <= v as u64).unwrap()
    }

    #[test]
    fn every_boundary_falls_in_the_bin_its_edges_say() {
        for b in [
            Bins::Linear { width: 1, count: 512 },
            Bins::Linear { width: 100, count: 101 },
            Bins::Linear { width: 7, count: 1 },
            Bins::Log2 { sub: 1 },
            Bins::Log2 { sub: 8 },
            Bins::Log2 { sub: 64 },
        ] {
            for i in 0..b.len() {
                let e = b.lower_edge(i);
                assert!(i == 0 || e > b.lower_edge(i - 1), "{b:?}: edges increase at {i}");
                for v in [e.saturating_sub(1), e, e + 1] {
                    if v <= u32::MAX as u64 {
                        assert_eq!(b.index(v as u32), by_edges(&b, v as u32), "{b:?} v = {v}");
                    }
                }
            }
            assert_eq!(b.index(u32::MAX), b.len() - 1, "{b:?}: the last bin takes the rest");
            assert_eq!(b.index(0), 0);
        }
        assert_eq!(Bins::Log2 { sub: 8 }.len(), 240);
        // The multiply stands for the division exactly, at every edge and
        // at the ends of u32.
        for width in [1u32, 2, 3, 7, 100, 1000, 65_537, 1 << 31, u32::MAX] {
            let b = Bins::Linear { width, count: u32::MAX };
            let r = b.reciprocal();
            for k in [0u64, 1, 2, 3, 99, 1000, (u32::MAX / width) as u64] {
                for v in [k * width as u64, (k * width as u64).wrapping_sub(1), k * width as u64 + 1, u32::MAX as u64] {
                    let Ok(v) = u32::try_from(v) else { continue };
                    assert_eq!(b.index_by(r, v), b.index(v), "width {width} v {v}");
                }
            }
        }
        assert_eq!(Bins::Log2 { sub: 8 }.lower_edge(239), 15 << 28);
        assert_eq!(Bins::Linear { width: 100, count: 101 }.index(10_000), 100);
    }

    #[test]
    fn a_worker_bins_per_node_until_its_slots_are_used() {
        let spec = HistSpec { bins: HistSpec::default_bins(), nodes: 2 };
        let t = Arc::new(WorkerHist::new(spec));
        let mut w = HistWriter::new(t.clone());
        assert_eq!(w.slot(70), NodeSlot::Slot(0));
        assert_eq!(w.slot(9), NodeSlot::Slot(1));
        assert_eq!(w.slot(70), NodeSlot::Slot(0));
        assert_eq!(w.slot(11), NodeSlot::Untracked);
        w.add(1, 1, 300); // node 9, queue 300
        w.add(1, 1, 300);
        w.add(0, 0, 1000); // node 70, hop latency 1000
        w.add_e2e(5);
        assert_eq!(t.nodes(), [70, 9]);
        let mut q = vec![0; 512];
        t.add_to(1, 1, &mut q);
        assert_eq!((q[300], q.iter().sum::<u64>()), (2, 2));
        let mut lat = vec![0; 240];
        t.add_to(0, 0, &mut lat);
        assert_eq!(lat[Bins::Log2 { sub: 8 }.index(1000)], 1);
        let mut e = vec![0; 240];
        t.add_to(0, E2E, &mut e);
        assert_eq!(e[5], 1);
        assert_eq!(WorkerHist::memory_bytes(&spec), (2 * (240 + 512 + 101) + 240) * 8 + 8);
    }
}
