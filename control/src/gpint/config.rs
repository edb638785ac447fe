//! The `[gpint]` section: probes are INT-MD of their own domain to the INT
//! port, so GPINT needs `[int]` with `presence = "udp_port"` and at least
//! one `[[int.collector]]` (deliveries and notices are Telemetry Reports).

use dataplane::counters::MAX_PORTS;
use dataplane::gpint::{GpintDscp, GpintSpec};
use dataplane::int::watch::Role;
use dataplane::int::Presence;
use serde::{Deserialize, Serialize};

use crate::fields::{cerr, refuse_given, ConfigError};
use crate::int::config::IntPlan;

/// `[gpint]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GpintConfig {
    /// The SQR stage claims probes and feedbacks (false: they are plain
    /// INT and UDP to this switch).
    pub enabled: bool,
    /// A probe's original destination port (in its INT shim) and a
    /// feedback's destination port.
    pub udp_port: u16,
    /// The INT Domain Specific ID of probes.
    pub domain_id: u16,
    /// Feedback, copies, notices and the duplicate filter.
    pub recovery: bool,
    /// How long a copy waits for the next hop's feedback (the paper's
    /// t_f: 1500, the default; its fine-tuned profile 400). With recovery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_ms: Option<u64>,
    /// Copies each worker keeps at most (2 KiB each, not mbufs; default
    /// 64). With recovery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clone_slots: Option<usize>,
    /// Deliveries and notices each worker's ring to the control core holds.
    pub export_ring: usize,
    /// How probes and feedbacks are known: "udp_port" (probes to the INT
    /// port, feedbacks to udp_port) or "dscp" (the paper's codepoints).
    pub classify: String,
    /// "dscp": the codepoints of probes, feedbacks and the copies notices
    /// carry (default the paper's 0x17, 0x19, 0x21).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp_probe: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp_feedback: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp_notice: Option<u8>,
}

impl Default for GpintConfig {
    fn default() -> Self {
        GpintConfig {
            enabled: true,
            udp_port: 17900,
            domain_id: 0x6701,
            recovery: true,
            hold_ms: None,
            clone_slots: None,
            export_ring: 256,
            classify: "udp_port".into(),
            dscp_probe: None,
            dscp_feedback: None,
            dscp_notice: None,
        }
    }
}

/// The validated section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpintPlan {
    pub udp_port: u16,
    pub domain_id: u16,
    pub recovery: bool,
    pub hold_ms: u64,
    pub clone_slots: usize,
    pub export_ring: usize,
    pub dscp: Option<GpintDscp>,
}

impl GpintConfig {
    /// None when `enabled = false`. `ampm`: the AM-PM section, whose DSCP
    /// bits the paper mode's codepoints must not touch.
    pub fn to_plan(
        &self,
        int: Option<&IntPlan>,
        ampm: Option<&crate::ampm::config::AmpmConfig>,
    ) -> Result<Option<GpintPlan>, ConfigError> {
        if !self.enabled {
            return Ok(None);
        }
        let Some(int) = int else {
            return Err(cerr("gpint", "needs [int]: probes are INT-MD packets"));
        };
        // Keys of a mode or feature that is off would be taken and never read.
        if self.classify == "udp_port" {
            let codes = [
                ("gpint.dscp_probe", self.dscp_probe.is_some()),
                ("gpint.dscp_feedback", self.dscp_feedback.is_some()),
                ("gpint.dscp_notice", self.dscp_notice.is_some()),
            ];
            refuse_given(&codes, "applies to classify = \"dscp\", not \"udp_port\"")?;
        }
        if !self.recovery {
            let kept = [("gpint.hold_ms", self.hold_ms.is_some()), ("gpint.clone_slots", self.clone_slots.is_some())];
            refuse_given(&kept, "sizes the copies of recovery, and recovery = false keeps none")?;
        }
        let (hold_ms, clone_slots) = (self.hold_ms.unwrap_or(1500), self.clone_slots.unwrap_or(64));
        let dscp = match self.classify.as_str() {
            "udp_port" => None,
            "dscp" => Some(self.codepoints(int, ampm)?),
            c => return Err(cerr("gpint.classify", format!("'{c}' is not one of udp_port, dscp"))),
        };
        let int_port = match int.spec.presence {
            Presence::UdpPort(p) => Some(p),
            Presence::Dscp { .. } => None,
        };
        if dscp.is_none() && int_port.is_none() {
            return Err(cerr(
                "gpint",
                "classify = \"udp_port\" needs [int] presence = \"udp_port\": probes go to the INT port, the GPINT port saved in their shim",
            ));
        }
        if self.udp_port == 0 || Some(self.udp_port) == int_port {
            return Err(cerr("gpint.udp_port", format!("must be 1-65535 and not the INT port ({int_port:?})")));
        }
        if let Some(r) =
            int.spec.watch.iter().find(|r| matches!(r.role, Role::Source(s) if s.domain_id == self.domain_id))
        {
            return Err(cerr(
                "gpint.domain_id",
                format!(
                    "{:#06x} is the domain of INT watch rule '{}': probes need a domain of their own",
                    self.domain_id, r.name
                ),
            ));
        }
        if int.collectors.is_empty() {
            return Err(cerr(
                "gpint",
                "needs at least one [[int.collector]]: deliveries and notices are Telemetry Reports",
            ));
        }
        if !(1..=60_000).contains(&hold_ms) {
            return Err(cerr("gpint.hold_ms", "must be 1..=60000"));
        }
        if !(1..=65_536).contains(&clone_slots) {
            return Err(cerr("gpint.clone_slots", "must be 1..=65536"));
        }
        if !(2..=65_536).contains(&self.export_ring) {
            return Err(cerr("gpint.export_ring", "must be 2..=65536"));
        }
        Ok(Some(GpintPlan {
            udp_port: self.udp_port,
            domain_id: self.domain_id,
            recovery: self.recovery,
            hold_ms,
            clone_slots,
            export_ring: self.export_ring,
            dscp,
        }))
    }

    /// The paper mode's codepoints: 6-bit, distinct, none that the INT
    /// domain's DSCP presence or an AM-PM flow's DSCP bits would read.
    fn codepoints(
        &self,
        int: &IntPlan,
        ampm: Option<&crate::ampm::config::AmpmConfig>,
    ) -> Result<GpintDscp, ConfigError> {
        let codes = [
            ("dscp_probe", self.dscp_probe.unwrap_or(0x17)),
            ("dscp_feedback", self.dscp_feedback.unwrap_or(0x19)),
            ("dscp_notice", self.dscp_notice.unwrap_or(0x21)),
        ];
        for (i, (k, c)) in codes.iter().enumerate() {
            let key = format!("gpint.{k}");
            if *c > 63 {
                return Err(cerr(key, format!("{c:#04x} is not a DSCP codepoint (0-63)")));
            }
            if codes[..i].iter().any(|(_, o)| o == c) {
                return Err(cerr(key, format!("{c:#04x} is already another GPINT codepoint")));
            }
            if let Presence::Dscp { value, mask } = int.spec.presence {
                if c & mask == value {
                    return Err(cerr(key, format!("{c:#04x} is what INT's presence {value:#04x}/{mask:#04x} marks")));
                }
            }
            for f in ampm.map(|a| a.flow.as_slice()).unwrap_or_default() {
                let bits = if f.carrier == "dscp" { 1u8 << f.l_bit().min(5) | 1 << f.d_bit().min(5) } else { 0 };
                if c & bits != 0 {
                    return Err(cerr(
                        key,
                        format!("{c:#04x} sets a DSCP bit that AM-PM flow '{}' marks ({bits:#04x})", f.name),
                    ));
                }
            }
        }
        Ok(GpintDscp { probe: codes[0].1, feedback: codes[1].1, notice: codes[2].1 })
    }
}

impl GpintPlan {
    /// What the workers read, with the INT domain's port, node ID and MTUs,
    /// and `hold_ms` in ticks of a `tsc_hz` clock.
    pub fn spec(&self, int: &IntPlan, tsc_hz: u64) -> GpintSpec {
        let int_port = match int.spec.presence {
            Presence::UdpPort(p) => p,
            Presence::Dscp { .. } => 0,
        };
        let mut mtu = [1500u16; MAX_PORTS];
        mtu.copy_from_slice(&int.spec.mtu);
        GpintSpec {
            int_port,
            udp_port: self.udp_port,
            domain_id: self.domain_id,
            node_id: int.spec.node_id,
            recovery: self.recovery,
            hold_tsc: self.hold_ms * tsc_hz.max(1) / 1000,
            mtu,
            dscp: self.dscp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const BASE: &str = r#"
name = "g"
mode = "xconnect"
[[port]]
name = "p0"
device = "net_null0"
peer = "p1"
[[port]]
name = "p1"
device = "net_null1"
peer = "p0"
"#;
    const INT: &str = "[int]\nnode_id = 7\n[[int.collector]]\naddress = \"127.0.0.1:32766\"\n";

    fn plan(text: &str) -> Result<Option<GpintPlan>, ConfigError> {
        Config::from_toml(&format!("{BASE}{text}"))?.validate().map(|p| p.gpint)
    }

    #[test]
    fn defaults_and_the_spec_the_workers_read() {
        let p = plan(&format!("{INT}[gpint]\n")).unwrap().unwrap();
        assert_eq!((p.udp_port, p.domain_id, p.recovery, p.hold_ms, p.clone_slots), (17900, 0x6701, true, 1500, 64));
        let full = Config::from_toml(&format!("{BASE}{INT}[gpint]\nhold_ms = 400\n")).unwrap().validate().unwrap();
        let s = full.table_spec(&[[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]], 1_000_000).gpint.unwrap();
        assert_eq!((s.int_port, s.udp_port, s.node_id, s.hold_tsc, s.mtu[1]), (17768, 17900, 7, 400_000, 1500));
        assert_eq!(plan(&format!("{INT}[gpint]\nenabled = false\n")).unwrap(), None);
        // The paper's mode, next to INT in DSCP mode on another codepoint.
        let p = plan("[int]\nnode_id = 7\npresence = \"dscp\"\ndscp_value = 0x30\n[[int.collector]]\naddress = \"127.0.0.1:1\"\n\
                      [gpint]\nclassify = \"dscp\"\n")
        .unwrap()
        .unwrap();
        assert_eq!(p.dscp, Some(GpintDscp { probe: 0x17, feedback: 0x19, notice: 0x21 }));
        assert_eq!(plan(INT).unwrap(), None, "absent: off");
    }

    #[test]
    fn every_bad_key_is_named() {
        let cases = [
            ("[gpint]\n", "gpint"),
            ("[int]\nnode_id = 7\n[gpint]\n", "gpint"),
            (&format!("{INT}[gpint]\nclassify = \"tos\"\n"), "gpint.classify"),
            (&format!("{INT}[gpint]\nclassify = \"dscp\"\ndscp_probe = 64\n"), "gpint.dscp_probe"),
            (&format!("{INT}[gpint]\nclassify = \"dscp\"\ndscp_notice = 0x19\n"), "gpint.dscp_notice"),
            (
                "[int]\nnode_id = 7\npresence = \"dscp\"\n[[int.collector]]\naddress = \"127.0.0.1:1\"\n[gpint]\nclassify = \"dscp\"\n",
                "gpint.dscp_probe",
            ),
            (
                &format!(
                    "{INT}[gpint]\nclassify = \"dscp\"\n[ampm]\nnode_id = 1\n[[ampm.flow]]\nname = \"f\"\nflow_mon_id = 1\n\
                     role = \"initiator\"\nmethod = \"step\"\ncarrier = \"dscp\"\n[[ampm.collector]]\naddress = \"127.0.0.1:1\"\n"
                ),
                "gpint.dscp_probe",
            ),
            ("[int]\nnode_id = 7\npresence = \"dscp\"\n[[int.collector]]\naddress = \"127.0.0.1:1\"\n[gpint]\n", "gpint"),
            (&format!("{INT}[gpint]\nudp_port = 17768\n"), "gpint.udp_port"),
            (&format!("{INT}[gpint]\nhold_ms = 0\n"), "gpint.hold_ms"),
            (&format!("{INT}[gpint]\nclone_slots = 0\n"), "gpint.clone_slots"),
            (&format!("{INT}[gpint]\ndscp_probe = 0x20\n"), "gpint.dscp_probe"),
            (&format!("{INT}[gpint]\nrecovery = false\nhold_ms = 400\n"), "gpint.hold_ms"),
            (&format!("{INT}[gpint]\nrecovery = false\nclone_slots = 8\n"), "gpint.clone_slots"),
            (&format!("{INT}[gpint]\nexport_ring = 1\n"), "gpint.export_ring"),
            (
                &format!(
                    "{INT}[[int.watch]]\nname = \"w\"\nrole = \"source\"\nbitmap = 0xc000\ndomain_id = 0x6701\n[gpint]\n"
                ),
                "gpint.domain_id",
            ),
        ];
        for (text, key) in cases {
            let e = plan(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e:?}");
        }
        assert!(Config::from_toml(&format!("{BASE}{INT}[gpint]\nholdms = 3\n")).is_err(), "unknown key");
    }
}
