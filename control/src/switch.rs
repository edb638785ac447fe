//! The running switch: brings up EAL, pools and ports from a validated
//! `Plan`, builds each worker's state before launch, and runs the control
//! loop on the main lcore (table generations, neighbour learning and
//! resolution, live statistics, clean stop).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::counters::{CounterValues, Event};
use dataplane::dpdk::{Eal, EalArgs, Mempool, Port, PortSetup, PortStats};
use dataplane::forward::{self, ControlEvent};
use dataplane::tables::{NeighbourSpec, PortState, TableSpec, Tables};
use dataplane::worker::{self, FlowCommand, IdleConfig, Shared, WorkerSetup};
use dataplane::DropReason;

use crate::config::{format_mac, Plan};

/// How the switch reports while running and at exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Print live rates every this many seconds (0: never).
    pub stats_interval_s: u64,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Final counters as JSON instead of text.
    pub json: bool,
}

/// Re-sends a resolution request for the same address at most this often.
const RESOLVE_INTERVAL: Duration = Duration::from_millis(500);

pub struct Switch {
    plan: Plan,
    eal: Eal,
    pool: Mempool,
    ports: Vec<Port>,
    spec: TableSpec,
    shared: Arc<Shared>,
    lcores: Vec<u32>,
    generation: u64,
    retired: Vec<(u64, Arc<Tables>)>,
    resolving: HashMap<IpAddr, Instant>,
}

fn eal_args(plan: &Plan) -> EalArgs {
    let e = &plan.raw.eal;
    EalArgs {
        program: "intswitch".into(),
        lcores: e.lcores.clone(),
        memory_mb: e.memory_mb,
        no_huge: !e.huge,
        no_pci: !e.pci && !plan.ports.iter().any(|p| p.is_pci),
        file_prefix: Some(e.file_prefix.clone().unwrap_or_else(|| format!("intswitch-{}", plan.raw.name))),
        vdevs: plan.ports.iter().filter(|p| !p.is_pci).map(|p| p.device.clone()).collect(),
        allow: plan.ports.iter().filter(|p| p.is_pci).map(|p| p.device.clone()).collect(),
        log_level: e.log_level.clone(),
        extra: e.extra.clone(),
    }
}

impl Switch {
    /// Initialises DPDK and the ports, and launches the workers.
    pub fn start(plan: Plan) -> Result<Switch, String> {
        let eal = Eal::init(&eal_args(&plan)).map_err(|e| e.to_string())?;
        let available = eal.worker_lcores();
        let workers = if plan.workers.is_empty() {
            let l = *available.first().ok_or("eal.lcores: needs at least two lcores (main + one worker)")?;
            vec![crate::config::WorkerPlan { lcore: l, rx: (0..plan.ports.len() as u16).map(|p| (p, 0)).collect() }]
        } else {
            plan.workers.clone()
        };
        for (i, w) in workers.iter().enumerate() {
            if !available.contains(&w.lcore) {
                return Err(format!(
                    "worker[{i}].lcore: lcore {} is not a worker lcore of eal.lcores '{}' (available: {available:?})",
                    w.lcore, plan.raw.eal.lcores
                ));
            }
        }
        let d = &plan.raw.dataplane;
        let pool =
            Mempool::new(&eal, "intswitch_pool", d.mbufs, d.mbuf_cache, 2048 + 128).map_err(|e| e.to_string())?;
        let mut ports = Vec::new();
        for (pi, p) in plan.ports.iter().enumerate() {
            let rxq = workers
                .iter()
                .flat_map(|w| &w.rx)
                .filter(|(x, _)| *x == pi as u16)
                .map(|(_, q)| q + 1)
                .max()
                .unwrap_or(1);
            let setup = PortSetup {
                rx_queues: rxq,
                tx_queues: workers.len() as u16,
                rx_desc: d.rx_desc,
                tx_desc: d.tx_desc,
                mtu: p.mtu,
                promiscuous: p.promiscuous,
                rss: p.rss,
                mac: p.mac,
            };
            ports
                .push(Port::open(&eal, &p.device, &setup, &pool).map_err(|e| format!("port[{pi}] '{}': {e}", p.name))?);
        }
        let spec = TableSpec {
            mode: plan.mode,
            ports: plan
                .ports
                .iter()
                .zip(&ports)
                .map(|(p, dev)| PortState {
                    name: p.name.clone(),
                    mac: dev.mac(),
                    up: p.enabled,
                    ipv4: p.ipv4.clone(),
                    ipv6: p.ipv6.clone(),
                })
                .collect(),
            xconnect: plan.ports.iter().map(|p| p.peer).collect(),
            routes: plan.routes.clone(),
            neighbours: plan.neighbours.clone(),
        };
        let tables = Tables::build(&spec, 1)?;
        let shared = Arc::new(Shared::new(tables, workers.len()));
        // Startup flows reach every worker before traffic: RSS may put a flow on any.
        for w in &shared.workers {
            for (key, action) in &plan.flows {
                w.flow_commands
                    .push(FlowCommand::Install { key: *key, action: *action, generation: 1 })
                    .map_err(|_| "flow: more startup flows than the command queue holds (4096)".to_string())?;
            }
        }
        let mut lcores = Vec::new();
        for (wi, w) in workers.iter().enumerate() {
            let setup = WorkerSetup {
                id: wi,
                rx: w.rx.iter().map(|(p, q)| (*p, ports[*p as usize].rx_queue(*q))).collect(),
                tx: ports.iter().map(|p| p.tx_buffer(wi as u16)).collect(),
                burst: d.burst,
                flow_capacity: plan.raw.flow_table.capacity,
                flow_idle_timeout_s: plan.raw.flow_table.idle_timeout_s,
                learn_flows: plan.raw.flow_table.learn,
                mac_capacity: plan.raw.bridge.mac_capacity,
                mac_aging_s: plan.raw.bridge.aging_s,
                tx_drain_us: d.tx_drain_us,
                idle: IdleConfig { enabled: d.idle, empty_polls: d.idle_empty_polls, sleep_us: d.idle_sleep_us },
            };
            let sh = shared.clone();
            eal.launch(w.lcore, move || worker::run(setup, sh)).map_err(|e| e.to_string())?;
            lcores.push(w.lcore);
        }
        Ok(Switch {
            plan,
            eal,
            pool,
            ports,
            spec,
            shared,
            lcores,
            generation: 1,
            retired: Vec::new(),
            resolving: HashMap::new(),
        })
    }

    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// Publishes the spec as a new generation. The old one is kept until every
    /// worker has acknowledged, so no worker ever reads freed tables.
    pub fn publish(&mut self) -> Result<u64, String> {
        let g = self.generation + 1;
        let t = Tables::build(&self.spec, g)?;
        let old = self.shared.tables.swap(Arc::new(t));
        self.shared.table_generation.store(g, Ordering::Release);
        self.generation = g;
        self.retired.push((g, old));
        Ok(g)
    }

    fn min_acked(&self) -> u64 {
        self.shared.workers.iter().map(|w| w.acked_generation.load(Ordering::Acquire)).min().unwrap_or(u64::MAX)
    }

    fn reap_retired(&mut self) {
        let acked = self.min_acked();
        self.retired.retain(|(g, _)| *g > acked);
    }

    /// Handles events the workers queued: neighbour learning and resolution.
    fn drain_events(&mut self) -> Result<(), String> {
        let mut changed = false;
        let mut resolve = Vec::new();
        for w in self.shared.workers.clone() {
            for _ in 0..1024 {
                let Some(ev) = w.events.pop() else { break };
                match ev {
                    ControlEvent::Neighbour { ip, mac, port } => changed |= self.learn_neighbour(ip, mac, port),
                    ControlEvent::Resolve { ip, port } => resolve.push((ip, port)),
                }
            }
        }
        if changed {
            self.publish()?;
        }
        for (ip, port) in resolve {
            self.resolve(ip, port);
        }
        Ok(())
    }

    /// Records a neighbour if it is on one of the port's subnets; returns
    /// whether the tables changed. Configured entries are never overwritten.
    fn learn_neighbour(&mut self, ip: IpAddr, mac: [u8; 6], port: u16) -> bool {
        let Some(ps) = self.spec.ports.get(port as usize) else {
            return false;
        };
        let on_link = match ip {
            IpAddr::V4(a) => {
                ps.ipv4.iter().any(|(p, l)| dataplane::lpm::mask(*p, *l) == dataplane::lpm::mask(a.octets(), *l))
            }
            IpAddr::V6(a) => {
                ps.ipv6.iter().any(|(p, l)| dataplane::lpm::mask(*p, *l) == dataplane::lpm::mask(a.octets(), *l))
            }
        };
        if !on_link {
            return false;
        }
        self.resolving.remove(&ip);
        match self.spec.neighbours.iter_mut().find(|n| n.ip == ip) {
            Some(n) if n.permanent || (n.mac == mac && n.port == port) => false,
            Some(n) => {
                n.mac = mac;
                n.port = port;
                true
            }
            None => {
                self.spec.neighbours.push(NeighbourSpec { ip, mac, port, permanent: false });
                true
            }
        }
    }

    /// Sends an ARP request or neighbour solicitation through worker 0.
    fn resolve(&mut self, ip: IpAddr, port: u16) {
        let now = Instant::now();
        if self.resolving.get(&ip).is_some_and(|t| now.duration_since(*t) < RESOLVE_INTERVAL) {
            return;
        }
        let Some(ps) = self.spec.ports.get(port as usize) else {
            return;
        };
        let Some(mut m) = self.pool.alloc() else {
            return;
        };
        let len = match ip {
            IpAddr::V4(a) => {
                let on_link =
                    ps.ipv4.iter().find(|(p, l)| dataplane::lpm::mask(*p, *l) == dataplane::lpm::mask(a.octets(), *l));
                let Some((src, _)) = on_link.or(ps.ipv4.first()) else {
                    return;
                };
                let Some(buf) = m.append(60) else { return };
                forward::build_arp_request(buf, ps.mac, *src, a.octets())
            }
            IpAddr::V6(a) => {
                let on_link =
                    ps.ipv6.iter().find(|(p, l)| dataplane::lpm::mask(*p, *l) == dataplane::lpm::mask(a.octets(), *l));
                let Some((src, _)) = on_link.or(ps.ipv6.first()) else {
                    return;
                };
                let Some(buf) = m.append(86) else { return };
                forward::build_ns(buf, ps.mac, *src, a.octets())
            }
        };
        m.set_len(len);
        if self.shared.workers[0].inject.push((port, m)).is_ok() {
            self.resolving.insert(ip, now);
        }
    }

    /// Sum of every worker's counters.
    pub fn counters(&self) -> CounterValues {
        let mut sum = CounterValues::default();
        for w in &self.shared.workers {
            sum.add(&w.counters.snapshot());
        }
        sum
    }

    /// Runs the control loop until a signal, `stop`, or the duration ends.
    pub fn run(&mut self, opts: &RunOptions, stop: &AtomicBool) -> Result<(), String> {
        let started = Instant::now();
        let mut last_print = Instant::now();
        let mut last = self.counters();
        while !stop.load(Ordering::Relaxed) {
            if opts.duration.is_some_and(|d| started.elapsed() >= d) {
                break;
            }
            self.drain_events()?;
            self.reap_retired();
            if opts.stats_interval_s > 0 && last_print.elapsed() >= Duration::from_secs(opts.stats_interval_s) {
                let now = self.counters();
                let dt = last_print.elapsed().as_secs_f64();
                self.print_rates(&last, &now, dt);
                last = now;
                last_print = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn print_rates(&self, a: &CounterValues, b: &CounterValues, dt: f64) {
        let d = b.since(a);
        let mut line = String::new();
        for (i, p) in self.spec.ports.iter().enumerate() {
            line.push_str(&format!(
                "{}: rx {:.3} Mpps {:.3} Gbps tx {:.3} Mpps {:.3} Gbps | ",
                p.name,
                d.rx_packets[i] as f64 / dt / 1e6,
                d.rx_bytes[i] as f64 * 8.0 / dt / 1e9,
                d.tx_packets[i] as f64 / dt / 1e6,
                d.tx_bytes[i] as f64 * 8.0 / dt / 1e9,
            ));
        }
        line.push_str(&format!("drops {:.3} Mpps", d.total_drops() as f64 / dt / 1e6));
        println!("{line}");
    }

    /// Stops the workers and returns the final counters as JSON.
    pub fn stop(mut self) -> serde_json::Value {
        self.shared.running.store(false, Ordering::SeqCst);
        for l in &self.lcores {
            self.eal.wait(*l);
        }
        let _ = self.drain_events();
        let c = self.counters();
        let ethdev: Vec<PortStats> = self.ports.iter().map(|p| p.stats()).collect();
        let ports: Vec<serde_json::Value> = self
            .spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let e = &ethdev[i];
                let xstats: serde_json::Map<String, serde_json::Value> =
                    self.ports[i].xstats().into_iter().map(|(k, v)| (k, v.into())).collect();
                let link = self.ports[i].link();
                serde_json::json!({
                    "driver": self.ports[i].info().driver,
                    "link": {"up": link.up, "speed_mbps": link.speed_mbps, "full_duplex": link.full_duplex},
                    "rss": self.ports[i].rss_active(),
                    "xstats": xstats,
                    "name": p.name,
                    "mac": format_mac(&p.mac),
                    "rx_packets": c.rx_packets[i], "rx_bytes": c.rx_bytes[i],
                    "tx_packets": c.tx_packets[i], "tx_bytes": c.tx_bytes[i],
                    "ethdev": {
                        "ipackets": e.ipackets, "opackets": e.opackets, "ibytes": e.ibytes, "obytes": e.obytes,
                        "imissed": e.imissed, "ierrors": e.ierrors, "oerrors": e.oerrors, "rx_nombuf": e.rx_nombuf,
                    }
                })
            })
            .collect();
        let drops: serde_json::Map<String, serde_json::Value> =
            DropReason::ALL.iter().map(|r| (r.name().to_string(), c.drops[*r as usize].into())).collect();
        let events: serde_json::Map<String, serde_json::Value> =
            Event::ALL.iter().map(|e| (e.name().to_string(), c.events[*e as usize].into())).collect();
        let neighbours: Vec<serde_json::Value> = self
            .spec
            .neighbours
            .iter()
            .map(|n| serde_json::json!({"ip": n.ip.to_string(), "mac": format_mac(&n.mac), "port": self.spec.ports[n.port as usize].name, "permanent": n.permanent}))
            .collect();
        let flows: u64 = self.shared.workers.iter().map(|w| w.flows_in_use.load(Ordering::Relaxed)).sum();
        let macs: u64 = self.shared.workers.iter().map(|w| w.macs_in_use.load(Ordering::Relaxed)).sum();
        let out = serde_json::json!({
            "name": self.plan.raw.name,
            "mode": self.plan.mode.name(),
            "ports": ports,
            "drops": drops,
            "total_drops": c.total_drops(),
            "events": events,
            "neighbours": neighbours,
            "flows_in_use": flows,
            "macs_in_use": macs,
            "table_generation": self.generation,
            "mempool_in_use": self.pool.in_use(),
        });
        // Ports stop and close before the EAL is cleaned up (field drop order).
        self.retired.clear();
        drop(self.ports);
        out
    }
}

/// Prints the final counters as text.
pub fn print_text(v: &serde_json::Value) {
    println!("== intswitch {} ({}) final counters", v["name"].as_str().unwrap_or(""), v["mode"].as_str().unwrap_or(""));
    for p in v["ports"].as_array().into_iter().flatten() {
        println!(
            "port {:<8} rx {:>12} pkts {:>14} bytes   tx {:>12} pkts {:>14} bytes",
            p["name"].as_str().unwrap_or(""),
            p["rx_packets"],
            p["rx_bytes"],
            p["tx_packets"],
            p["tx_bytes"]
        );
    }
    for (k, n) in v["drops"].as_object().into_iter().flatten() {
        if n.as_u64().unwrap_or(0) > 0 {
            println!("drop  {k:<24} {n}");
        }
    }
    for (k, n) in v["events"].as_object().into_iter().flatten() {
        if n.as_u64().unwrap_or(0) > 0 {
            println!("event {k:<24} {n}");
        }
    }
}
