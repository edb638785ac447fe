//! The INT-label controller (int-label.txt §3.2-3.4): the INT database
//! (Algorithm 4: the newest record per (node ID, port) by label time),
//! network-wide coverage per telemetry window T_i, the label occupation of
//! the traffic, and the Pro controller (Algorithm 3) that sets each port's
//! shift S.
//!
//! Coverage of a window over the ports active in it: `coverage_arrival`,
//! the share whose newer record arrived in the window; `coverage_label`,
//! the share whose newest label time, as the window ends, lies in it. Each
//! port keeps what its last `HISTORY` windows with arrivals saw, so a window
//! is judged the same when it is evaluated after its end, also when a loaded
//! host made the poller read the switches several windows late.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::{HopValues, Stack};

/// A switch port: (node ID, port index).
pub type PortKey = (u32, u16);

/// The newest record of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The label time (the item's egress timestamp), ns.
    pub label_ns: u64,
    /// When the collector received it, ns (its clock).
    pub arrival_ns: u64,
    pub hop_latency_ns: Option<u32>,
    pub queue_occupancy: Option<u32>,
    pub ingress_port: Option<u16>,
}

/// What a port's newer records did in one window: the window's index and
/// the newest label time by its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Seen {
    window: u64,
    label_ns: u64,
}

/// Windows with arrivals a port remembers.
pub const HISTORY: usize = 16;

/// A port's record and its last `HISTORY` windows with arrivals, newest
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub rec: Record,
    seen: [Option<Seen>; HISTORY],
}

/// The INT database and its counters.
#[derive(Debug)]
pub struct LabelDb {
    /// Window 0 starts here (ns); windows are `window_ns` long.
    pub t0: u64,
    pub window_ns: u64,
    pub records: BTreeMap<PortKey, Entry>,
    /// Label reports taken.
    pub reports: u64,
    /// Of them, specific flows' (DS flag A).
    pub specific_reports: u64,
    /// Items (labels) in them.
    pub items: u64,
    /// Items that replaced an older record (or were the port's first).
    pub updated: u64,
    /// Items no newer than the port's record: discarded (out of order).
    pub stale: u64,
    /// Items without a node ID, egress port or egress timestamp.
    pub incomplete: u64,
    /// Histogram of labels per report (index: labels, the last bin: more).
    pub labels_per_report: [u64; 17],
    /// Bytes of label blocks the reports carried (shim + header + items),
    /// and items x 32 (the paper's accounting).
    pub int_bytes: u64,
}

impl LabelDb {
    pub fn new(t0: u64, window_ns: u64) -> LabelDb {
        LabelDb {
            t0,
            window_ns: window_ns.max(1),
            records: BTreeMap::new(),
            reports: 0,
            specific_reports: 0,
            items: 0,
            updated: 0,
            stale: 0,
            incomplete: 0,
            labels_per_report: [0; 17],
            int_bytes: 0,
        }
    }

    /// The window `t` falls in.
    pub fn window_of(&self, t: u64) -> u64 {
        t.saturating_sub(self.t0) / self.window_ns
    }

    /// One label report's stack, received at `arrival_ns`.
    pub fn report(&mut self, s: &Stack, arrival_ns: u64, specific: bool) {
        self.reports += 1;
        self.specific_reports += specific as u64;
        self.labels_per_report[s.hops.len().min(16)] += 1;
        self.int_bytes += 16 + s.hops.len() as u64 * 4 * dataplane::wire::int_md::hop_words(s.bitmap) as u64;
        for h in &s.hops {
            self.item(h, arrival_ns);
        }
    }

    /// Algorithm 4: keep the item if it is newer than the port's record.
    pub fn item(&mut self, h: &HopValues, arrival_ns: u64) {
        self.items += 1;
        let (Some(node), Some(port), Some(label_ns)) = (h.node_id, h.egress_port, h.egress_ts_ns) else {
            self.incomplete += 1;
            return;
        };
        let rec = Record {
            label_ns,
            arrival_ns,
            hop_latency_ns: h.hop_latency_ns,
            queue_occupancy: h.queue_occupancy,
            ingress_port: h.ingress_port,
        };
        let seen = Seen { window: self.window_of(arrival_ns), label_ns };
        match self.records.get_mut(&(node, port)) {
            Some(e) if e.rec.label_ns >= label_ns => self.stale += 1,
            Some(e) => {
                e.rec = rec;
                if e.seen[0].is_some_and(|s| s.window != seen.window) {
                    e.seen.copy_within(..HISTORY - 1, 1);
                }
                e.seen[0] = Some(seen);
                self.updated += 1;
            }
            None => {
                let mut e = Entry { rec, seen: [None; HISTORY] };
                e.seen[0] = Some(seen);
                self.records.insert((node, port), e);
                self.updated += 1;
            }
        }
    }

    /// Coverage of window `w` over `active` ports (asked at most
    /// `HISTORY` windows with arrivals after it ended).
    pub fn coverage(&self, active: &BTreeSet<PortKey>, w: u64) -> Coverage {
        let (start, end) = (self.t0 + w * self.window_ns, self.t0 + (w + 1) * self.window_ns);
        let mut c = Coverage { active: active.len(), ..Default::default() };
        for p in active {
            let Some(e) = self.records.get(p) else {
                c.missed.push(*p);
                continue;
            };
            let seen = e.seen.iter().flatten();
            let arrived = seen.clone().any(|s| s.window == w);
            // The newest label time as window w ended.
            let newest = seen.clone().find(|s| s.window <= w);
            c.by_arrival += arrived as usize;
            c.by_label += newest.is_some_and(|n| (start..end).contains(&n.label_ns)) as usize;
            if !arrived {
                c.missed.push(*p);
            }
        }
        c
    }

    pub fn summary(&self) -> Value {
        json!({ "int_label_summary": {
            "reports": self.reports,
            "specific_reports": self.specific_reports,
            "items": self.items,
            "updated": self.updated,
            "stale": self.stale,
            "incomplete": self.incomplete,
            "ports": self.records.len(),
            "labels_per_report": self.labels_per_report.iter().enumerate()
                .filter(|(_, n)| **n > 0).map(|(i, n)| (i.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "int_bytes": self.int_bytes,
            "paper_bytes": self.items * 32,
        }})
    }

    /// One database entry as a JSON line (`int_label_db`).
    pub fn record_json(key: PortKey, r: &Record) -> Value {
        json!({"type": "int_label_db", "node_id": key.0, "port": key.1, "label_ns": r.label_ns,
               "arrival_ns": r.arrival_ns, "hop_latency_ns": r.hop_latency_ns,
               "queue_occupancy": r.queue_occupancy, "ingress_port": r.ingress_port})
    }
}

/// A window's coverage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    pub active: usize,
    pub by_arrival: usize,
    pub by_label: usize,
    /// Active ports with no newer record arriving in the window.
    pub missed: Vec<PortKey>,
}

impl Coverage {
    fn ratio(n: usize, d: usize) -> f64 {
        if d == 0 {
            1.0
        } else {
            n as f64 / d as f64
        }
    }

    pub fn arrival(&self) -> f64 {
        Coverage::ratio(self.by_arrival, self.active)
    }

    pub fn label(&self) -> f64 {
        Coverage::ratio(self.by_label, self.active)
    }
}

/// How the Pro controller drives S.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProMode {
    /// Algorithm 3: every k x T a stale port gets S+1, a fresh one S-1.
    Shift,
    /// The paper's prototype: stale for T_i sets S = 255, held 10 x T_i.
    Flag,
}

/// The Pro controller's per-port state and its decisions (no I/O: the
/// caller sends each change to the port's switch).
#[derive(Debug)]
pub struct Pro {
    pub mode: ProMode,
    /// k (Shift) in units of T.
    pub k: u64,
    /// T in ns.
    pub interval_ns: u64,
    /// T_i in ns (Flag).
    pub window_ns: u64,
    pub max_shift: u8,
    /// Each port's S as last set, and when (ns).
    pub shift: BTreeMap<PortKey, (u8, u64)>,
    /// Changes made: (raised, lowered).
    pub raised: u64,
    pub lowered: u64,
}

impl Pro {
    pub fn new(mode: ProMode, k: u64, interval_ns: u64, window_ns: u64, max_shift: u8) -> Pro {
        Pro { mode, k: k.max(1), interval_ns, window_ns, max_shift, shift: BTreeMap::new(), raised: 0, lowered: 0 }
    }

    /// The changes due at `now_ns` for the active ports: (port, new S).
    /// A port is stale when its newest record's label time is older than
    /// k x T (Shift) or T_i (Flag), or it has none. The age is taken at
    /// the port's own last label where its switch said when that was
    /// (`last_label`), not at `now_ns`: a port whose traffic stopped
    /// inside the window labels no more, and that is not a lost label.
    pub fn step(
        &mut self,
        db: &LabelDb,
        active: &BTreeSet<PortKey>,
        last_label: &BTreeMap<PortKey, u64>,
        now_ns: u64,
    ) -> Vec<(PortKey, u8)> {
        let mut out = Vec::new();
        for p in active {
            let (s, since) = self.shift.get(p).copied().unwrap_or((0, 0));
            let at = last_label.get(p).map_or(now_ns, |lt| (*lt).min(now_ns));
            let age = db.records.get(p).map_or(u64::MAX, |e| at.saturating_sub(e.rec.label_ns));
            let next = match self.mode {
                ProMode::Shift => {
                    let period = self.k * self.interval_ns;
                    if now_ns.saturating_sub(since) < period {
                        continue;
                    }
                    if age > period {
                        s.saturating_add(1).min(self.max_shift)
                    } else {
                        s.saturating_sub(1)
                    }
                }
                ProMode::Flag => {
                    if age > self.window_ns {
                        dataplane::label::SHIFT_EVERY_PACKET
                    } else if s != 0 && now_ns.saturating_sub(since) >= 10 * self.window_ns {
                        0
                    } else {
                        continue;
                    }
                }
            };
            if next != s || !self.shift.contains_key(p) {
                // Held (Flag) or unchanged: the period restarts.
                self.shift.insert(*p, (next, now_ns));
            }
            if next > s {
                self.raised += 1;
                out.push((*p, next));
            } else if next < s {
                self.lowered += 1;
                out.push((*p, next));
            } else {
                self.shift.insert(*p, (s, now_ns));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(node: u32, port: u16, label_ns: u64) -> HopValues {
        HopValues { node_id: Some(node), egress_port: Some(port), egress_ts_ns: Some(label_ns), ..Default::default() }
    }

    #[test]
    fn the_database_keeps_the_newest_label_and_discards_older_items() {
        let mut db = LabelDb::new(0, 1_000);
        db.item(&hop(1, 2, 100), 1_000);
        db.item(&hop(1, 2, 300), 1_010);
        db.item(&hop(1, 2, 200), 1_020); // arrived late: older than the record
        db.item(&hop(1, 2, 300), 1_030); // the same label again
        db.item(&HopValues { node_id: Some(1), ..Default::default() }, 1_040);
        assert_eq!((db.items, db.updated, db.stale, db.incomplete), (5, 2, 2, 1));
        let r = db.records[&(1, 2)].rec;
        assert_eq!((r.label_ns, r.arrival_ns), (300, 1_010), "the label time and the arrival both kept");
    }

    #[test]
    fn coverage_windows_on_a_scripted_arrival_trace() {
        let mut db = LabelDb::new(0, 1_000);
        let active: BTreeSet<PortKey> = [(1, 0), (1, 1), (2, 0), (3, 1)].into();
        // Window [1000, 2000): three ports report; (2,0)'s label is from
        // before the window (delayed), (3,1) never reports.
        db.item(&hop(1, 0, 1_100), 1_150);
        db.item(&hop(1, 1, 1_500), 1_900);
        db.item(&hop(2, 0, 950), 1_200);
        let c = db.coverage(&active, 1);
        assert_eq!((c.active, c.by_arrival, c.by_label), (4, 3, 2));
        assert_eq!((c.arrival(), c.label()), (0.75, 0.5));
        assert_eq!(c.missed, vec![(3, 1)]);
        // Next window: only (1,0) is newer; an out-of-order older (1,1) item
        // does not count.
        db.item(&hop(1, 0, 2_100), 2_200);
        db.item(&hop(1, 1, 1_400), 2_300);
        // Asked late, window 1 reads as it did at its end.
        assert_eq!(db.coverage(&active, 1), c);
        let c = db.coverage(&active, 2);
        assert_eq!((c.by_arrival, c.by_label), (1, 1));
        // No active port: full coverage, nothing to miss.
        assert_eq!(db.coverage(&BTreeSet::new(), 0).arrival(), 1.0);
    }

    /// A loaded host's poller reads the switches late: window 1 asked after
    /// windows 2-5 had arrivals too still reads as it did at its end (two
    /// windows of history read it as missed, coverage 0 with 130 items in
    /// one INT-label eval window).
    #[test]
    fn a_window_asked_several_windows_late_reads_as_at_its_end() {
        let mut db = LabelDb::new(0, 1_000);
        let active: BTreeSet<PortKey> = [(1, 0), (1, 1)].into();
        db.item(&hop(1, 0, 1_100), 1_150);
        db.item(&hop(1, 1, 900), 1_500);
        let at_end = db.coverage(&active, 1);
        assert_eq!((at_end.by_arrival, at_end.by_label), (2, 1));
        for w in 2..6u64 {
            db.item(&hop(1, 0, w * 1_000 + 100), w * 1_000 + 150);
            db.item(&hop(1, 1, w * 1_000 + 100), w * 1_000 + 150);
        }
        assert_eq!(db.coverage(&active, 1), at_end);
        assert_eq!(db.coverage(&active, 4).by_label, 2);
        // Past the history, a window's arrivals are forgotten.
        for w in 6..6 + HISTORY as u64 {
            db.item(&hop(1, 0, w * 1_000 + 100), w * 1_000 + 150);
        }
        assert_eq!(db.coverage(&active, 1).by_arrival, 1, "(1,1) still remembers window 1");
    }

    #[test]
    fn pro_shift_steps_s_up_while_stale_and_down_once_fresh() {
        let t = 50;
        let mut pro = Pro::new(ProMode::Shift, 2, t, 100, 6);
        let mut db = LabelDb::new(0, 1_000);
        let active: BTreeSet<PortKey> = [(1, 0)].into();
        let none = BTreeMap::new();
        db.item(&hop(1, 0, 0), 0);
        // Stale from t = 100 on: S rises once per k x T = 100 (the first
        // period, fresh at its end, passes with S unchanged).
        let mut got = Vec::new();
        for now in (10..=1_000).step_by(10) {
            for (_, s) in pro.step(&db, &active, &none, now) {
                got.push((now, s));
            }
        }
        assert_eq!(got[..3], [(200, 1), (300, 2), (400, 3)]);
        assert_eq!(got.last().unwrap().1, 6, "capped at max_shift");
        // Fresh again: S falls one step per period to 0.
        let mut s = 6;
        for now in (1_010..=2_000).step_by(10) {
            db.item(&hop(1, 0, now), now);
            for (_, v) in pro.step(&db, &active, &none, now) {
                assert_eq!(v, s - 1);
                s = v;
            }
        }
        assert_eq!(s, 0);
        assert_eq!((pro.raised, pro.lowered), (6, 6));
    }

    #[test]
    fn pro_flag_labels_every_packet_and_holds_ten_windows() {
        let mut pro = Pro::new(ProMode::Flag, 2, 50, 100, 6);
        let mut db = LabelDb::new(0, 1_000);
        let active: BTreeSet<PortKey> = [(1, 0)].into();
        let none = BTreeMap::new();
        db.item(&hop(1, 0, 0), 0);
        assert!(pro.step(&db, &active, &none, 50).is_empty(), "fresh");
        assert_eq!(pro.step(&db, &active, &none, 150), vec![((1, 0), 255)]);
        // Fresh again: held for 10 x T_i from the last stale step.
        for now in (160..1_150).step_by(10) {
            db.item(&hop(1, 0, now), now);
            assert!(pro.step(&db, &active, &none, now).is_empty(), "held at {now}");
        }
        assert_eq!(pro.step(&db, &active, &none, 1_150), vec![((1, 0), 0)]);
        // No record for more than T_i: flagged again; stale while flagged,
        // the hold restarts.
        assert!(pro.step(&db, &active, &none, 1_200).is_empty());
        assert_eq!(pro.step(&db, &active, &none, 1_300), vec![((1, 0), 255)]);
        assert!(pro.step(&db, &active, &none, 2_000).is_empty());
        assert_eq!(pro.shift[&(1, 0)], (255, 2_000));
    }

    #[test]
    fn pro_measures_age_at_the_ports_last_label_not_at_the_window_end() {
        let mut pro = Pro::new(ProMode::Shift, 2, 50, 100, 6);
        let mut db = LabelDb::new(0, 1_000);
        let active: BTreeSet<PortKey> = [(1, 0)].into();
        db.item(&hop(1, 0, 1_000), 1_000);
        // Traffic stopped at 1_020: the switch's last label is the record's.
        // At 1_200 the record is 200 old, yet nothing was lost.
        let idle = BTreeMap::from([((1, 0), 1_000)]);
        assert!(pro.step(&db, &active, &idle, 1_200).is_empty(), "an idle port is not stale");
        // The switch labeled at 1_150 and that label never arrived: stale.
        let lost = BTreeMap::from([((1, 0), 1_150)]);
        assert!(pro.step(&db, &active, &lost, 1_200).is_empty(), "a period after the last step");
        assert_eq!(pro.step(&db, &active, &lost, 1_300), vec![((1, 0), 1)]);
        // A last label later than now (clock skew) is taken at now.
        let ahead = BTreeMap::from([((1, 0), 9_000)]);
        assert_eq!(pro.step(&db, &active, &ahead, 1_400), vec![((1, 0), 2)]);
    }
}
