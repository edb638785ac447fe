//! `intctl`: command-line client of a running intswitch's control socket.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use control::ampm::api as ampm;
use control::ampm::config::AmpmFlowConfig;
use control::api::views::{self as v, CountersView};
use control::api::Command;
use control::client::{CallError, Client};
use control::config::{FlowConfig, NeighbourConfig, RouteConfig};
use control::gpint::api as gpint;
use control::int::analytics::api as ia;
use control::int::analytics::detect::DetectConfig;
use control::int::api as int;
use control::int::config::WatchConfig;
use control::label::api as label;
use serde::Serialize;

#[derive(Parser)]
#[command(
    name = "intctl",
    version,
    about = "Control a running intswitch over its unix socket",
    after_help = "The socket defaults to $INTSWITCH_SOCKET, else the only *.sock in /run/intswitch.\n\
Protocol: one JSON object per line, {\"version\":1,\"id\":N,\"cmd\":\"route_add\",\"args\":{...}};\n\
answers {\"version\":1,\"id\":N,\"ok\":true,\"result\":...} or {\"ok\":false,\"error\":{\"code\",\"argument\",\"message\"}}."
)]
struct Cli {
    /// Control socket of the switch.
    #[arg(long, global = true)]
    socket: Option<String>,
    /// Print the switch's JSON answer instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show state: ports, workers, counters, drops, flows, macs, routes, neighbours, config, version, metrics, int, reports, gpint, label (AM-PM: `ampm show`, `rule show`).
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Add or delete exact-match flows (on every worker).
    Flow {
        #[command(subcommand)]
        op: FlowOp,
    },
    /// Add or delete static routes (router mode).
    Route {
        #[command(subcommand)]
        op: RouteOp,
    },
    /// Add or delete static neighbours (a router's gateways; in every mode, collectors behind a port).
    Neighbour {
        #[command(subcommand)]
        op: NeighbourOp,
    },
    /// Enable or disable a port for forwarding.
    Port {
        #[command(subcommand)]
        op: PortOp,
    },
    /// INT: watchlist rules (the per-flow role) and report export.
    Int {
        #[command(subcommand)]
        op: IntOp,
    },
    /// INT-label: set a port's shift S (its labeling interval becomes T >> S).
    Label {
        #[command(subcommand)]
        op: LabelOp,
    },
    /// AM-PM: monitored flows (show with counters, current color and interval; add; del).
    Ampm {
        #[command(subcommand)]
        op: AmpmOp,
    },
    /// AM-PM slot tables (the timestamp-ternary rules, paper tables 1-6): show, add, del.
    Rule {
        #[command(subcommand)]
        op: RuleOp,
    },
    /// Reset counters (the views count from now; /metrics stays monotonic).
    Clear {
        #[command(subcommand)]
        what: ClearWhat,
    },
    /// Live view of per-port and per-worker Mpps, Gbps and drops per reason.
    Monitor {
        /// Seconds between refreshes (0.05 to 3600).
        #[arg(long, default_value_t = 1.0, value_parser = finite_seconds)]
        interval: f64,
        /// Stop after this many refreshes (default: until Ctrl-C).
        #[arg(long)]
        iterations: Option<u64>,
    },
    /// Copy a port's packets into a pcap file without disturbing forwarding.
    Capture {
        /// Port name.
        port: String,
        /// Capture received packets (default).
        #[arg(long, conflicts_with = "tx")]
        rx: bool,
        /// Capture transmitted packets (as they leave, after rewriting).
        #[arg(long)]
        tx: bool,
        /// Packets to capture.
        #[arg(long)]
        count: u64,
        /// Output pcap file.
        #[arg(long)]
        out: String,
        /// Give up after this many seconds (default 10, at most 300).
        #[arg(long, value_parser = finite_seconds)]
        timeout: Option<f64>,
    },
    /// Print a shell completion script for intctl (bash, zsh or fish).
    Completions { shell: control::cli_docs::Shell },
    /// Print intctl's man page (roff).
    Manpage,
}

#[derive(Subcommand)]
enum Show {
    /// Each port: driver, MAC, enabled, link, RX/TX packets and bytes, addresses.
    Ports,
    /// Each worker: lcore, RX queues, packets, drops, busy %, flows, learned
    /// MACs and the table generation it acknowledged.
    Workers,
    /// Per port RX/TX packets and bytes, then every nonzero drop and event
    /// counter, summed over the workers.
    Counters,
    /// Packets dropped, by reason (the reasons README lists).
    Drops,
    /// Each worker's flow table: key, action, static or learned,
    /// packets, bytes and idle time.
    Flows {
        /// At most this many flows per worker.
        #[arg(long, default_value_t = 1000)]
        max: u64,
    },
    /// The MAC address table: static entries, then each worker's learned ones.
    Macs {
        /// At most this many learned entries per worker.
        #[arg(long, default_value_t = 1000)]
        max: u64,
    },
    /// The routes: connected, then static (`routes_file`, `[[route]]`,
    /// `route add`).
    Routes {
        /// At most this many routes.
        #[arg(long, default_value_t = 1000)]
        max: u64,
    },
    /// The neighbours: IP, MAC, port, static or learned (ARP / ND; a router's
    /// next hops, and in any mode collectors behind a port).
    Neighbours,
    /// The configuration the switch started with, as JSON (what commands
    /// changed since shows in their own views: routes, neighbours, int ...).
    Config,
    /// The switch's and DPDK's versions, the control protocol, instance and mode.
    Version,
    /// The Prometheus text the /metrics endpoint serves.
    Metrics,
    /// INT domain: node ID, edge/core ports, watchlist, INT counters
    /// (`show int analytics`: the sink's flow cache and its export).
    Int {
        #[command(subcommand)]
        what: Option<ShowIntWhat>,
    },
    /// Telemetry report export: per-worker rings and per-collector counts.
    Reports,
    /// GPINT and SQR: the section, counters, each worker's clone buffer
    /// with the copies waiting (and their ages), deliveries and notices.
    Gpint,
    /// INT-label: the domain, each port's last-label age, shift S and
    /// labels per second, the label_* counters and report rings.
    Label,
}

#[derive(Subcommand)]
enum LabelOp {
    /// Set PORT's S: 0..=label.max_shift (interval T >> S), or 255 (label every packet).
    SetShift { port: String, shift: u8 },
}

#[derive(Subcommand)]
enum ShowIntWhat {
    /// The sink's flow cache (entries, hits, inserts, exports by reason),
    /// R_G and R_I rings and every loss counter of the analytics.
    Analytics,
    /// The sink's histograms per node ID and metric, and end to end
    /// (summed over the workers): quantiles and the nonzero bins.
    Histograms {
        /// Only this node ID's.
        #[arg(long)]
        node: Option<u32>,
        /// Only this metric's: hop_latency, queue, tx_util, e2e_latency.
        #[arg(long)]
        metric: Option<String>,
    },
}

#[derive(Subcommand)]
enum ExprOp {
    /// Add an expression, or replace the one of the same name (the cnf
    /// rules using it take it with a new table generation, their flows
    /// from state 0). CNF: up to 8 clauses joined by AND, each up to 4
    /// literals joined by OR, in parentheses next to an AND; a literal is
    /// metric[.selector][.transform] OP VALUE: metric hop_latency, queue,
    /// tx_util (selector hopN, any, max or sum) or e2e_latency; transform
    /// value, delta or ewma; OP ==, !=, > or <. Example:
    /// 'hop_latency.max > 10000 AND (queue.any.delta > 100 OR e2e_latency > 50000)'.
    Add { name: String, expr: String },
    /// Delete an expression no rule uses.
    Del { name: String },
    /// The expressions as parsed, with the rules that use each.
    Show,
}

#[derive(Subcommand)]
enum IntEventOp {
    /// One metric's T and C events (0 turns a class off; what is not
    /// given stays): hop_latency, queue, tx_util (per hop), e2e_latency,
    /// link_latency (between consecutive hops, with both timestamps);
    /// or path_change with --on / --off. Reaches the workers as a new
    /// table generation.
    Set {
        #[arg(value_parser = ["hop_latency", "queue", "tx_util", "e2e_latency", "link_latency", "path_change"])]
        metric: String,
        /// T: an event on a value strictly above N.
        #[arg(long)]
        threshold: Option<u64>,
        /// C: an event when the value differs from the flow's previous
        /// packet's at the same hop by more than N.
        #[arg(long)]
        change: Option<u64>,
        /// level: T on every packet above; edge: once on crossing.
        #[arg(long, value_parser = ["level", "edge"])]
        mode: Option<String>,
        /// Edge: T re-arms when the value falls below N (default: the threshold).
        #[arg(long)]
        reset: Option<u64>,
        /// Keep T events near N a second: the control core doubles the
        /// threshold while they exceed N and halves it, never below the one
        /// set, while under N/2 (0: off).
        #[arg(long)]
        rate_budget: Option<u64>,
        /// path_change: raise it.
        #[arg(long, conflicts_with = "off")]
        on: bool,
        /// path_change: stop raising it.
        #[arg(long)]
        off: bool,
    },
    /// The events' settings and how many of each were raised.
    Show,
}

#[derive(Subcommand)]
enum IntFlowOp {
    /// A flow's entry in the sink's flow cache, on each worker holding one.
    Show {
        src: String,
        dst: String,
        /// udp, tcp, icmp, icmpv6 or 0-255.
        proto: String,
        src_port: u16,
        dst_port: u16,
    },
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per invocation
enum IntOp {
    /// The sink's flow cache: `flush` exports every entry (reason flush)
    /// and frees it, without stopping traffic.
    Flows {
        #[arg(value_parser = ["flush"])]
        action: String,
    },
    /// One flow of the sink's flow cache.
    Flow {
        #[command(subcommand)]
        op: IntFlowOp,
    },
    /// The sink analytics' T and C events.
    Event {
        #[command(subcommand)]
        op: IntEventOp,
    },
    /// Per-flow detection rules: which algorithm decides a flow's reports.
    Detect {
        #[command(subcommand)]
        op: DetectOp,
    },
    /// Named CNF expressions for `cnf` detection rules.
    Expr {
        #[command(subcommand)]
        op: ExprOp,
    },
    /// Watchlist rules: ternary match on 5-tuple, DSCP and input port -> role.
    Watch {
        #[command(subcommand)]
        op: WatchOp,
    },
    /// Pause or resume report export (paused: records wait in the rings).
    Export {
        #[arg(value_parser = ["pause", "resume"])]
        action: String,
    },
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per invocation
enum AmpmOp {
    /// Timing, current interval/color/sub-interval, flows and their per-color counters, export.
    Show,
    /// Add a monitored flow, or replace the flow of the same name.
    Add {
        name: String,
        /// RFC 9343 FlowMonID (20 bits), the same on every MP of the flow.
        #[arg(long)]
        flow_mon_id: u32,
        /// initiator, transit or terminator.
        #[arg(long)]
        role: String,
        /// step, pulse, double or muxed.
        #[arg(long)]
        method: String,
        /// dscp, ipv4_flag, ipv6_hbh or ipv6_dest.
        #[arg(long)]
        carrier: String,
        /// DSCP bit for L (dscp carrier; 0 = LSB).
        #[arg(long)]
        l_bit: Option<u8>,
        /// DSCP bit for D (double marking; dscp and ipv4_flag carriers).
        #[arg(long)]
        d_bit: Option<u8>,
        /// Terminator only: keep the marks (the next hop is the destination).
        #[arg(long)]
        keep_marks: bool,
        #[command(flatten)]
        m: MatchArgs,
    },
    /// Stop measuring the flow NAME.
    Del { name: String },
}

#[derive(Subcommand)]
enum RuleOp {
    /// Rows of one slot table (METHOD-ROLE, e.g. muxed-initiator) or of all.
    Show { table: Option<String> },
    /// Add a row to a slot table, or replace the row of the same name.
    Add {
        /// METHOD-ROLE: step|pulse|double|muxed - initiator|transit|terminator.
        table: String,
        name: String,
        #[arg(long, default_value_t = 0)]
        priority: u32,
        /// Interval bit then slot bits, MSB first, * = any (e.g. 010, 1**).
        #[arg(long, default_value = "*")]
        time: String,
        /// Mark bits D then L (e.g. *1: L=1).
        #[arg(long, default_value = "*")]
        mark: String,
        /// Register bit 0, 1 or *.
        #[arg(long, default_value = "*")]
        reg: String,
        /// Write L (initiator tables only).
        #[arg(long)]
        set_l: Option<bool>,
        /// Write D (initiator tables only).
        #[arg(long)]
        set_d: Option<bool>,
        /// New register value.
        #[arg(long)]
        set_reg: Option<u8>,
        /// Block (color) the packet belongs to.
        #[arg(long, default_value_t = 0)]
        color: u8,
        /// Count the packet into the color's counters.
        #[arg(long)]
        count: bool,
        /// Take the packet's timestamp as the color's delay reference.
        #[arg(long)]
        timestamp: bool,
    },
    /// Remove the row NAME from TABLE (METHOD-ROLE, as `rule show` names them).
    Del { table: String, name: String },
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per invocation
enum WatchOp {
    /// Add a rule, or replace the rule of the same name.
    Add {
        name: String,
        /// source, transit, sink or none.
        #[arg(long)]
        role: String,
        #[command(flatten)]
        m: MatchArgs,
        /// Source: comma-separated instructions (node_id,l1_ports,hop_latency,queue,
        /// ingress_ts,egress_ts,l2_ports,tx_util,buffer).
        #[arg(long, value_delimiter = ',')]
        instructions: Option<Vec<String>>,
        /// Source: maximum hop count (default 8).
        #[arg(long)]
        max_hops: Option<u8>,
        /// Source: domain-specific ID (decimal or 0x-hex).
        #[arg(long, value_parser = control::config::parse_u16_any)]
        domain_id: Option<u16>,
    },
    /// Remove the rule NAME (its flows fall to the next rule that matches).
    Del { name: String },
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per invocation
enum DetectOp {
    /// Add a detection rule, or replace the rule of the same name: the
    /// flows it matches report when ALGORITHM fires (a new table
    /// generation; those flows start from state 0).
    Add {
        name: String,
        /// per_hop, per_flow, ewma, noop, none, interval or cnf.
        #[arg(long)]
        algorithm: String,
        #[command(flatten)]
        m: MatchArgs,
        /// per_hop, per_flow, ewma: what S sums over the hops: hop_latency (default), e2e_latency, queue, tx_util.
        #[arg(long)]
        metric: Option<String>,
        /// T: per_hop, per_flow, ewma.
        #[arg(long)]
        threshold: Option<u64>,
        /// ewma, and cnf's ewma literals: k of k/256 (1-256, default 64).
        #[arg(long)]
        weight: Option<u32>,
        /// interval: milliseconds between two reports of a flow.
        #[arg(long)]
        interval_ms: Option<u64>,
        /// cnf: the name of an expression (`int expr add`).
        #[arg(long)]
        expr: Option<String>,
    },
    /// Remove the detection rule NAME (its flows fall to the next rule that matches).
    Del { name: String },
    /// The rules in lookup order, with packets evaluated, reported,
    /// suppressed and without the rule's metric.
    Show,
}

/// The ternary match of an INT watch rule or an AM-PM flow.
#[derive(Args)]
struct MatchArgs {
    /// Higher wins.
    #[arg(long, default_value_t = 0)]
    priority: u32,
    /// Source prefix ADDR/LEN.
    #[arg(long)]
    src: Option<String>,
    /// Destination prefix ADDR/LEN.
    #[arg(long)]
    dst: Option<String>,
    /// udp, tcp, icmp, icmpv6 or a number.
    #[arg(long)]
    proto: Option<String>,
    /// Port or VALUE/MASK.
    #[arg(long)]
    src_port: Option<String>,
    /// Port or VALUE/MASK.
    #[arg(long)]
    dst_port: Option<String>,
    /// DSCP (0-63) or VALUE/MASK.
    #[arg(long)]
    dscp: Option<String>,
    /// Input port name.
    #[arg(long)]
    in_port: Option<String>,
}

/// A number where the argument is one (a port, a protocol number), else
/// the string ("udp", "0x1380/0xfff0").
fn num_or_str(v: &str) -> toml::Value {
    v.parse::<i64>().map(toml::Value::Integer).unwrap_or_else(|_| toml::Value::String(v.to_string()))
}

/// The ternary match fields, in the order of the config's.
struct Match {
    priority: u32,
    src: Option<String>,
    dst: Option<String>,
    proto: Option<toml::Value>,
    src_port: Option<toml::Value>,
    dst_port: Option<toml::Value>,
    dscp: Option<toml::Value>,
    in_port: Option<String>,
}

impl MatchArgs {
    fn fields(&self) -> Match {
        let n = |v: &Option<String>| v.as_deref().map(num_or_str);
        Match {
            priority: self.priority,
            src: self.src.clone(),
            dst: self.dst.clone(),
            proto: n(&self.proto),
            src_port: n(&self.src_port),
            dst_port: n(&self.dst_port),
            dscp: n(&self.dscp),
            in_port: self.in_port.clone(),
        }
    }
}

#[derive(Args)]
struct FlowKeyArgs {
    /// Input port name.
    #[arg(long)]
    in_port: String,
    /// Source address (IPv4 or IPv6, exact).
    #[arg(long)]
    src: String,
    /// Destination address (the same family as --src).
    #[arg(long)]
    dst: String,
    /// udp, tcp, icmp, icmpv6 or a number.
    #[arg(long)]
    proto: String,
    /// TCP/UDP source port (0 for other protocols).
    #[arg(long, default_value_t = 0)]
    src_port: u16,
    /// TCP/UDP destination port (0 for other protocols).
    #[arg(long, default_value_t = 0)]
    dst_port: u16,
    /// VLAN ID of the frames (0: untagged).
    #[arg(long, default_value_t = 0)]
    vlan: u16,
}

#[derive(Subcommand)]
enum FlowOp {
    /// Install an exact-match flow on every worker, or replace the action
    /// of the same key: normal (the mode decides), drop or forward:PORT.
    Add {
        #[command(flatten)]
        key: FlowKeyArgs,
        /// normal, drop or forward:PORT.
        #[arg(long)]
        action: String,
    },
    /// Remove the flow of this key from every worker (learned or added).
    Del {
        #[command(flatten)]
        key: FlowKeyArgs,
    },
}

#[derive(Subcommand)]
enum RouteOp {
    /// Add a static route, or replace the route to the same prefix.
    Add {
        /// NETWORK/LEN (host bits clear).
        prefix: String,
        /// The port it leaves by.
        #[arg(long)]
        port: String,
        /// Gateway (omit for a directly connected prefix): on one of the
        /// port's subnets, or with a neighbour entry on that port.
        #[arg(long)]
        via: Option<String>,
    },
    /// Remove the static route to PREFIX (connected routes stay).
    Del { prefix: String },
    /// Adds the routes of a file (`routes_file`'s format: PREFIX PORT [VIA]
    /// lines), each replacing a route to its prefix, in one table
    /// generation; with --replace, instead of every configured route. The
    /// switch reads the file; a file with an error changes nothing.
    Load {
        file: std::path::PathBuf,
        /// The file's routes replace every static route (configured or added).
        #[arg(long)]
        replace: bool,
    },
    /// Where a packet to ADDRESS goes (as `ip route get`): the route the
    /// configuration matches longest and the next hop (port, gateway and its
    /// MAC, or the switch itself) of the table generation the workers use.
    Get { address: String },
}

#[derive(Subcommand)]
enum NeighbourOp {
    /// Add a static neighbour (its MAC is not learned or aged), or replace one.
    Add {
        ip: String,
        mac: String,
        /// The port it is reached by.
        #[arg(long)]
        port: String,
    },
    /// Remove the neighbour entry of IP.
    Del { ip: String },
}

#[derive(Subcommand)]
enum PortOp {
    /// Forward on the port again (and bring its link up where the device can).
    Enable { port: String },
    /// Stop forwarding on the port: what it receives and what would leave by
    /// it is dropped (counted as port_down); its link goes down where the
    /// device can.
    Disable { port: String },
    /// Emulate a link on the port's egress, in netem syntax:
    /// delay TIME [JITTER], loss PCT, rate RATE, limit PACKETS; `none` removes it.
    Impair {
        port: String,
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        netem: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ClearWhat {
    /// Count the views (show, monitor) from now; /metrics stays monotonic.
    Counters,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("intctl: {e}");
            ExitCode::FAILURE
        }
    }
}

fn default_socket() -> Result<String, String> {
    if let Ok(s) = std::env::var("INTSWITCH_SOCKET") {
        return Ok(s);
    }
    let socks: Vec<String> = std::fs::read_dir("/run/intswitch")
        .map(|d| {
            d.filter_map(|e| e.ok()).map(|e| e.path().display().to_string()).filter(|p| p.ends_with(".sock")).collect()
        })
        .unwrap_or_default();
    match socks.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err("--socket: no switch socket in /run/intswitch; name one with --socket".into()),
        many => Err(format!("--socket: several switches run ({}); name one with --socket", many.join(", "))),
    }
}

impl FlowKeyArgs {
    fn flow(&self, action: &str) -> FlowConfig {
        FlowConfig {
            in_port: self.in_port.clone(),
            src: self.src.clone(),
            dst: self.dst.clone(),
            proto: num_or_str(&self.proto),
            src_port: self.src_port,
            dst_port: self.dst_port,
            vlan: self.vlan,
            action: action.into(),
        }
    }
}

fn explain(e: CallError) -> String {
    match e.argument {
        Some(a) if !e.message.contains(&a) => format!("{a}: {}", e.message),
        _ => e.message,
    }
}

/// Sends `cmd`, then prints its reply: as JSON with `--json`, else as `text` does.
fn call<C: Command>(c: &mut Client, json: bool, cmd: &C, text: impl FnOnce(&C::Reply)) -> Result<(), String> {
    let r = c.command(cmd).map_err(explain)?;
    if json {
        println!("{}", serde_json::to_string(&r).map_err(|e| format!("printing the answer: {e}"))?);
    } else {
        text(&r);
    }
    Ok(())
}

/// `route get`'s answer on one line, as `ip route get` prints it.
fn route_line(r: &v::RouteLookup) -> String {
    let (Some(route), Some(port)) = (&r.route, &r.port) else {
        return format!("{}: no route (generation {})", r.address, r.generation);
    };
    let hop = match (&r.via, &r.via_mac) {
        _ if r.local => format!("local on {port}"),
        (Some(via), Some(mac)) => format!("via {via} ({mac}) dev {port}"),
        (Some(via), None) => format!("via {via} (unresolved) dev {port}"),
        (None, _) => format!("dev {port}"),
    };
    let kind = r.kind.as_deref().unwrap_or("");
    format!("{} {hop}, route {route} ({kind}), generation {}", r.address, r.generation)
}

/// What a change prints.
fn done<T: Serialize>(_: &T) {
    println!("ok");
}

fn run(cli: Cli) -> Result<(), String> {
    use clap::CommandFactory;
    match &cli.cmd {
        Cmd::Completions { shell } => {
            control::cli_docs::completions(Cli::command(), *shell, &mut std::io::stdout());
            return Ok(());
        }
        Cmd::Manpage => {
            return control::cli_docs::manpage(Cli::command(), &mut std::io::stdout()).map_err(|e| e.to_string())
        }
        _ => {}
    }
    let socket = match &cli.socket {
        Some(s) => s.clone(),
        None => default_socket()?,
    };
    let mut c = Client::connect(&socket).map_err(|e| format!("--socket: {}", e.message))?;
    let (c, j) = (&mut c, cli.json);
    match &cli.cmd {
        Cmd::Show { what } => match what {
            Show::Ports => call(c, j, &v::ShowPorts {}, |r| print_ports(r)),
            Show::Workers => call(c, j, &v::ShowWorkers {}, |r| print_workers(r)),
            Show::Counters => call(c, j, &v::ShowCounters {}, print_counters),
            Show::Drops => call(c, j, &v::ShowDrops {}, print_drops),
            Show::Flows { max } => call(c, j, &v::ShowFlows { max: Some(*max) }, |r| {
                print_flows(r);
                cut_note("flows a worker", per_worker_max(r.iter().map(|f| Some(f.worker))) >= *max, *max);
            }),
            Show::Macs { max } => call(c, j, &v::ShowMacs { max: Some(*max) }, |r| {
                print_macs(r);
                cut_note("learned MACs a worker", per_worker_max(r.iter().map(|m| m.worker)) >= *max, *max);
            }),
            Show::Routes { max } => call(c, j, &v::ShowRoutes { max: Some(*max) }, |r| {
                let rows = r.iter().map(|x| vec![x.prefix.clone(), x.port.clone(), opt(&x.via), x.kind.clone()]);
                table(&["PREFIX", "PORT", "VIA", "KIND"], rows.collect());
                cut_note("routes", r.len() as u64 >= *max, *max);
            }),
            Show::Neighbours => call(c, j, &v::ShowNeighbours {}, |r| {
                let kind = |p: bool| if p { "static" } else { "learned" }.to_string();
                let rows = r.iter().map(|x| vec![x.ip.clone(), x.mac.clone(), x.port.clone(), kind(x.permanent)]);
                table(&["IP", "MAC", "PORT", "KIND"], rows.collect())
            }),
            Show::Config => {
                call(c, j, &v::ShowConfig {}, |r| println!("{}", serde_json::to_string_pretty(r).unwrap_or_default()))
            }
            Show::Version => call(c, j, &v::ShowVersion {}, |r| {
                println!(
                    "intswitch {} (control protocol {}, {}) instance {} mode {}",
                    r.intswitch, r.protocol, r.dpdk, r.name, r.mode
                )
            }),
            Show::Metrics => call(c, j, &v::Metrics {}, |r| print!("{}", r.text)),
            Show::Int { what: None } => call(c, j, &int::ShowInt {}, print_int),
            Show::Int { what: Some(ShowIntWhat::Analytics) } => call(c, j, &ia::ShowIntAnalytics {}, print_analytics),
            Show::Int { what: Some(ShowIntWhat::Histograms { node, metric }) } => {
                call(c, j, &ia::ShowIntHistograms { node: *node, metric: metric.clone() }, print_histograms)
            }
            Show::Reports => call(c, j, &int::ShowReports {}, print_reports),
            Show::Gpint => call(c, j, &gpint::ShowGpint {}, print_gpint),
            Show::Label => call(c, j, &label::ShowLabel {}, print_label),
        },
        Cmd::Flow { op: FlowOp::Add { key, action } } => call(c, j, &v::FlowAdd(key.flow(action)), done),
        Cmd::Flow { op: FlowOp::Del { key } } => call(c, j, &v::FlowDel::from(key.flow("normal")), done),
        Cmd::Route { op: RouteOp::Add { prefix, port, via } } => {
            let r = RouteConfig { prefix: prefix.clone(), port: port.clone(), via: via.clone() };
            call(c, j, &v::RouteAdd(r), done)
        }
        Cmd::Route { op: RouteOp::Del { prefix } } => call(c, j, &v::RouteDel { prefix: prefix.clone() }, done),
        Cmd::Route { op: RouteOp::Get { address } } => {
            call(c, j, &v::RouteGet { address: address.clone() }, |r: &v::RouteLookup| println!("{}", route_line(r)))
        }
        Cmd::Route { op: RouteOp::Load { file, replace } } => {
            // The switch resolves nothing against our directory.
            let path = std::path::absolute(file).map_err(|e| format!("{}: {e}", file.display()))?;
            let load = v::RouteLoad { path: path.to_string_lossy().into_owned(), replace: *replace };
            call(c, j, &load, |r: &v::RoutesLoaded| {
                println!("ok: {} routes loaded, {} configured (generation {})", r.loaded, r.routes, r.generation)
            })
        }
        Cmd::Neighbour { op: NeighbourOp::Add { ip, mac, port } } => {
            let n = NeighbourConfig { ip: ip.clone(), mac: mac.clone(), port: port.clone() };
            call(c, j, &v::NeighbourAdd(n), done)
        }
        Cmd::Neighbour { op: NeighbourOp::Del { ip } } => call(c, j, &v::NeighbourDel { ip: ip.clone() }, done),
        Cmd::Port { op: PortOp::Enable { port } } => call(c, j, &v::PortEnable { port: port.clone() }, done),
        Cmd::Port { op: PortOp::Disable { port } } => call(c, j, &v::PortDisable { port: port.clone() }, done),
        Cmd::Port { op: PortOp::Impair { port, netem } } => {
            call(c, j, &v::PortImpair { port: port.clone(), netem: netem.join(" ") }, done)
        }
        Cmd::Int { op: IntOp::Flows { .. } } => {
            call(c, j, &ia::IntFlowsFlush {}, |r| println!("{} flow entries exported (reason flush)", r.flushed))
        }
        Cmd::Int { op: IntOp::Flow { op: IntFlowOp::Show { src, dst, proto, src_port, dst_port } } } => {
            let a = ia::IntFlowShow {
                src: src.clone(),
                dst: dst.clone(),
                proto: proto.clone(),
                src_port: *src_port,
                dst_port: *dst_port,
            };
            call(c, j, &a, print_flow_entries)
        }
        Cmd::Int {
            op: IntOp::Event { op: IntEventOp::Set { metric, threshold, change, mode, reset, rate_budget, on, off } },
        } => {
            // The API's `enabled` is these flags: name them, not it.
            match (metric.as_str(), *on || *off) {
                ("path_change", false) => return Err("path_change: give --on or --off".into()),
                ("path_change", true) => {}
                (_, true) => return Err(format!("--on/--off: path_change only, not {metric}")),
                (_, false) => {}
            }
            let a = ia::IntEventSet {
                metric: metric.clone(),
                threshold: *threshold,
                change: *change,
                mode: mode.clone(),
                reset: *reset,
                enabled: (*on || *off).then_some(*on),
                rate_budget: *rate_budget,
            };
            call(c, j, &a, done)
        }
        Cmd::Int {
            op: IntOp::Detect { op: DetectOp::Add { name, algorithm, m, metric, threshold, weight, interval_ms, expr } },
        } => {
            let m = m.fields();
            let d = DetectConfig {
                name: name.clone(),
                priority: m.priority,
                src: m.src,
                dst: m.dst,
                proto: m.proto,
                src_port: m.src_port,
                dst_port: m.dst_port,
                dscp: m.dscp,
                in_port: m.in_port,
                algorithm: algorithm.clone(),
                metric: metric.clone(),
                threshold: *threshold,
                weight: *weight,
                interval_ms: *interval_ms,
                expr: expr.clone(),
            };
            call(c, j, &ia::IntDetectAdd(d), done)
        }
        Cmd::Int { op: IntOp::Expr { op: ExprOp::Add { name, expr } } } => {
            let x = control::int::analytics::detect::ExprConfig { name: name.clone(), expr: expr.clone() };
            call(c, j, &ia::IntExprAdd(x), done)
        }
        Cmd::Int { op: IntOp::Expr { op: ExprOp::Del { name } } } => {
            call(c, j, &ia::IntExprDel { name: name.clone() }, done)
        }
        Cmd::Int { op: IntOp::Expr { op: ExprOp::Show } } => call(c, j, &ia::IntExprShow {}, print_exprs),
        Cmd::Int { op: IntOp::Detect { op: DetectOp::Del { name } } } => {
            call(c, j, &ia::IntDetectDel { name: name.clone() }, done)
        }
        Cmd::Int { op: IntOp::Detect { op: DetectOp::Show } } => call(c, j, &ia::IntDetectShow {}, print_detect),
        Cmd::Int { op: IntOp::Event { op: IntEventOp::Show } } => call(c, j, &ia::IntEventShow {}, print_events),
        Cmd::Int { op: IntOp::Export { action } } => call(c, j, &int::IntExport { paused: action == "pause" }, done),
        Cmd::Int { op: IntOp::Watch { op: WatchOp::Del { name } } } => {
            call(c, j, &int::IntWatchDel { name: name.clone() }, done)
        }
        Cmd::Int { op: IntOp::Watch { op: WatchOp::Add { name, role, m, instructions, max_hops, domain_id } } } => {
            let m = m.fields();
            let w = WatchConfig {
                name: name.clone(),
                priority: m.priority,
                role: role.clone(),
                src: m.src,
                dst: m.dst,
                proto: m.proto,
                src_port: m.src_port,
                dst_port: m.dst_port,
                dscp: m.dscp,
                in_port: m.in_port,
                instructions: instructions.clone(),
                bitmap: None,
                max_hops: *max_hops,
                domain_id: *domain_id,
            };
            call(c, j, &int::IntWatchAdd(w), done)
        }
        Cmd::Label { op: LabelOp::SetShift { port, shift } } => {
            call(c, j, &label::LabelSetShift { port: port.clone(), shift: *shift }, |r: &label::ShiftSet| {
                println!("{}: shift {} (was {})", r.port, r.shift, r.previous)
            })
        }
        Cmd::Ampm { op: AmpmOp::Show } => call(c, j, &ampm::ShowAmpm {}, print_ampm),
        Cmd::Ampm { op: AmpmOp::Del { name } } => call(c, j, &ampm::AmpmDel { name: name.clone() }, done),
        Cmd::Ampm { op: AmpmOp::Add { name, flow_mon_id, role, method, carrier, l_bit, d_bit, keep_marks, m } } => {
            let m = m.fields();
            let f = AmpmFlowConfig {
                name: name.clone(),
                flow_mon_id: *flow_mon_id,
                role: role.clone(),
                method: method.clone(),
                carrier: carrier.clone(),
                l_bit: *l_bit,
                d_bit: *d_bit,
                clear: keep_marks.then_some(false),
                priority: m.priority,
                src: m.src,
                dst: m.dst,
                proto: m.proto,
                src_port: m.src_port,
                dst_port: m.dst_port,
                dscp: m.dscp,
                in_port: m.in_port,
            };
            call(c, j, &ampm::AmpmAdd(f), done)
        }
        Cmd::Rule { op: RuleOp::Show { table } } => call(c, j, &ampm::RuleShow { table: table.clone() }, print_rules),
        Cmd::Rule { op: RuleOp::Del { table, name } } => {
            call(c, j, &ampm::RuleDel { table: table.clone(), name: name.clone() }, done)
        }
        Cmd::Rule {
            op: RuleOp::Add { table, name, priority, time, mark, reg, set_l, set_d, set_reg, color, count, timestamp },
        } => {
            let r = ampm::RuleAdd {
                table: table.clone(),
                name: name.clone(),
                priority: *priority,
                time: time.clone(),
                mark: mark.clone(),
                reg: reg.clone(),
                set_l: *set_l,
                set_d: *set_d,
                set_reg: *set_reg,
                color: *color,
                count: *count,
                timestamp: *timestamp,
            };
            call(c, j, &r, done)
        }
        Cmd::Clear { what: ClearWhat::Counters } => call(c, j, &v::ClearCounters {}, done),
        Cmd::Monitor { interval, iterations } => monitor(c, *interval, *iterations, j),
        Cmd::Capture { port, rx: _, tx, count, out, timeout } => {
            let abs = std::path::absolute(out).map_err(|e| format!("--out: {e}"))?;
            let cap = v::Capture {
                port: port.clone(),
                direction: Some(if *tx { "tx" } else { "rx" }.into()),
                count: *count,
                out: abs.display().to_string(),
                timeout_s: *timeout,
            };
            call(c, j, &cap, |r| {
                let ended = if r.complete { String::new() } else { format!(" (ended: {})", r.ended) };
                let missed = if r.missed > 0 {
                    format!("; {} missed (capture queue full or no mbuf)", r.missed)
                } else {
                    String::new()
                };
                println!(
                    "captured {} of {} {} packets on {} into {}{ended}{missed}",
                    r.packets, r.requested, r.direction, r.port, r.out
                )
            })
        }
        // (Answered before connecting.)
        Cmd::Completions { .. } | Cmd::Manpage => Ok(()),
    }
}

fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        cells.iter().enumerate().map(|(i, c)| format!("{:<width$}", c, width = w[i])).collect::<Vec<_>>().join("  ")
    };
    println!("{}", line(header.iter().map(|s| s.to_string()).collect()));
    for r in rows {
        println!("{}", line(r));
    }
}

/// An optional value as a cell ("-" when absent).
fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".into(), T::to_string)
}

fn print_ports(r: &[v::PortView]) {
    table(
        &["PORT", "DRIVER", "MAC", "ENABLED", "LINK", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES", "ADDRESSES"],
        r.iter()
            .map(|p| {
                let link = if p.link.up { format!("up {}M", p.link.speed_mbps) } else { "down".into() };
                let addrs: Vec<String> = p.ipv4.iter().chain(&p.ipv6).cloned().collect();
                vec![
                    p.name.clone(),
                    p.driver.clone(),
                    p.mac.clone(),
                    p.enabled.to_string(),
                    link,
                    p.rx_packets.to_string(),
                    p.rx_bytes.to_string(),
                    p.tx_packets.to_string(),
                    p.tx_bytes.to_string(),
                    addrs.join(","),
                ]
            })
            .collect(),
    )
}

fn print_workers(r: &[v::WorkerView]) {
    table(
        &["WORKER", "LCORE", "RX QUEUES", "RX PKTS", "TX PKTS", "DROPS", "BUSY %", "FLOWS", "MACS", "GEN"],
        r.iter()
            .map(|w| {
                let busy = w.busy_polls as f64 / (w.polls as f64).max(1.0);
                vec![
                    w.id.to_string(),
                    w.lcore.to_string(),
                    w.rx_queues.join(","),
                    w.rx_packets.to_string(),
                    w.tx_packets.to_string(),
                    w.drops.to_string(),
                    format!("{:.1}", busy * 100.0),
                    w.flows.to_string(),
                    w.macs.to_string(),
                    w.table_generation.to_string(),
                ]
            })
            .collect(),
    )
}

/// The counters of a map that are not zero, one line each.
fn nonzero(kind: &str, m: &std::collections::BTreeMap<String, u64>) {
    for (k, n) in m.iter().filter(|(_, n)| **n != 0) {
        println!("{kind:<5} {k:<26} {n}");
    }
}

fn print_counters(r: &CountersView) {
    table(
        &["PORT", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES"],
        r.ports
            .iter()
            .map(|p| {
                let n = [p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes];
                std::iter::once(p.name.clone()).chain(n.iter().map(u64::to_string)).collect()
            })
            .collect(),
    );
    nonzero("drop", &r.drops);
    nonzero("event", &r.events);
    let res = &r.resolution;
    if res.sent + res.no_address + res.no_mbuf + res.queue_full + res.gave_up > 0 {
        println!(
            "resolution sent {} no_address {} no_mbuf {} queue_full {} gave_up {}",
            res.sent, res.no_address, res.no_mbuf, res.queue_full, res.gave_up
        );
    }
}

fn print_drops(r: &v::DropsView) {
    let rows: Vec<Vec<String>> =
        r.total.iter().filter(|(_, n)| **n != 0).map(|(k, n)| vec![k.clone(), n.to_string()]).collect();
    if rows.is_empty() {
        println!("no drops");
    } else {
        table(&["REASON", "PACKETS"], rows);
    }
}

fn print_flows(r: &[v::FlowView]) {
    table(
        &[
            "WORKER", "IN", "VLAN", "SRC", "DST", "PROTO", "SPORT", "DPORT", "ACTION", "KIND", "PACKETS", "BYTES",
            "IDLE S",
        ],
        r.iter()
            .map(|f| {
                vec![
                    f.worker.to_string(),
                    opt(&f.in_port),
                    f.vlan.to_string(),
                    f.src.clone(),
                    f.dst.clone(),
                    f.proto.to_string(),
                    f.src_port.to_string(),
                    f.dst_port.to_string(),
                    f.action.clone(),
                    if f.installed { "installed" } else { "learned" }.into(),
                    f.packets.to_string(),
                    f.bytes.to_string(),
                    format!("{:.1}", f.idle_s),
                ]
            })
            .collect(),
    )
}

/// The most rows one worker returned (rows of no worker left out).
fn per_worker_max(workers: impl Iterator<Item = Option<usize>>) -> u64 {
    let mut n = std::collections::BTreeMap::new();
    for w in workers.flatten() {
        *n.entry(w).or_insert(0u64) += 1;
    }
    n.into_values().max().unwrap_or(0)
}

/// A dump that reached its `--max` says the table may hold more.
fn cut_note(what: &str, cut: bool, max: u64) {
    if cut {
        println!("(at most {max} {what} shown; the table may hold more: --max raises it)");
    }
}

fn print_macs(r: &[v::MacView]) {
    table(
        &["WORKER", "VLAN", "MAC", "PORT", "KIND", "IDLE S"],
        r.iter()
            .map(|m| {
                let idle = m.idle_s.map_or("-".into(), |i| format!("{i:.1}"));
                vec![opt(&m.worker), m.vlan.to_string(), m.mac.clone(), opt(&m.port), m.kind.clone(), idle]
            })
            .collect(),
    )
}

fn print_ampm(r: &ampm::AmpmView) {
    println!(
        "node {}  interval {} ns ({}, bit {}, {} slot bits)  now: interval {} color {} sub-interval {}",
        r.node_id, r.interval_ns, r.time_format, r.interval_bit, r.sub_bits, r.interval, r.color, r.sub_interval,
    );
    table(
        &["FLOW", "ID", "ROLE", "METHOD", "CARRIER", "PKTS0", "BYTES0", "DELAY0", "PKTS1", "BYTES1", "DELAY1", "LAST"],
        r.flows
            .iter()
            .map(|f| {
                let last = f.last_record.as_ref().map_or("-".to_string(), |l| {
                    format!("interval {} color {}: {} pkts", l.interval, l.color, l.packets)
                });
                let mut row = vec![
                    f.name.clone(),
                    f.flow_mon_id.to_string(),
                    f.role.clone(),
                    f.method.clone(),
                    f.carrier.clone(),
                ];
                for c in &f.counters {
                    row.extend([c.packets.to_string(), c.bytes.to_string(), c.delay_count.to_string()]);
                }
                row.push(last);
                row
            })
            .collect(),
    );
    match &r.export {
        Some(e) => println!(
            "export: {} records, {} intervals missed, {} clock steps",
            e.records, e.intervals_missed, e.clock_steps
        ),
        None => println!("export: none"),
    }
    nonzero("event", &r.counters);
}

fn print_rules(r: &ampm::SlotTables) {
    for t in &r.tables {
        println!("table {} ({} lookup)", t.table, t.lookup);
        table(
            &["RULE", "PRIO", "TIME", "MARK(DL)", "REG", "SET_L", "SET_D", "SET_REG", "COLOR", "COUNT", "TS"],
            t.rules
                .iter()
                .map(|x| {
                    vec![
                        x.name.clone(),
                        x.priority.to_string(),
                        x.time.clone(),
                        x.mark.clone(),
                        x.reg.clone(),
                        opt(&x.set_l),
                        opt(&x.set_d),
                        opt(&x.set_reg),
                        x.color.to_string(),
                        x.count.to_string(),
                        x.timestamp.to_string(),
                    ]
                })
                .collect(),
        );
    }
}

fn print_int(r: &int::IntView) {
    let presence = match &r.presence {
        int::PresenceView::Dscp { dscp_value, dscp_mask } => format!("dscp {dscp_value}/{dscp_mask}"),
        int::PresenceView::UdpPort { udp_port } => format!("udp_port {udp_port}"),
    };
    println!(
        "node {}  presence {}  edge {}  core {}  transit {}  mtu_exceeded {}  report_md {}",
        r.node_id,
        presence,
        r.edge_ports.join(","),
        r.core_ports.join(","),
        if r.transit { "on" } else { "off (transit rules only)" },
        r.mtu_exceeded,
        r.report_md.join(","),
    );
    table(
        &["RULE", "PRIO", "ROLE", "SRC", "DST", "PROTO", "SPORT", "DPORT", "DSCP", "IN", "INSTRUCTIONS", "HOPS"],
        r.watch
            .iter()
            .map(|w| {
                vec![
                    w.name.clone(),
                    w.priority.to_string(),
                    w.role.clone(),
                    opt(&w.src),
                    opt(&w.dst),
                    opt(&w.proto),
                    opt(&w.src_port),
                    opt(&w.dst_port),
                    opt(&w.dscp),
                    opt(&w.in_port),
                    w.instructions.as_ref().map_or("-".into(), |i| i.join(",")),
                    opt(&w.max_hops),
                ]
            })
            .collect(),
    );
    nonzero("event", &r.counters);
}

fn print_analytics(r: &ia::AnalyticsView) {
    println!(
        "flow cache {} rows x {} ways ({} hops, {} bytes an entry, {:.1} MiB a worker): {} of {} entries in use",
        r.cache_rows,
        r.cache_ways,
        r.cache_max_hops,
        r.entry_bytes,
        r.cache_bytes as f64 / (1 << 20) as f64,
        r.entries,
        r.capacity
    );
    println!(
        "idle timeout {} s, active timeout {} s; {} flow records, {} event records, {} histogram snapshots ({} lines) exported",
        r.idle_timeout_s,
        r.active_timeout_s,
        r.export.records,
        r.export.events,
        r.export.hist_snapshots,
        r.export.hist_lines
    );
    let d = &r.export.event_delay;
    println!(
        "export work {:.3} s ({} records/s of it); event delivery delay (worker RX to export) p50 {} ns, p99 {} ns, max {} ns over {} events",
        r.export.busy_s, r.export.records_per_busy_s, d.p50_ns, d.p99_ns, d.max_ns, d.count
    );
    for (k, n) in &r.counters {
        println!("{k:<28} {n}");
    }
    ring_table("R_G", &r.export.rings);
    ring_table("R_I", &r.export.event_rings);
    table(
        &["COLLECTOR", "VIA", "DATAGRAMS", "RECORDS", "SEND ERRORS", "NEXT SEQ"],
        r.export
            .collectors
            .iter()
            .map(|x| {
                vec![
                    x.address.clone(),
                    x.via.clone(),
                    x.datagrams.to_string(),
                    x.records.to_string(),
                    x.send_errors.to_string(),
                    x.next_seq.to_string(),
                ]
            })
            .collect(),
    );
}

/// A ring per worker: capacity, pending, received, refused when full.
fn ring_table(name: &str, rings: &[int::RingView]) {
    table(
        &[name, "CAPACITY", "PENDING", "RECEIVED", "RING FULL"],
        rings
            .iter()
            .map(|x| {
                [x.worker as u64, x.capacity as u64, x.pending as u64, x.received, x.ring_full]
                    .iter()
                    .map(u64::to_string)
                    .collect()
            })
            .collect(),
    );
}

fn print_detect(r: &ia::DetectView) {
    if r.rules.is_empty() {
        println!("no detection rule: reports as report_flow_interval_ms says");
    }
    table(
        &["NAME", "PRIO", "ALGORITHM", "METRIC", "T", "EVALUATED", "REPORTED", "SUPPRESSED", "NO METRIC"],
        r.rules
            .iter()
            .map(|x| {
                let algo = match (x.weight, x.interval_ms, &x.expr) {
                    (Some(w), _, Some(e)) => format!("{} {e} (weight {w}/256)", x.algorithm),
                    (Some(w), _, _) => format!("{} (weight {w}/256)", x.algorithm),
                    (_, Some(ms), _) => format!("{} ({ms} ms)", x.algorithm),
                    _ => x.algorithm.clone(),
                };
                vec![
                    x.matcher.name.clone(),
                    x.matcher.priority.to_string(),
                    algo,
                    x.metric.clone(),
                    x.threshold.to_string(),
                    x.evaluated.to_string(),
                    x.reported.to_string(),
                    x.suppressed.to_string(),
                    x.metric_absent.to_string(),
                ]
            })
            .collect(),
    );
    if r.node_untracked > 0 {
        println!("int_detect_node_untracked {}", r.node_untracked);
    }
}

fn print_exprs(r: &ia::ExprView) {
    if r.exprs.is_empty() {
        println!("no expression");
    }
    table(
        &["NAME", "RULES", "EXPRESSION"],
        r.exprs.iter().map(|x| vec![x.name.clone(), x.rules.join(","), x.expr.clone()]).collect(),
    );
}

fn print_histograms(r: &ia::HistogramsView) {
    if r.histograms.is_empty() {
        println!("no histogram holds a value yet");
    }
    let q = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for h in &r.histograms {
        let node = h.node_id.map_or("end to end".to_string(), |n| format!("node {n}"));
        println!(
            "{node} {} ({}): {} values, p50 {} p90 {} p99 {} (bin lower edges)",
            h.metric,
            h.bins,
            h.total,
            q(h.p50),
            q(h.p90),
            q(h.p99)
        );
        let bins: Vec<String> = h.counts.iter().map(|(e, c)| format!("{e}:{c}")).collect();
        println!("  {}", bins.join(" "));
    }
    nonzero("loss", &r.counters);
}

fn print_events(r: &ia::EventsView) {
    table(
        &["METRIC", "THRESHOLD (T)", "CHANGE (C)", "MODE", "RESET", "RATE BUDGET (BASE T, T/S, CHANGES)"],
        r.rules
            .iter()
            .map(|x| {
                let off = |v: u32| if v == 0 { "off".to_string() } else { v.to_string() };
                let budget = match (x.rate_budget, x.base_threshold, x.t_events_per_s) {
                    (Some(b), Some(base), Some(rate)) => format!("{b}/s ({base}, {rate}, {})", x.budget_changes),
                    _ => "-".into(),
                };
                vec![
                    x.metric.clone(),
                    off(x.threshold),
                    off(x.change),
                    x.mode.clone(),
                    x.reset.map_or("-".into(), |r| r.to_string()),
                    budget,
                ]
            })
            .collect(),
    );
    println!("path_change {}", if r.path_change { "on" } else { "off" });
    for (k, n) in &r.counters {
        println!("{k:<28} {n}");
    }
}

fn print_flow_entries(r: &ia::FlowEntries) {
    if r.entries.is_empty() {
        println!("no entry for this flow");
    }
    let mean = |a: &ia::AggView| a.mean.map_or("-".to_string(), |m| m.to_string());
    // (A metric with no value yet, such as an unknown TX utilisation, has no latest either.)
    let last = |a: &ia::AggView| if a.count > 0 { a.last.to_string() } else { "-".to_string() };
    for e in &r.entries {
        println!(
            "worker {}: {} packets, first {} last {} ns, {} hops, e2e latency last {} mean {} ns",
            e.worker,
            e.packets,
            e.first_ns,
            e.last_ns,
            e.hops,
            last(&e.e2e_latency),
            mean(&e.e2e_latency)
        );
        table(
            &[
                "HOP",
                "NODE",
                "LATENCY LAST",
                "LATENCY MEAN",
                "QUEUE LAST",
                "QUEUE MEAN",
                "TX_UTIL LAST",
                "TX_UTIL MEAN",
            ],
            e.hop
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    vec![
                        i.to_string(),
                        h.node_id.to_string(),
                        last(&h.hop_latency),
                        mean(&h.hop_latency),
                        last(&h.queue),
                        mean(&h.queue),
                        last(&h.tx_util),
                        mean(&h.tx_util),
                    ]
                })
                .collect(),
        );
    }
}

fn print_gpint(r: &gpint::GpintView) {
    println!(
        "GPINT node {}  probes to UDP {} (GPINT port {}) domain {:#06x}  recovery {}  hold {} ms  {} clone slots a worker",
        r.node_id,
        r.int_port,
        r.udp_port,
        r.domain_id,
        if r.recovery { "on" } else { "off" },
        r.hold_ms,
        r.clone_slots
    );
    println!("delivered {}  notices {}", r.delivered, r.notices);
    table(
        &["WORKER", "CAPACITY", "IN USE", "HIGH WATER"],
        r.workers
            .iter()
            .map(|w| [w.worker, w.capacity, w.in_use, w.high_water].iter().map(usize::to_string).collect())
            .collect(),
    );
    let waiting: Vec<Vec<String>> = r
        .workers
        .iter()
        .flat_map(|w| {
            w.waiting.iter().map(move |x| {
                vec![
                    w.worker.to_string(),
                    x.request_id.to_string(),
                    x.attempt.to_string(),
                    x.hop_index.to_string(),
                    format!("{:.1}", x.age_ms),
                ]
            })
        })
        .collect();
    if !waiting.is_empty() {
        table(&["WORKER", "REQUEST", "ATTEMPT", "AWAITS HOP", "AGE MS"], waiting);
    }
    ring_table("EXPORT RING", &r.rings);
    table(&["COUNTER", "VALUE"], r.counters.iter().map(|(k, v)| vec![k.clone(), v.to_string()]).collect());
}

fn print_label(r: &label::LabelView) {
    let f: Vec<String> = r.f.iter().map(|p| format!("{p:.3}")).collect();
    println!(
        "INT-label node {}  domain {:#06x}  T {} ms  T1 {} ms  f {} [{}]  max labels {}  max shift {}",
        r.node_id,
        r.label_domain_id,
        r.interval_ms,
        r.rest_ms,
        r.probability,
        f.join(" "),
        r.max_labels,
        r.max_shift
    );
    println!("instructions {}", r.instructions.join(","));
    table(
        &["PORT", "EDGE", "LT AGE MS", "SHIFT", "LABELS", "LABELS/S"],
        r.ports
            .iter()
            .map(|p| {
                vec![
                    p.port.clone(),
                    if p.edge { "yes" } else { "" }.into(),
                    p.lt_age_ms.map_or("-".into(), |a| format!("{a:.1}")),
                    p.shift.to_string(),
                    p.labels.to_string(),
                    format!("{:.1}", p.labels_per_s),
                ]
            })
            .collect(),
    );
    ring_table("LABEL REPORT RING", &r.rings);
    table(&["COUNTER", "VALUE"], r.counters.iter().map(|(k, v)| vec![k.clone(), v.to_string()]).collect());
}

fn print_reports(r: &int::ReportsView) {
    println!(
        "export {}  node {} hw_id {}  reports {}  packets {}  busy {:.3} s ({} reports per busy second)",
        if r.paused { "paused" } else { "running" },
        r.node_id,
        r.hw_id,
        r.reports,
        r.packets,
        r.busy_s,
        r.reports_per_busy_s
    );
    ring_table("RING", &r.rings);
    table(
        &["COLLECTOR", "VIA", "PACKETS", "REPORTS", "SEND ERRORS", "NEXT SEQ", "LAST ERROR"],
        r.collectors
            .iter()
            .map(|x| {
                vec![
                    x.address.clone(),
                    x.via.clone(),
                    x.packets.to_string(),
                    x.reports.to_string(),
                    x.send_errors.to_string(),
                    x.next_seq.to_string(),
                    opt(&x.last_error),
                ]
            })
            .collect(),
    );
}

/// Per-second rates between two `show_counters` answers.
#[derive(Debug, Serialize)]
struct Rates {
    interval_s: f64,
    ports: Vec<PortRates>,
    workers: Vec<WorkerRates>,
    /// Drop reasons that counted, per second.
    drops_pps: std::collections::BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
struct PortRates {
    port: String,
    rx_mpps: f64,
    rx_gbps: f64,
    tx_mpps: f64,
    tx_gbps: f64,
}

#[derive(Debug, Serialize)]
struct WorkerRates {
    worker: usize,
    rx_mpps: f64,
    tx_mpps: f64,
    tx_gbps: f64,
    drops_pps: f64,
    busy_pct: f64,
}

fn rates(a: &CountersView, b: &CountersView, dt: f64) -> Rates {
    let d = |x: u64, y: u64| y.saturating_sub(x) as f64 / dt;
    let ports = b
        .ports
        .iter()
        .zip(&a.ports)
        .map(|(pb, pa)| PortRates {
            port: pb.name.clone(),
            rx_mpps: d(pa.rx_packets, pb.rx_packets) / 1e6,
            rx_gbps: d(pa.rx_bytes, pb.rx_bytes) * 8.0 / 1e9,
            tx_mpps: d(pa.tx_packets, pb.tx_packets) / 1e6,
            tx_gbps: d(pa.tx_bytes, pb.tx_bytes) * 8.0 / 1e9,
        })
        .collect();
    let workers = b
        .workers
        .iter()
        .zip(&a.workers)
        .map(|(wb, wa)| {
            let polls = d(wa.polls, wb.polls);
            WorkerRates {
                worker: wb.id,
                rx_mpps: d(wa.rx_packets, wb.rx_packets) / 1e6,
                tx_mpps: d(wa.tx_packets, wb.tx_packets) / 1e6,
                tx_gbps: d(wa.tx_bytes, wb.tx_bytes) * 8.0 / 1e9,
                drops_pps: d(wa.drops, wb.drops),
                busy_pct: if polls > 0.0 { d(wa.busy_polls, wb.busy_polls) / polls * 100.0 } else { 0.0 },
            }
        })
        .collect();
    let drops_pps = b
        .drops
        .iter()
        .map(|(k, n)| (k.clone(), d(a.drops.get(k).copied().unwrap_or(0), *n)))
        .filter(|(_, r)| *r != 0.0)
        .collect();
    Rates { interval_s: dt, ports, workers, drops_pps }
}

/// `control::config::parse_seconds` as the f64 the API carries (finite:
/// NaN and infinity would reach the switch as null, i.e. no value).
fn finite_seconds(s: &str) -> Result<f64, String> {
    control::config::parse_seconds(s).map(|d| d.as_secs_f64())
}

fn monitor(c: &mut Client, interval: f64, iterations: Option<u64>, json_out: bool) -> Result<(), String> {
    if !(0.05..=3600.0).contains(&interval) {
        return Err("--interval: must be between 0.05 and 3600 seconds".into());
    }
    if iterations == Some(0) {
        return Err("--iterations: at least 1 (leave it out to run until Ctrl-C)".into());
    }
    let mut prev = c.command(&v::ShowCounters {}).map_err(explain)?;
    let mut t_prev = Instant::now();
    let mut n = 0u64;
    while iterations.is_none_or(|max| n < max) {
        std::thread::sleep(Duration::from_secs_f64(interval));
        let cur = c.command(&v::ShowCounters {}).map_err(explain)?;
        let now = Instant::now();
        let r = rates(&prev, &cur, now.duration_since(t_prev).as_secs_f64());
        if json_out {
            println!("{}", serde_json::to_string(&r).map_err(|e| format!("printing the rates: {e}"))?);
        } else {
            print!("\x1b[2J\x1b[H");
            println!("intswitch monitor (every {interval} s; Ctrl-C quits)\n");
            let f = |x: f64| format!("{x:.3}");
            table(
                &["PORT", "RX MPPS", "RX GBPS", "TX MPPS", "TX GBPS"],
                r.ports
                    .iter()
                    .map(|p| vec![p.port.clone(), f(p.rx_mpps), f(p.rx_gbps), f(p.tx_mpps), f(p.tx_gbps)])
                    .collect(),
            );
            println!();
            table(
                &["WORKER", "RX MPPS", "TX MPPS", "TX GBPS", "DROPS/S", "BUSY %"],
                r.workers
                    .iter()
                    .map(|w| {
                        vec![
                            w.worker.to_string(),
                            f(w.rx_mpps),
                            f(w.tx_mpps),
                            f(w.tx_gbps),
                            format!("{:.0}", w.drops_pps),
                            format!("{:.1}", w.busy_pct),
                        ]
                    })
                    .collect(),
            );
            println!();
            if r.drops_pps.is_empty() {
                println!("no drops");
            } else {
                let rows = r.drops_pps.iter().map(|(k, x)| vec![k.clone(), format!("{x:.0}")]).collect();
                table(&["DROP REASON", "PER SECOND"], rows);
            }
        }
        prev = cur;
        t_prev = now;
        n += 1;
    }
    Ok(())
}
