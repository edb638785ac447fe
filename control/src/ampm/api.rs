//! AM-PM's commands: monitored flows (`show_ampm`, `ampm_add|del`), the
//! slot tables (`rule_show|add|del`), and the interval record the exporter
//! sends (also the `last_record` of each flow in `show_ampm`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ampm::config::AmpmFlowConfig;
use crate::api::{command, no_args, Generation};

no_args!(ShowAmpm);

/// One color's counters of a flow, summed over the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColorCounters {
    pub color: u8,
    pub packets: u64,
    pub bytes: u64,
    pub delay_count: u64,
    pub last_delay_ts_ns: u64,
}

/// One interval of one flow, as exported (RFC 9341 counters of the color
/// that interval had).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AmpmRecord {
    /// Always "ampm".
    #[serde(rename = "type")]
    pub kind: String,
    /// Record format version (1).
    pub version: u32,
    pub node: u32,
    pub flow: String,
    pub flow_mon_id: u32,
    pub role: String,
    pub method: String,
    pub carrier: String,
    pub interval: u64,
    pub interval_ns: u64,
    pub start_ns: u64,
    pub color: u8,
    pub packets: u64,
    pub bytes: u64,
    pub delay_count: u64,
    pub delay_ts_ns: Option<u64>,
    pub mean_ts_offset_ns: Option<i64>,
    /// The switch started during the interval: packets before that are not counted.
    pub partial: bool,
    /// CLOCK_REALTIME stepped since this flow's last export of this color:
    /// the counters may hold packets of other intervals.
    #[serde(default)]
    pub clock_step: bool,
    /// Per collector: the record's sequence number (export only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AmpmFlowView {
    pub name: String,
    pub slot: u32,
    pub flow_mon_id: u32,
    pub role: String,
    pub method: String,
    pub carrier: String,
    /// A terminator clears the marks.
    pub clear: bool,
    /// The flow as configured.
    #[serde(rename = "match")]
    pub matching: Option<AmpmFlowConfig>,
    /// Color 0, then color 1.
    pub counters: Vec<ColorCounters>,
    pub last_record: Option<AmpmRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmpmCollectorView {
    pub address: String,
    pub via: String,
    pub datagrams: u64,
    pub next_seq: u64,
    pub send_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmpmExportView {
    pub records: u64,
    pub intervals_missed: u64,
    /// Steps of CLOCK_REALTIME seen (records after each marked `clock_step`).
    #[serde(default)]
    pub clock_steps: u64,
    pub last_interval: u64,
    pub collectors: Vec<AmpmCollectorView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AmpmView {
    pub node_id: u32,
    /// "ns" or "sec_frac".
    pub time_format: String,
    pub interval_bit: u8,
    pub interval_ns: u64,
    pub sub_bits: u8,
    pub now_ns: u64,
    pub interval: u64,
    pub color: u64,
    pub sub_interval: u64,
    pub max_flows: usize,
    pub flows: Vec<AmpmFlowView>,
    pub export: Option<AmpmExportView>,
    /// The ampm_* events.
    pub counters: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AmpmAdd(pub AmpmFlowConfig);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmpmAdded {
    pub generation: u64,
    /// The counter slot the flow uses.
    pub slot: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmpmDel {
    pub name: String,
}

/// `rule_show`: one table (METHOD-ROLE) or, without, all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleShow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// One row of a slot table (bits printed MSB first, `*` = any).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRuleView {
    pub name: String,
    pub priority: u32,
    pub time: String,
    pub mark: String,
    pub reg: String,
    pub set_l: Option<bool>,
    pub set_d: Option<bool>,
    pub set_reg: Option<u8>,
    pub color: u8,
    pub count: bool,
    pub timestamp: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotTableView {
    pub table: String,
    /// "direct" or "ternary".
    pub lookup: String,
    pub rules: Vec<SlotRuleView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotTables {
    pub tables: Vec<SlotTableView>,
}

/// `rule_add` arguments: a row of a slot table.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleAdd {
    /// Table name: METHOD-ROLE (`muxed-initiator`, `step-terminator`, ...).
    pub table: String,
    pub name: String,
    #[serde(default)]
    pub priority: u32,
    /// Interval bit then slot bits, MSB first, `*` = any (e.g. "010", "1**").
    #[serde(default = "star")]
    pub time: String,
    /// Mark bits D then L, e.g. "*1" (L=1), "11", "**".
    #[serde(default = "star")]
    pub mark: String,
    /// Register bit: "0", "1" or "*".
    #[serde(default = "star")]
    pub reg: String,
    pub set_l: Option<bool>,
    pub set_d: Option<bool>,
    pub set_reg: Option<u8>,
    #[serde(default)]
    pub color: u8,
    #[serde(default)]
    pub count: bool,
    #[serde(default)]
    pub timestamp: bool,
}

fn star() -> String {
    "*".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDel {
    pub table: String,
    pub name: String,
}

command!(ShowAmpm, "show_ampm", AmpmView);
command!(AmpmAdd, "ampm_add", AmpmAdded);
command!(AmpmDel, "ampm_del", Generation);
command!(RuleShow, "rule_show", SlotTables);
command!(RuleAdd, "rule_add", Generation);
command!(RuleDel, "rule_del", Generation);
