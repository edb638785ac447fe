//! The analytics' commands: `show_int_analytics`, `int_flows_flush`,
//! `int_flow_show`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::{command, no_args};

no_args!(ShowIntAnalytics, IntFlowsFlush);

/// One worker's R_G.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRingView {
    pub worker: usize,
    pub capacity: usize,
    pub pending: usize,
    pub received: u64,
    /// Records the full ring refused (the worker's int_flow_ring_full).
    pub ring_full: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCollectorView {
    pub address: String,
    pub via: String,
    pub datagrams: u64,
    pub records: u64,
    pub next_seq: u64,
    pub send_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowExportView {
    pub records: u64,
    pub rings: Vec<FlowRingView>,
    pub collectors: Vec<FlowCollectorView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

command!(ShowIntAnalytics, "show_int_analytics", AnalyticsView);
command!(IntFlowsFlush, "int_flows_flush", Flushed);
command!(IntFlowShow, "int_flow_show", FlowEntries);
