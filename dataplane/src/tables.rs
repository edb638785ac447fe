//! Forwarding state that the control core builds and publishes as one
//! immutable generation: port addresses, cross-connect peers, routes, next
//! hops and neighbours. Workers read it without locks; the control core
//! builds the next one from its canonical `TableSpec`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::counters::MAX_PORTS;
use crate::fixed_map::FixedMap;
use crate::lpm::{Lpm, Prefix};

/// How the switch forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bump in the wire: each port sends to its configured peer.
    CrossConnect,
    /// L2 learning bridge.
    Bridge,
    /// IPv4/IPv6 router.
    Router,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::CrossConnect => "xconnect",
            Mode::Bridge => "bridge",
            Mode::Router => "router",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    pub name: String,
    pub mac: [u8; 6],
    pub up: bool,
    pub ipv4: Vec<([u8; 4], u8)>,
    pub ipv6: Vec<([u8; 16], u8)>,
    /// Link emulation on this port's egress.
    pub impair: crate::impair::Impairment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteSpec {
    pub prefix: IpAddr,
    pub len: u8,
    pub port: u16,
    /// None: the destination is on the port's link.
    pub gateway: Option<IpAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourSpec {
    pub ip: IpAddr,
    pub mac: [u8; 6],
    pub port: u16,
    /// Configured (never replaced by learning) or learned.
    pub permanent: bool,
}

/// A bridge address pinned to a port (never learned, moved or aged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticMac {
    pub vlan: u16,
    pub mac: [u8; 6],
    pub port: u16,
}

/// The configured routes, and a version that every change replaces with
/// one never used before: a generation whose routes (and port addresses)
/// are those of the one before shares its route tables instead of
/// building them again (a second for a full table), so that neighbour and
/// port changes cost what they change. Read as a slice; changed only
/// through the methods, which keep the version true.
#[derive(Debug, Clone)]
pub struct Routes {
    list: Vec<RouteSpec>,
    version: u64,
}

/// Equal routes are equal whatever their versions.
impl PartialEq for Routes {
    fn eq(&self, other: &Routes) -> bool {
        self.list == other.list
    }
}

impl Eq for Routes {}

fn next_routes_version() -> u64 {
    static VERSIONS: AtomicU64 = AtomicU64::new(1);
    VERSIONS.fetch_add(1, Ordering::Relaxed)
}

impl Default for Routes {
    fn default() -> Routes {
        Routes { list: Vec::new(), version: next_routes_version() }
    }
}

impl Deref for Routes {
    type Target = [RouteSpec];
    fn deref(&self) -> &[RouteSpec] {
        &self.list
    }
}

impl Routes {
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Replaces the routes with `routes`, a later one winning over an
    /// earlier one for the same prefix (what `upsert` of each in turn does,
    /// in time linear in their number: a full table has a million).
    pub fn set(&mut self, routes: &[RouteSpec]) {
        let mut at: HashMap<(IpAddr, u8), usize> = HashMap::with_capacity(routes.len());
        self.list.clear();
        for r in routes {
            match at.entry((r.prefix, r.len)) {
                Entry::Occupied(i) => self.list[*i.get()] = *r,
                Entry::Vacant(v) => {
                    v.insert(self.list.len());
                    self.list.push(*r);
                }
            }
        }
        self.version = next_routes_version();
    }

    /// Adds a route or replaces the one for the same prefix.
    pub fn upsert(&mut self, r: RouteSpec) {
        match self.list.iter_mut().find(|x| x.prefix == r.prefix && x.len == r.len) {
            Some(x) => *x = r,
            None => self.list.push(r),
        }
        self.version = next_routes_version();
    }

    /// Removes the route to `prefix`/`len`; false when there is none.
    pub fn remove(&mut self, prefix: IpAddr, len: u8) -> bool {
        let n = self.list.len();
        self.list.retain(|r| !(r.prefix == prefix && r.len == len));
        if self.list.len() == n {
            return false;
        }
        self.version = next_routes_version();
        true
    }
}

/// The control core's canonical description of the forwarding state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub mode: Mode,
    pub ports: Vec<PortState>,
    /// Cross-connect peer of each port.
    pub xconnect: Vec<Option<u16>>,
    pub routes: Routes,
    pub neighbours: Vec<NeighbourSpec>,
    /// Bridge mode: addresses pinned to ports.
    pub static_macs: Vec<StaticMac>,
    /// INT domain configuration (None: INT off).
    pub int: Option<crate::int::watch::IntSpec>,
    /// AM-PM measurement points (None: AM-PM off).
    pub ampm: Option<crate::ampm::AmpmSetup>,
    /// GPINT probes and SQR (None: off).
    pub gpint: Option<crate::gpint::GpintSpec>,
    /// INT-label domain (None: off).
    pub label: Option<crate::label::LabelSpec>,
}

impl TableSpec {
    /// Adds a neighbour or replaces the entry for the same address.
    pub fn upsert_neighbour(&mut self, n: NeighbourSpec) {
        match self.neighbours.iter_mut().find(|x| x.ip == n.ip) {
            Some(x) => *x = n,
            None => self.neighbours.push(n),
        }
    }
}

/// Where a route leads: its port and gateway, and the gateway's MAC as the
/// generation's neighbour table knows it (an adjacency: a routed packet
/// leaving by the route's port is rewritten without a neighbour lookup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHop {
    pub port: u16,
    pub gateway: Option<IpAddr>,
    /// The gateway's MAC; None when there is no gateway or it is unresolved.
    pub gateway_mac: Option<[u8; 6]>,
    /// One of the switch's own addresses (a /32 or /128 on `port`): the
    /// packet is for the switch, not routed.
    pub local: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    pub mac: [u8; 6],
    pub port: u16,
}

/// One published generation of forwarding state.
pub struct Tables {
    pub generation: u64,
    pub mode: Mode,
    pub ports: Vec<PortState>,
    /// Bit per port with link emulation (`PortState::impair` not none):
    /// one test per packet sent instead of reading the impairment.
    pub emulated: u32,
    pub xconnect: [Option<u16>; MAX_PORTS],
    /// The LPMs, shared with the generations before and after that have
    /// the same routes and port addresses.
    pub routes: Arc<RouteTables>,
    /// Either LPM is larger than the caches: a router burst is parsed and
    /// its lookups prefetched first.
    pub routes_beyond_cache: bool,
    /// `routes.hops` with this generation's gateway MACs: what the LPMs'
    /// values index.
    pub nexthops: Vec<NextHop>,
    pub neigh4: FixedMap<u64, Neighbour>,
    pub neigh6: FixedMap<u128, Neighbour>,
    /// The switch's own addresses -> port.
    pub local4: FixedMap<u64, u16>,
    pub local6: FixedMap<u128, u16>,
    /// Static bridge entries: `mac_table::key(vlan, mac)` -> port.
    pub static_macs: FixedMap<u64, u16>,
    pub int: Option<crate::int::watch::IntSpec>,
    pub ampm: Option<crate::ampm::AmpmSpec>,
    pub gpint: Option<crate::gpint::GpintSpec>,
    pub label: Option<crate::label::LabelSpec>,
}

/// The next hops and, for a build over a million routes, their indexes.
#[derive(Default)]
struct NextHops {
    list: Vec<NextHop>,
    index: HashMap<NextHop, u32>,
}

impl NextHops {
    /// The index of `nh`, added if new.
    fn index(&mut self, nh: NextHop) -> u32 {
        *self.index.entry(nh).or_insert_with(|| {
            self.list.push(nh);
            (self.list.len() - 1) as u32
        })
    }
}

pub fn v4_key(a: [u8; 4]) -> u64 {
    u32::from_be_bytes(a) as u64
}

pub fn v6_key(a: [u8; 16]) -> u128 {
    u128::from_be_bytes(a)
}

/// What the routes and the port addresses build into: the two LPMs and
/// the next hops their values index (gateway MACs not yet resolved).
pub struct RouteTables {
    /// The `Routes::version` built from.
    version: u64,
    /// The port addresses the connected and local routes came from.
    addresses: Vec<PortAddresses>,
    pub lpm4: Lpm<4>,
    pub lpm6: Lpm<16>,
    hops: Vec<NextHop>,
}

type PortAddresses = (Vec<([u8; 4], u8)>, Vec<([u8; 16], u8)>);

fn port_addresses(spec: &TableSpec) -> Vec<PortAddresses> {
    spec.ports.iter().map(|p| (p.ipv4.clone(), p.ipv6.clone())).collect()
}

impl RouteTables {
    /// Connected routes come from the port addresses.
    fn build(spec: &TableSpec) -> Result<RouteTables, String> {
        let nports = spec.ports.len() as u16;
        // Connected routes first, so that a configured route to the same
        // prefix wins (the later of equal prefixes does); reversed, so that
        // of two ports on one subnet the first port's wins.
        let mut connected = Vec::new();
        for (i, p) in spec.ports.iter().enumerate() {
            let on = |a: IpAddr, len: u8| RouteSpec { prefix: a, len, port: i as u16, gateway: None };
            connected.extend(p.ipv4.iter().map(|(a, l)| on(IpAddr::from(*a), *l)));
            connected.extend(p.ipv6.iter().map(|(a, l)| on(IpAddr::from(*a), *l)));
        }
        connected.reverse();
        let mut hops = NextHops::default();
        let mut p4 = Vec::new();
        let mut p6 = Vec::new();
        for r in connected.iter().chain(spec.routes.iter()) {
            if r.port >= nports {
                return Err(format!("route {}/{} uses port index {} of {}", r.prefix, r.len, r.port, nports));
            }
            let idx = hops.index(NextHop { port: r.port, gateway: r.gateway, gateway_mac: None, local: false });
            match r.prefix {
                IpAddr::V4(a) => p4.push(Prefix { addr: a.octets(), len: r.len, value: idx }),
                IpAddr::V6(a) => p6.push(Prefix { addr: a.octets(), len: r.len, value: idx }),
            }
        }
        // The switch's own addresses as host routes, after the others so
        // that they win over a configured route to the same address: one
        // lookup tells a packet to route from one for the switch.
        for (i, p) in spec.ports.iter().enumerate() {
            let local = hops.index(NextHop { port: i as u16, gateway: None, gateway_mac: None, local: true });
            p4.extend(p.ipv4.iter().map(|(a, _)| Prefix { addr: *a, len: 32, value: local }));
            p6.extend(p.ipv6.iter().map(|(a, _)| Prefix { addr: *a, len: 128, value: local }));
        }
        Ok(RouteTables {
            version: spec.routes.version(),
            addresses: port_addresses(spec),
            lpm4: Lpm::build(&p4).map_err(|e| format!("IPv4 routes: {e}"))?,
            lpm6: Lpm::build(&p6).map_err(|e| format!("IPv6 routes: {e}"))?,
            hops: hops.list,
        })
    }

    /// Whether these were built from `spec`'s routes and port addresses.
    fn hold_for(&self, spec: &TableSpec) -> bool {
        self.version == spec.routes.version()
            && self.addresses.len() == spec.ports.len()
            && self.addresses.iter().zip(&spec.ports).all(|((v4, v6), p)| *v4 == p.ipv4 && *v6 == p.ipv6)
    }
}

impl Tables {
    /// Builds a generation from scratch.
    pub fn build(spec: &TableSpec, generation: u64) -> Result<Tables, String> {
        Tables::build_after(spec, generation, None)
    }

    /// Builds the generation after `previous`, sharing its route tables
    /// where `spec`'s routes and port addresses are those it was built
    /// from (a neighbour, port state or feature change).
    pub fn build_after(spec: &TableSpec, generation: u64, previous: Option<&Tables>) -> Result<Tables, String> {
        if spec.ports.len() > MAX_PORTS {
            return Err(format!("{} ports configured, at most {MAX_PORTS} supported", spec.ports.len()));
        }
        let nports = spec.ports.len() as u16;
        let mut xconnect = [None; MAX_PORTS];
        for (i, p) in spec.xconnect.iter().enumerate().take(MAX_PORTS) {
            xconnect[i] = *p;
        }
        let routes = match previous.map(|t| &t.routes).filter(|r| r.hold_for(spec)) {
            Some(r) => r.clone(),
            None => Arc::new(RouteTables::build(spec)?),
        };
        let mut neigh4 = FixedMap::with_capacity(spec.neighbours.len().max(16));
        let mut neigh6 = FixedMap::with_capacity(spec.neighbours.len().max(16));
        for n in &spec.neighbours {
            let v = Neighbour { mac: n.mac, port: n.port };
            match n.ip {
                IpAddr::V4(a) => neigh4.insert(v4_key(a.octets()), v).map(|_| ()).map_err(|_| ()),
                IpAddr::V6(a) => neigh6.insert(v6_key(a.octets()), v).map(|_| ()).map_err(|_| ()),
            }
            .map_err(|_| format!("neighbour table full at {}", n.ip))?;
        }
        let mut nexthops = routes.hops.clone();
        for nh in &mut nexthops {
            nh.gateway_mac = match nh.gateway {
                Some(IpAddr::V4(g)) => neigh4.get(&v4_key(g.octets())).map(|n| n.mac),
                Some(IpAddr::V6(g)) => neigh6.get(&v6_key(g.octets())).map(|n| n.mac),
                None => None,
            };
        }
        let mut local4 = FixedMap::with_capacity(16);
        let mut local6 = FixedMap::with_capacity(16);
        for (i, p) in spec.ports.iter().enumerate() {
            for (a, _) in &p.ipv4 {
                local4.insert(v4_key(*a), i as u16).map_err(|_| "too many local IPv4 addresses".to_string())?;
            }
            for (a, _) in &p.ipv6 {
                local6.insert(v6_key(*a), i as u16).map_err(|_| "too many local IPv6 addresses".to_string())?;
            }
        }
        let mut static_macs = FixedMap::with_capacity(spec.static_macs.len().max(1));
        for s in &spec.static_macs {
            if s.port >= nports {
                return Err(format!("static MAC on port index {} of {}", s.port, nports));
            }
            static_macs
                .insert(crate::mac_table::key(s.vlan, &s.mac), s.port)
                .map_err(|_| "static MAC table full".to_string())?;
        }
        Ok(Tables {
            generation,
            mode: spec.mode,
            ports: spec.ports.clone(),
            emulated: spec
                .ports
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.impair.is_none())
                .fold(0, |m, (i, _)| m | 1 << i),
            xconnect,
            routes_beyond_cache: routes.lpm4.larger_than_cache() || routes.lpm6.larger_than_cache(),
            routes,
            nexthops,
            neigh4,
            neigh6,
            local4,
            local6,
            static_macs,
            int: spec.int.clone(),
            ampm: spec.ampm.as_ref().map(|a| a.compile()),
            gpint: spec.gpint,
            label: spec.label.clone(),
        })
    }

    /// The peer a cross-connect passes `in_port`'s frames to untouched,
    /// like a wire: it is up and has no link emulation. Whether anything
    /// reads the frames is the pipeline's to say (`Pipeline::shortcut`).
    #[inline]
    pub fn wire_peer(&self, in_port: usize) -> Option<usize> {
        if self.mode != Mode::CrossConnect {
            return None;
        }
        let peer = (*self.xconnect.get(in_port)?)? as usize;
        let p = self.ports.get(peer)?;
        (p.up && p.impair.is_none()).then_some(peer)
    }

    /// The port a static bridge entry pins a `mac_table::key` (VLAN, MAC)
    /// to. Without static entries (the usual case) no hash is computed.
    #[inline]
    pub fn static_port(&self, k: u64) -> Option<u16> {
        if self.static_macs.is_empty() {
            return None;
        }
        self.static_macs.get(&k).copied()
    }

    /// Whether port index `port` emulates a link (one bit test on the
    /// per-packet path).
    #[inline(always)]
    pub fn emulates(&self, port: usize) -> bool {
        port < MAX_PORTS && self.emulated & (1 << port) != 0
    }

    /// Port (index) whose configured IPv4 subnet contains `ip`, with our address there.
    pub fn v4_source_for(&self, ip: [u8; 4]) -> Option<(u16, [u8; 4])> {
        self.ports.iter().enumerate().find_map(|(i, p)| {
            p.ipv4
                .iter()
                .find(|(a, l)| crate::lpm::mask(*a, *l) == crate::lpm::mask(ip, *l))
                .map(|(a, _)| (i as u16, *a))
        })
    }

    pub fn v6_source_for(&self, ip: [u8; 16]) -> Option<(u16, [u8; 16])> {
        self.ports.iter().enumerate().find_map(|(i, p)| {
            p.ipv6
                .iter()
                .find(|(a, l)| crate::lpm::mask(*a, *l) == crate::lpm::mask(ip, *l))
                .map(|(a, _)| (i as u16, *a))
        })
    }
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod tests {
    use super::*;

    pub fn two_port_router() -> TableSpec {
        TableSpec {
            mode: Mode::Router,
            ports: vec![
                PortState {
                    name: "p0".into(),
                    mac: [2, 0, 0, 0, 0, 0xa0],
                    up: true,
                    ipv4: vec![([10, 0, 1, 1], 24)],
                    ipv6: vec![([0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 64)],
                    impair: Default::default(),
                },
                PortState {
                    name: "p1".into(),
                    mac: [2, 0, 0, 0, 0, 0xa1],
                    up: true,
                    ipv4: vec![([10, 0, 2, 1], 24)],
                    ipv6: vec![([0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 64)],
                    impair: Default::default(),
                },
            ],
            xconnect: vec![Some(1), Some(0)],
            routes: Routes {
                list: vec![RouteSpec {
                    prefix: "172.16.0.0".parse().unwrap(),
                    len: 12,
                    port: 1,
                    gateway: Some("10.0.2.254".parse().unwrap()),
                }],
                version: next_routes_version(),
            },
            static_macs: Vec::new(),
            neighbours: vec![NeighbourSpec {
                ip: "10.0.2.254".parse().unwrap(),
                mac: [2, 0, 0, 0, 0, 0xfe],
                port: 1,
                permanent: true,
            }],
            int: None,
            ampm: None,
            gpint: None,
            label: None,
        }
    }

    #[test]
    fn builds_connected_and_static_routes() {
        let t = Tables::build(&two_port_router(), 7).unwrap();
        assert_eq!(t.generation, 7);
        let nh = t.nexthops[t.routes.lpm4.lookup(&[10, 0, 2, 9]).unwrap() as usize];
        assert_eq!(nh, NextHop { port: 1, gateway: None, gateway_mac: None, local: false });
        let nh = t.nexthops[t.routes.lpm4.lookup(&[172, 20, 0, 1]).unwrap() as usize];
        assert_eq!(nh.gateway, Some("10.0.2.254".parse().unwrap()));
        assert_eq!(nh.gateway_mac, Some([2, 0, 0, 0, 0, 0xfe]), "the gateway's adjacency");
        assert!(t.routes.lpm4.lookup(&[8, 8, 8, 8]).is_none());
        assert_eq!(t.local4.get(&v4_key([10, 0, 1, 1])), Some(&0));
        assert_eq!(t.neigh4.get(&v4_key([10, 0, 2, 254])).unwrap().mac, [2, 0, 0, 0, 0, 0xfe]);
        assert_eq!(t.v4_source_for([10, 0, 2, 77]), Some((1, [10, 0, 2, 1])));
        assert!(t.routes.lpm6.lookup(&[0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]).is_some());
    }

    #[test]
    fn routes_set_keeps_the_last_route_of_a_prefix_as_upserts_do() {
        let r = |p: &str, len, port| RouteSpec { prefix: p.parse().unwrap(), len, port, gateway: None };
        let list = [r("10.9.0.0", 16, 0), r("10.9.0.0", 24, 1), r("10.9.0.0", 16, 1), r("2001:db8::", 32, 0)];
        let (mut bulk, mut one_by_one) = (two_port_router(), two_port_router());
        bulk.routes.set(&list);
        one_by_one.routes.set(&[]);
        for x in list {
            one_by_one.routes.upsert(x);
        }
        assert_eq!(bulk.routes, one_by_one.routes);
        assert_eq!(bulk.routes.len(), 3);
        assert_eq!(bulk.routes[0].port, 1, "the later /16 replaced the first in place");
        // Many routes through a few gateways share their next hops.
        let gw = |i: u32| Some(IpAddr::from([10, 0, 2, 200 + (i % 4) as u8]));
        let many: Vec<RouteSpec> = (0..50_000u32)
            .map(|i| RouteSpec {
                prefix: IpAddr::from((0x1400_0000 + (i << 8)).to_be_bytes()),
                len: 24,
                port: 1,
                gateway: gw(i),
            })
            .collect();
        bulk.routes.set(&many);
        let t = Tables::build(&bulk, 1).unwrap();
        assert!(t.nexthops.len() < 10, "{} next hops", t.nexthops.len());
        let nh = t.nexthops[t.routes.lpm4.lookup(&[20, 0, 7, 1]).unwrap() as usize];
        assert_eq!(nh.gateway, gw(7));
    }

    #[test]
    fn own_addresses_are_local_host_routes_that_win() {
        let mut s = two_port_router();
        // A configured host route to the switch's own address loses.
        s.routes.upsert(RouteSpec { prefix: "10.0.2.1".parse().unwrap(), len: 32, port: 0, gateway: None });
        let t = Tables::build(&s, 1).unwrap();
        let nh = t.nexthops[t.routes.lpm4.lookup(&[10, 0, 2, 1]).unwrap() as usize];
        assert_eq!((nh.port, nh.local), (1, true));
        let nh = t.nexthops[t.routes.lpm4.lookup(&[10, 0, 2, 2]).unwrap() as usize];
        assert_eq!((nh.port, nh.local), (1, false), "the rest of the connected /24 is routed");
        let own6 = s.ports[0].ipv6[0].0;
        assert!(t.nexthops[t.routes.lpm6.lookup(&own6).unwrap() as usize].local);
    }

    #[test]
    fn a_gateway_without_neighbour_has_no_adjacency() {
        let mut s = two_port_router();
        s.neighbours.clear();
        let t = Tables::build(&s, 1).unwrap();
        let nh = t.nexthops[t.routes.lpm4.lookup(&[172, 20, 0, 1]).unwrap() as usize];
        assert_eq!((nh.gateway.is_some(), nh.gateway_mac), (true, None));
    }

    #[test]
    fn a_generation_shares_the_route_tables_while_routes_and_addresses_stay() {
        let mut s = two_port_router();
        let t1 = Tables::build(&s, 1).unwrap();
        let gw = |t: &Tables| t.nexthops[t.routes.lpm4.lookup(&[172, 20, 0, 1]).unwrap() as usize].gateway_mac;
        // A neighbour changes: same LPMs, the adjacency follows.
        s.neighbours[0].mac = [2, 0, 0, 0, 0, 0xfd];
        let t2 = Tables::build_after(&s, 2, Some(&t1)).unwrap();
        assert!(Arc::ptr_eq(&t1.routes, &t2.routes));
        assert_eq!((gw(&t1), gw(&t2)), (Some([2, 0, 0, 0, 0, 0xfe]), Some([2, 0, 0, 0, 0, 0xfd])));
        // So does a port going down, and removing a route that is not there.
        s.ports[1].up = false;
        assert!(!s.routes.remove("192.0.2.0".parse().unwrap(), 24));
        let t3 = Tables::build_after(&s, 3, Some(&t2)).unwrap();
        assert!(Arc::ptr_eq(&t2.routes, &t3.routes));
        // A route added: built again, and it routes.
        s.routes.upsert(RouteSpec { prefix: "192.0.2.0".parse().unwrap(), len: 24, port: 0, gateway: None });
        let t4 = Tables::build_after(&s, 4, Some(&t3)).unwrap();
        assert!(!Arc::ptr_eq(&t3.routes, &t4.routes));
        assert_eq!(t4.nexthops[t4.routes.lpm4.lookup(&[192, 0, 2, 9]).unwrap() as usize].port, 0);
        assert!(t3.routes.lpm4.lookup(&[192, 0, 2, 9]).is_none());
        // Removed again: built again, and gone.
        assert!(s.routes.remove("192.0.2.0".parse().unwrap(), 24));
        let t5 = Tables::build_after(&s, 5, Some(&t4)).unwrap();
        assert!(!Arc::ptr_eq(&t4.routes, &t5.routes));
        assert!(t5.routes.lpm4.lookup(&[192, 0, 2, 9]).is_none());
        // A port address changes: its connected and local routes with it.
        s.ports[0].ipv4 = vec![([10, 0, 9, 1], 24)];
        let t6 = Tables::build_after(&s, 6, Some(&t5)).unwrap();
        assert!(!Arc::ptr_eq(&t5.routes, &t6.routes));
        assert!(t6.nexthops[t6.routes.lpm4.lookup(&[10, 0, 9, 1]).unwrap() as usize].local);
        assert!(t6.routes.lpm4.lookup(&[10, 0, 1, 1]).is_none());
        // A spec of its own (another config) never takes another's tables,
        // even with equal routes.
        let other = two_port_router();
        let t7 = Tables::build_after(&other, 7, Some(&t1)).unwrap();
        assert!(!Arc::ptr_eq(&t1.routes, &t7.routes));
    }

    #[test]
    fn rejects_route_to_missing_port() {
        let mut s = two_port_router();
        s.routes.upsert(RouteSpec { port: 5, ..s.routes[0] });
        assert!(Tables::build(&s, 1).err().unwrap().contains("port index 5"));
    }
}
