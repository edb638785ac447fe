//! INT's commands: the domain and its watchlist (`show_int`,
//! `int_watch_add|del`), report export (`show_reports`, `int_export`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::{command, no_args, Generation};
use crate::int::config::WatchConfig;

no_args!(ShowInt, ShowReports);

/// How INT packets are recognised in the domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum PresenceView {
    UdpPort {
        udp_port: u16,
    },
    Dscp {
        /// "0x.." hex.
        dscp_value: String,
        dscp_mask: String,
    },
}

/// One watchlist rule as the switch holds it (ternary fields printed as
/// "VALUE" or "VALUE/MASK", absent = any).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchView {
    pub name: String,
    pub priority: u32,
    /// source, transit, sink or none.
    pub role: String,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub proto: Option<u8>,
    pub src_port: Option<String>,
    pub dst_port: Option<String>,
    pub dscp: Option<String>,
    pub in_port: Option<String>,
    /// Source rules only: what they push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bitmap: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hops: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_id: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntView {
    pub node_id: u32,
    pub presence: PresenceView,
    pub edge_ports: Vec<String>,
    pub core_ports: Vec<String>,
    /// Each port's INT MTU, by name.
    pub mtu: BTreeMap<String, u16>,
    pub source_pushes: bool,
    /// Whether INT packets leaving by a core port get this node's hop
    /// (false: only where a transit watch rule says so).
    pub transit: bool,
    /// "report" or "flag".
    pub mtu_exceeded: String,
    /// Instructions of the sink's own metadata in reports.
    pub report_md: Vec<String>,
    pub report_truncate: usize,
    pub watch: Vec<WatchView>,
    /// The int_* events.
    pub counters: BTreeMap<String, u64>,
}

/// One worker's ring to the control core (reports, R_G, R_I).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingView {
    pub worker: usize,
    pub capacity: usize,
    pub pending: usize,
    pub received: u64,
    /// Records the full ring refused (the worker's *_ring_full counter).
    pub ring_full: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportCollectorView {
    pub address: String,
    /// "host" or the port the reports leave through.
    pub via: String,
    pub packets: u64,
    pub reports: u64,
    pub send_errors: u64,
    pub next_seq: u32,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportsView {
    pub paused: bool,
    pub node_id: u32,
    pub hw_id: u8,
    pub reports: u64,
    pub packets: u64,
    /// Seconds the control core spent exporting.
    pub busy_s: f64,
    /// What one control core sustains: reports per second of export work.
    pub reports_per_busy_s: u64,
    pub rings: Vec<RingView>,
    pub collectors: Vec<ReportCollectorView>,
}

/// `int_watch_add`: a watchlist rule (replaces the one of the same name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IntWatchAdd(pub WatchConfig);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntWatchDel {
    pub name: String,
}

/// `int_export`: pause (records wait in the rings) or resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntExport {
    pub paused: bool,
}

command!(ShowInt, "show_int", IntView);
command!(ShowReports, "show_reports", ReportsView);
command!(IntWatchAdd, "int_watch_add", Generation);
command!(IntWatchDel, "int_watch_del", Generation);
command!(IntExport, "int_export", IntExport);
