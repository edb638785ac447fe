//! The switch's own commands (version, config, ports, workers, counters,
//! drops, tables, routes, neighbours, flows, port state, capture, metrics):
//! their arguments and the replies they deserialize into. Field names are
//! the wire protocol's (version 1).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::Generation;
use super::{command, no_args};
use crate::config::{Config, FlowConfig, NeighbourConfig, RouteConfig};

no_args!(ShowVersion, ShowConfig, ShowPorts, ShowWorkers, ShowCounters, ShowDrops, ShowNeighbours);
no_args!(ClearCounters, Metrics);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub intswitch: String,
    pub protocol: u64,
    pub dpdk: String,
    pub name: String,
    pub mode: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkView {
    pub up: bool,
    pub speed_mbps: u32,
    pub full_duplex: bool,
}

/// The device's own counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EthdevView {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortView {
    pub name: String,
    pub device: String,
    pub driver: String,
    pub mac: String,
    /// Enabled for forwarding (`port enable|disable`).
    pub enabled: bool,
    /// The link emulation in netem syntax ("none" without).
    pub impair: String,
    pub link: LinkView,
    pub rss: bool,
    /// The device verifies received IPv4 header checksums, and the data
    /// path takes its verdict (`rx_checksum_offload` on a device that can).
    #[serde(default)]
    pub rx_checksum_offload: bool,
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub ethdev: EthdevView,
    pub xstats: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerView {
    pub id: usize,
    pub lcore: u32,
    /// "PORT:QUEUE" it polls.
    pub rx_queues: Vec<String>,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub drops: u64,
    pub polls: u64,
    pub busy_polls: u64,
    pub flows: u64,
    pub macs: u64,
    pub mac_sync_lost: u64,
    pub table_generation: u64,
    pub flow_generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortCounters {
    pub name: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

/// ARP requests and neighbour solicitations the control core sent, and
/// those it could not send, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolutionCounters {
    pub sent: u64,
    /// The port has no address of the family to ask from.
    pub no_address: u64,
    /// No packet buffer was free.
    pub no_mbuf: u64,
    /// Worker 0's hand-off queue was full.
    pub queue_full: u64,
    /// Packets held for a next hop that were dropped unresolved (also
    /// counted per worker as the drop `neighbour_unresolved`).
    pub gave_up: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountersView {
    pub uptime_s: f64,
    pub ports: Vec<PortCounters>,
    /// Every drop reason, by name.
    pub drops: BTreeMap<String, u64>,
    pub total_drops: u64,
    /// Every event, by name.
    pub events: BTreeMap<String, u64>,
    pub workers: Vec<WorkerView>,
    pub resolution: ResolutionCounters,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropsView {
    /// Every reason, summed over the workers.
    pub total: BTreeMap<String, u64>,
    /// Per worker, the reasons that counted.
    pub workers: Vec<BTreeMap<String, u64>>,
}

/// The optional `max` of a table dump (entries per worker; default 1000).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowFlows {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowMacs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

/// The optional `max` of the route dump (connected routes first; default
/// 1000: a full table has a million).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowRoutes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

/// Entries per worker a dump returns when the request names no `max`.
pub const DUMP_MAX: u64 = 1000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowView {
    pub worker: usize,
    pub in_port: Option<String>,
    pub vlan: u16,
    pub src: String,
    pub dst: String,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// "normal", "drop" or "forward:PORT".
    pub action: String,
    /// Installed through the API or config (else learned).
    pub installed: bool,
    pub packets: u64,
    pub bytes: u64,
    pub idle_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MacView {
    /// None for a static entry (every worker has it).
    pub worker: Option<usize>,
    pub vlan: u16,
    pub mac: String,
    pub port: Option<String>,
    /// "static" or "learned".
    pub kind: String,
    pub idle_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteView {
    pub prefix: String,
    pub port: String,
    pub via: Option<String>,
    /// "connected" or "static".
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourView {
    pub ip: String,
    pub mac: String,
    pub port: String,
    /// Configured (else learned).
    pub permanent: bool,
}

/// `flow_add`: a flow and its action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FlowAdd(pub FlowConfig);

/// `flow_del`: a flow key (no action).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowDel {
    pub in_port: String,
    pub src: String,
    pub dst: String,
    pub proto: toml::Value,
    #[serde(default)]
    pub src_port: u16,
    #[serde(default)]
    pub dst_port: u16,
    #[serde(default)]
    pub vlan: u16,
}

impl From<FlowConfig> for FlowDel {
    /// The key of a flow entry (its action does not matter to a delete).
    fn from(f: FlowConfig) -> FlowDel {
        FlowDel {
            in_port: f.in_port,
            src: f.src,
            dst: f.dst,
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
            vlan: f.vlan,
        }
    }
}

impl FlowDel {
    /// The flow entry it names, with the action that does not matter to a delete.
    pub fn as_flow(&self) -> FlowConfig {
        FlowConfig {
            in_port: self.in_port.clone(),
            src: self.src.clone(),
            dst: self.dst.clone(),
            proto: self.proto.clone(),
            src_port: self.src_port,
            dst_port: self.dst_port,
            vlan: self.vlan,
            action: "normal".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RouteAdd(pub RouteConfig);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteDel {
    /// ADDR/LEN.
    pub prefix: String,
}

/// A routes file the switch reads (`routes_file`'s format), its routes
/// added (or, with `replace`, instead of all configured ones) in one
/// generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteLoad {
    /// An absolute path on the switch's machine.
    pub path: String,
    #[serde(default)]
    pub replace: bool,
}

/// Where the switch sends a packet to `address` (`ip route get`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteGet {
    pub address: String,
}

/// The answer to `route_get`: the route the configuration matches longest
/// (`route`, `kind`), and the next hop the published generation's LPM
/// gives (`port`, `via`, `via_mac`, `local`): what the workers do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteLookup {
    pub address: String,
    /// The generation looked up in.
    pub generation: u64,
    /// PREFIX/LEN; None: no route matches.
    pub route: Option<String>,
    /// "connected", "static" or "local".
    pub kind: Option<String>,
    pub port: Option<String>,
    pub via: Option<String>,
    /// The gateway's MAC as the generation resolved it; None with a
    /// gateway: unresolved (packets wait for ARP/ND).
    pub via_mac: Option<String>,
    /// One of the switch's own addresses: delivered to the switch.
    pub local: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesLoaded {
    pub generation: u64,
    /// Routes the file held.
    pub loaded: usize,
    /// Configured routes now (connected ones not counted).
    pub routes: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NeighbourAdd(pub NeighbourConfig);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighbourDel {
    pub ip: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortEnable {
    pub port: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortDisable {
    pub port: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortEnabled {
    pub generation: u64,
    /// Whether the device's link followed (vdevs may not support it).
    pub link_changed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortImpair {
    pub port: String,
    /// netem syntax: delay TIME [JITTER], loss PCT, rate RATE, limit PACKETS; "none".
    pub netem: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Impaired {
    pub generation: u64,
    pub impair: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleared {
    pub cleared: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsText {
    /// The Prometheus text /metrics serves.
    pub text: String,
}

/// Largest `count` of a capture.
pub const CAPTURE_MAX: u64 = 10_000_000;
/// Longest `timeout_s` of a capture (default 10).
pub const CAPTURE_TIMEOUT_MAX_S: f64 = 300.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    pub port: String,
    /// "rx" (default) or "tx".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// 1 to CAPTURE_MAX packets.
    pub count: u64,
    /// Absolute path of the pcap file.
    pub out: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Captured {
    pub port: String,
    pub direction: String,
    pub packets: usize,
    pub requested: usize,
    pub complete: bool,
    /// Why it ended: `count`, `timeout` or `stopped` (the switch stopped).
    pub ended: String,
    /// Copies of the port's packets dropped before they reached the file
    /// (the capture queue full, or no mbuf for the copy), which the file
    /// would have held: its gaps.
    pub missed: u64,
    pub out: String,
}

command!(ShowVersion, "show_version", Version);
command!(ShowConfig, "show_config", Config);
command!(ShowPorts, "show_ports", Vec<PortView>);
command!(ShowWorkers, "show_workers", Vec<WorkerView>);
command!(ShowCounters, "show_counters", CountersView);
command!(ShowDrops, "show_drops", DropsView);
command!(ShowFlows, "show_flows", Vec<FlowView>);
command!(ShowMacs, "show_macs", Vec<MacView>);
command!(ShowRoutes, "show_routes", Vec<RouteView>);
command!(ShowNeighbours, "show_neighbours", Vec<NeighbourView>);
command!(FlowAdd, "flow_add", Generation);
command!(FlowDel, "flow_del", Generation);
command!(RouteAdd, "route_add", Generation);
command!(RouteDel, "route_del", Generation);
command!(RouteLoad, "route_load", RoutesLoaded);
command!(RouteGet, "route_get", RouteLookup);
command!(NeighbourAdd, "neighbour_add", Generation);
command!(NeighbourDel, "neighbour_del", Generation);
command!(PortEnable, "port_enable", PortEnabled);
command!(PortDisable, "port_disable", PortEnabled);
command!(PortImpair, "port_impair", Impaired);
command!(ClearCounters, "clear_counters", Cleared);
command!(Metrics, "metrics", MetricsText);
command!(Capture, "capture", Captured);

/// The switch's counters when it stops (`intswitch --json`'s output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalCounters {
    pub name: String,
    pub mode: String,
    pub ports: Vec<PortView>,
    pub drops: BTreeMap<String, u64>,
    pub total_drops: u64,
    pub events: BTreeMap<String, u64>,
    pub neighbours: Vec<NeighbourView>,
    pub resolution: ResolutionCounters,
    pub flows_in_use: u64,
    pub macs_in_use: u64,
    pub table_generation: u64,
    pub mempool_in_use: u64,
    /// Packet buffers still taken once every worker stopped, every queue
    /// was emptied and every port closed: 0 unless mbufs leaked.
    #[serde(default)]
    pub mempool_in_use_at_exit: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int_reports: Option<crate::int::api::ReportsView>,
    /// The analytics export (flow records, events, their delivery delay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int_analytics: Option<crate::int::analytics::api::FlowExportView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ampm_export: Option<crate::ampm::api::AmpmExportView>,
}
