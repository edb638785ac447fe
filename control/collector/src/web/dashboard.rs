//! What the dashboard shows, folded per tick: the decode loop hands over
//! points, this keeps one tick's aggregates (per flow and hop: mean and
//! maximum latency, maximum queue; AM-PM intervals; events and evictions
//! by name; INT-label coverage; GPINT sessions; the loss counters) and
//! turns them into one
//! JSON line per tick. The ring of those lines is the dashboard's history.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::{json, Value};

use crate::{Report, FLAG_I};

/// One hop of a report, path order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopPoint {
    pub node: Option<u32>,
    pub latency_ns: Option<u32>,
    pub queue: Option<u32>,
}

/// A decoded report, reduced to what the charts show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportPoint {
    /// `src:sport>dst:dport/proto`, the key the exports use.
    pub flow: String,
    pub hops: Vec<HopPoint>,
    /// Last hop's ingress time minus the first hop's, when both carry one
    /// (the path's delay up to the sink, links included).
    pub path_ns: Option<u64>,
}

impl ReportPoint {
    /// None for undecoded reports and INT-label reports (the label panel
    /// takes those from the coverage lines).
    pub fn of(r: &Report) -> Option<ReportPoint> {
        let s = r.stack.as_ref().ok().filter(|_| !r.label)?;
        let mut hops: Vec<&crate::HopValues> = s.hops.iter().rev().collect();
        let mut nodes: Vec<Option<u32>> = hops.iter().map(|h| h.node_id).collect();
        if r.flags & FLAG_I == 0 {
            hops.push(&r.sink);
            nodes.push(Some(r.node_id));
        }
        let path_ns = match (hops.first().and_then(|h| h.ingress_ts_ns), hops.last().and_then(|h| h.ingress_ts_ns)) {
            (Some(a), Some(b)) if hops.len() > 1 && b >= a => Some(b - a),
            _ => None,
        };
        let f = &s.flow;
        let flow = match (f.src, f.dst) {
            (std::net::IpAddr::V6(a), std::net::IpAddr::V6(b)) => {
                format!("[{a}]:{}>[{b}]:{}/{}", f.src_port, f.dst_port, f.proto)
            }
            (a, b) => format!("{a}:{}>{b}:{}/{}", f.src_port, f.dst_port, f.proto),
        };
        let hops = hops
            .iter()
            .zip(nodes)
            .map(|(h, node)| HopPoint { node, latency_ns: h.hop_latency_ns, queue: h.queue_occupancy })
            .collect();
        Some(ReportPoint { flow, hops, path_ns })
    }
}

/// The collector's loss and volume counters, as totals since start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub packets: u64,
    pub reports: u64,
    pub bad_packets: u64,
    /// Report sequence gaps summed over (node, hw_id).
    pub report_gaps: u64,
    pub ampm_records_lost: u64,
    /// Gaps in the analytics records' sequence.
    pub analytics_records_lost: u64,
}

/// What the decode loop hands over.
#[derive(Debug, Clone)]
pub enum Point {
    Report(ReportPoint),
    /// A joined AM-PM interval line.
    Ampm(Value),
    /// An `int_event` record.
    Event(Value),
    /// An `int_flow` record (a flow-cache export, with its reason).
    FlowRecord(Value),
    /// An `int_label_coverage` line.
    LabelCoverage(Value),
    /// A GPINT collection session's line (`intcollector gpint run`).
    GpintSession(Value),
    Totals(Totals),
}

#[derive(Default)]
struct HopAgg {
    node: Option<u32>,
    lat_sum: u64,
    lat_n: u64,
    lat_max: u32,
    queue_max: Option<u32>,
}

#[derive(Default)]
struct FlowAgg {
    reports: u64,
    path: Vec<Option<u32>>,
    hops: Vec<HopAgg>,
    path_sum: u64,
    path_n: u64,
}

/// Events kept per tick to show as text (the rest are counted by name).
const EVENTS_LISTED: usize = 20;

/// One tick's aggregates and the history of finished ticks.
pub struct Dashboard {
    /// Flows with a series; reports of further flows are counted, not shown.
    max_flows: usize,
    /// Finished ticks kept (the points per series).
    points: usize,
    flows: HashMap<String, FlowAgg>,
    /// Flows seen, in order of first report (what the series are kept for).
    known: VecDeque<String>,
    hidden_reports: u64,
    ampm: Vec<Value>,
    events: BTreeMap<String, u64>,
    events_listed: Vec<Value>,
    evictions: BTreeMap<String, u64>,
    label: Option<Value>,
    gpint: Vec<Value>,
    totals: Totals,
    last_totals: Totals,
    /// Finished ticks, oldest first, each one JSON line.
    pub ring: VecDeque<std::sync::Arc<str>>,
}

impl Dashboard {
    pub fn new(max_flows: usize, points: usize) -> Dashboard {
        Dashboard {
            max_flows,
            points,
            flows: HashMap::new(),
            known: VecDeque::new(),
            hidden_reports: 0,
            ampm: Vec::new(),
            events: BTreeMap::new(),
            events_listed: Vec::new(),
            evictions: BTreeMap::new(),
            label: None,
            gpint: Vec::new(),
            totals: Totals::default(),
            last_totals: Totals::default(),
            ring: VecDeque::with_capacity(points),
        }
    }

    pub fn add(&mut self, p: Point) {
        match p {
            Point::Report(r) => self.report(r),
            Point::Ampm(v) => self.ampm.push(json!({
                "flow": v["flow"], "interval": v["interval"], "packets": v["packets"],
                "loss_packets": v["loss_packets"], "delay_ns": v["delay_ns"],
                "mean_delay_ns": v["mean_delay_ns"], "partial": v["partial"], "clock_step": v["clock_step"],
            })),
            Point::Event(v) => {
                for e in v["events"].as_array().into_iter().flatten() {
                    *self.events.entry(e.as_str().unwrap_or("?").to_string()).or_default() += 1;
                }
                if self.events_listed.len() < EVENTS_LISTED {
                    self.events_listed.push(json!({
                        "flow": v["flow"], "hop": v["hop"], "node_id": v["node_id"], "events": v["events"],
                    }));
                }
            }
            Point::FlowRecord(v) => {
                *self.evictions.entry(v["reason"].as_str().unwrap_or("?").to_string()).or_default() += 1;
            }
            Point::LabelCoverage(v) => {
                self.label = Some(json!({
                    "coverage_arrival": v["coverage_arrival"], "coverage_label": v["coverage_label"],
                    "active": v["active"], "covered": v["covered_label"], "items": v["items"],
                }))
            }
            Point::GpintSession(v) => self.gpint.push(json!({
                "session": v["session"], "coverage": v["coverage"], "elapsed_ms": v["elapsed_ms"],
                "complete": v["complete"], "probes": v["probes"], "recovery_probes": v["recovery_probes"],
                "timeouts": v["timeouts"], "failed_paths": v["failed_paths"],
                "unavailable": v["unavailable"], "congested": v["congested"],
            })),
            Point::Totals(t) => self.totals = t,
        }
    }

    fn report(&mut self, r: ReportPoint) {
        if !self.flows.contains_key(&r.flow) {
            if !self.known.contains(&r.flow) {
                if self.known.len() >= self.max_flows {
                    self.hidden_reports += 1;
                    return;
                }
                self.known.push_back(r.flow.clone());
            }
            self.flows.insert(r.flow.clone(), FlowAgg::default());
        }
        let f = self.flows.get_mut(&r.flow).expect("inserted above");
        f.reports += 1;
        let path: Vec<Option<u32>> = r.hops.iter().map(|h| h.node).collect();
        if path != f.path {
            // A new path: its hops start over (the last path is the one shown).
            f.path = path;
            f.hops = r.hops.iter().map(|h| HopAgg { node: h.node, ..HopAgg::default() }).collect();
        }
        for (a, h) in f.hops.iter_mut().zip(&r.hops) {
            if let Some(l) = h.latency_ns {
                a.lat_sum += l as u64;
                a.lat_n += 1;
                a.lat_max = a.lat_max.max(l);
            }
            if let Some(q) = h.queue {
                a.queue_max = Some(a.queue_max.unwrap_or(0).max(q));
            }
        }
        if let Some(p) = r.path_ns {
            f.path_sum += p;
            f.path_n += 1;
        }
    }

    /// Closes the tick at `t_ms` (Unix milliseconds): its JSON line goes
    /// into the ring (the oldest leaves past `points`) and is returned.
    pub fn tick(&mut self, t_ms: u64, web: Value) -> std::sync::Arc<str> {
        let mut flows = serde_json::Map::new();
        for (name, f) in self.flows.drain() {
            let hops: Vec<Value> = f
                .hops
                .iter()
                .map(|h| {
                    json!({"node": h.node, "lat": (h.lat_n > 0).then(|| h.lat_sum / h.lat_n),
                           "lat_max": (h.lat_n > 0).then_some(h.lat_max), "q": h.queue_max})
                })
                .collect();
            flows.insert(
                name,
                json!({"reports": f.reports, "path": f.path, "hops": hops,
                       "path_ns": (f.path_n > 0).then(|| f.path_sum / f.path_n)}),
            );
        }
        let (t, l) = (&self.totals, &self.last_totals);
        let line = json!({
            "t": t_ms,
            "points": self.points,
            "flows": flows,
            "flows_known": self.known.len(),
            "hidden_reports": self.hidden_reports,
            "ampm": std::mem::take(&mut self.ampm),
            "events": std::mem::take(&mut self.events),
            "events_listed": std::mem::take(&mut self.events_listed),
            "evictions": std::mem::take(&mut self.evictions),
            "label": self.label.take(),
            "gpint": std::mem::take(&mut self.gpint),
            "totals": {"packets": t.packets, "reports": t.reports, "bad_packets": t.bad_packets,
                       "report_gaps": t.report_gaps, "ampm_records_lost": t.ampm_records_lost,
                       "analytics_records_lost": t.analytics_records_lost},
            "delta": {"reports": t.reports.saturating_sub(l.reports),
                      "report_gaps": t.report_gaps.saturating_sub(l.report_gaps),
                      "bad_packets": t.bad_packets.saturating_sub(l.bad_packets),
                      "ampm_records_lost": t.ampm_records_lost.saturating_sub(l.ampm_records_lost),
                      "analytics_records_lost": t.analytics_records_lost.saturating_sub(l.analytics_records_lost)},
            "web": web,
        })
        .to_string();
        self.last_totals = self.totals.clone();
        let line: std::sync::Arc<str> = line.into();
        if self.ring.len() >= self.points {
            self.ring.pop_front();
        }
        self.ring.push_back(line.clone());
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(flow: &str, hops: &[(u32, u32, u32)]) -> ReportPoint {
        ReportPoint {
            flow: flow.into(),
            hops: hops
                .iter()
                .map(|&(n, l, q)| HopPoint { node: Some(n), latency_ns: Some(l), queue: Some(q) })
                .collect(),
            path_ns: Some(1000),
        }
    }

    fn tick(d: &mut Dashboard, t: u64) -> Value {
        serde_json::from_str(&d.tick(t, json!({}))).unwrap()
    }

    #[test]
    fn a_tick_holds_mean_and_max_per_hop_and_the_last_path() {
        let mut d = Dashboard::new(8, 4);
        d.add(Point::Report(rp("a", &[(1, 100, 2), (2, 300, 7)])));
        d.add(Point::Report(rp("a", &[(1, 200, 4), (2, 100, 1)])));
        let v = tick(&mut d, 5);
        let a = &v["flows"]["a"];
        assert_eq!(a["reports"], 2);
        assert_eq!(a["path"], json!([1, 2]));
        assert_eq!(a["hops"][0], json!({"node": 1, "lat": 150, "lat_max": 200, "q": 4}));
        assert_eq!(a["hops"][1], json!({"node": 2, "lat": 200, "lat_max": 300, "q": 7}));
        assert_eq!(a["path_ns"], 1000);
        // A route change restarts the hops: only the new path's values show.
        d.add(Point::Report(rp("a", &[(1, 100, 2), (2, 300, 7)])));
        d.add(Point::Report(rp("a", &[(1, 10, 0), (3, 20, 0)])));
        let v = tick(&mut d, 6);
        assert_eq!(v["flows"]["a"]["path"], json!([1, 3]));
        assert_eq!(v["flows"]["a"]["hops"][0]["lat"], 10);
        // An idle tick has no flow entry, but the flow stays known.
        let v = tick(&mut d, 7);
        assert_eq!(v["flows"], json!({}));
        assert_eq!(v["flows_known"], 1);
    }

    #[test]
    fn flows_past_the_limit_are_counted_and_the_ring_is_bounded() {
        let mut d = Dashboard::new(2, 3);
        for f in ["a", "b", "c", "c"] {
            d.add(Point::Report(rp(f, &[(1, 1, 1)])));
        }
        let v = tick(&mut d, 1);
        assert_eq!(v["flows"].as_object().unwrap().len(), 2);
        assert_eq!(v["hidden_reports"], 2);
        for t in 2..10 {
            tick(&mut d, t);
        }
        assert_eq!(d.ring.len(), 3);
        assert!(d.ring[0].contains("\"t\":7"));
    }

    #[test]
    fn events_evictions_and_totals_are_per_tick() {
        let mut d = Dashboard::new(2, 3);
        d.add(Point::Totals(Totals { reports: 10, report_gaps: 2, ..Totals::default() }));
        for _ in 0..(EVENTS_LISTED + 5) {
            d.add(Point::Event(json!({"events": ["queue_t", "queue_c"], "hop": 0, "node_id": 1, "flow": {}})));
        }
        d.add(Point::FlowRecord(json!({"reason": "lru"})));
        d.add(Point::Ampm(json!({"flow": "f", "interval": 3, "loss_packets": 1, "packets": 99})));
        d.add(Point::GpintSession(json!({"session": 4, "coverage": 0.75, "elapsed_ms": 12.5, "complete": true,
                                          "probes": 3, "telemetry": [1, 2, 3]})));
        let v = tick(&mut d, 1);
        assert_eq!((v["gpint"][0]["session"].as_u64(), v["gpint"][0]["coverage"].as_f64()), (Some(4), Some(0.75)));
        assert!(v["gpint"][0].get("telemetry").is_none(), "the per-hop telemetry stays out of the ticks");
        assert_eq!(v["events"]["queue_t"], (EVENTS_LISTED + 5) as u64);
        assert_eq!(v["events_listed"].as_array().unwrap().len(), EVENTS_LISTED);
        assert_eq!(v["evictions"]["lru"], 1);
        assert_eq!(v["ampm"][0]["loss_packets"], 1);
        assert_eq!(v["delta"]["reports"], 10);
        d.add(Point::Totals(Totals { reports: 15, report_gaps: 2, ..Totals::default() }));
        let v = tick(&mut d, 2);
        assert_eq!(v["delta"]["reports"], 5);
        assert_eq!(v["delta"]["report_gaps"], 0);
        assert_eq!(v["totals"]["report_gaps"], 2);
        assert_eq!(v["events"], json!({}));
        assert_eq!(v["gpint"], json!([]));
    }
}
