//! The errors of the World's calls and of its check.

use crate::oracle::Violation;
use std::fmt;
use verbs_core::{Error, SimTime};

/// Errors of the World's convenience calls.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// A verbs or rdma_cm call failed.
    #[error("{0}")]
    Verbs(#[from] Error),
    /// The awaited event did not come before quiescence or the time limit.
    #[error("host {host}: no {what} by {at}")]
    Timeout {
        /// The host waited on.
        host: usize,
        /// What was awaited.
        what: String,
        /// When the World gave up.
        at: SimTime,
    },
    /// A post of `wanted` WRs found too few free WR buffer slots on host `host`: at most
    /// `slots` WRs per region may be outstanding ([`WorldConfig::wr_slots`]). Nothing was
    /// posted.
    ///
    /// [`WorldConfig::wr_slots`]: super::WorldConfig::wr_slots
    #[error("host {host}: {wanted} more WRs would exceed its {slots} WR buffer slots (WorldConfig::wr_slots)")]
    OutOfSlots {
        /// The host whose slots ran out.
        host: usize,
        /// WRs the post needed slots for.
        wanted: usize,
        /// Slots per region.
        slots: u32,
    },
    /// No such host.
    #[error("no host {0}")]
    NoHost(usize),
}

/// The oracle's verdict as an error (`w.check()?`). Its `Debug` is the readable report too,
/// so that `w.check().unwrap()` and a test returning the error print the violations and
/// their records.
pub struct Violations(pub Vec<Violation>);

impl fmt::Debug for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} oracle violation(s):", self.0.len())?;
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in &self.0 {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}
