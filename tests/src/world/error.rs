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
