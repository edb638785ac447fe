//! GPINT probe traces for one transit switch (`intswitch gen-traffic
//! --gpint-probes`): what its previous hop sends into p0 (probes of
//! distinct requests from many monitors, each routed out `next_port` and
//! then to the monitor) and, optionally, what its next hop answers (each
//! probe's feedback, `feedback_lag` probes later, as a link's round trip
//! would put it). Every (request, attempt) is distinct, so a replay that
//! is slower than the duplicate filter's window measures first visits.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dataplane::gpint::frame::{probe_frame, udp_frame, ProbeAddr};
use dataplane::pcap::PcapWriter;
use dataplane::rand::XorShift;
use dataplane::wire::gpint::{Header, ProbeRepr, RequestType, SrEntry, TO_MONITOR};
use dataplane::wire::int_md::instr;

/// Request IDs are 15 bits; 0 is not used.
const REQUESTS: usize = 0x7fff;

#[derive(Debug, Clone, PartialEq)]
pub struct GpintTraffic {
    /// Probes in the trace (distinct request and attempt each).
    pub probes: usize,
    /// Each probe's feedback follows it.
    pub feedbacks: bool,
    /// Probes between one and its feedback (0: right after it).
    pub feedback_lag: usize,
    /// The switch's port the probes leave by (the first SR entry).
    pub next_port: u8,
    /// Per-port RX counters each probe collects here.
    pub mea_count: u8,
    /// Monitors the probes come from (distinct source addresses).
    pub monitors: usize,
    /// Share of the probes over IPv6 (0-1).
    pub v6_share: f64,
    pub int_port: u16,
    pub gpint_port: u16,
    pub domain_id: u16,
    pub src_mac: [u8; 6],
    /// The switch's p0 MAC.
    pub dst_mac: [u8; 6],
    pub seed: u64,
}

impl GpintTraffic {
    pub fn check(&self) -> Result<(), String> {
        if self.probes == 0 || self.probes > REQUESTS * 256 {
            return Err(format!("--count: 1 to {} probes (15-bit requests x 256 attempts)", REQUESTS * 256));
        }
        if self.monitors == 0 || self.monitors > 65_536 {
            return Err("--gpint-monitors: 1 to 65536 monitors".into());
        }
        if self.gpint_port == 0 || self.gpint_port == self.int_port {
            // As the switches' gpint.udp_port: probes and feedbacks would be one.
            return Err(format!("--gpint-udp-port {}: 1-65535 and not the INT port", self.gpint_port));
        }
        if !(0.0..=1.0).contains(&self.v6_share) {
            return Err("--v6-share: from 0 to 1".into());
        }
        if self.next_port == TO_MONITOR {
            return Err(format!("--gpint-next-port: {TO_MONITOR} means the monitor"));
        }
        Ok(())
    }

    /// Probe `i`'s addresses: monitor `i mod monitors` to a switch address.
    fn addr(&self, i: usize, v6: bool) -> ProbeAddr {
        let m = i % self.monitors;
        let (ip_src, ip_dst) = if v6 {
            (
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, (m >> 16) as u16, m as u16 + 2)),
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1)),
            )
        } else {
            (IpAddr::V4(Ipv4Addr::new(10, 77, (m >> 8) as u8, m as u8)), IpAddr::V4(Ipv4Addr::new(10, 76, 0, 1)))
        };
        let mut eth_src = self.src_mac;
        eth_src[4] = eth_src[4].wrapping_add((m >> 8) as u8);
        eth_src[5] = eth_src[5].wrapping_add(m as u8);
        ProbeAddr {
            eth_src,
            eth_dst: self.dst_mac,
            ip_src,
            ip_dst,
            src_port: self.gpint_port,
            int_port: self.int_port,
            gpint_port: self.gpint_port,
            domain_id: self.domain_id,
            bitmap: instr::NODE_ID | instr::L1_PORTS | instr::QUEUE | instr::INGRESS_TS,
            dscp: None,
        }
    }

    /// Probe `i` and the feedback its next hop sends back.
    fn frames(&self, i: usize, v6: bool) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
        let bad = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        let entries = vec![
            SrEntry { next_port: self.next_port, mea_first: 0, mea_count: self.mea_count },
            SrEntry { next_port: TO_MONITOR, mea_first: 0, mea_count: self.mea_count },
        ];
        let request = (i % REQUESTS + 1) as u16;
        let attempt = (i / REQUESTS) as u8;
        let p = ProbeRepr::new(request, RequestType::PortRx, attempt, 0, entries)
            .ok_or_else(|| bad("probe: SR entries".into()))?;
        let a = self.addr(i, v6);
        let probe = probe_frame(&a, &p).map_err(bad)?;
        let mut fb = [0u8; 8];
        // The next hop acknowledges the hop index this switch forwarded.
        Header { start_index: 1, ..p.header.feedback() }.emit(&mut fb);
        let feedback = udp_frame(&a, self.gpint_port, &fb).map_err(bad)?;
        Ok((probe, feedback))
    }
}

/// Writes the trace: probes in request order, each feedback `feedback_lag`
/// probes after its probe (the last ones at the end).
pub fn write_gpint_pcap(t: &GpintTraffic, out: impl Write) -> std::io::Result<()> {
    t.check().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(out), 65535)?;
    let mut r = XorShift::new(t.seed);
    let mut pending = std::collections::VecDeque::with_capacity(t.feedback_lag + 1);
    let mut n = 0u64;
    let mut put = |w: &mut PcapWriter<_>, f: &[u8]| {
        n += 1;
        w.write(n * 1000, f)
    };
    for i in 0..t.probes {
        let v6 = ((r.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < t.v6_share;
        let (probe, feedback) = t.frames(i, v6)?;
        put(&mut w, &probe)?;
        if t.feedbacks {
            pending.push_back(feedback);
            if pending.len() > t.feedback_lag {
                let f = pending.pop_front().expect("pending");
                put(&mut w, &f)?;
            }
        }
    }
    for f in pending {
        put(&mut w, &f)?;
    }
    w.into_inner().flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::parse::parse;
    use dataplane::wire::gpint::Kind;

    fn traffic() -> GpintTraffic {
        GpintTraffic {
            probes: 40_000,
            feedbacks: true,
            feedback_lag: 8,
            next_port: 1,
            mea_count: 2,
            monitors: 16,
            v6_share: 0.2,
            int_port: 17768,
            gpint_port: 17900,
            domain_id: 0x6701,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0xbe, 0],
            seed: 1,
        }
    }

    fn read(t: &GpintTraffic) -> Vec<Vec<u8>> {
        let mut buf = Vec::new();
        write_gpint_pcap(t, &mut buf).unwrap();
        dataplane::pcap::read_all(&buf[..]).unwrap().into_iter().map(|(_, f)| f).collect()
    }

    /// The GPINT header of a frame: after the INT block for a probe, right
    /// after UDP for a feedback.
    fn header(f: &[u8]) -> Header {
        let meta = parse(f, 0).unwrap();
        let l4 = meta.l4_offset + 8;
        let at = if u16::from_be_bytes([f[meta.l4_offset + 2], f[meta.l4_offset + 3]]) == 17768 {
            l4 + 4 + f[l4 + 1] as usize * 4
        } else {
            l4
        };
        Header::parse(&f[at..meta.l3_end]).unwrap()
    }

    #[test]
    fn every_probe_is_a_distinct_request_and_its_feedback_follows_lag_probes_later() {
        let t = traffic();
        let frames = read(&t);
        assert_eq!(frames.len(), 2 * t.probes);
        let mut keys = std::collections::HashSet::new();
        let mut probes_seen = 0usize;
        let (mut v6, mut last_probe_at) = (0usize, std::collections::HashMap::new());
        for (at, f) in frames.iter().enumerate() {
            let h = header(f);
            let key = (h.request_id, h.attempt);
            match h.kind {
                Kind::Probe => {
                    assert!(keys.insert(key), "{key:?} twice");
                    assert_eq!((h.sr_count, h.sr_left), (2, 2));
                    v6 += (f[12] == 0x86) as usize;
                    last_probe_at.insert(key, probes_seen);
                    probes_seen += 1;
                }
                Kind::Feedback => {
                    let sent = last_probe_at[&key];
                    assert_eq!(h.start_index, 1);
                    // Lag probes later, or at the end for the last ones.
                    assert!(probes_seen - 1 - sent == t.feedback_lag || probes_seen == t.probes, "frame {at}");
                }
                Kind::Notice => panic!("no notices in a trace"),
            }
        }
        assert_eq!(keys.len(), t.probes);
        let share = v6 as f64 / t.probes as f64;
        assert!((0.17..0.23).contains(&share), "v6 share {share}");
        // Past 32767 probes the attempt counts up.
        assert!(keys.contains(&(1, 1)));
    }

    #[test]
    fn bad_shapes_are_refused() {
        for bad in [
            GpintTraffic { probes: 0, ..traffic() },
            GpintTraffic { monitors: 0, ..traffic() },
            GpintTraffic { v6_share: 1.5, ..traffic() },
            GpintTraffic { next_port: TO_MONITOR, ..traffic() },
        ] {
            assert!(write_gpint_pcap(&bad, Vec::new()).is_err());
        }
    }
}
