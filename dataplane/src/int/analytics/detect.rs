//! Per-flow programmable event detection (int-event-detection §III-A): the
//! control plane picks, per flow, the algorithm that decides whether the
//! sink sends a flow's packet as a Telemetry Report. The telemetry of
//! every packet is still accounted (cache, events, histograms).
//!
//! S is the sum over a packet's hops of the rule's metric, T its
//! threshold:
//! - `per_hop`: for each hop, if |v_h - R[node_h]| > T then R[node_h] = v_h
//!   and the packet is an event. R is per node ID (shared by every flow of
//!   the worker using per_hop on that metric) and changes only when it
//!   fires: send-on-delta against the last reported value.
//! - `per_flow`: if |S - P| > T then P = S, event (P in the flow's state).
//! - `ewma`: M += (k * (S * 256 - M)) >> 8 every packet (M with 8 fractional
//!   bits, k = weight / 256); if |(M >> 8) - P| > T then P = M >> 8, event.
//! - `noop`: every packet; `none`: never; `interval`: at most one a flow
//!   per interval.
//!
//! State starts at 0, as a P4 register does, so a flow's first packet
//! fires when its value already exceeds T.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::int::analytics::cache::{HOP_LATENCY, METRICS, QUEUE};
use crate::int::analytics::cnf::{self, Cnf, CnfPass};
use crate::int::analytics::node_index::NodeIndex;
use crate::int::watch::{WatchFields, WatchRule};

/// Rules a switch holds at most (their counters are fixed slots).
pub const MAX_RULES: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    PerHop,
    PerFlow,
    /// `weight`: k of k/256, 1..=256.
    Ewma {
        weight: u32,
    },
    Noop,
    None,
    /// Between two reports of a flow: milliseconds as configured, and TSC
    /// ticks (`DetectSpec::set_clock`).
    Interval {
        ms: u64,
        tsc: u64,
    },
    /// `DetectRule::cnf` holds; `weight` for its ewma literals.
    Cnf {
        weight: u32,
    },
}

impl Algorithm {
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::PerHop => "per_hop",
            Algorithm::PerFlow => "per_flow",
            Algorithm::Ewma { .. } => "ewma",
            Algorithm::Noop => "noop",
            Algorithm::None => "none",
            Algorithm::Interval { .. } => "interval",
            Algorithm::Cnf { .. } => "cnf",
        }
    }
}

/// One `[[int.detect]]` rule: which flows (the watchlist's ternary match;
/// its role is not used), and how their reports are decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectRule {
    pub matcher: WatchRule,
    pub algorithm: Algorithm,
    /// The per-hop metric S sums (`cache::HOP_LATENCY`, ...).
    pub metric: usize,
    pub threshold: u64,
    /// Its counters' slot, kept while the rule exists.
    pub slot: usize,
    /// `cnf`: the expression, and the name it was defined under.
    pub cnf: Option<Box<(String, Cnf)>>,
}

/// The rules of one table generation, highest priority first; `version`
/// changes only when they do, and resets the flows' detection state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetectSpec {
    pub rules: Vec<DetectRule>,
    pub version: u64,
}

impl DetectSpec {
    /// The index of the first rule that matches.
    pub fn lookup(&self, f: &WatchFields) -> Option<usize> {
        self.rules.iter().position(|r| r.matcher.matches(f))
    }

    /// Adds or replaces (by name) a rule, keeping the priority order.
    pub fn upsert(&mut self, rule: DetectRule) {
        self.rules.retain(|r| r.matcher.name != rule.matcher.name);
        let at = self.rules.iter().position(|r| r.matcher.priority < rule.matcher.priority).unwrap_or(self.rules.len());
        self.rules.insert(at, rule);
        self.version += 1;
    }

    pub fn remove(&mut self, name: &str) -> Option<DetectRule> {
        let i = self.rules.iter().position(|r| r.matcher.name == name)?;
        self.version += 1;
        Some(self.rules.remove(i))
    }

    /// Works out the interval rules' ticks for a `hz` clock.
    pub fn set_clock(&mut self, hz: u64) {
        for r in &mut self.rules {
            if let Algorithm::Interval { ms, tsc } = &mut r.algorithm {
                *tsc = (*ms as u128 * hz as u128 / 1000).max(1) as u64;
            }
        }
    }

    /// A counter slot no rule uses.
    pub fn free_slot(&self) -> Option<usize> {
        (0..MAX_RULES).find(|s| self.rules.iter().all(|r| r.slot != *s))
    }
}

/// A flow's detection state (one per flow-cache entry).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowDetect {
    /// `DetectSpec::version` + 1 when the rule was looked up (0: not yet).
    pub version: u64,
    /// Rule index + 1 in that version (0: no rule matched).
    pub rule: u8,
    /// per_flow: s[0] the last reported S. ewma: s[0] the last reported
    /// EWMA, s[1] the EWMA with 8 fractional bits. cnf: one word per delta
    /// or ewma literal.
    pub s: [i64; cnf::MAX_STATEFUL],
    /// cnf: the delta words that hold a previous value (bit per word).
    pub valid: u8,
}

/// What detection saw of one packet: per metric, the sum over its hops of
/// the present values, and whether the bitmap carries it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sums {
    pub sum: [u64; METRICS],
    pub carried: [bool; METRICS],
}

/// A rule's counters on one worker (single writer).
#[derive(Debug, Default)]
pub struct RuleCounters {
    /// Packets the rule decided.
    pub evaluated: AtomicU64,
    /// Of those, reported (the algorithm fired) and suppressed.
    pub reported: AtomicU64,
    pub suppressed: AtomicU64,
    /// Packets whose bitmap lacks the rule's metric (nothing fires).
    pub metric_absent: AtomicU64,
}

impl RuleCounters {
    /// (evaluated, reported, suppressed, metric_absent).
    pub fn get(&self) -> [u64; 4] {
        [&self.evaluated, &self.reported, &self.suppressed, &self.metric_absent].map(|c| c.load(Relaxed))
    }
}

/// The per-hop registers R[node ID][metric] of one worker.
pub struct NodeRegs {
    index: NodeIndex,
    vals: Box<[[u32; METRICS]]>,
}

impl NodeRegs {
    pub fn new(nodes: usize) -> NodeRegs {
        NodeRegs { index: NodeIndex::new(nodes), vals: vec![[0; METRICS]; nodes].into_boxed_slice() }
    }

    /// Node `id`'s registers (at 0 when new), if there is room.
    #[inline]
    pub fn get(&mut self, id: u32) -> Option<&mut [u32; METRICS]> {
        let (s, _) = self.index.slot(id)?;
        Some(&mut self.vals[s])
    }
}

/// Where per_hop's registers are: per node ID (the worker's, shared by its
/// flows), or the flow's own, one per tracked hop in path order.
pub enum Regs<'a> {
    Node(&'a mut NodeRegs),
    Flow(&'a mut [u32]),
}

/// per_hop over one packet's hops: each hop's value against its register;
/// fires (and updates those registers) where the difference is above the
/// threshold. `untracked`: hops without a register (a node beyond the
/// node table, a hop without a node ID, or beyond the flow's tracked hops).
pub struct PerHopPass<'a> {
    pub regs: Regs<'a>,
    pub metric: usize,
    pub threshold: u64,
    pub fired: bool,
    pub untracked: u64,
}

impl PerHopPass<'_> {
    /// Hop `p` (path order) of node `node_id` carries `v`.
    #[inline]
    pub fn hop(&mut self, p: usize, node_id: Option<u32>, v: u32) {
        let r = match (&mut self.regs, node_id) {
            (Regs::Node(n), Some(id)) => n.get(id).map(|r| &mut r[self.metric]),
            (Regs::Node(_), None) => None,
            (Regs::Flow(f), _) => f.get_mut(p),
        };
        let Some(r) = r else {
            self.untracked += 1;
            return;
        };
        if (v.abs_diff(*r) as u64) > self.threshold {
            *r = v;
            self.fired = true;
        }
    }
}

/// What a rule decided for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub report: bool,
    /// The rule watches queue occupancy and fired (the report's Q flag).
    pub queue: bool,
}

/// Runs `rule` on a packet of the flow in state `st` with sums `s`;
/// `per_hop_fired`: what the per-hop pass found (per_hop only); `cnf`: the
/// packet's pass over its hops (cnf only); `now` and `last_report` (the
/// flow's, 0: none) for interval.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn decide(
    rule: &DetectRule,
    st: &mut FlowDetect,
    s: &Sums,
    per_hop_fired: bool,
    cnf: Option<&CnfPass>,
    now: u64,
    last_report: &mut u64,
    c: &RuleCounters,
) -> Decision {
    super::bump(&c.evaluated);
    let needs_metric = matches!(rule.algorithm, Algorithm::PerHop | Algorithm::PerFlow | Algorithm::Ewma { .. });
    let mut cnf_queue = false;
    let fired = if needs_metric && !s.carried[rule.metric] {
        super::bump(&c.metric_absent);
        false
    } else {
        let sum = s.sum[rule.metric];
        match rule.algorithm {
            Algorithm::PerHop => per_hop_fired,
            Algorithm::PerFlow => {
                let fire = sum.abs_diff(st.s[0] as u64) > rule.threshold;
                if fire {
                    st.s[0] = sum as i64;
                }
                fire
            }
            Algorithm::Ewma { weight } => {
                let target = (sum as i64).saturating_mul(256);
                st.s[1] += (weight as i64 * (target - st.s[1])) >> 8;
                let m = (st.s[1] >> 8) as u64;
                let fire = m.abs_diff(st.s[0] as u64) > rule.threshold;
                if fire {
                    st.s[0] = m as i64;
                }
                fire
            }
            Algorithm::Cnf { weight } => match (&rule.cnf, cnf) {
                (Some(c), Some(pass)) if c.1.carried(&s.carried) => {
                    let e2e = s.carried[HOP_LATENCY].then_some(s.sum[HOP_LATENCY]);
                    let (fire, queue) = pass.holds(st, e2e, weight);
                    cnf_queue = queue;
                    fire
                }
                _ => {
                    super::bump(&c.metric_absent);
                    false
                }
            },
            Algorithm::Noop => true,
            Algorithm::None => false,
            Algorithm::Interval { tsc, .. } => {
                let fire = *last_report == 0 || now.wrapping_sub(*last_report) >= tsc;
                if fire {
                    *last_report = now.max(1);
                }
                fire
            }
        }
    };
    super::bump(if fired { &c.reported } else { &c.suppressed });
    Decision { report: fired, queue: (fired && rule.metric == QUEUE && needs_metric) || cnf_queue }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::int::watch::Role;

    fn rule(algorithm: Algorithm, threshold: u64) -> DetectRule {
        DetectRule {
            matcher: WatchRule::any("r", Role::None),
            algorithm,
            metric: HOP_LATENCY,
            threshold,
            slot: 0,
            cnf: None,
        }
    }

    fn run(r: &DetectRule, seq: &[u64]) -> Vec<bool> {
        let (mut st, c, mut last) = (FlowDetect::default(), RuleCounters::default(), 0);
        seq.iter()
            .enumerate()
            .map(|(i, &v)| {
                let s = Sums { sum: [v, 0, 0], carried: [true, false, false] };
                decide(r, &mut st, &s, false, None, 1 + i as u64, &mut last, &c).report
            })
            .collect()
    }

    #[test]
    fn per_flow_reports_on_a_delta_from_the_last_report() {
        // P starts at 0: the first packet fires when S > T.
        let got = run(&rule(Algorithm::PerFlow, 10), &[5, 11, 20, 21, 22, 10, 0, 35]);
        // P: 0 -> (5: no) -> 11 -> (20: |9| no) -> (21: 10 no) -> 22 (|11|) -> (10: 12 > 10) 10 -> (0: no) -> 35.
        assert_eq!(got, [false, true, false, false, true, true, false, true]);
    }

    #[test]
    fn ewma_follows_the_integer_rule_with_a_quarter_weight() {
        // M (8 fractional bits) += (64 * (S*256 - M)) >> 8; compare M >> 8.
        // S = 100: M = 6400 (25), 11200 (43.75), 14800 (57.8), 17500 (68.4)...
        let r = rule(Algorithm::Ewma { weight: 64 }, 20);
        let mut m: i64 = 0;
        let mut p: u64 = 0;
        let mut want = Vec::new();
        for s in [100u64, 100, 100, 100, 100, 0, 0, 0] {
            m += (64 * (s as i64 * 256 - m)) >> 8;
            let v = (m >> 8) as u64;
            want.push(v.abs_diff(p) > 20);
            if v.abs_diff(p) > 20 {
                p = v;
            }
        }
        assert_eq!(
            want,
            [true, false, true, false, false, false, false, true],
            "hand-worked: 25, 43, 57, 68, 76, 57, 42, 32"
        );
        assert_eq!(run(&r, &[100, 100, 100, 100, 100, 0, 0, 0]), want);
    }

    #[test]
    fn noop_none_and_interval() {
        assert_eq!(run(&rule(Algorithm::Noop, 0), &[0, 0]), [true, true]);
        assert_eq!(run(&rule(Algorithm::None, 0), &[9, 9]), [false, false]);
        // Packets at ticks 1..=6, an interval of 3: 1, 4.
        assert_eq!(
            run(&rule(Algorithm::Interval { ms: 3, tsc: 3 }, 0), &[0; 6]),
            [true, false, false, true, false, false]
        );
    }

    #[test]
    fn a_metric_the_bitmap_lacks_fires_nothing_and_is_counted() {
        let mut r = rule(Algorithm::PerFlow, 0);
        r.metric = QUEUE;
        let (mut st, c, mut last) = (FlowDetect::default(), RuleCounters::default(), 0);
        let s = Sums { sum: [100, 0, 0], carried: [true, false, false] };
        assert!(!decide(&r, &mut st, &s, false, None, 1, &mut last, &c).report);
        assert_eq!(c.get(), [1, 0, 1, 1]);
        let q = Sums { sum: [0, 50, 0], carried: [true, true, false] };
        assert_eq!(decide(&r, &mut st, &q, false, None, 2, &mut last, &c), Decision { report: true, queue: true });
    }

    #[test]
    fn per_hop_registers_move_only_when_they_fire_and_are_shared() {
        let mut regs = NodeRegs::new(2);
        let pass = |regs: &mut NodeRegs, hops: &[(u32, u32)]| {
            let mut p =
                PerHopPass { regs: Regs::Node(regs), metric: HOP_LATENCY, threshold: 10, fired: false, untracked: 0 };
            for (i, &(n, v)) in hops.iter().enumerate() {
                p.hop(i, Some(n), v);
            }
            (p.fired, p.untracked)
        };
        assert_eq!(pass(&mut regs, &[(1, 5), (2, 11)]), (true, 0), "node 2: 11 > 0 + 10");
        assert_eq!(pass(&mut regs, &[(1, 10), (2, 15)]), (false, 0), "node 1 stays at 0: |10| is not > 10");
        // Another flow on the same nodes sees the same registers.
        assert_eq!(pass(&mut regs, &[(1, 11)]), (true, 0));
        assert_eq!(pass(&mut regs, &[(1, 21), (3, 100)]), (false, 1), "R[1] = 11; node 3 has no room");
    }

    #[test]
    fn rules_keep_priority_order_and_slots() {
        let mut d = DetectSpec::default();
        let mut a = rule(Algorithm::Noop, 0);
        a.matcher.priority = 1;
        let mut b = rule(Algorithm::None, 0);
        b.matcher.name = "b".into();
        b.matcher.priority = 5;
        b.slot = d.free_slot().unwrap();
        d.upsert(b);
        a.slot = d.free_slot().unwrap();
        d.upsert(a);
        assert_eq!(d.rules.iter().map(|r| (r.matcher.name.as_str(), r.slot)).collect::<Vec<_>>(), [("b", 0), ("r", 1)]);
        assert_eq!(d.version, 2);
        assert!(d.remove("b").is_some() && d.remove("b").is_none());
        assert_eq!(d.free_slot(), Some(0));
    }

    #[test]
    fn per_flow_scope_keeps_a_register_per_hop_of_the_flow() {
        let mut regs = [0u32; 2];
        let pass = |regs: &mut [u32], hops: &[(u32, u32)]| {
            let mut p =
                PerHopPass { regs: Regs::Flow(regs), metric: HOP_LATENCY, threshold: 10, fired: false, untracked: 0 };
            for (i, &(n, v)) in hops.iter().enumerate() {
                p.hop(i, Some(n), v);
            }
            (p.fired, p.untracked)
        };
        // The same node at two hops has two registers; a third hop has none.
        assert_eq!(pass(&mut regs, &[(7, 11), (7, 5)]), (true, 0));
        assert_eq!(regs, [11, 0], "R moves only where it fired");
        assert_eq!(pass(&mut regs, &[(7, 15), (7, 16), (8, 99)]), (true, 1));
        assert_eq!(regs, [11, 16]);
        // Another flow's registers are its own.
        let mut other = [0u32; 2];
        assert_eq!(pass(&mut other, &[(7, 15)]), (true, 0));
        assert_eq!(regs, [11, 16]);
    }
}
