//! Safe in-process calls of the C entry points, for Rust callers: the fuzz target `capi_calls`
//! (`fuzz/src/harness/capi_calls.rs`) and its corpus replay test. Re-exported as
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

use super::objects::{registry, ChannelBox};
use super::verbs::cm_context;
use super::{cm, cm_event, cm_qp, cq, qp, set_errno, verbs};
use crate::abi::*;
use crate::config::Config;
use crate::runtime::Runtime;
use libc::{c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

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

/// What an `int` call returned and `errno` after it (set to 0 before the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ret {
    /// The return value.
    pub rc: c_int,
    /// `errno` after the call.
    pub errno: c_int,
}

/// What a call returning an object gave: the slot it now has, or `None` for NULL, with
/// `errno` after the call (set to 0 before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    /// The new object's slot, `None` when the call returned NULL.
    pub slot: Option<usize>,
    /// `errno` after the call.
    pub errno: c_int,
}

/// The kinds of object a [`Calls`] holds, each with its own slot numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `struct ibv_context` (opened here, or the rdma_cm context).
    Context,
    /// `struct ibv_pd`.
    Pd,
    /// `struct ibv_mr`.
    Mr,
    /// `struct ibv_comp_channel`.
    CompChannel,
    /// `struct ibv_cq`.
    Cq,
    /// `struct ibv_qp` of `ibv_create_qp` (an id's QP is named through its id, [`QpRef::Id`]).
    Qp,
    /// `struct ibv_ah`.
    Ah,
    /// `struct rdma_cm_id`.
    Id,
    /// `struct rdma_cm_event` fetched and not acked yet.
    Event,
}

/// A QP argument: one made by `ibv_create_qp`, or the QP of an id (`id->qp`, NULL when the id
/// has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpRef {
    /// The QP in this [`Kind::Qp`] slot.
    Qp(usize),
    /// `id->qp` of the id in this [`Kind::Id`] slot.
    Id(usize),
}

/// `ibv_qp_init_attr` with slots for its pointers (`srq` and `qp_context` are NULL).
#[derive(Debug, Clone, Copy)]
pub struct QpInit {
    /// `send_cq`: a [`Kind::Cq`] slot or NULL.
    pub send_cq: Option<usize>,
    /// `recv_cq`: a [`Kind::Cq`] slot or NULL.
    pub recv_cq: Option<usize>,
    /// `cap`.
    pub cap: verbs_core::QpCap,
    /// `qp_type`.
    pub qp_type: ibv_qp_type,
    /// `sq_sig_all`.
    pub sq_sig_all: c_int,
}

/// The address `ibv_reg_mr` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MrAddr {
    /// NULL.
    Null,
    /// The arena's byte `offset` (with the length, it must stay inside [`ARENA_LEN`]).
    Arena(usize),
}

/// A send WR: `struct ibv_send_wr` with owned SGEs and a slot for its AH.
#[derive(Debug, Clone, Default)]
pub struct SendWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `sg_list`: `None` is NULL; otherwise at least `num_sge` entries when `num_sge > 0`.
    pub sg_list: Option<Vec<verbs_core::Sge>>,
    /// `num_sge`.
    pub num_sge: c_int,
    /// `opcode`: the `wr` union is written as the opcode reads it (`rdma` for WRITE/READ,
    /// `atomic` for the atomics, `ud` for the SENDs, `atomic` otherwise).
    pub opcode: ibv_wr_opcode,
    /// `send_flags`.
    pub send_flags: u32,
    /// `imm_data`.
    pub imm_data: u32,
    /// `wr.rdma.remote_addr` / `wr.atomic.remote_addr`.
    pub remote_addr: u64,
    /// `wr.rdma.rkey` / `wr.atomic.rkey`.
    pub rkey: u32,
    /// `wr.atomic.compare_add`.
    pub compare_add: u64,
    /// `wr.atomic.swap`.
    pub swap: u64,
    /// `wr.ud.ah`: a [`Kind::Ah`] slot or NULL.
    pub ah: Option<usize>,
    /// `wr.ud.remote_qpn`.
    pub remote_qpn: u32,
    /// `wr.ud.remote_qkey`.
    pub remote_qkey: u32,
}

/// A receive WR: `struct ibv_recv_wr` with owned SGEs.
#[derive(Debug, Clone, Default)]
pub struct RecvWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `sg_list`, as [`SendWr::sg_list`].
    pub sg_list: Option<Vec<verbs_core::Sge>>,
    /// `num_sge`.
    pub num_sge: c_int,
}

/// What `*bad_wr` holds after a post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadWr {
    /// Not written (or no `bad_wr` was passed): still NULL.
    Untouched,
    /// The WR at this index of the list.
    Index(usize),
    /// A pointer that is none of the list's WRs.
    Other,
}

/// `struct rdma_conn_param` with owned private data.
#[derive(Debug, Clone, Default)]
pub struct ConnParam {
    /// `private_data`: `None` is NULL; otherwise at least `private_data_len` bytes.
    pub private_data: Option<Vec<u8>>,
    /// `private_data_len`.
    pub private_data_len: u8,
    /// `responder_resources`.
    pub responder_resources: u8,
    /// `initiator_depth`.
    pub initiator_depth: u8,
    /// `flow_control`.
    pub flow_control: u8,
    /// `retry_count`.
    pub retry_count: u8,
    /// `rnr_retry_count`.
    pub rnr_retry_count: u8,
    /// `srq`.
    pub srq: u8,
    /// `qp_num`.
    pub qp_num: u32,
}

/// A socket address argument (`struct sockaddr *`), passed as a zeroed `sockaddr_storage`
/// with the family's struct at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SockAddr {
    /// `AF_INET` or `AF_INET6` (`sin6_flowinfo` and `sin6_scope_id` as given).
    Ip(std::net::SocketAddr),
    /// Another address family; the rest of the struct zero.
    Family(u16),
}

impl SockAddr {
    fn storage(&self) -> libc::sockaddr_storage {
        let mut ss = super::convert::zeroed_storage();
        let p: *mut libc::sockaddr_storage = &mut ss;
        match *self {
            SockAddr::Ip(std::net::SocketAddr::V4(a)) => {
                // SAFETY: `sockaddr_storage` is larger than, and aligned for, `sockaddr_in`.
                unsafe {
                    p.cast::<libc::sockaddr_in>()
                        .write(super::convert::sockaddr_in(a))
                };
            }
            SockAddr::Ip(std::net::SocketAddr::V6(a)) => {
                // SAFETY: as above, for `sockaddr_in6`.
                unsafe {
                    p.cast::<libc::sockaddr_in6>()
                        .write(super::convert::sockaddr_in6(a))
                };
            }
            SockAddr::Family(f) => ss.ss_family = f,
        }
        ss
    }
}

/// A memory region's fields, as `ibv_reg_mr` filled them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrInfo {
    /// `addr`: the address given (the arena's address plus the offset, or 0).
    pub addr: u64,
    /// `length`.
    pub length: usize,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// A QP's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// `qp_num`.
    pub qp_num: u32,
    /// `qp_type`.
    pub qp_type: ibv_qp_type,
    /// `state`, as libibverbs keeps it (the last state set or queried).
    pub state: ibv_qp_state,
}

/// An id's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdInfo {
    /// `id->qp` is set.
    pub has_qp: bool,
    /// `id->verbs` is set (the id is bound to the device).
    pub bound: bool,
    /// `ps`.
    pub ps: rdma_port_space,
    /// The channel it reports to, as an index of the shared channels (`None`: another one).
    pub channel: Option<usize>,
}

/// A fetched, unacked event's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventInfo {
    /// `event`.
    pub event: rdma_cm_event_type,
    /// `status`.
    pub status: c_int,
    /// `id`, as a [`Kind::Id`] slot.
    pub id: Option<usize>,
    /// `listen_id` (NULL: `None`).
    pub listen_id: Option<usize>,
    /// `param.conn.private_data_len`.
    pub private_data_len: u8,
}

/// How many objects the library holds, process-wide: after a [`Calls`] is torn down they are
/// back to what they were before it made anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// The simulated device's PDs, MRs, CQs and QPs.
    pub device: rnic_sim::ObjectCounts,
    /// rdma_cm ids of the connection manager.
    pub cm_ids: usize,
    /// CQs, QPs and ids in the handle → pointer registry.
    pub registry: (usize, usize, usize),
    /// Completion channels of the node.
    pub comp_channels: usize,
    /// Async events queued and not read.
    pub async_events: usize,
    /// CM events queued on the shared channels and not read.
    pub cm_events: usize,
}

/// The library's object counts ([`Counts`]); `None` when the runtime is not running.
pub fn counts() -> Option<Counts> {
    let r = crate::runtime::runtime().ok()?;
    let chans: Vec<cm_core::api::EventChannel> = channel_pool()
        .iter()
        .filter(|&&p| p != 0)
        // SAFETY: a non-zero pool entry is a `ChannelBox` made by `rdma_create_event_channel`,
        // never destroyed (see `channel_pool`).
        .map(|&p| unsafe { (*(p as *const ChannelBox)).handle })
        .collect();
    let reg = {
        let g = registry();
        (g.cqs.len(), g.qps.len(), g.ids.len())
    };
    Some(r.with_quiet(|n, _| Counts {
        device: n.device().object_counts(),
        cm_ids: n.cm().ids().len(),
        registry: reg,
        comp_channels: n.comp.len(),
        async_events: n.device().pending_async_events(),
        cm_events: chans.iter().map(|&c| n.cm().pending_events(c)).sum(),
    }))
}

/// The shared event channels (addresses of their `ChannelBox`es; 0 if one could not be made),
/// made once, non-blocking, never destroyed.
fn channel_pool() -> &'static [usize; CM_CHANNELS] {
    static POOL: OnceLock<[usize; CM_CHANNELS]> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool = [0; CM_CHANNELS];
        for p in &mut pool {
            // SAFETY: no arguments; returns a new channel or NULL.
            let ch = unsafe { cm::rdma_create_event_channel() };
            if !ch.is_null() {
                // SAFETY: `ch` was just made: its `fd` is its descriptor.
                nonblocking(unsafe { (*ch).fd });
                *p = ch as usize;
            }
        }
        pool
    })
}

/// Sets `O_NONBLOCK` on `fd` (one of the library's descriptors; -1 is ignored).
fn nonblocking(fd: c_int) {
    if fd < 0 {
        return;
    }
    // SAFETY: `fcntl` on a descriptor number; an invalid one fails with EBADF, nothing else.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

fn errno() -> c_int {
    nix::errno::Errno::last_raw()
}

/// Numbered slots of one kind.
#[derive(Debug)]
struct Slots<T> {
    v: Vec<Option<T>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots { v: Vec::new() }
    }
}

impl<T: Copy + PartialEq> Slots<T> {
    fn insert(&mut self, x: T) -> usize {
        match self.v.iter().position(Option::is_none) {
            Some(i) => {
                self.v[i] = Some(x);
                i
            }
            None => {
                self.v.push(Some(x));
                self.v.len() - 1
            }
        }
    }

    fn get(&self, i: usize) -> Option<T> {
        self.v.get(i).copied().flatten()
    }

    fn remove(&mut self, i: usize) {
        if let Some(s) = self.v.get_mut(i) {
            *s = None;
        }
    }

    fn find(&self, x: T) -> Option<usize> {
        self.v.iter().position(|s| *s == Some(x))
    }

    fn live(&self) -> Vec<usize> {
        (0..self.v.len()).filter(|&i| self.v[i].is_some()).collect()
    }

    fn values(&self) -> Vec<T> {
        self.v.iter().flatten().copied().collect()
    }
}

/// An opened context, or the rdma_cm one (`owned: false`: never freed by closing it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ctx {
    p: *mut ibv_context,
    owned: bool,
}

/// The memory arena: [`ARENA_LEN`] bytes, page aligned, zeroed.
#[derive(Debug)]
struct Arena {
    p: *mut u8,
}

impl Arena {
    fn layout() -> std::alloc::Layout {
        // 4096 is a power of two and ARENA_LEN a multiple of it.
        std::alloc::Layout::from_size_align(ARENA_LEN, 4096)
            .unwrap_or(std::alloc::Layout::new::<u8>())
    }

    fn new() -> Arena {
        // SAFETY: a layout of non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(Self::layout()) };
        if p.is_null() {
            std::alloc::handle_alloc_error(Self::layout());
        }
        Arena { p }
    }

    /// Frees the arena; only once no region registers any of it.
    fn free(self) {
        // SAFETY: allocated in `new` with this layout, freed once (`self` is consumed).
        unsafe { std::alloc::dealloc(self.p, Self::layout()) };
    }
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

/// `made` for an object pointer: a new slot in `slots`, or `None` for NULL.
fn made<T>(slots: &mut Slots<*mut T>, p: *mut T) -> Made {
    let e = errno();
    Made {
        slot: (!p.is_null()).then(|| slots.insert(p)),
        errno: e,
    }
}

fn ret(rc: c_int) -> Ret {
    Ret { rc, errno: errno() }
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

    // ---- contexts ---------------------------------------------------------------------------

    /// `ibv_get_device_list`, `ibv_open_device` of its device (or of NULL), then
    /// `ibv_free_device_list`. The context's `async_fd` is made non-blocking.
    pub fn open_device(&mut self, null_device: bool) -> Made {
        let mut n: c_int = 0;
        // SAFETY: `n` is a writable int.
        let list = unsafe { verbs::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Made {
                slot: None,
                errno: errno(),
            };
        }
        // SAFETY: a non-NULL list holds its device and a terminating NULL.
        let listed = unsafe { *list };
        let dev = if null_device { null_mut() } else { listed };
        set_errno(0);
        // SAFETY: `dev` is the listed device or NULL (checked by the call).
        let ctx = unsafe { verbs::ibv_open_device(dev) };
        let e = errno();
        // SAFETY: `list` came from `ibv_get_device_list`, freed once.
        unsafe { verbs::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Made {
                slot: None,
                errno: e,
            };
        }
        // SAFETY: `ctx` was just opened.
        nonblocking(unsafe { (*ctx).async_fd });
        Made {
            slot: Some(self.ctxs.insert(Ctx {
                p: ctx,
                owned: true,
            })),
            errno: e,
        }
    }

    /// A slot for the rdma_cm context (`id->verbs` of a bound id; PDs made on it are what
    /// `rdma_create_qp` accepts); the same slot each time.
    pub fn cm_context(&mut self) -> usize {
        let c = Ctx {
            p: cm_context(),
            owned: false,
        };
        self.ctxs.find(c).unwrap_or_else(|| self.ctxs.insert(c))
    }

    fn ctx_in_use(&self, ctx: *mut ibv_context) -> bool {
        let mut used = Vec::new();
        for p in self.pds.values() {
            // SAFETY: a live PD (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.mrs.values() {
            // SAFETY: a live MR (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.comps.values() {
            // SAFETY: a live channel (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.cqs.values() {
            // SAFETY: a live CQ (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.qps.values() {
            // SAFETY: a live QP (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.ahs.values() {
            // SAFETY: a live AH (plain fields).
            used.push(unsafe { (*p).context });
        }
        used.contains(&ctx)
    }

    /// `ibv_close_device` (NULL, or a context none of this set's objects uses: libibverbs
    /// leaves what a closed context's objects point to undefined). The slot is freed on 0.
    pub fn close_device(&mut self, ctx: Option<usize>) -> Option<Ret> {
        let c = match ctx {
            None => None,
            Some(s) => Some(self.ctxs.get(s)?),
        };
        let p = c.map_or(null_mut(), |c| c.p);
        if c.is_some() && self.ctx_in_use(p) {
            return None;
        }
        set_errno(0);
        // SAFETY: NULL, or a live context no live object uses; the rdma_cm context is never
        // freed by this call.
        let r = ret(unsafe { verbs::ibv_close_device(p) });
        if let (0, Some(s)) = (r.rc, ctx) {
            self.ctxs.remove(s);
        }
        Some(r)
    }

    /// `ibv_query_device` into a zeroed struct, or NULL.
    pub fn query_device(
        &mut self,
        ctx: usize,
        null_attr: bool,
    ) -> Option<(Ret, Option<ibv_device_attr>)> {
        let c = self.ctxs.get(ctx)?;
        // SAFETY: `ibv_device_attr` is integers and a char array: all-zero is a valid value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        let ap: *mut ibv_device_attr = if null_attr { null_mut() } else { &mut a };
        set_errno(0);
        // SAFETY: a live context; `ap` is NULL (checked) or a writable struct.
        let r = ret(unsafe { verbs::ibv_query_device(c.p, ap) });
        Some((r, (!null_attr).then_some(a)))
    }

    /// `ibv_query_port` into a zeroed struct, or NULL.
    pub fn query_port(
        &mut self,
        ctx: usize,
        port: u8,
        null_attr: bool,
    ) -> Option<(Ret, Option<ibv_port_attr>)> {
        let c = self.ctxs.get(ctx)?;
        // SAFETY: `ibv_port_attr` is integers: all-zero is a valid value.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        let ap: *mut ibv_port_attr = if null_attr { null_mut() } else { &mut a };
        set_errno(0);
        // SAFETY: a live context; `ap` NULL (checked) or a writable full `ibv_port_attr`.
        let r = ret(unsafe { verbs::ibv_query_port(c.p, port, ap) });
        Some((r, (!null_attr).then_some(a)))
    }

    /// `ibv_query_gid` (the GID's 16 bytes), or with a NULL `gid`.
    pub fn query_gid(
        &mut self,
        ctx: usize,
        port: u8,
        index: c_int,
        null_gid: bool,
    ) -> Option<(Ret, Option<[u8; 16]>)> {
        let c = self.ctxs.get(ctx)?;
        let mut g = ibv_gid { raw: [0; 16] };
        let gp: *mut ibv_gid = if null_gid { null_mut() } else { &mut g };
        set_errno(0);
        // SAFETY: a live context; `gp` NULL (checked) or a writable GID.
        let r = ret(unsafe { verbs::ibv_query_gid(c.p, port, index, gp) });
        // SAFETY: both members of the union are plain bytes.
        let raw = unsafe { g.raw };
        Some((r, (!null_gid).then_some(raw)))
    }

    /// `ibv_query_pkey`, or with a NULL `pkey`.
    pub fn query_pkey(
        &mut self,
        ctx: usize,
        port: u8,
        index: c_int,
        null_pkey: bool,
    ) -> Option<(Ret, Option<u16>)> {
        let c = self.ctxs.get(ctx)?;
        let mut k: u16 = 0;
        let kp: *mut u16 = if null_pkey { null_mut() } else { &mut k };
        set_errno(0);
        // SAFETY: a live context; `kp` NULL (checked) or a writable `__be16`.
        let r = ret(unsafe { verbs::ibv_query_pkey(c.p, port, index, kp) });
        Some((r, (!null_pkey).then_some(k)))
    }

    /// `ibv_get_async_event` on a context (or NULL), non-blocking: -1/`EAGAIN` when none is
    /// queued; the event type when one was read (`ibv_ack_async_event` follows).
    pub fn get_async_event(
        &mut self,
        ctx: Option<usize>,
        null_event: bool,
    ) -> Option<(Ret, Option<ibv_event_type>)> {
        let c = match ctx {
            None => null_mut(),
            Some(s) => self.ctxs.get(s)?.p,
        };
        if !c.is_null() {
            // SAFETY: a live context of this library (plain field).
            nonblocking(unsafe { (*c).async_fd });
        }
        let mut ev = ibv_async_event {
            element: ibv_async_event_element { port_num: 0 },
            event_type: 0,
        };
        let ep: *mut ibv_async_event = if null_event { null_mut() } else { &mut ev };
        set_errno(0);
        // SAFETY: NULL or a live context; `ep` NULL (checked) or writable. The async
        // descriptors are non-blocking (above, and `open_device`), so this returns.
        let r = ret(unsafe { super::async_event::ibv_get_async_event(c, ep) });
        if r.rc == 0 && !null_event {
            // SAFETY: the event just written.
            unsafe { super::async_event::ibv_ack_async_event(&mut ev) };
            return Some((r, Some(ev.event_type)));
        }
        Some((r, None))
    }

    // ---- PDs, MRs ---------------------------------------------------------------------------

    /// `ibv_alloc_pd` on a live context.
    pub fn alloc_pd(&mut self, ctx: usize) -> Option<Made> {
        let c = self.ctxs.get(ctx)?;
        set_errno(0);
        // SAFETY: a live context.
        let p = unsafe { verbs::ibv_alloc_pd(c.p) };
        Some(made(&mut self.pds, p))
    }

    /// `ibv_dealloc_pd` (a live PD or NULL); the slot is freed on 0.
    pub fn dealloc_pd(&mut self, pd: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.pds, pd)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live PD, freed by the call only on 0.
        let r = ret(unsafe { verbs::ibv_dealloc_pd(p) });
        if let (0, Some(s)) = (r.rc, pd) {
            self.pds.remove(s);
        }
        Some(r)
    }

    /// `ibv_reg_mr` (`iova` `None`) or `ibv_reg_mr_iova2` of `length` bytes at `addr`. An
    /// arena range must lie inside the arena; a NULL address may have any length (the call
    /// refuses a non-zero one before using it).
    pub fn reg_mr(
        &mut self,
        pd: Option<usize>,
        addr: MrAddr,
        length: usize,
        iova: Option<u64>,
        access: c_int,
    ) -> Option<Made> {
        let p = Self::opt(&self.pds, pd)?;
        let base = self.arena.as_ref()?.p;
        let a: *mut c_void = match addr {
            MrAddr::Null => null_mut(),
            MrAddr::Arena(off) => {
                if off.checked_add(length)? > ARENA_LEN {
                    return None;
                }
                base.wrapping_add(off).cast()
            }
        };
        set_errno(0);
        // SAFETY: NULL (checked) or a live PD; `a`/`length` is NULL (a non-zero length is
        // refused) or a range inside the arena, which stays allocated while any region is
        // registered (`teardown`).
        let m = unsafe {
            match iova {
                None => verbs::ibv_reg_mr(p, a, length, access),
                Some(v) => verbs::ibv_reg_mr_iova2(p, a, length, v, access as libc::c_uint),
            }
        };
        Some(made(&mut self.mrs, m))
    }

    /// `ibv_dereg_mr` (a live MR or NULL); the slot is freed on 0.
    pub fn dereg_mr(&mut self, mr: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.mrs, mr)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live MR, freed by the call only on 0.
        let r = ret(unsafe { verbs::ibv_dereg_mr(p) });
        if let (0, Some(s)) = (r.rc, mr) {
            self.mrs.remove(s);
        }
        Some(r)
    }

    /// A live MR's fields.
    pub fn mr_info(&self, mr: usize) -> Option<MrInfo> {
        let p = self.mrs.get(mr)?;
        // SAFETY: a live MR (plain fields).
        let m = unsafe { *p };
        Some(MrInfo {
            addr: m.addr as u64,
            length: m.length,
            lkey: m.lkey,
            rkey: m.rkey,
        })
    }

    // ---- completion channels, CQs -------------------------------------------------------------

    /// `ibv_create_comp_channel`; its descriptor is made non-blocking.
    pub fn create_comp_channel(&mut self, ctx: usize) -> Option<Made> {
        let c = self.ctxs.get(ctx)?;
        set_errno(0);
        // SAFETY: a live context.
        let ch = unsafe { cq::ibv_create_comp_channel(c.p) };
        if !ch.is_null() {
            // SAFETY: just made.
            nonblocking(unsafe { (*ch).fd });
        }
        Some(made(&mut self.comps, ch))
    }

    /// `ibv_destroy_comp_channel` (a live channel or NULL); the slot is freed on 0.
    pub fn destroy_comp_channel(&mut self, ch: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.comps, ch)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live channel, freed only on 0 (EBUSY while CQs use it).
        let r = ret(unsafe { cq::ibv_destroy_comp_channel(p) });
        if let (0, Some(s)) = (r.rc, ch) {
            self.comps.remove(s);
        }
        Some(r)
    }

    /// `ibv_create_cq(ctx, cqe, NULL, channel, 0)`.
    pub fn create_cq(&mut self, ctx: usize, cqe: c_int, channel: Option<usize>) -> Option<Made> {
        let c = self.ctxs.get(ctx)?;
        let ch = Self::opt(&self.comps, channel)?;
        set_errno(0);
        // SAFETY: a live context; `ch` NULL or a live channel.
        let p = unsafe { cq::ibv_create_cq(c.p, cqe, null_mut(), ch, 0) };
        Some(made(&mut self.cqs, p))
    }

    /// `ibv_destroy_cq` (a live CQ or NULL); the slot is freed on 0.
    pub fn destroy_cq(&mut self, cq: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.cqs, cq)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live CQ, freed only on 0 (EBUSY while a QP uses it).
        let r = ret(unsafe { cq::ibv_destroy_cq(p) });
        if let (0, Some(s)) = (r.rc, cq) {
            self.cqs.remove(s);
        }
        Some(r)
    }

    /// `ibv_req_notify_cq` through `cq->context->ops` (a live CQ or NULL).
    pub fn req_notify_cq(&mut self, cq: Option<usize>, solicited_only: c_int) -> Option<Ret> {
        let p = Self::opt(&self.cqs, cq)?;
        // SAFETY: NULL or a live CQ, whose context is live (contexts in use are not closed).
        let ops = unsafe {
            ops_of(if p.is_null() {
                null_mut()
            } else {
                (*p).context
            })
        };
        let f = ops.req_notify_cq?;
        set_errno(0);
        // SAFETY: the library's own slot; `p` NULL (checked) or live.
        Some(ret(unsafe { f(p, solicited_only) }))
    }

    /// `ibv_poll_cq` through `cq->context->ops` with room for `num_entries` completions (NULL
    /// `wc` when `null_wc`); the return value and the completions written. `None` when the
    /// array would be longer than [`MAX_POLL`].
    pub fn poll_cq(
        &mut self,
        cq: Option<usize>,
        num_entries: c_int,
        null_wc: bool,
    ) -> Option<(c_int, Vec<ibv_wc>)> {
        let p = Self::opt(&self.cqs, cq)?;
        let room = if null_wc {
            0
        } else {
            usize::try_from(num_entries).unwrap_or(0)
        };
        if room > MAX_POLL {
            return None;
        }
        let blank = ibv_wc {
            wr_id: 0,
            status: 0,
            opcode: 0,
            vendor_err: 0,
            byte_len: 0,
            ex: ibv_wc_ex { imm_data: 0 },
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        };
        let mut wcs = vec![blank; room];
        let wp = if null_wc {
            null_mut()
        } else {
            wcs.as_mut_ptr()
        };
        // SAFETY: as `req_notify_cq`.
        let ops = unsafe {
            ops_of(if p.is_null() {
                null_mut()
            } else {
                (*p).context
            })
        };
        let f = ops.poll_cq?;
        // SAFETY: `p` NULL (checked) or live; `wp` NULL (checked when `num_entries > 0`) or
        // `num_entries` writable entries.
        let n = unsafe { f(p, num_entries, wp) };
        let got = if null_wc {
            0
        } else {
            usize::try_from(n).unwrap_or(0).min(room)
        };
        wcs.truncate(got);
        Some((n, wcs))
    }

    /// `ibv_get_cq_event` on a live channel (or NULL), non-blocking, then
    /// `ibv_ack_cq_events(cq, 1)` for a CQ it returns; the CQ's slot (`None` for a CQ not in
    /// this set, e.g. one `rdma_create_qp` made).
    pub fn get_cq_event(
        &mut self,
        ch: Option<usize>,
        null_cq: bool,
    ) -> Option<(Ret, Option<usize>)> {
        let p = Self::opt(&self.comps, ch)?;
        let mut cqp: *mut ibv_cq = null_mut();
        let mut ctxp: *mut c_void = null_mut();
        let out: *mut *mut ibv_cq = if null_cq { null_mut() } else { &mut cqp };
        set_errno(0);
        // SAFETY: NULL (checked) or a live, non-blocking channel; writable out-parameters.
        let r = ret(unsafe { cq::ibv_get_cq_event(p, out, &mut ctxp) });
        if r.rc == 0 && !cqp.is_null() {
            // SAFETY: a live CQ the call returned.
            unsafe { cq::ibv_ack_cq_events(cqp, 1) };
        }
        Some((r, self.cqs.find(cqp)))
    }

    // ---- QPs, AHs -----------------------------------------------------------------------------

    /// Builds `ibv_qp_init_attr` from `a`; `None` if a CQ slot is empty.
    fn init_attr(&self, a: &QpInit) -> Option<ibv_qp_init_attr> {
        Some(ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: Self::opt(&self.cqs, a.send_cq)?,
            recv_cq: Self::opt(&self.cqs, a.recv_cq)?,
            srq: null_mut(),
            cap: super::convert::cap_to_c(&a.cap),
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        })
    }

    /// `ibv_create_qp` (a live PD or NULL; attributes or NULL).
    pub fn create_qp(&mut self, pd: Option<usize>, attr: Option<&QpInit>) -> Option<Made> {
        let p = Self::opt(&self.pds, pd)?;
        let mut a = match attr {
            Some(a) => Some(self.init_attr(a)?),
            None => None,
        };
        let ap = a
            .as_mut()
            .map_or(null_mut(), |a| a as *mut ibv_qp_init_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or a struct whose CQs are
        // NULL (checked) or live and whose SRQ is NULL.
        let q = unsafe { qp::ibv_create_qp(p, ap) };
        Some(made(&mut self.qps, q))
    }

    /// `ibv_modify_qp` (a QP or NULL; attributes or NULL).
    pub fn modify_qp(
        &mut self,
        q: Option<QpRef>,
        attr: Option<&ibv_qp_attr>,
        mask: c_int,
    ) -> Option<Ret> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        let mut a = attr.copied();
        let ap = a.as_mut().map_or(null_mut(), |a| a as *mut ibv_qp_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or a live QP; `ap` NULL (checked) or readable.
        Some(ret(unsafe { qp::ibv_modify_qp(p, ap, mask) }))
    }

    /// `ibv_query_qp` (a QP or NULL; NULL `attr` when `null_attr`; `init_attr` when
    /// `with_init`): the attributes and the granted capabilities.
    pub fn query_qp(
        &mut self,
        q: Option<QpRef>,
        null_attr: bool,
        with_init: bool,
    ) -> Option<(Ret, Option<ibv_qp_attr>, Option<ibv_qp_cap>)> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        // SAFETY: integers and the GID union: all-zero is a valid value.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: pointers (NULL) and integers: all-zero is a valid value.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let ap: *mut ibv_qp_attr = if null_attr { null_mut() } else { &mut a };
        let ip: *mut ibv_qp_init_attr = if with_init { &mut init } else { null_mut() };
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or writable; `ip` NULL or
        // writable.
        let r = ret(unsafe { qp::ibv_query_qp(p, ap, 0, ip) });
        let ok = r.rc == 0;
        Some((
            r,
            (ok && !null_attr).then_some(a),
            (ok && with_init).then_some(init.cap),
        ))
    }

    /// `ibv_destroy_qp` (a QP of `ibv_create_qp` or NULL); the slot is freed on 0.
    pub fn destroy_qp(&mut self, q: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.qps, q)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live QP, freed only on 0.
        let r = ret(unsafe { qp::ibv_destroy_qp(p) });
        if let (0, Some(s)) = (r.rc, q) {
            self.qps.remove(s);
        }
        Some(r)
    }

    /// A QP's fields (`None`: no such QP, or the id has none).
    pub fn qp_info(&self, q: QpRef) -> Option<QpInfo> {
        let p = self.qp_ptr(q)?;
        if p.is_null() {
            return None;
        }
        // SAFETY: a live QP (plain fields).
        let (qp_num, qp_type, state) = unsafe { ((*p).qp_num, (*p).qp_type, (*p).state) };
        Some(QpInfo {
            qp_num,
            qp_type,
            state,
        })
    }

    /// `ibv_create_ah` (a live PD or NULL; an address vector or NULL).
    pub fn create_ah(&mut self, pd: Option<usize>, attr: Option<&ibv_ah_attr>) -> Option<Made> {
        let p = Self::opt(&self.pds, pd)?;
        let mut a = attr.copied();
        let ap = a.as_mut().map_or(null_mut(), |a| a as *mut ibv_ah_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or readable.
        let h = unsafe { qp::ibv_create_ah(p, ap) };
        Some(made(&mut self.ahs, h))
    }

    /// `ibv_destroy_ah` (a live AH or NULL); the slot is freed on 0.
    pub fn destroy_ah(&mut self, ah: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.ahs, ah)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live AH, freed once on 0.
        let r = ret(unsafe { qp::ibv_destroy_ah(p) });
        if let (0, Some(s)) = (r.rc, ah) {
            self.ahs.remove(s);
        }
        Some(r)
    }

    /// The SGE list pointer of a WR; `None` when it is shorter than a positive `num_sge`.
    fn sg_ptr(list: &mut Option<Vec<ibv_sge>>, num_sge: c_int) -> Option<*mut ibv_sge> {
        let need = usize::try_from(num_sge).unwrap_or(0);
        match list {
            None => Some(null_mut()),
            Some(v) if v.len() >= need => Some(v.as_mut_ptr()),
            Some(_) => None,
        }
    }

    /// `ibv_post_send` through `qp->context->ops` (a QP or NULL) with the WRs linked in order
    /// (an empty list is NULL), `bad_wr` NULL unless `with_bad_wr`.
    pub fn post_send(
        &mut self,
        q: Option<QpRef>,
        wrs: &[SendWr],
        with_bad_wr: bool,
    ) -> Option<(c_int, BadWr)> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        let mut lists: Vec<Option<Vec<ibv_sge>>> = wrs.iter().map(|w| c_sges(&w.sg_list)).collect();
        let mut c = Vec::with_capacity(wrs.len());
        for (w, l) in wrs.iter().zip(lists.iter_mut()) {
            let sg_list = Self::sg_ptr(l, w.num_sge)?;
            let ah = Self::opt(&self.ahs, w.ah)?;
            let mut u = ibv_send_wr_wr {
                atomic: ibv_send_wr_atomic {
                    remote_addr: w.remote_addr,
                    compare_add: w.compare_add,
                    swap: w.swap,
                    rkey: w.rkey,
                },
            };
            match w.opcode {
                IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                    u.rdma = ibv_send_wr_rdma {
                        remote_addr: w.remote_addr,
                        rkey: w.rkey,
                    };
                }
                IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => {
                    u.ud = ibv_send_wr_ud {
                        ah: ah.cast(),
                        remote_qpn: w.remote_qpn,
                        remote_qkey: w.remote_qkey,
                    };
                }
                _ => {}
            }
            c.push(ibv_send_wr {
                wr_id: w.wr_id,
                next: null_mut(),
                sg_list,
                num_sge: w.num_sge,
                opcode: w.opcode,
                send_flags: w.send_flags,
                ex: ibv_send_wr_ex {
                    imm_data: w.imm_data,
                },
                wr: u,
                qp_type: ibv_send_wr_qp_type {
                    xrc: ibv_send_wr_xrc { remote_srqn: 0 },
                },
                bind_tso: ibv_send_wr_bind_tso {
                    tso: ibv_send_wr_tso {
                        hdr: null_mut(),
                        hdr_sz: 0,
                        mss: 0,
                    },
                },
            });
        }
        let base = c.as_mut_ptr();
        for i in 1..c.len() {
            c[i - 1].next = base.wrapping_add(i);
        }
        let head = if c.is_empty() { null_mut() } else { base };
        let mut bad: *mut ibv_send_wr = null_mut();
        let bp: *mut *mut ibv_send_wr = if with_bad_wr { &mut bad } else { null_mut() };
        // SAFETY: NULL or a live QP, whose context is live.
        let ops = unsafe {
            ops_of(if p.is_null() {
                null_mut()
            } else {
                (*p).context
            })
        };
        let f = ops.post_send?;
        // SAFETY: `p` NULL (checked) or live; `head` a NULL-terminated list of WRs in `c`
        // (not moved since `base` was taken), each with an SGE list of at least `num_sge`
        // entries or NULL (checked), and a live AH or NULL (checked) in `wr.ud` for the
        // SENDs; `bp` NULL or writable.
        let rc = unsafe { f(p, head, bp) };
        drop(lists);
        Some((rc, bad_index(bad, base, c.len())))
    }

    /// `ibv_post_recv` through `qp->context->ops`, as [`Calls::post_send`].
    pub fn post_recv(
        &mut self,
        q: Option<QpRef>,
        wrs: &[RecvWr],
        with_bad_wr: bool,
    ) -> Option<(c_int, BadWr)> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        let mut lists: Vec<Option<Vec<ibv_sge>>> = wrs.iter().map(|w| c_sges(&w.sg_list)).collect();
        let mut c = Vec::with_capacity(wrs.len());
        for (w, l) in wrs.iter().zip(lists.iter_mut()) {
            c.push(ibv_recv_wr {
                wr_id: w.wr_id,
                next: null_mut(),
                sg_list: Self::sg_ptr(l, w.num_sge)?,
                num_sge: w.num_sge,
            });
        }
        let base = c.as_mut_ptr();
        for i in 1..c.len() {
            c[i - 1].next = base.wrapping_add(i);
        }
        let head = if c.is_empty() { null_mut() } else { base };
        let mut bad: *mut ibv_recv_wr = null_mut();
        let bp: *mut *mut ibv_recv_wr = if with_bad_wr { &mut bad } else { null_mut() };
        // SAFETY: as `post_send`.
        let ops = unsafe {
            ops_of(if p.is_null() {
                null_mut()
            } else {
                (*p).context
            })
        };
        let f = ops.post_recv?;
        // SAFETY: as `post_send` (no AHs).
        let rc = unsafe { f(p, head, bp) };
        drop(lists);
        Some((rc, bad_index(bad, base, c.len())))
    }

    // ---- rdma_cm ------------------------------------------------------------------------------

    fn id_ptr(&self, id: Option<usize>) -> Option<*mut rdma_cm_id> {
        Self::opt(&self.ids, id)
    }

    /// `rdma_create_id` on shared channel `channel` (`None`: NULL) with port space `ps`;
    /// `null_out`: a NULL `id` out-parameter.
    pub fn create_id(
        &mut self,
        channel: Option<usize>,
        ps: rdma_port_space,
        null_out: bool,
    ) -> Option<Made> {
        let ch = match channel {
            None => null_mut(),
            Some(i) => *channel_pool().get(i)? as *mut rdma_event_channel,
        };
        let mut id: *mut rdma_cm_id = null_mut();
        let out: *mut *mut rdma_cm_id = if null_out { null_mut() } else { &mut id };
        set_errno(0);
        // SAFETY: `ch` NULL (checked) or a live shared channel; `out` NULL (checked) or
        // writable.
        let r = ret(unsafe { cm::rdma_create_id(ch, out, null_mut(), ps) });
        let slot = (r.rc == 0 && !id.is_null()).then(|| self.ids.insert(id));
        Some(Made {
            slot,
            errno: r.errno,
        })
    }

    /// Acks every held event of `id` (or naming it as listener), so `rdma_destroy_id` does not
    /// wait for good.
    fn ack_events_of(&mut self, id: *mut rdma_cm_id) {
        for s in self.events.live() {
            let Some(e) = self.events.get(s) else {
                continue;
            };
            // SAFETY: a held, unacked event (plain fields).
            let (eid, lid) = unsafe { ((*e).id, (*e).listen_id) };
            if eid == id || lid == id {
                // SAFETY: acked once; the slot is freed.
                unsafe { cm_event::rdma_ack_cm_event(e) };
                self.events.remove(s);
            }
        }
    }

    /// `rdma_destroy_id` (a live id or NULL). librdmacm's contract first: the id's held events
    /// are acked (its `rdma_destroy_id` waits for that) and its QP destroyed
    /// (`rdma_destroy_qp`). The slot is freed on 0.
    pub fn destroy_id(&mut self, id: Option<usize>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        if !p.is_null() {
            self.ack_events_of(p);
            // SAFETY: a live id.
            if !unsafe { (*p).qp }.is_null() {
                // SAFETY: a live id with a QP of `rdma_create_qp`.
                unsafe { cm_qp::rdma_destroy_qp(p) };
            }
        }
        set_errno(0);
        // SAFETY: NULL (checked) or a live id with no unacked event, freed only on 0.
        let r = ret(unsafe { cm::rdma_destroy_id(p) });
        if let (0, Some(s)) = (r.rc, id) {
            self.ids.remove(s);
        }
        Some(r)
    }

    /// `rdma_bind_addr` (an id or NULL; an address or NULL).
    pub fn bind_addr(&mut self, id: Option<usize>, addr: Option<&SockAddr>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut a = addr.map(SockAddr::storage);
        let ap = a
            .as_mut()
            .map_or(null_mut(), |a| (a as *mut libc::sockaddr_storage).cast());
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or a full
        // `sockaddr_storage`, long enough for any family's struct.
        Some(ret(unsafe { cm::rdma_bind_addr(p, ap) }))
    }

    /// `rdma_resolve_addr` (an id or NULL; addresses or NULL).
    pub fn resolve_addr(
        &mut self,
        id: Option<usize>,
        src: Option<&SockAddr>,
        dst: Option<&SockAddr>,
        timeout_ms: c_int,
    ) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut s = src.map(SockAddr::storage);
        let mut d = dst.map(SockAddr::storage);
        let sp = s
            .as_mut()
            .map_or(null_mut(), |a| (a as *mut libc::sockaddr_storage).cast());
        let dp = d
            .as_mut()
            .map_or(null_mut(), |a| (a as *mut libc::sockaddr_storage).cast());
        set_errno(0);
        // SAFETY: as `bind_addr`; the id's channel is a live shared channel.
        Some(ret(unsafe { cm::rdma_resolve_addr(p, sp, dp, timeout_ms) }))
    }

    /// `rdma_resolve_route` (an id or NULL).
    pub fn resolve_route(&mut self, id: Option<usize>, timeout_ms: c_int) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_resolve_route(p, timeout_ms) }))
    }

    /// `rdma_create_qp` (an id or NULL; a PD or NULL; attributes or NULL).
    pub fn rdma_create_qp(
        &mut self,
        id: Option<usize>,
        pd: Option<usize>,
        attr: Option<&QpInit>,
    ) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let pdp = Self::opt(&self.pds, pd)?;
        let mut a = match attr {
            Some(a) => Some(self.init_attr(a)?),
            None => None,
        };
        let ap = a
            .as_mut()
            .map_or(null_mut(), |a| a as *mut ibv_qp_init_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `pdp` NULL (the rdma_cm PD) or live; `ap` NULL
        // (checked) or a readable, writable struct with NULL or live CQs.
        Some(ret(unsafe { cm_qp::rdma_create_qp(p, pdp, ap) }))
    }

    /// `rdma_destroy_qp` (an id or NULL): the id's QP (and the CQs `rdma_create_qp` made for
    /// it) are destroyed. A QP of an id is only ever reached through the id here, so nothing
    /// is left pointing at it.
    pub fn rdma_destroy_qp(&mut self, id: Option<usize>) -> Option<()> {
        let p = self.id_ptr(id)?;
        // SAFETY: `p` NULL (checked) or live; its QP is only reached through the id.
        unsafe { cm_qp::rdma_destroy_qp(p) };
        Some(())
    }

    /// `struct rdma_conn_param` from `c` (the data pointer into `c`); `None` when the data is
    /// shorter than its length.
    fn conn_param(c: &ConnParam) -> Option<rdma_conn_param> {
        let data: *const c_void = match &c.private_data {
            None => null(),
            Some(d) if d.len() >= usize::from(c.private_data_len) => d.as_ptr().cast(),
            Some(_) => return None,
        };
        Some(rdma_conn_param {
            private_data: data,
            private_data_len: c.private_data_len,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: c.flow_control,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            srq: c.srq,
            qp_num: c.qp_num,
        })
    }

    /// `rdma_connect` (an id or NULL; parameters or NULL).
    pub fn connect(&mut self, id: Option<usize>, param: Option<&ConnParam>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut c = match param {
            Some(c) => Some(Self::conn_param(c)?),
            None => None,
        };
        let cp = c.as_mut().map_or(null_mut(), |c| c as *mut rdma_conn_param);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `cp` NULL or a struct whose private data holds
        // its length (borrowed from `param`).
        Some(ret(unsafe { cm::rdma_connect(p, cp) }))
    }

    /// `rdma_accept` (an id or NULL; parameters or NULL).
    pub fn accept(&mut self, id: Option<usize>, param: Option<&ConnParam>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut c = match param {
            Some(c) => Some(Self::conn_param(c)?),
            None => None,
        };
        let cp = c.as_mut().map_or(null_mut(), |c| c as *mut rdma_conn_param);
        set_errno(0);
        // SAFETY: as `connect`.
        Some(ret(unsafe { cm::rdma_accept(p, cp) }))
    }

    /// `rdma_listen` (an id or NULL).
    pub fn listen(&mut self, id: Option<usize>, backlog: c_int) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_listen(p, backlog) }))
    }

    /// `rdma_reject` (an id or NULL; `data` NULL or at least `len` bytes).
    pub fn reject(&mut self, id: Option<usize>, data: Option<&[u8]>, len: u8) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let dp: *const c_void = match data {
            None => null(),
            Some(d) if d.len() >= usize::from(len) => d.as_ptr().cast(),
            Some(_) => return None,
        };
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `dp` NULL or `len` readable bytes.
        Some(ret(unsafe { cm::rdma_reject(p, dp, len) }))
    }

    /// `rdma_disconnect` (an id or NULL).
    pub fn disconnect(&mut self, id: Option<usize>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; its QP, if any, is live.
        Some(ret(unsafe { cm::rdma_disconnect(p) }))
    }

    /// `rdma_establish` (an id or NULL).
    pub fn establish(&mut self, id: Option<usize>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_establish(p) }))
    }

    /// `rdma_notify` (an id or NULL).
    pub fn notify(&mut self, id: Option<usize>, event: c_int) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_notify(p, event) }))
    }

    /// `rdma_set_option` (an id or NULL; `optval` NULL or these bytes, `optlen` their length).
    pub fn set_option(
        &mut self,
        id: Option<usize>,
        level: c_int,
        optname: c_int,
        optval: Option<&[u8]>,
    ) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut v = optval.map(<[u8]>::to_vec);
        let (vp, len) = v.as_mut().map_or((null_mut(), 0), |v| {
            (v.as_mut_ptr().cast::<c_void>(), v.len())
        });
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `vp` NULL (checked) or `len` bytes.
        Some(ret(unsafe {
            cm::rdma_set_option(p, level, optname, vp, len)
        }))
    }

    /// `rdma_init_qp_attr` for `qp_state` (`None`: NULL `qp_attr`; `null_mask`: NULL
    /// `qp_attr_mask`); the attributes and mask written on success.
    pub fn init_qp_attr(
        &mut self,
        id: Option<usize>,
        qp_state: Option<ibv_qp_state>,
        null_mask: bool,
    ) -> Option<(Ret, Option<(ibv_qp_attr, c_int)>)> {
        let p = self.id_ptr(id)?;
        // SAFETY: integers and the GID union: all-zero is a valid value.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = qp_state.unwrap_or(0);
        let mut m: c_int = 0;
        let ap: *mut ibv_qp_attr = if qp_state.is_some() {
            &mut a
        } else {
            null_mut()
        };
        let mp: *mut c_int = if null_mask { null_mut() } else { &mut m };
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap`/`mp` NULL (checked) or writable.
        let r = ret(unsafe { cm::rdma_init_qp_attr(p, ap, mp) });
        let out = (r.rc == 0 && qp_state.is_some() && !null_mask).then_some((a, m));
        Some((r, out))
    }

    /// `rdma_get_src_port` and `rdma_get_dst_port` (an id or NULL), host order.
    pub fn ports(&mut self, id: Option<usize>) -> Option<(u16, u16)> {
        let p = self.id_ptr(id)?;
        // SAFETY: `p` NULL (checked) or live.
        let (s, d) = unsafe { (cm::rdma_get_src_port(p), cm::rdma_get_dst_port(p)) };
        Some((u16::from_be(s), u16::from_be(d)))
    }

    /// `rdma_get_cm_event` on shared channel `channel` (`None`: NULL), non-blocking
    /// (-1/`EAGAIN` when none is queued); the event's slot when one was read. An id it
    /// reports that this set does not hold yet (a CONNECT_REQUEST's) gets a slot.
    pub fn get_cm_event(
        &mut self,
        channel: Option<usize>,
        null_out: bool,
    ) -> Option<(Ret, Option<usize>)> {
        let ch = match channel {
            None => null_mut(),
            Some(i) => *channel_pool().get(i)? as *mut rdma_event_channel,
        };
        let mut ev: *mut rdma_cm_event = null_mut();
        let out: *mut *mut rdma_cm_event = if null_out { null_mut() } else { &mut ev };
        set_errno(0);
        // SAFETY: `ch` NULL (checked) or a live, non-blocking shared channel; `out` NULL
        // (checked) or writable.
        let r = ret(unsafe { cm_event::rdma_get_cm_event(ch, out) });
        if r.rc != 0 || ev.is_null() {
            return Some((r, None));
        }
        // SAFETY: the event just returned (plain fields); its id is live.
        let id = unsafe { (*ev).id };
        if !id.is_null() && self.ids.find(id).is_none() {
            self.ids.insert(id);
        }
        Some((r, Some(self.events.insert(ev))))
    }

    /// `rdma_ack_cm_event` (a held event or NULL); the slot is freed (the event is gone
    /// whatever the call returns).
    pub fn ack_cm_event(&mut self, ev: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.events, ev)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a held event, acked once.
        let r = ret(unsafe { cm_event::rdma_ack_cm_event(p) });
        if let Some(s) = ev {
            self.events.remove(s);
        }
        Some(r)
    }

    /// A held event's fields.
    pub fn event_info(&self, ev: usize) -> Option<EventInfo> {
        let p = self.events.get(ev)?;
        // SAFETY: a held event (plain fields).
        let e = unsafe { &*p };
        Some(EventInfo {
            event: e.event,
            status: e.status,
            id: self.ids.find(e.id),
            listen_id: self.ids.find(e.listen_id),
            // SAFETY: `conn` is the member librnic fills (plain fields either way).
            private_data_len: unsafe { e.param.conn.private_data_len },
        })
    }

    /// A live id's fields.
    pub fn id_info(&self, id: usize) -> Option<IdInfo> {
        let p = self.ids.get(id)?;
        // SAFETY: a live id (plain fields).
        let c = unsafe { &*p };
        let ch = c.channel as usize;
        Some(IdInfo {
            has_qp: !c.qp.is_null(),
            bound: !c.verbs.is_null(),
            ps: c.ps,
            channel: channel_pool().iter().position(|&x| x == ch && x != 0),
        })
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

/// An SGE list as `struct ibv_sge`s.
fn c_sges(l: &Option<Vec<verbs_core::Sge>>) -> Option<Vec<ibv_sge>> {
    l.as_ref().map(|v| {
        v.iter()
            .map(|g| ibv_sge {
                addr: g.addr,
                length: g.length,
                lkey: g.lkey,
            })
            .collect()
    })
}

/// Where `bad` points in the `n` WRs at `base`.
fn bad_index<T>(bad: *mut T, base: *mut T, n: usize) -> BadWr {
    if bad.is_null() {
        return BadWr::Untouched;
    }
    (0..n)
        .find(|&i| base.wrapping_add(i) == bad)
        .map_or(BadWr::Other, BadWr::Index)
}
