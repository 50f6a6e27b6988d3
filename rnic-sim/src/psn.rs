//! 24-bit packet sequence number arithmetic (IBTA 9.7.1; rxe `psn_compare` [rxe_hdr.h]).
//!
//! PSNs live in a circular 24-bit space; two PSNs are compared by the sign of their 24-bit
//! difference, so a window of up to 2^23 PSNs orders correctly across the wrap.

use verbs_core::PSN_MASK;

/// `a + n` in the 24-bit PSN space.
pub fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// The signed 24-bit distance `a − b`: positive when `a` is after `b`, negative when before.
pub fn psn_diff(a: u32, b: u32) -> i32 {
    // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn_add(0xFF_FFFF, 1), 0);
        assert_eq!(psn_add(0xFF_FFFE, 5), 3);
        assert_eq!(psn_diff(0, 0xFF_FFFF), 1);
        assert_eq!(psn_diff(0xFF_FFFF, 0), -1);
        assert_eq!(psn_diff(10, 3), 7);
        assert_eq!(psn_diff(3, 10), -7);
    }
}
