//! The INT stage of a worker: after forwarding chose the output port, decide
//! this switch's role for the packet (see `int::watch`), gather the hop's
//! metadata, run the source / transit / sink transform, and queue telemetry
//! report records for the control core. Nothing here allocates; reports go
//! into a fixed-size record pushed to the worker's SPSC ring.

use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;

use crate::counters::{CounterValues, Event};
use crate::dpdk::MAX_BURST;
use crate::forward::Verdict;
use crate::int::analytics::Analytics;
use crate::int::watch::{mapped_v4, IntSpec, Role, WatchFields};
use crate::int::{self, Block, Skip, Transit};
use crate::parse::PacketMeta;
use crate::pipeline::{Burst, Cx, Depth, Output, Packet, PortLoad, QuickConsent, Stage, Step};
use crate::pktbuf::PacketBuf;
use crate::tables::Tables;
use crate::wire::int_md::{HopMetadata, INT_HDR_LEN};
use crate::wire::telemetry_report::{FLAG_D, FLAG_I};
use crate::DropReason;

/// Largest inner packet a report record holds.
pub const REPORT_MAX: usize = 512;

/// One report on its way from a worker to the control core.
#[derive(Clone, Copy)]
pub struct ReportRecord {
    /// Telemetry Report flags (D, Q, F, I).
    pub flags: u8,
    /// DropReason of a D report.
    pub drop_reason: u8,
    pub domain_id: u16,
    /// The reporting switch's own metadata (RepMdBits picks from it).
    pub md: HopMetadata,
    pub len: u16,
    /// The packet as it arrived, INT stack inside, truncated.
    pub data: [u8; REPORT_MAX],
}

impl ReportRecord {
    /// No flags, no metadata, no bytes.
    pub fn empty() -> ReportRecord {
        ReportRecord {
            flags: 0,
            drop_reason: 0,
            domain_id: 0,
            md: HopMetadata::default(),
            len: 0,
            data: [0; REPORT_MAX],
        }
    }

    /// Starts a new report in this (reused) record: its head set, no bytes
    /// yet. The bytes past `len` are an earlier report's, never read.
    pub fn start(&mut self, flags: u8, md: HopMetadata, domain_id: u16) -> &mut ReportRecord {
        (self.flags, self.drop_reason, self.domain_id, self.md, self.len) = (flags, 0, domain_id, md, 0);
        self
    }

    /// The packet bytes: `bytes`, at most REPORT_MAX (`report_len` sizes them).
    fn set_packet(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(REPORT_MAX);
        self.data[..n].copy_from_slice(&bytes[..n]);
        self.len = n as u16;
    }

    pub fn packet(&self) -> &[u8] {
        &self.data[..(self.len as usize).min(REPORT_MAX)]
    }
}

/// Where the stage queues reports; false when full (the record is dropped
/// and counted, a worker never waits). The record is copied: the stage
/// builds each report in one record it keeps (zeroing and moving a fresh
/// one cost a report more than its copy into the ring).
pub trait ReportSink {
    fn push(&mut self, r: &ReportRecord) -> bool;
}

impl ReportSink for Vec<ReportRecord> {
    fn push(&mut self, r: &ReportRecord) -> bool {
        Vec::push(self, *r);
        true
    }
}

/// TSC -> nanoseconds since the Unix epoch, by one multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    tsc0: u64,
    wall0_ns: u64,
    /// Nanoseconds per tick << 32.
    mult: u64,
}

impl WallClock {
    pub fn new(tsc0: u64, wall0_ns: u64, hz: u64) -> WallClock {
        WallClock { tsc0, wall0_ns, mult: ((1_000_000_000u128 << 32) / hz.max(1) as u128) as u64 }
    }

    #[inline]
    pub fn ns(&self, tsc: u64) -> u64 {
        self.wall0_ns + ((tsc.wrapping_sub(self.tsc0) as u128 * self.mult as u128) >> 32) as u64
    }
}

/// What the worker knows about the packet's hop through this switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hop {
    pub in_port: u16,
    pub out_port: u16,
    /// TSC when the burst was received.
    pub rx_tsc: u64,
    /// TSC now, when the packet is handed to its TX buffer.
    pub tx_tsc: u64,
    /// This worker's TX queue on the output port.
    pub queue_id: u8,
    /// Packets ahead of this one in that queue (TX buffer + link emulation).
    pub queue_occupancy: u32,
    /// Output port utilisation in 1/100 % (None: link speed unknown).
    pub tx_util: Option<u32>,
    /// Mbufs in use in the packet pool.
    pub buffer_occupancy: u32,
}

impl Hop {
    pub fn metadata(&self, node_id: u32, clock: &WallClock) -> HopMetadata {
        let (ig, eg) = (clock.ns(self.rx_tsc), clock.ns(self.tx_tsc));
        HopMetadata {
            node_id,
            ingress_port: self.in_port,
            egress_port: self.out_port,
            hop_latency_ns: eg.saturating_sub(ig).min(u32::MAX as u64) as u32,
            queue_id: self.queue_id,
            queue_occupancy: self.queue_occupancy,
            ingress_ts_ns: ig,
            egress_ts_ns: eg,
            l2_ingress: self.in_port as u32,
            l2_egress: self.out_port as u32,
            tx_util: self.tx_util,
            buffer_id: 0,
            buffer_occupancy: self.buffer_occupancy,
        }
    }
}

/// Packets of a burst that share one egress TSC read.
pub const EGRESS_READS_EVERY: u8 = 8;

/// A burst's INT times: when it was received, and an egress clock. A TSC
/// read costs 12-15 ns in a VM (measured with the stage bench), as much as
/// a transit hop's other work, so one read stamps up to
/// [`EGRESS_READS_EVERY`] consecutive packets: a later one's egress time is
/// early by the processing of at most 7 packets (~0.5 us), the same order
/// as the burst-wide ingress time's error. Made anew for each burst, so no
/// read outlives its burst.
#[derive(Debug)]
pub struct BurstClock {
    /// TSC when the burst was received.
    pub rx_tsc: u64,
    tsc: Cell<u64>,
    left: Cell<u8>,
}

impl BurstClock {
    pub fn new(rx_tsc: u64) -> BurstClock {
        BurstClock { rx_tsc, tsc: Cell::new(0), left: Cell::new(0) }
    }

    /// The egress TSC for the next packet; `read` reads the clock.
    #[inline]
    pub fn egress_tsc(&self, read: impl FnOnce() -> u64) -> u64 {
        let left = match self.left.get() {
            0 => {
                self.tsc.set(read());
                EGRESS_READS_EVERY
            }
            n => n,
        };
        self.left.set(left - 1);
        self.tsc.get()
    }
}

/// Where the stage gets a packet's hop: the ports right away (they decide
/// the role), the measured values only when INT acts on the packet (they
/// cost a clock read and shared-counter loads).
pub trait HopSource {
    /// (input port, output port).
    fn ports(&self) -> (u16, u16);
    /// TSC when the packet's burst was received (no clock read).
    fn rx_tsc(&self) -> u64;
    fn measure(&self) -> Hop;
}

impl HopSource for Hop {
    fn ports(&self) -> (u16, u16) {
        (self.in_port, self.out_port)
    }
    fn rx_tsc(&self) -> u64 {
        self.rx_tsc
    }
    fn measure(&self) -> Hop {
        *self
    }
}

/// Everything the stage reads or updates besides the packet.
pub struct IntCtx<'a, R: ReportSink> {
    pub spec: &'a IntSpec,
    pub clock: &'a WallClock,
    /// The sink's per-flow state: analytics, and the report interval.
    pub flows: &'a mut Analytics,
    pub counters: &'a mut CounterValues,
    pub reports: &'a mut R,
    /// The record reports are built in before `queue` copies them out.
    pub draft: &'a mut ReportRecord,
}

/// The watch-rule fields of a packet; for one carrying INT at `blk`, the
/// protocol and ports from before its source (what NPT saved).
pub(crate) fn watch_fields(b: &[u8], meta: &PacketMeta, in_port: u16, blk: Option<&Block>) -> WatchFields {
    let k = &meta.key;
    let (src, dst) =
        if k.ip_version() == 4 { (mapped_v4(k.src as u32), mapped_v4(k.dst as u32)) } else { (k.src, k.dst) };
    let (proto, src_port, dst_port) = match blk {
        Some(blk) => original_l4(b, meta, blk),
        None => (k.proto(), k.src_port(), k.dst_port()),
    };
    let dscp = match blk {
        Some(blk) if blk.npt == 0 => (blk.saved as u8) >> 2,
        _ => int::dscp(b, meta),
    };
    WatchFields { ip_version: k.ip_version(), src, dst, proto, src_port, dst_port, dscp, in_port }
}

/// The protocol and ports a packet carrying INT at `blk` had before its
/// source: NPT 1 saved the destination port, NPT 2 the protocol (the real
/// ports follow the block); NPT 0 changed neither.
#[inline(always)]
fn original_l4(b: &[u8], meta: &PacketMeta, blk: &Block) -> (u8, u16, u16) {
    let k = &meta.key;
    match blk.npt {
        1 => (k.proto(), k.src_port(), blk.saved),
        2 => {
            let proto = blk.saved as u8;
            let l4 = blk.at + blk.total;
            match b.get(l4..l4 + 4) {
                Some(p) if matches!(proto, 6 | 17 | 132) => {
                    (proto, u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]))
                }
                _ => (proto, 0, 0),
            }
        }
        _ => (k.proto(), k.src_port(), k.dst_port()),
    }
}

/// The role of the first watch rule the packet matches. Without rules (a
/// transit-only node) the fields are not even gathered.
#[inline]
fn rule_role(spec: &IntSpec, b: &[u8], meta: &PacketMeta, in_port: u16, blk: Option<&Block>) -> Option<Role> {
    if spec.watch.is_empty() {
        return None;
    }
    spec.lookup(&watch_fields(b, meta, in_port, blk)).map(|r| r.role)
}

fn passed(c: &mut CounterValues, r: DropReason) {
    c.event(match r {
        DropReason::IntBadVersion => Event::IntPassedBadVersion,
        DropReason::IntBadHopMl => Event::IntPassedBadHopMl,
        DropReason::IntBadStack => Event::IntPassedBadStack,
        _ => Event::IntPassedTruncated,
    });
}

/// The flow a packet carrying INT at `blk` belongs to, as its source saw
/// it: addresses, IP version, and the protocol and ports from before the
/// source (NPT 1's saved destination port, NPT 2's saved protocol and the
/// real ports after the block). No input port or VLAN: one flow whatever
/// port or tag it reaches the sink by.
#[inline(always)]
fn original_flow(b: &[u8], meta: &PacketMeta, blk: &Block) -> crate::parse::FlowKey {
    let k = &meta.key;
    let (proto, src_port, dst_port) = original_l4(b, meta, blk);
    crate::parse::FlowKey::new(k.src, k.dst, proto, src_port, dst_port, k.ip_version(), 0, 0)
}

/// Whether the sink reports this packet, and its flags: every packet when
/// there is no report interval; otherwise at most one a flow (its original
/// identity) per interval, flagged F (a flow the sink tracks). The flow's
/// entry in the cache (analytics, the interval) takes the packet first.
#[inline(always)]
fn report_due<R: ReportSink>(
    ctx: &mut IntCtx<R>,
    b: &[u8],
    meta: &PacketMeta,
    blk: &Block,
    in_port: u16,
    now: u64,
) -> (bool, u8) {
    let interval = ctx.spec.report.flow_interval_tsc;
    if interval == 0 && !ctx.flows.tracking() {
        return (true, 0);
    }
    let key = original_flow(b, meta, blk);
    let stack = b.get(blk.at + INT_HDR_LEN..blk.at + blk.total).unwrap_or(&[]);
    let shape = (blk.bitmap, blk.hop_ml, blk.hops());
    let rules = (&ctx.spec.events, &ctx.spec.detect);
    let fields = || watch_fields(b, meta, in_port, Some(blk));
    ctx.flows.packet(&key, key.hash64(), now, stack, shape, interval, rules, fields, ctx.counters)
}

/// Queues the report built in `ctx.draft`.
fn queue<R: ReportSink>(ctx: &mut IntCtx<R>) {
    if ctx.reports.push(ctx.draft) {
        ctx.counters.event(Event::IntReportQueued);
    } else {
        ctx.counters.event(Event::IntReportRingFull);
    }
}

/// Bytes of the packet a report keeps: the configured truncation, but
/// never less than the end of the INT block, and at most a record's
/// REPORT_MAX; a stack that ends past that is cut, and counted.
fn report_len(spec: &IntSpec, meta: &PacketMeta, int_end: usize, counters: &mut CounterValues) -> usize {
    let want = spec.report.truncate.max(int_end).min(meta.l3_end);
    if int_end.min(meta.l3_end) > REPORT_MAX {
        counters.event(Event::IntReportStackCut);
    }
    want.min(REPORT_MAX)
}

/// Whether [`apply`] or [`dropped`] can do anything with a packet that
/// came in on `in_port`: it is IP and either may carry INT by the domain's
/// presence method, or came in on an edge port where a watch rule may make
/// this switch its source. Decided from the parse (and, in DSCP mode, one
/// byte), so the worker skips the stage for everything else (most packets
/// of a transit node) without gathering a hop.
#[inline(always)]
pub fn may_act(spec: &IntSpec, b: &[u8], meta: &PacketMeta, in_port: u16) -> bool {
    may_act_from(spec, b, meta, spec.may_source_at(in_port))
}

/// [`may_act`] with `may_source` (whether watch rules may source packets
/// from the input port) decided once for the burst. `may_carry` already
/// rules out a packet that is not IP (its key's protocol is 0).
#[inline(always)]
fn may_act_from(spec: &IntSpec, b: &[u8], meta: &PacketMeta, may_source: bool) -> bool {
    int::may_carry(b, meta, spec.presence) || (may_source && meta.key.ip_version() != 0)
}

/// Runs the INT stage on a packet that leaves by the hop's output port.
/// `meta` is its parse (offsets still valid after forwarding's rewrites).
/// An error is a drop with that reason.
pub fn apply<B: PacketBuf, R: ReportSink>(
    ctx: &mut IntCtx<R>,
    pkt: &mut B,
    meta: &PacketMeta,
    hop: &impl HopSource,
) -> Result<(), DropReason> {
    let spec = ctx.spec;
    let (in_port, out_port) = hop.ports();
    let presence = spec.presence;
    let Some(blk) = int::find(pkt.bytes(), meta, presence) else {
        // No INT yet: only an edge port admits flows into the domain.
        if meta.key.ip_version() == 0 || !spec.is_edge(in_port as usize) {
            return Ok(());
        }
        let Some(Role::Source(sp)) = rule_role(spec, pkt.bytes(), meta, in_port, None) else { return Ok(()) };
        let p = int::IntParams {
            presence,
            bitmap: sp.bitmap,
            max_hops: sp.max_hops,
            domain_id: sp.domain_id,
            source_pushes: spec.source_pushes,
            ds_flags: 0,
        };
        let md = hop.measure().metadata(spec.node_id, ctx.clock);
        match int::source_unmarked(pkt, meta, &p, &md, spec.mtu[out_port as usize] as usize) {
            Ok(_) => ctx.counters.event(Event::IntSourced),
            Err(Skip::Mtu) => ctx.counters.event(Event::IntSourceSkippedMtu),
            Err(Skip::NoRoom) => ctx.counters.event(Event::IntNoRoom),
            Err(Skip::NotApplicable | Skip::Presence) => {}
        }
        return Ok(());
    };
    let sink_here = spec.is_edge(out_port as usize);
    // No transit here and no rule that could make one: nothing to read.
    if !sink_here && !spec.transit && spec.watch.is_empty() {
        return Ok(());
    }
    // INT-label's packets are the label stage's (which checks the block).
    if spec.label_ds_id != 0 && int::Block::domain_id_at(pkt.bytes(), blk) == Some(spec.label_ds_id) {
        return Ok(());
    }
    let block = match int::Block::read(pkt.bytes(), meta, blk) {
        Ok(b) => b,
        // Malformed: a sink cannot restore it, so it drops it with the named
        // reason; a transit node passes it on untouched and counts it; a
        // node that is no transit (`transit = false`) passes it uncounted,
        // as it passes well-formed ones.
        Err(r) if sink_here => return Err(r),
        Err(r) => {
            if spec.transit {
                passed(ctx.counters, r);
            }
            return Ok(());
        }
    };
    let role = match rule_role(spec, pkt.bytes(), meta, in_port, Some(&block)) {
        Some(Role::None) => return Ok(()),
        Some(Role::Sink) => Role::Sink,
        Some(Role::Transit) if !sink_here => Role::Transit,
        _ if sink_here => Role::Sink,
        _ if spec.transit => Role::Transit,
        // Not a transit here: the packet passes untouched.
        _ => return Ok(()),
    };
    if role == Role::Transit {
        let md = hop.measure().metadata(spec.node_id, ctx.clock);
        let mtu = spec.mtu[out_port as usize] as usize;
        return match int::transit_block(pkt, meta, &block, &md, mtu) {
            Ok(Transit::Pushed) => {
                ctx.counters.event(Event::IntTransited);
                Ok(())
            }
            Ok(Transit::Exhausted) => {
                ctx.counters.event(Event::IntHopsExhausted);
                Ok(())
            }
            Ok(Transit::MtuExceeded) if spec.mtu_report => {
                // Export what was collected (I flag), strip the stack, push ours.
                let n = report_len(spec, meta, blk + block.total, ctx.counters);
                ctx.draft.start(FLAG_I, md, block.domain_id).set_packet(&pkt.bytes()[..n]);
                queue(ctx);
                int::strip_stack_at(pkt, meta, blk)?;
                ctx.counters.event(Event::IntStripped);
                match int::transit_at(pkt, meta, blk, &md, mtu)? {
                    Transit::Pushed => ctx.counters.event(Event::IntTransited),
                    _ => ctx.counters.event(Event::IntMtuExceeded),
                }
                Ok(())
            }
            Ok(Transit::MtuExceeded) => {
                ctx.counters.event(Event::IntMtuExceeded);
                Ok(())
            }
            Err(r) => {
                passed(ctx.counters, r);
                Ok(())
            }
        };
    }
    // Sink: report (when due), then restore the original packet. The
    // per-flow interval runs on the burst's receive time; the clock is read
    // (and the hop measured) only for a report.
    let (due, flags) = report_due(ctx, pkt.bytes(), meta, &block, in_port, hop.rx_tsc());
    let sunk = if due {
        let want = report_len(spec, meta, blk + block.total, ctx.counters);
        let rec = ctx.draft.start(flags, hop.measure().metadata(spec.node_id, ctx.clock), block.domain_id);
        let (s, n) = int::sink_block(pkt, meta, &block, spec.presence, &mut rec.data[..want])?;
        rec.len = n as u16;
        s
    } else {
        int::sink_block(pkt, meta, &block, spec.presence, &mut [])?.0
    };
    ctx.counters.event(Event::IntSunk);
    if due {
        queue(ctx);
    }
    if sunk.discard {
        return Err(DropReason::IntDiscard);
    }
    Ok(())
}

/// A packet this switch dropped: when it carried INT or matches a watch
/// rule, the control core gets a drop report (D flag, reason in RepMdBits
/// bit 15) with the packet as it arrived.
pub fn dropped<R: ReportSink>(
    ctx: &mut IntCtx<R>,
    pkt: &[u8],
    meta: &PacketMeta,
    hop: &impl HopSource,
    reason: DropReason,
) {
    let spec = ctx.spec;
    let (in_port, _) = hop.ports();
    if meta.key.ip_version() == 0 {
        return;
    }
    let blk = int::find(pkt, meta, spec.presence);
    let (domain, int_end) = match blk {
        Some(b) => match Block::read(pkt, meta, b) {
            Ok(k) if spec.label_ds_id != 0 && k.domain_id == spec.label_ds_id => return,
            Ok(k) => (k.domain_id, b + k.total),
            Err(_) => return,
        },
        None => match rule_role(spec, pkt, meta, in_port, None) {
            Some(Role::Source(sp)) if spec.is_edge(in_port as usize) => (sp.domain_id, 0),
            _ => return,
        },
    };
    let n = report_len(spec, meta, int_end, ctx.counters);
    let rec = ctx.draft.start(FLAG_D, hop.measure().metadata(spec.node_id, ctx.clock), domain);
    rec.drop_reason = reason as u8;
    rec.set_packet(&pkt[..n]);
    ctx.counters.event(Event::IntDropReported);
    queue(ctx);
}

/// A worker's INT stage in the pipeline: the ring its reports go to the
/// control core in, the sink's per-flow state (analytics, report interval),
/// and the burst's clock.
pub struct IntStage<R: ReportSink> {
    pub reports: R,
    /// Where each report is built (see `ReportSink`).
    draft: Box<ReportRecord>,
    pub flows: Analytics,
    clock: WallClock,
    /// The burst's receive time and egress clock.
    times: BurstClock,
    /// Whether watch rules may source the burst's packets (its input port
    /// is an edge port).
    may_source: bool,
    /// What the domain's presence leaves to the full path.
    consent: int::ConsentMemo,
    /// The flow hashes whose cache rows the burst's prefetch pass loads,
    /// for `prefetch_deeper` to load their entries.
    prefetched: [u64; MAX_BURST],
    prefetched_len: usize,
}

impl<R: ReportSink> IntStage<R> {
    pub fn new(reports: R, flows: Analytics, clock: WallClock) -> IntStage<R> {
        IntStage {
            reports,
            draft: Box::new(ReportRecord::empty()),
            flows,
            clock,
            times: BurstClock::new(0),
            may_source: false,
            consent: int::ConsentMemo::default(),
            prefetched: [0; MAX_BURST],
            prefetched_len: 0,
        }
    }
}

/// A packet's hop through this worker, measured only if INT acts on it.
pub(crate) struct StageHop<'a, B, O> {
    times: &'a BurstClock,
    out: &'a O,
    load: &'a PortLoad,
    in_port: u16,
    out_port: u16,
    buf: std::marker::PhantomData<fn() -> B>,
}

impl<'a, B, O: Output<B>> StageHop<'a, B, O> {
    pub(crate) fn new(times: &'a BurstClock, out: &'a O, load: &'a PortLoad, in_port: u16, out_port: u16) -> Self {
        StageHop { times, out, load, in_port, out_port, buf: std::marker::PhantomData }
    }
}

impl<B, O: Output<B>> HopSource for StageHop<'_, B, O> {
    fn ports(&self) -> (u16, u16) {
        (self.in_port, self.out_port)
    }

    fn rx_tsc(&self) -> u64 {
        self.times.rx_tsc
    }

    fn measure(&self) -> Hop {
        let o = self.out_port as usize;
        let util = self.load.tx_util.get(o).map_or(u32::MAX, |u| u.load(Relaxed));
        Hop {
            in_port: self.in_port,
            out_port: self.out_port,
            rx_tsc: self.times.rx_tsc,
            tx_tsc: self.times.egress_tsc(crate::dpdk::tsc),
            queue_id: self.out.queue_id(),
            queue_occupancy: self.out.occupancy(o) as u32,
            tx_util: (util != u32::MAX).then_some(util),
            buffer_occupancy: self.load.pool_in_use.load(Relaxed),
        }
    }
}

impl<B: PacketBuf, R: ReportSink> Stage<B> for IntStage<R> {
    #[inline(always)]
    fn depth<O: Output<B>>(&self, t: &Tables, _out: &O) -> Option<Depth> {
        // What it acts on shows at fixed offsets: `quick_consent`.
        t.int.as_ref().map(|_| Depth::L3)
    }

    /// A sink looks each packet's flow up in a flow cache whose flows in
    /// use hold many megabytes (analytics, or the report interval): the
    /// burst's rows load together first, then the entries they point to.
    #[inline(always)]
    fn prefetch_pass(&self, t: &Tables) -> bool {
        t.int.as_ref().is_some_and(|s| s.edge_ports != 0 && self.flows.worth_prefetching(s.report.flow_interval_tsc))
    }

    #[inline(always)]
    fn prefetch(&mut self, t: &Tables, frame: &[u8], meta: &PacketMeta, _index: usize) {
        let Some(spec) =
            t.int.as_ref().filter(|s| s.edge_ports != 0 && self.flows.worth_prefetching(s.report.flow_interval_tsc))
        else {
            return;
        };
        let Some(blk) = int::find(frame, meta, spec.presence) else { return };
        if let Ok(block) = int::Block::read(frame, meta, blk) {
            let hash = original_flow(frame, meta, &block).hash64();
            self.flows.cache.prefetch_row(hash);
            if let Some(h) = self.prefetched.get_mut(self.prefetched_len) {
                (*h, self.prefetched_len) = (hash, self.prefetched_len + 1);
            }
        }
    }

    /// The rows have had the rest of the pass to arrive: the entries
    /// their tags point to (and the entries' hops) start loading now, not
    /// when each packet reaches its lookup.
    #[inline(always)]
    fn prefetch_deeper(&mut self, _t: &Tables) {
        for &h in &self.prefetched[..self.prefetched_len] {
            self.flows.cache.prefetch_entry(h);
        }
        self.prefetched_len = 0;
    }

    #[inline(always)]
    fn begin(&mut self, t: &Tables, burst: &Burst) {
        self.times = BurstClock::new(burst.rx_tsc);
        self.may_source = t.int.as_ref().is_some_and(|s| s.may_source_at(burst.in_port));
        if let Some(s) = &t.int {
            self.consent.refresh(s.presence);
        }
    }

    /// Every port, in a burst that no watch rule may source (not from an
    /// edge port) and whose sink keeps no flow cache worth a prefetch pass
    /// (which the quick path does not take); but for packets that may
    /// carry an INT block (`packet` leaves the others alone).
    #[inline(always)]
    fn quick_consent(&self, t: &Tables) -> QuickConsent {
        match &t.int {
            Some(s) if s.passes_all() => QuickConsent::ALL,
            Some(_) if !self.may_source && !Stage::<B>::prefetch_pass(self, t) => self.consent.to_ports(u32::MAX),
            _ => QuickConsent::NONE,
        }
    }

    /// Ages the sink's flow cache a few rows at a time.
    #[inline(always)]
    fn poll(&mut self, _t: &Tables, now: u64, c: &mut CounterValues) {
        self.flows.poll(now, c);
    }

    /// Exports every flow entry (reason `stop`) before the rings are
    /// drained for the last time.
    fn stop(&mut self, c: &mut CounterValues) {
        self.flows.flush(crate::int::analytics::cache::Reason::Stop, c);
    }

    /// Runs INT on a forwarded packet (its verdict becomes a drop when INT
    /// says so), or files a drop report for a dropped one. Packets INT
    /// cannot act on skip it, decided from the parse (`may_act`).
    #[inline(always)]
    fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
        let (Some(spec), Ok(meta)) = (cx.tables.int.as_ref(), &p.meta) else { return Step::Next };
        // Most packets of a transit: nothing to do, whatever the verdict.
        if !may_act_from(spec, m.bytes(), meta, self.may_source) {
            return Step::Next;
        }
        let in_port = cx.burst.in_port;
        let out_port = match p.verdict {
            Verdict::Tx(port) => port,
            Verdict::Drop(_) => in_port,
            // A flood has no one egress port to decide sink or transit by
            // (and to name in a hop): its copies leave as they came.
            Verdict::Flood => {
                cx.c.event(Event::IntFlooded);
                return Step::Next;
            }
            _ => return Step::Next,
        };
        let hop = StageHop::new(&self.times, &*cx.out, cx.load, in_port, out_port);
        let mut ictx = IntCtx {
            spec,
            clock: &self.clock,
            flows: &mut self.flows,
            counters: cx.c,
            reports: &mut self.reports,
            draft: &mut self.draft,
        };
        match p.verdict {
            Verdict::Drop(r) => dropped(&mut ictx, m.bytes(), meta, &hop, r),
            _ => {
                if let Err(r) = apply(&mut ictx, m, meta, &hop) {
                    p.verdict = Verdict::Drop(r);
                }
            }
        }
        Step::Next
    }
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod tests {
    use super::*;
    use crate::counters::MAX_PORTS;
    use crate::int::analytics::AnalyticsSetup;
    use crate::int::watch::{Presence, ReportParams, SourceParams, Ternary, WatchRule};
    use crate::parse::{parse, tests::udp4};
    use crate::pktbuf::VecBuf;
    use crate::wire::int_md::{instr, IntMd};
    use crate::wire::telemetry_report::FLAG_F;

    const PORT: u16 = 17768;

    pub(crate) fn spec(node: u32, edge: u32) -> IntSpec {
        let mut s = IntSpec {
            node_id: node,
            presence: Presence::UdpPort(PORT),
            edge_ports: edge,
            mtu: [1500; MAX_PORTS],
            source_pushes: true,
            transit: true,
            label_ds_id: 0,
            mtu_report: false,
            report: ReportParams { md_bits: 0x7c00, truncate: 64, flow_interval_tsc: 0 },
            watch: Vec::new(),
            events: Default::default(),
            detect: Default::default(),
        };
        let mut r = WatchRule::any(
            "all-udp",
            Role::Source(SourceParams {
                bitmap: instr::NODE_ID | instr::L1_PORTS | instr::HOP_LATENCY | instr::QUEUE,
                max_hops: 8,
                domain_id: 7,
            }),
        );
        r.proto = Ternary::exact(17);
        s.upsert(r);
        s
    }

    fn hop(in_port: u16, out_port: u16) -> Hop {
        Hop { in_port, out_port, rx_tsc: 1_000, tx_tsc: 3_000, queue_id: 1, queue_occupancy: 5, ..Default::default() }
    }

    pub(crate) struct Node {
        spec: IntSpec,
        flows: Analytics,
        pub(crate) c: CounterValues,
        pub(crate) reports: Vec<ReportRecord>,
        draft: Box<ReportRecord>,
    }

    impl Node {
        pub(crate) fn new(spec: IntSpec) -> Node {
            Node::with_analytics(spec, AnalyticsSetup::interval_only(64))
        }

        /// A node whose sink keeps the per-flow state `setup` asks for.
        pub(crate) fn with_analytics(spec: IntSpec, setup: AnalyticsSetup) -> Node {
            let flows = Analytics::new(setup, WallClock::new(0, 0, 1), 1);
            Node {
                spec,
                flows,
                c: CounterValues::default(),
                reports: Vec::new(),
                draft: Box::new(ReportRecord::empty()),
            }
        }

        pub(crate) fn spec(&self) -> &IntSpec {
            &self.spec
        }

        pub(crate) fn clear_watch(&mut self) {
            self.spec.watch.clear();
        }

        pub(crate) fn run(&mut self, b: &mut VecBuf, h: Hop) -> Result<(), DropReason> {
            let meta = parse(b.bytes(), h.in_port).unwrap();
            self.with_ctx(|ctx| apply(ctx, b, &meta, &h))
        }

        pub(crate) fn drop_report(&mut self, f: &[u8], h: Hop, r: DropReason) {
            let meta = parse(f, h.in_port).unwrap();
            self.with_ctx(|ctx| dropped(ctx, f, &meta, &h, r))
        }

        fn with_ctx<T>(&mut self, f: impl FnOnce(&mut IntCtx<Vec<ReportRecord>>) -> T) -> T {
            let clock = WallClock::new(0, 1_000_000_000, 1_000_000_000);
            let mut ctx = IntCtx {
                spec: &self.spec,
                clock: &clock,
                flows: &mut self.flows,
                counters: &mut self.c,
                reports: &mut self.reports,
                draft: &mut self.draft,
            };
            f(&mut ctx)
        }
    }

    /// A stack longer than a report record holds is cut at REPORT_MAX and
    /// counted; one that fits is not.
    #[test]
    fn a_stack_past_the_record_is_cut_and_counted() {
        let mut sp = spec(1, 0b01);
        sp.watch[0].role = Role::Source(SourceParams { bitmap: 0xff80, max_hops: 20, domain_id: 7 });
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        for (transits, cut) in [(3, false), (11, true)] {
            let mut b = VecBuf::new(&orig, 2048);
            Node::new(sp.clone()).run(&mut b, hop(0, 1)).unwrap();
            for n in 0..transits {
                Node::new(spec(10 + n, 0)).run(&mut b, hop(0, 1)).unwrap();
            }
            let mut sink = Node::new(spec(99, 0b10));
            sink.run(&mut b, hop(0, 1)).unwrap();
            assert_eq!(sink.reports.len(), 1);
            // 48 bytes a hop: 4 hops fit in a record, 12 do not.
            assert_eq!(sink.reports[0].len as usize == REPORT_MAX, cut);
            assert_eq!(sink.c.events[Event::IntReportStackCut as usize], u64::from(cut));
            assert_eq!(b.bytes(), &orig[..], "the packet leaves the sink whole either way");
        }
    }

    /// Every report is built in the one record the stage keeps: a report
    /// after a longer one, and after a drop report, carries only its own
    /// head and bytes.
    #[test]
    fn each_report_carries_only_its_own_head_and_bytes() {
        let mut sp = spec(1, 0b01);
        sp.watch[0].role = Role::Source(SourceParams { bitmap: 0xff80, max_hops: 20, domain_id: 7 });
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        let with_transits = |transits: u32| {
            let mut b = VecBuf::new(&orig, 2048);
            Node::new(sp.clone()).run(&mut b, hop(0, 1)).unwrap();
            for n in 0..transits {
                Node::new(spec(10 + n, 0)).run(&mut b, hop(0, 1)).unwrap();
            }
            b
        };
        let mut sink = Node::new(spec(99, 0b10));
        let (long, mut short) = (with_transits(11), with_transits(1));
        sink.drop_report(long.bytes(), hop(0, 1), DropReason::NoRoute);
        let arrived = short.bytes().to_vec();
        sink.run(&mut short, hop(0, 1)).unwrap();
        assert_eq!(sink.reports.len(), 2);
        let (d, r) = (&sink.reports[0], &sink.reports[1]);
        assert_eq!((d.flags & FLAG_D, d.drop_reason, d.len as usize), (FLAG_D, DropReason::NoRoute as u8, REPORT_MAX));
        assert_eq!((r.flags & FLAG_D, r.drop_reason), (0, 0));
        assert!(r.len > 0 && (r.len as usize) < REPORT_MAX);
        assert_eq!(r.packet(), &arrived[..r.len as usize]);
    }

    #[test]
    fn roles_follow_edge_ports_and_the_watchlist() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        let mut b = VecBuf::new(&orig, 256);
        // s1: in on edge port 0 -> source; s2: core -> core -> transit; s3: out on edge port 1 -> sink.
        let (mut s1, mut s2, mut s3) = (Node::new(spec(1, 0b01)), Node::new(spec(2, 0)), Node::new(spec(3, 0b10)));
        s1.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(s1.c.events[Event::IntSourced as usize], 1);
        s2.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(s2.c.events[Event::IntTransited as usize], 1);
        s3.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(s3.c.events[Event::IntSunk as usize], 1);
        assert_eq!(b.bytes(), &orig[..], "the sink restores the packet");
        let r = &s3.reports[0];
        assert_eq!((r.flags, r.domain_id, r.md.node_id, r.md.hop_latency_ns), (0, 7, 3, 2_000));
        // Truncated: the IP lengths run past it, so read at the known offset.
        let blk = 14 + 20 + 8;
        let v = IntMd::new_checked(&r.packet()[blk..]).unwrap();
        assert_eq!(v.hops(), 2);
        assert_eq!(&v.hop(0)[..4], &2u32.to_be_bytes());
        assert!(r.len as usize >= blk + v.total_len(), "the stack stays inside the report");
        // A packet entering on a core port is not sourced.
        let mut b2 = VecBuf::new(&orig, 256);
        s1.run(&mut b2, hop(1, 0)).unwrap();
        assert_eq!(b2.bytes(), &orig[..]);
    }

    /// `transit = false`: a packet with INT leaving by a core port passes
    /// untouched unless a transit rule matches it; an edge port still
    /// sinks. Only a node that acts on no packet (no edge port, no rule)
    /// lets the quick path take them all (the pipeline's tests).
    #[test]
    fn a_node_without_transit_passes_int_on_unless_a_rule_says_transit() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        let mut b = VecBuf::new(&orig, 256);
        Node::new(spec(1, 0b01)).run(&mut b, hop(0, 1)).unwrap();
        let sourced = b.bytes().to_vec();
        let quiet = |edge| {
            let mut s = spec(2, edge);
            s.transit = false;
            s
        };
        let mut s2 = Node::new(quiet(0));
        s2.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(b.bytes(), &sourced[..], "no hop pushed, nothing else changed");
        assert_eq!(s2.c.events[Event::IntTransited as usize], 0);
        let mut ruled = quiet(0);
        ruled.upsert(WatchRule { priority: 5, ..WatchRule::any("every-flow", Role::Transit) });
        let mut s2 = Node::new(ruled);
        s2.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(s2.c.events[Event::IntTransited as usize], 1, "a transit rule still pushes");
        let mut s3 = Node::new(quiet(0b10));
        s3.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(s3.c.events[Event::IntSunk as usize], 1, "an edge port still sinks");
        assert_eq!(b.bytes(), &orig[..]);
        let v = IntMd::new_checked(&s3.reports[0].packet()[14 + 20 + 8..]).unwrap();
        assert_eq!(v.hops(), 2, "the source's hop and the ruled transit's, not the first pass's");

        let mut bare = quiet(0);
        bare.watch.clear();
        assert!(bare.passes_all());
        // What the quick path's consent for such a node (every packet)
        // rests on: `apply` changes, counts and reports nothing for a
        // forwarded packet, from any port, with INT or without; a dropped
        // INT packet is still reported.
        let mut n = Node::new(bare.clone());
        for (f, h) in [(&sourced, hop(0, 1)), (&sourced, hop(1, 0)), (&orig, hop(0, 1)), (&orig, hop(1, 0))] {
            let mut b = VecBuf::new(f, 256);
            n.run(&mut b, h).unwrap();
            assert_eq!(b.bytes(), &f[..]);
        }
        assert!(n.c.events.iter().all(|&e| e == 0) && n.reports.is_empty());
        n.drop_report(&sourced, hop(0, 1), DropReason::NoRoute);
        assert_eq!(n.reports.len(), 1, "a drop is still reported");
        let mut transit = bare.clone();
        transit.transit = true;
        for acts in [quiet(0), quiet(0b10), transit] {
            assert!(!acts.passes_all());
        }
    }

    #[test]
    fn dscp_domain_matches_the_original_dscp_along_the_path() {
        // A source rule for DSCP 10 (AF11): the transit and the sink still
        // see the flow as DSCP 10 (what NPT=0 saved), not the codepoint.
        let dscp_spec = |node, edge| {
            let mut s = spec(node, edge);
            s.presence = Presence::Dscp { value: 0x17, mask: 0x3f };
            let mut none = WatchRule::any("not-af11", Role::None);
            none.dscp = Ternary { value: 0, mask: 0x3f };
            none.priority = 10;
            s.upsert(none);
            s
        };
        let mut orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        orig[15] = 10 << 2;
        orig[24..26].copy_from_slice(&[0, 0]);
        let c = crate::wire::checksum::checksum(&orig[14..34]);
        orig[24..26].copy_from_slice(&c.to_be_bytes());
        let mut b = VecBuf::new(&orig, 256);
        let (mut s1, mut s2, mut s3) =
            (Node::new(dscp_spec(1, 0b01)), Node::new(dscp_spec(2, 0)), Node::new(dscp_spec(3, 0b10)));
        s1.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(b.bytes()[15] >> 2, 0x17);
        s2.run(&mut b, hop(0, 1)).unwrap();
        s3.run(&mut b, hop(0, 1)).unwrap();
        let ev = |n: &Node, e: Event| n.c.events[e as usize];
        assert_eq!((ev(&s1, Event::IntSourced), ev(&s2, Event::IntTransited), ev(&s3, Event::IntSunk)), (1, 1, 1));
        assert_eq!(b.bytes(), &orig[..]);
        // DSCP 0 matches the `none` rule at the source: no INT.
        let plain = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        let mut b = VecBuf::new(&plain, 256);
        s1.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!((ev(&s1, Event::IntSourced), b.bytes()), (1, &plain[..]));
    }

    #[test]
    fn none_rule_and_tracked_flow_report_interval() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        let other = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4001, 5001, b"x");
        let mut s1 = Node::new(spec(1, 0b01));
        let mut s3 = Node::new(spec(3, 0b10));
        s3.spec.report.flow_interval_tsc = 10_000;
        // Flows are tracked by the sink's flow cache: no flow table takes part.
        let mut send = |frame: &[u8], rx_tsc: u64| {
            let mut b = VecBuf::new(frame, 256);
            s1.run(&mut b, hop(0, 1)).unwrap();
            s3.run(&mut b, Hop { rx_tsc, ..hop(0, 1) }).unwrap();
            assert_eq!(b.bytes(), frame);
        };
        for t in [1_000, 2_000, 10_999] {
            send(&orig, t);
        }
        send(&other, 11_000);
        send(&orig, 11_000);
        send(&orig, 12_000);
        let flags: Vec<u8> = s3.reports.iter().map(|r| r.flags).collect();
        assert_eq!(flags, [FLAG_F; 3], "each flow once per interval: at 1000 and 11000, the other flow at 11000");
        // A higher-priority `none` rule on the original dport exempts the flow at the sink.
        let mut none = WatchRule::any("skip-5001", Role::None);
        none.dst_port = Ternary::exact(5001);
        none.priority = 100;
        s3.spec.upsert(none);
        let mut b = VecBuf::new(&orig, 256);
        s1.run(&mut b, hop(0, 1)).unwrap();
        let with_int = b.bytes().to_vec();
        s3.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(b.bytes(), &with_int[..]);
    }

    /// The sink's report interval runs per original flow: two UDP flows
    /// that differ only in the destination port the source saved (NPT 1)
    /// are two flows; one flow reaching the sink by two ports is one.
    #[test]
    fn report_interval_is_per_original_flow() {
        let a = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        let b = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5002, b"x");
        let mut s1 = Node::new(spec(1, 0b001));
        let mut s3 = Node::new(spec(3, 0b100));
        s3.spec.report.flow_interval_tsc = 10_000;
        let mut send = |frame: &[u8], in_port: u16, rx_tsc: u64| {
            let mut m = VecBuf::new(frame, 256);
            s1.run(&mut m, hop(0, 1)).unwrap();
            s3.run(&mut m, Hop { rx_tsc, ..hop(in_port, 2) }).unwrap();
            assert_eq!(m.bytes(), frame, "restored at the sink");
        };
        send(&a, 0, 1_000);
        send(&b, 0, 1_500);
        send(&a, 1, 2_000);
        send(&b, 1, 2_500);
        // NPT 1: the shim's last two bytes hold the original destination port.
        let dports: Vec<u16> = s3.reports.iter().map(|r| u16::from_be_bytes([r.data[44], r.data[45]])).collect();
        assert_eq!(dports, [5001, 5002], "one report a flow in the interval, whichever port it came by");
    }

    #[test]
    fn malformed_int_passes_transit_and_drops_at_the_sink() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        let mut b = VecBuf::new(&orig, 256);
        Node::new(spec(1, 0b01)).run(&mut b, hop(0, 1)).unwrap();
        let blk = 14 + 20 + 8;
        let mut bad = b.bytes().to_vec();
        bad[blk + 4] = 0x10; // version 1
        let mut transit = Node::new(spec(2, 0));
        let mut tb = VecBuf::new(&bad, 256);
        transit.run(&mut tb, hop(0, 1)).unwrap();
        assert_eq!(tb.bytes(), &bad[..], "passed on untouched");
        assert_eq!(transit.c.events[Event::IntPassedBadVersion as usize], 1);
        let mut sb = VecBuf::new(&bad, 256);
        assert_eq!(Node::new(spec(3, 0b10)).run(&mut sb, hop(0, 1)), Err(DropReason::IntBadVersion));
        let mut hopml0 = b.bytes().to_vec();
        hopml0[blk + 6] = 0;
        let mut t2 = Node::new(spec(2, 0));
        t2.run(&mut VecBuf::new(&hopml0, 256), hop(0, 1)).unwrap();
        assert_eq!(t2.c.events[Event::IntPassedBadHopMl as usize], 1);

        // The same blocks in the INT-label domain are the label stage's:
        // a transit or sink here leaves them as they are and counts
        // nothing (the label stage counts or drops the malformed ones).
        let label_node = |edge| {
            let mut s = spec(2, edge);
            s.label_ds_id = 7;
            Node::new(s)
        };
        for f in [b.bytes().to_vec(), bad, hopml0] {
            for (edge, out) in [(0, 1), (0b10, 1)] {
                let mut n = label_node(edge);
                let mut m = VecBuf::new(&f, 256);
                assert_eq!(n.run(&mut m, hop(0, out)), Ok(()));
                assert_eq!(m.bytes(), &f[..]);
                assert!(n.c.events.iter().all(|&e| e == 0) && n.reports.is_empty());
            }
        }
    }

    #[test]
    fn mtu_report_exports_and_strips() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, &[0u8; 64]);
        let mut b = VecBuf::new(&orig, 256);
        Node::new(spec(1, 0b01)).run(&mut b, hop(0, 1)).unwrap();
        let ip_len = b.bytes().len() - 14;
        let mut t = Node::new(spec(2, 0));
        t.spec.mtu[1] = (ip_len + 4) as u16; // room for less than one hop (16 bytes)
        t.spec.mtu_report = true;
        t.run(&mut b, hop(0, 1)).unwrap();
        assert_eq!(t.reports.len(), 1);
        assert_eq!(t.reports[0].flags, FLAG_I);
        assert_eq!(t.c.events[Event::IntStripped as usize], 1);
        let m = parse(b.bytes(), 0).unwrap();
        let blk = int::find(b.bytes(), &m, Presence::UdpPort(PORT)).unwrap();
        let v = IntMd::new_checked(&b.bytes()[blk..]).unwrap();
        // The source's hop went into the report; only ours is on the stack now.
        assert_eq!(v.hops(), 1);
        assert_eq!(&v.hop(0)[..4], &2u32.to_be_bytes());
    }

    #[test]
    fn drop_reports_and_the_discard_flag() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!");
        // A watched packet this switch drops: a D report with the reason.
        let mut s1 = Node::new(spec(1, 0b01));
        s1.drop_report(&orig, hop(0, 0), DropReason::NoRoute);
        assert_eq!(s1.reports.len(), 1);
        assert_eq!((s1.reports[0].flags, s1.reports[0].drop_reason), (FLAG_D, DropReason::NoRoute as u8));
        assert_eq!(s1.c.events[Event::IntDropReported as usize], 1);
        // Not watched (arrived on a core port, no INT): no report.
        s1.drop_report(&orig, hop(1, 0), DropReason::NoRoute);
        assert_eq!(s1.reports.len(), 1);
        // D=1 in the INT header: the sink reports, then the packet is discarded.
        let mut b = VecBuf::new(&orig, 256);
        s1.run(&mut b, hop(0, 1)).unwrap();
        let mut f = b.bytes().to_vec();
        let blk = 14 + 20 + 8;
        f[blk + 4] |= 0x08;
        let mut s3 = Node::new(spec(3, 0b10));
        assert_eq!(s3.run(&mut VecBuf::new(&f, 256), hop(0, 1)), Err(DropReason::IntDiscard));
        assert_eq!(s3.reports.len(), 1);
    }

    #[test]
    fn wall_clock_converts_ticks() {
        let c = WallClock::new(100, 5_000, 2_500_000_000);
        assert_eq!(c.ns(100), 5_000);
        assert_eq!(c.ns(100 + 2_500_000_000), 1_000_005_000 - 1);
        assert_eq!(c.ns(125), 5_009, "rounds down");
    }

    #[test]
    fn burst_clock_reads_the_egress_time_once_per_eight_packets() {
        let reads = Cell::new(0u64);
        let read = || {
            reads.set(reads.get() + 1);
            reads.get() * 100
        };
        let c = BurstClock::new(50);
        let got: Vec<u64> = (0..17).map(|_| c.egress_tsc(read)).collect();
        assert_eq!(reads.get(), 3);
        assert!(got[..8].iter().all(|&t| t == 100) && got[8..16].iter().all(|&t| t == 200), "{got:?}");
        assert_eq!(got[16], 300);
        assert_eq!(c.rx_tsc, 50);
        // A new burst reads again at once.
        assert_eq!(BurstClock::new(350).egress_tsc(read), 400);
    }
}
