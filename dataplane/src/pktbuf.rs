//! Packets whose length can change in the middle: what the telemetry stages
//! need to insert and remove headers. `Mbuf` implements it over DPDK's head
//! room; `VecBuf` over a `Vec` for tests.

/// A packet buffer with room in front of the data.
pub trait PacketBuf {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Grows the packet at the front by `n` bytes (false: not enough headroom).
    fn grow_front(&mut self, n: usize) -> bool;
    /// Removes `n` bytes from the front (false: packet too short).
    fn shrink_front(&mut self, n: usize) -> bool;

    /// Opens `n` bytes at offset `at` by moving the first `at` bytes forward.
    fn insert_at(&mut self, at: usize, n: usize) -> bool {
        if at > self.bytes().len() || !self.grow_front(n) {
            return false;
        }
        self.bytes_mut().copy_within(n..n + at, 0);
        true
    }

    /// Removes `n` bytes at offset `at` by moving the first `at` bytes back.
    fn remove_at(&mut self, at: usize, n: usize) -> bool {
        if at + n > self.bytes().len() {
            return false;
        }
        self.bytes_mut().copy_within(0..at, n);
        self.shrink_front(n)
    }
}

impl PacketBuf for crate::dpdk::Mbuf {
    fn bytes(&self) -> &[u8] {
        self.data()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
    fn grow_front(&mut self, n: usize) -> bool {
        n <= u16::MAX as usize && self.prepend(n as u16).is_some()
    }
    fn shrink_front(&mut self, n: usize) -> bool {
        n <= u16::MAX as usize && self.adj(n as u16)
    }
}

/// A `Vec`-backed packet with fixed headroom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecBuf {
    buf: Vec<u8>,
    start: usize,
}

impl VecBuf {
    pub fn new(frame: &[u8], headroom: usize) -> VecBuf {
        let mut buf = vec![0u8; headroom];
        buf.extend_from_slice(frame);
        VecBuf { buf, start: headroom }
    }

    /// Replaces the packet with `frame` behind `headroom` bytes, reusing the
    /// buffer (no allocation once it has held a packet this large).
    pub fn load(&mut self, frame: &[u8], headroom: usize) {
        self.buf.clear();
        self.buf.resize(headroom, 0);
        self.buf.extend_from_slice(frame);
        self.start = headroom;
    }
}

impl PacketBuf for VecBuf {
    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }
    fn grow_front(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    fn shrink_front(&mut self, n: usize) -> bool {
        if n > self.buf.len() - self.start {
            return false;
        }
        self.start += n;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_and_remove_in_the_middle() {
        let mut b = VecBuf::new(&[1, 2, 3, 4, 5], 4);
        assert!(b.insert_at(2, 3));
        assert_eq!(&b.bytes()[..2], &[1, 2]);
        assert_eq!(&b.bytes()[5..], &[3, 4, 5]);
        b.bytes_mut()[2..5].copy_from_slice(&[9, 9, 9]);
        assert!(b.remove_at(2, 3));
        assert_eq!(b.bytes(), &[1, 2, 3, 4, 5]);
        assert!(!b.insert_at(0, 5), "only 4 bytes of headroom");
        assert!(!b.remove_at(4, 2), "past the end");
    }

    #[test]
    fn load_replaces_packet_and_headroom() {
        let mut b = VecBuf::new(&[1, 2, 3], 2);
        assert!(b.grow_front(2));
        b.load(&[7, 8], 1);
        assert_eq!(b.bytes(), &[7, 8]);
        assert!(b.grow_front(1) && !b.grow_front(1), "one byte of headroom, zeroed");
        assert_eq!(b.bytes(), &[0, 7, 8]);
    }
}
