//! Readiness of event and completion channels as real file descriptors.
//!
//! Every `struct rdma_event_channel` and `struct ibv_comp_channel` the library hands out has an
//! `fd` the application may `poll()`/`select()` on, as with the kernel's character devices. Here
//! it is an eventfd in semaphore mode (`EFD_SEMAPHORE`): its count is the number of events
//! queued for the channel that no reader has claimed yet. The node raises it after every step
//! that may queue events ([`Signal::raise_to`]); a reader claims one event by reading the fd
//! (which blocks while the count is 0, unless the application set `O_NONBLOCK` on it), then
//! takes the event under the node lock and calls [`Signal::claimed`].
//!
//! An event that disappears before it is read (an unread CONNECT_REQUEST of a destroyed
//! listener) leaves a token behind: the reader then finds no event and waits again, as after a
//! spurious wake-up.

use nix::sys::eventfd::{EfdFlags, EventFd};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;

/// One channel's eventfd and how many tokens it has been given that no reader has claimed.
#[derive(Debug, Clone)]
pub struct Signal {
    fd: Arc<EventFd>,
    raised: u64,
}

impl Signal {
    /// A new eventfd (semaphore mode, close-on-exec, blocking) with count 0.
    ///
    /// # Errors
    /// What `eventfd(2)` returns (e.g. `EMFILE`).
    pub fn new() -> io::Result<Signal> {
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_SEMAPHORE | EfdFlags::EFD_CLOEXEC)
            .map_err(io::Error::from)?;
        Ok(Signal {
            fd: Arc::new(fd),
            raised: 0,
        })
    }

    /// The descriptor number the application sees as `channel->fd`.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }

    /// The eventfd, to wait on outside the node lock.
    pub fn fd(&self) -> Arc<EventFd> {
        Arc::clone(&self.fd)
    }

    /// Makes the count cover `queued` events: adds the tokens of events queued since the last
    /// call. Never blocks (an eventfd write blocks only near `u64::MAX`).
    pub fn raise_to(&mut self, queued: u64) {
        if queued > self.raised {
            let more = queued - self.raised;
            if self.fd.write(more).is_ok() {
                self.raised = queued;
            }
        }
    }

    /// A reader consumed one token.
    pub fn claimed(&mut self) {
        self.raised = self.raised.saturating_sub(1);
    }
}

/// Waits for and consumes one token of `fd`: blocks while the count is 0, unless the
/// descriptor is non-blocking (`O_NONBLOCK` set by the application), where it fails with
/// `EAGAIN`. `EINTR` is retried.
///
/// # Errors
/// `EAGAIN` on a non-blocking descriptor with no token; another `read(2)` error.
pub fn wait_token(fd: &EventFd) -> io::Result<()> {
    let mut buf = [0u8; 8];
    loop {
        match nix::unistd::read(fd.as_fd(), &mut buf) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}
