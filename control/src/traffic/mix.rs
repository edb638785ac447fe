//! What makes a trace look like a network's traffic rather than one flow:
//! many hosts, skewed flow popularity, shuffled order, mixed frame sizes,
//! TCP and IPv6 shares, destinations spread over the routes, broadcasts,
//! VLANs and INT stacks of varying depth. Every choice is drawn from a seeded
//! generator: the same options write the same bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dataplane::rand::XorShift;

/// Frame sizes on the wire (with the 4-byte FCS, as IMIX is defined) and
/// their weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes(Vec<(usize, u32)>);

/// Simple IMIX (wire sizes 64, 594, 1518 in 7:4:1).
pub const IMIX: &str = "64:7,594:4,1518:1";

impl Sizes {
    /// `64`, `imix`, or `SIZE[:WEIGHT],...` (wire sizes, 64 to 9022 bytes).
    pub fn parse(s: &str) -> Result<Sizes, String> {
        let s = if s == "imix" { IMIX } else { s };
        let mut v = Vec::new();
        for part in s.split(',') {
            let (size, weight) = part.split_once(':').unwrap_or((part, "1"));
            let size: usize = size.trim().parse().map_err(|_| format!("'{part}': not SIZE[:WEIGHT]"))?;
            let weight: u32 = weight.trim().parse().map_err(|_| format!("'{part}': not SIZE[:WEIGHT]"))?;
            if !(64..=9022).contains(&size) {
                return Err(format!("{size}: a wire frame size is 64 to 9022 bytes (FCS included)"));
            }
            if weight == 0 {
                return Err(format!("'{part}': a weight of 0 never draws that size; leave it out"));
            }
            v.push((size, weight));
        }
        Ok(Sizes(v))
    }

    /// Frame length without FCS (what the pcap holds) for a draw.
    pub fn pick(&self, r: &mut XorShift) -> usize {
        let total: u64 = self.0.iter().map(|&(_, w)| w as u64).sum();
        let mut x = r.next_u64() % total;
        for &(size, w) in &self.0 {
            if x < w as u64 {
                return size - 4;
            }
            x -= w as u64;
        }
        unreachable!("x < total")
    }
}

/// Zipf popularity over `n` flows: flow k is drawn with weight 1/(k+1)^a.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, a: f64) -> Zipf {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (0..n)
            .map(|k| {
                acc += 1.0 / ((k + 1) as f64).powf(a);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    pub fn pick(&self, r: &mut XorShift) -> usize {
        let u = unit(r);
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// A value in [0, 1).
fn unit(r: &mut XorShift) -> f64 {
    (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The prefixes destinations are drawn over, by IP version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prefixes {
    pub v4: Vec<(u32, u8)>,
    pub v6: Vec<(u128, u8)>,
}

impl Prefixes {
    /// One `ADDR/LEN` a line (the first word; `#` starts a comment).
    pub fn parse(text: &str) -> Result<Prefixes, String> {
        let mut p = Prefixes::default();
        for (n, line) in text.lines().enumerate() {
            let Some(word) = line.split('#').next().and_then(|l| l.split_whitespace().next()) else {
                continue;
            };
            match crate::fields::parse_prefix(word).map_err(|e| format!("line {}: {e}", n + 1))? {
                (IpAddr::V4(a), len) => p.v4.push((u32::from(a), len)),
                (IpAddr::V6(a), len) => p.v6.push((u128::from(a), len)),
            }
        }
        Ok(p)
    }

    /// An address in prefix `i mod n` of that version, its host part from
    /// `bits`; for IPv4 prefixes of /30 and shorter never the network or
    /// broadcast address. None when there is no prefix of that version.
    fn pick(&self, v6: bool, i: usize, bits: u64) -> Option<IpAddr> {
        if v6 {
            let &(net, len) = self.v6.get(i % self.v6.len().max(1))?;
            let host = if len == 128 { 0 } else { bits as u128 & (u128::MAX >> len) };
            return Some(IpAddr::V6(Ipv6Addr::from((net & !(u128::MAX.checked_shr(len as u32).unwrap_or(0))) | host)));
        }
        let &(net, len) = self.v4.get(i % self.v4.len().max(1))?;
        let net = net & !(u32::MAX.checked_shr(len as u32).unwrap_or(0));
        let host = match len {
            32 => 0,
            31 => bits as u32 & 1,
            _ => 1 + (bits % ((1u64 << (32 - len)) - 2)) as u32,
        };
        Some(IpAddr::V4(Ipv4Addr::from(net | host)))
    }
}

/// The realistic-trace options; the defaults give `TrafficSpec`'s plain
/// round-robin trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    /// Distinct source MACs (the spec's source MAC plus 0..macs).
    pub macs: usize,
    /// Distinct destination MACs (the spec's destination MAC plus 0..n).
    pub dst_macs: usize,
    /// Flows spread over this many VLANs (IDs 100, 101, ...); 0: untagged.
    pub vlans: u16,
    /// Frame sizes per packet; None: the spec's one size.
    pub sizes: Option<Sizes>,
    /// Zipf exponent of flow popularity; None: every flow equally often.
    pub zipf: Option<f64>,
    /// Seed of the packet order (and of each draw a packet makes); None:
    /// flows in turn.
    pub shuffle: Option<u64>,
    pub tcp_share: f64,
    pub v6_share: f64,
    /// Destinations drawn over these prefixes (flow i: prefix i mod n).
    pub dst_spread: Option<Prefixes>,
    pub broadcast_share: f64,
    /// With INT: each flow carries from this many hops up to the INT
    /// options' count; None: all carry that count.
    pub int_min_hops: Option<u8>,
    /// With INT: the share of flows that carry none.
    pub background_share: f64,
}

impl Default for Mix {
    fn default() -> Mix {
        Mix {
            macs: 1,
            dst_macs: 1,
            vlans: 0,
            sizes: None,
            zipf: None,
            shuffle: None,
            tcp_share: 0.0,
            v6_share: 0.0,
            dst_spread: None,
            broadcast_share: 0.0,
            int_min_hops: None,
            background_share: 0.0,
        }
    }
}

/// Base addresses of the IPv6 share when the spec's addresses are IPv4.
pub const V6_SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
pub const V6_DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x10);
/// The first VLAN ID `vlans` uses.
pub const VLAN_BASE: u16 = 100;

/// One flow's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub vlan: Option<u16>,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// INT hops its frames carry (0: none).
    pub int_hops: u8,
}

/// Flow i's source port, in the plain traces and the mixed ones alike (the
/// AM-PM benchmark's rules name the first 10k).
pub fn src_port(i: usize) -> u16 {
    1024 + (i % 50000) as u16
}

/// `mac` plus `n` in its low three bytes.
pub fn mac_plus(mac: [u8; 6], n: usize) -> [u8; 6] {
    let low = (u32::from_be_bytes([0, mac[3], mac[4], mac[5]]).wrapping_add(n as u32)).to_be_bytes();
    [mac[0], mac[1], mac[2], low[1], low[2], low[3]]
}

impl Mix {
    /// True when nothing departs from the plain trace.
    pub fn is_plain(&self) -> bool {
        *self == Mix::default()
    }

    pub fn check(&self, spec: &super::TrafficSpec) -> Result<(), String> {
        for (name, share) in [
            ("--tcp-share", self.tcp_share),
            ("--v6-share", self.v6_share),
            ("--broadcast-share", self.broadcast_share),
            ("--background-share", self.background_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("{name} {share}: a share is from 0 to 1"));
            }
        }
        if self.macs == 0 || self.dst_macs == 0 || self.macs > 1 << 24 || self.dst_macs > 1 << 24 {
            return Err("--macs and --dst-macs are from 1 to 2^24".into());
        }
        if self.vlans > 4095 - VLAN_BASE {
            return Err(format!("--vlans {}: IDs from {VLAN_BASE} on, at most {}", self.vlans, 4095 - VLAN_BASE));
        }
        if let Some(a) = self.zipf {
            if !(a.is_finite() && a > 0.0 && a <= 10.0) {
                return Err(format!("--zipf {a}: an exponent above 0, at most 10"));
            }
        }
        if self.v6_share > 0.0 && !spec.src.is_ipv4() {
            return Err("--v6-share needs IPv4 --src/--dst (the IPv6 share uses 2001:db8:1::/2001:db8:2::)".into());
        }
        if let Some(p) = &self.dst_spread {
            let v6 = !spec.src.is_ipv4() || self.v6_share > 0.0;
            let v4 = spec.src.is_ipv4() && self.v6_share < 1.0;
            if (v4 && p.v4.is_empty()) || (v6 && p.v6.is_empty()) {
                return Err("--dst-spread: the file has no prefix of an IP version the trace carries".into());
            }
        }
        Ok(())
    }

    /// Flow `i`'s headers: fixed by the flow's number, whatever the order.
    pub fn flow(&self, spec: &super::TrafficSpec, int_max_hops: Option<u8>, i: usize) -> Flow {
        let mut r = XorShift::new((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        r.next_u64();
        let v6 = !spec.src.is_ipv4() || unit(&mut r) < self.v6_share;
        let tcp = unit(&mut r) < self.tcp_share;
        let (src_base, dst_base) = match v6 && spec.src.is_ipv4() {
            true => (IpAddr::V6(V6_SRC), IpAddr::V6(V6_DST)),
            false => (spec.src, spec.dst),
        };
        let src = super::add(src_base, i as u32);
        let host_bits = r.next_u64();
        let dst = match &self.dst_spread {
            Some(p) => p.pick(v6, i, host_bits).unwrap_or(dst_base),
            None if spec.vary_dst => super::add(dst_base, i as u32),
            None => dst_base,
        };
        let dst_mac = mac_plus(spec.dst_mac, r.below(self.dst_macs));
        let dst_port = match (tcp, r.below(4)) {
            (true, 0) => 80,
            (true, _) => 443,
            (false, _) => 5001,
        };
        let int_hops = match int_max_hops {
            Some(max) if unit(&mut r) >= self.background_share => {
                let min = self.int_min_hops.unwrap_or(max).min(max);
                min + r.below((max - min) as usize + 1) as u8
            }
            _ => 0,
        };
        Flow {
            src_mac: mac_plus(spec.src_mac, i % self.macs),
            dst_mac,
            vlan: (self.vlans > 0).then(|| VLAN_BASE + (i % self.vlans as usize) as u16),
            src,
            dst,
            proto: if tcp { 6 } else { 17 },
            src_port: src_port(i),
            dst_port,
            int_hops,
        }
    }

    /// The flow of each of `count` packets.
    pub fn order(&self, count: usize, flows: usize) -> Vec<u32> {
        let mut r = XorShift::new(self.shuffle.unwrap_or(1));
        match self.zipf {
            Some(a) => {
                let z = Zipf::new(flows, a);
                // Popularity rank k is flow perm[k]: the popular flows are
                // spread over the address range, not its first entries.
                let mut perm: Vec<u32> = (0..flows as u32).collect();
                shuffle(&mut perm, &mut r);
                (0..count).map(|_| perm[z.pick(&mut r)]).collect()
            }
            None => {
                let mut v: Vec<u32> = (0..count).map(|i| (i % flows) as u32).collect();
                if self.shuffle.is_some() {
                    shuffle(&mut v, &mut r);
                }
                v
            }
        }
    }

    /// The generator of each packet's own draws (size, broadcast, metadata).
    pub fn packet_rng(&self) -> XorShift {
        XorShift::new(self.shuffle.unwrap_or(1) ^ 0x5bd1_e995)
    }

    pub fn is_broadcast(&self, r: &mut XorShift) -> bool {
        self.broadcast_share > 0.0 && unit(r) < self.broadcast_share
    }
}

/// Fisher-Yates.
fn shuffle<T>(v: &mut [T], r: &mut XorShift) {
    for i in (1..v.len()).rev() {
        v.swap(i, r.below(i + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_draw_by_weight() {
        let s = Sizes::parse("imix").unwrap();
        assert_eq!(s, Sizes(vec![(64, 7), (594, 4), (1518, 1)]));
        let mut r = XorShift::new(3);
        let mut n = [0u32; 3];
        for _ in 0..12_000 {
            match s.pick(&mut r) {
                60 => n[0] += 1,
                590 => n[1] += 1,
                1514 => n[2] += 1,
                x => panic!("{x}"),
            }
        }
        assert!(
            (6_600..7_400).contains(&n[0]) && (3_600..4_400).contains(&n[1]) && (800..1_200).contains(&n[2]),
            "{n:?}"
        );
        assert_eq!(Sizes::parse("128").unwrap(), Sizes(vec![(128, 1)]));
        for (bad, want) in [("60", "64 to 9022"), ("64:0", "weight of 0"), ("x", "SIZE[:WEIGHT]"), ("64:y", "SIZE")] {
            let e = Sizes::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn zipf_favours_the_first_ranks() {
        let z = Zipf::new(1000, 1.0);
        let mut r = XorShift::new(9);
        let mut n = vec![0u32; 1000];
        for _ in 0..100_000 {
            n[z.pick(&mut r)] += 1;
        }
        // Rank 1 gets 1/H(1000) = 13.4 %; rank 10 a tenth of that.
        assert!((12_500..14_300).contains(&n[0]), "{}", n[0]);
        assert!((1_100..1_600).contains(&n[9]), "{}", n[9]);
        assert!(n[999] < 60);
    }

    #[test]
    fn addresses_stay_inside_their_prefix() {
        let p = Prefixes::parse("# routes\n20.0.0.0/24 p1\n\n20.0.1.7/32\n10.9.9.9/31\n2001:db8:5::/48\n").unwrap();
        assert_eq!(p.v4.len(), 3);
        for bits in [0u64, 1, 253, 254, 255, u64::MAX] {
            let IpAddr::V4(a) = p.pick(false, 0, bits).unwrap() else { panic!() };
            let o = a.octets();
            assert!(o[..3] == [20, 0, 0] && (1..=254).contains(&o[3]), "{a}");
        }
        assert_eq!(p.pick(false, 1, 77), Some("20.0.1.7".parse().unwrap()));
        assert_eq!(p.pick(false, 2, 3), Some("10.9.9.9".parse().unwrap()));
        let IpAddr::V6(a) = p.pick(true, 9, u64::MAX).unwrap() else { panic!() };
        assert_eq!(a.segments()[..3], [0x2001, 0xdb8, 5]);
        assert_eq!(Prefixes::default().pick(true, 0, 0), None);
        assert!(Prefixes::parse("20.0.0.0/33").unwrap_err().contains("line 1"));
    }

    #[test]
    fn order_is_seeded_and_covers_every_flow() {
        let m = Mix { shuffle: Some(5), ..Mix::default() };
        let a = m.order(1000, 100);
        assert_eq!(a, m.order(1000, 100));
        assert_ne!(a, Mix { shuffle: Some(6), ..Mix::default() }.order(1000, 100));
        let mut counts = [0; 100];
        a.iter().for_each(|&f| counts[f as usize] += 1);
        assert!(counts.iter().all(|&c| c == 10), "a shuffle keeps each flow's share");
        assert_eq!(Mix::default().order(5, 2), [0, 1, 0, 1, 0]);
        let z = Mix { zipf: Some(1.1), ..Mix::default() }.order(10_000, 1000);
        assert!(z.iter().all(|&f| f < 1000));
    }

    #[test]
    fn flows_draw_their_shares() {
        let spec = super::super::TrafficSpec::udp("10.0.1.10".parse().unwrap(), "10.0.2.10".parse().unwrap(), 1);
        let m = Mix {
            tcp_share: 0.6,
            v6_share: 0.2,
            background_share: 0.3,
            int_min_hops: Some(1),
            macs: 50,
            vlans: 2,
            ..Mix::default()
        };
        let flows: Vec<Flow> = (0..5000).map(|i| m.flow(&spec, Some(8), i)).collect();
        let share = |f: &dyn Fn(&Flow) -> bool| flows.iter().filter(|x| f(x)).count() as f64 / 5000.0;
        assert!((0.57..0.63).contains(&share(&|f| f.proto == 6)));
        assert!((0.18..0.22).contains(&share(&|f| f.src.is_ipv6() && f.dst.is_ipv6())));
        assert!((0.27..0.33).contains(&share(&|f| f.int_hops == 0)));
        assert!(flows.iter().all(|f| f.int_hops <= 8 && f.src_mac[..3] == [2, 0, 0]));
        assert_eq!(share(&|f| f.vlan == Some(101)), 0.5);
        assert_eq!(flows[7], m.flow(&spec, Some(8), 7), "a flow's headers depend on its number only");
        assert_eq!(mac_plus([2, 0, 0, 0, 0, 0xff], 1), [2, 0, 0, 0, 1, 0]);
        for (bad, want) in [
            (Mix { tcp_share: 1.5, ..Mix::default() }, "--tcp-share"),
            (Mix { macs: 0, ..Mix::default() }, "--macs"),
            (Mix { zipf: Some(0.0), ..Mix::default() }, "--zipf"),
            (Mix { vlans: 4000, ..Mix::default() }, "--vlans"),
            (Mix { dst_spread: Some(Prefixes::parse("2001:db8::/32").unwrap()), ..Mix::default() }, "--dst-spread"),
        ] {
            let e = bad.check(&spec).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }
}
