//! The switch's own operations of the control API (routes, neighbours,
//! flows, ports, counters) and its views, in the API's types. Features add
//! theirs in their folders (`int::ops`, `ampm::ops`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

use dataplane::counters::{CounterValues, Event};
use dataplane::flow_table::FlowAction;
use dataplane::parse::FlowKey;
use dataplane::tables::{NeighbourSpec, RouteSpec};
use dataplane::worker::{FlowCommand, FlowRecord, MacRecord};
use dataplane::DropReason;

use super::Switch;
use crate::api::views::{
    Cleared, CountersView, DropsView, EthdevView, FlowView, Generation, Impaired, LinkView, MacView, NeighbourView,
    PortCounters, PortEnabled, PortView, ResolutionCounters, RouteLookup, RouteView, RoutesLoaded, Version, WorkerView,
};
use crate::api::{ApiError, PROTOCOL_VERSION};
use crate::fields::format_mac;

/// Every drop reason's count, by name.
pub fn drops_by_name(c: &CounterValues) -> BTreeMap<String, u64> {
    DropReason::ALL.iter().map(|r| (r.name().to_string(), c.drops[*r as usize])).collect()
}

/// Workers' counters added up.
pub fn sum(per: &[CounterValues]) -> CounterValues {
    let mut total = CounterValues::default();
    for c in per {
        total.add(c);
    }
    total
}

/// The events whose names start with `prefix` ("" for all), by name.
pub fn events_by_name(c: &CounterValues, prefix: &str) -> BTreeMap<String, u64> {
    Event::ALL
        .iter()
        .filter(|e| e.name().starts_with(prefix))
        .map(|e| (e.name().to_string(), c.events[*e as usize]))
        .collect()
}

impl Switch {
    pub fn version(&self) -> Version {
        Version {
            intswitch: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL_VERSION,
            dpdk: dataplane::dpdk::dpdk_version(),
            name: self.plan().raw.name.clone(),
            mode: self.plan().mode.name().into(),
        }
    }

    /// Routes are a router's: another mode never looks them up.
    fn routes_apply(&self) -> Result<(), ApiError> {
        match self.plan().mode {
            dataplane::tables::Mode::Router => Ok(()),
            m => Err(ApiError::new(
                "not_configured",
                None,
                format!("routes need mode = \"router\"; this switch's is \"{}\"", m.name()),
            )),
        }
    }

    pub fn route_add(&mut self, r: RouteSpec) -> Result<Generation, ApiError> {
        self.routes_apply()?;
        self.check_gateway(&r).map_err(|e| ApiError::bad_argument("via", e))?;
        self.spec.routes.upsert(r);
        self.commit()
    }

    /// `config::check_gateway` against the port's addresses and the
    /// neighbours in use.
    fn check_gateway(&self, r: &RouteSpec) -> Result<(), String> {
        let Some(p) = self.spec.ports.get(r.port as usize) else { return Ok(()) };
        let subnets = crate::config::PortSubnets { name: &p.name, ipv4: &p.ipv4, ipv6: &p.ipv6, mac: Some(p.mac) };
        crate::config::check_gateway(r, &subnets, &self.spec.neighbours)
    }

    pub fn route_del(&mut self, prefix: IpAddr, len: u8) -> Result<Generation, ApiError> {
        if !self.spec.routes.remove(prefix, len) {
            return Err(ApiError::not_found("prefix", format!("no route {prefix}/{len}")));
        }
        self.commit()
    }

    /// A routes file's routes added, each replacing a route to its prefix
    /// (or, with `replace`, instead of every configured route), in one
    /// generation: one build of the route tables however many lines, or
    /// for a few added routes their regions rebuilt. A file with an error,
    /// or whose whole build would not fit the machine, changes nothing.
    pub fn route_load(&mut self, path: &str, replace: bool) -> Result<RoutesLoaded, ApiError> {
        if !std::path::Path::new(path).is_absolute() {
            return Err(ApiError::bad_argument("path", format!("{path}: need an absolute path (the switch's)")));
        }
        self.routes_apply()?;
        let loaded = crate::config::read_routes_file(path, &self.port_names(), "path")?;
        for r in &loaded {
            self.check_gateway(r)
                .map_err(|e| ApiError::bad_argument("path", format!("{path}: {}/{}: {e}", r.prefix, r.len)))?;
        }
        if !replace && loaded.len() <= dataplane::tables::MAX_REGIONS {
            // A few routes: each rebuilds its region of a copy of the tables
            // in use (as `route add` does), not a whole build.
            for r in &loaded {
                self.spec.routes.upsert(*r);
            }
        } else {
            let all: Vec<RouteSpec> = match replace {
                true => loaded.clone(),
                false => self.spec.routes.iter().chain(&loaded).copied().collect(),
            };
            crate::memory_budget::check_routes(&all, crate::memory_budget::mem_available())
                .map_err(|e| ApiError::bad_argument("path", format!("{path}: {e}")))?;
            self.spec.routes.set(&all);
        }
        let g = self.commit()?;
        Ok(RoutesLoaded { generation: g.generation, loaded: loaded.len(), routes: self.spec.routes.len() })
    }

    /// Where a packet to `addr` goes: the configuration's longest match,
    /// and the next hop of the generation the workers have.
    pub fn route_get(&self, addr: IpAddr) -> RouteLookup {
        let t = self.shared.tables.load();
        let named = dataplane::tables::longest_match(&self.spec, addr);
        let hop = t.route_lookup(addr);
        RouteLookup {
            address: addr.to_string(),
            generation: t.generation,
            route: named.map(|(p, l, _, _)| format!("{p}/{l}")),
            kind: named.map(|(_, _, _, k)| k.name().to_string()),
            port: hop.and_then(|h| self.port_name(h.port)),
            via: hop.and_then(|h| h.gateway).map(|g| g.to_string()),
            via_mac: hop.and_then(|h| h.gateway_mac).map(|m| format_mac(&m)),
            local: hop.is_some_and(|h| h.local),
        }
    }

    pub fn neighbour_add(&mut self, n: NeighbourSpec) -> Result<Generation, ApiError> {
        let ports: Vec<crate::config::PortSubnets> = self
            .spec
            .ports
            .iter()
            .map(|p| crate::config::PortSubnets { name: &p.name, ipv4: &p.ipv4, ipv6: &p.ipv6, mac: Some(p.mac) })
            .collect();
        crate::config::check_neighbour(&n, &ports).map_err(|e| ApiError::bad_argument(&e.key, e.reason))?;
        self.spec.upsert_neighbour(n);
        self.commit()
    }

    pub fn neighbour_del(&mut self, ip: IpAddr) -> Result<Generation, ApiError> {
        let n = self.spec.neighbours.len();
        self.spec.neighbours.retain(|x| x.ip != ip);
        if self.spec.neighbours.len() == n {
            return Err(ApiError::not_found("ip", format!("no neighbour {ip}")));
        }
        self.commit()
    }

    pub fn flow_add(&mut self, key: FlowKey, action: FlowAction) -> Result<Generation, ApiError> {
        let g = self.flow_command(|generation| FlowCommand::Install { key, action, generation })?;
        if let Some(i) = self.shared.workers.iter().position(|w| w.failed_install.load(Ordering::Acquire) == g) {
            // Keep the tables consistent: take it out of the workers that took it.
            let rollback = match self.flow_command(|generation| FlowCommand::Remove { key, generation }) {
                Ok(_) => String::new(),
                Err(e) => format!("; removing it from the other workers failed too ({}): `flow del` it", e.message),
            };
            return Err(ApiError::new("table_full", None, format!("worker {i}'s flow table is full{rollback}")));
        }
        Ok(Generation { generation: g })
    }

    pub fn flow_del(&mut self, key: FlowKey) -> Result<Generation, ApiError> {
        let g = self.flow_command(|generation| FlowCommand::Remove { key, generation })?;
        // As route and neighbour del: a key no worker held is an error,
        // not an `ok` for a flow that a typo left in place.
        if !self.shared.workers.iter().any(|w| w.removed_flow.load(Ordering::Acquire) == g) {
            return Err(ApiError::not_found("key", "no worker has this flow (`show flows` lists them)"));
        }
        Ok(Generation { generation: g })
    }

    /// Every worker's flows (at most `max` per worker).
    pub fn flows(&mut self, max: usize) -> Result<Vec<(usize, FlowRecord)>, ApiError> {
        self.dump(|generation| FlowCommand::Dump { max, generation }, |w| &w.dump)
    }

    /// Up to `max` learned MAC entries of each worker, by worker index.
    pub fn macs(&mut self, max: usize) -> Result<Vec<(usize, MacRecord)>, ApiError> {
        self.dump(|generation| FlowCommand::DumpMacs { max, generation }, |w| &w.mac_dump)
    }

    fn port_name(&self, p: u16) -> Option<String> {
        self.spec.ports.get(p as usize).map(|p| p.name.clone())
    }

    /// The MAC address table: static entries (every worker's), then each
    /// worker's learned ones.
    pub fn mac_views(&mut self, max: usize) -> Result<Vec<MacView>, ApiError> {
        let learned = self.macs(max)?;
        let hz = self.hz as f64;
        let mut v: Vec<MacView> = self
            .spec
            .static_macs
            .iter()
            .map(|m| MacView {
                worker: None,
                vlan: m.vlan,
                mac: format_mac(&m.mac),
                port: self.port_name(m.port),
                kind: "static".into(),
                idle_s: None,
            })
            .collect();
        v.extend(learned.iter().map(|(w, r)| MacView {
            worker: Some(*w),
            vlan: r.vlan,
            mac: format_mac(&r.mac),
            port: self.port_name(r.port),
            kind: "learned".into(),
            idle_s: Some(r.idle_tsc as f64 / hz),
        }));
        Ok(v)
    }

    pub fn flow_views(&mut self, max: usize) -> Result<Vec<FlowView>, ApiError> {
        let flows = self.flows(max)?;
        let hz = self.hz as f64;
        Ok(flows
            .iter()
            .map(|(w, r)| {
                let k = &r.key;
                let action = match r.action {
                    FlowAction::Normal => "normal".to_string(),
                    FlowAction::Drop => "drop".to_string(),
                    FlowAction::Forward(p) => format!("forward:{}", self.port_name(p).unwrap_or_default()),
                };
                FlowView {
                    worker: *w,
                    in_port: self.port_name(k.in_port()),
                    vlan: k.vlan(),
                    src: k.src_ip().to_string(),
                    dst: k.dst_ip().to_string(),
                    proto: k.proto(),
                    src_port: k.src_port(),
                    dst_port: k.dst_port(),
                    action,
                    installed: r.installed,
                    packets: r.packets,
                    bytes: r.bytes,
                    idle_s: r.idle_tsc as f64 / hz,
                }
            })
            .collect())
    }

    pub fn port_index(&self, name: &str) -> Result<u16, ApiError> {
        self.spec
            .ports
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as u16)
            .ok_or_else(|| ApiError::bad_argument("port", format!("no port named '{name}'")))
    }

    pub fn port_set_enabled(&mut self, name: &str, up: bool) -> Result<PortEnabled, ApiError> {
        let i = self.port_index(name)? as usize;
        self.spec.ports[i].up = up;
        // Where the device can, the link follows (vdevs may not support it).
        let link_changed = self.ports[i].set_link(up).is_ok();
        let g = self.commit()?;
        Ok(PortEnabled { generation: g.generation, link_changed })
    }

    /// Sets (or with `Impairment::default()` removes) a port's link emulation.
    pub fn port_set_impair(&mut self, name: &str, imp: dataplane::impair::Impairment) -> Result<Impaired, ApiError> {
        let i = self.port_index(name)? as usize;
        self.spec.ports[i].impair = imp;
        let g = self.commit()?;
        Ok(Impaired { generation: g.generation, impair: imp.to_netem() })
    }

    pub fn clear_counters(&mut self) -> Cleared {
        self.baseline = self.shared.workers.iter().map(|w| w.counters.snapshot()).collect();
        Cleared { cleared: true }
    }

    // ---- views ----

    /// Whether each port is enabled for forwarding.
    pub fn port_enabled(&self) -> Vec<bool> {
        self.spec.ports.iter().map(|p| p.up).collect()
    }

    pub fn resolution_counters(&self) -> ResolutionCounters {
        self.neighbours.counters
    }

    pub fn port_views(&self) -> Vec<PortView> {
        let c = self.counters();
        self.spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let dev = &self.ports[i];
                let e = dev.stats();
                let link = dev.link();
                PortView {
                    name: p.name.clone(),
                    device: self.plan.ports[i].device.clone(),
                    driver: dev.info().driver.clone(),
                    mac: format_mac(&p.mac),
                    enabled: p.up,
                    impair: p.impair.to_netem(),
                    link: LinkView { up: link.up, speed_mbps: link.speed_mbps, full_duplex: link.full_duplex },
                    rss: dev.rss_active(),
                    rx_checksum_offload: dev.rx_checksum_active(),
                    ipv4: p.ipv4.iter().map(|(a, l)| format!("{}/{l}", IpAddr::from(*a))).collect(),
                    ipv6: p.ipv6.iter().map(|(a, l)| format!("{}/{l}", IpAddr::from(*a))).collect(),
                    rx_packets: c.rx_packets[i],
                    rx_bytes: c.rx_bytes[i],
                    tx_packets: c.tx_packets[i],
                    tx_bytes: c.tx_bytes[i],
                    ethdev: EthdevView {
                        ipackets: e.ipackets,
                        opackets: e.opackets,
                        ibytes: e.ibytes,
                        obytes: e.obytes,
                        imissed: e.imissed,
                        ierrors: e.ierrors,
                        oerrors: e.oerrors,
                        rx_nombuf: e.rx_nombuf,
                    },
                    xstats: dev.xstats().into_iter().collect(),
                }
            })
            .collect()
    }

    /// Each worker: its queues, counters (since `per`'s baseline) and tables.
    pub fn worker_views(&self, per: &[CounterValues]) -> Vec<WorkerView> {
        self.workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let c = &per[i];
                let sh = &self.shared.workers[i];
                WorkerView {
                    id: i,
                    lcore: w.lcore,
                    rx_queues: w
                        .rx
                        .iter()
                        .map(|(p, q)| format!("{}:{q}", self.port_name(*p).unwrap_or_default()))
                        .collect(),
                    rx_packets: c.rx_packets.iter().sum(),
                    rx_bytes: c.rx_bytes.iter().sum(),
                    tx_packets: c.tx_packets.iter().sum(),
                    tx_bytes: c.tx_bytes.iter().sum(),
                    drops: c.total_drops(),
                    polls: c.polls,
                    busy_polls: c.busy_polls,
                    flows: sh.flows_in_use.load(Ordering::Relaxed),
                    macs: sh.macs_in_use.load(Ordering::Relaxed),
                    mac_sync_lost: sh.mac_sync_lost.load(Ordering::Relaxed),
                    table_generation: sh.acked_tables.load(Ordering::Relaxed),
                    flow_generation: sh.acked_flows.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    pub fn drops_view(&self) -> DropsView {
        let per = self.worker_counters();
        let workers = per
            .iter()
            .map(|c| {
                let mut counted = drops_by_name(c);
                counted.retain(|_, n| *n > 0);
                counted
            })
            .collect();
        DropsView { total: drops_by_name(&sum(&per)), workers }
    }

    pub fn counters_view(&self) -> CountersView {
        let per = self.worker_counters();
        let c = sum(&per);
        let ports = self
            .spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortCounters {
                name: p.name.clone(),
                rx_packets: c.rx_packets[i],
                rx_bytes: c.rx_bytes[i],
                tx_packets: c.tx_packets[i],
                tx_bytes: c.tx_bytes[i],
            })
            .collect();
        CountersView {
            uptime_s: self.started.elapsed().as_secs_f64(),
            ports,
            drops: drops_by_name(&c),
            total_drops: c.total_drops(),
            events: events_by_name(&c, ""),
            workers: self.worker_views(&per),
            resolution: self.resolution_counters(),
        }
    }

    /// The first `max` routes: connected, then static in table order.
    pub fn route_views(&self, max: usize) -> Vec<RouteView> {
        let connected = |name: &str, net: IpAddr, l: u8| RouteView {
            prefix: format!("{net}/{l}"),
            port: name.to_string(),
            via: None,
            kind: "connected".into(),
        };
        let mut v = Vec::new();
        for p in &self.spec.ports {
            for (a, l) in &p.ipv4 {
                v.push(connected(&p.name, IpAddr::from(dataplane::lpm::mask(*a, *l)), *l));
            }
            for (a, l) in &p.ipv6 {
                v.push(connected(&p.name, IpAddr::from(dataplane::lpm::mask(*a, *l)), *l));
            }
        }
        v.truncate(max);
        let room = max - v.len();
        v.extend(self.spec.routes.iter().take(room).map(|r| RouteView {
            prefix: format!("{}/{}", r.prefix, r.len),
            port: self.port_name(r.port).unwrap_or_default(),
            via: r.gateway.map(|g| g.to_string()),
            kind: "static".into(),
        }));
        v
    }

    pub fn neighbour_views(&self) -> Vec<NeighbourView> {
        self.spec
            .neighbours
            .iter()
            .map(|n| NeighbourView {
                ip: n.ip.to_string(),
                mac: format_mac(&n.mac),
                port: self.port_name(n.port).unwrap_or_default(),
                permanent: n.permanent,
            })
            .collect()
    }
}
