//! The checker's side of the entry points (`crate::check`): the pieces that read C objects or
//! install process-wide handlers — what is alive at exit, the report at `exit()` and on a
//! deadly signal.
//!
//! On a signal: for each of [`DEADLY`] whose disposition is still the default when the checker
//! starts, a handler that wakes the reporter thread (a byte down a pipe: async-signal-safe),
//! waits up to a second for its report, then lets the signal kill the process as it would have
//! (the handler is one-shot, `SA_RESETHAND`, and raises the signal again). A program that set
//! its own handler keeps it (and, if it then calls `exit()`, gets the report at exit). SIGKILL
//! cannot be caught: then `rnic exec` says that the report is missing.

use super::objects::{registry, ChannelBox, IdBox};
use super::{in_child, runtime};
use crate::check::state::{Live, LiveId};
use crate::check::{self, Exit};
use cm_core::api::{CmEventType, CmIdHandle};
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::collections::BTreeSet;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use verbs_core::CqHandle;

/// The signals whose default action ends the process and that get the report first.
const DEADLY: [Signal; 9] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGABRT,
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGFPE,
    Signal::SIGILL,
];

/// The pipe that wakes the reporter (write end) and the one it answers on (read end).
static WAKE: AtomicI32 = AtomicI32::new(-1);
static DONE: AtomicI32 = AtomicI32::new(-1);

/// Starts the checker's exit and signal reporting (once, when the runtime starts; after
/// `close_at_exit` is registered, so that the report runs first and sees what the program
/// left).
pub(super) fn install() {
    if !check::enabled() {
        return;
    }
    check::now_ms(); // the clock starts here
                     // SAFETY: `report_at_exit` is a plain `extern "C" fn()` that catches its own panics.
    unsafe { libc::atexit(report_at_exit) };
    let (Ok((wake_r, wake_w)), Ok((done_r, done_w))) = (
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC),
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC),
    ) else {
        return;
    };
    let reporter = std::thread::Builder::new()
        .name("rnic-check".into())
        .spawn(move || {
            let mut b = [0u8; 1];
            if nix::unistd::read(&wake_r, &mut b) == Ok(1) {
                let _ = check::finish(Exit::Signal(i32::from(b[0])));
                let _ = nix::unistd::write(&done_w, &[1]);
            }
        });
    if reporter.is_err() {
        return;
    }
    WAKE.store(wake_w.into_raw_fd(), Ordering::SeqCst);
    DONE.store(done_r.into_raw_fd(), Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESETHAND | SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in DEADLY {
        // SAFETY: querying then setting a disposition; `on_signal` is async-signal-safe.
        unsafe {
            let Ok(old) = sigaction(sig, &action) else {
                continue;
            };
            if old.handler() != SigHandler::SigDfl {
                let _ = sigaction(sig, &old); // the program's own: put it back
            }
        }
    }
}

/// The handler (see the module docs): only async-signal-safe calls.
extern "C" fn on_signal(sig: libc::c_int) {
    let (wake, done) = (WAKE.load(Ordering::Relaxed), DONE.load(Ordering::Relaxed));
    // A forked child has no reporter thread (and its history is the parent's).
    if !in_child() && wake >= 0 && done >= 0 {
        let b = [u8::try_from(sig).unwrap_or(0)];
        // SAFETY: write(2) and poll(2) on descriptors this module owns; async-signal-safe.
        unsafe {
            if libc::write(wake, b.as_ptr().cast(), 1) == 1 {
                let mut p = libc::pollfd {
                    fd: done,
                    events: libc::POLLIN,
                    revents: 0,
                };
                libc::poll(&mut p, 1, 1000);
            }
        }
    }
    // SAFETY: raise(3) is async-signal-safe; the disposition is the default again
    // (SA_RESETHAND), so the signal, pending until this handler returns, ends the process.
    unsafe { libc::raise(sig) };
}

/// What librnic's tables hold: the ids, QPs and CQs alive now, and the events queued for the
/// ids on the channels the program made.
fn live() -> Live {
    let reg = registry();
    let handles: Vec<(CmIdHandle, usize)> = reg.ids.iter().map(|(h, p)| (*h, *p)).collect();
    let qps: Vec<(usize, u32)> = reg.qps.iter().map(|(n, p)| (*p, *n)).collect();
    let ids: Vec<LiveId> = reg
        .ids
        .values()
        .map(|&p| {
            // SAFETY: registered ids are live boxes.
            let (channel, qp) = unsafe {
                let b = &*(p as *const IdBox);
                (b.c.channel as usize, b.c.qp as usize)
            };
            LiveId {
                id: p,
                channel,
                qp: qps.iter().any(|(q, _)| *q == qp).then_some(qp),
            }
        })
        .collect();
    let cqs: Vec<(u32, usize)> = reg.cqs.iter().map(|(h, p)| (*h, *p)).collect();
    drop(reg);
    let cqs = cqs.into_iter().map(|(h, p)| (p, cq_overran(h))).collect();
    Live {
        unfetched: unfetched(&ids, &handles),
        ids,
        qps,
        cqs,
    }
}

/// The events queued on the user channels of `ids` for one of them (by its `handles`): the
/// id, or the listener of a CONNECT_REQUEST, and the event's name.
fn unfetched(ids: &[LiveId], handles: &[(CmIdHandle, usize)]) -> Vec<(usize, &'static str)> {
    let tracked = check::with_state(|s| s.channels.clone()).unwrap_or_default();
    let channels: BTreeSet<usize> = ids
        .iter()
        .map(|i| i.channel)
        .filter(|c| tracked.contains(c))
        .collect();
    let ptr_of = |h| handles.iter().find(|(k, _)| *k == h).map(|(_, p)| *p);
    let Ok(r) = runtime() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in channels {
        // SAFETY: a channel of `rdma_create_event_channel`, whose box is never freed.
        let ch = unsafe { (*(c as *const ChannelBox)).handle };
        r.with_quiet(|n, _| {
            for e in n.cm().cma().queued(ch) {
                let id = match (e.event, e.listen_id) {
                    (CmEventType::ConnectRequest, Some(l)) => ptr_of(l),
                    _ => ptr_of(e.id),
                };
                if let Some(id) = id {
                    out.push((id, check::counts::cm_event_name(e.event as u32)));
                }
            }
        });
    }
    out
}

/// Whether CQ `h` overran (false without a runtime).
pub(super) fn cq_overran(h: u32) -> bool {
    runtime().is_ok_and(|r| r.with_quiet(|n, _| n.device().cq_overran(CqHandle(h))))
}

/// The report at `exit()`.
extern "C" fn report_at_exit() {
    super::guard("rnic check", (), || {
        if in_child() {
            return;
        }
        // On a thread of its own, as `close_at_exit`.
        if let Ok(t) = std::thread::Builder::new().spawn(|| {
            let _ = check::finish(Exit::Normal(&live()));
        }) {
            let _ = t.join();
        }
    })
}
