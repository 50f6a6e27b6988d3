//! [`EventWaiter`]: waiting for a device's events on another thread than the device's owner.

use crate::ffi;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// Duplicates of a device's event descriptors ([`crate::HwDevice::event_fds`]: completion
/// channel, async fd), to wait on them without holding the device: a driver's event thread
/// waits here, then locks the device and calls [`crate::HwDevice::process_events`].
///
/// The duplicates share the open files (and their non-blocking flag) with the device; they
/// are closed when the waiter is dropped. Waiting reads nothing, so it never takes an event
/// from the device. Stop the waiting thread before dropping the device: a duplicate keeps a
/// kernel event file open, so after the device is gone a wait may just time out (librnic's
/// channel, a socket pair, reports the hang-up instead).
#[derive(Debug)]
pub struct EventWaiter {
    fds: Vec<OwnedFd>,
}

impl EventWaiter {
    pub(crate) fn new(fds: Vec<OwnedFd>) -> EventWaiter {
        EventWaiter { fds }
    }

    /// Waits at most `timeout` (rounded up to whole milliseconds) until one of the descriptors
    /// is readable (`poll(2)`, `POLLIN`): `Ok(true)` when one is (events are pending),
    /// `Ok(false)` when the time passed or a signal interrupted the wait.
    ///
    /// # Errors
    /// `BrokenPipe` when a descriptor hung up or reports an error (`POLLHUP`, `POLLERR`,
    /// `POLLNVAL`: the device's channel is gone, no event will come); another `poll(2)` error
    /// as it is.
    pub fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        let fds: Vec<_> = self.fds.iter().map(|f| f.as_fd()).collect();
        ffi::poll_readable(&fds, timeout)
    }
}
