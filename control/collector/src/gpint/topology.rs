//! The switch graph a GPINT plan runs on, read from a testbed topology file
//! (`configs/testbed/*.toml`): the switches, in file order, their ports in
//! `[[switch.port]]` order (p0, p1, ...) and the links between two switches.
//! Hosts (and the monitor) are not part of the graph: the monitor reaches
//! every switch over a link of its own.

use dataplane::rand::SplitMix;
use std::collections::HashMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    switch: Vec<SwitchEntry>,
    #[serde(default)]
    link: Vec<LinkEntry>,
}

#[derive(Debug, Deserialize)]
struct SwitchEntry {
    name: String,
    #[serde(default)]
    port: Vec<PortEntry>,
}

#[derive(Debug, Deserialize)]
struct PortEntry {
    link: String,
}

#[derive(Debug, Deserialize)]
struct LinkEntry {
    name: String,
    a: String,
    b: String,
}

/// A link between two switches, with the port it leaves each by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub name: String,
    pub a: usize,
    pub b: usize,
    pub port_a: u8,
    pub port_b: u8,
}

impl Edge {
    /// The other end, seen from `v`.
    pub fn other(&self, v: usize) -> usize {
        if self.a == v {
            self.b
        } else {
            self.a
        }
    }

    /// The port `v` sends on over this link.
    pub fn port_of(&self, v: usize) -> u8 {
        if self.a == v {
            self.port_a
        } else {
            self.port_b
        }
    }
}

/// Switches and the links between them.
#[derive(Debug, Clone)]
pub struct Graph {
    pub names: Vec<String>,
    /// Ports of each switch (to switches, hosts and the monitor).
    pub ports: Vec<usize>,
    pub edges: Vec<Edge>,
    /// Per switch: (neighbour, edge), by neighbour then edge.
    adj: Vec<Vec<(usize, usize)>>,
}

/// The most ports a switch may have: SR entries name a port in 8 bits, and
/// 0xFF means "to the monitor".
pub const MAX_PORTS: usize = 255;

impl Graph {
    /// A graph of `names.len()` switches and `links` between them: (name,
    /// a, b, port at a, port at b).
    pub fn new(names: Vec<String>, ports: Vec<usize>, edges: Vec<Edge>) -> Result<Graph, String> {
        let n = names.len();
        if ports.len() != n {
            return Err("a port count per switch is needed".into());
        }
        let mut adj = vec![Vec::new(); n];
        for (i, e) in edges.iter().enumerate() {
            if e.a >= n || e.b >= n {
                return Err(format!("link {}: no such switch", e.name));
            }
            if e.a == e.b {
                return Err(format!("link {}: both ends at {}", e.name, names[e.a]));
            }
            if e.port_a as usize >= ports[e.a] || e.port_b as usize >= ports[e.b] {
                return Err(format!("link {}: port beyond the switch's ports", e.name));
            }
            adj[e.a].push((e.b, i));
            adj[e.b].push((e.a, i));
        }
        for a in &mut adj {
            a.sort_unstable();
        }
        Ok(Graph { names, ports, edges, adj })
    }

    /// Reads a testbed topology file's text (`what` names it in errors).
    pub fn from_testbed(text: &str, what: &str) -> Result<Graph, String> {
        let f: File = toml::from_str(text).map_err(|e| format!("{what}: {e}"))?;
        let mut index = HashMap::new();
        for (i, s) in f.switch.iter().enumerate() {
            if index.insert(s.name.as_str(), i).is_some() {
                return Err(format!("{what}: switch {} is listed twice", s.name));
            }
            if s.port.len() > MAX_PORTS {
                return Err(format!("{what}: switch {} has {} ports, at most {MAX_PORTS}", s.name, s.port.len()));
            }
        }
        // The port of switch `sw` on link `link`.
        let port = |sw: usize, link: &str| -> Result<u8, String> {
            let s = &f.switch[sw];
            s.port
                .iter()
                .position(|p| p.link == link)
                .map(|p| p as u8)
                .ok_or_else(|| format!("{what}: switch {} has no [[switch.port]] for link {link}", s.name))
        };
        let mut edges = Vec::new();
        for l in &f.link {
            if let (Some(&a), Some(&b)) = (index.get(l.a.as_str()), index.get(l.b.as_str())) {
                edges.push(Edge { name: l.name.clone(), a, b, port_a: port(a, &l.name)?, port_b: port(b, &l.name)? });
            }
        }
        let names = f.switch.iter().map(|s| s.name.clone()).collect();
        let ports = f.switch.iter().map(|s| s.port.len()).collect();
        Graph::new(names, ports, edges).map_err(|e| format!("{what}: {e}"))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn degree(&self, v: usize) -> usize {
        self.adj[v].len()
    }

    /// (neighbour, edge) pairs of `v`, by neighbour.
    pub fn neighbours(&self, v: usize) -> &[(usize, usize)] {
        &self.adj[v]
    }

    /// The first link between `a` and `b`.
    pub fn edge_between(&self, a: usize, b: usize) -> Option<usize> {
        let i = self.adj[a].partition_point(|&(w, _)| w < b);
        self.adj[a].get(i).filter(|&&(w, _)| w == b).map(|&(_, e)| e)
    }

    /// Whether every switch reaches every other over switch links.
    pub fn connected(&self) -> bool {
        if self.is_empty() {
            return true;
        }
        let mut seen = vec![false; self.len()];
        let mut stack = vec![0];
        seen[0] = true;
        while let Some(v) = stack.pop() {
            for &(w, _) in &self.adj[v] {
                if !seen[w] {
                    seen[w] = true;
                    stack.push(w);
                }
            }
        }
        seen.iter().all(|&s| s)
    }

    /// The graph as a testbed topology file (switches with their ports,
    /// links; no hosts): what `gpint topo` writes.
    pub fn to_testbed(&self, name: &str, description: &str) -> String {
        self.testbed(name, description, None)
    }

    /// [`Graph::to_testbed`] made a GPINT testbed: every switch a router
    /// (each link a /30 of 10.78.0.0/14, nothing routed: routers flood
    /// nothing in the graph's loops) with `[int]` (node ID = its number)
    /// and `[gpint]` (`hold_ms`), and a
    /// host `mon` with a direct link to each as the switch's last port: sK
    /// is 10.77.K.1 there (MAC 02:77:KK:00:00:01) and sends its Telemetry
    /// Reports through it to mon's 10.77.K.2:32766 (MAC 02:77:KK:00:00:02,
    /// interface `sK`). At most 250 switches.
    pub fn to_gpint_testbed(&self, name: &str, description: &str, hold_ms: u64) -> Result<String, String> {
        if self.len() > 250 || self.edges.len() > 65_536 {
            return Err(format!(
                "{} switches, {} links: a GPINT testbed numbers at most 250 monitor links and 65536 links",
                self.len(),
                self.edges.len()
            ));
        }
        Ok(self.testbed(name, description, Some(hold_ms)))
    }

    fn testbed(&self, name: &str, description: &str, monitor: Option<u64>) -> String {
        let mut per_switch: Vec<Vec<(u8, &str)>> = vec![Vec::new(); self.len()];
        for e in &self.edges {
            per_switch[e.a].push((e.port_a, &e.name));
            per_switch[e.b].push((e.port_b, &e.name));
        }
        let mac = |k: usize, end: u8| format!("02:77:{k:02x}:00:00:{end:02x}");
        let mut out = format!("name = {name:?}\ndescription = {description:?}\n");
        for e in &self.edges {
            out += &format!("\n[[link]]\nname = {:?}\na = {:?}\nb = {:?}\n", e.name, self.names[e.a], self.names[e.b]);
        }
        if monitor.is_some() {
            let mut neighbours = Vec::new();
            let mut ifaces = String::new();
            for (v, sw) in self.names.iter().enumerate() {
                let k = v + 1;
                out += &format!("\n[[link]]\nname = \"mon-{sw}\"\na = \"mon\"\nb = {sw:?}\n");
                neighbours.push(format!("\"10.77.{k}.1 lladdr {} dev {sw} nud permanent\"", mac(k, 1)));
                ifaces += &format!(
                    "[[host.iface]]\nlink = \"mon-{sw}\"\nname = {sw:?}\naddr = [\"10.77.{k}.2/24\"]\nmac = \"{}\"\n",
                    mac(k, 2)
                );
            }
            out += &format!("\n[[host]]\nname = \"mon\"\nneighbours = [{}]\n{ifaces}", neighbours.join(", "));
        }
        for (v, ports) in per_switch.iter_mut().enumerate() {
            ports.sort_unstable();
            out += &format!("\n[[switch]]\nname = {:?}\nmode = \"router\"\n", self.names[v]);
            if let Some(hold_ms) = monitor {
                let k = v + 1;
                out += &format!(
                    "role = \"gpint\"\nconfig = \"\"\"\n[int]\nnode_id = {k}\n[[int.collector]]\naddress = \"10.77.{k}.2:32766\"\n\
                     port = \"p{}\"\nmac = \"{}\"\n[gpint]\nhold_ms = {hold_ms}\n\"\"\"\n",
                    ports.len(),
                    mac(k, 2)
                );
            }
            for (_, link) in ports.iter() {
                out += &format!("[[switch.port]]\nlink = {link:?}\n");
                if monitor.is_some() {
                    // A router port needs an address: link i is 10.78.0.0/14
                    // cut in /30s (a is .1, b .2), none routed anywhere.
                    let i = self.edges.iter().position(|e| e.name == *link).expect("own link");
                    let end = if self.edges[i].a == v { 1 } else { 2 };
                    let at = (i as u32) * 4 + end;
                    out += &format!("ipv4 = [\"10.{}.{}.{}/30\"]\n", 78 + (at >> 16), (at >> 8) & 0xff, at & 0xff);
                }
            }
            if monitor.is_some() {
                let k = v + 1;
                out += &format!(
                    "[[switch.port]]\nlink = \"mon-{}\"\nipv4 = [\"10.77.{k}.1/24\"]\nmac = \"{}\"\n",
                    self.names[v],
                    mac(k, 1)
                );
            }
        }
        out
    }
}

/// A Watts-Strogatz small-world graph WS(n, k, p) (k even: each switch
/// linked to k/2 neighbours on either side of a ring, each link rewired
/// with probability p to a switch chosen uniformly, never making a loop or
/// a parallel link), from `seed`. Retries with the next seed (at most 100)
/// until the graph is connected. Switch i is `s<i+1>`; ports are taken in
/// link order.
pub fn watts_strogatz(n: usize, k: usize, p: f64, seed: u64) -> Result<Graph, String> {
    if n < 3 || k < 2 || k % 2 != 0 || k >= n {
        return Err(format!("WS({n}, {k}, {p}): need n >= 3 and an even k with 2 <= k < n"));
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("WS({n}, {k}, {p}): p is a probability"));
    }
    for attempt in 0..100 {
        let mut rng = SplitMix(seed.wrapping_add(attempt));
        let mut has = std::collections::HashSet::new();
        let mut pairs = Vec::new();
        for j in 1..=k / 2 {
            for i in 0..n {
                pairs.push((i, (i + j) % n));
            }
        }
        for &(a, b) in &pairs {
            has.insert((a.min(b), a.max(b)));
        }
        for pair in pairs.iter_mut() {
            if rng.unit() < p {
                let (a, b) = *pair;
                // Rewire the far end; at most n tries to find a free one.
                for _ in 0..n {
                    let c = rng.below(n as u64) as usize;
                    if c != a && !has.contains(&(a.min(c), a.max(c))) {
                        has.remove(&(a.min(b), a.max(b)));
                        has.insert((a.min(c), a.max(c)));
                        *pair = (a, c);
                        break;
                    }
                }
            }
        }
        let mut ports = vec![0usize; n];
        let mut edges = Vec::new();
        for &(a, b) in &pairs {
            let (pa, pb) = (ports[a], ports[b]);
            if pa >= MAX_PORTS || pb >= MAX_PORTS {
                return Err(format!("WS({n}, {k}, {p}): a switch has more than {MAX_PORTS} ports"));
            }
            ports[a] += 1;
            ports[b] += 1;
            edges.push(Edge { name: format!("s{}-s{}", a + 1, b + 1), a, b, port_a: pa as u8, port_b: pb as u8 });
        }
        let names = (1..=n).map(|i| format!("s{i}")).collect();
        let g = Graph::new(names, ports, edges)?;
        if g.connected() {
            return Ok(g);
        }
    }
    Err(format!("WS({n}, {k}, {p}): no connected graph in 100 seeds from {seed}"))
}

/// `below` for the graph's draws.
trait Below {
    fn below(&mut self, n: u64) -> u64;
}

impl Below for SplitMix {
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: &str = r#"
name = "t"
[[link]]
name = "h1-s1"
a = "h1"
b = "s1"
[[link]]
name = "s1-s2"
a = "s1"
b = "s2"
[[link]]
name = "s2-s3"
a = "s2"
b = "s3"
[[host]]
name = "h1"
[[switch]]
name = "s1"
[[switch.port]]
link = "h1-s1"
[[switch.port]]
link = "s1-s2"
[[switch]]
name = "s2"
[[switch.port]]
link = "s1-s2"
[[switch.port]]
link = "s2-s3"
[[switch]]
name = "s3"
[[switch.port]]
link = "s2-s3"
"#;

    #[test]
    fn a_testbed_file_gives_the_switches_their_links_and_ports() {
        let g = Graph::from_testbed(CHAIN, "chain").unwrap();
        assert_eq!(g.names, ["s1", "s2", "s3"]);
        assert_eq!(g.ports, [2, 2, 1]);
        // The host link is not part of the graph.
        assert_eq!(g.edges.len(), 2);
        let e = &g.edges[g.edge_between(0, 1).unwrap()];
        assert_eq!((e.port_of(0), e.port_of(1)), (1, 0));
        assert_eq!(g.edge_between(0, 2), None);
        assert!(g.connected());
    }

    #[test]
    fn what_cannot_be_planned_on_is_refused() {
        let no_port = CHAIN.trim_end_matches("[[switch.port]]\nlink = \"s2-s3\"\n");
        assert!(Graph::from_testbed(no_port, "x").unwrap_err().contains("no [[switch.port]] for link s2-s3"));
        let twice = format!("{CHAIN}[[switch]]\nname = \"s1\"\n");
        assert!(Graph::from_testbed(&twice, "x").unwrap_err().contains("listed twice"));
        assert!(Graph::from_testbed("switch = 3", "x").unwrap_err().starts_with("x: "));
        let loop_edge = Edge { name: "l".into(), a: 0, b: 0, port_a: 0, port_b: 0 };
        assert!(Graph::new(vec!["a".into()], vec![1], vec![loop_edge]).unwrap_err().contains("both ends"));
    }

    #[test]
    fn watts_strogatz_is_reproducible_connected_and_keeps_the_link_count() {
        let g = watts_strogatz(40, 4, 0.1, 7).unwrap();
        assert_eq!(g.edges.len(), 80);
        assert!(g.connected());
        let again = watts_strogatz(40, 4, 0.1, 7).unwrap();
        assert_eq!(g.to_testbed("a", "b"), again.to_testbed("a", "b"));
        // No loops or parallel links.
        let mut seen = std::collections::HashSet::new();
        for e in &g.edges {
            assert_ne!(e.a, e.b);
            assert!(seen.insert((e.a.min(e.b), e.a.max(e.b))));
        }
        // p = 0 is the ring lattice: every switch has degree k.
        let lattice = watts_strogatz(10, 4, 0.0, 1).unwrap();
        assert!((0..10).all(|v| lattice.degree(v) == 4));
        assert!(watts_strogatz(10, 3, 0.1, 1).is_err());
        // A written file reads back as the same graph.
        let back = Graph::from_testbed(&g.to_testbed("ws", "d"), "ws").unwrap();
        assert_eq!((back.names.clone(), back.ports.clone(), back.edges.clone()), (g.names, g.ports, g.edges));
    }
}
