//! `intcollector gpint ...`: the monitor's planner and topology maker.

use std::path::PathBuf;
use std::time::Instant;

use intcollector::gpint::monitor::{read_plan, Monitor, Profile};
use intcollector::gpint::plan::{self, Algo, Budget};
use intcollector::gpint::topology::{watts_strogatz, Graph};

#[derive(clap::Subcommand)]
pub enum Gpint {
    /// Plan probe paths on a topology and write them (with their SR stacks)
    /// as JSON: {algo, k, switches, links, budget_bytes, paths: [{id, hops:
    /// [{switch, next_port, link, mea}], probe_bytes}], stats: {probes, longest,
    /// shortest, total_hops, max_probe_bytes, split, longest_planned,
    /// covered_switches, covered_links, plan_us}} (longest_planned: before
    /// the budget cut; plan_us: the planner's time). The last hop's next_port is 255: to the
    /// monitor. A path whose probe would exceed the byte budget is cut into
    /// pieces (Euler's overlap by one switch, so every link stays covered);
    /// stats.split counts them and a line on stderr says so.
    Plan(PlanArgs),
    /// Write a generated topology in the testbed file format (switches and
    /// links, no hosts).
    Topo(TopoArgs),
    /// Run collection sessions over a plan: send each path's probe to its
    /// first switch (UDP to the INT port, at most --window paths in
    /// flight), take deliveries and recovery notices as Telemetry Reports
    /// on --listen and first-hop feedbacks on the GPINT port, recover lost
    /// parts from the next switch (Algorithms 1-2), and print one JSON line
    /// a session: session, elapsed_ms, complete, probes, recovery_probes,
    /// notices, deliveries, timeouts, failed_paths, coverage, covered,
    /// switches, unavailable, congested (links and switches), telemetry
    /// (per path and hop: switch, node_id, MEA values); a summary line at
    /// exit.
    Run(RunArgs),
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// A plan `gpint plan` wrote.
    #[arg(long)]
    plan: PathBuf,
    /// SWITCH=ADDR: where the monitor reaches a switch (its address on the
    /// monitor's direct link to it); one per switch a probe may start at.
    #[arg(long, value_name = "SWITCH=ADDR", required = true)]
    via: Vec<String>,
    /// Where the switches' [[int.collector]] send deliveries and notices.
    #[arg(long, default_value = "0.0.0.0:32766")]
    listen: String,
    /// Sessions to run, back to back (0: until --duration, which then is no
    /// error: a dashboard's feed).
    #[arg(long, default_value_t = 1)]
    sessions: u64,
    /// paper (r_a 10, t_f 1.5 s) or fast (r_a 2, t_f 0.4 s); the switches'
    /// gpint.hold_ms should match t_f.
    #[arg(long, default_value = "paper")]
    profile: String,
    /// Paths in flight at once (1 or more).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u16).range(1..))]
    window: u16,
    /// No recovery probes: a lost probe fails its path.
    #[arg(long)]
    no_recovery: bool,
    /// The INT domain's UDP port (probes go there).
    #[arg(long, default_value_t = 17768, value_parser = clap::value_parser!(u16).range(1..))]
    int_port: u16,
    /// gpint.udp_port: saved in the probes, feedbacks come to it (not the INT port).
    #[arg(long, default_value_t = 17900, value_parser = clap::value_parser!(u16).range(1..))]
    gpint_port: u16,
    /// gpint.domain_id.
    #[arg(long, default_value = "0x6701", value_parser = control::config::parse_u16_any)]
    domain_id: u16,
    /// The paper's mode (gpint.classify = "dscp"): probes carry this DSCP
    /// codepoint (gpint.dscp_probe, e.g. 0x17) and INT right after their
    /// UDP header, to the GPINT port.
    #[arg(long, value_parser = parse_dscp)]
    dscp_probe: Option<u8>,
    /// Serve the dashboard (intcollector --web) with a point per session:
    /// coverage, time, probes, recoveries, timeouts.
    #[arg(long, value_name = "ADDR:PORT")]
    web: Option<String>,
    /// MEA values a hop reports where the plan does not say.
    #[arg(long, default_value_t = 4)]
    mea: u8,
    /// Give up after this many seconds (more than 0).
    #[arg(long, default_value = "600", value_parser = control::config::parse_positive_seconds)]
    duration: std::time::Duration,
}

#[derive(clap::Args)]
pub struct PlanArgs {
    /// A testbed topology file (configs/testbed/*.toml): its switches, their
    /// ports in order, the links between switches.
    #[arg(long)]
    topology: PathBuf,
    /// gpint (about k balanced paths), euler (INT-Path: every link once) or
    /// snmp (a one-hop poll per switch).
    #[arg(long, default_value = "gpint")]
    algo: String,
    /// GPINT: the number of paths (default: floor(3 |V| / 10), GPINT-3, at
    /// least 1).
    #[arg(long, conflicts_with = "path_len")]
    k: Option<usize>,
    /// GPINT: switches a path (k = ceil(|V| / L)).
    #[arg(long)]
    path_len: Option<usize>,
    /// Egress MTU (IP bytes) a probe must fit.
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// Frame bytes an mbuf holds (the switches' data room).
    #[arg(long, default_value_t = 2048)]
    mbuf_room: usize,
    /// MEA values a hop appends (default: the switch's port count, per-port
    /// RX counters).
    #[arg(long)]
    mea: Option<usize>,
    /// Write the plan here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct TopoArgs {
    /// ws: a Watts-Strogatz graph WS(n, degree, p), connected (the seed is
    /// moved on until it is).
    #[arg(value_parser = ["ws"])]
    kind: String,
    /// Switches, 3 to 100000.
    #[arg(long, value_parser = clap::value_parser!(u32).range(3..=MAX_TOPO_SWITCHES as i64))]
    n: u32,
    #[arg(long, default_value_t = 4)]
    degree: usize,
    #[arg(long, default_value_t = 0.1)]
    p: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The topology's name (default: ws<n>).
    #[arg(long)]
    name: Option<String>,
    /// A runnable GPINT testbed: routers (each link a /30 of
    /// 10.78.0.0/14, nothing routed) with [int] and [gpint], and a
    /// host `mon` linked to every switch (its last port; sK at 10.77.K.1,
    /// mon at 10.77.K.2, where the switch's reports go).
    #[arg(long)]
    monitor: bool,
    /// With --monitor: the switches' gpint.hold_ms (1-60000).
    #[arg(long, default_value_t = 400, requires = "monitor", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    hold_ms: u64,
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The largest WS graph `gpint topo` writes (a testbed file of about
/// 300 bytes a switch).
const MAX_TOPO_SWITCHES: u32 = 100_000;

pub fn run(g: &Gpint) -> Result<(), String> {
    match g {
        Gpint::Plan(a) => plan_cmd(a),
        Gpint::Topo(a) => topo_cmd(a),
        Gpint::Run(a) => run_cmd(a),
    }
}

fn write(out: &Option<PathBuf>, text: &str) -> Result<(), String> {
    match out {
        Some(p) => std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display())),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn plan_cmd(a: &PlanArgs) -> Result<(), String> {
    let algo: Algo = a.algo.parse()?;
    let what = a.topology.display().to_string();
    let text = std::fs::read_to_string(&a.topology).map_err(|e| format!("{what}: {e}"))?;
    let g = Graph::from_testbed(&text, &what)?;
    let n = g.len();
    let k = match (a.k, a.path_len) {
        (Some(0), _) => return Err("--k: at least 1".into()),
        (_, Some(0)) => return Err("--path-len: at least 1".into()),
        (Some(k), _) => k,
        (None, Some(l)) => n.div_ceil(l),
        (None, None) => (3 * n / 10).max(1),
    };
    let budget = Budget { mtu: a.mtu, mbuf_room: a.mbuf_room, mea_values: a.mea };
    let t0 = Instant::now();
    let p = plan::plan(&g, algo, k, &budget)?;
    let us = t0.elapsed().as_micros() as u64;
    let mut j = p.to_json(&g, &budget);
    j["stats"]["plan_us"] = us.into();
    if p.split > 0 {
        eprintln!(
            "intcollector: {} path(s) exceeded the {}-byte probe budget and were cut into pieces",
            p.split,
            budget.frame_limit()
        );
    }
    write(&a.out, &(serde_json::to_string_pretty(&j).map_err(|e| e.to_string())? + "\n"))
}

fn topo_cmd(a: &TopoArgs) -> Result<(), String> {
    let g = watts_strogatz(a.n as usize, a.degree, a.p, a.seed)?;
    let name = a.name.clone().unwrap_or_else(|| format!("ws{}", a.n));
    let desc = format!("Watts-Strogatz WS({}, {}, {}), seed {}", a.n, a.degree, a.p, a.seed);
    let text = if a.monitor { g.to_gpint_testbed(&name, &desc, a.hold_ms)? } else { g.to_testbed(&name, &desc) };
    write(&a.out, &text)
}

/// The UDP payload of a probe: INT shim and header (NPT 1 saving the GPINT
/// port, D, RHC = SR count), then the GPINT block.
fn probe_payload(a: &RunArgs, probe: &dataplane::wire::gpint::ProbeRepr) -> Result<Vec<u8>, String> {
    use dataplane::gpint::frame::{probe_frame, ProbeAddr};
    use dataplane::wire::int_md::instr;
    let addr = ProbeAddr {
        eth_src: [0; 6],
        eth_dst: [0; 6],
        ip_src: "192.0.2.1".parse().expect("address"),
        ip_dst: "192.0.2.2".parse().expect("address"),
        src_port: a.gpint_port,
        int_port: a.int_port,
        gpint_port: a.gpint_port,
        domain_id: a.domain_id,
        bitmap: instr::NODE_ID | instr::L1_PORTS | instr::QUEUE | instr::INGRESS_TS,
        dscp: a.dscp_probe,
    };
    let f = probe_frame(&addr, probe)?;
    let meta = dataplane::parse::parse(&f, 0).map_err(|r| r.name().to_string())?;
    Ok(f[meta.l4_offset + 8..meta.l3_end].to_vec())
}

fn run_cmd(a: &RunArgs) -> Result<(), String> {
    use std::collections::HashMap;
    use std::net::{SocketAddr, UdpSocket};
    use std::time::Duration;

    let what = a.plan.display().to_string();
    let text = std::fs::read_to_string(&a.plan).map_err(|e| format!("{what}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{what}: {e}"))?;
    let paths = read_plan(&v, a.mea)?;
    let mut via: HashMap<String, SocketAddr> = HashMap::new();
    for s in &a.via {
        let (sw, ip) = s.split_once('=').ok_or(format!("--via {s}: SWITCH=ADDR"))?;
        let ip: std::net::IpAddr = ip.parse().map_err(|e| format!("--via {s}: {e}"))?;
        // By DSCP a probe goes to the GPINT port; by port, to the INT port.
        let port = if a.dscp_probe.is_some() { a.gpint_port } else { a.int_port };
        if via.insert(sw.to_string(), SocketAddr::new(ip, port)).is_some() {
            return Err(format!("--via {s}: switch {sw} has an address already"));
        }
    }
    if a.gpint_port == a.int_port {
        // As the switches' gpint.udp_port: feedbacks and probes would be one.
        return Err(format!("--gpint-port {}: must not be the INT port (--int-port)", a.gpint_port));
    }
    // A switch no path visits: a misspelt name where the plan covers every
    // switch of its topology, else possibly one the plan left out.
    let every = v["switches"].as_u64().is_some_and(|n| v["stats"]["covered_switches"].as_u64() == Some(n));
    for sw in a.via.iter().filter_map(|s| s.split_once('=')).map(|(sw, _)| sw) {
        if paths.iter().any(|p| p.hops.iter().any(|h| h.switch == sw)) {
            continue;
        }
        if every {
            return Err(format!(
                "--via {sw}=...: the plan has no switch {sw} (it visits every switch: a misspelt name?)"
            ));
        }
        eprintln!("intcollector: --via {sw}: no path of the plan visits {sw}; not used");
    }
    for p in &paths {
        for h in &p.hops {
            if !via.contains_key(&h.switch) {
                return Err(format!("--via: no address for switch {} (plan path {})", h.switch, p.id));
            }
        }
    }
    let profile = Profile::by_name(&a.profile)?;
    let v6 = via.values().next().is_some_and(|s| s.is_ipv6());
    let any = if v6 { "[::]" } else { "0.0.0.0" };
    // Probes leave from the GPINT port; the first switches' feedbacks come to it.
    let probes =
        UdpSocket::bind(format!("{any}:{}", a.gpint_port)).map_err(|e| format!("GPINT port {}: {e}", a.gpint_port))?;
    let reports = UdpSocket::bind(&a.listen).map_err(|e| format!("--listen {}: {e}", a.listen))?;
    for s in [&probes, &reports] {
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
    }
    let presence = match a.dscp_probe {
        None => dataplane::int::Presence::UdpPort(a.int_port),
        Some(code) => {
            mark_socket(&probes, v6, code)?;
            dataplane::int::Presence::Dscp { value: code, mask: 0x3f }
        }
    };
    // Request IDs start where a monitor run just before did not (the
    // switches' duplicate filters hold recent ones for 2 x hold_ms).
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let first = ((seed ^ u64::from(std::process::id()).rotate_left(17)) % 0x7fff) as u16 + 1;
    let web = match &a.web {
        Some(addr) => {
            let w = intcollector::web::start(addr, 600, 32)?;
            eprintln!("intcollector: dashboard on http://{}/", w.addr);
            Some(w)
        }
        None => None,
    };
    let mut m = Monitor::new(paths, profile, !a.no_recovery, a.window as usize, first);
    let t0 = Instant::now();
    // Past what an Instant holds: no deadline but the sessions'.
    let deadline = t0.checked_add(a.duration);
    let mut send_errors = 0u64;
    let mut buf = vec![0u8; 65536];
    let mut sessions = 0;
    m.start_session(Instant::now());
    let mut send = |m_sends: Vec<intcollector::gpint::monitor::Send>| {
        for s in m_sends {
            let to = via[&s.switch];
            match probe_payload(a, &s.probe) {
                Ok(p) if probes.send_to(&p, to).is_ok() => {}
                _ => send_errors += 1,
            }
        }
    };
    while deadline.is_none_or(|d| Instant::now() < d) {
        let mut idle = true;
        while let Ok((n, _)) = probes.recv_from(&mut buf) {
            idle = false;
            if let Ok(h) = dataplane::wire::gpint::Header::parse(&buf[..n]) {
                if h.kind == dataplane::wire::gpint::Kind::Feedback {
                    m.on_feedback(&h);
                }
            }
        }
        while let Ok((n, _)) = reports.recv_from(&mut buf) {
            idle = false;
            let now = Instant::now();
            if let Ok(rs) = intcollector::decode_packet(&buf[..n], presence) {
                for r in rs {
                    send(m.on_report(r.flags, &buf[r.inner.clone()], presence, now));
                }
            }
        }
        let (sends, line) = m.tick(Instant::now());
        send(sends);
        if let Some(l) = line {
            println!("{l}");
            if let Some(w) = &web {
                w.send(intcollector::web::Point::GpintSession(l.clone()));
            }
            sessions += 1;
            if sessions == a.sessions {
                break;
            }
            m.start_session(Instant::now());
        }
        if idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if let Some(w) = web {
        w.stop();
    }
    let mut s = m.summary();
    s["send_errors"] = send_errors.into();
    // Feedbacks and reports the kernel dropped on the two sockets (their
    // receive buffers full): a session they fail is explained here.
    let drops = [&probes, &reports].map(intcollector::recv::socket_drops);
    s["socket_drops"] = drops.into_iter().sum::<Option<u64>>().into();
    s["elapsed_s"] = t0.elapsed().as_secs_f64().into();
    println!("{s}");
    if a.sessions > 0 && sessions < a.sessions {
        return Err(format!("{sessions} of {} sessions ended within --duration", a.sessions));
    }
    Ok(())
}

fn parse_dscp(s: &str) -> Result<u8, String> {
    let v = match s.strip_prefix("0x") {
        Some(h) => u8::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s}: {e}"))?;
    if v > 63 {
        return Err(format!("{s}: a DSCP codepoint is 0-63"));
    }
    Ok(v)
}

/// Sets the DSCP of what `s` sends (IP TOS or IPv6 traffic class).
fn mark_socket(s: &std::net::UdpSocket, v6: bool, code: u8) -> Result<(), String> {
    use nix::sys::socket::{setsockopt, sockopt};
    let tos = i32::from(code) << 2;
    let r = if v6 { setsockopt(s, sockopt::Ipv6TClass, &tos) } else { setsockopt(s, sockopt::IpTos, &tos) };
    r.map_err(|e| format!("--dscp-probe: cannot mark the probes' socket: {e}"))
}
