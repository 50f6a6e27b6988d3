//! Readiness of event and completion channels as real file descriptors.
//!
//! Every `struct rdma_event_channel` and `struct ibv_comp_channel` the library hands out has an
//! `fd`, and every `struct ibv_context` an `async_fd`, the application may `poll()`/`select()`/
//! epoll on, as with the kernel's character devices, where the fd is readable exactly while the
//! channel (or the device, for async events) has an unread event. Here the fd
//! is one end of a local stream socket pair, and the channel's unclaimed events are that many
//! one-byte tokens queued on it: the node tops the tokens up after every step that may queue
//! events ([`Signal::raise_to`]), and withdraws those of events that went away unread (an unread
//! CONNECT_REQUEST or TIMEWAIT_EXIT of an id the application destroyed, as the kernel's
//! `ucma_destroy_id` drops them) by reading them back without blocking (`MSG_DONTWAIT`, which
//! works whatever the application did to the fd's flags). A reader claims one event by reading
//! one token ([`wait_token`]): that blocks while there is none, unless the application set
//! `O_NONBLOCK` on the fd, where it fails with `EAGAIN` — the two behaviours of
//! `rdma_get_cm_event`, `ibv_get_cq_event` and `ibv_get_async_event`.

use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

/// The two ends: the application's (read) and the node's (write). Both close together, when
/// the last holder drops them (closing only the node's end would make the application's end
/// report end-of-file, readable, to a thread still polling it).
#[derive(Debug)]
pub struct Ends {
    app: OwnedFd,
    node: OwnedFd,
}

/// One channel's descriptor and how many tokens it was given that no reader has claimed.
#[derive(Debug, Clone)]
pub struct Signal {
    ends: Arc<Ends>,
    raised: u64,
}

impl Ends {
    /// A new descriptor (close-on-exec) for the application's end ([`Signal::dup_app`]).
    ///
    /// # Errors
    /// What `fcntl(F_DUPFD_CLOEXEC)` returns (e.g. `EMFILE`).
    pub fn dup_app(&self) -> io::Result<OwnedFd> {
        self.app.try_clone()
    }

    /// The application's end, to poll for readiness without taking a token (rsockets).
    pub fn app_fd(&self) -> BorrowedFd<'_> {
        self.app.as_fd()
    }
}

impl Signal {
    /// A new, empty channel descriptor (close-on-exec, blocking).
    ///
    /// # Errors
    /// What `socketpair(2)` returns (e.g. `EMFILE`).
    pub fn new() -> io::Result<Signal> {
        let (app, node) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        Ok(Signal {
            ends: Arc::new(Ends { app, node }),
            raised: 0,
        })
    }

    /// The descriptor number the application sees as `channel->fd`.
    pub fn raw_fd(&self) -> RawFd {
        self.ends.app.as_raw_fd()
    }

    /// The descriptor pair, to wait on outside the node lock.
    pub fn ends(&self) -> Arc<Ends> {
        Arc::clone(&self.ends)
    }

    /// A new descriptor (close-on-exec) for the application's end: the same socket, so the
    /// same readiness and the same file status flags (`O_NONBLOCK` set through either applies
    /// to both), closed on its own. Each `ibv_context` gets one as its `async_fd`.
    ///
    /// # Errors
    /// What `fcntl(F_DUPFD_CLOEXEC)` returns (e.g. `EMFILE`).
    pub fn dup_app(&self) -> io::Result<OwnedFd> {
        self.ends.dup_app()
    }

    /// Makes the tokens match `queued` events: adds those of events queued since the last call,
    /// withdraws those of events that disappeared unread. Never blocks.
    pub fn raise_to(&mut self, queued: u64) {
        while self.raised < queued {
            let n = usize::try_from(queued - self.raised)
                .unwrap_or(usize::MAX)
                .min(4096);
            let ones = [1u8; 4096];
            match send(
                self.ends.node.as_raw_fd(),
                &ones[..n],
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(sent) if sent > 0 => self.raised += sent as u64,
                // A full socket buffer (thousands of unread events): readable all the same.
                _ => break,
            }
        }
        let mut byte = [0u8; 1];
        while self.raised > queued {
            // A token a reader already took is not here: that reader finds no event and
            // waits again, and its `claimed` settles the count.
            match recv(self.ends.app.as_raw_fd(), &mut byte, MsgFlags::MSG_DONTWAIT) {
                Ok(1) => self.raised -= 1,
                _ => break,
            }
        }
    }

    /// A reader consumed one token.
    pub fn claimed(&mut self) {
        self.raised = self.raised.saturating_sub(1);
    }
}

/// Waits for and consumes one token: blocks while there is none, unless the application made
/// the descriptor non-blocking (`EAGAIN` then).
///
/// A signal that interrupts the wait ends it with `EINTR`, as it ends the `read(2)` inside
/// libibverbs's `ibv_get_cq_event` and librdmacm's `rdma_get_cm_event` (unless the handler was
/// installed with `SA_RESTART`, where the kernel restarts the call, here as there): qperf ends
/// its timed tests with SIGALRM and relies on it.
///
/// # Errors
/// `EAGAIN` on a non-blocking descriptor with no token; `EINTR`; another `recv(2)` error.
pub fn wait_token(ends: &Ends) -> io::Result<()> {
    take_token(ends, MsgFlags::empty())
}

/// Consumes one token if there is one, never blocking (`EAGAIN` when there is none).
///
/// # Errors
/// `EAGAIN` with no token; another `recv(2)` error.
pub fn try_token(ends: &Ends) -> io::Result<()> {
    take_token(ends, MsgFlags::MSG_DONTWAIT)
}

/// Whether the application made the descriptor non-blocking (`O_NONBLOCK`), where a wait for a
/// token fails with `EAGAIN` rather than blocks. An `fcntl` error counts as blocking.
pub fn is_nonblocking(ends: &Ends) -> bool {
    nix::fcntl::fcntl(&ends.app, nix::fcntl::FcntlArg::F_GETFL).is_ok_and(|f| {
        nix::fcntl::OFlag::from_bits_truncate(f).contains(nix::fcntl::OFlag::O_NONBLOCK)
    })
}

fn take_token(ends: &Ends, flags: MsgFlags) -> io::Result<()> {
    let mut byte = [0u8; 1];
    match recv(ends.app.as_raw_fd(), &mut byte, flags) {
        Ok(1) => Ok(()),
        Ok(_) => Err(io::Error::from_raw_os_error(libc::EIO)),
        Err(e) => Err(io::Error::from(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;

    fn readable(s: &Signal) -> bool {
        let mut fds = [PollFd::new(s.ends.app.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).unwrap_or(0) == 1
    }

    #[test]
    fn readable_exactly_while_events_are_queued() {
        let Ok(mut s) = Signal::new() else {
            panic!("socketpair")
        };
        assert!(!readable(&s));
        s.raise_to(2);
        assert!(readable(&s));
        assert!(wait_token(&s.ends).is_ok());
        s.claimed();
        assert!(readable(&s));
        // the second event went away unread: its token is withdrawn
        s.raise_to(0);
        assert!(!readable(&s));
        s.raise_to(1);
        assert!(readable(&s));
    }

    #[test]
    fn a_duplicate_shares_readiness_and_closes_alone() {
        let Ok(mut s) = Signal::new() else {
            panic!("socketpair")
        };
        let Ok(dup) = s.dup_app() else { panic!("dup") };
        let dup_readable = |fd: &OwnedFd| {
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::ZERO).unwrap_or(0) == 1
        };
        assert!(!dup_readable(&dup));
        s.raise_to(1);
        assert!(dup_readable(&dup));
        drop(dup);
        assert!(readable(&s));
        assert!(wait_token(&s.ends).is_ok());
        s.claimed();
        assert!(!readable(&s));
    }

    #[test]
    fn a_non_blocking_descriptor_reports_eagain() {
        let Ok(s) = Signal::new() else {
            panic!("socketpair")
        };
        let fd = s.ends.app.as_fd();
        let flags = fcntl(fd, FcntlArg::F_GETFL).unwrap_or(0);
        let set = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
        assert!(fcntl(fd, FcntlArg::F_SETFL(set)).is_ok());
        let e = wait_token(&s.ends).err().and_then(|e| e.raw_os_error());
        assert_eq!(e, Some(libc::EAGAIN));
    }
}
