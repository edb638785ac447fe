//! AM-PM record export: once per interval, in the middle of the next one
//! (when the previous color is stable on every MP whose clock is within
//! T/2 of ours), the control core sums each flow's counters of that color
//! over the workers, takes the difference to the last export, and sends one
//! JSON line per flow to every collector (several lines per datagram).
//!
//! Record (one line, UTF-8 JSON):
//! `{"type":"ampm","version":1,"node":N,"seq":S,"flow":"name","flow_mon_id":ID,
//!   "role":"initiator","method":"muxed","carrier":"dscp","interval":J,
//!   "interval_ns":T,"start_ns":J*T,"color":J%2,"packets":P,"bytes":B,
//!   "delay_count":K,"delay_ts_ns":TS|null,"mean_ts_offset_ns":M|null,
//!   "partial":false}`
//! `partial` marks the interval the switch started in, and those it stopped
//! in: at stop the control core sends what no record holds yet (the
//! interval before the current one when its export was not due, and the
//! current one), before their color was stable. `clock_step` marks
//! the two records of a flow (one per color) exported after CLOCK_REALTIME
//! stepped (checked against CLOCK_MONOTONIC at every poll): their counters
//! may hold packets the workers counted on either side of the step, so
//! they are not attributed to that interval silently; a collector leaves
//! them out of its loss totals.
//! `seq` counts records per collector from 0, so a collector counts lost
//! records as gaps; `interval` is the index of the block on the shared
//! CLOCK_REALTIME time line, so records of different MPs join on
//! (flow_mon_id, interval).

use std::sync::atomic::Ordering::Relaxed;

use crate::collector_tx::{CollectorPlan, CollectorTx, PortOut};

use dataplane::ampm::{AmpmFlow, Timing};
use dataplane::worker::Shared;

use crate::ampm::api::{AmpmCollectorView, AmpmExportView, AmpmRecord};

use crate::ampm::config::DATAGRAM;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColorSnap {
    pub packets: u64,
    pub bytes: u64,
    pub ts_sum: u64,
    pub delay_count: u64,
    pub delay_ts: u64,
}

/// One flow slot's color counters summed over the workers.
pub fn sum(shared: &Shared, slot: usize, color: usize) -> ColorSnap {
    let mut s = ColorSnap::default();
    for w in &shared.workers {
        let Some(fc) = w.ampm.get(slot) else { continue };
        let c = &fc.color[color];
        s.packets += c.packets.load(Relaxed);
        s.bytes += c.bytes.load(Relaxed);
        s.ts_sum = s.ts_sum.wrapping_add(c.ts_offset_sum.load(Relaxed));
        s.delay_count += c.delay_count.load(Relaxed);
        s.delay_ts = s.delay_ts.max(c.delay_ts.load(Relaxed));
    }
    s
}

struct Collector {
    tx: CollectorTx,
    seq: u64,
    datagrams: u64,
    send_errors: u64,
}

pub struct AmpmExporter {
    node_id: u32,
    timing: Timing,
    collectors: Vec<Collector>,
    /// Per slot and color: the counters at the last export.
    last: Vec<[ColorSnap; 2]>,
    /// Last interval exported; at start, the one before the switch started.
    last_interval: u64,
    /// The interval the switch started in: its records are partial.
    first_interval: u64,
    pub records: u64,
    pub intervals_missed: u64,
    /// Last record of each flow (for `show ampm`), by slot.
    pub last_record: Vec<Option<AmpmRecord>>,
    /// (CLOCK_REALTIME, CLOCK_MONOTONIC) at the last poll.
    last_clock: Option<(u64, u64)>,
    /// Exports still to be marked `clock_step` (one per color after a step).
    step_marks: u8,
    pub clock_steps: u64,
}

/// A wall-clock move this much off the monotonic clock's between two
/// polls is a step (NTP slews at most 500 ppm: microseconds a poll).
fn step_threshold_ns(interval_ns: u64) -> u64 {
    (interval_ns / 8).clamp(1, 1_000_000)
}

impl AmpmExporter {
    /// `started_ns`: CLOCK_REALTIME before any worker counts a packet (the
    /// counters are zero then, so every packet counted since is exported).
    pub fn new(
        node_id: u32,
        timing: Timing,
        slots: usize,
        collectors: &[CollectorPlan],
        ports: &dyn PortOut,
        started_ns: u64,
    ) -> Result<AmpmExporter, String> {
        let mut cs = Vec::new();
        for (i, c) in collectors.iter().enumerate() {
            let tx = CollectorTx::open(c, ports, true).map_err(|e| format!("ampm.collector[{i}]: {e}"))?;
            cs.push(Collector { tx, seq: 0, datagrams: 0, send_errors: 0 });
        }
        Ok(AmpmExporter {
            node_id,
            timing,
            collectors: cs,
            last: vec![[ColorSnap::default(); 2]; slots],
            last_interval: timing.position(started_ns).0.saturating_sub(1),
            first_interval: timing.position(started_ns).0,
            records: 0,
            intervals_missed: 0,
            last_record: vec![None; slots],
            last_clock: None,
            step_marks: 0,
            clock_steps: 0,
        })
    }

    /// A flow took over `slot`: what its counters hold now is not its own.
    pub fn rebase(&mut self, shared: &Shared, slot: usize) {
        if let Some(l) = self.last.get_mut(slot) {
            *l = [sum(shared, slot, 0), sum(shared, slot, 1)];
        }
        if let Some(r) = self.last_record.get_mut(slot) {
            *r = None;
        }
    }

    /// Exports the interval that became due, if one did. Returns records
    /// made. `now_ns` is CLOCK_REALTIME (the workers' time line), `mono_ns`
    /// CLOCK_MONOTONIC from any origin (to tell a step from time passing).
    pub fn poll(
        &mut self,
        now_ns: u64,
        mono_ns: u64,
        shared: &Shared,
        flows: &[AmpmFlow],
        out: &mut dyn PortOut,
    ) -> usize {
        self.export_at(now_ns, mono_ns, false, &|slot, color| sum(shared, slot, color), flows, out)
    }

    /// At stop, once the workers stopped: the intervals no record holds yet
    /// (the one before the current when its export was not due, and the
    /// current one), so that every packet counted is in a record. Both are
    /// `partial`: sent before their color was stable, they lack what was
    /// still on its way. Returns records made.
    pub fn finish(
        &mut self,
        now_ns: u64,
        mono_ns: u64,
        shared: &Shared,
        flows: &[AmpmFlow],
        out: &mut dyn PortOut,
    ) -> usize {
        self.export_at(now_ns, mono_ns, true, &|slot, color| sum(shared, slot, color), flows, out)
    }

    /// [`AmpmExporter::poll`] (or with `stopping`,
    /// [`AmpmExporter::finish`]) over `counts(slot, color)`, the workers' sum.
    fn export_at(
        &mut self,
        now_ns: u64,
        mono_ns: u64,
        stopping: bool,
        counts: &dyn Fn(usize, usize) -> ColorSnap,
        flows: &[AmpmFlow],
        out: &mut dyn PortOut,
    ) -> usize {
        self.check_clock(now_ns, mono_ns);
        let (j, slot) = self.timing.position(now_ns);
        if stopping {
            let first = j.saturating_sub(1).max(self.last_interval + 1);
            return (first..=j).map(|due| self.export_interval(due, true, counts, flows, out)).sum();
        }
        let second_half = slot >> (self.timing.sub_bits - 1) == 1;
        let Some(due) = (if second_half { j.checked_sub(1) } else { j.checked_sub(2) }) else { return 0 };
        if self.last_interval >= due {
            return 0;
        }
        self.export_interval(due, false, counts, flows, out)
    }

    /// Counts a step of CLOCK_REALTIME against CLOCK_MONOTONIC since the
    /// last poll: the next two records (one per color) are marked.
    fn check_clock(&mut self, now_ns: u64, mono_ns: u64) {
        if let Some((wall, mono)) = self.last_clock {
            let off = (now_ns as i128 - wall as i128) - (mono_ns as i128 - mono as i128);
            if off.unsigned_abs() > step_threshold_ns(self.timing.interval_ns()) as u128 {
                self.clock_steps += 1;
                self.step_marks = 2;
            }
        }
        self.last_clock = Some((now_ns, mono_ns));
    }

    /// Sends every flow's record of interval `due` (after the last one
    /// exported); `stopped`: sent at stop (partial). Returns records made.
    fn export_interval(
        &mut self,
        due: u64,
        stopped: bool,
        counts: &dyn Fn(usize, usize) -> ColorSnap,
        flows: &[AmpmFlow],
        out: &mut dyn PortOut,
    ) -> usize {
        self.intervals_missed += due - self.last_interval - 1;
        self.last_interval = due;
        let color = (due & 1) as usize;
        let clock_step = self.step_marks > 0;
        self.step_marks = self.step_marks.saturating_sub(1);
        let mut lines: Vec<AmpmRecord> = Vec::with_capacity(flows.len());
        for f in flows {
            let slot = f.mp.slot as usize;
            if slot >= self.last.len() {
                continue;
            }
            let now = counts(slot, color);
            let was = self.last[slot][color];
            self.last[slot][color] = now;
            let packets = now.packets - was.packets;
            let delays = now.delay_count - was.delay_count;
            let rec = AmpmRecord {
                kind: "ampm".into(),
                version: 1,
                node: self.node_id,
                flow: f.name.clone(),
                flow_mon_id: f.mp.flow_mon_id,
                role: f.mp.role.name().into(),
                method: f.mp.method.name().into(),
                carrier: f.mp.carrier.name().into(),
                interval: due,
                interval_ns: self.timing.interval_ns(),
                start_ns: self.timing.start_ns(due),
                color: color as u8,
                packets,
                bytes: now.bytes - was.bytes,
                delay_count: delays,
                delay_ts_ns: (delays > 0).then_some(now.delay_ts),
                mean_ts_offset_ns: (packets > 0).then(|| (now.ts_sum.wrapping_sub(was.ts_sum) as i64) / packets as i64),
                partial: due == self.first_interval || stopped,
                clock_step,
                seq: None,
            };
            self.last_record[slot] = Some(rec.clone());
            lines.push(rec);
        }
        self.records += lines.len() as u64;
        for c in &mut self.collectors {
            let mut buf = String::new();
            for rec in &lines {
                let line = match serde_json::to_string(&AmpmRecord { seq: Some(c.seq), ..rec.clone() }) {
                    Ok(l) => l,
                    Err(_) => {
                        c.send_errors += 1;
                        continue;
                    }
                };
                c.seq += 1;
                if !buf.is_empty() && buf.len() + line.len() + 1 > DATAGRAM {
                    send(c, &buf, out);
                    buf.clear();
                }
                buf.push_str(&line);
                buf.push('\n');
            }
            if !buf.is_empty() {
                send(c, &buf, out);
            }
        }
        lines.len()
    }

    pub fn view(&self) -> AmpmExportView {
        AmpmExportView {
            records: self.records,
            intervals_missed: self.intervals_missed,
            clock_steps: self.clock_steps,
            last_interval: self.last_interval,
            collectors: self
                .collectors
                .iter()
                .map(|c| AmpmCollectorView {
                    address: c.tx.addr.to_string(),
                    via: c.tx.via(),
                    datagrams: c.datagrams,
                    next_seq: c.seq,
                    send_errors: c.send_errors,
                })
                .collect(),
        }
    }
}

fn send(c: &mut Collector, buf: &str, out: &mut dyn PortOut) {
    match c.tx.send(buf.as_bytes(), out) {
        Ok(_) => c.datagrams += 1,
        Err(_) => c.send_errors += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector_tx::NoPorts;
    use dataplane::ampm::{Carrier, FlowRef, Method, MpRole, TimeFormat};
    use std::cell::RefCell;
    use std::net::UdpSocket;

    /// Intervals of 2^27 ns (134 ms) on the ns time line.
    const T: u64 = 1 << 27;

    fn flow() -> AmpmFlow {
        AmpmFlow {
            name: "f".into(),
            mp: FlowRef {
                slot: 0,
                flow_mon_id: 7,
                role: MpRole::Initiator,
                method: Method::Muxed,
                carrier: Carrier::Dscp { l_bit: 0, d_bit: 1 },
                clear: false,
            },
            priority: 0,
            value: Default::default(),
            mask: Default::default(),
        }
    }

    /// Polls at `wall` (and `mono`) as the control core would: the records
    /// it sent, as (interval, packets, clock_step).
    struct Clocked {
        ex: AmpmExporter,
        rx: UdpSocket,
        /// Packets counted per color so far (cumulative, as the workers' counters).
        counted: RefCell<[u64; 2]>,
    }

    impl Clocked {
        fn new(started_ns: u64) -> Clocked {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
            let plan = CollectorPlan { addr: rx.local_addr().unwrap(), bind: None, port: None, mac: None };
            let timing = Timing { format: TimeFormat::Ns, interval_bit: 27, sub_bits: 2 };
            let ex = AmpmExporter::new(1, timing, 1, &[plan], &NoPorts, started_ns).unwrap();
            Clocked { ex, rx, counted: RefCell::new([0; 2]) }
        }

        /// The workers count `n` packets at wall time `wall` (in its color).
        fn count(&self, wall: u64, n: u64) {
            self.counted.borrow_mut()[((wall / T) & 1) as usize] += n;
        }

        fn poll(&mut self, wall: u64, mono: u64) -> Vec<(u64, u64, bool)> {
            let counted = self.counted.borrow().to_owned();
            let counts = move |_: usize, c: usize| ColorSnap { packets: counted[c], ..Default::default() };
            let n = self.ex.export_at(wall, mono, false, &counts, &[flow()], &mut NoPorts);
            self.received(n, "clock_step")
        }

        /// The switch stops at `wall`: the records sent, as (interval,
        /// packets, partial).
        fn finish(&mut self, wall: u64, mono: u64) -> Vec<(u64, u64, bool)> {
            let counted = self.counted.borrow().to_owned();
            let counts = move |_: usize, c: usize| ColorSnap { packets: counted[c], ..Default::default() };
            let n = self.ex.export_at(wall, mono, true, &counts, &[flow()], &mut NoPorts);
            self.received(n, "partial")
        }

        /// `n` records off the collector's socket: (interval, packets, `flag`).
        fn received(&self, n: usize, flag: &str) -> Vec<(u64, u64, bool)> {
            (0..n)
                .map(|_| {
                    let mut b = [0u8; 2048];
                    let len = self.rx.recv(&mut b).unwrap();
                    let v: serde_json::Value = serde_json::from_slice(&b[..len]).unwrap();
                    (v["interval"].as_u64().unwrap(), v["packets"].as_u64().unwrap(), v[flag].as_bool().unwrap())
                })
                .collect()
        }
    }

    /// The workers count 10 packets in each interval and the control core
    /// polls in its middle, over `intervals` intervals from `wall`/`mono`.
    fn run(c: &mut Clocked, wall: u64, mono: u64, intervals: u64) -> Vec<(u64, u64, bool)> {
        let mut out = Vec::new();
        for i in 0..intervals {
            c.count(wall + i * T, 10);
            out.extend(c.poll(wall + i * T + T * 5 / 8, mono + i * T + T * 5 / 8));
        }
        out
    }

    #[test]
    fn records_after_a_wall_clock_step_are_marked_and_the_others_are_not() {
        let j0 = 1000;
        let mut c = Clocked::new(j0 * T);
        // Steady: interval j's record comes in j + 1's second half, 10 packets each.
        let steady = run(&mut c, j0 * T, 0, 6);
        assert_eq!(steady.len(), 5);
        assert!(steady.iter().all(|&(_, p, s)| p == 10 && !s), "{steady:?}");
        assert_eq!(c.ex.clock_steps, 0);

        // The wall clock steps back 3 intervals (the monotonic one goes on).
        let back = run(&mut c, (j0 + 3) * T, 6 * T, 8);
        assert_eq!(c.ex.clock_steps, 1);
        // Nothing is exported for intervals already exported; the first two
        // records after (one per color) hold the packets of the repeated
        // intervals too and are marked; later ones are plain again.
        assert!(back.iter().all(|&(j, _, _)| j > j0 + 4), "{back:?}");
        let marked: Vec<_> = back.iter().filter(|r| r.2).collect();
        assert_eq!(marked.len(), 2, "{back:?}");
        assert!(back[..2].iter().all(|r| r.2) && back[2..].iter().all(|&(_, p, s)| p == 10 && !s), "{back:?}");
        let sent: u64 = steady.iter().chain(&back).map(|r| r.1).sum();

        // The wall clock steps forward 5 intervals: the missed ones are
        // counted, the next two records marked.
        let missed = c.ex.intervals_missed;
        let fwd = run(&mut c, (j0 + 16) * T, 14 * T, 4);
        assert_eq!(c.ex.clock_steps, 2);
        assert!(c.ex.intervals_missed >= missed + 4, "{} -> {}", missed, c.ex.intervals_missed);
        assert!(fwd[..2].iter().all(|r| r.2) && fwd[2..].iter().all(|r| !r.2), "{fwd:?}");
        // Every packet counted is in some record: none lost to the steps
        // (the last interval is not due yet).
        let all: u64 = sent + fwd.iter().map(|r| r.1).sum::<u64>();
        assert_eq!(all, 10 * (6 + 8 + 4) - 10);
    }

    #[test]
    fn stopping_sends_what_no_record_holds_yet_as_partial() {
        let mut c = Clocked::new(1000 * T);
        // Intervals 1000-1003 counted, 10 packets each; 1003's record is not
        // due before 1004's second half.
        let sent = run(&mut c, 1000 * T, 0, 4);
        assert_eq!(sent.iter().map(|r| r.0).collect::<Vec<_>>(), [1000, 1001, 1002]);
        // 7 more in 1004's first quarter, and the switch stops there.
        c.count(1004 * T + T / 8, 7);
        let stop = c.finish(1004 * T + T / 4, 4 * T + T / 4);
        assert_eq!(stop, [(1003, 10, true), (1004, 7, true)]);
        // Every packet counted is in a record.
        let all: u64 = sent.iter().chain(&stop).map(|r| r.1).sum();
        assert_eq!(all, 4 * 10 + 7);
        assert_eq!(c.ex.intervals_missed, 0);
        // Stopped in a second half, the interval before went out already.
        let mut c = Clocked::new(1000 * T);
        let sent = run(&mut c, 1000 * T, 0, 3);
        c.count(1003 * T + T * 3 / 4, 5);
        assert_eq!(c.poll(1003 * T + T * 3 / 4, 3 * T + T * 3 / 4), [(1002, 10, false)]);
        assert_eq!(c.finish(1003 * T + T * 7 / 8, 3 * T + T * 7 / 8), [(1003, 5, true)]);
        assert_eq!(sent.len(), 2);
    }

    #[test]
    fn a_stalled_control_core_is_no_clock_step() {
        let mut c = Clocked::new(1000 * T);
        run(&mut c, 1000 * T, 0, 3);
        // Both clocks move on by 10 s while nobody polls.
        let later = run(&mut c, 1003 * T + 10_000_000_000, 3 * T + 10_000_000_000, 3);
        assert_eq!(c.ex.clock_steps, 0);
        assert!(later.iter().all(|r| !r.2), "{later:?}");
    }
}
