//! What `intcollector` does with a Telemetry Report v2.0 packet: decode the
//! group header, each individual INT report, the sink's own metadata and
//! the INT-MD stack inside the (truncated) inner packet; count sequence gaps
//! per (node, hw_id); keep running statistics per hop node.
//!
//! The inner packet is decoded leniently: it is truncated, so its IP
//! lengths run past the bytes present.

pub mod ampm;
pub mod flows;
pub mod gpint;
pub mod kafka;
pub mod label;
pub mod plot;
pub mod recv;
pub mod redis;
pub mod web;

use std::collections::BTreeMap;

use dataplane::int::Presence;
use dataplane::wire::int_md::{hop_words, INT_HDR_LEN};
use dataplane::wire::telemetry_report::{self as tr, FLAG_D, FLAG_F, FLAG_I, FLAG_Q};
use serde_json::{json, Value};

/// One hop's metadata, fields present as the bitmap says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HopValues {
    pub node_id: Option<u32>,
    pub ingress_port: Option<u16>,
    pub egress_port: Option<u16>,
    pub hop_latency_ns: Option<u32>,
    pub queue_id: Option<u8>,
    pub queue_occupancy: Option<u32>,
    pub ingress_ts_ns: Option<u64>,
    pub egress_ts_ns: Option<u64>,
    pub l2_ingress: Option<u32>,
    pub l2_egress: Option<u32>,
    pub tx_util: Option<u32>,
    pub buffer_id: Option<u8>,
    pub buffer_occupancy: Option<u32>,
    pub drop_reason: Option<u8>,
}

/// Reads the metadata `bitmap` selects from `b` (INT bit positions; bit 15
/// read as the report's queue ID + drop reason when `report_bit15`).
pub fn decode_hop(bitmap: u16, b: &[u8], report_bit15: bool) -> Option<HopValues> {
    let mut h = HopValues::default();
    let mut o = 0;
    let w32 = |o: usize| b.get(o..o + 4).map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]));
    let w64 = |o: usize| b.get(o..o + 8).map(|x| u64::from_be_bytes(x.try_into().expect("8 bytes")));
    for bit in 0..16 {
        if bitmap & (0x8000 >> bit) == 0 {
            continue;
        }
        match bit {
            0 => h.node_id = Some(w32(o)?),
            1 => {
                let v = w32(o)?;
                (h.ingress_port, h.egress_port) = (Some((v >> 16) as u16), Some(v as u16));
            }
            2 => h.hop_latency_ns = Some(w32(o)?),
            3 => {
                let v = w32(o)?;
                (h.queue_id, h.queue_occupancy) = (Some((v >> 24) as u8), Some(v & 0xff_ffff));
            }
            4 => h.ingress_ts_ns = Some(w64(o)?),
            5 => h.egress_ts_ns = Some(w64(o)?),
            6 => (h.l2_ingress, h.l2_egress) = (Some(w32(o)?), Some(w32(o + 4)?)),
            7 => h.tx_util = Some(w32(o)?),
            8 => {
                let v = w32(o)?;
                (h.buffer_id, h.buffer_occupancy) = (Some((v >> 24) as u8), Some(v & 0xff_ffff));
            }
            15 if report_bit15 => {
                let v = w32(o)?;
                (h.queue_id, h.drop_reason) = (Some((v >> 24) as u8), Some((v >> 16) as u8));
            }
            _ => {
                w32(o)?;
            }
        }
        o += if (4..=6).contains(&bit) { 8 } else { 4 };
    }
    Some(h)
}

/// Writes `s` as a JSON string.
fn write_str(out: &mut String, s: &str) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl HopValues {
    /// `json()`'s text (keys in the same, sorted, order) written straight
    /// into `out`; with `node_id` set to `node` when given.
    pub fn write_json(&self, out: &mut String, node: Option<u32>) {
        use std::fmt::Write;
        out.push('{');
        let mut first = true;
        let mut put = |out: &mut String, k: &str, v: Option<u64>| {
            if let Some(v) = v {
                if !first {
                    out.push(',');
                }
                first = false;
                let _ = write!(out, "\"{k}\":{v}");
            }
        };
        let n = |x: Option<u8>| x.map(u64::from);
        put(out, "buffer_id", n(self.buffer_id));
        put(out, "buffer_occupancy", self.buffer_occupancy.map(u64::from));
        put(out, "drop_reason", n(self.drop_reason));
        put(out, "egress_port", self.egress_port.map(u64::from));
        put(out, "egress_ts_ns", self.egress_ts_ns);
        put(out, "hop_latency_ns", self.hop_latency_ns.map(u64::from));
        put(out, "ingress_port", self.ingress_port.map(u64::from));
        put(out, "ingress_ts_ns", self.ingress_ts_ns);
        put(out, "l2_egress", self.l2_egress.map(u64::from));
        put(out, "l2_ingress", self.l2_ingress.map(u64::from));
        put(out, "node_id", node.or(self.node_id).map(u64::from));
        put(out, "queue_id", n(self.queue_id));
        put(out, "queue_occupancy", self.queue_occupancy.map(u64::from));
        put(out, "tx_util", self.tx_util.map(u64::from));
        out.push('}');
    }
}

/// The flow of the inner packet (as it was before its INT source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InnerFlow {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

/// What the inner packet's INT block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub flow: InnerFlow,
    pub npt: u8,
    pub flags_e: bool,
    pub flags_m: bool,
    pub rhc: u8,
    pub bitmap: u16,
    pub domain_id: u16,
    /// DS Flags (INT-label: bit A, a specific flow).
    pub ds_flags: u16,
    /// Newest first, as on the wire.
    pub hops: Vec<HopValues>,
    /// The inner IPv4 header's identification (None for IPv6): ties a
    /// report to a packet of a capture or a trace.
    pub ip_id: Option<u16>,
}

/// Finds and decodes the INT block of a (truncated) Ethernet frame, located
/// by the domain's presence method.
pub fn decode_inner(f: &[u8], presence: Presence) -> Result<Stack, String> {
    let rd16 = |o: usize| f.get(o..o + 2).map(|x| u16::from_be_bytes([x[0], x[1]])).ok_or("inner packet cut short");
    let mut et = rd16(12)?;
    let mut l3 = 14;
    while et == 0x8100 || et == 0x88a8 {
        et = rd16(l3 + 2)?;
        l3 += 4;
    }
    let (src, dst, proto, l4, dscp, ip_id) = match et {
        0x0800 => {
            let h = f.get(l3..l3 + 20).ok_or("IPv4 header cut short")?;
            let ihl = (h[0] & 0xf) as usize * 4;
            let a = |o: usize| std::net::IpAddr::from([h[o], h[o + 1], h[o + 2], h[o + 3]]);
            (a(12), a(16), h[9], l3 + ihl, h[1] >> 2, Some(u16::from_be_bytes([h[4], h[5]])))
        }
        0x86dd => {
            let h = f.get(l3..l3 + 40).ok_or("IPv6 header cut short")?;
            let a = |o: usize| std::net::IpAddr::from(<[u8; 16]>::try_from(&h[o..o + 16]).expect("16"));
            (a(8), a(24), h[6], l3 + 40, ((h[0] & 0x0f) << 2) | (h[1] >> 6), None)
        }
        e => return Err(format!("inner ethertype {e:#06x} is not IP")),
    };
    let blk = match presence {
        Presence::UdpPort(port) => {
            if proto != 17 || rd16(l4 + 2)? != port {
                return Err(format!("inner packet is not UDP to the INT port {port}"));
            }
            l4 + 8
        }
        Presence::Dscp { value, mask } => {
            if dscp & mask != value {
                return Err(format!("inner packet's DSCP {dscp:#04x} does not mark INT ({value:#04x}/{mask:#04x})"));
            }
            match proto {
                17 => l4 + 8,
                6 => l4 + (*f.get(l4 + 12).ok_or("TCP header cut short")? >> 4) as usize * 4,
                p => return Err(format!("inner protocol {p} cannot carry INT by DSCP")),
            }
        }
    };
    let b = f.get(blk..blk + INT_HDR_LEN).ok_or("INT header cut short")?;
    if b[0] >> 4 != 1 || b[4] >> 4 != 2 {
        return Err("not INT-MD version 2".into());
    }
    let npt = (b[0] >> 2) & 3;
    let total = 4 + b[1] as usize * 4;
    let hop_ml = (b[6] & 0x1f) as usize;
    let bitmap = u16::from_be_bytes([b[8], b[9]]);
    if hop_ml == 0 || hop_ml != hop_words(bitmap) {
        return Err(format!("HopML {hop_ml} does not match bitmap {bitmap:#06x}"));
    }
    let stack = f.get(blk + INT_HDR_LEN..blk + total).ok_or("INT stack cut short (report truncated?)")?;
    if stack.len() % (hop_ml * 4) != 0 {
        return Err("INT stack is not a whole number of hops".into());
    }
    let hops = stack.chunks(hop_ml * 4).map(|h| decode_hop(bitmap, h, false).expect("whole hop")).collect();
    let saved = u16::from_be_bytes([b[2], b[3]]);
    let mut flow = InnerFlow { src, dst, proto, src_port: rd16(l4)?, dst_port: saved };
    if npt == 0 {
        flow.dst_port = rd16(l4 + 2)?;
    } else if npt == 2 {
        flow.proto = saved as u8;
        let o = blk + total;
        (flow.src_port, flow.dst_port) = match (rd16(o), rd16(o + 2)) {
            (Ok(s), Ok(d)) if matches!(flow.proto, 6 | 17) => (s, d),
            _ => (0, 0),
        };
    }
    Ok(Stack {
        flow,
        npt,
        flags_e: b[4] & 0x04 != 0,
        flags_m: b[4] & 0x02 != 0,
        rhc: b[7],
        bitmap,
        domain_id: u16::from_be_bytes([b[10], b[11]]),
        ds_flags: u16::from_be_bytes([b[14], b[15]]),
        hops,
        ip_id,
    })
}

/// One decoded individual report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub node_id: u32,
    pub hw_id: u8,
    pub seq: u32,
    pub flags: u8,
    pub rep_md_bits: u16,
    pub domain_id: u16,
    /// The reporting node's own metadata.
    pub sink: HopValues,
    pub stack: Result<Stack, String>,
    /// Where the inner packet lies in the report packet (word-padded).
    pub inner: std::ops::Range<usize>,
    /// An INT-label report: its stack is all labels, the reporter's own
    /// label first; RepMdBits 0, so the reporter adds no hop.
    pub label: bool,
}

impl Report {
    /// The report as JSON (keys sorted), for the text lines and the tests;
    /// the exports and `--json` take `write_json`'s text.
    pub fn json(&self) -> Value {
        let mut out = String::new();
        self.write_json(&mut out);
        serde_json::from_str(&out).expect("write_json writes JSON")
    }

    /// The report's JSON written straight into `out` (no `Value` tree: what
    /// the exports to Redis and Kafka and `--json` print cost per report).
    /// Hops in path order: source first; the reporting node last unless
    /// this is an intermediate report (it then pushes its own hop on).
    pub fn write_json(&self, out: &mut String) {
        use std::fmt::Write;
        let flags: String = [(FLAG_D, 'D'), (FLAG_Q, 'Q'), (FLAG_F, 'F'), (FLAG_I, 'I')]
            .iter()
            .filter(|(f, _)| self.flags & f != 0)
            .map(|(_, c)| *c)
            .collect();
        out.push('{');
        match &self.stack {
            Ok(s) => {
                let _ = write!(
                    out,
                    "\"bitmap\":\"{:#06x}\",\"domain_id\":{},\"e\":{},\"flags\":\"{flags}\",\"flow\":{{\"dst\":",
                    s.bitmap, self.domain_id, s.flags_e
                );
                // (An address's text needs no escaping.)
                let _ = write!(out, "\"{}\"", s.flow.dst);
                let _ = write!(out, ",\"dst_port\":{},\"proto\":{},\"src\":", s.flow.dst_port, s.flow.proto);
                let _ = write!(out, "\"{}\"", s.flow.src);
                let _ = write!(out, ",\"src_port\":{}}},\"hops\":[", s.flow.src_port);
                for (i, h) in s.hops.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    h.write_json(out, None);
                }
                if self.flags & FLAG_I == 0 && !self.label {
                    if !s.hops.is_empty() {
                        out.push(',');
                    }
                    self.sink.write_json(out, Some(self.node_id));
                }
                let _ = write!(out, "],\"hw_id\":{}", self.hw_id);
                if let Some(id) = s.ip_id {
                    let _ = write!(out, ",\"ip_id\":{id}");
                }
                let _ =
                    write!(out, ",\"m\":{},\"node_id\":{},\"npt\":{},\"reporter\":", s.flags_m, self.node_id, s.npt);
                self.sink.write_json(out, Some(self.node_id));
                if self.label {
                    let _ = write!(out, ",\"label\":true,\"specific\":{}", s.ds_flags & 0x8000 != 0);
                }
                let _ = write!(out, ",\"rhc\":{},\"seq\":{}}}", s.rhc, self.seq);
            }
            Err(e) => {
                let _ = write!(out, "\"domain_id\":{},\"error\":", self.domain_id);
                write_str(out, e);
                let _ = write!(
                    out,
                    ",\"flags\":\"{flags}\",\"hw_id\":{},\"node_id\":{},\"reporter\":",
                    self.hw_id, self.node_id
                );
                self.sink.write_json(out, Some(self.node_id));
                let _ = write!(out, ",\"seq\":{}}}", self.seq);
            }
        }
    }
}

/// Decodes a report packet (UDP payload).
pub fn decode_packet(p: &[u8], presence: Presence) -> Result<Vec<Report>, String> {
    let g = tr::parse_group(p).map_err(|r| format!("group header: {}", r.name()))?;
    let mut out = Vec::new();
    let mut o = tr::GROUP_HDR_LEN;
    while o + tr::INDIV_HDR_LEN <= p.len() {
        let ind = tr::Individual::parse(&p[o..]).map_err(|r| r.name().to_string())?;
        let end = if ind.len_words == 0xff { p.len() } else { o + 4 + ind.len_words as usize * 4 };
        let body = p.get(o + 4..end).ok_or_else(|| format!("report at byte {o} runs past the packet"))?;
        if ind.rep_type != tr::REP_TYPE_INT {
            o = end;
            continue;
        }
        if body.len() < tr::INT_MAIN_LEN {
            return Err(format!("report at byte {o} too short"));
        }
        let bits = u16::from_be_bytes([body[0], body[1]]);
        let domain_id = u16::from_be_bytes([body[2], body[3]]);
        let md_end = tr::INT_MAIN_LEN + ind.md_len_words as usize * 4;
        let md = body.get(tr::INT_MAIN_LEN..md_end).ok_or("report metadata cut short")?;
        let sink = decode_hop(bits, md, true).ok_or("report metadata shorter than RepMdBits says")?;
        let stack = if ind.in_type == tr::IN_TYPE_ETHERNET {
            decode_inner(&body[md_end..], presence)
        } else {
            Err(format!("inner type {} not decoded", ind.in_type))
        };
        out.push(Report {
            node_id: g.node_id,
            hw_id: g.hw_id,
            seq: g.seq,
            flags: ind.flags,
            rep_md_bits: bits,
            domain_id,
            sink,
            stack,
            inner: o + 4 + md_end..end,
            label: false,
        });
        o = end;
    }
    Ok(out)
}

/// Running statistics of one hop node.
#[derive(Debug, Clone, Default)]
pub struct HopStats {
    pub samples: u64,
    pub latency_sum: u64,
    pub latency_min: u64,
    pub latency_max: u64,
    pub queue_max: u32,
}

/// Sequence tracking per (node, hw_id) and per-hop statistics.
#[derive(Debug, Default)]
pub struct Tracker {
    last_seq: BTreeMap<(u32, u8), u32>,
    pub gaps: BTreeMap<(u32, u8), u64>,
    pub packets: u64,
    pub reports: u64,
    pub bad_packets: u64,
    pub hops: BTreeMap<u32, HopStats>,
    /// Sequences and hop samples of nodes past [`MAX_TRACKED`], not kept.
    pub untracked: u64,
}

/// (node, hw_id) sequences and hop nodes tracked, at most each: reports
/// from endless new node IDs cannot grow the collector without bound.
pub const MAX_TRACKED: usize = 1 << 16;

impl Tracker {
    /// Accounts a report packet's sequence number (22 bits, wrapping).
    pub fn packet(&mut self, node: u32, hw_id: u8, seq: u32) {
        self.packets += 1;
        if self.gaps.len() >= MAX_TRACKED && !self.gaps.contains_key(&(node, hw_id)) {
            self.untracked += 1;
            return;
        }
        let gaps = self.gaps.entry((node, hw_id)).or_default();
        if let Some(last) = self.last_seq.insert((node, hw_id), seq) {
            let missing = seq.wrapping_sub(last).wrapping_sub(1) & 0x3f_ffff;
            // A huge "gap" is a late or repeated packet, not 4M lost ones.
            if missing < 0x20_0000 {
                *gaps += missing as u64;
            }
        }
    }

    pub fn report(&mut self, r: &Report) {
        self.reports += 1;
        let Ok(s) = &r.stack else { return };
        let mut add = |node: Option<u32>, h: &HopValues| {
            let (Some(node), Some(lat)) = (node, h.hop_latency_ns) else { return };
            if self.hops.len() >= MAX_TRACKED && !self.hops.contains_key(&node) {
                self.untracked += 1;
                return;
            }
            let st = self.hops.entry(node).or_default();
            if st.samples == 0 || (lat as u64) < st.latency_min {
                st.latency_min = lat as u64;
            }
            st.samples += 1;
            st.latency_sum += lat as u64;
            st.latency_max = st.latency_max.max(lat as u64);
            st.queue_max = st.queue_max.max(h.queue_occupancy.unwrap_or(0));
        };
        for h in &s.hops {
            add(h.node_id, h);
        }
        if r.flags & FLAG_I == 0 {
            add(Some(r.node_id), &r.sink);
        }
    }

    pub fn summary(&self) -> Value {
        let gaps: Vec<Value> = self
            .gaps
            .iter()
            .map(|((n, h), g)| json!({"node_id": n, "hw_id": h, "gaps": g, "last_seq": self.last_seq.get(&(*n, *h))}))
            .collect();
        let hops: Vec<Value> = self
            .hops
            .iter()
            .map(|(n, s)| {
                json!({"node_id": n, "samples": s.samples, "latency_min_ns": s.latency_min,
                       "latency_mean_ns": s.latency_sum / s.samples.max(1), "latency_max_ns": s.latency_max,
                       "queue_max": s.queue_max})
            })
            .collect();
        json!({"summary": {"packets": self.packets, "reports": self.reports, "bad_packets": self.bad_packets,
                           "untracked": self.untracked, "sequence": gaps, "hops": hops}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use control::int::export::{encode, ReportParts};
    use dataplane::int::stage::{ReportRecord, REPORT_MAX};
    use dataplane::int::{self, IntParams};
    use dataplane::parse::parse;
    use dataplane::pktbuf::{PacketBuf, VecBuf};
    use dataplane::wire::int_md::HopMetadata;
    use dataplane::wire::telemetry_report::emit_group;

    /// A report as s3 would export it for a packet sourced by node 1 and
    /// transited by node 2 in a domain with `presence`.
    fn exported(presence: Presence) -> Vec<u8> {
        let spec = control::traffic::TrafficSpec {
            frame_len: 80,
            ..control::traffic::TrafficSpec::udp("10.0.1.2".parse().unwrap(), "10.0.2.2".parse().unwrap(), 1)
        };
        let orig = control::traffic::frame(&spec, 0); // UDP 1024 -> 5001
        let mut b = VecBuf::new(&orig, 256);
        let m = parse(&orig, 0).unwrap();
        let p = IntParams { presence, bitmap: 0xf000, max_hops: 8, domain_id: 3, source_pushes: true, ds_flags: 0 };
        let md = |n: u32| HopMetadata {
            node_id: n,
            ingress_port: 1,
            egress_port: 2,
            hop_latency_ns: 100 * n,
            ..Default::default()
        };
        int::source(&mut b, &m, &p, &md(1), 1500).unwrap();
        let m2 = parse(b.bytes(), 0).unwrap();
        int::transit(&mut b, &m2, presence, &md(2), 1500).unwrap();
        let mut rec =
            ReportRecord { flags: FLAG_F, drop_reason: 0, domain_id: 3, md: md(3), len: 0, data: [0; REPORT_MAX] };
        let n = b.bytes().len();
        rec.data[..n].copy_from_slice(b.bytes());
        rec.len = n as u16;
        let mut pkt = vec![0u8; 512];
        emit_group(&mut pkt, 1, 77, 3);
        let len = encode(&ReportParts::of(&rec), 0x6000, &mut pkt[8..]);
        pkt.truncate(8 + len);
        pkt
    }

    #[test]
    fn decodes_dscp_mode_and_refuses_the_wrong_presence() {
        let dscp = Presence::Dscp { value: 0x17, mask: 0x3f };
        let pkt = exported(dscp);
        let r = &decode_packet(&pkt, dscp).unwrap()[0];
        let s = r.stack.as_ref().unwrap();
        assert_eq!((s.npt, s.flow.proto, s.flow.src_port, s.flow.dst_port, s.hops.len()), (0, 17, 1024, 5001, 2));
        let r = &decode_packet(&pkt, Presence::UdpPort(17768)).unwrap()[0];
        assert!(r.stack.as_ref().unwrap_err().contains("not UDP to the INT port"), "{:?}", r.stack);
    }

    #[test]
    fn decodes_what_the_switch_exports() {
        let pkt = exported(Presence::UdpPort(17768));
        let reports = decode_packet(&pkt, Presence::UdpPort(17768)).unwrap();
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!((r.node_id, r.hw_id, r.seq, r.domain_id), (3, 1, 77, 3));
        let s = r.stack.as_ref().unwrap();
        assert_eq!((s.flow.dst_port, s.flow.src_port, s.hops.len(), s.rhc), (5001, 1024, 2, 6));
        let j = r.json();
        let hops = j["hops"].as_array().unwrap();
        assert_eq!(hops.len(), 3);
        assert_eq!((hops[0]["node_id"].as_u64(), hops[2]["node_id"].as_u64()), (Some(1), Some(3)));
        assert_eq!(hops[2]["hop_latency_ns"].as_u64(), Some(300));
        let mut t = Tracker::default();
        for seq in [5, 6, 9, 10] {
            t.packet(3, 1, seq);
        }
        t.packet(3, 2, 0x3f_ffff);
        t.packet(3, 2, 0);
        t.report(r);
        assert_eq!(t.gaps[&(3, 1)], 2);
        assert_eq!(t.gaps[&(3, 2)], 0, "wraps at 22 bits");
        assert_eq!(t.hops[&2].latency_max, 200);
    }

    #[test]
    fn mutated_reports_are_refused_or_decoded_never_a_panic() {
        // Reports come from the network: every mutant (bytes rewritten,
        // bits flipped, cut short, lengthened) decodes, or is refused with
        // a reason, and what decodes feeds the statistics.
        let mut rng = dataplane::rand::XorShift::new(0x5eed);
        let mut rnd = move |n: usize| rng.below(n);
        let mut t = Tracker::default();
        let (mut decoded, mut refused) = (0, 0);
        for presence in [Presence::UdpPort(17768), Presence::Dscp { value: 0x17, mask: 0x3f }] {
            let good = exported(presence);
            for _ in 0..50_000 {
                let mut p = good.clone();
                for _ in 0..1 + rnd(4) {
                    let at = rnd(p.len());
                    match rnd(5) {
                        0 => p[at] = rnd(256) as u8,
                        1 => p[at] ^= 1 << rnd(8),
                        2 => p[at] = [0, 1, 0x0f, 0x10, 0x7f, 0x80, 0xff][rnd(7)],
                        3 => p.truncate(at),
                        _ => p.push(rnd(256) as u8),
                    }
                    if p.is_empty() {
                        break;
                    }
                }
                match decode_packet(&p, presence) {
                    Ok(reports) => {
                        decoded += 1;
                        for r in &reports {
                            t.packet(r.node_id, r.hw_id, r.seq);
                            t.report(r);
                            let _ = r.json();
                        }
                    }
                    Err(e) => {
                        assert!(!e.is_empty());
                        refused += 1;
                    }
                }
            }
        }
        let _ = t.summary();
        assert!(decoded > 10_000 && refused > 10_000, "decoded {decoded}, refused {refused}");
    }

    #[test]
    fn tracked_nodes_are_bounded() {
        let mut t = Tracker::default();
        for node in 0..MAX_TRACKED as u32 + 5 {
            t.packet(node, 0, 1);
        }
        t.packet(0, 0, 3);
        assert_eq!((t.gaps.len(), t.untracked, t.gaps[&(0, 0)]), (MAX_TRACKED, 5, 1));
        assert_eq!(t.summary()["summary"]["untracked"], 5);
    }

    #[test]
    fn the_written_json_is_the_value_trees_text() {
        let cases = [
            (exported(Presence::UdpPort(17768)), Presence::UdpPort(17768)),
            // The stack refused: the error case.
            (exported(Presence::UdpPort(17768)), Presence::Dscp { value: 0x17, mask: 0x3f }),
            (exported(Presence::Dscp { value: 0x17, mask: 0x3f }), Presence::Dscp { value: 0x17, mask: 0x3f }),
        ];
        let mut out = String::new();
        for (pkt, presence) in cases {
            for mut r in decode_packet(&pkt, presence).unwrap() {
                for flags in [FLAG_F, FLAG_I | FLAG_D, FLAG_Q] {
                    r.flags = flags;
                    r.sink.drop_reason = (flags & FLAG_D != 0).then_some(7);
                    out.clear();
                    r.write_json(&mut out);
                    assert_eq!(out, r.json().to_string());
                    let mut k = String::new();
                    kafka::report_key(&r, &mut k);
                    assert_eq!(k, kafka::key_of(&r.json()));
                }
            }
        }
        let mut e = String::new();
        write_str(&mut e, "a\"b\\c\n\u{1}");
        assert_eq!(e, serde_json::to_string("a\"b\\c\n\u{1}").unwrap());
    }
    /// The sink analytics' hop decoder (`HopLayout`: the node ID, the three
    /// metrics, the two timestamps and the hop's length by the bitmap)
    /// reads what `decode_hop` reads from the same bytes, for every
    /// combination of the nine defined instruction bits; a value of all
    /// ones (the queue's 24 bits) is absent to the analytics.
    #[test]
    fn the_analytics_hop_decoder_reads_what_the_collector_decodes() {
        use dataplane::int::analytics::cache::{HOP_LATENCY, QUEUE, TX_UTIL};
        use dataplane::int::analytics::HopLayout;
        for bits in 0u16..512 {
            let bitmap = bits << 7;
            let len = hop_words(bitmap) * 4;
            let l = HopLayout::of(bitmap);
            assert_eq!(l.hop_len, len, "{bitmap:#06x}");
            // Distinct bytes, then every field of all ones in turn.
            for ones in [None, Some(0), Some(1), Some(2)] {
                let mut b: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(37).wrapping_add(bits as u8)).collect();
                let at = |m: usize| l.metric[m].map(|o| o as usize);
                if let Some(o) = ones.and_then(at) {
                    b[o..o + 4].fill(0xff);
                }
                let d = decode_hop(bitmap, &b, false).expect("a whole hop");
                let node = l.node_id.map(|o| u32::from_be_bytes(b[o as usize..o as usize + 4].try_into().unwrap()));
                assert_eq!(node, d.node_id, "{bitmap:#06x}");
                // (Present, all ones: absent; not in the bitmap: None.)
                let want = |v: Option<u32>, all: u32| v.map(|v| (v != all).then_some(v));
                assert_eq!(l.value(&b, HOP_LATENCY), want(d.hop_latency_ns, u32::MAX), "{bitmap:#06x} {ones:?}");
                assert_eq!(l.value(&b, QUEUE), want(d.queue_occupancy, 0xff_ffff), "{bitmap:#06x} {ones:?}");
                assert_eq!(l.value(&b, TX_UTIL), want(d.tx_util, u32::MAX), "{bitmap:#06x} {ones:?}");
                assert_eq!(l.timestamps(&b), d.ingress_ts_ns.zip(d.egress_ts_ns), "{bitmap:#06x}");
            }
        }
    }
}
