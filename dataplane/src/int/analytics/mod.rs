//! INT sink analytics (smartnic-int-sink §III-B): every INT packet a sink
//! takes updates its flow's entry in the worker's flow cache (packets, first
//! and last time, per hop the latest value and the sum and count of hop
//! latency, queue occupancy and TX utilisation, end-to-end latency). Entries
//! leave for the control core through R_G (`flow_ring`) when their row needs
//! the way (LRU), when idle, as active snapshots, on a flush and at stop.
//!
//! Without `[int.analytics]` the same cache, tracking no hops and exporting
//! nothing, keeps the per-flow report interval.

pub mod cache;
pub mod cnf;
pub mod detect;
pub mod events;
pub mod flow_ring;
pub mod histogram;
pub mod node_index;

use crate::counters::{CounterValues, Event};
use crate::int::stage::WallClock;
use crate::int::watch::WatchFields;
use crate::parse::FlowKey;
use crate::wire::int_md::{hop_words, INSTR_BYTES};
use crate::wire::telemetry_report::{FLAG_F, FLAG_Q};
use cache::{FlowCache, FlowEntry, HopAgg, Reason, Touch, E2E_DISARMED, HOP_LATENCY, METRICS, QUEUE, TX_UTIL};
use cnf::CnfPass;
use detect::{decide, DetectSpec, FlowDetect, NodeRegs, PerHopPass, Regs, RuleCounters, Sums, MAX_RULES};
use events::{bit, check, EventProducer, EventRecord, EventSpec, HOP_E2E};
use flow_ring::{FlowHead, FlowProducer};
use histogram::{HistWriter, NodeSlot};

/// Where a hop's values lie, for one instruction bitmap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HopLayout {
    /// Byte offsets in a hop of the node ID and of each metric.
    pub node_id: Option<u8>,
    pub metric: [Option<u8>; METRICS],
    /// Both timestamps' offsets (8 bytes each), when the bitmap has both.
    pub ts: Option<(u8, u8)>,
    /// Bytes a hop takes by the bitmap.
    pub hop_len: usize,
}

impl HopLayout {
    pub fn of(bitmap: u16) -> HopLayout {
        let at = |bit: usize| -> Option<u8> {
            (bitmap & (0x8000 >> bit) != 0)
                .then(|| (0..bit).filter(|b| bitmap & (0x8000 >> b) != 0).map(|b| INSTR_BYTES[b]).sum::<usize>() as u8)
        };
        let mut m = [None; METRICS];
        (m[HOP_LATENCY], m[QUEUE], m[TX_UTIL]) = (at(2), at(3), at(7));
        let ts = at(4).zip(at(5));
        HopLayout { node_id: at(0), metric: m, ts, hop_len: hop_words(bitmap) * 4 }
    }

    /// A hop's (ingress, egress) timestamps, when the bitmap has both.
    #[inline(always)]
    pub fn timestamps(&self, hop: &[u8]) -> Option<(u64, u64)> {
        let (i, e) = self.ts?;
        let w = |o: u8| u64::from_be_bytes(hop[o as usize..o as usize + 8].try_into().expect("8 bytes"));
        Some((w(i), w(e)))
    }

    /// Metric `m` of a hop: None when the bitmap lacks it or it is all ones
    /// (unknown). Queue is the 24-bit occupancy.
    #[inline(always)]
    pub fn value(&self, hop: &[u8], m: usize) -> Option<Option<u32>> {
        let o = self.metric[m]? as usize;
        let w = u32::from_be_bytes(hop[o..o + 4].try_into().expect("4 bytes"));
        let (v, ones) = if m == QUEUE { (w & 0xff_ffff, 0xff_ffff) } else { (w, u32::MAX) };
        Some((v != ones).then_some(v))
    }
}

/// How a worker's analytics are built.
pub struct AnalyticsSetup {
    pub rows: usize,
    pub ways: usize,
    /// Hops tracked per entry; 0 with `ring` None: the report interval only.
    pub max_hops: usize,
    pub idle_tsc: u64,
    pub active_tsc: u64,
    /// R_G; None: analytics off, nothing exported.
    pub ring: Option<FlowProducer>,
    /// R_I; None: no events.
    pub events: Option<EventProducer>,
    /// Per-node histograms; None: off.
    pub hist: Option<HistWriter>,
    /// Detection rules' counters by slot (MAX_RULES; shared with the control core).
    pub rule_counters: std::sync::Arc<[RuleCounters]>,
    /// per_hop's registers per flow and tracked hop instead of per node ID.
    pub per_hop_flow: bool,
}

/// Counts one into a counter the worker alone writes and the control core
/// reads: a relaxed load and store, no locked read-modify-write.
#[inline(always)]
pub(crate) fn bump(c: &std::sync::atomic::AtomicU64) {
    use std::sync::atomic::Ordering::Relaxed;
    c.store(c.load(Relaxed) + 1, Relaxed);
}

/// A flow cache whose flows in use hold more than this many bytes (row,
/// entry, hops) gets a burst prefetch pass: fewer of them stay in a core's
/// caches between their packets.
const PREFETCH_BYTES: usize = 1 << 20;

/// Node IDs the per_hop registers hold per worker.
pub const PER_HOP_NODES: usize = 4096;

/// Counters for every detection rule slot.
pub fn rule_counters() -> std::sync::Arc<[RuleCounters]> {
    (0..MAX_RULES).map(|_| RuleCounters::default()).collect()
}

impl AnalyticsSetup {
    /// The report interval's cache only (no `[int.analytics]`): `slots`
    /// entries, 8 ways.
    pub fn interval_only(slots: usize) -> AnalyticsSetup {
        let ways = 8.min(slots.max(1));
        AnalyticsSetup {
            rows: slots.max(1) / ways,
            ways,
            max_hops: 0,
            idle_tsc: 0,
            active_tsc: 0,
            ring: None,
            events: None,
            hist: None,
            rule_counters: rule_counters(),
            per_hop_flow: false,
        }
    }
}

/// A copy of one flow's entry (`intctl int flow show`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSnapshot {
    pub head: FlowHead,
    pub hops: [HopAgg; cache::MAX_HOPS],
}

pub struct Analytics {
    pub cache: FlowCache,
    ring: Option<FlowProducer>,
    events: Option<EventProducer>,
    hist: Option<HistWriter>,
    /// Per entry, its detection state; the per_hop registers; rule counters.
    det: Box<[FlowDetect]>,
    regs: NodeRegs,
    /// `per_hop_scope = "flow"`: entry i's registers at `i * max_hops`.
    flow_regs: Box<[u32]>,
    /// Entry i's link latencies into its tracked hops in its last packet,
    /// plus one (0: none; zeroed pages cost nothing until written), at
    /// `i * max_hops`.
    link_prev: Box<[u32]>,
    max_hops: usize,
    rule_counters: std::sync::Arc<[RuleCounters]>,
    clock: WallClock,
    idle_tsc: u64,
    active_tsc: u64,
    /// Ticks a full sweep may take, and the sweep's progress.
    sweep_tsc: u64,
    last_sweep: u64,
    /// The layout of the last bitmap seen (a domain has one or a few).
    layout: (u16, HopLayout),
}

/// How long a stopping worker waits, in all, for room in R_G.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Rows one poll sweeps at most: a bound on the work between two polls.
const SWEEP_MAX_ROWS: usize = 4096;

impl Analytics {
    pub fn new(s: AnalyticsSetup, clock: WallClock, hz: u64) -> Analytics {
        let cache = FlowCache::new(s.rows, s.ways, s.max_hops);
        // Detection needs the analytics (the config says so).
        let det_entries = if s.ring.is_some() { cache.capacity() } else { 0 };
        // A full sweep within idle_timeout / 4 (or active_timeout / 4).
        let period = match (s.idle_tsc, s.active_tsc) {
            (0, 0) => 0,
            (0, a) => a / 4,
            (i, 0) => i / 4,
            (i, a) => i.min(a) / 4,
        };
        Analytics {
            cache,
            ring: s.ring,
            events: s.events,
            hist: s.hist,
            det: vec![FlowDetect::default(); det_entries].into_boxed_slice(),
            regs: NodeRegs::new(if s.max_hops > 0 && !s.per_hop_flow { PER_HOP_NODES } else { 1 }),
            flow_regs: vec![0; if s.per_hop_flow { det_entries * s.max_hops } else { 0 }].into_boxed_slice(),
            link_prev: vec![0; det_entries * s.max_hops].into_boxed_slice(),
            max_hops: s.max_hops,
            rule_counters: s.rule_counters,
            clock,
            idle_tsc: s.idle_tsc,
            active_tsc: s.active_tsc,
            sweep_tsc: period.max(hz / 1000).max(1),
            last_sweep: 0,
            layout: (0, HopLayout::of(0)),
        }
    }

    /// Whether packets update hop aggregates and entries are exported.
    #[inline(always)]
    pub fn tracking(&self) -> bool {
        self.ring.is_some()
    }

    /// Whether a sink's packets look the cache up (tracking, or a report
    /// interval) and its flows in use hold more than a core's caches keep,
    /// so that a burst's rows and entries are worth prefetching. (By the
    /// flows in use, not the cache's size: a few thousand flows in a cache
    /// of millions of entries stay in cache.)
    #[inline(always)]
    pub fn worth_prefetching(&self, interval: u64) -> bool {
        let per_flow = 64 + std::mem::size_of::<FlowEntry>() + self.max_hops * std::mem::size_of::<HopAgg>();
        (self.tracking() || interval > 0) && self.cache.len() * per_flow > PREFETCH_BYTES
    }

    /// One INT packet of flow `key` (hash `hash`) reaching the sink at `now`
    /// with a `stack` of `hops` hops by `bitmap`, `hop_ml` words each: its
    /// entry is updated, it raises the events `spec` turns on, and the
    /// flow's detection rule (looked up by `fields` on its first packet and
    /// after a rule change) decides its report; without one, a report is
    /// due once per `interval` (0: every packet). Returns (due, the report's
    /// flags).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn packet(
        &mut self,
        key: &FlowKey,
        hash: u64,
        now: u64,
        stack: &[u8],
        (bitmap, hop_ml, hops): (u16, usize, usize),
        interval: u64,
        (spec, detect): (&EventSpec, &DetectSpec),
        fields: impl FnOnce() -> WatchFields,
        c: &mut CounterValues,
    ) -> (bool, u8) {
        let Analytics { cache, ring, clock, .. } = self;
        let (i, how) = cache.touch(key, hash, now, |e, h| export(ring, clock, e, h, Reason::Lru, None, c));
        c.event(match how {
            Touch::Hit => Event::IntFlowHit,
            Touch::Inserted | Touch::Replaced => Event::IntFlowInserted,
        });
        // Entry i's slots in the per-hop arrays beside the cache.
        let slots = i * self.max_hops..(i + 1) * self.max_hops;
        if how != Touch::Hit {
            if let Some(l) = self.link_prev.get_mut(slots.clone()) {
                l.fill(0);
            }
        }
        let rule = if detect.rules.is_empty() || self.det.is_empty() {
            None
        } else {
            let st = &mut self.det[i];
            if how != Touch::Hit || st.version != detect.version + 1 {
                // A new flow, or the rules changed: its rule anew, state at 0.
                let rule = detect.lookup(&fields()).map_or(0, |r| r as u8 + 1);
                *st = FlowDetect { version: detect.version + 1, rule, ..FlowDetect::default() };
                if let Some(r) = self.flow_regs.get_mut(slots.clone()) {
                    r.fill(0);
                }
            }
            detect.rules.get((st.rule as usize).wrapping_sub(1))
        };
        let mut sums = Sums::default();
        let mut per_hop_fired = false;
        let mut cnf = match rule {
            Some(r) => r.cnf.as_ref().map(|c| CnfPass::new(&c.1)),
            None => None,
        };
        if self.ring.is_some() {
            if self.layout.0 != bitmap {
                self.layout = (bitmap, HopLayout::of(bitmap));
            }
            let layout = &self.layout.1;
            if layout.hop_len != hop_ml * 4 {
                // Offsets by the bitmap would not be the stack's.
                c.event(Event::IntAnalyticsBadHopMl);
            } else {
                let (e, aggs) = self.cache.entry_mut(i);
                let mut side = Side {
                    ev: match &mut self.events {
                        Some(ring) if spec.any() => Some(Raise { spec, ring, clock: &self.clock }),
                        _ => None,
                    },
                    hist: self.hist.as_mut(),
                    per_hop: match rule {
                        Some(r) if r.algorithm == detect::Algorithm::PerHop => {
                            let regs = if self.flow_regs.is_empty() {
                                // Per node ID: the hops must name theirs.
                                layout.node_id.map(|_| Regs::Node(&mut self.regs))
                            } else {
                                Some(Regs::Flow(&mut self.flow_regs[slots.clone()]))
                            };
                            regs.map(|regs| PerHopPass {
                                regs,
                                metric: r.metric,
                                threshold: r.threshold,
                                fired: false,
                                untracked: 0,
                            })
                        }
                        _ => None,
                    },
                    sums: &mut sums,
                    cnf: cnf.as_mut(),
                    link_prev: self.link_prev.get_mut(slots).unwrap_or(&mut []),
                };
                update(e, aggs, layout, stack, hops, now, &mut side, c);
                if let Some(p) = side.per_hop {
                    per_hop_fired = p.fired;
                    if p.untracked > 0 {
                        c.event_n(Event::IntDetectNodeUntracked, p.untracked);
                    }
                } else if rule.is_some_and(|r| r.algorithm == detect::Algorithm::PerHop) {
                    // per_hop needs each hop's node ID.
                    sums.carried = [false; METRICS];
                }
            }
        }
        let (e, _) = self.cache.entry_mut(i);
        if let Some(r) = rule {
            let counters = &self.rule_counters[r.slot % MAX_RULES];
            let d = decide(r, &mut self.det[i], &sums, per_hop_fired, cnf.as_ref(), now, &mut e.report_tsc, counters);
            return (d.report, if d.queue { FLAG_F | FLAG_Q } else { FLAG_F });
        }
        if interval == 0 {
            return (true, 0);
        }
        if e.report_tsc != 0 && now.wrapping_sub(e.report_tsc) < interval {
            return (false, FLAG_F);
        }
        // (0 means "none yet": a report at TSC 0 is taken at 1.)
        e.report_tsc = now.max(1);
        (true, FLAG_F)
    }

    /// The worker's poll (also when idle): sweeps the rows due since the
    /// last poll, so the whole cache is swept once per `sweep_tsc`.
    pub fn poll(&mut self, now: u64, c: &mut CounterValues) {
        if self.idle_tsc == 0 && self.active_tsc == 0 {
            return;
        }
        if self.last_sweep == 0 {
            self.last_sweep = now;
            return;
        }
        let rows = self.cache.rows() as u128;
        let due = (now.wrapping_sub(self.last_sweep) as u128 * rows / self.sweep_tsc as u128) as usize;
        if due == 0 {
            return;
        }
        // Time for the rows swept (what a capped sweep leaves is due next poll).
        let n = due.min(SWEEP_MAX_ROWS);
        self.last_sweep += (n as u128 * self.sweep_tsc as u128 / rows) as u64;
        let (idle, active) = (self.idle_tsc, self.active_tsc);
        let Analytics { cache, ring, clock, .. } = self;
        cache.sweep(n, now, idle, active, |e, h, r| export(ring, clock, e, h, r, None, c));
    }

    /// Exports every entry (`Flush` or `Stop`) and frees them. At `Stop`
    /// the worker has left its data path and the control core drains R_G
    /// until it is done, so a full ring is waited on (STOP_WAIT in all).
    pub fn flush(&mut self, reason: Reason, c: &mut CounterValues) -> usize {
        let Analytics { cache, ring, clock, .. } = self;
        let wait = (reason == Reason::Stop).then(|| std::time::Instant::now() + STOP_WAIT);
        cache.flush(reason, |e, h, r| export(ring, clock, e, h, r, wait, c))
    }

    /// A copy of the flow's entry, if this worker holds one.
    pub fn show(&self, key: &FlowKey) -> Option<FlowSnapshot> {
        let (e, h) = self.cache.get(key, key.hash64())?;
        let mut hops = [HopAgg::default(); cache::MAX_HOPS];
        hops[..h.len()].copy_from_slice(h);
        Some(FlowSnapshot { head: FlowHead::of(e, Reason::Flush, |t| self.clock.ns(t)), hops })
    }
}

/// Counts an entry leaving (or copied out) for `reason` and queues it on
/// R_G when analytics export; with `wait_until`, a full ring is retried
/// until then (never on the data path).
fn export(
    ring: &mut Option<FlowProducer>,
    clock: &WallClock,
    e: &FlowEntry,
    hops: &[HopAgg],
    reason: Reason,
    wait_until: Option<std::time::Instant>,
    c: &mut CounterValues,
) {
    c.event(match reason {
        Reason::Lru => Event::IntFlowLru,
        Reason::Aged => Event::IntFlowAged,
        Reason::Active => Event::IntFlowActive,
        Reason::Flush => Event::IntFlowFlushed,
        Reason::Stop => Event::IntFlowStopped,
    });
    let Some(ring) = ring else { return };
    if e.packets == 0 {
        // Every packet of it had a HopML its bitmap disagreed with (each
        // counted): no telemetry to report, and a record of 0 packets
        // would only puzzle a collector.
        c.event(Event::IntFlowEmpty);
        return;
    }
    let head = FlowHead::of(e, reason, |t| clock.ns(t));
    let mut queued = ring.push(head, hops);
    if let Some(deadline) = wait_until {
        while !queued && std::time::Instant::now() < deadline {
            std::thread::yield_now();
            queued = ring.push(head, hops);
        }
    }
    if queued {
        c.event(Event::IntFlowExported);
    } else {
        c.event(Event::IntFlowRingFull);
    }
}

/// Where a packet's events go, and what raises them.
struct Raise<'a> {
    spec: &'a EventSpec,
    ring: &'a mut EventProducer,
    clock: &'a WallClock,
}

/// Event bits raised; their counters follow `Event::IntEventHopLatencyT`
/// in bit order.
const BITS_RAISED: usize = bit::COUNT;

impl Raise<'_> {
    /// Queues a record on R_I and counts its bits.
    #[inline]
    fn emit(&mut self, r: EventRecord, c: &mut CounterValues) {
        let mut bits = r.bits;
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if b < BITS_RAISED {
                c.event(Event::ALL[Event::IntEventHopLatencyT as usize + b]);
            }
        }
        c.event(if self.ring.push(r) { Event::IntEventExported } else { Event::IntEventRingFull });
    }
}

/// A step of the path hash: a packet's node IDs in path order.
#[inline(always)]
fn path_step(h: u32, node_id: u32) -> u32 {
    (h ^ node_id).wrapping_mul(0x9e37_79b1).rotate_left(13)
}

/// T and C of one value under `rule`, with the entry's edge state at `bit`.
#[inline(always)]
fn raise(rule: &events::EventRule, v: u32, prev: Option<u32>, disarmed: &mut u64, bit: u64) -> (bool, bool) {
    if !rule.edge {
        // (Only edge mode reads and moves the state.)
        return check(rule, v, prev, &mut true);
    }
    let mut armed = *disarmed & bit == 0;
    let tc = check(rule, v, prev, &mut armed);
    if armed {
        *disarmed &= !bit;
    } else {
        *disarmed |= bit;
    }
    tc
}

/// What a packet's update does besides the entry: events, histograms, the
/// per_hop and cnf detection passes, and the sums detection decides on.
struct Side<'a, 'b> {
    ev: Option<Raise<'a>>,
    hist: Option<&'a mut HistWriter>,
    per_hop: Option<PerHopPass<'a>>,
    sums: &'b mut Sums,
    cnf: Option<&'b mut CnfPass<'a>>,
    /// The flow's link latencies in its previous packet plus one, by hop.
    link_prev: &'b mut [u32],
}

/// Hops decoded at a time.
const CHUNK: usize = 8;

/// Up to `CHUNK` hops of a stack, in path order, decoded once for the
/// passes that read them.
#[derive(Default)]
struct Decoded {
    /// Node IDs (where the layout has them).
    node: [u32; CHUNK],
    /// Values by metric, 0 where absent; bit m of `has` says whether value
    /// m is present.
    value: [[u32; METRICS]; CHUNK],
    has: [u8; CHUNK],
}

impl Decoded {
    /// Hops `p0..p0 + k` (path order) of a stack of `n` hops by `l`;
    /// returns the values that were absent (all ones).
    #[inline(always)]
    fn read(&mut self, l: &HopLayout, stack: &[u8], n: usize, p0: usize, k: usize) -> u64 {
        let mut absent = 0;
        for j in 0..k {
            let p = p0 + j;
            let hop = &stack[(n - 1 - p) * l.hop_len..(n - p) * l.hop_len];
            if let Some(o) = l.node_id {
                let o = o as usize;
                self.node[j] = u32::from_be_bytes(hop[o..o + 4].try_into().expect("4 bytes"));
            }
            let mut has = 0;
            for m in 0..METRICS {
                let (v, h) = match l.value(hop, m) {
                    Some(Some(v)) => (v, 1),
                    Some(None) => {
                        absent += 1;
                        (0, 0)
                    }
                    None => (0, 0),
                };
                (self.value[j][m], has) = (v, has | h << m);
            }
            self.has[j] = has;
        }
        absent
    }
}

/// Adds one packet's stack to its flow's entry: the first `aggs.len()` hops
/// in path order (the stack holds the newest first), and the sum of all
/// hops' latencies; with `ev`, raises the packet's events against the
/// entry's previous values (tracked hops, end to end, path); with `hist`,
/// bins every hop's values by its node, and the end-to-end latency.
///
/// The hops are decoded once, a chunk at a time, and each of those jobs is
/// its own pass over the chunk, taken only when it is on: one loop doing
/// all of them kept too many values live and spilled them on every value.
/// The passes that read the entry's previous values (events, detection)
/// run before the one that writes them.
#[allow(clippy::too_many_arguments)]
#[inline]
fn update(
    e: &mut FlowEntry,
    aggs: &mut [HopAgg],
    l: &HopLayout,
    stack: &[u8],
    n: usize,
    now: u64,
    side: &mut Side,
    c: &mut CounterValues,
) {
    let Side { ev, hist, per_hop, sums, cnf, link_prev } = side;
    // (The block was checked: `n` hops of `hop_len` bytes fill the stack.)
    let n = if n * l.hop_len <= stack.len() { n } else { 0 };
    let tracked = n.min(aggs.len());
    let first = e.packets == 0;
    for m in 0..METRICS {
        sums.carried[m] = l.metric[m].is_some();
    }
    let hop_events_on = ev.as_ref().is_some_and(|x| x.spec.on_hops());
    let detecting = cnf.is_some() || per_hop.is_some();
    let (mut e2e, mut any, mut absent) = (0u64, false, 0u64);
    let mut sum = [0u64; METRICS];
    let mut path = n as u32;
    // The previous hop's egress timestamp, for the link into the next.
    let mut egress: Option<u64> = None;
    let mut d = Decoded::default();
    let mut p0 = 0;
    while p0 < n {
        let k = (n - p0).min(CHUNK);
        absent += d.read(l, stack, n, p0, k);
        if let Some(x) = ev.as_mut().filter(|_| hop_events_on && p0 < tracked) {
            let hops = Hops { d: &d, p0, k: k.min(tracked - p0), l, stack, n };
            absent += hop_events(x, e, aggs, &hops, &mut egress, now, link_prev, c);
        }
        if detecting {
            detect_hops(cnf.as_deref_mut(), per_hop.as_mut(), aggs, l.node_id.is_some(), &d, p0, k);
        }
        // The entry's aggregates, detection's sums, the end-to-end latency
        // and the path hash.
        for j in 0..k {
            let p = p0 + j;
            let has = d.has[j];
            let v = d.value[j];
            if l.node_id.is_some() {
                path = path_step(path, d.node[j]);
            }
            // (An absent value is 0.)
            for m in 0..METRICS {
                sum[m] += v[m] as u64;
            }
            (e2e, any) = (e2e + v[HOP_LATENCY] as u64, any | (has & 1 << HOP_LATENCY != 0));
            if let Some(a) = aggs.get_mut(p) {
                if l.node_id.is_some() {
                    a.node_id = d.node[j];
                }
                for (m, &vm) in v.iter().enumerate() {
                    if has & 1 << m != 0 {
                        a.last[m] = vm;
                        a.sum[m] += vm as u64;
                        a.count[m] += 1;
                    }
                }
            }
        }
        if let Some(h) = hist.as_deref_mut() {
            bin_hops(h, l.node_id.is_some(), &d, k, c);
        }
        p0 += k;
    }
    for (s, v) in sums.sum.iter_mut().zip(sum) {
        *s += v;
    }
    if n > tracked {
        c.event_n(Event::IntHopsUntracked, (n - tracked) as u64);
    }
    if absent > 0 {
        c.event_n(Event::IntValueAbsent, absent);
    }
    let e2e = e2e.min(u32::MAX as u64) as u32;
    if let Some(x) = ev {
        let mut r = EventRecord { hop: HOP_E2E, ..EventRecord::default() };
        let prev = (e.e2e.count > 0).then_some(e.e2e.last);
        if any {
            let (t, ch) = raise(&x.spec.e2e, e2e, prev, &mut e.disarmed, E2E_DISARMED);
            r.bits |= if t { bit::E2E_T } else { 0 } | if ch { bit::E2E_C } else { 0 };
            (r.value[0], r.present) = (e2e, 1);
        }
        if let Some(pv) = prev {
            r.prev[0] = pv;
            r.present |= 1 << 4;
        }
        if x.spec.path_change && l.node_id.is_some() && !first && path != e.path_hash {
            r.bits |= bit::PATH;
        }
        if r.bits != 0 {
            r.key = e.key;
            (r.rx_tsc, r.sink_ns) = (now, x.clock.ns(now));
            x.emit(r, c);
        }
    }
    if any {
        e.e2e.add(e2e);
        if let Some(h) = hist {
            h.add_e2e(e2e);
        }
    }
    e.path_hash = path;
    e.packets += 1;
    e.last_tsc = now;
    e.hops = n.min(u8::MAX as usize) as u8;
    e.tracked = e.tracked.max(tracked as u8);
}

/// A decoded chunk of tracked hops, with where their bytes lie (for the
/// timestamps, which only link events read).
struct Hops<'a> {
    d: &'a Decoded,
    /// The chunk's first hop (path order) and its tracked hops.
    p0: usize,
    k: usize,
    l: &'a HopLayout,
    stack: &'a [u8],
    n: usize,
}

/// The per-hop and link events of a chunk of tracked hops, against the
/// entry's values before this packet. Returns the links whose latency was
/// absent.
#[allow(clippy::too_many_arguments)]
#[inline]
fn hop_events(
    x: &mut Raise,
    e: &mut FlowEntry,
    aggs: &[HopAgg],
    hops: &Hops,
    egress: &mut Option<u64>,
    now: u64,
    link_prev: &mut [u32],
    c: &mut CounterValues,
) -> u64 {
    // Link latencies only while their events are on (their previous values
    // then start over, as for a new flow); the previous hop's egress
    // timestamp gives the link into this one.
    let links = !x.spec.link.is_off();
    // Which per-hop rules can raise (an off rule neither raises nor moves
    // its edge state).
    let hop_on = x.spec.hop.map(|r| !r.is_off());
    let Hops { d, p0, k, l, stack, n } = *hops;
    let aggs = &aggs[p0..p0 + k];
    // Each rule over the chunk's hops in turn (its fields stay in
    // registers); a hop's record is built only when a bit is raised.
    let mut bits = [0u16; CHUNK];
    for (m, rule) in x.spec.hop.iter().enumerate() {
        if !hop_on[m] {
            continue;
        }
        for (j, a) in aggs.iter().enumerate() {
            if d.has[j] & 1 << m != 0 {
                let pv = (a.count[m] > 0).then_some(a.last[m]);
                let (t, ch) = raise(rule, d.value[j][m], pv, &mut e.disarmed, 1 << (3 * (p0 + j) + m));
                bits[j] |= if t { bit::t(m) } else { 0 } | if ch { bit::c(m) } else { 0 };
            }
        }
    }
    let mut absent = 0;
    let (mut link, mut link_prev_v, mut link_present) = ([0u32; CHUNK], [0u32; CHUNK], [0u8; CHUNK]);
    if links {
        for j in 0..aggs.len() {
            let p = p0 + j;
            let ts = l.timestamps(&stack[(n - 1 - p) * l.hop_len..(n - p) * l.hop_len]);
            // Into hop p from hop p - 1; negative (clocks apart) or from
            // 2^32 - 1 up is absent.
            let into = match (*egress, ts) {
                (Some(e), Some((i, _))) => {
                    Some(u32::try_from(i.wrapping_sub(e) as i64).ok().filter(|&v| v != u32::MAX))
                }
                _ => None,
            };
            *egress = ts.map(|t| t.1);
            let Some(v) = into else { continue };
            let Some(v) = v else {
                absent += 1;
                continue;
            };
            let slot = link_prev.get_mut(p);
            let pv = slot.as_deref().and_then(|x| x.checked_sub(1));
            let (t, ch) = raise(&x.spec.link, v, pv, &mut e.disarmed, cache::link_disarmed(p));
            bits[j] |= if t { bit::LINK_T } else { 0 } | if ch { bit::LINK_C } else { 0 };
            (link[j], link_present[j]) = (v, events::LINK_PRESENT);
            if let Some(pv) = pv {
                (link_prev_v[j], link_present[j]) = (pv, events::LINK_PRESENT | events::LINK_PREV_PRESENT);
            }
            if let Some(s) = slot {
                *s = v + 1;
            }
        }
    }
    for (j, a) in aggs.iter().enumerate() {
        if bits[j] == 0 {
            continue;
        }
        let has = d.has[j];
        let mut present = has | link_present[j];
        let (value, mut prev) = (d.value[j], [0u32; METRICS]);
        for (m, pm) in prev.iter_mut().enumerate() {
            if a.count[m] > 0 {
                (*pm, present) = (a.last[m], present | 1 << (4 + m));
            }
        }
        let r = EventRecord {
            key: e.key,
            sink_ns: x.clock.ns(now),
            rx_tsc: now,
            value,
            prev,
            node_id: if l.node_id.is_some() { d.node[j] } else { a.node_id },
            link: link[j],
            link_prev: link_prev_v[j],
            bits: bits[j],
            present,
            hop: (p0 + j) as u8,
        };
        x.emit(r, c);
    }
    absent
}

/// The per_hop and cnf detection passes over a decoded chunk (hops
/// `p0..p0 + k`), with the entry's previous values at the hops it tracks.
#[inline]
fn detect_hops(
    mut cnf: Option<&mut CnfPass>,
    mut per_hop: Option<&mut PerHopPass>,
    aggs: &[HopAgg],
    named: bool,
    d: &Decoded,
    p0: usize,
    k: usize,
) {
    for j in 0..k {
        let p = p0 + j;
        let a = aggs.get(p);
        for m in 0..METRICS {
            if d.has[j] & 1 << m == 0 {
                continue;
            }
            let v = d.value[j][m];
            if let Some(x) = cnf.as_deref_mut() {
                let prev = a.and_then(|a| (a.count[m] > 0).then_some(a.last[m]));
                x.hop(p, m, v, prev);
            }
            if let Some(ph) = per_hop.as_deref_mut() {
                if ph.metric == m {
                    ph.hop(p, named.then_some(d.node[j]), v);
                }
            }
        }
    }
}

/// Bins every value of a decoded chunk's `k` hops by the hop's node
/// (`named`: the layout has node IDs).
#[inline]
fn bin_hops(h: &mut HistWriter, named: bool, d: &Decoded, k: usize, c: &mut CounterValues) {
    if !named {
        c.event_n(Event::IntHistNoNodeId, k as u64);
        return;
    }
    for j in 0..k {
        let NodeSlot::Slot(s) = h.slot(d.node[j]) else {
            c.event(Event::IntHistNodeUntracked);
            continue;
        };
        for m in 0..METRICS {
            if d.has[j] & 1 << m != 0 {
                h.add(s, m, d.value[j][m]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::int::analytics::cache::Agg;
    use crate::int::analytics::flow_ring::{flow_ring, FlowConsumer, FlowRecord};
    use crate::wire::int_md::{emit_hop, instr, HopMetadata};

    const BITMAP: u16 = instr::NODE_ID | instr::HOP_LATENCY | instr::QUEUE | instr::TX_UTIL;

    fn no_fields() -> WatchFields {
        unreachable!("no detection rules: no lookup")
    }

    /// A packet without events or detection rules, its report every packet.
    fn plain(
        a: &mut Analytics,
        k: &FlowKey,
        now: u64,
        st: &[u8],
        shape: (u16, usize, usize),
        c: &mut CounterValues,
    ) -> bool {
        let rules = (&EventSpec::default(), &DetectSpec::default());
        a.packet(k, k.hash64(), now, st, shape, 0, rules, no_fields, c).0
    }

    fn stack(bitmap: u16, path: &[(u32, u32, u32, Option<u32>)]) -> Vec<u8> {
        // Newest first: the last hop of the path leads the stack.
        let mut s = Vec::new();
        for &(node_id, lat, q, util) in path.iter().rev() {
            let md =
                HopMetadata { node_id, hop_latency_ns: lat, queue_occupancy: q, tx_util: util, ..Default::default() };
            let mut b = vec![0u8; hop_words(bitmap) * 4];
            emit_hop(bitmap, &md, &mut b);
            s.extend_from_slice(&b);
        }
        s
    }

    /// A cache of `rows` x `ways` tracking `hops` hops into `ring`, no
    /// timeouts, events or histograms.
    fn setup(rows: usize, ways: usize, hops: usize, ring: FlowProducer) -> AnalyticsSetup {
        AnalyticsSetup {
            rows,
            ways,
            max_hops: hops,
            idle_tsc: 0,
            active_tsc: 0,
            ring: Some(ring),
            events: None,
            hist: None,
            rule_counters: rule_counters(),
            per_hop_flow: false,
        }
    }

    /// The flow fields detection rules match: UDP 10.0.0.1:1 -> :2 style.
    fn fields() -> WatchFields {
        WatchFields { ip_version: 4, src: 1, dst: 2, proto: 17, src_port: 1, dst_port: 2, dscp: 0, in_port: 0 }
    }

    fn analytics(rows: usize, ways: usize, hops: usize) -> (Analytics, FlowConsumer) {
        let (p, c) = flow_ring(64, hops);
        let s = AnalyticsSetup { idle_tsc: 1000, ..setup(rows, ways, hops, p) };
        (Analytics::new(s, WallClock::new(0, 5_000, 1_000_000_000), 4000), c)
    }

    fn key(i: u16) -> FlowKey {
        FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 5000, i)
    }

    #[test]
    fn layouts_follow_the_bitmap() {
        let l = HopLayout::of(BITMAP);
        assert_eq!((l.node_id, l.metric, l.hop_len), (Some(0), [Some(4), Some(8), Some(12)], 16));
        let all = HopLayout::of(0xff80);
        // node 4, L1 4, latency 4, queue 4, ts 8 + 8, L2 8, then tx_util.
        assert_eq!((all.node_id, all.metric, all.hop_len), (Some(0), [Some(8), Some(12), Some(40)], 48));
        assert_eq!(HopLayout::of(instr::QUEUE).metric, [None, Some(0), None]);
    }

    #[test]
    fn a_flows_packets_aggregate_per_hop_in_path_order() {
        let (mut a, mut ring) = analytics(4, 2, 2);
        let mut c = CounterValues::default();
        let k = key(1);
        let s1 = stack(BITMAP, &[(11, 100, 3, Some(500)), (12, 200, 0xff_ffff, None), (13, 50, 1, Some(7))]);
        let s2 = stack(BITMAP, &[(11, 300, 5, Some(700)), (12, 10, 4, None), (13, 70, 2, Some(9))]);
        assert!(plain(&mut a, &k, 10, &s1, (BITMAP, 4, 3), &mut c));
        plain(&mut a, &k, 20, &s2, (BITMAP, 4, 3), &mut c);
        let (e, h) = a.cache.get(&k, k.hash64()).unwrap();
        assert_eq!((e.packets, e.first_tsc, e.last_tsc, e.hops, e.tracked), (2, 10, 20, 3, 2));
        assert_eq!((h[0].node_id, h[1].node_id), (11, 12), "source side first");
        assert_eq!(h[0].metric(HOP_LATENCY), Agg { last: 300, sum: 400, count: 2 });
        assert_eq!(h[1].metric(QUEUE), Agg { last: 4, sum: 4, count: 1 }, "all ones is absent");
        assert_eq!(h[1].metric(TX_UTIL), Agg::default());
        assert_eq!(e.e2e, Agg { last: 380, sum: 350 + 380, count: 2 }, "all three hops");
        // Hop 3 untracked on both packets; absent: queue once, tx_util twice.
        assert_eq!(c.events[Event::IntHopsUntracked as usize], 2);
        assert_eq!(c.events[Event::IntValueAbsent as usize], 3);
        a.flush(Reason::Flush, &mut c);
        let mut r = FlowRecord::empty();
        assert!(ring.pop_into(&mut r));
        assert_eq!((r.head.key, r.head.reason(), r.head.packets, r.hops().len()), (k, Some(Reason::Flush), 2, 2));
        assert_eq!((r.head.first_ns, r.head.last_ns), (5_010, 5_020));
        assert_eq!(r.hops()[0].metric(HOP_LATENCY).sum, 400);
    }

    #[test]
    fn one_report_per_interval_per_flow_and_flows_of_one_row_keep_theirs() {
        let mut a = Analytics::new(AnalyticsSetup::interval_only(16), WallClock::new(0, 0, 1000), 1000);
        let mut c = CounterValues::default();
        let mut due = |k: &FlowKey, now| {
            a.packet(
                k,
                k.hash64(),
                now,
                &[],
                (0, 1, 0),
                500,
                (&EventSpec::default(), &DetectSpec::default()),
                no_fields,
                &mut c,
            )
            .0
        };
        assert!(due(&key(7), 1_000), "first packet");
        assert!(!due(&key(7), 1_499));
        assert!(due(&key(8), 1_499), "another flow, its own interval");
        assert!(due(&key(7), 1_500), "an interval after the last report");
        assert!(!due(&key(7), 1_600));
        assert!(!due(&key(8), 1_600));
    }

    #[test]
    fn hop_ml_that_disagrees_with_the_bitmap_skips_the_packet() {
        let (mut a, mut ring) = analytics(4, 2, 2);
        let mut c = CounterValues::default();
        let s = stack(BITMAP, &[(1, 1, 1, None)]);
        plain(&mut a, &key(1), 5, &s, (BITMAP, 3, 1), &mut c);
        assert_eq!(c.events[Event::IntAnalyticsBadHopMl as usize], 1);
        assert_eq!(a.cache.get(&key(1), key(1).hash64()).unwrap().0.packets, 0);
        // Evicted, it leaves no record of 0 packets: counted instead.
        a.flush(Reason::Flush, &mut c);
        assert_eq!(c.events[Event::IntFlowFlushed as usize], 1);
        assert_eq!((c.events[Event::IntFlowEmpty as usize], c.events[Event::IntFlowExported as usize]), (1, 0));
        assert!(!ring.pop_into(&mut FlowRecord::empty()));
    }

    #[test]
    fn a_full_row_exports_its_lru_entry_and_polls_age_entries() {
        let (mut a, mut ring) = analytics(1, 2, 1);
        let mut c = CounterValues::default();
        let s = stack(BITMAP, &[(1, 1, 1, None)]);
        for (i, now) in [(1, 10), (2, 20), (1, 30), (3, 40)] {
            plain(&mut a, &key(i), now, &s, (BITMAP, 4, 1), &mut c);
        }
        let mut r = FlowRecord::empty();
        assert!(ring.pop_into(&mut r));
        assert_eq!((r.head.key, r.head.reason(), r.head.packets), (key(2), Some(Reason::Lru), 1));
        assert_eq!(c.events[Event::IntFlowLru as usize], 1);
        // Idle 1000 ticks; sweeps once per 250 (1 row).
        a.poll(100, &mut c);
        a.poll(1_035, &mut c);
        assert!(ring.pop_into(&mut r));
        assert_eq!((r.head.key, r.head.reason()), (key(1), Some(Reason::Aged)));
        assert!(!ring.pop_into(&mut r), "flow 3 is 995 ticks idle");
        a.poll(1_300, &mut c);
        assert!(ring.pop_into(&mut r));
        assert_eq!((r.head.key, r.head.reason()), (key(3), Some(Reason::Aged)));
        assert!(a.cache.is_empty());
    }

    #[test]
    fn a_stopping_worker_waits_for_room_and_a_flush_does_not() {
        let (p, mut ring) = flow_ring(4, 1);
        let s = setup(16, 1, 1, p);
        let mut a = Analytics::new(s, WallClock::new(0, 0, 1000), 1000);
        let mut c = CounterValues::default();
        let st = stack(BITMAP, &[(1, 1, 1, None)]);
        for i in 0..10 {
            plain(&mut a, &key(i), 1, &st, (BITMAP, 4, 1), &mut c);
        }
        let n = a.cache.len();
        assert!(n > 4, "more entries ({n}) than the ring holds");
        // A flush on the data path never waits: what does not fit is counted.
        let mut r = FlowRecord::empty();
        while ring.pop_into(&mut r) {}
        let mut c = CounterValues::default();
        let mut b = a.cache.len();
        a.flush(Reason::Flush, &mut c);
        assert_eq!(
            (c.events[Event::IntFlowExported as usize], c.events[Event::IntFlowRingFull as usize]),
            (4, b as u64 - 4)
        );
        while ring.pop_into(&mut r) {}
        for i in 0..10 {
            plain(&mut a, &key(i), 2, &st, (BITMAP, 4, 1), &mut c);
        }
        while ring.pop_into(&mut r) {}
        b = a.cache.len();
        let reader = std::thread::spawn(move || {
            let (mut got, mut r) = (0, FlowRecord::empty());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while got < b && std::time::Instant::now() < deadline {
                if ring.pop_into(&mut r) {
                    assert_eq!(r.head.reason(), Some(Reason::Stop));
                    got += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            got
        });
        let mut c = CounterValues::default();
        assert_eq!(a.flush(Reason::Stop, &mut c), b);
        assert_eq!(reader.join().unwrap(), b, "every entry reached the control core");
        assert_eq!(
            (c.events[Event::IntFlowExported as usize], c.events[Event::IntFlowRingFull as usize]),
            (b as u64, 0)
        );
    }

    fn with_events(hops: usize) -> (Analytics, FlowConsumer, events::EventConsumer) {
        let (p, c) = flow_ring(64, hops);
        let (ep, ec) = events::event_ring(64);
        let s = AnalyticsSetup {
            rows: 4,
            ways: 2,
            max_hops: hops,
            idle_tsc: 0,
            active_tsc: 0,
            ring: Some(p),
            events: Some(ep),
            hist: None,
            rule_counters: rule_counters(),
            per_hop_flow: false,
        };
        (Analytics::new(s, WallClock::new(0, 5_000, 1_000_000_000), 4000), c, ec)
    }

    fn drain(r: &mut events::EventConsumer) -> Vec<EventRecord> {
        std::iter::from_fn(|| r.pop()).collect()
    }

    #[test]
    fn per_hop_t_and_c_events_carry_the_values_and_the_previous_ones() {
        let (mut a, _f, mut ring) = with_events(2);
        let mut c = CounterValues::default();
        let mut spec = EventSpec::default();
        spec.hop[QUEUE] = events::EventRule { threshold: 100, change: 10, ..Default::default() };
        let k = key(1);
        // (node, latency, queue, tx_util) per hop, path order; hop 2 is untracked.
        let mut send = |q0: u32, q1: u32, q2: u32, now: u64| {
            let s = stack(BITMAP, &[(11, 5, q0, Some(1)), (12, 6, q1, None), (13, 7, q2, Some(3))]);
            a.packet(&k, k.hash64(), now, &s, (BITMAP, 4, 3), 0, (&spec, &DetectSpec::default()), no_fields, &mut c);
        };
        send(100, 50, 500, 10); // at the threshold, no previous packet: nothing
        assert!(drain(&mut ring).is_empty());
        send(101, 60, 500, 20); // hop 0: T; |d| = 1. hop 1: |d| = 10 = change: nothing
        let got = drain(&mut ring);
        assert_eq!(got.len(), 1);
        let r = got[0];
        assert_eq!((r.key, r.hop, r.node_id, r.bits), (k, 0, 11, bit::t(QUEUE)));
        assert_eq!((r.value, r.prev), ([5, 101, 1], [5, 100, 1]));
        assert_eq!((r.present, r.rx_tsc, r.sink_ns), (0b111_0111, 20, 5_020));
        send(90, 71, 900, 30); // hop 0: C (-11); hop 1: C (+11); untracked hop 2: none
        let got = drain(&mut ring);
        assert_eq!(got.iter().map(|r| (r.hop, r.bits)).collect::<Vec<_>>(), [(0, bit::c(QUEUE)), (1, bit::c(QUEUE))]);
        assert_eq!((got[1].node_id, got[1].value[QUEUE], got[1].prev[QUEUE]), (12, 71, 60));
        assert!(!got[1].has_value(TX_UTIL) && !got[1].has_prev(TX_UTIL), "all ones: absent");
        send(0xff_ffff, 71, 0, 40); // an absent queue raises nothing
        assert!(drain(&mut ring).is_empty());
        assert_eq!(c.events[Event::IntEventQueueT as usize], 1);
        assert_eq!(c.events[Event::IntEventQueueC as usize], 2);
        assert_eq!((c.events[Event::IntEventExported as usize], c.events[Event::IntEventRingFull as usize]), (3, 0));
    }

    #[test]
    fn the_prefetch_pass_follows_the_flows_in_use_not_the_cache_size() {
        // 4096 x 12 entries of 5 hops: far more than PREFETCH_BYTES, but
        // a few flows stay in a core's caches.
        let (mut a, _f) = analytics(4096, 12, 5);
        let mut c = CounterValues::default();
        let st = stack(BITMAP, &[(1, 2, 3, Some(4))]);
        let per_flow = 64 + std::mem::size_of::<FlowEntry>() + 5 * std::mem::size_of::<HopAgg>();
        let enough = (PREFETCH_BYTES / per_flow + 1) as u16;
        for i in 0..enough {
            if i == 100 {
                assert!(!a.worth_prefetching(0), "100 flows");
            }
            plain(&mut a, &key(i), 1, &st, (BITMAP, 4, 1), &mut c);
        }
        assert!(a.cache.len() > (enough - 100) as usize);
        assert_eq!(a.worth_prefetching(0), a.cache.len() == enough as usize);
        let (mut off, _f) = analytics(4096, 12, 5);
        for i in 0..enough {
            plain(&mut off, &key(i), 1, &st, (BITMAP, 4, 1), &mut c);
        }
        off.ring = None;
        assert!(!off.worth_prefetching(0), "no tracking and no report interval: no lookups to prefetch");
    }

    #[test]
    fn stacks_longer_than_a_decoded_chunk_keep_every_hop_in_path_order() {
        // 2 x CHUNK - 3 hops, all but the last tracked: the second chunk
        // holds tracked hops and the untracked one.
        let n = 2 * CHUNK - 3;
        let (mut a, _f, mut ring) = with_events(n - 1);
        let mut c = CounterValues::default();
        let mut spec = EventSpec::default();
        spec.hop[QUEUE] = events::EventRule { threshold: 100, ..Default::default() };
        let k = key(3);
        let path = |hot: usize| -> Vec<(u32, u32, u32, Option<u32>)> {
            (0..n as u32).map(|p| (100 + p, 10 * p, if p as usize == hot { 500 } else { p }, Some(p))).collect()
        };
        for (now, hot) in [(10, CHUNK + 1), (20, n - 1)] {
            let st = stack(BITMAP, &path(hot));
            a.packet(&k, k.hash64(), now, &st, (BITMAP, 4, n), 0, (&spec, &DetectSpec::default()), no_fields, &mut c);
        }
        // The hot queue of the first packet sits in the second chunk; the
        // second packet's is on the untracked hop: no event.
        let got = drain(&mut ring);
        assert_eq!(
            got.iter().map(|r| (r.hop as usize, r.node_id, r.value[QUEUE])).collect::<Vec<_>>(),
            [(CHUNK + 1, 100 + CHUNK as u32 + 1, 500)]
        );
        let snap = a.show(&k).expect("the flow's entry");
        assert_eq!((snap.head.hops as usize, snap.head.tracked as usize), (n, n - 1));
        for (p, h) in snap.hops[..n - 1].iter().enumerate() {
            let q = if p == CHUNK + 1 { 500 + p as u64 } else { 2 * p as u64 };
            assert_eq!((h.node_id, h.metric(HOP_LATENCY).sum, h.metric(QUEUE).sum), (100 + p as u32, 20 * p as u64, q));
        }
        let lat: u64 = (0..n as u64).map(|p| 10 * p).sum();
        assert_eq!((snap.head.e2e.last as u64, snap.head.e2e.count), (lat, 2));
        assert_eq!(c.events[Event::IntHopsUntracked as usize], 2);
    }

    #[test]
    fn end_to_end_and_path_change_events_and_edge_mode() {
        let (mut a, _f, mut ring) = with_events(1);
        let mut c = CounterValues::default();
        let mut spec = EventSpec { path_change: true, ..Default::default() };
        spec.e2e = events::EventRule { threshold: 300, change: 0, edge: true, reset: 200 };
        let k = key(2);
        let mut send = |path: &[(u32, u32)], now: u64, spec: &EventSpec| {
            let hops: Vec<_> = path.iter().map(|&(n, l)| (n, l, 0, None)).collect();
            let s = stack(BITMAP, &hops);
            a.packet(
                &k,
                k.hash64(),
                now,
                &s,
                (BITMAP, 4, path.len()),
                0,
                (spec, &DetectSpec::default()),
                no_fields,
                &mut c,
            );
            drain(&mut ring).iter().map(|r| (r.hop, r.bits, r.value[0], r.prev[0])).collect::<Vec<_>>()
        };
        assert_eq!(send(&[(1, 100), (2, 250)], 1, &spec), [(HOP_E2E, bit::E2E_T, 350, 0)], "first packet: T, no path");
        assert_eq!(send(&[(1, 100), (2, 260)], 2, &spec), [], "edge: fired already");
        assert_eq!(
            send(&[(1, 100), (3, 260)], 3, &spec),
            [(HOP_E2E, bit::PATH, 360, 360)],
            "a hop past the tracked one"
        );
        assert_eq!(send(&[(1, 100), (3, 50)], 4, &spec), [], "150: below reset, re-armed");
        assert_eq!(send(&[(1, 100), (3, 201)], 5, &spec), [(HOP_E2E, bit::E2E_T, 301, 150)]);
        assert_eq!(send(&[(1, 100)], 6, &spec), [(HOP_E2E, bit::PATH, 100, 301)], "a shorter path");
        spec.e2e = events::EventRule { change: 40, ..Default::default() };
        spec.path_change = false;
        assert_eq!(send(&[(1, 141)], 7, &spec), [(HOP_E2E, bit::E2E_C, 141, 100)]);
        assert_eq!(send(&[(9, 100)], 8, &spec), [(HOP_E2E, bit::E2E_C, 100, 141)], "path change off");
    }

    #[test]
    fn every_hop_is_binned_by_its_node_and_the_e2e_latency_once() {
        use histogram::{Bins, HistSpec, WorkerHist, E2E};
        let (p, _c) = flow_ring(64, 1);
        let spec = HistSpec { bins: HistSpec::default_bins(), nodes: 2 };
        let t = std::sync::Arc::new(WorkerHist::new(spec));
        let s = AnalyticsSetup {
            rows: 4,
            ways: 2,
            max_hops: 1,
            idle_tsc: 0,
            active_tsc: 0,
            ring: Some(p),
            events: None,
            hist: Some(HistWriter::new(t.clone())),
            rule_counters: rule_counters(),
            per_hop_flow: false,
        };
        let mut a = Analytics::new(s, WallClock::new(0, 0, 1000), 1000);
        let mut c = CounterValues::default();
        // Node 3 is the third ID: counted, not binned. Hop 1 is untracked
        // by the cache but binned.
        let st = stack(BITMAP, &[(1, 100, 7, Some(20)), (2, 300, 0xff_ffff, None), (3, 5, 9, Some(1))]);
        for i in 0..3 {
            plain(&mut a, &key(i), 1, &st, (BITMAP, 4, 3), &mut c);
        }
        assert_eq!(t.nodes(), [1, 2]);
        let get = |slot: usize, m: usize| {
            let mut v = vec![0; spec.bins[m].len()];
            t.add_to(slot, m, &mut v);
            v
        };
        let lat = Bins::Log2 { sub: 8 };
        assert_eq!(get(0, HOP_LATENCY)[lat.index(100)], 3);
        assert_eq!((get(0, QUEUE)[7], get(0, TX_UTIL)[0]), (3, 3), "tx_util 20 in [0, 100)");
        assert_eq!(get(1, HOP_LATENCY)[lat.index(300)], 3, "an untracked hop is binned");
        assert_eq!(get(1, QUEUE).iter().sum::<u64>(), 0, "all ones: absent");
        assert_eq!(get(0, E2E)[lat.index(405)], 3);
        assert_eq!(c.events[Event::IntHistNodeUntracked as usize], 3);
    }

    #[test]
    fn each_raised_bit_has_its_counter_in_bit_order() {
        for b in 0..BITS_RAISED {
            let e = Event::ALL[Event::IntEventHopLatencyT as usize + b];
            assert_eq!(e.name(), format!("int_event_{}", bit::NAMES[b]));
        }
    }

    /// A flow's rule decides its reports; the rule is looked up once, and
    /// again after a rule change, which resets the flow's state.
    #[test]
    fn a_detection_rule_decides_the_reports_and_a_change_resets_it() {
        use crate::int::watch::{Role, Ternary, WatchRule};
        use detect::{Algorithm, DetectRule};
        let (mut a, _f) = analytics(4, 2, 2);
        let counters = a.rule_counters.clone();
        let mut c = CounterValues::default();
        let mut m = WatchRule::any("q", Role::None);
        m.dst_port = Ternary::exact(2);
        let mut d = DetectSpec::default();
        d.upsert(DetectRule {
            matcher: m,
            algorithm: Algorithm::PerFlow,
            metric: QUEUE,
            threshold: 100,
            slot: 5,
            cnf: None,
        });
        let fields = |port: u16| {
            move || WatchFields {
                ip_version: 4,
                src: 1,
                dst: 2,
                proto: 17,
                src_port: 1,
                dst_port: port,
                dscp: 0,
                in_port: 0,
            }
        };
        let lookups = std::cell::Cell::new(0);
        let mut send = |k: &FlowKey, q: u32, port: u16, d: &DetectSpec| {
            let s = stack(BITMAP, &[(1, 1, q, None), (2, 1, q, None)]);
            let f = fields(port);
            let counted = || {
                lookups.set(lookups.get() + 1);
                f()
            };
            a.packet(k, k.hash64(), 1, &s, (BITMAP, 4, 2), 0, (&EventSpec::default(), d), counted, &mut c)
        };
        // S = 2q: 60 no; 101 -> 202 fires (P = 202); 120 -> 240 no; 200 -> 400 fires.
        let got: Vec<_> = [30, 101, 120, 200].iter().map(|&q| send(&key(1), q, 2, &d)).collect();
        assert_eq!(got, [(false, FLAG_F), (true, FLAG_F | FLAG_Q), (false, FLAG_F), (true, FLAG_F | FLAG_Q)]);
        assert_eq!(lookups.get(), 1, "looked up once");
        // No rule matches port 3: the default, every packet (interval 0).
        assert_eq!(send(&key(2), 1, 3, &d), (true, 0));
        assert_eq!(counters[5].get(), [4, 2, 2, 0]);
        // A rule change: looked up again, P back at 0 (S = 240 fires).
        d.version += 1;
        assert!(send(&key(1), 120, 2, &d).0, "S = 240 against P = 0");
        assert_eq!(lookups.get(), 3);
    }

    /// A cnf rule sees every hop in path order and, for `any.delta`, each
    /// hop's value in the flow's previous packet from the entry.
    #[test]
    fn a_cnf_rule_reads_the_hops_and_the_entrys_previous_values() {
        use crate::int::watch::{Role, WatchRule};
        use detect::{Algorithm, DetectRule};
        let (mut a, _f) = analytics(4, 2, 2);
        let counters = a.rule_counters.clone();
        let mut c = CounterValues::default();
        let mut d = DetectSpec::default();
        let cnf = cnf::Cnf::parse("hop_latency.max > 50 AND queue.any.delta > 10").unwrap();
        d.upsert(DetectRule {
            matcher: WatchRule::any("x", Role::None),
            algorithm: Algorithm::Cnf { weight: 64 },
            metric: 0,
            threshold: 0,
            slot: 1,
            cnf: Some(Box::new(("e".into(), cnf))),
        });

        let mut send = |lat: [u32; 2], q: [u32; 2]| {
            let s = stack(BITMAP, &[(1, lat[0], q[0], None), (2, lat[1], q[1], None)]);
            let k = key(1);
            a.packet(&k, k.hash64(), 1, &s, (BITMAP, 4, 2), 0, (&EventSpec::default(), &d), fields, &mut c)
        };
        // No previous packet: no delta. Then hop 1's queue +15 with a 60 ns
        // hop; then +25 at hop 0 but no hop over 50 ns.
        let got = [send([60, 10], [5, 5]), send([60, 10], [5, 20]), send([40, 10], [30, 20])];
        assert_eq!(got, [(false, FLAG_F), (true, FLAG_F | FLAG_Q), (false, FLAG_F)]);
        assert_eq!(counters[1].get(), [3, 1, 2, 0]);
    }

    /// `per_hop_scope = "flow"`: each flow has its own register per hop, so
    /// one flow's report does not move another's; a rule change zeroes them.
    #[test]
    fn per_hop_in_flow_scope_keeps_each_flows_registers() {
        use crate::int::watch::{Role, WatchRule};
        use detect::{Algorithm, DetectRule};
        let (p, _c) = flow_ring(64, 2);
        let s = AnalyticsSetup { per_hop_flow: true, ..setup(4, 2, 2, p) };
        let mut a = Analytics::new(s, WallClock::new(0, 5_000, 1_000_000_000), 4000);
        let mut c = CounterValues::default();
        let mut d = DetectSpec::default();
        let rule = |t| DetectRule {
            matcher: WatchRule::any("h", Role::None),
            algorithm: Algorithm::PerHop,
            metric: HOP_LATENCY,
            threshold: t,
            slot: 0,
            cnf: None,
        };
        d.upsert(rule(10));

        let mut send = |flow: u16, lat: u32, d: &DetectSpec, c: &mut CounterValues| {
            let s = stack(BITMAP, &[(1, lat, 0, None), (2, 0, 0, None), (3, 0, 0, None)]);
            let k = key(flow);
            a.packet(&k, k.hash64(), 1, &s, (BITMAP, 4, 3), 0, (&EventSpec::default(), d), fields, c).0
        };
        // Flow 1 reports at 50 (R = 50); flow 2 at 50 too (its own R is 0;
        // with the switch's registers it would not).
        let got: Vec<bool> =
            [(1, 50), (2, 50), (1, 55), (2, 61)].iter().map(|&(f, l)| send(f, l, &d, &mut c)).collect();
        assert_eq!(got, [true, true, false, true]);
        // The third hop has no register: counted each packet.
        assert_eq!(c.events[Event::IntDetectNodeUntracked as usize], 4);
        // A rule change starts the flows from 0 again.
        d.upsert(rule(10));
        assert!(send(1, 55, &d, &mut c));
    }

    /// Link latency: the next hop's ingress timestamp less this hop's
    /// egress one, raised on the record of the hop it leads into; T over
    /// the threshold, C against the flow's previous packet's; a negative
    /// difference (clocks apart) is absent.
    #[test]
    fn link_latency_events_come_from_consecutive_hops_timestamps() {
        let (mut a, _f, mut ring) = with_events(2);
        let mut c = CounterValues::default();
        let spec = EventSpec {
            link: events::EventRule { threshold: 500, change: 100, ..Default::default() },
            ..Default::default()
        };
        let bitmap = instr::NODE_ID | instr::INGRESS_TS | instr::EGRESS_TS;
        let k = key(3);
        let mut send = |link: i64, now: u64, c: &mut CounterValues| {
            let hop = |n: u32, ing: u64, eg: u64| {
                let md = HopMetadata { node_id: n, ingress_ts_ns: ing, egress_ts_ns: eg, ..Default::default() };
                let mut b = vec![0u8; hop_words(bitmap) * 4];
                emit_hop(bitmap, &md, &mut b);
                b
            };
            // Newest first: hop 1 (ingress = hop 0's egress + link), hop 0.
            let mut s = hop(2, (10_000 + link) as u64, 20_000);
            s.extend(hop(1, 9_000, 10_000));
            a.packet(&k, k.hash64(), now, &s, (bitmap, 5, 2), 0, (&spec, &DetectSpec::default()), no_fields, c);
        };
        send(300, 10, &mut c); // under T, no previous: nothing
        assert!(drain(&mut ring).is_empty());
        send(700, 20, &mut c); // T, and C: |700 - 300| > 100
        let got = drain(&mut ring);
        assert_eq!(got.len(), 1);
        let r = got[0];
        assert_eq!((r.hop, r.node_id, r.bits), (1, 2, bit::LINK_T | bit::LINK_C));
        assert_eq!((r.link, r.link_prev, r.has_link(), r.has_link_prev()), (700, 300, true, true));
        let absent = c.events[Event::IntValueAbsent as usize];
        send(-50, 30, &mut c); // hop 1 stamped before hop 0 sent: absent
        assert!(drain(&mut ring).is_empty());
        assert_eq!(c.events[Event::IntValueAbsent as usize], absent + 1);
        send(720, 40, &mut c); // T again; C against 700 (the absent one kept no value)
        assert_eq!(drain(&mut ring).iter().map(|r| r.bits).collect::<Vec<_>>(), [bit::LINK_T]);
        assert_eq!(
            (c.events[Event::IntEventLinkLatencyT as usize], c.events[Event::IntEventLinkLatencyC as usize]),
            (2, 1)
        );
    }
}
