//! The one seeded PRNG of the deterministic world, with a pinned algorithm (TESTING.md,
//! "Determinism rules").
//!
//! * Seeding: SplitMix64 (Steele, Lea, Flood 2014; Vigna's `splitmix64.c`) expands a 64-bit key
//!   into the 256-bit state.
//! * Stream: xoshiro256** 1.0 (Blackman and Vigna, `xoshiro256starstar.c`).
//!
//! Both are written here and checked against their published reference vectors, so a seed
//! means the same stream on every machine and with every version of every dependency (which
//! `rand::StdRng` does not promise).
//!
//! Independent streams come from [`Rng::fork`]: a child depends only on its parent's *key* and a
//! label, never on how many values the parent has drawn. Give the network faults, each host and
//! the workload their own fork, and adding a draw in one of them reshuffles none of the others.

use std::ops::{Bound, RangeBounds};

/// The SplitMix64 increment (the 64-bit golden ratio, `0x9e3779b97f4a7c15`).
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The SplitMix64 output function (a bijection of `u64`, the finaliser of MurmurHash3 variant 13).
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64: a 64-bit-state generator, used here to expand seeds and derive fork keys.
///
/// Reference: Vigna, `splitmix64.c` (public domain). `SplitMix64::new(1234567)` yields
/// 6457827717110365317, 3203168211198807973, … (the Rosetta Code vectors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state is `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }
}

/// A seeded, forkable xoshiro256** generator with a pinned algorithm.
///
/// `Rng::new(seed)` fills the state with four SplitMix64 outputs of `seed` (the seeding the
/// xoshiro authors recommend). Every helper draws a documented number of 64-bit values, so the
/// stream a seed produces never depends on the platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    /// The key this generator was created from; [`Rng::fork`] derives children from it.
    key: u64,
    /// xoshiro256** state; never all zero.
    s: [u64; 4],
}

impl Rng {
    /// A generator for `seed`: the xoshiro256** state is the first four SplitMix64 outputs of
    /// `seed`. Any `u64` is a valid seed (the four outputs are distinct, so never all zero).
    pub fn new(seed: u64) -> Self {
        let mut sm = SplitMix64::new(seed);
        let s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        Rng { key: seed, s }
    }

    /// A generator with the raw xoshiro256** state `s` (for reference vectors and replay of a
    /// saved state). An all-zero state, which xoshiro cannot leave, is replaced by the state of
    /// `Rng::new(0)`. Children forked from it are keyed by `s[0] ^ s[1] ^ s[2] ^ s[3]`.
    pub fn from_state(s: [u64; 4]) -> Self {
        if s == [0; 4] {
            return Rng::new(0);
        }
        Rng {
            key: s[0] ^ s[1] ^ s[2] ^ s[3],
            s,
        }
    }

    /// The key (the seed for [`Rng::new`], the derived key for a fork) this generator was made
    /// from. `Rng::new(rng.key())` restarts the stream from its beginning.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// An independent child stream named by `stream_label`.
    ///
    /// The child depends only on this generator's key and the label — not on how many values
    /// were drawn from this generator before or after — so forks are stable when draws are
    /// added elsewhere. Forking the same label twice gives the same stream; forks nest
    /// (`rng.fork(HOSTS).fork(host_index)`).
    pub fn fork(&self, stream_label: u64) -> Rng {
        // Two rounds of mixing: the label is spread over all bits before it meets the key, and
        // the combination is mixed again, so nearby labels and nearby keys give unrelated keys.
        let child_key = mix64(self.key ^ mix64(stream_label.wrapping_add(GOLDEN_GAMMA)));
        Rng::new(child_key)
    }

    /// The next 64-bit output of xoshiro256** (one draw).
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform integer in `0..n`, without modulo bias (Lemire's multiply-and-reject method,
    /// "Fast Random Integer Generation in an Interval", 2019). Draws one value, more only on a
    /// rejection (probability below `n / 2^64`). `below(0)` returns 0 and draws nothing.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            // The values of the low word below 2^64 mod n are the biased ones: redraw on them.
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// A uniform integer in `range` (any of `a..b`, `a..=b`, `a..`, `..`), unbiased. An empty
    /// range returns its start and draws nothing; the full range `..` is one draw.
    pub fn range_u64(&mut self, range: impl RangeBounds<u64>) -> u64 {
        let lo = match range.start_bound() {
            Bound::Included(&a) => a,
            Bound::Excluded(&a) => a.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let hi_incl = match range.end_bound() {
            Bound::Included(&b) => b,
            Bound::Excluded(&0) => return lo,
            Bound::Excluded(&b) => b - 1,
            Bound::Unbounded => u64::MAX,
        };
        if hi_incl < lo {
            return lo;
        }
        match (hi_incl - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(),
        }
    }

    /// A uniform `f64` in `[0, 1)`: the top 53 bits of one draw times 2^-53 (exact, no
    /// rounding, the same on every IEEE-754 machine).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p`. Always draws exactly one value, whatever `p`, so changing a
    /// probability does not shift the rest of the stream. `p <= 0` (or NaN) is never, `p >= 1`
    /// always.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// An exponentially distributed integer with mean `mean` (inverse-CDF sampling,
    /// `-ln(1 - u) * mean`), for jitter in ns. One draw. Uses [`ln_pinned`], not the
    /// platform's `ln`, so the result is the same on every machine; saturates at `u64::MAX`.
    pub fn exponential(&mut self, mean: u64) -> u64 {
        // 1 - u is in (0, 1], so the logarithm is finite.
        let u = 1.0 - self.next_f64();
        let x = -ln_pinned(u) * mean as f64;
        x as u64
    }
}

/// The natural logarithm of a positive finite `x`, computed with only `+ - * /` (which IEEE 754
/// rounds exactly) so that it gives the same bits on every platform, unlike `f64::ln`, which
/// calls the platform's libm. Accurate to a few ulps; returns `-inf` for 0 and NaN for
/// negative, infinite or NaN input.
pub fn ln_pinned(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 || x.is_infinite() {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    const LN_2: f64 = std::f64::consts::LN_2;
    const SQRT_2: f64 = std::f64::consts::SQRT_2;
    // Scale subnormals into the normal range first.
    let (x, mut e) = if x < f64::MIN_POSITIVE {
        (x * (1u64 << 54) as f64, -54i64)
    } else {
        (x, 0i64)
    };
    // x = m * 2^k with m in [1, 2), read from the bits (exact).
    let bits = x.to_bits();
    e += ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    // Centre m on 1: m in [sqrt(2)/2, sqrt(2)).
    if m >= SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172; the series to s^31 is below
    // 2^-53 relative error.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut sum = 0.0;
    let mut k = 31.0;
    while k >= 1.0 {
        sum = sum * s2 + 1.0 / k;
        k -= 2.0;
    }
    2.0 * s * sum + e as f64 * LN_2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_published_vectors_for_seed_1234567() {
        // Rosetta Code "Pseudo-random numbers/Splitmix64" (from Vigna's splitmix64.c).
        let mut sm = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| sm.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821,
            ]
        );
    }

    #[test]
    fn splitmix64_matches_the_published_vectors_for_seed_0() {
        let mut sm = SplitMix64::new(0);
        assert_eq!(sm.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(sm.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(sm.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn xoshiro256starstar_matches_the_reference_implementation_from_state_1_2_3_4() {
        // Outputs of xoshiro256starstar.c from the state {1, 2, 3, 4} (also rand_xoshiro's
        // reference test).
        let mut r = Rng::from_state([1, 2, 3, 4]);
        let got: Vec<u64> = (0..10).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                11520,
                0,
                1509978240,
                1215971899390074240,
                1216172134540287360,
                607988272756665600,
                16172922978634559625,
                8476171486693032832,
                10595114339597558777,
                2904607092377533576,
            ]
        );
    }

    #[test]
    fn seeding_uses_four_splitmix64_outputs_of_the_seed() {
        let mut sm = SplitMix64::new(1234567);
        let state = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        let mut a = Rng::new(1234567);
        let mut b = Rng::from_state(state);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn all_zero_state_is_replaced_because_xoshiro_cannot_leave_it() {
        let mut r = Rng::from_state([0; 4]);
        assert!((0..4).any(|_| r.next_u64() != 0));
    }

    #[test]
    fn fork_is_independent_of_draws_on_the_parent() {
        let parent = Rng::new(7);
        let mut drawn = parent.clone();
        for _ in 0..17 {
            drawn.next_u64();
        }
        let mut a = parent.fork(3);
        let mut b = drawn.fork(3);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn forks_with_different_labels_or_parents_differ() {
        let p = Rng::new(7);
        let first = |mut r: Rng| r.next_u64();
        let v = [
            first(p.fork(0)),
            first(p.fork(1)),
            first(p.fork(2)),
            first(Rng::new(8).fork(0)),
            first(p.fork(0).fork(0)),
            first(p.clone()),
        ];
        for i in 0..v.len() {
            for j in i + 1..v.len() {
                assert_ne!(v[i], v[j], "streams {i} and {j} collide");
            }
        }
    }

    #[test]
    fn below_stays_in_bounds_and_hits_every_value() {
        let mut r = Rng::new(1);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            let x = r.below(7);
            assert!(x < 7);
            seen[x as usize] += 1;
        }
        // Each bucket expects 1000; 800 is more than 6 standard deviations away.
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
    }

    #[test]
    fn below_rejects_the_biased_low_words() {
        // n = 2^63 + 1: almost half of all low words are biased; the result must still be < n
        // and the sequence must be reproducible.
        let n = (1u64 << 63) + 1;
        let mut a = Rng::new(99);
        let mut b = Rng::new(99);
        for _ in 0..1000 {
            let x = a.below(n);
            assert!(x < n);
            assert_eq!(x, b.below(n));
        }
    }

    #[test]
    fn range_u64_covers_inclusive_exclusive_and_degenerate_ranges() {
        let mut r = Rng::new(5);
        for _ in 0..1000 {
            let x = r.range_u64(10..20);
            assert!((10..20).contains(&x));
            let y = r.range_u64(10..=20);
            assert!((10..=20).contains(&y));
        }
        assert_eq!(r.range_u64(5..5), 5);
        let (hi, lo) = (3, 9);
        assert_eq!(r.range_u64(lo..=hi), 9);
        assert_eq!(r.range_u64(0..0), 0);
        assert_eq!(r.range_u64(7..=7), 7);
        let _full = r.range_u64(..);
        assert!(r.range_u64(u64::MAX - 1..) >= u64::MAX - 1);
    }

    #[test]
    fn chance_draws_exactly_one_value_whatever_the_probability() {
        let mut a = Rng::new(3);
        let mut b = Rng::new(3);
        assert!(!a.chance(0.0));
        assert!(b.chance(1.0));
        assert!(!a.chance(f64::NAN));
        b.next_u64();
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn chance_frequency_matches_the_probability() {
        let mut r = Rng::new(11);
        let hits = (0..100_000).filter(|_| r.chance(0.25)).count();
        assert!((24_000..26_000).contains(&hits), "{hits}");
    }

    #[test]
    fn next_f64_is_in_the_unit_interval() {
        let mut r = Rng::new(12);
        for _ in 0..10_000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn exponential_has_the_requested_mean() {
        let mut r = Rng::new(13);
        let n = 100_000u64;
        let total: u64 = (0..n).map(|_| r.exponential(1_000_000)).sum();
        let mean = total / n;
        assert!((980_000..1_020_000).contains(&mean), "{mean}");
        assert_eq!(r.exponential(0), 0);
    }

    #[test]
    fn ln_pinned_agrees_with_the_platform_logarithm() {
        for &x in &[
            1e-300,
            5e-324,
            1e-10,
            0.1,
            0.5,
            0.75,
            std::f64::consts::FRAC_1_SQRT_2,
            1.0,
            1.5,
            2.0,
            std::f64::consts::E,
            10.0,
            12345.678,
            1e300,
        ] {
            let (ours, std) = (ln_pinned(x), x.ln());
            let tol = 4.0 * f64::EPSILON * std.abs().max(1e-300);
            assert!((ours - std).abs() <= tol, "ln({x}): {ours} vs {std}");
        }
        assert_eq!(ln_pinned(1.0), 0.0);
        assert_eq!(ln_pinned(0.0), f64::NEG_INFINITY);
        assert!(ln_pinned(-1.0).is_nan());
    }
}
