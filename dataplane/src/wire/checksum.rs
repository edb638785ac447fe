//! Internet checksum (RFC 1071) and incremental update (RFC 1624).

/// One's-complement sum of `data` added to `initial` (folded to at most
/// 17 bits, so callers may add a few more terms without overflow).
#[inline]
pub fn sum(initial: u32, data: &[u8]) -> u32 {
    // Native-order 64-bit words added into 128 bits (an add and an add
    // with carry each): the high half counts the carries out of the low
    // one, which one's-complement arithmetic adds back in. No byte swap
    // per word: summing byte-swapped 16-bit words gives the byte-swapped
    // sum (RFC 1071 §2(B)), so one swap of the folded total makes it the
    // big-endian sum.
    let mut acc = 0u128;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        acc += u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) as u128;
    }
    let mut rest = words.remainder();
    if let [a, b, c, d, tail @ ..] = rest {
        acc += u32::from_ne_bytes([*a, *b, *c, *d]) as u128;
        rest = tail;
    }
    if let [a, b, tail @ ..] = rest {
        acc += u16::from_ne_bytes([*a, *b]) as u128;
        rest = tail;
    }
    if let [b] = rest {
        // The odd byte is the high byte of a zero-padded big-endian word.
        acc += u16::from_ne_bytes([*b, 0]) as u128;
    }
    let (lo, carry) = (acc as u64).overflowing_add((acc >> 64) as u64);
    let native = fold(fold_words(lo) + carry as u32);
    fold_words(initial as u64 + u16::from_be(native) as u64)
}

/// Whether an IPv4 header without options verifies (`fold(sum(0, h)) ==
/// 0xffff`), by one division by a constant instead of the folds: the
/// one's-complement sum of words is 0xffff exactly when their plain sum is
/// a nonzero multiple of 0xffff. As 2^16 = 1 (mod 0xffff), five native
/// 32-bit words leave the residue of their ten 16-bit halves, and a byte
/// swap multiplies it by 2^8 (a unit): zero either way.
#[inline(always)]
pub fn header_verifies(h: &[u8; 20]) -> bool {
    let w = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
    let acc = w(0) + w(4) + w(8) + w(12) + w(16);
    acc % 0xffff == 0 && acc != 0
}

/// An IPv4 header checksum `hc` once the TTL (the high byte of its word)
/// is one less: `word_added` with -0x0100.
#[inline(always)]
pub fn ttl_decremented(hc: u16) -> u16 {
    word_added(hc, 0xfeff)
}

/// A checksum `hc` once `d` (nonzero, one's complement: `n` for a word
/// grown by `n` without wrapping, `0xfeff` for one less in its high byte)
/// was added to one 16-bit word it covers: RFC 1624 eqn. 3, where
/// `!old + new` is `0xffff + d`, the same as `d` in one's complement but
/// for a zero sum, which `d` > 0 rules out.
#[inline(always)]
pub fn word_added(hc: u16, d: u16) -> u16 {
    let s = (!hc) as u32 + d as u32;
    // At most 0xffff + 0xffff: one fold leaves 16 bits.
    !(((s & 0xffff) + (s >> 16)) as u16)
}

/// Folds a 64-bit sum of 32-bit big-endian words (and 16-bit ones) to at
/// most 17 bits, as `sum` returns it.
#[inline]
pub fn fold_words(acc: u64) -> u32 {
    let s = (acc & 0xffff_ffff) + (acc >> 32);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u32
}

/// Folds a 32-bit accumulator into a 16-bit one's-complement sum.
#[inline]
pub fn fold(s: u32) -> u16 {
    // Two rounds always suffice: the first leaves at most 0x1fffe, the
    // second at most 0xffff (no data-dependent loop on the hot path).
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The checksum field value for `data` (with the checksum field zeroed).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(0, data))
}

/// RFC 1624 eqn. 3: new checksum after a 16-bit word changes from `old` to `new`.
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    !fold((!csum) as u32 + (!old) as u32 + new as u32)
}

/// Pseudo-header sum for IPv4 upper layers.
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u32 {
    let s = sum(0, &src);
    let s = sum(s, &dst);
    s + proto as u32 + len as u32
}

/// Pseudo-header sum for IPv6 upper layers.
pub fn pseudo_v6(src: &[u8; 16], dst: &[u8; 16], next: u8, len: u32) -> u32 {
    let s = sum(0, src);
    let s = sum(s, dst);
    s + (len >> 16) + (len & 0xffff) + next as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example words: 0001 f203 f4f5 f6f7 -> sum ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &d)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn fold_matches_repeated_folding_at_the_extremes() {
        let slow = |mut s: u32| {
            while s > 0xffff {
                s = (s & 0xffff) + (s >> 16);
            }
            s as u16
        };
        for s in [0, 1, 0xffff, 0x1_0000, 0x1_fffe, 0x1_ffff, 0xffff_0000, 0xfffe_ffff, 0xffff_ffff, 0x8000_8000] {
            assert_eq!(fold(s), slow(s), "{s:#x}");
        }
        // 32-bit words summed into 64 bits, folded, equal the 16-bit sum.
        let words = [0xffff_ffffu32, 0x1234_5678, 0xdead_beef, 0xffff_0001];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        assert_eq!(fold(fold_words(words.iter().map(|w| *w as u64).sum())), fold(sum(0, &bytes)));
    }

    /// The plain RFC 1071 loop over big-endian 16-bit words.
    fn reference(initial: u32, data: &[u8]) -> u16 {
        let mut s = initial as u64;
        for c in data.chunks(2) {
            s += ((c[0] as u64) << 8) | *c.get(1).unwrap_or(&0) as u64;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn sum_matches_the_reference_at_every_length_and_alignment() {
        let mut rng = crate::rand::XorShift::new(0x1234_5678);
        let data: Vec<u8> = (0..300).map(|_| rng.next_u64() as u8).collect();
        for start in 0..8 {
            for len in 0..200 {
                let d = &data[start..start + len];
                for initial in [0, 1, 0xffff, 0x1_fffe] {
                    let got = sum(initial, d);
                    assert!(got <= 0x1_ffff, "17 bits at most");
                    assert_eq!(fold(got), reference(initial, d), "start {start} len {len} initial {initial:#x}");
                }
            }
        }
        // All ones and all zeros: the representation of zero does not flip.
        assert_eq!(fold(sum(0, &[0xff; 20])), 0xffff);
        assert_eq!(fold(sum(0, &[0; 20])), 0);
    }

    #[test]
    fn a_header_verifies_exactly_when_its_sum_is_all_ones() {
        let mut rng = crate::rand::XorShift::new(0x1624);
        let mut valid = 0;
        for i in 0..20_000 {
            let mut h: [u8; 20] = std::array::from_fn(|_| rng.next_u64() as u8);
            match i {
                0 => h = [0xff; 20],
                1 => h = [0; 20],
                // Only the checksum word nonzero, as 0xffff: the one's
                // complement of zero.
                2 => h = std::array::from_fn(|j| if j == 10 || j == 11 { 0xff } else { 0 }),
                _ if i % 2 == 0 => {
                    // Mended: the checksum field made right.
                    h[10..12].copy_from_slice(&[0, 0]);
                    let c = checksum(&h);
                    h[10..12].copy_from_slice(&c.to_be_bytes());
                }
                _ => {}
            }
            let want = reference(0, &h) == 0xffff;
            valid += want as u32;
            assert_eq!(header_verifies(&h), want, "{h:02x?}");
        }
        assert!(valid > 9_000, "the mended half verifies: {valid}");
    }

    #[test]
    fn a_word_grown_updates_as_rfc1624_eqn3() {
        let mut rng = crate::rand::XorShift::new(0x0001_6243);
        for i in 0..200_000u32 {
            let r = rng.next_u64();
            let (hc, old) = match i {
                0 => (0, 0),
                1 => (0xffff, 0),
                2 => (0, 0xfffe),
                _ => (r as u16, (r >> 16) as u16),
            };
            // 1..=0xffff, kept where the word does not wrap.
            let n = 1 + ((r >> 32) as u32 % 0xffff) as u16;
            let Some(new) = old.checked_add(n) else { continue };
            assert_eq!(word_added(hc, n), update16(hc, old, new), "hc {hc:#x} old {old:#x} n {n}");
        }
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(0, &[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut hdr = [0x45u8, 0, 0, 0x54, 0x12, 0x34, 0x40, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let c = checksum(&hdr);
        hdr[10..12].copy_from_slice(&c.to_be_bytes());
        let old = u16::from_be_bytes([hdr[8], hdr[9]]);
        hdr[8] = 63;
        let new = u16::from_be_bytes([hdr[8], hdr[9]]);
        let inc = update16(c, old, new);
        hdr[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(inc, checksum(&hdr));
    }
}
