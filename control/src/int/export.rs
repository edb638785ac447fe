//! Telemetry Report v2.0 export on the control core: drain the workers'
//! report rings, pack records into report packets (one group header, then
//! as many individual reports as fit), and send each packet to every
//! collector with that collector's own 22-bit sequence number.
//!
//! Reports are packed by their encoded length, each length (up to
//! `SHAPES` at once) into packets of its own, so that full packets of one
//! length leave together in one UDP GSO send: traffic of mixed hop counts
//! gives reports of several lengths, which packed in arrival order made
//! packets of ever-changing lengths and GSO sends of about two packets.
//! Within a poll, reports of different lengths may therefore leave in
//! another order than the rings held them.
//!
//! Individual report layout (RepType 1 INT, InType 3 Ethernet):
//! header word, RepMdBits | domain ID, DSMdBits | DSMdStatus (0), the sink's
//! metadata in RepMdBits order (bit 15, set on drop reports: queue ID,
//! drop reason, 16 bits of padding), then the inner packet padded to 4 bytes.

use crate::collector_tx::{CollectorPlan, CollectorTx, PortOut, SegmentsError, GSO_MAX_BYTES, GSO_MAX_SEGMENTS};
use crate::int::api::{ReportCollectorView, ReportsView, RingView};
use dataplane::gpint::stage::GpintRecord;
use dataplane::int::report_ring::ReportConsumer;
use dataplane::int::stage::ReportRecord;
use dataplane::wire::int_md::{emit_hop, hop_words, HopMetadata};
use dataplane::wire::telemetry_report::{
    emit_group, Individual, FLAG_D, GROUP_HDR_LEN, INDIV_HDR_LEN, INT_MAIN_LEN, IN_TYPE_ETHERNET, REPMD_DROP_REASON,
    REP_TYPE_INT,
};

/// RepMdBits this exporter can fill: INT bits 1-8 (bit 0, the node ID, is in
/// the group header; bit 15 is the drop reason).
pub const REPMD_SUPPORTED: u16 = 0x7f80;

/// Group header sequence numbers are 22 bits.
const SEQ_MASK: u32 = 0x3f_ffff;

/// Report lengths packed apart at once; a further length takes the place
/// of one of them (whose packets are sent first).
const SHAPES: usize = 32;

/// The parts of one individual report: a worker's report record, or a
/// GPINT delivery or notice (whose probe may be longer than a record holds).
pub struct ReportParts<'a> {
    pub flags: u8,
    pub drop_reason: u8,
    pub domain_id: u16,
    pub md: &'a HopMetadata,
    pub packet: &'a [u8],
}

impl<'a> ReportParts<'a> {
    pub fn of(rec: &'a ReportRecord) -> ReportParts<'a> {
        ReportParts {
            flags: rec.flags,
            drop_reason: rec.drop_reason,
            domain_id: rec.domain_id,
            md: &rec.md,
            packet: rec.packet(),
        }
    }

    fn of_gpint(rec: &'a GpintRecord) -> ReportParts<'a> {
        ReportParts {
            flags: rec.flags,
            drop_reason: rec.drop_reason,
            domain_id: rec.domain_id,
            md: &rec.md,
            packet: rec.frame.bytes(),
        }
    }
}

/// Bytes one record takes in a report packet.
pub fn encoded_len(rec: &ReportParts, md_bits: u16) -> usize {
    let bits = rep_md_bits(rec.flags, md_bits);
    INDIV_HDR_LEN + INT_MAIN_LEN + hop_words(bits) * 4 + rec.packet.len().div_ceil(4) * 4
}

fn rep_md_bits(flags: u8, md_bits: u16) -> u16 {
    let mut bits = md_bits & REPMD_SUPPORTED;
    if flags & FLAG_D != 0 {
        bits |= REPMD_DROP_REASON;
    }
    bits
}

/// Writes one individual report; `out` holds at least `encoded_len` bytes.
pub fn encode(rec: &ReportParts, md_bits: u16, out: &mut [u8]) -> usize {
    let bits = rep_md_bits(rec.flags, md_bits);
    let md_words = hop_words(bits);
    let n = encoded_len(rec, md_bits);
    Individual {
        rep_type: REP_TYPE_INT,
        in_type: IN_TYPE_ETHERNET,
        len_words: ((n - INDIV_HDR_LEN) / 4).min(255) as u8,
        md_len_words: md_words as u8,
        flags: rec.flags,
    }
    .emit(&mut out[..4]);
    out[4..6].copy_from_slice(&bits.to_be_bytes());
    out[6..8].copy_from_slice(&rec.domain_id.to_be_bytes());
    out[8..12].fill(0);
    let mut o = 12;
    let plain = bits & !REPMD_DROP_REASON;
    let w = hop_words(plain) * 4;
    emit_hop(plain, rec.md, &mut out[o..o + w]);
    o += w;
    if bits & REPMD_DROP_REASON != 0 {
        out[o..o + 4].copy_from_slice(&[rec.md.queue_id, rec.drop_reason, 0, 0]);
        o += 4;
    }
    let len = rec.packet.len();
    out[o..o + len].copy_from_slice(rec.packet);
    out[o + len..n].fill(0);
    n
}

/// The views of report rings, one a worker.
fn ring_views(rings: &[ReportConsumer], received: &[u64], ring_full: &[u64]) -> Vec<RingView> {
    rings
        .iter()
        .enumerate()
        .map(|(i, r)| RingView {
            worker: i,
            capacity: r.capacity(),
            pending: r.len(),
            received: received[i],
            ring_full: ring_full.get(i).copied().unwrap_or(0),
        })
        .collect()
}

struct Collector {
    tx: CollectorTx,
    seq: u32,
    packets: u64,
    reports: u64,
    send_errors: u64,
    last_error: Option<String>,
}

/// Report packets on their way out together, back to back: each `seg`
/// bytes but the last, which may be shorter (the shape UDP GSO sends in one
/// call). Packets of equal length (reports of one shape) fill it; a packet
/// of another length sends it first.
struct Batch {
    bytes: Vec<u8>,
    seg: usize,
    packets: usize,
    reports: usize,
    /// Reports in each packet.
    per_packet: [u32; GSO_MAX_SEGMENTS],
    /// The last packet is shorter than `seg`: nothing more may follow it.
    closed: bool,
}

impl Batch {
    fn new() -> Batch {
        let bytes = Vec::with_capacity(GSO_MAX_BYTES);
        Batch { bytes, seg: 0, packets: 0, reports: 0, per_packet: [0; GSO_MAX_SEGMENTS], closed: false }
    }

    fn takes(&self, len: usize) -> bool {
        self.packets == 0
            || (!self.closed
                && len <= self.seg
                && self.packets < GSO_MAX_SEGMENTS
                && self.bytes.len() + len <= GSO_MAX_BYTES)
    }

    fn push(&mut self, packet: &[u8], reports: usize) {
        if self.packets == 0 {
            self.seg = packet.len();
        }
        self.closed = packet.len() < self.seg;
        self.bytes.extend_from_slice(packet);
        self.per_packet[self.packets] = reports as u32;
        self.packets += 1;
        self.reports += reports;
    }

    /// Packet `i`'s bytes.
    fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let end = (self.seg * (i + 1)).min(self.bytes.len());
        &mut self.bytes[self.seg * i..end]
    }

    fn clear(&mut self) {
        self.bytes.clear();
        (self.packets, self.reports, self.closed) = (0, 0, false);
    }
}

/// The packet being filled with reports of one encoded length (the
/// exporter's `shape_lens`), and the full packets of that length waiting
/// to leave together.
struct Shape {
    buf: Vec<u8>,
    /// Bytes of `buf` used (from the group header on).
    off: usize,
    reports: usize,
    batch: Batch,
}

impl Shape {
    fn new() -> Shape {
        Shape { buf: vec![0; 65536], off: GROUP_HDR_LEN, reports: 0, batch: Batch::new() }
    }

    fn is_empty(&self) -> bool {
        self.reports == 0 && self.batch.packets == 0
    }
}

/// The control core's report exporter.
pub struct Exporter {
    node_id: u32,
    hw_id: u8,
    md_bits: u16,
    max_packet: usize,
    rings: Vec<ReportConsumer>,
    received: Vec<u64>,
    /// GPINT deliveries and notices, one ring a worker (SQR stage).
    gpint: Vec<rtrb::Consumer<GpintRecord>>,
    gpint_received: Vec<u64>,
    gpint_delivered: u64,
    gpint_notices: u64,
    /// INT-label reports, one ring a worker (label stage): RepMdBits 0.
    label: Vec<ReportConsumer>,
    label_received: Vec<u64>,
    collectors: Vec<Collector>,
    shapes: Vec<Shape>,
    /// Each shape's report length (0: none yet), apart from the shapes so
    /// that a report's search reads one or two cache lines.
    shape_lens: [usize; SHAPES],
    /// The shape a new length takes when all are in use (in turn).
    evict: usize,
    /// Export paused (`intctl int export pause`): records stay in the rings.
    pub paused: bool,
    reports: u64,
    packets: u64,
    /// Time spent in polls that exported something (encode + send): the
    /// control core's export load, and with `reports` its capacity.
    busy: std::time::Duration,
}

impl Exporter {
    pub fn new(
        node_id: u32,
        hw_id: u8,
        md_bits: u16,
        max_packet: usize,
        rings: Vec<ReportConsumer>,
        collectors: &[CollectorPlan],
        ports: &dyn PortOut,
    ) -> Result<Exporter, String> {
        let mut cs = Vec::new();
        for (i, c) in collectors.iter().enumerate() {
            let tx = CollectorTx::open(c, ports, false).map_err(|e| format!("int.collector[{i}]: {e}"))?;
            cs.push(Collector { tx, seq: 0, packets: 0, reports: 0, send_errors: 0, last_error: None });
        }
        let n = rings.len();
        Ok(Exporter {
            node_id,
            hw_id,
            md_bits,
            max_packet,
            rings,
            received: vec![0; n],
            gpint: Vec::new(),
            gpint_received: Vec::new(),
            gpint_delivered: 0,
            gpint_notices: 0,
            label: Vec::new(),
            label_received: Vec::new(),
            collectors: cs,
            shapes: (0..SHAPES).map(|_| Shape::new()).collect(),
            shape_lens: [0; SHAPES],
            evict: 0,
            paused: false,
            reports: 0,
            packets: 0,
            busy: std::time::Duration::ZERO,
        })
    }

    /// Also exports the SQR stages' deliveries and notices from these rings.
    pub fn with_gpint(mut self, rings: Vec<rtrb::Consumer<GpintRecord>>) -> Exporter {
        self.gpint_received = vec![0; rings.len()];
        self.gpint = rings;
        self
    }

    /// Also exports the label stages' reports from these rings.
    pub fn with_label(mut self, rings: Vec<ReportConsumer>) -> Exporter {
        self.label_received = vec![0; rings.len()];
        self.label = rings;
        self
    }

    /// Each worker's label report ring; `ring_full`: per worker, records
    /// its ring refused.
    pub fn label_rings(&self, ring_full: &[u64]) -> Vec<RingView> {
        ring_views(&self.label, &self.label_received, ring_full)
    }

    /// GPINT records taken from each worker's ring, and how many of them
    /// were (deliveries, notices).
    pub fn gpint_counts(&self) -> (Vec<RingView>, u64, u64) {
        let rings = self
            .gpint
            .iter()
            .enumerate()
            .map(|(i, r)| RingView {
                worker: i,
                capacity: r.buffer().capacity(),
                pending: r.slots(),
                received: self.gpint_received[i],
                ring_full: 0,
            })
            .collect();
        (rings, self.gpint_delivered, self.gpint_notices)
    }

    /// Drains up to `budget` records from the rings and sends them (nothing
    /// is held back between calls); returns how many were taken. Each record
    /// is read out of its ring (the bytes it holds) into one reused record
    /// and encoded from there.
    pub fn poll(&mut self, budget: usize, out: &mut dyn PortOut) -> usize {
        if self.paused {
            return 0;
        }
        let started = std::time::Instant::now();
        let taken = self.export(budget, out);
        if taken > 0 {
            self.busy += started.elapsed();
        }
        taken
    }

    /// `poll`'s work, timed by it.
    fn export(&mut self, budget: usize, out: &mut dyn PortOut) -> usize {
        let mut taken = 0;
        // Out of `self` while its slots are read (send borrows `self`).
        let mut rings = std::mem::take(&mut self.rings);
        // Where each record is read out of its ring to be encoded.
        let mut rec = ReportRecord::empty();
        for (ri, ring) in rings.iter_mut().enumerate() {
            let mut n = 0;
            while taken < budget && ring.pop_into(&mut rec) {
                self.add(&ReportParts::of(&rec), self.md_bits, out);
                n += 1;
                taken += 1;
            }
            self.received[ri] += n;
        }
        self.rings = rings;
        let mut label = std::mem::take(&mut self.label);
        for (ri, ring) in label.iter_mut().enumerate() {
            while taken < budget && ring.pop_into(&mut rec) {
                // A label report carries no metadata of the last hop's own
                // beside its labels (RepMdBits 0).
                self.add(&ReportParts::of(&rec), 0, out);
                self.label_received[ri] += 1;
                taken += 1;
            }
        }
        self.label = label;
        let mut gpint = std::mem::take(&mut self.gpint);
        for (ri, ring) in gpint.iter_mut().enumerate() {
            while taken < budget {
                let Ok(g) = ring.pop() else { break };
                self.add(&ReportParts::of_gpint(&g), self.md_bits, out);
                self.gpint_received[ri] += 1;
                if g.flags & FLAG_D != 0 {
                    self.gpint_notices += 1;
                } else {
                    self.gpint_delivered += 1;
                }
                taken += 1;
            }
        }
        self.gpint = gpint;
        // Nothing is held back between polls.
        for s in 0..SHAPES {
            self.send_all(s, out);
        }
        taken
    }

    /// Encodes one report into the packet being filled with reports of its
    /// length (that packet queued first when the report would not fit; a
    /// report longer than a packet goes alone).
    fn add(&mut self, r: &ReportParts, md_bits: u16, out: &mut dyn PortOut) {
        let len = encoded_len(r, md_bits);
        let s = self.shape_for(len, out);
        if self.shapes[s].off + len > self.max_packet && self.shapes[s].reports > 0 {
            self.finish_packet(s, out);
        }
        let sh = &mut self.shapes[s];
        encode(r, md_bits, &mut sh.buf[sh.off..sh.off + len]);
        sh.off += len;
        sh.reports += 1;
    }

    /// The shape that packs reports of `len` bytes: the one that does, else
    /// an empty one, else the next in turn, emptied (sent) first.
    fn shape_for(&mut self, len: usize, out: &mut dyn PortOut) -> usize {
        if let Some(s) = self.shape_lens.iter().position(|&l| l == len) {
            return s;
        }
        let s = match self.shapes.iter().position(Shape::is_empty) {
            Some(s) => s,
            None => {
                let s = self.evict;
                self.evict = (s + 1) % SHAPES;
                self.send_all(s, out);
                s
            }
        };
        self.shape_lens[s] = len;
        s
    }

    /// Queues shape `s`'s packet, if it holds reports, for sending with the
    /// others of its length (sending those first when the batch is full or
    /// the packet is longer); its group header is written per collector
    /// when it leaves.
    fn finish_packet(&mut self, s: usize, out: &mut dyn PortOut) {
        let (len, reports) = (self.shapes[s].off, self.shapes[s].reports);
        if reports == 0 {
            return;
        }
        if !self.shapes[s].batch.takes(len) {
            self.flush(s, out);
        }
        let sh = &mut self.shapes[s];
        sh.batch.push(&sh.buf[..len], reports);
        (sh.off, sh.reports) = (GROUP_HDR_LEN, 0);
    }

    /// Sends all that shape `s` holds: its packet, then its batch.
    fn send_all(&mut self, s: usize, out: &mut dyn PortOut) {
        self.finish_packet(s, out);
        self.flush(s, out);
    }

    /// Sends shape `s`'s batch to every collector, numbered with that
    /// collector's sequence: in one call where its socket takes UDP GSO,
    /// else packet by packet.
    fn flush(&mut self, s: usize, out: &mut dyn PortOut) {
        let b = &mut self.shapes[s].batch;
        if b.packets == 0 {
            return;
        }
        self.packets += b.packets as u64;
        self.reports += b.reports as u64;
        for c in &mut self.collectors {
            if b.packets > 1 {
                for i in 0..b.packets {
                    let seq = (c.seq + i as u32) & SEQ_MASK;
                    emit_group(&mut b.packet_mut(i)[..GROUP_HDR_LEN], self.hw_id, seq, self.node_id);
                }
                match c.tx.send_segments(&b.bytes, b.seg) {
                    Ok(()) => {
                        c.seq = (c.seq + b.packets as u32) & SEQ_MASK;
                        c.packets += b.packets as u64;
                        c.reports += b.reports as u64;
                        continue;
                    }
                    Err(SegmentsError::Failed(e)) => {
                        // None went out, so no sequence numbers were used.
                        c.send_errors += b.packets as u64;
                        c.last_error = Some(e);
                        continue;
                    }
                    Err(SegmentsError::Unsupported) => {}
                }
            }
            // One by one.
            for i in 0..b.packets {
                let p = b.packet_mut(i);
                emit_group(&mut p[..GROUP_HDR_LEN], self.hw_id, c.seq, self.node_id);
                match c.tx.send(p, out) {
                    Ok(_) => {
                        c.seq = (c.seq + 1) & SEQ_MASK;
                        c.packets += 1;
                        c.reports += b.per_packet[i] as u64;
                    }
                    Err(e) => {
                        // Not sent, so no sequence number used: the collector sees
                        // no gap, this counter says what was lost here.
                        c.send_errors += 1;
                        c.last_error = Some(e);
                    }
                }
            }
        }
        b.clear();
    }

    /// Records waiting in each ring.
    pub fn pending(&self) -> Vec<usize> {
        self.rings.iter().map(|r| r.len()).collect()
    }

    /// `ring_full`: per worker, records its ring refused.
    pub fn view(&self, ring_full: &[u64]) -> ReportsView {
        let rings = ring_views(&self.rings, &self.received, ring_full);
        let collectors = self
            .collectors
            .iter()
            .map(|c| ReportCollectorView {
                address: c.tx.addr.to_string(),
                via: c.tx.via(),
                packets: c.packets,
                reports: c.reports,
                send_errors: c.send_errors,
                next_seq: c.seq,
                last_error: c.last_error.clone(),
            })
            .collect();
        let busy_s = self.busy.as_secs_f64();
        ReportsView {
            paused: self.paused,
            node_id: self.node_id,
            hw_id: self.hw_id,
            reports: self.reports,
            packets: self.packets,
            busy_s,
            reports_per_busy_s: if busy_s > 0.0 { (self.reports as f64 / busy_s) as u64 } else { 0 },
            rings,
            collectors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector_tx::NoPorts;
    use dataplane::int::report_ring::report_ring;
    use dataplane::int::stage::{ReportSink, REPORT_MAX};
    use dataplane::wire::int_md::HopMetadata;
    use dataplane::wire::telemetry_report::{parse_group, FLAG_F};
    use std::net::UdpSocket;
    use std::time::Duration;

    fn rec(len: usize, flags: u8) -> ReportRecord {
        let mut r = ReportRecord {
            flags,
            drop_reason: 9,
            domain_id: 0x1234,
            md: HopMetadata { ingress_port: 1, egress_port: 2, queue_id: 3, queue_occupancy: 4, ..Default::default() },
            len: len as u16,
            data: [0; REPORT_MAX],
        };
        for (i, b) in r.data[..len].iter_mut().enumerate() {
            *b = i as u8;
        }
        r
    }

    /// Layout from the spec's example shape: RepMdBits 0x5000 (L1 ports + queue).
    #[test]
    fn encodes_the_individual_report() {
        let r = rec(42, FLAG_F);
        let mut out = [0u8; 128];
        let n = encode(&ReportParts::of(&r), 0x5000, &mut out);
        assert_eq!(n, 4 + 8 + 8 + 44);
        assert_eq!(&out[..4], &[0x13, ((n - 4) / 4) as u8, 2, 0x20]);
        assert_eq!(&out[4..12], &[0x50, 0x00, 0x12, 0x34, 0, 0, 0, 0]);
        assert_eq!(&out[12..20], &[0, 1, 0, 2, 3, 0, 0, 4]);
        assert_eq!(&out[20..62], r.packet());
        assert_eq!(&out[62..64], &[0, 0], "padded to a word");
        // A drop report adds bit 15: queue ID, reason, padding.
        let d = rec(40, FLAG_D);
        let n = encode(&ReportParts::of(&d), 0x4000, &mut out);
        assert_eq!(&out[2..6], &[2, 0x80, 0x40, 0x01]);
        assert_eq!(&out[16..20], &[3, 9, 0, 0]);
        assert_eq!(n, 4 + 8 + 8 + 40);
    }

    /// A collector socket on loopback (reads time out after 2 s) and the plan to reach it.
    fn receiver() -> (UdpSocket, CollectorPlan) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let plan = CollectorPlan { addr: rx.local_addr().unwrap(), bind: None, port: None, mac: None };
        (rx, plan)
    }

    #[test]
    fn batches_and_numbers_packets_per_collector() {
        let (rx, plan) = receiver();
        let (mut p, c) = report_ring(64);
        let mut ex = Exporter::new(9, 2, 0x4000, 300, vec![c], &[plan], &NoPorts).unwrap();
        // An empty poll is not export work.
        assert_eq!(ex.poll(1000, &mut NoPorts), 0);
        assert_eq!(ex.view(&[0]).busy_s, 0.0);
        for _ in 0..10 {
            assert!(p.push(&rec(100, 0)));
        }
        assert_eq!(ex.poll(1000, &mut NoPorts), 10);
        // 4+8+4+100 = 116 bytes each: two per 300-byte packet -> 5 packets.
        let mut seqs = Vec::new();
        let mut buf = [0u8; 2048];
        for _ in 0..5 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(n, 8 + 2 * 116);
            let g = parse_group(&buf[..n]).unwrap();
            assert_eq!((g.hw_id, g.node_id), (2, 9));
            seqs.push(g.seq);
        }
        assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
        ex.paused = true;
        assert!(p.push(&rec(100, 0)));
        assert_eq!(ex.poll(1000, &mut NoPorts), 0);
        assert_eq!(ex.pending(), vec![1]);
        let j = ex.view(&[0]);
        assert_eq!((j.reports, j.packets), (10, 5));
        // The poll that sent them was timed: capacity = reports / busy time.
        assert!(j.busy_s > 0.0);
        assert_eq!(j.reports_per_busy_s, (10.0 / j.busy_s) as u64);
    }

    /// The individual reports' lengths (bytes) in one report packet.
    fn report_lengths(packet: &[u8]) -> Vec<usize> {
        let mut at = GROUP_HDR_LEN;
        let mut lens = Vec::new();
        while at < packet.len() {
            let len = 4 + 4 * Individual::parse(&packet[at..]).unwrap().len_words as usize;
            lens.push(len);
            at += len;
        }
        assert_eq!(at, packet.len(), "reports end with the packet");
        lens
    }

    /// Reports of two lengths, alternating in the ring, are packed each
    /// length into packets of its own: full packets of one length, then
    /// the shorter last one of each; every report arrives, numbered packets
    /// 0, 1, 2, ... without a gap.
    #[test]
    fn reports_of_mixed_lengths_are_packed_by_length() {
        let (rx, plan) = receiver();
        let (mut p, c) = report_ring(64);
        let mut ex = Exporter::new(9, 2, 0x4000, 300, vec![c], &[plan], &NoPorts).unwrap();
        // 116- and 56-byte reports: two or five to a 300-byte packet.
        for i in 0..24 {
            assert!(p.push(&rec(if i % 2 == 0 { 100 } else { 40 }, 0)));
        }
        assert_eq!(ex.poll(1000, &mut NoPorts), 24);
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        // 12 long reports: 6 packets; 12 short: 2 full packets and one of 2.
        for _ in 0..9 {
            let n = rx.recv(&mut buf).unwrap();
            got.push(buf[..n].to_vec());
        }
        let mut seqs: Vec<u32> = got.iter().map(|g| parse_group(g).unwrap().seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..9).collect::<Vec<u32>>());
        let mut per_len = std::collections::BTreeMap::new();
        for g in &got {
            let lens = report_lengths(g);
            assert!(lens.iter().all(|&l| l == lens[0]), "one length a packet: {lens:?}");
            *per_len.entry(lens[0]).or_insert(0) += lens.len();
        }
        assert_eq!(per_len.into_iter().collect::<Vec<_>>(), vec![(56, 12), (116, 12)]);
        let sizes: Vec<usize> = got.iter().map(|g| g.len()).collect();
        assert_eq!(sizes.iter().filter(|&&n| n == 8 + 2 * 116).count(), 6, "{sizes:?}");
        assert_eq!(sizes.iter().filter(|&&n| n == 8 + 5 * 56).count(), 2, "{sizes:?}");
        assert_eq!(sizes.iter().filter(|&&n| n == 8 + 2 * 56).count(), 1, "{sizes:?}");
    }

    /// More lengths than are packed apart at once: a new length takes a
    /// shape whose packets leave first; none is lost or numbered twice.
    #[test]
    fn more_lengths_than_shapes_lose_nothing() {
        let (rx, plan) = receiver();
        let (mut p, c) = report_ring(256);
        let mut ex = Exporter::new(9, 2, 0x4000, 1400, vec![c], &[plan], &NoPorts).unwrap();
        let lens: Vec<usize> = (0..3 * (SHAPES + 4)).map(|i| 20 + 4 * (i % (SHAPES + 4))).collect();
        for &l in &lens {
            assert!(p.push(&rec(l, 0)));
        }
        assert_eq!(ex.poll(1000, &mut NoPorts), lens.len());
        let packets = ex.view(&[0]).packets;
        let mut seqs = Vec::new();
        let mut reports = 0;
        let mut buf = [0u8; 2048];
        for _ in 0..packets {
            let n = rx.recv(&mut buf).unwrap();
            seqs.push(parse_group(&buf[..n]).unwrap().seq);
            reports += report_lengths(&buf[..n]).len();
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (0..packets as u32).collect::<Vec<u32>>());
        assert_eq!(reports, lens.len());
        let j = ex.view(&[0]);
        assert_eq!(
            (j.reports, j.collectors[0].reports, j.collectors[0].send_errors),
            (lens.len() as u64, lens.len() as u64, 0)
        );
    }

    /// Packets of different lengths: a GSO batch holds equal ones (a shorter
    /// one may end it). The socket collector (GSO) and a port collector
    /// (one by one) get the same packets, numbered 0, 1, 2, ... each.
    #[test]
    fn batches_of_unequal_packets_reach_socket_and_port_alike() {
        use crate::collector_tx::tests::TestPorts;
        let (rx, socket) = receiver();
        let (mut p, c) = report_ring(64);
        let port = CollectorPlan { addr: "10.9.0.2:32766".parse().unwrap(), bind: None, port: Some(3), mac: None };
        let mut ports = TestPorts::default();
        let mut ex = Exporter::new(9, 2, 0x4000, 300, vec![c], &[socket, port], &ports).unwrap();
        // 116-byte and 56-byte records, packed two or three to a packet.
        let lens = [100, 100, 100, 100, 40, 100, 100, 40, 40, 40, 100, 100, 100, 100, 100];
        for &l in &lens {
            assert!(p.push(&rec(l, 0)));
        }
        assert_eq!(ex.poll(1000, &mut ports), lens.len());
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(n) = rx.recv(&mut buf) {
            got.push(buf[..n].to_vec());
            if got.len() == ports.sent.len() {
                break;
            }
        }
        let sizes: Vec<usize> = got.iter().map(|g| g.len()).collect();
        assert!(sizes.windows(2).any(|w| w[0] != w[1]), "packets of several lengths: {sizes:?}");
        assert_eq!(got.len(), ports.sent.len());
        for (i, (g, (_, frame))) in got.iter().zip(&ports.sent).enumerate() {
            assert_eq!(parse_group(g).unwrap().seq, i as u32);
            // The frame's UDP payload (after Ethernet, IPv4, UDP headers) is the same packet.
            assert_eq!(&frame[14 + 20 + 8..], &g[..], "packet {i}");
        }
        let j = ex.view(&[0]);
        assert_eq!(j.reports, lens.len() as u64);
        for c in &j.collectors {
            assert_eq!(c.packets, got.len() as u64, "{c:?}");
            assert_eq!(c.reports, lens.len() as u64, "{c:?}");
            assert_eq!(c.send_errors, 0, "{c:?}");
        }
    }
}
