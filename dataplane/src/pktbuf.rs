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

    /// Whether `bytes` is the whole frame (not the first of chained segments).
    #[inline(always)]
    fn single_segment(&self) -> bool {
        true
    }

    /// The whole frame's length, over all its segments.
    #[inline(always)]
    fn frame_len(&self) -> usize {
        self.bytes().len()
    }

    /// What the receiving NIC found of the IPv4 header checksum: Some(true)
    /// good, Some(false) bad, None not checked (verify it in software).
    /// Trusted only from a port that verifies them
    /// (`tables::PortState::nic_checks_ipv4`).
    #[inline(always)]
    fn ipv4_checksum_by_nic(&self) -> Option<bool> {
        None
    }

    /// Opens `n` bytes at offset `at` by moving the first `at` bytes forward.
    /// Always inlined, as `remove_at`: every INT push opens its room with
    /// this (and every sink closes it with `remove_at`), and as a call it
    /// paid its own prologue and bounds checks on top of the caller's.
    #[inline(always)]
    fn insert_at(&mut self, at: usize, n: usize) -> bool {
        if at > self.bytes().len() || !self.grow_front(n) {
            return false;
        }
        move_within(self.bytes_mut(), n, 0, at);
        true
    }

    /// Removes `n` bytes at offset `at` by moving the first `at` bytes back.
    #[inline(always)]
    fn remove_at(&mut self, at: usize, n: usize) -> bool {
        if at + n > self.bytes().len() {
            return false;
        }
        move_within(self.bytes_mut(), 0, n, at);
        self.shrink_front(n)
    }
}

/// `b.copy_within(src..src + len, dst)`. The headers INT and AM-PM move
/// (16 to 64 bytes) go as two to four 16-byte loads, every load before any
/// store (so any overlap is fine), instead of a call to libc's memmove:
/// the call spills the data path's registers around it.
#[inline(always)]
pub fn move_within(b: &mut [u8], src: usize, dst: usize, len: usize) {
    // Whole registers (u128), so the loaded bytes stay in registers
    // rather than going through a stack array.
    #[inline(always)]
    fn load(b: &[u8], at: usize) -> u128 {
        u128::from_ne_bytes(*b[at..].first_chunk::<16>().expect("16 bytes"))
    }
    #[inline(always)]
    fn store(b: &mut [u8], at: usize, v: u128) {
        *b[at..].first_chunk_mut::<16>().expect("16 bytes") = v.to_ne_bytes();
    }
    match len {
        16..=32 => {
            let (h, t) = (load(b, src), load(b, src + len - 16));
            store(b, dst, h);
            store(b, dst + len - 16, t);
        }
        33..=64 => {
            let (h0, h1) = (load(b, src), load(b, src + 16));
            let (t0, t1) = (load(b, src + len - 32), load(b, src + len - 16));
            store(b, dst, h0);
            store(b, dst + 16, h1);
            store(b, dst + len - 32, t0);
            store(b, dst + len - 16, t1);
        }
        _ => b.copy_within(src..src + len, dst),
    }
}

impl PacketBuf for crate::dpdk::Mbuf {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.data()
    }
    #[inline(always)]
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
    #[inline(always)]
    fn grow_front(&mut self, n: usize) -> bool {
        n <= u16::MAX as usize && self.prepend(n as u16).is_some()
    }
    #[inline(always)]
    fn shrink_front(&mut self, n: usize) -> bool {
        n <= u16::MAX as usize && self.adj(n as u16)
    }
    #[inline(always)]
    fn single_segment(&self) -> bool {
        self.segments() == 1
    }
    #[inline(always)]
    fn frame_len(&self) -> usize {
        self.pkt_len()
    }
    #[inline(always)]
    fn ipv4_checksum_by_nic(&self) -> Option<bool> {
        crate::dpdk::Mbuf::ipv4_checksum_by_nic(self)
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
    #[inline]
    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }
    #[inline]
    fn grow_front(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    #[inline]
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
    fn small_moves_match_copy_within_for_every_overlap() {
        let orig: Vec<u8> = (0..=255).collect();
        for len in 0..=140 {
            for (src, dst) in [(0, 0), (0, 1), (1, 0), (0, 16), (16, 0), (3, 40), (40, 3), (0, 100), (100, 0)] {
                if src.max(dst) + len > orig.len() {
                    continue;
                }
                let (mut a, mut b) = (orig.clone(), orig.clone());
                move_within(&mut a, src, dst, len);
                b.copy_within(src..src + len, dst);
                assert_eq!(a, b, "len {len} from {src} to {dst}");
            }
        }
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
