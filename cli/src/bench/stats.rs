//! Summaries of a set of figures: [`median`], [`mean`], and [`per_second`].

use std::time::Duration;

/// The median of `v` (the mean of the two middle values for an even count); NaN when `v` is
/// empty. NaNs sort last ([`f64::total_cmp`]).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The arithmetic mean of `v`; NaN when `v` is empty.
pub fn mean(v: &[f64]) -> f64 {
    #[allow(clippy::cast_precision_loss)] // counts of samples, far below 2^52
    let n = v.len() as f64;
    v.iter().sum::<f64>() / n
}

/// `n` events in `d`, per second (infinite for a zero duration).
pub fn per_second(n: u64, d: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let n = n as f64;
    n / d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts_and_of_nothing() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
        assert_eq!(per_second(10, Duration::from_millis(500)), 20.0);
    }
}
