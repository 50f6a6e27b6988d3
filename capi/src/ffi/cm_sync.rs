//! librdmacm's synchronous ids: `rdma_create_id` with a NULL channel, the wait at the end of
//! every call that raises an event on such an id (`ucma_complete`), and the bookkeeping the
//! entry points share (the entry points of their own, `rdma_get_request` and
//! `rdma_migrate_id`, are in `cm_sync_api.rs`; the C objects in `cm_id.rs`).
//!
//! rdma-core `librdmacm/cma.c`: `ucma_alloc_id` gives an id created without a channel a
//! channel of its own (`rdma_create_event_channel`) and sets `id_priv->sync`;
//! `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`, `rdma_accept` (RC) and
//! `rdma_disconnect` end in `ucma_complete`, which acks the previous `id->event`, blocks in
//! `rdma_get_cm_event` on that channel and keeps the event as `id->event`: 0 for status 0,
//! else −1 with `ECONNREFUSED` (REJECTED) or the status's errno. cm-core does the bookkeeping
//! (`RdmaCm::create_sync_id`, `complete`, `get_request`, `migrate_id`, `sync_event`); this
//! file adds the C side: blocking on the private channel (a pollable fd, as librdmacm's is)
//! and keeping the C event `id->event` points at.

use super::cm_id::{free_private_channel, idbox, make_event, private_channel};
use super::objects::{leak, registry, ChannelBox, EventBox, IdBox};
use super::{errno_of, fail, rt};
use crate::abi::*;
use crate::runtime::{wait_token, Node, Runtime};
use cm_core::api::CmIdHandle;
use cm_core::wire::RdmaPortSpace;
use libc::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::Arc;
use verbs_core::{Errno, Error, SimTime};

/// Makes `id->event` the C form of the event cm-core keeps for the id (`RdmaCm::sync_event`):
/// the previous C event is freed once cm-core has acked it (librdmacm frees it in
/// `rdma_ack_cm_event`), a new one is made for a new kept event.
///
/// # Safety
/// `id` is a live id of this library.
pub(super) unsafe fn refresh_event(n: &mut Node, id: *mut rdma_cm_id) {
    // SAFETY: the caller's contract.
    let (h, cur, channel) = unsafe {
        (
            idbox(id).handle,
            (*id).event.cast::<EventBox>(),
            (*id).channel,
        )
    };
    let kept = n.cm().sync_event(h).cloned();
    // SAFETY: `cur` is NULL or the `EventBox` this function made.
    if !cur.is_null() && kept.as_ref() == Some(unsafe { &(*cur).event }) {
        return;
    }
    // SAFETY: as above; the box is freed once and the pointer cleared.
    unsafe {
        if !cur.is_null() {
            drop(Box::from_raw(cur));
            (*id).event = null_mut();
        }
        if let Some(ev) = kept {
            (*id).event = make_event(n, ev, channel).cast();
        }
    }
}

/// Blocks on `channel` (a synchronous id's private channel) until `step` has an answer other
/// than `EAGAIN`: librdmacm's blocking `rdma_get_cm_event` inside `ucma_complete` and
/// `rdma_get_request`. `EAGAIN` also when the application made the channel's fd
/// `O_NONBLOCK` and nothing is there, as librdmacm's `read` returns.
///
/// # Safety
/// `channel` is a live `ChannelBox` of this library.
pub(super) unsafe fn wait_sync<T>(
    r: &Runtime,
    channel: *mut rdma_event_channel,
    mut step: impl FnMut(&mut Node, SimTime) -> Result<T, Error>,
) -> Result<T, i32> {
    let cb = channel.cast::<ChannelBox>();
    // SAFETY: the caller's contract; the Arc keeps the descriptors while this thread waits.
    let (ch, fd) = unsafe { ((*cb).handle, Arc::clone(&(*cb).fd)) };
    loop {
        r.caller_sleeps();
        wait_token(&fd).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let got = r.with(|n, now| {
            if let Some(s) = n.cm_signals.get_mut(&ch) {
                s.claimed();
            }
            step(n, now)
        });
        match got {
            Err(e) if e.errno == Errno::EAGAIN => continue,
            other => return other.map_err(|e| errno_of(&e)),
        }
    }
}

/// `ucma_complete` after a call on `id` that returned `ret`: for a synchronous id whose call
/// succeeded, waits for the id's next event, keeps it as `id->event` and returns 0 for
/// status 0, else −1 with `ECONNREFUSED` (REJECTED), `ETIMEDOUT` (UNREACHABLE, status
/// −110), `EPERM` (CONNECT_ERROR) or the status's errno (`RdmaCm::complete`). `ret` as it
/// is otherwise.
///
/// # Safety
/// `id` is NULL or a live id of this library.
pub(super) unsafe fn complete_after(ret: c_int, id: *mut rdma_cm_id) -> c_int {
    let (0, false, Ok(r)) = (ret, id.is_null(), rt()) else {
        return ret;
    };
    // SAFETY: the caller's contract.
    let (h, channel) = unsafe { (idbox(id).handle, (*id).channel) };
    if r.with_quiet(|n, _| n.cm().is_sync(h)) != Some(true) {
        return 0;
    }
    // SAFETY: a synchronous id's channel is its private `ChannelBox`.
    let res = unsafe {
        wait_sync(r, channel, |n, now| {
            let (cm, dev) = n.split();
            let res = cm.complete(dev, now, h);
            // SAFETY: `id` is live (the caller's contract).
            refresh_event(n, id);
            res
        })
    };
    tracing::debug!(id = h.0, "ucma_complete: {res:?}");
    match res {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `rdma_create_id(NULL, …)`: a synchronous id on a private channel (librdmacm
/// `ucma_alloc_id`), its `channel` the private channel's struct.
///
/// # Errors
/// An errno: the CM's refusal, or `EMFILE` when the descriptor pair cannot be made.
pub(super) fn create_sync_id(
    r: &Runtime,
    context: *mut c_void,
    ps: rdma_port_space,
    space: RdmaPortSpace,
    qp_type: ibv_qp_type,
) -> Result<*mut IdBox, i32> {
    r.with(|n, now| {
        let h = n
            .split()
            .0
            .create_sync_id(space)
            .map_err(|e| errno_of(&e))?;
        let made = n
            .cm()
            .channel_of(h)
            .ok_or(libc::EINVAL)
            .and_then(|ch| private_channel(n, ch));
        let channel = match made {
            Ok(c) => c,
            Err(e) => {
                let (cm, dev) = n.split();
                let _ = cm.destroy_id(dev, now, h); // destroys the private channel too
                return Err(e);
            }
        };
        let p = leak(IdBox::new(h, channel, context, ps, qp_type));
        registry().ids.insert(h, p as usize);
        Ok(p)
    })
}

/// The end of `rdma_destroy_id` on an id cm-core has destroyed: frees the C form of its
/// kept event (cm-core acked it) and, for a synchronous id, its private channel (librdmacm
/// `ucma_free_id`). `private` is the id's channel if it was synchronous.
///
/// # Safety
/// `id` is the id just destroyed in the CM, not freed yet; `private` NULL or its private
/// channel.
pub(super) unsafe fn release_sync(
    r: &Runtime,
    id: *mut rdma_cm_id,
    private: *mut rdma_event_channel,
) {
    // SAFETY: the caller's contract.
    let ev = unsafe { (*id).event.cast::<EventBox>() };
    r.with_quiet(|n, _| {
        // SAFETY: the caller's contract; each box is freed once.
        unsafe {
            if !ev.is_null() {
                drop(Box::from_raw(ev));
                (*id).event = null_mut();
            }
            free_private_channel(n, private);
        }
    });
}

/// The channel of `id` if it is synchronous (its private channel), else NULL.
///
/// # Safety
/// `id` is a live id of this library.
pub(super) unsafe fn private_of(r: &Runtime, id: *mut rdma_cm_id) -> *mut rdma_event_channel {
    // SAFETY: the caller's contract.
    let h = unsafe { idbox(id).handle };
    if r.with_quiet(|n, _| n.cm().is_sync(h)) == Some(true) {
        // SAFETY: as above.
        unsafe { (*id).channel }
    } else {
        null_mut()
    }
}

/// Whether `rdma_destroy_id` may go on: every event returned for the id is acked, but for the
/// one a synchronous call keeps as `id->event`, which the destroy acks itself (librdmacm
/// `rdma_destroy_id`: `rdma_ack_cm_event(id->event)` before its wait).
pub(super) fn only_kept_unacked(n: &Node, h: CmIdHandle) -> bool {
    let cm = n.cm();
    cm.unacked_events(h) <= usize::from(cm.sync_event(h).is_some())
}
