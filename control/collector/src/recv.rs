//! Batched receive: one `recvmmsg` takes every datagram waiting on the
//! socket, up to a batch, so that a report burst costs one system call per
//! batch rather than one per datagram.

use std::io;
use std::io::IoSliceMut;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders, SockaddrStorage};

/// Largest UDP payload.
const DATAGRAM: usize = 65_536;

pub struct BatchReceiver {
    bufs: Vec<Box<[u8]>>,
    lens: Vec<usize>,
    headers: MultiHeaders<SockaddrStorage>,
    /// recvmmsg calls that returned datagrams, and the datagrams.
    pub batches: u64,
    pub datagrams: u64,
}

impl BatchReceiver {
    /// Room for `batch` datagrams a call (at least 1).
    pub fn new(batch: usize) -> BatchReceiver {
        let batch = batch.max(1);
        BatchReceiver {
            bufs: (0..batch).map(|_| vec![0u8; DATAGRAM].into_boxed_slice()).collect(),
            lens: vec![0; batch],
            headers: MultiHeaders::preallocate(batch, None),
            batches: 0,
            datagrams: 0,
        }
    }

    /// Waits for a datagram as the socket's read timeout allows (then
    /// `WouldBlock`), and takes those already waiting behind it: returns
    /// how many; `get(i)` reads them.
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let BatchReceiver { bufs, lens, headers, .. } = self;
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
        let got = recvmmsg(sock.as_raw_fd(), headers, iovs.iter_mut(), MsgFlags::MSG_WAITFORONE, None)
            .map_err(io::Error::from)?;
        let mut n = 0;
        for (len, r) in lens.iter_mut().zip(got) {
            *len = r.bytes;
            n += 1;
        }
        self.batches += (n > 0) as u64;
        self.datagrams += n as u64;
        Ok(n)
    }

    /// Datagram `i` of the last `recv`.
    pub fn get(&self, i: usize) -> &[u8] {
        &self.bufs[i][..self.lens[i]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_call_takes_every_waiting_datagram_up_to_the_batch() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..5u8 {
            tx.send_to(&vec![i; 100 + i as usize], rx.local_addr().unwrap()).unwrap();
        }
        let mut b = BatchReceiver::new(4);
        assert_eq!(b.recv(&rx).unwrap(), 4);
        for i in 0..4 {
            assert_eq!(b.get(i), &vec![i as u8; 100 + i][..]);
        }
        assert_eq!(b.recv(&rx).unwrap(), 1);
        assert_eq!(b.get(0), &[4u8; 104][..]);
        assert_eq!((b.batches, b.datagrams), (2, 5));
        // Nothing waiting: the socket's timeout.
        let e = b.recv(&rx).unwrap_err();
        assert!(matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{e}");
    }
}
