//! A worker's index of the node IDs it keeps something per node for
//! (histograms, per_hop registers): open addressing from a node ID to a
//! slot, slots given in the order nodes are met, up to a fixed number.

pub struct NodeIndex {
    /// (node ID, slot + 1; 0 = empty).
    index: Box<[(u32, u32)]>,
    mask: usize,
    used: usize,
    capacity: usize,
}

impl NodeIndex {
    /// Room for `capacity` node IDs (the table is twice that, a power of two).
    pub fn new(capacity: usize) -> NodeIndex {
        let n = (capacity * 2).next_power_of_two().max(2);
        NodeIndex { index: vec![(0, 0); n].into_boxed_slice(), mask: n - 1, used: 0, capacity }
    }

    /// Node `id`'s slot, and whether it is new; None when it is new and
    /// every slot is taken.
    #[inline]
    pub fn slot(&mut self, id: u32) -> Option<(usize, bool)> {
        let mut i = (id.wrapping_mul(0x9e37_79b1) >> 7) as usize & self.mask;
        loop {
            let (k, s) = self.index[i];
            if s == 0 {
                break;
            }
            if k == id {
                return Some((s as usize - 1, false));
            }
            i = (i + 1) & self.mask;
        }
        if self.used == self.capacity {
            return None;
        }
        self.used += 1;
        self.index[i] = (id, self.used as u32);
        Some((self.used - 1, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_in_the_order_met_until_full() {
        let mut n = NodeIndex::new(3);
        assert_eq!(n.slot(7), Some((0, true)));
        assert_eq!(n.slot(0), Some((1, true)), "node ID 0 is a node like any other");
        assert_eq!(n.slot(7), Some((0, false)));
        assert_eq!(n.slot(u32::MAX), Some((2, true)));
        assert_eq!(n.slot(9), None);
        assert_eq!(n.slot(0), Some((1, false)));
    }
}
