//! SQR's clone buffer (gpint-sqr-reliable-int §IV): the copies of probes a
//! switch forwarded, each waiting for the next hop's feedback until its
//! deadline. Fixed size, allocated once: a full buffer hands the copy back
//! (the caller forwards without one and counts it).
//!
//! Copies are found by the feedback they wait for (a hash index over
//! [`CopyKey`]) and expire through a hashed timer wheel: buckets of `tick`
//! TSC ticks, each a doubly-linked list through the slots, so a store, an
//! ack and an expiry are O(1); [`CloneBuffer::expire`] visits a bounded
//! number of buckets and copies per call, so a worker's loop never stalls
//! on it. A deadline more than one turn of the wheel ahead stays in its
//! bucket until the turn it falls in.

/// Which feedback frees a copy: the probe's request and attempt, and the
/// hop index of the switch the copy was forwarded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyKey {
    pub request_id: u16,
    pub attempt: u8,
    pub hop_index: u8,
}

impl CopyKey {
    /// A well-mixed hash (the clone buffer's index, the duplicate filter).
    pub(crate) fn hash(&self) -> usize {
        let k = (self.request_id as u64) << 16 | (self.attempt as u64) << 8 | self.hop_index as u64;
        (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
    }
}

const NIL: u32 = u32::MAX;

struct Slot<T> {
    item: Option<T>,
    key: CopyKey,
    stored: u64,
    deadline: u64,
    /// Timer wheel bucket list.
    prev: u32,
    next: u32,
    /// Hash index chain (also the free list's link).
    chain: u32,
}

/// One copy waiting, as `intctl show gpint` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub key: CopyKey,
    /// TSC ticks since it was stored.
    pub age: u64,
}

pub struct CloneBuffer<T> {
    slots: Box<[Slot<T>]>,
    free: u32,
    index: Box<[u32]>,
    wheel: Box<[u32]>,
    tick: u64,
    /// The next bucket `expire` looks at, as an absolute tick number.
    cursor: u64,
    in_use: usize,
    high_water: usize,
}

impl<T> CloneBuffer<T> {
    /// `slots` copies at most (at least 1); a wheel of `buckets` (rounded
    /// up to a power of two) of `tick` TSC ticks each, starting at `now`.
    pub fn new(slots: usize, buckets: usize, tick: u64, now: u64) -> CloneBuffer<T> {
        let n = slots.clamp(1, (NIL - 1) as usize);
        let slots: Box<[Slot<T>]> = (0..n)
            .map(|i| Slot {
                item: None,
                key: CopyKey { request_id: 0, attempt: 0, hop_index: 0 },
                stored: 0,
                deadline: 0,
                prev: NIL,
                next: NIL,
                chain: if i + 1 < n { (i + 1) as u32 } else { NIL },
            })
            .collect();
        let tick = tick.max(1);
        CloneBuffer {
            slots,
            free: 0,
            index: vec![NIL; (2 * n).next_power_of_two()].into_boxed_slice(),
            wheel: vec![NIL; buckets.max(1).next_power_of_two()].into_boxed_slice(),
            tick,
            cursor: now / tick,
            in_use: 0,
            high_water: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// The most copies held at once.
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    fn bucket(&self, deadline: u64) -> usize {
        (deadline / self.tick) as usize & (self.wheel.len() - 1)
    }

    /// Keeps `item` until the feedback `key` or `deadline`; a full buffer
    /// (or a copy already waiting for the same feedback) hands it back.
    pub fn store(&mut self, key: CopyKey, item: T, now: u64, deadline: u64) -> Result<(), T> {
        if self.free == NIL || self.find(key).is_some() {
            return Err(item);
        }
        if self.in_use == 0 {
            // An empty wheel may start turning from now (whatever clock the
            // buffer was made with), so `expire` never walks idle buckets.
            self.cursor = now / self.tick;
        }
        let i = self.free;
        self.free = self.slots[i as usize].chain;
        let h = key.hash() & (self.index.len() - 1);
        // A deadline in a bucket the cursor has passed would wait a turn.
        let deadline = deadline.max(self.cursor * self.tick);
        let b = self.bucket(deadline);
        let head = self.wheel[b];
        {
            let s = &mut self.slots[i as usize];
            s.item = Some(item);
            s.key = key;
            s.stored = now;
            s.deadline = deadline;
            s.prev = NIL;
            s.next = head;
            s.chain = self.index[h];
        }
        if head != NIL {
            self.slots[head as usize].prev = i;
        }
        self.wheel[b] = i;
        self.index[h] = i;
        self.in_use += 1;
        self.high_water = self.high_water.max(self.in_use);
        Ok(())
    }

    fn find(&self, key: CopyKey) -> Option<u32> {
        let mut i = self.index[key.hash() & (self.index.len() - 1)];
        while i != NIL {
            let s = &self.slots[i as usize];
            if s.key == key {
                return Some(i);
            }
            i = s.chain;
        }
        None
    }

    /// The copy feedback `key` acknowledges, taken out; None when no copy
    /// waits for it (a late or duplicate feedback).
    pub fn ack(&mut self, key: CopyKey) -> Option<(T, u64)> {
        let i = self.find(key)?;
        Some(self.remove(i))
    }

    /// Unlinks slot `i` from its bucket and the index, frees it, and gives
    /// its copy and its store time.
    fn remove(&mut self, i: u32) -> (T, u64) {
        let (prev, next, key, deadline) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next, s.key, s.deadline)
        };
        if prev != NIL {
            self.slots[prev as usize].next = next;
        } else {
            let b = self.bucket(deadline);
            self.wheel[b] = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        }
        let h = key.hash() & (self.index.len() - 1);
        let mut at = self.index[h];
        if at == i {
            self.index[h] = self.slots[i as usize].chain;
        } else {
            while at != NIL {
                let c = self.slots[at as usize].chain;
                if c == i {
                    self.slots[at as usize].chain = self.slots[i as usize].chain;
                    break;
                }
                at = c;
            }
        }
        let s = &mut self.slots[i as usize];
        let item = s.item.take().expect("a used slot holds a copy");
        s.chain = self.free;
        self.free = i;
        self.in_use -= 1;
        (item, s.stored)
    }

    /// Hands `due` up to `max_copies` copies whose deadline is at or before
    /// `now`, looking at most at `max_buckets` buckets; the rest wait for
    /// the next call. Returns how many it handed.
    pub fn expire(
        &mut self,
        now: u64,
        max_buckets: usize,
        max_copies: usize,
        mut due: impl FnMut(CopyKey, T, u64),
    ) -> usize {
        let last = now / self.tick;
        let mut handed = 0;
        let mut visited = 0;
        while self.cursor <= last && visited < max_buckets {
            let b = self.cursor as usize & (self.wheel.len() - 1);
            let mut i = self.wheel[b];
            while i != NIL {
                let (next, deadline, key) = {
                    let s = &self.slots[i as usize];
                    (s.next, s.deadline, s.key)
                };
                if deadline <= now {
                    if handed == max_copies {
                        return handed;
                    }
                    let (item, stored) = self.remove(i);
                    due(key, item, stored);
                    handed += 1;
                }
                i = next;
            }
            visited += 1;
            // The current tick's bucket may still get copies due later in it.
            if self.cursor == last {
                break;
            }
            self.cursor += 1;
        }
        handed
    }

    /// The copies waiting, oldest first (for the control core's view; it
    /// allocates, so never on the per-packet path).
    pub fn waiting(&self, now: u64) -> Vec<Waiting> {
        let mut w: Vec<(u64, Waiting)> = self
            .slots
            .iter()
            .filter(|s| s.item.is_some())
            .map(|s| (s.stored, Waiting { key: s.key, age: now.saturating_sub(s.stored) }))
            .collect();
        w.sort_by_key(|&(stored, _)| stored);
        w.into_iter().map(|(_, w)| w).collect()
    }

    /// Takes every copy out (a worker stopping, or GPINT turned off).
    pub fn drain(&mut self, mut each: impl FnMut(CopyKey, T)) {
        for i in 0..self.slots.len() as u32 {
            if self.slots[i as usize].item.is_some() {
                let key = self.slots[i as usize].key;
                let (item, _) = self.remove(i);
                each(key, item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(r: u16, hop: u8) -> CopyKey {
        CopyKey { request_id: r, attempt: 0, hop_index: hop }
    }

    fn expired(b: &mut CloneBuffer<u32>, now: u64) -> Vec<u32> {
        let mut out = Vec::new();
        b.expire(now, usize::MAX, usize::MAX, |_, v, _| out.push(v));
        out.sort();
        out
    }

    #[test]
    fn ack_frees_the_matching_copy_once() {
        let mut b = CloneBuffer::new(4, 16, 10, 0);
        b.store(key(1, 2), 100, 0, 500).unwrap();
        b.store(key(1, 3), 101, 0, 500).unwrap();
        assert_eq!(b.in_use(), 2);
        assert_eq!(b.ack(key(1, 3)), Some((101, 0)));
        assert_eq!(b.ack(key(1, 3)), None, "a second feedback finds nothing");
        assert_eq!(b.ack(key(2, 2)), None);
        assert_eq!(b.in_use(), 1);
        assert_eq!(expired(&mut b, 1_000), vec![100]);
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn full_buffer_and_duplicate_key_hand_the_copy_back() {
        let mut b = CloneBuffer::new(2, 16, 10, 0);
        b.store(key(1, 1), 1, 0, 100).unwrap();
        assert_eq!(b.store(key(1, 1), 9, 0, 100), Err(9));
        b.store(key(1, 2), 2, 0, 100).unwrap();
        assert_eq!(b.store(key(1, 3), 3, 0, 100), Err(3));
        assert_eq!(b.high_water(), 2);
        b.ack(key(1, 1)).unwrap();
        b.store(key(1, 3), 3, 0, 100).unwrap();
        assert_eq!(b.high_water(), 2);
    }

    #[test]
    fn copies_expire_at_their_deadline_not_before() {
        let mut b = CloneBuffer::new(8, 8, 10, 0);
        b.store(key(1, 1), 1, 0, 55).unwrap();
        b.store(key(2, 1), 2, 0, 57).unwrap();
        b.store(key(3, 1), 3, 0, 200).unwrap();
        assert_eq!(expired(&mut b, 54), Vec::<u32>::new());
        assert_eq!(expired(&mut b, 55), vec![1]);
        assert_eq!(expired(&mut b, 56), Vec::<u32>::new());
        assert_eq!(expired(&mut b, 60), vec![2]);
        // 200 is two and a half turns of an 80-tick wheel ahead.
        assert_eq!(expired(&mut b, 199), Vec::<u32>::new());
        assert_eq!(expired(&mut b, 200), vec![3]);
    }

    #[test]
    fn expire_is_bounded_and_resumes() {
        let mut b = CloneBuffer::new(64, 64, 1, 0);
        for i in 0..64u16 {
            b.store(key(i, 0), i as u32, 0, i as u64).unwrap();
        }
        let mut got = 0;
        // At most 5 copies a call.
        while got < 64 {
            let n = b.expire(1_000, usize::MAX, 5, |_, _, _| {});
            assert!(n <= 5 && n > 0);
            got += n;
        }
        // At most 3 buckets a call: a 100-tick gap takes ~34 calls.
        let mut b = CloneBuffer::new(4, 128, 1, 0);
        b.store(key(1, 0), 7, 0, 100).unwrap();
        let mut calls = 0;
        let mut out = Vec::new();
        while out.is_empty() {
            b.expire(100, 3, usize::MAX, |_, v, _| out.push(v));
            calls += 1;
            assert!(calls < 100);
        }
        assert_eq!((out, calls), (vec![7], 34));
    }

    #[test]
    fn many_random_operations_keep_the_books() {
        // Against a plain model: every stored copy comes out exactly once,
        // by ack or by expiry, never before its deadline.
        let mut b = CloneBuffer::new(16, 8, 3, 0);
        let mut model: std::collections::HashMap<CopyKey, (u32, u64)> = Default::default();
        let mut x = 12345u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut now = 0;
        for step in 0..20_000u32 {
            now += rnd(4);
            match rnd(3) {
                0 => {
                    let k = key(rnd(40) as u16, rnd(3) as u8);
                    let dl = now + rnd(60);
                    match b.store(k, step, now, dl) {
                        Ok(()) => assert!(model.insert(k, (step, dl)).is_none()),
                        Err(v) => assert!(v == step && (model.len() == 16 || model.contains_key(&k))),
                    }
                }
                1 => {
                    let k = key(rnd(40) as u16, rnd(3) as u8);
                    assert_eq!(b.ack(k).map(|(v, _)| v), model.remove(&k).map(|(v, _)| v));
                }
                _ => {
                    b.expire(now, 4, 8, |k, v, _| {
                        let (mv, dl) = model.remove(&k).expect("a stored copy");
                        assert_eq!(mv, v);
                        assert!(dl <= now);
                    });
                }
            }
            assert_eq!(b.in_use(), model.len());
        }
        let mut left = 0;
        b.drain(|k, _| {
            model.remove(&k).unwrap();
            left += 1;
        });
        assert!(model.is_empty() && b.in_use() == 0, "{left} drained");
    }

    #[test]
    fn waiting_lists_oldest_first_with_ages() {
        let mut b = CloneBuffer::new(4, 8, 10, 0);
        b.store(key(2, 1), 0, 30, 1_000).unwrap();
        b.store(key(1, 1), 0, 10, 1_000).unwrap();
        let w = b.waiting(100);
        assert_eq!(w, vec![Waiting { key: key(1, 1), age: 90 }, Waiting { key: key(2, 1), age: 70 }]);
    }
}
