//! Async events: each context's `async_fd`, `ibv_get_async_event`, `ibv_ack_async_event`,
//! `ibv_event_type_str`.
//!
//! The simulated device has one queue of async events (rnic-sim's `SimDevice`: a CQ overrun
//! raises `CQ_ERR`, the first packet on an RTR QP `COMM_EST`). With libibverbs every context has
//! its own kernel file and gets every event of its device; here there is one device and one
//! queue for the process, so the contexts share it: each event goes to whichever context reads
//! it first (as each goes to one of several threads reading one context with libibverbs). The
//! queue's readiness is one [`crate::runtime::Signal`] of the node ([`Node::async_fd`]), topped
//! up after every step like the channels' (`docs/capi.md`, "Channels are file descriptors");
//! each context's `async_fd` is a duplicate of its descriptor, so `poll()`, `select()` and epoll
//! on it work, and `O_NONBLOCK` set on it makes `ibv_get_async_event` fail with `EAGAIN` (for
//! every context of the process: the duplicates share their file status flags).
//!
//! [`Node::async_fd`]: crate::runtime::Node::async_fd

use super::objects::registry;
use super::{fail, guard, rt};
use crate::abi::*;
use crate::runtime::wait_token;
use libc::c_int;
use std::os::fd::IntoRawFd;
use verbs_core::{AsyncElement, AsyncEvent, Device};

/// A new `async_fd` for a context (owned by it, closed by `ibv_close_device`); makes the node's
/// descriptor on the first call.
///
/// # Errors
/// `ENODEV` without a runtime; what `socketpair(2)` or `fcntl(F_DUPFD_CLOEXEC)` returned.
pub(super) fn new_async_fd() -> Result<c_int, i32> {
    // (A duplicate of the node's one descriptor: it carries the tokens already raised. No
    // lock is taken: rdma_cm makes its context from inside calls that hold the node.)
    rt()?
        .async_fd()
        .map(IntoRawFd::into_raw_fd)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))
}

/// The C form of a device event, or `None` when its object is gone (a CQ or QP the application
/// destroyed after the device queued the event: the event is skipped, as libibverbs's destroy
/// calls, which wait for the object's events to be acked, never let one be read after).
fn event_to_c(ev: &AsyncEvent) -> Option<ibv_async_event> {
    let element = match ev.element {
        AsyncElement::Qp(qpn) => ibv_async_event_element {
            qp: *registry().qps.get(&qpn)? as *mut ibv_qp,
        },
        AsyncElement::Cq(h) => ibv_async_event_element {
            cq: *registry().cqs.get(&h.0)? as *mut ibv_cq,
        },
        AsyncElement::Srq(h) => ibv_async_event_element {
            srq: *registry().srqs.get(&h.0)? as *mut ibv_srq,
        },
        AsyncElement::Port(p) => ibv_async_event_element {
            port_num: c_int::from(p),
        },
        // libibverbs fills `port_num` from the kernel's element for every other event; a
        // device event has none: all zero.
        AsyncElement::Device => ibv_async_event_element {
            cq: std::ptr::null_mut(),
        },
    };
    Some(ibv_async_event {
        element,
        // `AsyncEventType`'s values are `enum ibv_event_type`'s.
        event_type: ibv_event_type::from(ev.event_type as u8),
    })
}

/// Waits for the device's next async event and copies it into `*event` (man
/// ibv_get_async_event.3): blocks while there is none, unless the application set `O_NONBLOCK`
/// on `context->async_fd` (-1/`EAGAIN` then); a signal ends the wait with -1/`EINTR`, as it
/// ends libibverbs's `read(2)` of the async fd. 0, or -1 with `errno` (`EINVAL` for a NULL
/// argument). Events of a CQ or QP destroyed since they were queued are skipped.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    guard("ibv_get_async_event", -1, || {
        let (Ok(r), false) = (rt(), context.is_null() || event.is_null()) else {
            return fail(libc::EINVAL);
        };
        let fd = r.async_ends();
        loop {
            if let Err(e) = wait_token(fd) {
                return fail(e.raw_os_error().unwrap_or(libc::EIO));
            }
            let got = r.with(|n, _| {
                n.async_claimed();
                n.dev().get_async_event()
            });
            // No event: another context's reader took it first (its token is settled).
            let Some(c) = got.as_ref().and_then(event_to_c) else {
                continue;
            };
            // SAFETY: `event` is a writable `struct ibv_async_event` (ibv_get_async_event(3)).
            unsafe { event.write(c) };
            return 0;
        }
    })
}

/// Acknowledges an event of `ibv_get_async_event`: nothing to do. The event was copied into the
/// application's struct, and `ibv_destroy_cq`/`ibv_destroy_qp` do not wait for acks
/// (libibverbs counts them in `async_events_completed`/`events_completed` only for that wait),
/// so this touches nothing: not even the event's CQ or QP, which may be destroyed already.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}

/// The `ibv_event_type_str(3)` strings, as rdma-core 44 spells them (`unknown` past
/// `IBV_EVENT_WQ_FATAL`).
#[no_mangle]
pub unsafe extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const libc::c_char {
    guard("ibv_event_type_str", c"unknown".as_ptr(), || {
        const STRINGS: [&std::ffi::CStr; 20] = [
            c"CQ error",
            c"local work queue catastrophic error",
            c"invalid request local work queue error",
            c"local access violation work queue error",
            c"communication established",
            c"send queue drained",
            c"path migrated",
            c"path migration request error",
            c"local catastrophic error",
            c"port active",
            c"port error",
            c"LID change",
            c"P_Key change",
            c"SM change",
            c"SRQ catastrophic error",
            c"SRQ limit reached",
            c"last WQE reached",
            c"client reregistration",
            c"GID table change",
            c"WQ fatal",
        ];
        usize::try_from(event)
            .ok()
            .and_then(|i| STRINGS.get(i))
            .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
    })
}
