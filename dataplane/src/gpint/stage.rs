//! The SQR stage (gpint-sqr-reliable-int §III-C and §IV, issue 33): it
//! claims GPINT probes and feedbacks before forwarding, since a probe
//! follows its source route, not the forwarding tables.
//!
//! A probe: acknowledged to the previous hop (a feedback out the ingress
//! port, with recovery on), checked against the duplicate filter, then
//! measured (this switch's INT hop and a MEA record of the counters its SR
//! entry asks for), and either forwarded out the entry's port with a copy
//! kept until the next hop's feedback, or at the path's end delivered to
//! the collectors as a Telemetry Report. A copy whose feedback does not
//! come within `hold_ms` goes to the collectors as a recovery notice. A
//! feedback frees its copy. Switches never retransmit by themselves.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::counters::{CounterValues, Event};
use crate::forward::Verdict;
use crate::gpint::clone_buffer::{CloneBuffer, CopyKey, Waiting};
use crate::gpint::frame::refresh_udp_checksum;
use crate::gpint::seen::Seen;
use crate::gpint::GpintSpec;
use crate::int::stage::{Hop, WallClock};
use crate::int::{self, Block, Transit};
use crate::parse::{self, PacketMeta, PROTO_UDP};
use crate::pipeline::{Cx, Depth, Output, Packet, Stage, Step};
use crate::pktbuf::PacketBuf;
use crate::tables::Tables;
use crate::wire::checksum;
use crate::wire::gpint::{emit_mea_record, mea_record_len, set_sr_left, Header, Kind, Probe, RequestType};
use crate::wire::int_md::HopMetadata;
use crate::wire::telemetry_report::{FLAG_D, FLAG_I};
use crate::wire::udp::UdpRepr;
use crate::worker::WorkerShared;
use crate::DropReason;

/// The longest frame a copy or an export holds: the mbuf data room.
pub const COPY_MAX: usize = 2048;
/// Copies the wheel visits at most per poll, and buckets (1 ms each).
const EXPIRE_COPIES: usize = 16;
const EXPIRE_BUCKETS: usize = 64;
const WHEEL_BUCKETS: usize = 4096;

/// A frame's bytes, held by value (a copy, an export).
#[derive(Clone, Copy)]
pub struct Frame {
    len: u16,
    bytes: [u8; COPY_MAX],
}

impl Frame {
    /// The first [`COPY_MAX`] bytes of `b`.
    pub fn of(b: &[u8]) -> Frame {
        let n = b.len().min(COPY_MAX);
        let mut f = Frame { len: n as u16, bytes: [0; COPY_MAX] };
        f.bytes[..n].copy_from_slice(&b[..n]);
        f
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len as usize]
    }
}

/// A probe on its way to the collectors as a Telemetry Report v2.0: a
/// delivery at the path's end (no flags) or a recovery notice (I and D,
/// reason `gpint_feedback_timeout`).
#[derive(Clone, Copy)]
pub struct GpintRecord {
    pub flags: u8,
    pub drop_reason: u8,
    pub domain_id: u16,
    /// This switch's hop as it forwarded (or delivered) the probe.
    pub md: HopMetadata,
    /// The probe, untruncated.
    pub frame: Frame,
}

/// Where the stage hands records to the control core; false when full
/// (dropped and counted, a worker never waits).
pub trait GpintSink {
    fn push(&mut self, r: GpintRecord) -> bool;
}

impl GpintSink for Vec<GpintRecord> {
    fn push(&mut self, r: GpintRecord) -> bool {
        Vec::push(self, r);
        true
    }
}

/// A worker's ring to the control core (None: GPINT not configured).
impl GpintSink for Option<rtrb::Producer<GpintRecord>> {
    fn push(&mut self, r: GpintRecord) -> bool {
        self.as_mut().is_some_and(|p| p.push(r).is_ok())
    }
}

/// A copy waiting for its feedback: the probe as forwarded, and this
/// switch's hop then (the notice reports it).
#[derive(Clone, Copy)]
struct Stored {
    md: HopMetadata,
    domain_id: u16,
    frame: Frame,
}

/// What `intctl show gpint` shows of one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqrView {
    pub capacity: usize,
    pub in_use: usize,
    pub high_water: usize,
    /// Oldest first.
    pub waiting: Vec<Waiting>,
}

/// What a worker's SQR stage is built from.
pub struct GpintSetup<S> {
    /// Copies kept at most (`gpint.clone_slots`).
    pub slots: usize,
    pub exports: S,
    /// This worker's index in `workers`.
    pub worker: usize,
    /// Every worker's shared state: the switch-wide port counters a MEA
    /// record reports.
    pub workers: Vec<Arc<WorkerShared>>,
}

impl GpintSetup<Option<rtrb::Producer<GpintRecord>>> {
    /// A switch without GPINT (one slot, no ring).
    pub fn off() -> Self {
        GpintSetup { slots: 1, exports: None, worker: 0, workers: Vec::new() }
    }
}

/// A worker's SQR stage.
pub struct SqrStage<S: GpintSink> {
    exports: S,
    copies: CloneBuffer<Stored>,
    seen: Seen,
    clock: WallClock,
    worker: usize,
    workers: Vec<Arc<WorkerShared>>,
}

impl<S: GpintSink> SqrStage<S> {
    /// `hz`: TSC ticks a second (the wheel turns in 1 ms buckets).
    pub fn new(s: GpintSetup<S>, clock: WallClock, hz: u64, now: u64) -> SqrStage<S> {
        SqrStage {
            exports: s.exports,
            copies: CloneBuffer::new(s.slots, WHEEL_BUCKETS, (hz / 1000).max(1), now),
            seen: Seen::new(s.slots * 4),
            clock,
            worker: s.worker,
            workers: s.workers,
        }
    }

    /// The clone buffer's slots, for `intctl show gpint` (allocates: never
    /// on the per-packet path).
    pub fn view(&self, now: u64) -> SqrView {
        SqrView {
            capacity: self.copies.capacity(),
            in_use: self.copies.in_use(),
            high_water: self.copies.high_water(),
            waiting: self.copies.waiting(now),
        }
    }

    /// Register `i` of a probe's request type: the switch's packets
    /// received on port `i` (type 1) or sent from it (type 0: the hits of
    /// the forwarding decisions per output port; this switch has no
    /// per-rule counters a probe could index), over every worker: this
    /// one's live count and the others' as last published. 32 bits,
    /// wrapping.
    fn register(&self, kind: RequestType, i: usize, c: &CounterValues) -> u32 {
        let rx = kind == RequestType::PortRx;
        let mine = if rx { c.rx_packets[i] } else { c.tx_packets[i] };
        let others: u64 = self
            .workers
            .iter()
            .enumerate()
            .filter(|(w, _)| *w != self.worker)
            .map(|(_, w)| w.counters.port_packets(i, rx))
            .sum();
        mine.wrapping_add(others) as u32
    }

    /// A feedback: frees the copy it acknowledges.
    fn on_feedback(&mut self, b: &[u8], meta: &PacketMeta, c: &mut CounterValues) -> Verdict {
        let payload = b.get(meta.l4_offset + 8..meta.l3_end).unwrap_or(&[]);
        let h = match Header::parse(payload) {
            Ok(h) if h.kind == Kind::Feedback => h,
            _ => return Verdict::Drop(DropReason::GpintMalformed),
        };
        c.event(Event::GpintFeedbackRx);
        let key = CopyKey { request_id: h.request_id, attempt: h.attempt, hop_index: h.start_index };
        match self.copies.ack(key) {
            Some(_) => c.event(Event::SqrAcked),
            // Late (the copy already went as a notice) or a duplicate.
            None => c.event(Event::GpintFeedbackUnmatched),
        }
        Verdict::Consumed
    }

    /// A probe: acknowledged, measured, and forwarded or delivered.
    fn on_probe<B: PacketBuf, O: Output<B>>(
        &mut self,
        spec: &GpintSpec,
        cx: &mut Cx<'_, O>,
        m: &mut B,
        meta: &PacketMeta,
        blk: &Block,
    ) -> Result<Verdict, DropReason> {
        let b = m.bytes();
        let block = b.get(blk.at + blk.total..meta.l3_end).ok_or(DropReason::GpintMalformed)?;
        let probe = Probe::new_checked(block)?;
        let h = probe.header;
        if h.kind != Kind::Probe {
            return Err(DropReason::GpintMalformed);
        }
        let entry = probe.current()?;
        let nports = cx.tables.ports.len();
        let to_monitor = entry.is_last();
        if !to_monitor && entry.next_port as usize >= nports {
            return Err(DropReason::GpintBadNextPort);
        }
        let regs = entry.mea_range(nports)?;
        let in_port = cx.burst.in_port;
        let out_port = if to_monitor { in_port } else { entry.next_port as u16 };
        let hop_index = h.hop_index();
        let now = cx.burst.now;
        if spec.recovery {
            let key = CopyKey { request_id: h.request_id, attempt: h.attempt, hop_index };
            let dup = self.seen.check(key, now, spec.hold_tsc.saturating_mul(2).max(1));
            send_feedback(spec, cx, m, meta, &h, in_port);
            if dup {
                cx.c.event(Event::GpintDup);
                return Ok(Verdict::Consumed);
            }
        }
        let grow = blk.hop_ml * 4 + mea_record_len(regs.len());
        let ip_len = meta.l3_end - meta.l3_offset;
        if !to_monitor && ip_len + grow > spec.mtu[out_port as usize] as usize || meta.l3_end + grow > COPY_MAX {
            return Err(DropReason::GpintOverMtu);
        }
        // The counters as the probe passes, before it changes anything.
        let mut values = [0u32; crate::counters::MAX_PORTS];
        for (v, i) in values.iter_mut().zip(regs.clone()) {
            *v = self.register(h.request_type, i, cx.c);
        }
        let md = self.hop::<B, O>(spec, cx, in_port, out_port);
        match int::transit_block(m, meta, blk, &md, usize::MAX)? {
            Transit::Pushed => {}
            Transit::Exhausted => cx.c.event(Event::IntHopsExhausted),
            Transit::MtuExceeded => return Err(DropReason::GpintOverMtu),
        }
        // The stack grew in the middle: the block's offsets are read anew.
        let meta = parse::parse(m.bytes(), in_port).map_err(|_| DropReason::GpintMalformed)?;
        let at = int::find(m.bytes(), &meta, spec.presence()).ok_or(DropReason::GpintMalformed)?;
        let blk = Block::read(m.bytes(), &meta, at)?;
        set_sr_left(&mut m.bytes_mut()[blk.at + blk.total..], h.sr_left - 1);
        let n = mea_record_len(regs.len());
        let end = meta.l3_end;
        if !m.insert_at(end, n) {
            return Err(DropReason::GpintNoHeadroom);
        }
        let bytes = m.bytes_mut();
        emit_mea_record(&mut bytes[end..end + n], spec.node_id, hop_index, values[..regs.len()].iter().copied());
        grow_ip_udp(bytes, &meta, n);
        if to_monitor {
            let rec =
                GpintRecord { flags: 0, drop_reason: 0, domain_id: spec.domain_id, md, frame: Frame::of(m.bytes()) };
            cx.c.event(if self.exports.push(rec) { Event::GpintDelivered } else { Event::GpintExportFull });
            return Ok(Verdict::Consumed);
        }
        // Source-routed: the next switch takes it whatever its address.
        let bytes = m.bytes_mut();
        bytes[..6].fill(0xff);
        bytes[6..12].copy_from_slice(&cx.tables.ports[out_port as usize].mac);
        if spec.recovery {
            let key = CopyKey { request_id: h.request_id, attempt: h.attempt, hop_index: hop_index.wrapping_add(1) };
            let copy = Stored { md, domain_id: spec.domain_id, frame: Frame::of(m.bytes()) };
            match self.copies.store(key, copy, now, now.saturating_add(spec.hold_tsc)) {
                Ok(()) => cx.c.event(Event::SqrStored),
                // Forwarded without a copy: no notice can follow if it is lost.
                Err(_) => cx.c.event(Event::SqrBufferFull),
            }
        }
        Ok(Verdict::Tx(out_port))
    }

    /// `claim` of a packet that may be GPINT's.
    #[cold]
    #[inline(never)]
    fn claim_gpint<B: PacketBuf, O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> bool {
        let (Some(spec), Ok(meta)) = (cx.tables.gpint, p.meta) else { return false };
        let Some(kind) = classify(&spec, m.bytes(), &meta) else { return false };
        p.verdict = match kind {
            None => self.on_feedback(m.bytes(), &meta, cx.c),
            Some(blk) => {
                cx.c.event(Event::GpintRx);
                self.on_probe(&spec, cx, m, &meta, &blk).unwrap_or_else(Verdict::Drop)
            }
        };
        true
    }

    /// This switch's hop for a probe leaving by `out_port` now.
    fn hop<B, O: Output<B>>(&self, spec: &GpintSpec, cx: &Cx<'_, O>, in_port: u16, out_port: u16) -> HopMetadata {
        let o = out_port as usize;
        let util = cx.load.tx_util.get(o).map_or(u32::MAX, |u| u.load(Relaxed));
        Hop {
            in_port,
            out_port,
            rx_tsc: cx.burst.rx_tsc,
            tx_tsc: crate::dpdk::tsc(),
            queue_id: cx.out.queue_id(),
            queue_occupancy: cx.out.occupancy(o) as u32,
            tx_util: (util != u32::MAX).then_some(util),
            buffer_occupancy: cx.load.pool_in_use.load(Relaxed),
        }
        .metadata(spec.node_id, &self.clock)
    }
}

/// Sends the feedback acknowledging probe `h` out `in_port`: a copy of the
/// probe cut to its headers, to its sender's MAC from this port's, IP
/// addresses swapped, UDP to the GPINT port, and the feedback block.
fn send_feedback<B: PacketBuf, O: Output<B>>(
    spec: &GpintSpec,
    cx: &mut Cx<'_, O>,
    m: &B,
    meta: &PacketMeta,
    h: &Header,
    in_port: u16,
) {
    let Some(mut f) = cx.out.duplicate(m) else {
        cx.c.event(Event::GpintNoBuffer);
        return;
    };
    let (l3, l4) = (meta.l3_offset, meta.l4_offset);
    let end = l4 + 8 + crate::wire::gpint::FEEDBACK_LEN;
    let b = f.bytes_mut();
    if b.len() < end {
        cx.c.event(Event::GpintNoBuffer);
        return;
    }
    // Back to the sender, from this port (a probe between switches was
    // sent to the broadcast address, which is no source).
    b.copy_within(6..12, 0);
    b[6..12].copy_from_slice(&cx.tables.ports[in_port as usize].mac);
    let pseudo = if meta.key.ip_version() == 4 {
        let ip = &mut b[l3..l4];
        let (s, d): ([u8; 4], [u8; 4]) = (ip[12..16].try_into().expect("4"), ip[16..20].try_into().expect("4"));
        ip[12..16].copy_from_slice(&d);
        ip[16..20].copy_from_slice(&s);
        ip[2..4].copy_from_slice(&((end - l3) as u16).to_be_bytes());
        ip[8] = 64;
        ip[10..12].fill(0);
        let c = checksum::checksum(&ip[..]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        checksum::pseudo_v4(d, s, PROTO_UDP, (end - l4) as u16)
    } else {
        let ip = &mut b[l3..l4];
        let (s, d): ([u8; 16], [u8; 16]) = (ip[8..24].try_into().expect("16"), ip[24..40].try_into().expect("16"));
        ip[8..24].copy_from_slice(&d);
        ip[24..40].copy_from_slice(&s);
        ip[4..6].copy_from_slice(&((end - l3 - 40) as u16).to_be_bytes());
        ip[7] = 64;
        checksum::pseudo_v6(&d, &s, PROTO_UDP, (end - l4) as u32)
    };
    h.feedback().emit(&mut b[l4 + 8..end]);
    if let Some(d) = spec.dscp {
        int::set_dscp(b, meta, d.feedback);
    }
    let udp = UdpRepr { src_port: spec.udp_port, dst_port: spec.udp_port, payload_len: end - l4 - 8 };
    udp.emit(&mut b[l4..end], pseudo);
    cx.c.event(Event::GpintFeedbackTx);
    let now = cx.burst.now;
    cx.out.deliver(f, Verdict::TxLen(in_port, end as u16), in_port, cx.tables, cx.c, now);
}

/// The IP and UDP lengths `n` bytes longer (bytes appended to the UDP
/// payload), with the IPv4 header checksum and the UDP checksum anew.
fn grow_ip_udp(b: &mut [u8], meta: &PacketMeta, n: usize) {
    let (l3, l4) = (meta.l3_offset, meta.l4_offset);
    let grow = |b: &mut [u8], at: usize| {
        let v = u16::from_be_bytes([b[at], b[at + 1]]) as usize + n;
        b[at..at + 2].copy_from_slice(&(v as u16).to_be_bytes());
    };
    if meta.key.ip_version() == 4 {
        grow(b, l3 + 2);
        let ihl = (b[l3] & 0x0f) as usize * 4;
        b[l3 + 10..l3 + 12].fill(0);
        let c = checksum::checksum(&b[l3..l3 + ihl]);
        b[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    } else {
        grow(b, l3 + 4);
    }
    grow(b, l4 + 4);
    let grown = PacketMeta { l3_end: meta.l3_end + n, ..*meta };
    refresh_udp_checksum(b, &grown);
}

/// Whether a parsed packet may be GPINT's: UDP to the GPINT port, or to
/// the INT port with an NPT 1 shim that saved the GPINT port, or marked
/// with a GPINT codepoint (what `classify` then checks). The shim peek
/// keeps the INT traffic of the domain out of `classify`'s full read.
#[inline(always)]
fn may_be_gpint(spec: &GpintSpec, b: &[u8], meta: &PacketMeta) -> bool {
    if meta.key.proto() != PROTO_UDP {
        return false;
    }
    match spec.dscp {
        None => {
            let d = meta.key.dst_port();
            if d == spec.udp_port {
                return true;
            }
            let at = meta.l4_offset + 8;
            d == spec.int_port
                && b.get(at..at + 4).is_some_and(|shim| {
                    (shim[0] >> 2) & 0x3 == 1 && u16::from_be_bytes([shim[2], shim[3]]) == spec.udp_port
                })
        }
        Some(ds) => {
            let c = int::dscp(b, meta);
            c == ds.probe || c == ds.feedback
        }
    }
}

/// Whether a parsed UDP packet is GPINT's: a feedback (to the GPINT port,
/// or marked with the feedback codepoint) or a probe (to the INT port, or
/// marked with the probe codepoint, carrying INT-MD of the GPINT domain;
/// by port, its NPT 1 shim saved the GPINT port). Another domain's INT is
/// not ours.
fn classify(spec: &GpintSpec, b: &[u8], meta: &PacketMeta) -> Option<Option<Block>> {
    if meta.key.proto() != PROTO_UDP || meta.l4_offset == 0 {
        return None;
    }
    match spec.dscp {
        None => {
            let dport = meta.key.dst_port();
            if dport == spec.udp_port {
                return Some(None);
            }
            if dport != spec.int_port {
                return None;
            }
        }
        Some(d) => {
            let code = int::dscp(b, meta);
            if code == d.feedback {
                return Some(None);
            }
            if code != d.probe {
                return None;
            }
        }
    }
    let at = int::find(b, meta, spec.presence())?;
    let blk = Block::read(b, meta, at).ok()?;
    let by_port = spec.dscp.is_none();
    let ours = blk.domain_id == spec.domain_id && (!by_port || (blk.npt == 1 && blk.saved == spec.udp_port));
    ours.then_some(Some(blk))
}

/// What a frame is to GPINT: a probe, a feedback, or neither (None). For
/// counting what link emulation drops: parses the frame.
pub fn class_of(spec: &GpintSpec, frame: &[u8]) -> Option<Kind> {
    let meta = parse::parse(frame, 0).ok()?;
    match classify(spec, frame, &meta)? {
        None => Some(Kind::Feedback),
        Some(_) => Some(Kind::Probe),
    }
}

/// Marks a frame's IP header with DSCP `code` (the paper's mode).
fn mark(b: &mut [u8], code: u8) {
    if let Ok(meta) = parse::parse(b, 0) {
        int::set_dscp(b, &meta, code);
    }
}

impl<B: PacketBuf, S: GpintSink> Stage<B> for SqrStage<S> {
    #[inline(always)]
    fn depth<O: Output<B>>(&self, t: &Tables, _out: &O) -> Option<Depth> {
        t.gpint.as_ref().map(|_| Depth::Full)
    }

    #[inline(always)]
    fn claiming(&self, t: &Tables) -> u32 {
        t.gpint.is_some() as u32
    }

    /// A packet that cannot be GPINT's (most of them) is turned down by its
    /// protocol and port (or DSCP) before anything else is read.
    #[inline(always)]
    fn claim<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> bool {
        let (Some(spec), Ok(meta)) = (cx.tables.gpint.as_ref(), &p.meta) else { return false };
        if !may_be_gpint(spec, m.bytes(), meta) {
            return false;
        }
        self.claim_gpint(cx, m, p)
    }

    /// Claimed packets are handled in `claim`; the others are not GPINT's.
    #[inline(always)]
    fn packet<O: Output<B>>(&mut self, _cx: &mut Cx<'_, O>, _m: &mut B, _p: &mut Packet) -> Step {
        Step::Next
    }

    /// Copies past their deadline go to the collectors as notices, a few a
    /// loop.
    #[inline(always)]
    fn poll(&mut self, t: &Tables, now: u64, c: &mut CounterValues) {
        if self.copies.in_use() == 0 {
            return;
        }
        let domain = t.gpint.map(|s| s.domain_id);
        let notice_code = t.gpint.and_then(|s| s.dscp).map(|d| d.notice);
        let exports = &mut self.exports;
        self.copies.expire(now, EXPIRE_BUCKETS, EXPIRE_COPIES, |_, mut s, _| {
            c.event(Event::SqrTimeouts);
            if let Some(code) = notice_code {
                mark(s.frame.bytes_mut(), code);
            }
            let rec = GpintRecord {
                flags: FLAG_I | FLAG_D,
                drop_reason: DropReason::GpintFeedbackTimeout as u8,
                domain_id: domain.unwrap_or(s.domain_id),
                md: s.md,
                frame: s.frame,
            };
            if !exports.push(rec) {
                c.event(Event::GpintExportFull);
            }
        });
    }

    /// Copies still waiting when the worker stops are dropped, counted.
    fn stop(&mut self, c: &mut CounterValues) {
        self.copies.drain(|_, _| c.event(Event::SqrDroppedAtStop));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpint::frame::{probe_frame, tests::addr};
    use crate::int::Presence;
    use crate::pipeline::{Burst, PortLoad, RxTime, VecOut};
    use crate::pktbuf::VecBuf;
    use crate::tables::tests::two_port_router;
    use crate::tables::TableSpec;
    use crate::wire::gpint::{ProbeRepr, SrEntry, TO_MONITOR};
    use crate::wire::int_md::IntMd;
    use crate::worker::{self, FlowSetup, MacSetup, StageSetup, WorkerPipeline};

    const HZ: u64 = 1_000_000;
    const HOLD: u64 = 1_500 * HZ / 1000;
    const INT_PORT: u16 = 17768;
    const GPINT_PORT: u16 = 17900;
    const DOMAIN: u16 = 0x6701;

    fn gspec(recovery: bool) -> GpintSpec {
        GpintSpec {
            int_port: INT_PORT,
            udp_port: GPINT_PORT,
            domain_id: DOMAIN,
            node_id: 42,
            recovery,
            hold_tsc: HOLD,
            mtu: [1500; crate::counters::MAX_PORTS],
            dscp: None,
        }
    }

    struct Rig {
        t: Tables,
        pipe: WorkerPipeline,
        out: VecOut<VecBuf>,
        c: CounterValues,
        exports: rtrb::Consumer<GpintRecord>,
    }

    impl Rig {
        fn new(g: GpintSpec, slots: usize) -> Rig {
            Rig::with_tables(TableSpec { gpint: Some(g), ..two_port_router() }, slots)
        }

        fn with_tables(s: TableSpec, slots: usize) -> Rig {
            let (p, exports) = rtrb::RingBuffer::new(16);
            let (reports, _) = crate::int::report_ring::report_ring(4);
            let stages = StageSetup {
                analytics: crate::int::analytics::AnalyticsSetup::interval_only(16),
                reports,
                clock: WallClock::new(0, 1_700_000_000_000_000_000, HZ),
                gpint: GpintSetup { slots, exports: Some(p), worker: 0, workers: Vec::new() },
                label: crate::worker::LabelSetup::off(),
            };
            let flows = FlowSetup { capacity: 64, idle_timeout_s: 0, learn: false, hash_seed: 1 };
            let macs = MacSetup { capacity: 64, aging_s: 0, share: false };
            let pipe = worker::pipeline(Arc::new(WorkerShared::new(0)), flows, macs, stages, HZ);
            Rig { t: Tables::build(&s, 1).unwrap(), pipe, out: VecOut::new(8, 0), c: CounterValues::default(), exports }
        }

        /// Runs one frame in on `port` at `tsc`; what left, with verdicts.
        fn run(&mut self, f: &[u8], port: u16, tsc: u64) -> Vec<(Vec<u8>, Verdict)> {
            let rx = RxTime { tsc, wall_ns: 1 };
            let mut pkts = [Some(VecBuf::new(f, 128))];
            let b = Burst::received(port, rx, Depth::Full);
            self.pipe.run(&self.t, &mut self.c, &mut self.out, &PortLoad::default(), &b, &mut pkts);
            self.out
                .out
                .drain(..)
                .filter(|(_, v)| *v != Verdict::Consumed)
                .map(|(m, v)| match v {
                    Verdict::TxLen(_, n) => (m.bytes()[..n as usize].to_vec(), v),
                    _ => (m.bytes().to_vec(), v),
                })
                .collect()
        }

        fn poll(&mut self, now: u64) {
            Stage::<VecBuf>::poll(&mut self.pipe.stages, &self.t, now, &mut self.c);
        }

        fn ev(&self, e: Event) -> u64 {
            self.c.events[e as usize]
        }

        fn records(&mut self) -> Vec<GpintRecord> {
            std::iter::from_fn(|| self.exports.pop().ok()).collect()
        }
    }

    fn entries(first: &[(u8, u8, u8)]) -> Vec<SrEntry> {
        first.iter().map(|&(p, f, n)| SrEntry { next_port: p, mea_first: f, mea_count: n }).collect()
    }

    fn probe(v6: bool, req: u16, attempt: u8, e: &[(u8, u8, u8)]) -> Vec<u8> {
        let repr = ProbeRepr::new(req, RequestType::PortRx, attempt, 0, entries(e)).unwrap();
        probe_frame(&addr(v6), &repr).unwrap()
    }

    /// The frame's GPINT block and INT header, parsed; checks the IP and
    /// UDP checksums on the way.
    fn read(f: &[u8]) -> (PacketMeta, Vec<u8>, Vec<u8>) {
        let meta = parse::parse(f, 0).unwrap();
        if meta.key.ip_version() == 4 {
            assert_eq!(checksum::checksum(&f[14..34]), 0, "IPv4 header checksum");
        }
        let mut g = f.to_vec();
        refresh_udp_checksum(&mut g, &meta);
        assert_eq!(f, &g[..], "UDP checksum");
        let (l4, end) = (meta.l4_offset, meta.l3_end);
        match int::find(f, &meta, Presence::UdpPort(INT_PORT)) {
            Some(at) => {
                let md = IntMd::new_checked(&f[at..end]).unwrap();
                let n = md.total_len();
                (meta, f[at..at + n].to_vec(), f[at + n..end].to_vec())
            }
            None => (meta, Vec::new(), f[l4 + 8..end].to_vec()),
        }
    }

    #[test]
    fn a_probe_gives_one_feedback_one_forwarded_probe_and_one_copy() {
        for v6 in [false, true] {
            let mut r = Rig::new(gspec(true), 4);
            let f = probe(v6, 77, 1, &[(1, 0, 2), (TO_MONITOR, 0, 0)]);
            let out = r.run(&f, 0, 1_000);
            assert_eq!(out.len(), 2, "feedback and probe");
            // The feedback: back out the ingress port to the sender, from
            // this port, IP addresses swapped, no INT.
            let (fb, v) = &out[0];
            assert!(matches!(v, Verdict::TxLen(0, _)), "{v:?}");
            assert_eq!((&fb[0..6], &fb[6..12]), (&f[6..12], &r.t.ports[0].mac[..]));
            let (meta, int_hdr, block) = read(fb);
            let (fm, _, _) = read(&f);
            assert_eq!((meta.key.src, meta.key.dst), (fm.key.dst, fm.key.src));
            assert_eq!((meta.key.dst_port(), int_hdr.len()), (GPINT_PORT, 0));
            let h = Header::parse(&block).unwrap();
            assert_eq!((h.kind, h.request_id, h.attempt, h.start_index), (Kind::Feedback, 77, 1, 0));
            assert_eq!(block.len(), 8);
            // The probe: out port 1 with this hop's INT and MEA, SR left one less.
            let (p, v) = &out[1];
            assert_eq!(*v, Verdict::Tx(1));
            assert_eq!((&p[0..6], &p[6..12]), (&[0xff; 6][..], &r.t.ports[1].mac[..]));
            let (_, int_hdr, block) = read(p);
            let md = IntMd::new_checked(&int_hdr[..]).unwrap();
            assert_eq!((md.hops(), md.rhc()), (1, 1));
            assert_eq!(&md.hop(0)[..4], &42u32.to_be_bytes(), "node ID first");
            let pr = Probe::new_checked(&block).unwrap();
            assert_eq!((pr.header.sr_left, pr.header.hop_index()), (1, 1));
            let recs: Vec<_> = pr.records().collect();
            assert_eq!(recs.len(), 1);
            assert_eq!((recs[0].node_id, recs[0].hop_index), (42, 0));
            // Port RX counters as the probe passed: this one counted on port 0.
            assert_eq!(recs[0].values().collect::<Vec<_>>(), vec![1, 0]);
            assert_eq!(r.pipe.stages.0.view(2_000).in_use, 1);
            for e in [Event::GpintRx, Event::GpintFeedbackTx, Event::SqrStored] {
                assert_eq!(r.ev(e), 1, "{e:?}");
            }
            assert_eq!(r.c.total_drops(), 0);

            // The next hop's feedback frees the copy; a second one finds nothing.
            let fb_next = feedback(v6, 77, 1, 1);
            assert!(r.run(&fb_next, 1, 2_000).is_empty(), "consumed");
            assert!(r.run(&fb_next, 1, 2_001).is_empty());
            assert_eq!((r.ev(Event::SqrAcked), r.ev(Event::GpintFeedbackUnmatched)), (1, 1));
            assert_eq!(r.pipe.stages.0.view(2_000).in_use, 0);
            r.poll(1_000 + 10 * HOLD);
            assert!(r.records().is_empty(), "acknowledged: no notice");
        }
    }

    /// A feedback as the next switch sends it (kind 2, the acked hop index).
    fn feedback(v6: bool, req: u16, attempt: u8, hop: u8) -> Vec<u8> {
        let h = Header {
            kind: Kind::Feedback,
            flags: 0,
            request_id: req,
            request_type: RequestType::PortRx,
            attempt,
            start_index: hop,
            sr_count: 0,
            sr_left: 0,
        };
        let mut b = [0u8; 8];
        h.emit(&mut b);
        crate::gpint::frame::udp_frame(&addr(v6), GPINT_PORT, &b).unwrap()
    }

    #[test]
    fn no_feedback_gives_one_notice_after_hold_with_every_hop_so_far() {
        let mut r = Rig::new(gspec(true), 4);
        let f = probe(false, 5, 0, &[(1, 0, 1), (1, 0, 1), (TO_MONITOR, 0, 0)]);
        let out = r.run(&f, 0, 1_000);
        let forwarded = out[1].0.clone();
        // The worker polls every loop; here once a millisecond.
        let ms = HZ / 1000;
        for t in (1_000..1_000 + HOLD * 9 / 10).step_by(ms as usize) {
            r.poll(t);
        }
        assert!(r.records().is_empty(), "not before hold_ms");
        for t in (1_000 + HOLD * 9 / 10..1_000 + HOLD * 11 / 10).step_by(ms as usize) {
            r.poll(t);
        }
        let recs = r.records();
        assert_eq!(recs.len(), 1);
        let n = &recs[0];
        assert_eq!((n.flags, n.drop_reason), (FLAG_I | FLAG_D, DropReason::GpintFeedbackTimeout as u8));
        assert_eq!((n.domain_id, n.md.node_id, n.md.egress_port), (DOMAIN, 42, 1));
        assert_eq!(n.frame.bytes(), &forwarded[..], "the copy as forwarded, untruncated");
        assert_eq!((r.ev(Event::SqrTimeouts), r.pipe.stages.0.view(0).in_use), (1, 0));
        // Its late feedback finds nothing.
        r.run(&feedback(false, 5, 0, 1), 1, 1_000 + 2 * HOLD);
        assert_eq!(r.ev(Event::GpintFeedbackUnmatched), 1);
    }

    #[test]
    fn a_duplicate_is_acknowledged_but_not_measured_or_forwarded_again() {
        let mut r = Rig::new(gspec(true), 4);
        let f = probe(false, 9, 0, &[(1, 0, 0), (TO_MONITOR, 0, 0)]);
        assert_eq!(r.run(&f, 0, 1_000).len(), 2);
        let again = r.run(&f, 0, 1_100);
        assert_eq!(again.len(), 1, "the feedback only");
        assert!(matches!(again[0].1, Verdict::TxLen(0, _)));
        assert_eq!((r.ev(Event::GpintDup), r.ev(Event::SqrStored), r.ev(Event::GpintFeedbackTx)), (1, 1, 2));
        // Another attempt of the same request is a new probe.
        let f2 = probe(false, 9, 1, &[(1, 0, 0), (TO_MONITOR, 0, 0)]);
        assert_eq!(r.run(&f2, 0, 1_200).len(), 2);
        assert_eq!(r.ev(Event::SqrStored), 2);
    }

    #[test]
    fn a_full_buffer_forwards_without_a_copy_and_counts_it() {
        let mut r = Rig::new(gspec(true), 1);
        let e = [(1, 0, 0), (TO_MONITOR, 0, 0)];
        assert_eq!(r.run(&probe(false, 1, 0, &e), 0, 10).len(), 2);
        let out = r.run(&probe(false, 2, 0, &e), 0, 20);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].1, Verdict::Tx(1));
        assert_eq!((r.ev(Event::SqrStored), r.ev(Event::SqrBufferFull)), (1, 1));
        assert_eq!(r.pipe.stages.0.view(30).high_water, 1);
    }

    #[test]
    fn recovery_off_forwards_and_measures_the_same_without_feedback_or_copy() {
        let f = probe(false, 3, 0, &[(1, 0, 2), (TO_MONITOR, 0, 0)]);
        let mut on = Rig::new(gspec(true), 4);
        let mut off = Rig::new(gspec(false), 4);
        let a = on.run(&f, 0, 1_000);
        let b = off.run(&f, 0, 1_000);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].1, Verdict::Tx(1));
        // The same bytes but the hop's timestamps.
        assert_eq!(a[1].0.len(), b[0].0.len());
        assert_eq!((off.ev(Event::GpintFeedbackTx), off.ev(Event::SqrStored)), (0, 0));
        // A duplicate is measured again with recovery off (the paper passes it).
        assert_eq!(off.run(&f, 0, 1_001).len(), 1);
        assert_eq!(off.ev(Event::GpintDup), 0);
    }

    #[test]
    fn the_last_hop_delivers_the_probe_to_the_collectors() {
        let mut r = Rig::new(gspec(true), 4);
        let f = probe(true, 11, 0, &[(TO_MONITOR, 0, 1)]);
        let out = r.run(&f, 1, 1_000);
        assert_eq!(out.len(), 1, "the feedback; the probe is consumed");
        let recs = r.records();
        assert_eq!(recs.len(), 1);
        assert_eq!((recs[0].flags, recs[0].md.ingress_port), (0, 1));
        let (_, int_hdr, block) = read(recs[0].frame.bytes());
        assert_eq!(IntMd::new_checked(&int_hdr[..]).unwrap().hops(), 1);
        let p = Probe::new_checked(&block).unwrap();
        assert_eq!(p.header.sr_left, 0);
        assert_eq!(p.records().next().unwrap().values().collect::<Vec<_>>(), vec![0], "port 0 received nothing");
        assert_eq!(r.ev(Event::GpintDelivered), 1);
        assert_eq!(r.pipe.stages.0.view(0).in_use, 0, "nothing to acknowledge past the path");
    }

    #[test]
    fn every_malformed_probe_has_its_drop_reason() {
        let cases: Vec<(Vec<u8>, DropReason)> = vec![
            (probe(false, 1, 0, &[(9, 0, 0), (TO_MONITOR, 0, 0)]), DropReason::GpintBadNextPort),
            (probe(false, 1, 0, &[(1, 1, 2), (TO_MONITOR, 0, 0)]), DropReason::GpintMeaRange),
            (
                {
                    // SR left 0 at a transit.
                    let mut repr = ProbeRepr::new(1, RequestType::PortRx, 0, 0, entries(&[(1, 0, 0)])).unwrap();
                    repr.header.sr_left = 0;
                    probe_frame(&addr(false), &repr).unwrap()
                },
                DropReason::GpintSrExhausted,
            ),
            (
                {
                    // SR count beyond the bytes.
                    let mut repr = ProbeRepr::new(1, RequestType::PortRx, 0, 0, entries(&[(1, 0, 0)])).unwrap();
                    repr.header.sr_count = 40;
                    repr.header.sr_left = 1;
                    probe_frame(&addr(false), &repr).unwrap()
                },
                DropReason::GpintSrBeyondBytes,
            ),
        ];
        for (f, want) in cases {
            let mut r = Rig::new(gspec(true), 4);
            let out = r.run(&f, 0, 1_000);
            let dropped: Vec<_> = out.iter().filter(|(_, v)| matches!(v, Verdict::Drop(_))).collect();
            assert_eq!(dropped.len(), 1, "{want:?}: {out:?}");
            assert_eq!(dropped[0].1, Verdict::Drop(want));
            assert_eq!(r.ev(Event::SqrStored), 0);
        }
        // Over the egress MTU.
        let mut g = gspec(true);
        g.mtu[1] = 60;
        let mut r = Rig::new(g, 4);
        let out = r.run(&probe(false, 1, 0, &[(1, 0, 2), (TO_MONITOR, 0, 0)]), 0, 1_000);
        assert_eq!(out.last().unwrap().1, Verdict::Drop(DropReason::GpintOverMtu));
        // A feedback whose block is not one, and a cut probe block.
        let mut r = Rig::new(gspec(true), 4);
        let bad = crate::gpint::frame::udp_frame(&addr(false), GPINT_PORT, b"nope").unwrap();
        assert_eq!(r.run(&bad, 0, 1)[0].1, Verdict::Drop(DropReason::GpintMalformed));
        let mut f = probe(false, 1, 0, &[(1, 0, 0), (TO_MONITOR, 0, 0)]);
        let meta = parse::parse(&f, 0).unwrap();
        // Three bytes of MEA header after the block: records run past the packet.
        f.extend_from_slice(&[0, 0, 0]);
        let l3 = meta.l3_offset;
        let total = u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) + 3;
        f[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
        f[l3 + 10..l3 + 12].fill(0);
        let c = checksum::checksum(&f[l3..l3 + 20]);
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        let ulen = u16::from_be_bytes([f[meta.l4_offset + 4], f[meta.l4_offset + 5]]) + 3;
        f[meta.l4_offset + 4..meta.l4_offset + 6].copy_from_slice(&ulen.to_be_bytes());
        let out = r.run(&f, 0, 1);
        assert_eq!(out.last().unwrap().1, Verdict::Drop(DropReason::GpintMalformed));
    }

    /// The paper's mode: probes and feedbacks known by their codepoints;
    /// the feedback and the notice's copy are marked.
    #[test]
    fn the_dscp_mode_claims_by_codepoint_and_marks_feedbacks_and_notices() {
        let d = crate::gpint::GpintDscp { probe: 0x17, feedback: 0x19, notice: 0x21 };
        let mut r = Rig::new(GpintSpec { dscp: Some(d), ..gspec(true) }, 4);
        let mut a = addr(false);
        a.dscp = Some(0x17);
        let repr = ProbeRepr::new(8, RequestType::PortRx, 0, 0, entries(&[(1, 0, 1), (TO_MONITOR, 0, 0)])).unwrap();
        let f = probe_frame(&a, &repr).unwrap();
        let meta = parse::parse(&f, 0).unwrap();
        assert_eq!((int::dscp(&f, &meta), meta.key.dst_port()), (0x17, GPINT_PORT));
        let out = r.run(&f, 0, 1_000);
        assert_eq!(out.len(), 2, "{out:?}");
        let fb = parse::parse(&out[0].0, 0).unwrap();
        assert_eq!(int::dscp(&out[0].0, &fb), 0x19);
        assert_eq!(checksum::checksum(&out[0].0[14..34]), 0);
        let fwd = &out[1].0;
        let fm = parse::parse(fwd, 1).unwrap();
        let at = int::find(fwd, &fm, Presence::Dscp { value: 0x17, mask: 0x3f }).unwrap();
        assert_eq!(IntMd::new_checked(&fwd[at..fm.l3_end]).unwrap().hops(), 1);
        // A plain packet to the INT port is not a probe in this mode.
        let plain = crate::gpint::frame::udp_frame(&addr(false), INT_PORT, b"plain").unwrap();
        r.run(&plain, 0, 1_100);
        assert_eq!(r.ev(Event::GpintRx), 1, "only the probe claimed");
        // The copy's notice is marked 0x21.
        for t in (1_000..1_000 + HOLD * 11 / 10).step_by((HZ / 1000) as usize) {
            r.poll(t);
        }
        let recs = r.records();
        assert_eq!(recs.len(), 1);
        let n = recs[0].frame.bytes();
        let nm = parse::parse(n, 1).unwrap();
        assert_eq!(int::dscp(n, &nm), 0x21);
        assert_eq!(checksum::checksum(&n[14..34]), 0);
    }

    /// Probes and feedbacks of both modes, mutated at random (the pipeline
    /// fuzz test's edits), through the worker's pipeline with GPINT on:
    /// nothing panics, every frame is forwarded, consumed or dropped under
    /// a named reason, and copies expire. Seeded: a failure repeats.
    #[test]
    fn mutated_probes_and_feedbacks_never_panic() {
        let d = crate::gpint::GpintDscp { probe: 0x17, feedback: 0x19, notice: 0x21 };
        let mut seeds = Vec::new();
        for dscp in [None, Some(0x17)] {
            for v6 in [false, true] {
                let mut a = addr(v6);
                a.dscp = dscp;
                for e in [
                    &[(1, 0, 2), (TO_MONITOR, 0, 0)][..],
                    &[(TO_MONITOR, 0, 1)],
                    &[(1, 0, 0), (1, 1, 1), (TO_MONITOR, 0, 0)],
                ] {
                    let repr = ProbeRepr::new(3, RequestType::PortRx, 0, 0, entries(e)).unwrap();
                    seeds.push((dscp, probe_frame(&a, &repr).unwrap()));
                }
                seeds.push((dscp, feedback(v6, 3, 0, 1)));
            }
        }
        let mut rigs = [Rig::new(gspec(true), 4), Rig::new(GpintSpec { dscp: Some(d), ..gspec(true) }, 4)];
        let mut rng = crate::rand::XorShift::new(0x69_70_69_6e_74);
        for i in 0..20_000u64 {
            let (dscp, seed) = &seeds[rng.below(seeds.len())];
            let f = crate::pipeline_fuzz::mutate(&mut rng, seed);
            let r = &mut rigs[dscp.is_some() as usize];
            let out = r.run(&f, rng.below(2) as u16, 1_000 + i * 100);
            assert!(out.len() <= 2, "{out:?}");
            if i % 64 == 0 {
                r.poll(1_000 + i * 100);
            }
            r.records();
        }
        for r in &mut rigs {
            r.poll(u64::MAX / 2);
            assert!(r.c.events[Event::GpintRx as usize] > 0);
        }
    }

    #[test]
    fn int_of_other_domains_is_left_to_the_int_stage_and_probes_never_reach_it() {
        use crate::int::stage::tests::spec;
        let mut s = TableSpec { gpint: Some(gspec(true)), ..two_port_router() };
        s.int = Some(spec(3, 0));
        let mut r = Rig::with_tables(s, 4);
        let f = probe(false, 1, 0, &[(1, 0, 0), (TO_MONITOR, 0, 0)]);
        let out = r.run(&f, 0, 1_000);
        let (_, int_hdr, _) = read(&out[1].0);
        assert_eq!(IntMd::new_checked(&int_hdr[..]).unwrap().hops(), 1, "one hop: SQR's, not INT transit's too");
        assert_eq!(r.ev(Event::IntTransited), 0);
        // The same frame in another INT domain is INT traffic: not claimed.
        let mut a = addr(false);
        a.domain_id = 7;
        let repr = ProbeRepr::new(1, RequestType::PortRx, 0, 0, entries(&[(1, 0, 0)])).unwrap();
        let other = probe_frame(&a, &repr).unwrap();
        r.run(&other, 0, 2_000);
        assert_eq!(r.ev(Event::GpintRx), 1);
    }

    #[test]
    fn the_fast_check_passes_probes_and_feedbacks_and_keeps_other_int_out_of_classify() {
        let g = gspec(true);
        let f = probe(false, 1, 0, &[(1, 0, 0), (TO_MONITOR, 0, 0)]);
        let meta = parse::parse(&f, 0).unwrap();
        assert!(may_be_gpint(&g, &f, &meta));
        assert!(matches!(classify(&g, &f, &meta), Some(Some(_))));
        // INT of the domain whose shim saved another port (a user flow's).
        let mut other = f.clone();
        let saved = meta.l4_offset + 8 + 2;
        other[saved..saved + 2].copy_from_slice(&4791u16.to_be_bytes());
        assert!(!may_be_gpint(&g, &other, &meta));
        assert!(classify(&g, &other, &meta).is_none(), "classify agrees");
        // NPT 2 (the IP protocol saved): not a probe.
        let mut npt2 = f.clone();
        npt2[meta.l4_offset + 8] = (npt2[meta.l4_offset + 8] & !0x0c) | (2 << 2);
        assert!(!may_be_gpint(&g, &npt2, &meta));
        // A shim cut off by the frame's end: no read past it.
        assert!(!may_be_gpint(&g, &f[..meta.l4_offset + 10], &meta));
        // A feedback: UDP to the GPINT port.
        let fb = crate::gpint::frame::udp_frame(&addr(false), GPINT_PORT, &[0; 8]).unwrap();
        let fm = parse::parse(&fb, 0).unwrap();
        assert!(may_be_gpint(&g, &fb, &fm));
    }
}
