//! The entry points of librdmacm's synchronous ids: `rdma_get_request` and `rdma_migrate_id`
//! (the waiting and bookkeeping they share with the other calls are in `cm_sync.rs`).

use super::cm_id::{free_private_channel, idbox, make_event, private_channel};
use super::cm_qp::rdma_create_qp;
use super::cm_sync::{refresh_event, wait_sync};
use super::objects::ChannelBox;
use super::{errno_of, fail, guard, rt};
use crate::abi::*;
use libc::c_int;
use verbs_core::Error;

/// `rdma_get_request(listen, &id)` on a synchronous listener: blocks until the next event of
/// the listener's private channel; for a CONNECT_REQUEST, `*id` is the new id — synchronous,
/// on a private channel of its own, `id->event` the request — and when the listener was made
/// by `rdma_create_ep` with QP attributes, its QP is made with them on the listener's PD
/// (librdmacm `rdma_get_request`).
///
/// Errors (−1 + errno): `EINVAL` for a NULL argument, a listener that is not synchronous, or
/// an event that is not a CONNECT_REQUEST; `ECONNREFUSED` for REJECTED; the errno of another
/// failed event (the event is then the listener's `id->event`); `EAGAIN` when the listener's
/// channel fd is `O_NONBLOCK` and nothing is queued; `rdma_create_qp`'s errno.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    guard("rdma_get_request", -1, || {
        let (Ok(r), false) = (rt(), listen.is_null() || id.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `listen` is an id of this library.
        let (lh, channel) = unsafe { (idbox(listen).handle, (*listen).channel) };
        if r.with_quiet(|n, _| n.cm().is_sync(lh)) != Some(true) {
            return fail(libc::EINVAL);
        }
        // SAFETY: a synchronous listener's channel is its private `ChannelBox`.
        let got = unsafe {
            wait_sync(r, channel, |n, now| {
                let (cm, dev) = n.split();
                let res = cm.get_request(dev, now, lh);
                // SAFETY: `listen` is live.
                refresh_event(n, listen);
                let new = res?;
                let ev = n
                    .cm()
                    .sync_event(new)
                    .cloned()
                    .ok_or_else(|| Error::inval("rdma_get_request: request not kept"))?;
                let b = make_event(n, ev, channel);
                // SAFETY: `b` was just made; its `id` is the new id's box.
                let p = (*b).c.id;
                (*p).event = b.cast();
                Ok(p)
            })
        };
        let new = match got {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        // SAFETY: `listen` is live; `qp_init_attr` is a copy.
        if let Some(mut attr) = unsafe { idbox(listen).qp_init_attr } {
            // SAFETY: `new` is a live id of this library, `attr` a local.
            if unsafe { rdma_create_qp(new, (*listen).pd, &mut attr) } != 0 {
                return -1;
            }
        }
        tracing::debug!(listen = lh.0, "rdma_get_request: a request");
        // SAFETY: `id` is a writable out-parameter (rdma_get_request(3)).
        unsafe { *id = new };
        0
    })
}

/// `rdma_migrate_id(id, channel)`: the id and its unread events move to `channel`, then the
/// call waits until every event returned for the id is acked (librdmacm's wait). A NULL
/// `channel` makes the id synchronous on a private channel of its own (`EINVAL` if it is
/// synchronous already); a synchronous id that moves to a channel loses its `id->event`
/// (acked) and its private channel (librdmacm `rdma_migrate_id`).
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    guard("rdma_migrate_id", -1, || {
        let (Ok(r), false) = (rt(), id.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is an id of this library, `channel` NULL or from
        // `rdma_create_event_channel`.
        let (h, to) = unsafe {
            (
                idbox(id).handle,
                (!channel.is_null()).then(|| (*channel.cast::<ChannelBox>()).handle),
            )
        };
        let res = r.with(|n, _| {
            let was_sync = n.cm().is_sync(h) == Some(true);
            // SAFETY: `id` is live.
            let old = unsafe { (*id).channel };
            n.split().0.migrate_id(h, to).map_err(|e| errno_of(&e))?;
            let new = match to {
                Some(_) => channel,
                None => {
                    let made = n
                        .cm()
                        .channel_of(h)
                        .ok_or(libc::EINVAL)
                        .and_then(|ch| private_channel(n, ch));
                    match made {
                        Ok(c) => c,
                        Err(e) => {
                            // Back where it was (this destroys the private channel).
                            // SAFETY: `old` is the id's (non-private) channel box.
                            let back = unsafe { (*old.cast::<ChannelBox>()).handle };
                            let _ = n.split().0.migrate_id(h, Some(back));
                            return Err(e);
                        }
                    }
                }
            };
            // SAFETY: `id` is live; `old` was its private channel when it was synchronous.
            unsafe {
                (*id).channel = new;
                if was_sync {
                    refresh_event(n, id);
                    free_private_channel(n, old);
                }
            }
            Ok(())
        });
        if let Err(e) = res {
            return fail(e);
        }
        r.wait_for_acks(|| r.with_quiet(|n, _| n.cm().unacked_events(h) == 0));
        0
    })
}
