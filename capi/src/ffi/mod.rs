//! The `extern "C"` entry points: the only module of the workspace with `unsafe` (besides the
//! hardware backend's). Every `unsafe` block carries a `// SAFETY:` comment
//! (`clippy::undocumented_unsafe_blocks` enforces it) and every entry point runs its body under
//! [`guard`], so a panic becomes an error return (`EIO`) and never unwinds into C.
//!
//! Pointer contract: every pointer the library hands out (device, context, PD, MR, CQ, QP, AH,
//! channels, ids, events, addrinfo lists) is a `Box` leaked to C whose first field is the C
//! struct; it is freed by the matching destroy call. A pointer an application passes in is
//! trusted to be one of those (or a buffer the C API says it must be), as libibverbs trusts it.
//!
//! Files: [`objects`] (the boxes and the handle → pointer registry), [`memory`] (user buffers
//! as MR memory), [`inherit`] (descriptors inherited from `rnic exec`), [`raw`] (the C ↔ Rust
//! conversions that need `unsafe`; the others are
//! `verbs_abi::convert`'s), [`verbs`] (`ibv_*`: devices, contexts, PDs, MRs), [`async_event`]
//! (`async_fd`, `ibv_get_async_event`), [`cq`] (completion channels, CQs), [`qp`] (QPs,
//! posting, AHs), [`srq`] (SRQs), [`ud`] (multicast attachment, AHs from a work completion);
//! librdmacm, from the bottom up: [`cm_id`] (the C side of an id:
//! its box, addresses, private channel and C events), [`cm_sync`] (the wait and bookkeeping of
//! synchronous ids), then the entry points: [`cm`] (`rdma_*`: channels, ids, connection calls),
//! [`cm_qp`] (QPs on ids), [`cm_mcast`] (multicast joins), [`cm_srq`] (SRQs on ids), [`cm_event`] (events), [`cm_sync_api`]
//! (`rdma_get_request`, `rdma_migrate_id`), [`cm_ep`] (`rdma_create_ep`, `rdma_destroy_ep`),
//! [`addrinfo`] (`rdma_getaddrinfo`), [`cm_ece`] (ECE); rsockets: [`rsocket`] (the socket
//! calls), [`rsocket_io`] (data and iomap calls), [`rpoll`] (`rpoll`, `rselect`), over the safe
//! `crate::runtime::rsocket`; the rest of libibverbs's public symbols: [`verbs_misc`] (the
//! calls with an answer here), [`verbs_unsupported`] (clean EOPNOTSUPP errors), [`marshall`]
//! (`ibv_copy_*_kern`); `prototypes` (the exports the hardware backend calls have
//! `verbs_abi::functions`' types, checked at compile time); [`check_hooks`] (the checker's
//! view of live objects, its report at exit and on a deadly signal); and [`calls`] (the entry points called from safe Rust
//! in-process: tests, the fuzzer). Dependencies go one way: an entry point file uses the files
//! below it, never another entry point file's helpers in a circle (`.ci/import-cycles`).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(clippy::missing_safety_doc)] // the C API's man pages are the safety contract

mod addrinfo;
mod async_event;
pub mod calls;
mod check_hooks;
mod cm;
mod cm_ece;
mod cm_ep;
mod cm_event;
mod cm_id;
mod cm_mcast;
mod cm_qp;
mod cm_srq;
mod cm_sync;
mod cm_sync_api;
mod context;
mod cq;
mod cq_ex;
mod fault;
mod inherit;
mod marshall;
mod memory;
mod objects;
mod prototypes;
mod qp;
mod qp_ex;
mod raw;
mod rpoll;
mod rsocket;
mod rsocket_io;
mod srq;
mod ud;
mod verbs;
mod verbs_misc;
mod verbs_unsupported;

use crate::runtime::Runtime;
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use verbs_core::Error;

/// Runs an entry point's body; a panic is logged and turns into `on_panic` with errno `EIO`.
fn guard<R>(name: &'static str, on_panic: R, f: impl FnOnce() -> R) -> R {
    if crate::check::enabled() {
        crate::check::counts::call();
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            // Not through `tracing`: a panic may come from it (e.g. at exit, when its
            // thread-locals are gone), and a second panic here would abort.
            eprintln!("librnic: panic in {name}: {what}");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// Sets the calling thread's `errno`.
fn set_errno(e: i32) {
    nix::errno::Errno::set_raw(e);
}

/// The errno of a verbs-core error (positive).
fn errno_of(e: &Error) -> i32 {
    e.errno.code()
}

/// The process's runtime, started on first use: under `rnic exec`, on the socket and state
/// file it inherited ([`inherit`]).
fn runtime() -> Result<&'static Runtime, &'static str> {
    crate::runtime::runtime_inheriting(inherit::take_fd)
}

/// The process that started the runtime (0 before it started).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Set in a child of `fork()` (a `pthread_atfork` child handler): the runtime is the parent's.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Whether this process is not the one that started the runtime: a child of `fork()` (its
/// progress thread did not survive the fork, its ids and socket are the parent's). Such a child
/// may make no verbs or rdma_cm call (each fails with `ENODEV`) and destroys nothing at exit,
/// as with rdma-core without `ibv_fork_init` (docs/capi.md, "fork()").
fn in_child() -> bool {
    FORKED.load(Ordering::Relaxed)
        || OWNER.load(Ordering::Relaxed) != 0 && OWNER.load(Ordering::Relaxed) != std::process::id()
}

/// The runtime, or `ENODEV` when it could not start (the reason was printed once) or this is a
/// forked child of the process that started it ([`in_child`]).
fn rt() -> Result<&'static Runtime, i32> {
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    if FORKED.load(Ordering::Relaxed) {
        return Err(libc::ENODEV);
    }
    let r = runtime().map_err(|_| libc::ENODEV)?;
    AT_EXIT.call_once(|| {
        OWNER.store(std::process::id(), Ordering::Relaxed);
        // SAFETY: `forked` is a plain `extern "C" fn()` that only stores to an atomic
        // (async-signal-safe, as a child handler must be).
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
        stats_at_exit(r.config().stats);
        // SAFETY: `close_at_exit` is a plain `extern "C" fn()` that catches its own panics.
        unsafe { libc::atexit(close_at_exit) };
        // Registered after `close_at_exit`, so it runs before it (atexit is LIFO).
        check_hooks::install();
    });
    Ok(r)
}

/// A call the library does not implement: logs its name once (`RUST_LOG=rnic=info` or the
/// default `warn` shows it) and returns the errno to report (`EOPNOTSUPP`).
fn unsupported(name: &'static str) -> i32 {
    static SEEN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let first = SEEN.lock().map(|mut s| s.insert(name)).unwrap_or(false);
    if first {
        tracing::warn!(
            call = name,
            "librnic: {name} is not implemented (EOPNOTSUPP)"
        );
    }
    libc::EOPNOTSUPP
}

/// At process exit, does what the kernel does when it closes a dying process's rdma_cm file:
/// destroys every id (`RdmaCm::close`), so the DREQ, DREP or REJ each state calls for leaves
/// before the process is gone, and peers see DISCONNECTED at once. Runs on `exit()` and a
/// return from `main`; a process killed by a signal cannot run it (its peers then see a
/// crashed host: RETRY_EXC_ERR and DISCONNECTED −110), see docs/capi.md.
extern "C" fn close_at_exit() {
    guard("close_at_exit", (), || {
        // A forked child inherited this handler with the parent's ids: they are not its to
        // destroy (its exit must not disconnect the parent's connections).
        if in_child() {
            return;
        }
        let Ok(r) = runtime() else { return };
        // On a thread of its own: `exit` has already destroyed this thread's thread-locals,
        // which `tracing` (here and in cm-core) needs.
        let closer = std::thread::Builder::new()
            .name("rnic-exit".into())
            .spawn(move || {
                let n = r.with(|n, now| {
                    let (cm, dev) = n.split();
                    cm.close(dev, now)
                });
                tracing::debug!("exit: {n} rdma_cm ids destroyed");
            });
        if let Ok(t) = closer {
            let _ = t.join();
        }
    })
}

/// The body of the destroy calls whose object is one leaked box (`ibv_dealloc_pd`,
/// `ibv_dereg_mr`, `ibv_destroy_qp`): `destroy` on the device with the handle `handle` reads
/// from the C struct, then the box is freed. 0, or the errno as libibverbs returns it (the
/// object stays when the device refuses, e.g. `EBUSY`).
///
/// # Safety
/// `p` is NULL or a live object of this library of type `T`, made by `leak`, not freed yet.
unsafe fn destroy_boxed<T>(
    p: *mut T,
    handle: impl FnOnce(&T) -> u32,
    destroy: impl FnOnce(&mut rnic_sim::SimDevice, u32) -> verbs_core::Result<()>,
) -> libc::c_int {
    let (Ok(r), false) = (rt(), p.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: a live object of this library (the caller's contract).
    let h = handle(unsafe { &*p });
    match r.with(|n, _| destroy(n.dev(), h)) {
        Ok(()) => {
            // SAFETY: as above; freed once, after the device let go of it.
            drop(unsafe { Box::from_raw(p) });
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// `-1` with `errno`, the librdmacm convention.
fn fail(e: i32) -> libc::c_int {
    set_errno(e);
    -1
}

/// A NULL pointer with `errno`, the libibverbs convention for calls returning objects.
fn fail_null<T>(e: i32) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// Prints the RNIC's counters on stderr (`Runtime::stats`): a table, or JSON under
/// `RNIC_STATS=json`. Not part of any rdma-core API: call it from a debugger
/// (`call rnic_dump_stats()`) or set `RNIC_STATS=1` to have it run at exit.
#[no_mangle]
pub extern "C" fn rnic_dump_stats() {
    guard("rnic_dump_stats", (), || {
        if in_child() {
            return;
        }
        if let Ok(r) = runtime() {
            let stats = r.stats();
            if r.config().stats.is_some_and(|c| c.json) {
                eprint!("{}", stats.to_json());
            } else {
                eprint!("{}", stats.to_table());
            }
        }
    })
}

/// Registers [`rnic_dump_stats`] with `atexit` when `RNIC_STATS` asks for it (once, at
/// start-up), and starts the periodic printer of `RNIC_STATS=every:MS`.
pub(crate) fn stats_at_exit(stats: Option<crate::config::StatsConfig>) {
    extern "C" fn dump() {
        if in_child() {
            return; // the parent's counters, and its node lock may be held forever here
        }
        // A thread of its own, as in `close_at_exit`.
        if let Ok(t) = std::thread::Builder::new().spawn(|| rnic_dump_stats()) {
            let _ = t.join();
        }
    }
    let Some(stats) = stats else { return };
    if let Some(ms) = stats.every_ms {
        let _ = std::thread::Builder::new()
            .name("rnic-stats".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                rnic_dump_stats();
            });
    }
    // SAFETY: `dump` is a plain `extern "C" fn()` that catches its own panics.
    unsafe { libc::atexit(dump) };
}
