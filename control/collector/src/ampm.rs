//! intcollector's AM-PM side: joins the per-interval records of two or more
//! measurement points by (FlowMonID, interval) and computes, per interval,
//! the loss in packets and bytes (upstream minus downstream), the one-way
//! delay of the delay-marked packet (downstream minus upstream timestamp)
//! and the mean delay (difference of the mean timestamps of the block).
//! MPs are put in path order: initiator first, terminator last, transit
//! MPs by their mean timestamp (later = further downstream).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

/// One MP's record of one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub node: u64,
    pub seq: u64,
    pub flow: String,
    pub flow_mon_id: u64,
    pub role: String,
    pub interval: u64,
    pub start_ns: u64,
    pub packets: u64,
    pub bytes: u64,
    pub delay_count: u64,
    pub delay_ts_ns: Option<u64>,
    pub mean_ts_offset_ns: Option<i64>,
    /// The MP started during the interval (counts from then on only).
    pub partial: bool,
    /// The MP's wall clock stepped: its counters may hold other intervals' packets.
    pub clock_step: bool,
}

impl Record {
    pub fn parse(line: &str) -> Result<Record, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        if v["type"] != "ampm" {
            return Err("not an ampm record".into());
        }
        let u = |k: &str| v[k].as_u64().ok_or_else(|| format!("field '{k}' missing or not a number"));
        let role = v["role"].as_str().ok_or("field 'role' missing")?;
        if !matches!(role, "initiator" | "transit" | "terminator") {
            return Err(format!("field 'role' is '{role}', not initiator, transit or terminator"));
        }
        Ok(Record {
            node: u("node")?,
            seq: u("seq")?,
            flow: v["flow"].as_str().unwrap_or("").to_string(),
            flow_mon_id: u("flow_mon_id")?,
            role: role.to_string(),
            interval: u("interval")?,
            start_ns: u("start_ns")?,
            packets: u("packets")?,
            bytes: u("bytes")?,
            delay_count: u("delay_count")?,
            delay_ts_ns: v["delay_ts_ns"].as_u64(),
            mean_ts_offset_ns: v["mean_ts_offset_ns"].as_i64(),
            partial: v["partial"].as_bool().unwrap_or(false),
            clock_step: v["clock_step"].as_bool().unwrap_or(false),
        })
    }

    fn rank(&self) -> (u8, i64) {
        match self.role.as_str() {
            "initiator" => (0, 0),
            "terminator" => (2, 0),
            _ => (1, self.mean_ts_offset_ns.unwrap_or(0)),
        }
    }
}

/// Loss and delay between two MPs of one interval.
fn segment(up: &Record, down: &Record) -> Value {
    let delay = match (up.delay_ts_ns, down.delay_ts_ns) {
        (Some(a), Some(b)) if up.delay_count == 1 && down.delay_count == 1 => Some(b.wrapping_sub(a) as i64),
        _ => None,
    };
    // A lost packet's timestamp is in the upstream mean only: one loss in
    // an interval of n packets moves the difference by up to interval / n,
    // so the mean delay is given only for a lossless interval (RFC 8321).
    let mean = match (up.mean_ts_offset_ns, down.mean_ts_offset_ns) {
        (Some(a), Some(b)) if up.packets == down.packets => Some(b.wrapping_sub(a)),
        _ => None,
    };
    json!({
        "from": up.node,
        "to": down.node,
        "loss_packets": up.packets.wrapping_sub(down.packets) as i64,
        "loss_bytes": up.bytes.wrapping_sub(down.bytes) as i64,
        "delay_ns": delay,
        "mean_delay_ns": mean,
    })
}

/// (FlowMonID, interval) pairs waiting for their MPs, at most.
pub const MAX_PENDING: usize = 1 << 16;

#[derive(Default)]
pub struct Joiner {
    /// MPs an interval needs before it is reported.
    pub expect_mps: usize,
    pending: BTreeMap<(u64, u64), Vec<Record>>,
    last_seq: HashMap<u64, u64>,
    pub records: u64,
    pub records_lost: u64,
    pub bad_records: u64,
    pub joined: u64,
    pub incomplete: u64,
    /// Records of a (FlowMonID, interval) their node had sent already (two
    /// flows of one FlowMonID on a switch, or two MPs of one node ID): not
    /// joined, the first one stands.
    pub duplicates: u64,
    pub loss_packets: i64,
    pub loss_bytes: i64,
    /// Joined intervals an MP saw only part of (started during them):
    /// reported, but their loss left out of the totals.
    pub partial: u64,
    /// Joined intervals an MP marked `clock_step` (its wall clock stepped):
    /// reported, but their loss and delay left out of the totals.
    pub clock_step: u64,
    delay_sum: i64,
    delay_n: u64,
}

impl Joiner {
    pub fn new(expect_mps: usize) -> Joiner {
        Joiner { expect_mps: expect_mps.max(2), ..Default::default() }
    }

    /// Takes one datagram of JSON lines; returns the intervals it completed.
    pub fn datagram(&mut self, text: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match Record::parse(line) {
                Ok(r) => out.extend(self.record(r)),
                Err(_) => self.bad_records += 1,
            }
        }
        out
    }

    pub fn record(&mut self, r: Record) -> Option<Value> {
        self.records += 1;
        if let Some(&last) = self.last_seq.get(&r.node) {
            if r.seq > last.saturating_add(1) {
                self.records_lost = self.records_lost.saturating_add(r.seq - last - 1);
            }
        }
        self.last_seq.insert(r.node, r.seq);
        let key = (r.flow_mon_id, r.interval);
        let v = self.pending.entry(key).or_default();
        if v.iter().any(|x| x.node == r.node) {
            self.duplicates += 1;
            return None;
        }
        v.push(r);
        let done = v.len() >= self.expect_mps
            && v.iter().any(|x| x.role == "initiator")
            && v.iter().any(|x| x.role == "terminator");
        if !done {
            // This flow's intervals that can no longer complete (4 newer
            // ones seen): a range of the map, not a scan of it.
            if let Some(upto) = key.1.checked_sub(3) {
                let stale: Vec<(u64, u64)> = self.pending.range((key.0, 0)..(key.0, upto)).map(|(k, _)| *k).collect();
                for k in stale {
                    self.pending.remove(&k);
                    self.incomplete += 1;
                }
            }
            // Bounded: records of endless new FlowMonIDs (a misconfigured
            // or hostile sender) push out the lowest ones, counted.
            while self.pending.len() > MAX_PENDING {
                self.pending.pop_first();
                self.incomplete += 1;
            }
            return None;
        }
        let mut mps = self.pending.remove(&key).unwrap_or_default();
        mps.sort_by_key(|r| r.rank());
        Some(self.join(&mps))
    }

    fn join(&mut self, mps: &[Record]) -> Value {
        let (first, last) = (&mps[0], &mps[mps.len() - 1]);
        let e2e = segment(first, last);
        self.joined += 1;
        let partial = mps.iter().any(|r| r.partial);
        let clock_step = mps.iter().any(|r| r.clock_step);
        if partial {
            self.partial += 1;
        }
        if clock_step {
            self.clock_step += 1;
        }
        if !partial && !clock_step {
            self.loss_packets = self.loss_packets.wrapping_add(e2e["loss_packets"].as_i64().unwrap_or(0));
            self.loss_bytes = self.loss_bytes.wrapping_add(e2e["loss_bytes"].as_i64().unwrap_or(0));
        }
        if let Some(d) = e2e["delay_ns"].as_i64().filter(|_| !clock_step) {
            self.delay_sum = self.delay_sum.wrapping_add(d);
            self.delay_n += 1;
        }
        json!({
            "flow": first.flow,
            "flow_mon_id": first.flow_mon_id,
            "interval": first.interval,
            "start_ns": first.start_ns,
            "packets": first.packets,
            "bytes": first.bytes,
            "loss_packets": e2e["loss_packets"],
            "loss_bytes": e2e["loss_bytes"],
            "delay_ns": e2e["delay_ns"],
            "mean_delay_ns": e2e["mean_delay_ns"],
            "partial": partial,
            "clock_step": clock_step,
            "mps": mps.iter().map(|r| json!({ "node": r.node, "role": r.role, "packets": r.packets, "bytes": r.bytes })).collect::<Vec<_>>(),
            "segments": mps.windows(2).map(|w| segment(&w[0], &w[1])).collect::<Vec<_>>(),
        })
    }

    pub fn summary(&self) -> Value {
        json!({ "ampm_summary": {
            "records": self.records,
            "records_lost": self.records_lost,
            "bad_records": self.bad_records,
            "duplicate_records": self.duplicates,
            "intervals_joined": self.joined,
            "intervals_partial": self.partial,
            "intervals_clock_step": self.clock_step,
            "intervals_incomplete": self.incomplete + self.pending.len() as u64,
            "loss_packets": self.loss_packets,
            "loss_bytes": self.loss_bytes,
            "delay_mean_ns": (self.delay_n > 0).then(|| self.delay_sum / self.delay_n as i64),
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(node: u64, seq: u64, role: &str, interval: u64, packets: u64, delay: Option<u64>, mean: i64) -> String {
        json!({"type":"ampm","version":1,"node":node,"seq":seq,"flow":"f","flow_mon_id":9,"role":role,
               "method":"muxed","interval":interval,"interval_ns":1_000_000_000u64,"start_ns":interval.wrapping_mul(1_000_000_000),
               "color":interval%2,"packets":packets,"bytes":packets.wrapping_mul(100),"delay_count":delay.map_or(0, |_| 1),
               "delay_ts_ns":delay,"mean_ts_offset_ns":mean})
        .to_string()
    }

    #[test]
    fn joins_two_mps_by_flow_and_interval() {
        let mut j = Joiner::new(2);
        assert!(j.datagram(&rec(1, 0, "initiator", 7, 1000, Some(5_000_000), 500_000_000)).is_empty());
        let out = j.datagram(&rec(2, 0, "terminator", 7, 990, Some(25_000_000), 520_000_000));
        assert_eq!(out.len(), 1);
        let v = &out[0];
        assert_eq!(
            (v["interval"].as_u64(), v["loss_packets"].as_i64(), v["loss_bytes"].as_i64()),
            (Some(7), Some(10), Some(1000))
        );
        // With loss, the block means differ by the lost packets' times: no mean delay.
        assert_eq!((v["delay_ns"].as_i64(), v["mean_delay_ns"].as_i64()), (Some(20_000_000), None));
        assert_eq!(j.summary()["ampm_summary"]["loss_packets"], 10);
        j.datagram(&rec(1, 1, "initiator", 8, 1000, Some(5_000_000), 500_000_000));
        let v = &j.datagram(&rec(2, 1, "terminator", 8, 1000, Some(25_000_000), 520_000_000))[0];
        assert_eq!((v["loss_packets"].as_i64(), v["mean_delay_ns"].as_i64()), (Some(0), Some(20_000_000)));
    }

    #[test]
    fn an_interval_an_mp_started_in_is_reported_but_not_summed() {
        let mut j = Joiner::new(2);
        let partial = rec(2, 0, "terminator", 7, 400, None, 0).replace("}", ",\"partial\":true}");
        j.datagram(&rec(1, 0, "initiator", 7, 1000, None, 0));
        let out = j.datagram(&partial);
        assert_eq!((out[0]["loss_packets"].as_i64(), out[0]["partial"].as_bool()), (Some(600), Some(true)));
        j.datagram(&rec(1, 1, "initiator", 8, 1000, None, 0));
        let out = j.datagram(&rec(2, 1, "terminator", 8, 998, None, 0));
        assert_eq!(out[0]["partial"], false);
        let s = &j.summary()["ampm_summary"];
        assert_eq!((s["loss_packets"].as_i64(), s["intervals_partial"].as_u64()), (Some(2), Some(1)));
    }

    #[test]
    fn an_interval_marked_clock_step_is_reported_but_not_summed() {
        let mut j = Joiner::new(2);
        let stepped = rec(1, 0, "initiator", 7, 1800, Some(5_000_000), 0).replace("}", ",\"clock_step\":true}");
        j.datagram(&stepped);
        let out = j.datagram(&rec(2, 0, "terminator", 7, 1000, Some(9_000_000_000), 0));
        assert_eq!((out[0]["loss_packets"].as_i64(), out[0]["clock_step"].as_bool()), (Some(800), Some(true)));
        j.datagram(&rec(1, 1, "initiator", 8, 1000, Some(5_000_000), 0));
        let out = j.datagram(&rec(2, 1, "terminator", 8, 997, Some(6_000_000), 0));
        assert_eq!(out[0]["clock_step"], false);
        let s = &j.summary()["ampm_summary"];
        assert_eq!(
            (s["loss_packets"].as_i64(), s["intervals_clock_step"].as_u64(), s["delay_mean_ns"].as_i64()),
            (Some(3), Some(1), Some(1_000_000))
        );
    }

    #[test]
    fn transit_mps_in_path_order_and_lost_records_counted() {
        let mut j = Joiner::new(3);
        j.datagram(&rec(3, 0, "terminator", 1, 95, None, 300));
        j.datagram(&rec(2, 0, "transit", 1, 97, None, 200));
        let out = j.datagram(&format!("{}\n", rec(1, 0, "initiator", 1, 100, None, 100)));
        let segs = out[0]["segments"].as_array().unwrap();
        assert_eq!((segs[0]["loss_packets"].as_i64(), segs[1]["loss_packets"].as_i64()), (Some(3), Some(2)));
        assert_eq!(out[0]["loss_packets"], 5);
        assert!(out[0]["delay_ns"].is_null());
        // Node 1's next record has seq 3: two lost.
        j.datagram(&rec(1, 3, "initiator", 2, 1, None, 0));
        j.datagram("garbage\n");
        // Node 1 again for interval 2 (a second flow of its FlowMonID):
        // counted, not joined.
        j.datagram(&rec(1, 4, "initiator", 2, 5, None, 0));
        let s = &j.summary()["ampm_summary"];
        assert_eq!((s["records_lost"].as_u64(), s["bad_records"].as_u64()), (Some(2), Some(1)));
        assert_eq!(s["duplicate_records"].as_u64(), Some(1));
    }

    #[test]
    fn extreme_and_foreign_records_neither_panic_nor_join() {
        let mut j = Joiner::new(2);
        let max = u64::MAX;
        j.datagram(&rec(1, max, "initiator", max, max, Some(max), i64::MIN));
        j.datagram(&rec(1, 0, "initiator", max - 1, 0, Some(0), i64::MAX));
        let out = j.datagram(&rec(2, max, "terminator", max, 0, Some(0), i64::MAX));
        assert_eq!(out.len(), 1, "joined, with wrapped differences");
        // An unknown role is refused, not taken for a transit MP.
        j.datagram(&rec(3, 0, "bystander", 5, 1, None, 0));
        assert_eq!(j.bad_records, 1);
        let s = j.summary();
        assert_eq!(s["ampm_summary"]["records"], 3);
    }

    #[test]
    fn waiting_intervals_are_bounded() {
        let mut j = Joiner::new(2);
        for f in 0..MAX_PENDING as u64 + 10 {
            let r = Record::parse(
                &rec(1, f, "initiator", 1, 1, None, 0).replace("\"flow_mon_id\":9", &format!("\"flow_mon_id\":{f}")),
            );
            j.record(r.unwrap());
        }
        assert_eq!(j.pending.len(), MAX_PENDING);
        assert_eq!(j.summary()["ampm_summary"]["intervals_incomplete"], MAX_PENDING as u64 + 10);
        // A flow's intervals four behind its newest are given up.
        let mut j = Joiner::new(2);
        for i in 1..=10 {
            j.datagram(&rec(1, i, "initiator", i, 1, None, 0));
        }
        assert_eq!(j.pending.keys().map(|k| k.1).collect::<Vec<_>>(), [7, 8, 9, 10]);
        assert_eq!(j.incomplete, 6);
    }
}
