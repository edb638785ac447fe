//! The running switch: brings up EAL, pools and ports from a validated
//! `Plan`, builds each worker's state before launch, and runs the control
//! loop on the main lcore: control-socket requests, table generations,
//! neighbour learning and resolution, capture, live statistics, clean stop.
//!
//! The operations the control socket offers (route/neighbour/flow add and
//! delete, port enable/disable, clear counters, views) are methods here; the
//! startup configuration goes through the same spec mutations.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::counters::{CounterValues, Event, MAX_PORTS};
use dataplane::dpdk::{self, Eal, EalArgs, MbufStash, Mempool, Port, PortSetup};
use dataplane::flow_table::FlowAction;
use dataplane::forward::{self, ControlEvent};
use dataplane::int::Presence;
use dataplane::mac_table::Sighting;
use dataplane::parse::FlowKey;
use dataplane::tables::{NeighbourSpec, RouteSpec, TableSpec, Tables};
use dataplane::worker::{
    self, FlowCommand, FlowRecord, FlowSetup, HeldPacket, IdleConfig, MacRecord, MacSetup, Shared, StageSetup,
    WorkerSetup, WorkerShared,
};
use dataplane::DropReason;
use serde_json::{json, Value};

use crate::api::ApiError;
use crate::capture::CaptureJob;
use crate::collector_tx::PortOut;
use crate::config::{format_mac, Plan, WorkerPlan};
use crate::int::export::Exporter;
use crate::server::Server;
use dataplane::int::stage::WallClock;

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

/// A packet waiting for its next hop's MAC, since when, from which worker.
struct Held {
    since: Instant,
    worker: usize,
    packet: HeldPacket,
}

/// How long a packet waits for its next hop's MAC before it is dropped.
const HOLD_TIME: Duration = Duration::from_secs(1);
/// Packets held at once, all neighbours together.
const HOLD_MAX: usize = 1024;

/// Re-sends a resolution request for the same address at most this often.
const RESOLVE_INTERVAL: Duration = Duration::from_millis(500);
/// How long an operation waits for every worker to acknowledge.
const ACK_TIMEOUT: Duration = Duration::from_secs(2);

pub struct Switch {
    /// Mbufs for frames the control core builds (port-bound exports).
    export_mbufs: MbufStash,
    plan: Plan,
    eal: Eal,
    pool: Mempool,
    ports: Vec<Port>,
    pub(crate) spec: TableSpec,
    pub(crate) shared: Arc<Shared>,
    workers: Vec<WorkerPlan>,
    generation: u64,
    retired: Vec<(u64, Arc<Tables>)>,
    resolving: HashMap<IpAddr, Instant>,
    /// Per-worker counters at the last `clear counters`.
    baseline: Vec<CounterValues>,
    started: Instant,
    /// TSC and wall clock at start, to timestamp captured packets.
    tsc0: u64,
    wall0_ns: u64,
    hz: u64,
    pub(crate) capture: Option<CaptureJob>,
    /// Packets waiting for a neighbour: (since, worker, input port, packet).
    held: std::collections::VecDeque<Held>,
    /// Telemetry report export (when `[int]` is configured).
    exporter: Option<Exporter>,
    /// Last per-port TX byte counts, for the utilisation INT reports.
    load_sample: Option<(Instant, Vec<u64>)>,
    /// AM-PM record export (when `[ampm]` is configured).
    pub(crate) ampm_exporter: Option<crate::ampm::export::AmpmExporter>,
    /// Each AM-PM flow as configured (for `show ampm`), by name.
    pub(crate) ampm_configs: HashMap<String, crate::ampm::config::AmpmFlowConfig>,
}

/// The control loop's sleep after a round with nothing to do: doubling from
/// NAP_MIN up to NAP_MAX while idle.
const NAP_MIN: Duration = Duration::from_micros(20);
const NAP_MAX: Duration = Duration::from_millis(1);
/// Reports one export poll must find for the control loop to go straight on.
const EXPORT_BATCH: usize = 256;

/// Exported frames out of data-plane ports: copied into an mbuf here and
/// sent by worker 0 (its `inject` queue, never waited on); destination MACs
/// from the neighbour table.
struct PortSender<'a> {
    spec: &'a TableSpec,
    /// Worker 0 and the mbufs frames are built in; None: the workers are
    /// not running (nothing can be sent).
    tx: Option<(&'a WorkerShared, &'a mut MbufStash)>,
    /// Next hops to resolve.
    resolve: Vec<(IpAddr, u16)>,
}

impl<'a> PortSender<'a> {
    fn new(spec: &'a TableSpec, tx: Option<(&'a WorkerShared, &'a mut MbufStash)>) -> PortSender<'a> {
        PortSender { spec, tx, resolve: Vec::new() }
    }
}

impl PortOut for PortSender<'_> {
    fn port_info(&self, port: u16, v6: bool) -> Option<([u8; 6], Option<IpAddr>)> {
        let p = self.spec.ports.get(port as usize)?;
        let ip = if v6 {
            p.ipv6.first().map(|(a, _)| IpAddr::from(*a))
        } else {
            p.ipv4.first().map(|(a, _)| IpAddr::from(*a))
        };
        Some((p.mac, ip))
    }

    fn neighbour(&mut self, port: u16, ip: IpAddr) -> Option<[u8; 6]> {
        let known = self.spec.neighbours.iter().find(|n| n.ip == ip && n.port == port).map(|n| n.mac);
        if known.is_none() && !self.resolve.contains(&(ip, port)) {
            self.resolve.push((ip, port));
        }
        known
    }

    fn transmit(&mut self, port: u16, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), String> {
        let (w, mbufs) = self.tx.as_mut().ok_or("the workers have stopped")?;
        let len = u16::try_from(len).map_err(|_| "frame longer than 65535 bytes".to_string())?;
        let mut m = mbufs.take().ok_or("no mbuf free")?;
        fill(m.append(len).ok_or("frame longer than an mbuf")?);
        w.inject.push((port, m)).map_err(|_| "worker 0's hand-off queue is full".to_string())
    }
}

fn eal_args(plan: &Plan) -> EalArgs {
    let e = &plan.raw.eal;
    EalArgs {
        program: "intswitch".into(),
        lcores: e.lcores.clone(),
        memory_mb: e.memory_mb,
        no_huge: !e.huge,
        huge_unlink: e.huge,
        no_pci: !e.pci && !plan.ports.iter().any(|p| p.is_pci),
        file_prefix: Some(e.file_prefix.clone().unwrap_or_else(|| format!("intswitch-{}", plan.raw.name))),
        vdevs: plan.ports.iter().filter(|p| !p.is_pci).map(|p| p.device.clone()).collect(),
        allow: plan.ports.iter().filter(|p| p.is_pci).map(|p| p.device.clone()).collect(),
        log_level: e.log_level.clone(),
        extra: e.extra.clone(),
    }
}

fn on_link<const N: usize>(addrs: &[([u8; N], u8)], ip: [u8; N]) -> bool {
    addrs.iter().any(|(p, l)| dataplane::lpm::mask(*p, *l) == dataplane::lpm::mask(ip, *l))
}

impl Switch {
    /// Initialises DPDK and the ports, and launches the workers.
    pub fn start(plan: Plan) -> Result<Switch, String> {
        let eal = Eal::init(&eal_args(&plan)).map_err(|e| e.to_string())?;
        let available = eal.worker_lcores();
        let workers = if plan.workers.is_empty() {
            let l = *available.first().ok_or("eal.lcores: needs at least two lcores (main + one worker)")?;
            vec![WorkerPlan { lcore: l, rx: (0..plan.ports.len() as u16).map(|p| (p, 0)).collect() }]
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
        let pool = Mempool::new(&eal, "intswitch_pool", d.mbufs, d.mbuf_cache, 2048 + 128, &d.mempool_ops)
            .map_err(|e| format!("dataplane.mbufs = {} / dataplane.mempool_ops = '{}': {e}", d.mbufs, d.mempool_ops))?;
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
        let macs: Vec<[u8; 6]> = ports.iter().map(|p| p.mac()).collect();
        let hz = dpdk::tsc_hz().max(1);
        let spec = plan.table_spec(&macs, hz);
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
        let tsc0 = dpdk::tsc();
        let wall0_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let clock = WallClock::new(tsc0, wall0_ns, hz);
        let ring_size = plan.int.as_ref().map_or(1, |i| i.ring_size);
        let hash_seed = match plan.raw.flow_table.hash_seed {
            0 => random_seed(),
            s => s,
        };
        let mut consumers = Vec::new();
        for (wi, w) in workers.iter().enumerate() {
            let (producer, consumer) = dataplane::int::report_ring::report_ring(ring_size);
            consumers.push(consumer);
            let setup = WorkerSetup {
                id: wi,
                rx: w.rx.iter().map(|(p, q)| (*p, ports[*p as usize].rx_queue(*q))).collect(),
                tx: ports.iter().map(|p| p.tx_buffer(wi as u16)).collect(),
                burst: d.burst,
                flows: FlowSetup {
                    capacity: plan.raw.flow_table.capacity,
                    idle_timeout_s: plan.raw.flow_table.idle_timeout_s,
                    learn: plan.raw.flow_table.learn,
                    hash_seed,
                },
                macs: MacSetup {
                    capacity: plan.raw.bridge.mac_capacity,
                    aging_s: plan.raw.bridge.aging_s,
                    share: workers.len() > 1,
                },
                tx_drain_us: d.tx_drain_us,
                idle: IdleConfig { enabled: d.idle, empty_polls: d.idle_empty_polls, sleep_us: d.idle_sleep_us },
                pool: pool.clone(),
                stages: StageSetup {
                    report_filter_slots: plan.int.as_ref().map_or(1, |i| i.filter_slots),
                    reports: producer,
                    clock,
                },
            };
            let sh = shared.clone();
            eal.launch(w.lcore, move || worker::run(setup, sh)).map_err(|e| e.to_string())?;
        }
        let port_info = PortSender::new(&spec, None);
        let exporter = match &plan.int {
            Some(ip) => Some(Exporter::new(
                ip.spec.node_id,
                ip.hw_id,
                ip.spec.report.md_bits,
                ip.max_packet,
                consumers,
                &ip.collectors,
                &port_info,
            )?),
            None => None,
        };
        let ampm_exporter = match &plan.ampm {
            Some(a) => Some(crate::ampm::export::AmpmExporter::new(
                a.setup.node_id,
                a.setup.timing,
                a.setup.capacity,
                &a.collectors,
                &port_info,
                wall0_ns,
            )?),
            None => None,
        };
        let ampm_configs = plan
            .raw
            .ampm
            .as_ref()
            .map(|a| a.flow.iter().map(|f| (f.name.clone(), f.clone())).collect())
            .unwrap_or_default();
        let nworkers = workers.len();
        Ok(Switch {
            ampm_exporter,
            ampm_configs,
            plan,
            eal,
            export_mbufs: MbufStash::new(&pool),
            pool,
            ports,
            spec,
            shared,
            workers,
            generation: 1,
            retired: Vec::new(),
            resolving: HashMap::new(),
            baseline: vec![CounterValues::default(); nworkers],
            started: Instant::now(),
            tsc0,
            wall0_ns,
            hz,
            exporter,
            load_sample: None,
            capture: None,
            held: std::collections::VecDeque::new(),
        })
    }

    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn port_names(&self) -> Vec<String> {
        self.spec.ports.iter().map(|p| p.name.clone()).collect()
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    pub(crate) fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// Wall-clock nanoseconds of a worker TSC reading.
    pub(crate) fn tsc_to_wall_ns(&self, tsc: u64) -> u64 {
        let d = tsc.wrapping_sub(self.tsc0) as u128;
        self.wall0_ns + (d * 1_000_000_000 / self.hz as u128) as u64
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Publishes the spec as a new table generation. The old one is kept until
    /// every worker has acknowledged, so no worker ever reads freed tables.
    fn publish(&mut self) -> Result<u64, String> {
        let g = self.next_generation();
        let t = Tables::build(&self.spec, g)?;
        let old = self.shared.tables.swap(Arc::new(t));
        self.shared.table_generation.store(g, Ordering::Release);
        self.retired.push((g, old));
        Ok(g)
    }

    fn min_acked(&self, pick: impl Fn(&worker::WorkerShared) -> &AtomicU64) -> u64 {
        self.shared.workers.iter().map(|w| pick(w).load(Ordering::Acquire)).min().unwrap_or(u64::MAX)
    }

    /// Waits (bounded) until every worker has acknowledged generation `g`.
    fn wait_acked(&self, g: u64, pick: impl Fn(&worker::WorkerShared) -> &AtomicU64) -> Result<(), ApiError> {
        let deadline = Instant::now() + ACK_TIMEOUT;
        while self.min_acked(&pick) < g {
            if Instant::now() > deadline {
                return Err(ApiError::internal(format!("workers did not acknowledge generation {g} within 2 s")));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Publishes the spec and waits until every worker uses it.
    pub(crate) fn commit(&mut self) -> Result<u64, ApiError> {
        let g = self.publish().map_err(ApiError::internal)?;
        self.wait_acked(g, |w| &w.acked_tables)?;
        self.reap_retired();
        Ok(g)
    }

    fn reap_retired(&mut self) {
        let acked = self.min_acked(|w| &w.acked_tables);
        self.retired.retain(|(g, _)| *g > acked);
    }

    // ---- operations of the control API ----

    pub fn route_add(&mut self, r: RouteSpec) -> Result<Value, ApiError> {
        self.spec.upsert_route(r);
        let g = self.commit()?;
        Ok(json!({ "generation": g }))
    }

    pub fn route_del(&mut self, prefix: IpAddr, len: u8) -> Result<Value, ApiError> {
        let n = self.spec.routes.len();
        self.spec.routes.retain(|r| !(r.prefix == prefix && r.len == len));
        if self.spec.routes.len() == n {
            return Err(ApiError::not_found("prefix", format!("no route {prefix}/{len}")));
        }
        let g = self.commit()?;
        Ok(json!({ "generation": g }))
    }

    pub fn neighbour_add(&mut self, n: NeighbourSpec) -> Result<Value, ApiError> {
        self.spec.upsert_neighbour(n);
        let g = self.commit()?;
        Ok(json!({ "generation": g }))
    }

    pub fn neighbour_del(&mut self, ip: IpAddr) -> Result<Value, ApiError> {
        let n = self.spec.neighbours.len();
        self.spec.neighbours.retain(|x| x.ip != ip);
        if self.spec.neighbours.len() == n {
            return Err(ApiError::not_found("ip", format!("no neighbour {ip}")));
        }
        let g = self.commit()?;
        Ok(json!({ "generation": g }))
    }

    fn flow_command(&mut self, make: impl Fn(u64) -> FlowCommand) -> Result<u64, ApiError> {
        let g = self.next_generation();
        for (i, w) in self.shared.workers.iter().enumerate() {
            if w.flow_commands.push(make(g)).is_err() {
                return Err(ApiError::busy(format!("worker {i}'s flow command queue is full; retry")));
            }
        }
        self.wait_acked(g, |w| &w.acked_flows)?;
        Ok(g)
    }

    pub fn flow_add(&mut self, key: FlowKey, action: FlowAction) -> Result<Value, ApiError> {
        let g = self.flow_command(|generation| FlowCommand::Install { key, action, generation })?;
        if let Some(i) = self.shared.workers.iter().position(|w| w.failed_install.load(Ordering::Acquire) == g) {
            // Keep the tables consistent: take it out of the workers that took it.
            let rollback = match self.flow_command(|generation| FlowCommand::Remove { key, generation }) {
                Ok(_) => String::new(),
                Err(e) => format!("; removing it from the other workers failed too ({}): `flow del` it", e.message),
            };
            return Err(ApiError::new("table_full", None, format!("worker {i}'s flow table is full{rollback}")));
        }
        Ok(json!({ "generation": g }))
    }

    pub fn flow_del(&mut self, key: FlowKey) -> Result<Value, ApiError> {
        let g = self.flow_command(|generation| FlowCommand::Remove { key, generation })?;
        Ok(json!({ "generation": g }))
    }

    /// Every worker's flows (at most `max` per worker).
    pub fn flows(&mut self, max: usize) -> Result<Vec<(usize, FlowRecord)>, ApiError> {
        self.dump(|generation| FlowCommand::Dump { max, generation }, |w| &w.dump)
    }

    /// Has every worker fill its dump (`cmd`), then takes what `slot` of
    /// each holds, by worker index.
    fn dump<T>(
        &mut self,
        cmd: impl Fn(u64) -> FlowCommand,
        slot: impl Fn(&WorkerShared) -> &std::sync::Mutex<Vec<T>>,
    ) -> Result<Vec<(usize, T)>, ApiError> {
        self.flow_command(cmd)?;
        let mut out = Vec::new();
        for (i, w) in self.shared.workers.iter().enumerate() {
            let v = std::mem::take(&mut *slot(w).lock().map_err(|_| ApiError::internal("worker dump lock poisoned"))?);
            out.extend(v.into_iter().map(|r| (i, r)));
        }
        Ok(out)
    }

    /// Up to `max` learned MAC entries of each worker, by worker index.
    pub fn macs(&mut self, max: usize) -> Result<Vec<(usize, MacRecord)>, ApiError> {
        self.dump(|generation| FlowCommand::DumpMacs { max, generation }, |w| &w.mac_dump)
    }

    /// The MAC address table: static entries (every worker's), then each
    /// worker's learned ones.
    pub fn macs_json(&mut self, max: usize) -> Result<Value, ApiError> {
        let learned = self.macs(max)?;
        let hz = self.hz as f64;
        let port_name = |p: u16| self.spec.ports.get(p as usize).map(|p| p.name.clone());
        let mut v: Vec<Value> = self
            .spec
            .static_macs
            .iter()
            .map(|m| {
                json!({"worker": null, "vlan": m.vlan, "mac": format_mac(&m.mac), "port": port_name(m.port),
                       "kind": "static", "idle_s": null})
            })
            .collect();
        v.extend(learned.iter().map(|(w, r)| {
            json!({"worker": w, "vlan": r.vlan, "mac": format_mac(&r.mac), "port": port_name(r.port),
                   "kind": "learned", "idle_s": r.idle_tsc as f64 / hz})
        }));
        Ok(Value::Array(v))
    }

    pub fn port_index(&self, name: &str) -> Result<u16, ApiError> {
        self.spec
            .ports
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as u16)
            .ok_or_else(|| ApiError::bad_argument("port", format!("no port named '{name}'")))
    }

    pub fn port_set_enabled(&mut self, name: &str, up: bool) -> Result<Value, ApiError> {
        let i = self.port_index(name)? as usize;
        self.spec.ports[i].up = up;
        // Where the device can, the link follows (vdevs may not support it).
        let link = self.ports[i].set_link(up).is_ok();
        let g = self.commit()?;
        Ok(json!({ "generation": g, "link_changed": link }))
    }

    /// Sets (or with `Impairment::default()` removes) a port's link emulation.
    pub fn port_set_impair(&mut self, name: &str, imp: dataplane::impair::Impairment) -> Result<Value, ApiError> {
        let i = self.port_index(name)? as usize;
        self.spec.ports[i].impair = imp;
        let g = self.commit()?;
        Ok(json!({ "generation": g, "impair": imp.to_netem() }))
    }

    fn int_spec_mut(&mut self) -> Result<&mut dataplane::int::watch::IntSpec, ApiError> {
        self.spec.int.as_mut().ok_or_else(not_configured)
    }

    /// The INT domain and its watchlist, in the config's terms.
    pub fn int_json(&self) -> Result<Value, ApiError> {
        let s = self.spec.int.as_ref().ok_or_else(not_configured)?;
        let names = self.port_names();
        let edge: Vec<&String> = names.iter().enumerate().filter(|(i, _)| s.is_edge(*i)).map(|(_, n)| n).collect();
        let core: Vec<&String> = names.iter().enumerate().filter(|(i, _)| !s.is_edge(*i)).map(|(_, n)| n).collect();
        let c = self.counters();
        let events: serde_json::Map<String, Value> = Event::ALL
            .iter()
            .filter(|e| e.name().starts_with("int_"))
            .map(|e| (e.name().to_string(), c.events[*e as usize].into()))
            .collect();
        let presence = match s.presence {
            Presence::UdpPort(port) => json!({"method": "udp_port", "udp_port": port}),
            Presence::Dscp { value, mask } => {
                json!({"method": "dscp", "dscp_value": format!("{value:#04x}"), "dscp_mask": format!("{mask:#04x}")})
            }
        };
        Ok(json!({
            "node_id": s.node_id,
            "presence": presence,
            "edge_ports": edge,
            "core_ports": core,
            "mtu": names.iter().enumerate().map(|(i, n)| (n.clone(), s.mtu[i])).collect::<HashMap<_, _>>(),
            "source_pushes": s.source_pushes,
            "mtu_exceeded": if s.mtu_report { "report" } else { "flag" },
            "report_md": crate::int::config::instruction_names(s.report.md_bits),
            "report_truncate": s.report.truncate,
            "watch": s.watch.iter().map(|r| crate::int::config::rule_json(r, &names)).collect::<Vec<_>>(),
            "counters": events,
        }))
    }

    pub fn int_watch_add(&mut self, rule: dataplane::int::watch::WatchRule) -> Result<Value, ApiError> {
        self.int_spec_mut()?.upsert(rule);
        let g = self.commit()?;
        Ok(json!({ "generation": g }))
    }

    pub fn int_watch_del(&mut self, name: &str) -> Result<Value, ApiError> {
        if !self.int_spec_mut()?.remove(name) {
            return Err(ApiError::not_found("name", format!("no watch rule named '{name}'")));
        }
        let g = self.commit()?;
        Ok(json!({ "generation": g }))
    }

    /// Report rings and collectors.
    pub fn reports_json(&self) -> Result<Value, ApiError> {
        let ex = self.exporter.as_ref().ok_or_else(not_configured)?;
        let full: Vec<u64> =
            self.worker_counters().iter().map(|c| c.events[Event::IntReportRingFull as usize]).collect();
        Ok(ex.json(&full))
    }

    pub fn int_export_pause(&mut self, paused: bool) -> Result<Value, ApiError> {
        let ex = self.exporter.as_mut().ok_or_else(not_configured)?;
        ex.paused = paused;
        Ok(json!({ "paused": paused }))
    }

    pub fn clear_counters(&mut self) -> Value {
        self.baseline = self.shared.workers.iter().map(|w| w.counters.snapshot()).collect();
        json!({ "cleared": true })
    }

    // ---- views ----

    /// Per-worker counters since the last clear.
    pub fn worker_counters(&self) -> Vec<CounterValues> {
        self.shared.workers.iter().zip(&self.baseline).map(|(w, b)| w.counters.snapshot().since(b)).collect()
    }

    /// Per-worker counters since start (monotonic, for metrics).
    pub fn worker_counters_raw(&self) -> Vec<CounterValues> {
        self.shared.workers.iter().map(|w| w.counters.snapshot()).collect()
    }

    /// Sum of every worker's counters since the last clear.
    pub fn counters(&self) -> CounterValues {
        let mut sum = CounterValues::default();
        for c in self.worker_counters() {
            sum.add(&c);
        }
        sum
    }

    pub fn ports_json(&self) -> Value {
        let c = self.counters();
        let v: Vec<Value> = self
            .spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let dev = &self.ports[i];
                let e = dev.stats();
                let link = dev.link();
                let xstats: serde_json::Map<String, Value> =
                    dev.xstats().into_iter().map(|(k, v)| (k, v.into())).collect();
                json!({
                    "name": p.name,
                    "device": self.plan.ports[i].device,
                    "driver": dev.info().driver,
                    "mac": format_mac(&p.mac),
                    "enabled": p.up,
                    "impair": p.impair.to_netem(),
                    "link": {"up": link.up, "speed_mbps": link.speed_mbps, "full_duplex": link.full_duplex},
                    "rss": dev.rss_active(),
                    "ipv4": p.ipv4.iter().map(|(a, l)| format!("{}/{l}", IpAddr::from(*a))).collect::<Vec<_>>(),
                    "ipv6": p.ipv6.iter().map(|(a, l)| format!("{}/{l}", IpAddr::from(*a))).collect::<Vec<_>>(),
                    "rx_packets": c.rx_packets[i], "rx_bytes": c.rx_bytes[i],
                    "tx_packets": c.tx_packets[i], "tx_bytes": c.tx_bytes[i],
                    "ethdev": {
                        "ipackets": e.ipackets, "opackets": e.opackets, "ibytes": e.ibytes, "obytes": e.obytes,
                        "imissed": e.imissed, "ierrors": e.ierrors, "oerrors": e.oerrors, "rx_nombuf": e.rx_nombuf,
                    },
                    "xstats": xstats,
                })
            })
            .collect();
        Value::Array(v)
    }

    pub fn workers_json(&self) -> Value {
        let per = self.worker_counters();
        let v: Vec<Value> = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let c = &per[i];
                let sh = &self.shared.workers[i];
                json!({
                    "id": i,
                    "lcore": w.lcore,
                    "rx_queues": w.rx.iter().map(|(p, q)| format!("{}:{q}", self.spec.ports[*p as usize].name)).collect::<Vec<_>>(),
                    "rx_packets": c.rx_packets.iter().sum::<u64>(),
                    "rx_bytes": c.rx_bytes.iter().sum::<u64>(),
                    "tx_packets": c.tx_packets.iter().sum::<u64>(),
                    "tx_bytes": c.tx_bytes.iter().sum::<u64>(),
                    "drops": c.total_drops(),
                    "polls": c.polls,
                    "busy_polls": c.busy_polls,
                    "flows": sh.flows_in_use.load(Ordering::Relaxed),
                    "macs": sh.macs_in_use.load(Ordering::Relaxed),
                    "mac_sync_lost": sh.mac_sync_lost.load(Ordering::Relaxed),
                    "table_generation": sh.acked_tables.load(Ordering::Relaxed),
                    "flow_generation": sh.acked_flows.load(Ordering::Relaxed),
                })
            })
            .collect();
        Value::Array(v)
    }

    pub fn drops_json(&self) -> Value {
        let per = self.worker_counters();
        let mut total = serde_json::Map::new();
        for r in DropReason::ALL {
            let n: u64 = per.iter().map(|c| c.drops[r as usize]).sum();
            total.insert(r.name().into(), n.into());
        }
        let by_worker: Vec<Value> = per
            .iter()
            .map(|c| {
                Value::Object(
                    DropReason::ALL
                        .iter()
                        .filter(|r| c.drops[**r as usize] > 0)
                        .map(|r| (r.name().to_string(), c.drops[*r as usize].into()))
                        .collect(),
                )
            })
            .collect();
        json!({ "total": total, "workers": by_worker })
    }

    pub fn counters_json(&self) -> Value {
        let c = self.counters();
        let ports: Vec<Value> = self
            .spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                json!({"name": p.name, "rx_packets": c.rx_packets[i], "rx_bytes": c.rx_bytes[i],
                       "tx_packets": c.tx_packets[i], "tx_bytes": c.tx_bytes[i]})
            })
            .collect();
        let drops: serde_json::Map<String, Value> =
            DropReason::ALL.iter().map(|r| (r.name().to_string(), c.drops[*r as usize].into())).collect();
        let events: serde_json::Map<String, Value> =
            Event::ALL.iter().map(|e| (e.name().to_string(), c.events[*e as usize].into())).collect();
        json!({
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "ports": ports,
            "drops": drops,
            "total_drops": c.total_drops(),
            "events": events,
            "workers": self.workers_json(),
        })
    }

    pub fn routes_json(&self) -> Value {
        let name = |p: u16| self.spec.ports[p as usize].name.clone();
        let mut v: Vec<Value> = Vec::new();
        for p in &self.spec.ports {
            for (a, l) in &p.ipv4 {
                let net = IpAddr::from(dataplane::lpm::mask(*a, *l));
                v.push(json!({"prefix": format!("{net}/{l}"), "port": p.name, "via": null, "kind": "connected"}));
            }
            for (a, l) in &p.ipv6 {
                let net = IpAddr::from(dataplane::lpm::mask(*a, *l));
                v.push(json!({"prefix": format!("{net}/{l}"), "port": p.name, "via": null, "kind": "connected"}));
            }
        }
        for r in &self.spec.routes {
            v.push(json!({"prefix": format!("{}/{}", r.prefix, r.len), "port": name(r.port),
                          "via": r.gateway.map(|g| g.to_string()), "kind": "static"}));
        }
        Value::Array(v)
    }

    pub fn neighbours_json(&self) -> Value {
        Value::Array(
            self.spec
                .neighbours
                .iter()
                .map(|n| {
                    json!({"ip": n.ip.to_string(), "mac": format_mac(&n.mac),
                           "port": self.spec.ports[n.port as usize].name, "permanent": n.permanent})
                })
                .collect(),
        )
    }

    pub fn flows_json(&mut self, max: usize) -> Result<Value, ApiError> {
        let flows = self.flows(max)?;
        let hz = self.hz as f64;
        let v: Vec<Value> = flows
            .iter()
            .map(|(w, r)| {
                let k = &r.key;
                let action = match r.action {
                    FlowAction::Normal => "normal".to_string(),
                    FlowAction::Drop => "drop".to_string(),
                    FlowAction::Forward(p) => format!("forward:{}", self.spec.ports[p as usize].name),
                };
                json!({
                    "worker": w,
                    "in_port": self.spec.ports.get(k.in_port() as usize).map(|p| p.name.clone()),
                    "vlan": k.vlan(),
                    "src": k.src_ip().to_string(), "dst": k.dst_ip().to_string(),
                    "proto": k.proto(), "src_port": k.src_port(), "dst_port": k.dst_port(),
                    "action": action, "installed": r.installed,
                    "packets": r.packets, "bytes": r.bytes,
                    "idle_s": r.idle_tsc as f64 / hz,
                })
            })
            .collect();
        Ok(Value::Array(v))
    }

    // ---- control loop ----

    /// Handles events the workers queued: neighbour learning and resolution.
    fn drain_events(&mut self) -> Result<(), String> {
        let mut learned = Vec::new();
        let mut resolve = Vec::new();
        for (wi, w) in self.shared.workers.clone().iter().enumerate() {
            for _ in 0..1024 {
                let Some(ev) = w.events.pop() else { break };
                match ev {
                    ControlEvent::Neighbour { ip, mac, port } => {
                        if self.learn_neighbour(ip, mac, port) {
                            learned.push(ip);
                        }
                    }
                    ControlEvent::Resolve { ip, port } => resolve.push((ip, port)),
                    ControlEvent::MacLearned(s) => self.share_mac(wi, s),
                }
            }
        }
        let now = Instant::now();
        for (wi, w) in self.shared.workers.iter().enumerate() {
            while let Some(packet) = w.held.pop() {
                self.held.push_back(Held { since: now, worker: wi, packet });
            }
        }
        if !learned.is_empty() {
            self.publish()?;
        }
        // A held packet gets its second try once its next hop is learned, or
        // after HOLD_TIME (or when more than HOLD_MAX wait); a second miss
        // drops it in the worker, counted as neighbour_unresolved.
        let overfull = self.held.len().saturating_sub(HOLD_MAX);
        let mut keep = std::collections::VecDeque::with_capacity(self.held.len());
        for (i, h) in std::mem::take(&mut self.held).into_iter().enumerate() {
            let due = i < overfull || learned.contains(&h.packet.hop) || now.duration_since(h.since) >= HOLD_TIME;
            if !due {
                keep.push_back(h);
                continue;
            }
            if let Err(packet) = self.shared.workers[h.worker].reinject.push(h.packet) {
                // The worker has not drained its queue yet: retry next round.
                keep.push_back(Held { packet, ..h });
            }
        }
        self.held = keep;
        for (ip, port) in resolve {
            self.resolve(ip, port);
        }
        Ok(())
    }

    /// Passes a MAC that worker `from` learned to every other worker; one
    /// whose queue is full misses it (counted, and it learns the address
    /// from the next announcement or from frames of its own).
    fn share_mac(&self, from: usize, s: Sighting) {
        for (wi, w) in self.shared.workers.iter().enumerate() {
            if wi != from && w.mac_sync.push(s).is_err() {
                w.mac_sync_lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records a neighbour if it is on one of the port's subnets; returns
    /// whether the tables changed. Configured entries are never overwritten.
    fn learn_neighbour(&mut self, ip: IpAddr, mac: [u8; 6], port: u16) -> bool {
        let Some(ps) = self.spec.ports.get(port as usize) else { return false };
        let ok = match ip {
            IpAddr::V4(a) => on_link(&ps.ipv4, a.octets()),
            IpAddr::V6(a) => on_link(&ps.ipv6, a.octets()),
        };
        if !ok {
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

    /// Runs the report and AM-PM exporters; returns how many reports were
    /// sent. Frames for collectors behind a DPDK port go out through worker
    /// 0; unknown next hops get resolved.
    fn export(&mut self) -> usize {
        let now = self.now_ns();
        let mut out = PortSender::new(&self.spec, Some((&self.shared.workers[0], &mut self.export_mbufs)));
        let taken = self.exporter.as_mut().map_or(0, |ex| ex.poll(1 << 16, &mut out));
        if let (Some(ex), Some(setup)) = (&mut self.ampm_exporter, &self.spec.ampm) {
            ex.poll(now, &self.shared, &setup.flows, &mut out);
        }
        for (ip, port) in std::mem::take(&mut out.resolve) {
            self.resolve(ip, port);
        }
        taken
    }

    /// Sends an ARP request or neighbour solicitation through worker 0.
    fn resolve(&mut self, ip: IpAddr, port: u16) {
        let now = Instant::now();
        if self.resolving.get(&ip).is_some_and(|t| now.duration_since(*t) < RESOLVE_INTERVAL) {
            return;
        }
        let Some(ps) = self.spec.ports.get(port as usize) else { return };
        let Some(mut m) = self.pool.alloc() else { return };
        let len = match ip {
            IpAddr::V4(a) => {
                let src = ps.ipv4.iter().find(|(p, l)| on_link(&[(*p, *l)], a.octets())).or(ps.ipv4.first());
                let Some((src, _)) = src else { return };
                let Some(buf) = m.append(60) else { return };
                forward::build_arp_request(buf, ps.mac, *src, a.octets())
            }
            IpAddr::V6(a) => {
                let src = ps.ipv6.iter().find(|(p, l)| on_link(&[(*p, *l)], a.octets())).or(ps.ipv6.first());
                let Some((src, _)) = src else { return };
                let Some(buf) = m.append(86) else { return };
                forward::build_ns(buf, ps.mac, *src, a.octets())
            }
        };
        m.set_len(len);
        if self.shared.workers[0].inject.push((port, m)).is_ok() {
            self.resolving.insert(ip, now);
        }
    }

    /// Runs the control loop until a signal, `stop`, or the duration ends.
    pub fn run(&mut self, opts: &RunOptions, stop: &AtomicBool, server: Option<&Server>) -> Result<(), String> {
        let started = Instant::now();
        let mut last_print = Instant::now();
        let mut last = self.counters();
        let mut nap = NAP_MIN;
        // Naps end on time (the default 50 us timer slack would stretch the
        // short ones a report ring relies on).
        dataplane::dpdk::tight_timer_slack();
        while !stop.load(Ordering::Relaxed) {
            if opts.duration.is_some_and(|d| started.elapsed() >= d) {
                break;
            }
            let mut busy = false;
            if let Some(srv) = server {
                for _ in 0..64 {
                    let Some(req) = srv.try_next() else { break };
                    crate::api::handle(self, req);
                    busy = true;
                }
            }
            self.drain_events()?;
            self.reap_retired();
            // Reports: a poll that found only a few naps the shortest nap
            // before the next, so a batch gathers. Polling a nearly empty
            // ring pulls each record's cache lines (and the ring's index
            // line) across as the worker writes them, which held a worker
            // reporting every packet to less than half its rate; the ring
            // holds thousands of records, a nap lets a few hundred gather.
            let taken = self.export();
            busy |= taken >= EXPORT_BATCH;
            self.sample_load();
            crate::capture::progress(self);
            if opts.stats_interval_s > 0 && last_print.elapsed() >= Duration::from_secs(opts.stats_interval_s) {
                let now = self.counters();
                let dt = last_print.elapsed().as_secs_f64();
                self.print_rates(&last, &now, dt);
                last = now;
                last_print = Instant::now();
            }
            // Back off while idle, but wake soon after work stops: a report
            // ring (4096 records by default) fills in well under a
            // millisecond at line rate, so a long nap right after a busy
            // round would lose records that a short one saves.
            if busy {
                nap = NAP_MIN;
            } else {
                if taken > 0 {
                    nap = NAP_MIN;
                }
                std::thread::sleep(nap);
                nap = (nap * 2).min(NAP_MAX);
            }
        }
        crate::capture::abort(self, "the switch is stopping");
        Ok(())
    }

    /// Every 100 ms: each port's TX utilisation and the pool's occupancy,
    /// which workers put into INT metadata.
    fn sample_load(&mut self) {
        let now = Instant::now();
        if self.load_sample.as_ref().is_some_and(|(t, _)| now.duration_since(*t) < Duration::from_millis(100)) {
            return;
        }
        let bytes: Vec<u64> = self.ports.iter().map(|p| p.stats().obytes).collect();
        if let Some((t, prev)) = &self.load_sample {
            let dt = now.duration_since(*t).as_secs_f64();
            for (i, p) in self.ports.iter().enumerate().take(MAX_PORTS) {
                let speed = p.link().speed_mbps as f64 * 1e6;
                let util = if speed > 0.0 && dt > 0.0 {
                    let bps = bytes[i].saturating_sub(prev[i]) as f64 * 8.0 / dt;
                    ((bps / speed) * 10_000.0).round().min(10_000.0) as u32
                } else {
                    u32::MAX
                };
                self.shared.load.tx_util[i].store(util, Ordering::Relaxed);
            }
        }
        self.shared.load.pool_in_use.store(self.pool.in_use(), Ordering::Relaxed);
        self.load_sample = Some((now, bytes));
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
    pub fn stop(mut self) -> Value {
        self.shared.running.store(false, Ordering::SeqCst);
        for w in &self.workers {
            self.eal.wait(w.lcore);
        }
        let _ = self.drain_events();
        if let Some(ex) = &mut self.exporter {
            // Collectors behind a DPDK port count what is left as send errors.
            let mut out = PortSender::new(&self.spec, None);
            while ex.poll(1 << 16, &mut out) > 0 {}
        }
        let c = self.counters();
        let flows: u64 = self.shared.workers.iter().map(|w| w.flows_in_use.load(Ordering::Relaxed)).sum();
        let macs: u64 = self.shared.workers.iter().map(|w| w.macs_in_use.load(Ordering::Relaxed)).sum();
        let mut ports = self.ports_json();
        if let Value::Array(a) = &mut ports {
            for p in a.iter_mut() {
                if let Value::Object(o) = p {
                    o.remove("ipv4");
                    o.remove("ipv6");
                }
            }
        }
        let drops: serde_json::Map<String, Value> =
            DropReason::ALL.iter().map(|r| (r.name().to_string(), c.drops[*r as usize].into())).collect();
        let events: serde_json::Map<String, Value> =
            Event::ALL.iter().map(|e| (e.name().to_string(), c.events[*e as usize].into())).collect();
        let out = json!({
            "name": self.plan.raw.name,
            "mode": self.plan.mode.name(),
            "ports": ports,
            "drops": drops,
            "total_drops": c.total_drops(),
            "events": events,
            "neighbours": self.neighbours_json(),
            "flows_in_use": flows,
            "macs_in_use": macs,
            "table_generation": self.generation,
            "mempool_in_use": self.pool.in_use(),
        });
        let mut out = out;
        if self.exporter.is_some() {
            out["int_reports"] = self.reports_json().unwrap_or(Value::Null);
        }
        if let Some(ex) = &self.ampm_exporter {
            out["ampm_export"] = ex.json();
        }
        // Mbufs still queued for the control core go back to the pool, and
        // ports stop and close, before the EAL is cleaned up.
        self.held.clear();
        for w in &self.shared.workers {
            while w.capture.pop().is_some() {}
            while w.inject.pop().is_some() {}
            while w.held.pop().is_some() {}
            while w.reinject.pop().is_some() {}
        }
        self.retired.clear();
        drop(self.ports);
        out
    }
}

fn not_configured() -> ApiError {
    ApiError::new("not_configured", None, "INT is not configured on this switch (no [int] section)")
}

const _: () = assert!(MAX_PORTS <= 32, "capture masks are u32");

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

/// A seed no one outside this process knows (std's per-process hash keys).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(dataplane::dpdk::tsc());
    h.finish() | 1
}
