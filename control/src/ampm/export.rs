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
//! `partial` marks the interval the switch started in.
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

    /// Exports the interval that became due, if one did. Returns records made.
    pub fn poll(&mut self, now_ns: u64, shared: &Shared, flows: &[AmpmFlow], out: &mut dyn PortOut) -> usize {
        let (j, slot) = self.timing.position(now_ns);
        let second_half = slot >> (self.timing.sub_bits - 1) == 1;
        let Some(due) = (if second_half { j.checked_sub(1) } else { j.checked_sub(2) }) else { return 0 };
        if self.last_interval >= due {
            return 0;
        }
        self.intervals_missed += due - self.last_interval - 1;
        self.last_interval = due;
        let color = (due & 1) as usize;
        let mut lines: Vec<AmpmRecord> = Vec::with_capacity(flows.len());
        for f in flows {
            let slot = f.mp.slot as usize;
            if slot >= self.last.len() {
                continue;
            }
            let now = sum(shared, slot, color);
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
                partial: due == self.first_interval,
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
