//! The analytics' commands: `show_int_analytics`, `int_flows_flush`,
//! `int_flow_show`, `int_event_set`, `int_event_show`, `show_int_histograms`,
//! `int_detect_add`, `int_detect_del`, `int_detect_show`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::{command, no_args};

no_args!(ShowIntAnalytics, IntFlowsFlush, IntEventShow, IntDetectShow);

use crate::int::api::RingView;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCollectorView {
    pub address: String,
    pub via: String,
    pub datagrams: u64,
    pub records: u64,
    pub next_seq: u64,
    pub send_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowExportView {
    /// Flow records (R_G) and event records (R_I) taken from the rings.
    pub records: u64,
    pub events: u64,
    /// Seconds the control core spent exporting them, and what one
    /// control core sustains: records and events a second of that work.
    pub busy_s: f64,
    pub records_per_busy_s: u64,
    /// Events from the worker's RX to their export by the control core.
    pub event_delay: DelayView,
    /// Histogram snapshots sent, and their lines.
    pub hist_snapshots: u64,
    pub hist_lines: u64,
    /// R_G and R_I per worker (ring_full: int_flow_ring_full, int_event_ring_full).
    pub rings: Vec<RingView>,
    pub event_rings: Vec<RingView>,
    pub collectors: Vec<FlowCollectorView>,
}

/// A delay distribution: percentiles as the lower edges of log2 bins with
/// 8 sub-bins (12.5 % apart), and the largest, in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayView {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalyticsView {
    pub cache_rows: usize,
    pub cache_ways: usize,
    pub cache_max_hops: usize,
    pub entry_bytes: usize,
    /// Per worker.
    pub cache_bytes: usize,
    pub idle_timeout_s: u64,
    pub active_timeout_s: u64,
    /// Entries in use, all workers.
    pub entries: u64,
    pub capacity: u64,
    /// The int_flow_* and analytics loss events, by name (hits, inserts,
    /// exports by reason, ring full, absent values, untracked hops, ...).
    pub counters: BTreeMap<String, u64>,
    pub export: FlowExportView,
}

/// One aggregate of a flow's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggView {
    pub last: u32,
    pub sum: u64,
    pub count: u64,
    /// sum / count; None without a value.
    pub mean: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopView {
    pub node_id: u32,
    pub hop_latency: AggView,
    pub queue: AggView,
    pub tx_util: AggView,
}

/// A flow's entry on one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowEntryView {
    pub worker: usize,
    pub packets: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub hops: u8,
    pub e2e_latency: AggView,
    pub hop: Vec<HopView>,
}

/// `int_flow_show`: the flow as its source saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntFlowShow {
    pub src: String,
    pub dst: String,
    /// Name or number.
    pub proto: String,
    pub src_port: u16,
    pub dst_port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowEntries {
    pub entries: Vec<FlowEntryView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flushed {
    /// Entries exported (reason flush), all workers.
    pub flushed: u64,
}

/// `int_event_set`: one metric's T and C settings (what is not given
/// stays as it is), or path change on or off (`enabled`, with metric
/// `path_change`). A new table generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntEventSet {
    /// hop_latency, queue, tx_util, e2e_latency or path_change.
    pub metric: String,
    #[serde(default)]
    pub threshold: Option<u64>,
    #[serde(default)]
    pub change: Option<u64>,
    /// level or edge.
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub reset: Option<u64>,
    #[serde(default)]
    pub enabled: Option<bool>,
    /// T events a second to keep near by moving the threshold (0: off).
    #[serde(default)]
    pub rate_budget: Option<u64>,
}

/// One metric's settings (0: off).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRuleView {
    pub metric: String,
    pub threshold: u32,
    pub change: u32,
    pub mode: String,
    /// Edge mode's re-arm level.
    pub reset: Option<u32>,
    /// With a rate budget: the budget, the threshold it never goes below,
    /// the T events a second of the last period; and its changes so far.
    pub rate_budget: Option<u64>,
    pub base_threshold: Option<u64>,
    pub t_events_per_s: Option<u64>,
    pub budget_changes: u64,
}

/// `int_event_show`: the settings the workers use, and the events raised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsView {
    pub rules: Vec<EventRuleView>,
    pub path_change: bool,
    /// int_event_* counters, all workers.
    pub counters: BTreeMap<String, u64>,
}

/// `show_int_histograms`: the workers' histograms summed, optionally one
/// node's (`node`) or one metric's (`metric`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowIntHistograms {
    #[serde(default)]
    pub node: Option<u32>,
    #[serde(default)]
    pub metric: Option<String>,
}

/// One histogram: its nonzero bins as (lower edge, count), and quantiles
/// as bin lower edges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistView {
    /// None: end to end.
    pub node_id: Option<u32>,
    pub metric: String,
    pub bins: String,
    pub total: u64,
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p99: Option<u64>,
    pub counts: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramsView {
    pub histograms: Vec<HistView>,
    /// int_hist_node_untracked and int_hist_no_node_id, all workers.
    pub counters: BTreeMap<String, u64>,
}

/// `int_detect_add`: a `[[int.detect]]` rule (replaces the one of its name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IntDetectAdd(pub crate::int::analytics::detect::DetectConfig);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntDetectDel {
    pub name: String,
}

/// One detection rule, its match as the watchlist shows one, and its
/// counters summed over the workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetectRuleView {
    #[serde(rename = "match")]
    pub matcher: crate::int::api::WatchView,
    pub algorithm: String,
    pub metric: String,
    pub threshold: u64,
    pub weight: Option<u32>,
    pub interval_ms: Option<u64>,
    /// cnf: the expression's name.
    pub expr: Option<String>,
    /// Packets decided, reported, suppressed, and whose bitmap lacked the metric.
    pub evaluated: u64,
    pub reported: u64,
    pub suppressed: u64,
    pub metric_absent: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetectView {
    /// In lookup order (priority, then age).
    pub rules: Vec<DetectRuleView>,
    /// Hops whose node found no per_hop register (int_detect_node_untracked).
    pub node_untracked: u64,
}

/// `int_expr_add`: an `[[int.expr]]` (replaces the one of its name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IntExprAdd(pub crate::int::analytics::detect::ExprConfig);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntExprDel {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntExprShow {}

/// One expression, as parsed (normalised), and the rules using it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExprEntryView {
    pub name: String,
    pub expr: String,
    pub rules: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExprView {
    pub exprs: Vec<ExprEntryView>,
}

command!(ShowIntAnalytics, "show_int_analytics", AnalyticsView);
command!(IntExprAdd, "int_expr_add", crate::api::Generation);
command!(IntExprDel, "int_expr_del", crate::api::Generation);
command!(IntExprShow, "int_expr_show", ExprView);
command!(IntDetectAdd, "int_detect_add", crate::api::Generation);
command!(IntDetectDel, "int_detect_del", crate::api::Generation);
command!(IntDetectShow, "int_detect_show", DetectView);
command!(ShowIntHistograms, "show_int_histograms", HistogramsView);
command!(IntEventSet, "int_event_set", crate::api::Generation);
command!(IntEventShow, "int_event_show", EventsView);
command!(IntFlowsFlush, "int_flows_flush", Flushed);
command!(IntFlowShow, "int_flow_show", FlowEntries);
