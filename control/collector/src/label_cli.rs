//! `intcollector`'s INT-label controller: label reports into the INT
//! database, one coverage line per telemetry window T_i, the switches'
//! active ports and label bytes read over their control sockets, and the
//! Pro controller setting each port's S there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use control::client::Client;
use dataplane::int::Presence;
use intcollector::label::{LabelDb, PortKey, Pro, ProMode};
use serde_json::{json, Value};

/// T_i where `--label-window-ms` is not given.
const DEFAULT_WINDOW_MS: f64 = 100.0;

/// The command-line options of the label controller.
#[derive(clap::Args, Debug, Clone)]
pub struct LabelArgs {
    /// Reports with this Domain Specific ID are INT-label reports (the
    /// switches' label.label_domain_id).
    #[arg(long, default_value_t = 0x4c42, value_parser = control::config::parse_u16_any)]
    pub label_domain: u16,
    /// The label domain's presence: DSCP VALUE[/MASK] (label.presence "dscp").
    #[arg(long, value_name = "VALUE[/MASK]", default_value = "0x17")]
    pub label_dscp: String,
    /// The label domain marks by UDP port instead (label.presence "udp_port").
    #[arg(long, conflicts_with = "label_dscp", value_parser = clap::value_parser!(u16).range(1..))]
    pub label_udp_port: Option<u16>,
    /// Telemetry window T_i in ms (default 100): one int_label_coverage
    /// line each, over the active ports (--label-switch or --active-ports).
    #[arg(long, value_name = "MS")]
    pub label_window_ms: Option<f64>,
    /// A switch's control socket (repeat for each): its ports that sent in
    /// a window are the active ports, its label_block_bytes and TX bytes the
    /// occupation; with --label-pro, S is set there.
    #[arg(long = "label-switch", value_name = "SOCKET")]
    pub label_switches: Vec<PathBuf>,
    /// Active ports from a file: lines "NODE_ID PORT_INDEX" (with
    /// --label-switch too, added to the switches' active ports).
    #[arg(long, value_name = "FILE")]
    pub active_ports: Option<PathBuf>,
    /// Pro: drive each port's S through the switches' sockets: "shift"
    /// (Algorithm 3: every k x T a stale port gets S+1, a fresh one S-1) or
    /// "flag" (stale for T_i: S = 255, held 10 x T_i).
    #[arg(long, value_name = "shift|flag")]
    pub label_pro: Option<String>,
    /// Pro's k (1 or more).
    #[arg(long, default_value_t = 2, requires = "label_pro", value_parser = clap::value_parser!(u64).range(1..))]
    pub label_pro_k: u64,
    /// Print every database update as an int_label_db line.
    #[arg(long)]
    pub label_db_lines: bool,
}

/// A switch the controller reads and steers.
struct Switch {
    path: PathBuf,
    client: Client,
    node_id: u32,
    /// T and the largest S (for Pro).
    interval_ns: u64,
    max_shift: u8,
    /// Port names by index (what label_set_shift takes).
    names: Vec<String>,
    /// Per port: TX packets and bytes at the last window's end.
    tx: Vec<(u64, u64)>,
    block_bytes: u64,
}

impl Switch {
    fn connect(path: &std::path::Path) -> Result<Switch, String> {
        let p = path.to_string_lossy().to_string();
        let mut client = Client::connect(&p).map_err(|e| format!("--label-switch {p}: {e}"))?;
        let v = client.call("show_label", json!({})).map_err(|e| format!("--label-switch {p}: show_label: {e}"))?;
        let node_id = v["node_id"].as_u64().ok_or_else(|| format!("--label-switch {p}: no node_id in show_label"))?;
        let names =
            v["ports"].as_array().into_iter().flatten().map(|p| p["port"].as_str().unwrap_or("").to_string()).collect();
        Ok(Switch {
            path: path.to_path_buf(),
            client,
            node_id: node_id as u32,
            interval_ns: (v["interval_ms"].as_f64().unwrap_or(50.0) * 1e6) as u64,
            max_shift: v["max_shift"].as_u64().unwrap_or(6) as u8,
            names,
            tx: Vec::new(),
            block_bytes: 0,
        })
    }

    /// What changed since the last call, and each port's last label time.
    fn sample(&mut self) -> Result<SwitchSample, String> {
        let err = |e: control::client::CallError| format!("{}: {e}", self.path.display());
        let ports = self.client.call("show_ports", json!({})).map_err(err)?;
        let label = self.client.call("show_label", json!({})).map_err(err)?;
        let now: Vec<(u64, u64)> = ports
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (p["tx_packets"].as_u64().unwrap_or(0), p["tx_bytes"].as_u64().unwrap_or(0)))
            .collect();
        let block = label["counters"]["label_block_bytes"].as_u64().unwrap_or(0);
        let at = crate::realtime_ns();
        let last_label = label["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let age_ns = (p["lt_age_ms"].as_f64()? * 1e6) as u64;
                Some((p["index"].as_u64()? as u16, at.saturating_sub(age_ns)))
            })
            .collect();
        let mut active = Vec::new();
        let mut bytes = 0;
        if self.tx.len() == now.len() {
            for (i, (n, p)) in now.iter().zip(&self.tx).enumerate() {
                if n.0 > p.0 {
                    active.push(i as u16);
                }
                bytes += n.1.saturating_sub(p.1);
            }
        }
        let block_delta = block.saturating_sub(self.block_bytes);
        let first = self.tx.is_empty();
        self.tx = now;
        self.block_bytes = block;
        Ok(SwitchSample { active, tx_bytes: bytes, block_bytes: if first { 0 } else { block_delta }, last_label })
    }
}

/// What the poller read of one switch at a window's end.
struct SwitchSample {
    /// Ports with TX since the last sample.
    active: Vec<u16>,
    tx_bytes: u64,
    /// Label block bytes sent since the last sample.
    block_bytes: u64,
    /// Each port's last label time (ns, this host's clock).
    last_label: Vec<(u16, u64)>,
}

/// What the poller read of the switches for one window.
struct Sample {
    window: u64,
    active: BTreeSet<PortKey>,
    /// The switches' last label time per port (for Pro's staleness).
    last_label: BTreeMap<PortKey, u64>,
    per_node: BTreeMap<u32, usize>,
    tx_bytes: u64,
    block_bytes: u64,
    errors: u64,
    /// T and the largest S of the first switch that answered (for Pro).
    pro_params: Option<(u64, u8)>,
}

/// A change of S for the poller to send.
struct SetShift {
    node: u32,
    port: u16,
    shift: u8,
}

/// Reads every switch at each window's end, on its own thread: the
/// receive loop never waits on a control socket, so arrival times stay
/// true. Sends S changes as they come.
fn poller(
    paths: Vec<PathBuf>,
    t0: u64,
    window_ns: u64,
    samples: std::sync::mpsc::Sender<Sample>,
    shifts: std::sync::mpsc::Receiver<SetShift>,
) {
    let mut switches: Vec<Option<Switch>> = paths.iter().map(|_| None).collect();
    // Why each switch last failed to answer: said once, not every window.
    let mut why: Vec<Option<String>> = paths.iter().map(|_| None).collect();
    let mut w = 0u64;
    loop {
        let end = t0 + (w + 1) * window_ns;
        // Until the window ends, send S changes as they arrive.
        loop {
            let now = crate::realtime_ns();
            if now >= end {
                break;
            }
            match shifts.recv_timeout(std::time::Duration::from_nanos(end - now)) {
                Ok(c) => {
                    if let Some(sw) = switches.iter_mut().flatten().find(|s| s.node_id == c.node) {
                        let name = sw.names.get(c.port as usize).cloned().unwrap_or_default();
                        if let Err(e) = sw.client.call("label_set_shift", json!({"port": name, "shift": c.shift})) {
                            eprintln!("intcollector: {}: label_set_shift {name} {}: {e}", sw.path.display(), c.shift);
                        }
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        let mut sample = Sample {
            window: w,
            active: BTreeSet::new(),
            last_label: BTreeMap::new(),
            per_node: BTreeMap::new(),
            tx_bytes: 0,
            block_bytes: 0,
            errors: 0,
            pro_params: None,
        };
        for ((slot, path), why) in switches.iter_mut().zip(&paths).zip(&mut why) {
            if slot.is_none() {
                // Not up yet (or gone): its ports count from when it
                // answers; until then each window counts it an error.
                match Switch::connect(path) {
                    Ok(s) => {
                        if why.take().is_some() {
                            eprintln!(
                                "intcollector: --label-switch {}: answers now (node {})",
                                path.display(),
                                s.node_id
                            );
                        }
                        *slot = Some(s);
                    }
                    Err(e) => {
                        sample.errors += 1;
                        if why.as_deref() != Some(e.as_str()) {
                            eprintln!("intcollector: {e} (asked again each window; its ports count once it answers)");
                            *why = Some(e);
                        }
                        continue;
                    }
                }
            }
            let Some(s) = slot else { continue };
            sample.pro_params.get_or_insert((s.interval_ns, s.max_shift));
            match s.sample() {
                Ok(r) => {
                    sample.per_node.insert(s.node_id, r.active.len());
                    sample.last_label.extend(r.last_label.into_iter().map(|(p, t)| ((s.node_id, p), t)));
                    sample.active.extend(r.active.into_iter().map(|p| (s.node_id, p)));
                    sample.tx_bytes += r.tx_bytes;
                    sample.block_bytes += r.block_bytes;
                }
                Err(e) => {
                    sample.errors += 1;
                    eprintln!("intcollector: {e}");
                    *why = Some(e);
                    *slot = None;
                }
            }
        }
        if samples.send(sample).is_err() {
            return;
        }
        // A window slept through (a slow switch) is skipped.
        w = (crate::realtime_ns().saturating_sub(t0) / window_ns).max(w + 1);
    }
}

/// The controller's state over a run.
pub struct LabelRun {
    pub domain: u16,
    pub presence: Presence,
    pub db: LabelDb,
    window_ns: u64,
    /// The next window a static active set (no switches) closes.
    next_static: u64,
    static_active: Option<BTreeSet<PortKey>>,
    samples: Option<std::sync::mpsc::Receiver<Sample>>,
    shifts: Option<std::sync::mpsc::Sender<SetShift>>,
    pro_mode: Option<ProMode>,
    pro_k: u64,
    pro: Option<Pro>,
    db_lines: bool,
    /// Coverage lines written, and their sums (for the summary's means).
    windows: u64,
    sum_arrival: f64,
    sum_label: f64,
    min_arrival: f64,
    /// Occupation: label block bytes and all bytes the switches sent.
    block_bytes: u64,
    traffic_bytes: u64,
    items_at_last_window: u64,
    paper_bytes: u64,
    pub errors: u64,
    /// The active ports of the last window closed.
    last_active: BTreeSet<PortKey>,
}

fn label_presence(a: &LabelArgs) -> Result<Presence, String> {
    if let Some(p) = a.label_udp_port {
        return Ok(Presence::UdpPort(p));
    }
    let num = |t: &str| {
        let t = t.trim();
        match t.strip_prefix("0x") {
            Some(h) => u8::from_str_radix(h, 16),
            None => t.parse(),
        }
        .map_err(|_| format!("--label-dscp: '{t}' is not a number 0-63"))
    };
    let (value, mask) = match a.label_dscp.split_once('/') {
        Some((v, m)) => (num(v)?, num(m)?),
        None => (num(&a.label_dscp)?, 0x3f),
    };
    control::int::config::dscp_presence(("--label-dscp value", "--label-dscp mask"), value, mask)
        .map_err(|e| format!("{}: {}", e.key, e.reason))
}

fn read_active(path: &PathBuf) -> Result<BTreeSet<PortKey>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--active-ports {}: {e}", path.display()))?;
    let mut out = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace().map(|w| w.parse::<u32>());
        match (it.next(), it.next(), it.next()) {
            (Some(Ok(n)), Some(Ok(p)), None) if p <= u16::MAX as u32 => {
                out.insert((n, p as u16));
            }
            _ => {
                return Err(format!(
                    "--active-ports {} line {}: '{line}' is not \"NODE_ID PORT\" (a node ID 0-4294967295, a port index 0-65535)",
                    path.display(),
                    i + 1
                ))
            }
        }
    }
    if out.is_empty() {
        // Every window would cover all of none.
        return Err(format!("--active-ports {}: no port listed", path.display()));
    }
    Ok(out)
}

impl LabelRun {
    pub fn new(a: &LabelArgs, now_ns: u64) -> Result<LabelRun, String> {
        let window_ms = a.label_window_ms.unwrap_or(DEFAULT_WINDOW_MS);
        if !(window_ms > 0.0 && window_ms <= 3_600_000.0) {
            return Err("--label-window-ms: must be more than 0 and at most an hour".into());
        }
        // Windows close only over active ports: without a source of them
        // no coverage line is ever printed.
        if a.label_window_ms.is_some() && a.label_switches.is_empty() && a.active_ports.is_none() {
            return Err("--label-window-ms: coverage windows are over the active ports, \
                        which come from --label-switch or --active-ports (neither given)"
                .into());
        }
        if a.label_domain == 0 {
            // As the switches' label_domain_id: classic INT's reports are ID 0.
            return Err("--label-domain: must be nonzero (0 is classic INT)".into());
        }
        let window_ns = (window_ms * 1e6) as u64;
        let pro_mode = match a.label_pro.as_deref() {
            None => None,
            Some("shift") => Some(ProMode::Shift),
            Some("flag") => Some(ProMode::Flag),
            Some(m) => return Err(format!("--label-pro: '{m}' is not one of shift, flag")),
        };
        if pro_mode.is_some() && a.label_switches.is_empty() {
            return Err("--label-pro needs the switches' sockets (--label-switch)".into());
        }
        let (samples, shifts) = if a.label_switches.is_empty() {
            (None, None)
        } else {
            let (stx, srx) = std::sync::mpsc::channel();
            let (ctx, crx) = std::sync::mpsc::channel();
            let paths = a.label_switches.clone();
            std::thread::Builder::new()
                .name("label-poller".into())
                .spawn(move || poller(paths, now_ns, window_ns, stx, crx))
                .map_err(|e| format!("label poller thread: {e}"))?;
            (Some(srx), Some(ctx))
        };
        Ok(LabelRun {
            domain: a.label_domain,
            presence: label_presence(a)?,
            db: LabelDb::new(now_ns, window_ns),
            window_ns,
            next_static: 0,
            static_active: a.active_ports.as_ref().map(read_active).transpose()?,
            samples,
            shifts,
            pro_mode,
            pro_k: a.label_pro_k,
            pro: None,
            db_lines: a.label_db_lines,
            windows: 0,
            sum_arrival: 0.0,
            sum_label: 0.0,
            min_arrival: 1.0,
            block_bytes: 0,
            traffic_bytes: 0,
            items_at_last_window: 0,
            paper_bytes: 0,
            errors: 0,
            last_active: BTreeSet::new(),
        })
    }

    /// A label report's stack; returns the database lines to print.
    pub fn report(&mut self, s: &intcollector::Stack, arrival_ns: u64) -> Vec<Value> {
        let before = self.db.updated;
        self.db.report(s, arrival_ns, s.ds_flags & dataplane::label::DS_FLAG_A != 0);
        if !self.db_lines || self.db.updated == before {
            return Vec::new();
        }
        s.hops
            .iter()
            .filter_map(|h| Some((h.node_id?, h.egress_port?)))
            .filter_map(|k| {
                self.db
                    .records
                    .get(&k)
                    .filter(|e| e.rec.arrival_ns == arrival_ns)
                    .map(|e| LabelDb::record_json(k, &e.rec))
            })
            .collect()
    }

    /// The coverage lines of the windows closed since the last call.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Value> {
        let mut out = Vec::new();
        let got: Vec<Sample> = self.samples.as_ref().map(|r| r.try_iter().collect()).unwrap_or_default();
        for mut sm in got {
            if let Some(st) = &self.static_active {
                sm.active.extend(st.iter().copied());
            }
            out.push(self.close(sm));
        }
        if self.samples.is_none() {
            if let Some(st) = self.static_active.clone() {
                // Closed a little after its end, as the poller would.
                while self.db.t0 + (self.next_static + 1) * self.window_ns + self.window_ns / 10 <= now_ns {
                    let w = self.next_static;
                    self.next_static += 1;
                    let sm = Sample {
                        window: w,
                        active: st.clone(),
                        last_label: BTreeMap::new(),
                        per_node: BTreeMap::new(),
                        tx_bytes: 0,
                        block_bytes: 0,
                        errors: 0,
                        pro_params: None,
                    };
                    out.push(self.close(sm));
                }
            }
        }
        out
    }

    /// One window's coverage line; Pro's changes go to the poller.
    fn close(&mut self, sm: Sample) -> Value {
        let w = sm.window;
        let (start, end) = (self.db.t0 + w * self.window_ns, self.db.t0 + (w + 1) * self.window_ns);
        self.errors += sm.errors;
        let c = self.db.coverage(&sm.active, w);
        let items = self.db.items - self.items_at_last_window;
        self.items_at_last_window = self.db.items;
        if c.active > 0 {
            self.windows += 1;
            self.sum_arrival += c.arrival();
            self.sum_label += c.label();
            self.min_arrival = self.min_arrival.min(c.arrival());
        }
        self.block_bytes += sm.block_bytes;
        self.traffic_bytes += sm.tx_bytes;
        self.paper_bytes += items * 32;
        if let (Some(mode), None, Some((t, max))) = (self.pro_mode, &self.pro, sm.pro_params) {
            self.pro = Some(Pro::new(mode, self.pro_k, t, self.window_ns, max));
        }
        let mut pro_changes = Vec::new();
        if let Some(pro) = &mut self.pro {
            for ((node, port), shift) in pro.step(&self.db, &sm.active, &sm.last_label, end) {
                pro_changes.push(json!({"node_id": node, "port": port, "shift": shift}));
                if let Some(tx) = &self.shifts {
                    let _ = tx.send(SetShift { node, port, shift });
                }
            }
        }
        let tx = sm.tx_bytes;
        let newly: Vec<Value> = sm.active.difference(&self.last_active).map(|(n, p)| json!([n, p])).collect();
        self.last_active = sm.active.clone();
        json!({
            "type": "int_label_coverage",
            "window": w,
            "start_ns": start,
            "end_ns": end,
            "active": c.active,
            "covered_arrival": c.by_arrival,
            "covered_label": c.by_label,
            "coverage_arrival": c.arrival(),
            "coverage_label": c.label(),
            "missed": c.missed.iter().take(64).map(|(n, p)| json!([n, p])).collect::<Vec<_>>(),
            "newly_active": newly,
            "active_ports": sm.active.iter().map(|(n, p)| json!([n, p])).collect::<Vec<_>>(),
            "items": items,
            "occupation_paper": if tx > 0 { (items * 32) as f64 / tx as f64 } else { 0.0 },
            "occupation_wire": if tx > 0 { sm.block_bytes as f64 / tx as f64 } else { 0.0 },
            "active_per_node": sm.per_node,
            "switch_errors": sm.errors,
            "pro": pro_changes,
        })
    }

    pub fn summary(&self) -> Value {
        let mut s = self.db.summary();
        let m = &mut s["int_label_summary"];
        let w = self.windows.max(1) as f64;
        m["windows"] = self.windows.into();
        m["coverage_arrival_mean"] = (if self.windows > 0 { self.sum_arrival / w } else { 0.0 }).into();
        m["coverage_label_mean"] = (if self.windows > 0 { self.sum_label / w } else { 0.0 }).into();
        m["coverage_arrival_min"] = (if self.windows > 0 { self.min_arrival } else { 0.0 }).into();
        m["occupation_paper"] =
            (if self.traffic_bytes > 0 { self.paper_bytes as f64 / self.traffic_bytes as f64 } else { 0.0 }).into();
        m["occupation_wire"] =
            (if self.traffic_bytes > 0 { self.block_bytes as f64 / self.traffic_bytes as f64 } else { 0.0 }).into();
        m["traffic_bytes"] = self.traffic_bytes.into();
        m["label_block_bytes"] = self.block_bytes.into();
        m["switch_errors"] = self.errors.into();
        if let Some(p) = &self.pro {
            m["pro_raised"] = p.raised.into();
            m["pro_lowered"] = p.lowered.into();
            m["pro_shift"] = p
                .shift
                .iter()
                .filter(|(_, (s, _))| *s > 0)
                .map(|((n, port), (s, _))| json!([n, port, s]))
                .collect::<Vec<_>>()
                .into();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        label: LabelArgs,
    }

    fn args(a: &[&str]) -> LabelArgs {
        Cli::parse_from(std::iter::once("intcollector").chain(a.iter().copied())).label
    }

    /// A switch whose socket does not answer is counted in each window's
    /// line and the summary (and said on stderr once), not left out
    /// silently: its ports would just never be active.
    #[test]
    fn a_switch_that_does_not_answer_counts_in_every_window() {
        let d = std::env::temp_dir().join(format!("intcollector-label-{}", std::process::id()));
        let sock = d.join("none.sock");
        let sock = sock.to_str().unwrap();
        let mut run = LabelRun::new(&args(&["--label-switch", sock, "--label-window-ms", "20"]), crate::realtime_ns())
            .expect("a switch not up yet is no error at start");
        let mut lines = Vec::new();
        for _ in 0..200 {
            lines.extend(run.tick(crate::realtime_ns()));
            if lines.len() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(lines.len() >= 2, "coverage lines while the switch is away: {lines:?}");
        for l in &lines {
            assert_eq!((l["switch_errors"].as_u64(), l["active"].as_u64()), (Some(1), Some(0)), "{l}");
        }
        assert_eq!(run.summary()["int_label_summary"]["switch_errors"].as_u64(), Some(lines.len() as u64));
    }

    #[test]
    fn options_out_of_range_are_refused_by_name() {
        let err = |a: &[&str]| LabelRun::new(&args(a), 0).err().expect("refused");
        assert!(err(&["--label-domain", "0"]).starts_with("--label-domain:"));
        assert!(err(&["--label-window-ms", "0"]).starts_with("--label-window-ms:"));
        let e = err(&["--label-window-ms", "50"]);
        assert!(e.starts_with("--label-window-ms:") && e.contains("--active-ports"), "{e}");
        assert!(err(&["--label-pro", "shift"]).contains("--label-switch"));
        assert!(err(&["--label-pro", "up"]).starts_with("--label-pro:"));
        let d = std::env::temp_dir().join(format!("intcollector-active-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        for (text, says) in [
            ("7 1\n7 70000\n", "line 2: '7 70000' is not"),
            ("7 1 2\n", "line 1: '7 1 2' is not"),
            ("# only a comment\n\n", "no port listed"),
        ] {
            let f = d.join("ports");
            std::fs::write(&f, text).unwrap();
            let e = err(&["--active-ports", f.to_str().unwrap()]);
            assert!(e.starts_with("--active-ports ") && e.contains(says), "{text:?}: {e}");
        }
        std::fs::write(d.join("ports"), "7 1 # a comment\n8 0\n").unwrap();
        let run = LabelRun::new(&args(&["--active-ports", d.join("ports").to_str().unwrap()]), 0).unwrap();
        assert_eq!(run.static_active, Some(BTreeSet::from([(7, 1), (8, 0)])));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
