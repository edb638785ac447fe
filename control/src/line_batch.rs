//! JSON-line datagrams to one collector, batched so that a socket sends up
//! to [`GSO_MAX_SEGMENTS`] of them in one UDP GSO call. The kernel's cost is
//! per call far more than per byte: at the default 1472-byte datagrams
//! (about six event lines each) one `send` per datagram held one control
//! core near 0.8 M events a second.
//!
//! GSO cuts a buffer into equal segments, so every datagram of a batch but
//! the last is padded to the segment size with spaces before the closing
//! brace of its last line. That is JSON's own insignificant whitespace:
//! every parser reads the line as before (intcollector strips it before it
//! stores a line). A path without GSO (a DPDK port, a route that refuses
//! it) gets the datagrams one by one, unpadded.
//!
//! Datagrams sit at a stride of `seg` bytes in one buffer, so padding is in
//! place.

use crate::collector_tx::{CollectorTx, PortOut, SegmentsError, GSO_MAX_BYTES, GSO_MAX_SEGMENTS};

/// What one [`LineBatch::send`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub datagrams: u64,
    pub failed: u64,
}

pub struct LineBatch {
    bytes: Vec<u8>,
    /// The segment size: the most bytes a datagram takes (`max_packet`).
    seg: usize,
    /// Each datagram's length; the last one is still being filled.
    lens: Vec<usize>,
}

impl LineBatch {
    pub fn new(max_packet: usize) -> LineBatch {
        LineBatch {
            bytes: Vec::with_capacity(GSO_MAX_BYTES.max(max_packet)),
            seg: max_packet,
            lens: Vec::with_capacity(GSO_MAX_SEGMENTS),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Adds `line` to the open datagram, or opens the next one. False: the
    /// batch is full; send it, then add again. A line longer than a datagram
    /// goes alone into an empty batch (and closes it).
    pub fn add(&mut self, line: &[u8]) -> bool {
        let Some(&cur) = self.lens.last() else {
            self.bytes.extend_from_slice(line);
            self.lens.push(line.len());
            return true;
        };
        if cur + line.len() <= self.seg {
            self.bytes.extend_from_slice(line);
            *self.lens.last_mut().expect("a datagram is open") += line.len();
            return true;
        }
        let at = self.lens.len() * self.seg;
        if cur > self.seg || self.lens.len() == GSO_MAX_SEGMENTS || at + line.len() > GSO_MAX_BYTES {
            return false;
        }
        self.bytes.resize(at, b' ');
        self.bytes.extend_from_slice(line);
        self.lens.push(line.len());
        true
    }

    /// Datagram `i` as filled (unpadded).
    fn datagram(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.seg..i * self.seg + self.lens[i]]
    }

    /// Pads every datagram but the last to `seg` bytes inside its last
    /// line's closing brace. False (nothing changed) when a datagram does
    /// not end in `}\n`, or one is over `seg`.
    fn pad(&mut self) -> bool {
        let n = self.lens.len();
        let ok = self.lens.iter().all(|&l| l <= self.seg) && (0..n).all(|i| self.datagram(i).ends_with(b"}\n"));
        if !ok {
            return false;
        }
        for i in 0..n - 1 {
            let (start, end) = (i * self.seg + self.lens[i], (i + 1) * self.seg);
            // The closing brace and newline move to the end; spaces fill
            // the gap they leave.
            self.bytes[start - 2..end - 2].fill(b' ');
            self.bytes[end - 2..end].copy_from_slice(b"}\n");
        }
        true
    }

    /// Sends the batch to `tx` and empties it: one GSO call where the
    /// socket takes it, else datagram by datagram. `last_error` gets the
    /// reason of a failure.
    pub fn send(&mut self, tx: &mut CollectorTx, out: &mut dyn PortOut, last_error: &mut Option<String>) -> Sent {
        let n = self.lens.len();
        let mut sent = Sent::default();
        if n > 1 && tx.takes_segments() && self.pad() {
            // Padded from here on: a refusal sends the padded datagrams.
            for l in &mut self.lens[..n - 1] {
                *l = self.seg;
            }
            match tx.send_segments(&self.bytes, self.seg) {
                Ok(()) => sent.datagrams = n as u64,
                Err(SegmentsError::Failed(e)) => {
                    sent.failed = n as u64;
                    *last_error = Some(e);
                }
                Err(SegmentsError::Unsupported) => {}
            }
        }
        if sent == Sent::default() {
            for i in 0..n {
                match tx.send(self.datagram(i), out) {
                    Ok(()) => sent.datagrams += 1,
                    Err(e) => {
                        sent.failed += 1;
                        *last_error = Some(e);
                    }
                }
            }
        }
        self.bytes.clear();
        self.lens.clear();
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector_tx::{CollectorPlan, NoPorts};
    use std::net::UdpSocket;

    fn line(i: usize, width: usize) -> Vec<u8> {
        let mut l = format!("{{\"i\":{i},\"pad\":\"").into_bytes();
        l.resize(width - 3, b'x');
        l.extend_from_slice(b"\"}\n");
        l
    }

    fn receiver() -> (UdpSocket, CollectorTx) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        let plan = CollectorPlan { addr: rx.local_addr().unwrap(), bind: None, port: None, mac: None };
        (rx, CollectorTx::open(&plan, &NoPorts, false).unwrap())
    }

    /// Every line comes back once, in order, as JSON, and no datagram is
    /// over the segment size.
    fn receive_all(rx: &UdpSocket, lines: usize, seg: usize) -> (Vec<serde_json::Value>, usize) {
        let (mut got, mut datagrams) = (Vec::new(), 0);
        let mut buf = vec![0u8; 65536];
        while got.len() < lines {
            let n = rx.recv(&mut buf).expect("a datagram");
            assert!(n <= seg, "{n} bytes over {seg}");
            datagrams += 1;
            for l in std::str::from_utf8(&buf[..n]).unwrap().lines() {
                got.push(serde_json::from_str(l).unwrap());
            }
        }
        (got, datagrams)
    }

    #[test]
    fn a_batch_arrives_as_datagrams_of_whole_json_lines() {
        let (rx, mut tx) = receiver();
        let mut b = LineBatch::new(1000);
        // 7 lines of 300 bytes: three a datagram.
        for i in 0..7 {
            assert!(b.add(&line(i, 300)));
        }
        let mut err = None;
        assert_eq!(b.send(&mut tx, &mut NoPorts, &mut err), Sent { datagrams: 3, failed: 0 }, "{err:?}");
        assert!(tx.takes_segments(), "loopback takes UDP GSO: the padded path ran");
        assert!(b.is_empty());
        let (got, datagrams) = receive_all(&rx, 7, 1000);
        assert_eq!(datagrams, 3);
        assert_eq!(got.iter().map(|v| v["i"].as_u64().unwrap()).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn padding_sits_inside_the_last_brace_and_only_where_gso_needs_it() {
        let mut b = LineBatch::new(100);
        assert!(b.add(&line(0, 60)));
        assert!(b.add(&line(1, 60)));
        assert!(b.add(&line(2, 30)));
        assert!(b.pad());
        assert_eq!(b.bytes.len(), 100 + 60 + 30);
        let first = &b.bytes[..100];
        assert!(first.ends_with(b"\"}\n") || first.ends_with(b" }\n"));
        let v: serde_json::Value = serde_json::from_slice(first).unwrap();
        assert_eq!(v["i"], 0);
        // The last datagram is as it was.
        assert_eq!(&b.bytes[100..], [line(1, 60), line(2, 30)].concat());
    }

    #[test]
    fn a_full_batch_refuses_the_next_line_and_an_oversized_line_goes_alone() {
        let mut b = LineBatch::new(128);
        let mut added = 0;
        while b.add(&line(added, 128)) {
            added += 1;
            assert!(added <= GSO_MAX_SEGMENTS);
        }
        assert_eq!(added, GSO_MAX_SEGMENTS);
        let mut b = LineBatch::new(128);
        assert!(b.add(&line(0, 500)));
        assert!(!b.add(&line(1, 20)), "nothing may follow an oversized datagram");
        assert!(!b.pad());
    }

    #[test]
    fn without_gso_the_datagrams_go_one_by_one_unpadded() {
        let (rx, mut tx) = receiver();
        tx.refuse_segments();
        let mut b = LineBatch::new(200);
        for i in 0..4 {
            assert!(b.add(&line(i, 120)));
        }
        let mut err = None;
        assert_eq!(b.send(&mut tx, &mut NoPorts, &mut err).datagrams, 4);
        let mut buf = [0u8; 512];
        for i in 0..4 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &line(i, 120)[..]);
        }
    }

    #[test]
    fn a_refused_send_counts_every_datagram_of_the_batch() {
        let mut tx = CollectorTx::open(
            &CollectorPlan { addr: "10.9.0.5:1".parse().unwrap(), bind: None, port: Some(3), mac: None },
            &crate::collector_tx::tests::TestPorts::default(),
            true,
        )
        .unwrap();
        let mut b = LineBatch::new(200);
        for i in 0..3 {
            assert!(b.add(&line(i, 120)));
        }
        let mut err = None;
        // 10.9.0.5 is not resolved on the port: nothing can leave.
        assert_eq!(
            b.send(&mut tx, &mut crate::collector_tx::tests::TestPorts::default(), &mut err),
            Sent { datagrams: 0, failed: 3 }
        );
        assert!(err.is_some());
    }
}
