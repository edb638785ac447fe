//! `intctl`: command-line client of a running intswitch's control socket.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use control::client::{CallError, Client};
use serde_json::{json, Map, Value};

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
    /// Show state: ports, workers, counters, drops, flows, macs, routes, neighbours, config, version, metrics, int, reports (AM-PM: `ampm show`, `rule show`).
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
    /// Add or delete static neighbours (router mode).
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
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
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
        #[arg(long)]
        timeout: Option<f64>,
    },
}

#[derive(Subcommand)]
enum Show {
    Ports,
    Workers,
    Counters,
    Drops,
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
    Routes,
    Neighbours,
    Config,
    Version,
    /// The Prometheus text the /metrics endpoint serves.
    Metrics,
    /// INT domain: node ID, edge/core ports, watchlist, INT counters.
    Int,
    /// Telemetry report export: per-worker rings and per-collector counts.
    Reports,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per invocation
enum IntOp {
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
        /// DSCP bit for D (double marking).
        #[arg(long)]
        d_bit: Option<u8>,
        /// Terminator: keep the marks (the next hop is the destination).
        #[arg(long)]
        keep_marks: bool,
        #[command(flatten)]
        m: MatchArgs,
    },
    Del {
        name: String,
    },
}

#[derive(Subcommand)]
enum RuleOp {
    /// Rows of one slot table (METHOD-ROLE, e.g. muxed-initiator) or of all.
    Show {
        table: Option<String>,
    },
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
        /// Write L (initiator).
        #[arg(long)]
        set_l: Option<bool>,
        /// Write D (initiator).
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
    Del {
        table: String,
        name: String,
    },
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
        /// Source: domain-specific ID.
        #[arg(long)]
        domain_id: Option<u16>,
    },
    Del {
        name: String,
    },
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

impl MatchArgs {
    /// Adds the given fields to a request's arguments (numbers as numbers).
    fn add_to(&self, m: &mut Value) {
        m["priority"] = json!(self.priority);
        let num_or_str = |v: &str| v.parse::<u64>().map(Value::from).unwrap_or_else(|_| Value::from(v));
        for (k, v) in [("src", &self.src), ("dst", &self.dst), ("in_port", &self.in_port)] {
            if let Some(v) = v {
                m[k] = json!(v);
            }
        }
        for (k, v) in
            [("proto", &self.proto), ("src_port", &self.src_port), ("dst_port", &self.dst_port), ("dscp", &self.dscp)]
        {
            if let Some(v) = v {
                m[k] = num_or_str(v);
            }
        }
    }
}

#[derive(Args)]
struct FlowKeyArgs {
    /// Input port name.
    #[arg(long)]
    in_port: String,
    #[arg(long)]
    src: String,
    #[arg(long)]
    dst: String,
    /// udp, tcp, icmp, icmpv6 or a number.
    #[arg(long)]
    proto: String,
    #[arg(long, default_value_t = 0)]
    src_port: u16,
    #[arg(long, default_value_t = 0)]
    dst_port: u16,
    #[arg(long, default_value_t = 0)]
    vlan: u16,
}

#[derive(Subcommand)]
enum FlowOp {
    Add {
        #[command(flatten)]
        key: FlowKeyArgs,
        /// normal, drop or forward:PORT.
        #[arg(long)]
        action: String,
    },
    Del {
        #[command(flatten)]
        key: FlowKeyArgs,
    },
}

#[derive(Subcommand)]
enum RouteOp {
    Add {
        /// ADDR/LEN.
        prefix: String,
        #[arg(long)]
        port: String,
        /// Gateway (omit for a directly connected prefix).
        #[arg(long)]
        via: Option<String>,
    },
    Del {
        prefix: String,
    },
}

#[derive(Subcommand)]
enum NeighbourOp {
    Add {
        ip: String,
        mac: String,
        #[arg(long)]
        port: String,
    },
    Del {
        ip: String,
    },
}

#[derive(Subcommand)]
enum PortOp {
    Enable {
        port: String,
    },
    Disable {
        port: String,
    },
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

fn key_args(k: &FlowKeyArgs) -> Map<String, Value> {
    let proto = k.proto.parse::<u64>().map(Value::from).unwrap_or_else(|_| Value::from(k.proto.clone()));
    let mut m = Map::new();
    m.insert("in_port".into(), k.in_port.clone().into());
    m.insert("src".into(), k.src.clone().into());
    m.insert("dst".into(), k.dst.clone().into());
    m.insert("proto".into(), proto);
    m.insert("src_port".into(), k.src_port.into());
    m.insert("dst_port".into(), k.dst_port.into());
    m.insert("vlan".into(), k.vlan.into());
    m
}

fn explain(e: CallError) -> String {
    match e.argument {
        Some(a) if !e.message.contains(&a) => format!("{a}: {}", e.message),
        _ => e.message,
    }
}

fn run(cli: Cli) -> Result<(), String> {
    let socket = match &cli.socket {
        Some(s) => s.clone(),
        None => default_socket()?,
    };
    let mut c = Client::connect(&socket).map_err(|e| format!("--socket: {}", e.message))?;
    let json_out = cli.json;
    let (cmd, args): (&str, Value) = match &cli.cmd {
        Cmd::Show { what } => match what {
            Show::Ports => ("show_ports", json!({})),
            Show::Workers => ("show_workers", json!({})),
            Show::Counters => ("show_counters", json!({})),
            Show::Drops => ("show_drops", json!({})),
            Show::Flows { max } => ("show_flows", json!({ "max": max })),
            Show::Macs { max } => ("show_macs", json!({ "max": max })),
            Show::Routes => ("show_routes", json!({})),
            Show::Neighbours => ("show_neighbours", json!({})),
            Show::Config => ("show_config", json!({})),
            Show::Version => ("show_version", json!({})),
            Show::Metrics => ("metrics", json!({})),
            Show::Int => ("show_int", json!({})),
            Show::Reports => ("show_reports", json!({})),
        },
        Cmd::Flow { op: FlowOp::Add { key, action } } => {
            let mut m = key_args(key);
            m.insert("action".into(), action.clone().into());
            ("flow_add", Value::Object(m))
        }
        Cmd::Flow { op: FlowOp::Del { key } } => ("flow_del", Value::Object(key_args(key))),
        Cmd::Route { op: RouteOp::Add { prefix, port, via } } => {
            let mut m = json!({ "prefix": prefix, "port": port });
            if let Some(v) = via {
                m["via"] = v.clone().into();
            }
            ("route_add", m)
        }
        Cmd::Route { op: RouteOp::Del { prefix } } => ("route_del", json!({ "prefix": prefix })),
        Cmd::Neighbour { op: NeighbourOp::Add { ip, mac, port } } => {
            ("neighbour_add", json!({ "ip": ip, "mac": mac, "port": port }))
        }
        Cmd::Neighbour { op: NeighbourOp::Del { ip } } => ("neighbour_del", json!({ "ip": ip })),
        Cmd::Port { op: PortOp::Enable { port } } => ("port_enable", json!({ "port": port })),
        Cmd::Port { op: PortOp::Disable { port } } => ("port_disable", json!({ "port": port })),
        Cmd::Port { op: PortOp::Impair { port, netem } } => {
            ("port_impair", json!({ "port": port, "netem": netem.join(" ") }))
        }
        Cmd::Int { op: IntOp::Export { action } } => ("int_export", json!({ "paused": action == "pause" })),
        Cmd::Int { op: IntOp::Watch { op: WatchOp::Del { name } } } => ("int_watch_del", json!({ "name": name })),
        Cmd::Int {
            op: IntOp::Watch { op: WatchOp::Add { name, role, m: matching, instructions, max_hops, domain_id } },
        } => {
            let mut m = json!({ "name": name, "role": role });
            matching.add_to(&mut m);
            if let Some(i) = instructions {
                m["instructions"] = json!(i);
            }
            if let Some(h) = max_hops {
                m["max_hops"] = json!(h);
            }
            if let Some(d) = domain_id {
                m["domain_id"] = json!(d);
            }
            ("int_watch_add", m)
        }
        Cmd::Ampm { op: AmpmOp::Show } => ("show_ampm", json!({})),
        Cmd::Ampm { op: AmpmOp::Del { name } } => ("ampm_del", json!({ "name": name })),
        Cmd::Ampm {
            op: AmpmOp::Add { name, flow_mon_id, role, method, carrier, l_bit, d_bit, keep_marks, m: matching },
        } => {
            let mut m = json!({ "name": name, "flow_mon_id": flow_mon_id, "role": role, "method": method,
                                "carrier": carrier, "clear": !keep_marks });
            matching.add_to(&mut m);
            if let Some(b) = l_bit {
                m["l_bit"] = json!(b);
            }
            if let Some(b) = d_bit {
                m["d_bit"] = json!(b);
            }
            ("ampm_add", m)
        }
        Cmd::Rule { op: RuleOp::Show { table } } => {
            ("rule_show", table.as_ref().map_or_else(|| json!({}), |t| json!({ "table": t })))
        }
        Cmd::Rule { op: RuleOp::Del { table, name } } => ("rule_del", json!({ "table": table, "name": name })),
        Cmd::Rule {
            op: RuleOp::Add { table, name, priority, time, mark, reg, set_l, set_d, set_reg, color, count, timestamp },
        } => {
            let mut m = json!({ "table": table, "name": name, "priority": priority, "time": time, "mark": mark,
                                "reg": reg, "color": color, "count": count, "timestamp": timestamp });
            for (k, v) in [("set_l", set_l), ("set_d", set_d)] {
                if let Some(v) = v {
                    m[k] = json!(v);
                }
            }
            if let Some(r) = set_reg {
                m["set_reg"] = json!(r);
            }
            ("rule_add", m)
        }
        Cmd::Clear { what: ClearWhat::Counters } => ("clear_counters", json!({})),
        Cmd::Monitor { interval, iterations } => return monitor(&mut c, *interval, *iterations, json_out),
        Cmd::Capture { port, rx: _, tx, count, out, timeout } => {
            let abs = std::path::absolute(out).map_err(|e| format!("--out: {e}"))?;
            let mut m = json!({ "port": port, "direction": if *tx { "tx" } else { "rx" }, "count": count,
                                "out": abs.display().to_string() });
            if let Some(t) = timeout {
                m["timeout_s"] = json!(t);
            }
            ("capture", m)
        }
    };
    let result = c.call(cmd, args).map_err(explain)?;
    if json_out {
        println!("{result}");
        return Ok(());
    }
    print_text(cmd, &result);
    Ok(())
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

fn s(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn print_text(cmd: &str, r: &Value) {
    let arr = || r.as_array().cloned().unwrap_or_default();
    match cmd {
        "show_ports" => table(
            &["PORT", "DRIVER", "MAC", "ENABLED", "LINK", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES", "ADDRESSES"],
            arr()
                .iter()
                .map(|p| {
                    let mut addrs: Vec<String> = p["ipv4"].as_array().into_iter().flatten().map(s).collect();
                    addrs.extend(p["ipv6"].as_array().into_iter().flatten().map(s));
                    vec![
                        s(&p["name"]),
                        s(&p["driver"]),
                        s(&p["mac"]),
                        s(&p["enabled"]),
                        if p["link"]["up"] == true {
                            format!("up {}M", p["link"]["speed_mbps"])
                        } else {
                            "down".into()
                        },
                        s(&p["rx_packets"]),
                        s(&p["rx_bytes"]),
                        s(&p["tx_packets"]),
                        s(&p["tx_bytes"]),
                        addrs.join(","),
                    ]
                })
                .collect(),
        ),
        "show_workers" => table(
            &["WORKER", "LCORE", "RX QUEUES", "RX PKTS", "TX PKTS", "DROPS", "BUSY %", "FLOWS", "MACS", "GEN"],
            arr()
                .iter()
                .map(|w| {
                    let busy = w["busy_polls"].as_f64().unwrap_or(0.0) / w["polls"].as_f64().unwrap_or(1.0).max(1.0);
                    vec![
                        s(&w["id"]),
                        s(&w["lcore"]),
                        w["rx_queues"].as_array().into_iter().flatten().map(s).collect::<Vec<_>>().join(","),
                        s(&w["rx_packets"]),
                        s(&w["tx_packets"]),
                        s(&w["drops"]),
                        format!("{:.1}", busy * 100.0),
                        s(&w["flows"]),
                        s(&w["macs"]),
                        s(&w["table_generation"]),
                    ]
                })
                .collect(),
        ),
        "show_counters" => {
            print_text("show_ports_short", &r["ports"]);
            for (k, v) in r["drops"].as_object().into_iter().flatten().filter(|(_, v)| v.as_u64() != Some(0)) {
                println!("drop  {k:<26} {v}");
            }
            for (k, v) in r["events"].as_object().into_iter().flatten().filter(|(_, v)| v.as_u64() != Some(0)) {
                println!("event {k:<26} {v}");
            }
        }
        "show_ports_short" => table(
            &["PORT", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES"],
            arr()
                .iter()
                .map(|p| {
                    vec![s(&p["name"]), s(&p["rx_packets"]), s(&p["rx_bytes"]), s(&p["tx_packets"]), s(&p["tx_bytes"])]
                })
                .collect(),
        ),
        "show_drops" => {
            let rows: Vec<Vec<String>> = r["total"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, v)| v.as_u64() != Some(0))
                .map(|(k, v)| vec![k.clone(), s(v)])
                .collect();
            if rows.is_empty() {
                println!("no drops");
            } else {
                table(&["REASON", "PACKETS"], rows);
            }
        }
        "show_flows" => table(
            &[
                "WORKER", "IN", "VLAN", "SRC", "DST", "PROTO", "SPORT", "DPORT", "ACTION", "KIND", "PACKETS", "BYTES",
                "IDLE S",
            ],
            arr()
                .iter()
                .map(|f| {
                    vec![
                        s(&f["worker"]),
                        s(&f["in_port"]),
                        s(&f["vlan"]),
                        s(&f["src"]),
                        s(&f["dst"]),
                        s(&f["proto"]),
                        s(&f["src_port"]),
                        s(&f["dst_port"]),
                        s(&f["action"]),
                        if f["installed"] == true { "installed".into() } else { "learned".into() },
                        s(&f["packets"]),
                        s(&f["bytes"]),
                        format!("{:.1}", f["idle_s"].as_f64().unwrap_or(0.0)),
                    ]
                })
                .collect(),
        ),
        "show_macs" => table(
            &["WORKER", "VLAN", "MAC", "PORT", "KIND", "IDLE S"],
            arr()
                .iter()
                .map(|m| {
                    let idle = m["idle_s"].as_f64().map_or("-".into(), |i| format!("{i:.1}"));
                    vec![s(&m["worker"]), s(&m["vlan"]), s(&m["mac"]), s(&m["port"]), s(&m["kind"]), idle]
                })
                .collect(),
        ),
        "show_routes" => table(
            &["PREFIX", "PORT", "VIA", "KIND"],
            arr().iter().map(|x| vec![s(&x["prefix"]), s(&x["port"]), s(&x["via"]), s(&x["kind"])]).collect(),
        ),
        "show_neighbours" => table(
            &["IP", "MAC", "PORT", "KIND"],
            arr()
                .iter()
                .map(|x| {
                    let kind = if x["permanent"] == true { "static" } else { "learned" };
                    vec![s(&x["ip"]), s(&x["mac"]), s(&x["port"]), kind.into()]
                })
                .collect(),
        ),
        "show_config" => println!("{}", serde_json::to_string_pretty(r).unwrap_or_default()),
        "show_version" => println!(
            "intswitch {} (control protocol {}, {}) instance {} mode {}",
            s(&r["intswitch"]),
            s(&r["protocol"]),
            s(&r["dpdk"]),
            s(&r["name"]),
            s(&r["mode"])
        ),
        "metrics" => print!("{}", r["text"].as_str().unwrap_or("")),
        "capture" => println!(
            "captured {} of {} {} packets on {} into {}",
            s(&r["packets"]),
            s(&r["requested"]),
            s(&r["direction"]),
            s(&r["port"]),
            s(&r["out"])
        ),
        "show_ampm" => {
            println!(
                "node {}  interval {} ns ({}, bit {}, {} slot bits)  now: interval {} color {} sub-interval {}",
                s(&r["node_id"]),
                s(&r["interval_ns"]),
                s(&r["time_format"]),
                s(&r["interval_bit"]),
                s(&r["sub_bits"]),
                s(&r["interval"]),
                s(&r["color"]),
                s(&r["sub_interval"]),
            );
            table(
                &[
                    "FLOW", "ID", "ROLE", "METHOD", "CARRIER", "PKTS0", "BYTES0", "DELAY0", "PKTS1", "BYTES1",
                    "DELAY1", "LAST",
                ],
                r["flows"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| {
                        let c = |i: usize, k: &str| s(&f["counters"][i][k]);
                        let last = &f["last_record"];
                        let last = if last.is_null() {
                            "-".to_string()
                        } else {
                            format!(
                                "interval {} color {}: {} pkts",
                                s(&last["interval"]),
                                s(&last["color"]),
                                s(&last["packets"])
                            )
                        };
                        vec![
                            s(&f["name"]),
                            s(&f["flow_mon_id"]),
                            s(&f["role"]),
                            s(&f["method"]),
                            s(&f["carrier"]),
                            c(0, "packets"),
                            c(0, "bytes"),
                            c(0, "delay_count"),
                            c(1, "packets"),
                            c(1, "bytes"),
                            c(1, "delay_count"),
                            last,
                        ]
                    })
                    .collect(),
            );
            println!("export: {}", r["export"]);
            for (k, v) in r["counters"].as_object().into_iter().flatten().filter(|(_, v)| v.as_u64() != Some(0)) {
                println!("event {k:<26} {v}");
            }
        }
        "rule_show" => {
            for t in r["tables"].as_array().into_iter().flatten() {
                println!("table {} ({} lookup)", s(&t["table"]), s(&t["lookup"]));
                table(
                    &["RULE", "PRIO", "TIME", "MARK(DL)", "REG", "SET_L", "SET_D", "SET_REG", "COLOR", "COUNT", "TS"],
                    t["rules"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|x| {
                            [
                                "name",
                                "priority",
                                "time",
                                "mark",
                                "reg",
                                "set_l",
                                "set_d",
                                "set_reg",
                                "color",
                                "count",
                                "timestamp",
                            ]
                            .iter()
                            .map(|k| s(&x[*k]))
                            .collect()
                        })
                        .collect(),
                );
            }
        }
        "show_int" => {
            let pr = &r["presence"];
            let presence = if pr["method"] == "dscp" {
                format!("dscp {}/{}", s(&pr["dscp_value"]), s(&pr["dscp_mask"]))
            } else {
                format!("udp_port {}", s(&pr["udp_port"]))
            };
            println!(
                "node {}  presence {}  edge {}  core {}  mtu_exceeded {}  report_md {}",
                s(&r["node_id"]),
                presence,
                r["edge_ports"].as_array().into_iter().flatten().map(s).collect::<Vec<_>>().join(","),
                r["core_ports"].as_array().into_iter().flatten().map(s).collect::<Vec<_>>().join(","),
                s(&r["mtu_exceeded"]),
                r["report_md"].as_array().into_iter().flatten().map(s).collect::<Vec<_>>().join(","),
            );
            table(
                &[
                    "RULE",
                    "PRIO",
                    "ROLE",
                    "SRC",
                    "DST",
                    "PROTO",
                    "SPORT",
                    "DPORT",
                    "DSCP",
                    "IN",
                    "INSTRUCTIONS",
                    "HOPS",
                ],
                r["watch"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|w| {
                        vec![
                            s(&w["name"]),
                            s(&w["priority"]),
                            s(&w["role"]),
                            s(&w["src"]),
                            s(&w["dst"]),
                            s(&w["proto"]),
                            s(&w["src_port"]),
                            s(&w["dst_port"]),
                            s(&w["dscp"]),
                            s(&w["in_port"]),
                            w["instructions"].as_array().into_iter().flatten().map(s).collect::<Vec<_>>().join(","),
                            s(&w["max_hops"]),
                        ]
                    })
                    .collect(),
            );
            for (k, v) in r["counters"].as_object().into_iter().flatten().filter(|(_, v)| v.as_u64() != Some(0)) {
                println!("event {k:<26} {v}");
            }
        }
        "show_reports" => {
            println!(
                "export {}  node {} hw_id {}  reports {}  packets {}  busy {:.3} s ({} reports per busy second)",
                if r["paused"] == true { "paused" } else { "running" },
                s(&r["node_id"]),
                s(&r["hw_id"]),
                s(&r["reports"]),
                s(&r["packets"]),
                r["busy_s"].as_f64().unwrap_or(0.0),
                s(&r["reports_per_busy_s"])
            );
            table(
                &["RING", "CAPACITY", "PENDING", "RECEIVED", "RING FULL"],
                r["rings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| {
                        vec![
                            s(&x["worker"]),
                            s(&x["capacity"]),
                            s(&x["pending"]),
                            s(&x["received"]),
                            s(&x["ring_full"]),
                        ]
                    })
                    .collect(),
            );
            table(
                &["COLLECTOR", "VIA", "PACKETS", "REPORTS", "SEND ERRORS", "NEXT SEQ", "LAST ERROR"],
                r["collectors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| {
                        vec![
                            s(&x["address"]),
                            s(&x["via"]),
                            s(&x["packets"]),
                            s(&x["reports"]),
                            s(&x["send_errors"]),
                            s(&x["next_seq"]),
                            s(&x["last_error"]),
                        ]
                    })
                    .collect(),
            );
        }
        _ => println!("ok"),
    }
}

/// Rates between two `show_counters` answers.
fn rates(a: &Value, b: &Value, dt: f64) -> Value {
    let d = |x: &Value, y: &Value| (y.as_f64().unwrap_or(0.0) - x.as_f64().unwrap_or(0.0)).max(0.0) / dt;
    let ports: Vec<Value> = b["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(a["ports"].as_array().into_iter().flatten())
        .map(|(pb, pa)| {
            json!({
                "port": pb["name"],
                "rx_mpps": d(&pa["rx_packets"], &pb["rx_packets"]) / 1e6,
                "rx_gbps": d(&pa["rx_bytes"], &pb["rx_bytes"]) * 8.0 / 1e9,
                "tx_mpps": d(&pa["tx_packets"], &pb["tx_packets"]) / 1e6,
                "tx_gbps": d(&pa["tx_bytes"], &pb["tx_bytes"]) * 8.0 / 1e9,
            })
        })
        .collect();
    let workers: Vec<Value> = b["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(a["workers"].as_array().into_iter().flatten())
        .map(|(wb, wa)| {
            let polls = d(&wa["polls"], &wb["polls"]);
            json!({
                "worker": wb["id"],
                "rx_mpps": d(&wa["rx_packets"], &wb["rx_packets"]) / 1e6,
                "tx_mpps": d(&wa["tx_packets"], &wb["tx_packets"]) / 1e6,
                "tx_gbps": d(&wa["tx_bytes"], &wb["tx_bytes"]) * 8.0 / 1e9,
                "drops_pps": d(&wa["drops"], &wb["drops"]),
                "busy_pct": if polls > 0.0 { d(&wa["busy_polls"], &wb["busy_polls"]) / polls * 100.0 } else { 0.0 },
            })
        })
        .collect();
    let drops: Map<String, Value> = b["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), json!(d(&a["drops"][k], v))))
        .filter(|(_, v)| v.as_f64() != Some(0.0))
        .collect();
    json!({ "interval_s": dt, "ports": ports, "workers": workers, "drops_pps": drops })
}

fn monitor(c: &mut Client, interval: f64, iterations: Option<u64>, json_out: bool) -> Result<(), String> {
    if !(0.05..=3600.0).contains(&interval) {
        return Err("--interval: must be between 0.05 and 3600 seconds".into());
    }
    let mut prev = c.call("show_counters", json!({})).map_err(explain)?;
    let mut t_prev = Instant::now();
    let mut n = 0u64;
    while iterations.is_none_or(|max| n < max) {
        std::thread::sleep(Duration::from_secs_f64(interval));
        let cur = c.call("show_counters", json!({})).map_err(explain)?;
        let now = Instant::now();
        let r = rates(&prev, &cur, now.duration_since(t_prev).as_secs_f64());
        if json_out {
            println!("{r}");
        } else {
            print!("\x1b[2J\x1b[H");
            println!("intswitch monitor (every {interval} s; Ctrl-C quits)\n");
            let f = |v: &Value| format!("{:.3}", v.as_f64().unwrap_or(0.0));
            table(
                &["PORT", "RX MPPS", "RX GBPS", "TX MPPS", "TX GBPS"],
                r["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        vec![s(&p["port"]), f(&p["rx_mpps"]), f(&p["rx_gbps"]), f(&p["tx_mpps"]), f(&p["tx_gbps"])]
                    })
                    .collect(),
            );
            println!();
            table(
                &["WORKER", "RX MPPS", "TX MPPS", "TX GBPS", "DROPS/S", "BUSY %"],
                r["workers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|w| {
                        vec![
                            s(&w["worker"]),
                            f(&w["rx_mpps"]),
                            f(&w["tx_mpps"]),
                            f(&w["tx_gbps"]),
                            format!("{:.0}", w["drops_pps"].as_f64().unwrap_or(0.0)),
                            format!("{:.1}", w["busy_pct"].as_f64().unwrap_or(0.0)),
                        ]
                    })
                    .collect(),
            );
            println!();
            let drops: Vec<Vec<String>> = r["drops_pps"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| vec![k.clone(), format!("{:.0}", v.as_f64().unwrap_or(0.0))])
                .collect();
            if drops.is_empty() {
                println!("no drops");
            } else {
                table(&["DROP REASON", "PER SECOND"], drops);
            }
        }
        prev = cur;
        t_prev = now;
        n += 1;
    }
    Ok(())
}
