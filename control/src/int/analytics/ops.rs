//! The analytics' operations: what `show int analytics` shows, and the
//! flush and show commands, which reach the workers as flow commands.

use std::sync::atomic::Ordering;

use dataplane::counters::{CounterValues, Event};
use dataplane::int::analytics::cache::{Agg, HOP_LATENCY, QUEUE, TX_UTIL};
use dataplane::parse::FlowKey;
use dataplane::worker::FlowCommand;

use crate::api::ApiError;
use crate::api::Generation;
use crate::fields::parse_proto_name;
use crate::int::analytics::api::{
    AggView, AnalyticsView, EventRuleView, EventsView, FlowEntries, FlowEntryView, Flushed, HistView, HistogramsView,
    HopView, IntEventSet, IntFlowShow, ShowIntHistograms,
};
use crate::int::analytics::api::{DetectRuleView, DetectView, ExprEntryView, ExprView};
use crate::int::analytics::config::{
    event_rule, event_slot, metric_max, EVENT_METRICS, EVENT_RULES, MAX_BUDGET, T_BITS,
};
use crate::int::analytics::detect::{DetectConfig, ExprConfig};
use crate::int::analytics::histogram::{hist_name, quantile};
use crate::int::config::MAX_EXPRS;
use crate::switch::ops::sum;
use crate::switch::Switch;
use dataplane::int::analytics::detect::{Algorithm, DetectRule, MAX_RULES};

/// The expression a cnf rule uses.
fn rule_expr(r: &DetectRule) -> Option<&str> {
    r.cnf.as_ref().map(|c| c.0.as_str())
}

fn not_configured() -> ApiError {
    ApiError::not_configured("INT analytics", "int.analytics")
}

/// The events `show int analytics` lists: the flow cache's, the events',
/// the histograms' and every loss the analytics count (contiguous in
/// `Event`, from int_flow_hit to int_detect_node_untracked).
pub fn analytics_events() -> impl Iterator<Item = Event> {
    (Event::IntFlowHit as usize..=Event::IntDetectNodeUntracked as usize).map(|i| Event::ALL[i])
}

fn agg(a: &Agg) -> AggView {
    AggView { last: a.last, sum: a.sum, count: a.count, mean: (a.count > 0).then(|| a.sum / a.count) }
}

impl Switch {
    /// Changes one metric's events (or path change); the workers take it
    /// with the next table generation.
    pub fn int_event_set(&mut self, a: &IntEventSet) -> Result<Generation, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let spec = &mut self.spec.int.as_mut().ok_or_else(not_configured)?.events;
        if a.metric == "path_change" {
            for (arg, given) in [
                ("threshold", a.threshold.is_some()),
                ("change", a.change.is_some()),
                ("mode", a.mode.is_some()),
                ("reset", a.reset.is_some()),
                ("rate_budget", a.rate_budget.is_some()),
            ] {
                if given {
                    return Err(ApiError::bad_argument(arg, "path_change is only switched on or off (enabled)"));
                }
            }
            spec.path_change =
                a.enabled.ok_or_else(|| ApiError::bad_argument("enabled", "path_change needs enabled: on or off"))?;
            return self.commit();
        }
        if a.enabled.is_some() {
            return Err(ApiError::bad_argument("enabled", "applies to path_change only"));
        }
        let Some(cur) = event_slot(spec, &a.metric).copied() else {
            let all = format!("{}, path_change", EVENT_RULES.join(", "));
            return Err(ApiError::bad_argument("metric", format!("'{}' is not one of {all}", a.metric)));
        };
        let threshold = a.threshold.unwrap_or(cur.threshold as u64);
        let mode = a.mode.as_deref().unwrap_or(if cur.edge { "edge" } else { "level" });
        // Staying in edge mode keeps the reset level while it still fits.
        let reset = a.reset.or((mode == "edge" && cur.edge).then_some(cur.reset as u64).filter(|r| *r <= threshold));
        let rule = event_rule(&a.metric, threshold, a.change.unwrap_or(cur.change as u64), Some(mode), reset)
            .map_err(|(field, why)| ApiError::bad_argument(field, why))?;
        let m = EVENT_RULES.iter().position(|x| *x == a.metric).expect("one of EVENT_RULES");
        let budget = a.rate_budget.unwrap_or(self.event_budget.budget[m]);
        if budget > 0 && rule.threshold == 0 {
            return Err(ApiError::bad_argument("rate_budget", "needs a threshold: the budget moves T's threshold"));
        }
        if budget > MAX_BUDGET {
            return Err(ApiError::bad_argument("rate_budget", format!("{budget} is over {MAX_BUDGET}")));
        }
        *event_slot(spec, &a.metric).expect("checked above") = rule;
        // What is set here is the level the budget never goes below.
        self.event_budget.budget[m] = budget;
        self.event_budget.base[m] = rule.threshold as u64;
        self.commit()
    }

    /// Once a period, moves the T thresholds of the metrics with a rate
    /// budget (`budget`); each change is logged and published as a table
    /// generation.
    pub(crate) fn budget_step(&mut self) {
        let now = std::time::Instant::now();
        if !self.event_budget.any() || !self.event_budget.due(now) {
            return;
        }
        let c = sum(&self.worker_counters());
        // The T counters follow int_event_hop_latency_t in bit order.
        let counts: [u64; 5] = std::array::from_fn(|i| c.events[Event::IntEventHopLatencyT as usize + T_BITS[i]]);
        let Some(int) = self.spec.int.as_mut() else { return };
        let current: [u64; 5] =
            std::array::from_fn(|i| event_slot(&mut int.events, EVENT_RULES[i]).map_or(0, |r| r.threshold as u64));
        let max: [u64; 5] = std::array::from_fn(|i| metric_max(EVENT_RULES[i]));
        let changes = self.event_budget.step(now, counts, current, max);
        for &(m, from, to) in &changes {
            let r = event_slot(&mut int.events, EVENT_RULES[m]).expect("one of EVENT_RULES");
            r.threshold = to as u32;
            r.reset = r.reset.min(r.threshold);
            eprintln!(
                "intswitch: int analytics: {} T threshold {from} -> {to} ({} T events/s, rate_budget {})",
                EVENT_RULES[m], self.event_budget.rate[m], self.event_budget.budget[m]
            );
        }
        if !changes.is_empty() {
            if let Err(e) = self.commit() {
                eprintln!("intswitch: int analytics: the budget's thresholds not published: {}", e.message);
            }
        }
    }

    /// The events' settings and counters.
    pub fn int_event_show(&self) -> Result<EventsView, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let mut spec = self.spec.int.as_ref().ok_or_else(not_configured)?.events;
        let c = sum(&self.worker_counters());
        let rules = EVENT_RULES
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let r = *event_slot(&mut spec, m).expect("one of EVENT_RULES");
                let b = &self.event_budget;
                EventRuleView {
                    metric: m.to_string(),
                    threshold: r.threshold,
                    change: r.change,
                    mode: if r.edge { "edge" } else { "level" }.into(),
                    reset: r.edge.then_some(r.reset),
                    rate_budget: (b.budget[i] > 0).then_some(b.budget[i]),
                    base_threshold: (b.budget[i] > 0).then_some(b.base[i]),
                    t_events_per_s: (b.budget[i] > 0).then_some(b.rate[i]),
                    budget_changes: b.changes[i],
                }
            })
            .collect();
        let counters = analytics_events()
            .filter(|e| e.name().starts_with("int_event_"))
            .map(|e| (e.name().to_string(), c.events[e as usize]))
            .collect();
        Ok(EventsView { rules, path_change: spec.path_change, counters })
    }

    /// A rule's counters summed over the workers (since its slot was given).
    fn rule_sums(&self, slot: usize) -> [u64; 4] {
        let mut s = [0u64; 4];
        for w in &self.detect_counters {
            for (a, b) in s.iter_mut().zip(w[slot % MAX_RULES].get()) {
                *a += b;
            }
        }
        s
    }

    /// Adds (or replaces by name) a detection rule: a new table generation;
    /// the flows it matches start from state 0.
    pub fn int_detect_add(&mut self, a: &DetectConfig) -> Result<Generation, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let names = self.port_names();
        let hz = self.hz;
        let spec = &mut self.spec.int.as_mut().ok_or_else(not_configured)?.detect;
        let slot = match spec.rules.iter().find(|r| r.matcher.name == a.name) {
            Some(r) => r.slot,
            None => spec.free_slot().ok_or_else(|| {
                ApiError::new("table_full", None, format!("{MAX_RULES} detection rules: delete one first"))
            })?,
        };
        let exprs = &self.int_exprs;
        let spec = &mut self.spec.int.as_mut().ok_or_else(not_configured)?.detect;
        let mut rule = a.to_rule(&names, slot, exprs).map_err(|e| ApiError::bad_argument(&e.key, e.reason))?;
        if let Algorithm::Interval { ms, tsc } = &mut rule.algorithm {
            *tsc = (*ms as u128 * hz as u128 / 1000).max(1) as u64;
        }
        let fresh = !spec.rules.iter().any(|r| r.matcher.name == a.name);
        spec.upsert(rule);
        if fresh {
            self.detect_baseline[slot] = self.rule_sums(slot);
        }
        self.commit()
    }

    pub fn int_detect_del(&mut self, name: &str) -> Result<Generation, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let spec = &mut self.spec.int.as_mut().ok_or_else(not_configured)?.detect;
        if spec.remove(name).is_none() {
            return Err(ApiError::not_found("name", format!("no detection rule named '{name}'")));
        }
        self.commit()
    }

    /// Adds (or replaces by name) a CNF expression; the cnf rules that use
    /// it take it with a new table generation, their flows from state 0.
    pub fn int_expr_add(&mut self, a: &ExprConfig) -> Result<Generation, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let cnf = a.parse().map_err(|e| ApiError::bad_argument(&e.key, e.reason))?;
        if !self.int_exprs.contains_key(&a.name) && self.int_exprs.len() >= MAX_EXPRS {
            return Err(ApiError::new("table_full", None, format!("{MAX_EXPRS} expressions: delete one first")));
        }
        self.int_exprs.insert(a.name.clone(), cnf.text.clone());
        let spec = &mut self.spec.int.as_mut().ok_or_else(not_configured)?.detect;
        let users: Vec<_> = spec.rules.iter().filter(|r| rule_expr(r) == Some(a.name.as_str())).cloned().collect();
        for mut r in users {
            r.cnf = Some(Box::new((a.name.clone(), cnf.clone())));
            spec.upsert(r);
        }
        self.commit()
    }

    /// Deletes an expression no rule uses.
    pub fn int_expr_del(&mut self, name: &str) -> Result<Generation, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let spec = &self.spec.int.as_ref().ok_or_else(not_configured)?.detect;
        let users: Vec<&str> =
            spec.rules.iter().filter(|r| rule_expr(r) == Some(name)).map(|r| r.matcher.name.as_str()).collect();
        if !users.is_empty() {
            return Err(ApiError::new(
                "in_use",
                Some("name".into()),
                format!("expression '{name}' is used by rule(s) {}: delete or change them first", users.join(", ")),
            ));
        }
        if self.int_exprs.remove(name).is_none() {
            return Err(ApiError::not_found("name", format!("no expression named '{name}'")));
        }
        self.commit()
    }

    /// The expressions, normalised, with the rules that use each.
    pub fn int_expr_show(&self) -> Result<ExprView, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let spec = &self.spec.int.as_ref().ok_or_else(not_configured)?.detect;
        let exprs = self
            .int_exprs
            .iter()
            .map(|(name, expr)| ExprEntryView {
                name: name.clone(),
                expr: expr.clone(),
                rules: spec
                    .rules
                    .iter()
                    .filter(|r| rule_expr(r) == Some(name.as_str()))
                    .map(|r| r.matcher.name.clone())
                    .collect(),
            })
            .collect();
        Ok(ExprView { exprs })
    }

    /// The rules in lookup order with their counters.
    pub fn int_detect_show(&self) -> Result<DetectView, ApiError> {
        if self.flow_exporter.is_none() {
            return Err(not_configured());
        }
        let spec = &self.spec.int.as_ref().ok_or_else(not_configured)?.detect;
        let names = self.port_names();
        let rules = spec
            .rules
            .iter()
            .map(|r| {
                let now = self.rule_sums(r.slot);
                let base = self.detect_baseline[r.slot % MAX_RULES];
                let n: Vec<u64> = now.iter().zip(base).map(|(a, b)| a.saturating_sub(b)).collect();
                DetectRuleView {
                    matcher: crate::int::ops::watch_view(&r.matcher, &names),
                    algorithm: r.algorithm.name().into(),
                    metric: match r.metric {
                        _ if r.cnf.is_some() => "-",
                        QUEUE => "queue",
                        TX_UTIL => "tx_util",
                        _ => "hop_latency",
                    }
                    .into(),
                    threshold: r.threshold,
                    weight: match r.algorithm {
                        Algorithm::Ewma { weight } | Algorithm::Cnf { weight } => Some(weight),
                        _ => None,
                    },
                    interval_ms: match r.algorithm {
                        Algorithm::Interval { ms, .. } => Some(ms),
                        _ => None,
                    },
                    expr: rule_expr(r).map(str::to_string),
                    evaluated: n[0],
                    reported: n[1],
                    suppressed: n[2],
                    metric_absent: n[3],
                }
            })
            .collect();
        let c = sum(&self.worker_counters());
        Ok(DetectView { rules, node_untracked: c.events[Event::IntDetectNodeUntracked as usize] })
    }

    /// The histograms summed over the workers, filtered.
    pub fn int_histograms(&self, a: &ShowIntHistograms) -> Result<HistogramsView, ApiError> {
        let ex = self.flow_exporter.as_ref().ok_or_else(not_configured)?;
        if let Some(m) = &a.metric {
            if !EVENT_METRICS.contains(&m.as_str()) {
                return Err(ApiError::bad_argument(
                    "metric",
                    format!("'{m}' is not one of {}", EVENT_METRICS.join(", ")),
                ));
            }
        }
        let histograms = ex
            .histograms()
            .into_iter()
            .filter(|h| a.node.is_none() || h.node_id == a.node)
            .filter(|h| a.metric.as_deref().is_none_or(|m| m == hist_name(h.metric)))
            .map(|h| HistView {
                node_id: h.node_id,
                metric: hist_name(h.metric).into(),
                bins: h.bins.describe(),
                total: h.total(),
                p50: quantile(&h, 0.5),
                p90: quantile(&h, 0.9),
                p99: quantile(&h, 0.99),
                counts: h
                    .counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, c)| (h.bins.lower_edge(i), *c))
                    .collect(),
            })
            .collect();
        let c = sum(&self.worker_counters());
        let counters = [Event::IntHistNodeUntracked, Event::IntHistNoNodeId]
            .iter()
            .map(|e| (e.name().to_string(), c.events[*e as usize]))
            .collect();
        Ok(HistogramsView { histograms, counters })
    }

    pub fn analytics_view(&self) -> Result<AnalyticsView, ApiError> {
        let plan = self.plan().int.as_ref().and_then(|i| i.analytics).ok_or_else(not_configured)?;
        let ex = self.flow_exporter.as_ref().ok_or_else(not_configured)?;
        let per: Vec<CounterValues> = self.worker_counters();
        let c = sum(&per);
        let full: Vec<u64> = per.iter().map(|c| c.events[Event::IntFlowRingFull as usize]).collect();
        let event_full: Vec<u64> = per.iter().map(|c| c.events[Event::IntEventRingFull as usize]).collect();
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
            counters: analytics_events().map(|e| (e.name().to_string(), c.events[e as usize])).collect(),
            export: ex.view(&full, &event_full),
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
