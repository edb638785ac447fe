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
use crate::fixed_map::{CompactMap, FixedMap};
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
    /// The device verifies received IPv4 header checksums: the data path
    /// takes its verdict (`PacketBuf::ipv4_checksum_by_nic`) instead of
    /// summing the header again.
    pub nic_checks_ipv4: bool,
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
/// port changes cost what they change; one a few route changes later
/// rebuilds only their prefixes' regions, from the log of the last
/// changes. Read as a slice; changed only through the methods, which keep
/// the version and the log true.
#[derive(Debug, Clone)]
pub struct Routes {
    list: Vec<RouteSpec>,
    version: u64,
    /// The last changes since the last `set`: the version each changed and
    /// the prefix it changed, oldest first, at most `ROUTE_LOG` of them.
    log: std::collections::VecDeque<(u64, IpAddr, u8)>,
}

/// Route changes remembered: a generation more changes than this after
/// its route tables builds them whole instead of rebuilding regions.
pub const ROUTE_LOG: usize = 64;

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
        Routes { list: Vec::new(), version: next_routes_version(), log: Default::default() }
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
        self.log.clear();
    }

    /// A new version, after a change to the routes to `prefix`/`len`.
    fn changed(&mut self, prefix: IpAddr, len: u8) {
        if self.log.len() == ROUTE_LOG {
            self.log.pop_front();
        }
        self.log.push_back((self.version, prefix, len));
        self.version = next_routes_version();
    }

    /// The prefixes whose routes changed since `version` (empty: none), or
    /// None when that is not known (a `set` since, or too long ago).
    pub fn changes_since(&self, version: u64) -> Option<Vec<(IpAddr, u8)>> {
        if version == self.version {
            return Some(Vec::new());
        }
        let from = self.log.iter().position(|(v, _, _)| *v == version)?;
        Some(self.log.iter().skip(from).map(|(_, p, l)| (*p, *l)).collect())
    }

    /// Adds a route or replaces the one for the same prefix.
    pub fn upsert(&mut self, r: RouteSpec) {
        match self.list.iter_mut().find(|x| x.prefix == r.prefix && x.len == r.len) {
            Some(x) => *x = r,
            None => self.list.push(r),
        }
        self.changed(r.prefix, r.len);
    }

    /// Removes the route to `prefix`/`len`; false when there is none.
    pub fn remove(&mut self, prefix: IpAddr, len: u8) -> bool {
        let n = self.list.len();
        self.list.retain(|r| !(r.prefix == prefix && r.len == len));
        if self.list.len() == n {
            return false;
        }
        self.changed(prefix, len);
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

/// A routed frame's new destination and source MACs.
pub type Macs = ([u8; 6], [u8; 6]);

/// Where a route leads: its port and gateway, and the gateway's MAC as the
/// generation's neighbour table knows it (an adjacency: a routed packet
/// leaving by the route's port is rewritten without a neighbour lookup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHop {
    pub port: u16,
    pub gateway: Option<IpAddr>,
    /// The gateway's MAC; None when there is no gateway or it is unresolved.
    pub gateway_mac: Option<[u8; 6]>,
    /// What a packet routed through the gateway out of `port` gets written
    /// (the gateway's MAC, the port's), where the gateway is resolved and
    /// the port up: one read where a packet leaves by the route's port.
    pub rewrite: Option<Macs>,
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
    /// `routes`' LPMs, read here by the workers: a field of the generation
    /// rather than of `routes`, so that a lookup takes no further pointer.
    pub lpm4: Arc<Lpm<4>>,
    pub lpm6: Arc<Lpm<16>>,
    /// Either LPM is larger than the caches: a router burst is parsed and
    /// its lookups prefetched first.
    pub routes_beyond_cache: bool,
    /// `routes.hops` with this generation's gateway MACs: what the LPMs'
    /// values index.
    pub nexthops: Vec<NextHop>,
    /// The ports (a bit each) a next hop with a rewrite leads to: the
    /// only ones the router's quick path sends by.
    pub routed_ports: u32,
    pub neigh4: FixedMap<u64, Neighbour>,
    pub neigh6: FixedMap<u128, Neighbour>,
    /// The switch's own addresses -> port.
    pub local4: FixedMap<u64, u16>,
    pub local6: FixedMap<u128, u16>,
    /// Static bridge entries: `mac_table::key(vlan, mac)` -> port.
    pub static_macs: CompactMap<u64, u16>,
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
    /// Each in an Arc of its own: a change to the routes of one family
    /// copies that family's LPM only.
    lpm4: Arc<Lpm<4>>,
    lpm6: Arc<Lpm<16>>,
    hops: Vec<NextHop>,
}

type PortAddresses = (Vec<([u8; 4], u8)>, Vec<([u8; 16], u8)>);

fn port_addresses(spec: &TableSpec) -> Vec<PortAddresses> {
    spec.ports.iter().map(|p| (p.ipv4.clone(), p.ipv6.clone())).collect()
}

/// Where a route comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// A port address's subnet.
    Connected,
    /// Configured: `[[route]]`, `routes_file`, `route add` / `load`.
    Static,
    /// One of the switch's own addresses (a host route).
    Local,
}

impl RouteKind {
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Connected => "connected",
            RouteKind::Static => "static",
            RouteKind::Local => "local",
        }
    }
}

/// Every route the LPMs hold, where it leads and where it comes from, in
/// the order a build inserts them (of two routes to one prefix the later
/// wins): connected routes from the port addresses, reversed so that of
/// two ports on one subnet the first port's wins; the configured routes,
/// which so win over a connected one to the same prefix; the switch's own
/// addresses as host routes, which win over any route to the same address
/// (one lookup tells a packet to route from one for the switch).
fn each_route(
    spec: &TableSpec,
    mut f: impl FnMut(IpAddr, u8, NextHop, RouteKind) -> Result<(), String>,
) -> Result<(), String> {
    let nports = spec.ports.len() as u16;
    let hop =
        |port: u16, gateway: Option<IpAddr>| NextHop { port, gateway, gateway_mac: None, rewrite: None, local: false };
    for (i, p) in spec.ports.iter().enumerate().rev() {
        let port = i as u16;
        for (a, l) in p.ipv6.iter().rev() {
            f(IpAddr::from(*a), *l, hop(port, None), RouteKind::Connected)?;
        }
        for (a, l) in p.ipv4.iter().rev() {
            f(IpAddr::from(*a), *l, hop(port, None), RouteKind::Connected)?;
        }
    }
    for r in spec.routes.iter() {
        if r.port >= nports {
            return Err(format!("route {}/{} uses port index {} of {}", r.prefix, r.len, r.port, nports));
        }
        f(r.prefix, r.len, hop(r.port, r.gateway), RouteKind::Static)?;
    }
    for (i, p) in spec.ports.iter().enumerate() {
        let local = NextHop { port: i as u16, gateway: None, gateway_mac: None, rewrite: None, local: true };
        for (a, _) in &p.ipv4 {
            f(IpAddr::from(*a), 32, local, RouteKind::Local)?;
        }
        for (a, _) in &p.ipv6 {
            f(IpAddr::from(*a), 128, local, RouteKind::Local)?;
        }
    }
    Ok(())
}

/// The route of `spec` that `addr` matches longest (as a build's LPM
/// answers it), with its prefix masked: what `intctl route get` names.
/// A pass over every route.
pub fn longest_match(spec: &TableSpec, addr: IpAddr) -> Option<(IpAddr, u8, NextHop, RouteKind)> {
    let key = wide(addr);
    let mut best: Option<(IpAddr, u8, NextHop, RouteKind)> = None;
    let _ = each_route(spec, |prefix, len, nh, kind| {
        if prefix.is_ipv4() == addr.is_ipv4() && holds(wide(prefix), len, key) && best.is_none_or(|b| len >= b.1) {
            let masked = match prefix {
                IpAddr::V4(a) => IpAddr::from(crate::lpm::mask(a.octets(), len)),
                IpAddr::V6(a) => IpAddr::from(crate::lpm::mask(a.octets(), len)),
            };
            best = Some((masked, len, nh, kind));
        }
        Ok(())
    });
    best
}

/// Route changes a generation applies region by region; more are built
/// from scratch (each region costs a pass over every route).
pub const MAX_REGIONS: usize = 16;

/// An address left-aligned in 128 bits, so that one mask test serves
/// both families.
fn wide(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => (u32::from(a) as u128) << 96,
        IpAddr::V6(a) => u128::from(a),
    }
}

fn wide_mask(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - len as u32).unwrap_or(0)
}

/// Whether the prefix `key`/`len` (left-aligned) holds the address `addr`.
fn holds(key: u128, len: u8, addr: u128) -> bool {
    (key ^ addr) & wide_mask(len) == 0
}

/// A changed prefix's region of an LPM and what rebuilds it: the routes
/// inside, and the longest route around it (its length and value).
struct Region<const N: usize> {
    at: [u8; N],
    len: u8,
    /// `at`, left-aligned and masked.
    key: u128,
    inside: Vec<Prefix<N>>,
    cover: Option<(u8, u32)>,
}

impl<const N: usize> Region<N> {
    fn new(at: [u8; N], len: u8, key: u128) -> Region<N> {
        Region { at, len, key: key & wide_mask(len), inside: Vec::new(), cover: None }
    }

    /// Takes a route of this family (`key` its address left-aligned) if it
    /// lies inside or around the region.
    fn take(&mut self, addr: [u8; N], len: u8, key: u128, value: impl FnOnce() -> u32) {
        if len >= self.len {
            if holds(self.key, self.len, key) {
                self.inside.push(Prefix { addr, len, value: value() });
            }
        } else if holds(key, len, self.key) && self.cover.is_none_or(|(l, _)| len >= l) {
            self.cover = Some((len, value()));
        }
    }

    fn rebuild(&self, lpm: &mut Lpm<N>, routes: usize) -> Result<(), crate::lpm::LpmError> {
        lpm.rebuild_region(self.at, self.len, self.cover.map(|c| c.1), &self.inside, routes)
    }
}

/// `lpm` itself without regions to rebuild, else a copy with them rebuilt.
fn rebuilt<const N: usize>(
    lpm: &Arc<Lpm<N>>,
    regions: &[Region<N>],
    routes: usize,
) -> Result<Arc<Lpm<N>>, crate::lpm::LpmError> {
    if regions.is_empty() {
        return Ok(lpm.clone());
    }
    let mut copy = lpm.duplicate();
    for r in regions {
        r.rebuild(&mut copy, routes)?;
    }
    Ok(Arc::new(copy))
}

impl RouteTables {
    fn build(spec: &TableSpec) -> Result<RouteTables, String> {
        let mut hops = NextHops::default();
        let mut p4 = Vec::new();
        let mut p6 = Vec::new();
        each_route(spec, |prefix, len, nh, _| {
            let value = hops.index(nh);
            match prefix {
                IpAddr::V4(a) => p4.push(Prefix { addr: a.octets(), len, value }),
                IpAddr::V6(a) => p6.push(Prefix { addr: a.octets(), len, value }),
            }
            Ok(())
        })?;
        Ok(RouteTables {
            version: spec.routes.version(),
            addresses: port_addresses(spec),
            lpm4: Arc::new(Lpm::build(&p4).map_err(|e| format!("IPv4 routes: {e}"))?),
            lpm6: Arc::new(Lpm::build(&p6).map_err(|e| format!("IPv6 routes: {e}"))?),
            hops: hops.list,
        })
    }

    /// The route tables of `spec`, from these where they were built from
    /// its port addresses: these themselves when its routes are those they
    /// were built from; after a few route changes, a copy with the changed
    /// prefixes' regions rebuilt; else built from scratch.
    fn after(self: &Arc<RouteTables>, spec: &TableSpec) -> Result<Arc<RouteTables>, String> {
        let same_addresses = self.addresses.len() == spec.ports.len()
            && self.addresses.iter().zip(&spec.ports).all(|((v4, v6), p)| *v4 == p.ipv4 && *v6 == p.ipv6);
        let changed = spec.routes.changes_since(self.version).filter(|_| same_addresses).map(|mut c| {
            // A prefix changed twice is one region.
            c.sort_unstable();
            c.dedup();
            c
        });
        match changed {
            Some(changes) if changes.is_empty() => Ok(self.clone()),
            Some(changes) if changes.len() <= MAX_REGIONS => Ok(Arc::new(self.rebuilt(spec, &changes)?)),
            _ => Ok(Arc::new(RouteTables::build(spec)?)),
        }
    }

    /// A copy with the regions of the `changed` prefixes rebuilt from
    /// `spec`'s routes (a family without changes is copied as it is).
    fn rebuilt(&self, spec: &TableSpec, changed: &[(IpAddr, u8)]) -> Result<RouteTables, String> {
        let mut hops = NextHops::default();
        for nh in &self.hops {
            hops.index(*nh);
        }
        let mut r4: Vec<Region<4>> = Vec::new();
        let mut r6: Vec<Region<16>> = Vec::new();
        for (prefix, len) in changed {
            let key = wide(*prefix);
            match prefix {
                IpAddr::V4(a) => r4.push(Region::new(a.octets(), *len, key)),
                IpAddr::V6(a) => r6.push(Region::new(a.octets(), *len, key)),
            }
        }
        let (mut n4, mut n6) = (0, 0);
        each_route(spec, |prefix, len, nh, _| {
            let key = wide(prefix);
            match prefix {
                IpAddr::V4(a) => {
                    n4 += 1;
                    for r in &mut r4 {
                        r.take(a.octets(), len, key, || hops.index(nh));
                    }
                }
                IpAddr::V6(a) => {
                    n6 += 1;
                    for r in &mut r6 {
                        r.take(a.octets(), len, key, || hops.index(nh));
                    }
                }
            }
            Ok(())
        })?;
        Ok(RouteTables {
            version: spec.routes.version(),
            addresses: self.addresses.clone(),
            lpm4: rebuilt(&self.lpm4, &r4, n4).map_err(|e| format!("IPv4 routes: {e}"))?,
            lpm6: rebuilt(&self.lpm6, &r6, n6).map_err(|e| format!("IPv6 routes: {e}"))?,
            hops: hops.list,
        })
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
        let routes = match previous {
            Some(t) => t.routes.after(spec)?,
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
            let port = spec.ports.get(nh.port as usize).filter(|p| p.up);
            nh.rewrite = nh.gateway_mac.zip(port.map(|p| p.mac));
        }
        let routed_ports = nexthops
            .iter()
            .filter(|nh| nh.rewrite.is_some())
            .fold(0u32, |m, nh| m | 1u32.checked_shl(nh.port as u32).unwrap_or(0));
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
        // Room for twice the entries, so at most a quarter of the slots in
        // use: the table is fixed for its generation, and at up to half
        // load a third of the hits went on past their home slot, a branch
        // the probe mispredicts. A lookup still touches one line an entry.
        let mut static_macs = CompactMap::with_capacity(spec.static_macs.len().max(1) * 2);
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
            lpm4: routes.lpm4.clone(),
            lpm6: routes.lpm6.clone(),
            routes,
            nexthops,
            routed_ports,
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

    /// The next hop this generation's LPMs give `addr` (gateway MAC as
    /// resolved in it), if any route matches.
    pub fn route_lookup(&self, addr: IpAddr) -> Option<&NextHop> {
        let v = match addr {
            IpAddr::V4(a) => self.lpm4.lookup(&a.octets()),
            IpAddr::V6(a) => self.lpm6.lookup(&a.octets()),
        }?;
        self.nexthops.get(v as usize)
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

    /// Whether `port`'s device verifies received IPv4 header checksums
    /// (`PortState::nic_checks_ipv4`).
    #[inline(always)]
    pub fn nic_checks_ipv4(&self, port: u16) -> bool {
        self.ports.get(port as usize).is_some_and(|p| p.nic_checks_ipv4)
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
                    nic_checks_ipv4: false,
                },
                PortState {
                    name: "p1".into(),
                    mac: [2, 0, 0, 0, 0, 0xa1],
                    up: true,
                    ipv4: vec![([10, 0, 2, 1], 24)],
                    ipv6: vec![([0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 64)],
                    impair: Default::default(),
                    nic_checks_ipv4: false,
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
                log: Default::default(),
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

    /// `two_port_router` with an IPv6 route too, 2001:db8:ff::/48, through
    /// a resolved gateway on p1 (2001:db8:2::fe at 02:00:00:00:00:fd).
    pub fn two_port_router_v6_routed() -> TableSpec {
        let mut s = two_port_router();
        let gw: IpAddr = "2001:db8:2::fe".parse().unwrap();
        s.routes.upsert(RouteSpec { prefix: "2001:db8:ff::".parse().unwrap(), len: 48, port: 1, gateway: Some(gw) });
        s.upsert_neighbour(NeighbourSpec { ip: gw, mac: [2, 0, 0, 0, 0, 0xfd], port: 1, permanent: true });
        s
    }

    #[test]
    fn builds_connected_and_static_routes() {
        let t = Tables::build(&two_port_router(), 7).unwrap();
        assert_eq!(t.generation, 7);
        let nh = t.nexthops[t.lpm4.lookup(&[10, 0, 2, 9]).unwrap() as usize];
        assert_eq!(nh, NextHop { port: 1, gateway: None, gateway_mac: None, rewrite: None, local: false });
        let nh = t.nexthops[t.lpm4.lookup(&[172, 20, 0, 1]).unwrap() as usize];
        assert_eq!(nh.gateway, Some("10.0.2.254".parse().unwrap()));
        assert_eq!(nh.gateway_mac, Some([2, 0, 0, 0, 0, 0xfe]), "the gateway's adjacency");
        assert!(t.lpm4.lookup(&[8, 8, 8, 8]).is_none());
        assert_eq!(t.local4.get(&v4_key([10, 0, 1, 1])), Some(&0));
        assert_eq!(t.neigh4.get(&v4_key([10, 0, 2, 254])).unwrap().mac, [2, 0, 0, 0, 0, 0xfe]);
        assert_eq!(t.v4_source_for([10, 0, 2, 77]), Some((1, [10, 0, 2, 1])));
        assert!(t.lpm6.lookup(&[0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]).is_some());
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
        let nh = t.nexthops[t.lpm4.lookup(&[20, 0, 7, 1]).unwrap() as usize];
        assert_eq!(nh.gateway, gw(7));
    }

    #[test]
    fn own_addresses_are_local_host_routes_that_win() {
        let mut s = two_port_router();
        // A configured host route to the switch's own address loses.
        s.routes.upsert(RouteSpec { prefix: "10.0.2.1".parse().unwrap(), len: 32, port: 0, gateway: None });
        let t = Tables::build(&s, 1).unwrap();
        let nh = t.nexthops[t.lpm4.lookup(&[10, 0, 2, 1]).unwrap() as usize];
        assert_eq!((nh.port, nh.local), (1, true));
        let nh = t.nexthops[t.lpm4.lookup(&[10, 0, 2, 2]).unwrap() as usize];
        assert_eq!((nh.port, nh.local), (1, false), "the rest of the connected /24 is routed");
        let own6 = s.ports[0].ipv6[0].0;
        assert!(t.nexthops[t.lpm6.lookup(&own6).unwrap() as usize].local);
    }

    #[test]
    fn a_gateway_without_neighbour_has_no_adjacency() {
        let mut s = two_port_router();
        s.neighbours.clear();
        let t = Tables::build(&s, 1).unwrap();
        let nh = t.nexthops[t.lpm4.lookup(&[172, 20, 0, 1]).unwrap() as usize];
        assert_eq!((nh.gateway.is_some(), nh.gateway_mac), (true, None));
    }

    #[test]
    fn a_generation_shares_the_route_tables_while_routes_and_addresses_stay() {
        let mut s = two_port_router();
        let t1 = Tables::build(&s, 1).unwrap();
        let gw = |t: &Tables| t.nexthops[t.lpm4.lookup(&[172, 20, 0, 1]).unwrap() as usize].gateway_mac;
        // A neighbour changes: same LPMs, the adjacency follows.
        s.neighbours[0].mac = [2, 0, 0, 0, 0, 0xfd];
        let t2 = Tables::build_after(&s, 2, Some(&t1)).unwrap();
        assert!(Arc::ptr_eq(&t1.routes, &t2.routes));
        assert_eq!((gw(&t1), gw(&t2)), (Some([2, 0, 0, 0, 0, 0xfe]), Some([2, 0, 0, 0, 0, 0xfd])));
        // So does the rewrite: the new gateway MAC and port 1's.
        let rewrite = |t: &Tables| t.nexthops[t.lpm4.lookup(&[172, 20, 0, 1]).unwrap() as usize].rewrite;
        assert_eq!(rewrite(&t2), Some(([2, 0, 0, 0, 0, 0xfd], s.ports[1].mac)));
        // So does a port going down (no rewrite through it), and removing
        // a route that is not there.
        s.ports[1].up = false;
        assert!(!s.routes.remove("192.0.2.0".parse().unwrap(), 24));
        let t3 = Tables::build_after(&s, 3, Some(&t2)).unwrap();
        assert!(Arc::ptr_eq(&t2.routes, &t3.routes));
        assert_eq!((gw(&t3), rewrite(&t3)), (Some([2, 0, 0, 0, 0, 0xfd]), None));
        // The ports the quick path may send by follow the rewrites.
        assert_eq!((t2.routed_ports, t3.routed_ports), (0b10, 0));
        // A route added: its region rebuilt in a copy of the IPv4 LPM, the
        // IPv6 one shared; and it routes.
        s.routes.upsert(RouteSpec { prefix: "192.0.2.0".parse().unwrap(), len: 24, port: 0, gateway: None });
        let t4 = Tables::build_after(&s, 4, Some(&t3)).unwrap();
        assert!(!Arc::ptr_eq(&t3.routes, &t4.routes));
        assert!(!Arc::ptr_eq(&t3.lpm4, &t4.lpm4) && Arc::ptr_eq(&t3.lpm6, &t4.lpm6));
        assert_eq!(t4.nexthops[t4.lpm4.lookup(&[192, 0, 2, 9]).unwrap() as usize].port, 0);
        assert!(t3.lpm4.lookup(&[192, 0, 2, 9]).is_none());
        // Removed again: rebuilt again, and gone.
        assert!(s.routes.remove("192.0.2.0".parse().unwrap(), 24));
        let t5 = Tables::build_after(&s, 5, Some(&t4)).unwrap();
        assert!(!Arc::ptr_eq(&t4.routes, &t5.routes));
        assert!(t5.lpm4.lookup(&[192, 0, 2, 9]).is_none());
        // A port address changes: its connected and local routes with it.
        s.ports[0].ipv4 = vec![([10, 0, 9, 1], 24)];
        let t6 = Tables::build_after(&s, 6, Some(&t5)).unwrap();
        assert!(!Arc::ptr_eq(&t5.routes, &t6.routes));
        assert!(t6.nexthops[t6.lpm4.lookup(&[10, 0, 9, 1]).unwrap() as usize].local);
        assert!(t6.lpm4.lookup(&[10, 0, 1, 1]).is_none());
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

    /// Where `a` leads in `t`: the next hop itself, since a region rebuilt
    /// and a whole build may number the next hops differently.
    fn hop(t: &Tables, a: IpAddr) -> Option<NextHop> {
        t.route_lookup(a).copied()
    }

    #[test]
    fn route_changes_rebuild_their_regions_as_a_whole_build_does() {
        let mut rng = crate::rand::XorShift::new(0xfeed);
        let mut s = two_port_router();
        // Addresses near the ports' subnets and the switch's own, so that
        // routes nest in the connected and local ones.
        let v6 = s.ports[1].ipv6[0].0;
        let addr = |rng: &mut crate::rand::XorShift| -> IpAddr {
            let x = rng.next_u64();
            if x % 5 == 0 {
                let mut a = v6;
                a[15] = (x >> 8) as u8 % 4;
                a[6] = (x >> 16) as u8 % 3;
                IpAddr::from(a)
            } else {
                IpAddr::from([10, 0, 1 + (x >> 8) as u8 % 3, (x >> 16) as u8 % 8])
            }
        };
        let route = |rng: &mut crate::rand::XorShift| {
            let a = addr(rng);
            let x = rng.next_u64();
            let (max, gw): (u64, IpAddr) = match a {
                IpAddr::V4(_) => (33, "10.0.2.254".parse().unwrap()),
                IpAddr::V6(_) => (129, "2001:db8:2::fe".parse().unwrap()),
            };
            RouteSpec {
                prefix: a,
                len: (x % max) as u8,
                port: (x >> 8) as u16 % 2,
                gateway: (x & 1 << 20 != 0).then_some(gw),
            }
        };
        let list: Vec<RouteSpec> = (0..200).map(|_| route(&mut rng)).collect();
        s.routes.set(&list);
        let mut t = Tables::build(&s, 1).unwrap();
        let (mut regions, mut whole) = (0, 0);
        for g in 2..250u64 {
            // One to three changes a generation: added, replaced or removed.
            let mut changed = Vec::new();
            for _ in 0..1 + rng.next_u64() % 3 {
                let r = route(&mut rng);
                if rng.next_u64() % 3 == 0 && !s.routes.is_empty() {
                    let old = s.routes[rng.next_u64() as usize % s.routes.len()];
                    assert!(s.routes.remove(old.prefix, old.len));
                    changed.push(old);
                } else {
                    s.routes.upsert(r);
                    changed.push(r);
                }
            }
            if s.routes.changes_since(t.routes.version).is_some() {
                regions += 1;
            }
            let next = Tables::build_after(&s, g, Some(&t)).unwrap();
            let fresh = Tables::build(&s, g).unwrap();
            whole += 1;
            let mut probes: Vec<IpAddr> = (0..100).map(|_| addr(&mut rng)).collect();
            for r in &changed {
                // The changed region's first and last addresses, and those
                // just outside.
                let (k, m) = (wide(r.prefix), wide_mask(r.len));
                let bits = if r.prefix.is_ipv4() { 96 } else { 0 };
                for x in [(k & m).wrapping_sub(1 << bits), k & m, k | !m, (k | !m).wrapping_add(1 << bits)] {
                    probes.push(match r.prefix {
                        IpAddr::V4(_) => IpAddr::from(((x >> 96) as u32).to_be_bytes()),
                        IpAddr::V6(_) => IpAddr::from(x.to_be_bytes()),
                    });
                }
            }
            for a in probes {
                assert_eq!(hop(&next, a), hop(&fresh, a), "generation {g}: {a}");
                // What `route get` names leads where the LPM does.
                let named = longest_match(&s, a).map(|(_, _, nh, _)| (nh.port, nh.gateway, nh.local));
                assert_eq!(named, hop(&next, a).map(|nh| (nh.port, nh.gateway, nh.local)), "generation {g}: {a}");
            }
            assert_eq!(next.lpm4.routes() + next.lpm6.routes(), fresh.lpm4.routes() + fresh.lpm6.routes());
            t = next;
        }
        assert_eq!((regions, whole), (248, 248), "every generation rebuilt regions only");
        // One prefix changed 20 times is one region (the IPv6 LPM stays
        // shared); 17 prefixes are more regions than rebuilt: a whole build.
        for i in 0..20u8 {
            s.routes.upsert(RouteSpec {
                prefix: IpAddr::from([192, 0, 2, 0]),
                len: 24,
                port: (i % 2) as u16,
                gateway: None,
            });
        }
        let next = Tables::build_after(&s, 250, Some(&t)).unwrap();
        assert!(Arc::ptr_eq(&t.lpm6, &next.lpm6) && !Arc::ptr_eq(&t.lpm4, &next.lpm4));
        for i in 0..=MAX_REGIONS as u8 {
            s.routes.upsert(RouteSpec { prefix: IpAddr::from([192, 0, 3, i]), len: 32, port: 0, gateway: None });
        }
        let whole = Tables::build_after(&s, 251, Some(&next)).unwrap();
        assert!(!Arc::ptr_eq(&next.lpm6, &whole.lpm6));
        assert_eq!(hop(&whole, IpAddr::from([192, 0, 3, 16])).map(|h| h.port), Some(0));
        // A set forgets the log (a whole build follows), and so do more
        // changes than it keeps.
        let v = s.routes.version();
        s.routes.set(&list);
        assert_eq!(s.routes.changes_since(v), None);
        let v = s.routes.version();
        for i in 0..ROUTE_LOG as u8 {
            s.routes.upsert(RouteSpec { prefix: IpAddr::from([192, 0, 2, i]), len: 32, port: 0, gateway: None });
        }
        assert_eq!(s.routes.changes_since(v).map(|c| c.len()), Some(ROUTE_LOG));
        s.routes.upsert(RouteSpec { prefix: IpAddr::from([192, 0, 3, 0]), len: 32, port: 0, gateway: None });
        assert_eq!(s.routes.changes_since(v), None);
        assert_eq!(s.routes.changes_since(s.routes.version()), Some(Vec::new()));
        // A changed route to a missing port is refused on the way too.
        let t2 = Tables::build(&s, 300).unwrap();
        s.routes.upsert(RouteSpec { prefix: IpAddr::from([192, 0, 4, 0]), len: 24, port: 7, gateway: None });
        assert!(Tables::build_after(&s, 301, Some(&t2)).err().unwrap().contains("port index 7"));
    }

    #[test]
    fn longest_match_names_the_route_and_its_kind() {
        let s = two_port_router();
        let named =
            |a: &str| longest_match(&s, a.parse().unwrap()).map(|(p, l, nh, k)| (format!("{p}/{l}"), nh.port, k));
        assert_eq!(named("10.0.2.9"), Some(("10.0.2.0/24".into(), 1, RouteKind::Connected)));
        assert_eq!(named("10.0.2.1"), Some(("10.0.2.1/32".into(), 1, RouteKind::Local)));
        assert_eq!(named("172.20.0.1"), Some(("172.16.0.0/12".into(), 1, RouteKind::Static)));
        assert_eq!(named("2001:db8:2::77"), Some(("2001:db8:2::/64".into(), 1, RouteKind::Connected)));
        assert_eq!(named("8.8.8.8"), None);
        assert_eq!(named("2001:db8:3::1"), None);
        let t = Tables::build(&s, 1).unwrap();
        let nh = t.route_lookup("172.20.0.1".parse().unwrap()).unwrap();
        assert_eq!((nh.port, nh.gateway_mac), (1, Some([2, 0, 0, 0, 0, 0xfe])));
        assert!(t.route_lookup("8.8.8.8".parse().unwrap()).is_none());
    }
}
