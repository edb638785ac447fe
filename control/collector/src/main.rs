//! `intcollector`: receives Telemetry Report v2.0 packets on UDP, decodes
//! each INT report with its INT-MD stack, prints one line per report (text,
//! or JSON with --json), counts sequence gaps per (node, hw_id) and keeps
//! per-hop latency and queue statistics, printed as a summary at exit.
//! On the same socket it takes AM-PM interval records (JSON lines from the
//! switches' `[ampm]` export), joins those of the MPs of a flow by interval
//! and prints loss and delay per interval.

use std::net::UdpSocket;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use dataplane::int::Presence;
use intcollector::ampm::Joiner;
use intcollector::kafka::Topic;
use intcollector::web::Point;
use intcollector::{decode_packet, Tracker};

mod gpint_cli;
mod label_cli;

#[derive(Parser)]
#[command(
    name = "intcollector",
    version,
    about = "Receive and decode INT telemetry reports (Telemetry Report v2.0 over UDP) and join AM-PM interval records",
    after_help = "Output: one line per report (--json: {node_id, hw_id, seq, flags, flow, hops[...], ...});\n\
at exit (SIGINT/SIGTERM, --count or --duration) a summary: packets, reports, sequence gaps per\n\
(node_id, hw_id), per-hop latency min/mean/max and maximum queue occupancy, datagrams, the\n\
receive calls that took them (recvmmsg, up to 32 buffers a call) and the buffers that held a\n\
sender's whole UDP GSO batch (gro_buffers: the socket has UDP GRO on), drained: datagrams\n\
taken after a signal or --duration asked it to stop (what the socket held then; up to 2 s of\n\
them; a second signal exits at once, status 1, without a summary), and socket_drops: datagrams\n\
the kernel dropped on the socket, its receive buffer (--rcvbuf) full.\n\
AM-PM: one line per flow and interval once the records of --ampm-mps MPs arrived (--json:\n\
{flow, flow_mon_id, interval, start_ns, packets, bytes, loss_packets, loss_bytes, delay_ns,\n\
mean_delay_ns, partial, clock_step, mps[...], segments[...]}; partial: an MP started during the\n\
interval; clock_step: an MP's wall clock stepped, its counters may hold other intervals');\n\
summary: records, records_lost (sequence gaps), duplicate_records (a node's second record of a\n\
FlowMonID and interval: not joined), intervals joined/incomplete/partial/clock_step,\n\
total loss (partial and clock_step intervals left out), mean delay.\n\
INT sink analytics: one line per int_flow, int_event and int_hist record (--json: the record as\n\
the switch sent it); summary (int_flow_summary): records (int_flow), events (int_event),\n\
hist_lines (int_hist), records_lost (gaps in the per-node sequence all three share), bad\n\
records, records by reason, events by name.\n\
INT-label: reports of --label-domain are labels (their inner packets decoded by --label-dscp or\n\
--label-udp-port) and fill the INT database, the newest record per (node ID, egress port) by\n\
label time (older items discarded, counted stale). With --label-switch sockets (or\n\
--active-ports) one int_label_coverage line per --label-window-ms: {start_ns, end_ns, active,\n\
covered_arrival, covered_label, coverage_arrival, coverage_label, missed[[node, port]] (at most 64), newly_active[[node, port]], active_ports[[node, port]], items,\n\
occupation_paper (items x 32 B / bytes sent), occupation_wire (label block bytes on the links /\n\
bytes sent), active_per_node, switch_errors (--label-switch sockets that did not answer),\n\
pro[changes]}; --label-db-lines: an int_label_db line per update;\n\
summary int_label_summary (reports, items, updated, stale, labels_per_report, coverage means and\n\
minimum, occupation, switch_errors, Pro's changes). Kafka topics <prefix>label-db, <prefix>label-coverage;\n\
Redis streams int:label:db, int:label:coverage."
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:32766")]
    listen: String,
    /// UDP port that marks INT in the inner packets (the switches' int.udp_port).
    #[arg(long, default_value_t = 17768, conflicts_with = "int_dscp", value_parser = clap::value_parser!(u16).range(1..))]
    int_port: u16,
    /// The domain marks INT by DSCP instead (int.presence = "dscp"):
    /// VALUE[/MASK], e.g. 0x17 (codepoint, mask 0x3f) or 0x01/0x01 (one bit).
    #[arg(long, value_name = "VALUE[/MASK]")]
    int_dscp: Option<String>,
    /// JSON lines instead of text.
    #[arg(long)]
    json: bool,
    /// Only the summary at exit, no line per report or record
    /// (int_label_coverage lines, one a window, still print).
    #[arg(long)]
    quiet: bool,
    /// Stop after this many reports, joined AM-PM intervals and int_flow / int_event records (1 or more).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Stop after this many seconds (more than 0).
    #[arg(long, value_parser = control::config::parse_positive_seconds)]
    duration: Option<Duration>,
    /// AM-PM: measurement points per flow (initiator, transits, terminator), 2-64.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=64))]
    ampm_mps: u8,
    /// Socket receive buffer in bytes: absorbs report bursts while this
    /// process is not scheduled (above net.core.rmem_max needs root; at
    /// least 4096).
    #[arg(long, default_value_t = 8 << 20, value_name = "BYTES", value_parser = rcvbuf_bytes)]
    rcvbuf: usize,
    /// Also store what it decodes in Redis (redis://HOST:PORT or
    /// redis+unix:///PATH): streams int:reports, int:flows, int:events and
    /// int:histograms (XADD, field r, the JSON line), histogram chunks also
    /// as HSET int:hist:<node ID|e2e>:<metric> <first bin> <counts>.
    /// Batches are pipelined; a store that fails costs dropped, counted
    /// records, never the decoding.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Entries each Redis stream keeps, about (XADD MAXLEN ~; 1 or more).
    #[arg(long, default_value_t = 100_000, requires = "redis", value_parser = clap::value_parser!(u64).range(1..))]
    redis_maxlen: u64,
    /// Also send what it decodes to Kafka (HOST:PORT,...): topics
    /// <prefix>reports, <prefix>events, <prefix>flows, <prefix>histograms,
    /// the JSON line as value, the flow (src:sport>dst:dport/proto) or the
    /// histogram's node ID as key. A full producer queue drops and counts,
    /// never waits; failed deliveries are counted.
    #[arg(long, value_name = "LIST")]
    kafka_brokers: Option<String>,
    /// Prefix of the Kafka topics.
    #[arg(long, default_value = "int-", requires = "kafka_brokers")]
    kafka_topic_prefix: String,
    /// Messages the Kafka producer holds at most while brokers catch up (1 or more).
    #[arg(long, default_value_t = 100_000, requires = "kafka_brokers", value_parser = kafka_queue)]
    kafka_queue: usize,
    /// Serve a live dashboard on ADDR:PORT (e.g. 127.0.0.1:8080): flows
    /// with their path and per-hop latency and queue, AM-PM loss and delay
    /// per interval, report rate and sequence gaps, events, flow-cache
    /// exports, INT-label coverage; pages at /, ticks as server-sent events
    /// at /events, the kept ticks as JSON at /api/ticks, the web side's
    /// counters at /api/stats. One tick every 500 ms.
    #[arg(long, value_name = "ADDR:PORT")]
    web: Option<String>,
    /// Receive (and reach Redis and Kafka) inside network namespace NAME
    /// (/run/netns/NAME, as `ip netns` names them) while the dashboard of
    /// --web stays on the namespace intcollector started in: a collector
    /// on a management network, its dashboard on this host's loopback.
    #[arg(long, value_name = "NAME")]
    netns: Option<String>,
    /// Ticks the dashboard keeps (points per series; 600 = 5 minutes).
    #[arg(long, default_value_t = 600, requires = "web", value_parser = clap::value_parser!(u64).range(2..=100_000))]
    web_points: u64,
    /// Flows the dashboard draws (reports of further flows are counted).
    #[arg(long, default_value_t = 32, requires = "web", value_parser = clap::value_parser!(u64).range(1..=1024))]
    web_flows: u64,
    #[command(flatten)]
    label: label_cli::LabelArgs,
}

#[derive(clap::Subcommand)]
enum Command {
    /// GPINT probe monitoring: plan probe paths, make topologies.
    #[command(subcommand)]
    Gpint(gpint_cli::Gpint),
    /// Print a shell completion script for intcollector (bash, zsh or fish).
    Completions { shell: control::cli_docs::Shell },
    /// Print intcollector's man page (roff).
    Manpage,
    /// Chart what intcollector printed with --json: AM-PM loss and delay
    /// per interval per flow (joined interval lines), the hop latency CDF
    /// per node (report lines), INT-label coverage per window
    /// (int_label_coverage lines), and an evaluation's own line charts
    /// (plot_point lines: {"type": "plot_point", "chart", "x_label",
    /// "y_label", "series", "x", "y"}, one panel per chart). Other JSON
    /// lines are skipped; a line that is not JSON is an error naming it.
    Plot {
        /// JSON lines (intcollector --json output; - for standard input).
        #[arg(long = "in", value_name = "RECORDS.jsonl")]
        input: String,
        /// The chart: FILE.svg or FILE.png.
        #[arg(long, value_name = "FILE.png|svg")]
        out: std::path::PathBuf,
        /// Which panels (auto: every one the input has records for).
        #[arg(long, value_enum, default_value = "auto")]
        kind: intcollector::plot::Kind,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::Gpint(g)) => gpint_cli::run(g),
        Some(Command::Plot { input, out, kind }) => plot(input, out, *kind),
        Some(Command::Completions { shell }) => {
            use clap::CommandFactory;
            control::cli_docs::completions(Cli::command(), *shell, &mut std::io::stdout());
            Ok(())
        }
        Some(Command::Manpage) => {
            use clap::CommandFactory;
            control::cli_docs::manpage(Cli::command(), &mut std::io::stdout()).map_err(|e| e.to_string())
        }
        None => run(&cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("intcollector: {e}");
            ExitCode::FAILURE
        }
    }
}

fn plot(input: &str, out: &std::path::Path, kind: intcollector::plot::Kind) -> Result<(), String> {
    use intcollector::plot::{draw, Records};
    let rec = if input == "-" {
        Records::read(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(input).map_err(|e| format!("--in {input}: {e}"))?;
        Records::read(std::io::BufReader::new(f))
    }
    .map_err(|e| format!("--in {input}: {e}"))?;
    let panels = draw(&rec, kind, out)?;
    eprintln!(
        "intcollector: {} ({panels:?}; {} AM-PM flows, {} hop nodes, {} coverage windows, {} charts, {} other lines skipped)",
        out.display(),
        rec.ampm.len(),
        rec.hop_latency.len(),
        rec.coverage.len(),
        rec.charts.len(),
        rec.other
    );
    Ok(())
}

/// An INT-label line (coverage or database update) to Redis, Kafka and
/// the output.
fn label_line(
    v: &serde_json::Value,
    topic: Topic,
    key: &str,
    redis: &mut Option<intcollector::redis::RedisSink>,
    kafka: &Option<intcollector::kafka::KafkaSink>,
    out: Option<&mut impl std::io::Write>,
) {
    let line = v.to_string();
    if let Some(r) = redis {
        r.xadd(if topic == Topic::LabelDb { "int:label:db" } else { "int:label:coverage" }, &line);
    }
    if let Some(k) = kafka {
        k.send(topic, key, &line);
    }
    if let Some(o) = out {
        let _ = writeln!(o, "{line}");
    }
}

/// Nanoseconds since the Unix epoch (the switches' label times are too).
pub(crate) fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Datagrams one receive call takes at most.
const RECV_BATCH: usize = 32;

/// How long, at most, a stopping collector keeps taking what its socket
/// holds (a sender that never pauses would keep it forever).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// How often, at least, a Redis batch goes out while records arrive.
const REDIS_FLUSH: Duration = Duration::from_millis(20);

/// An analytics record into its Redis stream (histogram chunks into their
/// hash too).
fn to_redis(r: &mut intcollector::redis::RedisSink, kind: &str, v: &serde_json::Value, line: &str) {
    let stream = match kind {
        "int_flow" => "int:flows",
        "int_event" => "int:events",
        _ => "int:histograms",
    };
    r.xadd(stream, line);
    if kind == "int_hist" {
        let node = v["node_id"].as_u64().map_or("e2e".to_string(), |n| n.to_string());
        let key = format!("int:hist:{node}:{}", v["metric"].as_str().unwrap_or("unknown"));
        r.hset(&key, &v["first"].to_string(), &v["counts"].to_string());
    }
}

fn text_line(v: &serde_json::Value) -> String {
    let f = &v["flow"];
    let mut line = format!(
        "node {} seq {} flags [{}] {}:{} -> {}:{} proto {}",
        v["node_id"],
        v["seq"],
        v["flags"].as_str().unwrap_or(""),
        f["src"].as_str().unwrap_or("?"),
        f["src_port"],
        f["dst"].as_str().unwrap_or("?"),
        f["dst_port"],
        f["proto"]
    );
    if let Some(e) = v["error"].as_str() {
        line.push_str(&format!(" (undecoded: {e})"));
    }
    for h in v["hops"].as_array().into_iter().flatten() {
        line.push_str(&format!(
            " | node {} port {}->{} latency {} ns queue {}/{} ts {}..{}",
            h["node_id"],
            h["ingress_port"],
            h["egress_port"],
            h["hop_latency_ns"],
            h["queue_id"],
            h["queue_occupancy"],
            h["ingress_ts_ns"],
            h["egress_ts_ns"]
        ));
    }
    line
}

fn ampm_line(v: &serde_json::Value) -> String {
    format!(
        "ampm flow {} (id {}) interval {}: {} packets, loss {} packets {} bytes, delay {} ns, mean delay {} ns",
        v["flow"].as_str().unwrap_or("?"),
        v["flow_mon_id"],
        v["interval"],
        v["packets"],
        v["loss_packets"],
        v["loss_bytes"],
        v["delay_ns"],
        v["mean_delay_ns"]
    ) + if v["partial"] == true { " (partial: an MP started during it)" } else { "" }
        + if v["clock_step"] == true { " (clock_step: an MP's wall clock stepped)" } else { "" }
}

/// `--int-dscp VALUE[/MASK]` -> the presence method to decode inner packets by.
fn presence(cli: &Cli) -> Result<Presence, String> {
    let Some(arg) = &cli.int_dscp else { return Ok(Presence::UdpPort(cli.int_port)) };
    let num = |t: &str| {
        let t = t.trim();
        let r = match t.strip_prefix("0x") {
            Some(h) => u8::from_str_radix(h, 16),
            None => t.parse(),
        };
        r.map_err(|_| format!("--int-dscp: '{t}' is not a number 0-63"))
    };
    let (value, mask) = match arg.split_once('/') {
        Some((v, m)) => (num(v)?, num(m)?),
        None => (num(arg)?, 0x3f),
    };
    control::int::config::dscp_presence(("--int-dscp value", "--int-dscp mask"), value, mask)
        .map_err(|e| format!("{}: {}", e.key, e.reason))
}

/// Asks for `want` bytes of socket receive buffer; past net.core.rmem_max
/// the kernel clamps silently, so root retries with SO_RCVBUFFORCE. Returns
/// what the socket has (the kernel reports twice the payload it grants).
/// `--rcvbuf`: 0 or a few bytes would shrink the socket's buffer to the
/// kernel's least (1152 bytes), dropping all but a report or two a burst.
fn rcvbuf_bytes(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 4096 => Ok(n),
        Ok(n) => Err(format!("{n} is below 4096 bytes")),
        Err(_) => Err(format!("'{s}' is not a number of bytes")),
    }
}

/// librdkafka's queue.buffering.max.messages takes 1 to 2^31 - 1 here.
fn kafka_queue(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=i32::MAX as usize).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is not in 1..={}", i32::MAX)),
        Err(_) => Err(format!("'{s}' is not a number of messages")),
    }
}

fn grow_receive_buffer(sock: &UdpSocket, want: usize) -> usize {
    use nix::sys::socket::{getsockopt, setsockopt, sockopt};
    let have = || getsockopt(sock, sockopt::RcvBuf).map(|b| b / 2).unwrap_or(0);
    let _ = setsockopt(sock, sockopt::RcvBuf, &want);
    if have() < want {
        let _ = setsockopt(sock, sockopt::RcvBufForce, &want);
    }
    have()
}

/// Moves this thread (the decode loop, and threads it starts later) into
/// network namespace `name`; sockets opened before stay where they are.
fn enter_netns(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(format!("--netns: '{name}' is not a namespace name"));
    }
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path).map_err(|e| format!("--netns: {path}: {e}"))?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| format!("--netns {name}: setns: {e}"))
}

fn run(cli: &Cli) -> Result<(), String> {
    let presence = presence(cli)?;
    // Options are checked before anything binds: a refused one is the
    // only line printed.
    let redis_target = match &cli.redis {
        Some(url) => Some(intcollector::redis::Target::parse(url).map_err(|e| format!("--redis: {e}"))?),
        None => None,
    };
    let mut lab = label_cli::LabelRun::new(&cli.label, realtime_ns())?;
    // The dashboard binds first: it stays in the namespace started in.
    let web = match &cli.web {
        Some(addr) => {
            let w = intcollector::web::start(addr, cli.web_points as usize, cli.web_flows as usize)?;
            eprintln!("intcollector: dashboard on http://{}/", w.addr);
            Some(w)
        }
        None => None,
    };
    if let Some(n) = &cli.netns {
        enter_netns(n)?;
    }
    let sock = UdpSocket::bind(&cli.listen).map_err(|e| format!("--listen {}: {e}", cli.listen))?;
    sock.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
    let rcvbuf = grow_receive_buffer(&sock, cli.rcvbuf);
    if rcvbuf < cli.rcvbuf {
        eprintln!(
            "intcollector: receive buffer {rcvbuf} bytes, not the {} asked for (raise net.core.rmem_max or run as root); \
             report bursts beyond it are dropped by the kernel and show up as sequence gaps",
            cli.rcvbuf
        );
    }
    // The switch's exporters send GSO batches: taken whole, they cost the
    // kernel one socket buffer instead of one a datagram.
    let gro = intcollector::recv::enable_gro(&sock);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while draining exits at once (status 1, no summary):
        // registered first, it sees the flag the first signal set.
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .map_err(|e| format!("signal handler: {e}"))?;
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signal handler: {e}"))?;
    }
    eprintln!(
        "intcollector: listening on {} (receive buffer {rcvbuf} bytes, UDP GRO {})",
        sock.local_addr().map_err(|e| e.to_string())?,
        if gro { "on" } else { "off: refused by the kernel" }
    );
    let mut web_totals_at = Instant::now();
    let started = Instant::now();
    let mut t = Tracker::default();
    let mut am = Joiner::new(cli.ampm_mps as usize);
    let mut fl = intcollector::flows::FlowRecords::default();
    let mut redis = redis_target.map(|target| intcollector::redis::RedisSink::new(target, cli.redis_maxlen));
    let kafka = match &cli.kafka_brokers {
        Some(b) => Some(
            intcollector::kafka::KafkaSink::new(b, &cli.kafka_topic_prefix, cli.kafka_queue)
                .map_err(|e| format!("--kafka-brokers: {e}"))?,
        ),
        None => None,
    };
    // Redis batches go out at least this often.
    let mut last_flush = Instant::now();
    let mut rx = intcollector::recv::BatchReceiver::new(RECV_BATCH);
    // A report's JSON and its Kafka key, written into reused buffers.
    let (mut js, mut key) = (String::with_capacity(4096), String::with_capacity(128));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    use std::io::Write;
    // Asked to stop (a signal, --duration): the datagrams the socket already
    // holds were sent before the stop and are still taken, decoded and
    // counted, until the socket is empty or DRAIN_LIMIT passes.
    let mut draining: Option<(Instant, u64)> = None;
    loop {
        if draining.is_none() && (stop.load(Ordering::Relaxed) || cli.duration.is_some_and(|d| started.elapsed() >= d))
        {
            sock.set_nonblocking(true).map_err(|e| format!("draining the socket: {e}"))?;
            draining = Some((Instant::now(), rx.datagrams));
        }
        if draining.is_some_and(|(at, _)| at.elapsed() >= DRAIN_LIMIT) {
            eprintln!(
                "intcollector: stopped draining after {} s; datagrams still queued are not counted",
                DRAIN_LIMIT.as_secs()
            );
            break;
        }
        if cli.count.is_some_and(|c| t.reports + am.joined + fl.records + fl.events >= c) {
            break;
        }
        if let Some(k) = &kafka {
            k.poll();
        }
        for v in lab.tick(realtime_ns()) {
            // (Printed with --quiet too: one line a window, not a report.)
            label_line(&v, Topic::LabelCoverage, "coverage", &mut redis, &kafka, Some(&mut out));
            if let Some(w) = &web {
                w.send(Point::LabelCoverage(v));
            }
        }
        if let Some(w) = web.as_ref().filter(|_| web_totals_at.elapsed() >= intcollector::web::TICK / 2) {
            web_totals_at = Instant::now();
            w.send(Point::Totals(intcollector::web::Totals {
                packets: t.packets,
                reports: t.reports,
                bad_packets: t.bad_packets,
                report_gaps: t.gaps.values().sum(),
                ampm_records_lost: am.records_lost,
                analytics_records_lost: fl.records_lost,
            }));
        }
        let batch = match rx.recv(&sock) {
            Ok(n) => n,
            // (Interrupted: a signal; the loop checks whether it was a stop.)
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
                ) =>
            {
                let _ = out.flush();
                if let Some(r) = &mut redis {
                    r.flush();
                    last_flush = Instant::now();
                }
                if draining.is_some() && e.kind() != std::io::ErrorKind::Interrupted {
                    break;
                }
                continue;
            }
            Err(e) => return Err(format!("receive: {e}")),
        };
        if let Some(r) = redis.as_mut().filter(|_| last_flush.elapsed() >= REDIS_FLUSH) {
            r.flush();
            last_flush = Instant::now();
        }
        for i in 0..batch {
            let dgram = rx.get(i);
            let n = dgram.len();
            if n > 0 && dgram[0] == b'{' {
                let text = String::from_utf8_lossy(dgram);
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    // INT sink analytics records; anything else is AM-PM's.
                    let kind = ["int_flow", "int_event", "int_hist"]
                        .into_iter()
                        .find(|k| line.starts_with(&format!("{{\"type\":\"{k}\"")));
                    if let Some(kind) = kind {
                        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
                        let line = &*intcollector::flows::unpadded(line);
                        let ok = fl.record(&v).is_ok();
                        if let (Some(w), true) = (&web, ok) {
                            match kind {
                                "int_event" => w.send(Point::Event(v.clone())),
                                "int_flow" => w.send(Point::FlowRecord(v.clone())),
                                _ => {}
                            }
                        }
                        if let (Some(r), true) = (&mut redis, ok) {
                            to_redis(r, kind, &v, line);
                        }
                        if let (Some(k), true) = (&kafka, ok) {
                            let topic = match kind {
                                "int_flow" => Topic::Flows,
                                "int_event" => Topic::Events,
                                _ => Topic::Histograms,
                            };
                            k.send(topic, &intcollector::kafka::key_of(&v), line);
                        }
                        if ok && !cli.quiet {
                            let l = match (cli.json, kind) {
                                (true, _) => v.to_string(),
                                (false, "int_event") => intcollector::flows::event_line(&v),
                                (false, "int_hist") => intcollector::flows::hist_line(&v),
                                (false, _) => intcollector::flows::text_line(&v),
                            };
                            let _ = writeln!(out, "{l}");
                        }
                        continue;
                    }
                    for v in am.datagram(line) {
                        if let Some(w) = &web {
                            w.send(Point::Ampm(v.clone()));
                        }
                        if !cli.quiet {
                            let l = if cli.json { v.to_string() } else { ampm_line(&v) };
                            let _ = writeln!(out, "{l}");
                        }
                    }
                }
                continue;
            }
            match decode_packet(dgram, presence) {
                Ok(mut reports) => {
                    if let Some(r) = reports.first() {
                        t.packet(r.node_id, r.hw_id, r.seq);
                    }
                    let arrival = realtime_ns();
                    for r in &mut reports {
                        if r.domain_id != lab.domain {
                            continue;
                        }
                        // A label report: its inner packet by the label domain's presence.
                        r.label = true;
                        if lab.presence != presence {
                            r.stack = intcollector::decode_inner(&dgram[r.inner.clone()], lab.presence);
                        }
                        if let Ok(s) = &r.stack {
                            for v in lab.report(s, arrival) {
                                let key = format!("{}:{}", v["node_id"], v["port"]);
                                let print = (!cli.quiet).then_some(&mut out);
                                label_line(&v, Topic::LabelDb, &key, &mut redis, &kafka, print);
                            }
                        }
                    }
                    for r in &reports {
                        t.report(r);
                        if let Some(p) = web.as_ref().and_then(|_| intcollector::web::ReportPoint::of(r)) {
                            web.as_ref().expect("checked").send(Point::Report(p));
                        }
                        if redis.is_some() || kafka.is_some() || (!cli.quiet && cli.json) {
                            js.clear();
                            r.write_json(&mut js);
                        }
                        if let Some(rs) = &mut redis {
                            rs.xadd("int:reports", &js);
                        }
                        if let Some(k) = &kafka {
                            intcollector::kafka::report_key(r, &mut key);
                            k.send(Topic::Reports, &key, &js);
                        }
                        if !cli.quiet {
                            if cli.json {
                                let _ = writeln!(out, "{js}");
                            } else {
                                let _ = writeln!(out, "{}", text_line(&r.json()));
                            }
                        }
                    }
                }
                Err(e) => {
                    t.bad_packets += 1;
                    if !cli.quiet {
                        let line = if cli.json {
                            serde_json::json!({ "error": e, "bytes": n }).to_string()
                        } else {
                            format!("bad report packet ({n} bytes): {e}")
                        };
                        let _ = writeln!(out, "{line}");
                    }
                }
            }
        }
    }
    if let Some(r) = &mut redis {
        r.flush();
        let s = r.summary();
        if cli.json {
            let _ = writeln!(out, "{s}");
        } else {
            let c = &r.counters;
            let _ = writeln!(
                out,
                "redis written {} errors {} dropped {} connects {} connection lost {}",
                c.written, c.errors, c.dropped, c.connects, c.connection_lost
            );
        }
    }
    if let Some(k) = &kafka {
        k.finish();
        let s = k.summary();
        if cli.json {
            let _ = writeln!(out, "{s}");
        } else {
            let c = &s["kafka_summary"];
            let _ = writeln!(
                out,
                "kafka queued {} delivered {} delivery failed {} queue full {} send errors {} undelivered at exit {}",
                c["queued"],
                c["delivered"],
                c["delivery_failed"],
                c["queue_full"],
                c["send_errors"],
                c["undelivered_at_exit"]
            );
        }
    }
    if am.records > 0 {
        let s = am.summary();
        if cli.json {
            let _ = writeln!(out, "{s}");
        } else {
            let a = &s["ampm_summary"];
            let _ = writeln!(
                out,
                "ampm records {} lost {} bad {} duplicate {}; intervals joined {} incomplete {} partial {} clock_step {}; loss {} packets {} bytes; mean delay {} ns",
                a["records"], a["records_lost"], a["bad_records"], a["duplicate_records"], a["intervals_joined"], a["intervals_incomplete"],
                a["intervals_partial"], a["intervals_clock_step"],
                a["loss_packets"], a["loss_bytes"], a["delay_mean_ns"]
            );
        }
    }
    if lab.db.reports > 0 || !cli.label.label_switches.is_empty() || cli.label.active_ports.is_some() {
        let s = lab.summary();
        if cli.json {
            let _ = writeln!(out, "{s}");
        } else {
            let l = &s["int_label_summary"];
            let _ = writeln!(
                out,
                "int_label reports {} items {} updated {} stale {} ports {}; windows {} coverage arrival mean {} min {} label mean {}; occupation paper {} wire {}; switch errors {}",
                l["reports"], l["items"], l["updated"], l["stale"], l["ports"], l["windows"],
                l["coverage_arrival_mean"], l["coverage_arrival_min"], l["coverage_label_mean"],
                l["occupation_paper"], l["occupation_wire"], l["switch_errors"]
            );
        }
    }
    if fl.records + fl.events + fl.hist_lines + fl.bad_records > 0 {
        let s = fl.summary();
        if cli.json {
            let _ = writeln!(out, "{s}");
        } else {
            let f = &s["int_flow_summary"];
            let _ = writeln!(
                out,
                "int_flow records {} int_event records {} int_hist lines {} lost {} bad {}; by reason {}; events {}",
                f["records"],
                f["events"],
                f["hist_lines"],
                f["records_lost"],
                f["bad_records"],
                f["by_reason"],
                f["by_event"]
            );
        }
    }
    if let Some(w) = web {
        let s = serde_json::json!({ "web_summary": w.summary() });
        if cli.json {
            let _ = writeln!(out, "{s}");
        } else {
            let c = &s["web_summary"];
            let _ = writeln!(
                out,
                "web requests {} refused {} points skipped {} ticks a browser missed {}",
                c["requests"], c["refused"], c["skipped"], c["client_dropped"]
            );
        }
        w.stop();
    }
    let mut s = t.summary();
    // Every datagram, the receive calls (recvmmsg) that took them, and the
    // buffers that held a sender's GSO batch.
    s["summary"]["datagrams"] = rx.datagrams.into();
    s["summary"]["recv_batches"] = rx.batches.into();
    s["summary"]["gro_buffers"] = rx.gro_buffers.into();
    s["summary"]["drained"] = draining.map_or(0, |(_, from)| rx.datagrams - from).into();
    // What never reached a datagram count: the kernel dropped it on the
    // socket, its receive buffer full (null where /proc does not say).
    s["summary"]["socket_drops"] = intcollector::recv::socket_drops(&sock).into();
    if cli.json {
        let _ = writeln!(out, "{s}");
    } else {
        let sm = &s["summary"];
        let _ = writeln!(
            out,
            "packets {} reports {} bad {}; datagrams {} in {} receive calls ({} GRO buffers), {} taken after the stop, \
             {} dropped by the kernel (receive buffer full)",
            sm["packets"],
            sm["reports"],
            sm["bad_packets"],
            sm["datagrams"],
            sm["recv_batches"],
            sm["gro_buffers"],
            sm["drained"],
            sm["socket_drops"]
        );
        for g in sm["sequence"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "node {} hw_id {}: {} sequence gaps", g["node_id"], g["hw_id"], g["gaps"]);
        }
        for h in sm["hops"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "hop node {}: {} samples, latency min {} mean {} max {} ns, queue max {}",
                h["node_id"],
                h["samples"],
                h["latency_min_ns"],
                h["latency_mean_ns"],
                h["latency_max_ns"],
                h["queue_max"]
            );
        }
    }
    let _ = out.flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_receive_buffer_below_4096_bytes_is_refused() {
        let parse = |v: &str| Cli::try_parse_from(["intcollector", "--rcvbuf", v]).map(|c| c.rcvbuf);
        assert_eq!(parse("65536").ok(), Some(65536));
        assert_eq!(parse("4096").ok(), Some(4096));
        for bad in ["0", "4095", "8M"] {
            let e = parse(bad).expect_err(bad).to_string();
            assert!(e.contains("--rcvbuf"), "{bad}: {e}");
        }
    }

    /// Values that would stop at once, store nothing or match no port are
    /// refused, and so is an option whose feature is not asked for (it
    /// would be ignored) or that contradicts another (one would be).
    #[test]
    fn options_that_would_do_nothing_or_be_ignored_are_refused() {
        let parse = |args: &[&str]| Cli::try_parse_from(std::iter::once("intcollector").chain(args.iter().copied()));
        for (args, names) in [
            (&["--count", "0"][..], "--count"),
            (&["--duration", "0"], "--duration"),
            (&["--int-port", "0"], "--int-port"),
            (&["--label-udp-port", "0"], "--label-udp-port"),
            (&["--redis", "redis://127.0.0.1:6379", "--redis-maxlen", "0"], "--redis-maxlen"),
            (&["--kafka-brokers", "127.0.0.1:9092", "--kafka-queue", "0"], "--kafka-queue"),
            (&["--kafka-brokers", "127.0.0.1:9092", "--kafka-queue", "2147483648"], "--kafka-queue"),
            (&["--label-pro", "shift", "--label-switch", "/x", "--label-pro-k", "0"], "--label-pro-k"),
            (&["--redis-maxlen", "10"], "--redis"),
            (&["--kafka-queue", "10"], "--kafka-brokers"),
            (&["--kafka-topic-prefix", "t-"], "--kafka-brokers"),
            (&["--web-points", "100"], "--web"),
            (&["--web-flows", "8"], "--web"),
            (&["--label-pro-k", "3"], "--label-pro"),
            (&["--int-port", "5000", "--int-dscp", "0x17"], "--int-dscp"),
            (&["--label-udp-port", "5000", "--label-dscp", "0x18"], "--label-dscp"),
        ] {
            let e = parse(args).map(|_| ()).expect_err(&args.join(" ")).to_string();
            assert!(e.contains(names), "{args:?}: {e}");
        }
        for args in [
            &["--count", "1", "--duration", "0.5"][..],
            &["--int-dscp", "0x17"],
            &["--label-udp-port", "5000"],
            &["--redis", "redis://127.0.0.1:6379", "--redis-maxlen", "10"],
            &["--kafka-brokers", "127.0.0.1:9092", "--kafka-queue", "10", "--kafka-topic-prefix", ""],
            &["--web", "127.0.0.1:0", "--web-points", "100", "--web-flows", "8"],
        ] {
            assert!(parse(args).is_ok(), "{args:?}");
        }
    }

    /// `gpint topo`, `plan` and `run` as an operator types them: a run's
    /// mistakes are refused before it binds a socket or sends a probe (an
    /// endless --duration panicked; a misspelt --via switch was ignored).
    #[test]
    fn gpint_commands_refuse_mistakes_by_name() {
        let dir = std::env::temp_dir().join(format!("intcollector-gpint-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (topo, plan) = (dir.join("ws6.toml"), dir.join("plan.json"));
        let (topo, plan) = (topo.to_str().unwrap(), plan.to_str().unwrap());
        let run = |args: &[&str]| -> Result<(), String> {
            let cli = Cli::try_parse_from(std::iter::once("intcollector").chain(args.iter().copied()))
                .map_err(|e| e.to_string())?;
            match &cli.command {
                Some(Command::Gpint(g)) => gpint_cli::run(g),
                _ => unreachable!("a gpint command"),
            }
        };
        run(&["gpint", "topo", "ws", "--n", "6", "--out", topo]).unwrap();
        run(&["gpint", "plan", "--topology", topo, "--out", plan]).unwrap();
        let vias: Vec<String> = (1..=6).flat_map(|i| ["--via".into(), format!("s{i}=127.0.0.{}", i + 1)]).collect();
        let run_with = |extra: &[&str]| {
            let mut args = vec!["gpint", "run", "--plan", plan, "--listen", "127.0.0.1:0"];
            args.extend(vias.iter().map(String::as_str));
            args.extend(extra);
            run(&args).expect_err(&extra.join(" "))
        };
        for (extra, says) in [
            (&["--duration", "inf"][..], "--duration"),
            (&["--duration", "0"], "more than 0"),
            (&["--window", "0"], "--window"),
            (&["--int-port", "0"], "--int-port"),
            (&["--gpint-port", "17768"], "must not be the INT port"),
            (&["--via", "s7=127.0.0.9"], "the plan has no switch s7"),
            (&["--via", "s1=127.0.0.9"], "switch s1 has an address already"),
        ] {
            let e = run_with(extra);
            assert!(e.contains(says), "{extra:?}: {e}");
        }
        for (args, says) in [
            (&["gpint", "topo", "ws", "--n", "100001"][..], "--n"),
            (&["gpint", "topo", "ws", "--n", "6", "--hold-ms", "5"], "--monitor"),
            (&["gpint", "topo", "ws", "--n", "6", "--monitor", "--hold-ms", "0"], "--hold-ms"),
        ] {
            let e = run(args).expect_err(&args.join(" "));
            assert!(e.contains(says), "{args:?}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
