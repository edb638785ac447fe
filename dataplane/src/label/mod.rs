//! INT-label (int-label.txt §2-3): every egress port labels sampled user
//! packets with its state, no probes and no path planner. A port that has
//! not labeled for T labels the next packet it sends (Base A); Base B also
//! labels, with probability f(n), a packet already carrying n labels once a
//! rest time T1 has passed since the port's last label; Pro shortens a
//! port's interval to T >> S (S set by the controller). Labels are INT-MD
//! v2.1 hops on packets whose Domain Specific ID is the label domain's;
//! DS Flags bit A marks a specific flow, which every hop labels.
//!
//! The port state (last label time LT, shift S) is shared by all workers:
//! per-worker LTs would multiply the label rate by the number of workers.
//! The interval label is claimed with a compare-exchange, so one worker
//! labels per interval.

pub mod stage;

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

use crate::counters::{Event, MAX_PORTS};
use crate::int::watch::{Presence, Role, WatchFields, WatchRule};

/// DS Flags bit A (all hops): the most significant bit of the INT-MD
/// header's DS Flags. Set on specific flows' packets.
pub const DS_FLAG_A: u16 = 0x8000;
/// S that labels every packet (the paper's prototype flag).
pub const SHIFT_EVERY_PACKET: u8 = 255;
/// Largest S other than the flag.
pub const MAX_SHIFT: u8 = 16;
/// Longest explicit probability table.
pub const MAX_TABLE: usize = 8;
/// Largest MAX_hop (the label count f is indexed by stays below it).
pub const MAX_HOP_LIMIT: u8 = 16;
/// f = 1 as a threshold: a 32-bit draw is always below it.
const ONE: u64 = 1 << 32;

/// The probability function f of Base B.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelFn {
    /// 0 for n = 0, else 1 (the paper's default).
    F1,
    /// n / (MAX_hop - 1).
    F2,
    /// n / (MAX_hop - 1) x (CT - LT) / T, at most 1.
    F3,
    /// p[n] (the last entry for larger n).
    Table(Vec<f64>),
}

/// f as thresholds on a 32-bit draw, per label count (clamped to
/// MAX_hop - 1): computed once per table generation, so a packet's
/// decision is a compare (F3: and one scaling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    thr: [u64; MAX_HOP_LIMIT as usize],
    max_index: usize,
    /// F3: scaled by (CT - LT) / T.
    by_elapsed: bool,
    /// Some count has a nonzero probability (otherwise Base B is Base A).
    any: bool,
    /// From this label count on, f is 1 (F1 from 1, F2 from MAX_hop - 1,
    /// tables ending in ones; never F3): a labeled packet's outcome is
    /// known without the threshold's lookup.
    certain_from: usize,
}

impl Thresholds {
    /// `max_hop` in 2..=MAX_HOP_LIMIT (checked by the config).
    pub fn new(f: &LabelFn, max_hop: u8) -> Thresholds {
        let top = (max_hop.clamp(2, MAX_HOP_LIMIT) - 1) as usize;
        let p = |n: usize| -> f64 {
            match f {
                LabelFn::F1 => (n > 0) as u8 as f64,
                LabelFn::F2 | LabelFn::F3 => n as f64 / top as f64,
                LabelFn::Table(t) => t.get(n).or(t.last()).copied().unwrap_or(0.0),
            }
        };
        let mut thr = [0u64; MAX_HOP_LIMIT as usize];
        for (n, t) in thr.iter_mut().enumerate().take(top + 1) {
            *t = (p(n).clamp(0.0, 1.0) * ONE as f64).round() as u64;
        }
        let by_elapsed = matches!(f, LabelFn::F3);
        let certain_from = match (0..=top).rev().take_while(|&n| thr[n] >= ONE).last() {
            Some(n) if !by_elapsed => n,
            _ => usize::MAX,
        };
        Thresholds { thr, max_index: top, by_elapsed, any: thr.iter().any(|&t| t > 0), certain_from }
    }

    /// Whether f(n) is 1 for a packet carrying `n` labels.
    #[inline(always)]
    pub fn certain(&self, n: usize) -> bool {
        n >= self.certain_from
    }

    /// The threshold for a packet carrying `n` labels, `elapsed` ticks
    /// after the port's last label, with interval `t` ticks.
    #[inline]
    pub fn threshold(&self, n: usize, elapsed: u64, t: u64) -> u64 {
        let base = self.thr[n.min(self.max_index)];
        if !self.by_elapsed {
            return base;
        }
        ((base as u128 * elapsed as u128) / t.max(1) as u128).min(ONE as u128) as u64
    }

    /// Whether a packet carrying no labels can be labeled by chance (f(0)
    /// above 0: only an explicit table has it).
    #[inline]
    pub fn draws_unlabeled(&self) -> bool {
        self.thr[0] > 0
    }

    /// The probability a threshold stands for (for display and tests).
    pub fn probability(&self, n: usize) -> f64 {
        self.thr[n.min(self.max_index)] as f64 / ONE as f64
    }
}

/// Why a port labeled a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// CT - LT > T (Base A).
    Interval,
    /// With probability f(n) after the rest time (Base B).
    Probabilistic,
    /// CT - LT > T >> S but not > T, or S = 255 (Pro).
    Pro,
    /// A specific flow (DS flag A): every hop.
    Specific,
}

impl Kind {
    pub fn event(self) -> Event {
        match self {
            Kind::Interval => Event::LabelInterval,
            Kind::Probabilistic => Event::LabelProbabilistic,
            Kind::Pro => Event::LabelPro,
            Kind::Specific => Event::LabelSpecific,
        }
    }
}

/// One port's shared label state, alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct PortLabel {
    /// Last label time (TSC).
    lt: AtomicU64,
    /// S: the interval is T >> S (255: every packet).
    shift: AtomicU8,
}

/// A label a port decided on: kept until the push succeeds, given back
/// (`LabelPorts::undo`) when it does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub port: usize,
    pub kind: Kind,
    /// LT before the claim.
    prev: u64,
    /// The label time CT.
    pub ct: u64,
}

/// The label state of every switch port, shared by the workers and the
/// control core (`intctl show label`, `intctl label set-shift`).
#[derive(Debug)]
pub struct LabelPorts {
    ports: [PortLabel; MAX_PORTS],
}

impl Default for LabelPorts {
    fn default() -> Self {
        LabelPorts { ports: std::array::from_fn(|_| PortLabel::default()) }
    }
}

/// The label interval and rest time of a generation, in TSC ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    /// T.
    pub interval: u64,
    /// T1 (<= T).
    pub rest: u64,
}

impl Times {
    /// The interval a port with shift S labels at: T >> S (Pro).
    #[inline]
    pub fn interval_at(&self, s: u8) -> u64 {
        self.interval >> s.min(MAX_SHIFT)
    }

    /// The rest time T1 >> S that goes with it.
    #[inline]
    pub fn rest_at(&self, s: u8) -> u64 {
        self.rest >> s.min(MAX_SHIFT)
    }
}

impl LabelPorts {
    /// Whether port `port` labels a packet carrying `n` labels at `ct`
    /// (Base A, then Base B with `f` when it has any probability; Pro by the
    /// port's S). `draw` gives a uniform 32-bit number, asked only where
    /// the outcome is not certain (f(n) strictly between 0 and 1).
    #[inline(always)]
    pub fn decide(
        &self,
        port: usize,
        ct: u64,
        n: usize,
        times: Times,
        f: &Thresholds,
        draw: impl FnOnce() -> u32,
    ) -> Option<Claim> {
        let p = self.ports.get(port)?;
        let lt = p.lt.load(Relaxed);
        let s = p.shift.load(Relaxed);
        if s == SHIFT_EVERY_PACKET {
            p.lt.store(ct, Relaxed);
            return Some(Claim { port, kind: Kind::Pro, prev: lt, ct });
        }
        // Another worker's later label reads as "just labeled".
        let elapsed = ct.saturating_sub(lt);
        if elapsed > times.interval_at(s) {
            // The interval label: exactly one worker wins it.
            p.lt.compare_exchange(lt, ct, Relaxed, Relaxed).ok()?;
            let kind = if elapsed > times.interval { Kind::Interval } else { Kind::Pro };
            return Some(Claim { port, kind, prev: lt, ct });
        }
        // T1 = 0 is no rest at all, also for a packet of the burst whose
        // label set LT (CT is the burst's receive time).
        let rest = times.rest_at(s);
        if f.any
            && (rest == 0 || elapsed > rest)
            && (f.certain(n) || {
                // No draw where f(n) is 0 (an unlabeled packet under F1-F3) or
                // 1: the outcome is certain.
                let thr = f.threshold(n, elapsed, times.interval);
                thr > 0 && (thr >= ONE || (draw() as u64) < thr)
            })
        {
            p.lt.store(ct, Relaxed);
            return Some(Claim { port, kind: Kind::Probabilistic, prev: lt, ct });
        }
        None
    }

    /// Whether port `port` is due for its interval label at `ct` (T >> S
    /// since its last label, or S labels every packet): `decide`'s first
    /// test, reading LT and S and changing nothing.
    #[inline]
    pub fn due(&self, port: usize, ct: u64, times: Times) -> bool {
        let Some(p) = self.ports.get(port) else { return false };
        let s = p.shift.load(Relaxed);
        s == SHIFT_EVERY_PACKET || ct.saturating_sub(p.lt.load(Relaxed)) > times.interval_at(s)
    }

    /// A specific flow's label: always, and it refreshes LT.
    #[inline]
    pub fn force(&self, port: usize, ct: u64) -> Option<Claim> {
        let p = self.ports.get(port)?;
        let prev = p.lt.swap(ct, Relaxed);
        Some(Claim { port, kind: Kind::Specific, prev, ct })
    }

    /// The label was written: count it (per worker, by kind and port).
    #[inline(always)]
    pub fn commit(&self, c: &Claim, counters: &mut crate::counters::CounterValues) {
        counters.labels[c.port] += 1;
        counters.event(c.kind.event());
    }

    /// The label did not fit: LT goes back to what it was, unless another
    /// worker labeled since.
    #[inline]
    pub fn undo(&self, c: &Claim) {
        let _ = self.ports[c.port].lt.compare_exchange(c.ct, c.prev, Relaxed, Relaxed);
    }

    /// Sets S (0..=MAX_SHIFT, or SHIFT_EVERY_PACKET).
    pub fn set_shift(&self, port: usize, s: u8) -> Result<(), String> {
        if s > MAX_SHIFT && s != SHIFT_EVERY_PACKET {
            return Err(format!("shift {s}: must be 0..={MAX_SHIFT} or {SHIFT_EVERY_PACKET} (label every packet)"));
        }
        let p = self.ports.get(port).ok_or_else(|| format!("port index {port} out of range"))?;
        p.shift.store(s, Relaxed);
        Ok(())
    }

    /// (LT, S) of a port.
    pub fn state(&self, port: usize) -> (u64, u8) {
        let p = &self.ports[port];
        (p.lt.load(Relaxed), p.shift.load(Relaxed))
    }
}

/// A specific flow: the packets a rule matches, labeled at every hop (DS
/// flag A) once per `interval_tsc` by the switch they enter the domain at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRule {
    pub rule: WatchRule,
    pub interval_tsc: u64,
}

/// The label domain of a table generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSpec {
    /// This switch's node ID in the labels.
    pub node_id: u32,
    /// Domain Specific ID of label packets (nonzero).
    pub ds_id: u16,
    pub presence: Presence,
    /// Instructions of a label (0xFC00: the paper's 32-byte item).
    pub bitmap: u16,
    /// RHC of a packet's first label.
    pub max_labels: u8,
    pub times: Times,
    pub f: Thresholds,
    /// Bit per port: host-facing ports, where labels are exported and the
    /// packet restored (and specific flows enter).
    pub edge_ports: u32,
    /// Egress MTU (IP bytes) per port index.
    pub mtu: [u16; MAX_PORTS],
    /// Inner packet bytes a label report keeps (the stack always stays in).
    pub truncate: usize,
    /// Highest priority first; a `none` rule exempts packets from labels.
    /// Empty: every eligible packet.
    pub watch: Vec<WatchRule>,
    pub flows: Vec<FlowRule>,
}

impl LabelSpec {
    #[inline]
    pub fn is_edge(&self, port: usize) -> bool {
        port < 32 && self.edge_ports & (1 << port) != 0
    }

    /// Whether the watchlist lets this packet be labeled.
    #[inline]
    pub fn watched(&self, f: impl FnOnce() -> WatchFields) -> bool {
        if self.watch.is_empty() {
            return true;
        }
        let f = f();
        self.watch.iter().find(|r| r.matches(&f)).is_some_and(|r| r.role != Role::None)
    }

    /// The interval of the first specific-flow rule matching.
    #[inline]
    pub fn specific(&self, f: &WatchFields) -> Option<u64> {
        self.flows.iter().find(|r| r.rule.matches(f)).map(|r| r.interval_tsc)
    }
}

#[cfg(test)]
mod tests;
