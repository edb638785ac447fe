//! The INT domain as the control core configures it: node ID, presence
//! method, which ports are edge ports, what the sink reports, and the
//! watchlist, a priority-ordered ternary match on the 5-tuple, DSCP and
//! input port that gives this switch its role for a flow.
//!
//! Roles (int-event-detection §III-A/§III-C: per-flow source/transit/sink):
//! a packet without INT that arrives on an edge port and matches a `source`
//! rule gets INT; a packet carrying INT is sunk when it leaves by an edge
//! port (INT never leaks out of the domain) or matches a `sink` rule, and is
//! otherwise transited. A `none` rule leaves matching packets alone. For a
//! packet carrying INT the match uses its original protocol and ports (the
//! ones NPT saved), so one rule describes a flow before and after its source.

use crate::counters::MAX_PORTS;

pub use crate::int::Presence;

/// What the source puts into the INT header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceParams {
    pub bitmap: u16,
    pub max_hops: u8,
    pub domain_id: u16,
}

/// This switch's role for the flows a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source(SourceParams),
    Transit,
    Sink,
    /// Leave the packet alone (no source, no push, no sink).
    None,
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Source(_) => "source",
            Role::Transit => "transit",
            Role::Sink => "sink",
            Role::None => "none",
        }
    }
}

/// A value/mask pair; a zero mask matches everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ternary<T> {
    pub value: T,
    pub mask: T,
}

/// Unsigned integers a ternary field can hold.
pub trait Bits: Copy + Eq + std::ops::BitAnd<Output = Self> {
    const ONES: Self;
}
impl Bits for u8 {
    const ONES: u8 = u8::MAX;
}
impl Bits for u16 {
    const ONES: u16 = u16::MAX;
}
impl Bits for u128 {
    const ONES: u128 = u128::MAX;
}

impl<T: Bits> Ternary<T> {
    #[inline]
    pub fn matches(&self, v: T) -> bool {
        v & self.mask == self.value & self.mask
    }

    pub fn exact(value: T) -> Self {
        Ternary { value, mask: T::ONES }
    }
}

/// The fields a watch rule looks at. IPv4 addresses are held as
/// IPv4-mapped (::ffff:a.b.c.d) so one rule type serves both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchFields {
    pub ip_version: u8,
    pub src: u128,
    pub dst: u128,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
    pub dscp: u8,
    pub in_port: u16,
}

/// IPv4-mapped form of an IPv4 address.
pub fn mapped_v4(a: u32) -> u128 {
    0xffff_0000_0000 | a as u128
}

/// One watchlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRule {
    pub name: String,
    /// Higher wins; equal priorities: the older rule wins.
    pub priority: u32,
    /// 0: either family.
    pub ip_version: u8,
    pub src: Ternary<u128>,
    pub dst: Ternary<u128>,
    pub proto: Ternary<u8>,
    pub src_port: Ternary<u16>,
    pub dst_port: Ternary<u16>,
    pub dscp: Ternary<u8>,
    pub in_port: Option<u16>,
    pub role: Role,
}

impl WatchRule {
    /// A rule that matches everything (fields are then narrowed).
    pub fn any(name: &str, role: Role) -> WatchRule {
        WatchRule {
            name: name.to_string(),
            priority: 0,
            ip_version: 0,
            src: Ternary::default(),
            dst: Ternary::default(),
            proto: Ternary::default(),
            src_port: Ternary::default(),
            dst_port: Ternary::default(),
            dscp: Ternary::default(),
            in_port: None,
            role,
        }
    }

    #[inline]
    pub fn matches(&self, f: &WatchFields) -> bool {
        (self.ip_version == 0 || self.ip_version == f.ip_version)
            && self.src.matches(f.src)
            && self.dst.matches(f.dst)
            && self.proto.matches(f.proto)
            && self.src_port.matches(f.src_port)
            && self.dst_port.matches(f.dst_port)
            && self.dscp.matches(f.dscp)
            && self.in_port.is_none_or(|p| p == f.in_port)
    }
}

/// What the sink reports, and how reports leave the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportParams {
    /// RepMdBits: the sink's own metadata in each report (INT bitmap
    /// positions; bit 0, the node ID, is in the group header instead).
    pub md_bits: u16,
    /// Inner packet bytes kept in a report (the INT stack always stays in).
    pub truncate: usize,
    /// Per tracked flow, at most one report this often (TSC ticks; 0: every packet).
    pub flow_interval_tsc: u64,
}

/// The INT configuration of one table generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntSpec {
    pub node_id: u32,
    pub presence: Presence,
    /// Bit per port index.
    pub edge_ports: u32,
    /// Egress MTU (IP packet bytes) per port index.
    pub mtu: [u16; MAX_PORTS],
    /// The source pushes its own metadata.
    pub source_pushes: bool,
    /// Whether packets that carry INT and leave by a core port get this
    /// node's hop when no watch rule says otherwise (false: they pass
    /// untouched, as through a switch without INT).
    pub transit: bool,
    /// A push that would exceed the MTU: export what was collected as an
    /// intermediate report (I flag) and strip the stack, instead of setting M.
    pub mtu_report: bool,
    pub report: ReportParams,
    /// Sorted: highest priority first, then by age.
    pub watch: Vec<WatchRule>,
    /// The sink analytics' T and C events.
    pub events: crate::int::analytics::events::EventSpec,
    /// The sink's per-flow detection rules.
    pub detect: crate::int::analytics::detect::DetectSpec,
    /// The INT-label domain's DS ID (0: none): packets carrying it are
    /// labels, left to the label stage.
    pub label_ds_id: u16,
}

impl IntSpec {
    pub fn is_edge(&self, port: usize) -> bool {
        port < 32 && self.edge_ports & (1 << port) != 0
    }

    /// Whether this node acts on no packet that leaves by a port (no edge
    /// port, no watch rule, no default transit): the router's quick path
    /// may take every packet past the stage.
    #[inline]
    pub fn passes_all(&self) -> bool {
        !self.transit && self.edge_ports == 0 && self.watch.is_empty()
    }

    /// Whether a watch rule may make this switch the source of a packet
    /// that came in on `in_port` (an edge port).
    #[inline]
    pub fn may_source_at(&self, in_port: u16) -> bool {
        !self.watch.is_empty() && self.is_edge(in_port as usize)
    }

    /// The first rule (by priority) that matches.
    #[inline]
    pub fn lookup(&self, f: &WatchFields) -> Option<&WatchRule> {
        self.watch.iter().find(|r| r.matches(f))
    }

    /// Adds or replaces (by name) a rule, keeping the order.
    pub fn upsert(&mut self, rule: WatchRule) {
        if let Some(i) = self.watch.iter().position(|r| r.name == rule.name) {
            self.watch.remove(i);
        }
        let at = self.watch.iter().position(|r| r.priority < rule.priority).unwrap_or(self.watch.len());
        self.watch.insert(at, rule);
    }

    pub fn remove(&mut self, name: &str) -> bool {
        let n = self.watch.len();
        self.watch.retain(|r| r.name != name);
        self.watch.len() != n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> IntSpec {
        IntSpec {
            node_id: 1,
            presence: Presence::UdpPort(17768),
            edge_ports: 0b01,
            mtu: [1500; MAX_PORTS],
            source_pushes: true,
            transit: true,
            label_ds_id: 0,
            mtu_report: false,
            report: ReportParams { md_bits: 0x7c00, truncate: 256, flow_interval_tsc: 0 },
            watch: Vec::new(),
            events: Default::default(),
            detect: Default::default(),
        }
    }

    fn fields(dst: [u8; 4], dport: u16, dscp: u8) -> WatchFields {
        WatchFields {
            ip_version: 4,
            src: mapped_v4(0x0a00_0001),
            dst: mapped_v4(u32::from_be_bytes(dst)),
            proto: 17,
            src_port: 1000,
            dst_port: dport,
            dscp,
            in_port: 0,
        }
    }

    #[test]
    fn priorities_and_overlapping_masks() {
        let src = Role::Source(SourceParams { bitmap: 0xf000, max_hops: 8, domain_id: 0 });
        let mut s = spec();
        let mut wide = WatchRule::any("wide", src);
        wide.dst = Ternary { value: mapped_v4(0x0a00_0000), mask: !0u128 << 8 };
        wide.priority = 10;
        let mut narrow = WatchRule::any("narrow", Role::None);
        narrow.dst_port = Ternary::exact(53);
        narrow.priority = 20;
        s.upsert(wide);
        s.upsert(narrow);
        assert_eq!(s.lookup(&fields([10, 0, 0, 9], 53, 0)).unwrap().name, "narrow");
        assert_eq!(s.lookup(&fields([10, 0, 0, 9], 80, 0)).unwrap().name, "wide");
        assert!(s.lookup(&fields([10, 0, 1, 9], 80, 0)).is_none());
        // Equal priority: the older rule stays first; replacing by name re-sorts.
        let mut later = WatchRule::any("later", Role::Sink);
        later.priority = 10;
        s.upsert(later);
        assert_eq!(s.lookup(&fields([10, 0, 0, 9], 80, 0)).unwrap().name, "wide");
        let mut wide2 = s.watch.iter().find(|r| r.name == "wide").unwrap().clone();
        wide2.priority = 5;
        s.upsert(wide2);
        assert_eq!(s.lookup(&fields([10, 0, 0, 9], 80, 0)).unwrap().name, "later");
        assert!(s.remove("later"));
        assert!(!s.remove("later"));
        assert_eq!(s.lookup(&fields([10, 0, 0, 9], 80, 0)).unwrap().name, "wide");
    }

    #[test]
    fn dscp_in_port_and_family() {
        let mut s = spec();
        let mut r = WatchRule::any("ef", Role::Transit);
        r.dscp = Ternary { value: 46, mask: 0x3f };
        r.in_port = Some(0);
        r.ip_version = 4;
        s.upsert(r);
        assert!(s.lookup(&fields([1, 2, 3, 4], 1, 46)).is_some());
        assert!(s.lookup(&fields([1, 2, 3, 4], 1, 0)).is_none());
        let mut f = fields([1, 2, 3, 4], 1, 46);
        f.in_port = 1;
        assert!(s.lookup(&f).is_none());
        f.in_port = 0;
        f.ip_version = 6;
        assert!(s.lookup(&f).is_none());
        assert!(s.is_edge(0) && !s.is_edge(1) && !s.is_edge(40));
    }
}
