//! Flow records from the workers' R_G rings to the INT collectors, as
//! versioned JSON lines (several per datagram, `seq` counted per collector
//! from 0 so a collector counts lost records as gaps):
//!
//! `{"type":"int_flow","version":1,"node":N,"seq":S,"worker":W,"reason":"lru",
//!   "flow":{"ip_version":4,"src":"10.0.0.1","dst":"10.0.0.2","proto":17,"src_port":1,"dst_port":2},
//!   "packets":P,"first_ns":F,"last_ns":L,"hops":H,"path":[IDs of the tracked hops],
//!   "e2e_latency":{"last":..,"sum":..,"count":..},
//!   "hop":[{"node_id":..,"hop_latency":{"last","sum","count"},"queue":{..},"tx_util":{..}},..]}`
//!
//! Sums and counts (not averages) travel, so the records of one flow that
//! two workers (or two exports) saw merge exactly. A line is written into
//! a reused buffer: no allocation per record.

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

use dataplane::int::analytics::cache::{Agg, METRIC_NAMES};
use dataplane::int::analytics::flow_ring::{FlowConsumer, FlowRecord};

use crate::collector_tx::{CollectorPlan, CollectorTx, PortOut};
use crate::int::analytics::api::{FlowCollectorView, FlowExportView, FlowRingView};

struct Collector {
    tx: CollectorTx,
    seq: u64,
    datagrams: u64,
    records: u64,
    send_errors: u64,
    /// The datagram being filled.
    buf: Vec<u8>,
}

pub struct FlowExporter {
    node_id: u32,
    max_packet: usize,
    rings: Vec<FlowConsumer>,
    received: Vec<u64>,
    collectors: Vec<Collector>,
    line: Vec<u8>,
    pub records: u64,
}

fn agg(out: &mut Vec<u8>, name: &str, a: &Agg) {
    let _ = write!(out, "\"{name}\":{{\"last\":{},\"sum\":{},\"count\":{}}}", a.last, a.sum, a.count);
}

/// One record's line (with newline) into `out`.
pub fn encode(out: &mut Vec<u8>, node: u32, seq: u64, worker: usize, r: &FlowRecord) {
    let h = &r.head;
    let k = &h.key;
    let reason = h.reason().map_or("unknown", |r| r.name());
    let _ = write!(
        out,
        "{{\"type\":\"int_flow\",\"version\":1,\"node\":{node},\"seq\":{seq},\"worker\":{worker},\"reason\":\"{reason}\",\
         \"flow\":{{\"ip_version\":{},",
        k.ip_version()
    );
    if k.ip_version() == 4 {
        let _ =
            write!(out, "\"src\":\"{}\",\"dst\":\"{}\"", Ipv4Addr::from(k.src as u32), Ipv4Addr::from(k.dst as u32));
    } else {
        let _ = write!(out, "\"src\":\"{}\",\"dst\":\"{}\"", Ipv6Addr::from(k.src), Ipv6Addr::from(k.dst));
    }
    let _ = write!(
        out,
        ",\"proto\":{},\"src_port\":{},\"dst_port\":{}}},\"packets\":{},\"first_ns\":{},\"last_ns\":{},\"hops\":{},\"path\":[",
        k.proto(),
        k.src_port(),
        k.dst_port(),
        h.packets,
        h.first_ns,
        h.last_ns,
        h.hops
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

impl FlowExporter {
    pub fn new(
        node_id: u32,
        max_packet: usize,
        rings: Vec<FlowConsumer>,
        collectors: &[CollectorPlan],
        ports: &dyn PortOut,
    ) -> Result<FlowExporter, String> {
        let mut cs = Vec::new();
        for (i, c) in collectors.iter().enumerate() {
            let tx = CollectorTx::open(c, ports, true).map_err(|e| format!("int.collector[{i}]: {e}"))?;
            cs.push(Collector { tx, seq: 0, datagrams: 0, records: 0, send_errors: 0, buf: Vec::with_capacity(65536) });
        }
        let n = rings.len();
        Ok(FlowExporter {
            node_id,
            max_packet,
            rings,
            received: vec![0; n],
            collectors: cs,
            line: Vec::with_capacity(4096),
            records: 0,
        })
    }

    /// Drains up to `budget` records and sends them (nothing is held back
    /// between calls). Returns how many were taken.
    pub fn poll(&mut self, budget: usize, out: &mut dyn PortOut) -> usize {
        let mut taken = 0;
        let mut rec = FlowRecord::empty();
        for (w, ring) in self.rings.iter_mut().enumerate() {
            while taken < budget && ring.pop_into(&mut rec) {
                self.received[w] += 1;
                taken += 1;
                for c in &mut self.collectors {
                    self.line.clear();
                    encode(&mut self.line, self.node_id, c.seq, w, &rec);
                    c.seq += 1;
                    c.records += 1;
                    if !c.buf.is_empty() && c.buf.len() + self.line.len() > self.max_packet {
                        send(c, out);
                    }
                    c.buf.extend_from_slice(&self.line);
                }
            }
        }
        for c in &mut self.collectors {
            if !c.buf.is_empty() {
                send(c, out);
            }
        }
        self.records += taken as u64;
        taken
    }

    /// `ring_full`: per worker, records its ring refused.
    pub fn view(&self, ring_full: &[u64]) -> FlowExportView {
        FlowExportView {
            records: self.records,
            rings: self
                .rings
                .iter()
                .enumerate()
                .map(|(i, r)| FlowRingView {
                    worker: i,
                    capacity: r.capacity(),
                    pending: r.len(),
                    received: self.received[i],
                    ring_full: ring_full.get(i).copied().unwrap_or(0),
                })
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

/// Sends a collector's datagram; a failed one is counted (its records are
/// gaps in `seq` at the collector).
fn send(c: &mut Collector, out: &mut dyn PortOut) {
    match c.tx.send(&c.buf, out) {
        Ok(_) => c.datagrams += 1,
        Err(_) => c.send_errors += 1,
    }
    c.buf.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector_tx::NoPorts;
    use dataplane::int::analytics::cache::{HopAgg, Reason};
    use dataplane::int::analytics::flow_ring::{flow_ring, FlowHead};
    use dataplane::parse::FlowKey;
    use std::net::UdpSocket;
    use std::time::Duration;

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
        let mut ex = FlowExporter::new(3, 1000, vec![c], &[plan], &NoPorts).unwrap();
        for i in 0..20 {
            assert!(p.push(head(i, 2), &hops()));
        }
        assert_eq!(ex.poll(1000, &mut NoPorts), 20);
        let mut seqs = Vec::new();
        let mut buf = [0u8; 2000];
        while seqs.len() < 20 {
            let n = rx.recv(&mut buf).unwrap();
            assert!(n <= 1000, "a datagram stays within report_max_packet");
            for line in std::str::from_utf8(&buf[..n]).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                seqs.push(v["seq"].as_u64().unwrap());
            }
        }
        assert_eq!(seqs, (0..20).collect::<Vec<u64>>());
        let view = ex.view(&[0]);
        assert_eq!((view.records, view.rings[0].received, view.collectors[0].records), (20, 20, 20));
        assert!(view.collectors[0].datagrams > 1);
    }
}
