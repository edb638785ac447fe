//! `intswitch`: the DPDK telemetry switch.
//!
//! `intswitch --config FILE` runs a configured switch; with no `--config` it
//! runs the embedded demo. `intswitch gen-traffic` writes test pcaps.

use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use control::config::{parse_mac, Config};
use control::control_loop::{self, print_text, RunOptions};
use control::server::Server;
use control::switch::Switch;
use control::traffic::{write_pcap, TrafficSpec};

#[derive(Parser)]
#[command(name = "intswitch", version, about = "DPDK software switch with in-band network telemetry")]
struct Cli {
    /// Configuration file (TOML). Without it the embedded demo runs.
    #[arg(long, short)]
    config: Option<String>,
    /// Print live per-port rates every N seconds (0: off).
    #[arg(long, default_value_t = 1)]
    stats_interval: u64,
    /// Stop after this many seconds, more than 0 (default: run until SIGINT/SIGTERM).
    #[arg(long, value_parser = control::config::parse_positive_seconds)]
    duration: Option<Duration>,
    /// Print the final counters as JSON.
    #[arg(long)]
    json: bool,
    /// Validate the configuration (and that the workers' tables and the shared route tables fit this
    /// machine's memory) and exit.
    #[arg(long)]
    check: bool,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

// (Parsed once at start: the size of gen-traffic's options does not matter.)
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Print a shell completion script for intswitch (bash, zsh or fish).
    Completions { shell: control::cli_docs::Shell },
    /// Print intswitch's man page (roff).
    Manpage,
    /// Write a pcap of UDP test traffic (for net_pcap replay and benchmarks).
    GenTraffic {
        /// The pcap file to write.
        #[arg(long)]
        out: String,
        /// Frames in the file.
        #[arg(long, default_value_t = 1024)]
        count: usize,
        /// Distinct 5-tuples: flow i adds i to --src's low bits and picks its
        /// own source port; frames take the flows in turn (see --zipf, --shuffle).
        #[arg(long, default_value_t = 1)]
        flows: usize,
        /// Frame length without FCS (60 = a 64-byte frame on the wire; a
        /// length under the headers' is padded up to them; at most 65535).
        #[arg(long, default_value_t = 60)]
        size: usize,
        /// Source MAC (the first of --macs).
        #[arg(long, default_value = "02:00:00:00:00:01")]
        src_mac: String,
        /// Destination MAC: the switch port's for a router (the first of --dst-macs).
        #[arg(long, default_value = "02:00:00:00:00:02")]
        dst_mac: String,
        /// Source address of flow 0 (IPv4 or IPv6; see --v6-share for a mix).
        #[arg(long, default_value = "10.0.1.10")]
        src: IpAddr,
        /// Destination address (of flow 0 with --vary-dst).
        #[arg(long, default_value = "10.0.2.10")]
        dst: IpAddr,
        /// Vary the destination address per flow too.
        #[arg(long)]
        vary_dst: bool,
        /// Frames already carry INT-MD with this many hops (UDP port
        /// presence), or MIN..MAX: each flow draws its count.
        #[arg(long)]
        int_hops: Option<String>,
        /// With --int-hops: the share of flows (0-1) that carry no INT.
        #[arg(long, default_value_t = 0.0, requires = "int_hops")]
        background_share: f64,
        /// Distinct source MACs (--src-mac plus 0..N in its low bytes; flow i uses i mod N).
        #[arg(long, default_value_t = 1)]
        macs: usize,
        /// Distinct destination MACs (--dst-mac plus 0..N; each flow draws one).
        #[arg(long, default_value_t = 1)]
        dst_macs: usize,
        /// Tag the flows with K VLANs (IDs 100..100+K, flow i in 100 + i mod K).
        #[arg(long, default_value_t = 0)]
        vlans: u16,
        /// Frame sizes on the wire, FCS included, drawn per packet: `imix`
        /// (64:7,594:4,1518:1) or SIZE[:WEIGHT],... (replaces --size).
        #[arg(long)]
        sizes: Option<String>,
        /// Flow popularity: Zipf with this exponent (else every flow alike).
        #[arg(long)]
        zipf: Option<f64>,
        /// Shuffle the packet order with this seed (else flows take turns).
        #[arg(long)]
        shuffle: Option<u64>,
        /// Share of TCP flows (0-1; ports 80 and 443).
        #[arg(long, default_value_t = 0.0)]
        tcp_share: f64,
        /// Share of IPv6 flows (0-1; from 2001:db8:1::10 to 2001:db8:2::/48).
        #[arg(long, default_value_t = 0.0)]
        v6_share: f64,
        /// Destinations drawn over the prefixes in FILE (ADDR/LEN a line;
        /// flow i goes to prefix i mod N of its IP version).
        #[arg(long)]
        dst_spread: Option<String>,
        /// Share of frames (0-1) sent to the broadcast MAC.
        #[arg(long, default_value_t = 0.0)]
        broadcast_share: f64,
        /// Instructions of that INT header (names as in the config's watch
        /// rules; with --int-hops or --int-values) [default:
        /// node_id,l1_ports,hop_latency,queue,ingress_ts].
        #[arg(long, value_delimiter = ',')]
        int_instructions: Option<Vec<String>>,
        /// INT UDP port (with --int-hops, --int-values or --gpint-probes) [default: 17768].
        #[arg(long, conflicts_with = "int_dscp", value_parser = clap::value_parser!(u16).range(1..))]
        int_port: Option<u16>,
        /// Remaining hop count the INT header leaves (with --int-hops or
        /// --int-values) [default: 4].
        #[arg(long)]
        int_rhc: Option<u8>,
        /// INT by DSCP presence with this codepoint (NPT 0) instead of the UDP port.
        #[arg(long, value_parser = control::config::parse_u8_any, requires = "int_hops")]
        int_dscp: Option<u8>,
        /// The INT header's Domain Specific ID (e.g. a label domain's 0x4c42: label packets).
        #[arg(long, default_value = "0", value_parser = control::config::parse_u16_any, requires = "int_hops")]
        int_domain_id: u16,
        /// The frames are GPINT probes into a transit switch's p0 (--count
        /// probes, each a distinct request and attempt; SR: out
        /// --gpint-next-port, then the monitor; --v6-share, --int-port,
        /// --src-mac, --dst-mac and --shuffle as seed apply).
        #[arg(long, conflicts_with_all = GPINT_IGNORES)]
        gpint_probes: bool,
        /// Each probe's feedback from the next hop follows it.
        #[arg(long, requires = "gpint_probes")]
        gpint_feedbacks: bool,
        /// Probes between one and its feedback.
        #[arg(long, default_value_t = 8, requires = "gpint_feedbacks")]
        gpint_feedback_lag: usize,
        /// The switch's port index the probes leave by.
        #[arg(long, default_value_t = 1, requires = "gpint_probes")]
        gpint_next_port: u8,
        /// Port RX counters each probe collects at the switch.
        #[arg(long, default_value_t = 2, requires = "gpint_probes")]
        gpint_mea: u8,
        /// Monitors (distinct source addresses) the probes come from.
        #[arg(long, default_value_t = 16, requires = "gpint_probes")]
        gpint_monitors: usize,
        /// `gpint.udp_port` of the domain.
        #[arg(long, default_value_t = 17900, requires = "gpint_probes")]
        gpint_udp_port: u16,
        /// `gpint.domain_id` of the domain.
        #[arg(long, default_value = "0x6701", value_parser = control::config::parse_u16_any, requires = "gpint_probes")]
        gpint_domain_id: u16,
        /// INT frames whose hop values follow a model (README "Telemetry
        /// traces"): exp, or the microburst models web, cache, hadoop.
        /// --count packets over --flows flows (split evenly, or by --zipf),
        /// --int-hops hops (default 5) on --int-paths paths,
        /// --int-instructions, --int-rhc, --int-port; --shuffle is the seed.
        #[arg(long, conflicts_with_all = INT_VALUES_IGNORES)]
        int_values: Option<String>,
        /// Paths the --int-values flows take (one flow in eight changes
        /// path halfway).
        #[arg(long, default_value_t = 4, requires = "int_values")]
        int_paths: usize,
        /// With --int-values: write the ground truth (per-flow aggregates,
        /// default histograms, bursts) as JSON to FILE.
        #[arg(long, requires = "int_values")]
        truth: Option<String>,
    },
}

/// What `gen-traffic --gpint-probes` does not read: taken with it, refused.
const GPINT_IGNORES: [&str; 19] = [
    "flows",
    "size",
    "src",
    "dst",
    "vary_dst",
    "int_hops",
    "macs",
    "dst_macs",
    "vlans",
    "sizes",
    "zipf",
    "tcp_share",
    "dst_spread",
    "broadcast_share",
    "int_instructions",
    "int_rhc",
    "int_dscp",
    "int_values",
    "int_domain_id",
];

/// What `gen-traffic --int-values` does not read (its model draws the rest).
const INT_VALUES_IGNORES: [&str; 17] = [
    "size",
    "src",
    "dst",
    "vary_dst",
    "macs",
    "dst_macs",
    "vlans",
    "sizes",
    "tcp_share",
    "v6_share",
    "dst_spread",
    "broadcast_share",
    "background_share",
    "src_mac",
    "dst_mac",
    "int_dscp",
    "int_domain_id",
];

/// The INT header gen-traffic writes without --int-instructions.
const DEFAULT_INT_INSTRUCTIONS: [&str; 5] = ["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts"];

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("intswitch: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `N` or `MIN..MAX` hops.
fn parse_hops(s: &str) -> Result<(u8, u8), String> {
    let n = |x: &str| x.trim().parse::<u8>().map_err(|_| format!("--int-hops {s}: need N or MIN..MAX (1-255)"));
    let (min, max) = match s.split_once("..") {
        Some((a, b)) => (n(a)?, n(b)?),
        None => (n(s)?, n(s)?),
    };
    if min == 0 || min > max {
        return Err(format!("--int-hops {s}: need 1 <= MIN <= MAX"));
    }
    Ok((min, max))
}

fn run(cli: Cli) -> Result<(), String> {
    use clap::CommandFactory;
    match &cli.cmd {
        Some(Cmd::Completions { shell }) => {
            control::cli_docs::completions(Cli::command(), *shell, &mut std::io::stdout());
            return Ok(());
        }
        Some(Cmd::Manpage) => {
            return control::cli_docs::manpage(Cli::command(), &mut std::io::stdout()).map_err(|e| e.to_string())
        }
        _ => {}
    }
    if let Some(Cmd::GenTraffic {
        out,
        count,
        flows,
        size,
        src_mac,
        dst_mac,
        src,
        dst,
        vary_dst,
        int_hops,
        int_instructions,
        int_port,
        int_rhc,
        int_dscp,
        int_domain_id,
        background_share,
        macs,
        dst_macs,
        vlans,
        sizes,
        zipf,
        shuffle,
        tcp_share,
        v6_share,
        dst_spread,
        broadcast_share,
        gpint_probes,
        gpint_feedbacks,
        gpint_feedback_lag,
        gpint_next_port,
        gpint_mea,
        gpint_monitors,
        gpint_udp_port,
        gpint_domain_id,
        int_values,
        int_paths,
        truth,
    }) = cli.cmd
    {
        let int_plain = int_hops.is_none() && int_values.is_none();
        if int_plain && !gpint_probes && int_port.is_some() {
            return Err("--int-port: only with --int-hops, --int-values or --gpint-probes".into());
        }
        if int_plain && (int_instructions.is_some() || int_rhc.is_some()) {
            let what = if int_rhc.is_some() { "--int-rhc" } else { "--int-instructions" };
            return Err(format!("{what}: only with --int-hops or --int-values (frames that carry INT)"));
        }
        let int_port = int_port.unwrap_or(control::int::config::DEFAULT_UDP_PORT);
        let int_rhc = int_rhc.unwrap_or(4);
        let int_instructions =
            int_instructions.unwrap_or_else(|| DEFAULT_INT_INSTRUCTIONS.iter().map(|s| s.to_string()).collect());
        if let Some(model) = int_values {
            let t = control::traffic::TelemetryTrace {
                model: control::traffic::Model::parse(&model).map_err(|e| format!("--int-values: {e}"))?,
                flows,
                packets: count,
                zipf,
                hops: match int_hops.as_deref().map(parse_hops).transpose()? {
                    Some((min, max)) if min == max => max,
                    Some(_) => return Err("--int-values: one --int-hops count, not a range".into()),
                    None => 5,
                },
                paths: int_paths,
                bitmap: control::int::config::instruction_bits(&int_instructions)
                    .map_err(|e| format!("--int-instructions: {e}"))?,
                rhc: int_rhc,
                int_port,
                seed: shuffle.unwrap_or(1),
            };
            t.check().map_err(|e| format!("--int-values: {e}"))?;
            let f = std::fs::File::create(&out).map_err(|e| format!("--out {out}: {e}"))?;
            let got = t.write(f).map_err(|e| format!("--out {out}: {e}"))?;
            if let Some(path) = truth {
                let text = serde_json::to_string(&got.json(&t)).map_err(|e| format!("--truth: {e}"))?;
                std::fs::write(&path, text + "\n").map_err(|e| format!("--truth {path}: {e}"))?;
            }
            eprintln!(
                "intswitch gen-traffic: {} packets ({} lost at the bottleneck's buffer), {} bursts",
                got.packets,
                got.dropped,
                got.bursts.len()
            );
            return Ok(());
        }
        if gpint_probes {
            let t = control::traffic::GpintTraffic {
                probes: count,
                feedbacks: gpint_feedbacks,
                feedback_lag: gpint_feedback_lag,
                next_port: gpint_next_port,
                mea_count: gpint_mea,
                monitors: gpint_monitors,
                v6_share,
                int_port,
                gpint_port: gpint_udp_port,
                domain_id: gpint_domain_id,
                src_mac: parse_mac(&src_mac).map_err(|e| format!("--src-mac: {e}"))?,
                dst_mac: parse_mac(&dst_mac).map_err(|e| format!("--dst-mac: {e}"))?,
                seed: shuffle.unwrap_or(1),
            };
            t.check()?;
            let f = std::fs::File::create(&out).map_err(|e| format!("--out {out}: {e}"))?;
            return control::traffic::write_gpint_pcap(&t, f).map_err(|e| format!("--out {out}: {e}"));
        }
        let spec = TrafficSpec {
            count,
            flows,
            frame_len: size,
            src_mac: parse_mac(&src_mac).map_err(|e| format!("--src-mac: {e}"))?,
            dst_mac: parse_mac(&dst_mac).map_err(|e| format!("--dst-mac: {e}"))?,
            src,
            dst,
            vary_dst,
        };
        spec.check()?;
        let (int_min_hops, int_hops) = match int_hops.as_deref().map(parse_hops).transpose()? {
            Some((min, max)) => (Some(min).filter(|&m| m != max), Some(max)),
            None => (None, None),
        };
        let mix = control::traffic::Mix {
            macs,
            dst_macs,
            vlans,
            sizes: sizes
                .as_deref()
                .map(control::traffic::Sizes::parse)
                .transpose()
                .map_err(|e| format!("--sizes: {e}"))?,
            zipf,
            shuffle,
            tcp_share,
            v6_share,
            dst_spread: match dst_spread {
                Some(path) => Some(
                    std::fs::read_to_string(&path)
                        .map_err(|e| e.to_string())
                        .and_then(|t| control::traffic::Prefixes::parse(&t))
                        .map_err(|e| format!("--dst-spread {path}: {e}"))?,
                ),
                None => None,
            },
            broadcast_share,
            int_min_hops,
            background_share,
        };
        mix.check(&spec)?;
        let int = match int_hops {
            Some(hops) => {
                let bitmap = control::int::config::instruction_bits(&int_instructions)
                    .map_err(|e| format!("--int-instructions: {e}"))?;
                let t = control::traffic::IntTraffic {
                    udp_port: int_port,
                    dscp: int_dscp,
                    domain_id: int_domain_id,
                    bitmap,
                    hops,
                    rhc: int_rhc,
                };
                t.check().map_err(|e| format!("--int-hops: {e}"))?;
                Some(t)
            }
            None => None,
        };
        let f = std::fs::File::create(&out).map_err(|e| format!("--out {out}: {e}"))?;
        return match int {
            _ if !mix.is_plain() => control::traffic::write_mixed_pcap(&spec, &mix, int.as_ref(), f),
            Some(t) => control::traffic::write_int_pcap(&spec, &t, f),
            None => write_pcap(&spec, f),
        }
        .map_err(|e| format!("--out {out}: {e}"));
    }
    let demo_dir;
    let config = match &cli.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => {
            demo_dir = std::env::temp_dir().join(format!("intswitch-demo-{}", std::process::id()));
            std::fs::create_dir_all(&demo_dir).map_err(|e| format!("{}: {e}", demo_dir.display()))?;
            let pcap = control::demo::write_traffic(&demo_dir).map_err(|e| format!("demo traffic: {e}"))?;
            println!(
                "intswitch demo: routing {} through p0 (net_pcap, replayed) -> p1 (net_null); Ctrl-C stops",
                pcap.display()
            );
            Config::from_toml(&control::demo::config(&pcap)).map_err(|e| e.to_string())?
        }
    };
    let plan = config.validate().map_err(|e| e.to_string())?;
    if cli.check {
        // The tables against this machine's memory, as at start.
        let workers = plan.workers.len().max(1);
        control::memory_budget::check(&plan, workers, control::memory_budget::mem_available())
            .map_err(|e| e.to_string())?;
        println!("configuration is valid");
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signal handler: {e}"))?;
    }
    // The control socket is bound first: a second switch on the same socket
    // fails here, before it touches DPDK.
    let c = &plan.raw.control;
    let server = Server::bind(&c.socket_path(&plan.raw.name), c.metrics_addr().as_deref())?;
    let mut sw = Switch::start(plan)?;
    let opts = RunOptions { stats_interval_s: cli.stats_interval, duration: cli.duration, json: cli.json };
    eprintln!("intswitch: control socket {}", server.socket_path().display());
    if let Some(a) = server.metrics_addr {
        eprintln!("intswitch: metrics http://{a}/metrics");
    }
    eprintln!("intswitch: running ({} ports); SIGINT/SIGTERM stops", sw.ports().len());
    let res = control_loop::run(&mut sw, &opts, &stop, Some(&server));
    let fin = sw.stop();
    if opts.json {
        println!("{}", serde_json::to_string(&fin).map_err(|e| format!("final counters: {e}"))?);
    } else {
        print_text(&fin);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::{parse_hops, run, Cli};
    use clap::Parser;

    /// gen-traffic refuses what its mode would ignore (a trace that looks
    /// mixed and is not: --int-values drew its own frames under --sizes),
    /// before it writes anything.
    #[test]
    fn gen_traffic_refuses_options_its_mode_ignores() {
        let out = std::env::temp_dir().join(format!("intswitch-gen-refused-{}.pcap", std::process::id()));
        let gen = |args: &[&str]| -> Result<(), String> {
            let base = ["intswitch", "gen-traffic", "--out", out.to_str().unwrap(), "--count", "8"];
            let cli = Cli::try_parse_from(base.iter().chain(args)).map_err(|e| e.to_string())?;
            run(cli)
        };
        for (args, says) in [
            (&["--background-share", "0.5"][..], "--int-hops"),
            (&["--int-dscp", "0x17"], "--int-hops"),
            (&["--int-port", "5000"], "--int-port: only with"),
            (&["--int-rhc", "3"], "--int-rhc: only with"),
            (&["--int-instructions", "node_id"], "--int-instructions: only with"),
            (&["--int-hops", "2", "--int-port", "0"], "--int-port"),
            (&["--int-hops", "2", "--int-port", "5000", "--int-dscp", "0x17"], "--int-dscp"),
            (&["--gpint-mea", "3"], "--gpint-probes"),
            (&["--gpint-probes", "--gpint-feedback-lag", "2"], "--gpint-feedbacks"),
            (&["--gpint-probes", "--flows", "5"], "--flows"),
            (&["--gpint-probes", "--gpint-monitors", "0"], "--gpint-monitors"),
            (&["--gpint-probes", "--gpint-udp-port", "17768"], "not the INT port"),
            (&["--int-values", "exp", "--sizes", "imix"], "--sizes"),
            (&["--int-values", "exp", "--v6-share", "0.2"], "--v6-share"),
            (&["--int-paths", "2"], "--int-values"),
            (&["--truth", "t.json"], "--int-values"),
        ] {
            let e = gen(args).expect_err(&args.join(" "));
            assert!(e.contains(says), "{args:?}: {e}");
        }
        assert!(!out.exists(), "nothing written");
    }

    #[test]
    fn hop_counts_and_ranges() {
        assert_eq!(parse_hops("5"), Ok((5, 5)));
        assert_eq!(parse_hops("1..8"), Ok((1, 8)));
        for bad in ["0", "3..2", "0..4", "x", "1..", "300"] {
            assert!(parse_hops(bad).unwrap_err().contains("--int-hops"), "{bad}");
        }
    }
}
