//! What the oracle reports: the invariants ([`Invariant`]) and one broken invariant
//! ([`Violation`]).

use std::fmt;
use verbs_core::SimTime;

/// The invariants of TESTING.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[allow(missing_docs)] // each is the TESTING.md name
pub enum Invariant {
    S1,
    S2,
    S3,
    S4,
    S5,
    S6,
    S7,
    L1,
    L2,
    L3,
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which.
    pub invariant: Invariant,
    /// The host it was seen on.
    pub host: usize,
    /// When (virtual time).
    pub at: SimTime,
    /// What is wrong.
    pub message: String,
    /// The records involved, formatted.
    pub events: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} violated on host {} at {} µs: {}",
            self.invariant,
            self.host,
            self.at.as_nanos() / 1000,
            self.message
        )?;
        for e in &self.events {
            write!(f, "\n    {e}")?;
        }
        Ok(())
    }
}
