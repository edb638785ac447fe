//! The run-to-completion worker loop (one per lcore) and the state it shares
//! with the control core.
//!
//! One loop, as in DPDK's l3fwd: control messages (a new table generation,
//! flow commands, MACs other workers learned, packets to inject or
//! reinject), then per owned queue receive a burst and run the pipeline on
//! it (or the shortcut its depth allows), then transmit: drain TX buffers on
//! a timer or when idle, publish counters, age tables a little, sleep when
//! idle (if asked).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use crossbeam_queue::ArrayQueue;

use crate::ampm::stage::AmpmStage;
use crate::ampm::FlowCounters;
use crate::counters::{CounterValues, Event, SharedCounters, MAX_PORTS};
use crate::dpdk::{self, Mbuf, RxQueue, TxBuffer, MAX_BURST};
use crate::flow_table::{FlowAction, FlowTable};
use crate::forward::stage::ForwardStage;
use crate::forward::{ControlEvent, ControlSink, Verdict};
use crate::gpint::stage::{GpintRecord, GpintSetup, SqrStage, SqrView};
use crate::impair::{Admit, Impairer};
use crate::int::analytics::cache::Reason;
use crate::int::analytics::{Analytics, AnalyticsSetup, FlowSnapshot};
use crate::int::report_ring::ReportProducer;
use crate::int::stage::{IntStage, WallClock};
use crate::label::stage::LabelStage;
use crate::label::LabelPorts;
use crate::mac_table::{MacTable, Sighting};
use crate::parse::FlowKey;
use crate::pipeline::{Burst, CaptureTx, Output, Pipeline, PortLoad, RxTime, Shortcut, Stage};
use crate::tables::Tables;
use crate::DropReason;

/// How often a second the worker ages a slice of its flow and MAC tables.
const AGE_SLICES_PER_S: u64 = 1000;

/// A flow-table change for one worker, tagged with the generation the
/// worker acknowledges once it has applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowCommand {
    Install {
        key: FlowKey,
        action: FlowAction,
        generation: u64,
    },
    Remove {
        key: FlowKey,
        generation: u64,
    },
    Clear {
        generation: u64,
    },
    /// Copy up to `max` entries into `WorkerShared::dump`.
    Dump {
        max: usize,
        generation: u64,
    },
    /// Copy up to `max` MAC-table entries into `WorkerShared::mac_dump`.
    DumpMacs {
        max: usize,
        generation: u64,
    },
    /// Export and free every INT sink flow entry (`intctl int flows flush`);
    /// the count goes into `WorkerShared::int_flushed`.
    IntFlowsFlush {
        generation: u64,
    },
    /// Copy the INT sink's entry of this flow into `WorkerShared::int_flow`.
    IntFlowShow {
        key: FlowKey,
        generation: u64,
    },
    /// Copy the SQR clone buffer's state into `WorkerShared::gpint_view`.
    GpintShow {
        generation: u64,
    },
}

/// One flow as reported by a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRecord {
    pub key: FlowKey,
    pub action: FlowAction,
    pub packets: u64,
    pub bytes: u64,
    /// TSC ticks since the last packet.
    pub idle_tsc: u64,
    pub installed: bool,
}

/// A learned MAC-table entry as a worker reports it (`FlowCommand::DumpMacs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacRecord {
    pub vlan: u16,
    pub mac: [u8; 6],
    pub port: u16,
    /// TSC ticks since the address was last seen (here or, synced, by
    /// another worker).
    pub idle_tsc: u64,
}

/// A mirrored packet on its way to the control core (capture).
pub struct Captured {
    pub tsc: u64,
    /// The worker's copy number (`WorkerShared::capture_seq`): a jump
    /// between two copies is copies dropped between them.
    pub seq: u64,
    pub port: u16,
    pub tx: bool,
    pub mbuf: Mbuf,
}

impl FlowCommand {
    fn generation(&self) -> u64 {
        match self {
            FlowCommand::Install { generation, .. }
            | FlowCommand::Remove { generation, .. }
            | FlowCommand::Clear { generation }
            | FlowCommand::Dump { generation, .. }
            | FlowCommand::DumpMacs { generation, .. }
            | FlowCommand::IntFlowsFlush { generation }
            | FlowCommand::IntFlowShow { generation, .. }
            | FlowCommand::GpintShow { generation } => *generation,
        }
    }
}

/// Idle back-off: after `empty_polls` polls with nothing received, sleep
/// `sleep_us` per poll so several switches can share few cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleConfig {
    pub enabled: bool,
    pub empty_polls: u32,
    pub sleep_us: u32,
}

/// Everything a worker needs, built by the control core before launch.
pub struct WorkerSetup {
    pub id: usize,
    /// (port index, queue) pairs this worker polls.
    pub rx: Vec<(u16, RxQueue)>,
    /// One TX buffer per port index (this worker's own TX queue on each port).
    pub tx: Vec<TxBuffer>,
    pub burst: usize,
    pub flows: FlowSetup,
    pub macs: MacSetup,
    pub tx_drain_us: u64,
    pub idle: IdleConfig,
    /// Pool for capture copies.
    pub pool: dpdk::Mempool,
    pub stages: StageSetup,
}

/// A worker's flow table.
#[derive(Debug, Clone, Copy)]
pub struct FlowSetup {
    pub capacity: usize,
    pub idle_timeout_s: u64,
    pub learn: bool,
    /// Mixed into the flow and MAC tables' hashes.
    pub hash_seed: u64,
}

/// A worker's MAC table.
#[derive(Debug, Clone, Copy)]
pub struct MacSetup {
    pub capacity: usize,
    pub aging_s: u64,
    /// Announce learned MACs to the other workers (there are some).
    pub share: bool,
}

/// State a worker shares with the control core.
pub struct WorkerShared {
    pub counters: SharedCounters,
    /// Table generation this worker reads.
    pub acked_tables: AtomicU64,
    /// Highest flow-command generation this worker has applied.
    pub acked_flows: AtomicU64,
    /// Generation of the last flow install that failed (table full).
    pub failed_install: AtomicU64,
    /// Generation of the last flow removal that found its key here.
    pub removed_flow: AtomicU64,
    /// Filled by a `FlowCommand::Dump`.
    pub dump: std::sync::Mutex<Vec<FlowRecord>>,
    /// Filled by a `FlowCommand::DumpMacs`.
    pub mac_dump: std::sync::Mutex<Vec<MacRecord>>,
    /// Filled by a `FlowCommand::IntFlowShow`.
    pub int_flow: std::sync::Mutex<Vec<FlowSnapshot>>,
    /// Entries a `FlowCommand::IntFlowsFlush` exported.
    pub int_flushed: std::sync::Mutex<Vec<usize>>,
    /// Filled by a `FlowCommand::GpintShow`.
    pub gpint_view: std::sync::Mutex<Vec<SqrView>>,
    /// Mirrored packets for the control core's capture.
    pub capture: ArrayQueue<Captured>,
    /// Copies this worker tried to make, queued or dropped (single writer).
    pub capture_seq: AtomicU64,
    /// Packets waiting for their next hop's MAC, handed to the control core.
    pub held: ArrayQueue<HeldPacket>,
    /// Held packets coming back to be forwarded once more (a second miss drops).
    pub reinject: ArrayQueue<HeldPacket>,
    pub flow_commands: ArrayQueue<FlowCommand>,
    /// Packets the control core wants sent (ARP requests, NS): (port, mbuf).
    pub inject: ArrayQueue<(u16, Mbuf)>,
    /// Events for the control core (neighbours seen, resolution requests,
    /// MACs learned).
    pub events: ArrayQueue<ControlEvent>,
    /// MACs the other workers learned.
    pub mac_sync: ArrayQueue<Sighting>,
    /// Of those, how many the control core could not queue (this worker
    /// was behind): counted here by the control core.
    pub mac_sync_lost: AtomicU64,
    pub flows_in_use: AtomicU64,
    pub macs_in_use: AtomicU64,
    /// Entries of the INT sink's flow cache.
    pub int_flows_in_use: AtomicU64,
    /// Set as the worker returns (after its stages handed on what they held).
    pub stopped: AtomicBool,
    pub lcore: AtomicU64,
    /// AM-PM counters per flow slot, written by this worker only.
    pub ampm: Arc<[FlowCounters]>,
}

/// A packet waiting for its next hop's MAC, with what it needs to run the
/// pipeline again as if just received.
pub struct HeldPacket {
    pub in_port: u16,
    pub hop: IpAddr,
    pub rx: RxTime,
    pub mbuf: Mbuf,
}

/// Copies a worker's capture queue holds at most.
pub const CAPTURE_QUEUE_MAX: usize = 4096;

/// Each worker's capture queue for a pool of `mbufs` shared by `workers`:
/// the copies waiting for the control core hold at most a quarter of the
/// pool, so that a capture never leaves the ports without mbufs.
pub fn capture_queue_len(mbufs: usize, workers: usize) -> usize {
    (mbufs / (4 * workers.max(1))).min(CAPTURE_QUEUE_MAX)
}

impl WorkerShared {
    /// `ampm_slots`: AM-PM flow counter slots (0 without AM-PM).
    pub fn new(ampm_slots: usize) -> WorkerShared {
        WorkerShared::with_capture_queue(ampm_slots, CAPTURE_QUEUE_MAX)
    }

    /// `new` with a capture queue of `capture` copies (at least one).
    pub fn with_capture_queue(ampm_slots: usize, capture: usize) -> WorkerShared {
        WorkerShared {
            counters: SharedCounters::default(),
            acked_tables: AtomicU64::new(0),
            acked_flows: AtomicU64::new(0),
            failed_install: AtomicU64::new(0),
            removed_flow: AtomicU64::new(0),
            dump: std::sync::Mutex::new(Vec::new()),
            mac_dump: std::sync::Mutex::new(Vec::new()),
            int_flow: std::sync::Mutex::new(Vec::new()),
            int_flushed: std::sync::Mutex::new(Vec::new()),
            gpint_view: std::sync::Mutex::new(Vec::new()),
            capture: ArrayQueue::new(capture.max(1)),
            capture_seq: AtomicU64::new(0),
            held: ArrayQueue::new(256),
            reinject: ArrayQueue::new(1024),
            flow_commands: ArrayQueue::new(4096),
            inject: ArrayQueue::new(4096),
            events: ArrayQueue::new(1024),
            mac_sync: ArrayQueue::new(4096),
            mac_sync_lost: AtomicU64::new(0),
            flows_in_use: AtomicU64::new(0),
            macs_in_use: AtomicU64::new(0),
            int_flows_in_use: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            lcore: AtomicU64::new(u64::MAX),
            ampm: (0..ampm_slots).map(|_| FlowCounters::default()).collect(),
        }
    }
}

impl Default for WorkerShared {
    fn default() -> Self {
        Self::new(0)
    }
}

/// State shared by all workers and the control core.
pub struct Shared {
    pub running: AtomicBool,
    pub tables: ArcSwap<Tables>,
    /// Generation of `tables`; bumped after each store.
    pub table_generation: AtomicU64,
    pub workers: Vec<Arc<WorkerShared>>,
    /// Bit per port: mirror received / transmitted packets to `capture`.
    pub capture_rx: AtomicU32,
    pub capture_tx: AtomicU32,
    /// Port utilisation and pool use, measured by the control core for
    /// INT metadata.
    pub load: PortLoad,
}

impl Shared {
    /// `mbufs`: the pool the workers share (it sizes their capture queues).
    pub fn new(tables: Tables, workers: usize, mbufs: usize) -> Shared {
        let g = tables.generation;
        let slots = tables.ampm.as_ref().map_or(0, |a| a.capacity);
        let capture = capture_queue_len(mbufs, workers);
        Shared {
            running: AtomicBool::new(true),
            tables: ArcSwap::from_pointee(tables),
            table_generation: AtomicU64::new(g),
            workers: (0..workers).map(|_| Arc::new(WorkerShared::with_capture_queue(slots, capture))).collect(),
            capture_rx: AtomicU32::new(0),
            capture_tx: AtomicU32::new(0),
            load: PortLoad::default(),
        }
    }
}

/// A worker's control events go to its queue to the control core.
pub struct EventQueue(Arc<WorkerShared>);

impl ControlSink for EventQueue {
    #[inline]
    fn send(&mut self, ev: ControlEvent) -> bool {
        self.0.events.push(ev).is_ok()
    }
}

/// The stages after forwarding, in the order they run. A new stage is one
/// more element here and in [`stages`]. SQR comes first: it claims GPINT
/// probes before forwarding, and no other stage sees them.
pub type Stages = (SqrStage<GpintProducer>, AmpmStage, IntStage<ReportProducer>, LabelStage<ReportProducer>, CaptureTx);

/// A worker's ring of GPINT deliveries and notices to the control core.
pub type GpintProducer = Option<rtrb::Producer<GpintRecord>>;

/// A worker's pipeline.
pub type WorkerPipeline = Pipeline<EventQueue, Stages>;

/// What a worker's feature stages are built from.
pub struct StageSetup {
    /// The INT sink's flow cache (analytics, report interval) and R_G.
    pub analytics: AnalyticsSetup,
    /// This worker's end of its report ring to the control core.
    pub reports: ReportProducer,
    /// TSC -> wall-clock nanoseconds for INT timestamps.
    pub clock: WallClock,
    /// The SQR stage's clone buffer and export ring.
    pub gpint: GpintSetup<GpintProducer>,
    /// The label stage's report ring, the ports' shared label state, and
    /// the seed of its random draws.
    pub label: LabelSetup,
}

/// What a worker's label stage is built from.
pub struct LabelSetup {
    pub reports: ReportProducer,
    pub ports: Arc<LabelPorts>,
    pub seed: u64,
}

impl LabelSetup {
    /// For a pipeline whose tables never hold a label domain.
    pub fn off() -> LabelSetup {
        LabelSetup { reports: crate::int::report_ring::report_ring(1).0, ports: Arc::default(), seed: 1 }
    }
}

/// Builds a worker's stages, each with its own state.
fn stages(s: StageSetup, me: &WorkerShared, hz: u64) -> Stages {
    (
        SqrStage::new(s.gpint, s.clock, hz, 0),
        AmpmStage::new(me.ampm.clone()),
        IntStage::new(s.reports, Analytics::new(s.analytics, s.clock, hz), s.clock),
        LabelStage::new(s.label.reports, s.label.ports, s.clock, s.label.seed),
        CaptureTx,
    )
}

/// A worker's pipeline with empty tables, as it starts (`hz`: TSC ticks a
/// second, for aging).
pub fn pipeline(me: Arc<WorkerShared>, flows: FlowSetup, macs: MacSetup, s: StageSetup, hz: u64) -> WorkerPipeline {
    let mut mac_table = MacTable::new(macs.capacity, macs.aging_s * hz).with_seed(flows.hash_seed);
    if macs.share {
        mac_table = mac_table.with_peers();
    }
    let flow_table = FlowTable::new(flows.capacity, flows.idle_timeout_s * hz).with_seed(flows.hash_seed);
    let stages = stages(s, &me, hz);
    Pipeline::new(ForwardStage::new(flow_table, mac_table, flows.learn, EventQueue(me)), stages)
}

/// Runs the worker until `shared.running` goes false. Returns 0.
pub fn run(setup: WorkerSetup, shared: Arc<Shared>) -> i32 {
    let WorkerSetup { id, mut rx, tx, burst, flows, macs, tx_drain_us, idle, pool, stages: stage_setup } = setup;
    let me = shared.workers[id].clone();
    me.lcore.store(dpdk::lcore_id() as u64, Ordering::Relaxed);
    if idle.enabled {
        dpdk::tight_timer_slack();
    }
    let hz = dpdk::tsc_hz().max(1);
    let mut pipe = pipeline(me.clone(), flows, macs, stage_setup, hz);
    let mut tables = shared.tables.load_full();
    me.acked_tables.store(tables.generation, Ordering::Release);
    let mut c = CounterValues::default();
    let mut out = Egress::new(tx, pool, id, me.clone(), hz);
    let mut house = Housekeeping::new(tx_drain_us, idle, &pipe, hz);
    let mut pkts: [Option<Mbuf>; MAX_BURST] = std::array::from_fn(|_| None);

    while shared.running.load(Ordering::Relaxed) {
        refresh_tables(&shared, &me, &mut tables, &mut c);
        control_messages(&me, &mut pipe, &mut out, &tables, &mut c);
        if !me.reinject.is_empty() {
            // Held packets return after a neighbour was learned: make sure we
            // read the generation that has it.
            refresh_tables(&shared, &me, &mut tables, &mut c);
            reinject(&me, &mut pipe, &mut out, &tables, &shared.load, &mut c, &mut pkts);
        }
        out.capture = (shared.capture_rx.load(Ordering::Relaxed), shared.capture_tx.load(Ordering::Relaxed));
        let mut got = 0;
        for (in_port, rxq) in rx.iter_mut() {
            let ip = *in_port as usize;
            let (shortcut, depth) = pipe.shortcut(&tables, &out, ip);
            let up = tables.ports.get(ip).is_some_and(|p| p.up);
            got += match shortcut {
                Shortcut::Wire(peer) if up && peer < out.tx.len() => {
                    let r = rxq.relay_into(burst, &mut out.tx[peer]);
                    out.count_relay(&mut c, ip, peer, &r);
                    r.packets
                }
                Shortcut::L2 if up => {
                    // The bridge only stamps learned MACs with the time: the
                    // last poll's will do (no TSC read per burst) unless
                    // link emulation schedules packets by it.
                    let now = if tables.emulated == 0 { house.last_poll_tsc } else { dpdk::tsc() };
                    let n = rxq.rx_burst_into(burst, &mut pkts);
                    if n > 0 {
                        pipe.run_l2(&tables, &mut c, &mut out, *in_port, now, &mut pkts[..n]);
                    }
                    n
                }
                _ => {
                    let n = rxq.rx_burst_into(burst, &mut pkts);
                    if n > 0 {
                        let b = Burst::received(*in_port, RxTime { tsc: dpdk::tsc(), wall_ns: 0 }, depth);
                        pipe.run(&tables, &mut c, &mut out, &shared.load, &b, &mut pkts[..n]);
                    }
                    n
                }
            };
        }
        house.after_poll(got, &me, &mut pipe, &tables, &mut out, &mut c);
    }
    Stage::<Mbuf>::stop(&mut pipe.stages, &mut c);
    // What the control core handed over before the stop still goes out
    // (or is counted where the device refuses it).
    inject(&me, &mut out, &tables, &mut c);
    out.flush(&mut c);
    // Packets still in link emulation are dropped at shutdown, counted.
    for imp in out.impair.iter_mut() {
        let n = imp.flush(drop);
        c.drop_n(DropReason::ImpairQueueFull, n as u64);
    }
    me.counters.publish(&mut c);
    me.stopped.store(true, Ordering::Release);
    0
}

/// Picks up a newly published table generation and acknowledges it. The
/// control core keeps the old one alive until every worker has acknowledged.
#[inline]
fn refresh_tables(shared: &Shared, me: &WorkerShared, tables: &mut Arc<Tables>, c: &mut CounterValues) {
    if shared.table_generation.load(Ordering::Acquire) != tables.generation {
        *tables = shared.tables.load_full();
        c.event(Event::TablesSwapped);
        me.acked_tables.store(tables.generation, Ordering::Release);
    }
}

/// Flow commands, MACs the other workers learned and packets to inject,
/// each bounded by its queue's size.
fn control_messages(me: &WorkerShared, pipe: &mut WorkerPipeline, out: &mut Egress, t: &Tables, c: &mut CounterValues) {
    let fwd = &mut pipe.forward;
    while let Some(cmd) = me.flow_commands.pop() {
        match cmd {
            FlowCommand::IntFlowsFlush { generation } => {
                let n = pipe.stages.2.flows.flush(Reason::Flush, c);
                if let Ok(mut d) = me.int_flushed.lock() {
                    *d = vec![n];
                }
                me.acked_flows.fetch_max(generation, Ordering::AcqRel);
            }
            FlowCommand::IntFlowShow { key, generation } => {
                let v: Vec<FlowSnapshot> = pipe.stages.2.flows.show(&key).into_iter().collect();
                if let Ok(mut d) = me.int_flow.lock() {
                    *d = v;
                }
                me.acked_flows.fetch_max(generation, Ordering::AcqRel);
            }
            FlowCommand::GpintShow { generation } => {
                let v = vec![pipe.stages.0.view(dpdk::tsc())];
                if let Ok(mut d) = me.gpint_view.lock() {
                    *d = v;
                }
                me.acked_flows.fetch_max(generation, Ordering::AcqRel);
            }
            _ => flow_command(me, &mut fwd.flows, &fwd.macs, cmd),
        }
    }
    while let Some(s) = me.mac_sync.pop() {
        if fwd.macs.sync_key(s.key, s.port, s.seen) {
            c.event(Event::MacSynced);
        }
    }
    inject(me, out, t, c);
}

/// Sends the frames the control core built (reports, ARP/ND).
fn inject(me: &WorkerShared, out: &mut Egress, t: &Tables, c: &mut CounterValues) {
    while let Some((port, m)) = me.inject.pop() {
        if (port as usize) < out.tx.len() {
            c.event(Event::Injected);
            // What the control core sends leaves the port too: a TX capture
            // shows it as the pipeline's frames.
            if out.capture().1 & (1 << port) != 0 {
                out.mirror(&m, port, true, c);
            }
            out.send(port as usize, m, t, c, dpdk::tsc());
        } else {
            c.drop(DropReason::PortDown);
        }
    }
}

/// Applies one flow command and acknowledges its generation.
fn flow_command(me: &WorkerShared, flows: &mut FlowTable, macs: &MacTable, cmd: FlowCommand) {
    let now = dpdk::tsc();
    match cmd {
        FlowCommand::Install { key, action, generation } => {
            if flows.install(key, action, now).is_err() {
                me.failed_install.store(generation, Ordering::Release);
            }
        }
        FlowCommand::Dump { max, .. } => {
            // Rare and asked for explicitly: the only allocation a worker makes.
            let v: Vec<FlowRecord> = flows
                .iter()
                .take(max)
                .map(|(k, e)| FlowRecord {
                    key: *k,
                    action: e.action,
                    packets: e.packets,
                    bytes: e.bytes,
                    idle_tsc: e.seen.ticks_until(now),
                    installed: e.installed,
                })
                .collect();
            if let Ok(mut d) = me.dump.lock() {
                *d = v;
            }
        }
        FlowCommand::DumpMacs { max, .. } => {
            // Asked for explicitly, like a flow dump.
            let v: Vec<MacRecord> = macs
                .entries()
                .take(max)
                .map(|(vlan, mac, e)| MacRecord { vlan, mac, port: e.port, idle_tsc: now.saturating_sub(e.last_seen) })
                .collect();
            if let Ok(mut d) = me.mac_dump.lock() {
                *d = v;
            }
        }
        FlowCommand::Remove { key, generation } => {
            if flows.remove(&key).is_some() {
                me.removed_flow.store(generation, Ordering::Release);
            }
        }
        FlowCommand::Clear { .. } => flows.clear(),
        // The stages', handled by `control_messages`.
        FlowCommand::IntFlowsFlush { .. } | FlowCommand::IntFlowShow { .. } | FlowCommand::GpintShow { .. } => {}
    }
    me.acked_flows.fetch_max(cmd.generation(), Ordering::AcqRel);
}

/// Runs held packets that came back through the pipeline, as bursts of
/// their own: consecutive packets of one input port and receive time.
fn reinject(
    me: &WorkerShared,
    pipe: &mut WorkerPipeline,
    out: &mut Egress,
    t: &Tables,
    load: &PortLoad,
    c: &mut CounterValues,
    pkts: &mut [Option<Mbuf>; MAX_BURST],
) {
    let mut next = me.reinject.pop();
    while let Some(first) = next.take() {
        let (in_port, rx) = (first.in_port, first.rx);
        pkts[0] = Some(first.mbuf);
        let mut n = 1;
        while n < MAX_BURST {
            match me.reinject.pop() {
                Some(h) if h.in_port == in_port && h.rx == rx => {
                    pkts[n] = Some(h.mbuf);
                    n += 1;
                }
                other => {
                    next = other;
                    break;
                }
            }
        }
        let burst = Burst::reinjected(in_port, rx, dpdk::tsc());
        pipe.run(t, c, out, load, &burst, &mut pkts[..n]);
        if next.is_none() && n == MAX_BURST {
            next = me.reinject.pop();
        }
    }
}

/// What a worker does after each poll round: release and flush TX, age
/// its tables a slice at a time, publish counters, sleep when idle.
struct Housekeeping {
    hz: u64,
    drain_tsc: u64,
    last_drain: u64,
    last_poll_tsc: u64,
    poll_no: u64,
    empty_polls: u32,
    idle: IdleConfig,
    /// Tables age a slice once a millisecond, sized to visit every slot
    /// about once a second: bounded work that does not sweep cold memory
    /// per poll.
    age_tsc: u64,
    last_age: u64,
    flow_slice: usize,
    mac_slice: usize,
    published_sizes: (usize, usize, usize),
}

impl Housekeeping {
    fn new(tx_drain_us: u64, idle: IdleConfig, pipe: &WorkerPipeline, hz: u64) -> Housekeeping {
        let now = dpdk::tsc();
        let slice = |slots: usize| (slots as u64 / AGE_SLICES_PER_S).max(64) as usize;
        Housekeeping {
            hz,
            drain_tsc: tx_drain_us * hz / 1_000_000,
            last_drain: now,
            last_poll_tsc: now,
            poll_no: 0,
            empty_polls: 0,
            idle,
            age_tsc: hz / AGE_SLICES_PER_S,
            last_age: now,
            flow_slice: slice(pipe.forward.flows.slots()),
            mac_slice: slice(pipe.forward.macs.slots()),
            published_sizes: (0, 0, 0),
        }
    }

    fn after_poll(
        &mut self,
        got: usize,
        me: &WorkerShared,
        pipe: &mut WorkerPipeline,
        t: &Tables,
        out: &mut Egress,
        c: &mut CounterValues,
    ) {
        self.poll_no += 1;
        c.polls += 1;
        if got > 0 {
            c.busy_polls += 1;
            self.empty_polls = 0;
        } else {
            self.empty_polls = self.empty_polls.saturating_add(1);
        }
        let now = dpdk::tsc();
        self.last_poll_tsc = now;
        out.release(c, now);
        if got == 0 || now.wrapping_sub(self.last_drain) >= self.drain_tsc {
            out.flush(c);
            self.last_drain = now;
        }
        let fwd = &mut pipe.forward;
        if now.wrapping_sub(self.last_age) >= self.age_tsc {
            self.last_age = now;
            let fa = fwd.flows.age(now, self.flow_slice);
            let ma = fwd.macs.age(now, self.mac_slice);
            c.event_n(Event::FlowAged, fa as u64);
            c.event_n(Event::MacAged, ma as u64);
        }
        Stage::<Mbuf>::poll(&mut pipe.stages, t, now, c);
        if self.poll_no % 1024 == 0 {
            me.counters.publish(c);
        } else if got > 0 || c.sparse_dirty() {
            // Also what a stage's timers counted while idle (SQR notices,
            // aging), so it shows at once.
            me.counters.publish_burst(c, out.tx.len());
        }
        // Stored when they change only: a store to a line the control core
        // has read since costs a cache-line transfer.
        let sizes = (fwd.flows.len(), fwd.macs.len(), pipe.stages.2.flows.cache.len());
        if sizes != self.published_sizes {
            me.flows_in_use.store(sizes.0 as u64, Ordering::Relaxed);
            me.macs_in_use.store(sizes.1 as u64, Ordering::Relaxed);
            me.int_flows_in_use.store(sizes.2 as u64, Ordering::Relaxed);
            self.published_sizes = sizes;
        }
        if self.idle.enabled && self.empty_polls >= self.idle.empty_polls {
            // Sleep, but wake in time for packets a link emulation releases:
            // the last 200 us before one is due are busy-polled.
            let mut us = self.idle.sleep_us as u64;
            if let Some(due) = out.next_due() {
                us = us.min((due.saturating_sub(now) * 1_000_000 / self.hz).saturating_sub(200));
            }
            if us > 0 {
                std::thread::sleep(Duration::from_micros(us));
            }
        }
    }
}

/// A worker's output side: its TX buffer on every port, the link
/// emulation queue of every port, what flooding needs, and its queues to
/// the control core for held and captured packets.
struct Egress {
    tx: Vec<TxBuffer>,
    impair: Vec<Impairer<Mbuf>>,
    pool: dpdk::Mempool,
    hz: u64,
    flood: [usize; MAX_PORTS],
    me: Arc<WorkerShared>,
    queue_id: u8,
    /// Capture bits (received, transmitted) for this poll round.
    capture: (u32, u32),
}

impl Output<Mbuf> for Egress {
    #[inline(always)]
    fn deliver(&mut self, m: Mbuf, v: Verdict, in_port: u16, t: &Tables, c: &mut CounterValues, now: u64) {
        Egress::deliver(self, m, v, in_port as usize, t, c, now)
    }

    fn hold(&mut self, in_port: u16, hop: IpAddr, rx: RxTime, mbuf: Mbuf) -> Result<(), Mbuf> {
        self.me.held.push(HeldPacket { in_port, hop, rx, mbuf }).map_err(|h| h.mbuf)
    }

    #[inline]
    fn can_hold(&self) -> bool {
        !self.me.held.is_full()
    }

    #[inline]
    fn occupancy(&self, port: usize) -> usize {
        self.tx.get(port).map_or(0, |t| t.pending()) + self.impair.get(port).map_or(0, |i| i.len())
    }

    #[inline(always)]
    fn capture(&self) -> (u32, u32) {
        self.capture
    }

    fn mirror(&self, m: &Mbuf, port: u16, tx: bool, c: &mut CounterValues) {
        let seq = self.me.capture_seq.load(Ordering::Relaxed);
        match m.copy_into(&self.pool) {
            Some(mbuf) => {
                if self.me.capture.push(Captured { tsc: dpdk::tsc(), seq, port, tx, mbuf }).is_err() {
                    c.event(Event::CaptureDropped);
                }
            }
            None => c.event(Event::CaptureDropped),
        }
        // After the push: a reader that sees seq + 1 finds copy seq queued
        // (or it was dropped).
        self.me.capture_seq.store(seq + 1, Ordering::Release);
    }

    #[inline(always)]
    fn queue_id(&self) -> u8 {
        self.queue_id
    }

    fn duplicate(&self, m: &Mbuf) -> Option<Mbuf> {
        m.copy_into(&self.pool)
    }
}

impl Egress {
    fn new(tx: Vec<TxBuffer>, pool: dpdk::Mempool, id: usize, me: Arc<WorkerShared>, hz: u64) -> Egress {
        Egress {
            impair: (0..tx.len()).map(|p| Impairer::new(dpdk::tsc() ^ ((id as u64) << 32) ^ p as u64)).collect(),
            tx,
            pool,
            hz,
            flood: [0; MAX_PORTS],
            me,
            queue_id: id as u8,
            capture: (0, 0),
        }
    }

    /// Counts a burst that went from `in_port` straight to `out`'s TX buffer.
    #[inline(always)]
    fn count_relay(&self, c: &mut CounterValues, in_port: usize, out: usize, r: &dpdk::Relayed) {
        c.rx_packets[in_port] += r.packets as u64;
        c.rx_bytes[in_port] += r.bytes;
        c.tx_packets[out] += r.packets as u64;
        c.tx_bytes[out] += r.bytes;
        account_refused(c, out, r.refused, r.refused_bytes);
    }

    /// Sends, floods or drops one packet according to its verdict.
    #[inline(always)]
    fn deliver(&mut self, mut m: Mbuf, v: Verdict, in_port: usize, t: &Tables, c: &mut CounterValues, now: u64) {
        let nports = self.tx.len();
        let out = match v {
            Verdict::Tx(p) => p as usize,
            Verdict::TxLen(p, len) => {
                if !m.set_len(len as usize) {
                    c.drop(DropReason::LocalUnhandled);
                    return;
                }
                p as usize
            }
            Verdict::Flood => return self.flood(m, in_port, t, c, now),
            Verdict::Consumed => return,
            Verdict::Drop(r) => {
                c.drop(r);
                return;
            }
        };
        if out >= nports {
            c.drop(DropReason::PortDown);
            return;
        }
        self.send(out, m, t, c, now);
    }

    /// Out of one port, through its link emulation when it has one.
    #[inline(always)]
    fn send(&mut self, port: usize, m: Mbuf, t: &Tables, c: &mut CounterValues, now: u64) {
        let imp = match t.ports.get(port) {
            Some(p) if t.emulates(port) => &p.impair,
            _ => return self.push(port, m, c),
        };
        let len = m.pkt_len();
        match self.impair[port].admit(imp, self.hz, now, len, m) {
            Admit::Now(m) => self.push(port, m, c),
            Admit::Queued => {}
            Admit::Dropped(r, m) => {
                c.drop(r);
                // Which GPINT transmissions the emulated link lost (L_tx).
                if let Some(g) = &t.gpint {
                    match crate::gpint::stage::class_of(g, m.data()) {
                        Some(crate::wire::gpint::Kind::Probe) => c.event(Event::ImpairLostGpintProbe),
                        Some(crate::wire::gpint::Kind::Feedback) => c.event(Event::ImpairLostGpintFeedback),
                        _ => {}
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn push(&mut self, port: usize, m: Mbuf, c: &mut CounterValues) {
        c.tx_packets[port] += 1;
        c.tx_bytes[port] += m.pkt_len() as u64;
        let (n, b) = self.tx[port].push(m);
        account_refused(c, port, n, b);
    }

    /// Every other up port; emulated ports get their own copy.
    fn flood(&mut self, m: Mbuf, in_port: usize, t: &Tables, c: &mut CounterValues, now: u64) {
        let mut n = 0;
        for i in flood_ports(t, in_port, self.tx.len()) {
            if !t.emulates(i) {
                self.flood[n] = i;
                n += 1;
            } else {
                match m.copy_into(&self.pool) {
                    Some(copy) => self.send(i, copy, t, c, now),
                    None => c.drop(DropReason::TxFull),
                }
            }
        }
        c.event(Event::Flooded);
        if n == 1 {
            // One other port (a two-port bridge): a plain send, no refcount.
            self.push(self.flood[0], m, c);
            return;
        }
        let len = m.pkt_len() as u64;
        for &p in &self.flood[..n] {
            c.tx_packets[p] += 1;
            c.tx_bytes[p] += len;
        }
        TxBuffer::push_flood(m, &mut self.tx, &self.flood[..n], |p, rn, rb| account_refused(c, p, rn, rb));
    }

    /// Sends what the link emulations hold that is due by `now`.
    #[inline]
    fn release(&mut self, c: &mut CounterValues, now: u64) {
        for (p, imp) in self.impair.iter_mut().enumerate() {
            if imp.is_empty() {
                continue;
            }
            let tx = &mut self.tx[p];
            imp.release(now, |m| {
                c.tx_packets[p] += 1;
                c.tx_bytes[p] += m.pkt_len() as u64;
                let (n, b) = tx.push(m);
                account_refused(c, p, n, b);
            });
        }
    }

    /// When the next packet held by a link emulation is due, if any.
    fn next_due(&self) -> Option<u64> {
        self.impair.iter().filter_map(|i| i.next_due()).min()
    }

    fn flush(&mut self, c: &mut CounterValues) {
        for (p, tx) in self.tx.iter_mut().enumerate() {
            if tx.pending() > 0 {
                let (n, b) = tx.flush();
                account_refused(c, p, n, b);
            }
        }
    }
}

/// The ports a flood from `in_port` goes out of: every other up port that
/// has a TX buffer (of `nports`).
fn flood_ports(t: &Tables, in_port: usize, nports: usize) -> impl Iterator<Item = usize> + '_ {
    t.ports.iter().enumerate().take(nports).filter(move |&(i, ps)| i != in_port && ps.up).map(|(i, _)| i)
}

#[inline]
fn account_refused(c: &mut CounterValues, port: usize, n: usize, bytes: u64) {
    if n > 0 {
        c.tx_packets[port] -= n as u64;
        c.tx_bytes[port] -= bytes;
        c.drop_n(DropReason::TxFull, n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_queues_hold_at_most_a_quarter_of_the_pool() {
        assert_eq!(capture_queue_len(16383, 1), 4095);
        assert_eq!(capture_queue_len(65535, 1), CAPTURE_QUEUE_MAX);
        assert_eq!(capture_queue_len(16383, 8), 511);
        assert_eq!(capture_queue_len(1024, 16), 16);
        for (mbufs, workers) in [(1024, 1), (8191, 3), (16383, 16), (1 << 20, 64)] {
            assert!(capture_queue_len(mbufs, workers) * workers <= mbufs / 4, "{mbufs} {workers}");
        }
        assert_eq!(capture_queue_len(1024, 0), 256, "no worker: as one");
    }
}
