//! Probe paths for a GPINT monitor: GPINT's balanced partition into about
//! k paths of equal length, INT-Path's Euler trails, and SNMP-style one-hop
//! polls; then each path as the probe's source-route (SR) stack, kept
//! within a probe's byte budget.
//!
//! GPINT is a reconstruction of the paper's outline (§III-A: Kernighan-Lin
//! style initial partition and exchange phase; the formal version is in its
//! reference [21], not given):
//! 1. Initial partition. Switches in (degree, index) order; each switch not
//!    yet on a path starts one, which grows at its tail (else its head) by
//!    the uncovered neighbour with the fewest uncovered neighbours (then
//!    lowest degree, then index) until it has ceil(|V|/k) switches or no
//!    uncovered neighbour.
//! 2. Exchange. Moves between neighbouring paths: an endpoint of one path
//!    to the adjacent end of another (Fig. 3a), an end segment of two
//!    switches (3b), a switch already on a path added to another as well
//!    (3c, sharing), and a shared endpoint dropped again. The objective,
//!    compared in this order: the longest path, the spread (longest minus
//!    shortest), the deficit (switches the paths shorter than longest - 1
//!    lack), the total hops. Each round applies the move that lowers it
//!    most (the first found, in path, end, neighbour order, on ties) and
//!    stops when none does: deterministic, and it ends, as the objective
//!    only falls.
//!
//! Euler (INT-Path): odd-degree switches are paired by index with virtual
//! links, Hierholzer's algorithm finds an Euler circuit, and cutting it at
//! the virtual links leaves max(1, #odd / 2) trails covering every link
//! exactly once.

use std::collections::VecDeque;

use dataplane::wire::gpint;
use serde_json::{json, Value};

use super::topology::Graph;

/// Which planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Gpint,
    Euler,
    Snmp,
}

impl std::str::FromStr for Algo {
    type Err = String;
    fn from_str(s: &str) -> Result<Algo, String> {
        match s {
            "gpint" => Ok(Algo::Gpint),
            "euler" => Ok(Algo::Euler),
            "snmp" => Ok(Algo::Snmp),
            _ => Err(format!("unknown algorithm '{s}' (gpint, euler or snmp)")),
        }
    }
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Gpint => "gpint",
            Algo::Euler => "euler",
            Algo::Snmp => "snmp",
        }
    }
}

/// A path: the switches in order, with the link taken to the next (None
/// after the last).
pub type Walk = Vec<(usize, Option<usize>)>;

/// The link taken between consecutive switches of a node path.
fn walk_of(g: &Graph, nodes: &[usize]) -> Walk {
    nodes
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, nodes.get(i + 1).map(|&w| g.edge_between(v, w).expect("consecutive switches are linked"))))
        .collect()
}

/// One-hop polls of every switch.
pub fn snmp(g: &Graph) -> Vec<Walk> {
    (0..g.len()).map(|v| vec![(v, None)]).collect()
}

/// GPINT's paths for `k` (clamped to 1..=|V|).
pub fn gpint(g: &Graph, k: usize) -> Vec<Walk> {
    let n = g.len();
    if n == 0 {
        return Vec::new();
    }
    let target = n.div_ceil(k.clamp(1, n));
    let mut ex = Exchange::new(n, target, initial_partition(g, target));
    ex.run(g);
    ex.paths.into_iter().filter(|p| !p.is_empty()).map(|p| walk_of(g, &Vec::from(p))).collect()
}

fn initial_partition(g: &Graph, target: usize) -> Vec<VecDeque<usize>> {
    let n = g.len();
    let mut covered = vec![false; n];
    // Uncovered neighbours of each switch.
    let mut free: Vec<usize> = (0..n).map(|v| g.degree(v)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&v| (g.degree(v), v));
    let mut paths = Vec::new();
    let cover = |v: usize, covered: &mut Vec<bool>, free: &mut Vec<usize>| {
        covered[v] = true;
        for &(w, _) in g.neighbours(v) {
            free[w] -= 1;
        }
    };
    for &start in &order {
        if covered[start] {
            continue;
        }
        let mut p = VecDeque::from([start]);
        cover(start, &mut covered, &mut free);
        while p.len() < target {
            let pick = |end: usize| {
                g.neighbours(end)
                    .iter()
                    .map(|&(w, _)| w)
                    .filter(|&w| !covered[w])
                    .min_by_key(|&w| (free[w], g.degree(w), w))
            };
            let tail = *p.back().expect("a path has a switch");
            let head = *p.front().expect("a path has a switch");
            if let Some(w) = pick(tail) {
                p.push_back(w);
                cover(w, &mut covered, &mut free);
            } else if let Some(w) = pick(head) {
                p.push_front(w);
                cover(w, &mut covered, &mut free);
            } else {
                break;
            }
        }
        paths.push(p);
    }
    paths
}

/// (longest, spread, deficit, total hops): lower is better, in this order.
type Score = (usize, usize, usize, usize);

/// A candidate move of the exchange phase.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// Path `from`'s end `from_end` (0 head, 1 tail) moves `count` (1 or 2)
    /// switches onto path `to`'s end `to_end`.
    Shift { from: usize, from_end: usize, count: usize, to: usize, to_end: usize },
    /// Switch `node` (on another path) is added at `to`'s end too.
    Share { node: usize, to: usize, to_end: usize },
    /// Path `from`'s end switch, which another path also has, is dropped.
    Unshare { from: usize, from_end: usize },
}

struct Exchange {
    paths: Vec<VecDeque<usize>>,
    /// Per switch, the paths it is on.
    member: Vec<Vec<usize>>,
    /// Paths per length (0..=target).
    hist: Vec<usize>,
    total: usize,
}

impl Exchange {
    fn new(n: usize, target: usize, paths: Vec<VecDeque<usize>>) -> Exchange {
        let mut member = vec![Vec::new(); n];
        let mut hist = vec![0; target + 1];
        let mut total = 0;
        for (i, p) in paths.iter().enumerate() {
            for &v in p {
                member[v].push(i);
            }
            hist[p.len()] += 1;
            total += p.len();
        }
        Exchange { paths, member, hist, total }
    }

    /// The score with the lengths changed as `changes` says: (old, new).
    fn score(&mut self, changes: &[(usize, usize)], total: usize) -> Option<Score> {
        if changes.iter().any(|&(_, new)| new >= self.hist.len()) {
            return None; // longer than any path may be
        }
        for &(old, new) in changes {
            self.hist[old] -= 1;
            self.hist[new] += 1;
        }
        let longest = (1..self.hist.len()).rev().find(|&l| self.hist[l] > 0).unwrap_or(0);
        let shortest = (1..self.hist.len()).find(|&l| self.hist[l] > 0).unwrap_or(0);
        let deficit = (1..longest.saturating_sub(1)).map(|l| self.hist[l] * (longest - 1 - l)).sum();
        for &(old, new) in changes.iter().rev() {
            self.hist[new] -= 1;
            self.hist[old] += 1;
        }
        Some((longest, longest - shortest, deficit, total))
    }

    fn current(&mut self) -> Score {
        self.score(&[], self.total).expect("no change")
    }

    fn end(&self, p: usize, e: usize) -> usize {
        if e == 0 {
            self.paths[p][0]
        } else {
            *self.paths[p].back().expect("non-empty")
        }
    }

    /// The switch next to end `e` of path `p`, inward.
    fn inner(&self, p: usize, e: usize) -> Option<usize> {
        let q = &self.paths[p];
        if q.len() < 2 {
            None
        } else if e == 0 {
            Some(q[1])
        } else {
            Some(q[q.len() - 2])
        }
    }

    fn ends(&self, p: usize) -> std::ops::Range<usize> {
        0..if self.paths[p].len() > 1 { 2 } else { 1 }
    }

    fn on(&self, v: usize, p: usize) -> bool {
        self.member[v].contains(&p)
    }

    fn best_move(&mut self, g: &Graph) -> Option<Move> {
        let now = self.current();
        let mut best: Option<(Score, Move)> = None;
        let mut consider = |ex: &mut Exchange, changes: &[(usize, usize)], total: usize, m: Move| {
            if let Some(s) = ex.score(changes, total) {
                if s < now && best.as_ref().is_none_or(|(b, _)| s < *b) {
                    best = Some((s, m));
                }
            }
        };
        for to in 0..self.paths.len() {
            if self.paths[to].is_empty() {
                continue;
            }
            let lt = self.paths[to].len();
            for to_end in self.ends(to) {
                let x = self.end(to, to_end);
                if self.member[x].len() > 1 {
                    consider(self, &[(lt, lt - 1)], self.total - 1, Move::Unshare { from: to, from_end: to_end });
                }
                for &(w, _) in g.neighbours(x) {
                    if self.on(w, to) {
                        continue;
                    }
                    consider(self, &[(lt, lt + 1)], self.total + 1, Move::Share { node: w, to, to_end });
                    for i in 0..self.member[w].len() {
                        let from = self.member[w][i];
                        let lf = self.paths[from].len();
                        for from_end in self.ends(from) {
                            if self.end(from, from_end) != w {
                                continue;
                            }
                            let m = Move::Shift { from, from_end, count: 1, to, to_end };
                            consider(self, &[(lf, lf - 1), (lt, lt + 1)], self.total, m);
                            if let Some(y) = self.inner(from, from_end) {
                                if !self.on(y, to) {
                                    let m = Move::Shift { from, from_end, count: 2, to, to_end };
                                    consider(self, &[(lf, lf - 2), (lt, lt + 2)], self.total, m);
                                }
                            }
                        }
                    }
                }
            }
        }
        best.map(|(_, m)| m)
    }

    fn take(&mut self, p: usize, e: usize) -> usize {
        let v = if e == 0 { self.paths[p].pop_front() } else { self.paths[p].pop_back() }.expect("non-empty");
        self.member[v].retain(|&q| q != p);
        v
    }

    fn put(&mut self, p: usize, e: usize, v: usize) {
        if e == 0 {
            self.paths[p].push_front(v);
        } else {
            self.paths[p].push_back(v);
        }
        self.member[v].push(p);
    }

    fn apply(&mut self, m: Move) {
        let before: Vec<usize> = self.paths.iter().map(VecDeque::len).collect();
        match m {
            Move::Shift { from, from_end, count, to, to_end } => {
                for _ in 0..count {
                    let v = self.take(from, from_end);
                    self.put(to, to_end, v);
                }
            }
            Move::Share { node, to, to_end } => self.put(to, to_end, node),
            Move::Unshare { from, from_end } => {
                self.take(from, from_end);
            }
        }
        for (p, &old) in before.iter().enumerate() {
            let new = self.paths[p].len();
            if new != old {
                self.hist[old] -= 1;
                self.hist[new] += 1;
                self.total = self.total + new - old;
            }
        }
        self.hist[0] = 0;
    }

    fn run(&mut self, g: &Graph) {
        // Each move lowers the score, so this ends; the bound is a guard.
        let bound = 64 * g.len() + 1024;
        for _ in 0..bound {
            match self.best_move(g) {
                Some(m) => self.apply(m),
                None => return,
            }
        }
    }
}

/// INT-Path's Euler trails: every link exactly once, max(1, #odd / 2)
/// trails on a connected graph with links.
pub fn euler(g: &Graph) -> Vec<Walk> {
    let n = g.len();
    if g.edges.is_empty() {
        return (0..n).map(|v| vec![(v, None)]).collect();
    }
    // Real links 0..m, then virtual ones pairing the odd switches.
    let m = g.edges.len();
    let mut ends: Vec<(usize, usize)> = g.edges.iter().map(|e| (e.a, e.b)).collect();
    let odd: Vec<usize> = (0..n).filter(|&v| g.degree(v) % 2 == 1).collect();
    for pair in odd.chunks(2) {
        ends.push((pair[0], pair[1]));
    }
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &(a, b)) in ends.iter().enumerate() {
        adj[a].push(i);
        adj[b].push(i);
    }
    // Hierholzer, iteratively: the circuit as (switch, link arrived by).
    let start = odd.first().copied().unwrap_or(g.edges[0].a);
    let mut used = vec![false; ends.len()];
    let mut next = vec![0usize; n];
    let mut stack: Vec<(usize, Option<usize>)> = vec![(start, None)];
    let mut circuit: Vec<(usize, Option<usize>)> = Vec::with_capacity(ends.len() + 1);
    while let Some(&(v, _)) = stack.last() {
        while next[v] < adj[v].len() && used[adj[v][next[v]]] {
            next[v] += 1;
        }
        if next[v] == adj[v].len() {
            circuit.push(stack.pop().expect("non-empty"));
        } else {
            let e = adj[v][next[v]];
            used[e] = true;
            let (a, b) = ends[e];
            stack.push((if a == v { b } else { a }, Some(e)));
        }
    }
    circuit.reverse();
    // circuit[i] = (switch, link from circuit[i-1]); as steps: link i joins
    // circuit[i] and circuit[i+1].
    let steps: Vec<(usize, usize)> =
        (0..circuit.len() - 1).map(|i| (circuit[i].0, circuit[i + 1].1.expect("arrived by a link"))).collect();
    let last = circuit[circuit.len() - 1].0;
    let mut trails = Vec::new();
    // Cut at the virtual links: rotate so the circuit starts after one.
    let first_virtual = steps.iter().position(|&(_, e)| e >= m);
    let rotated: Vec<(usize, usize)> = match first_virtual {
        Some(i) => steps[i + 1..].iter().chain(&steps[..=i]).copied().collect(),
        None => steps.clone(),
    };
    let mut cur: Walk = Vec::new();
    for &(v, e) in &rotated {
        if e >= m {
            if !cur.is_empty() {
                cur.push((v, None));
                trails.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push((v, Some(e)));
        }
    }
    if !cur.is_empty() {
        // No virtual link (an Euler circuit): it ends where it started.
        cur.push((last, None));
        trails.push(cur);
    }
    trails
}

/// What a probe carries, for its size: per hop the INT metadata (node ID,
/// L1 ports, queue, ingress timestamp: 20 bytes), its SR entry (4) and its
/// MEA record (8 + 4 a value), as `dataplane::wire::gpint` lays them out.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// The egress MTU (IP packet bytes).
    pub mtu: usize,
    /// The frame bytes an mbuf holds.
    pub mbuf_room: usize,
    /// MEA values per hop; None: the switch's port count (per-port RX
    /// counters, request type 1).
    pub mea_values: Option<usize>,
}

/// Ethernet, IPv4, UDP, INT shim and INT-MD header, GPINT w0 and w1.
pub const PROBE_FIXED: usize = 14 + 20 + 8 + 4 + 12 + gpint::HDR_LEN;
/// INT metadata of a hop (node ID, L1 ports, queue, ingress timestamp).
pub const HOP_INT: usize = 20;
/// Hops the INT shim's length (255 words, 3 of them the MD header) holds.
pub const MAX_HOPS: usize = (255 - 3) * 4 / HOP_INT;

impl Budget {
    pub fn frame_limit(&self) -> usize {
        (self.mtu + 14).min(self.mbuf_room)
    }

    fn hop_bytes(&self, g: &Graph, v: usize) -> usize {
        HOP_INT + gpint::SR_ENTRY_LEN + gpint::mea_record_len(self.mea_values.unwrap_or(g.ports[v]))
    }

    /// The probe's bytes at the last switch of `walk`.
    pub fn probe_bytes(&self, g: &Graph, walk: &Walk) -> usize {
        PROBE_FIXED + walk.iter().map(|&(v, _)| self.hop_bytes(g, v)).sum::<usize>()
    }

    /// `walk` in pieces that fit; with `overlap`, a piece starts at the
    /// switch the previous one ended at (so no link is skipped). Err when a
    /// single hop does not fit.
    fn split(&self, g: &Graph, walk: Walk, overlap: bool) -> Result<Vec<Walk>, String> {
        let limit = self.frame_limit();
        // With overlap a piece needs two switches (one link) to move on.
        let min_piece = if overlap { 2 } else { 1 };
        let mut out = Vec::new();
        let mut cur: Walk = Vec::new();
        let mut bytes = PROBE_FIXED;
        let mut i = 0;
        while i < walk.len() {
            let (v, e) = walk[i];
            let b = self.hop_bytes(g, v);
            if bytes + b > limit || cur.len() == MAX_HOPS {
                if cur.len() < min_piece {
                    let names: Vec<&str> = cur.iter().chain([&walk[i]]).map(|&(v, _)| g.names[v].as_str()).collect();
                    return Err(format!(
                        "a probe through {} needs {} bytes, more than the {limit}-byte budget (MTU and mbuf room)",
                        names.join(", "),
                        bytes + b
                    ));
                }
                cur.last_mut().expect("non-empty").1 = None;
                out.push(std::mem::take(&mut cur));
                bytes = PROBE_FIXED;
                if overlap {
                    // The next piece starts at the switch this one ended at.
                    i -= 1;
                }
                continue;
            }
            cur.push((v, e));
            bytes += b;
            i += 1;
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        Ok(out)
    }
}

/// A plan: the probes' paths as SR stacks, and its figures.
#[derive(Debug, Clone)]
pub struct Plan {
    pub algo: Algo,
    pub k: Option<usize>,
    pub paths: Vec<Walk>,
    /// Paths the budget cut into pieces.
    pub split: usize,
    /// The longest path as planned, before the budget cut it.
    pub longest_planned: usize,
}

/// Plans probes on `g`: GPINT with `k` paths, Euler or SNMP, each kept
/// within `budget`.
pub fn plan(g: &Graph, algo: Algo, k: usize, budget: &Budget) -> Result<Plan, String> {
    if g.is_empty() {
        return Err("no switches in the topology".into());
    }
    if algo != Algo::Snmp && !g.connected() {
        return Err("the switches are not connected over switch links: plan each part on its own".into());
    }
    let walks = match algo {
        Algo::Gpint => gpint(g, k),
        Algo::Euler => euler(g),
        Algo::Snmp => snmp(g),
    };
    let longest_planned = walks.iter().map(Vec::len).max().unwrap_or(0);
    let mut paths = Vec::new();
    let mut split = 0;
    for w in walks {
        let pieces = budget.split(g, w, algo == Algo::Euler)?;
        split += usize::from(pieces.len() > 1);
        paths.extend(pieces);
    }
    Ok(Plan { algo, k: (algo == Algo::Gpint).then_some(k.clamp(1, g.len())), paths, split, longest_planned })
}

pub use gpint::TO_MONITOR;

impl Plan {
    /// The plan as JSON: per path its hops (switch, next port, link) and
    /// probe bytes; the figures under "stats".
    pub fn to_json(&self, g: &Graph, budget: &Budget) -> Value {
        let paths: Vec<Value> = self
            .paths
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let hops: Vec<Value> = w
                    .iter()
                    .map(|&(v, e)| {
                        let mea = budget.mea_values.unwrap_or(g.ports[v]);
                        match e {
                            Some(e) => json!({"switch": g.names[v], "next_port": g.edges[e].port_of(v),
                                              "link": g.edges[e].name, "mea": mea}),
                            None => json!({"switch": g.names[v], "next_port": TO_MONITOR, "mea": mea}),
                        }
                    })
                    .collect();
                json!({"id": i, "hops": hops, "probe_bytes": budget.probe_bytes(g, w)})
            })
            .collect();
        json!({
            "algo": self.algo.name(),
            "k": self.k,
            "switches": g.len(),
            "links": g.edges.len(),
            "budget_bytes": budget.frame_limit(),
            "paths": paths,
            "stats": self.stats(g, budget),
        })
    }

    /// probes, longest / shortest path (switches), total hops, largest
    /// probe, split paths, switches and links covered.
    pub fn stats(&self, g: &Graph, budget: &Budget) -> Value {
        let lens: Vec<usize> = self.paths.iter().map(Vec::len).collect();
        let mut nodes = vec![false; g.len()];
        let mut links = vec![false; g.edges.len()];
        for w in &self.paths {
            for &(v, e) in w {
                nodes[v] = true;
                if let Some(e) = e {
                    links[e] = true;
                }
            }
        }
        json!({
            "probes": self.paths.len(),
            "longest": lens.iter().max().copied().unwrap_or(0),
            "shortest": lens.iter().min().copied().unwrap_or(0),
            "total_hops": lens.iter().sum::<usize>(),
            "max_probe_bytes": self.paths.iter().map(|w| budget.probe_bytes(g, w)).max().unwrap_or(0),
            "split": self.split,
            "longest_planned": self.longest_planned,
            "covered_switches": nodes.iter().filter(|&&c| c).count(),
            "covered_links": links.iter().filter(|&&c| c).count(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::{watts_strogatz, Edge};
    use super::*;

    const BIG: Budget = Budget { mtu: 9000, mbuf_room: 1 << 20, mea_values: Some(0) };

    fn graph(n: usize, links: &[(usize, usize)]) -> Graph {
        let mut ports = vec![0usize; n];
        let edges = links
            .iter()
            .map(|&(a, b)| {
                let e = Edge { name: format!("{a}-{b}"), a, b, port_a: ports[a] as u8, port_b: ports[b] as u8 };
                ports[a] += 1;
                ports[b] += 1;
                e
            })
            .collect();
        Graph::new((0..n).map(|i| format!("s{i}")).collect(), ports, edges).unwrap()
    }

    fn ring(n: usize) -> Graph {
        graph(n, &(0..n).map(|i| (i, (i + 1) % n)).collect::<Vec<_>>())
    }

    /// Every switch covered, consecutive switches linked by the named link,
    /// no switch twice on one path.
    fn check_paths(g: &Graph, paths: &[Walk]) {
        let mut covered = vec![false; g.len()];
        for w in paths {
            for (i, &(v, e)) in w.iter().enumerate() {
                covered[v] = true;
                match (e, w.get(i + 1)) {
                    (Some(e), Some(&(next, _))) => assert_eq!(g.edges[e].other(v), next, "{w:?}"),
                    (None, None) => {}
                    other => panic!("link and next switch disagree: {other:?} in {w:?}"),
                }
            }
        }
        assert!(covered.iter().all(|&c| c), "uncovered switches in {paths:?}");
    }

    fn lens(paths: &[Walk]) -> (usize, usize) {
        let l: Vec<usize> = paths.iter().map(Vec::len).collect();
        (*l.iter().max().unwrap(), *l.iter().min().unwrap())
    }

    #[test]
    fn gpint_covers_a_ring_with_k_equal_paths() {
        let g = ring(12);
        for k in 1..=12 {
            let p = gpint(&g, k);
            check_paths(&g, &p);
            let (long, short) = lens(&p);
            assert!(long <= 12usize.div_ceil(k) + 1 && long - short <= 1, "k {k}: {p:?}");
        }
    }

    #[test]
    fn gpint_balances_watts_strogatz_graphs() {
        for (n, seed) in [(20, 1), (50, 2), (100, 3)] {
            let g = watts_strogatz(n, 4, 0.1, seed).unwrap();
            for k in [n * 2 / 10, n * 3 / 10, n * 5 / 10] {
                let p = gpint(&g, k);
                check_paths(&g, &p);
                let (long, short) = lens(&p);
                assert!(long <= n.div_ceil(k) + 1, "WS({n}) k {k}: longest {long}");
                assert!(long - short <= 1, "WS({n}) k {k}: {long} vs {short}");
            }
        }
    }

    #[test]
    fn gpint_plans_a_thousand_switches() {
        let g = watts_strogatz(1000, 4, 0.1, 5).unwrap();
        let p = gpint(&g, 300);
        check_paths(&g, &p);
        let (long, short) = lens(&p);
        assert!(long <= 5 && long - short <= 1, "{long} {short}");
    }

    #[test]
    fn gpint_is_deterministic() {
        let g = watts_strogatz(60, 4, 0.1, 9).unwrap();
        assert_eq!(gpint(&g, 18), gpint(&g, 18));
    }

    #[test]
    fn euler_covers_every_link_once_with_half_the_odd_switches_trails() {
        let star = graph(5, &[(0, 1), (0, 2), (0, 3), (0, 4)]); // four odd leaves
        for g in [ring(7), star, watts_strogatz(30, 4, 0.3, 4).unwrap(), graph(2, &[(0, 1), (0, 1), (0, 1)])] {
            let t = euler(&g);
            let odd = (0..g.len()).filter(|&v| g.degree(v) % 2 == 1).count();
            assert_eq!(t.len(), (odd / 2).max(1), "{t:?}");
            let mut used = vec![0; g.edges.len()];
            for w in &t {
                for &(_, e) in w {
                    if let Some(e) = e {
                        used[e] += 1;
                    }
                }
            }
            assert!(used.iter().all(|&u| u == 1), "{used:?}");
            check_paths_allow_revisits(&g, &t);
        }
    }

    fn check_paths_allow_revisits(g: &Graph, paths: &[Walk]) {
        for w in paths {
            for (i, &(v, e)) in w.iter().enumerate() {
                if let Some(e) = e {
                    assert_eq!(g.edges[e].other(v), w[i + 1].0);
                }
            }
        }
    }

    #[test]
    fn probes_over_the_budget_are_split_and_euler_pieces_keep_every_link() {
        let g = ring(40);
        // 66 fixed + 32 a hop (no MEA values): 10 hops in 386 bytes.
        let budget = Budget { mtu: 9000, mbuf_room: PROBE_FIXED + 10 * 32, mea_values: Some(0) };
        let p = plan(&g, Algo::Euler, 0, &budget).unwrap();
        assert_eq!(p.split, 1);
        assert!(p.paths.iter().all(|w| w.len() <= 10 && budget.probe_bytes(&g, w) <= budget.frame_limit()));
        let s = p.stats(&g, &budget);
        assert_eq!((s["covered_links"].as_u64(), s["covered_switches"].as_u64()), (Some(40), Some(40)));
        let p = plan(&g, Algo::Gpint, 1, &budget).unwrap();
        assert_eq!(p.split, 1);
        assert_eq!(p.paths.iter().map(Vec::len).sum::<usize>(), 40);
        let tiny = Budget { mbuf_room: PROBE_FIXED + 27, ..budget };
        assert!(plan(&g, Algo::Snmp, 0, &tiny).unwrap_err().contains("more than the"));
        // The INT shim holds 50 hops of 5 words.
        let p = plan(&ring(120), Algo::Gpint, 1, &BIG).unwrap();
        assert!(p.paths.iter().all(|w| w.len() <= MAX_HOPS));
    }

    #[test]
    fn the_plan_names_ports_and_ends_at_the_monitor() {
        let g = graph(3, &[(0, 1), (1, 2)]);
        let p = plan(&g, Algo::Gpint, 1, &BIG).unwrap();
        let j = p.to_json(&g, &BIG);
        let hops = &j["paths"][0]["hops"];
        assert_eq!(hops.as_array().unwrap().len(), 3);
        assert_eq!(hops[2]["next_port"], 255);
        // s0 -> s1 leaves s0 by its port 0, s1 -> s2 leaves s1 by its port 1.
        let first = hops[0]["switch"].as_str().unwrap();
        assert!(first == "s0" || first == "s2");
        assert_eq!(hops[1]["next_port"], if first == "s0" { 1 } else { 0 });
        let s = plan(&g, Algo::Snmp, 0, &BIG).unwrap();
        assert_eq!(s.paths.len(), 3);
        let apart = graph(4, &[(0, 1), (2, 3)]);
        assert!(plan(&apart, Algo::Gpint, 2, &BIG).unwrap_err().contains("not connected"));
        assert_eq!(plan(&apart, Algo::Snmp, 0, &BIG).unwrap().paths.len(), 4);
    }
}
