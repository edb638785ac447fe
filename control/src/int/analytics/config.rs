//! `[int.analytics]`: the geometry of each worker's flow cache, its
//! timeouts, R_G's and R_I's sizes, and the T and C events
//! (`[int.analytics.events]`). Absent: no analytics (the sink reports as
//! configured and keeps only the report interval per flow).

use dataplane::int::analytics::cache::{FlowCache, HOP_LATENCY, MAX_HOPS, MAX_ROWS, MAX_WAYS, QUEUE, TX_UTIL};
use dataplane::int::analytics::events::{EventRule, EventSpec};
use dataplane::int::analytics::histogram::{Bins, HistSpec, WorkerHist, E2E};
use serde::{Deserialize, Serialize};

use crate::fields::ConfigError;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnalyticsConfig {
    /// Rows of each worker's flow cache (a power of two).
    #[serde(default = "default_rows")]
    pub cache_rows: usize,
    /// Ways per row (1..=12).
    #[serde(default = "default_ways")]
    pub cache_ways: usize,
    /// Hops tracked per flow, source side first (1..=16).
    #[serde(default = "default_hops")]
    pub cache_max_hops: usize,
    /// Bytes one worker's cache may take.
    #[serde(default = "default_memory")]
    pub cache_memory_limit: u64,
    /// Seconds without a packet after which a flow is exported (aged) and
    /// freed; 0: never.
    #[serde(default = "default_idle")]
    pub idle_timeout: u64,
    /// Seconds between snapshots of a long-lived flow; 0: none.
    #[serde(default)]
    pub active_timeout: u64,
    /// Flow records each worker's R_G ring holds.
    #[serde(default = "default_ring")]
    pub flow_ring_size: usize,
    /// Event records each worker's R_I ring holds.
    #[serde(default = "default_ring")]
    pub event_ring_size: usize,
    /// T and C events; none by default.
    #[serde(default)]
    pub events: EventsConfig,
    /// Node IDs each worker keeps histograms for (0: no histograms).
    #[serde(default = "default_hist_nodes")]
    pub histogram_nodes: usize,
    /// Seconds between histogram snapshots to the collectors (0: only at
    /// stop; default 1). With histograms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram_interval: Option<u64>,
    /// Each histogram's bins.
    #[serde(default)]
    pub bins: BinsConfig,
    /// per_hop detection's registers R: "switch" (per node ID, shared by
    /// the worker's flows, the paper's) or "flow" (per flow and hop).
    #[serde(default = "default_scope")]
    pub per_hop_scope: String,
}

fn default_scope() -> String {
    "switch".into()
}

/// `[int.analytics.bins.<metric>]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BinsConfig {
    pub hop_latency: Option<BinConfig>,
    pub queue: Option<BinConfig>,
    pub tx_util: Option<BinConfig>,
    pub e2e_latency: Option<BinConfig>,
}

/// `kind = "linear"` with `width` and `count`, or `kind = "log2"` with `sub`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BinConfig {
    pub kind: String,
    pub width: Option<u32>,
    pub count: Option<u32>,
    pub sub: Option<u32>,
}

/// Most bins a histogram has.
const MAX_BINS: u32 = 65536;
/// Most node IDs a worker keeps histograms for.
const MAX_HIST_NODES: usize = 65536;

impl BinConfig {
    fn to_bins(&self, key: &str) -> Result<Bins, ConfigError> {
        let k = |f: &str| format!("bins.{key}.{f}");
        match self.kind.as_str() {
            "linear" => {
                if self.sub.is_some() {
                    return Err(cerr(&k("sub"), "applies to kind = \"log2\""));
                }
                let width = self.width.ok_or_else(|| cerr(&k("width"), "kind = \"linear\" needs a width"))?;
                let count = self.count.ok_or_else(|| cerr(&k("count"), "kind = \"linear\" needs a count"))?;
                if width == 0 {
                    return Err(cerr(&k("width"), "0: the bins' edges would not increase"));
                }
                if !(1..=MAX_BINS).contains(&count) {
                    return Err(cerr(&k("count"), format!("{count} must be 1..={MAX_BINS}")));
                }
                Ok(Bins::Linear { width, count })
            }
            "log2" => {
                for (f, given) in [("width", self.width.is_some()), ("count", self.count.is_some())] {
                    if given {
                        return Err(cerr(&k(f), "applies to kind = \"linear\""));
                    }
                }
                let sub = self.sub.unwrap_or(8);
                if !sub.is_power_of_two() || sub > 256 {
                    return Err(cerr(&k("sub"), format!("{sub} must be a power of two, 1..=256")));
                }
                Ok(Bins::Log2 { sub })
            }
            other => Err(cerr(&k("kind"), format!("'{other}' is not linear or log2"))),
        }
    }
}

/// `[int.analytics.events]`: a table per metric, and path change.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EventsConfig {
    /// An event when a flow's node-ID list differs from its previous packet's.
    #[serde(default)]
    pub path_change: bool,
    pub hop_latency: Option<MetricEvents>,
    pub queue: Option<MetricEvents>,
    pub tx_util: Option<MetricEvents>,
    pub e2e_latency: Option<MetricEvents>,
    /// Between consecutive tracked hops: the next hop's ingress timestamp
    /// less this hop's egress timestamp (needs both timestamp instructions).
    pub link_latency: Option<MetricEvents>,
}

/// One metric's T and C settings (0 = off).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricEvents {
    /// T: value > threshold.
    #[serde(default)]
    pub threshold: u64,
    /// C: |value - the flow's previous value at the hop| > change.
    #[serde(default)]
    pub change: u64,
    /// `level` (T on every packet above) or `edge` (T once on crossing).
    #[serde(default)]
    pub mode: Option<String>,
    /// Edge: T re-arms when the value falls below this (default: threshold).
    #[serde(default)]
    pub reset: Option<u64>,
    /// T events a second the control core keeps this metric near by moving
    /// its threshold (0: off).
    #[serde(default)]
    pub rate_budget: u64,
}

/// Most T events a second a budget may name.
pub const MAX_BUDGET: u64 = 100_000_000;

/// The metrics events are set on, as `[int.analytics.events.<name>]` and
/// `intctl int event set NAME` name them.
pub const EVENT_METRICS: [&str; 4] = ["hop_latency", "queue", "tx_util", "e2e_latency"];

/// What events can be set on: the metrics, then the link latency between
/// consecutive hops (events only, no histogram).
pub const EVENT_RULES: [&str; 5] = ["hop_latency", "queue", "tx_util", "e2e_latency", "link_latency"];

/// The bit index (`events::bit::NAMES`) of each of EVENT_RULES' T events.
pub const T_BITS: [usize; 5] = [0, 2, 4, 6, 9];

/// The largest value a metric's field carries (queue occupancy is 24 bits).
pub fn metric_max(metric: &str) -> u64 {
    if metric == "queue" {
        0xff_ffff
    } else {
        u32::MAX as u64
    }
}

/// A metric's settings checked: Err is (the field at fault, why).
pub fn event_rule(
    metric: &str,
    threshold: u64,
    change: u64,
    mode: Option<&str>,
    reset: Option<u64>,
) -> Result<EventRule, (&'static str, String)> {
    if !EVENT_RULES.contains(&metric) {
        return Err(("metric", format!("'{metric}' is not one of {}", EVENT_RULES.join(", "))));
    }
    let max = metric_max(metric);
    for (field, v) in [("threshold", threshold), ("change", change), ("reset", reset.unwrap_or(0))] {
        if v > max {
            return Err((field, format!("{v} is beyond {metric}'s field (at most {max})")));
        }
    }
    let edge = match mode.unwrap_or("level") {
        "level" => false,
        "edge" => true,
        m => return Err(("mode", format!("'{m}' is not level or edge"))),
    };
    let reset = match (edge, reset) {
        (false, Some(_)) => return Err(("reset", "applies to mode = edge only".into())),
        (false, None) => 0,
        (true, _) if threshold == 0 => return Err(("threshold", "mode = edge needs a threshold".into())),
        (true, Some(r)) if r > threshold => {
            return Err(("reset", format!("{r} is above the threshold {threshold}: the event could not re-arm")))
        }
        (true, r) => r.unwrap_or(threshold),
    };
    Ok(EventRule { threshold: threshold as u32, change: change as u32, edge, reset: reset as u32 })
}

/// Where metric `name`'s rule lives in the spec.
pub fn event_slot<'a>(spec: &'a mut EventSpec, metric: &str) -> Option<&'a mut EventRule> {
    match metric {
        "hop_latency" => Some(&mut spec.hop[HOP_LATENCY]),
        "queue" => Some(&mut spec.hop[QUEUE]),
        "tx_util" => Some(&mut spec.hop[TX_UTIL]),
        "e2e_latency" => Some(&mut spec.e2e),
        "link_latency" => Some(&mut spec.link),
        _ => None,
    }
}

impl EventsConfig {
    /// The sections, in EVENT_RULES' order.
    fn rules(&self) -> [&Option<MetricEvents>; 5] {
        [&self.hop_latency, &self.queue, &self.tx_util, &self.e2e_latency, &self.link_latency]
    }

    /// Each metric's rate budget (by `EVENT_METRICS`), checked.
    fn budgets(&self) -> Result<[u64; 5], ConfigError> {
        let mut out = [0; 5];
        for (i, (name, m)) in EVENT_RULES.iter().zip(self.rules()).enumerate() {
            let Some(m) = m else { continue };
            if m.rate_budget > MAX_BUDGET {
                return Err(cerr(
                    &format!("events.{name}.rate_budget"),
                    format!("{} is over {MAX_BUDGET}", m.rate_budget),
                ));
            }
            if m.rate_budget > 0 && m.threshold == 0 {
                return Err(cerr(
                    &format!("events.{name}.rate_budget"),
                    "needs a threshold: the budget moves T's threshold",
                ));
            }
            out[i] = m.rate_budget;
        }
        Ok(out)
    }

    fn to_spec(&self) -> Result<EventSpec, ConfigError> {
        let mut spec = EventSpec { path_change: self.path_change, ..EventSpec::default() };
        for (name, m) in EVENT_RULES.iter().zip(self.rules()) {
            let Some(m) = m else { continue };
            let r = event_rule(name, m.threshold, m.change, m.mode.as_deref(), m.reset)
                .map_err(|(field, why)| cerr(&format!("events.{name}.{field}"), why))?;
            *event_slot(&mut spec, name).expect("one of EVENT_RULES") = r;
        }
        Ok(spec)
    }
}

fn default_rows() -> usize {
    65536
}
fn default_ways() -> usize {
    12
}
fn default_hops() -> usize {
    5
}
fn default_memory() -> u64 {
    1 << 30
}
fn default_idle() -> u64 {
    10
}
fn default_ring() -> usize {
    65536
}
fn default_hist_nodes() -> usize {
    256
}
/// The validated section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyticsPlan {
    pub rows: usize,
    pub ways: usize,
    pub max_hops: usize,
    pub idle_s: u64,
    pub active_s: u64,
    pub ring_size: usize,
    pub event_ring_size: usize,
    pub events: EventSpec,
    /// Histograms (None: off), seconds between snapshots, bytes per worker.
    pub hist: Option<HistSpec>,
    pub hist_interval_s: u64,
    pub hist_bytes: usize,
    /// Bytes per entry and per worker cache (with per-flow registers).
    pub entry_bytes: usize,
    pub cache_bytes: usize,
    /// per_hop's registers per flow and hop (`per_hop_scope = "flow"`).
    pub per_hop_flow: bool,
    /// T events a second per metric (`EVENT_RULES`; 0: no budget).
    pub rate_budgets: [u64; 5],
}

impl AnalyticsPlan {
    /// The line the switch prints at start-up.
    pub fn describe(&self) -> String {
        format!(
            "int analytics: flow cache {} rows x {} ways, {} hops, {} bytes an entry, {:.1} MiB per worker; R_G {} records, R_I {} records; histograms for {} nodes, {:.1} MiB per worker",
            self.rows,
            self.ways,
            self.max_hops,
            self.entry_bytes,
            self.cache_bytes as f64 / (1 << 20) as f64,
            self.ring_size,
            self.event_ring_size,
            self.hist.map_or(0, |h| h.nodes),
            self.hist_bytes as f64 / (1 << 20) as f64
        )
    }
}

fn cerr(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: format!("int.analytics.{key}"), reason: reason.into() }
}

/// Longest timeout: a day.
const MAX_TIMEOUT_S: u64 = 86_400;

impl AnalyticsConfig {
    pub fn to_plan(&self) -> Result<AnalyticsPlan, ConfigError> {
        if !self.cache_rows.is_power_of_two() || self.cache_rows > MAX_ROWS {
            return Err(cerr("cache_rows", format!("{} must be a power of two, 1..={MAX_ROWS}", self.cache_rows)));
        }
        if !(1..=MAX_WAYS).contains(&self.cache_ways) {
            return Err(cerr("cache_ways", format!("{} must be 1..={MAX_WAYS}", self.cache_ways)));
        }
        if !(1..=MAX_HOPS).contains(&self.cache_max_hops) {
            return Err(cerr("cache_max_hops", format!("{} must be 1..={MAX_HOPS}", self.cache_max_hops)));
        }
        let per_hop_flow = match self.per_hop_scope.as_str() {
            "switch" => false,
            "flow" => true,
            s => return Err(cerr("per_hop_scope", format!("'{s}' is not switch or flow"))),
        };
        // Beside each entry, a u32 per tracked hop: its last link latency,
        // and with the flow scope per_hop's register.
        let regs = self.cache_max_hops * 4 * if per_hop_flow { 2 } else { 1 };
        let bytes = FlowCache::memory_bytes(self.cache_rows, self.cache_ways, self.cache_max_hops)
            + self.cache_rows * self.cache_ways * regs;
        if bytes as u64 > self.cache_memory_limit {
            return Err(cerr(
                "cache_rows",
                format!(
                    "cache_rows x cache_ways x (entry with cache_max_hops hops) = {} x {} x {} bytes = {bytes} bytes \
                     per worker is over cache_memory_limit = {}",
                    self.cache_rows,
                    self.cache_ways,
                    FlowCache::entry_bytes(self.cache_ways, self.cache_max_hops) + regs,
                    self.cache_memory_limit
                ),
            ));
        }
        for (k, v) in [("idle_timeout", self.idle_timeout), ("active_timeout", self.active_timeout)] {
            if v > MAX_TIMEOUT_S {
                return Err(cerr(k, format!("{v} s is over a day ({MAX_TIMEOUT_S}); 0 turns it off")));
            }
        }
        for (k, v) in [("flow_ring_size", self.flow_ring_size), ("event_ring_size", self.event_ring_size)] {
            if !(2..=1 << 22).contains(&v) {
                return Err(cerr(k, format!("{v} must be 2..=4194304")));
            }
        }
        if self.histogram_nodes > MAX_HIST_NODES {
            return Err(cerr("histogram_nodes", format!("{} must be 0..={MAX_HIST_NODES}", self.histogram_nodes)));
        }
        let hist_interval = self.histogram_interval.unwrap_or(1);
        if hist_interval > MAX_TIMEOUT_S {
            return Err(cerr("histogram_interval", format!("{hist_interval} s is over a day")));
        }
        // Without histograms their interval and bins would be taken and never read.
        if self.histogram_nodes == 0 {
            let b = &self.bins;
            let given = [
                ("int.analytics.histogram_interval", self.histogram_interval.is_some()),
                ("int.analytics.bins.hop_latency", b.hop_latency.is_some()),
                ("int.analytics.bins.queue", b.queue.is_some()),
                ("int.analytics.bins.tx_util", b.tx_util.is_some()),
                ("int.analytics.bins.e2e_latency", b.e2e_latency.is_some()),
            ];
            crate::fields::refuse_given(&given, "applies to histograms, and histogram_nodes = 0 keeps none")?;
        }
        let mut bins = HistSpec::default_bins();
        let b = &self.bins;
        for (i, (name, c)) in
            EVENT_METRICS.iter().zip([&b.hop_latency, &b.queue, &b.tx_util, &b.e2e_latency]).enumerate()
        {
            if let Some(c) = c {
                // EVENT_METRICS lists the per-hop metrics by index, then e2e.
                bins[if i < E2E { i } else { E2E }] = c.to_bins(name)?;
            }
        }
        let hist = (self.histogram_nodes > 0).then_some(HistSpec { bins, nodes: self.histogram_nodes });
        Ok(AnalyticsPlan {
            hist,
            hist_interval_s: hist_interval,
            hist_bytes: hist.map_or(0, |h| WorkerHist::memory_bytes(&h)),
            rows: self.cache_rows,
            ways: self.cache_ways,
            max_hops: self.cache_max_hops,
            idle_s: self.idle_timeout,
            active_s: self.active_timeout,
            ring_size: self.flow_ring_size,
            event_ring_size: self.event_ring_size,
            events: self.events.to_spec()?,
            rate_budgets: self.events.budgets()?,
            entry_bytes: FlowCache::entry_bytes(self.cache_ways, self.cache_max_hops) + regs,
            cache_bytes: bytes,
            per_hop_flow,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Result<AnalyticsPlan, ConfigError> {
        let c: AnalyticsConfig = toml::from_str(text).map_err(|e| cerr("", e.to_string()))?;
        c.to_plan()
    }

    #[test]
    fn defaults_and_the_papers_geometry() {
        let p = plan("").unwrap();
        assert_eq!((p.rows, p.ways, p.max_hops, p.idle_s, p.active_s, p.ring_size), (65536, 12, 5, 10, 0, 65536));
        assert!(p.cache_bytes < 1 << 30);
        assert!(plan("cache_rows = 524288").is_err(), "2^19 x 12 needs the limit raised");
        let big = plan("cache_rows = 524288\ncache_memory_limit = 4294967296").unwrap();
        // (With each entry's link latencies, 4 bytes a tracked hop.)
        assert_eq!(big.cache_bytes, FlowCache::memory_bytes(1 << 19, 12, 5) + (1 << 19) * 12 * 5 * 4);
        assert!(p.describe().contains("65536 rows x 12 ways"));
    }

    #[test]
    fn the_flow_scopes_registers_count_in_the_memory_limit() {
        let limit = "cache_memory_limit = 380000000";
        assert!(!plan(limit).unwrap().per_hop_flow);
        assert!(plan(&format!("per_hop_scope = \"flow\"\n{limit}")).is_err());
        let p = plan("per_hop_scope = \"flow\"").unwrap();
        assert_eq!(p.cache_bytes - plan("").unwrap().cache_bytes, 65536 * 12 * 5 * 4);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            ("cache_rows = 1000", "int.analytics.cache_rows"),
            ("cache_rows = 0", "int.analytics.cache_rows"),
            ("cache_rows = 8388608", "int.analytics.cache_rows"),
            ("cache_ways = 0", "int.analytics.cache_ways"),
            ("cache_ways = 13", "int.analytics.cache_ways"),
            ("per_hop_scope = \"path\"", "int.analytics.per_hop_scope"),
            ("[events.queue]\nrate_budget = 100", "int.analytics.events.queue.rate_budget"),
            ("[events.queue]\nthreshold = 5\nrate_budget = 100000001", "int.analytics.events.queue.rate_budget"),
            ("per_hop_scope = \"flow\"\ncache_memory_limit = 380000000", "int.analytics.cache_rows"),
            ("cache_max_hops = 0", "int.analytics.cache_max_hops"),
            ("cache_max_hops = 17", "int.analytics.cache_max_hops"),
            ("cache_memory_limit = 1000", "int.analytics.cache_rows"),
            ("idle_timeout = 86401", "int.analytics.idle_timeout"),
            ("active_timeout = 100000", "int.analytics.active_timeout"),
            ("flow_ring_size = 1", "int.analytics.flow_ring_size"),
            ("event_ring_size = 8388608", "int.analytics.event_ring_size"),
            ("[events.queue]\nthreshold = 16777216", "int.analytics.events.queue.threshold"),
            ("[events.hop_latency]\nchange = 4294967296", "int.analytics.events.hop_latency.change"),
            ("[events.tx_util]\nmode = \"sometimes\"", "int.analytics.events.tx_util.mode"),
            ("[events.queue]\nthreshold = 10\nreset = 5", "int.analytics.events.queue.reset"),
            ("[events.queue]\nthreshold = 10\nmode = \"edge\"\nreset = 11", "int.analytics.events.queue.reset"),
            ("[events.e2e_latency]\nmode = \"edge\"", "int.analytics.events.e2e_latency.threshold"),
            ("histogram_nodes = 65537", "int.analytics.histogram_nodes"),
            ("histogram_nodes = 0\nhistogram_interval = 5", "int.analytics.histogram_interval"),
            ("histogram_nodes = 0\n[bins.queue]\nkind = \"log2\"", "int.analytics.bins.queue"),
            ("[bins.queue]\nkind = \"linear\"\nwidth = 0\ncount = 4", "int.analytics.bins.queue.width"),
            ("[bins.queue]\nkind = \"linear\"\nwidth = 1", "int.analytics.bins.queue.count"),
            ("[bins.queue]\nkind = \"linear\"\nwidth = 1\ncount = 70000", "int.analytics.bins.queue.count"),
            ("[bins.e2e_latency]\nkind = \"log2\"\nsub = 6", "int.analytics.bins.e2e_latency.sub"),
            ("[bins.tx_util]\nkind = \"log2\"\nwidth = 3", "int.analytics.bins.tx_util.width"),
            ("[bins.hop_latency]\nkind = \"cubic\"", "int.analytics.bins.hop_latency.kind"),
        ] {
            assert_eq!(plan(text).unwrap_err().key, key, "{text}");
        }
        let e = plan("cache_memory_limit = 1000").unwrap_err();
        assert!(e.reason.contains("cache_memory_limit") && e.reason.contains("cache_ways"), "{}", e.reason);
        assert!(toml::from_str::<AnalyticsConfig>("cache_colums = 3").is_err(), "unknown keys are refused");
    }

    #[test]
    fn events_per_metric() {
        let p = plan(
            "[events]\npath_change = true\n[events.queue]\nthreshold = 16777215\nchange = 10\n\
             [events.e2e_latency]\nthreshold = 50000\nmode = \"edge\"\n[events.hop_latency]\nchange = 1",
        )
        .unwrap();
        let e = p.events;
        assert!(e.path_change && e.any());
        assert_eq!(e.hop[QUEUE], EventRule { threshold: 0xff_ffff, change: 10, edge: false, reset: 0 });
        assert_eq!(
            e.e2e,
            EventRule { threshold: 50_000, change: 0, edge: true, reset: 50_000 },
            "reset: the threshold"
        );
        assert_eq!((e.hop[HOP_LATENCY].change, e.hop[TX_UTIL]), (1, EventRule::default()));
        assert!(!plan("").unwrap().events.any(), "no events by default");
        assert!(toml::from_str::<AnalyticsConfig>("[events.link]\nthreshold = 1").is_err(), "unknown metric");
        assert_eq!(event_rule("path", 1, 0, None, None).unwrap_err().0, "metric");
    }

    #[test]
    fn histograms_by_default_and_their_bins() {
        let p = plan("").unwrap();
        let h = p.hist.unwrap();
        assert_eq!((h.nodes, p.hist_interval_s, h.bins), (256, 1, HistSpec::default_bins()));
        let p = plan("histogram_nodes = 8\n[bins.queue]\nkind = \"linear\"\nwidth = 10\ncount = 30\n[bins.e2e_latency]\nkind = \"log2\"\nsub = 4").unwrap();
        let h = p.hist.unwrap();
        assert_eq!(
            (h.nodes, h.bins[QUEUE], h.bins[E2E]),
            (8, Bins::Linear { width: 10, count: 30 }, Bins::Log2 { sub: 4 })
        );
        assert_eq!(h.bins[HOP_LATENCY], Bins::Log2 { sub: 8 });
        assert!(plan("histogram_nodes = 0").unwrap().hist.is_none());
    }
}
