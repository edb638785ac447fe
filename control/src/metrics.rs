//! Prometheus text exposition of every counter, labelled by port, worker and
//! drop reason. Counters here are monotonic since start (`clear counters`
//! only moves the baseline of the CLI views).

use std::fmt::Write;

use dataplane::counters::Event;
use dataplane::DropReason;

use crate::switch::Switch;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Escapes a label value.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

pub fn render(sw: &Switch) -> String {
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
                let _ = writeln!(o, "{name}{{port=\"{}\",worker=\"{w}\"}} {}", esc(pn), pick(c)[p]);
            }
        }
    }
    family(&mut o, "intswitch_drops_total", "counter", "Packets dropped, by worker and reason.");
    for (w, c) in per.iter().enumerate() {
        for r in DropReason::ALL {
            let _ =
                writeln!(o, "intswitch_drops_total{{worker=\"{w}\",reason=\"{}\"}} {}", r.name(), c.drops[r as usize]);
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
            let _ =
                writeln!(o, "intswitch_events_total{{worker=\"{w}\",event=\"{}\"}} {}", e.name(), c.events[e as usize]);
        }
    }
    family(&mut o, "intswitch_worker_polls_total", "counter", "Poll loop iterations, by worker.");
    for (w, c) in per.iter().enumerate() {
        let _ = writeln!(o, "intswitch_worker_polls_total{{worker=\"{w}\"}} {}", c.polls);
    }
    family(&mut o, "intswitch_worker_busy_polls_total", "counter", "Poll loop iterations that received packets.");
    for (w, c) in per.iter().enumerate() {
        let _ = writeln!(o, "intswitch_worker_busy_polls_total{{worker=\"{w}\"}} {}", c.busy_polls);
    }
    let workers = sw.workers_json();
    family(&mut o, "intswitch_worker_flows", "gauge", "Flow table entries in use, by worker.");
    for (w, v) in workers.as_array().into_iter().flatten().enumerate() {
        let _ = writeln!(o, "intswitch_worker_flows{{worker=\"{w}\"}} {}", v["flows"]);
    }
    family(&mut o, "intswitch_worker_macs", "gauge", "MAC table entries in use, by worker.");
    for (w, v) in workers.as_array().into_iter().flatten().enumerate() {
        let _ = writeln!(o, "intswitch_worker_macs{{worker=\"{w}\"}} {}", v["macs"]);
    }
    family(
        &mut o,
        "intswitch_worker_mac_sync_lost_total",
        "counter",
        "MAC announcements from other workers this worker's full queue missed.",
    );
    for (w, v) in workers.as_array().into_iter().flatten().enumerate() {
        let _ = writeln!(o, "intswitch_worker_mac_sync_lost_total{{worker=\"{w}\"}} {}", v["mac_sync_lost"]);
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
            let _ = writeln!(o, "{name}{{port=\"{}\"}} {v}", esc(&names[p]));
        }
    }
    family(&mut o, "intswitch_port_up", "gauge", "1 when the port is enabled for forwarding.");
    let ports = sw.ports_json();
    for (p, v) in ports.as_array().into_iter().flatten().enumerate() {
        let _ = writeln!(o, "intswitch_port_up{{port=\"{}\"}} {}", esc(&names[p]), u8::from(v["enabled"] == true));
    }
    family(&mut o, "intswitch_mempool_in_use", "gauge", "Packet buffers in use.");
    let _ = writeln!(o, "intswitch_mempool_in_use {}", sw.pool().in_use());
    o
}
