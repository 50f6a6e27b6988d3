//! librdmacm's events: `rdma_get_cm_event` (blocking on the channel's descriptor, then the
//! librdmacm-side fetch-time work of cm-core, then the C event of `cm_id.rs`),
//! `rdma_ack_cm_event`, `rdma_event_str`.

use super::cm_id::make_event;
use super::objects::{ChannelBox, EventBox};
use super::{errno_of, fail, guard, rt};
use crate::abi::*;
use libc::{c_char, c_int};
use std::sync::Arc;

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard("rdma_get_cm_event", -1, || {
        let (Ok(r), false) = (rt(), channel.is_null() || event.is_null()) else {
            return fail(libc::EINVAL);
        };
        let cb = channel.cast::<ChannelBox>();
        // SAFETY: `channel` came from `rdma_create_event_channel`; the Arc keeps its descriptors
        // alive while this thread waits outside every lock.
        let (ch, fd) = unsafe { ((*cb).handle, Arc::clone(&(*cb).fd)) };
        loop {
            if !r.with_quiet(|n, _| n.cm_signals.contains_key(&ch)) {
                // Destroyed while this thread waited (see `rdma_destroy_event_channel`): sleep
                // for good, as a reader of the kernel's channel does once it is closed under
                // it (its `read` holds the file, so the close neither ends nor wakes it).
                loop {
                    std::thread::park();
                }
            }
            if let Err(e) = r.wait_token_or_progress(&fd) {
                return fail(e.raw_os_error().unwrap_or(libc::EIO));
            }
            let got = r.with(|n, now| {
                if let Some(s) = n.cm_signals.get_mut(&ch) {
                    s.claimed();
                }
                let (cm, dev) = n.split();
                match cm.get_cm_event(dev, now, ch) {
                    Ok(ev) => Some(make_event(n, ev, channel)),
                    Err(_) => None,
                }
            });
            if let Some(p) = got {
                // SAFETY: `p` was just made by `make_event`.
                let (ev, st) = unsafe { ((*p).event.event, (*p).c.status) };
                if crate::check::enabled() {
                    // SAFETY: as above.
                    let (kind, id, listen) =
                        unsafe { ((*p).c.event, (*p).c.id as usize, (*p).c.listen_id as usize) };
                    note_fetched(p as usize, kind, id, listen);
                }
                tracing::debug!("rdma_get_cm_event: {ev:?} status {st}");
                // SAFETY: `event` is a writable out-parameter (rdma_get_cm_event(3)).
                unsafe { *event = p.cast() };
                return 0;
            }
        }
    })
}

/// Tells the checker that event `event` of type `kind` was returned for `id` (`listen`: its
/// listener, for a CONNECT_REQUEST, whose unacked events it counts in as librdmacm's
/// `evt->id_priv`).
fn note_fetched(event: usize, kind: u32, id: usize, listen: usize) {
    let kind = crate::check::counts::cm_event_name(kind);
    let counted_against = if kind == "RDMA_CM_EVENT_CONNECT_REQUEST" && listen != 0 {
        listen
    } else {
        id
    };
    let f = crate::check::state::Fetched {
        counted_against,
        kind,
        thread: std::thread::current().id(),
        at_ms: crate::check::now_ms(),
    };
    crate::check::with_state(|s| s.fetched(event, id, f));
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard("rdma_ack_cm_event", -1, || {
        let (Ok(r), false) = (rt(), event.is_null()) else {
            return fail(libc::EINVAL);
        };
        crate::check::with_state(|s| s.acked(event as usize));
        // SAFETY: `event` came from `rdma_get_cm_event` and is acked once.
        let b = unsafe { Box::from_raw(event.cast::<EventBox>()) };
        let res = r.with(|n, _| n.split().0.ack_cm_event(b.event.clone()));
        r.note_ack();
        match res {
            Ok(()) => 0,
            Err(e) => fail(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    guard("rdma_event_str", c"UNKNOWN EVENT".as_ptr(), || {
        const NAMES: [&std::ffi::CStr; 19] = [
            c"RDMA_CM_EVENT_ADDR_RESOLVED",
            c"RDMA_CM_EVENT_ADDR_ERROR",
            c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            c"RDMA_CM_EVENT_ROUTE_ERROR",
            c"RDMA_CM_EVENT_CONNECT_REQUEST",
            c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            c"RDMA_CM_EVENT_CONNECT_ERROR",
            c"RDMA_CM_EVENT_UNREACHABLE",
            c"RDMA_CM_EVENT_REJECTED",
            c"RDMA_CM_EVENT_ESTABLISHED",
            c"RDMA_CM_EVENT_DISCONNECTED",
            c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            c"RDMA_CM_EVENT_MULTICAST_JOIN",
            c"RDMA_CM_EVENT_MULTICAST_ERROR",
            c"RDMA_CM_EVENT_ADDR_CHANGE",
            c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
            c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
            c"RDMA_CM_EVENT_ADDRINFO_ERROR",
            c"RDMA_CM_EVENT_USER",
        ];
        usize::try_from(event)
            .ok()
            .and_then(|i| NAMES.get(i))
            .map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
    })
}
