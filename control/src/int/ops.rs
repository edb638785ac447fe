//! INT's operations of the control API: the domain and its watchlist,
//! report export. A watchlist change is a new table generation.

use dataplane::counters::Event;
use dataplane::int::watch::{IntSpec, Role, Ternary, WatchRule};
use dataplane::int::Presence;

use crate::api::views::Generation;
use crate::api::ApiError;
use crate::int::api::{IntExport, IntView, PresenceView, ReportsView, WatchView};
use crate::int::config::instruction_names;
use crate::switch::ops::events_by_name;
use crate::switch::Switch;

fn not_configured() -> ApiError {
    ApiError::not_configured("INT", "int")
}

/// A watchlist rule in the config's terms.
pub fn watch_view(r: &WatchRule, ports: &[String]) -> WatchView {
    let addr = |t: &Ternary<u128>| -> Option<String> {
        (t.mask != 0).then(|| {
            if r.ip_version == 4 {
                let len = (t.mask as u32).leading_ones();
                format!("{}/{len}", std::net::Ipv4Addr::from(t.value as u32))
            } else {
                format!("{}/{}", std::net::Ipv6Addr::from(t.value), t.mask.leading_ones())
            }
        })
    };
    let t16 = |t: &Ternary<u16>, max: u16| -> Option<String> {
        match t.mask {
            0 => None,
            m if m == max => Some(t.value.to_string()),
            m => Some(format!("{:#x}/{:#x}", t.value, m)),
        }
    };
    let source = match r.role {
        Role::Source(sp) => Some(sp),
        _ => None,
    };
    WatchView {
        name: r.name.clone(),
        priority: r.priority,
        role: r.role.name().into(),
        src: addr(&r.src),
        dst: addr(&r.dst),
        proto: (r.proto.mask != 0).then_some(r.proto.value),
        src_port: t16(&r.src_port, 0xffff),
        dst_port: t16(&r.dst_port, 0xffff),
        dscp: t16(&Ternary { value: r.dscp.value as u16, mask: r.dscp.mask as u16 }, 0x3f),
        in_port: r.in_port.and_then(|p| ports.get(p as usize).cloned()),
        instructions: source.map(|sp| instruction_names(sp.bitmap)),
        bitmap: source.map(|sp| format!("{:#06x}", sp.bitmap)),
        max_hops: source.map(|sp| sp.max_hops),
        domain_id: source.map(|sp| sp.domain_id),
    }
}

/// A domain's presence method, in the config's terms.
pub(crate) fn presence_view(p: Presence) -> PresenceView {
    match p {
        Presence::UdpPort(udp_port) => PresenceView::UdpPort { udp_port },
        Presence::Dscp { value, mask } => {
            PresenceView::Dscp { dscp_value: format!("{value:#04x}"), dscp_mask: format!("{mask:#04x}") }
        }
    }
}

impl Switch {
    fn int_spec_mut(&mut self) -> Result<&mut IntSpec, ApiError> {
        self.spec.int.as_mut().ok_or_else(not_configured)
    }

    /// The INT domain and its watchlist, in the config's terms.
    pub fn int_view(&self) -> Result<IntView, ApiError> {
        let s = self.spec.int.as_ref().ok_or_else(not_configured)?;
        let names = self.port_names();
        let (edge, core): (Vec<_>, Vec<_>) = names.iter().enumerate().partition(|(i, _)| s.is_edge(*i));
        Ok(IntView {
            node_id: s.node_id,
            presence: presence_view(s.presence),
            edge_ports: edge.into_iter().map(|(_, n)| n.clone()).collect(),
            core_ports: core.into_iter().map(|(_, n)| n.clone()).collect(),
            mtu: names.iter().enumerate().map(|(i, n)| (n.clone(), s.mtu[i])).collect(),
            source_pushes: s.source_pushes,
            transit: s.transit,
            mtu_exceeded: if s.mtu_report { "report" } else { "flag" }.into(),
            report_md: instruction_names(s.report.md_bits),
            report_truncate: s.report.truncate,
            watch: s.watch.iter().map(|r| watch_view(r, &names)).collect(),
            counters: events_by_name(&self.counters(), "int_"),
        })
    }

    pub fn int_watch_add(&mut self, rule: WatchRule) -> Result<Generation, ApiError> {
        // As the config's [label] and [gpint] refuse such a rule: its packets
        // would be taken for labels or probes (the INT stage leaves those).
        if let Role::Source(s) = rule.role {
            let taken = [
                ("label.label_domain_id", self.spec.label.as_ref().map(|l| l.ds_id)),
                ("gpint.domain_id", self.spec.gpint.as_ref().map(|g| g.domain_id)),
            ];
            if let Some((key, _)) = taken.iter().find(|(_, d)| *d == Some(s.domain_id)) {
                return Err(ApiError::bad_argument(
                    "domain_id",
                    format!("{:#06x} is {key}: a source rule needs a domain of its own", s.domain_id),
                ));
            }
        }
        self.int_spec_mut()?.upsert(rule);
        self.commit()
    }

    pub fn int_watch_del(&mut self, name: &str) -> Result<Generation, ApiError> {
        if !self.int_spec_mut()?.remove(name) {
            return Err(ApiError::not_found("name", format!("no watch rule named '{name}'")));
        }
        self.commit()
    }

    /// Report rings and collectors.
    pub fn reports_view(&self) -> Result<ReportsView, ApiError> {
        let ex = self.exporter.as_ref().ok_or_else(not_configured)?;
        let full: Vec<u64> =
            self.worker_counters().iter().map(|c| c.events[Event::IntReportRingFull as usize]).collect();
        Ok(ex.view(&full))
    }

    pub fn int_export_pause(&mut self, paused: bool) -> Result<IntExport, ApiError> {
        let ex = self.exporter.as_mut().ok_or_else(not_configured)?;
        ex.paused = paused;
        Ok(IntExport { paused })
    }
}
