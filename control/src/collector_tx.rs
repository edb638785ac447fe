//! How the control core's exporters (Telemetry Reports, AM-PM records)
//! reach a collector: a kernel UDP socket, or a DPDK port. Through a port the
//! control core builds the whole frame (Ethernet, IPv4 or IPv6, UDP with its
//! checksum) and hands it to a worker's TX path (`PortOut`), so reports go
//! out of the switch's own data-plane ports, e.g. to an out-of-band
//! management network that the host kernel does not see. Exported frames
//! never pass the telemetry stages, so they are never instrumented.

use std::net::{IpAddr, SocketAddr, UdpSocket};

use dataplane::wire::checksum;
use dataplane::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use dataplane::wire::ipv4::Ipv4Repr;
use dataplane::wire::ipv6::Ipv6Repr;
use dataplane::wire::udp::UdpRepr;

/// Source UDP port of exported frames when `bind` gives none.
pub const DEFAULT_SOURCE_PORT: u16 = 32766;
const PROTO_UDP: u8 = 17;

/// A collector as configured and validated (`[[SECTION.collector]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorPlan {
    pub addr: SocketAddr,
    /// Local address to send from (socket: bind; port: source IP and port).
    pub bind: Option<SocketAddr>,
    /// Leave through this DPDK port (index) instead of a kernel socket.
    pub port: Option<u16>,
    /// Destination MAC through the port (None: the neighbour table's entry).
    pub mac: Option<[u8; 6]>,
}

/// What a port-bound collector needs from the switch.
pub trait PortOut {
    /// The port's MAC and its first address of the family, when it has one
    /// (asked once, when a collector is opened).
    fn port_info(&self, port: u16, v6: bool) -> Option<([u8; 6], Option<IpAddr>)>;
    /// The MAC of `ip` on `port`; None while unknown (a resolution is started).
    fn neighbour(&mut self, port: u16, ip: IpAddr) -> Option<[u8; 6]>;
    /// Queues one frame of `len` bytes for transmission on `port`, written
    /// by `fill` straight into the packet buffer; never waits.
    fn transmit(&mut self, port: u16, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), String>;
}

/// For exporters without port-bound collectors (and tests).
pub struct NoPorts;

impl PortOut for NoPorts {
    fn port_info(&self, _: u16, _: bool) -> Option<([u8; 6], Option<IpAddr>)> {
        None
    }
    fn neighbour(&mut self, _: u16, _: IpAddr) -> Option<[u8; 6]> {
        None
    }
    fn transmit(&mut self, port: u16, _: usize, _: &mut dyn FnMut(&mut [u8])) -> Result<(), String> {
        Err(format!("no DPDK port {port} to send through"))
    }
}

enum Via {
    Socket(UdpSocket),
    Port { port: u16, src: SocketAddr, src_mac: [u8; 6], mac: Option<[u8; 6]> },
}

/// One collector's sending end.
pub struct CollectorTx {
    pub addr: SocketAddr,
    via: Via,
    /// The socket takes several datagrams in one send (UDP GSO) until the
    /// kernel refuses it for this route.
    gso: bool,
}

/// Most datagrams one UDP GSO send carries (the kernel's UDP_MAX_SEGMENTS).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes one UDP GSO send carries (one IP packet's payload, less room).
pub const GSO_MAX_BYTES: usize = 65_000;

/// Why [`CollectorTx::send_segments`] sent nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentsError {
    /// This path cannot send several at once: send them one by one.
    Unsupported,
    /// The send failed (none of the datagrams went out).
    Failed(String),
}

impl CollectorTx {
    /// Opens the socket, or checks the port path (`ports` answers for the
    /// port's MAC and addresses). Errors name what is wrong.
    pub fn open(c: &CollectorPlan, ports: &dyn PortOut, nonblocking: bool) -> Result<CollectorTx, String> {
        let via = match c.port {
            None => {
                let sock = socket(&c.addr, &c.bind)?;
                if nonblocking {
                    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
                } else {
                    // A full socket buffer may hold the control core briefly, never forever.
                    let _ = sock.set_write_timeout(Some(std::time::Duration::from_millis(20)));
                }
                sock.connect(c.addr).map_err(|e| format!("cannot reach {}: {e}", c.addr))?;
                Via::Socket(sock)
            }
            Some(port) => {
                let v6 = c.addr.is_ipv6();
                let (src_mac, own) = ports.port_info(port, v6).ok_or_else(|| format!("no port {port}"))?;
                let src = match (c.bind, own) {
                    (Some(b), _) if b.is_ipv6() != v6 => return Err(format!("bind {b} is not of {}'s family", c.addr)),
                    (Some(b), _) if b.port() == 0 => SocketAddr::new(b.ip(), DEFAULT_SOURCE_PORT),
                    (Some(b), _) => b,
                    (None, Some(ip)) => SocketAddr::new(ip, DEFAULT_SOURCE_PORT),
                    (None, None) => {
                        return Err(format!(
                            "the port has no IPv{} address to send from: set bind = \"ADDR:PORT\"",
                            if v6 { 6 } else { 4 }
                        ))
                    }
                };
                Via::Port { port, src, src_mac, mac: c.mac }
            }
        };
        let gso = matches!(via, Via::Socket(_));
        Ok(CollectorTx { addr: c.addr, via, gso })
    }

    /// Whether [`send_segments`](Self::send_segments) may work: a socket
    /// whose route has not refused UDP GSO.
    pub fn takes_segments(&self) -> bool {
        self.gso && matches!(self.via, Via::Socket(_))
    }

    /// Sends datagram by datagram from now on (tests of that path).
    #[cfg(test)]
    pub(crate) fn refuse_segments(&mut self) {
        self.gso = false;
    }

    /// Sends `payload` as datagrams of `seg` bytes each (the last may be
    /// shorter) in one system call: the kernel cuts it up (UDP GSO), so a
    /// batch of report packets costs one pass through the socket layer
    /// instead of one per packet. A socket whose route refuses GSO (a device
    /// without checksum offload, a segment over the MTU) answers
    /// `Unsupported` from then on, as a DPDK port always does.
    pub fn send_segments(&mut self, payload: &[u8], seg: usize) -> Result<(), SegmentsError> {
        use nix::errno::Errno;
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        use std::os::fd::AsRawFd;
        let (Via::Socket(sock), true) = (&self.via, self.gso) else {
            return Err(SegmentsError::Unsupported);
        };
        let Ok(size) = u16::try_from(seg) else {
            return Err(SegmentsError::Unsupported);
        };
        let iov = [std::io::IoSlice::new(payload)];
        match sendmsg::<()>(sock.as_raw_fd(), &iov, &[ControlMessage::UdpGsoSegments(&size)], MsgFlags::empty(), None) {
            Ok(_) => Ok(()),
            Err(Errno::EIO | Errno::EINVAL | Errno::ENOPROTOOPT | Errno::EOPNOTSUPP) => {
                self.gso = false;
                Err(SegmentsError::Unsupported)
            }
            Err(e) => Err(SegmentsError::Failed(std::io::Error::from(e).to_string())),
        }
    }

    /// Sends one datagram. An error means it was not sent (counted by the caller).
    pub fn send(&mut self, payload: &[u8], out: &mut dyn PortOut) -> Result<(), String> {
        match &self.via {
            Via::Socket(s) => s.send(payload).map(|_| ()).map_err(|e| e.to_string()),
            Via::Port { port, src, src_mac, mac } => {
                let (port, src, src_mac) = (*port, *src, *src_mac);
                let dst_mac = match mac {
                    Some(m) => *m,
                    None => {
                        out.neighbour(port, self.addr.ip()).ok_or_else(|| format!("{} unresolved", self.addr.ip()))?
                    }
                };
                let headers = if src.is_ipv6() { 14 + 40 + 8 } else { 14 + 20 + 8 };
                let dst = self.addr;
                out.transmit(port, headers + payload.len(), &mut |buf| {
                    udp_frame(buf, src_mac, dst_mac, src, dst, payload);
                })
            }
        }
    }

    /// "socket" or "port N" (for `show reports` and `show ampm`).
    pub fn via(&self) -> String {
        match &self.via {
            Via::Socket(_) => "socket".into(),
            Via::Port { port, src, .. } => format!("port {port} from {src}"),
        }
    }
}

/// A UDP socket to send to a collector from: bound to `bind`, or to any
/// address of the collector's family.
pub fn socket(addr: &SocketAddr, bind: &Option<SocketAddr>) -> Result<UdpSocket, String> {
    let local = bind.unwrap_or_else(|| {
        if addr.is_ipv4() {
            SocketAddr::from(([0, 0, 0, 0], 0))
        } else {
            SocketAddr::from(([0u16; 8], 0))
        }
    });
    UdpSocket::bind(local).map_err(|e| format!("cannot bind {local}: {e}"))
}

/// Writes Ethernet + IP + UDP + `payload` into `out` (14 + 20 or 40 + 8
/// bytes more than the payload); returns the frame length. `src` and `dst` are of
/// one family.
pub fn udp_frame(
    out: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
) -> usize {
    out[0..6].copy_from_slice(&dst_mac);
    out[6..12].copy_from_slice(&src_mac);
    let udp_len = 8 + payload.len();
    let (l4, pseudo) = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let (s, d) = (s.octets(), d.octets());
            Ipv4Repr { src: s, dst: d, protocol: PROTO_UDP, payload_len: udp_len, ttl: 64, tos: 0 }
                .emit(&mut out[14..]);
            (34, checksum::pseudo_v4(s, d, PROTO_UDP, udp_len as u16))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let (s, d) = (s.octets(), d.octets());
            Ipv6Repr { src: s, dst: d, next_header: PROTO_UDP, payload_len: udp_len, hop_limit: 64 }
                .emit(&mut out[14..]);
            (54, checksum::pseudo_v6(&s, &d, PROTO_UDP, udp_len as u32))
        }
        _ => unreachable!("CollectorTx::open checks the families agree"),
    };
    // Summed where the exporter just wrote it (cache-hot), not read back
    // from the packet buffer.
    let payload_sum = checksum::sum(pseudo, payload);
    out[l4 + 8..l4 + udp_len].copy_from_slice(payload);
    UdpRepr { src_port: src.port(), dst_port: dst.port(), payload_len: payload.len() }
        .emit_header(&mut out[l4..], payload_sum);
    l4 + udp_len
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A port 3 with MAC 02:..:03 and 10.9.0.1 / 2001:db8:9::1, one known
    /// neighbour, frames collected.
    #[derive(Default)]
    pub(crate) struct TestPorts {
        pub(crate) sent: Vec<(u16, Vec<u8>)>,
        asked: Vec<IpAddr>,
    }

    impl PortOut for TestPorts {
        fn port_info(&self, port: u16, v6: bool) -> Option<([u8; 6], Option<IpAddr>)> {
            let ip: IpAddr = if v6 { "2001:db8:9::1".parse().unwrap() } else { "10.9.0.1".parse().unwrap() };
            (port == 3).then_some(([2, 0, 0, 0, 0, 3], Some(ip)))
        }
        fn neighbour(&mut self, _: u16, ip: IpAddr) -> Option<[u8; 6]> {
            self.asked.push(ip);
            (ip == "10.9.0.2".parse::<IpAddr>().unwrap()).then_some([2, 0, 0, 0, 0, 0x22])
        }
        fn transmit(&mut self, port: u16, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), String> {
            let mut f = vec![0xee; len];
            fill(&mut f);
            self.sent.push((port, f));
            Ok(())
        }
    }

    fn plan(addr: &str, bind: Option<&str>, mac: Option<[u8; 6]>) -> CollectorPlan {
        CollectorPlan { addr: addr.parse().unwrap(), bind: bind.map(|b| b.parse().unwrap()), port: Some(3), mac }
    }

    /// One's-complement sum, written here independently of the wire module.
    fn ones(d: &[u8]) -> u32 {
        let mut s: u32 = d.chunks(2).map(|c| (c[0] as u32) << 8 | *c.get(1).unwrap_or(&0) as u32).sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s
    }

    #[test]
    fn ipv4_frame_through_a_port_with_a_resolved_neighbour() {
        let mut ports = TestPorts::default();
        let mut c = CollectorTx::open(&plan("10.9.0.2:32766", None, None), &ports, false).unwrap();
        assert_eq!(c.via(), "port 3 from 10.9.0.1:32766");
        c.send(b"report!", &mut ports).unwrap();
        let (port, f) = &ports.sent[0];
        assert_eq!(*port, 3);
        assert_eq!(f.len(), 14 + 20 + 8 + 7);
        assert_eq!(&f[..14], &[2, 0, 0, 0, 0, 0x22, 2, 0, 0, 0, 0, 3, 0x08, 0x00]);
        assert_eq!(ones(&f[14..34]), 0xffff, "IPv4 header checksum");
        assert_eq!(&f[26..34], &[10, 9, 0, 1, 10, 9, 0, 2]);
        assert_eq!(&f[34..40], &[0x7f, 0xfe, 0x7f, 0xfe, 0, 15]);
        let pseudo = [&f[26..34], &[0, 17, 0, 15]].concat();
        assert_eq!(ones(&[pseudo.as_slice(), &f[34..]].concat()), 0xffff, "UDP checksum");
        assert_eq!(&f[42..], b"report!");
    }

    #[test]
    fn ipv6_frame_with_a_configured_mac_and_source() {
        let mut ports = TestPorts::default();
        let p = plan("[2001:db8:9::2]:9000", Some("[2001:db8:9::7]:0"), Some([2, 0, 0, 0, 0, 0x99]));
        let mut c = CollectorTx::open(&p, &ports, false).unwrap();
        c.send(b"odd", &mut ports).unwrap();
        let f = &ports.sent[0].1;
        assert!(ports.asked.is_empty(), "a configured MAC needs no neighbour");
        assert_eq!((&f[0..6], &f[12..14]), (&[2u8, 0, 0, 0, 0, 0x99][..], &[0x86u8, 0xdd][..]));
        assert_eq!((f[20], f.len()), (17, 14 + 40 + 8 + 3));
        let pseudo = [&f[22..54], &[0, 0, 0, 11, 0, 0, 0, 17]].concat();
        assert_eq!(ones(&[pseudo.as_slice(), &f[54..]].concat()), 0xffff, "UDP checksum");
        assert_eq!(&f[54..56], &32766u16.to_be_bytes(), "source port defaults");
    }

    #[test]
    fn unresolved_neighbours_and_bad_plans_are_errors() {
        let mut ports = TestPorts::default();
        let mut c = CollectorTx::open(&plan("10.9.0.5:1", None, None), &ports, false).unwrap();
        assert_eq!(c.send(b"x", &mut ports), Err("10.9.0.5 unresolved".into()));
        assert!(ports.sent.is_empty());
        let e = CollectorTx::open(&plan("10.9.0.5:1", Some("[::1]:5"), None), &ports, false).err().unwrap();
        assert!(e.contains("family"), "{e}");
        let e = CollectorTx::open(&CollectorPlan { port: Some(4), ..plan("10.9.0.5:1", None, None) }, &ports, false)
            .err()
            .unwrap();
        assert_eq!(e, "no port 4");
    }
}
