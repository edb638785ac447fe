//! The `[int]` section: INT domain, watchlist and report collectors. Watch
//! rules are converted by the same function whether they come from the file
//! or from `intctl int watch add`.

use std::net::{IpAddr, SocketAddr};

use dataplane::counters::MAX_PORTS;
use dataplane::int::stage::REPORT_MAX;
use dataplane::int::watch::{IntSpec, Presence, ReportParams, Role, SourceParams, Ternary, WatchRule};
use dataplane::wire::int_md::instr;
use serde::{Deserialize, Serialize};

use crate::collector_tx::CollectorPlan;
use crate::fields::{parse_prefix, parse_proto, parse_unicast_mac, port_by_name, ConfigError};
use crate::int::analytics::config::{AnalyticsConfig, AnalyticsPlan};
use dataplane::int::analytics::detect::MAX_RULES;

/// Longest per-flow report interval: a day (in TSC ticks it stays far
/// below 2^64 at any clock rate).
pub const MAX_REPORT_FLOW_INTERVAL_MS: u64 = 86_400_000;

fn cerr(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: key.into(), reason: reason.into() }
}

/// Instruction names, in bitmap order (INT v2.1 bits 0-8).
pub const INSTRUCTIONS: [(&str, u16); 9] = [
    ("node_id", instr::NODE_ID),
    ("l1_ports", instr::L1_PORTS),
    ("hop_latency", instr::HOP_LATENCY),
    ("queue", instr::QUEUE),
    ("ingress_ts", instr::INGRESS_TS),
    ("egress_ts", instr::EGRESS_TS),
    ("l2_ports", instr::L2_PORTS),
    ("tx_util", instr::TX_UTIL),
    ("buffer", instr::BUFFER),
];

pub fn instruction_names(bitmap: u16) -> Vec<String> {
    let mut v: Vec<String> = INSTRUCTIONS.iter().filter(|(_, b)| bitmap & b != 0).map(|(n, _)| n.to_string()).collect();
    if bitmap & instr::RESERVED != 0 {
        v.push(format!("reserved:{:#06x}", bitmap & instr::RESERVED));
    }
    v
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IntConfig {
    /// This switch's INT node ID (group header and node_id metadata).
    pub node_id: u32,
    /// How INT packets are recognised: "udp_port" (NPT 1 for UDP, NPT 2
    /// with an inserted UDP header otherwise) or "dscp" (NPT 0, TCP and UDP).
    #[serde(default = "default_presence")]
    pub presence: String,
    /// The INT destination port (presence "udp_port"; default 17768).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_port: Option<u16>,
    /// Presence "dscp": DSCP & dscp_mask == dscp_value marks INT. A
    /// codepoint (0x17, mask 0x3f, the default) or one bit (e.g. 0x01/0x01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp_value: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp_mask: Option<u8>,
    /// Ports at the edge of the INT domain: flows enter (source) and leave
    /// (sink) through them. The others are core ports.
    #[serde(default)]
    pub edge_ports: Vec<String>,
    /// The source pushes its own metadata.
    #[serde(default = "yes")]
    pub source_pushes: bool,
    /// Packets that carry INT and leave by a core port get this node's hop
    /// (false: they pass untouched unless a watch rule says transit; a
    /// node of an INT-label domain that takes no part in classic INT).
    #[serde(default = "yes")]
    pub transit: bool,
    /// A push that does not fit the egress MTU: "flag" (set M) or "report"
    /// (export an intermediate report with the I flag and strip the stack).
    #[serde(default = "default_mtu_exceeded")]
    pub mtu_exceeded: String,
    /// Sink metadata in each report (RepMdBits), by instruction name.
    #[serde(default = "default_report_md")]
    pub report_md: Vec<String>,
    /// Inner packet bytes kept in a report (the INT stack always stays in).
    #[serde(default = "default_truncate")]
    pub report_truncate: usize,
    /// At most one report per flow this often; 0: every packet.
    #[serde(default)]
    pub report_flow_interval_ms: u64,
    /// Entries of each worker's per-flow report-interval cache (8 ways),
    /// with a report interval and without `[int.analytics]` (whose cache
    /// keeps the interval then); default 65536.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_filter_slots: Option<usize>,
    /// UDP payload bytes per report packet (several reports are batched).
    #[serde(default = "default_max_packet")]
    pub report_max_packet: usize,
    /// Records each worker's report ring holds.
    #[serde(default = "default_ring")]
    pub ring_size: usize,
    /// Telemetry Report hw_id (6 bits).
    #[serde(default)]
    pub hw_id: u8,
    #[serde(default)]
    pub watch: Vec<WatchConfig>,
    #[serde(default)]
    pub collector: Vec<CollectorConfig>,
    /// The sink's flow cache and its export (absent: off).
    pub analytics: Option<AnalyticsConfig>,
    /// Per-flow detection rules (need `[int.analytics]`).
    #[serde(default)]
    pub detect: Vec<crate::int::analytics::detect::DetectConfig>,
    /// Named CNF expressions for `cnf` detection rules.
    #[serde(default)]
    pub expr: Vec<crate::int::analytics::detect::ExprConfig>,
}

fn yes() -> bool {
    true
}
fn default_presence() -> String {
    "udp_port".into()
}
/// The INT domain's UDP port where `udp_port` is not given (gen-traffic's too).
pub const DEFAULT_UDP_PORT: u16 = 17768;

/// The presence `method` with its keys (`k` names them in their section),
/// each given only where the method reads it: a DSCP given to a domain
/// recognised by UDP port (or the reverse) would be taken and never
/// matched. Keys not given take the defaults: port 17768, DSCP 0x17/0x3f.
pub fn presence_of(
    k: impl Fn(&str) -> String,
    method: &str,
    udp_port: Option<u16>,
    dscp_value: Option<u8>,
    dscp_mask: Option<u8>,
) -> Result<Presence, ConfigError> {
    let why = |of: &str| format!("applies to presence = \"{of}\", not \"{method}\"");
    match method {
        "udp_port" => {
            let dscp = [(&*k("dscp_value"), dscp_value.is_some()), (&*k("dscp_mask"), dscp_mask.is_some())];
            crate::fields::refuse_given(&dscp, why("dscp"))?;
            match udp_port.unwrap_or(DEFAULT_UDP_PORT) {
                0 => Err(cerr(k("udp_port"), "must be 1-65535")),
                port => Ok(Presence::UdpPort(port)),
            }
        }
        "dscp" => {
            crate::fields::refuse_given(&[(&k("udp_port"), udp_port.is_some())], why("udp_port"))?;
            dscp_presence((&k("dscp_value"), &k("dscp_mask")), dscp_value.unwrap_or(0x17), dscp_mask.unwrap_or(0x3f))
        }
        p => Err(cerr(k("presence"), format!("'{p}' is not one of udp_port, dscp"))),
    }
}

/// Checks a DSCP presence value/mask pair; errors name `keys` (value, mask).
pub fn dscp_presence(keys: (&str, &str), value: u8, mask: u8) -> Result<Presence, ConfigError> {
    if mask == 0 || mask > 0x3f {
        return Err(cerr(keys.1, format!("{mask:#x} must be 0x01..=0x3f (six DSCP bits)")));
    }
    if value & !mask != 0 {
        return Err(cerr(keys.0, format!("{value:#x} has bits outside the mask {mask:#x}")));
    }
    if value == 0 {
        return Err(cerr(keys.0, "0 would mark every unclassified packet as INT; pick a reserved codepoint or bit"));
    }
    Ok(Presence::Dscp { value, mask })
}

fn default_mtu_exceeded() -> String {
    "flag".into()
}
fn default_report_md() -> Vec<String> {
    ["l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts"].map(String::from).to_vec()
}
fn default_truncate() -> usize {
    256
}
fn default_max_packet() -> usize {
    1472
}
fn default_ring() -> usize {
    4096
}
/// `report_filter_slots` when not given.
const DEFAULT_FILTER_SLOTS: usize = 65536;

/// One watchlist rule (file entry and API argument).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WatchConfig {
    pub name: String,
    #[serde(default)]
    pub priority: u32,
    /// "source", "transit", "sink" or "none".
    pub role: String,
    /// Prefixes ("10.0.0.0/8"); both present must be of one family.
    pub src: Option<String>,
    pub dst: Option<String>,
    /// Name or number.
    pub proto: Option<toml::Value>,
    /// A number or "VALUE/MASK" (e.g. "0x1380/0xfff0").
    pub src_port: Option<toml::Value>,
    pub dst_port: Option<toml::Value>,
    /// DSCP (0-63) or "VALUE/MASK".
    pub dscp: Option<toml::Value>,
    pub in_port: Option<String>,
    /// Source role: instruction names, or `bitmap` as a number.
    pub instructions: Option<Vec<String>>,
    pub bitmap: Option<u16>,
    pub max_hops: Option<u8>,
    pub domain_id: Option<u16>,
}

/// A `WatchConfig` of `role` from a config entry with the watch rule's
/// match fields (`name`, `priority`, `src`, `dst`, `proto`, `src_port`,
/// `dst_port`, `dscp`, `in_port`): detection rules, AM-PM flows and label
/// rules match packets with the one parser of `[[int.watch]]`.
macro_rules! match_rule {
    ($c:expr, $role:expr) => {
        $crate::int::config::WatchConfig {
            name: $c.name.clone(),
            priority: $c.priority,
            role: ($role).into(),
            src: $c.src.clone(),
            dst: $c.dst.clone(),
            proto: $c.proto.clone(),
            src_port: $c.src_port.clone(),
            dst_port: $c.dst_port.clone(),
            dscp: $c.dscp.clone(),
            in_port: $c.in_port.clone(),
            instructions: None,
            bitmap: None,
            max_hops: None,
            domain_id: None,
        }
    };
}
pub(crate) use match_rule;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollectorConfig {
    /// "ADDR:PORT" the reports go to.
    pub address: String,
    /// Local "ADDR:PORT" to send from (default: any; through a port: the
    /// port's first address of the family and source port 32766).
    pub bind: Option<String>,
    /// Send through this DPDK port instead of a kernel UDP socket.
    pub port: Option<String>,
    /// Destination MAC through `port` (default: the neighbour table's entry
    /// for `address`, resolved by ARP / ND in router mode).
    pub mac: Option<String>,
}

/// The validated collectors of a section's `[[SECTION.collector]]` entries.
/// `mtu`: each port's MTU (IP bytes), `max_payload`: the largest datagram.
pub fn collector_plans(
    section: &str,
    list: &[CollectorConfig],
    ports: &[String],
    mtu: &[u16],
    max_payload: usize,
) -> Result<Vec<CollectorPlan>, ConfigError> {
    let mut collectors = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let ck = |f: &str| format!("{section}.collector[{i}].{f}");
        let addr: SocketAddr =
            c.address.parse().map_err(|_| cerr(ck("address"), format!("'{}' is not ADDR:PORT", c.address)))?;
        let bind = c
            .bind
            .as_deref()
            .map(|b| b.parse::<SocketAddr>().map_err(|_| cerr(ck("bind"), format!("'{b}' is not ADDR:PORT"))))
            .transpose()?;
        let port = c.port.as_deref().map(|p| port_by_name(ports, &ck("port"), p)).transpose()?;
        let mac = match (&c.mac, port) {
            (Some(_), None) => return Err(cerr(ck("mac"), "only with port (a kernel socket resolves by itself)")),
            (Some(m), Some(_)) => Some(parse_unicast_mac(m).map_err(|e| cerr(ck("mac"), e))?),
            (None, _) => None,
        };
        if let Some(p) = port {
            let headers = if addr.is_ipv6() { 48 } else { 28 };
            let m = mtu.get(p as usize).copied().unwrap_or(1500) as usize;
            if max_payload + headers > m {
                return Err(cerr(
                    ck("port"),
                    format!("datagrams of {max_payload} bytes + {headers} header bytes exceed the port's MTU {m}"),
                ));
            }
            if bind.is_some_and(|b| b.is_ipv6() != addr.is_ipv6()) {
                return Err(cerr(ck("bind"), "must be of the address's family"));
            }
        }
        collectors.push(CollectorPlan { addr, bind, port, mac });
    }
    Ok(collectors)
}

/// The validated `[int]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntPlan {
    pub spec: IntSpec,
    pub collectors: Vec<CollectorPlan>,
    pub ring_size: usize,
    pub hw_id: u8,
    pub max_packet: usize,
    /// Report interval in ms (the spec holds it in TSC ticks, set at start).
    pub flow_interval_ms: u64,
    /// Entries of each worker's report-interval cache (1 without an
    /// interval; with analytics, the analytics cache keeps the interval).
    pub filter_slots: usize,
    pub analytics: Option<AnalyticsPlan>,
    /// `[[int.expr]]`: name -> expression (normalised), for `cnf` rules.
    pub exprs: std::collections::BTreeMap<String, String>,
}

/// Expressions a switch holds at most.
pub const MAX_EXPRS: usize = 64;

/// The bitmap of instruction names (any of INSTRUCTIONS).
pub fn instruction_bits(names: &[String]) -> Result<u16, String> {
    instructions("", names, true).map_err(|e| e.reason)
}

fn instructions(key: &str, names: &[String], allow_node: bool) -> Result<u16, ConfigError> {
    let mut b = 0;
    for n in names {
        match INSTRUCTIONS.iter().find(|(x, _)| x == n) {
            Some((_, bit)) if *bit == instr::NODE_ID && !allow_node => {
                return Err(cerr(key, "node_id is in the report's group header, not in report metadata"))
            }
            Some((_, bit)) => b |= bit,
            None => {
                let all: Vec<&str> = INSTRUCTIONS.iter().map(|(n, _)| *n).collect();
                return Err(cerr(key, format!("unknown instruction '{n}' (one of {})", all.join(", "))));
            }
        }
    }
    Ok(b)
}

fn ternary16(key: &str, v: &toml::Value, max: u32) -> Result<Ternary<u16>, ConfigError> {
    let num = |s: &str| -> Result<u32, ConfigError> {
        let s = s.trim();
        let r = match s.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16),
            None => s.parse(),
        };
        r.ok().filter(|n| *n <= max).ok_or_else(|| cerr(key, format!("'{s}' is not a number 0..={max}")))
    };
    let (value, mask) = match v {
        toml::Value::Integer(n) if (0..=max as i64).contains(n) => (*n as u32, max),
        toml::Value::String(s) => match s.split_once('/') {
            Some((a, m)) => (num(a)?, num(m)?),
            None => (num(s)?, max),
        },
        _ => return Err(cerr(key, format!("expected a number 0..={max} or \"VALUE/MASK\""))),
    };
    Ok(Ternary { value: value as u16, mask: mask as u16 })
}

fn prefix(key: &str, s: &str) -> Result<(u8, Ternary<u128>), ConfigError> {
    let (ip, len) = parse_prefix(s).map_err(|e| cerr(key, e))?;
    Ok(match ip {
        IpAddr::V4(a) => {
            let mask = if len == 0 { 0 } else { (u32::MAX << (32 - len as u32)) as u128 };
            let mask = mask | if len == 0 { 0 } else { u128::MAX << 32 };
            (4, Ternary { value: dataplane::int::watch::mapped_v4(u32::from(a)), mask })
        }
        IpAddr::V6(a) => {
            let mask = if len == 0 { 0 } else { u128::MAX << (128 - len as u32) };
            (6, Ternary { value: u128::from(a), mask })
        }
    })
}

impl WatchConfig {
    pub fn to_rule(&self, ports: &[String]) -> Result<WatchRule, ConfigError> {
        crate::fields::check_name("name", &self.name)?;
        let source_keys = self.instructions.is_some() || self.bitmap.is_some();
        let role = match self.role.as_str() {
            "source" => {
                let bitmap = match (&self.instructions, self.bitmap) {
                    (Some(_), Some(_)) => return Err(cerr("bitmap", "give instructions or bitmap, not both")),
                    (Some(n), None) => instructions("instructions", n, true)?,
                    (None, Some(b)) => b,
                    (None, None) => return Err(cerr("instructions", "a source rule needs instructions or bitmap")),
                };
                if bitmap == 0 {
                    return Err(cerr("instructions", "must select at least one instruction"));
                }
                if bitmap & instr::CHECKSUM_COMPLEMENT != 0 {
                    return Err(cerr("bitmap", "bit 15 (checksum complement) is not supported: checksums are updated"));
                }
                let max_hops = self.max_hops.unwrap_or(8);
                if max_hops == 0 {
                    return Err(cerr("max_hops", "must be at least 1"));
                }
                Role::Source(SourceParams { bitmap, max_hops, domain_id: self.domain_id.unwrap_or(0) })
            }
            r @ ("transit" | "sink" | "none") => {
                if source_keys || self.max_hops.is_some() || self.domain_id.is_some() {
                    return Err(cerr(
                        "role",
                        format!("instructions/bitmap/max_hops/domain_id only apply to source, not {r}"),
                    ));
                }
                match r {
                    "transit" => Role::Transit,
                    "sink" => Role::Sink,
                    _ => Role::None,
                }
            }
            r => return Err(cerr("role", format!("'{r}' is not one of source, transit, sink, none"))),
        };
        let mut rule = WatchRule::any(&self.name, role);
        rule.priority = self.priority;
        if let Some(s) = &self.src {
            (rule.ip_version, rule.src) = prefix("src", s)?;
        }
        if let Some(d) = &self.dst {
            let (v, t) = prefix("dst", d)?;
            if rule.ip_version != 0 && rule.ip_version != v {
                return Err(cerr("dst", "src and dst are of different IP versions"));
            }
            (rule.ip_version, rule.dst) = (v, t);
        }
        if let Some(p) = &self.proto {
            rule.proto = Ternary::exact(parse_proto(p).map_err(|e| cerr("proto", e))?);
        }
        if let Some(p) = &self.src_port {
            rule.src_port = ternary16("src_port", p, 0xffff)?;
        }
        if let Some(p) = &self.dst_port {
            rule.dst_port = ternary16("dst_port", p, 0xffff)?;
        }
        if let Some(d) = &self.dscp {
            let t = ternary16("dscp", d, 0x3f)?;
            rule.dscp = Ternary { value: t.value as u8, mask: t.mask as u8 };
        }
        if let Some(p) = &self.in_port {
            rule.in_port = Some(port_by_name(ports, "in_port", p)?);
        }
        Ok(rule)
    }
}

impl IntConfig {
    /// `mtu`: each port's MTU (IP bytes) by index.
    pub fn to_plan(&self, ports: &[String], mtu: &[u16]) -> Result<IntPlan, ConfigError> {
        let k = |f: &str| format!("int.{f}");
        let presence = presence_of(k, &self.presence, self.udp_port, self.dscp_value, self.dscp_mask)?;
        let mut edge = 0u32;
        for p in &self.edge_ports {
            edge |= 1 << port_by_name(ports, &k("edge_ports"), p)?;
        }
        let mtu_report = match self.mtu_exceeded.as_str() {
            "flag" => false,
            "report" => true,
            m => return Err(cerr(k("mtu_exceeded"), format!("'{m}' is not one of flag, report"))),
        };
        let md_bits = instructions(&k("report_md"), &self.report_md, false)?;
        if self.report_flow_interval_ms > MAX_REPORT_FLOW_INTERVAL_MS {
            return Err(cerr(
                k("report_flow_interval_ms"),
                format!("at most {MAX_REPORT_FLOW_INTERVAL_MS} (a day); 0 reports every packet"),
            ));
        }
        let max_slots = 1 << 22;
        let filter_slots = self.report_filter_slots.unwrap_or(DEFAULT_FILTER_SLOTS);
        if filter_slots > max_slots || !filter_slots.is_power_of_two() {
            return Err(cerr(k("report_filter_slots"), format!("must be a power of two, 1..={max_slots}")));
        }
        // The cache is sized only where it keeps something: a given size
        // it would not use is a mistake about which cache holds the flows.
        if self.report_filter_slots.is_some() {
            if self.analytics.is_some() {
                return Err(cerr(
                    k("report_filter_slots"),
                    "[int.analytics] keeps the report interval in its flow cache (cache_rows x cache_ways)",
                ));
            }
            if self.report_flow_interval_ms == 0 {
                return Err(cerr(
                    k("report_filter_slots"),
                    "sizes the report-interval cache, and report_flow_interval_ms is 0 (every packet reported)",
                ));
            }
        }
        if !(64..=REPORT_MAX).contains(&self.report_truncate) {
            return Err(cerr(k("report_truncate"), format!("must be 64..={REPORT_MAX}")));
        }
        if !(128..=65507).contains(&self.report_max_packet) {
            return Err(cerr(k("report_max_packet"), "must be 128..=65507"));
        }
        if !(2..=1 << 20).contains(&self.ring_size) {
            return Err(cerr(k("ring_size"), "must be 2..=1048576"));
        }
        if self.hw_id > 63 {
            return Err(cerr(k("hw_id"), "must be 0..=63 (6 bits)"));
        }
        let mut watch = Vec::new();
        let mut spec = IntSpec {
            node_id: self.node_id,
            presence,
            edge_ports: edge,
            mtu: [1500; MAX_PORTS],
            source_pushes: self.source_pushes,
            transit: self.transit,
            mtu_report,
            report: ReportParams { md_bits, truncate: self.report_truncate, flow_interval_tsc: 0 },
            watch: Vec::new(),
            events: Default::default(),
            detect: Default::default(),
            label_ds_id: 0,
        };
        for (i, m) in mtu.iter().enumerate().take(MAX_PORTS) {
            spec.mtu[i] = *m;
        }
        for (i, w) in self.watch.iter().enumerate() {
            let r = w.to_rule(ports).map_err(|e| cerr(format!("int.watch[{i}].{}", e.key), e.reason))?;
            if watch.contains(&r.name) {
                return Err(cerr(format!("int.watch[{i}].name"), format!("'{}' is used twice", r.name)));
            }
            watch.push(r.name.clone());
            spec.upsert(r);
        }
        let collectors = collector_plans("int", &self.collector, ports, mtu, self.report_max_packet)?;
        let analytics = self.analytics.as_ref().map(|a| a.to_plan()).transpose()?;
        spec.events = analytics.map(|a| a.events).unwrap_or_default();
        if !self.detect.is_empty() && analytics.is_none() {
            return Err(cerr("int.detect", "detection rules need [int.analytics]"));
        }
        if self.detect.len() > MAX_RULES {
            return Err(cerr("int.detect", format!("{} rules: at most {MAX_RULES}", self.detect.len())));
        }
        if self.expr.len() > MAX_EXPRS {
            return Err(cerr("int.expr", format!("{} expressions: at most {MAX_EXPRS}", self.expr.len())));
        }
        let mut exprs = std::collections::BTreeMap::new();
        for (i, x) in self.expr.iter().enumerate() {
            let c = x.parse().map_err(|e| cerr(format!("int.expr[{i}].{}", e.key), e.reason))?;
            if exprs.insert(x.name.clone(), c.text).is_some() {
                return Err(cerr(format!("int.expr[{i}].name"), format!("'{}' is used twice", x.name)));
            }
        }
        for (i, d) in self.detect.iter().enumerate() {
            let r = d.to_rule(ports, i, &exprs).map_err(|e| cerr(format!("int.detect[{i}].{}", e.key), e.reason))?;
            if spec.detect.rules.iter().any(|o| o.matcher.name == r.matcher.name) {
                return Err(cerr(format!("int.detect[{i}].name"), format!("'{}' is used twice", r.matcher.name)));
            }
            spec.detect.upsert(r);
        }
        Ok(IntPlan {
            spec,
            collectors,
            ring_size: self.ring_size,
            hw_id: self.hw_id,
            max_packet: self.report_max_packet,
            flow_interval_ms: self.report_flow_interval_ms,
            filter_slots: if self.report_flow_interval_ms > 0 { filter_slots } else { 1 },
            analytics,
            exprs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Vec<String> {
        vec!["p0".into(), "p1".into()]
    }

    fn plan(text: &str) -> Result<IntPlan, ConfigError> {
        let c: IntConfig = toml::from_str(text).map_err(|e| cerr("", e.to_string()))?;
        c.to_plan(&ports(), &[1500, 1500])
    }

    #[test]
    fn parses_a_full_section() {
        let p = plan(
            r#"
            node_id = 7
            edge_ports = ["p0"]
            report_md = ["l1_ports", "hop_latency"]
            [[watch]]
            name = "udp-to-h2"
            role = "source"
            priority = 5
            src = "10.31.1.0/24"
            dst = "10.31.2.2/32"
            proto = "udp"
            dst_port = "5000/0xff00"
            dscp = 0
            in_port = "p0"
            instructions = ["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts"]
            max_hops = 6
            [[collector]]
            address = "127.0.0.1:32766"
            "#,
        )
        .unwrap();
        assert_eq!(p.spec.edge_ports, 1);
        assert_eq!(p.spec.report.md_bits, 0x6000);
        let r = &p.spec.watch[0];
        assert_eq!(r.role, Role::Source(SourceParams { bitmap: 0xf800, max_hops: 6, domain_id: 0 }));
        assert_eq!((r.ip_version, r.in_port, r.dst_port.value, r.dst_port.mask), (4, Some(0), 5000, 0xff00));
        let j = crate::int::ops::watch_view(r, &ports());
        assert_eq!(j.src.as_deref(), Some("10.31.1.0/24"));
        assert_eq!(j.dst.as_deref(), Some("10.31.2.2/32"));
        assert_eq!(j.dst_port.as_deref(), Some("0x1388/0xff00"));
        assert_eq!(p.collectors.len(), 1);
        assert!(p.spec.transit, "a transit by default");
        let quiet = plan("node_id = 7\ntransit = false\n").unwrap();
        assert!(!quiet.spec.transit && quiet.spec.passes_all());
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("node_id = 1\nedge_ports = [\"p9\"]", "int.edge_ports"),
            ("node_id = 1\n[[watch]]\nname = \"x\"\nrole = \"source\"", "int.watch[0].instructions"),
            ("node_id = 1\n[[watch]]\nname = \"x\"\nrole = \"sink\"\nmax_hops = 3", "int.watch[0].role"),
            ("node_id = 1\n[[watch]]\nname = \"x\"\nrole = \"none\"\ndscp = 64", "int.watch[0].dscp"),
            ("node_id = 1\nreport_md = [\"node_id\"]", "int.report_md"),
            (
                "node_id = 1\n[[watch]]\nname = \"x\"\nrole = \"none\"\nsrc = \"10.0.0.0/8\"\ndst = \"::/0\"",
                "int.watch[0].dst",
            ),
            ("node_id = 1\n[[collector]]\naddress = \"nowhere\"", "int.collector[0].address"),
            (
                "node_id = 1\n[[collector]]\naddress = \"10.0.0.1:1\"\nmac = \"02:00:00:00:00:01\"",
                "int.collector[0].mac",
            ),
            ("node_id = 1\n[[collector]]\naddress = \"10.0.0.1:1\"\nport = \"p7\"", "int.collector[0].port"),
            ("node_id = 1\npresence = \"vxlan\"", "int.presence"),
            ("node_id = 1\npresence = \"dscp\"\ndscp_value = 0x21\ndscp_mask = 0x01", "int.dscp_value"),
            ("node_id = 1\npresence = \"dscp\"\ndscp_mask = 0x40", "int.dscp_mask"),
            ("node_id = 1\ndscp_value = 0x20", "int.dscp_value"),
            ("node_id = 1\ndscp_mask = 0x01", "int.dscp_mask"),
            ("node_id = 1\npresence = \"dscp\"\nudp_port = 5000", "int.udp_port"),
            ("node_id = 1\nreport_flow_interval_ms = 86400001", "int.report_flow_interval_ms"),
            ("node_id = 1\nreport_filter_slots = 1000", "int.report_filter_slots"),
            ("node_id = 1\nreport_filter_slots = 0", "int.report_filter_slots"),
            ("node_id = 1\nreport_filter_slots = 1024", "int.report_filter_slots"),
            (
                "node_id = 1\nreport_flow_interval_ms = 10\nreport_filter_slots = 1024\n[analytics]",
                "int.report_filter_slots",
            ),
        ];
        for (cfg, key) in cases {
            assert_eq!(plan(cfg).unwrap_err().key, key, "{cfg}");
        }
        assert_eq!(
            plan("node_id = 1\nreport_flow_interval_ms = 10\nreport_filter_slots = 1024").unwrap().filter_slots,
            1024
        );
        assert_eq!(plan("node_id = 1\nreport_flow_interval_ms = 10").unwrap().filter_slots, DEFAULT_FILTER_SLOTS);
        let e = plan("node_id = 1\nreport_max_packet = 1480\n[[collector]]\naddress = \"10.0.0.1:1\"\nport = \"p1\"")
            .unwrap_err();
        assert!(e.key == "int.collector[0].port" && e.reason.contains("MTU 1500"), "{e:?}");
        let p =
            plan("node_id = 1\n[[collector]]\naddress = \"10.0.0.1:1\"\nport = \"p1\"\nmac = \"02:00:00:00:00:01\"");
        assert_eq!(p.unwrap().collectors[0].mac, Some([2, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn presence_methods() {
        assert_eq!(plan("node_id = 1").unwrap().spec.presence, Presence::UdpPort(17768));
        let p = plan("node_id = 1\npresence = \"dscp\"").unwrap();
        assert_eq!(p.spec.presence, Presence::Dscp { value: 0x17, mask: 0x3f });
        let p = plan("node_id = 1\npresence = \"dscp\"\ndscp_value = 0x20\ndscp_mask = 0x20").unwrap();
        assert_eq!(p.spec.presence, Presence::Dscp { value: 0x20, mask: 0x20 });
    }
}
