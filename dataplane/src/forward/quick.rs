//! The router's quick path (`Depth::L3`): a unicast IPv4 packet without
//! options, or an IPv6 TCP/UDP packet without extension headers, addressed
//! to the port's MAC, routed through a resolved gateway, is checked and
//! rewritten from fixed offsets, without the parse. It accepts only what
//! the full path (`parse`, the flow table, then `route_v4`/`route_v6`)
//! would send out the same port rewritten the same way, and accounts it to
//! its flow (learned on a miss) as the full path does; anything else (ARP,
//! ND, the switch's own addresses, a bad header, TTL 1, a connected or
//! unresolved next hop, a flow that drops or goes elsewhere) is left
//! untouched for the full path, which names its drop.

use crate::counters::CounterValues;
use crate::flow_table::{FlowAction, FlowTable};
use crate::parse::{l4_header_fits, tcp_or_udp, FlowKey, PROTO_TCP};
use crate::pipeline::QuickConsent;
use crate::tables::Tables;
use crate::wire::checksum;
use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};

const ETH: usize = 14;
const V4: usize = 20;
const V6: usize = 40;

/// The worker's flow table as the quick path keeps it.
pub struct Flows<'a> {
    pub table: &'a mut FlowTable,
    /// Learn a flow entry on a miss.
    pub learn: bool,
    pub now: u64,
    pub counters: &'a mut CounterValues,
}

impl Flows<'_> {
    /// Whether the flow of `key` lets a packet of `len` bytes leave by the
    /// route's port `out`, the packet then accounted to it (or the flow
    /// learned) as the full path's `flow_lookup` does. False, with nothing
    /// done, for a flow that drops its packets or sends them elsewhere.
    #[inline(always)]
    fn admit(&mut self, key: impl FnOnce() -> FlowKey, len: usize, out: u16) -> bool {
        let key = key();
        let takes = |a| a == FlowAction::Normal || a == FlowAction::Forward(out);
        match self.table.hit_if(&key, len, self.now, takes) {
            Ok(Some(_)) => true,
            Ok(None) => {
                if self.learn {
                    super::learn_flow(self.table, self.counters, key, len, self.now);
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// Routes `frame`, received on `in_port`, when it is the common case and
/// the feature stages consent (`to`: it leaves by one of the ports they
/// name, and is none of the packets they act on): rewrites it and returns
/// the output port. None leaves it (and the flow table) untouched.
/// `FLOWS`: whether the flow table is in use (entries, or learning);
/// without, its code is left out, not branched over. `nic`: the receiving
/// NIC's verdict on the IPv4 header checksum where the port's device checks
/// them (`ForwardStage::nic_verdict`), else None (summed here).
#[inline(always)]
pub fn route<const FLOWS: bool>(
    t: &Tables,
    frame: &mut [u8],
    in_port: u16,
    flows: &mut Flows,
    to: &QuickConsent,
    nic: Option<bool>,
) -> Option<u16> {
    let eth = frame.first_chunk::<ETH>()?;
    match u16::from_be_bytes([eth[12], eth[13]]) {
        ETHERTYPE_IPV4 => route_v4::<FLOWS>(t, frame, in_port, flows, to, nic),
        ETHERTYPE_IPV6 => route_v6::<FLOWS>(t, frame, in_port, flows, to),
        _ => None,
    }
}

/// Whether `frame` is unicast to `in_port`'s MAC.
#[inline(always)]
fn to_us(t: &Tables, frame: &[u8], in_port: u16) -> bool {
    t.ports.get(in_port as usize).is_some_and(|p| frame[..6] == p.mac[..] && frame[0] & 1 == 0)
}

#[inline(always)]
fn route_v4<const FLOWS: bool>(
    t: &Tables,
    frame: &mut [u8],
    in_port: u16,
    flows: &mut Flows,
    to: &QuickConsent,
    nic: Option<bool>,
) -> Option<u16> {
    let ip: &[u8; V4] = frame.get(ETH..)?.first_chunk()?;
    // A packet a stage acts on costs no more checks here: they are the
    // full path's. (A header the quick path would refuse below may pass
    // this test on what it reads, and is refused all the same.)
    if to.leaves(ip[1] >> 2, ip[9], || first_fragment(ip).then(|| ports(frame, ETH + V4).1)) {
        return None;
    }
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    // To us; version 4 without options; the total length as
    // `Ipv4Packet::new_checked` takes it; a valid header checksum (the
    // NIC's verdict where it checks); TTL above 1; not multicast.
    if !to_us(t, frame, in_port) || ip[0] != 0x45 || total < V4 || total > frame.len() - ETH {
        return None;
    }
    if !nic.unwrap_or_else(|| checksum::header_verifies(ip)) || ip[8] <= 1 || ip[16] >= 224 {
        return None;
    }
    if first_fragment(ip) && !l4_holds(ip[9], &frame[ETH + V4..ETH + total]) {
        return None;
    }
    let dst: [u8; 4] = ip[16..20].try_into().ok()?;
    let (out, gw, src) = gateway(t, t.lpm4.lookup(&dst)?)?;
    if !may_leave_by(to.ports, out) || (FLOWS && !flows.admit(|| key_v4(ip, frame, in_port), frame.len(), out)) {
        return None;
    }
    // TTL - 1, as Ipv4Packet::decrement_ttl (whose checks this header has passed).
    let ip = &mut frame[ETH..ETH + V4];
    let c = checksum::ttl_decremented(u16::from_be_bytes([ip[10], ip[11]]));
    ip[8] -= 1;
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    set_macs(frame, gw, src);
    Some(out)
}

#[inline(always)]
fn route_v6<const FLOWS: bool>(
    t: &Tables,
    frame: &mut [u8],
    in_port: u16,
    flows: &mut Flows,
    to: &QuickConsent,
) -> Option<u16> {
    let ip: &[u8; V6] = frame.get(ETH..)?.first_chunk()?;
    let proto = ip[6];
    if to.leaves((ip[0] & 0x0f) << 2 | ip[1] >> 6, proto, || Some(ports(frame, ETH + V6).1)) {
        return None;
    }
    let end = ETH + V6 + u16::from_be_bytes([ip[4], ip[5]]) as usize;
    // To us; version 6, the payload inside the frame, TCP or UDP right
    // after the fixed header (extension headers and ICMPv6 take the full
    // path), hop limit above 1, not multicast.
    if !to_us(t, frame, in_port) || ip[0] >> 4 != 6 || end > frame.len() || ip[7] <= 1 || ip[24] == 0xff {
        return None;
    }
    if !tcp_or_udp(proto) || !l4_header_fits(proto == PROTO_TCP, &frame[ETH + V6..end]) {
        return None;
    }
    let dst: [u8; 16] = frame[ETH + 24..ETH + V6].try_into().ok()?;
    let (out, gw, src) = gateway(t, t.lpm6.lookup(&dst)?)?;
    if !may_leave_by(to.ports, out) || (FLOWS && !flows.admit(|| key_v6(ip, frame, in_port), frame.len(), out)) {
        return None;
    }
    frame[ETH + 7] -= 1;
    set_macs(frame, gw, src);
    Some(out)
}

/// Starts loading the flow-table slot of the flow the quick path would
/// account `frame` to (a frame it then leaves costs one prefetch).
#[inline(always)]
pub fn prefetch_flow(table: &FlowTable, frame: &[u8], in_port: u16) {
    let Some(eth) = frame.first_chunk::<ETH>() else { return };
    let ip = frame.get(ETH..).unwrap_or_default();
    let key = match u16::from_be_bytes([eth[12], eth[13]]) {
        ETHERTYPE_IPV4 => ip.first_chunk().map(|ip| key_v4(ip, frame, in_port)),
        ETHERTYPE_IPV6 => ip.first_chunk().map(|ip| key_v6(ip, frame, in_port)),
        _ => None,
    };
    if let Some(k) = key {
        table.prefetch(&k);
    }
}

/// The flow key `parse` gives an untagged IPv4 frame without options.
#[inline(always)]
fn key_v4(ip: &[u8; V4], frame: &[u8], in_port: u16) -> FlowKey {
    let proto = ip[9];
    let (sp, dp) = if first_fragment(ip) && tcp_or_udp(proto) { ports(frame, ETH + V4) } else { (0, 0) };
    let addr = |at: usize| u32::from_be_bytes([ip[at], ip[at + 1], ip[at + 2], ip[at + 3]]) as u128;
    FlowKey::new(addr(12), addr(16), proto, sp, dp, 4, in_port, 0)
}

/// The flow key `parse` gives an untagged IPv6 TCP or UDP frame without
/// extension headers.
#[inline(always)]
fn key_v6(ip: &[u8; V6], frame: &[u8], in_port: u16) -> FlowKey {
    let addr = |at: usize| u128::from_be_bytes(ip[at..at + 16].try_into().unwrap_or_default());
    let (sp, dp) = ports(frame, ETH + V6);
    FlowKey::new(addr(8), addr(24), ip[6], sp, dp, 6, in_port, 0)
}

/// The two ports at the start of a transport header at `at`.
#[inline(always)]
fn ports(frame: &[u8], at: usize) -> (u16, u16) {
    match frame.get(at..).and_then(|l4| l4.first_chunk::<4>()) {
        Some(p) => (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]])),
        None => (0, 0),
    }
}

/// Whether an IPv4 header's packet holds the transport header (a fragment
/// at offset 0).
#[inline(always)]
fn first_fragment(ip: &[u8; V4]) -> bool {
    u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff == 0
}

/// The route's port, its gateway's MAC and the port's own, when the route
/// goes through a resolved gateway on a port that is up (a local address,
/// the switch's own, has no gateway).
#[inline(always)]
fn gateway(t: &Tables, route: u32) -> Option<(u16, [u8; 6], [u8; 6])> {
    let nh = t.nexthops.get(route as usize)?;
    let (gw, src) = nh.rewrite?;
    Some((nh.port, gw, src))
}

/// Whether `out` is among `ports` (all ones: every port).
#[inline(always)]
fn may_leave_by(ports: u32, out: u16) -> bool {
    ports == u32::MAX || (out < 32 && ports & 1 << out != 0)
}

/// Whether the transport header the parser reads is whole (see
/// `parse::l4_header_fits`); other protocols have none to read.
#[inline(always)]
fn l4_holds(proto: u8, l4: &[u8]) -> bool {
    !tcp_or_udp(proto) | l4_header_fits(proto == PROTO_TCP, l4)
}

#[inline(always)]
fn set_macs(frame: &mut [u8], dst: [u8; 6], src: [u8; 6]) {
    frame[..6].copy_from_slice(&dst);
    frame[6..12].copy_from_slice(&src);
}

/// Asserts that the quick path routes `input`, received on port 0, only
/// as the full path (`forward::process`, learning flows when `learn`)
/// does: the same port and bytes, the same flow entries and counters after;
/// and that otherwise it leaves the frame and `flows` as they came. True
/// when it routed it; `flows` then holds the full path's result. `nic`:
/// what the receiving NIC marked of its IPv4 header checksum, to both. For
/// the tests and the pipeline fuzz.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn assert_as_the_full_path(
    t: &Tables,
    flows: &mut FlowTable,
    macs: &mut crate::mac_table::MacTable,
    learn: bool,
    now: u64,
    input: &[u8],
    nic: Option<bool>,
) -> bool {
    struct Discard;
    impl super::ControlSink for Discard {
        fn send(&mut self, _ev: super::ControlEvent) -> bool {
            true
        }
    }
    let entries = |f: &FlowTable| f.iter().map(|(k, e)| (*k, e)).collect::<Vec<_>>();
    let (mut quick, mut quick_flows, mut cq) = (input.to_vec(), flows.clone(), CounterValues::default());
    let mut qf = Flows { table: &mut quick_flows, learn, now, counters: &mut cq };
    let in_use = learn || !flows.is_empty();
    let routed = if in_use {
        route::<true>(t, &mut quick, 0, &mut qf, &QuickConsent::ALL, nic)
    } else {
        route::<false>(t, &mut quick, 0, &mut qf, &QuickConsent::ALL, nic)
    };
    let Some(out) = routed else {
        assert_eq!(quick, input, "quick path changed a frame it left: {input:02x?}");
        assert!(
            entries(&quick_flows) == entries(flows),
            "quick path changed the flows of a frame it left: {input:02x?}"
        );
        assert_eq!(cq, CounterValues::default(), "quick path counted a frame it left: {input:02x?}");
        return false;
    };
    let (mut full, mut c) = (input.to_vec(), CounterValues::default());
    let mut sink = Discard;
    let mut ctx = super::Ctx::new(t, flows, macs, &mut c, &mut sink, now, learn);
    ctx.nic_ipv4_checksum = nic;
    let v = super::process(&mut ctx, &mut full, 0);
    assert_eq!(v, super::Verdict::Tx(out), "quick path routed what the full path did not: {input:02x?}");
    assert_eq!(quick, full, "quick path wrote other bytes: {input:02x?}");
    assert!(entries(&quick_flows) == entries(flows), "quick path accounted flows otherwise: {input:02x?}");
    assert_eq!(cq, c, "quick path counted otherwise: {input:02x?}");
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::counters::Event;
    use crate::mac_table::MacTable;
    use crate::parse::tests::{udp4, udp6};
    use crate::tables::tests::two_port_router_v6_routed;
    use crate::tables::RouteSpec;
    use crate::wire::ipv4::Ipv4Packet;

    const V6_SRC: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    const V6_ROUTED: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];

    /// A frame to port 0's MAC.
    fn to_p0(mut f: Vec<u8>) -> Vec<u8> {
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xa0]);
        f
    }

    /// `udp` made TCP: the protocol changed, a 20-byte header (data offset 5).
    fn as_tcp(mut f: Vec<u8>, l4: usize) -> Vec<u8> {
        f[l4 + 12] = 0x50;
        if l4 == ETH + V4 {
            f[ETH + 9] = PROTO_TCP;
            Ipv4Packet::new_checked(&mut f[ETH..]).unwrap().fill_checksum();
        } else {
            f[ETH + 6] = PROTO_TCP;
        }
        f
    }

    /// Routed, local, connected, unrouted and multicast packets of both
    /// families, UDP, TCP and ICMP.
    pub(crate) fn corpus() -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for dst in [[172, 16, 5, 5], [10, 0, 1, 1], [10, 0, 2, 9], [8, 8, 8, 8], [224, 0, 0, 5]] {
            let f = to_p0(udp4([10, 0, 1, 2], dst, 1000, 2000, &[7; 12]));
            v.push(as_tcp(f.clone(), ETH + V4));
            let mut icmp = f.clone();
            icmp[ETH + 9] = 1;
            Ipv4Packet::new_checked(&mut icmp[ETH..]).unwrap().fill_checksum();
            v.push(icmp);
            v.push(f);
        }
        let mut local6 = V6_SRC;
        local6[15] = 1;
        for dst in [
            V6_ROUTED,
            local6,
            [0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
            [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        ] {
            let f = to_p0(udp6(V6_SRC, dst, 1000, 2000, &[7; 12]));
            v.push(as_tcp(f.clone(), ETH + V6));
            v.push(f);
        }
        v
    }

    /// Each frame, and each with one byte changed (headers and the first
    /// transport bytes, IPv4 headers again with their checksum mended) or
    /// cut short: whenever the quick path routes one, the full path sends
    /// it out the same port with the same bytes; otherwise the quick path
    /// left the frame as it was.
    #[test]
    fn the_quick_path_routes_only_as_the_full_path_does() {
        // Without default routes (unrouted packets), and with them (which
        // also cover the multicast destinations).
        let mut with_defaults = two_port_router_v6_routed();
        for (prefix, gw) in [("0.0.0.0", "10.0.2.254"), ("::", "2001:db8:2::fe")] {
            let r = RouteSpec { prefix: prefix.parse().unwrap(), len: 0, port: 1, gateway: Some(gw.parse().unwrap()) };
            with_defaults.routes.upsert(r);
        }
        for s in [two_port_router_v6_routed(), with_defaults] {
            same_as_the_full_path(&Tables::build(&s, 1).unwrap());
        }
    }

    fn same_as_the_full_path(t: &Tables) {
        let mut macs = MacTable::new(64, 0);
        let mut variants = Vec::new();
        for f in corpus() {
            variants.push(f.clone());
            for len in 0..f.len() {
                variants.push(f[..len].to_vec());
            }
            for at in 0..f.len().min(ETH + V6 + 20) {
                for v in [0, 1, 0x45, 0x50, 0x60, 0xff, f[at] ^ 1, f[at].wrapping_sub(1)] {
                    let mut g = f.clone();
                    g[at] = v;
                    if g[12..14] == [8, 0] && (ETH..ETH + V4).contains(&at) && g[ETH] == 0x45 {
                        // Over the raw header: the mutant's lengths may be
                        // ones no checked view takes.
                        let mut mended = g.clone();
                        mended[ETH + 10..ETH + 12].fill(0);
                        let c = checksum::checksum(&mended[ETH..ETH + V4]);
                        mended[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
                        variants.push(mended);
                    }
                    variants.push(g);
                }
            }
        }
        // Without flows; learning them (the table fills, and later flows
        // fail to learn); and with flows installed for routed frames: one
        // dropped, one sent out the other port, one out the route's own.
        let routed = corpus();
        let key = |i: usize| crate::parse::parse(&routed[i], 0).unwrap().key;
        let actions = [(0, FlowAction::Drop), (2, FlowAction::Forward(0)), (15, FlowAction::Forward(1))];
        for (learn, install) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut flows = FlowTable::new(64, 0);
            for (i, a) in actions.iter().filter(|_| install) {
                flows.install(key(*i), *a, 0).unwrap();
            }
            let (mut routed, mut v4, mut v6) = (0, 0, 0);
            for (i, f) in variants.iter().enumerate() {
                if assert_as_the_full_path(t, &mut flows, &mut macs, learn, (i as u64) << 20, f, None) {
                    routed += 1;
                    v4 += (f[12..14] == [8, 0]) as usize;
                    v6 += (f[12..14] == [0x86, 0xdd]) as usize;
                }
            }
            assert!(v4 > 50 && v6 > 50, "both families take the quick path ({v4} IPv4, {v6} IPv6 of {routed})");
            assert!(!learn || flows.len() == flows.capacity(), "learning filled the table");
        }
    }

    /// The quick path on `f` with an empty flow table that does not learn.
    fn route_without_flows(t: &Tables, f: &mut [u8], in_port: u16) -> Option<u16> {
        route_with(t, f, in_port, &QuickConsent::ALL)
    }

    /// The same, with what the stages consent to.
    fn route_with(t: &Tables, f: &mut [u8], in_port: u16, to: &QuickConsent) -> Option<u16> {
        let (mut table, mut counters) = (FlowTable::new(16, 0), CounterValues::default());
        let flows = &mut Flows { table: &mut table, learn: false, now: 0, counters: &mut counters };
        route::<false>(t, f, in_port, flows, to, None)
    }

    /// Packets a feature stage acts on, by their DSCP (any protocol) or
    /// their UDP destination port, are left as they came; the others
    /// routed.
    #[test]
    fn packets_the_stages_act_on_are_left_to_the_full_path() {
        let t = Tables::build(&two_port_router_v6_routed(), 1).unwrap();
        let routed = corpus();
        let quick = |f: &[u8], to: QuickConsent| {
            let mut out = f.to_vec();
            let port = route_with(&t, &mut out, 0, &to);
            assert!(port.is_some() || out == f, "left as it came");
            port.is_some()
        };
        // UDP, TCP, ICMP over IPv4; UDP and TCP over IPv6; DSCPs set apart.
        for (i, dscp) in [(0, 0x2e), (1, 0x0a), (2, 0x17), (15, 0x2e), (16, 0x01)] {
            let mut f = routed[i].clone();
            let (v4, l4) = (f[12] == 8, if f[12] == 8 { ETH + V4 } else { ETH + V6 });
            let proto = if v4 {
                f[ETH + 1] = dscp << 2;
                Ipv4Packet::new_unchecked(&mut f[ETH..]).fill_checksum();
                f[ETH + 9]
            } else {
                f[ETH] = 0x60 | dscp >> 2;
                f[ETH + 1] = dscp << 6 | (f[ETH + 1] & 0x3f);
                f[ETH + 6]
            };
            let udp = proto == crate::parse::PROTO_UDP;
            let dport = u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]);
            assert!(quick(&f, QuickConsent::ALL), "frame {i}");
            // By DSCP: a codepoint, one bit of it.
            assert!(!quick(&f, QuickConsent::ALL.leaving_dscp(dscp, 0x3f)), "frame {i}");
            assert!(quick(&f, QuickConsent::ALL.leaving_dscp(dscp ^ 4, 0x3f)), "frame {i}");
            assert!(!quick(&f, QuickConsent::ALL.leaving_dscp(dscp & 4, 4)), "frame {i}");
            assert!(quick(&f, QuickConsent::ALL.leaving_dscp(!dscp & 4, 4)), "frame {i}");
            // By UDP port: that port only, and every UDP packet once the
            // stages name more ports than the consent holds.
            assert_eq!(quick(&f, QuickConsent::ALL.leaving_udp(dport)), !udp, "frame {i}");
            assert!(quick(&f, QuickConsent::ALL.leaving_udp(dport ^ 1)), "frame {i}");
            let three = QuickConsent::ALL.leaving_udp(dport ^ 1).leaving_udp(dport ^ 2).leaving_udp(dport ^ 3);
            assert_eq!(quick(&f, three), !udp, "frame {i}");
            // Two stages: the ports both name, leaving what either leaves.
            let both =
                QuickConsent::to_ports(0b10).leaving_udp(dport ^ 1).and(QuickConsent::ALL.leaving_dscp(dscp, 0x3f));
            assert!(!quick(&f, both), "frame {i}");
            let both = QuickConsent::to_ports(0b10).leaving_udp(dport).and(QuickConsent::to_ports(0b11).leaving_udp(7));
            assert_eq!(quick(&f, both), !udp, "frame {i}");
            assert!(!quick(&f, QuickConsent::to_ports(0b01).and(QuickConsent::ALL)), "frame {i}: port 1 not named");
        }
    }

    #[test]
    fn routed_packets_count_on_their_flows_unless_the_flow_sends_them_elsewhere() {
        let t = Tables::build(&two_port_router_v6_routed(), 1).unwrap();
        let (v4, v6) = (corpus()[2].clone(), corpus()[16].clone());
        let key = |f: &[u8]| crate::parse::parse(f, 0).unwrap().key;
        let (mut table, mut c) = (FlowTable::new(16, 0), CounterValues::default());
        let run = |table: &mut FlowTable, c: &mut CounterValues, learn: bool, f: &[u8]| {
            let mut f = f.to_vec();
            route::<true>(
                &t,
                &mut f,
                0,
                &mut Flows { table, learn, now: 5 << 20, counters: c },
                &QuickConsent::ALL,
                None,
            )
        };
        // Learned on the first packet, counted on the next.
        for f in [&v4, &v6] {
            assert_eq!(run(&mut table, &mut c, true, f), Some(1));
            assert_eq!(run(&mut table, &mut c, true, f), Some(1));
            let e = table.get(&key(f)).unwrap();
            assert_eq!((e.packets, e.bytes, e.installed), (2, 2 * f.len() as u64, false));
        }
        assert_eq!(c.events[Event::FlowLearned as usize], 2);
        // A flow sent out the route's port is routed; one that drops, or
        // goes out another port, is left for the full path, uncounted.
        for (action, routed) in
            [(FlowAction::Forward(1), true), (FlowAction::Drop, false), (FlowAction::Forward(0), false)]
        {
            table.install(key(&v4), action, 0).unwrap();
            let before = table.get(&key(&v4)).unwrap().packets;
            assert_eq!(run(&mut table, &mut c, false, &v4), routed.then_some(1));
            assert_eq!(table.get(&key(&v4)).unwrap().packets, before + routed as u64);
        }
        // A full table that learns: routed all the same, the failure counted.
        let mut full = FlowTable::new(1, 0);
        full.install(key(&v6), FlowAction::Normal, 0).unwrap();
        assert_eq!(run(&mut full, &mut c, true, &v4), Some(1));
        assert_eq!(c.events[Event::FlowLearnFailedFull as usize], 1);
        // To a port the feature stages do not name: left as it came, its
        // flow neither counted nor learned.
        let (mut fresh, mut c) = (FlowTable::new(16, 0), CounterValues::default());
        for ports in [0b01, 0] {
            let mut f = v6.clone();
            let flows = &mut Flows { table: &mut fresh, learn: true, now: 1, counters: &mut c };
            assert_eq!(route::<true>(&t, &mut f, 0, flows, &QuickConsent::to_ports(ports), None), None);
            assert_eq!(f, v6);
        }
        assert!(fresh.is_empty() && c == CounterValues::default());
        let flows = &mut Flows { table: &mut fresh, learn: true, now: 1, counters: &mut c };
        assert_eq!(route::<true>(&t, &mut v6.clone(), 0, flows, &QuickConsent::to_ports(0b10), None), Some(1));
    }

    #[test]
    fn plain_routed_packets_take_the_quick_path_and_the_rest_do_not() {
        let t = Tables::build(&two_port_router_v6_routed(), 1).unwrap();
        let quick = |mut f: Vec<u8>| route_without_flows(&t, &mut f, 0).map(|p| (p, f));
        let routed = corpus();
        // UDP, TCP and ICMP to 172.16.5.5; UDP and TCP to the IPv6 route.
        for f in [&routed[0], &routed[1], &routed[2], &routed[15], &routed[16]] {
            let (port, out) = quick(f.clone()).expect("quick");
            assert_eq!(port, 1);
            let (gw, v6) = if f[12] == 8 { (0xfe, false) } else { (0xfd, true) };
            assert_eq!(&out[..12], &[2, 0, 0, 0, 0, gw, 2, 0, 0, 0, 0, 0xa1]);
            if v6 {
                assert_eq!(out[ETH + 7], 63);
            } else {
                let ip = Ipv4Packet::new_checked(&out[ETH..]).unwrap();
                assert!(ip.ttl() == 63 && ip.verify_checksum());
            }
        }
        // Local, connected (not resolved), unrouted, multicast.
        for f in &routed[3..15] {
            assert_eq!(quick(f.clone()), None);
        }
        for f in &routed[17..] {
            assert_eq!(quick(f.clone()), None);
        }
        // On another port's MAC, or received on a port the tables lack.
        assert_eq!(route_without_flows(&t, &mut routed[0].clone(), 1), None);
        assert_eq!(route_without_flows(&t, &mut routed[0].clone(), 7), None);
        // A route through a port that is down.
        let mut s = two_port_router_v6_routed();
        s.ports[1].up = false;
        let t = Tables::build(&s, 2).unwrap();
        assert_eq!(route_without_flows(&t, &mut routed[0].clone(), 0), None);
    }
}
