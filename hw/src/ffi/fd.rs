//! Descriptor plumbing for [`crate::EventWaiter`]: duplicating the device's event descriptors
//! and `poll(2)` on them.

use super::Verbs;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

impl Verbs {
    /// Duplicates (`F_DUPFD_CLOEXEC`) of [`Verbs::event_fds`].
    pub(crate) fn dup_event_fds(&self) -> io::Result<Vec<OwnedFd>> {
        self.event_fds()
            .into_iter()
            .map(|fd| {
                // SAFETY: `fd` is the channel's or the context's async descriptor, open while
                // `self` lives, and the borrow ends within this call.
                let b = unsafe { BorrowedFd::borrow_raw(fd) };
                b.try_clone_to_owned()
            })
            .collect()
    }
}

/// `poll(2)` for `POLLIN` on `fds`, at most `timeout` (rounded up to milliseconds, capped at
/// `i32::MAX`): see [`crate::EventWaiter::wait`].
pub(crate) fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    let ms = libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX);
    let n = libc::nfds_t::try_from(p.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `p` holds `n` initialised pollfd structs of descriptors borrowed for the call.
    let ret = unsafe { libc::poll(p.as_mut_ptr(), n, ms) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(false),
            _ => Err(e),
        };
    }
    let gone = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
    if p.iter().any(|f| f.revents & gone != 0) {
        return Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "a device event descriptor hung up (its channel is gone)",
        ));
    }
    Ok(p.iter().any(|f| f.revents & libc::POLLIN != 0))
}
