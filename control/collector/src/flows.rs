//! intcollector's side of INT sink analytics: the switches' `int_flow` and
//! `int_event` records (JSON lines, see the switch's README): flow records
//! counted per reason, events per bit, record sequence gaps per node (one
//! sequence over both kinds), and one text line each.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

#[derive(Debug, Default)]
pub struct FlowRecords {
    pub records: u64,
    pub bad_records: u64,
    /// Records missing by the per-node `seq`.
    pub records_lost: u64,
    pub by_reason: BTreeMap<String, u64>,
    /// `int_event` records, and the events they carry by name.
    pub events: u64,
    /// `int_hist` lines (histogram chunks).
    pub hist_lines: u64,
    pub by_event: BTreeMap<String, u64>,
    next_seq: HashMap<u64, u64>,
}

impl FlowRecords {
    /// Takes one `int_flow` or `int_event` record; Err when it lacks what
    /// a record of its type has.
    pub fn record(&mut self, v: &Value) -> Result<(), String> {
        let event = v["type"] == "int_event";
        let hist = v["type"] == "int_hist";
        let u = |k: &str| v[k].as_u64().ok_or_else(|| format!("field '{k}' missing or not a number"));
        let body = if event {
            u("sink_ns").and_then(|_| v["events"].as_array().map(|_| ()).ok_or_else(|| "field 'events' missing".into()))
        } else if hist {
            u("first").and_then(|_| v["counts"].as_array().map(|_| ()).ok_or_else(|| "field 'counts' missing".into()))
        } else {
            u("packets").and_then(|_| v["hop"].as_array().map(|_| ()).ok_or_else(|| "field 'hop' missing".into()))
        };
        let flow = if hist { Some(()) } else { v["flow"].as_object().map(|_| ()) };
        let (node, seq) = match (u("node"), u("seq"), body, flow) {
            (Ok(n), Ok(s), Ok(()), Some(_)) => (n, s),
            (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) => {
                self.bad_records += 1;
                return Err(e);
            }
            _ => {
                self.bad_records += 1;
                return Err("field 'flow' missing".into());
            }
        };
        let next = self.next_seq.entry(node).or_insert(seq);
        if seq > *next {
            self.records_lost += seq - *next;
        }
        *next = (*next).max(seq + 1);
        if hist {
            self.hist_lines += 1;
        } else if event {
            self.events += 1;
            for name in v["events"].as_array().into_iter().flatten() {
                *self.by_event.entry(name.as_str().unwrap_or("unknown").to_string()).or_default() += 1;
            }
        } else {
            self.records += 1;
            *self.by_reason.entry(v["reason"].as_str().unwrap_or("unknown").to_string()).or_default() += 1;
        }
        Ok(())
    }

    /// `records`: int_flow records; `events`: int_event records;
    /// `records_lost`: gaps in the sequence both share.
    pub fn summary(&self) -> Value {
        json!({ "int_flow_summary": {
            "records": self.records,
            "events": self.events,
            "hist_lines": self.hist_lines,
            "records_lost": self.records_lost,
            "bad_records": self.bad_records,
            "by_reason": self.by_reason,
            "by_event": self.by_event,
        }})
    }
}

/// One histogram line as a line of text: its nonzero bins by index.
/// A record line without the spaces the switch pads a datagram with
/// (inside its last line's closing brace, so that UDP GSO sends datagrams
/// of equal size): what goes on to Redis and Kafka.
pub fn unpadded(line: &str) -> std::borrow::Cow<'_, str> {
    match line.strip_suffix('}') {
        Some(body) if body.ends_with(' ') => format!("{}}}", body.trim_end_matches(' ')).into(),
        _ => line.into(),
    }
}

pub fn hist_line(v: &Value) -> String {
    let first = v["first"].as_u64().unwrap_or(0);
    let bins: Vec<String> = v["counts"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.as_u64().unwrap_or(0) > 0)
        .map(|(i, c)| format!("{}:{c}", first + i as u64))
        .collect();
    let node = if v["node_id"].is_null() { "end to end".to_string() } else { format!("node_id {}", v["node_id"]) };
    format!(
        "int_hist node {} {node} {} ({}): {} values; bins from {}: {}",
        v["node"],
        v["metric"].as_str().unwrap_or("?"),
        v["bins"].as_str().unwrap_or("?"),
        v["total"],
        first,
        bins.join(" ")
    )
}

/// One event record as a line of text.
pub fn event_line(v: &Value) -> String {
    let f = &v["flow"];
    let names: Vec<&str> = v["events"].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
    let val = |x: &Value| if x.is_null() { "-".to_string() } else { x.to_string() };
    let values = if v["hop"].is_null() {
        format!("e2e latency {} (previous {}) ns", val(&v["e2e_latency"]), val(&v["e2e_latency_prev"]))
    } else {
        let p = &v["prev"];
        format!(
            "hop {} node {}: latency {} (previous {}) ns, queue {} ({}), tx_util {} ({}), link in {} ({}) ns",
            v["hop"],
            v["node_id"],
            val(&v["hop_latency"]),
            val(&p["hop_latency"]),
            val(&v["queue"]),
            val(&p["queue"]),
            val(&v["tx_util"]),
            val(&p["tx_util"]),
            val(&v["link_latency"]),
            val(&p["link_latency"])
        )
    };
    format!(
        "int_event node {} {}:{} > {}:{} proto {}: {} at {} ns; {}",
        v["node"],
        f["src"].as_str().unwrap_or("?"),
        f["src_port"],
        f["dst"].as_str().unwrap_or("?"),
        f["dst_port"],
        f["proto"],
        names.join(" "),
        v["sink_ns"],
        values
    )
}

/// One record as a line of text.
pub fn text_line(v: &Value) -> String {
    let f = &v["flow"];
    let mean = |a: &Value| match (a["sum"].as_u64(), a["count"].as_u64()) {
        (Some(s), Some(c)) if c > 0 => (s / c).to_string(),
        _ => "-".into(),
    };
    let hops: Vec<String> = v["hop"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| format!("{}: latency {} ns queue {}", h["node_id"], mean(&h["hop_latency"]), mean(&h["queue"])))
        .collect();
    format!(
        "int_flow node {} ({}) {}:{} > {}:{} proto {}: {} packets, {} hops, e2e latency mean {} ns [{}]",
        v["node"],
        v["reason"].as_str().unwrap_or("?"),
        f["src"].as_str().unwrap_or("?"),
        f["src_port"],
        f["dst"].as_str().unwrap_or("?"),
        f["dst_port"],
        f["proto"],
        v["packets"],
        v["hops"],
        mean(&v["e2e_latency"]),
        hops.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(node: u64, seq: u64, reason: &str) -> Value {
        json!({"type": "int_flow", "version": 1, "node": node, "seq": seq, "reason": reason,
               "flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 17, "src_port": 1, "dst_port": 2},
               "packets": 4, "hops": 1, "path": [7], "e2e_latency": {"last": 5, "sum": 20, "count": 4},
               "hop": [{"node_id": 7, "hop_latency": {"last": 5, "sum": 20, "count": 4},
                        "queue": {"last": 0, "sum": 0, "count": 0}, "tx_util": {"last": 0, "sum": 0, "count": 0}}]})
    }

    #[test]
    fn counts_reasons_and_gaps_per_node() {
        let mut f = FlowRecords::default();
        for (node, seq, r) in [(1, 0, "lru"), (1, 1, "aged"), (1, 4, "flush"), (2, 0, "flush"), (1, 5, "stop")] {
            f.record(&rec(node, seq, r)).unwrap();
        }
        assert_eq!((f.records, f.records_lost), (5, 2));
        assert_eq!(f.by_reason["flush"], 2);
        assert!(f.record(&json!({"type": "int_flow", "node": 1})).is_err());
        assert_eq!(f.bad_records, 1);
        let line = text_line(&rec(1, 0, "lru"));
        assert!(line.contains("10.0.0.1:1 > 10.0.0.2:2") && line.contains("e2e latency mean 5 ns"), "{line}");
    }

    #[test]
    fn events_share_the_sequence_and_are_counted_by_bit() {
        let mut f = FlowRecords::default();
        let ev = |seq: u64, names: &[&str], hop: Value| {
            json!({"type": "int_event", "version": 1, "node": 1, "seq": seq, "worker": 0,
                   "flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 17, "src_port": 1, "dst_port": 2},
                   "sink_ns": 5, "rx_tsc": 6, "hop": hop, "node_id": 7, "bits": 4, "events": names,
                   "hop_latency": 10, "queue": 300, "tx_util": null,
                   "prev": {"hop_latency": 9, "queue": 100, "tx_util": null}})
        };
        f.record(&rec(1, 0, "lru")).unwrap();
        f.record(&ev(1, &["queue_t", "queue_c"], json!(0))).unwrap();
        f.record(&ev(2, &["queue_t"], json!(1))).unwrap();
        f.record(&rec(1, 3, "lru")).unwrap();
        assert_eq!((f.records, f.events, f.records_lost), (2, 2, 0), "one sequence, no gap");
        assert_eq!((f.by_event["queue_t"], f.by_event["queue_c"]), (2, 1));
        assert!(f.record(&json!({"type": "int_event", "node": 1, "seq": 4, "flow": {}})).is_err());
        let h = json!({"type": "int_hist", "version": 1, "node": 1, "seq": 4, "ts_ns": 1, "node_id": 3,
                       "metric": "queue", "bins": "linear:1x512", "total": 5, "first": 64, "counts": [0, 5]});
        f.record(&h).unwrap();
        assert_eq!((f.hist_lines, f.records_lost), (1, 0));
        assert!(
            hist_line(&h).contains("node_id 3 queue (linear:1x512): 5 values; bins from 64: 65:5"),
            "{}",
            hist_line(&h)
        );
        let line = event_line(&ev(1, &["queue_t"], json!(0)));
        assert!(
            line.contains("queue_t") && line.contains("queue 300 (100)") && line.contains("tx_util - (-)"),
            "{line}"
        );
        let e2e = json!({"node": 1, "flow": {}, "hop": null, "events": ["path_change"], "e2e_latency": 50, "e2e_latency_prev": null});
        assert!(event_line(&e2e).contains("e2e latency 50 (previous -) ns"), "{}", event_line(&e2e));
    }

    #[test]
    fn padding_is_stripped_and_other_lines_pass_as_they_are() {
        let padded = "{\"type\":\"int_event\",\"a\":{\"b\":1}     }";
        assert_eq!(unpadded(padded), "{\"type\":\"int_event\",\"a\":{\"b\":1}}");
        assert!(matches!(unpadded("{\"a\":1}"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(unpadded("{\"s\":\"x }\"}"), "{\"s\":\"x }\"}");
    }
}
