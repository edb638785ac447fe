//! Complex event detection in conjunctive normal form (int-event-detection
//! §III-B, FastReact's operators): up to 8 clauses ANDed, each up to 4
//! literals ORed. A literal is `metric[.selector][.transform] OP value`:
//! - metric: `hop_latency`, `queue`, `tx_util` (per hop; a selector is
//!   required) or `e2e_latency` (the sum of every hop's latency; none);
//! - selector: `hopN` (the N-th hop in path order, source side first, 0
//!   based; false when the path is shorter), `any` (some hop satisfies the
//!   comparison), `max`, `sum` (over the hops that carry the value);
//! - transform: `value` (default), `delta` (minus the same quantity in the
//!   flow's previous packet; false on its first packet), `ewma` (the
//!   detection rule's integer EWMA of the quantity, `M += (k * (x*256 -
//!   M)) >> 8`, compared as `M >> 8`). `any` takes `value` or `delta`
//!   (each hop against its own previous value, for the hops the flow's
//!   entry tracks); `ewma` needs one quantity, so not `any`;
//! - OP: `==`, `!=`, `>`, `<`; value: a signed integer.
//!
//! `delta` and `ewma` on a quantity keep one state word in the flow's
//! detection state: at most 4 such literals an expression. Every literal
//! is evaluated on every packet (its state moves whatever the others
//! say). Keywords are case-insensitive; an OR clause next to an AND needs
//! parentheses. Errors give the 1-based character position.

use crate::int::analytics::cache::{HOP_LATENCY, METRICS, QUEUE, TX_UTIL};
use crate::int::analytics::detect::FlowDetect;

pub const MAX_CLAUSES: usize = 8;
pub const MAX_CLAUSE_LITERALS: usize = 4;
/// Literals with their own state (delta or ewma of one quantity).
pub const MAX_STATEFUL: usize = 4;
/// Highest N of `hopN` (the INT header holds at most 255 hops).
pub const MAX_HOP_SELECTOR: u8 = 254;
const MAX_LITERALS: usize = MAX_CLAUSES * MAX_CLAUSE_LITERALS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    Hop(u8),
    Any,
    Max,
    Sum,
    /// `e2e_latency`: every hop's latency summed.
    E2e,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Value,
    Delta,
    Ewma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
}

impl Op {
    #[inline]
    fn test(self, x: i64, v: i64) -> bool {
        match self {
            Op::Eq => x == v,
            Op::Ne => x != v,
            Op::Gt => x > v,
            Op::Lt => x < v,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Literal {
    /// `cache::HOP_LATENCY`, `QUEUE` or `TX_UTIL` (e2e: HOP_LATENCY).
    pub metric: usize,
    pub selector: Selector,
    pub transform: Transform,
    pub op: Op,
    pub value: i64,
    /// Its state word in `FlowDetect::s` (delta or ewma of a quantity).
    pub slot: u8,
}

/// A parsed expression: literals in order, each clause a range of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cnf {
    pub literals: Vec<Literal>,
    /// (first literal, count) per clause.
    pub clauses: Vec<(u8, u8)>,
    /// Per metric, the literals that look at each hop's value (a bit each).
    pub per_hop: [u32; METRICS],
    /// The text it was parsed from, normalised (one space between tokens).
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnfError {
    /// 1-based character position (0: the expression as a whole).
    pub pos: usize,
    pub reason: String,
}

impl std::fmt::Display for CnfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pos == 0 {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "at {}: {}", self.pos, self.reason)
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Num(i64),
    Op(Op),
    Open,
    Close,
    And,
    Or,
}

fn err(pos: usize, reason: impl Into<String>) -> CnfError {
    CnfError { pos, reason: reason.into() }
}

/// (token, 1-based position).
fn lex(s: &str) -> Result<Vec<(Tok, usize)>, CnfError> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let pos = i + 1;
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
            continue;
        }
        let two: String = c[i..(i + 2).min(c.len())].iter().collect();
        let (tok, len) = match ch {
            '(' => (Tok::Open, 1),
            ')' => (Tok::Close, 1),
            '>' => (Tok::Op(Op::Gt), 1),
            '<' => (Tok::Op(Op::Lt), 1),
            '=' if two == "==" => (Tok::Op(Op::Eq), 2),
            '!' if two == "!=" => (Tok::Op(Op::Ne), 2),
            '-' | '0'..='9' => {
                let mut j = i + 1;
                while j < c.len() && c[j].is_ascii_digit() {
                    j += 1;
                }
                let text: String = c[i..j].iter().collect();
                let n = text.parse::<i64>().map_err(|_| err(pos, format!("'{text}' is not a number")))?;
                if n.unsigned_abs() > 1 << 40 {
                    return Err(err(pos, format!("{n} is beyond +-2^40")));
                }
                (Tok::Num(n), j - i)
            }
            c0 if c0.is_ascii_alphabetic() || c0 == '_' => {
                let mut j = i;
                while j < c.len() && (c[j].is_ascii_alphanumeric() || c[j] == '_' || c[j] == '.') {
                    j += 1;
                }
                let w: String = c[i..j].iter().collect();
                let t = match w.to_ascii_lowercase().as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    _ => Tok::Word(w),
                };
                (t, j - i)
            }
            other => return Err(err(pos, format!("unexpected '{other}'"))),
        };
        out.push((tok, pos));
        i += len;
    }
    Ok(out)
}

fn literal(path: &str, pos: usize, op: Op, value: i64) -> Result<Literal, CnfError> {
    let mut parts = path.split('.');
    let name = parts.next().unwrap_or("");
    let (metric, e2e) = match name {
        "hop_latency" => (HOP_LATENCY, false),
        "queue" => (QUEUE, false),
        "tx_util" => (TX_UTIL, false),
        "e2e_latency" => (HOP_LATENCY, true),
        _ => return Err(err(pos, format!("'{name}' is not hop_latency, queue, tx_util or e2e_latency"))),
    };
    let rest: Vec<&str> = parts.collect();
    let (sel, tf) = match rest.as_slice() {
        [] => (None, None),
        [a] if matches!(*a, "value" | "delta" | "ewma") => (None, Some(*a)),
        [a] => (Some(*a), None),
        [a, b] => (Some(*a), Some(*b)),
        _ => return Err(err(pos, format!("'{path}': metric[.selector][.transform]"))),
    };
    let selector = match (sel, e2e) {
        (None, true) => Selector::E2e,
        (Some(s), true) => return Err(err(pos, format!("e2e_latency takes no selector ('{s}')"))),
        (None, false) => return Err(err(pos, format!("{name} needs a selector: hopN, any, max or sum"))),
        (Some("any"), false) => Selector::Any,
        (Some("max"), false) => Selector::Max,
        (Some("sum"), false) => Selector::Sum,
        (Some(s), false) => match s.strip_prefix("hop").map(str::parse::<u8>) {
            Some(Ok(n)) if n <= MAX_HOP_SELECTOR => Selector::Hop(n),
            _ => return Err(err(pos, format!("'{s}' is not hopN (0-{MAX_HOP_SELECTOR}), any, max or sum"))),
        },
    };
    let transform = match tf.unwrap_or("value") {
        "value" => Transform::Value,
        "delta" => Transform::Delta,
        "ewma" => Transform::Ewma,
        t => return Err(err(pos, format!("'{t}' is not value, delta or ewma"))),
    };
    if selector == Selector::Any && transform == Transform::Ewma {
        return Err(err(pos, "ewma needs one quantity: hopN, max, sum or e2e_latency, not any"));
    }
    Ok(Literal { metric, selector, transform, op, value, slot: 0 })
}

impl Cnf {
    pub fn parse(text: &str) -> Result<Cnf, CnfError> {
        let toks = lex(text)?;
        if toks.is_empty() {
            return Err(err(0, "empty expression"));
        }
        let end = text.chars().count() + 1;
        let mut literals: Vec<Literal> = Vec::new();
        let mut clauses: Vec<(u8, u8)> = Vec::new();
        // The normalised text: clauses so far, and the current one's words.
        let (mut out, mut words) = (Vec::new(), Vec::new());
        // An OR outside parentheses, and an AND: refused once both are seen.
        let (mut bare_or, mut and_at) = (None, None);
        let mut i = 0;
        loop {
            let (open, at) = match toks.get(i) {
                Some((Tok::Open, p)) => (true, *p),
                Some((_, p)) => (false, *p),
                None => return Err(err(end, "a literal was expected")),
            };
            if clauses.len() == MAX_CLAUSES {
                return Err(err(at, format!("more than {MAX_CLAUSES} clauses")));
            }
            i += open as usize;
            let first = literals.len();
            loop {
                let (path, p) = match toks.get(i) {
                    Some((Tok::Word(w), p)) => (w.clone(), *p),
                    Some((_, p)) => return Err(err(*p, "a metric was expected")),
                    None => return Err(err(end, "a metric was expected")),
                };
                let op = match toks.get(i + 1) {
                    Some((Tok::Op(o), _)) => *o,
                    Some((_, p)) => return Err(err(*p, "an operator (== != > <) was expected")),
                    None => return Err(err(end, "an operator (== != > <) was expected")),
                };
                let value = match toks.get(i + 2) {
                    Some((Tok::Num(n), _)) => *n,
                    Some((_, p)) => return Err(err(*p, "a number was expected")),
                    None => return Err(err(end, "a number was expected")),
                };
                if literals.len() - first == MAX_CLAUSE_LITERALS {
                    return Err(err(p, format!("more than {MAX_CLAUSE_LITERALS} literals in a clause")));
                }
                literals.push(literal(&path, p, op, value)?);
                words.push(format!("{path} {} {value}", ["==", "!=", ">", "<"][op as usize]));
                i += 3;
                match toks.get(i) {
                    Some((Tok::Or, p)) => {
                        if !open {
                            bare_or = bare_or.or(Some(*p));
                        }
                        words.push("OR".into());
                        i += 1;
                    }
                    _ => break,
                }
            }
            let n = literals.len() - first;
            let joined = words.join(" ");
            words.clear();
            if open {
                match toks.get(i) {
                    Some((Tok::Close, _)) => i += 1,
                    Some((_, p)) => return Err(err(*p, "')' or OR was expected")),
                    None => return Err(err(end, "')' was expected")),
                }
            }
            clauses.push((first as u8, n as u8));
            out.push(if open && n > 1 { format!("({joined})") } else { joined });
            match toks.get(i) {
                None => break,
                Some((Tok::And, p)) => {
                    and_at = and_at.or(Some(*p));
                    out.push("AND".into());
                    i += 1;
                }
                Some((_, p)) => return Err(err(*p, "AND, OR or the end was expected")),
            }
            if let (Some(p), Some(_)) = (bare_or, and_at) {
                return Err(err(p, "an OR clause next to AND needs parentheses"));
            }
        }
        if let (Some(p), Some(_)) = (bare_or, and_at) {
            return Err(err(p, "an OR clause next to AND needs parentheses"));
        }
        // State words, in order of the literals that need one.
        let mut next = 0u8;
        for l in &mut literals {
            if l.transform != Transform::Value && l.selector != Selector::Any {
                if next as usize == MAX_STATEFUL {
                    return Err(err(0, format!("more than {MAX_STATEFUL} delta or ewma literals on a quantity")));
                }
                l.slot = next;
                next += 1;
            }
        }
        let mut per_hop = [0u32; METRICS];
        for (i, l) in literals.iter().enumerate() {
            if l.selector != Selector::E2e {
                per_hop[l.metric] |= 1 << i;
            }
        }
        debug_assert!(literals.len() <= MAX_LITERALS);
        Ok(Cnf { literals, clauses, per_hop, text: out.join(" ") })
    }

    /// Whether every metric the literals read is in the packet's bitmap.
    #[inline]
    pub fn carried(&self, carried: &[bool; METRICS]) -> bool {
        self.literals.iter().all(|l| carried[l.metric])
    }
}

/// One packet's pass over its hops for a CNF rule: per literal, the
/// selected quantity (hopN, max, sum) or whether some hop satisfied it
/// (any).
pub struct CnfPass<'a> {
    pub cnf: &'a Cnf,
    acc: [i64; MAX_LITERALS],
    /// Literals with a quantity (hopN: the path reached hop N).
    has: u32,
    /// `any` literals some hop satisfied.
    any: u32,
}

impl<'a> CnfPass<'a> {
    pub fn new(cnf: &'a Cnf) -> CnfPass<'a> {
        CnfPass { cnf, acc: [0; MAX_LITERALS], has: 0, any: 0 }
    }

    /// Hop `p` (path order) carries `v` for metric `m`; `prev`: the flow's
    /// previous packet's value at that hop, where its entry tracks it.
    #[inline]
    pub fn hop(&mut self, p: usize, m: usize, v: u32, prev: Option<u32>) {
        let mut bits = self.cnf.per_hop[m];
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let l = &self.cnf.literals[i];
            let v = v as i64;
            match l.selector {
                Selector::Hop(n) if n as usize == p => {
                    self.acc[i] = v;
                    self.has |= 1 << i;
                }
                Selector::Max => {
                    self.acc[i] = if self.has & (1 << i) != 0 { self.acc[i].max(v) } else { v };
                    self.has |= 1 << i;
                }
                Selector::Sum => {
                    self.acc[i] += v;
                    self.has |= 1 << i;
                }
                Selector::Any => {
                    let x = match (l.transform, prev) {
                        (Transform::Delta, Some(pv)) => Some(v - pv as i64),
                        (Transform::Delta, None) => None,
                        _ => Some(v),
                    };
                    if x.is_some_and(|x| l.op.test(x, l.value)) {
                        self.any |= 1 << i;
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether the expression holds for this packet, and whether a queue
    /// literal held too (the report's Q flag), moving the flow's delta and
    /// ewma state (`weight`: k of k/256); `e2e`: every hop's latency summed
    /// (None: the bitmap lacks it).
    pub fn holds(&self, st: &mut FlowDetect, e2e: Option<u64>, weight: u32) -> (bool, bool) {
        let mut truth = 0u32;
        for (i, l) in self.cnf.literals.iter().enumerate() {
            let x = match l.selector {
                Selector::Any => {
                    truth |= self.any & (1 << i);
                    continue;
                }
                Selector::E2e => e2e.map(|s| s.min(i64::MAX as u64) as i64),
                _ => (self.has & (1 << i) != 0).then_some(self.acc[i]),
            };
            let Some(x) = x else { continue };
            let s = l.slot as usize;
            let y = match l.transform {
                Transform::Value => Some(x),
                Transform::Delta => {
                    let d = (st.valid & (1 << s) != 0).then(|| x - st.s[s]);
                    st.s[s] = x;
                    st.valid |= 1 << s;
                    d
                }
                Transform::Ewma => {
                    st.s[s] += (weight as i64 * (x.saturating_mul(256) - st.s[s])) >> 8;
                    Some(st.s[s] >> 8)
                }
            };
            if y.is_some_and(|y| l.op.test(y, l.value)) {
                truth |= 1 << i;
            }
        }
        let all = self.cnf.clauses.iter().all(|&(first, n)| (truth >> first) & ((1u32 << n) - 1) != 0);
        (all, all && truth & self.cnf.per_hop[QUEUE] != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(c: &Cnf, i: usize) -> (usize, Selector, Transform, Op, i64) {
        let l = c.literals[i];
        (l.metric, l.selector, l.transform, l.op, l.value)
    }

    #[test]
    fn the_issues_example_parses_into_two_clauses() {
        let c = Cnf::parse("hop_latency.max > 10000 AND (queue.any.delta > 100 OR e2e_latency > 50000)").unwrap();
        assert_eq!(c.clauses, [(0, 1), (1, 2)]);
        assert_eq!(lit(&c, 0), (HOP_LATENCY, Selector::Max, Transform::Value, Op::Gt, 10000));
        assert_eq!(lit(&c, 1), (QUEUE, Selector::Any, Transform::Delta, Op::Gt, 100));
        assert_eq!(lit(&c, 2), (HOP_LATENCY, Selector::E2e, Transform::Value, Op::Gt, 50000));
        assert_eq!(c.text, "hop_latency.max > 10000 AND (queue.any.delta > 100 OR e2e_latency > 50000)");
        assert_eq!(c.per_hop, [0b001, 0b010, 0], "e2e reads no hop");
        // Keywords in any case, a lone OR clause without parentheses,
        // negative values, hopN.
        let c = Cnf::parse("queue.hop2.delta < -5 or tx_util.sum == 0").unwrap();
        assert_eq!(c.clauses, [(0, 2)]);
        assert_eq!(lit(&c, 0), (QUEUE, Selector::Hop(2), Transform::Delta, Op::Lt, -5));
        assert_eq!(lit(&c, 1), (TX_UTIL, Selector::Sum, Transform::Value, Op::Eq, 0));
    }

    #[test]
    fn errors_name_the_position() {
        for (text, pos, what) in [
            ("", 0, "empty"),
            ("jitter.max > 1", 1, "is not hop_latency"),
            ("queue > 1", 1, "needs a selector"),
            ("queue.hop300 > 1", 1, "is not hopN"),
            ("queue.max.square > 1", 1, "is not value, delta or ewma"),
            ("queue.any.ewma > 1", 1, "not any"),
            ("e2e_latency.max > 1", 1, "takes no selector"),
            ("queue.max >= 1", 12, "unexpected '='"),
            ("queue.max 1", 11, "an operator"),
            ("queue.max > ", 13, "a number"),
            ("queue.max > 1 AND", 18, "a literal"),
            ("queue.max > 1 AND queue.sum > 2 OR queue.any > 3", 33, "needs parentheses"),
            ("queue.max > 1 OR queue.sum > 2 AND queue.any > 3", 15, "needs parentheses"),
            ("(queue.max > 1", 15, "')'"),
            ("queue.max > 1 queue.sum > 2", 15, "AND, OR"),
            ("queue.max > 1 # 2", 15, "unexpected '#'"),
            ("queue.max > 99999999999999", 13, "beyond"),
        ] {
            let e = Cnf::parse(text).unwrap_err();
            assert_eq!(e.pos, pos, "{text}: {e}");
            assert!(e.reason.contains(what), "{text}: {e}");
        }
        let five = "(queue.max > 1 OR queue.max > 2 OR queue.max > 3 OR queue.max > 4 OR queue.max > 5)";
        assert!(Cnf::parse(five).unwrap_err().reason.contains("more than 4 literals"));
        let nine = ["queue.max > 1"; 9].join(" AND ");
        assert!(Cnf::parse(&nine).unwrap_err().reason.contains("more than 8 clauses"));
        let five_state = ["queue.max.delta > 1"; 5].join(" AND ");
        assert!(Cnf::parse(&five_state).unwrap_err().reason.contains("more than 4 delta"));
    }

    /// Runs `cnf` over packets given as per-hop (hop latency, queue) and
    /// the entry's previous values (the previous packet's, same path).
    fn run(text: &str, packets: &[&[(u32, u32)]]) -> Vec<bool> {
        let c = Cnf::parse(text).unwrap();
        let mut st = FlowDetect::default();
        let mut prev: Vec<(u32, u32)> = Vec::new();
        packets
            .iter()
            .map(|hops| {
                let mut pass = CnfPass::new(&c);
                for (p, &(lat, q)) in hops.iter().enumerate() {
                    let pv = prev.get(p).copied();
                    pass.hop(p, HOP_LATENCY, lat, pv.map(|x| x.0));
                    pass.hop(p, QUEUE, q, pv.map(|x| x.1));
                }
                prev = hops.to_vec();
                let e2e = hops.iter().map(|h| h.0 as u64).sum();
                pass.holds(&mut st, Some(e2e), 64).0
            })
            .collect()
    }

    #[test]
    fn three_clauses_mixing_or_delta_and_max_fire_where_the_definition_says() {
        // Latency over 100 somewhere, and (a queue grew by over 10 since the
        // last packet, or e2e over 250), and hop 1's queue is not 0.
        let text = "hop_latency.max > 100 AND (queue.any.delta > 10 OR e2e_latency > 250) AND queue.hop1 != 0";
        let got = run(
            text,
            &[
                &[(50, 5), (120, 5)],  // max 120; no previous: no delta; e2e 170: clause 2 false
                &[(50, 20), (120, 5)], // hop 0's queue +15: true; hop1 queue 5: true
                &[(50, 20), (120, 0)], // hop1 queue 0: false
                &[(50, 20), (90, 7)],  // max 90: false
                &[(200, 20), (90, 7)], // max 200, e2e 290: true
                &[(200, 20)],          // no hop 1: false
            ],
        );
        assert_eq!(got, [false, true, false, false, true, false]);
    }

    #[test]
    fn delta_and_ewma_of_a_quantity_keep_their_state_on_every_packet() {
        // queue.sum.delta: none on the first packet, then the difference.
        let got = run("queue.sum.delta > 5 OR queue.sum.delta < -5", &[&[(0, 10)], &[(0, 20)], &[(0, 22)], &[(0, 1)]]);
        assert_eq!(got, [false, true, false, true]);
        // ewma of hop 0's latency, w = 1/4, by hand: 25, 43, 57 (S = 100).
        let got = run("hop_latency.hop0.ewma > 40", &[&[(100, 0)], &[(100, 0)], &[(100, 0)]]);
        assert_eq!(got, [false, true, true]);
        // The state of an ewma literal moves even when an earlier literal
        // of its clause already holds.
        let got = run("hop_latency.max > 0 OR hop_latency.hop0.ewma > 40", &[&[(100, 0)], &[(100, 0)], &[(0, 0)]]);
        // Third: max 0 fails; M was 43.75 -> 32.8: not > 40.
        assert_eq!(got, [true, true, false]);
        let got = run("hop_latency.hop0.ewma > 40", &[&[(100, 0)], &[(100, 0)], &[(60, 0)]]);
        // M: 25, 43.75, 47.8: > 40 on the second and third.
        assert_eq!(got, [false, true, true]);
    }

    #[test]
    fn every_operator_and_the_carried_check() {
        for (op, want) in [
            ("==", [false, true, false]),
            ("!=", [true, false, true]),
            (">", [false, false, true]),
            ("<", [true, false, false]),
        ] {
            let got = run(&format!("queue.hop0 {op} 5"), &[&[(0, 4)], &[(0, 5)], &[(0, 6)]]);
            assert_eq!(got, want, "{op}");
        }
        let c = Cnf::parse("queue.max > 1 AND e2e_latency > 2").unwrap();
        assert!(c.carried(&[true, true, false]));
        assert!(!c.carried(&[false, true, true]), "e2e needs hop latency");
    }
}
