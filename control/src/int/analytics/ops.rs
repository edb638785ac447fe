//! The analytics' operations: what `show int analytics` shows, and the
//! flush and show commands, which reach the workers as flow commands.

use std::sync::atomic::Ordering;

use dataplane::counters::{CounterValues, Event};
use dataplane::int::analytics::cache::{Agg, HOP_LATENCY, QUEUE, TX_UTIL};
use dataplane::parse::FlowKey;
use dataplane::worker::FlowCommand;

use crate::api::ApiError;
use crate::fields::parse_proto_name;
use crate::int::analytics::api::{AggView, AnalyticsView, FlowEntries, FlowEntryView, Flushed, HopView, IntFlowShow};
use crate::switch::ops::sum;
use crate::switch::Switch;

fn not_configured() -> ApiError {
    ApiError::not_configured("INT analytics", "int.analytics")
}

/// The events `show int analytics` lists: the flow cache's and every loss
/// the analytics count.
pub const ANALYTICS_EVENTS: [Event; 12] = [
    Event::IntFlowHit,
    Event::IntFlowInserted,
    Event::IntFlowLru,
    Event::IntFlowAged,
    Event::IntFlowActive,
    Event::IntFlowFlushed,
    Event::IntFlowStopped,
    Event::IntFlowExported,
    Event::IntFlowRingFull,
    Event::IntAnalyticsBadHopMl,
    Event::IntHopsUntracked,
    Event::IntValueAbsent,
];

fn agg(a: &Agg) -> AggView {
    AggView { last: a.last, sum: a.sum, count: a.count, mean: (a.count > 0).then(|| a.sum / a.count) }
}

impl Switch {
    pub fn analytics_view(&self) -> Result<AnalyticsView, ApiError> {
        let plan = self.plan().int.as_ref().and_then(|i| i.analytics).ok_or_else(not_configured)?;
        let ex = self.flow_exporter.as_ref().ok_or_else(not_configured)?;
        let per: Vec<CounterValues> = self.worker_counters();
        let c = sum(&per);
        let full: Vec<u64> = per.iter().map(|c| c.events[Event::IntFlowRingFull as usize]).collect();
        let workers = self.shared().workers.len() as u64;
        Ok(AnalyticsView {
            cache_rows: plan.rows,
            cache_ways: plan.ways,
            cache_max_hops: plan.max_hops,
            entry_bytes: plan.entry_bytes,
            cache_bytes: plan.cache_bytes,
            idle_timeout_s: plan.idle_s,
            active_timeout_s: plan.active_s,
            entries: self.shared().workers.iter().map(|w| w.int_flows_in_use.load(Ordering::Relaxed)).sum(),
            capacity: (plan.rows * plan.ways) as u64 * workers,
            counters: ANALYTICS_EVENTS.iter().map(|e| (e.name().to_string(), c.events[*e as usize])).collect(),
            export: ex.view(&full),
        })
    }

    /// Exports every entry of every worker (reason `flush`); traffic goes on.
    pub fn int_flows_flush(&mut self) -> Result<Flushed, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let n = self.dump(|generation| FlowCommand::IntFlowsFlush { generation }, |w| &w.int_flushed)?;
        Ok(Flushed { flushed: n.iter().map(|(_, k)| *k as u64).sum() })
    }

    /// The flow's entry on each worker that holds one.
    pub fn int_flow_show(&mut self, a: &IntFlowShow) -> Result<FlowEntries, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let ip = |arg: &str, s: &str| -> Result<std::net::IpAddr, ApiError> {
            s.parse().map_err(|_| ApiError::bad_argument(arg, format!("'{s}' is not an IP address")))
        };
        let (src, dst) = (ip("src", &a.src)?, ip("dst", &a.dst)?);
        let proto = parse_proto_name(&a.proto).map_err(|e| ApiError::bad_argument("proto", e))?;
        let key = match (src, dst) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                FlowKey::v4(s.octets(), d.octets(), proto, a.src_port, a.dst_port)
            }
            (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
                FlowKey::new(u128::from(s), u128::from(d), proto, a.src_port, a.dst_port, 6, 0, 0)
            }
            _ => return Err(ApiError::bad_argument("dst", "src and dst are of different IP versions")),
        };
        let got = self.dump(|generation| FlowCommand::IntFlowShow { key, generation }, |w| &w.int_flow)?;
        let entries = got
            .into_iter()
            .map(|(worker, s)| {
                let tracked = (s.head.tracked as usize).min(s.hops.len());
                FlowEntryView {
                    worker,
                    packets: s.head.packets,
                    first_ns: s.head.first_ns,
                    last_ns: s.head.last_ns,
                    hops: s.head.hops,
                    e2e_latency: agg(&s.head.e2e),
                    hop: s.hops[..tracked]
                        .iter()
                        .map(|h| HopView {
                            node_id: h.node_id,
                            hop_latency: agg(&h.metric(HOP_LATENCY)),
                            queue: agg(&h.metric(QUEUE)),
                            tx_util: agg(&h.metric(TX_UTIL)),
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(FlowEntries { entries })
    }
}
