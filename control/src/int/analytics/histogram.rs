//! The histograms' control-core side: the workers' tables summed into a
//! snapshot (cumulative counts per node ID and metric, and end to end), its
//! export as `int_hist` JSON lines, and `show int histograms`.
//!
//! A histogram travels in lines of at most CHUNK bins (a datagram stays
//! within `report_max_packet`); chunks whose counts are all zero are left
//! out:
//!
//! `{"type":"int_hist","version":1,"node":N,"seq":S,"ts_ns":T,"node_id":ID|null,
//!   "metric":"queue","bins":"linear:1x512","total":C,"first":K,"counts":[c_K,..]}`

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use dataplane::int::analytics::cache::{METRICS, METRIC_NAMES};
use dataplane::int::analytics::histogram::{Bins, WorkerHist, E2E};

/// Bins a line carries at most.
pub const CHUNK: usize = 64;

/// A histogram's name by index (per-hop metrics, then e2e).
pub fn hist_name(metric: usize) -> &'static str {
    if metric == E2E {
        "e2e_latency"
    } else {
        METRIC_NAMES[metric]
    }
}

/// One summed histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hist {
    /// None: end to end.
    pub node_id: Option<u32>,
    pub metric: usize,
    pub bins: Bins,
    pub counts: Vec<u64>,
}

impl Hist {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Every worker's histograms summed: per node ID (ascending) the three
/// per-hop metrics, then end to end.
pub fn snapshot(workers: &[Arc<WorkerHist>]) -> Vec<Hist> {
    let Some(spec) = workers.first().map(|w| w.spec) else { return Vec::new() };
    let mut per_node: BTreeMap<u32, Vec<Vec<u64>>> = BTreeMap::new();
    let mut e2e = vec![0; spec.bins[E2E].len()];
    for w in workers {
        for (slot, id) in w.nodes().into_iter().enumerate() {
            let h = per_node.entry(id).or_insert_with(|| (0..METRICS).map(|m| vec![0; spec.bins[m].len()]).collect());
            for (m, counts) in h.iter_mut().enumerate() {
                w.add_to(slot, m, counts);
            }
        }
        w.add_to(0, E2E, &mut e2e);
    }
    let mut out: Vec<Hist> = per_node
        .into_iter()
        .flat_map(|(id, hs)| {
            hs.into_iter().enumerate().map(move |(m, counts)| Hist {
                node_id: Some(id),
                metric: m,
                bins: spec.bins[m],
                counts,
            })
        })
        .collect();
    out.push(Hist { node_id: None, metric: E2E, bins: spec.bins[E2E], counts: e2e });
    out
}

/// The lines of one histogram (none when it is empty), each passed to
/// `line` with the line's bytes written by `write(out, seq)`.
pub fn encode(h: &Hist, node: u32, ts_ns: u64, mut line: impl FnMut(&dyn Fn(&mut Vec<u8>, u64))) {
    let total = h.total();
    if total == 0 {
        return;
    }
    let bins = h.bins.describe();
    for (k, chunk) in h.counts.chunks(CHUNK).enumerate() {
        if chunk.iter().all(|c| *c == 0) {
            continue;
        }
        line(&|out: &mut Vec<u8>, seq: u64| {
            let _ =
                write!(out, "{{\"type\":\"int_hist\",\"version\":1,\"node\":{node},\"seq\":{seq},\"ts_ns\":{ts_ns},");
            match h.node_id {
                Some(id) => {
                    let _ = write!(out, "\"node_id\":{id},");
                }
                None => out.extend_from_slice(b"\"node_id\":null,"),
            }
            let _ = write!(
                out,
                "\"metric\":\"{}\",\"bins\":\"{bins}\",\"total\":{total},\"first\":{},\"counts\":[",
                hist_name(h.metric),
                k * CHUNK
            );
            for (i, c) in chunk.iter().enumerate() {
                let _ = write!(out, "{}{c}", if i > 0 { "," } else { "" });
            }
            out.extend_from_slice(b"]}\n");
        });
    }
}

/// The value below which `q` (0..=1) of the counts lie, as a bin's lower
/// edge; None when empty.
pub fn quantile(h: &Hist, q: f64) -> Option<u64> {
    let total = h.total();
    if total == 0 {
        return None;
    }
    let want = ((total as f64 * q).ceil() as u64).max(1);
    let mut seen = 0;
    for (i, c) in h.counts.iter().enumerate() {
        seen += c;
        if seen >= want {
            return Some(h.bins.lower_edge(i));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::int::analytics::histogram::{HistSpec, HistWriter};

    #[test]
    fn workers_sum_per_node_whatever_their_slots() {
        let spec = HistSpec { bins: HistSpec::default_bins(), nodes: 4 };
        let (a, b) = (Arc::new(WorkerHist::new(spec)), Arc::new(WorkerHist::new(spec)));
        let (mut wa, mut wb) = (HistWriter::new(a.clone()), HistWriter::new(b.clone()));
        // Worker a meets node 5 first, worker b node 7.
        for (w, ids) in [(&mut wa, [5, 7]), (&mut wb, [7, 5])] {
            for id in ids {
                let dataplane::int::analytics::histogram::NodeSlot::Slot(s) = w.slot(id) else { panic!() };
                w.add(s, 1, id * 10);
            }
            w.add_e2e(3);
        }
        let snap = snapshot(&[a, b]);
        assert_eq!(snap.len(), 2 * METRICS + 1);
        let q5 = snap.iter().find(|h| h.node_id == Some(5) && h.metric == 1).unwrap();
        assert_eq!((q5.counts[50], q5.total()), (2, 2));
        let e2e = snap.last().unwrap();
        assert_eq!((e2e.node_id, e2e.counts[3]), (None, 2));
        assert_eq!(quantile(q5, 0.5), Some(50));
    }

    #[test]
    fn lines_carry_nonzero_chunks_that_add_up_to_the_histogram() {
        let mut counts = vec![0u64; 512];
        counts[3] = 4;
        counts[200] = 6;
        let h = Hist { node_id: Some(9), metric: 1, bins: Bins::Linear { width: 1, count: 512 }, counts };
        let mut lines = Vec::new();
        encode(&h, 2, 77, |w| {
            let mut out = Vec::new();
            w(&mut out, lines.len() as u64);
            lines.push(serde_json::from_slice::<serde_json::Value>(&out).unwrap());
        });
        assert_eq!(lines.len(), 2, "chunks 0 and 3; the others are all zero");
        assert_eq!((lines[0]["first"].as_u64(), lines[1]["first"].as_u64()), (Some(0), Some(192)));
        assert_eq!((lines[1]["counts"][8].as_u64(), lines[1]["total"].as_u64()), (Some(6), Some(10)));
        assert_eq!((lines[0]["metric"].as_str(), lines[0]["bins"].as_str()), (Some("queue"), Some("linear:1x512")));
        let empty = Hist { counts: vec![0; 512], ..h };
        encode(&empty, 2, 77, |_| panic!("an empty histogram sends nothing"));
    }
}
