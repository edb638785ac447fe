//! The `[ampm]` section: timing (interval T and slot bits on CLOCK_REALTIME),
//! monitored flows (per-flow rules) and the collectors that receive the
//! per-interval counter records. Flows from the file and from `intctl ampm
//! add` go through the same conversion.

use std::collections::{HashMap, HashSet};

use dataplane::ampm::{AmpmFlow, AmpmSetup, Carrier, FlowRef, Method, MpRole, TimeFormat, Timing};
use dataplane::classifier::{field, Key};
use serde::{Deserialize, Serialize};

use crate::collector_tx::CollectorPlan;
use crate::fields::{refuse_given, ConfigError};
use crate::int::config::{collector_plans, CollectorConfig};

fn cerr(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: key.into(), reason: reason.into() }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AmpmConfig {
    /// This measurement point's ID in the exported records.
    pub node_id: u32,
    /// Interval T: one color lasts T. With time_format "sec_frac" a power of
    /// two seconds ("1s", "500ms", "16s"); with "ns" a power of two ns.
    #[serde(default = "default_interval")]
    pub interval: String,
    /// "sec_frac" (32.32 seconds, the paper's Seconds/Fraction split) or "ns".
    #[serde(default = "default_format")]
    pub time_format: String,
    /// Time bits below the interval bit that divide it into slots (2: quarters).
    #[serde(default = "default_sub_bits")]
    pub sub_bits: u8,
    /// Counter slots (flows) per worker.
    #[serde(default = "default_max_flows")]
    pub max_flows: usize,
    #[serde(default)]
    pub flow: Vec<AmpmFlowConfig>,
    #[serde(default)]
    pub collector: Vec<CollectorConfig>,
}

fn default_interval() -> String {
    "1s".into()
}
fn default_format() -> String {
    "sec_frac".into()
}
fn default_sub_bits() -> u8 {
    2
}
fn default_max_flows() -> usize {
    16384
}

/// Bytes of JSON lines per export datagram (what a collector's path must carry).
pub const DATAGRAM: usize = 1400;

/// One monitored flow (file entry and API argument).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AmpmFlowConfig {
    pub name: String,
    /// RFC 9343 FlowMonID (20 bits); the same on every MP of the flow.
    pub flow_mon_id: u32,
    /// "initiator", "transit" or "terminator".
    pub role: String,
    /// "step", "pulse", "double" or "muxed".
    pub method: String,
    /// "dscp", "ipv4_flag", "ipv6_hbh" or "ipv6_dest".
    pub carrier: String,
    /// DSCP bit (0 = DSCP LSB, the default) for L with the dscp carrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l_bit: Option<u8>,
    /// DSCP bit for D (double marking; default 1) with the dscp and
    /// ipv4_flag carriers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_bit: Option<u8>,
    /// Terminator: clear the marks / remove the IPv6 option (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear: Option<bool>,
    #[serde(default)]
    pub priority: u32,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub proto: Option<toml::Value>,
    pub src_port: Option<toml::Value>,
    pub dst_port: Option<toml::Value>,
    pub dscp: Option<toml::Value>,
    pub in_port: Option<String>,
}

/// The validated `[ampm]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmpmPlan {
    pub setup: AmpmSetup,
    pub collectors: Vec<CollectorPlan>,
}

/// "1s", "500ms", "250us", "1073741824ns", "0.5s" -> ns (f64).
pub fn parse_duration_ns(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let split =
        s.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(|| format!("'{s}': give a unit (s, ms, us, ns)"))?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.trim().parse().map_err(|_| format!("'{s}': not a number"))?;
    let mult = match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        u => return Err(format!("'{s}': unknown unit '{u}' (s, ms, us, ns)")),
    };
    if !(n > 0.0 && n.is_finite()) {
        return Err(format!("'{s}': must be positive"));
    }
    Ok(n * mult)
}

/// Interval and format -> the timestamp bit that is the color.
pub fn timing(interval: &str, format: &str, sub_bits: u8) -> Result<Timing, ConfigError> {
    let ns = parse_duration_ns(interval).map_err(|e| cerr("ampm.interval", e))?;
    let (format, unit_ns, lo, hi) = match format {
        // Bit b of 32.32 seconds flips every 2^(b-32) s.
        "sec_frac" => (TimeFormat::SecFrac, 1e9 / 4294967296.0, 12, 62),
        "ns" => (TimeFormat::Ns, 1.0, 10, 62),
        f => return Err(cerr("ampm.time_format", format!("'{f}' is not sec_frac or ns"))),
    };
    let e = (ns / unit_ns).log2();
    let bit = e.round();
    if (e - bit).abs() > 1e-9 || bit < lo as f64 || bit > hi as f64 {
        let near = |b: f64| -> String {
            let v = b.exp2() * unit_ns;
            if v >= 1e9 {
                format!("{}s", v / 1e9)
            } else if v >= 1e6 {
                format!("{}ms", v / 1e6)
            } else {
                format!("{}us", v / 1e3)
            }
        };
        let b = e.floor().clamp(lo as f64, hi as f64);
        return Err(cerr(
            "ampm.interval",
            format!(
                "'{interval}' is not a power of two of the time format's unit; nearest: {} or {}",
                near(b),
                near(b + 1.0)
            ),
        ));
    }
    if !(2..=8).contains(&sub_bits) || sub_bits as f64 >= bit {
        return Err(cerr("ampm.sub_bits", "must be 2-8 (2: quarters of the interval)"));
    }
    Ok(Timing { format, interval_bit: bit as u8, sub_bits })
}

impl AmpmFlowConfig {
    /// The DSCP bit of L (dscp carrier).
    pub fn l_bit(&self) -> u8 {
        self.l_bit.unwrap_or(0)
    }

    /// The DSCP bit of D (dscp and ipv4_flag carriers).
    pub fn d_bit(&self) -> u8 {
        self.d_bit.unwrap_or(1)
    }

    /// The flow for counter slot `slot`.
    pub fn to_flow(&self, ports: &[String], slot: u32) -> Result<AmpmFlow, ConfigError> {
        crate::fields::check_name("name", &self.name)?;
        if self.flow_mon_id > 0xf_ffff {
            return Err(cerr("flow_mon_id", "must fit 20 bits (0-1048575)"));
        }
        let role = match self.role.as_str() {
            "initiator" => MpRole::Initiator,
            "transit" => MpRole::Transit,
            "terminator" => MpRole::Terminator,
            r => return Err(cerr("role", format!("'{r}' is not one of initiator, transit, terminator"))),
        };
        let method = match Method::ALL.iter().find(|m| m.name() == self.method) {
            Some(m) => *m,
            None => return Err(cerr("method", format!("'{}' is not one of step, pulse, double, muxed", self.method))),
        };
        let (l_bit, d_bit) = (self.l_bit(), self.d_bit());
        for (k, b) in [("l_bit", l_bit), ("d_bit", d_bit)] {
            if b > 5 {
                return Err(cerr(k, "a DSCP bit: 0 (LSB) to 5"));
            }
        }
        // A bit the carrier does not mark, or a clear a role never does,
        // would be taken and never applied.
        let c = &self.carrier;
        refuse_given(
            &[("l_bit", self.l_bit.is_some() && c != "dscp")],
            format!("applies to carrier \"dscp\", not \"{c}\""),
        )?;
        refuse_given(
            &[("d_bit", self.d_bit.is_some() && !matches!(c.as_str(), "dscp" | "ipv4_flag"))],
            format!("applies to carriers \"dscp\" and \"ipv4_flag\", not \"{c}\""),
        )?;
        refuse_given(
            &[("clear", self.clear.is_some() && role != MpRole::Terminator)],
            format!("applies to a terminator, not a {}", self.role),
        )?;
        let carrier = match self.carrier.as_str() {
            "dscp" => {
                if method == Method::Double && l_bit == d_bit {
                    return Err(cerr("d_bit", "double marking needs two different DSCP bits"));
                }
                Carrier::Dscp { l_bit, d_bit }
            }
            "ipv4_flag" => Carrier::Ipv4Flag { d_bit },
            "ipv6_hbh" => Carrier::Ipv6HopByHop,
            "ipv6_dest" => Carrier::Ipv6DestOpts,
            c => return Err(cerr("carrier", format!("'{c}' is not one of dscp, ipv4_flag, ipv6_hbh, ipv6_dest"))),
        };
        // The match fields are those of an INT watch rule: one parser.
        let w = crate::int::config::match_rule!(self, "none");
        let r = w.to_rule(ports)?;
        // A carrier the matched family lacks only ever counts ampm_no_carrier.
        let family = match carrier {
            Carrier::Ipv4Flag { .. } => 4,
            Carrier::Ipv6HopByHop | Carrier::Ipv6DestOpts => 6,
            Carrier::Dscp { .. } => r.ip_version,
        };
        if r.ip_version != 0 && family != r.ip_version {
            return Err(cerr(
                "carrier",
                format!(
                    "'{}' is carried by IPv{family} packets, and src/dst match only IPv{}: nothing would be marked",
                    self.carrier, r.ip_version
                ),
            ));
        }
        let (mut value, mut mask) = (Key::default(), Key::default());
        // Addresses as the flow key holds them: IPv4 in the low 32 bits.
        let addr = |t: &dataplane::int::watch::Ternary<u128>| -> (u128, u128) {
            if r.ip_version == 4 {
                (t.value & 0xffff_ffff, t.mask & 0xffff_ffff)
            } else {
                (t.value, t.mask)
            }
        };
        let (sv, sm) = addr(&r.src);
        let (dv, dm) = addr(&r.dst);
        value.set_addr(field::SRC, sv);
        mask.set_addr(field::SRC, sm);
        value.set_addr(field::DST, dv);
        mask.set_addr(field::DST, dm);
        let mut meta = |shift: u32, width: u32, v: u64, m: u64| {
            value.set_meta(shift, width, v);
            mask.set_meta(shift, width, m);
        };
        if r.ip_version != 0 {
            meta(field::IP_VERSION_SHIFT, 8, r.ip_version as u64, 0xff);
        }
        meta(field::PROTO_SHIFT, 8, r.proto.value as u64, r.proto.mask as u64);
        meta(field::DSCP_SHIFT, 6, r.dscp.value as u64, r.dscp.mask as u64);
        if let Some(p) = r.in_port {
            meta(field::IN_PORT_SHIFT, 16, p as u64, 0xffff);
        }
        value.0[field::PORTS] = (r.src_port.value as u64) | (r.dst_port.value as u64) << 16;
        mask.0[field::PORTS] = (r.src_port.mask as u64) | (r.dst_port.mask as u64) << 16;
        Ok(AmpmFlow {
            name: self.name.clone(),
            mp: FlowRef {
                slot,
                flow_mon_id: self.flow_mon_id,
                role,
                method,
                carrier,
                clear: self.clear.unwrap_or(true),
            },
            priority: self.priority,
            value,
            mask,
        })
    }
}

/// Why a second flow of one FlowMonID on a node is refused.
pub fn shared_id(id: u32, other: &str) -> String {
    format!(
        "{id} is flow '{other}''s too: the collector joins records by FlowMonID and node, so two flows of one \
         FlowMonID on a switch cannot be told apart"
    )
}

impl AmpmConfig {
    /// `mtu`: each port's MTU (IP bytes), for collectors behind a port.
    pub fn to_plan(&self, ports: &[String], mtu: &[u16]) -> Result<AmpmPlan, ConfigError> {
        let t = timing(&self.interval, &self.time_format, self.sub_bits)?;
        if self.max_flows == 0 || self.max_flows > 1 << 20 {
            return Err(cerr("ampm.max_flows", "must be 1-1048576"));
        }
        if self.flow.len() > self.max_flows {
            return Err(cerr(
                "ampm.flow",
                format!("{} flows, more than max_flows {}", self.flow.len(), self.max_flows),
            ));
        }
        let mut setup = AmpmSetup::new(self.node_id, t, self.max_flows);
        // A set, not a scan of the earlier flows: up to 2^20 flows load in
        // linear time (with the scan, 100k flows took 48 s, 1M over an hour).
        let mut names = HashSet::with_capacity(self.flow.len());
        let mut ids = HashMap::with_capacity(self.flow.len());
        for (i, f) in self.flow.iter().enumerate() {
            let at = |e: ConfigError| cerr(format!("ampm.flow[{i}].{}", e.key), e.reason);
            if !names.insert(f.name.as_str()) {
                return Err(cerr(format!("ampm.flow[{i}].name"), format!("'{}' is used twice", f.name)));
            }
            if let Some(other) = ids.insert(f.flow_mon_id, f.name.as_str()) {
                return Err(cerr(format!("ampm.flow[{i}].flow_mon_id"), shared_id(f.flow_mon_id, other)));
            }
            setup.flows.push(f.to_flow(ports, i as u32).map_err(at)?);
        }
        let collectors = collector_plans("ampm", &self.collector, ports, mtu, DATAGRAM)?;
        Ok(AmpmPlan { setup, collectors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<AmpmPlan, ConfigError> {
        let c: AmpmConfig = toml::from_str(s).map_err(|e| cerr("toml", e.to_string()))?;
        c.to_plan(&["p0".into(), "p1".into()], &[1500, 1500])
    }

    #[test]
    fn timing_from_intervals() {
        let t = timing("1s", "sec_frac", 2).unwrap();
        assert_eq!((t.interval_bit, t.interval_ns()), (32, 1_000_000_000));
        assert_eq!(timing("16s", "sec_frac", 2).unwrap().interval_bit, 36);
        assert_eq!(timing("250ms", "sec_frac", 2).unwrap().interval_bit, 30);
        assert_eq!(timing("1073741824ns", "ns", 2).unwrap().interval_bit, 30);
        let e = timing("100ms", "sec_frac", 2).unwrap_err();
        assert_eq!(e.key, "ampm.interval");
        assert!(e.reason.contains("62.5ms or 125ms"), "{}", e.reason);
        assert_eq!(timing("1s", "tai", 2).unwrap_err().key, "ampm.time_format");
        assert_eq!(timing("1s", "sec_frac", 1).unwrap_err().key, "ampm.sub_bits");
        assert!(timing("1 parsec", "ns", 2).is_err());
    }

    #[test]
    fn flows_and_errors_name_the_key() {
        let p = parse(
            r#"node_id = 7
[[flow]]
name = "a"
flow_mon_id = 5
role = "initiator"
method = "muxed"
carrier = "dscp"
src = "10.0.0.0/24"
proto = "udp"
dst_port = 5001
[[collector]]
address = "127.0.0.1:32766""#,
        )
        .unwrap();
        let f = &p.setup.flows[0];
        assert_eq!(
            (f.mp.role, f.mp.method, f.mp.carrier),
            (MpRole::Initiator, Method::Muxed, Carrier::Dscp { l_bit: 0, d_bit: 1 })
        );
        assert_eq!(f.mask.0[field::SRC + 1], 0xffff_ff00);
        assert_eq!(f.value.0[field::PORTS], 5001 << 16);
        let base = "node_id = 1\n[[flow]]\nname = \"a\"\nflow_mon_id = 1\nrole = \"initiator\"\nmethod = \"muxed\"\n";
        for (extra, key) in [
            ("carrier = \"mpls\"", "ampm.flow[0].carrier"),
            ("carrier = \"dscp\"\nl_bit = 9", "ampm.flow[0].l_bit"),
            ("carrier = \"dscp\"\nsrc = \"10.0.0.300/8\"", "ampm.flow[0].src"),
            ("carrier = \"dscp\"\nin_port = \"p9\"", "ampm.flow[0].in_port"),
            ("carrier = \"ipv4_flag\"\nl_bit = 2", "ampm.flow[0].l_bit"),
            ("carrier = \"ipv6_hbh\"\nd_bit = 2", "ampm.flow[0].d_bit"),
            ("carrier = \"dscp\"\nclear = false", "ampm.flow[0].clear"),
        ] {
            assert_eq!(parse(&format!("{base}{extra}")).unwrap_err().key, key, "{extra}");
        }
        let e = parse("node_id = 1\n[[flow]]\nname = \"a\"\nflow_mon_id = 2000000\nrole = \"x\"\nmethod = \"muxed\"\ncarrier = \"dscp\"").unwrap_err();
        assert_eq!(e.key, "ampm.flow[0].flow_mon_id");
        // A carrier the matched family lacks; any family with none given.
        for (carrier, src, v) in
            [("ipv4_flag", "2001:db8::/32", 6), ("ipv6_hbh", "10.0.0.0/8", 4), ("ipv6_dest", "10.0.0.0/8", 4)]
        {
            let e = parse(&format!("{base}carrier = \"{carrier}\"\nsrc = \"{src}\"")).unwrap_err();
            assert_eq!(e.key, "ampm.flow[0].carrier");
            assert!(e.reason.contains(&format!("match only IPv{v}")), "{}", e.reason);
        }
        for (carrier, src) in [("ipv4_flag", "10.0.0.0/8"), ("ipv6_hbh", "2001:db8::/32"), ("dscp", "2001:db8::/32")] {
            parse(&format!("{base}carrier = \"{carrier}\"\nsrc = \"{src}\"")).unwrap();
        }
        parse(&format!("{base}carrier = \"ipv4_flag\"")).unwrap();
        // One FlowMonID is one flow's on a switch.
        let two = format!("{base}carrier = \"dscp\"\n[[flow]]\nname = \"b\"\nflow_mon_id = 1\nrole = \"transit\"\nmethod = \"muxed\"\ncarrier = \"dscp\"");
        let e = parse(&two).unwrap_err();
        assert_eq!(e.key, "ampm.flow[1].flow_mon_id");
        assert!(e.reason.contains("1 is flow 'a''s too"), "{}", e.reason);
    }

    #[test]
    fn flow_names_are_unique_among_100k_flows() {
        // One flow's table body (without its `[[flow]]` header).
        let flow = |i: usize, name: &str| {
            format!(
                "name = \"{name}\"\nflow_mon_id = {}\nrole = \"initiator\"\nmethod = \"muxed\"\ncarrier = \"dscp\"\ndst_port = {}\n",
                i,
                i % 65536
            )
        };
        let dup =
            format!("node_id = 1\n[[flow]]\n{}[[flow]]\n{}[[flow]]\n{}", flow(0, "a"), flow(1, "b"), flow(2, "a"));
        let e = parse(&dup).unwrap_err();
        assert_eq!((e.key.as_str(), e.reason.as_str()), ("ampm.flow[2].name", "'a' is used twice"));
        // 100k flows (0.7 s; a scan of the earlier names made it 48 s).
        let n = 100_000;
        let mut c: AmpmConfig = toml::from_str("node_id = 1\nmax_flows = 100000").unwrap();
        c.flow = (0..n).map(|i| toml::from_str(&flow(i, &format!("f{i}"))).unwrap()).collect();
        let p = c.to_plan(&["p0".into(), "p1".into()], &[1500, 1500]).unwrap();
        assert_eq!(p.setup.flows.len(), n);
    }
}
