//! intcollector's side of INT sink analytics: the switches' `int_flow`
//! records (JSON lines, see the switch's README): counted per reason, with
//! record sequence gaps per node, and one text line each.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

#[derive(Debug, Default)]
pub struct FlowRecords {
    pub records: u64,
    pub bad_records: u64,
    /// Records missing by the per-node `seq`.
    pub records_lost: u64,
    pub by_reason: BTreeMap<String, u64>,
    next_seq: HashMap<u64, u64>,
}

impl FlowRecords {
    /// Takes one `int_flow` record; Err when it lacks what a record has.
    pub fn record(&mut self, v: &Value) -> Result<(), String> {
        let u = |k: &str| v[k].as_u64().ok_or_else(|| format!("field '{k}' missing or not a number"));
        let (node, seq) = match (u("node"), u("seq"), u("packets"), v["flow"].as_object(), v["hop"].as_array()) {
            (Ok(n), Ok(s), Ok(_), Some(_), Some(_)) => (n, s),
            (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), ..) => {
                self.bad_records += 1;
                return Err(e);
            }
            _ => {
                self.bad_records += 1;
                return Err("field 'flow' or 'hop' missing".into());
            }
        };
        self.records += 1;
        let next = self.next_seq.entry(node).or_insert(seq);
        if seq > *next {
            self.records_lost += seq - *next;
        }
        *next = (*next).max(seq + 1);
        *self.by_reason.entry(v["reason"].as_str().unwrap_or("unknown").to_string()).or_default() += 1;
        Ok(())
    }

    pub fn summary(&self) -> Value {
        json!({ "int_flow_summary": {
            "records": self.records,
            "records_lost": self.records_lost,
            "bad_records": self.bad_records,
            "by_reason": self.by_reason,
        }})
    }
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
}
