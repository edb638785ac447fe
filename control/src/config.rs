//! The TOML configuration: parsing (unknown keys rejected) and validation
//! into typed values. Every error names the key and the reason.

use std::collections::HashSet;
use std::net::IpAddr;

use dataplane::flow_table::FlowAction;
use dataplane::parse::FlowKey;
use dataplane::tables::{Mode, NeighbourSpec, RouteSpec, StaticMac, TableSpec};
use serde::{Deserialize, Serialize};

use crate::fields::{cerr, on_link, parse_host_ip, parse_ip, parse_network, refuse_given};
pub use crate::fields::{
    check_name, format_mac, parse_mac, parse_positive_seconds, parse_prefix, parse_proto, parse_proto_name,
    parse_seconds, parse_u16_any, parse_u8_any, parse_unicast_mac, port_by_name, ConfigError, MAX_NAME_LEN,
};

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Instance name (used for the EAL file prefix default and, later, the socket).
    pub name: String,
    /// "xconnect", "bridge" or "router".
    pub mode: String,
    #[serde(default)]
    pub eal: EalConfig,
    #[serde(default)]
    pub dataplane: DataplaneConfig,
    #[serde(default)]
    pub flow_table: FlowTableConfig,
    #[serde(default)]
    pub bridge: BridgeConfig,
    #[serde(default)]
    pub control: ControlConfig,
    #[serde(default, rename = "port")]
    pub ports: Vec<PortConfig>,
    #[serde(default, rename = "worker")]
    pub workers: Vec<WorkerConfig>,
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    /// Routes from a text file, one `PREFIX PORT [VIA]` a line (a full
    /// Internet table does not fit TOML); relative to the config's
    /// directory. `[[route]]` entries win over the file's for a prefix.
    #[serde(default)]
    pub routes_file: Option<String>,
    #[serde(default, rename = "neighbour")]
    pub neighbours: Vec<NeighbourConfig>,
    #[serde(default, rename = "flow")]
    pub flows: Vec<FlowConfig>,
    /// INT domain, watchlist and report collectors (absent: INT off).
    #[serde(default)]
    pub int: Option<crate::int::config::IntConfig>,
    /// AM-PM measurement point: timing, monitored flows, collectors (absent: off).
    #[serde(default)]
    pub ampm: Option<crate::ampm::config::AmpmConfig>,
    /// GPINT probes and SQR clone buffers (absent: off).
    #[serde(default)]
    pub gpint: Option<crate::gpint::config::GpintConfig>,
    /// INT-label domain (absent: off).
    pub label: Option<crate::label::config::LabelConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EalConfig {
    pub lcores: String,
    pub memory_mb: Option<u32>,
    pub huge: bool,
    pub pci: bool,
    pub file_prefix: Option<String>,
    pub log_level: Option<String>,
    pub extra: Vec<String>,
}

impl Default for EalConfig {
    fn default() -> Self {
        EalConfig {
            lcores: "0-1".into(),
            memory_mb: Some(512),
            huge: false,
            pci: false,
            file_prefix: None,
            log_level: Some("notice".into()),
            extra: vec![],
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DataplaneConfig {
    pub mbufs: u32,
    pub mbuf_cache: u32,
    /// Mempool driver of the packet pool ("ring_mp_mc", "stack", ...).
    pub mempool_ops: String,
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub burst: usize,
    pub tx_drain_us: u64,
    pub idle: bool,
    /// With `idle`: empty polls before sleeping (default 256).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_empty_polls: Option<u32>,
    /// With `idle`: microseconds a sleep (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_sleep_us: Option<u32>,
}

impl DataplaneConfig {
    pub fn idle_empty_polls(&self) -> u32 {
        self.idle_empty_polls.unwrap_or(256)
    }

    pub fn idle_sleep_us(&self) -> u32 {
        self.idle_sleep_us.unwrap_or(100)
    }
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            mbufs: 16383,
            mbuf_cache: 256,
            mempool_ops: "ring_mp_mc".into(),
            rx_desc: 1024,
            tx_desc: 1024,
            burst: 64,
            tx_drain_us: 100,
            idle: false,
            idle_empty_polls: None,
            idle_sleep_us: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FlowTableConfig {
    pub capacity: usize,
    pub idle_timeout_s: u64,
    pub learn: bool,
    /// Mixed into the flow and MAC tables' hashes; 0: a random one per
    /// process (a fixed one makes runs repeatable, and collisions craftable).
    pub hash_seed: u64,
}

impl Default for FlowTableConfig {
    fn default() -> Self {
        FlowTableConfig { capacity: 65536, idle_timeout_s: 60, learn: false, hash_seed: 0 }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BridgeConfig {
    /// Learned addresses a worker holds (default 16384).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac_capacity: Option<usize>,
    /// Seconds a learned address stays without a frame from it (default 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aging_s: Option<u64>,
    /// `[[bridge.static_mac]]`: addresses pinned to a port.
    pub static_mac: Vec<StaticMacConfig>,
}

impl BridgeConfig {
    pub fn mac_capacity(&self) -> usize {
        self.mac_capacity.unwrap_or(16384)
    }

    pub fn aging_s(&self) -> u64 {
        self.aging_s.unwrap_or(300)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticMacConfig {
    pub mac: String,
    pub port: String,
    #[serde(default)]
    pub vlan: u16,
}

impl StaticMacConfig {
    pub fn to_spec(&self, ports: &[String]) -> Result<StaticMac, ConfigError> {
        let mac = parse_mac(&self.mac).map_err(|e| cerr("mac", e))?;
        if mac[0] & 1 != 0 {
            return Err(cerr("mac", format!("'{}' is a group address; only unicast addresses are pinned", self.mac)));
        }
        if self.vlan > 4095 {
            return Err(cerr("vlan", format!("{} is not a VLAN ID (0-4095)", self.vlan)));
        }
        Ok(StaticMac { vlan: self.vlan, mac, port: port_by_name(ports, "port", &self.port)? })
    }
}

/// The control socket and the metrics endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// Unix socket path; default /run/intswitch/<name>.sock.
    pub socket: Option<String>,
    /// Prometheus endpoint "ADDR:PORT" ("" disables); default 127.0.0.1:9417.
    pub metrics: Option<String>,
}

impl ControlConfig {
    pub fn socket_path(&self, name: &str) -> String {
        self.socket.clone().unwrap_or_else(|| format!("/run/intswitch/{name}.sock"))
    }

    pub fn metrics_addr(&self) -> Option<String> {
        match self.metrics.as_deref() {
            None => Some("127.0.0.1:9417".into()),
            Some("") => None,
            Some(a) => Some(a.to_string()),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    pub name: String,
    /// A vdev string ("net_pcap0,rx_pcap=in.pcap") or a PCI address.
    pub device: String,
    pub mtu: Option<u16>,
    #[serde(default = "yes")]
    pub promiscuous: bool,
    #[serde(default = "yes")]
    pub rss: bool,
    /// Let the device verify received IPv4 header checksums where it can.
    #[serde(default = "yes")]
    pub rx_checksum_offload: bool,
    pub mac: Option<String>,
    #[serde(default)]
    pub ipv4: Vec<String>,
    #[serde(default)]
    pub ipv6: Vec<String>,
    /// Cross-connect peer port name.
    pub peer: Option<String>,
    /// Link emulation on this port's egress, in netem syntax
    /// ("delay 2ms 100us loss 1% rate 100mbit limit 1000").
    pub impair: Option<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    pub lcore: u32,
    /// "port:queue" entries this worker polls.
    pub rx: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub prefix: String,
    pub port: String,
    pub via: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NeighbourConfig {
    pub ip: String,
    pub mac: String,
    pub port: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FlowConfig {
    pub in_port: String,
    pub src: String,
    pub dst: String,
    /// "udp", "tcp", "icmp", "icmpv6" or a number.
    pub proto: toml::Value,
    #[serde(default)]
    pub src_port: u16,
    #[serde(default)]
    pub dst_port: u16,
    #[serde(default)]
    pub vlan: u16,
    /// "normal", "drop" or "forward:PORT".
    pub action: String,
}

/// A validated port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPlan {
    pub name: String,
    pub device: String,
    pub is_pci: bool,
    pub mtu: Option<u16>,
    pub promiscuous: bool,
    pub rss: bool,
    pub rx_checksum_offload: bool,
    pub mac: Option<[u8; 6]>,
    pub ipv4: Vec<([u8; 4], u8)>,
    pub ipv6: Vec<([u8; 16], u8)>,
    pub peer: Option<u16>,
    pub enabled: bool,
    pub impair: dataplane::impair::Impairment,
}

impl PortPlan {
    /// The data path's view of the port, with the MAC the device has.
    pub fn port_state(&self, mac: [u8; 6]) -> dataplane::tables::PortState {
        dataplane::tables::PortState {
            name: self.name.clone(),
            mac,
            up: self.enabled,
            ipv4: self.ipv4.clone(),
            ipv6: self.ipv6.clone(),
            impair: self.impair,
            // Set from the opened device (`Port::rx_checksum_active`).
            nic_checks_ipv4: false,
        }
    }
}

/// A validated worker: its lcore and (port index, queue) list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPlan {
    pub lcore: u32,
    pub rx: Vec<(u16, u16)>,
}

/// The configuration after validation, in the types the switch uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub raw: Config,
    pub mode: Mode,
    pub ports: Vec<PortPlan>,
    /// Empty: one worker on the first worker lcore polls queue 0 of every port.
    pub workers: Vec<WorkerPlan>,
    pub routes: Vec<RouteSpec>,
    pub neighbours: Vec<NeighbourSpec>,
    pub static_macs: Vec<StaticMac>,
    pub flows: Vec<(FlowKey, FlowAction)>,
    pub int: Option<crate::int::config::IntPlan>,
    pub ampm: Option<crate::ampm::config::AmpmPlan>,
    pub gpint: Option<crate::gpint::config::GpintPlan>,
    pub label: Option<crate::label::config::LabelPlan>,
}

impl Plan {
    /// Learned MAC entries a worker's table holds: a bridge's `[bridge]
    /// mac_capacity`; the other modes learn none, so their table holds one.
    pub fn mac_capacity(&self) -> usize {
        if self.mode == Mode::Bridge {
            self.raw.bridge.mac_capacity()
        } else {
            1
        }
    }

    /// The forwarding state the plan describes, for ports whose devices
    /// have `port_macs` (in port order), with INT report intervals in ticks
    /// of a `tsc_hz` clock.
    pub fn table_spec(&self, port_macs: &[[u8; 6]], tsc_hz: u64) -> TableSpec {
        let mut spec = TableSpec {
            mode: self.mode,
            ports: self.ports.iter().zip(port_macs).map(|(p, mac)| p.port_state(*mac)).collect(),
            xconnect: self.ports.iter().map(|p| p.peer).collect(),
            routes: Default::default(),
            neighbours: Vec::new(),
            static_macs: self.static_macs.clone(),
            int: self.int.as_ref().map(|ip| {
                let mut is = ip.spec.clone();
                is.report.flow_interval_tsc = ip.flow_interval_ms * tsc_hz.max(1) / 1000;
                is.detect.set_clock(tsc_hz.max(1));
                is
            }),
            ampm: self.ampm.as_ref().map(|a| a.setup.clone()),
            gpint: match (&self.gpint, &self.int) {
                (Some(g), Some(i)) => Some(g.spec(i, tsc_hz)),
                _ => None,
            },
            label: self.label.as_ref().map(|l| l.spec(tsc_hz)),
        };
        spec.routes.set(&self.routes);
        for n in &self.neighbours {
            spec.upsert_neighbour(*n);
        }
        spec
    }
}

/// The routes of a routes file (`PREFIX PORT [VIA]` lines, `#` comments),
/// in file order, for ports named `names`; an error names `key`, the file
/// and the line.
pub fn read_routes_file(path: &str, names: &[String], key: &str) -> Result<Vec<RouteSpec>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| cerr(key, format!("cannot read {path}: {e}")))?;
    let mut routes = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split('#').next().unwrap_or("").split_whitespace().collect();
        let at = |e: ConfigError| cerr(key, format!("{path} line {}: {}: {}", n + 1, e.key, e.reason));
        let r = match words[..] {
            [] => continue,
            [prefix, port] => RouteConfig { prefix: prefix.into(), port: port.into(), via: None },
            [prefix, port, via] => RouteConfig { prefix: prefix.into(), port: port.into(), via: Some(via.into()) },
            _ => return Err(at(cerr("line", "need PREFIX PORT [VIA]"))),
        };
        routes.push(r.to_spec(names).map_err(at)?);
    }
    Ok(routes)
}

/// What names a port's device to DPDK: a vdev's name (before its
/// arguments), or a PCI address with its domain.
fn device_id(dev: &str) -> String {
    let d = dev.split(',').next().unwrap_or("").trim().to_ascii_lowercase();
    match is_pci(&d) && d.matches(':').count() == 1 {
        true => format!("0000:{d}"),
        false => d,
    }
}

fn is_pci(dev: &str) -> bool {
    // dddd:bb:dd.f or bb:dd.f
    let d = dev.split(',').next().unwrap_or("");
    let parts: Vec<&str> = d.split(':').collect();
    (parts.len() == 2 || parts.len() == 3)
        && d.contains('.')
        && d.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| cerr("", e.to_string().trim_end().to_string()))
    }

    pub fn load(path: &str) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| cerr("", format!("cannot read config {path}: {e}")))?;
        let mut c = Config::from_toml(&text).map_err(|e| cerr(e.key, format!("{path}: {}", e.reason)))?;
        if let Some(f) = c.routes_file.as_mut().filter(|f| !std::path::Path::new(f.as_str()).is_absolute()) {
            let dir = std::path::Path::new(path).parent().unwrap_or(std::path::Path::new(""));
            *f = dir.join(&*f).to_string_lossy().into_owned();
        }
        Ok(c)
    }

    /// The routes of `routes_file`, in file order.
    fn file_routes(&self, names: &[String]) -> Result<Vec<RouteSpec>, ConfigError> {
        let Some(path) = &self.routes_file else { return Ok(Vec::new()) };
        read_routes_file(path, names, "routes_file")
    }

    /// Checks everything that can be checked before DPDK starts.
    pub fn validate(&self) -> Result<Plan, ConfigError> {
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(cerr("name", "must be non-empty letters, digits, '-' or '_'"));
        }
        let mode = match self.mode.as_str() {
            "xconnect" => Mode::CrossConnect,
            "bridge" => Mode::Bridge,
            "router" => Mode::Router,
            m => return Err(cerr("mode", format!("'{m}' is not one of xconnect, bridge, router"))),
        };
        let d = &self.dataplane;
        if d.burst == 0 || d.burst > dataplane::dpdk::MAX_BURST {
            return Err(cerr("dataplane.burst", format!("must be 1..={}", dataplane::dpdk::MAX_BURST)));
        }
        if d.mbufs < 1024 {
            return Err(cerr("dataplane.mbufs", "must be at least 1024"));
        }
        // DPDK's RTE_MEMPOOL_OPS_NAMESIZE is 32 with the NUL; whether the
        // driver exists is known once EAL has loaded its plugins (start).
        let ops = &d.mempool_ops;
        if ops.is_empty() || ops.len() > 31 || !ops.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(cerr(
                "dataplane.mempool_ops",
                format!("'{ops}' is not a mempool driver name (e.g. ring_mp_mc, stack)"),
            ));
        }
        if d.tx_drain_us > 1_000_000 {
            return Err(cerr("dataplane.tx_drain_us", "at most 1000000 (a second); 0 sends after every poll"));
        }
        // A worker that never idles never reads them.
        if !d.idle {
            let idle = [
                ("dataplane.idle_empty_polls", d.idle_empty_polls.is_some()),
                ("dataplane.idle_sleep_us", d.idle_sleep_us.is_some()),
            ];
            refuse_given(&idle, "applies with idle = true (workers that never sleep ignore it)")?;
        }
        if d.idle_sleep_us() > 100_000 {
            return Err(cerr(
                "dataplane.idle_sleep_us",
                "at most 100000 (0.1 s): a sleeping worker acks no table change",
            ));
        }
        if self.flow_table.capacity == 0 {
            return Err(cerr("flow_table.capacity", "must be at least 1"));
        }
        // MAC entries keep their last-seen time as flows do: one lap of it.
        if self.bridge.aging_s() > dataplane::flow_table::MAX_IDLE_TIMEOUT_S {
            return Err(cerr(
                "bridge.aging_s",
                format!("at most {} (7 days); 0 never ages MAC entries", dataplane::flow_table::MAX_IDLE_TIMEOUT_S),
            ));
        }
        if self.flow_table.idle_timeout_s > dataplane::flow_table::MAX_IDLE_TIMEOUT_S {
            return Err(cerr(
                "flow_table.idle_timeout_s",
                format!("at most {} (7 days); 0 never ages learned flows", dataplane::flow_table::MAX_IDLE_TIMEOUT_S),
            ));
        }
        if self.ports.is_empty() {
            return Err(cerr("port", "at least one [[port]] is required"));
        }
        if self.ports.len() > dataplane::counters::MAX_PORTS {
            return Err(cerr("port", format!("at most {} ports", dataplane::counters::MAX_PORTS)));
        }
        let mut names = HashSet::new();
        for (i, p) in self.ports.iter().enumerate() {
            check_name(&format!("port[{i}].name"), &p.name)?;
            if !names.insert(p.name.as_str()) {
                return Err(cerr(format!("port[{i}].name"), format!("'{}' is used twice", p.name)));
            }
        }
        let port_index = |key: &str, name: &str| -> Result<u16, ConfigError> {
            self.ports
                .iter()
                .position(|p| p.name == name)
                .map(|i| i as u16)
                .ok_or_else(|| cerr(key, format!("no port named '{name}'")))
        };
        let mut ports = Vec::new();
        for (i, p) in self.ports.iter().enumerate() {
            let k = |f: &str| format!("port[{i}].{f}");
            if p.device.is_empty() {
                return Err(cerr(k("device"), "must name a vdev or PCI address"));
            }
            let id = device_id(&p.device);
            if let Some((o, op)) =
                ports.iter().enumerate().find(|(_, o): &(usize, &PortPlan)| device_id(&o.device) == id)
            {
                let why = format!("'{id}' is the device of port[{o}] '{}' too: one device, one port", op.name);
                return Err(cerr(k("device"), why));
            }
            let mac = p.mac.as_deref().map(parse_unicast_mac).transpose().map_err(|e| cerr(k("mac"), e))?;
            let mut ipv4 = Vec::new();
            let mut ipv6 = Vec::new();
            for a in &p.ipv4 {
                let (ip, l) = parse_prefix(a).map_err(|e| cerr(k("ipv4"), e))?;
                port_address(a, ip, l, &ipv4, &ipv6).map_err(|e| cerr(k("ipv4"), e))?;
                match ip {
                    IpAddr::V4(v) => ipv4.push((v.octets(), l)),
                    _ => return Err(cerr(k("ipv4"), format!("'{a}' is not IPv4"))),
                }
            }
            for a in &p.ipv6 {
                let (ip, l) = parse_prefix(a).map_err(|e| cerr(k("ipv6"), e))?;
                port_address(a, ip, l, &ipv4, &ipv6).map_err(|e| cerr(k("ipv6"), e))?;
                match ip {
                    IpAddr::V6(v) => ipv6.push((v.octets(), l)),
                    _ => return Err(cerr(k("ipv6"), format!("'{a}' is not IPv6"))),
                }
            }
            for (o, op) in ports.iter().enumerate() {
                let op: &PortPlan = op;
                let clashes = [("ipv4", shared_subnet(&ipv4, &op.ipv4)), ("ipv6", shared_subnet(&ipv6, &op.ipv6))];
                for (family, (mine, theirs, same)) in clashes.into_iter().filter_map(|(f, c)| Some((f, c?))) {
                    let other = format!("port[{o}] '{}'", op.name);
                    if same {
                        return Err(cerr(k(family), format!("{mine} is also the address of {other}")));
                    }
                    if mode == Mode::Router {
                        let why =
                            format!("{mine} overlaps {theirs} of {other}: a router's ports are on different subnets");
                        return Err(cerr(k(family), why));
                    }
                }
            }
            let peer = p.peer.as_deref().map(|n| port_index(&k("peer"), n)).transpose()?;
            if mode == Mode::CrossConnect && peer.is_none() {
                return Err(cerr(k("peer"), "xconnect mode needs a peer for every port"));
            }
            if mode != Mode::CrossConnect && peer.is_some() {
                return Err(cerr(k("peer"), "only valid in xconnect mode"));
            }
            if mode == Mode::Router && ipv4.is_empty() && ipv6.is_empty() {
                return Err(cerr(k("ipv4"), "router mode needs at least one ipv4 or ipv6 address per port"));
            }
            let impair = dataplane::impair::Impairment::parse(p.impair.as_deref().unwrap_or(""))
                .map_err(|e| cerr(k("impair"), e))?;
            if let Some(m) = p.mtu {
                if !(68..=9600).contains(&m) {
                    return Err(cerr(k("mtu"), "must be 68..=9600"));
                }
            }
            ports.push(PortPlan {
                name: p.name.clone(),
                device: p.device.clone(),
                is_pci: is_pci(&p.device),
                mtu: p.mtu,
                promiscuous: p.promiscuous,
                rss: p.rss,
                rx_checksum_offload: p.rx_checksum_offload,
                mac,
                ipv4,
                ipv6,
                peer,
                enabled: p.enabled,
                impair,
            });
        }
        let mut workers = Vec::new();
        let mut seen_q = HashSet::new();
        let mut seen_l = HashSet::new();
        for (i, w) in self.workers.iter().enumerate() {
            if !seen_l.insert(w.lcore) {
                return Err(cerr(format!("worker[{i}].lcore"), format!("lcore {} used twice", w.lcore)));
            }
            let mut rx = Vec::new();
            for q in &w.rx {
                let (pn, qn) = q.split_once(':').unwrap_or((q.as_str(), "0"));
                let pi = port_index(&format!("worker[{i}].rx"), pn)?;
                let qi: u16 = qn
                    .parse()
                    .map_err(|_| cerr(format!("worker[{i}].rx"), format!("'{q}': queue must be a number")))?;
                if !seen_q.insert((pi, qi)) {
                    return Err(cerr(format!("worker[{i}].rx"), format!("'{q}' is polled by two workers")));
                }
                rx.push((pi, qi));
            }
            workers.push(WorkerPlan { lcore: w.lcore, rx });
        }
        if !workers.is_empty() {
            for (pi, p) in ports.iter().enumerate() {
                if !seen_q.contains(&(pi as u16, 0)) {
                    return Err(cerr("worker", format!("queue 0 of port '{}' is polled by no worker", p.name)));
                }
            }
        }
        let names: Vec<String> = self.ports.iter().map(|p| p.name.clone()).collect();
        fn at(what: &'static str, i: usize) -> impl Fn(ConfigError) -> ConfigError {
            move |e| cerr(format!("{what}[{i}].{}", e.key), e.reason)
        }
        // Only a router looks routes up; in another mode they would be
        // taken and never used (as static MACs outside a bridge).
        if mode != Mode::Router && (self.routes_file.is_some() || !self.routes.is_empty()) {
            return Err(cerr(
                if self.routes.is_empty() { "routes_file" } else { "route" },
                format!("routes need mode = \"router\", not \"{}\"", self.mode),
            ));
        }
        let mut routes = self.file_routes(&names)?;
        for (i, r) in self.routes.iter().enumerate() {
            routes.push(r.to_spec(&names).map_err(at("route", i))?);
        }
        let neighbours: Vec<NeighbourSpec> = self
            .neighbours
            .iter()
            .enumerate()
            .map(|(i, n)| n.to_spec(&names).map_err(at("neighbour", i)))
            .collect::<Result<_, _>>()?;
        let subnets: Vec<PortSubnets> =
            ports.iter().map(|p| PortSubnets { name: &p.name, ipv4: &p.ipv4, ipv6: &p.ipv6, mac: p.mac }).collect();
        for (i, n) in neighbours.iter().enumerate() {
            check_neighbour(n, &subnets).map_err(at("neighbour", i))?;
        }
        let file_routes = routes.len() - self.routes.len();
        for (i, r) in routes.iter().enumerate() {
            let subnets = &subnets[r.port as usize];
            check_gateway(r, subnets, &neighbours).map_err(|e| match i.checked_sub(file_routes) {
                Some(i) => cerr(format!("route[{i}].via"), e),
                None => {
                    let path = self.routes_file.as_deref().unwrap_or_default();
                    cerr("routes_file", format!("{path}: route {}/{}: {e}", r.prefix, r.len))
                }
            })?;
        }
        if mode != Mode::Bridge {
            // Only a bridge learns MACs: elsewhere its table is never read.
            let given = [
                ("bridge.static_mac", !self.bridge.static_mac.is_empty()),
                ("bridge.mac_capacity", self.bridge.mac_capacity.is_some()),
                ("bridge.aging_s", self.bridge.aging_s.is_some()),
            ];
            refuse_given(&given, format!("[bridge] needs mode = \"bridge\", not \"{}\"", self.mode))?;
        }
        let mut static_macs: Vec<StaticMac> = Vec::new();
        for (i, s) in self.bridge.static_mac.iter().enumerate() {
            let spec = s.to_spec(&names).map_err(at("bridge.static_mac", i))?;
            if static_macs.iter().any(|o| (o.vlan, o.mac) == (spec.vlan, spec.mac)) {
                return Err(cerr(format!("bridge.static_mac[{i}].mac"), format!("'{}' is pinned twice", s.mac)));
            }
            static_macs.push(spec);
        }
        let flows = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| f.to_rule(&names).map_err(at("flow", i)))
            .collect::<Result<_, _>>()?;
        let mtu: Vec<u16> = ports.iter().map(|p| p.mtu.unwrap_or(1500)).collect();
        let mut int = match &self.int {
            Some(i) => Some(i.to_plan(&names, &mtu)?),
            None => None,
        };
        let label = match &self.label {
            Some(l) => l.to_plan(&names, &mtu, int.as_ref())?,
            None => None,
        };
        if let (Some(i), Some(l)) = (int.as_mut(), &label) {
            i.spec.label_ds_id = l.spec.ds_id;
        }
        let ampm = match &self.ampm {
            Some(a) => Some(a.to_plan(&names, &mtu)?),
            None => None,
        };
        let gpint = match &self.gpint {
            Some(g) => g.to_plan(int.as_ref(), self.ampm.as_ref())?,
            None => None,
        };
        if let (Some(g), Some(l)) = (&gpint, &label) {
            if g.domain_id == l.spec.ds_id {
                return Err(cerr("label.label_domain_id", format!("{:#06x} is GPINT's probe domain", g.domain_id)));
            }
        }
        Ok(Plan {
            raw: self.clone(),
            mode,
            ports,
            workers,
            routes,
            neighbours,
            static_macs,
            flows,
            int,
            ampm,
            gpint,
            label,
        })
    }
}

// Routes, neighbours and flows are converted by the same functions whether
// they come from the config file or from the control socket; errors name the
// field, and the config file adds "route[i]." in front.

impl RouteConfig {
    pub fn to_spec(&self, ports: &[String]) -> Result<RouteSpec, ConfigError> {
        let (prefix, len) = parse_network(&self.prefix).map_err(|e| cerr("prefix", e))?;
        let port = port_by_name(ports, "port", &self.port)?;
        let gateway = self.via.as_deref().map(|v| parse_host_ip("via", v)).transpose()?;
        if gateway.is_some_and(|g| g.is_ipv4() != prefix.is_ipv4()) {
            return Err(cerr("via", "gateway and prefix are of different IP versions"));
        }
        Ok(RouteSpec { prefix, len, port, gateway })
    }
}

/// Refuses what cannot be a port's own address: one of the addresses
/// the port already has (`v4`, `v6`), a multicast or unspecified one, a
/// prefix length of 0, and below /31 (RFC 3021) the subnet's network or
/// broadcast address.
fn port_address(text: &str, ip: IpAddr, len: u8, v4: &[([u8; 4], u8)], v6: &[([u8; 16], u8)]) -> Result<(), String> {
    let bad = |why: &str| Err(format!("'{text}': {why}"));
    if holds(v4, v6, ip) {
        return Err(format!("{ip} is listed twice"));
    }
    if len == 0 {
        return bad("a port's address needs a prefix length of 1 or more");
    }
    match ip {
        IpAddr::V4(a) if a.is_multicast() || a.is_broadcast() || a.octets()[0] == 0 => {
            bad("not a unicast host address")
        }
        IpAddr::V6(a) if a.is_multicast() || a.is_unspecified() => bad("not a unicast host address"),
        IpAddr::V4(a) if len < 31 => {
            let host = u32::from(a) & (u32::MAX >> len);
            match host {
                0 => bad("the subnet's network address, not a host's"),
                h if h == u32::MAX >> len => bad("the subnet's broadcast address, not a host's"),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Whether `ip` is one of the addresses `v4` or `v6` (its family's) lists.
fn holds(v4: &[([u8; 4], u8)], v6: &[([u8; 16], u8)], ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => v4.iter().any(|(b, _)| *b == a.octets()),
        IpAddr::V6(a) => v6.iter().any(|(b, _)| *b == a.octets()),
    }
}

/// "address/len" of an IPv4 (N = 4) or IPv6 (N = 16) address held as bytes.
fn prefix_text<const N: usize>((a, l): &([u8; N], u8)) -> String {
    match <[u8; 4]>::try_from(&a[..]) {
        Ok(v4) => format!("{}/{l}", IpAddr::from(v4)),
        Err(_) => format!("{}/{l}", IpAddr::from(<[u8; 16]>::try_from(&a[..]).unwrap_or_default())),
    }
}

/// The first address of `mine` on a subnet that one of `theirs` is on too
/// (either's length): (mine, theirs, whether they are one address).
fn shared_subnet<const N: usize>(mine: &[([u8; N], u8)], theirs: &[([u8; N], u8)]) -> Option<(String, String, bool)> {
    let show = prefix_text::<N>;
    mine.iter().find_map(|m| {
        theirs.iter().find(|t| on_link(&[**t], m.0) || on_link(&[*m], t.0)).map(|t| (show(m), show(t), m.0 == t.0))
    })
}

/// The subnets of a port (its addresses), as routes name their gateway's,
/// and its MAC where known (a config may leave it to the device).
pub struct PortSubnets<'a> {
    pub name: &'a str,
    pub ipv4: &'a [([u8; 4], u8)],
    pub ipv6: &'a [([u8; 16], u8)],
    pub mac: Option<[u8; 6]>,
}

/// Refuses a neighbour entry that names the switch itself, an address or
/// the MAC of one of its ports (what is routed there would come back in),
/// and below /31 the network or broadcast address of a subnet of the
/// entry's port (no one host answers for it).
pub fn check_neighbour(n: &NeighbourSpec, ports: &[PortSubnets]) -> Result<(), ConfigError> {
    for p in ports {
        if holds(p.ipv4, p.ipv6, n.ip) {
            return Err(cerr("ip", format!("{} is the switch's own address on port '{}'", n.ip, p.name)));
        }
        if p.mac == Some(n.mac) {
            return Err(cerr("mac", format!("{} is the MAC of the switch's port '{}'", format_mac(&n.mac), p.name)));
        }
    }
    let (IpAddr::V4(a), Some(p)) = (n.ip, ports.get(n.port as usize)) else { return Ok(()) };
    for (net, len) in p.ipv4.iter().filter(|(_, l)| *l < 31) {
        let host = u32::from(a) & (u32::MAX >> len);
        if on_link(&[(*net, *len)], a.octets()) && (host == 0 || host == u32::MAX >> len) {
            let what = if host == 0 { "network" } else { "broadcast" };
            let subnet = prefix_text(&(dataplane::lpm::mask(*net, *len), *len));
            return Err(cerr("ip", format!("{a} is the {what} address of port '{}''s subnet {subnet}", p.name)));
        }
    }
    Ok(())
}

/// Refuses a route whose gateway the switch could never resolve: its own
/// address, or one on none of its port's subnets (an ARP or ND answer
/// from there is not taken) unless a neighbour is configured for it on
/// that port (as `ip route`'s `onlink`).
pub fn check_gateway(r: &RouteSpec, port: &PortSubnets, neighbours: &[NeighbourSpec]) -> Result<(), String> {
    let Some(g) = r.gateway else { return Ok(()) };
    if holds(port.ipv4, port.ipv6, g) {
        return Err(format!("gateway {g} is the switch's own address on port '{}'", port.name));
    }
    let linked = match g {
        IpAddr::V4(a) => on_link(port.ipv4, a.octets()),
        IpAddr::V6(a) => on_link(port.ipv6, a.octets()),
    };
    if linked || neighbours.iter().any(|n| n.ip == g && n.port == r.port) {
        return Ok(());
    }
    let nets: Vec<String> = port
        .ipv4
        .iter()
        .map(|(a, l)| prefix_text(&(dataplane::lpm::mask(*a, *l), *l)))
        .chain(port.ipv6.iter().map(|(a, l)| prefix_text(&(dataplane::lpm::mask(*a, *l), *l))))
        .collect();
    let on = if nets.is_empty() { "no address".to_string() } else { nets.join(", ") };
    Err(format!(
        "gateway {g} is on no subnet of port '{}' ({on}) and has no neighbour entry there: it could never be resolved",
        port.name
    ))
}

impl NeighbourConfig {
    pub fn to_spec(&self, ports: &[String]) -> Result<NeighbourSpec, ConfigError> {
        let ip = parse_host_ip("ip", &self.ip)?;
        let mac = parse_unicast_mac(&self.mac).map_err(|e| cerr("mac", e))?;
        let port = port_by_name(ports, "port", &self.port)?;
        Ok(NeighbourSpec { ip, mac, port, permanent: true })
    }
}

impl FlowConfig {
    /// The flow key alone (what `flow del` needs).
    pub fn to_key(&self, ports: &[String]) -> Result<FlowKey, ConfigError> {
        let in_port = port_by_name(ports, "in_port", &self.in_port)?;
        let (src, dst) = (parse_ip("src", &self.src)?, parse_ip("dst", &self.dst)?);
        let proto = parse_proto(&self.proto).map_err(|e| cerr("proto", e))?;
        // Keys as the parse makes them: only TCP and UDP have ports (the
        // others' are 0), VLAN IDs are 12 bits. Any other key never matches.
        if !dataplane::parse::tcp_or_udp(proto) {
            if let Some((k, p)) =
                [("src_port", self.src_port), ("dst_port", self.dst_port)].into_iter().find(|(_, p)| *p != 0)
            {
                return Err(cerr(k, format!("{p}: protocol {proto} has no ports (only tcp and udp do; give 0)")));
            }
        }
        if self.vlan > 4095 {
            return Err(cerr("vlan", format!("{} is not a VLAN ID (0-4095; 0: untagged)", self.vlan)));
        }
        let key = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => FlowKey::v4(s.octets(), d.octets(), proto, self.src_port, self.dst_port),
            (IpAddr::V6(s), IpAddr::V6(d)) => FlowKey::v6(s.octets(), d.octets(), proto, self.src_port, self.dst_port),
            _ => return Err(cerr("dst", "src and dst are of different IP versions")),
        };
        Ok(key.with_scope(in_port, self.vlan))
    }

    pub fn to_rule(&self, ports: &[String]) -> Result<(FlowKey, FlowAction), ConfigError> {
        let key = self.to_key(ports)?;
        let action = parse_action(&self.action, |n| port_by_name(ports, "action", n))?;
        Ok((key, action))
    }
}

/// Parses "normal", "drop" or "forward:PORT".
pub fn parse_action(s: &str, port: impl Fn(&str) -> Result<u16, ConfigError>) -> Result<FlowAction, ConfigError> {
    match s {
        "normal" => Ok(FlowAction::Normal),
        "drop" => Ok(FlowAction::Drop),
        _ => match s.strip_prefix("forward:") {
            Some(p) => port(p).map(FlowAction::Forward),
            None => Err(cerr("action", format!("'{s}' is not one of normal, drop, forward:PORT"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "t"
mode = "router"
[[port]]
name = "p0"
device = "net_ring0"
ipv4 = ["10.0.1.1/24"]
[[port]]
name = "p1"
device = "net_ring1"
ipv4 = ["10.0.2.1/24"]
ipv6 = ["2001:db8:2::1/64"]
[[route]]
prefix = "172.16.0.0/12"
port = "p1"
via = "10.0.2.254"
[[neighbour]]
ip = "10.0.2.254"
mac = "02:00:00:00:00:fe"
port = "p1"
[[flow]]
in_port = "p0"
src = "10.0.1.2"
dst = "10.0.2.2"
proto = "udp"
dst_port = 53
action = "drop"
"#;

    /// BASE in another mode: without its route (a router's only).
    fn base_as(mode: &str) -> String {
        let route = "[[route]]\nprefix = \"172.16.0.0/12\"\nport = \"p1\"\nvia = \"10.0.2.254\"\n";
        assert!(BASE.contains(route));
        BASE.replace(route, "").replace("mode = \"router\"", &format!("mode = \"{mode}\""))
    }

    fn err_of(text: &str) -> String {
        match Config::from_toml(text).and_then(|c| c.validate()) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn routes_file_lines_come_before_inline_routes_relative_to_the_config() {
        let dir = std::env::temp_dir().join(format!("intswitch-routes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("full.txt"),
            "# a comment\n198.51.100.0/24 p1 10.0.2.254\n\n172.16.0.0/12 p0   # replaced inline\n2001:db8:9::/48 p1\n",
        )
        .unwrap();
        let cfg = dir.join("switch.toml");
        std::fs::write(&cfg, BASE.replacen("mode = \"router\"", "mode = \"router\"\nroutes_file = \"full.txt\"", 1))
            .unwrap();
        let c = Config::load(cfg.to_str().unwrap()).unwrap();
        assert_eq!(c.routes_file.as_deref(), dir.join("full.txt").to_str());
        let p = c.validate().unwrap();
        let spec = p.table_spec(&[[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]], 1_000_000_000);
        let got: Vec<(String, u8, u16, Option<IpAddr>)> =
            spec.routes.iter().map(|r| (r.prefix.to_string(), r.len, r.port, r.gateway)).collect();
        assert_eq!(
            got,
            [
                ("198.51.100.0".into(), 24, 1, Some("10.0.2.254".parse().unwrap())),
                ("172.16.0.0".into(), 12, 1, Some("10.0.2.254".parse().unwrap())),
                ("2001:db8:9::".into(), 48, 1, None),
            ]
        );
        for (line, want) in [
            ("10.9.0.0/16 p9", "full.txt line 1: port: no port named 'p9'"),
            ("10.9.0.0/33 p1", "full.txt line 1: prefix:"),
            ("10.9.0.0/16 p1 10.0.2.254 extra", "full.txt line 1: line: need PREFIX PORT [VIA]"),
            ("10.9.0.0/16 p1 2001:db8::1", "full.txt line 1: via: gateway and prefix"),
            ("10.9.0.1/16 p1", "full.txt line 1: prefix: '10.9.0.1/16' has host bits set"),
            (
                "2001:db8:9::/48 p0 2001:db8:2::7",
                "full.txt: route 2001:db8:9::/48: gateway 2001:db8:2::7 is on no subnet of port 'p0' (10.0.1.0/24)",
            ),
        ] {
            std::fs::write(dir.join("full.txt"), line).unwrap();
            let e = Config::load(cfg.to_str().unwrap()).unwrap().validate().unwrap_err().to_string();
            assert!(e.starts_with("routes_file:") && e.contains(want), "{line}: {e}");
        }
        std::fs::remove_file(dir.join("full.txt")).unwrap();
        let e = Config::load(cfg.to_str().unwrap()).unwrap().validate().unwrap_err().to_string();
        assert!(e.contains("routes_file: cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn valid_config() {
        let p = Config::from_toml(BASE).unwrap().validate().unwrap();
        assert_eq!(p.mode, Mode::Router);
        assert_eq!(p.ports[1].ipv6.len(), 1);
        assert_eq!(p.routes[0].len, 12);
        assert_eq!(p.flows[0].1, FlowAction::Drop);
        assert_eq!(p.flows[0].0.dst_port(), 53);
        assert!(!p.ports[0].is_pci);
        assert!(is_pci("0000:01:00.0"));
        assert!(is_pci("01:00.1"));
    }

    #[test]
    fn command_line_seconds() {
        assert_eq!(parse_seconds("1.5"), Ok(std::time::Duration::from_millis(1500)));
        assert_eq!(parse_seconds("0"), Ok(std::time::Duration::ZERO));
        for bad in ["nan", "-1", "1e300", "inf", "x", ""] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        // A run of 0 s would start and stop at once, having measured nothing.
        assert_eq!(parse_positive_seconds("0.25"), Ok(std::time::Duration::from_millis(250)));
        assert!(parse_positive_seconds("0").unwrap_err().contains("more than 0"));
    }

    #[test]
    fn macs_and_names_are_strict() {
        assert_eq!(parse_mac("2:0:0:0:a:FF"), Ok([2, 0, 0, 0, 0xa, 0xff]));
        for bad in
            ["02:00:00:00:00:09f", "+2:00:00:00:00:01", "02:00:00:00:00:", "02:00:00:00:00:0g", "02-00-00-00-00-01"]
        {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
        assert!(parse_unicast_mac("02:00:00:00:00:01").is_ok());
        assert!(parse_unicast_mac("ff:ff:ff:ff:ff:ff").is_err());
        for good in ["p0", "h1-h2", "skip_5003", "a.b:c/d", &"x".repeat(MAX_NAME_LEN)] {
            check_name("name", good).unwrap();
        }
        for bad in ["", "a b", "tab\t", "nul\0", "caf\u{e9}", &"x".repeat(MAX_NAME_LEN + 1)] {
            let e = check_name("name", bad).unwrap_err();
            assert_eq!(e.key, "name");
            assert!(e.reason.contains("printable ASCII"), "{bad:?}: {}", e.reason);
        }
    }

    #[test]
    fn a_device_is_named_by_its_vdev_name_or_full_pci_address() {
        assert_eq!(device_id("3B:00.0"), device_id("0000:3b:00.0,rx_queues=2"));
        assert_eq!(device_id("net_pcap0,rx_pcap=a.pcap"), device_id("net_pcap0,rx_pcap=b.pcap"));
        assert_ne!(device_id("net_pcap0"), device_id("net_pcap1"));
        assert_ne!(device_id("0000:3b:00.0"), device_id("0000:3b:00.1"));
    }

    /// Secondary addresses on one port's subnet, /31 point-to-point ends,
    /// and (outside router mode) two ports on one subnet are all fine.
    #[test]
    fn addresses_a_port_may_have() {
        let two =
            BASE.replace("ipv4 = [\"10.0.2.1/24\"]", "ipv4 = [\"10.0.2.1/24\", \"10.0.2.9/24\", \"10.0.3.0/31\"]");
        assert!(Config::from_toml(&two).unwrap().validate().is_ok());
        let bridge = base_as("bridge").replace("10.0.2.1/24", "10.0.1.2/24");
        assert!(Config::from_toml(&bridge).unwrap().validate().is_ok(), "{bridge}");
    }

    /// A gateway off the port's subnets is taken when a neighbour is
    /// configured for it on that port (resolved without ARP), as `ip
    /// route ... onlink`; a neighbour on another port does not count.
    #[test]
    fn an_off_link_gateway_needs_a_neighbour_on_its_port() {
        let off = BASE.replace("via = \"10.0.2.254\"", "via = \"192.0.2.7\"");
        let with = off.replace("ip = \"10.0.2.254\"", "ip = \"192.0.2.7\"");
        assert!(Config::from_toml(&with).unwrap().validate().is_ok());
        let elsewhere =
            with.replace("mac = \"02:00:00:00:00:fe\"\nport = \"p1\"", "mac = \"02:00:00:00:00:fe\"\nport = \"p0\"");
        assert!(err_of(&elsewhere).contains("route[0].via: gateway 192.0.2.7 is on no subnet of port 'p1'"));
    }

    /// A neighbour entry that names the switch itself, or a subnet's
    /// network or broadcast address, was taken (config and `neighbour add`).
    #[test]
    fn a_neighbour_is_another_host() {
        let n = |ip: &str, mac: &str| {
            BASE.replace("ip = \"10.0.2.254\"\nmac = \"02:00:00:00:00:fe\"", &format!("ip = \"{ip}\"\nmac = \"{mac}\""))
                .replace("via = \"10.0.2.254\"", &format!("via = \"{ip}\""))
        };
        let own_mac = n("10.0.2.254", "02:00:00:00:00:fe")
            .replace("device = \"net_ring0\"", "device = \"net_ring0\"\nmac = \"02:00:00:00:00:fe\"");
        for (cfg, want) in [
            (n("10.0.2.1", "02:00:00:00:00:fe"), "neighbour[0].ip: 10.0.2.1 is the switch's own address on port 'p1'"),
            (n("10.0.1.1", "02:00:00:00:00:fe"), "neighbour[0].ip: 10.0.1.1 is the switch's own address on port 'p0'"),
            (
                n("10.0.2.255", "02:00:00:00:00:fe"),
                "neighbour[0].ip: 10.0.2.255 is the broadcast address of port 'p1''s subnet 10.0.2.0/24",
            ),
            (n("10.0.2.0", "02:00:00:00:00:fe"), "neighbour[0].ip: 10.0.2.0 is the network address"),
            (own_mac, "neighbour[0].mac: 02:00:00:00:00:fe is the MAC of the switch's port 'p0'"),
        ] {
            let e = err_of(&cfg);
            assert!(e.contains(want), "{e}");
        }
        assert!(Config::from_toml(&n("10.0.2.7", "02:00:00:00:00:07")).unwrap().validate().is_ok());
    }

    #[test]
    fn unknown_key_is_named() {
        let e = err_of(&BASE.replace("mode = \"router\"", "mode = \"router\"\nspeed = 3"));
        assert!(e.contains("unknown field `speed`"), "{e}");
        let e = err_of(&BASE.replace("device = \"net_ring0\"", "device = \"net_ring0\"\ncolour = 1"));
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn semantic_errors_name_the_key() {
        for (from, to, want) in [
            ("mode = \"router\"", "mode = \"hub\"", "mode: 'hub'"),
            ("ipv4 = [\"10.0.1.1/24\"]", "ipv4 = [\"10.0.1.1/33\"]", "port[0].ipv4: prefix length 33"),
            ("port = \"p1\"\nvia", "port = \"p9\"\nvia", "route[0].port: no port named 'p9'"),
            ("mac = \"02:00:00:00:00:fe\"", "mac = \"02:00\"", "neighbour[0].mac"),
            ("proto = \"udp\"", "proto = \"sctpx\"", "flow[0].proto: unknown protocol"),
            ("action = \"drop\"", "action = \"forward:p7\"", "flow[0].action: no port named 'p7'"),
            // Keys no packet has: ports on ICMP, a VLAN ID past 12 bits.
            ("proto = \"udp\"", "proto = \"icmp\"", "flow[0].dst_port: 53: protocol 1 has no ports"),
            ("action = \"drop\"", "action = \"drop\"\nvlan = 5000", "flow[0].vlan: 5000 is not a VLAN ID"),
            ("via = \"10.0.2.254\"", "via = \"2001:db8::1\"", "route[0].via: gateway and prefix"),
            (
                "ipv4 = [\"10.0.2.1/24\"]",
                "ipv4 = [\"10.0.1.1/24\"]",
                "port[1].ipv4: 10.0.1.1/24 is also the address of port[0] 'p0'",
            ),
            (
                "via = \"10.0.2.254\"",
                "via = \"10.0.2.1\"",
                "route[0].via: gateway 10.0.2.1 is the switch's own address on port 'p1'",
            ),
            (
                "device = \"net_ring1\"",
                "device = \"net_ring0,x=1\"",
                "port[1].device: 'net_ring0' is the device of port[0] 'p0' too",
            ),
            (
                "ipv4 = [\"10.0.2.1/24\"]",
                "ipv4 = [\"10.0.0.2/16\"]",
                "port[1].ipv4: 10.0.0.2/16 overlaps 10.0.1.1/24 of port[0] 'p0'",
            ),
            (
                "ipv4 = [\"10.0.2.1/24\"]",
                "ipv4 = [\"10.0.2.0/24\"]",
                "port[1].ipv4: '10.0.2.0/24': the subnet's network address",
            ),
            (
                "ipv4 = [\"10.0.2.1/24\"]",
                "ipv4 = [\"10.0.2.255/24\"]",
                "port[1].ipv4: '10.0.2.255/24': the subnet's broadcast address",
            ),
            (
                "ipv4 = [\"10.0.2.1/24\"]",
                "ipv4 = [\"10.0.2.1/0\"]",
                "port[1].ipv4: '10.0.2.1/0': a port's address needs a prefix length",
            ),
            (
                "ipv4 = [\"10.0.2.1/24\"]",
                "ipv4 = [\"224.0.0.1/24\"]",
                "port[1].ipv4: '224.0.0.1/24': not a unicast host address",
            ),
            (
                "ipv4 = [\"10.0.2.1/24\"]",
                "ipv4 = [\"10.0.2.1/24\", \"10.0.2.1/24\"]",
                "port[1].ipv4: 10.0.2.1 is listed twice",
            ),
            (
                "ipv6 = [\"2001:db8:2::1/64\"]",
                "ipv6 = [\"ff02::1/64\"]",
                "port[1].ipv6: 'ff02::1/64': not a unicast host address",
            ),
            (
                "172.16.0.0/12",
                "172.16.0.1/12",
                "route[0].prefix: '172.16.0.1/12' has host bits set (the network is 172.16.0.0/12)",
            ),
            (
                "via = \"10.0.2.254\"",
                "via = \"10.0.9.9\"",
                "route[0].via: gateway 10.0.9.9 is on no subnet of port 'p1' (10.0.2.0/24, 2001:db8:2::/64)",
            ),
            ("via = \"10.0.2.254\"", "via = \"0.0.2.254\"", "route[0].via: '0.0.2.254' is not a host address"),
            ("ip = \"10.0.2.254\"", "ip = \"224.0.0.5\"", "neighbour[0].ip: '224.0.0.5' is not a host"),
            ("ip = \"10.0.2.254\"", "ip = \"255.255.255.255\"", "neighbour[0].ip"),
            ("ip = \"10.0.2.254\"", "ip = \"::\"", "neighbour[0].ip"),
            (
                "mac = \"02:00:00:00:00:fe\"",
                "mac = \"01:00:5e:00:00:05\"",
                "neighbour[0].mac: '01:00:5e:00:00:05' is not a unicast",
            ),
            ("mac = \"02:00:00:00:00:fe\"", "mac = \"00:00:00:00:00:00\"", "neighbour[0].mac"),
            ("mac = \"02:00:00:00:00:fe\"", "mac = \"02:00:00:00:00:0fe\"", "neighbour[0].mac"),
            ("name = \"p0\"", "name = \"p 0\"", "port[0].name: 'p 0' is not a name"),
        ] {
            let e = err_of(&BASE.replacen(from, to, 1));
            assert!(e.contains(want), "{e} !~ {want}");
        }
    }

    #[test]
    fn flow_idle_timeout_is_bounded() {
        let with = |s: u64| {
            BASE.replacen("mode = \"router\"", &format!("mode = \"router\"\n[flow_table]\nidle_timeout_s = {s}"), 1)
        };
        Config::from_toml(&with(604_800)).unwrap().validate().unwrap();
        let e = err_of(&with(604_801));
        assert!(e.contains("flow_table.idle_timeout_s: at most 604800"), "{e}");
    }

    #[test]
    fn times_that_become_tsc_ticks_are_bounded() {
        for (section, key, max, want) in [
            ("dataplane", "tx_drain_us", 1_000_000u64, "dataplane.tx_drain_us: at most 1000000"),
            ("dataplane", "idle = true\nidle_sleep_us", 100_000, "dataplane.idle_sleep_us: at most 100000"),
        ] {
            let with =
                |v: u64| BASE.replacen("mode = \"router\"", &format!("mode = \"router\"\n[{section}]\n{key} = {v}"), 1);
            Config::from_toml(&with(max)).unwrap().validate().unwrap();
            Config::from_toml(&with(0)).unwrap().validate().unwrap();
            let e = err_of(&with(max + 1));
            assert!(e.contains(want), "{e}");
        }
        let bridge = |v: u64| {
            format!(
                "name = \"b\"\nmode = \"bridge\"\n[bridge]\naging_s = {v}\n[[port]]\nname = \"p0\"\ndevice = \"net_null0\"\n"
            )
        };
        Config::from_toml(&bridge(604_800)).unwrap().validate().unwrap();
        Config::from_toml(&bridge(0)).unwrap().validate().unwrap();
        assert!(err_of(&bridge(604_801)).contains("bridge.aging_s: at most 604800"));
    }

    #[test]
    fn idle_settings_need_idle() {
        for key in ["idle_empty_polls", "idle_sleep_us"] {
            let e =
                err_of(&BASE.replacen("mode = \"router\"", &format!("mode = \"router\"\n[dataplane]\n{key} = 10"), 1));
            assert!(e.starts_with(&format!("dataplane.{key}")) && e.contains("idle = true"), "{e}");
        }
    }

    #[test]
    fn bridge_settings_need_a_bridge() {
        for (extra, key) in [
            ("[bridge]\nmac_capacity = 1024", "bridge.mac_capacity"),
            ("[bridge]\naging_s = 60", "bridge.aging_s"),
            ("[[bridge.static_mac]]\nmac = \"02:00:00:00:00:01\"\nport = \"p0\"", "bridge.static_mac"),
        ] {
            let e = err_of(&BASE.replacen("mode = \"router\"", &format!("mode = \"router\"\n{extra}"), 1));
            assert!(e.starts_with(key) && e.contains("needs mode = \"bridge\""), "{extra}: {e}");
        }
    }

    #[test]
    fn mempool_driver_name() {
        let c = Config::from_toml(BASE).unwrap();
        assert_eq!(c.dataplane.mempool_ops, "ring_mp_mc");
        let with = |ops: &str| {
            BASE.replacen("mode = \"router\"", &format!("mode = \"router\"\n[dataplane]\nmempool_ops = \"{ops}\""), 1)
        };
        let c = Config::from_toml(&with("stack")).unwrap();
        assert_eq!(c.dataplane.mempool_ops, "stack");
        c.validate().unwrap();
        for bad in ["", "ring mp", "x\\u0000", &"s".repeat(32)] {
            let e = err_of(&with(bad));
            assert!(e.contains("dataplane.mempool_ops"), "{bad}: {e}");
        }
    }

    #[test]
    fn mode_specific_rules() {
        let e = err_of(&base_as("xconnect"));
        assert!(e.contains("port[0].peer"), "{e}");
        let x = base_as("xconnect")
            .replace("device = \"net_ring0\"", "device = \"net_ring0\"\npeer = \"p1\"")
            .replace("device = \"net_ring1\"", "device = \"net_ring1\"\npeer = \"p0\"");
        let p = Config::from_toml(&x).unwrap().validate().unwrap();
        assert_eq!(p.ports[0].peer, Some(1));
        // Routes are a router's; neighbours stay (collectors behind a port use them).
        let route = "\n[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"p1\"\n";
        let e = err_of(&format!("{x}{route}"));
        assert_eq!(e, "route: routes need mode = \"router\", not \"xconnect\"");
        let e = err_of(&x.replacen("mode = \"xconnect\"", "mode = \"xconnect\"\nroutes_file = \"r.txt\"", 1));
        assert!(e.starts_with("routes_file: routes need mode"), "{e}");
        let n = "\n[[neighbour]]\nip = \"10.0.2.9\"\nmac = \"02:00:00:00:02:09\"\nport = \"p1\"\n";
        Config::from_toml(&format!("{x}{n}")).unwrap().validate().unwrap();
    }

    #[test]
    fn bridge_static_macs() {
        let br = base_as("bridge");
        let entry = |mac: &str, port: &str, vlan: u16| {
            format!("\n[[bridge.static_mac]]\nmac = \"{mac}\"\nport = \"{port}\"\nvlan = {vlan}\n")
        };
        let ok = format!("{br}{}{}", entry("02:00:00:00:00:02", "p1", 0), entry("02:00:00:00:00:02", "p0", 10));
        let p = Config::from_toml(&ok).unwrap().validate().unwrap();
        assert_eq!(p.static_macs.len(), 2);
        assert_eq!((p.static_macs[1].mac, p.static_macs[1].port, p.static_macs[1].vlan), ([2, 0, 0, 0, 0, 2], 0, 10));
        for (extra, want) in [
            (entry("02:00:00:00:00:02", "p9", 0), "bridge.static_mac[0].port: no port named 'p9'"),
            (entry("01:00:5e:00:00:01", "p1", 0), "bridge.static_mac[0].mac: '01:00:5e:00:00:01' is a group address"),
            (entry("02:00:00:00:00:02", "p1", 4096), "bridge.static_mac[0].vlan"),
            (entry("02:00", "p1", 0), "bridge.static_mac[0].mac"),
            (
                format!("{}{}", entry("02:00:00:00:00:02", "p1", 0), entry("02:00:00:00:00:02", "p0", 0)),
                "bridge.static_mac[1].mac: '02:00:00:00:00:02' is pinned twice",
            ),
        ] {
            let e = err_of(&format!("{br}{extra}"));
            assert!(e.contains(want), "{e} !~ {want}");
        }
        let e = err_of(&format!("{BASE}{}", entry("02:00:00:00:00:02", "p1", 0)));
        assert!(e.contains("bridge.static_mac: [bridge] needs mode = \"bridge\""), "{e}");
    }

    #[test]
    fn workers_must_cover_queue_zero() {
        let w = format!("{BASE}\n[[worker]]\nlcore = 1\nrx = [\"p0:0\"]\n");
        assert!(err_of(&w).contains("queue 0 of port 'p1'"));
        let w = format!(
            "{BASE}\n[[worker]]\nlcore = 1\nrx = [\"p0:0\", \"p1:0\"]\n[[worker]]\nlcore = 2\nrx = [\"p0:0\"]\n"
        );
        assert!(err_of(&w).contains("polled by two workers"));
    }
}

#[cfg(test)]
mod shipped_configs {
    use super::*;
    use dataplane::tables::Tables;

    #[test]
    fn reference_and_demo_configs_validate() {
        for f in ["reference.toml", "demo.toml"] {
            let path = format!("{}/../configs/{f}", env!("CARGO_MANIFEST_DIR"));
            let c = Config::load(&path).unwrap_or_else(|e| panic!("{f}: {e}"));
            c.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }

    /// Every leaf of a TOML document (table keys and array items), as paths.
    fn leaves(v: &toml::Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match v {
            toml::Value::Table(t) => {
                for (k, c) in t {
                    path.push(k.clone());
                    leaves(c, path, out);
                    path.pop();
                }
            }
            toml::Value::Array(a) if a.iter().any(|c| c.is_table()) => {
                for (i, c) in a.iter().enumerate() {
                    path.push(i.to_string());
                    leaves(c, path, out);
                    path.pop();
                }
            }
            _ => out.push(path.clone()),
        }
    }

    fn at<'v>(v: &'v mut toml::Value, path: &[String]) -> Option<&'v mut toml::Value> {
        path.iter().try_fold(v, |v, k| match v {
            toml::Value::Table(t) => t.get_mut(k),
            toml::Value::Array(a) => a.get_mut(k.parse::<usize>().ok()?),
            _ => None,
        })
    }

    /// The shipped configs with one to three values replaced by edge cases
    /// of every type (or removed, or an array entry repeated): each is
    /// refused with the key and a reason, or accepted, and an accepted one
    /// builds the data path's tables (what the switch does before it
    /// starts DPDK). Never a panic.
    #[test]
    fn mutated_configs_are_refused_with_a_reason_or_build() {
        let odd: Vec<toml::Value> = [
            "0",
            "-1",
            "1",
            "65535",
            "65536",
            "4294967296",
            "9223372036854775807",
            "1e300",
            "true",
            "\"\"",
            "\"x\"",
            "\"p9\"",
            "\"p1\"",
            "\"10.0.0.1/33\"",
            "\"::/0\"",
            "\"0.0.0.0/0\"",
            "\"255.255.255.255\"",
            "\"ff:ff:ff:ff:ff:ff\"",
            "\"1s\"",
            "\"0ns\"",
            "\"-5ms\"",
            "\"udp\"",
            "\"forward:p0\"",
            "[]",
            "[\"p0\", \"p0\"]",
            "{}",
        ]
        .iter()
        .map(|t| toml::from_str::<toml::Table>(&format!("v = {t}")).unwrap()["v"].clone())
        .collect();
        let mut rng = dataplane::rand::XorShift::new(0x0c0f_f1e5);
        let mut rnd = move |n: usize| rng.below(n);
        let (mut accepted, mut refused) = (0, 0);
        for f in ["reference.toml", "demo.toml"] {
            let text = std::fs::read_to_string(format!("{}/../configs/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap();
            let base: toml::Value = toml::from_str(&text).unwrap();
            let mut paths = Vec::new();
            leaves(&base, &mut Vec::new(), &mut paths);
            for _ in 0..3_000 {
                let mut v = base.clone();
                for _ in 0..1 + rnd(3) {
                    let p = &paths[rnd(paths.len())];
                    let (parent, last) = p.split_at(p.len() - 1);
                    match (rnd(8), at(&mut v, parent)) {
                        (0, Some(toml::Value::Table(t))) => {
                            t.remove(&last[0]);
                        }
                        (1, Some(toml::Value::Array(a))) if !a.is_empty() => {
                            let c = a[rnd(a.len())].clone();
                            a.push(c);
                        }
                        _ => {
                            if let Some(leaf) = at(&mut v, p) {
                                *leaf = odd[rnd(odd.len())].clone();
                            }
                        }
                    }
                }
                let Ok(text) = toml::to_string(&v) else { continue };
                match Config::from_toml(&text).and_then(|c| c.validate()) {
                    Err(e) => {
                        assert!(!e.reason.is_empty(), "{f}: an error without a reason");
                        refused += 1;
                    }
                    Ok(plan) => {
                        let macs: Vec<[u8; 6]> =
                            plan.ports.iter().map(|p| p.mac.unwrap_or([2, 0, 0, 0, 0, 1])).collect();
                        let spec = plan.table_spec(&macs, 1_000_000_000);
                        if let Err(e) = Tables::build(&spec, 1) {
                            assert!(!e.is_empty(), "{f}: an error without a reason");
                        }
                        accepted += 1;
                    }
                }
            }
        }
        assert!(accepted > 200 && refused > 1_000, "accepted {accepted}, refused {refused}");
    }
}
