//! The `[label]` section: the INT-label domain. Labels ride on the `[int]`
//! domain's node ID and collectors (they are INT-MD hops and leave in
//! Telemetry Reports), so `[label]` needs `[int]` with a collector.

use dataplane::counters::MAX_PORTS;
use dataplane::int::stage::REPORT_MAX;
use dataplane::int::watch::{Role, WatchRule};
use dataplane::label::{FlowRule, LabelFn, LabelSpec, Thresholds, Times, MAX_HOP_LIMIT, MAX_SHIFT, MAX_TABLE};
use serde::{Deserialize, Serialize};

use crate::fields::{cerr, port_by_name, ConfigError};
use crate::int::config::{instruction_bits, presence_of, IntPlan};

/// MAX_hop where the config leaves it out (the paper's evaluation).
const DEFAULT_MAX_HOP: u8 = 5;
const DEFAULT_REPORT_TRUNCATE: usize = 128;
const DEFAULT_RING_SIZE: usize = 4096;

/// `[label]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LabelConfig {
    pub enabled: bool,
    /// Domain Specific ID of label packets (nonzero, not an INT source
    /// rule's domain).
    pub label_domain_id: u16,
    /// "dscp" (the 5-tuple stays intact: labeled packets keep their flow's
    /// ECMP path) or "udp_port" (the destination port is rewritten, so a
    /// labeled packet may take another ECMP path than its flow).
    pub presence: String,
    /// Presence "udp_port" (default 17768).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_port: Option<u16>,
    /// Presence "dscp" (default 0x17 / 0x3f).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp_value: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp_mask: Option<u8>,
    /// What a label holds (default: the paper's 32-byte item).
    pub instructions: Vec<String>,
    /// RHC at a packet's first label.
    pub max_labels: u8,
    /// T: a port labels the next packet once this long has passed.
    pub interval_ms: f64,
    /// T1 (<= T): after any label, no probabilistic label for this long.
    pub rest_ms: f64,
    /// f of Base B: "f1", "f2", "f3" or "table" (`table`); MAX_hop for
    /// F2, F3 and tables (default 5; F1 never reads it).
    pub probability: String,
    pub table: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_hop: Option<u8>,
    /// The largest S the Pro controller may set (255, every packet, aside).
    pub max_shift: u8,
    /// Host-facing ports: labels are exported and packets restored here,
    /// specific flows enter here (default: `[int] edge_ports`).
    pub edge_ports: Option<Vec<String>>,
    /// Inner packet bytes a label report keeps (the stack always stays in;
    /// default 128). Only edge ports export.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_truncate: Option<usize>,
    /// Label reports each worker's ring holds (default 4096).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring_size: Option<usize>,
    /// Seed of the workers' random draws (0: from the clock).
    pub seed: u64,
    pub watch: Vec<LabelMatch>,
    pub flow: Vec<LabelMatch>,
}

impl Default for LabelConfig {
    fn default() -> Self {
        LabelConfig {
            enabled: true,
            label_domain_id: 0x4c42,
            presence: "dscp".into(),
            udp_port: None,
            dscp_value: None,
            dscp_mask: None,
            instructions: ["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts"]
                .map(String::from)
                .to_vec(),
            max_labels: 8,
            interval_ms: 50.0,
            rest_ms: 0.0,
            probability: "f1".into(),
            table: Vec::new(),
            max_hop: None,
            max_shift: 6,
            edge_ports: None,
            report_truncate: None,
            ring_size: None,
            seed: 0,
            watch: Vec::new(),
            flow: Vec::new(),
        }
    }
}

/// A `[[label.watch]]` or `[[label.flow]]` entry: the match fields of
/// `[[int.watch]]`; a watch rule's role ("label" or "none"), a flow's
/// labeling interval.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct LabelMatch {
    pub name: String,
    #[serde(default)]
    pub priority: u32,
    pub role: Option<String>,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub proto: Option<toml::Value>,
    pub src_port: Option<toml::Value>,
    pub dst_port: Option<toml::Value>,
    pub dscp: Option<toml::Value>,
    pub in_port: Option<String>,
    pub interval_ms: Option<f64>,
}

impl LabelMatch {
    fn rule(&self, ports: &[String], role: &str) -> Result<WatchRule, ConfigError> {
        crate::int::config::match_rule!(self, role).to_rule(ports)
    }
}

/// The validated section; times in nanoseconds (the generation's spec
/// holds them in TSC ticks).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelPlan {
    pub spec: LabelSpec,
    pub interval_ns: u64,
    pub rest_ns: u64,
    pub f: LabelFn,
    pub max_hop: u8,
    pub max_shift: u8,
    pub ring_size: usize,
    pub seed: u64,
    /// Each specific flow's interval in ns, in `spec.flows` order.
    pub flow_intervals_ns: Vec<u64>,
}

impl LabelPlan {
    /// The spec with its times in ticks of a `hz` clock.
    pub fn spec(&self, hz: u64) -> LabelSpec {
        let tick = |ns: u64| (ns as u128 * hz.max(1) as u128 / 1_000_000_000) as u64;
        let mut s = self.spec.clone();
        s.times = Times { interval: tick(self.interval_ns).max(1), rest: tick(self.rest_ns) };
        for (f, ns) in s.flows.iter_mut().zip(&self.flow_intervals_ns) {
            f.interval_tsc = tick(*ns);
        }
        s
    }
}

fn ms_to_ns(key: &str, ms: f64) -> Result<u64, ConfigError> {
    if !ms.is_finite() || ms <= 0.0 || ms > 86_400_000.0 {
        return Err(cerr(key, format!("{ms}: must be more than 0 and at most 86400000 (a day)")));
    }
    Ok((ms * 1e6).round().max(1.0) as u64)
}

impl LabelConfig {
    /// None when `enabled = false`. `mtu`: each port's MTU by index.
    pub fn to_plan(
        &self,
        ports: &[String],
        mtu: &[u16],
        int: Option<&IntPlan>,
    ) -> Result<Option<LabelPlan>, ConfigError> {
        if !self.enabled {
            return Ok(None);
        }
        let k = |f: &str| format!("label.{f}");
        let Some(int) = int else {
            return Err(cerr(
                "label",
                "needs [int]: labels are INT-MD hops exported as Telemetry Reports to its collectors",
            ));
        };
        if self.label_domain_id == 0 {
            return Err(cerr(k("label_domain_id"), "must be nonzero (0 is classic INT)"));
        }
        if let Some(r) =
            int.spec.watch.iter().find(|r| matches!(r.role, Role::Source(s) if s.domain_id == self.label_domain_id))
        {
            return Err(cerr(
                k("label_domain_id"),
                format!(
                    "{:#06x} is the domain of INT watch rule '{}': labels need a domain of their own",
                    self.label_domain_id, r.name
                ),
            ));
        }
        let presence = presence_of(k, &self.presence, self.udp_port, self.dscp_value, self.dscp_mask)?;
        let bitmap = instruction_bits(&self.instructions).map_err(|e| cerr(k("instructions"), e))?;
        if bitmap == 0 {
            return Err(cerr(k("instructions"), "a label needs at least one instruction"));
        }
        if self.max_labels == 0 {
            return Err(cerr(k("max_labels"), "must be 1..=255"));
        }
        let interval_ns = ms_to_ns(&k("interval_ms"), self.interval_ms)?;
        if !self.rest_ms.is_finite() || self.rest_ms < 0.0 || self.rest_ms > self.interval_ms {
            return Err(cerr(
                k("rest_ms"),
                format!("{}: must be 0..=interval_ms ({})", self.rest_ms, self.interval_ms),
            ));
        }
        let rest_ns = (self.rest_ms * 1e6).round() as u64;
        let max_hop = self.max_hop.unwrap_or(DEFAULT_MAX_HOP);
        if !(2..=MAX_HOP_LIMIT).contains(&max_hop) {
            return Err(cerr(k("max_hop"), format!("must be 2..={MAX_HOP_LIMIT}")));
        }
        let f = match self.probability.as_str() {
            "f1" => LabelFn::F1,
            "f2" => LabelFn::F2,
            "f3" => LabelFn::F3,
            "table" => {
                if self.table.is_empty() || self.table.len() > MAX_TABLE {
                    return Err(cerr(k("table"), format!("{} entries: must be 1..={MAX_TABLE}", self.table.len())));
                }
                if let Some(p) = self.table.iter().find(|p| !(0.0..=1.0).contains(*p)) {
                    return Err(cerr(k("table"), format!("{p} is not a probability in [0, 1]")));
                }
                LabelFn::Table(self.table.clone())
            }
            p => return Err(cerr(k("probability"), format!("'{p}' is not one of f1, f2, f3, table"))),
        };
        if !self.table.is_empty() && !matches!(f, LabelFn::Table(_)) {
            return Err(cerr(k("table"), "only with probability = \"table\""));
        }
        if f == LabelFn::F1 {
            crate::fields::refuse_given(
                &[(&k("max_hop"), self.max_hop.is_some())],
                "applies to f2, f3 and table: f1 is 0 for an unlabeled packet and 1 for a labeled one whatever it carries",
            )?;
        }
        // f is read at min(n, max_hop - 1): a longer table's tail never is.
        if self.table.len() > max_hop as usize {
            return Err(cerr(
                k("table"),
                format!(
                    "{} entries, but f is read at min(n, max_hop - 1) and max_hop is {max_hop}: \
                     set max_hop = {} or drop the entries past f({})",
                    self.table.len(),
                    self.table.len().max(2),
                    max_hop - 1
                ),
            ));
        }
        if self.max_shift > MAX_SHIFT {
            return Err(cerr(k("max_shift"), format!("{}: must be 0..={MAX_SHIFT}", self.max_shift)));
        }
        let edge_ports = match &self.edge_ports {
            None => int.spec.edge_ports,
            Some(list) => {
                let mut e = 0u32;
                for p in list {
                    e |= 1 << port_by_name(ports, &k("edge_ports"), p)?;
                }
                e
            }
        };
        if edge_ports != 0 && int.collectors.is_empty() {
            return Err(cerr(
                "label",
                "edge ports export labels as Telemetry Reports: needs at least one [[int.collector]]",
            ));
        }
        // Label reports leave, and specific flows enter (`stage::claim`),
        // only at edge ports.
        if edge_ports == 0 {
            crate::fields::refuse_given(
                &[
                    (&k("report_truncate"), self.report_truncate.is_some()),
                    (&k("ring_size"), self.ring_size.is_some()),
                    (&k("flow[0].name"), !self.flow.is_empty()),
                ],
                "applies at edge ports only (label reports leave there, specific flows enter there), \
                 and this switch has none ([label] edge_ports, or [int] edge_ports)",
            )?;
        }
        let report_truncate = self.report_truncate.unwrap_or(DEFAULT_REPORT_TRUNCATE);
        if !(64..=REPORT_MAX).contains(&report_truncate) {
            return Err(cerr(k("report_truncate"), format!("must be 64..={REPORT_MAX}")));
        }
        let ring_size = self.ring_size.unwrap_or(DEFAULT_RING_SIZE);
        if !(2..=1 << 20).contains(&ring_size) {
            return Err(cerr(k("ring_size"), "must be 2..=1048576"));
        }
        let mut watch: Vec<WatchRule> = Vec::new();
        for (i, m) in self.watch.iter().enumerate() {
            let key = |f: &str| format!("label.watch[{i}].{f}");
            let role = match m.role.as_deref().unwrap_or("label") {
                "label" => "transit",
                "none" => "none",
                r => return Err(cerr(key("role"), format!("'{r}' is not one of label, none"))),
            };
            if m.interval_ms.is_some() {
                return Err(cerr(key("interval_ms"), "only [[label.flow]] entries have an interval"));
            }
            let r = m.rule(ports, role).map_err(|e| cerr(key(&e.key), e.reason))?;
            if watch.iter().any(|w| w.name == r.name) {
                return Err(cerr(key("name"), format!("'{}' is used twice", r.name)));
            }
            let at = watch.iter().position(|w| w.priority < r.priority).unwrap_or(watch.len());
            watch.insert(at, r);
        }
        let mut flows: Vec<(FlowRule, u64)> = Vec::new();
        for (i, m) in self.flow.iter().enumerate() {
            let key = |f: &str| format!("label.flow[{i}].{f}");
            if m.role.is_some() {
                return Err(cerr(key("role"), "specific flows are always labeled at every hop; exempt packets with [[label.watch]] role = \"none\""));
            }
            let ns =
                ms_to_ns(&key("interval_ms"), m.interval_ms.ok_or_else(|| cerr(key("interval_ms"), "is required"))?)?;
            let r = m.rule(ports, "transit").map_err(|e| cerr(key(&e.key), e.reason))?;
            if let Some(p) = r.in_port.filter(|&p| edge_ports & 1 << p == 0) {
                return Err(cerr(
                    key("in_port"),
                    format!("{} is not an edge port: specific flows enter at edge ports", ports[p as usize]),
                ));
            }
            if flows.iter().any(|(w, _)| w.rule.name == r.name) {
                return Err(cerr(key("name"), format!("'{}' is used twice", r.name)));
            }
            let at = flows.iter().position(|(w, _)| w.rule.priority < r.priority).unwrap_or(flows.len());
            flows.insert(at, (FlowRule { rule: r, interval_tsc: 0 }, ns));
        }
        let mut port_mtu = [1500u16; MAX_PORTS];
        for (i, m) in mtu.iter().enumerate().take(MAX_PORTS) {
            port_mtu[i] = *m;
        }
        let spec = LabelSpec {
            node_id: int.spec.node_id,
            ds_id: self.label_domain_id,
            presence,
            bitmap,
            max_labels: self.max_labels,
            times: Times { interval: 1, rest: 0 },
            f: Thresholds::new(&f, max_hop),
            edge_ports,
            mtu: port_mtu,
            truncate: report_truncate,
            watch,
            flows: flows.iter().map(|(f, _)| f.clone()).collect(),
        };
        Ok(Some(LabelPlan {
            spec,
            interval_ns,
            rest_ns,
            f,
            max_hop,
            max_shift: self.max_shift,
            ring_size,
            seed: self.seed,
            flow_intervals_ns: flows.iter().map(|(_, ns)| *ns).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::int::watch::Presence;

    fn int_plan() -> IntPlan {
        let c: crate::int::config::IntConfig =
            toml::from_str("node_id = 7\nedge_ports = [\"p0\"]\n[[collector]]\naddress = \"127.0.0.1:9000\"\n")
                .unwrap();
        c.to_plan(&["p0".into(), "p1".into()], &[1500, 1500]).unwrap()
    }

    fn plan(text: &str) -> Result<Option<LabelPlan>, ConfigError> {
        let c: LabelConfig = toml::from_str(text).map_err(|e| cerr("toml", e.to_string()))?;
        c.to_plan(&["p0".into(), "p1".into()], &[1500, 9000], Some(&int_plan()))
    }

    #[test]
    fn defaults_are_the_papers() {
        let p = plan("").unwrap().unwrap();
        assert_eq!((p.spec.bitmap, p.spec.max_labels, p.interval_ns, p.rest_ns), (0xfc00, 8, 50_000_000, 0));
        assert_eq!(p.spec.f.probability(0), 0.0);
        assert_eq!(p.spec.f.probability(1), 1.0);
        assert_eq!((p.spec.edge_ports, p.spec.node_id, p.spec.mtu[1]), (0b01, 7, 9000));
        assert!(matches!(p.spec.presence, Presence::Dscp { value: 0x17, mask: 0x3f }));
        let s = p.spec(2_000_000_000);
        assert_eq!(s.times, Times { interval: 100_000_000, rest: 0 });
    }

    #[test]
    fn max_hop_bounds_where_f_is_read() {
        // A table's every entry is read once max_hop reaches its length.
        let p = plan("probability = \"table\"\ntable = [0, 0.25, 0.5, 0.75, 0.875, 1]\nmax_hop = 6").unwrap().unwrap();
        assert_eq!((p.max_hop, p.spec.f.probability(4), p.spec.f.probability(5)), (6, 0.875, 1.0));
        assert_eq!(p.spec.f.probability(9), 1.0);
        let p = plan("probability = \"f2\"\nmax_hop = 3").unwrap().unwrap();
        assert_eq!((p.spec.f.probability(1), p.spec.f.probability(2)), (0.5, 1.0));
        // Left out: the paper's 5.
        let p = plan("probability = \"f2\"").unwrap().unwrap();
        assert_eq!((p.max_hop, p.spec.f.probability(1)), (5, 0.25));
        let e = plan("max_hop = 4").unwrap_err().to_string();
        assert!(e.contains("label.max_hop") && e.contains("f1"), "{e}");
        let e = plan("probability = \"table\"\ntable = [0, 0.5, 0.5, 0.5, 0.5, 1]").unwrap_err().to_string();
        assert!(e.contains("6 entries") && e.contains("max_hop = 6"), "{e}");
    }

    #[test]
    fn errors_name_the_key_and_the_reason() {
        for (text, key) in [
            ("interval_ms = 0", "label.interval_ms"),
            ("interval_ms = -1", "label.interval_ms"),
            ("rest_ms = 60", "label.rest_ms"),
            ("probability = \"table\"\ntable = [0.1, 1.5]", "label.table"),
            ("probability = \"table\"\ntable = [0, 0, 0, 0, 0, 0, 0, 0, 0]", "label.table"),
            ("table = [0.5]", "label.table"),
            ("max_shift = 17", "label.max_shift"),
            ("label_domain_id = 0", "label.label_domain_id"),
            ("probability = \"f9\"", "label.probability"),
            ("max_hop = 1", "label.max_hop"),
            ("max_hop = 4", "label.max_hop"),
            ("probability = \"table\"\ntable = [0, 0.5, 0.5, 0.5, 0.5, 1]", "label.table"),
            ("probability = \"table\"\ntable = [0, 0.5, 1]\nmax_hop = 2", "label.table"),
            ("presence = \"ip\"", "label.presence"),
            ("udp_port = 5000", "label.udp_port"),
            ("presence = \"udp_port\"\ndscp_value = 0x20", "label.dscp_value"),
            ("presence = \"udp_port\"\nudp_port = 0", "label.udp_port"),
            ("[[watch]]\nname = \"w\"\nrole = \"sink\"", "label.watch[0].role"),
            ("[[flow]]\nname = \"f\"\ndst_port = 80", "label.flow[0].interval_ms"),
            ("[[flow]]\nname = \"f\"\ninterval_ms = 10\nin_port = \"p9\"", "label.flow[0].in_port"),
        ] {
            let e = plan(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {}", e.reason);
        }
        let c = LabelConfig::default();
        assert_eq!(c.to_plan(&[], &[], None).unwrap_err().key, "label");
    }

    #[test]
    fn watch_and_flow_rules() {
        let p = plan(
            "[[watch]]\nname = \"no-dns\"\nrole = \"none\"\ndst_port = 53\npriority = 5\n\
             [[watch]]\nname = \"rest\"\n\
             [[flow]]\nname = \"vip\"\ndst = \"10.0.9.0/24\"\ninterval_ms = 10\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            p.spec.watch.iter().map(|r| (r.name.as_str(), r.role)).collect::<Vec<_>>(),
            [("no-dns", Role::None), ("rest", Role::Transit)]
        );
        assert_eq!(p.spec(1_000_000_000).flows[0].interval_tsc, 10_000_000);
        let p = plan("[[flow]]\nname = \"vip\"\nin_port = \"p0\"\ninterval_ms = 10\n").unwrap().unwrap();
        assert_eq!(p.spec.flows[0].rule.in_port, Some(0));
    }

    /// A core switch (no edge port) never exports nor starts a specific
    /// flow: what only those read is refused by name.
    #[test]
    fn edge_only_keys_need_an_edge_port() {
        for (text, key) in [
            ("edge_ports = []\nreport_truncate = 256", "label.report_truncate"),
            ("edge_ports = []\nring_size = 1024", "label.ring_size"),
            ("edge_ports = []\n[[flow]]\nname = \"vip\"\ninterval_ms = 10", "label.flow[0].name"),
            ("[[flow]]\nname = \"vip\"\nin_port = \"p1\"\ninterval_ms = 10", "label.flow[0].in_port"),
        ] {
            let e = plan(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
            assert!(e.reason.contains("edge port"), "{text}: {e}");
        }
        let p = plan("edge_ports = []").unwrap().unwrap();
        assert_eq!((p.spec.edge_ports, p.spec.truncate, p.ring_size), (0, 128, 4096));
        let p = plan("report_truncate = 256\nring_size = 1024").unwrap().unwrap();
        assert_eq!((p.spec.truncate, p.ring_size), (256, 1024));
    }
}
