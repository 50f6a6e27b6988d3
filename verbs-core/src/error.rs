//! Errors that carry the errno rdma-core would set.
//!
//! libibverbs reports failures as a positive errno (the `ibv_post_*` calls return it, the others
//! set `errno` and return NULL or -1). Every fallible call of this crate returns an [`Error`] with
//! the same [`Errno`], so a behaviour can be compared 1:1 with a real stack.

use std::fmt;

/// A Linux errno value, numbered as in `<asm-generic/errno-base.h>` / `<asm-generic/errno.h>`.
///
/// Only the values the verbs and rdma_cm calls actually return are listed; [`Errno::from_raw`]
/// maps a raw number (from a real libibverbs) back, `None` for one not listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum Errno {
    /// Operation not permitted (1).
    EPERM = 1,
    /// No such entry (2), e.g. an unknown object handle.
    ENOENT = 2,
    /// I/O error (5).
    EIO = 5,
    /// No such device or address (6).
    ENXIO = 6,
    /// Bad file descriptor (9): a call on an rdma_cm event channel already destroyed (its
    /// descriptor closed, librdmacm `rdma_destroy_event_channel`).
    EBADF = 9,
    /// Resource temporarily unavailable (11): a non-blocking get found nothing.
    EAGAIN = 11,
    /// Out of memory (12): a queue is full (`ibv_post_send` beyond `max_send_wr`).
    ENOMEM = 12,
    /// Permission denied (13).
    EACCES = 13,
    /// Bad address (14).
    EFAULT = 14,
    /// Device or resource busy (16): destroying an object still in use.
    EBUSY = 16,
    /// Object exists (17).
    EEXIST = 17,
    /// No such device (19).
    ENODEV = 19,
    /// Invalid argument (22): bad attribute, illegal QP transition, post in a wrong state.
    EINVAL = 22,
    /// No space left (28).
    ENOSPC = 28,
    /// Function not implemented (38).
    ENOSYS = 38,
    /// No data available (61).
    ENODATA = 61,
    /// Protocol not supported (93).
    EPROTONOSUPPORT = 93,
    /// Operation not supported (95).
    EOPNOTSUPP = 95,
    /// Address family not supported (97): an IP-CM header with an IP version other than 4/6.
    EAFNOSUPPORT = 97,
    /// Address in use (98).
    EADDRINUSE = 98,
    /// Address not available (99).
    EADDRNOTAVAIL = 99,
    /// Network unreachable (101).
    ENETUNREACH = 101,
    /// Connection reset (104).
    ECONNRESET = 104,
    /// Already connected (106): `rdma_notify(IBV_EVENT_COMM_EST)` on a connection that is
    /// ESTABLISHED already (Linux `cm_establish`).
    EISCONN = 106,
    /// Connection timed out (110): CM retries exhausted (`status = -110`).
    ETIMEDOUT = 110,
    /// Connection refused (111): the peer rejected the connection.
    ECONNREFUSED = 111,
}

impl Errno {
    /// The numeric errno value (positive, as `errno` holds it).
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The value of a raw errno number, as a hardware backend receives it from libibverbs;
    /// `None` for a number this enum does not list (the caller picks a fallback, e.g. `EIO`).
    pub const fn from_raw(raw: i32) -> Option<Errno> {
        Some(match raw {
            1 => Errno::EPERM,
            2 => Errno::ENOENT,
            5 => Errno::EIO,
            6 => Errno::ENXIO,
            9 => Errno::EBADF,
            11 => Errno::EAGAIN,
            12 => Errno::ENOMEM,
            13 => Errno::EACCES,
            14 => Errno::EFAULT,
            16 => Errno::EBUSY,
            17 => Errno::EEXIST,
            19 => Errno::ENODEV,
            22 => Errno::EINVAL,
            28 => Errno::ENOSPC,
            38 => Errno::ENOSYS,
            61 => Errno::ENODATA,
            93 => Errno::EPROTONOSUPPORT,
            95 => Errno::EOPNOTSUPP,
            97 => Errno::EAFNOSUPPORT,
            98 => Errno::EADDRINUSE,
            99 => Errno::EADDRNOTAVAIL,
            101 => Errno::ENETUNREACH,
            104 => Errno::ECONNRESET,
            106 => Errno::EISCONN,
            110 => Errno::ETIMEDOUT,
            111 => Errno::ECONNREFUSED,
            _ => return None,
        })
    }

    /// The symbolic name, e.g. `"EINVAL"`.
    pub const fn name(self) -> &'static str {
        match self {
            Errno::EPERM => "EPERM",
            Errno::ENOENT => "ENOENT",
            Errno::EIO => "EIO",
            Errno::ENXIO => "ENXIO",
            Errno::EBADF => "EBADF",
            Errno::EAGAIN => "EAGAIN",
            Errno::ENOMEM => "ENOMEM",
            Errno::EACCES => "EACCES",
            Errno::EFAULT => "EFAULT",
            Errno::EBUSY => "EBUSY",
            Errno::EEXIST => "EEXIST",
            Errno::ENODEV => "ENODEV",
            Errno::EINVAL => "EINVAL",
            Errno::ENOSPC => "ENOSPC",
            Errno::ENOSYS => "ENOSYS",
            Errno::ENODATA => "ENODATA",
            Errno::EPROTONOSUPPORT => "EPROTONOSUPPORT",
            Errno::EOPNOTSUPP => "EOPNOTSUPP",
            Errno::EAFNOSUPPORT => "EAFNOSUPPORT",
            Errno::EADDRINUSE => "EADDRINUSE",
            Errno::EADDRNOTAVAIL => "EADDRNOTAVAIL",
            Errno::ENETUNREACH => "ENETUNREACH",
            Errno::ECONNRESET => "ECONNRESET",
            Errno::EISCONN => "EISCONN",
            Errno::ETIMEDOUT => "ETIMEDOUT",
            Errno::ECONNREFUSED => "ECONNREFUSED",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// A failed verbs call: the errno rdma-core would set and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {errno}")]
pub struct Error {
    /// The errno rdma-core would set for this failure.
    pub errno: Errno,
    /// A human-readable reason (not part of the comparable behaviour).
    pub what: String,
}

impl Error {
    /// An error with `errno` and a reason.
    pub fn new(errno: Errno, what: impl Into<String>) -> Self {
        Error {
            errno,
            what: what.into(),
        }
    }

    /// `EINVAL` with a reason.
    pub fn inval(what: impl Into<String>) -> Self {
        Error::new(Errno::EINVAL, what)
    }
}

/// Result of a verbs call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed `post_send`/`post_recv`: the error and the index of the first work request that was
/// not posted (libibverbs' `bad_wr`). Requests before `bad_wr` were posted; it and those after
/// were not [man:ibv_post_send.3].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {bad_wr} not posted: {error}")]
pub struct PostError {
    /// Why the request at `bad_wr` was refused.
    pub error: Error,
    /// Index into the posted slice of the first work request not posted.
    pub bad_wr: usize,
}

impl PostError {
    /// The errno, as `ibv_post_send` would return it.
    pub fn errno(&self) -> Errno {
        self.error.errno
    }
}

#[cfg(test)]
mod tests {
    use super::Errno;

    #[test]
    fn from_raw_inverts_code() {
        for raw in 0..200 {
            if let Some(e) = Errno::from_raw(raw) {
                assert_eq!(e.code(), raw, "{}", e.name());
            }
        }
        assert_eq!(Errno::from_raw(13), Some(Errno::EACCES));
        assert_eq!(Errno::from_raw(93), Some(Errno::EPROTONOSUPPORT));
        assert_eq!(Errno::from_raw(0), None);
        assert_eq!(Errno::from_raw(-22), None);
    }
}
