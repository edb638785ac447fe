//! Small seedable pseudo-random generators: xorshift64* for link
//! emulation's random loss and jitter and tests that need repeatable random
//! input; splitmix64 where a generator outside Rust must draw the same
//! numbers (generated topologies and telemetry traces). Not for anything an
//! adversary may predict.

/// xorshift64* (Vigna): 64 bits of state, period 2^64 - 1.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// Any seed; zero (the one stuck state) is moved off.
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed | 1)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (0 when n is 0); the modulo bias is below 2^-40
    /// for the small n it is used with.
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// splitmix64 (Steele, Lea, Flood): simple enough to write the same way in
/// any language, so fixtures come out alike everywhere.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1): the top 53 bits scaled by 2^-53.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeatable_spread_and_never_stuck() {
        let (mut a, mut b) = (XorShift::new(7), XorShift::new(7));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()), "same seed, same sequence");
        let mut z = XorShift::new(0);
        assert_ne!(z.next_u64(), z.next_u64(), "seed 0 is not the stuck state");
        let mut r = XorShift::new(42);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10)] += 1;
        }
        assert!(seen.iter().all(|&n| (900..1100).contains(&n)), "{seen:?}");
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn splitmix_gives_the_published_sequence() {
        // The reference implementation's first outputs for seed 0.
        let mut s = SplitMix(0);
        assert_eq!(s.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(s.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let u = SplitMix(1).unit();
        assert!((0.0..1.0).contains(&u));
    }
}
