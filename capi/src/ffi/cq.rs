//! Completion channels and CQs: create/destroy, `ibv_get_cq_event`/`ibv_ack_cq_events`, and
//! the two CQ calls `<infiniband/verbs.h>` inlines through `context->ops` (`ibv_poll_cq`,
//! `ibv_req_notify_cq`). Return conventions as in [`super::verbs`].

use super::objects::{leak, registry, CompChannelBox, CqBox};
use super::{errno_of, fail, fail_null, guard, rt};
use crate::abi::convert::*;
use crate::abi::*;
use libc::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::Arc;
use verbs_core::{CqHandle, Device, WorkCompletion};

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    guard("ibv_create_comp_channel", null_mut(), || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail_null(e),
        };
        let made = r.with(|n, _| {
            n.add_comp_channel()
                .map(|(num, cs)| (num, cs.signal.raw_fd(), cs.signal.ends()))
        });
        match made {
            Ok((num, raw, fd)) => leak(CompChannelBox {
                c: ibv_comp_channel {
                    context,
                    fd: raw,
                    refcnt: 0,
                },
                num,
                fd,
            })
            .cast(),
            Err(e) => fail_null(e.raw_os_error().unwrap_or(libc::EMFILE)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard("ibv_destroy_comp_channel", libc::EIO, || {
        let (Ok(r), false) = (rt(), channel.is_null()) else {
            return libc::EINVAL;
        };
        let b = channel.cast::<CompChannelBox>();
        // SAFETY: `channel` came from `ibv_create_comp_channel` (a `CompChannelBox`).
        let (num, refcnt) = unsafe { ((*b).num, (*b).c.refcnt) };
        if refcnt > 0 {
            return libc::EBUSY; // CQs still report to it (libibverbs)
        }
        r.with(|n, _| n.comp.remove(&num));
        // SAFETY: as above; freed once.
        drop(unsafe { Box::from_raw(b) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard("ibv_create_cq", null_mut(), || {
        let Ok(cqe) = u32::try_from(cqe) else {
            return fail_null(libc::EINVAL);
        };
        if comp_vector != 0 {
            // The context has one completion vector (`num_comp_vectors` 1); the kernel's
            // `create_cq` refuses a vector past the device's.
            return fail_null(libc::EINVAL);
        }
        match make_cq(context, cqe, cq_context, channel) {
            Ok(cq) => cq.cast(),
            Err(e) => fail_null(e),
        }
    })
}

/// Makes a CQ of at least `cqe` entries reporting to `channel` (NULL: none): the device's CQ
/// and its box, registered under its handle. The body of `ibv_create_cq` and
/// `ibv_create_cq_ex`.
///
/// # Errors
/// `ENODEV` (no runtime), the device's errno (`EINVAL` past `max_cqe`).
pub(super) fn make_cq(
    context: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
) -> Result<*mut CqBox, i32> {
    let r = rt()?;
    let num = (!channel.is_null()).then(|| {
        // SAFETY: a non-NULL channel came from `ibv_create_comp_channel`.
        unsafe { (*channel.cast::<CompChannelBox>()).num }
    });
    let h = r
        .with(|n, _| {
            let ch = num
                .and_then(|k| n.comp.get(&k))
                .map(|cs| cs.channel.clone());
            n.dev().create_cq(cqe, ch.as_ref())
        })
        .map_err(|e| errno_of(&e))?;
    if !channel.is_null() {
        // SAFETY: as above; the count makes destroying the channel EBUSY.
        unsafe { (*channel).refcnt += 1 };
    }
    let cq = leak(CqBox::new(
        context,
        channel,
        cq_context,
        h.0,
        cqe.min(c_int::MAX as u32) as c_int,
    ));
    registry().cqs.insert(h.0, cq as usize);
    Ok(cq)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard("ibv_destroy_cq", libc::EIO, || {
        let (Ok(r), false) = (rt(), cq.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: `cq` came from `ibv_create_cq` and is not yet destroyed.
        let (h, channel) = unsafe { ((*cq).handle, (*cq).channel) };
        if crate::check::enabled() && super::check_hooks::cq_overran(h) {
            let at = crate::check::now_ms();
            crate::check::with_state(|s| s.overran(cq as usize, Some("ibv_destroy_cq"), at));
        }
        match r.with(|n, _| n.dev().destroy_cq(CqHandle(h))) {
            Ok(()) => {
                registry().cqs.remove(&h);
                if !channel.is_null() {
                    // SAFETY: the CQ's channel outlives it (its refcnt held it).
                    unsafe { (*channel).refcnt -= 1 };
                }
                // SAFETY: as above (every CQ is a `CqBox`); freed once.
                drop(unsafe { Box::from_raw(cq.cast::<CqBox>()) });
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard("ibv_get_cq_event", -1, || {
        let (Ok(r), false) = (rt(), channel.is_null() || cq.is_null()) else {
            return fail(libc::EINVAL);
        };
        let b = channel.cast::<CompChannelBox>();
        // SAFETY: `channel` came from `ibv_create_comp_channel`; the Arc keeps the descriptors
        // alive while this thread waits outside every lock.
        let (num, fd) = unsafe { ((*b).num, Arc::clone(&(*b).fd)) };
        loop {
            if let Err(e) = r.wait_token_or_progress(&fd) {
                return fail(e.raw_os_error().unwrap_or(libc::EIO));
            }
            let got = r.with(|n, _| {
                let cs = n.comp.get_mut(&num)?;
                cs.signal.claimed();
                cs.channel.try_get_cq_event().ok()
            });
            let Some(h) = got else { continue };
            let Some(&p) = registry().cqs.get(&h.0) else {
                continue; // the CQ was destroyed meanwhile
            };
            let p = p as *mut ibv_cq;
            // SAFETY: `cq`/`cq_context` are writable out-parameters; `p` is a live CQ.
            unsafe {
                *cq = p;
                if !cq_context.is_null() {
                    *cq_context = (*p).cq_context;
                }
            }
            return 0;
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: libc::c_uint) {
    guard("ibv_ack_cq_events", (), || {
        if !cq.is_null() {
            // SAFETY: a live CQ; only the application's event thread writes this counter.
            unsafe {
                (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents)
            };
        }
    })
}

/// `context->ops.req_notify_cq` (`ibv_req_notify_cq` is inline in verbs.h).
pub(super) unsafe extern "C" fn rnic_req_notify_cq(
    cq: *mut ibv_cq,
    solicited_only: c_int,
) -> c_int {
    guard("ibv_req_notify_cq", libc::EIO, || {
        let (Ok(r), false) = (rt(), cq.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live CQ of this library.
        let h = CqHandle(unsafe { (*cq).handle });
        // Arming a CQ is waiting for its event, not spinning on it.
        r.caller_sleeps();
        match r.with_quiet(|n, _| n.dev().req_notify_cq(h, solicited_only != 0)) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

thread_local! {
    static WC_BUF: std::cell::RefCell<Vec<WorkCompletion>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes up to `max` completions of CQ `h` into `buf` (cleared first); the count, or the
/// device's errno.
pub(super) fn poll_into(
    h: CqHandle,
    max: usize,
    buf: &mut Vec<WorkCompletion>,
) -> Result<usize, i32> {
    let r = rt()?;
    let max = r.completion_cap(max);
    buf.clear();
    r.with_quiet(|n, _| n.dev().poll_cq(h, max, buf))
        .map_err(|e| errno_of(&e))?;
    // An empty CQ: receive what the peer sent from this thread (a spinning poller would
    // otherwise wait for the progress thread to get a CPU), then look again.
    if buf.is_empty() && max > 0 && r.progress() {
        r.with_quiet(|n, _| n.dev().poll_cq(h, max, buf))
            .map_err(|e| errno_of(&e))?;
    }
    buf.truncate(max);
    if !buf.is_empty() {
        r.program_event(crate::inject::ProgramEvent::Completions(buf.len() as u64));
    }
    Ok(buf.len())
}

/// Takes the next completion of CQ `h`, if any.
pub(super) fn poll_device(h: CqHandle) -> Result<Option<WorkCompletion>, i32> {
    WC_BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        poll_into(h, 1, &mut buf)?;
        Ok(buf.pop())
    })
}

/// `context->ops.poll_cq` (`ibv_poll_cq` is inline in verbs.h): up to `num_entries`
/// completions into `wc`; the count, or a negative errno.
pub(super) unsafe extern "C" fn rnic_poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    guard("ibv_poll_cq", -libc::EIO, || {
        if cq.is_null() {
            return -libc::EINVAL;
        }
        let Ok(max) = usize::try_from(num_entries) else {
            return -libc::EINVAL;
        };
        if max > 0 && wc.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: a live CQ of this library.
        let h = CqHandle(unsafe { (*cq).handle });
        WC_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            let checking = crate::check::enabled();
            match poll_into(h, max, &mut buf) {
                Ok(n) => {
                    for (i, w) in buf.iter().enumerate() {
                        let c = wc_to_c(w);
                        if checking {
                            crate::check::counts::wc(c.status);
                        }
                        // SAFETY: `wc` holds `num_entries` writable entries (ibv_poll_cq(3)).
                        unsafe { wc.add(i).write(c) };
                    }
                    n as c_int
                }
                Err(e) => {
                    if checking && e == libc::EIO && super::check_hooks::cq_overran(h.0) {
                        let at = crate::check::now_ms();
                        crate::check::with_state(|s| {
                            s.overran(cq as usize, Some("ibv_poll_cq"), at)
                        });
                    }
                    -e
                }
            }
        })
    })
}
