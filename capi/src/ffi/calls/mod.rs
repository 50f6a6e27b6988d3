//! Safe in-process calls of the C entry points, for Rust callers: the fuzz target `capi_calls`
//! (`fuzz/src/harness/capi_calls/`) and its corpus replay test. Re-exported as
//! [`crate::calls`].
//!
//! A [`Calls`] owns every object made through it, each in a numbered slot per kind, and passes
//! the entry points nothing but what their C contract allows: pointers to live objects of this
//! library, to memory it owns (the C structs built from the caller's plain values, SGE lists,
//! private data, the registered memory arena), or NULL where the entry point is documented to
//! check for NULL itself (a NULL `pd`, `attr`, `qp`, `id`, out-parameter …). What the caller
//! chooses is every value *in* those structs and which live object (or NULL) goes where; a call
//! that names an empty slot, or would need a pointer the contract does not allow (a destroyed
//! object, a list shorter than its count, a context closed under its objects), is not made and
//! returns `None`. So a crash or a sanitizer report is the library's, never the caller's.
//!
//! The data-path calls go through `context->ops`, as `<infiniband/verbs.h>`'s inline
//! `ibv_post_send` & co. do. Descriptors the calls may block on (completion and event channels,
//! `async_fd`) are made `O_NONBLOCK`, so every call returns (`EAGAIN` when nothing is there).
//! Event channels are not made per [`Calls`]: `rdma_destroy_event_channel` never frees a
//! channel (`docs/capi.md`), so the calls share [`CM_CHANNELS`] channels made once per
//! process. [`Calls::teardown`] (and `Drop`) destroys what is left, dependants first.
//!
//! Files: `types.rs` (the argument and result values), `slots.rs` (the numbered slots, the
//! memory arena), `process.rs` (the shared event channels, [`counts`]), `device.rs` (contexts,
//! queries, async events, PDs, MRs), `completion.rs` (completion channels, CQs),
//! `queue_pair.rs` (QPs, AHs, posting), `rdma_cm.rs` (ids, connection calls, CM events).

mod completion;
mod device;
mod process;
mod queue_pair;
mod rdma_cm;
mod slots;
mod types;

pub use process::{counts, Counts};
pub use types::{
    BadWr, ConnParam, EventInfo, IdInfo, Kind, Made, MrAddr, MrInfo, QpInfo, QpInit, QpRef, RecvWr,
    Ret, SendWr, SockAddr,
};

use self::slots::{Arena, Ctx, Slots};
use super::verbs::cm_context;
use crate::abi::*;
use crate::config::Config;
use crate::runtime::Runtime;
use libc::c_int;
use std::ptr::null_mut;

/// Event channels shared by every [`Calls`] of the process (see the module docs).
pub const CM_CHANNELS: usize = 2;

/// Bytes of the memory arena that memory regions register (page aligned).
pub const ARENA_LEN: usize = 16 * 4096;

/// Most completions one [`Calls::poll_cq`] asks for (its `ibv_wc` array is this long at most).
pub const MAX_POLL: usize = 1024;

/// Starts the process's runtime with `config` unless it runs already, and returns it (compare
/// its [`Runtime::config`] with what was asked for). See [`crate::runtime::runtime_with`].
///
/// # Errors
/// Why the runtime could not start.
pub fn start(config: Config) -> Result<&'static Runtime, &'static str> {
    crate::runtime::runtime_with(config)
}

/// Objects made through the C entry points, in slots. See the module docs.
#[derive(Debug)]
pub struct Calls {
    ctxs: Slots<Ctx>,
    pds: Slots<*mut ibv_pd>,
    mrs: Slots<*mut ibv_mr>,
    comps: Slots<*mut ibv_comp_channel>,
    cqs: Slots<*mut ibv_cq>,
    qps: Slots<*mut ibv_qp>,
    ahs: Slots<*mut ibv_ah>,
    ids: Slots<*mut rdma_cm_id>,
    events: Slots<*mut rdma_cm_event>,
    arena: Option<Arena>,
}

impl Default for Calls {
    fn default() -> Self {
        Calls::new()
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

fn errno() -> c_int {
    nix::errno::Errno::last_raw()
}

fn ret(rc: c_int) -> Ret {
    Ret { rc, errno: errno() }
}

/// The `ops` table of an object with a `context` field (a CQ, a QP): `ops_of(obj->context)`,
/// the rdma_cm context's for a NULL object. Inside an `unsafe` block whose SAFETY comment
/// says the object is NULL or live.
macro_rules! ops_of_object {
    ($p:expr) => {
        ops_of(if $p.is_null() {
            std::ptr::null_mut()
        } else {
            (*$p).context
        })
    };
}
pub(super) use ops_of_object;

/// Links `wrs` into a NULL-terminated list through `set_next`; returns the array's base
/// (for `bad_wr` indices) and the list's head (NULL when empty). The vector must not move
/// while the list is in use.
fn link<T>(wrs: &mut [T], set_next: impl Fn(&mut T, *mut T)) -> (*mut T, *mut T) {
    let base = wrs.as_mut_ptr();
    for i in 1..wrs.len() {
        set_next(&mut wrs[i - 1], base.wrapping_add(i));
    }
    let head = if wrs.is_empty() {
        std::ptr::null_mut()
    } else {
        base
    };
    (base, head)
}

/// The `ops` table calls through `context->ops`; the rdma_cm context's for a NULL object.
///
/// # Safety
/// `ctx` is NULL or a live context of this library.
unsafe fn ops_of(ctx: *mut ibv_context) -> ibv_context_ops {
    let ctx = if ctx.is_null() { cm_context() } else { ctx };
    // SAFETY: a live context (the caller's contract, or the rdma_cm one, never freed).
    unsafe { (*ctx).ops }
}

impl Calls {
    /// An empty set of objects (the runtime starts with the first call; see [`start`]).
    pub fn new() -> Calls {
        Calls {
            ctxs: Slots::default(),
            pds: Slots::default(),
            mrs: Slots::default(),
            comps: Slots::default(),
            cqs: Slots::default(),
            qps: Slots::default(),
            ahs: Slots::default(),
            ids: Slots::default(),
            events: Slots::default(),
            arena: Some(Arena::new()),
        }
    }

    /// The live slots of kind `k`, in order.
    pub fn live(&self, k: Kind) -> Vec<usize> {
        match k {
            Kind::Context => self.ctxs.live(),
            Kind::Pd => self.pds.live(),
            Kind::Mr => self.mrs.live(),
            Kind::CompChannel => self.comps.live(),
            Kind::Cq => self.cqs.live(),
            Kind::Qp => self.qps.live(),
            Kind::Ah => self.ahs.live(),
            Kind::Id => self.ids.live(),
            Kind::Event => self.events.live(),
        }
    }

    /// The arena's address (what a region at offset 0 reports as `addr`).
    pub fn arena_addr(&self) -> u64 {
        self.arena.as_ref().map_or(0, |a| a.p as u64)
    }

    fn qp_ptr(&self, q: QpRef) -> Option<*mut ibv_qp> {
        match q {
            QpRef::Qp(s) => self.qps.get(s),
            // SAFETY: a live id of this library (in a slot).
            QpRef::Id(s) => self.ids.get(s).map(|id| unsafe { (*id).qp }),
        }
    }

    /// `Some(NULL)` for `None`, the slot's pointer for a live slot, `None` for an empty one.
    fn opt<T>(slots: &Slots<*mut T>, s: Option<usize>) -> Option<*mut T> {
        match s {
            None => Some(null_mut()),
            Some(i) => slots.get(i),
        }
    }

    // ---- teardown -----------------------------------------------------------------------------

    /// Destroys everything left, dependants first: events acked, ids (QPs first), AHs, QPs,
    /// MRs, CQs, completion channels, PDs, contexts. Returns what could not be destroyed
    /// (each kept, and the arena with it if a region still registers it).
    pub fn teardown(&mut self) -> Vec<String> {
        fn check(failed: &mut Vec<String>, what: &str, r: Option<Ret>) {
            if let Some(r) = r.filter(|r| r.rc != 0) {
                failed.push(format!("{what}: {r:?}"));
            }
        }
        let mut failed = Vec::new();
        for s in self.events.live() {
            let r = self.ack_cm_event(Some(s));
            check(&mut failed, "rdma_ack_cm_event", r);
        }
        for s in self.ids.live() {
            let r = self.destroy_id(Some(s));
            check(&mut failed, "rdma_destroy_id", r);
        }
        for s in self.ahs.live() {
            let r = self.destroy_ah(Some(s));
            check(&mut failed, "ibv_destroy_ah", r);
        }
        for s in self.qps.live() {
            let r = self.destroy_qp(Some(s));
            check(&mut failed, "ibv_destroy_qp", r);
        }
        for s in self.mrs.live() {
            let r = self.dereg_mr(Some(s));
            check(&mut failed, "ibv_dereg_mr", r);
        }
        for s in self.cqs.live() {
            let r = self.destroy_cq(Some(s));
            check(&mut failed, "ibv_destroy_cq", r);
        }
        for s in self.comps.live() {
            let r = self.destroy_comp_channel(Some(s));
            check(&mut failed, "ibv_destroy_comp_channel", r);
        }
        for s in self.pds.live() {
            let r = self.dealloc_pd(Some(s));
            check(&mut failed, "ibv_dealloc_pd", r);
        }
        for s in self.ctxs.live() {
            match self.close_device(Some(s)) {
                None => failed.push("ibv_close_device: context still in use".to_string()),
                r => check(&mut failed, "ibv_close_device", r),
            }
        }
        if self.mrs.live().is_empty() {
            if let Some(a) = self.arena.take() {
                a.free();
            }
        }
        failed
    }
}
