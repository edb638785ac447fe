//! Batched receive: one `recvmmsg` takes every datagram waiting on the
//! socket, up to a batch, so that a report burst costs one system call per
//! batch rather than one per datagram. With UDP GRO on the socket the
//! kernel also hands over a sender's GSO batch (the switch's exporters send
//! up to 64 datagrams in one) as one buffer of equal segments, instead of
//! cutting it into one socket buffer per datagram; `get` gives the
//! datagrams back one by one either way.

use std::io;
use std::io::IoSliceMut;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use nix::sys::socket::{recvmmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage};

/// Largest UDP payload, and of a GRO buffer.
const DATAGRAM: usize = 65_536;

pub struct BatchReceiver {
    bufs: Vec<Box<[u8]>>,
    headers: MultiHeaders<SockaddrStorage>,
    /// The last `recv`'s datagrams: (buffer, start, end).
    segs: Vec<(u32, u32, u32)>,
    /// recvmmsg calls that returned datagrams, the datagrams, and the
    /// buffers that held several (GRO).
    pub batches: u64,
    pub datagrams: u64,
    pub gro_buffers: u64,
}

/// Asks the kernel to keep GSO batches whole for `sock` (Linux 5.0+).
/// False where it refuses: datagrams then arrive one by one, as without.
pub fn enable_gro(sock: &UdpSocket) -> bool {
    setsockopt(sock, sockopt::UdpGroSegment, &true).is_ok()
}

/// Datagrams the kernel dropped on `sock` since it was made (its receive
/// buffer full), from the `drops` column of `/proc/self/net/udp` or `udp6`
/// (this network namespace's); None where the socket is not listed there.
pub fn socket_drops(sock: &UdpSocket) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", sock.as_raw_fd())).ok()?;
    let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_string();
    ["/proc/self/net/udp", "/proc/self/net/udp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
        let f = text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(9) == Some(&inode.as_str()))?;
        f.get(12)?.parse().ok()
    })
}

impl BatchReceiver {
    /// Room for `batch` buffers a call (at least 1).
    pub fn new(batch: usize) -> BatchReceiver {
        let batch = batch.max(1);
        BatchReceiver {
            bufs: (0..batch).map(|_| vec![0u8; DATAGRAM].into_boxed_slice()).collect(),
            headers: MultiHeaders::preallocate(batch, Some(nix::cmsg_space!(i32))),
            segs: Vec::with_capacity(batch * 64),
            batches: 0,
            datagrams: 0,
            gro_buffers: 0,
        }
    }

    /// Waits for a datagram as the socket's read timeout allows (then
    /// `WouldBlock`), and takes those already waiting behind it: returns
    /// how many datagrams; `get(i)` reads them.
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let BatchReceiver { bufs, headers, segs, .. } = self;
        segs.clear();
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
        let got = recvmmsg(sock.as_raw_fd(), headers, iovs.iter_mut(), MsgFlags::MSG_WAITFORONE, None)
            .map_err(io::Error::from)?;
        let (mut gro, mut plain) = (0, false);
        for (i, r) in got.enumerate() {
            let len = r.bytes;
            // The segment size of a GRO buffer; a plain datagram has none.
            let seg = r.cmsgs().ok().and_then(|mut c| {
                c.find_map(|m| match m {
                    ControlMessageOwned::UdpGroSegments(s) => Some(s as usize),
                    _ => None,
                })
            });
            plain |= seg.is_none();
            let seg = seg.filter(|&s| s > 0 && s < len).unwrap_or(len.max(1));
            gro += (seg < len) as u64;
            let mut at = 0;
            loop {
                let end = (at + seg).min(len);
                segs.push((i as u32, at as u32, end as u32));
                at = end;
                if at >= len {
                    break;
                }
            }
        }
        // The kernel leaves a header without control data with no room for
        // it (msg_controllen 0), and nix's recvmmsg does not restore it:
        // a later GRO buffer in that slot would lose its segment size.
        if plain {
            *headers = MultiHeaders::preallocate(bufs.len(), Some(nix::cmsg_space!(i32)));
        }
        let n = segs.len();
        self.batches += (n > 0) as u64;
        self.datagrams += n as u64;
        self.gro_buffers += gro;
        Ok(n)
    }

    /// Datagram `i` of the last `recv`.
    pub fn get(&self, i: usize) -> &[u8] {
        let (b, s, e) = self.segs[i];
        &self.bufs[b as usize][s as usize..e as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (rx, tx)
    }

    #[test]
    fn one_call_takes_every_waiting_datagram_up_to_the_batch() {
        let (rx, tx) = pair();
        for i in 0..5u8 {
            tx.send(&vec![i; 100 + i as usize]).unwrap();
        }
        let mut b = BatchReceiver::new(4);
        assert_eq!(b.recv(&rx).unwrap(), 4);
        for i in 0..4 {
            assert_eq!(b.get(i), &vec![i as u8; 100 + i][..]);
        }
        assert_eq!(b.recv(&rx).unwrap(), 1);
        assert_eq!(b.get(0), &[4u8; 104][..]);
        assert_eq!((b.batches, b.datagrams, b.gro_buffers), (2, 5, 0));
        // Nothing waiting: the socket's timeout.
        let e = b.recv(&rx).unwrap_err();
        assert!(matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{e}");
    }

    /// A GSO send of 5 segments (the last shorter) and a plain datagram
    /// come back as 6 datagrams, in order, from 2 buffers.
    #[test]
    fn a_gso_batch_arrives_in_one_buffer_and_reads_as_its_datagrams() {
        use nix::sys::socket::{sendmsg, ControlMessage};
        let (rx, tx) = pair();
        assert!(enable_gro(&rx), "this kernel keeps GSO batches whole");
        let payload: Vec<u8> = (0..4 * 300 + 120).map(|i| (i / 300) as u8).collect();
        let seg = 300u16;
        let iov = [std::io::IoSlice::new(&payload)];
        sendmsg::<()>(tx.as_raw_fd(), &iov, &[ControlMessage::UdpGsoSegments(&seg)], MsgFlags::empty(), None).unwrap();
        tx.send(b"plain").unwrap();
        // (A GSO batch again, after the plain datagram took the same
        // header slot: its segment size must still come through.)
        let mut b = BatchReceiver::new(1);
        let mut got = Vec::new();
        while got.len() < 6 {
            let n = b.recv(&rx).unwrap();
            got.extend((0..n).map(|i| b.get(i).to_vec()));
        }
        for (i, d) in got[..5].iter().enumerate() {
            assert_eq!(d.len(), if i < 4 { 300 } else { 120 });
            assert!(d.iter().all(|&x| x == i as u8), "segment {i}");
        }
        assert_eq!(got[5], b"plain");
        sendmsg::<()>(tx.as_raw_fd(), &iov, &[ControlMessage::UdpGsoSegments(&seg)], MsgFlags::empty(), None).unwrap();
        assert_eq!(b.recv(&rx).unwrap(), 5, "cut at the segment size again");
        assert_eq!(b.get(4).len(), 120);
        assert_eq!((b.datagrams, b.gro_buffers), (11, 2));
    }

    /// A burst beyond a small receive buffer: every datagram sent is
    /// either received or in the socket's kernel drop count.
    #[test]
    fn datagrams_the_kernel_dropped_on_the_socket_are_counted() {
        let (rx, tx) = pair();
        setsockopt(&rx, sockopt::RcvBuf, &4096).unwrap();
        assert_eq!(socket_drops(&rx), Some(0));
        for i in 0..200u8 {
            tx.send(&[i; 1000]).unwrap();
        }
        let mut b = BatchReceiver::new(32);
        while b.recv(&rx).is_ok() {}
        let dropped = socket_drops(&rx).unwrap();
        assert!(dropped > 0 && b.datagrams < 200, "{dropped} dropped, {} received", b.datagrams);
        assert_eq!(b.datagrams + dropped, 200);
    }
}
