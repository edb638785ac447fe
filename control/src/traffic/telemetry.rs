//! INT traces whose telemetry follows a value model, each written with its
//! ground truth (`gen-traffic --int-values`; issue 34 §9): what a sink with
//! analytics must find in them, per flow, per node and per burst.
//!
//! The trace is defined in README ("Telemetry traces") closely enough that
//! `tests/telemetry_ref.py`, written from that text, makes the same bytes:
//! every draw comes from splitmix64 streams and IEEE double arithmetic that
//! both languages evaluate alike, and the frames are built here byte by
//! byte rather than by the switch's own INT source.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;

use dataplane::int::analytics::histogram::{Bins, HistSpec};
use dataplane::pcap::PcapWriter;
use dataplane::rand::SplitMix;
use dataplane::wire::checksum;
use serde_json::{json, Value};

/// How each hop's values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    /// Independent truncated exponentials per hop and packet.
    Exp,
    /// `Exp`, plus an ON/OFF microburst queue at the bottleneck hop.
    Burst(Burst),
}

/// A microburst source (lognormal ON and OFF periods, Poisson arrivals at
/// `rho` of the port rate) in front of a 10 Gb/s port with a 2 MB buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Burst {
    pub name: &'static str,
    /// Median and 90th percentile of ON and OFF periods (µs).
    pub on_us: (f64, f64),
    pub off_us: (f64, f64),
    /// Offered load while ON and while OFF, in units of the port rate.
    pub rho: (f64, f64),
}

/// The three traffic classes (our parameters for the Facebook data
/// centre's web, cache and hadoop racks).
pub const BURSTS: [Burst; 3] = [
    Burst { name: "web", on_us: (20.0, 60.0), off_us: (500.0, 2000.0), rho: (1.5, 0.2) },
    Burst { name: "cache", on_us: (40.0, 200.0), off_us: (300.0, 1000.0), rho: (1.8, 0.4) },
    Burst { name: "hadoop", on_us: (50.0, 500.0), off_us: (200.0, 1000.0), rho: (2.0, 0.5) },
];

impl Model {
    /// `exp`, `web`, `cache` or `hadoop`.
    pub fn parse(s: &str) -> Result<Model, String> {
        if s == "exp" {
            return Ok(Model::Exp);
        }
        BURSTS
            .iter()
            .find(|b| b.name == s)
            .map(|b| Model::Burst(*b))
            .ok_or_else(|| format!("'{s}': the value models are exp, web, cache and hadoop"))
    }

    pub fn name(&self) -> &'static str {
        match self {
            Model::Exp => "exp",
            Model::Burst(b) => b.name,
        }
    }
}

/// What the trace holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryTrace {
    pub model: Model,
    pub flows: usize,
    /// Packets asked for: split evenly, or by Zipf weight (each flow at
    /// least one); the burst models lose some at the bottleneck's buffer.
    pub packets: usize,
    pub zipf: Option<f64>,
    pub hops: u8,
    pub paths: usize,
    pub bitmap: u16,
    pub rhc: u8,
    pub int_port: u16,
    pub seed: u64,
}

/// Per-hop value ranges and scales of the truncated exponentials:
/// (max, scale) of hop latency (ns), queue (packets), TX utilisation (0.01 %).
const LATENCY: (u32, f64) = (100_000, 2_000.0);
const QUEUE: (u32, f64) = (300, 30.0);
const TX_UTIL: (u32, f64) = (10_000, 1_500.0);
/// The bottleneck port: ns per 1500-byte packet at 10 Gb/s, bytes drained
/// per ns, buffer bytes.
const SERVICE_NS: f64 = 1_200.0;
const PKT_BYTES: f64 = 1_500.0;
const DRAIN_PER_NS: f64 = 1.25;
const BUFFER: f64 = 2_000_000.0;
/// The first hop's ingress time is this plus the packet's time; each link
/// takes 5 µs.
const T0_NS: u64 = 1_700_000_000_000_000_000;
const LINK_NS: u64 = 5_000;
/// The z of the normal distribution's 90th percentile.
const Z90: f64 = 1.2815515655446004;
/// The instruction bits a trace can carry (0-8: node ID to buffer).
const KNOWN_BITS: u16 = 0xff80;

/// The trace's draws: splitmix64 (written the same way in the Python
/// reference), stream `n` of a seed starting at seed + n x 2^44.
struct Draws(SplitMix);

impl Draws {
    fn stream(seed: u64, n: u64) -> Draws {
        Draws(SplitMix(seed.wrapping_add(n << 44)))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn unit(&mut self) -> f64 {
        self.0.unit()
    }

    /// An exponential of `scale` truncated to [0, max], floored.
    fn texp(&mut self, (max, scale): (u32, f64)) -> u32 {
        let u = self.unit();
        let x = -scale * (1.0 - u * (1.0 - (-(max as f64) / scale).exp())).ln();
        (x.floor() as u32).min(max)
    }

    /// A lognormal of that median and 90th percentile (Box-Muller).
    fn lognormal(&mut self, (median, p90): (f64, f64)) -> f64 {
        let mu = median.ln();
        let sigma = (p90.ln() - mu) / Z90;
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        (mu + sigma * z).exp()
    }
}

/// A flow of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceFlow {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// 6 or 17: the original protocol.
    pub proto: u8,
    pub src_port: u16,
    /// The original destination port.
    pub dst_port: u16,
}

/// Flow `k`: flows come in pairs that differ only in the destination port;
/// one pair in ten is UDP.
pub fn trace_flow(k: usize) -> TraceFlow {
    let j = (k >> 1) as u32;
    let tcp = j % 10 != 9;
    TraceFlow {
        src: Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 64, 0, 0)) + j + 1),
        dst: Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 200, 0, 0)) + j % 4096 + 1),
        proto: if tcp { 6 } else { 17 },
        src_port: 1024 + (j % 50_000) as u16,
        dst_port: if tcp { 80 } else { 5000 } + (k & 1) as u16,
    }
}

/// The node at path-order hop `h` of path `p`: the bottleneck hop is one
/// node on every path, hop h elsewhere one of h + 1.
fn node(p: usize, h: usize, hops: usize) -> u32 {
    16 * (h as u32 + 1) + if h == hops / 2 { 0 } else { (p % (h + 1)) as u32 }
}

/// One hop's values in a packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct HopValues {
    node: u32,
    latency: u32,
    queue: u32,
    tx_util: u32,
}

/// The bottleneck's state between arrivals.
struct Bottleneck {
    b: Burst,
    r: Draws,
    t: f64,
    last: f64,
    on: bool,
    end: f64,
    period: u64,
    q: f64,
}

/// What one arrival saw at the bottleneck.
struct Arrival {
    t: f64,
    on: bool,
    period: u64,
    delay_ns: u32,
    queue: u32,
    dropped: bool,
}

impl Bottleneck {
    fn new(b: Burst, seed: u64) -> Bottleneck {
        let mut r = Draws::stream(seed, 3);
        let end = r.lognormal(b.off_us) * 1_000.0;
        Bottleneck { b, r, t: 0.0, last: 0.0, on: false, end, period: 0, q: 0.0 }
    }

    fn arrive(&mut self) -> Arrival {
        loop {
            let rho = if self.on { self.b.rho.0 } else { self.b.rho.1 };
            let gap = -(SERVICE_NS / rho) * (1.0 - self.r.unit()).ln();
            if self.t + gap < self.end {
                self.t += gap;
                break;
            }
            // Memoryless: the next gap is drawn again at the period's end.
            self.t = self.end;
            self.on = !self.on;
            self.period += 1;
            self.end = self.t + self.r.lognormal(if self.on { self.b.on_us } else { self.b.off_us }) * 1_000.0;
        }
        self.q = (self.q - (self.t - self.last) * DRAIN_PER_NS).max(0.0);
        self.last = self.t;
        let seen = Arrival {
            t: self.t,
            on: self.on,
            period: self.period,
            delay_ns: (self.q / DRAIN_PER_NS).floor() as u32,
            queue: (self.q / PKT_BYTES).floor() as u32,
            dropped: self.q + PKT_BYTES > BUFFER,
        };
        if !seen.dropped {
            self.q += PKT_BYTES;
        }
        seen
    }
}

/// A microburst as the trace's packets saw it: from the first packet of an
/// ON period to the last before the queue is empty again (or the next ON
/// period starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstTruth {
    pub first: u64,
    pub last: u64,
    /// Largest queueing delay in it, and the one of the packet before it (ns).
    pub peak_ns: u32,
    pub pre_ns: u32,
    period: u64,
}

/// Per-flow aggregates, as a sink's flow record holds them.
#[derive(Debug, Clone, Default)]
struct FlowTruth {
    packets: u64,
    first: u64,
    last: u64,
    /// Per hop: node, then (last, sum) of latency, queue, TX utilisation.
    hop: Vec<(u32, [(u32, u64); 3])>,
    e2e: (u64, u64),
}

/// The ground truth written beside the pcap.
pub struct Truth {
    pub packets: u64,
    pub dropped: u64,
    pub bursts: Vec<BurstTruth>,
    flows: Vec<FlowTruth>,
    /// (node or None for e2e, metric index) -> counts per bin.
    hist: BTreeMap<(Option<u32>, usize), Vec<u64>>,
}

impl TelemetryTrace {
    pub fn check(&self) -> Result<(), String> {
        if self.flows == 0 || self.packets < self.flows {
            return Err(format!("{} packets for {} flows: at least one packet a flow", self.packets, self.flows));
        }
        if self.flows > 1 << 23 {
            return Err(format!("{} flows: at most {}", self.flows, 1 << 23));
        }
        if self.hops == 0 || self.paths == 0 {
            return Err("at least one hop and one path".into());
        }
        if self.bitmap & !KNOWN_BITS != 0 || self.bitmap & 0x8000 == 0 {
            return Err(format!(
                "instructions {:#06x}: the node ID and any of instructions 1-8 (not reserved ones or the checksum complement)",
                self.bitmap
            ));
        }
        let words = dataplane::wire::int_md::hop_words(self.bitmap);
        if 3 + self.hops as usize * words > 255 {
            return Err(format!("{} hops of {words} words do not fit the shim's length (255 words)", self.hops));
        }
        if self.zipf.is_some_and(|a| !(a > 0.0 && a.is_finite())) {
            return Err("--zipf: a positive exponent".into());
        }
        Ok(())
    }

    /// Packets per flow.
    fn counts(&self) -> Vec<u64> {
        let n = self.flows;
        match self.zipf {
            Some(a) => {
                let w: Vec<f64> = (0..n).map(|k| ((k + 1) as f64).powf(-a)).collect();
                let total: f64 = w.iter().sum();
                w.iter().map(|w| ((self.packets as f64 * w / total).floor() as u64).max(1)).collect()
            }
            None => (0..n).map(|k| (self.packets / n + usize::from(k < self.packets % n)) as u64).collect(),
        }
    }

    /// Writes the pcap and returns the truth.
    pub fn write(&self, out: impl Write) -> std::io::Result<Truth> {
        self.check().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut w = PcapWriter::new(std::io::BufWriter::new(out), 65535)?;
        let hops = self.hops as usize;
        let counts = self.counts();
        let mut setup = Draws::stream(self.seed, 1);
        let mut values = Draws::stream(self.seed, 2);
        let mut bottleneck = match self.model {
            Model::Burst(b) => Some(Bottleneck::new(b, self.seed)),
            Model::Exp => None,
        };
        let bins = HistSpec::default_bins();
        let metric_bits = [0x2000u16, 0x1000, 0x0100];
        let mut truth = Truth {
            packets: 0,
            dropped: 0,
            bursts: Vec::new(),
            flows: vec![FlowTruth::default(); self.flows],
            hist: BTreeMap::new(),
        };
        let (mut current, mut prev_delay): (Option<BurstTruth>, u32) = (None, 0);
        let mut tried = vec![0u64; self.flows];
        let mut active: Vec<usize> = (0..self.flows).collect();
        let mut hv = vec![HopValues::default(); hops];
        let mut frame = Vec::with_capacity(2048);
        while !active.is_empty() {
            let mut still = Vec::with_capacity(active.len());
            for &k in &active {
                let train = 1 + setup.next() % 8;
                for _ in 0..train.min(counts[k] - tried[k]) {
                    let path = (k % self.paths
                        + usize::from(k % 8 == 5 && tried[k] >= counts[k] / 2 && counts[k] >= 2))
                        % self.paths;
                    tried[k] += 1;
                    let seen = bottleneck.as_mut().map(Bottleneck::arrive);
                    if seen.as_ref().is_some_and(|s| s.dropped) {
                        truth.dropped += 1;
                        continue;
                    }
                    let i = truth.packets;
                    for (h, v) in hv.iter_mut().enumerate() {
                        *v = HopValues {
                            node: node(path, h, hops),
                            latency: values.texp(LATENCY),
                            queue: values.texp(QUEUE),
                            tx_util: values.texp(TX_UTIL),
                        };
                    }
                    let ts = match &seen {
                        Some(s) => {
                            let v = &mut hv[hops / 2];
                            let b = bottleneck.as_ref().expect("seen").b;
                            v.latency = v.latency.saturating_add(s.delay_ns);
                            v.queue = s.queue;
                            v.tx_util = ((if s.on { b.rho.0 } else { b.rho.1 } * 10_000.0) as u32).min(10_000);
                            track_burst(&mut current, &mut truth.bursts, s, i, prev_delay);
                            prev_delay = s.delay_ns;
                            s.t as u64
                        }
                        None => i * 1_000,
                    };
                    build_frame(&mut frame, self, k, i, ts, &hv);
                    w.write(ts, &frame)?;
                    truth.packets += 1;
                    let f = &mut truth.flows[k];
                    if f.packets == 0 {
                        f.first = i;
                        f.hop = vec![(0, [(0, 0); 3]); hops];
                    }
                    f.packets += 1;
                    f.last = i;
                    let mut e2e = 0u64;
                    for (slot, v) in f.hop.iter_mut().zip(&hv) {
                        slot.0 = v.node;
                        for (m, x) in [v.latency, v.queue, v.tx_util].into_iter().enumerate() {
                            slot.1[m] = (x, slot.1[m].1 + x as u64);
                            if self.bitmap & metric_bits[m] != 0 {
                                let b = bins[m];
                                truth.hist.entry((Some(v.node), m)).or_insert_with(|| vec![0; b.len()])[b.index(x)] +=
                                    1;
                            }
                        }
                        e2e += v.latency as u64;
                    }
                    f.e2e = (e2e, f.e2e.1 + e2e);
                    if self.bitmap & 0x2000 != 0 {
                        let b = bins[3];
                        truth.hist.entry((None, 3)).or_insert_with(|| vec![0; b.len()])
                            [b.index(e2e.min(u32::MAX as u64) as u32)] += 1;
                    }
                }
                if tried[k] < counts[k] {
                    still.push(k);
                }
            }
            active = still;
        }
        truth.bursts.extend(current);
        w.into_inner().flush()?;
        Ok(truth)
    }
}

/// Extends, closes or opens the burst that packet `i` belongs to.
fn track_burst(current: &mut Option<BurstTruth>, done: &mut Vec<BurstTruth>, s: &Arrival, i: u64, prev_delay: u32) {
    let new_on = s.on && current.is_none_or(|c| c.period != s.period);
    if let Some(c) = current.as_mut().filter(|_| !new_on) {
        if s.on || s.delay_ns > 0 {
            c.last = i;
            c.peak_ns = c.peak_ns.max(s.delay_ns);
            return;
        }
    }
    done.extend(current.take());
    if s.on {
        *current = Some(BurstTruth { first: i, last: i, peak_ns: s.delay_ns, pre_ns: prev_delay, period: s.period });
    }
}

/// Frame `i` of flow `k` as its sink receives it: Ethernet, IPv4 (ID = the
/// index), a UDP header to the INT port (the flow's own for UDP, NPT 1; an
/// inserted one for TCP, NPT 2; checksum 0), shim, INT-MD header, the
/// hops newest first, then the original segment (UDP payload, or the TCP
/// header and payload with a valid checksum) of a 64-byte frame.
fn build_frame(f: &mut Vec<u8>, t: &TelemetryTrace, k: usize, i: u64, ts: u64, hv: &[HopValues]) {
    let fl = trace_flow(k);
    let tcp = fl.proto == 6;
    let words = dataplane::wire::int_md::hop_words(t.bitmap);
    let block = 16 + hv.len() * words * 4;
    let payload: Vec<u8> = (0..if tcp { 6 } else { 18 }).map(|j| (j + i as usize) as u8).collect();
    let udp_len = 8 + block + if tcp { 20 } else { 0 } + payload.len();
    f.clear();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let ip = f.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(20 + udp_len as u16).to_be_bytes());
    f.extend_from_slice(&(i as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&fl.src.octets());
    f.extend_from_slice(&fl.dst.octets());
    let c = !checksum::fold(checksum::sum(0, &f[ip..ip + 20]));
    f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let sport = if tcp { 0xc000 | (k as u16 & 0x3fff) } else { fl.src_port };
    for v in [sport, t.int_port, udp_len as u16, 0] {
        f.extend_from_slice(&v.to_be_bytes());
    }
    let npt: u8 = if tcp { 2 } else { 1 };
    f.extend_from_slice(&[0x10 | npt << 2, (3 + hv.len() * words) as u8]);
    f.extend_from_slice(&if tcp { 6u16 } else { fl.dst_port }.to_be_bytes());
    f.extend_from_slice(&[0x20, 0, words as u8, t.rhc]);
    f.extend_from_slice(&t.bitmap.to_be_bytes());
    f.extend_from_slice(&[0; 6]);
    let mut egress = 0u64;
    let times: Vec<(u64, u64)> = hv
        .iter()
        .enumerate()
        .map(|(h, v)| {
            let ingress = if h == 0 { T0_NS + ts } else { egress + LINK_NS };
            egress = ingress + v.latency as u64;
            (ingress, egress)
        })
        .collect();
    for (v, (ingress, egress)) in hv.iter().zip(times).rev() {
        for bit in 0..9 {
            if t.bitmap & (0x8000 >> bit) == 0 {
                continue;
            }
            match bit {
                0 => f.extend_from_slice(&v.node.to_be_bytes()),
                1 => f.extend_from_slice(&0x0001_0002u32.to_be_bytes()),
                2 => f.extend_from_slice(&v.latency.to_be_bytes()),
                3 | 8 => f.extend_from_slice(&v.queue.to_be_bytes()),
                4 => f.extend_from_slice(&ingress.to_be_bytes()),
                5 => f.extend_from_slice(&egress.to_be_bytes()),
                6 => f.extend_from_slice(&0x0000_0001_0000_0002u64.to_be_bytes()),
                _ => f.extend_from_slice(&v.tx_util.to_be_bytes()),
            }
        }
    }
    if tcp {
        let seg = f.len();
        f.extend_from_slice(&fl.src_port.to_be_bytes());
        f.extend_from_slice(&fl.dst_port.to_be_bytes());
        f.extend_from_slice(&(i as u32).to_be_bytes());
        f.extend_from_slice(&1u32.to_be_bytes());
        f.extend_from_slice(&[0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(&payload);
        let pseudo = checksum::pseudo_v4(fl.src.octets(), fl.dst.octets(), 6, (f.len() - seg) as u16);
        let c = !checksum::fold(checksum::sum(pseudo, &f[seg..]));
        f[seg + 16..seg + 18].copy_from_slice(&c.to_be_bytes());
    } else {
        f.extend_from_slice(&payload);
    }
}

const METRIC_NAMES: [&str; 4] = ["hop_latency", "queue", "tx_util", "e2e_latency"];

impl Truth {
    /// The ground truth as JSON: per flow (in flow order) its key, packets,
    /// first and last index, and per hop the last node and the last value
    /// and sum of each metric the bitmap carries; per node and metric the
    /// non-empty bins of the default histograms ([lower edge, count]); the
    /// bursts.
    pub fn json(&self, t: &TelemetryTrace) -> Value {
        let bins = HistSpec::default_bins();
        let metric_bits = [0x2000u16, 0x1000, 0x0100];
        let flows: Vec<Value> = self
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.packets > 0)
            .map(|(k, f)| {
                let fl = trace_flow(k);
                let hop: Vec<Value> = f
                    .hop
                    .iter()
                    .map(|(node, m)| {
                        let mut o = serde_json::Map::new();
                        o.insert("node_id".into(), json!(node));
                        for (x, name) in METRIC_NAMES[..3].iter().enumerate() {
                            if t.bitmap & metric_bits[x] != 0 {
                                o.insert((*name).into(), json!({"last": m[x].0, "sum": m[x].1}));
                            }
                        }
                        Value::Object(o)
                    })
                    .collect();
                let mut o = json!({
                    "flow": {"src": fl.src.to_string(), "dst": fl.dst.to_string(), "proto": fl.proto,
                             "src_port": fl.src_port, "dst_port": fl.dst_port},
                    "packets": f.packets, "first": f.first, "last": f.last, "hop": hop,
                });
                if t.bitmap & 0x2000 != 0 {
                    o["e2e_latency"] = json!({"last": f.e2e.0, "sum": f.e2e.1});
                }
                o
            })
            .collect();
        let hist: Vec<Value> = self
            .hist
            .iter()
            .map(|(&(node, m), counts)| {
                let edges: Vec<Value> = counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(b, c)| json!([bins[m].lower_edge(b), c]))
                    .collect();
                json!({"node_id": node, "metric": METRIC_NAMES[m], "counts": edges})
            })
            .collect();
        let bursts: Vec<Value> = self
            .bursts
            .iter()
            .map(|b| json!({"first": b.first, "last": b.last, "peak_ns": b.peak_ns, "pre_ns": b.pre_ns}))
            .collect();
        json!({
            "model": t.model.name(), "seed": t.seed, "flows": t.flows, "hops": t.hops, "paths": t.paths,
            "bitmap": t.bitmap, "packets": self.packets, "bottleneck_drops": self.dropped,
            "bottleneck_hop": t.hops / 2, "flow": flows, "histograms": hist, "bursts": bursts,
        })
    }
}

/// Bins of a metric by name, for callers binning values the same way.
pub fn default_bins(metric: &str) -> Option<Bins> {
    METRIC_NAMES.iter().position(|m| *m == metric).map(|m| HistSpec::default_bins()[m])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(model: &str, flows: usize, packets: usize) -> TelemetryTrace {
        TelemetryTrace {
            model: Model::parse(model).unwrap(),
            flows,
            packets,
            zipf: Some(1.1),
            hops: 5,
            paths: 4,
            bitmap: 0xb100,
            rhc: 3,
            int_port: 17768,
            seed: 7,
        }
    }

    #[test]
    fn frames_parse_as_int_with_the_index_in_the_ip_id() {
        let t = trace("web", 16, 400);
        let mut pcap = Vec::new();
        let truth = t.write(&mut pcap).unwrap();
        let frames = dataplane::pcap::read_all(&pcap[..]).unwrap();
        assert_eq!(frames.len() as u64, truth.packets);
        for (i, (_, f)) in frames.iter().enumerate() {
            let meta = dataplane::parse::parse(f, 0).unwrap();
            assert_eq!(u16::from_be_bytes([f[18], f[19]]), i as u16);
            let at = dataplane::int::find(f, &meta, dataplane::int::Presence::UdpPort(17768));
            assert!(at.is_some(), "frame {i} carries INT");
        }
        assert_eq!(truth.flows.iter().map(|f| f.packets).sum::<u64>(), truth.packets);
    }

    #[test]
    fn bursts_raise_the_bottleneck_queue_and_exp_stays_in_range() {
        let t = trace("hadoop", 4, 20_000);
        let truth = t.write(std::io::sink()).unwrap();
        assert!(truth.bursts.len() > 5, "{}", truth.bursts.len());
        assert!(truth.bursts.iter().any(|b| b.peak_ns > 50_000), "{:?}", &truth.bursts[..5]);
        for b in &truth.bursts {
            assert!(b.first <= b.last && b.last < truth.packets);
        }
        let e = trace("exp", 4, 2_000).write(std::io::sink()).unwrap();
        assert!(e.bursts.is_empty() && e.dropped == 0);
        let q = &e.hist[&(Some(16), 1)];
        assert_eq!(q.iter().sum::<u64>(), e.packets);
        assert!(q[301..].iter().all(|c| *c == 0), "queue at most 300");
    }

    #[test]
    fn zipf_counts_are_skewed_and_even_counts_exact() {
        let t = trace("exp", 100, 10_000);
        let c = t.counts();
        assert!(c[0] > 10 * c[99] && c.iter().all(|&n| n >= 1), "{c:?}");
        let even = TelemetryTrace { zipf: None, ..t };
        assert_eq!(even.counts().iter().sum::<u64>(), 10_000);
    }

    #[test]
    fn what_cannot_be_built_is_refused() {
        let t = trace("exp", 10, 5);
        assert!(t.check().unwrap_err().contains("at least one packet"));
        assert!(TelemetryTrace { bitmap: 0x8001, ..trace("exp", 1, 1) }.check().is_err());
        assert!(TelemetryTrace { hops: 200, ..trace("exp", 1, 1) }.check().is_err());
        assert!(Model::parse("video").unwrap_err().contains("exp, web"));
    }
}
