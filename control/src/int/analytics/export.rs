//! Flow records from the workers' R_G rings and event records from their
//! R_I rings to the INT collectors, as versioned JSON lines (several per
//! datagram, `seq` counted per collector from 0 over both kinds, so a
//! collector counts lost records as gaps):
//!
//! `{"type":"int_flow","version":1,"node":N,"seq":S,"worker":W,"reason":"lru",
//!   "flow":{"ip_version":4,"src":"10.0.0.1","dst":"10.0.0.2","proto":17,"src_port":1,"dst_port":2},
//!   "packets":P,"first_ns":F,"last_ns":L,"hops":H,"path":[IDs of the tracked hops],
//!   "e2e_latency":{"last":..,"sum":..,"count":..},
//!   "hop":[{"node_id":..,"hop_latency":{"last","sum","count"},"queue":{..},"tx_util":{..}},..]}`
//!
//! `{"type":"int_event","version":1,"node":N,"seq":S,"worker":W,"flow":{..},
//!   "sink_ns":T,"rx_tsc":X,"hop":H|null,"node_id":ID,"bits":B,"events":["queue_t",..],
//!   "hop_latency":V|null,"queue":..,"tx_util":..,"link_latency":..,
//!   "prev":{"hop_latency":V|null,..,"link_latency":..}}`;
//! the end-to-end record has `"hop":null`, `"e2e_latency"` and
//! `"e2e_latency_prev"` instead of the three metrics.
//!
//! Sums and counts (not averages) travel, so the records of one flow that
//! two workers (or two exports) saw merge exactly. A line is written into
//! a reused buffer: no allocation per record.

use std::io::Write;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::int::analytics::cache::{Agg, METRIC_NAMES};
use dataplane::int::analytics::events::{bit, EventConsumer, EventRecord, HOP_E2E};
use dataplane::int::analytics::flow_ring::{FlowConsumer, FlowRecord};
use dataplane::int::analytics::histogram::{Bins, WorkerHist};
use dataplane::parse::FlowKey;

use crate::collector_tx::{CollectorPlan, CollectorTx, PortOut};
use crate::int::analytics::api::{DelayView, FlowCollectorView, FlowExportView};
use crate::int::api::RingView;
use crate::line_batch::LineBatch;

struct Collector {
    tx: CollectorTx,
    seq: u64,
    datagrams: u64,
    records: u64,
    send_errors: u64,
    /// The datagrams being filled.
    batch: LineBatch,
}

pub struct AnalyticsExporter {
    node_id: u32,
    rings: Vec<FlowConsumer>,
    received: Vec<u64>,
    event_rings: Vec<EventConsumer>,
    events_received: Vec<u64>,
    collectors: Vec<Collector>,
    line: Vec<u8>,
    pub records: u64,
    pub events: u64,
    /// The workers' histograms, and when the next snapshot is due.
    hist: Vec<Arc<WorkerHist>>,
    hist_every: Option<Duration>,
    next_hist: Instant,
    pub hist_snapshots: u64,
    pub hist_lines: u64,
    /// Time spent in polls that took records.
    busy: Duration,
    /// Event delivery delay (worker RX to export, ns) in log2 bins, and
    /// the largest; TSC ticks per second.
    delay_bins: Vec<u64>,
    delay_max_ns: u64,
    tsc_hz: u64,
}

/// Bins of the delivery delay: log2 with 8 sub-bins (12.5 %).
const DELAY_BINS: Bins = Bins::Log2 { sub: 8 };

/// Queues one line (written by `enc` with each collector's next `seq`) on
/// every collector, sending its batch first when that is full.
fn emit(collectors: &mut [Collector], line: &mut Vec<u8>, out: &mut dyn PortOut, enc: &dyn Fn(&mut Vec<u8>, u64)) {
    for c in collectors.iter_mut() {
        line.clear();
        enc(line, c.seq);
        c.seq += 1;
        c.records += 1;
        if !c.batch.add(line) {
            send(c, out);
            c.batch.add(line);
        }
    }
}

/// "00" to "99": two digits a division.
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Appends `v` in decimal: what `write!` gives, without the formatting
/// machinery, which cost more than the rest of an event's export.
#[inline]
fn num(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while v >= 100 {
        let r = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
    }
    if v >= 10 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[v as usize * 2..v as usize * 2 + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// `"name":` (names here need no escaping).
#[inline]
fn key(out: &mut Vec<u8>, name: &str) {
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn agg(out: &mut Vec<u8>, name: &str, a: &Agg) {
    key(out, name);
    out.extend_from_slice(b"{\"last\":");
    num(out, a.last as u64);
    out.extend_from_slice(b",\"sum\":");
    num(out, a.sum);
    out.extend_from_slice(b",\"count\":");
    num(out, a.count);
    out.push(b'}');
}

/// An IPv4 address in dotted decimal, quoted.
fn ipv4(out: &mut Vec<u8>, a: u32) {
    out.push(b'"');
    for (i, o) in a.to_be_bytes().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        num(out, o as u64);
    }
    out.push(b'"');
}

/// `"flow":{...}`: the flow as its source saw it.
fn flow(out: &mut Vec<u8>, k: &FlowKey) {
    out.extend_from_slice(b"\"flow\":{\"ip_version\":");
    num(out, k.ip_version() as u64);
    if k.ip_version() == 4 {
        out.extend_from_slice(b",\"src\":");
        ipv4(out, k.src as u32);
        out.extend_from_slice(b",\"dst\":");
        ipv4(out, k.dst as u32);
    } else {
        let _ = write!(out, ",\"src\":\"{}\",\"dst\":\"{}\"", Ipv6Addr::from(k.src), Ipv6Addr::from(k.dst));
    }
    out.extend_from_slice(b",\"proto\":");
    num(out, k.proto() as u64);
    out.extend_from_slice(b",\"src_port\":");
    num(out, k.src_port() as u64);
    out.extend_from_slice(b",\"dst_port\":");
    num(out, k.dst_port() as u64);
    out.push(b'}');
}

/// A number, or null when absent.
fn opt(out: &mut Vec<u8>, name: &str, v: Option<u32>) {
    key(out, name);
    match v {
        Some(v) => num(out, v as u64),
        None => out.extend_from_slice(b"null"),
    }
}

/// One event record's line (with newline) into `out`.
pub fn encode_event(out: &mut Vec<u8>, node: u32, seq: u64, worker: usize, r: &EventRecord) {
    out.extend_from_slice(b"{\"type\":\"int_event\",\"version\":1,\"node\":");
    num(out, node as u64);
    out.extend_from_slice(b",\"seq\":");
    num(out, seq);
    out.extend_from_slice(b",\"worker\":");
    num(out, worker as u64);
    out.push(b',');
    flow(out, &r.key);
    out.extend_from_slice(b",\"sink_ns\":");
    num(out, r.sink_ns);
    out.extend_from_slice(b",\"rx_tsc\":");
    num(out, r.rx_tsc);
    if r.hop == HOP_E2E {
        out.extend_from_slice(b",\"hop\":null");
    } else {
        out.extend_from_slice(b",\"hop\":");
        num(out, r.hop as u64);
    }
    out.extend_from_slice(b",\"node_id\":");
    num(out, r.node_id as u64);
    out.extend_from_slice(b",\"bits\":");
    num(out, r.bits as u64);
    out.extend_from_slice(b",\"events\":[");
    let mut first = true;
    for (b, name) in bit::NAMES.iter().enumerate() {
        if r.bits & (1 << b) != 0 {
            if !first {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.push(b'"');
            first = false;
        }
    }
    out.extend_from_slice(b"],");
    let value = |m: usize| r.has_value(m).then_some(r.value[m]);
    let prev = |m: usize| r.has_prev(m).then_some(r.prev[m]);
    if r.hop == HOP_E2E {
        opt(out, "e2e_latency", value(0));
        out.push(b',');
        opt(out, "e2e_latency_prev", prev(0));
    } else {
        for (m, name) in METRIC_NAMES.iter().enumerate() {
            opt(out, name, value(m));
            out.push(b',');
        }
        // Into this hop from the previous one.
        opt(out, "link_latency", r.has_link().then_some(r.link));
        out.extend_from_slice(b",\"prev\":{");
        for (m, name) in METRIC_NAMES.iter().enumerate() {
            opt(out, name, prev(m));
            out.push(b',');
        }
        opt(out, "link_latency", r.has_link_prev().then_some(r.link_prev));
        out.push(b'}');
    }
    out.extend_from_slice(b"}\n");
}

/// One flow record's line (with newline) into `out`.
pub fn encode(out: &mut Vec<u8>, node: u32, seq: u64, worker: usize, r: &FlowRecord) {
    let h = &r.head;
    let reason = h.reason().map_or("unknown", |r| r.name());
    let _ = write!(
        out,
        "{{\"type\":\"int_flow\",\"version\":1,\"node\":{node},\"seq\":{seq},\"worker\":{worker},\"reason\":\"{reason}\","
    );
    flow(out, &h.key);
    let _ = write!(
        out,
        ",\"packets\":{},\"first_ns\":{},\"last_ns\":{},\"hops\":{},\"path\":[",
        h.packets, h.first_ns, h.last_ns, h.hops
    );
    for (i, hop) in r.hops().iter().enumerate() {
        let _ = write!(out, "{}{}", if i > 0 { "," } else { "" }, hop.node_id);
    }
    out.extend_from_slice(b"],");
    agg(out, "e2e_latency", &h.e2e);
    out.extend_from_slice(b",\"hop\":[");
    for (i, hop) in r.hops().iter().enumerate() {
        let _ = write!(out, "{}{{\"node_id\":{}", if i > 0 { "," } else { "" }, hop.node_id);
        for (m, name) in METRIC_NAMES.iter().enumerate() {
            out.push(b',');
            agg(out, name, &hop.metric(m));
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}\n");
}

/// What the exporter reads of each worker: R_G, R_I and the histograms
/// (empty: histograms off).
pub struct WorkerSources {
    pub flows: Vec<FlowConsumer>,
    pub events: Vec<EventConsumer>,
    pub hist: Vec<Arc<WorkerHist>>,
}

impl AnalyticsExporter {
    pub fn new(
        node_id: u32,
        max_packet: usize,
        from: WorkerSources,
        hist_interval_s: u64,
        collectors: &[CollectorPlan],
        ports: &dyn PortOut,
    ) -> Result<AnalyticsExporter, String> {
        let mut cs = Vec::new();
        for (i, c) in collectors.iter().enumerate() {
            let tx = CollectorTx::open(c, ports, true).map_err(|e| format!("int.collector[{i}]: {e}"))?;
            cs.push(Collector {
                tx,
                seq: 0,
                datagrams: 0,
                records: 0,
                send_errors: 0,
                batch: LineBatch::new(max_packet),
            });
        }
        let WorkerSources { flows: rings, events: event_rings, hist } = from;
        let (n, e) = (rings.len(), event_rings.len());
        Ok(AnalyticsExporter {
            node_id,
            rings,
            received: vec![0; n],
            event_rings,
            events_received: vec![0; e],
            collectors: cs,
            line: Vec::with_capacity(4096),
            records: 0,
            events: 0,
            hist_every: (!hist.is_empty() && hist_interval_s > 0).then(|| Duration::from_secs(hist_interval_s)),
            hist,
            next_hist: Instant::now(),
            hist_snapshots: 0,
            hist_lines: 0,
            busy: Duration::ZERO,
            delay_bins: vec![0; DELAY_BINS.len()],
            delay_max_ns: 0,
            tsc_hz: dataplane::dpdk::tsc_hz().max(1),
        })
    }

    /// The workers' histograms summed (empty without histograms).
    pub fn histograms(&self) -> Vec<crate::int::analytics::histogram::Hist> {
        crate::int::analytics::histogram::snapshot(&self.hist)
    }

    /// Sends a snapshot of the histograms (cumulative counts) now.
    pub fn export_histograms(&mut self, out: &mut dyn PortOut) {
        if self.hist.is_empty() {
            return;
        }
        let ts_ns =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let snap = self.histograms();
        let AnalyticsExporter { node_id, collectors, line, hist_lines, .. } = self;
        for h in &snap {
            crate::int::analytics::histogram::encode(h, *node_id, ts_ns, |enc| {
                *hist_lines += 1;
                emit(collectors, line, out, &|l, seq| enc(l, seq));
            });
        }
        for c in &mut self.collectors {
            if !c.batch.is_empty() {
                send(c, out);
            }
        }
        self.hist_snapshots += 1;
    }

    /// Drains up to `budget` records (events first, then flow records) and
    /// sends them (nothing is held back between calls). Returns how many
    /// were taken.
    /// A histogram snapshot goes out every `histogram_interval` too.
    pub fn poll(&mut self, budget: usize, out: &mut dyn PortOut) -> usize {
        if self.hist_every.is_some_and(|_| Instant::now() >= self.next_hist) {
            self.next_hist = Instant::now() + self.hist_every.unwrap_or_default();
            self.export_histograms(out);
        }
        let started = Instant::now();
        let mut taken = 0;
        let AnalyticsExporter { node_id, collectors, line, .. } = self;
        let node = *node_id;
        for (w, ring) in self.event_rings.iter_mut().enumerate() {
            while taken < budget {
                let Some(r) = ring.pop() else { break };
                self.events_received[w] += 1;
                taken += 1;
                emit(collectors, line, out, &|l, seq| encode_event(l, node, seq, w, &r));
                // Exported once its datagram is batched (the batch leaves
                // before this poll returns): the delay up to here is the
                // worker's ring and this core's turn.
                let ns = (dataplane::dpdk::tsc().saturating_sub(r.rx_tsc) as u128 * 1_000_000_000 / self.tsc_hz as u128)
                    as u64;
                self.delay_bins[DELAY_BINS.index(ns.min(u32::MAX as u64) as u32)] += 1;
                self.delay_max_ns = self.delay_max_ns.max(ns);
            }
        }
        let events = taken;
        let mut rec = FlowRecord::empty();
        for (w, ring) in self.rings.iter_mut().enumerate() {
            while taken < budget && ring.pop_into(&mut rec) {
                self.received[w] += 1;
                taken += 1;
                emit(collectors, line, out, &|l, seq| encode(l, node, seq, w, &rec));
            }
        }
        for c in &mut self.collectors {
            if !c.batch.is_empty() {
                send(c, out);
            }
        }
        self.events += events as u64;
        self.records += (taken - events) as u64;
        if taken > 0 {
            self.busy += started.elapsed();
        }
        taken
    }

    /// The events' delivery delay so far.
    fn delay(&self) -> DelayView {
        let count: u64 = self.delay_bins.iter().sum();
        let pct = |q: u64| {
            let mut acc = 0;
            let at = (count * q).div_ceil(100).max(1);
            self.delay_bins
                .iter()
                .position(|c| {
                    acc += c;
                    acc >= at
                })
                .map_or(0, |i| DELAY_BINS.lower_edge(i))
        };
        DelayView { count, p50_ns: pct(50), p99_ns: pct(99), max_ns: self.delay_max_ns }
    }

    /// `ring_full` and `event_ring_full`: per worker, records its R_G and
    /// R_I refused.
    pub fn view(&self, ring_full: &[u64], event_ring_full: &[u64]) -> FlowExportView {
        let ring = |i: usize, capacity: usize, pending: usize, received: u64, full: &[u64]| RingView {
            worker: i,
            capacity,
            pending,
            received,
            ring_full: full.get(i).copied().unwrap_or(0),
        };
        let busy_s = self.busy.as_secs_f64();
        FlowExportView {
            records: self.records,
            events: self.events,
            busy_s,
            records_per_busy_s: if busy_s > 0.0 { ((self.records + self.events) as f64 / busy_s) as u64 } else { 0 },
            event_delay: self.delay(),
            hist_snapshots: self.hist_snapshots,
            hist_lines: self.hist_lines,
            rings: self
                .rings
                .iter()
                .enumerate()
                .map(|(i, r)| ring(i, r.capacity(), r.len(), self.received[i], ring_full))
                .collect(),
            event_rings: self
                .event_rings
                .iter()
                .enumerate()
                .map(|(i, r)| ring(i, r.capacity(), r.len(), self.events_received[i], event_ring_full))
                .collect(),
            collectors: self
                .collectors
                .iter()
                .map(|c| FlowCollectorView {
                    address: c.tx.addr.to_string(),
                    via: c.tx.via(),
                    datagrams: c.datagrams,
                    records: c.records,
                    next_seq: c.seq,
                    send_errors: c.send_errors,
                })
                .collect(),
        }
    }
}

/// Sends a collector's batch; failed datagrams are counted (their records
/// are gaps in `seq` at the collector).
fn send(c: &mut Collector, out: &mut dyn PortOut) {
    let sent = c.batch.send(&mut c.tx, out, &mut None);
    c.datagrams += sent.datagrams;
    c.send_errors += sent.failed;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector_tx::NoPorts;
    use dataplane::int::analytics::cache::{HopAgg, Reason};
    use dataplane::int::analytics::events::event_ring;
    use dataplane::int::analytics::flow_ring::{flow_ring, FlowHead};
    use dataplane::parse::FlowKey;
    use std::net::Ipv4Addr;
    use std::net::UdpSocket;

    fn head(i: u16, tracked: u8) -> FlowHead {
        FlowHead {
            key: FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 4000, i),
            reason: Reason::Lru as u8,
            hops: 3,
            tracked,
            packets: 10,
            first_ns: 1,
            last_ns: 2,
            e2e: Agg { last: 30, sum: 300, count: 10 },
        }
    }

    fn hops() -> Vec<HopAgg> {
        (0..2).map(|h| HopAgg { node_id: 7 + h, last: [1, 2, 3], sum: [10, 20, 30], count: [10, 10, 0] }).collect()
    }

    #[test]
    fn a_line_is_the_json_the_format_says() {
        let mut r = FlowRecord::empty();
        r.head = head(53, 2);
        r.hops[..2].copy_from_slice(&hops());
        let mut out = Vec::new();
        encode(&mut out, 9, 4, 1, &r);
        assert_eq!(out.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["type"], "int_flow");
        assert_eq!((v["node"].as_u64(), v["seq"].as_u64(), v["worker"].as_u64()), (Some(9), Some(4), Some(1)));
        assert_eq!(v["reason"], "lru");
        assert_eq!(v["flow"]["dst_port"], 53);
        assert_eq!(v["flow"]["src"], "10.0.0.1");
        assert_eq!(v["path"], serde_json::json!([7, 8]));
        assert_eq!(v["hops"], 3);
        assert_eq!(v["e2e_latency"]["sum"], 300);
        assert_eq!(v["hop"][1]["queue"], serde_json::json!({"last": 2, "sum": 20, "count": 10}));
        assert_eq!(v["hop"][0]["tx_util"]["count"], 0);
        let mut v6 = FlowRecord::empty();
        v6.head = FlowHead { key: FlowKey::new(1, 2, 6, 1, 2, 6, 0, 0), ..head(1, 0) };
        out.clear();
        encode(&mut out, 9, 5, 0, &v6);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((v["flow"]["src"].as_str(), v["hop"].as_array().map(|a| a.len())), (Some("::1"), Some(0)));
    }

    #[test]
    fn records_reach_the_collector_in_datagrams_numbered_per_record() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let plan = CollectorPlan { addr: rx.local_addr().unwrap(), bind: None, port: None, mac: None };
        let (mut p, c) = flow_ring(64, 5);
        let (mut ep, ec) = event_ring(8);
        let from = WorkerSources { flows: vec![c], events: vec![ec], hist: Vec::new() };
        let mut ex = AnalyticsExporter::new(3, 1000, from, 0, &[plan], &NoPorts).unwrap();
        assert!(ep.push(EventRecord { hop: HOP_E2E, bits: bit::PATH, ..EventRecord::default() }));
        for i in 0..20 {
            assert!(p.push(head(i, 2), &hops()));
        }
        assert_eq!(ex.poll(1000, &mut NoPorts), 21);
        let mut seqs = Vec::new();
        let mut buf = [0u8; 2000];
        while seqs.len() < 21 {
            let n = rx.recv(&mut buf).unwrap();
            assert!(n <= 1000, "a datagram stays within report_max_packet");
            for line in std::str::from_utf8(&buf[..n]).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                seqs.push(v["seq"].as_u64().unwrap());
            }
        }
        assert_eq!(seqs, (0..21).collect::<Vec<u64>>(), "one sequence over events and flows");
        let view = ex.view(&[0], &[5]);
        assert_eq!((view.records, view.rings[0].received, view.collectors[0].records), (20, 20, 21));
        assert_eq!((view.events, view.event_rings[0].received, view.event_rings[0].ring_full), (1, 1, 5));
        assert!(view.collectors[0].datagrams > 1);
    }

    #[test]
    fn numbers_are_written_as_write_writes_them() {
        for v in [0u64, 5, 9, 10, 11, 99, 100, 101, 999, 1000, 4_294_967_295, 1_700_000_000_000_000_000, u64::MAX] {
            let mut out = Vec::new();
            num(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
        }
        let mut out = Vec::new();
        ipv4(&mut out, u32::from(Ipv4Addr::new(10, 0, 255, 1)));
        assert_eq!(out, b"\"10.0.255.1\"");
    }

    #[test]
    fn an_event_line_names_its_bits_and_leaves_absent_values_null() {
        let key = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 4000, 80);
        let r = EventRecord {
            key,
            sink_ns: 77,
            rx_tsc: 88,
            value: [500, 120, 0],
            prev: [400, 90, 0],
            node_id: 12,
            link: 0,
            link_prev: 0,
            bits: bit::t(1) | bit::c(1),
            present: 0b011_0011,
            hop: 1,
        };
        let mut out = Vec::new();
        encode_event(&mut out, 9, 3, 0, &r);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((v["type"].as_str(), v["seq"].as_u64(), v["hop"].as_u64()), (Some("int_event"), Some(3), Some(1)));
        assert_eq!(v["events"], serde_json::json!(["queue_t", "queue_c"]));
        assert_eq!((v["queue"].as_u64(), v["prev"]["queue"].as_u64()), (Some(120), Some(90)));
        assert!(v["tx_util"].is_null() && v["prev"]["tx_util"].is_null());
        assert!(v["link_latency"].is_null() && v["prev"]["link_latency"].is_null());
        assert_eq!(
            (v["sink_ns"].as_u64(), v["node_id"].as_u64(), v["flow"]["dst_port"].as_u64()),
            (Some(77), Some(12), Some(80))
        );
        // A link latency into this hop, with the previous packet's.
        out.clear();
        let link = EventRecord { bits: bit::LINK_C, link: 5000, link_prev: 900, present: 0b1000_1000, ..r };
        encode_event(&mut out, 9, 5, 0, &link);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((v["link_latency"].as_u64(), v["prev"]["link_latency"].as_u64()), (Some(5000), Some(900)));
        assert_eq!(v["events"], serde_json::json!(["link_latency_c"]));
        out.clear();
        let e2e = EventRecord { hop: HOP_E2E, bits: bit::E2E_T | bit::PATH, value: [900, 0, 0], present: 1, ..r };
        encode_event(&mut out, 9, 4, 0, &e2e);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["hop"].is_null() && v["e2e_latency_prev"].is_null() && v.get("queue").is_none(), "{v}");
        assert_eq!(
            (v["e2e_latency"].as_u64(), v["events"].clone()),
            (Some(900), serde_json::json!(["e2e_latency_t", "path_change"]))
        );
    }
}
