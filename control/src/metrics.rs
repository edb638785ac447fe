//! Prometheus text exposition of every counter, labelled by port, worker and
//! drop reason, rendered from the typed counters (no JSON on the way).
//! Counters here are monotonic since start (`clear counters` only moves the
//! baseline of the CLI views).
//!
//! Lines are appended with `push_str`/`format!`: writing into a `String`
//! cannot fail, so there is no `fmt::Result` to drop.

use std::sync::atomic::Ordering;

use dataplane::counters::{CounterValues, Event};
use dataplane::DropReason;

use crate::server::HttpCounters;
use crate::switch::Switch;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
}

fn line(out: &mut String, l: std::fmt::Arguments) {
    out.push_str(&l.to_string());
    out.push('\n');
}

/// Escapes a label value.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Telemetry export, where configured: INT report rings and collectors,
/// the sink analytics' flow cache and export, INT-label's per-port state,
/// AM-PM records, collectors and per-flow color counters.
fn export_metrics(o: &mut String, sw: &Switch, per: &[CounterValues]) {
    if let Ok(r) = sw.reports_view() {
        family(o, "intswitch_int_report_ring_pending", "gauge", "Report records waiting in a worker's ring.");
        for g in &r.rings {
            line(o, format_args!("intswitch_int_report_ring_pending{{worker=\"{}\"}} {}", g.worker, g.pending));
        }
        type Pick = fn(&crate::int::api::ReportCollectorView) -> u64;
        let per_collector: [(&str, &str, Pick); 3] = [
            ("intswitch_int_report_reports_total", "Individual reports sent to a collector.", |c| c.reports),
            ("intswitch_int_report_packets_total", "Report packets sent to a collector.", |c| c.packets),
            ("intswitch_int_report_send_errors_total", "Report packets a collector was not sent (lost).", |c| {
                c.send_errors
            }),
        ];
        for (name, help, pick) in per_collector {
            family(o, name, "counter", help);
            for c in &r.collectors {
                line(o, format_args!("{name}{{collector=\"{}\"}} {}", esc(&c.address), pick(c)));
            }
        }
    }
    if let Ok(a) = sw.analytics_view() {
        family(
            o,
            "intswitch_int_flow_cache_entries",
            "gauge",
            "Sink analytics: flow cache entries in use, all workers.",
        );
        line(o, format_args!("intswitch_int_flow_cache_entries {}", a.entries));
        family(o, "intswitch_int_flow_cache_capacity", "gauge", "Sink analytics: flow cache entries, all workers.");
        line(o, format_args!("intswitch_int_flow_cache_capacity {}", a.capacity));
        family(o, "intswitch_int_flow_exported_total", "counter", "Sink analytics: flow and event records exported.");
        line(o, format_args!("intswitch_int_flow_exported_total{{record=\"flow\"}} {}", a.export.records));
        line(o, format_args!("intswitch_int_flow_exported_total{{record=\"event\"}} {}", a.export.events));
        family(
            o,
            "intswitch_int_flow_send_errors_total",
            "counter",
            "Sink analytics: datagrams a collector was not sent (lost).",
        );
        for c in &a.export.collectors {
            line(
                o,
                format_args!(
                    "intswitch_int_flow_send_errors_total{{collector=\"{}\"}} {}",
                    esc(&c.address),
                    c.send_errors
                ),
            );
        }
    }
    if let Ok(l) = sw.label_view() {
        family(
            o,
            "intswitch_label_shift",
            "gauge",
            "INT-label: a port's shift S (interval T >> S; 255: every packet).",
        );
        for p in &l.ports {
            line(o, format_args!("intswitch_label_shift{{port=\"{}\"}} {}", esc(&p.port), p.shift));
        }
        family(
            o,
            "intswitch_label_last_age_seconds",
            "gauge",
            "INT-label: time since a port's last label (no line: never labeled).",
        );
        for p in &l.ports {
            if let Some(ms) = p.lt_age_ms {
                line(o, format_args!("intswitch_label_last_age_seconds{{port=\"{}\"}} {}", esc(&p.port), ms / 1e3));
            }
        }
        family(
            o,
            "intswitch_label_labels_total",
            "counter",
            "INT-label: labels a port pushed (every kind), by worker.",
        );
        for (w, c) in per.iter().enumerate() {
            for p in &l.ports {
                let n = c.labels.get(p.index as usize).copied().unwrap_or(0);
                line(o, format_args!("intswitch_label_labels_total{{port=\"{}\",worker=\"{w}\"}} {n}", esc(&p.port)));
            }
        }
    }
    if let Ok(a) = sw.ampm_view() {
        if let Some(e) = &a.export {
            family(o, "intswitch_ampm_records_total", "counter", "AM-PM interval records exported.");
            line(o, format_args!("intswitch_ampm_records_total {}", e.records));
            family(
                o,
                "intswitch_ampm_intervals_missed_total",
                "counter",
                "Intervals whose records were not exported in time.",
            );
            line(o, format_args!("intswitch_ampm_intervals_missed_total {}", e.intervals_missed));
            family(
                o,
                "intswitch_ampm_clock_steps_total",
                "counter",
                "Steps of the wall clock seen (the records after each are marked clock_step).",
            );
            line(o, format_args!("intswitch_ampm_clock_steps_total {}", e.clock_steps));
            family(
                o,
                "intswitch_ampm_send_errors_total",
                "counter",
                "AM-PM datagrams a collector was not sent (lost).",
            );
            for c in &e.collectors {
                line(
                    o,
                    format_args!(
                        "intswitch_ampm_send_errors_total{{collector=\"{}\"}} {}",
                        esc(&c.address),
                        c.send_errors
                    ),
                );
            }
        }
        for (name, help) in [
            ("intswitch_ampm_flow_packets_total", "Packets an AM-PM flow counted, by color."),
            ("intswitch_ampm_flow_bytes_total", "Bytes an AM-PM flow counted, by color."),
        ] {
            family(o, name, "counter", help);
            for f in &a.flows {
                for c in &f.counters {
                    let v = if name.ends_with("packets_total") { c.packets } else { c.bytes };
                    line(
                        o,
                        format_args!(
                            "{name}{{flow=\"{}\",role=\"{}\",color=\"{}\"}} {v}",
                            esc(&f.name),
                            f.role,
                            c.color
                        ),
                    );
                }
            }
        }
    }
}

pub fn render(sw: &Switch, http: Option<&HttpCounters>) -> String {
    let mut o = String::new();
    let names = sw.port_names();
    let per = sw.worker_counters_raw();
    type Pick = fn(&dataplane::counters::CounterValues) -> &[u64; dataplane::counters::MAX_PORTS];
    let port_counters: [(&str, &str, Pick); 4] = [
        ("intswitch_port_rx_packets_total", "Packets received on a port, by worker.", |c| &c.rx_packets),
        ("intswitch_port_rx_bytes_total", "Bytes received on a port, by worker.", |c| &c.rx_bytes),
        ("intswitch_port_tx_packets_total", "Packets sent on a port, by worker.", |c| &c.tx_packets),
        ("intswitch_port_tx_bytes_total", "Bytes sent on a port, by worker.", |c| &c.tx_bytes),
    ];
    for (name, help, pick) in port_counters {
        family(&mut o, name, "counter", help);
        for (w, c) in per.iter().enumerate() {
            for (p, pn) in names.iter().enumerate() {
                line(&mut o, format_args!("{name}{{port=\"{}\",worker=\"{w}\"}} {}", esc(pn), pick(c)[p]));
            }
        }
    }
    family(&mut o, "intswitch_drops_total", "counter", "Packets dropped, by worker and reason.");
    for (w, c) in per.iter().enumerate() {
        for r in DropReason::ALL {
            line(
                &mut o,
                format_args!("intswitch_drops_total{{worker=\"{w}\",reason=\"{}\"}} {}", r.name(), c.drops[r as usize]),
            );
        }
    }
    family(
        &mut o,
        "intswitch_events_total",
        "counter",
        "Data-path events (learning, replies, floods, ...), by worker.",
    );
    for (w, c) in per.iter().enumerate() {
        for e in Event::ALL {
            line(
                &mut o,
                format_args!(
                    "intswitch_events_total{{worker=\"{w}\",event=\"{}\"}} {}",
                    e.name(),
                    c.events[e as usize]
                ),
            );
        }
    }
    family(&mut o, "intswitch_worker_polls_total", "counter", "Poll loop iterations, by worker.");
    for (w, c) in per.iter().enumerate() {
        line(&mut o, format_args!("intswitch_worker_polls_total{{worker=\"{w}\"}} {}", c.polls));
    }
    family(&mut o, "intswitch_worker_busy_polls_total", "counter", "Poll loop iterations that received packets.");
    for (w, c) in per.iter().enumerate() {
        line(&mut o, format_args!("intswitch_worker_busy_polls_total{{worker=\"{w}\"}} {}", c.busy_polls));
    }
    let workers = sw.worker_views(&per);
    type Gauge = fn(&crate::api::views::WorkerView) -> u64;
    let worker_gauges: [(&str, &str, &str, Gauge); 3] = [
        ("intswitch_worker_flows", "gauge", "Flow table entries in use, by worker.", |w| w.flows),
        ("intswitch_worker_macs", "gauge", "MAC table entries in use, by worker.", |w| w.macs),
        (
            "intswitch_worker_mac_sync_lost_total",
            "counter",
            "MAC announcements from other workers this worker's full queue missed.",
            |w| w.mac_sync_lost,
        ),
    ];
    for (name, kind, help, pick) in worker_gauges {
        family(&mut o, name, kind, help);
        for w in &workers {
            line(&mut o, format_args!("{name}{{worker=\"{}\"}} {}", w.id, pick(w)));
        }
    }
    let ethdev: [(&str, &str); 8] = [
        ("ipackets", "Packets the device received."),
        ("opackets", "Packets the device sent."),
        ("ibytes", "Bytes the device received."),
        ("obytes", "Bytes the device sent."),
        ("imissed", "Packets the device dropped for lack of RX descriptors."),
        ("ierrors", "Receive errors."),
        ("oerrors", "Transmit errors."),
        ("rx_nombuf", "Receive failures for lack of mbufs."),
    ];
    let stats: Vec<_> = sw.ports().iter().map(|p| p.stats()).collect();
    for (field, help) in ethdev {
        let name = format!("intswitch_ethdev_{field}_total");
        family(&mut o, &name, "counter", help);
        for (p, s) in stats.iter().enumerate() {
            let v = match field {
                "ipackets" => s.ipackets,
                "opackets" => s.opackets,
                "ibytes" => s.ibytes,
                "obytes" => s.obytes,
                "imissed" => s.imissed,
                "ierrors" => s.ierrors,
                "oerrors" => s.oerrors,
                _ => s.rx_nombuf,
            };
            line(&mut o, format_args!("{name}{{port=\"{}\"}} {v}", esc(&names[p])));
        }
    }
    family(&mut o, "intswitch_port_up", "gauge", "1 when the port is enabled for forwarding.");
    for (p, up) in sw.port_enabled().into_iter().enumerate() {
        line(&mut o, format_args!("intswitch_port_up{{port=\"{}\"}} {}", esc(&names[p]), u8::from(up)));
    }
    family(&mut o, "intswitch_mempool_in_use", "gauge", "Packet buffers in use.");
    line(&mut o, format_args!("intswitch_mempool_in_use {}", sw.pool().in_use()));
    let r = sw.resolution_counters();
    family(
        &mut o,
        "intswitch_neighbour_resolution_total",
        "counter",
        "ARP requests and neighbour solicitations: sent, or not sent and why; gave_up: held packets sent back unresolved.",
    );
    for (result, n) in [
        ("sent", r.sent),
        ("no_address", r.no_address),
        ("no_mbuf", r.no_mbuf),
        ("queue_full", r.queue_full),
        ("gave_up", r.gave_up),
    ] {
        line(&mut o, format_args!("intswitch_neighbour_resolution_total{{result=\"{result}\"}} {n}"));
    }
    export_metrics(&mut o, sw, &per);
    if let Some(h) = http {
        family(&mut o, "intswitch_metrics_http_requests_total", "counter", "Requests to this endpoint, by outcome.");
        for (result, n) in
            [("served", &h.served), ("not_found", &h.not_found), ("bad_request", &h.bad_request), ("failed", &h.failed)]
        {
            line(
                &mut o,
                format_args!(
                    "intswitch_metrics_http_requests_total{{result=\"{result}\"}} {}",
                    n.load(Ordering::Relaxed)
                ),
            );
        }
    }
    o
}
