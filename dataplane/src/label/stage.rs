//! The INT-label stage of a worker, after forwarding chose the egress port:
//! the port's label decision and the push (or the first label's insert),
//! then at a last hop (an edge port) the export of the labels in one
//! Telemetry Report and the packet's restoration, as the INT sink does.

use std::sync::Arc;

use crate::counters::{CounterValues, Event, MAX_PORTS};
use crate::forward::Verdict;
use crate::int::stage::{
    watch_fields, BurstClock, HopSource, ReportRecord, ReportSink, StageHop, WallClock, REPORT_MAX,
};
use crate::int::watch::WatchFields;
use crate::int::{self, Block, IntParams, Skip, Transit};
use crate::label::{Claim, LabelPorts, LabelSpec, DS_FLAG_A};
use crate::parse::{PacketMeta, PROTO_TCP, PROTO_UDP};
use crate::pipeline::{Burst, Cx, Depth, Output, Packet, QuickConsent, Stage, Step};
use crate::pktbuf::PacketBuf;
use crate::rand::XorShift;
use crate::tables::Tables;
use crate::wire::int_md::{hop_words, INT_HDR_LEN};
use crate::DropReason;

/// Specific flows' last label times a worker keeps (by flow hash).
pub const FLOW_SLOTS: usize = 4096;

/// Everything `apply` reads or updates besides the packet.
pub struct LabelCtx<'a, R: ReportSink> {
    pub spec: &'a LabelSpec,
    pub ports: &'a LabelPorts,
    pub clock: &'a WallClock,
    pub counters: &'a mut CounterValues,
    pub reports: &'a mut R,
    /// The record each label report is built in (see `ReportSink`).
    pub draft: &'a mut ReportRecord,
    pub rng: &'a mut XorShift,
    /// (flow hash | 1, last label TSC) per slot.
    pub slots: &'a mut [(u64, u64)],
}

/// Whether a specific flow's packet is due for its labels at `ct` (one per
/// rule interval; two flows sharing a slot may each be labeled sooner).
fn specific_due(slots: &mut [(u64, u64)], hash: u64, interval: u64, ct: u64) -> bool {
    let h = hash | 1;
    let s = &mut slots[(hash as usize) & (slots.len() - 1)];
    if s.0 == h && ct.saturating_sub(s.1) < interval {
        return false;
    }
    *s = (h, ct);
    true
}

/// Bytes a packet's first label adds: shim, header and item, and by UDP
/// port a UDP header in front of a TCP segment.
#[inline]
fn first_label_len(spec: &LabelSpec, meta: &PacketMeta) -> usize {
    let udp_hdr = matches!(spec.presence, int::Presence::UdpPort(_)) && meta.key.proto() != PROTO_UDP;
    8 * udp_hdr as usize + INT_HDR_LEN + hop_words(spec.bitmap) * 4
}

/// Why a label was not written.
fn skipped<R: ReportSink>(ctx: &mut LabelCtx<R>, c: &Claim, e: Event) {
    ctx.ports.undo(c);
    ctx.counters.event(e);
}

/// The port's label decision for a packet carrying `b`: always when it
/// belongs to a specific flow (DS flag A), else Base A/B/Pro on the labels
/// it carries.
#[inline(always)]
fn claim_labeled<R: ReportSink>(ctx: &mut LabelCtx<R>, b: &Block, out: usize, ct: u64) -> Option<Claim> {
    if b.ds_flags & DS_FLAG_A != 0 {
        return ctx.ports.force(out, ct);
    }
    let rng = &mut *ctx.rng;
    ctx.ports.decide(out, ct, b.hops(), ctx.spec.times, &ctx.spec.f, || rng.next_u64() as u32)
}

/// The port's label decision for a packet without labels: always for a
/// specific flow entering at an edge port (a `[[label.flow]]` rule, once
/// per its interval), else Base A/B/Pro with none carried.
fn claim_unlabeled<R: ReportSink>(
    ctx: &mut LabelCtx<R>,
    meta: &PacketMeta,
    fields: Option<&WatchFields>,
    in_port: u16,
    out: usize,
    ct: u64,
) -> Option<Claim> {
    let spec = ctx.spec;
    let specific = spec.is_edge(in_port as usize)
        && fields.and_then(|f| spec.specific(f)).is_some_and(|iv| specific_due(ctx.slots, meta.key.hash64(), iv, ct));
    if specific {
        return ctx.ports.force(out, ct);
    }
    let rng = &mut *ctx.rng;
    ctx.ports.decide(out, ct, 0, spec.times, &spec.f, || rng.next_u64() as u32)
}

/// The label stage on one packet leaving by the hop's output port at `ct`
/// (TSC, the label decision's time). `meta` is its parse. An error is a
/// drop with that reason (malformed labels at a last hop).
pub fn apply<B: PacketBuf, R: ReportSink>(
    ctx: &mut LabelCtx<R>,
    pkt: &mut B,
    meta: &PacketMeta,
    hop: &impl HopSource,
    ct: u64,
) -> Result<(), DropReason> {
    let spec = ctx.spec;
    if !matches!(meta.key.proto(), PROTO_TCP | PROTO_UDP) || !int::applicable(pkt.bytes(), meta) {
        return Ok(());
    }
    let last_hop = spec.is_edge(hop.ports().1 as usize);
    let Some(at) = int::find_applicable(pkt.bytes(), meta, spec.presence) else {
        return apply_unlabeled(ctx, pkt, meta, hop, last_hop, ct);
    };
    match Block::read(pkt.bytes(), meta, at) {
        // Another INT domain's packet: classic INT, not ours.
        Ok(b) if b.domain_id != spec.ds_id => Ok(()),
        Ok(b) => apply_labeled(ctx, pkt, meta, hop, &b, last_hop, ct),
        Err(r) if last_hop => Err(r),
        Err(_) => {
            ctx.counters.event(Event::LabelPassedMalformed);
            Ok(())
        }
    }
}

/// `apply` on a packet that carries labels (`b`): a push when the port
/// decides on one, or at a last hop the export and restore. A path of its
/// own, as every packet of a label flow takes it: one path for both kinds
/// kept the block in an `Option` and matched on it three times.
#[inline(always)]
fn apply_labeled<B: PacketBuf, R: ReportSink>(
    ctx: &mut LabelCtx<R>,
    pkt: &mut B,
    meta: &PacketMeta,
    hop: &impl HopSource,
    b: &Block,
    last_hop: bool,
    ct: u64,
) -> Result<(), DropReason> {
    let spec = ctx.spec;
    let (in_port, out_port) = hop.ports();
    let out = out_port as usize;
    let watched = spec.watched(|| watch_fields(pkt.bytes(), meta, in_port, Some(b)));
    let c = if watched { claim_labeled(ctx, b, out, ct) } else { None };
    if last_hop {
        return export(ctx, pkt, meta, hop, b, c);
    }
    let mut pushed = false;
    if let Some(c) = c {
        let md = hop.measure().metadata(spec.node_id, ctx.clock);
        match int::transit_block(pkt, meta, b, &md, spec.mtu[out] as usize) {
            Ok(Transit::Pushed) => {
                pushed = true;
                ctx.ports.commit(&c, ctx.counters);
            }
            Ok(Transit::Exhausted) => skipped(ctx, &c, Event::LabelSkippedRhc),
            Ok(Transit::MtuExceeded) => skipped(ctx, &c, Event::LabelSkippedMtu),
            Err(_) => {
                ctx.ports.undo(&c);
                ctx.counters.event(Event::LabelPassedMalformed);
                return Ok(());
            }
        }
    }
    // The label bytes this packet carries on to the next hop (the
    // occupation of the link by labels); a push added HopML words
    // (`transit_block` checked the bitmap's).
    ctx.counters.event_n(Event::LabelBlockBytes, (b.total + if pushed { b.hop_ml * 4 } else { 0 }) as u64);
    Ok(())
}

/// `apply` on a packet without labels: the first label when the port
/// decides on one (or a specific flow's), exported at once at a last hop.
/// Not inlined: a core port takes it only in the bursts it is due for its
/// interval label (`quiet_ports`).
#[inline(never)]
fn apply_unlabeled<B: PacketBuf, R: ReportSink>(
    ctx: &mut LabelCtx<R>,
    pkt: &mut B,
    meta: &PacketMeta,
    hop: &impl HopSource,
    last_hop: bool,
    ct: u64,
) -> Result<(), DropReason> {
    let spec = ctx.spec;
    let (in_port, out_port) = hop.ports();
    let out = out_port as usize;
    let fields =
        (!spec.watch.is_empty() || !spec.flows.is_empty()).then(|| watch_fields(pkt.bytes(), meta, in_port, None));
    if !fields.as_ref().is_none_or(|f| spec.watched(|| *f)) {
        return Ok(());
    }
    let Some(c) = claim_unlabeled(ctx, meta, fields.as_ref(), in_port, out, ct) else { return Ok(()) };
    let mtu = spec.mtu[out] as usize;
    // A label that does not fit whole is not started (a block without the
    // item would say nothing).
    if meta.l3_end - meta.l3_offset + first_label_len(spec, meta) > mtu {
        skipped(ctx, &c, Event::LabelSkippedMtu);
        return Ok(());
    }
    let p = IntParams {
        presence: spec.presence,
        bitmap: spec.bitmap,
        max_hops: spec.max_labels,
        domain_id: spec.ds_id,
        source_pushes: true,
        ds_flags: if c.kind == crate::label::Kind::Specific { DS_FLAG_A } else { 0 },
    };
    let md = hop.measure().metadata(spec.node_id, ctx.clock);
    match int::source_unmarked(pkt, meta, &p, &md, mtu) {
        Ok(_) => ctx.ports.commit(&c, ctx.counters),
        Err(e) => {
            match e {
                Skip::Mtu => skipped(ctx, &c, Event::LabelSkippedMtu),
                Skip::NoRoom => skipped(ctx, &c, Event::LabelNoHeadroom),
                Skip::NotApplicable | Skip::Presence => ctx.ports.undo(&c),
            }
            return Ok(());
        }
    }
    if !last_hop {
        ctx.counters.event_n(Event::LabelBlockBytes, first_label_len(spec, meta) as u64);
        return Ok(());
    }
    // A last hop that started the packet's first label (a one-hop path):
    // export that label too.
    let meta = crate::parse::parse(pkt.bytes(), in_port)?;
    let Some(at) = int::find(pkt.bytes(), &meta, spec.presence) else { return Ok(()) };
    let b = Block::read(pkt.bytes(), &meta, at)?;
    export(ctx, pkt, &meta, hop, &b, None)
}

/// The last hop of a label packet: one Telemetry Report of it, with this
/// port's label (`c`) put first in the report's copy of the stack (it
/// never goes on the wire: the packet leaves restored), then the restore.
/// Inlined: as a call it took the context by reference, so every packet,
/// labeled or not, built the context in memory.
#[inline(always)]
fn export<B: PacketBuf, R: ReportSink>(
    ctx: &mut LabelCtx<R>,
    pkt: &mut B,
    meta: &PacketMeta,
    hop: &impl HopSource,
    b: &Block,
    c: Option<Claim>,
) -> Result<(), DropReason> {
    let spec = ctx.spec;
    let md = hop.measure().metadata(spec.node_id, ctx.clock);
    let int_end = b.at + b.total;
    // Our label goes in when the RHC allows and the bitmap is well formed.
    let n = match c {
        Some(c) if b.rhc == 0 => {
            skipped(ctx, &c, Event::LabelSkippedRhc);
            0
        }
        Some(c) if hop_words(b.bitmap) != b.hop_ml => {
            ctx.ports.undo(&c);
            return Err(DropReason::IntBadHopMl);
        }
        Some(c) => {
            ctx.ports.commit(&c, ctx.counters);
            b.hop_ml * 4
        }
        None => 0,
    };
    if (int_end + n).min(meta.l3_end + n) > REPORT_MAX {
        ctx.counters.event(Event::LabelReportStackCut);
    }
    let want = spec.truncate.max(int_end).min(meta.l3_end).min(pkt.bytes().len());
    let rec = ctx.draft.start(0, md, spec.ds_id);
    let head = (b.at + INT_HDR_LEN).min(want).min(REPORT_MAX);
    rec.data[..head].copy_from_slice(&pkt.bytes()[..head]);
    let mut len = head;
    if n > 0 && head + n <= REPORT_MAX {
        crate::wire::int_md::emit_hop(b.bitmap, &md, &mut rec.data[head..head + n]);
        label_copy_lengths(&mut rec.data, meta, b, n);
        len += n;
    }
    let rest = (want - head).min(REPORT_MAX - len);
    rec.data[len..len + rest].copy_from_slice(&pkt.bytes()[head..head + rest]);
    rec.len = (len + rest) as u16;
    let (sunk, _) = int::sink_block(pkt, meta, b, spec.presence, &mut [])?;
    ctx.counters.event(Event::LabelSunk);
    if ctx.reports.push(ctx.draft) {
        ctx.counters.event(Event::LabelExported);
    } else {
        ctx.counters.event(Event::LabelReportRingFull);
    }
    if sunk.discard {
        return Err(DropReason::IntDiscard);
    }
    Ok(())
}

/// A report's copy of the packet got `n` more bytes of stack: its shim
/// length, RHC and the IP and UDP lengths say so (the L4 checksum of the
/// copy is left as it was; a report's inner packet is cut short anyway).
/// Each header is one view at its offset (the copy holds them: they lie
/// before the stack); a field per index cost a bounds check each. The
/// IPv4 checksum is updated for a length grown by `n` (> 0), not for any
/// change of the word.
fn label_copy_lengths(d: &mut [u8], meta: &PacketMeta, b: &Block, n: usize) {
    use crate::wire::int_md::SHIM_LEN;
    let add16 = |f: &mut [u8], o: usize| {
        let v = u16::from_be_bytes([f[o], f[o + 1]]).wrapping_add(n as u16);
        f[o..o + 2].copy_from_slice(&v.to_be_bytes());
    };
    if let Some(h) = d.get_mut(b.at..).and_then(|h| h.first_chunk_mut::<{ SHIM_LEN + 4 }>()) {
        h[1] = h[1].wrapping_add((n / 4) as u8);
        h[SHIM_LEN + 3] = b.rhc - 1;
    }
    let l3 = meta.l3_offset;
    if meta.key.ip_version() == 4 {
        if let Some(ip) = d.get_mut(l3..).and_then(|ip| ip.first_chunk_mut::<12>()) {
            add16(ip, 2);
            let c = crate::wire::checksum::word_added(u16::from_be_bytes([ip[10], ip[11]]), n as u16);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
    } else if let Some(ip) = d.get_mut(l3..).and_then(|ip| ip.first_chunk_mut::<6>()) {
        add16(ip, 4);
    }
    if meta.key.proto() == PROTO_UDP {
        if let Some(udp) = d.get_mut(meta.l4_offset..).and_then(|u| u.first_chunk_mut::<6>()) {
            add16(udp, 4);
        }
    }
}

/// A worker's label stage: its report ring, the shared port state, its
/// random draws and its specific flows' slots.
pub struct LabelStage<R: ReportSink> {
    pub reports: R,
    /// Where each label report is built (see `ReportSink`).
    draft: Box<ReportRecord>,
    pub ports: Arc<LabelPorts>,
    rng: XorShift,
    clock: WallClock,
    times: BurstClock,
    slots: Box<[(u64, u64)]>,
    /// This burst's `quiet_ports`.
    quiet: u32,
    /// What the presence leaves to the full path.
    consent: int::ConsentMemo,
}

impl<R: ReportSink> LabelStage<R> {
    pub fn new(reports: R, ports: Arc<LabelPorts>, clock: WallClock, seed: u64) -> LabelStage<R> {
        LabelStage {
            reports,
            draft: Box::new(ReportRecord::empty()),
            ports,
            rng: XorShift::new(seed),
            clock,
            times: BurstClock::new(0),
            slots: vec![(0, 0); FLOW_SLOTS].into_boxed_slice(),
            quiet: 0,
            consent: int::ConsentMemo::default(),
        }
    }
}

/// The ports (a bit each) whose packets without a label get nothing from
/// the stage in a burst from `in_port` at `ct`: f(0) = 0, no specific flow
/// can enter there, and the port is not due for its interval label. LT only
/// grows, so a port not due at the burst's start stays so for the burst (a
/// shift the control core sets meanwhile counts from the next burst).
/// Most packets of a core switch then pass on a bit test and the presence
/// check; an earlier stage's resize leaves that right, as it never touches
/// a label packet, and a block it added or took away is another domain's.
fn quiet_ports(spec: &LabelSpec, ports: &LabelPorts, port_count: usize, in_port: u16, ct: u64) -> u32 {
    if spec.f.draws_unlabeled() || (spec.is_edge(in_port as usize) && !spec.flows.is_empty()) {
        return 0;
    }
    (0..port_count.min(MAX_PORTS)).filter(|&p| !ports.due(p, ct, spec.times)).fold(0, |m, p| m | 1 << p)
}

/// The quick pass: whether a packet leaving by `out_port`, one of the
/// `quiet` ports, carries no label (by the presence method).
#[inline(always)]
fn passes_quietly(spec: &LabelSpec, quiet: u32, b: &[u8], meta: &PacketMeta, out_port: u16) -> bool {
    out_port < 32 && quiet & 1 << out_port != 0 && !int::may_carry(b, meta, spec.presence)
}

/// Whether an earlier stage changed the packet's IP length since it was
/// parsed (INT: a source, a push or a sink): the parse's offsets past L4 are stale.
#[inline]
fn resized(b: &[u8], meta: &PacketMeta) -> bool {
    let l3 = meta.l3_offset;
    let len = match (meta.key.ip_version(), b.get(l3 + 2..l3 + 6)) {
        (4, Some(h)) => u16::from_be_bytes([h[0], h[1]]) as usize,
        (6, Some(h)) => 40 + u16::from_be_bytes([h[2], h[3]]) as usize,
        _ => return false,
    };
    l3 + len != meta.l3_end
}

impl<B: PacketBuf, R: ReportSink> Stage<B> for LabelStage<R> {
    #[inline(always)]
    fn depth<O: Output<B>>(&self, t: &Tables, _out: &O) -> Option<Depth> {
        // Quiet ports' packets without a label show at fixed offsets.
        t.label.as_ref().map(|_| Depth::L3)
    }

    #[inline(always)]
    fn begin(&mut self, t: &Tables, burst: &Burst) {
        self.times = BurstClock::new(burst.rx_tsc);
        self.quiet = match &t.label {
            Some(spec) => {
                self.consent.refresh(spec.presence);
                quiet_ports(spec, &self.ports, t.ports.len(), burst.in_port, burst.now)
            }
            None => 0,
        };
    }

    /// The burst's `quiet_ports`, but for packets that may carry a label
    /// (`passes_quietly` at fixed offsets).
    #[inline(always)]
    fn quick_consent(&self, t: &Tables) -> QuickConsent {
        match &t.label {
            Some(_) => self.consent.to_ports(self.quiet),
            None => QuickConsent::NONE,
        }
    }

    /// Labels a forwarded packet by its egress port (dropped and flooded
    /// packets have none); at a last hop, exports and restores.
    #[inline(always)]
    fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
        let (Some(spec), Ok(meta)) = (cx.tables.label.as_ref(), &p.meta) else { return Step::Next };
        let Verdict::Tx(out_port) = p.verdict else { return Step::Next };
        let in_port = cx.burst.in_port;
        if passes_quietly(spec, self.quiet, m.bytes(), meta, out_port) {
            return Step::Next;
        }
        // An INT stage that acts on no packet (a node of the label domain
        // only) resized none.
        let reparsed;
        let meta = if cx.tables.int.as_ref().is_some_and(|s| !s.passes_all()) && resized(m.bytes(), meta) {
            match crate::parse::parse(m.bytes(), in_port) {
                Ok(r) => {
                    reparsed = r;
                    &reparsed
                }
                Err(_) => return Step::Next,
            }
        } else {
            meta
        };
        let hop = StageHop::new(&self.times, &*cx.out, cx.load, in_port, out_port);
        let mut lctx = LabelCtx {
            spec,
            ports: &self.ports,
            clock: &self.clock,
            counters: cx.c,
            reports: &mut self.reports,
            draft: &mut self.draft,
            rng: &mut self.rng,
            slots: &mut self.slots,
        };
        if let Err(r) = apply(&mut lctx, m, meta, &hop, cx.burst.now) {
            p.verdict = Verdict::Drop(r);
        }
        Step::Next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::MAX_PORTS;
    use crate::int::stage::Hop;
    use crate::int::tests::{checksums_valid, tcp};
    use crate::int::watch::{Presence, Role, Ternary, WatchRule};
    use crate::label::{LabelFn, Thresholds, Times, SHIFT_EVERY_PACKET};
    use crate::parse::parse;
    use crate::parse::tests::{udp4, udp6};
    use crate::pktbuf::VecBuf;

    const DS: u16 = 0x1b1;
    const T: u64 = 50_000;

    fn spec(node: u32, edge: u32) -> LabelSpec {
        LabelSpec {
            node_id: node,
            ds_id: DS,
            presence: Presence::Dscp { value: 0x17, mask: 0x3f },
            bitmap: 0xfc00,
            max_labels: 8,
            times: Times { interval: T, rest: 0 },
            f: Thresholds::new(&LabelFn::F1, 5),
            edge_ports: edge,
            mtu: [1500; MAX_PORTS],
            truncate: 64,
            watch: Vec::new(),
            flows: Vec::new(),
        }
    }

    struct Node {
        spec: LabelSpec,
        ports: LabelPorts,
        c: CounterValues,
        reports: Vec<ReportRecord>,
        draft: Box<ReportRecord>,
        rng: XorShift,
        slots: Vec<(u64, u64)>,
        /// Whether `run` takes the stage's quick pass (`quiet_ports`), as
        /// the worker does.
        quick: bool,
        /// The quiet ports of the burst `run` is in (the worker computes
        /// them at a burst's start); None: of a burst of one packet.
        burst_quiet: Option<u32>,
    }

    impl Node {
        fn new(spec: LabelSpec) -> Node {
            let (ports, c, rng) = (LabelPorts::default(), CounterValues::default(), XorShift::new(3));
            let draft = Box::new(ReportRecord::empty());
            Node {
                spec,
                ports,
                c,
                reports: Vec::new(),
                draft,
                rng,
                slots: vec![(0, 0); 64],
                quick: true,
                burst_quiet: None,
            }
        }

        /// Runs the stage on `b` from port 0 to port 1 at `ct`.
        fn run(&mut self, b: &mut VecBuf, ct: u64) -> Result<(), DropReason> {
            let meta = parse(b.bytes(), 0).unwrap();
            let hop = Hop { in_port: 0, out_port: 1, rx_tsc: ct, tx_tsc: ct + 100, ..Default::default() };
            let clock = WallClock::new(0, 1_000_000_000, 1_000_000_000);
            let quiet = match (self.quick, self.burst_quiet) {
                (false, _) => 0,
                (true, Some(q)) => q,
                (true, None) => quiet_ports(&self.spec, &self.ports, 2, 0, ct),
            };
            if passes_quietly(&self.spec, quiet, b.bytes(), &meta, 1) {
                return Ok(());
            }
            let mut ctx = LabelCtx {
                spec: &self.spec,
                ports: &self.ports,
                clock: &clock,
                counters: &mut self.c,
                reports: &mut self.reports,
                draft: &mut self.draft,
                rng: &mut self.rng,
                slots: &mut self.slots,
            };
            apply(&mut ctx, b, &meta, &hop, ct)
        }

        fn ev(&self, e: Event) -> u64 {
            self.c.events[e as usize]
        }
    }

    /// The INT-MD block of a DSCP-mode packet, decoded field by field from
    /// the v2.1 layout: (DS ID, DS flags, RHC, hops, node IDs newest first).
    fn decode(f: &[u8]) -> Option<(u16, u16, u8, usize, Vec<u32>)> {
        decode_at(f, block_at(f))
    }

    /// Where a DSCP-mode block starts: after the UDP header or TCP options
    /// (read from the headers: a report's packet is cut short).
    fn block_at(f: &[u8]) -> usize {
        let (l4, proto) =
            if f[12..14] == [0x86, 0xdd] { (54, f[20]) } else { (14 + (f[14] & 0xf) as usize * 4, f[23]) };
        l4 + if proto == PROTO_UDP { 8 } else { (f[l4 + 12] >> 4) as usize * 4 }
    }

    fn decode_at(f: &[u8], at: usize) -> Option<(u16, u16, u8, usize, Vec<u32>)> {
        let shim = &f[at..at + 4];
        let hdr = &f[at + 4..at + 16];
        if shim[0] >> 4 != 1 || hdr[0] >> 4 != 2 {
            return None;
        }
        let words = shim[1] as usize;
        let hop_ml = (hdr[2] & 0x1f) as usize;
        let hops = (words - 3) / hop_ml;
        let nodes = (0..hops)
            .map(|i| {
                let o = at + 16 + i * hop_ml * 4;
                u32::from_be_bytes(f[o..o + 4].try_into().unwrap())
            })
            .collect();
        Some((u16::from_be_bytes([hdr[6], hdr[7]]), u16::from_be_bytes([hdr[10], hdr[11]]), hdr[3], hops, nodes))
    }

    /// The paper's Fig. 3: the first hop labels (insert), the second pushes
    /// (F1 after its own interval label), the last labels its own port,
    /// exports the three labels in one report and restores the packet.
    #[test]
    fn three_hops_label_export_and_restore_byte_identical() {
        let frames = [
            udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"payload!"),
            udp6([0x20; 16], [0x30; 16], 4000, 5001, b"payload six"),
            tcp(false, 10, 8, b"tcp payload"),
            tcp(true, 0, 0, b"tcp six"),
        ];
        for orig in frames {
            let (mut s1, mut s2, mut s3) = (Node::new(spec(1, 0b01)), Node::new(spec(2, 0)), Node::new(spec(3, 0b10)));
            let mut b = VecBuf::new(&orig, 512);
            s1.run(&mut b, 10 * T).unwrap();
            assert!(checksums_valid(b.bytes()));
            let (ds, flags, rhc, hops, nodes) = decode(b.bytes()).expect("labeled");
            assert_eq!((ds, flags, rhc, hops, nodes), (DS, 0, 7, 1, vec![1]));
            assert_eq!(b.bytes().len(), orig.len() + 16 + 32, "the paper's 32-byte item");
            s2.run(&mut b, 10 * T).unwrap();
            assert!(checksums_valid(b.bytes()));
            assert_eq!(decode(b.bytes()).unwrap().4, vec![2, 1]);
            let arrived = b.bytes().to_vec();
            s3.run(&mut b, 10 * T).unwrap();
            assert_eq!(b.bytes(), &orig[..], "restored");
            assert_eq!(s3.reports.len(), 1);
            let r = &s3.reports[0];
            assert_eq!((r.flags, r.domain_id, r.md.node_id), (0, DS, 3));
            assert_eq!(decode(r.packet()).unwrap().4, vec![3, 2, 1], "the last hop's own label first");
            // The copy's lengths count the last hop's label (32 bytes, 8 words).
            let (c, blk) = (r.packet(), block_at(&arrived));
            let be16 = |f: &[u8], o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
            assert_eq!((c[blk + 1], c[blk + 7]), (arrived[blk + 1] + 8, arrived[blk + 7] - 1), "shim length, RHC");
            let (ip_len, l4) = if c[12..14] == [0x86, 0xdd] { (18, 54) } else { (16, 34) };
            assert_eq!(be16(c, ip_len), be16(&arrived, ip_len) + 32);
            if ip_len == 16 {
                assert!(crate::wire::checksum::header_verifies(c[14..34].try_into().unwrap()), "IPv4 header checksum");
            }
            if c[if ip_len == 16 { 23 } else { 20 }] == PROTO_UDP {
                assert_eq!(be16(c, l4 + 4), be16(&arrived, l4 + 4) + 32, "UDP length");
            }
            let ev = |n: &Node, e| n.ev(e);
            assert_eq!((ev(&s1, Event::LabelInterval), ev(&s2, Event::LabelInterval)), (1, 1));
            assert_eq!((ev(&s1, Event::LabelBlockBytes), ev(&s2, Event::LabelBlockBytes)), (48, 80));
            assert_eq!((ev(&s3, Event::LabelSunk), ev(&s3, Event::LabelExported)), (1, 1));
            // The item's egress timestamp is the label time.
            let at = block_at(r.packet()) + 16;
            let egress_ts = u64::from_be_bytes(r.packet()[at + 24..at + 32].try_into().unwrap());
            assert_eq!(egress_ts, 1_000_000_000 + 10 * T + 100);
            // Within T nothing more is labeled: the packet passes untouched.
            let mut again = VecBuf::new(&orig, 512);
            s1.run(&mut again, 10 * T + T).unwrap();
            assert_eq!(again.bytes(), &orig[..]);
        }
    }

    #[test]
    fn base_b_pushes_on_labeled_packets_and_a_unlabeled_one_waits_for_t() {
        let (mut s1, mut s2) = (Node::new(spec(1, 0b01)), Node::new(spec(2, 0)));
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        // s2's port labels a plain packet first (its interval label).
        let mut plain = VecBuf::new(&orig, 512);
        s2.run(&mut plain, 10 * T).unwrap();
        assert_eq!(decode(plain.bytes()).unwrap().4, vec![2]);
        // Within T: a labeled packet gets F1's label, a plain one none.
        let mut b = VecBuf::new(&orig, 512);
        s1.run(&mut b, 10 * T).unwrap();
        s2.run(&mut b, 10 * T + 10).unwrap();
        assert_eq!(decode(b.bytes()).unwrap().4, vec![2, 1]);
        let mut plain = VecBuf::new(&orig, 512);
        s2.run(&mut plain, 10 * T + 20).unwrap();
        assert_eq!(plain.bytes(), &orig[..]);
        assert_eq!((s2.ev(Event::LabelInterval), s2.ev(Event::LabelProbabilistic)), (1, 1));
    }

    #[test]
    fn specific_flows_are_labeled_at_every_hop_with_flag_a() {
        let mut sp1 = spec(1, 0b01);
        let mut rule = WatchRule::any("vip", Role::Transit);
        rule.dst_port = Ternary::exact(5001);
        sp1.flows.push(crate::label::FlowRule { rule, interval_tsc: 1_000 });
        let (mut s1, mut s2, mut s3) = (Node::new(sp1), Node::new(spec(2, 0)), Node::new(spec(3, 0b10)));
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        let other = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5002, b"x");
        // Use up every port's interval label first.
        for n in [&mut s1, &mut s2, &mut s3] {
            n.run(&mut VecBuf::new(&other, 512), 10 * T).unwrap();
        }
        s3.reports.clear();
        let mut b = VecBuf::new(&orig, 512);
        s1.run(&mut b, 10 * T + 1).unwrap();
        let (_, flags, _, _, _) = decode(b.bytes()).unwrap();
        assert_eq!(flags, DS_FLAG_A);
        s2.run(&mut b, 10 * T + 1).unwrap();
        s3.run(&mut b, 10 * T + 1).unwrap();
        assert_eq!(b.bytes(), &orig[..]);
        assert_eq!(decode(s3.reports[0].packet()).unwrap().4, vec![3, 2, 1]);
        assert_eq!([&s1, &s2, &s3].map(|n| n.ev(Event::LabelSpecific)), [1, 1, 1]);
        // Once per flow interval at the ingress switch.
        let mut b = VecBuf::new(&orig, 512);
        s1.run(&mut b, 10 * T + 500).unwrap();
        assert_eq!(b.bytes(), &orig[..]);
        s1.run(&mut b, 10 * T + 1_001).unwrap();
        assert_eq!(decode(b.bytes()).unwrap().1, DS_FLAG_A);
    }

    #[test]
    fn foreign_ds_ids_are_classic_int_and_left_alone() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        let mut b = VecBuf::new(&orig, 512);
        let mut s1 = Node::new(spec(1, 0b01));
        s1.spec.ds_id = 0x99;
        s1.run(&mut b, 10 * T).unwrap();
        let labeled = b.bytes().to_vec();
        for edge in [0, 0b10] {
            let mut n = Node::new(spec(2, edge));
            let mut c = VecBuf::new(&labeled, 512);
            n.run(&mut c, 10 * T).unwrap();
            assert_eq!(c.bytes(), &labeled[..], "edge {edge:#b}: untouched");
            assert!(n.reports.is_empty());
        }
    }

    #[test]
    fn malformed_labels_pass_a_transit_and_drop_at_the_last_hop() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x");
        let mut b = VecBuf::new(&orig, 512);
        Node::new(spec(1, 0b01)).run(&mut b, 10 * T).unwrap();
        let mut bad = b.bytes().to_vec();
        bad[42 + 6] = 0; // HopML 0
        let mut t = Node::new(spec(2, 0));
        let mut c = VecBuf::new(&bad, 512);
        t.run(&mut c, 10 * T).unwrap();
        assert_eq!((c.bytes(), t.ev(Event::LabelPassedMalformed)), (&bad[..], 1));
        assert_eq!(Node::new(spec(3, 0b10)).run(&mut VecBuf::new(&bad, 512), 10 * T), Err(DropReason::IntBadHopMl));
    }

    #[test]
    fn labels_that_do_not_fit_are_skipped_counted_and_keep_the_interval() {
        let orig = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, &[0; 100]);
        let ip_len = orig.len() - 14;
        let mut s1 = Node::new(spec(1, 0b01));
        s1.spec.mtu[1] = (ip_len + 16 + 31) as u16;
        let mut b = VecBuf::new(&orig, 512);
        s1.run(&mut b, 10 * T).unwrap();
        assert_eq!((b.bytes(), s1.ev(Event::LabelSkippedMtu)), (&orig[..], 1));
        s1.spec.mtu[1] = 1500;
        s1.run(&mut b, 10 * T + 1).unwrap();
        assert_eq!(s1.ev(Event::LabelInterval), 1, "the next packet takes the interval's label");
        // RHC 0: E set, nothing pushed, counted.
        let mut s0 = Node::new(spec(1, 0b01));
        s0.spec.max_labels = 1;
        let mut b = VecBuf::new(&orig, 512);
        s0.run(&mut b, 10 * T).unwrap();
        let mut s2 = Node::new(spec(2, 0));
        s2.run(&mut b, 10 * T).unwrap();
        assert_eq!(s2.ev(Event::LabelSkippedRhc), 1);
        assert_eq!(decode(b.bytes()).unwrap().3, 1);
        assert!(checksums_valid(b.bytes()));
        assert_ne!(b.bytes()[42 + 4] & 0x04, 0, "E");
    }

    #[test]
    fn a_none_watch_rule_exempts_packets_from_labels() {
        let mut sp = spec(1, 0b01);
        let mut none = WatchRule::any("no-dns", Role::None);
        none.dst_port = Ternary::exact(53);
        sp.watch.push(none);
        let mut s1 = Node::new(sp);
        let dns = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 53, b"x");
        let mut b = VecBuf::new(&dns, 512);
        s1.run(&mut b, 10 * T).unwrap();
        assert_eq!(b.bytes(), &dns[..]);
        // No rule matches the other flow: the watchlist has only `none`, so not labeled either.
        let web = udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 80, b"x");
        let mut b = VecBuf::new(&web, 512);
        s1.run(&mut b, 10 * T).unwrap();
        assert_eq!(b.bytes(), &web[..]);
    }

    /// The stage's quick pass (a quiet port: a packet without a label gets
    /// none) changes nothing: two nodes, one taking it and one not, see the
    /// same packets at the same times and must write the same bytes, the
    /// same counters, the same LT and reports. Plain and labeled packets,
    /// IPv4, IPv6 and TCP, at a transit and a last hop, under F1, F2, a
    /// table with f(0) > 0, specific flows, and Pro's shifts.
    #[test]
    fn the_quick_pass_changes_nothing() {
        let plain = [
            udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x"),
            udp6([0x20; 16], [0x30; 16], 4000, 5001, b"six"),
            tcp(false, 10, 8, b"tcp"),
        ];
        let mut first = Node::new(spec(9, 0));
        let labeled: Vec<Vec<u8>> = plain
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut b = VecBuf::new(f, 512);
                first.run(&mut b, (i as u64 + 1) * 2 * T).unwrap();
                b.bytes().to_vec()
            })
            .collect();
        assert!(labeled.iter().all(|f| decode(f).is_some()));
        let mut variants = Vec::new();
        for edge in [0, 0b10, 0b01] {
            for f in [LabelFn::F1, LabelFn::F2, LabelFn::Table(vec![0.05, 0.5])] {
                variants.push(LabelSpec { f: Thresholds::new(&f, 5), ..spec(2, edge) });
            }
        }
        let mut specific = spec(2, 0b01);
        let mut rule = WatchRule::any("vip", Role::Transit);
        rule.dst_port = Ternary::exact(5001);
        specific.flows.push(crate::label::FlowRule { rule, interval_tsc: T / 3 });
        variants.push(specific);
        let mut quiet_plain = 0;
        for (v, sp) in variants.into_iter().enumerate() {
            let (mut quick, mut full) = (Node::new(sp.clone()), Node::new(sp));
            full.quick = false;
            let mut rng = XorShift::new(v as u64 + 7);
            let mut ct = 10 * T;
            for i in 0..3000u64 {
                // Bursts of about 4 packets: one receive time, the quiet
                // ports computed at the burst's start, where a new shift
                // takes effect (the control core's `set-shift`).
                if i == 0 || rng.next_u64() % 4 == 0 {
                    ct += rng.next_u64() % (T / 2);
                    let s = [0, 3, SHIFT_EVERY_PACKET, 0, 1, 0][(i / 500) as usize];
                    quick.ports.set_shift(1, s).unwrap();
                    full.ports.set_shift(1, s).unwrap();
                    quick.burst_quiet = Some(quiet_ports(&quick.spec, &quick.ports, 2, 0, ct));
                }
                let r = rng.next_u64() as usize;
                let orig = if r % 4 == 0 { &labeled[r / 4 % 3] } else { &plain[r / 4 % 3] };
                quiet_plain += (r % 4 != 0 && quick.burst_quiet.is_some_and(|q| q & 0b10 != 0)) as u32;
                let (mut a, mut b) = (VecBuf::new(orig, 512), VecBuf::new(orig, 512));
                assert_eq!(quick.run(&mut a, ct), full.run(&mut b, ct), "variant {v}, packet {i}");
                assert_eq!(a.bytes(), b.bytes(), "variant {v}, packet {i}");
                assert_eq!(
                    (quick.ports.state(1), quick.c.events, quick.c.labels),
                    (full.ports.state(1), full.c.events, full.c.labels)
                );
                assert_eq!(quick.reports.len(), full.reports.len());
            }
            assert!(full.c.labels[1] > 0, "variant {v} labeled");
        }
        assert!(quiet_plain > 5_000, "plain packets on a quiet port: {quiet_plain}");
        // Where a plain packet may be labeled by chance, or a specific flow
        // enter, no port is quiet.
        let ports = LabelPorts::default();
        let by_chance = LabelSpec { f: Thresholds::new(&LabelFn::Table(vec![0.1, 1.0]), 5), ..spec(2, 0) };
        assert_eq!(quiet_ports(&by_chance, &ports, 2, 0, T / 2), 0);
        let mut specific = spec(2, 0b01);
        specific.flows.push(crate::label::FlowRule { rule: WatchRule::any("vip", Role::Transit), interval_tsc: 1_000 });
        assert_eq!(quiet_ports(&specific, &ports, 2, 0, T / 2), 0);
        assert_eq!(quiet_ports(&specific, &ports, 2, 1, T / 2), 0b11, "specific flows enter at edge port 0 only");
        assert_eq!(quiet_ports(&spec(2, 0), &ports, 2, 0, T / 2), 0b11);
        assert_eq!(quiet_ports(&spec(2, 0), &ports, 2, 0, T + 1), 0, "due");
    }
}
