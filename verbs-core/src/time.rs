//! Time as a value: the sans-IO machines never read a clock; drivers pass the current time in.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time in nanoseconds since the driver's epoch (virtual time in the deterministic
/// world, time since start in a real-time driver). Ordered, copyable, saturating arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    /// The epoch (t = 0).
    pub const ZERO: SimTime = SimTime(0);
    /// The latest representable time; "never".
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        SimTime(ns)
    }

    /// `us` microseconds after the epoch.
    pub const fn from_micros(us: u64) -> Self {
        SimTime(us.saturating_mul(1_000))
    }

    /// `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        SimTime(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// This time plus `ns` nanoseconds, saturating at [`SimTime::MAX`].
    pub const fn plus_nanos(self, ns: u64) -> Self {
        SimTime(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub const fn nanos_since(self, earlier: SimTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for SimTime {
    type Output = SimTime;
    fn add(self, d: Duration) -> SimTime {
        self.plus_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl Sub<SimTime> for SimTime {
    type Output = Duration;
    fn sub(self, earlier: SimTime) -> Duration {
        Duration::from_nanos(self.nanos_since(earlier))
    }
}

impl fmt::Display for SimTime {
    /// Seconds with microsecond precision, e.g. `1.000250s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.0 / 1_000_000_000,
            (self.0 % 1_000_000_000) / 1_000
        )
    }
}
