//! The running switch: brings up EAL, pools and ports from a validated
//! `Plan`, builds each worker's state before launch, publishes table
//! generations and waits for the workers to take them, and stops cleanly.
//! One control round (`tick`) drains the workers' events (`neighbours`),
//! runs the exporters and samples port load (`port_out`).
//!
//! The switch's own API operations and views are in `ops`; each feature's
//! are in its folder (`int::ops`, `ampm::ops`). The control loop that
//! serves requests between rounds is `control_loop`.

mod neighbours;
pub mod ops;
mod port_out;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::counters::CounterValues;
use dataplane::dpdk::{self, Eal, EalArgs, MbufStash, Mempool, Port, PortSetup};
use dataplane::gpint::stage::GpintSetup;
use dataplane::int::analytics::detect::{RuleCounters, MAX_RULES};
use dataplane::int::analytics::events::event_ring;
use dataplane::int::analytics::flow_ring::flow_ring;
use dataplane::int::analytics::histogram::{HistWriter, WorkerHist};
use dataplane::int::analytics::{rule_counters, AnalyticsSetup};
use dataplane::int::stage::WallClock;
use dataplane::tables::{TableSpec, Tables};
use dataplane::worker::LabelSetup;
use dataplane::worker::{
    self, FlowCommand, FlowSetup, IdleConfig, MacSetup, Shared, StageSetup, WorkerSetup, WorkerShared,
};
use dataplane::DropReason;

use crate::api::views::{FinalCounters, Generation};
use crate::api::ApiError;
use crate::config::{Plan, WorkerPlan};
use crate::int::analytics::export::{AnalyticsExporter, WorkerSources};
use crate::int::export::Exporter;
use neighbours::Neighbours;
use ops::{drops_by_name, events_by_name};
use port_out::PortSender;

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
    /// Held packets, resolutions under way and their counters.
    neighbours: Neighbours,
    /// Per-worker counters at the last `clear counters`.
    baseline: Vec<CounterValues>,
    started: Instant,
    /// The workers' TSC -> wall clock (INT timestamps), which also
    /// timestamps captured packets: one time line for both.
    clock: WallClock,
    pub(crate) hz: u64,
    /// Telemetry report export (when `[int]` is configured).
    pub(crate) exporter: Option<Exporter>,
    /// INT sink analytics: flow records from R_G.
    pub(crate) flow_exporter: Option<AnalyticsExporter>,
    /// Each worker's detection rule counters (by slot), and each slot's
    /// sum when its rule was added (a reused slot starts from there).
    pub(crate) detect_counters: Vec<Arc<[RuleCounters]>>,
    pub(crate) detect_baseline: Vec<[u64; 4]>,
    /// `[[int.expr]]` and `int_expr_add`: name -> expression (normalised).
    pub(crate) int_exprs: std::collections::BTreeMap<String, String>,
    /// The T thresholds' rate budgets (`rate_budget`).
    pub(crate) event_budget: crate::int::analytics::budget::RateBudget,
    /// Last per-port TX byte counts, for the utilisation INT reports.
    load_sample: Option<(Instant, Vec<u64>)>,
    /// AM-PM record export (when `[ampm]` is configured).
    pub(crate) ampm_exporter: Option<crate::ampm::export::AmpmExporter>,
    /// Each AM-PM flow as configured (for `show ampm`), by name.
    pub(crate) ampm_configs: HashMap<String, crate::ampm::config::AmpmFlowConfig>,
    /// INT-label: every port's label state, shared with the workers.
    pub(crate) label_ports: Arc<dataplane::label::LabelPorts>,
    /// Per-port label counts a second ago, and the labels per second since.
    pub(crate) label_sample: Option<(Instant, Vec<u64>)>,
    pub(crate) label_rates: Vec<f64>,
}

/// What one control round did.
pub struct Round {
    /// Telemetry reports exported.
    pub reports: usize,
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
        // Before any worker builds its tables (an allocation failure there
        // would end the process).
        crate::memory_budget::check(&plan, workers.len(), crate::memory_budget::mem_available())
            .map_err(|e| e.to_string())?;
        let d = &plan.raw.dataplane;
        // Data room: a 2 KiB frame and the headroom.
        let room = 2048 + 128;
        let pool = Mempool::new(&eal, "intswitch_pool", d.mbufs, d.mbuf_cache, room, &d.mempool_ops).map_err(|e| {
            let eal_mb = plan.raw.eal.memory_mb.map_or("all hugepages".to_string(), |m| format!("eal.memory_mb = {m}"));
            format!(
                "dataplane.mbufs = {} / dataplane.mempool_ops = '{}': {e} (the pool needs at least {:.0} MiB of the \
                 EAL's memory, {eal_mb})",
                d.mbufs,
                d.mempool_ops,
                crate::memory_budget::pool_mib(d.mbufs, room)
            )
        })?;
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
                rx_checksum: p.rx_checksum_offload,
            };
            ports
                .push(Port::open(&eal, &p.device, &setup, &pool).map_err(|e| format!("port[{pi}] '{}': {e}", p.name))?);
        }
        let macs: Vec<[u8; 6]> = ports.iter().map(|p| p.mac()).collect();
        let hz = dpdk::tsc_hz().max(1);
        let mut spec = plan.table_spec(&macs, hz);
        for (s, dev) in spec.ports.iter_mut().zip(&ports) {
            s.nic_checks_ipv4 = dev.rx_checksum_active();
        }
        let tables = Tables::build(&spec, 1)?;
        let shared = Arc::new(Shared::new(tables, workers.len(), d.mbufs as usize));
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
        let mut flow_consumers = Vec::new();
        let mut event_consumers = Vec::new();
        let mut hists = Vec::new();
        let mut detect_counters = Vec::new();
        let mut gpint_consumers = Vec::new();
        let mut label_consumers = Vec::new();
        let label_ports = Arc::new(dataplane::label::LabelPorts::default());
        let label_seed = match plan.label.as_ref().map(|l| l.seed) {
            Some(0) | None => random_seed(),
            Some(s) => s,
        };
        let analytics = plan.int.as_ref().and_then(|i| i.analytics);
        if let Some(a) = &analytics {
            println!("{}", a.describe());
        }
        for (wi, w) in workers.iter().enumerate() {
            let (producer, consumer) = dataplane::int::report_ring::report_ring(ring_size);
            consumers.push(consumer);
            let analytics = match &analytics {
                Some(a) => {
                    let (p, c) = flow_ring(a.ring_size, a.max_hops);
                    flow_consumers.push(c);
                    let (ep, ec) = event_ring(a.event_ring_size);
                    event_consumers.push(ec);
                    let hist = a.hist.map(|h| {
                        let t = Arc::new(WorkerHist::new(h));
                        hists.push(t.clone());
                        HistWriter::new(t)
                    });
                    AnalyticsSetup {
                        rows: a.rows,
                        ways: a.ways,
                        max_hops: a.max_hops,
                        idle_tsc: a.idle_s * hz,
                        active_tsc: a.active_s * hz,
                        ring: Some(p),
                        events: Some(ep),
                        hist,
                        per_hop_flow: a.per_hop_flow,
                        rule_counters: {
                            let c = rule_counters();
                            detect_counters.push(c.clone());
                            c
                        },
                    }
                }
                None => AnalyticsSetup::interval_only(plan.int.as_ref().map_or(1, |i| i.filter_slots)),
            };
            let gpint = match &plan.gpint {
                Some(g) => {
                    let (p, c) = rtrb::RingBuffer::new(g.export_ring);
                    gpint_consumers.push(c);
                    GpintSetup { slots: g.clone_slots, exports: Some(p), worker: wi, workers: shared.workers.clone() }
                }
                None => GpintSetup::off(),
            };
            let label = {
                let (p, c) = dataplane::int::report_ring::report_ring(plan.label.as_ref().map_or(1, |l| l.ring_size));
                if plan.label.is_some() {
                    label_consumers.push(c);
                }
                // Each worker draws its own sequence.
                let seed = label_seed ^ (wi as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                LabelSetup { reports: p, ports: label_ports.clone(), seed }
            };
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
                    capacity: plan.mac_capacity(),
                    aging_s: plan.raw.bridge.aging_s(),
                    share: workers.len() > 1,
                },
                tx_drain_us: d.tx_drain_us,
                idle: IdleConfig { enabled: d.idle, empty_polls: d.idle_empty_polls(), sleep_us: d.idle_sleep_us() },
                pool: pool.clone(),
                stages: StageSetup { analytics, reports: producer, clock, gpint, label },
            };
            let sh = shared.clone();
            eal.launch(w.lcore, move || worker::run(setup, sh)).map_err(|e| e.to_string())?;
        }
        let port_info = PortSender::new(&spec, None);
        let exporter = match &plan.int {
            Some(ip) => Some(
                Exporter::new(
                    ip.spec.node_id,
                    ip.hw_id,
                    ip.spec.report.md_bits,
                    ip.max_packet,
                    consumers,
                    &ip.collectors,
                    &port_info,
                )?
                .with_gpint(gpint_consumers)
                .with_label(label_consumers),
            ),
            None => None,
        };
        let flow_exporter = match (&plan.int, analytics) {
            (Some(ip), Some(a)) => Some(AnalyticsExporter::new(
                ip.spec.node_id,
                ip.max_packet,
                WorkerSources { flows: flow_consumers, events: event_consumers, hist: hists },
                a.hist_interval_s,
                &ip.collectors,
                &port_info,
            )?),
            _ => None,
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
        let int_exprs = plan.int.as_ref().map(|i| i.exprs.clone()).unwrap_or_default();
        let event_budget = match (&plan.int, analytics) {
            (Some(ip), Some(a)) => {
                let e = &ip.spec.events;
                let base =
                    [e.hop[0].threshold, e.hop[1].threshold, e.hop[2].threshold, e.e2e.threshold, e.link.threshold];
                crate::int::analytics::budget::RateBudget::new(a.rate_budgets, base.map(u64::from))
            }
            _ => Default::default(),
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
            neighbours: Neighbours::default(),
            baseline: vec![CounterValues::default(); nworkers],
            started: Instant::now(),
            clock,
            hz,
            exporter,
            flow_exporter,
            load_sample: None,
            detect_counters,
            detect_baseline: vec![[0; 4]; MAX_RULES],
            int_exprs,
            event_budget,
            label_ports,
            label_sample: None,
            label_rates: Vec::new(),
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
        self.clock.ns(tsc)
    }

    /// CLOCK_REALTIME, the time line the workers' AM-PM intervals follow.
    pub(crate) fn now_ns(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    }

    /// CLOCK_MONOTONIC in ns since the switch started (steps never move it).
    pub(crate) fn mono_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Publishes the spec as a new table generation. The old one is kept until
    /// every worker has acknowledged, so no worker ever reads freed tables.
    fn publish(&mut self) -> Result<u64, String> {
        let g = self.next_generation();
        let t = Tables::build_after(&self.spec, g, Some(&self.shared.tables.load()))?;
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
    pub(crate) fn commit(&mut self) -> Result<Generation, ApiError> {
        let g = self.publish().map_err(ApiError::internal)?;
        self.wait_acked(g, |w| &w.acked_tables)?;
        self.reap_retired();
        Ok(Generation { generation: g })
    }

    fn reap_retired(&mut self) {
        let acked = self.min_acked(|w| &w.acked_tables);
        self.retired.retain(|(g, _)| *g > acked);
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

    /// Has every worker fill its dump (`cmd`), then takes what `slot` of
    /// each holds, by worker index.
    pub(crate) fn dump<T>(
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
        ops::sum(&self.worker_counters())
    }

    /// One round of the control loop's own work: the workers' events and
    /// held packets, old generations, the exporters, port load.
    pub fn tick(&mut self) -> Result<Round, String> {
        self.drain_events()?;
        self.reap_retired();
        let reports = self.export();
        self.sample_load();
        self.sample_label_rates();
        self.budget_step();
        Ok(Round { reports })
    }

    /// Stops the workers and returns the final counters.
    pub fn stop(mut self) -> FinalCounters {
        self.shared.running.store(false, Ordering::SeqCst);
        // Stopping workers export their flow entries (reason stop), more
        // than R_G may hold: drain it until they are done (bounded).
        if let Some(ex) = &mut self.flow_exporter {
            let mut out = PortSender::new(&self.spec, None);
            let deadline = Instant::now() + Duration::from_secs(30);
            while !self.shared.workers.iter().all(|w| w.stopped.load(Ordering::Acquire)) && Instant::now() < deadline {
                if ex.poll(1 << 16, &mut out) == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        for w in &self.workers {
            self.eal.wait(w.lcore);
        }
        if let Err(e) = self.drain_events() {
            eprintln!("intswitch: at stop: {e}");
        }
        if let Some(ex) = &mut self.exporter {
            // A pause holds records in the rings; stopping sends them (as it
            // does R_G's) rather than dropping them with the rings.
            ex.paused = false;
            // Collectors behind a DPDK port count what is left as send errors.
            let mut out = PortSender::new(&self.spec, None);
            while ex.poll(1 << 16, &mut out) > 0 {}
        }
        // The AM-PM intervals no record holds yet (sent partial).
        let (now, mono) = (self.now_ns(), self.mono_ns());
        if let (Some(ex), Some(setup)) = (&mut self.ampm_exporter, &self.spec.ampm) {
            let mut out = PortSender::new(&self.spec, None);
            ex.finish(now, mono, &self.shared, &setup.flows, &mut out);
        }
        // The workers exported their flow entries (reason stop) as they
        // stopped; the last histogram snapshot holds every packet.
        if let Some(ex) = &mut self.flow_exporter {
            let mut out = PortSender::new(&self.spec, None);
            while ex.poll(1 << 16, &mut out) > 0 {}
            ex.export_histograms(&mut out);
        }
        let c = self.counters();
        let sum = |pick: fn(&WorkerShared) -> &AtomicU64| -> u64 {
            self.shared.workers.iter().map(|w| pick(w).load(Ordering::Relaxed)).sum()
        };
        let mut out = FinalCounters {
            name: self.plan.raw.name.clone(),
            mode: self.plan.mode.name().into(),
            ports: self.port_views(),
            drops: drops_by_name(&c),
            total_drops: c.total_drops(),
            events: events_by_name(&c, ""),
            neighbours: self.neighbour_views(),
            resolution: self.neighbours.counters,
            flows_in_use: sum(|w| &w.flows_in_use),
            macs_in_use: sum(|w| &w.macs_in_use),
            table_generation: self.generation,
            mempool_in_use: self.pool.in_use().into(),
            mempool_in_use_at_exit: 0,
            int_reports: self.reports_view().ok(),
            int_analytics: self.analytics_view().ok().map(|a| a.export),
            ampm_export: self.ampm_exporter.as_ref().map(|e| e.view()),
        };
        // Mbufs still queued for the control core go back to the pool, and
        // ports stop and close, before the EAL is cleaned up. Packets held
        // for resolution are dropped with the switch, counted.
        let held = self.drop_held();
        if held > 0 {
            *out.drops.entry(DropReason::NeighbourUnresolved.name().to_string()).or_default() += held;
            out.total_drops += held;
        }
        for w in &self.shared.workers {
            while w.capture.pop().is_some() {}
            while w.inject.pop().is_some() {}
        }
        self.retired.clear();
        drop(self.ports);
        out.mempool_in_use_at_exit = self.pool.in_use().into();
        out
    }
}

/// A seed no one outside this process knows (std's per-process hash keys).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(dataplane::dpdk::tsc());
    h.finish() | 1
}
