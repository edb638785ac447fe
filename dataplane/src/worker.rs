//! The run-to-completion worker loop (one per lcore) and the state it shares
//! with the control core.
//!
//! One loop, as in DPDK's l3fwd: pick up a new table generation if one was
//! published, apply queued flow commands, RX a burst per owned queue,
//! process, buffer TX; drain TX buffers on a timer or when idle; publish
//! counters once per burst; age tables a little; sleep when idle (if asked).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use crossbeam_queue::ArrayQueue;

use crate::ampm::{self, AmpmCtx, BurstTime, FlowCounters, SlotMemo};
use crate::counters::{CounterValues, Event, SharedCounters, MAX_PORTS};
use crate::dpdk::{self, Mbuf, RxQueue, TxBuffer};
use crate::flow_table::{FlowAction, FlowTable};
use crate::forward::{self, ControlEvent, ControlSink, Ctx, Verdict};
use crate::impair::{Admit, Impairer};
use crate::int_stage::{self, BurstClock, Hop, IntCtx, WallClock};
use crate::mac_table::{MacTable, Sighting};
use crate::parse::{FlowKey, PacketMeta};
use crate::report_filter::ReportFilter;
use crate::report_ring::ReportProducer;
use crate::tables::Tables;
use crate::DropReason;

/// Flow-table size from which a burst is parsed and prefetched first.
const PREFETCH_MIN_FLOWS: usize = 4096;
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
            | FlowCommand::DumpMacs { generation, .. } => *generation,
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
    pub flow_capacity: usize,
    pub flow_idle_timeout_s: u64,
    pub learn_flows: bool,
    /// Slots of the INT sink's per-flow report filter.
    pub report_filter_slots: usize,
    /// Announce learned MACs to the other workers (there are some).
    pub share_macs: bool,
    pub mac_capacity: usize,
    pub mac_aging_s: u64,
    pub tx_drain_us: u64,
    pub idle: IdleConfig,
    /// Pool for capture copies.
    pub pool: dpdk::Mempool,
    /// This worker's end of its report ring to the control core.
    pub reports: ReportProducer,
    /// TSC -> wall-clock nanoseconds for INT timestamps.
    pub clock: WallClock,
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
    /// Filled by a `FlowCommand::Dump`.
    pub dump: std::sync::Mutex<Vec<FlowRecord>>,
    /// Filled by a `FlowCommand::DumpMacs`.
    pub mac_dump: std::sync::Mutex<Vec<MacRecord>>,
    /// Mirrored packets for the control core's capture.
    pub capture: ArrayQueue<Captured>,
    /// Packets waiting for their next hop's MAC, handed to the control core:
    /// (input port, packet).
    pub held: ArrayQueue<(u16, std::net::IpAddr, Mbuf)>,
    /// Held packets coming back to be forwarded once more (a second miss drops).
    pub reinject: ArrayQueue<(u16, Mbuf)>,
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
    pub lcore: AtomicU64,
    /// AM-PM counters per flow slot, written by this worker only.
    pub ampm: Box<[FlowCounters]>,
}

impl WorkerShared {
    /// `ampm_slots`: AM-PM flow counter slots (0 without AM-PM).
    pub fn new(ampm_slots: usize) -> WorkerShared {
        WorkerShared {
            counters: SharedCounters::default(),
            acked_tables: AtomicU64::new(0),
            acked_flows: AtomicU64::new(0),
            failed_install: AtomicU64::new(0),
            dump: std::sync::Mutex::new(Vec::new()),
            mac_dump: std::sync::Mutex::new(Vec::new()),
            capture: ArrayQueue::new(4096),
            held: ArrayQueue::new(256),
            reinject: ArrayQueue::new(1024),
            flow_commands: ArrayQueue::new(4096),
            inject: ArrayQueue::new(4096),
            events: ArrayQueue::new(1024),
            mac_sync: ArrayQueue::new(4096),
            mac_sync_lost: AtomicU64::new(0),
            flows_in_use: AtomicU64::new(0),
            macs_in_use: AtomicU64::new(0),
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
    /// Per port: TX utilisation in 1/100 % measured by the control core
    /// (u32::MAX: unknown), for INT metadata.
    pub port_tx_util: [AtomicU32; MAX_PORTS],
    /// Mbufs in use in the packet pool, sampled by the control core.
    pub pool_in_use: AtomicU32,
}

impl Shared {
    pub fn new(tables: Tables, workers: usize) -> Shared {
        let g = tables.generation;
        let slots = tables.ampm.as_ref().map_or(0, |a| a.capacity);
        Shared {
            running: AtomicBool::new(true),
            tables: ArcSwap::from_pointee(tables),
            table_generation: AtomicU64::new(g),
            workers: (0..workers).map(|_| Arc::new(WorkerShared::new(slots))).collect(),
            capture_rx: AtomicU32::new(0),
            capture_tx: AtomicU32::new(0),
            port_tx_util: std::array::from_fn(|_| AtomicU32::new(u32::MAX)),
            pool_in_use: AtomicU32::new(0),
        }
    }
}

struct QueueSink<'a>(&'a ArrayQueue<ControlEvent>);

impl ControlSink for QueueSink<'_> {
    #[inline]
    fn send(&mut self, ev: ControlEvent) -> bool {
        self.0.push(ev).is_ok()
    }
}

/// Runs the worker until `shared.running` goes false. Returns 0.
pub fn run(mut setup: WorkerSetup, shared: Arc<Shared>) -> i32 {
    let me = shared.workers[setup.id].clone();
    me.lcore.store(dpdk::lcore_id() as u64, Ordering::Relaxed);
    if setup.idle.enabled {
        dpdk::tight_timer_slack();
    }
    let hz = dpdk::tsc_hz().max(1);
    let mut flows = FlowTable::new(setup.flow_capacity, setup.flow_idle_timeout_s * hz);
    let mut int_own = IntOwn { reports: setup.reports, filter: ReportFilter::new(setup.report_filter_slots) };
    let mut macs = MacTable::new(setup.mac_capacity, setup.mac_aging_s * hz);
    if setup.share_macs {
        macs = macs.with_peers();
    }
    let mut tables = shared.tables.load_full();
    let mut my_gen = tables.generation;
    me.acked_tables.store(my_gen, Ordering::Release);
    let mut c = CounterValues::default();
    let drain_tsc = setup.tx_drain_us * hz / 1_000_000;
    let mut last_drain = dpdk::tsc();
    let mut last_poll_tsc = last_drain;
    let mut empty_polls: u32 = 0;
    let nports = setup.tx.len();
    let mut out = Egress {
        tx: std::mem::take(&mut setup.tx),
        impair: (0..nports).map(|p| Impairer::new(dpdk::tsc() ^ ((setup.id as u64) << 32) ^ p as u64)).collect(),
        pool: setup.pool.clone(),
        hz,
        flood: [0; MAX_PORTS],
    };
    let burst = setup.burst;
    let mut poll_no: u64 = 0;
    let mut published_sizes = (0usize, 0usize);
    // Tables age a slice once a millisecond, sized to visit every slot about
    // once a second: bounded work that does not sweep cold memory per poll.
    let age_tsc = hz / AGE_SLICES_PER_S;
    let mut last_age = dpdk::tsc();
    let flow_slice = (flows.slots() as u64 / AGE_SLICES_PER_S).max(64) as usize;
    let mac_slice = (macs.slots() as u64 / AGE_SLICES_PER_S).max(64) as usize;
    let mut pkts: [Option<Mbuf>; dpdk::MAX_BURST] = std::array::from_fn(|_| None);
    let mut metas: [Result<PacketMeta, DropReason>; dpdk::MAX_BURST] = [Err(DropReason::EthTruncated); dpdk::MAX_BURST];
    let mut verdicts = [Verdict::Consumed; dpdk::MAX_BURST];
    // Per input port: where its last bridged burst left as a whole.
    let mut expect_out: [Option<usize>; MAX_PORTS] = [None; MAX_PORTS];
    // AM-PM registers per flow slot (this worker's; the counters are shared).
    let mut ampm_regs = vec![0u8; me.ampm.len()];

    while shared.running.load(Ordering::Relaxed) {
        poll_no += 1;
        refresh_tables(&shared, &me, &mut tables, &mut my_gen, &mut c);
        while let Some(cmd) = me.flow_commands.pop() {
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
                        .map(|(vlan, mac, e)| MacRecord {
                            vlan,
                            mac,
                            port: e.port,
                            idle_tsc: now.saturating_sub(e.last_seen),
                        })
                        .collect();
                    if let Ok(mut d) = me.mac_dump.lock() {
                        *d = v;
                    }
                }
                FlowCommand::Remove { key, .. } => {
                    flows.remove(&key);
                }
                FlowCommand::Clear { .. } => flows.clear(),
            }
            me.acked_flows.fetch_max(cmd.generation(), Ordering::AcqRel);
        }
        // Bounded by the queue's size, like the flow commands.
        while let Some(s) = me.mac_sync.pop() {
            if macs.sync_key(s.key, s.port, s.seen) {
                c.event(Event::MacSynced);
            }
        }
        while let Some((port, m)) = me.inject.pop() {
            if (port as usize) < nports {
                c.event(Event::Injected);
                out.send(port as usize, m, &tables, &mut c, dpdk::tsc());
            }
        }

        if !me.reinject.is_empty() {
            // Held packets return after a neighbour was learned: make sure we
            // read the generation that has it.
            refresh_tables(&shared, &me, &mut tables, &mut my_gen, &mut c);
            let mut sink = QueueSink(&me.events);
            let mut ctx = Ctx::new(&tables, &mut flows, &mut macs, &mut c, &mut sink, dpdk::tsc(), setup.learn_flows);
            while let Some((in_port, mut m)) = me.reinject.pop() {
                let mut meta = crate::parse::parse(m.data(), in_port);
                let mut v = forward::process_parsed(&mut ctx, m.data_mut(), in_port, &meta);
                if let (Some(a), Ok(meta)) = (tables.ampm.as_ref(), &mut meta) {
                    let t = BurstTime::new(&a.timing, realtime_ns());
                    let mut memo = SlotMemo::default();
                    ampm_stage(a, &mut ampm_regs, &me.ampm, ctx.counters, &t, &mut memo, &mut m, meta, v);
                }
                if let (Some(spec), Ok(meta)) = (tables.int.as_ref(), &meta) {
                    let times = BurstClock::new(ctx.now);
                    let w = IntWorker { id: setup.id, clock: &setup.clock, times: &times, out: &out, shared: &shared };
                    v = int_verdict(spec, &w, &mut m, meta, v, in_port, &mut int_own, ctx.counters);
                }
                out.deliver(m, v, in_port as usize, ctx.tables, ctx.counters, ctx.now);
            }
        }

        let mut got = 0usize;
        let cap_rx = shared.capture_rx.load(Ordering::Relaxed);
        let cap_tx = shared.capture_tx.load(Ordering::Relaxed);
        let mut sink = QueueSink(&me.events);
        let no_flows = flows.is_empty() && !setup.learn_flows;
        for (in_port, rxq) in setup.rx.iter_mut() {
            let in_port = *in_port;
            let ip = in_port as usize;
            // A cross-connect with nothing that reads packets (no flow
            // entries, no learning, no stage, no capture on either side) is
            // a wire: the burst is received straight into the peer's TX
            // buffer, unparsed. (A peer without a TX buffer takes the
            // parsing path, dropped as port_down.)
            if let Some(peer) = tables.wire_peer(ip).filter(|&p| {
                no_flows
                    && (cap_rx & (1 << ip)) | (cap_tx & (1 << p)) == 0
                    && p < out.tx.len()
                    && tables.ports.get(ip).is_some_and(|p| p.up)
            }) {
                let r = rxq.relay_into(burst, &mut out.tx[peer]);
                got += r.packets;
                c.rx_packets[ip] += r.packets as u64;
                c.rx_bytes[ip] += r.bytes;
                c.tx_packets[peer] += r.packets as u64;
                c.tx_bytes[peer] += r.bytes;
                account_refused(&mut c, peer, r.refused, r.refused_bytes);
                continue;
            }
            // A bridge burst expected to leave whole by the port the last
            // one from this port did (one flow, or a two-port bridge): it is
            // received straight into that port's TX buffer and bridged once
            // there, as a wire's is; one that does not (mixed frames, another
            // port, a drop) is taken back out and handled as below.
            let l2_wire = expect_out[ip].filter(|&p| {
                no_flows
                    && tables.l2_only()
                    && tables.emulated == 0
                    && (cap_rx & (1 << ip)) | cap_tx == 0
                    && p < out.tx.len()
                    && tables.ports.get(ip).is_some_and(|p| p.up)
            });
            let n = if let Some(p) = l2_wire {
                let nports = out.tx.len();
                let mut ctx = Ctx::new(&tables, &mut flows, &mut macs, &mut c, &mut sink, last_poll_tsc, false);
                let mut flooded = false;
                let (r, ok) = rxq.relay_into_if(burst, &mut out.tx[p], &mut pkts, |ms| {
                    if !same_head(ms) {
                        return false;
                    }
                    let v = forward::bridge_l2(&mut ctx, ms[0].data(), in_port);
                    let to = match v {
                        Verdict::Tx(q) => Some(q as usize),
                        // (Only a flood needs the port list.)
                        Verdict::Flood => single_flood_port(&tables, ip, nports),
                        _ => None,
                    };
                    flooded = v == Verdict::Flood;
                    to == Some(p)
                });
                account_refused(&mut c, p, r.refused, r.refused_bytes);
                if ok {
                    got += r.packets;
                    c.rx_packets[ip] += r.packets as u64;
                    c.rx_bytes[ip] += r.bytes;
                    c.tx_packets[p] += r.packets as u64;
                    c.tx_bytes[p] += r.bytes;
                    if flooded {
                        c.event_n(Event::Flooded, r.packets as u64);
                    }
                    continue;
                }
                expect_out[ip] = None;
                r.packets
            } else {
                rxq.rx_burst_into(burst, &mut pkts)
            };
            if n == 0 {
                continue;
            }
            // This burst's receive time, read right after it arrived (not
            // before the poll round: earlier ports' bursts take time).
            // AM-PM's time bits: CLOCK_REALTIME itself (vDSO, once per
            // burst), not the TSC extrapolation: MPs in other processes and
            // on other hosts (PTP-disciplined) must agree on interval edges
            // and timestamps. Read before the TSC: should the thread stall in
            // between, a delay measured against it can only grow, never fall
            // below what the path really took.
            // With no monitored flows yet (they come at run time) the stage
            // has nothing to do: no clock read, no per-packet key.
            let ampm_now =
                tables.ampm.as_ref().filter(|a| !a.flows.is_empty()).map(|a| BurstTime::new(&a.timing, realtime_ns()));
            let mut ampm_memo = SlotMemo::default();
            let l2_only = no_flows && tables.l2_only();
            // The bridge only stamps learned MACs with it: the last poll's
            // time will do (no TSC read per burst) unless link emulation
            // schedules packets by it.
            let now = if l2_only && tables.emulated == 0 { last_poll_tsc } else { dpdk::tsc() };
            got += n;
            if !tables.ports.get(ip).is_some_and(|p| p.up) {
                // Administratively down: count and drop the whole burst.
                for slot in pkts.iter_mut().take(n) {
                    let m = slot.take().expect("received");
                    c.rx_packets[ip] += 1;
                    c.rx_bytes[ip] += m.pkt_len() as u64;
                    c.drop(DropReason::PortDown);
                }
                continue;
            }
            if cap_rx & (1 << ip) != 0 {
                for m in pkts.iter().take(n).flatten() {
                    mirror(&me, &setup.pool, m, in_port, false, &mut c);
                }
            }
            // A bridge with nothing that reads past Ethernet: MACs and VLAN only.
            if l2_only {
                let mut ctx = Ctx::new(&tables, &mut flows, &mut macs, &mut c, &mut sink, now, false);
                // The verdict of the last untagged frame, by its first 16
                // bytes (MACs, ethertype, 2 more): frames of a burst mostly
                // repeat it (as VPP's l2 input caches its last lookup).
                // Equal bytes give the bridge the same inputs, and the
                // tables only change by learning, which the first of them
                // did (the bridge's own memo skips learning it again).
                let mut last: Option<([u8; 16], Verdict)> = None;
                let (mut bytes, mut uniform) = (0u64, true);
                for i in 0..n {
                    let m = pkts[i].as_ref().expect("received");
                    bytes += m.pkt_len() as u64;
                    let head = m.data().first_chunk::<16>().filter(|h| !forward::vlan_tagged(h));
                    verdicts[i] = match (head, &last) {
                        (Some(h), Some((lh, lv))) if h == lh => *lv,
                        _ => {
                            // Every frame of a uniform burst repeats the first.
                            uniform &= i == 0;
                            let v = forward::bridge_l2(&mut ctx, m.data(), in_port);
                            last = head.map(|h| (*h, v));
                            v
                        }
                    };
                }
                ctx.counters.rx_packets[ip] += n as u64;
                ctx.counters.rx_bytes[ip] += bytes;
                // A burst that all leaves by one port without link emulation
                // or capture (the usual case) moves on as a wire's does.
                // (Flooding to the one other port of a two-port bridge is such a case.)
                let single = match verdicts[0] {
                    Verdict::Tx(p) => Some(p as usize),
                    Verdict::Flood => single_flood_port(&tables, ip, out.tx.len()),
                    _ => None,
                };
                if let (true, Some(p)) = (uniform && cap_tx == 0, single) {
                    if p < out.tx.len() && !tables.emulates(p) {
                        expect_out[ip] = Some(p);
                        if verdicts[0] == Verdict::Flood {
                            ctx.counters.event_n(Event::Flooded, n as u64);
                        }
                        ctx.counters.tx_packets[p] += n as u64;
                        ctx.counters.tx_bytes[p] += bytes;
                        let (rn, rb) = out.tx[p].push_burst(&mut pkts[..n]);
                        account_refused(ctx.counters, p, rn, rb);
                        continue;
                    }
                }
                for (slot, &v) in pkts.iter_mut().zip(&verdicts).take(n) {
                    let m = slot.take().expect("received");
                    if cap_tx != 0 {
                        mirror_tx(&me, &setup.pool, &m, v, cap_tx, ctx.counters);
                    }
                    out.deliver(m, v, ip, ctx.tables, ctx.counters, now);
                }
                continue;
            }
            // With a flow table (or AM-PM flow rule set) larger than the
            // caches, pass 1 parses the burst and prefetches each flow's slot
            // so pass 2's lookups overlap their misses; otherwise one pass is
            // cheaper (a burst of parses kept in an array costs ~7 ns a packet).
            let prefetch = Prefetch::for_burst(&flows, &tables);
            let two_pass = prefetch.any();
            if two_pass {
                for i in 0..n {
                    let m = pkts[i].as_ref().expect("received");
                    metas[i] = parse_frame(m, in_port);
                    if let Ok(meta) = &metas[i] {
                        prefetch.packet(&flows, &tables, m.data(), meta);
                    }
                }
            }
            let mut ctx = Ctx::new(&tables, &mut flows, &mut macs, &mut c, &mut sink, now, setup.learn_flows);
            let times = BurstClock::new(now);
            // Received bytes add up in a register, counted after the burst.
            let mut rx_bytes = 0u64;
            for i in 0..n {
                let mut m = pkts[i].take().expect("received");
                rx_bytes += m.pkt_len() as u64;
                let mut meta = if two_pass { metas[i] } else { parse_frame(&m, in_port) };
                let mut v = forward::process_parsed(&mut ctx, m.data_mut(), in_port, &meta);
                if let (Verdict::Drop(DropReason::NeighbourUnresolved), Some(hop)) = (v, ctx.unresolved.take()) {
                    // Hold it while the control core resolves the next hop.
                    match me.held.push((in_port, hop, m)) {
                        Ok(()) => {
                            ctx.counters.event(Event::Held);
                            continue;
                        }
                        Err((_, _, back)) => m = back,
                    }
                }
                if let (Some(a), Some(t), Ok(meta)) = (tables.ampm.as_ref(), ampm_now.as_ref(), &mut meta) {
                    ampm_stage(a, &mut ampm_regs, &me.ampm, ctx.counters, t, &mut ampm_memo, &mut m, meta, v);
                }
                if let (Some(spec), Ok(meta)) = (tables.int.as_ref(), &meta) {
                    if int_stage::may_act(spec, m.data(), meta, in_port) {
                        let w =
                            IntWorker { id: setup.id, clock: &setup.clock, times: &times, out: &out, shared: &shared };
                        v = int_verdict(spec, &w, &mut m, meta, v, in_port, &mut int_own, ctx.counters);
                    }
                }
                if cap_tx != 0 {
                    mirror_tx(&me, &setup.pool, &m, v, cap_tx, ctx.counters);
                }
                out.deliver(m, v, ip, ctx.tables, ctx.counters, now);
            }
            ctx.counters.rx_packets[ip] += n as u64;
            ctx.counters.rx_bytes[ip] += rx_bytes;
        }

        c.polls += 1;
        if got > 0 {
            c.busy_polls += 1;
            empty_polls = 0;
        } else {
            empty_polls = empty_polls.saturating_add(1);
        }
        let now = dpdk::tsc();
        last_poll_tsc = now;
        out.release(&mut c, now);
        if got == 0 || now.wrapping_sub(last_drain) >= drain_tsc {
            out.flush(&mut c);
            last_drain = now;
        }
        if now.wrapping_sub(last_age) >= age_tsc {
            last_age = now;
            let fa = flows.age(now, flow_slice);
            let ma = macs.age(now, mac_slice);
            c.event_n(Event::FlowAged, fa as u64);
            c.event_n(Event::MacAged, ma as u64);
        }
        if poll_no % 1024 == 0 {
            me.counters.publish(&mut c);
        } else if got > 0 {
            me.counters.publish_burst(&mut c, nports);
        }
        // Stored when they change only: a store to a line the control core
        // has read since costs a cache-line transfer.
        let sizes = (flows.len(), macs.len());
        if sizes != published_sizes {
            me.flows_in_use.store(sizes.0 as u64, Ordering::Relaxed);
            me.macs_in_use.store(sizes.1 as u64, Ordering::Relaxed);
            published_sizes = sizes;
        }
        if setup.idle.enabled && empty_polls >= setup.idle.empty_polls {
            // Sleep, but wake in time for packets a link emulation releases:
            // the last 200 us before one is due are busy-polled.
            let mut us = setup.idle.sleep_us as u64;
            if let Some(due) = out.next_due() {
                us = us.min((due.saturating_sub(now) * 1_000_000 / hz).saturating_sub(200));
            }
            if us > 0 {
                std::thread::sleep(Duration::from_micros(us));
            }
        }
    }
    out.flush(&mut c);
    // Packets still in link emulation are dropped at shutdown, counted.
    for imp in out.impair.iter_mut() {
        let n = imp.flush(drop);
        c.drop_n(DropReason::ImpairQueueFull, n as u64);
    }
    me.counters.publish(&mut c);
    0
}

/// The parse-and-prefetch pass of a burst: which tables are larger than
/// the caches, so that their lookups are started for the whole burst before
/// any packet is handled.
#[derive(Debug, Clone, Copy)]
pub struct Prefetch {
    flows: bool,
    ampm: bool,
}

impl Prefetch {
    pub fn for_burst(flows: &FlowTable, t: &Tables) -> Prefetch {
        Prefetch {
            flows: flows.len() >= PREFETCH_MIN_FLOWS,
            ampm: t.ampm.as_ref().is_some_and(|a| a.flows.len() >= PREFETCH_MIN_FLOWS),
        }
    }

    /// Whether the burst gets the pass at all.
    pub fn any(self) -> bool {
        self.flows || self.ampm
    }

    /// Starts loading what the lookups of one parsed packet will read.
    #[inline(always)]
    pub fn packet(self, flows: &FlowTable, t: &Tables, frame: &[u8], meta: &PacketMeta) {
        if self.flows {
            flows.prefetch(&meta.key);
        }
        if let (true, Some(a)) = (self.ampm, t.ampm.as_ref()) {
            ampm::prefetch(a, frame, meta);
        }
    }
}

/// The frame's parse; a chained mbuf is not parsed (its headers may span
/// segments).
#[inline(always)]
fn parse_frame(m: &Mbuf, in_port: u16) -> Result<PacketMeta, DropReason> {
    if m.segments() != 1 {
        Err(DropReason::MultiSegment)
    } else {
        crate::parse::parse(m.data(), in_port)
    }
}

/// Picks up a newly published table generation and acknowledges it. The
/// control core keeps the old one alive until every worker has acknowledged.
#[inline]
fn refresh_tables(
    shared: &Shared,
    me: &WorkerShared,
    tables: &mut Arc<Tables>,
    my_gen: &mut u64,
    c: &mut CounterValues,
) {
    if shared.table_generation.load(Ordering::Acquire) != *my_gen {
        *tables = shared.tables.load_full();
        *my_gen = tables.generation;
        c.event(Event::TablesSwapped);
        me.acked_tables.store(*my_gen, Ordering::Release);
    }
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME).
#[inline]
fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Runs AM-PM on a packet that is being forwarded (not on drops or on the
/// switch's own replies).
#[allow(clippy::too_many_arguments)]
#[inline]
fn ampm_stage(
    spec: &crate::ampm::AmpmSpec,
    regs: &mut [u8],
    counters: &[FlowCounters],
    c: &mut CounterValues,
    now: &BurstTime,
    memo: &mut SlotMemo,
    m: &mut Mbuf,
    meta: &mut PacketMeta,
    v: Verdict,
) {
    if matches!(v, Verdict::Tx(_) | Verdict::Flood) {
        let mut ctx = AmpmCtx { spec, regs, counters, c, now, memo };
        ampm::apply(&mut ctx, m, meta);
    }
}

/// What the INT stage needs to know about the worker running it.
struct IntWorker<'a> {
    id: usize,
    clock: &'a WallClock,
    /// The burst's receive time and egress clock.
    times: &'a BurstClock,
    out: &'a Egress,
    shared: &'a Shared,
}

/// A packet's hop through this worker, measured only if INT acts on it.
struct WorkerHop<'a, 'b> {
    w: &'a IntWorker<'b>,
    in_port: u16,
    out_port: u16,
}

impl int_stage::HopSource for WorkerHop<'_, '_> {
    fn ports(&self) -> (u16, u16) {
        (self.in_port, self.out_port)
    }

    fn rx_tsc(&self) -> u64 {
        self.w.times.rx_tsc
    }

    fn measure(&self) -> Hop {
        let (w, o) = (self.w, self.out_port as usize);
        let util = w.shared.port_tx_util.get(o).map_or(u32::MAX, |u| u.load(Ordering::Relaxed));
        Hop {
            in_port: self.in_port,
            out_port: self.out_port,
            rx_tsc: w.times.rx_tsc,
            tx_tsc: w.times.egress_tsc(dpdk::tsc),
            queue_id: w.id as u8,
            queue_occupancy: w.out.occupancy(o) as u32,
            tx_util: (util != u32::MAX).then_some(util),
            buffer_occupancy: w.shared.pool_in_use.load(Ordering::Relaxed),
        }
    }
}

/// What the INT stage of a worker keeps for itself: the ring its reports go
/// to the control core in, and the sink's per-flow report filter.
struct IntOwn {
    reports: ReportProducer,
    filter: ReportFilter,
}

/// Runs the INT stage on a forwarded packet (or files a drop report for a
/// dropped one); returns the verdict, which becomes a drop when INT says so.
#[allow(clippy::too_many_arguments)]
#[inline]
fn int_verdict(
    spec: &crate::int_watch::IntSpec,
    w: &IntWorker,
    m: &mut Mbuf,
    meta: &PacketMeta,
    v: Verdict,
    in_port: u16,
    own: &mut IntOwn,
    counters: &mut CounterValues,
) -> Verdict {
    let out_port = match v {
        Verdict::Tx(p) => p,
        Verdict::Drop(_) => in_port,
        _ => return v,
    };
    let hop = WorkerHop { w, in_port, out_port };
    let mut ictx = IntCtx { spec, clock: w.clock, filter: &mut own.filter, counters, reports: &mut own.reports };
    match v {
        Verdict::Drop(r) => {
            int_stage::dropped(&mut ictx, m.data(), meta, &hop, r);
            v
        }
        _ => match int_stage::apply(&mut ictx, m, meta, &hop) {
            Ok(()) => v,
            Err(r) => Verdict::Drop(r),
        },
    }
}

/// Whether a burst's frames are untagged and all start with the first
/// one's 16 bytes (MACs, ethertype, two more): a bridge gives them all the
/// first one's verdict.
#[inline]
fn same_head(ms: &[Mbuf]) -> bool {
    let Some(head) = ms.first().and_then(|m| m.data().first_chunk::<16>()).filter(|h| !forward::vlan_tagged(h)) else {
        return false;
    };
    let head = u128::from_ne_bytes(*head);
    // No early exit per frame: the loop stays branch-light.
    ms.iter().fold(true, |same, m| same & m.data().first_chunk::<16>().is_some_and(|h| u128::from_ne_bytes(*h) == head))
}

/// Mirrors a packet about to leave a port whose TX side is captured.
fn mirror_tx(me: &WorkerShared, pool: &dpdk::Mempool, m: &Mbuf, v: Verdict, cap_tx: u32, c: &mut CounterValues) {
    if let Verdict::Tx(p) | Verdict::TxLen(p, _) = v {
        if cap_tx & (1 << p) != 0 {
            mirror(me, pool, m, p, true, c);
        }
    }
}

/// Copies a packet for capture; a full capture queue or pool is counted.
fn mirror(me: &WorkerShared, pool: &dpdk::Mempool, m: &Mbuf, port: u16, tx: bool, c: &mut CounterValues) {
    match m.copy_into(pool) {
        Some(mbuf) => {
            if me.capture.push(Captured { tsc: dpdk::tsc(), port, tx, mbuf }).is_err() {
                c.event(Event::CaptureDropped);
            }
        }
        None => c.event(Event::CaptureDropped),
    }
}

/// A worker's output side: its TX buffer on every port, the link
/// emulation queue of every port, and what flooding needs.
struct Egress {
    tx: Vec<TxBuffer>,
    impair: Vec<Impairer<Mbuf>>,
    pool: dpdk::Mempool,
    hz: u64,
    flood: [usize; MAX_PORTS],
}

impl Egress {
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
            Admit::Dropped(r, _m) => c.drop(r),
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

    /// Packets waiting on a port: this worker's TX buffer and link emulation.
    fn occupancy(&self, port: usize) -> usize {
        self.tx.get(port).map_or(0, |t| t.pending()) + self.impair.get(port).map_or(0, |i| i.len())
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

/// The port a flood from `in_port` goes to when it is the only one.
fn single_flood_port(t: &Tables, in_port: usize, nports: usize) -> Option<usize> {
    let mut ports = flood_ports(t, in_port, nports);
    match (ports.next(), ports.next()) {
        (Some(i), None) => Some(i),
        _ => None,
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
