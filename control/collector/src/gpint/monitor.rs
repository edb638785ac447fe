//! The GPINT monitor's recovery loop (gpint-sqr-reliable-int §IV,
//! Algorithms 1 and 2), without sockets: the caller feeds it the reports
//! (deliveries and recovery notices), the first switches' feedbacks and the
//! time, and sends the probes it asks for.
//!
//! A session sends one probe a planned path (at most `window` paths in
//! flight) and ends when every path's telemetry is in, or given up. Per
//! path the monitor merges what deliveries and notices carry by hop index.
//! A notice from hop h (its copy got no feedback) marks the link h -> h+1
//! unavailable and restarts the probe at the first hop without telemetry,
//! over that switch's direct link (a recovery probe, R flag, next attempt).
//! If the original probe still arrives past that link, the link is
//! congested instead. A probe whose first switch does not acknowledge it
//! within t_f is sent again; after `attempts` (r_a) tries that switch is
//! unavailable and the path goes on from the next one. Switches never
//! retransmit: every retry is the monitor's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use dataplane::int::Presence;
use dataplane::parse::parse;
use dataplane::wire::gpint::{Header, Kind, Probe, ProbeRepr, RequestType, SrEntry, FLAG_RECOVERY, TO_MONITOR};
use dataplane::wire::telemetry_report::FLAG_D;
use serde_json::{json, Value};

/// Algorithm 1's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// r_a: retries at one switch before it is unavailable (r_a + 1 tries).
    pub attempts: u8,
    /// t_f: how long a probe waits for its first switch's feedback (the
    /// switches' `gpint.hold_ms` should be the same).
    pub t_f: Duration,
    /// t_ro: how often pending probes are looked at.
    pub resolution: Duration,
}

impl Profile {
    /// The paper's: r_a 10, t_f 1.5 s, 100 ms resolution.
    pub fn paper() -> Profile {
        Profile { attempts: 10, t_f: Duration::from_millis(1500), resolution: Duration::from_millis(100) }
    }

    /// Its fine-tuned one: r_a 2, t_f 0.4 s.
    pub fn fast() -> Profile {
        Profile { attempts: 2, t_f: Duration::from_millis(400), resolution: Duration::from_millis(100) }
    }

    pub fn by_name(name: &str) -> Result<Profile, String> {
        match name {
            "paper" => Ok(Profile::paper()),
            "fast" => Ok(Profile::fast()),
            p => Err(format!("--profile: '{p}' is not one of paper, fast")),
        }
    }
}

/// One hop of a planned path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedHop {
    pub switch: String,
    /// Port towards the next hop; 255 on the last: to the monitor.
    pub next_port: u8,
    /// The link to the next hop (none on the last).
    pub link: Option<String>,
    /// MEA values this hop reports (per-port RX counters from 0).
    pub mea: u8,
}

/// A planned path, as `intcollector gpint plan` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPath {
    pub id: usize,
    pub hops: Vec<PlannedHop>,
}

/// The paths of a plan (`gpint plan`'s JSON); `mea` defaults to `default_mea`.
pub fn read_plan(v: &Value, default_mea: u8) -> Result<Vec<PlannedPath>, String> {
    let paths = v["paths"].as_array().ok_or("plan: no \"paths\" array")?;
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let hops = p["hops"].as_array().ok_or(format!("plan: paths[{i}] has no hops"))?;
        let mut hs = Vec::new();
        for (j, h) in hops.iter().enumerate() {
            let at = || format!("plan: paths[{i}].hops[{j}]");
            let switch = h["switch"].as_str().ok_or_else(|| format!("{}: no switch", at()))?.to_string();
            let next_port =
                h["next_port"].as_u64().filter(|p| *p <= 255).ok_or_else(|| format!("{}: next_port", at()))?;
            let mea = match h.get("mea") {
                Some(m) => m.as_u64().filter(|m| *m <= 255).ok_or_else(|| format!("{}: mea", at()))? as u8,
                None => default_mea,
            };
            hs.push(PlannedHop {
                switch,
                next_port: next_port as u8,
                link: h["link"].as_str().map(str::to_string),
                mea,
            });
        }
        if hs.is_empty() || hs.last().map(|h| h.next_port) != Some(TO_MONITOR) {
            return Err(format!("plan: paths[{i}] must end with next_port 255 (to the monitor)"));
        }
        if hs[..hs.len() - 1].iter().any(|h| h.next_port == TO_MONITOR) {
            return Err(format!("plan: paths[{i}]: next_port 255 before the last hop"));
        }
        if hs.len() > 200 {
            return Err(format!("plan: paths[{i}]: {} hops, at most 200", hs.len()));
        }
        out.push(PlannedPath { id: p["id"].as_u64().unwrap_or(i as u64) as usize, hops: hs });
    }
    if out.is_empty() {
        return Err("plan: no paths".into());
    }
    Ok(out)
}

/// A probe the monitor wants sent to `switch` (the first of its SR entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    pub switch: String,
    pub probe: ProbeRepr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not sent yet this session.
    Waiting,
    /// The newest probe: when it left, from which hop, acknowledged yet.
    Flying {
        sent: Instant,
        start: usize,
        acked: bool,
    },
    Done,
}

/// One path's collection in a session.
#[derive(Debug, Clone)]
struct Run {
    request_id: u16,
    /// Telemetry by hop index: the node ID and the MEA values.
    got: Vec<Option<(u32, Vec<u32>)>>,
    /// Tries at the current start hop without a first-hop feedback.
    tries: u8,
    attempt: u8,
    state: State,
    /// Hops whose notice said their next link broke, by attempt: until the
    /// attempt's original could still arrive past it (then the link was
    /// only slow).
    broken: Vec<(u8, usize, Instant)>,
    /// Hops of switches found unavailable: no telemetry is expected.
    skipped: Vec<bool>,
    /// The furthest hop each attempt's reports showed it reached.
    reached: Vec<(u8, usize)>,
    /// When the last telemetry came in.
    last_at: Option<Instant>,
}

impl Run {
    /// The first hop whose telemetry is missing (and expected).
    fn first_missing(&self) -> Option<usize> {
        (0..self.got.len()).find(|&i| self.got[i].is_none() && !self.skipped[i])
    }

    /// No more probes, and no original that may still arrive.
    fn settled(&self, now: Instant) -> bool {
        self.state == State::Done && self.broken.iter().all(|b| b.2 <= now)
    }
}

/// A session's figures.
#[derive(Debug, Clone, Default)]
struct Tally {
    probes: u64,
    recovery_probes: u64,
    notices: u64,
    deliveries: u64,
    timeouts: u64,
    failed_paths: u64,
}

/// The monitor: the plan, the current session and the link and switch
/// states it has deduced.
pub struct Monitor {
    paths: Vec<PlannedPath>,
    profile: Profile,
    recovery: bool,
    window: usize,
    next_request: u16,
    session: u64,
    started: Option<Instant>,
    runs: Vec<Run>,
    by_request: HashMap<u16, usize>,
    tally: Tally,
    /// This session's deductions.
    unavailable: BTreeSet<String>,
    congested: BTreeSet<String>,
    /// Over all sessions.
    pub totals: Totals,
}

/// Figures over every session, for the summary.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub sessions: u64,
    pub complete: u64,
    pub probes: u64,
    pub recovery_probes: u64,
    pub notices: u64,
    pub deliveries: u64,
    pub stale_reports: u64,
    pub unmatched_feedback: u64,
    pub undecodable: u64,
    /// How often each link or switch ended a session unavailable / congested.
    pub unavailable: BTreeMap<String, u64>,
    pub congested: BTreeMap<String, u64>,
}

impl Monitor {
    /// `first_request`: the first request ID (15 bits); a monitor started
    /// again should not reuse the IDs it sent lately, which the switches'
    /// duplicate filters still hold.
    pub fn new(
        paths: Vec<PlannedPath>,
        profile: Profile,
        recovery: bool,
        window: usize,
        first_request: u16,
    ) -> Monitor {
        Monitor {
            paths,
            profile,
            recovery,
            window: window.max(1),
            next_request: (first_request & 0x7fff).max(1),
            session: 0,
            started: None,
            runs: Vec::new(),
            by_request: HashMap::new(),
            tally: Tally::default(),
            unavailable: BTreeSet::new(),
            congested: BTreeSet::new(),
            totals: Totals::default(),
        }
    }

    /// Whether a session is under way.
    pub fn in_session(&self) -> bool {
        self.started.is_some()
    }

    /// Starts the next session: a fresh request ID per path.
    pub fn start_session(&mut self, now: Instant) {
        self.session += 1;
        self.started = Some(now);
        self.tally = Tally::default();
        self.unavailable.clear();
        self.congested.clear();
        self.by_request.clear();
        self.runs = self
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let request_id = self.next_request;
                self.next_request = (self.next_request % 0x7fff) + 1;
                self.by_request.insert(request_id, i);
                let n = p.hops.len();
                Run {
                    request_id,
                    got: vec![None; n],
                    tries: 0,
                    attempt: 0,
                    state: State::Waiting,
                    broken: Vec::new(),
                    skipped: vec![false; n],
                    reached: Vec::new(),
                    last_at: None,
                }
            })
            .collect();
    }

    /// The probe of run `r` starting at hop `start`.
    fn send(&mut self, r: usize, start: usize, now: Instant, recovery: bool) -> Send {
        let path = &self.paths[r];
        let run = &mut self.runs[r];
        if recovery {
            run.attempt = run.attempt.wrapping_add(1);
            self.tally.recovery_probes += 1;
        } else {
            self.tally.probes += 1;
        }
        run.state = State::Flying { sent: now, start, acked: false };
        let entries: Vec<SrEntry> = path.hops[start..]
            .iter()
            .map(|h| SrEntry { next_port: h.next_port, mea_first: 0, mea_count: h.mea })
            .collect();
        let mut probe = ProbeRepr::new(run.request_id, RequestType::PortRx, run.attempt, start as u8, entries)
            .expect("at most 200 hops");
        if recovery {
            probe.header.flags |= FLAG_RECOVERY;
        }
        Send { switch: path.hops[start].switch.clone(), probe }
    }

    /// A report from a switch: a delivery (the probe at its path's end) or
    /// a recovery notice (D: a copy whose next hop never acknowledged it).
    /// `inner` is the report's inner frame. Returns the probes to send.
    /// `presence`: how probes carry INT (to the INT port, or the paper's
    /// probe codepoint).
    pub fn on_report(&mut self, flags: u8, inner: &[u8], presence: Presence, now: Instant) -> Vec<Send> {
        let Some((h, records)) = read_probe(inner, presence) else {
            self.totals.undecodable += 1;
            return Vec::new();
        };
        let Some(&r) = self.by_request.get(&h.request_id) else {
            self.totals.stale_reports += 1;
            return Vec::new();
        };
        let notice = flags & FLAG_D != 0;
        let len = self.runs[r].got.len();
        // Merge by hop index; note how far this probe got.
        let mut furthest = None;
        for (hop, node, values) in records {
            if (hop as usize) < len {
                if self.runs[r].got[hop as usize].is_none() {
                    self.runs[r].last_at = Some(now);
                }
                self.runs[r].got[hop as usize] = Some((node, values));
                furthest = furthest.max(Some(hop as usize));
            }
        }
        // This attempt went past a link one of its notices called broken:
        // it was slow, not down.
        let attempt = h.attempt;
        let past: Vec<usize> = self.runs[r]
            .broken
            .iter()
            .filter(|&&(a, b, _)| a == attempt && furthest.is_some_and(|f| f > b))
            .map(|&(_, b, _)| b)
            .collect();
        self.runs[r].broken.retain(|&(a, b, _)| !(a == attempt && past.contains(&b)));
        for b in past {
            if let Some(l) = self.paths[r].hops[b].link.clone() {
                self.unavailable.remove(&l);
                self.congested.insert(l);
            }
        }
        let attempt_reached = self.runs[r].reached.iter().find(|x| x.0 == attempt).map(|x| x.1);
        if let Some(f) = furthest {
            match self.runs[r].reached.iter_mut().find(|x| x.0 == attempt) {
                Some(x) => x.1 = x.1.max(f),
                None => self.runs[r].reached.push((attempt, f)),
            }
        }
        if notice {
            self.tally.notices += 1;
            let went_past = |b: usize| attempt_reached.is_some_and(|f| f > b);
            match furthest {
                // The probe itself went on (its delivery came first): only
                // the feedback was lost or late.
                Some(b) if went_past(b) => {
                    if let Some(l) = self.paths[r].hops[b].link.clone() {
                        self.unavailable.remove(&l);
                        self.congested.insert(l);
                    }
                }
                _ => {}
            }
            if let Some(b) = furthest.filter(|&b| !went_past(b)) {
                // The original, slow rather than lost, would arrive within
                // the rest of its path's timeouts.
                let rest = (len - b) as u32;
                self.runs[r].broken.push((attempt, b, now + self.profile.t_f * rest + self.profile.resolution));
                if let Some(l) = self.paths[r].hops[b].link.clone() {
                    if !self.congested.contains(&l) {
                        self.unavailable.insert(l);
                    }
                }
            }
        } else {
            self.tally.deliveries += 1;
        }
        let mut out = Vec::new();
        if self.runs[r].state == State::Done {
            return out;
        }
        match self.runs[r].first_missing() {
            None => self.finish(r),
            // Only a notice about the newest probe restarts it: an older
            // attempt's notice is already being recovered.
            Some(next) if notice && self.recovery && h.attempt == self.runs[r].attempt => {
                self.runs[r].tries = 0;
                out.push(self.send(r, next, now, true));
            }
            Some(_) => {}
        }
        out
    }

    /// A feedback from the first switch of a probe the monitor sent. One
    /// that comes after its probe's delivery, or for an older attempt,
    /// changes nothing; one for no request of this session is counted.
    pub fn on_feedback(&mut self, h: &Header) {
        let Some(&r) = self.by_request.get(&h.request_id) else {
            self.totals.unmatched_feedback += 1;
            return;
        };
        let run = &mut self.runs[r];
        if let State::Flying { start, acked, .. } = &mut run.state {
            if h.attempt == run.attempt && *start == h.start_index as usize {
                *acked = true;
            }
        }
    }

    /// Looks at the pending probes (Algorithm 1's timeout sequence and
    /// Algorithm 2's queue) and starts paths while the window has room.
    /// Returns the probes to send and, when the session just ended, its
    /// JSON line.
    pub fn tick(&mut self, now: Instant) -> (Vec<Send>, Option<Value>) {
        let mut out = Vec::new();
        let Some(started) = self.started else { return (out, None) };
        let t_f = self.profile.t_f;
        for r in 0..self.runs.len() {
            let State::Flying { sent, start, acked } = self.runs[r].state else { continue };
            let hops = self.paths[r].hops.len();
            let first = self.runs[r].first_missing();
            if !acked && now.duration_since(sent) >= t_f {
                // The first switch never answered.
                self.tally.timeouts += 1;
                self.runs[r].tries += 1;
                let mut at = start;
                // r_a retries after the first try: r_a + 1 in all.
                if self.runs[r].tries > self.profile.attempts {
                    self.unavailable.insert(self.paths[r].hops[start].switch.clone());
                    self.runs[r].skipped[start] = true;
                    self.runs[r].tries = 0;
                    at = start + 1;
                }
                let next = (at..hops).find(|&i| self.runs[r].got[i].is_none() && !self.runs[r].skipped[i]);
                match next {
                    Some(i) if self.recovery => out.push(self.send(r, i, now, true)),
                    _ => self.finish(r),
                }
            } else if acked && now.duration_since(sent) >= t_f * (hops - start + 1) as u32 + self.profile.resolution {
                // Acknowledged, then neither delivered nor noticed: lost
                // where no copy was kept (a full clone buffer, recovery
                // off on a switch).
                self.tally.timeouts += 1;
                match first {
                    Some(i) if self.recovery => out.push(self.send(r, i, now, true)),
                    _ => self.finish(r),
                }
            }
        }
        let flying = self.runs.iter().filter(|r| matches!(r.state, State::Flying { .. })).count();
        let room = self.window.saturating_sub(flying);
        let waiting: Vec<usize> =
            (0..self.runs.len()).filter(|&r| self.runs[r].state == State::Waiting).take(room).collect();
        for r in waiting {
            out.push(self.send(r, 0, now, false));
        }
        if self.runs.iter().all(|r| r.settled(now)) {
            // Collection took until the last telemetry came in.
            let last = self.runs.iter().filter_map(|r| r.last_at).max().unwrap_or(now);
            let v = self.end_session(last.duration_since(started));
            return (out, Some(v));
        }
        (out, None)
    }

    /// A path ends: what it got is kept; it failed if telemetry it still
    /// expected is missing.
    fn finish(&mut self, r: usize) {
        if self.runs[r].first_missing().is_some() {
            self.tally.failed_paths += 1;
        }
        self.runs[r].state = State::Done;
    }

    /// The session's JSON line; the totals take its figures.
    fn end_session(&mut self, elapsed: Duration) -> Value {
        self.started = None;
        let mut switches = BTreeSet::new();
        let mut covered = BTreeSet::new();
        let mut telemetry = Vec::new();
        for (p, run) in self.paths.iter().zip(&self.runs) {
            for (i, h) in p.hops.iter().enumerate() {
                switches.insert(h.switch.clone());
                if let Some((node, values)) = &run.got[i] {
                    covered.insert(h.switch.clone());
                    telemetry
                        .push(json!({"path": p.id, "hop": i, "switch": h.switch, "node_id": node, "values": values}));
                }
            }
        }
        let complete = self.tally.failed_paths == 0 && covered.len() == switches.len();
        // A skipped (unavailable) switch is a hop given up.
        let given_up: usize = self.runs.iter().map(|r| r.skipped.iter().filter(|s| **s).count()).sum();
        let t = &mut self.totals;
        t.sessions += 1;
        t.complete += complete as u64;
        t.probes += self.tally.probes;
        t.recovery_probes += self.tally.recovery_probes;
        t.notices += self.tally.notices;
        t.deliveries += self.tally.deliveries;
        for u in &self.unavailable {
            *t.unavailable.entry(u.clone()).or_default() += 1;
        }
        for c in &self.congested {
            *t.congested.entry(c.clone()).or_default() += 1;
        }
        json!({
            "session": self.session,
            "elapsed_ms": elapsed.as_secs_f64() * 1e3,
            "complete": complete,
            "probes": self.tally.probes,
            "recovery_probes": self.tally.recovery_probes,
            "notices": self.tally.notices,
            "deliveries": self.tally.deliveries,
            "timeouts": self.tally.timeouts,
            "failed_paths": self.tally.failed_paths,
            "hops_given_up": given_up,
            "coverage": covered.len() as f64 / switches.len().max(1) as f64,
            "covered": covered.len(),
            "switches": switches.len(),
            "unavailable": self.unavailable.iter().collect::<Vec<_>>(),
            "congested": self.congested.iter().collect::<Vec<_>>(),
            "telemetry": telemetry,
        })
    }

    /// The summary after the last session.
    pub fn summary(&self) -> Value {
        let t = &self.totals;
        json!({
            "summary": true,
            "sessions": t.sessions,
            "complete": t.complete,
            "probes": t.probes,
            "recovery_probes": t.recovery_probes,
            "notices": t.notices,
            "deliveries": t.deliveries,
            "stale_reports": t.stale_reports,
            "unmatched_feedback": t.unmatched_feedback,
            "undecodable": t.undecodable,
            "unavailable": t.unavailable,
            "congested": t.congested,
        })
    }
}

/// One hop's MEA record: hop index, node ID, values.
pub type HopRecord = (u8, u32, Vec<u32>);

/// The GPINT header and MEA records of a probe frame (a report's inner
/// packet), or None if it is not one.
pub fn read_probe(f: &[u8], presence: Presence) -> Option<(Header, Vec<HopRecord>)> {
    let meta = parse(f, 0).ok()?;
    let at = dataplane::int::find(f, &meta, presence)?;
    let blk = dataplane::int::Block::read(f, &meta, at).ok()?;
    let block = f.get(at + blk.total..meta.l3_end)?;
    let p = Probe::new_checked(block).ok()?;
    if p.header.kind == Kind::Feedback {
        return None;
    }
    let recs = p.records().map(|r| (r.hop_index, r.node_id, r.values().collect())).collect();
    Some((p.header, recs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::gpint::frame::{probe_frame, ProbeAddr};
    use dataplane::wire::gpint::{emit_mea_record, mea_record_len, set_sr_left};
    use dataplane::wire::int_md::instr;
    use dataplane::wire::telemetry_report::FLAG_I;

    const INT_PORT: u16 = 17768;

    fn chain(n: usize) -> Vec<PlannedPath> {
        let hops = (0..n)
            .map(|i| PlannedHop {
                switch: format!("s{}", i + 1),
                next_port: if i + 1 == n { TO_MONITOR } else { 1 },
                link: (i + 1 < n).then(|| format!("s{}-s{}", i + 1, i + 2)),
                mea: 2,
            })
            .collect();
        vec![PlannedPath { id: 0, hops }]
    }

    /// A simulated chain of switches: `lost[h]` drops what hop h sends to
    /// h+1 (hop h then sends a notice); `dead` switches neither answer nor forward.
    struct Net {
        lost: Vec<bool>,
        dead: Vec<bool>,
        /// The original arrives anyway, late (a congested link).
        late: bool,
        /// The feedback hop h+1 sends back is lost: h's notice comes, but
        /// the probe went on.
        fb_lost: Vec<bool>,
    }

    fn addr() -> ProbeAddr {
        ProbeAddr {
            eth_src: [2, 0, 0, 0, 0, 1],
            eth_dst: [2, 0, 0, 0, 0, 2],
            ip_src: "10.0.0.1".parse().unwrap(),
            ip_dst: "10.0.0.2".parse().unwrap(),
            src_port: 1,
            int_port: INT_PORT,
            gpint_port: 17900,
            domain_id: 1,
            bitmap: instr::NODE_ID,
            dscp: None,
        }
    }

    /// The probe's frame after hops `start..=end` measured it (no INT
    /// hops: the monitor reads the MEA records).
    fn frame_after(s: &Send, end: usize) -> Vec<u8> {
        let mut f = probe_frame(&addr(), &s.probe).unwrap();
        let start = s.probe.header.start_index as usize;
        for h in start..=end {
            let meta = parse(&f, 0).unwrap();
            let at = meta.l4_offset + 8 + 4 + f[meta.l4_offset + 9] as usize * 4;
            set_sr_left(&mut f[at..], s.probe.header.sr_count - (h - start + 1) as u8);
            let mut rec = vec![0u8; mea_record_len(2)];
            emit_mea_record(&mut rec, 100 + h as u32, h as u8, [h as u32, 7].into_iter());
            f.extend_from_slice(&rec);
            // Lengths as a switch leaves them.
            let (l3, l4) = (meta.l3_offset, meta.l4_offset);
            let ip = u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) + rec.len() as u16;
            f[l3 + 2..l3 + 4].copy_from_slice(&ip.to_be_bytes());
            let u = u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]) + rec.len() as u16;
            f[l4 + 4..l4 + 6].copy_from_slice(&u.to_be_bytes());
        }
        f
    }

    /// Runs sessions until done or `limit` of simulated time; returns the
    /// session lines.
    fn simulate(m: &mut Monitor, net: &Net, sessions: usize) -> Vec<Value> {
        let t0 = Instant::now();
        let mut now = t0;
        let mut lines = Vec::new();
        let mut events: Vec<(Instant, u8, Vec<u8>)> = Vec::new();
        m.start_session(now);
        for _ in 0..100_000 {
            let (sends, line) = m.tick(now);
            let mut queue = sends;
            // Reports due now.
            events.sort_by_key(|e| e.0);
            while events.first().is_some_and(|e| e.0 <= now) {
                let (_, flags, f) = events.remove(0);
                queue.extend(m.on_report(flags, &f, Presence::UdpPort(INT_PORT), now));
            }
            for s in queue {
                let start = s.probe.header.start_index as usize;
                if net.dead[start] {
                    continue;
                }
                m.on_feedback(&s.probe.header.feedback());
                let n = s.probe.entries.len() + start;
                let mut h = start;
                loop {
                    if h + 1 == n {
                        events.push((now + Duration::from_millis(5), 0, frame_after(&s, h)));
                        break;
                    }
                    if net.fb_lost[h] {
                        events.push((now + m.profile.t_f, FLAG_I | FLAG_D, frame_after(&s, h)));
                    }
                    if net.lost[h] || net.dead[h + 1] {
                        // Hop h's copy times out: the notice.
                        events.push((now + m.profile.t_f, FLAG_I | FLAG_D, frame_after(&s, h)));
                        if net.late && net.lost[h] {
                            let mut end = h + 1;
                            while end + 1 < n {
                                end += 1;
                            }
                            events.push((now + m.profile.t_f * 2, 0, frame_after(&s, end)));
                        }
                        break;
                    }
                    h += 1;
                }
            }
            if let Some(l) = line {
                lines.push(l);
                if lines.len() == sessions {
                    return lines;
                }
                m.start_session(now);
            }
            now += Duration::from_millis(10);
            assert!(now - t0 < Duration::from_secs(3600), "simulation ran away");
        }
        panic!("no end");
    }

    fn ids(v: &Value) -> Vec<&str> {
        v.as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect()
    }

    #[test]
    fn without_loss_every_session_completes_without_recovery() {
        let mut m = Monitor::new(chain(4), Profile::fast(), true, 12, 1);
        let net = Net { lost: vec![false; 4], dead: vec![false; 4], late: false, fb_lost: vec![false; 4] };
        let lines = simulate(&mut m, &net, 5);
        for l in &lines {
            assert_eq!(
                (l["complete"].as_bool(), l["probes"].as_u64(), l["recovery_probes"].as_u64()),
                (Some(true), Some(1), Some(0)),
                "{l}"
            );
            assert_eq!(l["telemetry"].as_array().unwrap().len(), 4);
        }
        assert_eq!(lines[0]["telemetry"][2]["values"], json!([2, 7]));
    }

    #[test]
    fn a_lossy_link_is_recovered_once_and_marked_unavailable() {
        let mut m = Monitor::new(chain(4), Profile::fast(), true, 12, 1);
        let net =
            Net { lost: vec![false, true, false, false], dead: vec![false; 4], late: false, fb_lost: vec![false; 4] };
        for l in simulate(&mut m, &net, 3) {
            assert_eq!(l["complete"], true, "{l}");
            assert_eq!((l["recovery_probes"].as_u64(), l["notices"].as_u64()), (Some(1), Some(1)), "{l}");
            assert_eq!(ids(&l["unavailable"]), vec!["s2-s3"]);
            assert_eq!(l["covered"], 4);
        }
    }

    #[test]
    fn a_late_original_makes_the_link_congested_and_counts_once() {
        let mut m = Monitor::new(chain(4), Profile::fast(), true, 12, 1);
        let net =
            Net { lost: vec![false, true, false, false], dead: vec![false; 4], late: true, fb_lost: vec![false; 4] };
        let l = &simulate(&mut m, &net, 1)[0];
        assert_eq!(l["complete"], true, "{l}");
        assert_eq!(ids(&l["congested"]), vec!["s2-s3"], "{l}");
        assert!(l["unavailable"].as_array().unwrap().is_empty(), "{l}");
        assert_eq!(m.totals.sessions, 1);
    }

    #[test]
    fn a_lost_feedback_costs_no_recovery() {
        // The probe is delivered long before the notice of its first hop
        // (whose feedback was lost) comes: the session ends without it.
        let mut m = Monitor::new(chain(4), Profile::fast(), true, 12, 1);
        let net =
            Net { lost: vec![false; 4], dead: vec![false; 4], late: false, fb_lost: vec![true, false, false, false] };
        for l in simulate(&mut m, &net, 2) {
            assert_eq!((l["complete"].as_bool(), l["recovery_probes"].as_u64()), (Some(true), Some(0)), "{l}");
        }
    }

    /// Within a session (another path still running), the notice of a hop
    /// whose probe went on marks its link congested, not unavailable.
    #[test]
    fn a_notice_after_its_probe_went_on_marks_the_link_congested() {
        let mut m = Monitor::new(chain(4), Profile::fast(), true, 12, 1);
        m.start_session(Instant::now());
        let now = Instant::now();
        let (sends, _) = m.tick(now);
        let delivered = frame_after(&sends[0], 3);
        assert!(m.on_report(0, &delivered, Presence::UdpPort(INT_PORT), now).is_empty());
        let notice = frame_after(&sends[0], 0);
        assert!(m.on_report(FLAG_I | FLAG_D, &notice, Presence::UdpPort(INT_PORT), now).is_empty(), "no recovery");
        assert!(m.congested.contains("s1-s2") && m.unavailable.is_empty());
    }

    #[test]
    fn a_dead_switch_is_unavailable_after_its_attempts_and_the_rest_is_covered() {
        let mut m = Monitor::new(chain(4), Profile::fast(), true, 12, 1);
        let net =
            Net { lost: vec![false; 4], dead: vec![false, false, true, false], late: false, fb_lost: vec![false; 4] };
        let l = &simulate(&mut m, &net, 1)[0];
        assert_eq!(l["covered"], 3, "{l}");
        assert_eq!(l["complete"], false);
        assert_eq!(ids(&l["unavailable"]), vec!["s2-s3", "s3"], "{l}");
        // The notice's recovery to s3, r_a retries there, then s4.
        assert_eq!(l["recovery_probes"].as_u64(), Some(2 + Profile::fast().attempts as u64), "{l}");
    }

    #[test]
    fn recovery_off_fails_the_path_at_the_first_loss() {
        let mut m = Monitor::new(chain(4), Profile::fast(), false, 12, 1);
        let net =
            Net { lost: vec![false, true, false, false], dead: vec![false; 4], late: false, fb_lost: vec![false; 4] };
        let l = &simulate(&mut m, &net, 1)[0];
        assert_eq!(
            (l["complete"].as_bool(), l["failed_paths"].as_u64(), l["recovery_probes"].as_u64()),
            (Some(false), Some(1), Some(0)),
            "{l}"
        );
    }

    #[test]
    fn plans_are_read_and_checked() {
        let v = json!({"paths": [{"id": 3, "hops": [{"switch": "a", "next_port": 1, "link": "a-b"}, {"switch": "b", "next_port": 255}]}]});
        let p = read_plan(&v, 4).unwrap();
        assert_eq!((p[0].id, p[0].hops.len(), p[0].hops[0].mea), (3, 2, 4));
        let bad = json!({"paths": [{"hops": [{"switch": "a", "next_port": 1}]}]});
        assert!(read_plan(&bad, 4).unwrap_err().contains("255"));
        assert!(read_plan(&json!({}), 4).is_err());
    }
}
