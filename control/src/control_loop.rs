//! The control loop on the main lcore: between control rounds
//! (`Switch::tick`) it serves the front ends' requests (`dispatch`),
//! moves a running capture on, prints live rates, and naps while idle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dataplane::counters::CounterValues;

use crate::api::views::FinalCounters;
use crate::capture;
use crate::dispatch::{self, Context};
use crate::server::Server;
use crate::switch::Switch;

/// How the switch reports while running and at exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Print live rates every this many seconds (0: never).
    pub stats_interval_s: u64,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Final counters as JSON instead of text.
    pub json: bool,
}

/// The control loop's sleep after a round with nothing to do: doubling from
/// NAP_MIN up to NAP_MAX while idle.
const NAP_MIN: Duration = Duration::from_micros(20);
const NAP_MAX: Duration = Duration::from_millis(1);
/// Reports one export poll must find for the control loop to go straight on.
const EXPORT_BATCH: usize = 256;
/// Requests served per round at most (the rest wait for the next).
const REQUESTS_PER_ROUND: usize = 64;

/// Runs the control loop until a signal, `stop`, or the duration ends.
pub fn run(sw: &mut Switch, opts: &RunOptions, stop: &AtomicBool, server: Option<&Server>) -> Result<(), String> {
    let started = Instant::now();
    let mut last_print = Instant::now();
    let mut last = sw.counters();
    let mut nap = NAP_MIN;
    let mut capture: capture::Slot = None;
    // Naps end on time (the default 50 us timer slack would stretch the
    // short ones a report ring relies on).
    dataplane::dpdk::tight_timer_slack();
    while !stop.load(Ordering::Relaxed) {
        if opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let mut busy = false;
        if let Some(srv) = server {
            let mut cx = Context { sw: &mut *sw, capture: &mut capture, http: Some(srv.http()) };
            for _ in 0..REQUESTS_PER_ROUND {
                let Some(req) = srv.try_next() else { break };
                dispatch::handle(&mut cx, req);
                busy = true;
            }
        }
        // Reports: a poll that found only a few naps the shortest nap
        // before the next, so a batch gathers. Polling a nearly empty
        // ring pulls each record's cache lines (and the ring's index
        // line) across as the worker writes them, which held a worker
        // reporting every packet to less than half its rate; the ring
        // holds thousands of records, a nap lets a few hundred gather.
        let taken = sw.tick()?.reports;
        busy |= taken >= EXPORT_BATCH;
        capture::progress(sw, &mut capture);
        if opts.stats_interval_s > 0 && last_print.elapsed() >= Duration::from_secs(opts.stats_interval_s) {
            let now = sw.counters();
            print_rates(sw, &last, &now, last_print.elapsed().as_secs_f64());
            last = now;
            last_print = Instant::now();
        }
        // Back off while idle, but wake soon after work stops: a report
        // ring (4096 records by default) fills in well under a
        // millisecond at line rate, so a long nap right after a busy
        // round would lose records that a short one saves.
        if busy {
            nap = NAP_MIN;
        } else {
            if taken > 0 {
                nap = NAP_MIN;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(NAP_MAX);
        }
    }
    capture::stop(sw, &mut capture);
    if let Some(srv) = server {
        srv.close();
    }
    Ok(())
}

fn print_rates(sw: &Switch, a: &CounterValues, b: &CounterValues, dt: f64) {
    let d = b.since(a);
    let mut line = String::new();
    for (i, p) in sw.port_names().iter().enumerate() {
        line.push_str(&format!(
            "{p}: rx {:.3} Mpps {:.3} Gbps tx {:.3} Mpps {:.3} Gbps | ",
            d.rx_packets[i] as f64 / dt / 1e6,
            d.rx_bytes[i] as f64 * 8.0 / dt / 1e9,
            d.tx_packets[i] as f64 / dt / 1e6,
            d.tx_bytes[i] as f64 * 8.0 / dt / 1e9,
        ));
    }
    line.push_str(&format!("drops {:.3} Mpps", d.total_drops() as f64 / dt / 1e6));
    println!("{line}");
}

/// Prints the final counters as text.
pub fn print_text(v: &FinalCounters) {
    println!("== intswitch {} ({}) final counters", v.name, v.mode);
    for p in &v.ports {
        println!(
            "port {:<8} rx {:>12} pkts {:>14} bytes   tx {:>12} pkts {:>14} bytes",
            p.name, p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes
        );
    }
    for (k, n) in v.drops.iter().filter(|(_, n)| **n > 0) {
        println!("drop  {k:<24} {n}");
    }
    for (k, n) in v.events.iter().filter(|(_, n)| **n > 0) {
        println!("event {k:<24} {n}");
    }
}
