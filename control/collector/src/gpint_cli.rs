//! `intcollector gpint ...`: the monitor's planner and topology maker.

use std::path::PathBuf;
use std::time::Instant;

use intcollector::gpint::plan::{self, Algo, Budget};
use intcollector::gpint::topology::{watts_strogatz, Graph};

#[derive(clap::Subcommand)]
pub enum Gpint {
    /// Plan probe paths on a topology and write them (with their SR stacks)
    /// as JSON: {algo, k, switches, links, budget_bytes, paths: [{id, hops:
    /// [{switch, next_port, link}], probe_bytes}], stats: {probes, longest,
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
    #[arg(long)]
    n: usize,
    #[arg(long, default_value_t = 4)]
    degree: usize,
    #[arg(long, default_value_t = 0.1)]
    p: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The topology's name (default: ws<n>).
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(g: &Gpint) -> Result<(), String> {
    match g {
        Gpint::Plan(a) => plan_cmd(a),
        Gpint::Topo(a) => topo_cmd(a),
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
    let g = watts_strogatz(a.n, a.degree, a.p, a.seed)?;
    let name = a.name.clone().unwrap_or_else(|| format!("ws{}", a.n));
    let desc = format!("Watts-Strogatz WS({}, {}, {}), seed {}", a.n, a.degree, a.p, a.seed);
    write(&a.out, &g.to_testbed(&name, &desc))
}
