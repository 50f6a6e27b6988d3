//! Descriptors inherited from `rnic exec` (the RNIC's socket and the state file), taken by
//! number: the one `unsafe` step of running under a supervisor (`runtime/publish.rs` checks
//! what it got and gives back, unclosed, what is not the supervisor's).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Ownership of the open descriptor `raw`, or `None` when `raw` is not open.
pub(super) fn take_fd(raw: RawFd) -> Option<OwnedFd> {
    if raw < 0 {
        return None;
    }
    // SAFETY: F_GETFD only reads the flags of descriptor `raw`, whatever it is.
    if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: `raw` is open (checked above). It is the descriptor `rnic exec` left open for this
    // process and named in RNIC_SUPERVISOR; the program does not know it, and the runtime takes
    // it once, at start (a `OnceLock`). If it turns out not to be the supervisor's, the runtime
    // releases it with `into_raw_fd` without closing it.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}
