//! Seeded identifiers: QP numbers and the index part of lkeys/rkeys, which a peer on the
//! network must not be able to guess from the ones it has seen.
//!
//! Both are 24-bit numbers the device takes from a counter that never repeats a value before
//! it wraps (QPNs) or at all (MR indices). With [`SimDeviceConfig::seed`] 0 the identifier is
//! the counter itself — `first_qpn`, `first_qpn + 1`, …; key indices 1, 2, … — the values every
//! trace and test before seeds existed was made with. With any other seed the identifier is the
//! counter's image under a keyed permutation of the 24-bit space ([`Perm24`]): still one
//! identifier per counter value, so what never repeats in the counter never repeats in the
//! identifier, and [`Perm24::invert`] finds the counter again in O(1); but one observed QPN or
//! rkey says nothing usable about the next one. The key comes from the seed and nothing else
//! (sans-IO): the same seed gives the same identifiers, on every machine.
//!
//! The permutation is a 6-round balanced Feistel network over two 12-bit halves whose round
//! function is the SplitMix64 finaliser of the round key XOR the half. That hides the sequence
//! from a peer that does not know the seed; it is not a cipher and does not claim to resist
//! cryptanalysis by a peer that collects many identifiers. Real devices give less: rxe's QPNs
//! and MR indices are sequential (`xa_alloc_cyclic` in `rxe_pool.c`) with only the low 8 bits
//! of a key random (`rxe_get_next_key` in `rxe_mr.c`), mlx5's key byte is a counter
//! (`assign_mkey_variant`); see `docs/semantics-verbs.md`, "Objects and identity".
//!
//! [`SimDeviceConfig::seed`]: crate::SimDeviceConfig::seed

use crate::rng::{mix64, Rng, SplitMix64};

/// The 24-bit mask of QP numbers and key indices.
const MASK: u32 = 0x00FF_FFFF;

/// Bits in each half of the Feistel network.
const HALF_BITS: u32 = 12;

/// Mask of one half.
const HALF: u32 = (1 << HALF_BITS) - 1;

/// Feistel rounds. Four rounds of a pseudo-random function already give a pseudo-random
/// permutation (Luby–Rackoff); two more cover the round function's weaker mixing.
const ROUNDS: usize = 6;

/// [`Rng::fork`] label of the QPN permutation ("qpn").
pub(crate) const QPN_STREAM: u64 = 0x0071_706e;
/// [`Rng::fork`] label of the MR key-index permutation ("mrix").
pub(crate) const MR_INDEX_STREAM: u64 = 0x6d72_6978;
/// [`Rng::fork`] label of the MR key tags ("mrtg").
pub(crate) const MR_TAG_STREAM: u64 = 0x6d72_7467;
/// [`Rng::fork`] label of the offset of the MR address allocator ("mrva").
pub(crate) const MR_VA_STREAM: u64 = 0x6d72_7661;

/// The generator of stream `stream` of `seed`, or `None` for seed 0 (the unseeded,
/// sequential identifiers).
pub(crate) fn stream(seed: u64, stream: u64) -> Option<Rng> {
    (seed != 0).then(|| Rng::new(seed).fork(stream))
}

/// A permutation of the 24-bit numbers `0..2^24`: the identity, or a Feistel network keyed by
/// a seed (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Perm24 {
    /// The round keys; `None` is the identity.
    keys: Option<[u64; ROUNDS]>,
}

impl Perm24 {
    /// The identity for seed 0, else the permutation keyed by stream `stream` of `seed`.
    pub fn new(seed: u64, stream_label: u64) -> Self {
        let keys = stream(seed, stream_label).map(|r| {
            let mut sm = SplitMix64::new(r.key());
            std::array::from_fn(|_| sm.next_u64())
        });
        Perm24 { keys }
    }

    fn round(key: u64, half: u32) -> u32 {
        (mix64(key ^ u64::from(half)) as u32) & HALF
    }

    /// The image of `x` (its low 24 bits).
    pub fn apply(&self, x: u32) -> u32 {
        let Some(keys) = &self.keys else {
            return x & MASK;
        };
        let (mut l, mut r) = ((x >> HALF_BITS) & HALF, x & HALF);
        for &k in keys {
            (l, r) = (r, l ^ Self::round(k, r));
        }
        (l << HALF_BITS) | r
    }

    /// The preimage of `y` (its low 24 bits): `invert(apply(x)) == x & 0xFF_FFFF`.
    pub fn invert(&self, y: u32) -> u32 {
        let Some(keys) = &self.keys else {
            return y & MASK;
        };
        let (mut l, mut r) = ((y >> HALF_BITS) & HALF, y & HALF);
        for &k in keys.iter().rev() {
            (l, r) = (r ^ Self::round(k, l), l);
        }
        (l << HALF_BITS) | r
    }

    /// The permutation restricted to `floor..2^24` by cycle walking: `apply` again while the
    /// image is below `floor`. For `x` in `floor..2^24` the result is in the same range, and
    /// distinct `x` give distinct results (the walk stays on `x`'s cycle, which returns to
    /// `x`). The identity returns `x`.
    pub fn apply_from(&self, floor: u32, x: u32) -> u32 {
        let mut y = self.apply(x);
        while y < floor {
            y = self.apply(y);
        }
        y
    }

    /// The inverse of [`apply_from`](Self::apply_from) on `floor..2^24`.
    pub fn invert_from(&self, floor: u32, y: u32) -> u32 {
        let mut x = self.invert(y);
        while x < floor {
            x = self.invert(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_0_is_the_identity() {
        let p = Perm24::new(0, QPN_STREAM);
        for x in [0, 1, 2, 0x11, 0x12_3456, MASK] {
            assert_eq!(
                (p.apply(x), p.invert(x), p.apply_from(2, x.max(2))),
                (x, x, x.max(2))
            );
        }
    }

    #[test]
    fn a_keyed_permutation_is_a_bijection_of_the_24_bit_space_with_its_inverse() {
        let p = Perm24::new(7, QPN_STREAM);
        let mut seen = vec![false; 1 << 24];
        for x in 0..=MASK {
            let y = p.apply(x);
            assert!(y <= MASK);
            assert!(
                !std::mem::replace(&mut seen[y as usize], true),
                "{y} hit twice"
            );
            assert_eq!(p.invert(y), x);
        }
    }

    #[test]
    fn cycle_walking_stays_above_the_floor_and_inverts() {
        let p = Perm24::new(99, MR_INDEX_STREAM);
        // Find the counter values whose plain image falls below the floor: the walk must
        // take them elsewhere, and back.
        let low: Vec<u32> = (0..2).map(|y| p.invert(y)).collect();
        for &x in low.iter().filter(|&&x| x >= 2).chain(&[2, 3, 1000, MASK]) {
            let y = p.apply_from(2, x);
            assert!(y >= 2);
            assert_eq!(p.invert_from(2, y), x);
        }
    }

    #[test]
    fn different_seeds_and_streams_give_different_permutations() {
        let first = |p: Perm24| (0..8).map(|x| p.apply(x)).collect::<Vec<_>>();
        let a = first(Perm24::new(1, QPN_STREAM));
        assert_eq!(a, first(Perm24::new(1, QPN_STREAM)));
        assert_ne!(a, first(Perm24::new(2, QPN_STREAM)));
        assert_ne!(a, first(Perm24::new(1, MR_INDEX_STREAM)));
    }
}
