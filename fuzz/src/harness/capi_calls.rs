//! Target `capi_calls`: the argument checks of librnic's C ABI (`capi/`). An input is a
//! sequence of libibverbs and librdmacm calls, made in process on the real `extern "C"` entry
//! points through [`rnic::calls`] (the safe layer in capi's `ffi` module: this harness has no
//! `unsafe`). Each call's arguments are well-formed memory — live objects of the library or
//! NULL where the entry point checks for NULL, C structs built from the input's values — and
//! the values are the input's: counts, lengths, keys, enum values, flag and mask bits, port
//! numbers, addresses, private-data lengths, and which object (or NULL) goes where, including
//! objects in the wrong state, of another context or PD, and keys of deregistered regions.
//!
//! One runtime per process, started on the first input with a closed world: every datagram is
//! dropped in both directions (`RNIC_DROP_RATE` 1, so nothing from outside reaches it and no
//! peer answers), address resolution is immediate, Linux's (long) CM timers. Each input makes
//! its objects in one [`Calls`], polls, and tears everything down at its end.
//!
//! Records (the first byte picks the call, modulo [`CALLS`]; see [`Call`]): open/close a
//! device, the four queries, PD, MR (`ibv_reg_mr` and `ibv_reg_mr_iova2` over a 64 KiB arena or
//! NULL), completion channels, CQs, arm/poll/get-event, QPs (create, modify from a valid
//! attribute set with one field and the mask corrupted, query, destroy), posting send and
//! receive WR lists (opcodes, flags, SGE counts and lists, lkeys live/stale/foreign, inline
//! data, atomics, AHs), AHs, async events; rdma_cm ids on two shared event channels (bind,
//! resolve address and route, `rdma_create_qp`/`rdma_destroy_qp`, connect, listen, accept,
//! reject, disconnect, establish/notify, set_option, init_qp_attr, get/ack events, ports).
//!
//! Checked, besides "no panic" (a panic inside an entry point is caught there and returned as
//! EIO, which no expectation allows, except a poll of a CQ that may have overrun):
//!
//! * every call keeps its return convention (objects: non-NULL, or NULL with errno set; the
//!   `int` verbs: 0 or a positive errno; rdma_cm calls and `ibv_query_gid`/`_pkey`,
//!   `ibv_get_cq_event`, `ibv_get_async_event`: 0, or -1 with errno set; `ibv_poll_cq`: a count
//!   up to what was asked, or a negative errno);
//! * every result is one rdma-core (libibverbs, librdmacm, the kernel, rxe) gives for those
//!   arguments in that state — exactly where rdma-core's answer does not depend on the provider
//!   (NULLs the library documents checking, unknown enum values, mask bits above `DEST_QPN`
//!   being EOPNOTSUPP, the QP transition table of `verbs_core::transition_masks` (Linux's
//!   `qp_state_table`) with the claimed current state, attribute ranges, capabilities against
//!   the device's limits, CQ sizes, MR access rules and page offsets, posting in a state that
//!   refuses it with `*bad_wr` the first WR, SGE counts, atomic lengths and alignment, inline
//!   sizes, full queues, PDs/CQs/channels in use being EBUSY, the rdma_cm state machine, private
//!   data and responder-resource limits, librdmacm's own checks); from a set where providers
//!   or documented differences of librnic (`docs/capi.md`) disagree (see `allowed` at each
//!   call);
//! * a post that fails names the first WR not posted in `*bad_wr`, and every WR before it was
//!   posted; every completion polled is of a WR posted on a QP of that CQ, once;
//! * the QP state libibverbs caches (`qp->state`) follows successful modifies; `ibv_query_qp`
//!   reports the modelled state, capabilities and attributes;
//! * the CM events fetched are the ones the calls queued (ADDR_RESOLVED, ROUTE_RESOLVED), in
//!   order, on the id's channel, and `EAGAIN` when none is due;
//! * nothing leaks across inputs: after the teardown, which must succeed call by call, the
//!   library's object counts ([`rnic::calls::counts`]: the device's PDs, MRs, CQs and QPs, CM
//!   ids, the handle registry, completion channels, queued async and CM events) are back to
//!   what they were before the input.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::OnceLock;

use rnic::abi::*;
use rnic::calls::{
    self, BadWr, Calls, ConnParam, Kind, Made, MrAddr, QpInit, QpRef, RecvWr, Ret, SendWr,
    SockAddr, ARENA_LEN, CM_CHANNELS,
};
use rnic::config::Config;
use verbs_core::{transition_masks, Mtu, QpAttrMask, QpCap, QpState, QpType, Sge};

use super::input::{Input, Output};

/// Records per input, at most.
pub const MAX_RECORDS: usize = 64;
/// Live objects of one kind an input may hold; a create beyond it is skipped.
pub const MAX_LIVE: usize = 4;
/// WRs per post, SGEs per WR (in the list; `num_sge` may say more or less).
pub const MAX_WRS: usize = 4;
/// SGEs per WR list.
pub const MAX_SGES: usize = 4;

// errno values (Linux x86-64).
const EIO: i32 = 5;
const EAGAIN: i32 = 11;
const ENOMEM: i32 = 12;
const EBUSY: i32 = 16;
const EINVAL: i32 = 22;
const ENOSYS: i32 = 38;
const EOPNOTSUPP: i32 = 95;
const EAFNOSUPPORT: i32 = 97;
const EADDRINUSE: i32 = 98;
const EADDRNOTAVAIL: i32 = 99;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const AF_IB: u16 = 27;

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: "the device's maximum" (librdmacm).
const RDMA_MAX: u8 = 0xFF;

/// One field of a record: read from the input, written by the corpus generator.
pub trait Field: Sized {
    /// Reads the field; `None` at the end of the input.
    fn read(inp: &mut Input<'_>) -> Option<Self>;
    /// Appends the field.
    fn write(&self, out: &mut Output);
}

impl Field for u8 {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        inp.u8()
    }
    fn write(&self, out: &mut Output) {
        out.u8(*self);
    }
}

impl Field for u16 {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        inp.u16()
    }
    fn write(&self, out: &mut Output) {
        out.u16(*self);
    }
}

impl Field for u32 {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        let lo = inp.u16()?;
        let hi = inp.u16()?;
        Some(u32::from(lo) | u32::from(hi) << 16)
    }
    fn write(&self, out: &mut Output) {
        out.u16(*self as u16).u16((*self >> 16) as u16);
    }
}

/// A list: a count byte (modulo `MAX_WRS + 1`), then the items.
impl<T: Field> Field for Vec<T> {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        let n = usize::from(inp.u8()?) % (MAX_WRS + 1);
        (0..n).map(|_| T::read(inp)).collect()
    }
    fn write(&self, out: &mut Output) {
        let n = self.len().min(MAX_WRS);
        out.u8(n as u8);
        for x in self.iter().take(n) {
            x.write(out);
        }
    }
}

macro_rules! fields_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        impl Field for $name {
            fn read(inp: &mut Input<'_>) -> Option<Self> {
                Some($name { $($f: <$t>::read(inp)?),* })
            }
            fn write(&self, out: &mut Output) {
                $(self.$f.write(out);)*
            }
        }
    };
}

fields_struct! {
    /// One SGE of a WR: which region its key and address come from, and how.
    SgeSpec {
        /// The region (a live MR slot by index; 0xF8.. none: the key and address below raw).
        mr: u8,
        /// Offset from the region's start (signed 16 bits: may start before it).
        off: u16,
        /// Length.
        len: u16,
        /// Key: 0 the MR's lkey, 1 its rkey, 2 a deregistered key, 3 `off`/`len` as a raw key.
        key: u8,
    }
}

fields_struct! {
    /// A send WR.
    SendSpec {
        /// `opcode`: below 7 as is, 7.. any value (`opcode` itself).
        opcode: u8,
        /// `send_flags` (IBV_SEND_*: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8; others raw).
        flags: u8,
        /// `num_sge`: 0..=4 as is (the list's length), 5 one more than the list, 6 -1, 7 large.
        nsge: u8,
        /// The SGE list (empty and `nsge` 0xFF: `sg_list` NULL).
        sges: Vec<SgeSpec>,
        /// Remote region (an MR slot by index) for RDMA/atomics; bit 7: rkey raw.
        remote: u8,
        /// Offset into it (may be unaligned or outside).
        roff: u16,
        /// AH (an AH slot by index, 0xF8.. NULL).
        ah: u8,
    }
}

fields_struct! {
    /// A receive WR.
    RecvSpec {
        /// `num_sge`, as [`SendSpec::nsge`].
        nsge: u8,
        /// The SGE list.
        sges: Vec<SgeSpec>,
    }
}

fields_struct! {
    /// `struct rdma_conn_param`, or NULL.
    ParamSpec {
        /// 0xF0..: NULL parameters.
        null: u8,
        /// `private_data_len`.
        len: u8,
        /// 0xF0..: `private_data` NULL (with `len` as given).
        data_null: u8,
        /// `responder_resources`.
        rr: u8,
        /// `initiator_depth`.
        depth: u8,
        /// `retry_count`, `rnr_retry_count` (4 bits each).
        retries: u8,
    }
}

macro_rules! calls {
    ($($n:literal => $(#[$m:meta])* $name:ident { $($f:ident : $t:ty),* $(,)? }),* $(,)?) => {
        /// One record: a call and the choices its arguments are made from (object choices
        /// are bytes: below 0xF8 an index into the live objects of the kind, else NULL).
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Call { $($(#[$m])* $name { $($f: $t),* }),* }

        /// The number of record kinds.
        pub const CALLS: u8 = [$($n),*].len() as u8;

        impl Call {
            /// Reads the next record; `None` at the end of the input.
            pub fn read(inp: &mut Input<'_>) -> Option<Call> {
                let op = inp.u8()? % CALLS;
                $(if op == $n {
                    return Some(Call::$name { $($f: <$t>::read(inp)?),* });
                })*
                None
            }

            /// Appends this record in the form [`Call::read`] reads.
            pub fn write(&self, out: &mut Output) {
                match self {
                    $(Call::$name { $($f),* } => {
                        out.u8($n);
                        $(Field::write($f, out);)*
                    })*
                }
            }
        }
    };
}

calls! {
    0 => /// `ibv_open_device` (of NULL when `null % 8 == 7`).
    OpenDevice { null: u8 },
    1 => /// `ibv_close_device`.
    CloseDevice { ctx: u8 },
    2 => /// `what % 4`: `ibv_query_device`, `_port`, `_gid`, `_pkey`; `null % 8 == 7`: NULL out.
    Query { ctx: u8, what: u8, port: u8, index: u8, null: u8 },
    3 => /// `ibv_alloc_pd`.
    AllocPd { ctx: u8 },
    4 => /// `ibv_dealloc_pd`.
    DeallocPd { pd: u8 },
    5 => /// `ibv_reg_mr` / `ibv_reg_mr_iova2`: arena offset (0xFFFF: NULL), length, iova mode
    /// (`iova % 5`: none, = addr, page-offset-preserving `v << 12`, raw `v`, near 2^64),
    /// access bits.
    RegMr { pd: u8, off: u16, len: u16, iova: u8, v: u32, access: u32 },
    6 => /// `ibv_dereg_mr`.
    DeregMr { mr: u8 },
    7 => /// `ibv_create_comp_channel`.
    CreateCompChannel { ctx: u8 },
    8 => /// `ibv_destroy_comp_channel`.
    DestroyCompChannel { ch: u8 },
    9 => /// `ibv_create_cq` (cqe from a table of edge values, or raw).
    CreateCq { ctx: u8, cqe: u8, raw: u32, ch: u8 },
    10 => /// `ibv_destroy_cq`.
    DestroyCq { cq: u8 },
    11 => /// `ibv_req_notify_cq`.
    ReqNotifyCq { cq: u8, solicited: u8 },
    12 => /// `ibv_poll_cq` (`n`: the count, signed; `null % 8 == 7`: NULL `wc`).
    PollCq { cq: u8, n: u8, null: u8 },
    13 => /// `ibv_get_cq_event`.
    GetCqEvent { ch: u8, null: u8 },
    14 => /// `ibv_create_qp` (`null % 8 == 7`: NULL attributes; caps from a table or raw).
    CreateQp { pd: u8, null: u8, scq: u8, rcq: u8, qp_type: u8, caps: u32, sig: u8 },
    15 => /// `ibv_modify_qp` on a QP (bit 6 of `qp`: an id's QP): target state, mask mode,
    /// raw mask bits, one field corrupted (`fix`) to `v`.
    ModifyQp { qp: u8, null: u8, target: u8, mode: u8, mask: u32, fix: u8, v: u32 },
    16 => /// `ibv_query_qp`.
    QueryQp { qp: u8, null: u8 },
    17 => /// `ibv_destroy_qp`.
    DestroyQp { qp: u8 },
    18 => /// `ibv_post_send` (`bad`: bit 0 `bad_wr` given).
    PostSend { qp: u8, bad: u8, wrs: Vec<SendSpec> },
    19 => /// `ibv_post_recv`.
    PostRecv { qp: u8, bad: u8, wrs: Vec<RecvSpec> },
    20 => /// `ibv_create_ah` (a valid vector with one field corrupted).
    CreateAh { pd: u8, null: u8, fix: u8, v: u32 },
    21 => /// `ibv_destroy_ah`.
    DestroyAh { ah: u8 },
    22 => /// `ibv_get_async_event` (non-blocking).
    GetAsyncEvent { ctx: u8, null: u8 },
    23 => /// `rdma_create_id` on shared channel `ch % 3` (2: NULL); port space by `ps`.
    CreateId { ch: u8, ps: u8, null: u8 },
    24 => /// `rdma_destroy_id`.
    DestroyId { id: u8 },
    25 => /// `rdma_bind_addr` (`addr`: which address; `port`).
    BindAddr { id: u8, addr: u8, port: u16 },
    26 => /// `rdma_resolve_addr`.
    ResolveAddr { id: u8, src: u8, dst: u8, port: u16 },
    27 => /// `rdma_resolve_route`.
    ResolveRoute { id: u8 },
    28 => /// `rdma_create_qp` (PD: bit 7 of `pd` clear: NULL; CQs may be NULL).
    RdmaCreateQp { id: u8, pd: u8, null: u8, scq: u8, rcq: u8, qp_type: u8, caps: u32 },
    29 => /// `rdma_destroy_qp`.
    RdmaDestroyQp { id: u8 },
    30 => /// `rdma_connect`.
    Connect { id: u8, param: ParamSpec },
    31 => /// `rdma_listen`.
    Listen { id: u8, backlog: u8 },
    32 => /// `rdma_accept`.
    Accept { id: u8, param: ParamSpec },
    33 => /// `rdma_reject`.
    Reject { id: u8, null: u8, len: u8 },
    34 => /// `rdma_disconnect`.
    Disconnect { id: u8 },
    35 => /// `which % 3`: `rdma_establish`, `rdma_notify(COMM_EST)`, `rdma_notify(other)`.
    Establish { id: u8, which: u8 },
    36 => /// `rdma_set_option`.
    SetOption { id: u8, opt: u8, null: u8 },
    37 => /// `rdma_init_qp_attr` (`state`: the `qp_state` asked; `null`: which pointer NULL).
    InitQpAttr { id: u8, state: u8, null: u8 },
    38 => /// `rdma_get_cm_event` on shared channel `ch % 3` (2: NULL).
    GetCmEvent { ch: u8, null: u8 },
    39 => /// `rdma_ack_cm_event`.
    AckCmEvent { ev: u8 },
    40 => /// `rdma_get_src_port` / `rdma_get_dst_port`.
    Ports { id: u8 },
    41 => /// Polls every CQ until empty.
    PollAll {},
}

// ---- the process's runtime ------------------------------------------------------------------

/// What every input shares: the runtime's address and the device's limits.
#[derive(Debug, Clone)]
struct Env {
    ip: Ipv4Addr,
    max_qp_wr: u32,
    max_sge: u32,
    max_cqe: u32,
    max_rd_atom: u32,
    max_init_rd_atom: u32,
    max_inline: u32,
}

/// The configuration the harness runs the library with (see the module docs).
pub fn config() -> Config {
    Config {
        addr: None,
        device: "rnic0".to_string(),
        mtu: Mtu::Mtu1024,
        drop_rate: 1.0,
        seed: Some(0x0063_6170_6921),
        fast_timers: false,
        resolve_us: 0,
        stats: None,
    }
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        // The library's log (warnings for refused calls, e.g. a foreign bind address, on
        // every such call) stays off: a subscriber set first wins over librnic's.
        let _ =
            tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
        let cfg = config();
        let r = match calls::start(cfg.clone()) {
            Ok(r) => r,
            Err(e) => panic!("capi_calls: the runtime did not start: {e}"),
        };
        assert!(
            r.config() == &cfg,
            "capi_calls: librnic's runtime already runs with another configuration: {:?}",
            r.config()
        );
        let std::net::IpAddr::V4(ip) = r.addr().ip() else {
            panic!(
                "capi_calls: the runtime's address is not IPv4: {}",
                r.addr()
            );
        };
        let max_inline = r.with_quiet(|n, _| n.device().config().max_inline_data);
        // Warm up what the library makes once per process: the rdma_cm context and PD (a
        // bound id's `rdma_create_qp` with a NULL PD), the shared channels.
        let mut c = Calls::new();
        let ctx = c
            .open_device(false)
            .slot
            .unwrap_or_else(|| panic!("warm-up: no device"));
        let (q, attr) = c
            .query_device(ctx, false)
            .unwrap_or_else(|| panic!("warm-up: query"));
        let Some(a) = attr.filter(|_| q.rc == 0) else {
            panic!("warm-up: ibv_query_device {q:?}");
        };
        let lim = |v: i32| u32::try_from(v).unwrap_or(0);
        for ch in 0..CM_CHANNELS {
            let id = c.create_id(Some(ch), RDMA_PS_TCP, false);
            let Some(id) = id.and_then(|m| m.slot) else {
                panic!("warm-up: rdma_create_id {id:?}");
            };
            let own = SockAddr::Ip(SocketAddr::new(ip.into(), 0));
            let b = c.bind_addr(Some(id), Some(&own));
            assert!(b.is_some_and(|b| b.rc == 0), "warm-up: bind {b:?}");
            let init = QpInit {
                send_cq: None,
                recv_cq: None,
                cap: QpCap {
                    max_send_wr: 1,
                    max_recv_wr: 1,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: IBV_QPT_RC,
                sq_sig_all: 0,
            };
            let q = c.rdma_create_qp(Some(id), None, Some(&init));
            assert!(
                q.is_some_and(|q| q.rc == 0),
                "warm-up: rdma_create_qp {q:?}"
            );
        }
        let failed = c.teardown();
        assert!(failed.is_empty(), "warm-up teardown: {failed:?}");
        drain_async();
        Env {
            ip,
            max_qp_wr: lim(a.max_qp_wr),
            max_sge: lim(a.max_sge),
            max_cqe: lim(a.max_cqe),
            max_rd_atom: lim(a.max_qp_rd_atom),
            max_init_rd_atom: lim(a.max_qp_init_rd_atom),
            max_inline,
        }
    })
}

/// Reads the device's async events until there is none (those of destroyed objects are
/// skipped by the call itself).
fn drain_async() {
    let mut c = Calls::new();
    let ctx = c.cm_context();
    for _ in 0..100_000 {
        match c.get_async_event(Some(ctx), false) {
            Some((r, _)) if r.rc == 0 => {}
            _ => break,
        }
    }
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let env = env();
    let before = calls::counts().unwrap_or_default();
    let mut h = Harness::new(env);
    let mut inp = Input::new(data);
    for _ in 0..MAX_RECORDS {
        let Some(call) = Call::read(&mut inp) else {
            break;
        };
        h.log.borrow_mut().push(format!("{call:?}"));
        h.apply(&call);
    }
    h.finish();
    drain_async();
    let after = calls::counts().unwrap_or_default();
    let log = h.log.borrow().join("\n");
    assert_eq!(
        after, before,
        "capi_calls: objects leaked across the input (before/after)\n{log}"
    );
    if std::env::var_os("RNIC_CAPI_CALLS_SHOW").is_some() {
        eprintln!("capi_calls input:\n{log}\n");
    }
}

// ---- the model ------------------------------------------------------------------------------

/// A QP: one of `ibv_create_qp` (its slot) or an id's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum QpKey {
    Qp(usize),
    Id(usize),
}

impl QpKey {
    fn r(self) -> QpRef {
        match self {
            QpKey::Qp(s) => QpRef::Qp(s),
            QpKey::Id(s) => QpRef::Id(s),
        }
    }
}

#[derive(Debug, Clone)]
struct QpM {
    qp_type: QpType,
    cap: QpCap,
    /// `None`: not known (adopted from the next query).
    state: Option<QpState>,
    /// WRs were posted: the device may have moved it to ERR on its own (an RC retry count
    /// exhausted, a local error, a CQ overrun).
    touched: bool,
    pd: Option<usize>,
    send_cq: Option<usize>,
    recv_cq: Option<usize>,
    qp_num: u32,
    /// `sq_sig_all`.
    sig_all: bool,
    /// Posted and not completed.
    sq: BTreeSet<u64>,
    rq: BTreeSet<u64>,
    /// The send WRs of `sq` that complete whatever happens (signaled), as every receive does.
    sq_sig: BTreeSet<u64>,
}

#[derive(Debug, Clone, Copy)]
struct MrM {
    pd: usize,
    iova: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cm {
    Idle,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Connect,
    Listen,
    /// After a call whose outcome rdma-core and librnic may disagree on: anything goes.
    Unknown,
}

#[derive(Debug, Clone)]
struct IdM {
    ps: u32,
    channel: usize,
    state: Cm,
    /// `id->verbs` is set (bound to the device, not the wildcard).
    bound: bool,
    src_port: Option<u16>,
    dst_port: Option<u16>,
    /// An IB CM id exists (connect or listen happened).
    cm_id: bool,
    qp: Option<QpM>,
}

/// The QP types the simulated RNIC supports.
fn qp_type_ok(t: u32) -> Option<QpType> {
    u8::try_from(t)
        .ok()
        .and_then(QpType::from_raw)
        .filter(|t| *t != QpType::Uc)
}

struct Harness {
    env: &'static Env,
    c: Calls,
    /// The calls so far with their results (printed when a check fails).
    log: RefCell<Vec<String>>,
    ctxs: BTreeSet<usize>,
    cm_ctx: usize,
    pds: BTreeMap<usize, usize>,
    mrs: BTreeMap<usize, MrM>,
    dead_keys: Vec<u32>,
    comps: BTreeSet<usize>,
    cqs: BTreeMap<usize, (Option<usize>, u32, u64)>,
    qps: BTreeMap<usize, QpM>,
    /// WR ids of destroyed QPs whose completions may still be in a CQ: qp_num → ids.
    retired: BTreeMap<u32, BTreeSet<u64>>,
    ahs: BTreeMap<usize, usize>,
    ids: BTreeMap<usize, IdM>,
    events: BTreeMap<usize, usize>,
    queues: Vec<VecDeque<(usize, u32)>>,
    next_wr: u64,
}

/// What a call may return: its errno (0 for success), exact or from a set.
type Want = Vec<i32>;

fn want(v: &[i32]) -> Want {
    v.to_vec()
}

impl Harness {
    fn new(env: &'static Env) -> Harness {
        let mut c = Calls::new();
        let cm_ctx = c.cm_context();
        Harness {
            env,
            c,
            log: RefCell::new(Vec::new()),
            ctxs: BTreeSet::new(),
            cm_ctx,
            pds: BTreeMap::new(),
            mrs: BTreeMap::new(),
            dead_keys: Vec::new(),
            comps: BTreeSet::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            retired: BTreeMap::new(),
            ahs: BTreeMap::new(),
            ids: BTreeMap::new(),
            events: BTreeMap::new(),
            queues: vec![VecDeque::new(); CM_CHANNELS],
            next_wr: 1,
        }
    }

    fn fail(&self, msg: String) -> ! {
        panic!(
            "capi_calls: {msg}\ncalls of this input:\n{}",
            self.log.borrow().join("\n")
        )
    }

    /// Adds a result to the log.
    fn note(&self, what: &str, got: impl std::fmt::Display) {
        if let Some(l) = self.log.borrow_mut().last_mut() {
            l.push_str(&format!("\n    {what}: {got}"));
        }
    }

    fn verdict(&self, what: &str, got: i32, w: &[i32]) {
        self.note(what, got);
        if !w.contains(&got) {
            let hint = if got == EIO {
                " (EIO: a panic inside the entry point?)"
            } else {
                ""
            };
            self.fail(format!(
                "{what} returned errno {got}{hint}, expected one of {w:?}"
            ));
        }
    }

    /// An `int` verb: 0 or a positive errno.
    fn int_ret(&self, what: &str, r: Ret, w: &[i32]) -> i32 {
        if r.rc < 0 {
            self.fail(format!("{what} returned {r:?}: negative, not an errno"));
        }
        self.verdict(what, r.rc, w);
        r.rc
    }

    /// An rdma_cm-style call: 0, or -1 with errno.
    fn neg1_ret(&self, what: &str, r: Ret, w: &[i32]) -> i32 {
        let got = match r.rc {
            0 => 0,
            -1 if r.errno > 0 => r.errno,
            _ => self.fail(format!(
                "{what} returned {r:?}: not 0, nor -1 with errno set"
            )),
        };
        self.verdict(what, got, w);
        got
    }

    /// An object call: non-NULL, or NULL with errno.
    fn made_ret(&self, what: &str, m: Made, w: &[i32]) -> i32 {
        let got = match m.slot {
            Some(_) => 0,
            None if m.errno > 0 => m.errno,
            None => self.fail(format!("{what} returned NULL without errno")),
        };
        self.verdict(what, got, w);
        got
    }

    /// A live object of `k` chosen by `b` (0xF8..: NULL; none live: NULL).
    fn pick(&self, k: Kind, b: u8) -> Option<usize> {
        if b >= 0xF8 {
            return None;
        }
        let live = match k {
            Kind::Context => {
                let mut v: Vec<usize> = self.ctxs.iter().copied().collect();
                v.push(self.cm_ctx);
                v
            }
            _ => self.c.live(k),
        };
        (!live.is_empty()).then(|| live[usize::from(b) % live.len()])
    }

    /// A context (never NULL: the entry points that take one do not check it).
    fn ctx(&self, b: u8) -> usize {
        self.pick(Kind::Context, b & 0x7F).unwrap_or(self.cm_ctx)
    }

    /// A QP argument (bit 6: an id's QP).
    fn pick_qp(&self, b: u8) -> Option<QpKey> {
        if b >= 0xF8 {
            return None;
        }
        if b & 0x40 != 0 {
            let ids: Vec<usize> = self.ids.keys().copied().collect();
            (!ids.is_empty()).then(|| QpKey::Id(ids[usize::from(b & 0x3F) % ids.len()]))
        } else {
            let qps: Vec<usize> = self.qps.keys().copied().collect();
            (!qps.is_empty()).then(|| QpKey::Qp(qps[usize::from(b) % qps.len()]))
        }
    }

    fn qp(&self, k: QpKey) -> Option<&QpM> {
        match k {
            QpKey::Qp(s) => self.qps.get(&s),
            QpKey::Id(s) => self.ids.get(&s).and_then(|i| i.qp.as_ref()),
        }
    }

    fn qp_mut(&mut self, k: QpKey) -> Option<&mut QpM> {
        match k {
            QpKey::Qp(s) => self.qps.get_mut(&s),
            QpKey::Id(s) => self.ids.get_mut(&s).and_then(|i| i.qp.as_mut()),
        }
    }

    fn all_qps(&self) -> Vec<&QpM> {
        self.qps
            .values()
            .chain(self.ids.values().filter_map(|i| i.qp.as_ref()))
            .collect()
    }

    fn full(&self, k: Kind) -> bool {
        self.c.live(k).len() >= MAX_LIVE
    }

    /// Brings the model's state of QP `k` in line with the device: an unknown state is
    /// adopted; a touched QP may have gone to ERR on its own; anything else must match.
    fn sync(&mut self, k: QpKey) {
        let Some(q) = self.qp(k) else { return };
        if q.state.is_some() && !q.touched {
            return;
        }
        let Some((r, attr, _)) = self.c.query_qp(Some(k.r()), false, false) else {
            return;
        };
        let Some(a) = attr.filter(|_| r.rc == 0) else {
            self.fail(format!("ibv_query_qp of a live QP: {r:?}"));
        };
        let dev = u8::try_from(a.qp_state).ok().and_then(QpState::from_raw);
        let Some(dev) = dev else {
            self.fail(format!("ibv_query_qp: unknown qp_state {}", a.qp_state));
        };
        let model = self.qp(k).and_then(|q| q.state);
        match model {
            None => {}
            Some(s) if s == dev => {}
            Some(_) if dev == QpState::Err => {}
            Some(s) => self.fail(format!(
                "QP {k:?}: the device says {dev:?}, the calls made it {s:?}"
            )),
        }
        if let Some(q) = self.qp_mut(k) {
            q.state = Some(dev);
        }
    }

    // ---- the calls ----------------------------------------------------------------------------

    fn apply(&mut self, call: &Call) {
        match *call {
            Call::OpenDevice { null } => {
                if self.ctxs.len() >= MAX_LIVE {
                    return;
                }
                let null = null % 8 == 7;
                let m = self.c.open_device(null);
                let w = if null { want(&[EINVAL]) } else { want(&[0]) };
                self.made_ret("ibv_open_device", m, &w);
                if let Some(s) = m.slot {
                    self.ctxs.insert(s);
                }
            }
            Call::CloseDevice { ctx } => {
                let s = self.pick(Kind::Context, ctx);
                if let Some(r) = self.c.close_device(s) {
                    self.int_ret("ibv_close_device", r, &[0]);
                    if let Some(s) = s {
                        self.ctxs.remove(&s);
                        if s == self.cm_ctx {
                            self.cm_ctx = self.c.cm_context();
                        }
                    }
                }
            }
            Call::Query {
                ctx,
                what,
                port,
                index,
                null,
            } => self.query(self.ctx(ctx), what, port, index, null % 8 == 7),
            Call::AllocPd { ctx } => {
                if self.full(Kind::Pd) {
                    return;
                }
                let ctx = self.ctx(ctx);
                let Some(m) = self.c.alloc_pd(ctx) else {
                    return;
                };
                self.made_ret("ibv_alloc_pd", m, &[0]);
                if let Some(s) = m.slot {
                    self.pds.insert(s, ctx);
                }
            }
            Call::DeallocPd { pd } => {
                let s = self.pick(Kind::Pd, pd);
                let w = match s {
                    None => want(&[EINVAL]),
                    Some(s) => {
                        let used = self.mrs.values().any(|m| m.pd == s)
                            || self.all_qps().iter().any(|q| q.pd == Some(s));
                        let ah = self.ahs.values().any(|&p| p == s);
                        if used {
                            want(&[EBUSY])
                        } else if ah {
                            // rdma-core: EBUSY (the kernel counts AHs as users of the PD);
                            // librnic's AHs are not device objects.
                            want(&[0, EBUSY])
                        } else {
                            want(&[0])
                        }
                    }
                };
                let Some(r) = self.c.dealloc_pd(s) else {
                    return;
                };
                if self.int_ret("ibv_dealloc_pd", r, &w) == 0 {
                    if let Some(s) = s {
                        self.pds.remove(&s);
                    }
                }
            }
            Call::RegMr {
                pd,
                off,
                len,
                iova,
                v,
                access,
            } => self.reg_mr(pd, off, len, iova, v, access),
            Call::DeregMr { mr } => {
                let s = self.pick(Kind::Mr, mr);
                let Some(r) = self.c.dereg_mr(s) else { return };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.int_ret("ibv_dereg_mr", r, &w) == 0 {
                    if let Some(m) = s.and_then(|s| self.mrs.remove(&s)) {
                        self.dead_keys.push(m.lkey);
                        self.dead_keys.push(m.rkey);
                    }
                }
            }
            Call::CreateCompChannel { ctx } => {
                if self.full(Kind::CompChannel) {
                    return;
                }
                let Some(m) = self.c.create_comp_channel(self.ctx(ctx)) else {
                    return;
                };
                self.made_ret("ibv_create_comp_channel", m, &[0]);
                if let Some(s) = m.slot {
                    self.comps.insert(s);
                }
            }
            Call::DestroyCompChannel { ch } => {
                let s = self.pick(Kind::CompChannel, ch);
                let w = match s {
                    None => [EINVAL],
                    Some(s) if self.cqs.values().any(|c| c.0 == Some(s)) => [EBUSY],
                    Some(_) => [0],
                };
                let Some(r) = self.c.destroy_comp_channel(s) else {
                    return;
                };
                if self.int_ret("ibv_destroy_comp_channel", r, &w) == 0 {
                    if let Some(s) = s {
                        self.comps.remove(&s);
                    }
                }
            }
            Call::CreateCq { ctx, cqe, raw, ch } => {
                if self.full(Kind::Cq) {
                    return;
                }
                let max = self.env.max_cqe as i32;
                let table = [1, 2, 4, 16, 0, -1, max, max + 1, i32::MIN, i32::MAX, 3, 64];
                let n = if cqe < 0xC0 {
                    table[usize::from(cqe) % table.len()]
                } else {
                    raw as i32
                };
                let chs = self.pick(Kind::CompChannel, ch);
                let Some(m) = self.c.create_cq(self.ctx(ctx), n, chs) else {
                    return;
                };
                let w = if n < 1 || n > max { [EINVAL] } else { [0] };
                self.made_ret("ibv_create_cq", m, &w);
                if let Some(s) = m.slot {
                    self.cqs.insert(s, (chs, n as u32, 0));
                }
            }
            Call::DestroyCq { cq } => {
                let s = self.pick(Kind::Cq, cq);
                let w = match s {
                    None => [EINVAL],
                    Some(s)
                        if self
                            .all_qps()
                            .iter()
                            .any(|q| q.send_cq == Some(s) || q.recv_cq == Some(s)) =>
                    {
                        [EBUSY]
                    }
                    Some(_) => [0],
                };
                let Some(r) = self.c.destroy_cq(s) else {
                    return;
                };
                if self.int_ret("ibv_destroy_cq", r, &w) == 0 {
                    if let Some(s) = s {
                        self.cqs.remove(&s);
                    }
                }
            }
            Call::ReqNotifyCq { cq, solicited } => {
                let s = self.pick(Kind::Cq, cq);
                let w = match s {
                    None => want(&[EINVAL]),
                    // rdma-core arms a CQ without a channel and returns 0 (rxe, mlx5); the
                    // simulated device refuses it (verbs-core `req_notify_cq`).
                    Some(s) if self.cqs.get(&s).is_some_and(|c| c.0.is_none()) => {
                        want(&[0, EINVAL])
                    }
                    Some(_) => want(&[0]),
                };
                let Some(r) = self.c.req_notify_cq(s, i32::from(solicited % 2)) else {
                    return;
                };
                self.int_ret("ibv_req_notify_cq", r, &w);
            }
            Call::PollCq { cq, n, null } => {
                let s = self.pick(Kind::Cq, cq);
                self.poll(s, n as i8 as i32, null % 8 == 7);
            }
            Call::GetCqEvent { ch, null } => {
                let s = self.pick(Kind::CompChannel, ch);
                let null = null % 8 == 7;
                let Some((r, cq)) = self.c.get_cq_event(s, null) else {
                    return;
                };
                let w = if s.is_none() || null {
                    want(&[EINVAL])
                } else {
                    want(&[0, EAGAIN])
                };
                if self.neg1_ret("ibv_get_cq_event", r, &w) == 0 {
                    if let Some(cq) = cq {
                        let ch = self.cqs.get(&cq).and_then(|c| c.0);
                        if ch != s {
                            self.fail(format!(
                                "ibv_get_cq_event on channel {s:?} returned CQ {cq} of channel {ch:?}"
                            ));
                        }
                    }
                }
            }
            Call::CreateQp {
                pd,
                null,
                scq,
                rcq,
                qp_type,
                caps,
                sig,
            } => self.create_qp(pd, null, scq, rcq, qp_type, caps, sig),
            Call::ModifyQp {
                qp,
                null,
                target,
                mode,
                mask,
                fix,
                v,
            } => self.modify_qp(qp, null, target, mode, mask, fix, v),
            Call::QueryQp { qp, null } => self.query_qp(qp, null),
            Call::DestroyQp { qp } => {
                let s = self.pick(Kind::Qp, qp);
                let Some(r) = self.c.destroy_qp(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.int_ret("ibv_destroy_qp", r, &w) == 0 {
                    if let Some(q) = s.and_then(|s| self.qps.remove(&s)) {
                        self.retire(&q);
                    }
                }
            }
            Call::PostSend { qp, bad, ref wrs } => self.post_send(qp, bad, wrs),
            Call::PostRecv { qp, bad, ref wrs } => self.post_recv(qp, bad, wrs),
            Call::CreateAh { pd, null, fix, v } => {
                if self.full(Kind::Ah) {
                    return;
                }
                let s = self.pick(Kind::Pd, pd);
                let null = null % 8 == 7;
                let mut a = self.ah_attr();
                let fix = fix % 8;
                match fix {
                    0 => a.is_global = v as u8,
                    1 => a.grh.sgid_index = v as u8,
                    2 => a.port_num = v as u8,
                    3 => a.grh.dgid = ibv_gid { raw: [v as u8; 16] },
                    4 => a.grh.hop_limit = v as u8,
                    5 => a.dlid = v as u16,
                    _ => {}
                }
                let w = if s.is_none() || null || a.is_global == 0 {
                    want(&[EINVAL])
                } else if a.grh.sgid_index != 0 || a.port_num != 1 {
                    // rdma-core: the kernel refuses a GID index past the table and port 0
                    // (`rdma_check_ah_attr`); librnic takes the vector as it is.
                    want(&[0, EINVAL])
                } else {
                    want(&[0])
                };
                let Some(m) = self.c.create_ah(s, (!null).then_some(&a)) else {
                    return;
                };
                self.made_ret("ibv_create_ah", m, &w);
                if let (Some(ah), Some(pd)) = (m.slot, s) {
                    self.ahs.insert(ah, pd);
                }
            }
            Call::DestroyAh { ah } => {
                let s = self.pick(Kind::Ah, ah);
                let Some(r) = self.c.destroy_ah(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.int_ret("ibv_destroy_ah", r, &w) == 0 {
                    if let Some(s) = s {
                        self.ahs.remove(&s);
                    }
                }
            }
            Call::GetAsyncEvent { ctx, null } => {
                let s = (ctx < 0xF8).then(|| self.ctx(ctx));
                let null = null % 8 == 7;
                let Some((r, ev)) = self.c.get_async_event(s, null) else {
                    return;
                };
                let w = if s.is_none() || null {
                    want(&[EINVAL])
                } else {
                    want(&[0, EAGAIN])
                };
                if self.neg1_ret("ibv_get_async_event", r, &w) == 0 {
                    if let Some(t) = ev.filter(|&t| t > 19) {
                        self.fail(format!("ibv_get_async_event: event type {t}"));
                    }
                }
            }
            Call::CreateId { ch, ps, null } => self.create_id(ch, ps, null),
            Call::DestroyId { id } => {
                let s = self.pick(Kind::Id, id);
                let Some(r) = self.c.destroy_id(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.neg1_ret("rdma_destroy_id", r, &w) == 0 {
                    if let Some(s) = s {
                        self.forget_id(s);
                    }
                }
            }
            Call::BindAddr { id, addr, port } => self.bind_addr(id, addr, port),
            Call::ResolveAddr { id, src, dst, port } => self.resolve_addr(id, src, dst, port),
            Call::ResolveRoute { id } => {
                let s = self.pick(Kind::Id, id);
                let st = s.and_then(|s| self.ids.get(&s)).map(|i| i.state);
                let w = match st {
                    None => want(&[EINVAL]),
                    Some(Cm::Unknown) => want(&[0, EINVAL]),
                    Some(Cm::AddrResolved) => want(&[0]),
                    Some(_) => want(&[EINVAL]),
                };
                let Some(r) = self.c.resolve_route(s, 2000) else {
                    return;
                };
                if self.neg1_ret("rdma_resolve_route", r, &w) == 0 {
                    if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
                        i.state = Cm::RouteResolved;
                        let ch = i.channel;
                        self.queues[ch].push_back((s.unwrap_or(0), RDMA_CM_EVENT_ROUTE_RESOLVED));
                    }
                }
            }
            Call::RdmaCreateQp {
                id,
                pd,
                null,
                scq,
                rcq,
                qp_type,
                caps,
            } => self.rdma_create_qp(id, pd, null, scq, rcq, qp_type, caps),
            Call::RdmaDestroyQp { id } => {
                let s = self.pick(Kind::Id, id);
                if self.c.rdma_destroy_qp(s).is_some() {
                    if let Some(q) = s
                        .and_then(|s| self.ids.get_mut(&s))
                        .and_then(|i| i.qp.take())
                    {
                        self.retire(&q);
                    }
                    if let Some(s) = s {
                        if self.c.id_info(s).is_some_and(|i| i.has_qp) {
                            self.fail("rdma_destroy_qp left id->qp set".to_string());
                        }
                    }
                }
            }
            Call::Connect { id, ref param } => self.connect(id, param, false),
            Call::Accept { id, ref param } => self.connect(id, param, true),
            Call::Listen { id, backlog } => self.listen(id, backlog),
            Call::Reject { id, null, len } => {
                let s = self.pick(Kind::Id, id);
                let data = vec![0x5A; usize::from(len)];
                let null = null % 4 == 3;
                let eff = if null { 0 } else { len };
                let st = s.and_then(|s| self.ids.get(&s)).map(|i| i.state);
                let w = match st {
                    None => want(&[EINVAL]),
                    Some(_) if eff > 148 => want(&[EINVAL]),
                    // The kernel can reject from REQ_SENT (`cm_send_rej_locked`); cm-core
                    // does not (nothing to reject before a REP).
                    Some(Cm::Connect | Cm::Unknown) => want(&[0, EINVAL]),
                    Some(_) => want(&[EINVAL]),
                };
                let Some(r) = self.c.reject(s, (!null).then_some(&data[..]), len) else {
                    return;
                };
                if self.neg1_ret("rdma_reject", r, &w) == 0 {
                    self.unknown(s);
                }
            }
            Call::Disconnect { id } => self.disconnect(id),
            Call::Establish { id, which } => {
                let s = self.pick(Kind::Id, id);
                let known = s.and_then(|s| self.ids.get(&s)).map(|i| (i.state, i.bound));
                let (r, w) = match which % 3 {
                    0 => {
                        let w = match known {
                            // librdmacm `rdma_establish`: EINVAL with a QP, else the kernel's
                            // accept of a CONNECT_RESPONSE, which no id here has.
                            Some((Cm::Unknown, _)) => want(&[0, EINVAL]),
                            _ => want(&[EINVAL]),
                        };
                        (self.c.establish(s), w)
                    }
                    1 => {
                        let w = match known {
                            None => want(&[EINVAL]),
                            Some(_) => want(&[0, EINVAL]),
                        };
                        (self.c.notify(s, IBV_EVENT_COMM_EST as i32), w)
                    }
                    _ => {
                        // Any other event: librdmacm and the kernel ignore it (0); the kernel's
                        // device lookup may refuse an unbound id first.
                        (self.c.notify(s, 9), want(&[0, EINVAL]))
                    }
                };
                if let Some(r) = r {
                    if self.neg1_ret("rdma_establish/rdma_notify", r, &w) == 0 {
                        self.unknown_if_not(s, &[Cm::Unknown]);
                    }
                }
            }
            Call::SetOption { id, opt, null } => {
                let s = self.pick(Kind::Id, id);
                let null = null % 8 == 7;
                let (level, name) = match opt % 8 {
                    0 => (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS),
                    1 => (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR),
                    2 => (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY),
                    3 => (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT),
                    4 => (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH),
                    5 => (RDMA_OPTION_ID, 77),
                    6 => (9, 0),
                    _ => (-1, -1),
                };
                let val = [1u8, 0, 0, 0];
                let known = opt % 8 < 4;
                let w = if s.is_none() || null {
                    want(&[EINVAL])
                } else if known {
                    // The kernel checks `optlen` and the id's state per option.
                    want(&[0, EINVAL])
                } else {
                    want(&[EOPNOTSUPP, ENOSYS, EINVAL])
                };
                let Some(r) = self
                    .c
                    .set_option(s, level, name, (!null).then_some(&val[..]))
                else {
                    return;
                };
                self.neg1_ret("rdma_set_option", r, &w);
            }
            Call::InitQpAttr { id, state, null } => self.init_qp_attr(id, state, null),
            Call::GetCmEvent { ch, null } => self.get_cm_event(ch, null),
            Call::AckCmEvent { ev } => {
                let s = self.pick(Kind::Event, ev);
                let Some(r) = self.c.ack_cm_event(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                self.neg1_ret("rdma_ack_cm_event", r, &w);
                if let Some(s) = s {
                    self.events.remove(&s);
                }
            }
            Call::Ports { id } => {
                let s = self.pick(Kind::Id, id);
                let Some((sp, dp)) = self.c.ports(s) else {
                    return;
                };
                let Some(i) = s.and_then(|s| self.ids.get(&s)) else {
                    if (sp, dp) != (0, 0) {
                        self.fail(format!("rdma_get_src/dst_port(NULL) = {sp}/{dp}"));
                    }
                    return;
                };
                if i.state == Cm::Unknown {
                    return;
                }
                let ws = i.src_port.unwrap_or(0);
                let wd = i.dst_port.unwrap_or(0);
                if (sp, dp) != (ws, wd) {
                    self.fail(format!(
                        "rdma_get_src/dst_port = {sp}/{dp}, the calls made {ws}/{wd}"
                    ));
                }
            }
            Call::PollAll {} => self.poll_all(),
        }
    }

    fn query(&mut self, ctx: usize, what: u8, port: u8, index: u8, null: bool) {
        let port = if port < 0xC0 { port % 3 } else { port };
        let index = match index {
            0..=0x7F => i32::from(index % 3),
            0x80..=0xBF => -1,
            _ => i32::from(index) << 8,
        };
        match what % 4 {
            0 => {
                let Some((r, a)) = self.c.query_device(ctx, null) else {
                    return;
                };
                let w = if null { [EINVAL] } else { [0] };
                if self.int_ret("ibv_query_device", r, &w) == 0 {
                    if let Some(a) = a {
                        let e = self.env;
                        if (a.max_qp_wr, a.max_sge, a.max_cqe, a.phys_port_cnt)
                            != (e.max_qp_wr as i32, e.max_sge as i32, e.max_cqe as i32, 1)
                        {
                            self.fail("ibv_query_device: limits changed".to_string());
                        }
                    }
                }
            }
            1 => {
                let Some((r, a)) = self.c.query_port(ctx, port, null) else {
                    return;
                };
                let w = if null || port != 1 { [EINVAL] } else { [0] };
                if self.int_ret("ibv_query_port", r, &w) == 0 {
                    if let Some(a) = a {
                        // IBV_PORT_ACTIVE 4, IBV_LINK_LAYER_ETHERNET 2, IBV_MTU_1024 3.
                        if (a.state, a.link_layer, a.active_mtu) != (4, 2, 3) {
                            self.fail("ibv_query_port: not an active Ethernet port".to_string());
                        }
                    }
                }
            }
            2 => {
                let Some((r, g)) = self.c.query_gid(ctx, port, index, null) else {
                    return;
                };
                let w = if null || port != 1 || index != 0 {
                    [EINVAL]
                } else {
                    [0]
                };
                if self.neg1_ret("ibv_query_gid", r, &w) == 0 {
                    let own = self.env.ip.to_ipv6_mapped().octets();
                    if g != Some(own) {
                        self.fail(format!("ibv_query_gid: {g:?}, not the RNIC's address"));
                    }
                }
            }
            _ => {
                let Some((r, k)) = self.c.query_pkey(ctx, port, index, null) else {
                    return;
                };
                let w = if null || port != 1 || index != 0 {
                    [EINVAL]
                } else {
                    [0]
                };
                if self.neg1_ret("ibv_query_pkey", r, &w) == 0 && k != Some(0xFFFF) {
                    self.fail(format!("ibv_query_pkey: {k:?}"));
                }
            }
        }
    }

    fn reg_mr(&mut self, pd: u8, off: u16, len: u16, iova: u8, v: u32, access: u32) {
        if self.full(Kind::Mr) {
            return;
        }
        let s = self.pick(Kind::Pd, pd);
        let (addr, addr_val, len) = if off == 0xFFFF {
            (MrAddr::Null, 0u64, usize::from(len % 4))
        } else {
            let o = usize::from(off) % ARENA_LEN;
            let l = usize::from(len).min(ARENA_LEN - o);
            (MrAddr::Arena(o), self.c.arena_addr() + o as u64, l)
        };
        let page_off = addr_val & 0xFFF;
        let iova_v = match iova % 5 {
            0 => None,
            1 => Some(addr_val),
            2 => Some(u64::from(v) << 12 | page_off),
            3 => Some(u64::from(v)),
            _ => Some(0xFFFF_FFFF_FFFF_F000 | page_off),
        };
        let access = if access & 0x8000_0000 != 0 {
            access as i32
        } else {
            // Mostly the bits that mean something.
            (access & 0x0F) as i32 | if access & 0x10 != 0 { 1 << 20 } else { 0 }
        };
        let the_iova = iova_v.unwrap_or(addr_val);
        let bits = access as u32;
        let len64 = len as u64;
        // rdma-core: libibverbs drops the optional range (bits 20-29) when the kernel lacks
        // it, else the kernel ignores them; the kernel: `ib_check_mr_access` (unknown bits,
        // REMOTE_WRITE/ATOMIC without LOCAL_WRITE), `ib_uverbs_reg_mr` (the iova's offset in
        // its page is the address's), `ib_umem_get` (a range of no page, a NULL buffer).
        let supported = 0x0000_03FF | 0x3FF0_0000;
        let refused = s.is_none()
            || bits & !supported != 0
            || (bits & 0b1010 != 0 && bits & 1 == 0)
            || the_iova & 0xFFF != page_off
            || (len64 == 0 && addr_val & 0xFFF == 0);
        let mut w = if refused {
            want(&[EINVAL])
        } else if addr == MrAddr::Null && len > 0 {
            // The kernel cannot pin page 0: EFAULT; librnic refuses NULL first.
            want(&[EINVAL, 14])
        } else if the_iova.checked_add(len64).is_none() {
            // Provider-dependent (rxe takes it; the simulated device refuses the wrap).
            want(&[0, EINVAL])
        } else {
            want(&[0])
        };
        // ON_DEMAND without ODP support: EOPNOTSUPP from the kernel.
        if s.is_some() && bits & (1 << 6) != 0 && w != [EINVAL] {
            w.push(EOPNOTSUPP);
        }
        let Some(m) = self.c.reg_mr(s, addr, len, iova_v, access) else {
            return;
        };
        self.made_ret("ibv_reg_mr", m, &w);
        if let (Some(mr), Some(pd)) = (m.slot, s) {
            let Some(info) = self.c.mr_info(mr) else {
                return;
            };
            if info.length != len || info.addr != addr_val {
                self.fail(format!(
                    "ibv_reg_mr: {info:?} for {len} bytes at {addr_val:#x}"
                ));
            }
            self.mrs.insert(
                mr,
                MrM {
                    pd,
                    iova: the_iova,
                    len: len64,
                    lkey: info.lkey,
                    rkey: info.rkey,
                },
            );
        }
    }

    /// Capabilities from four 6-bit fields (send WRs, receive WRs, send SGEs, receive SGEs:
    /// 0 → 0, 1 → the device's maximum, 2 → one more, 3 → `u32::MAX`, `x` → `x % 9`) and the
    /// inline size in bits 24–25 (0, 64, the maximum, one more).
    fn caps(&self, caps: u32) -> QpCap {
        let e = self.env;
        let pick = |b: u32, max: u32| -> u32 {
            match b & 0x3F {
                0 => 0,
                1 => max,
                2 => max + 1,
                3 => u32::MAX,
                x => x % 9,
            }
        };
        QpCap {
            max_send_wr: pick(caps, e.max_qp_wr),
            max_recv_wr: pick(caps >> 6, e.max_qp_wr),
            max_send_sge: pick(caps >> 12, e.max_sge),
            max_recv_sge: pick(caps >> 18, e.max_sge),
            max_inline_data: match (caps >> 24) & 3 {
                0 => 0,
                1 => 64,
                2 => e.max_inline,
                _ => e.max_inline + 1,
            },
        }
    }

    fn qp_type(t: u8) -> u32 {
        match t % 8 {
            0..=3 => IBV_QPT_RC,
            4 | 5 => IBV_QPT_UD,
            6 => IBV_QPT_UC,
            _ => u32::from(t),
        }
    }

    /// The expectation for a QP of `cap` and type `t`, as `ibv_create_qp` checks them.
    fn qp_want(&self, t: u32, cap: &QpCap) -> Want {
        let e = self.env;
        if t == IBV_QPT_UC {
            return want(&[EOPNOTSUPP]);
        }
        if qp_type_ok(t).is_none() {
            return want(&[EOPNOTSUPP, EINVAL]);
        }
        if cap.max_send_wr > e.max_qp_wr
            || cap.max_recv_wr > e.max_qp_wr
            || cap.max_send_sge > e.max_sge
            || cap.max_recv_sge > e.max_sge
            || cap.max_inline_data > e.max_inline
        {
            return want(&[EINVAL]);
        }
        if cap.max_send_wr == 0 && cap.max_recv_wr == 0 {
            // rxe takes such a QP; the simulated device refuses it.
            return want(&[0, EINVAL]);
        }
        want(&[0])
    }

    #[allow(clippy::too_many_arguments)]
    fn create_qp(&mut self, pd: u8, null: u8, scq: u8, rcq: u8, t: u8, caps: u32, sig: u8) {
        if self.full(Kind::Qp) {
            return;
        }
        let s = self.pick(Kind::Pd, pd);
        let (sc, rc) = (self.pick(Kind::Cq, scq), self.pick(Kind::Cq, rcq));
        let null = null % 8 == 7;
        let init = QpInit {
            send_cq: sc,
            recv_cq: rc,
            cap: self.caps(caps),
            qp_type: Self::qp_type(t),
            sq_sig_all: i32::from(sig % 2),
        };
        let w = if s.is_none() || null || sc.is_none() || rc.is_none() {
            want(&[EINVAL])
        } else {
            self.qp_want(init.qp_type, &init.cap)
        };
        let Some(m) = self.c.create_qp(s, (!null).then_some(&init)) else {
            return;
        };
        self.made_ret("ibv_create_qp", m, &w);
        if let Some(q) = m.slot {
            let Some(info) = self.c.qp_info(QpRef::Qp(q)) else {
                return;
            };
            if info.state != IBV_QPS_RESET || info.qp_type != init.qp_type {
                self.fail(format!("ibv_create_qp: {info:?}"));
            }
            let Some(qp_type) = qp_type_ok(init.qp_type) else {
                return;
            };
            self.qps.insert(
                q,
                QpM {
                    qp_type,
                    cap: init.cap,
                    state: Some(QpState::Reset),
                    touched: false,
                    pd: s,
                    send_cq: sc,
                    recv_cq: rc,
                    qp_num: info.qp_num,
                    sig_all: init.sq_sig_all != 0,
                    sq: BTreeSet::new(),
                    rq: BTreeSet::new(),
                    sq_sig: BTreeSet::new(),
                },
            );
        }
    }

    /// A valid address vector to this RNIC's own GID.
    fn ah_attr(&self) -> ibv_ah_attr {
        ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: self.env.ip.to_ipv6_mapped().octets(),
                },
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        }
    }

    /// A valid attribute set for a modify to `target` (the transition's required attributes
    /// with in-range values), to be corrupted by one field.
    fn qp_attr(&self, target: u32, cur: u32) -> ibv_qp_attr {
        let dest = self.all_qps().first().map_or(0x11, |q| q.qp_num);
        ibv_qp_attr {
            qp_state: target,
            cur_qp_state: cur,
            path_mtu: 3,
            path_mig_state: 0,
            qkey: 0x1111_1111,
            rq_psn: 0x10,
            sq_psn: 0x20,
            dest_qp_num: dest,
            qp_access_flags: 0b111,
            cap: ibv_qp_cap {
                max_send_wr: 0,
                max_recv_wr: 0,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            ah_attr: self.ah_attr(),
            alt_ah_attr: self.ah_attr(),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: 0,
            sq_draining: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            alt_port_num: 1,
            alt_timeout: 14,
            rate_limit: 0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn modify_qp(&mut self, qp: u8, null: u8, target: u8, mode: u8, mask: u32, fix: u8, v: u32) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let q = k.and_then(|k| self.qp(k)).cloned();
        let cur = q.as_ref().and_then(|q| q.state).unwrap_or(QpState::Reset);
        // The target: mostly the next state on RESET → INIT → RTR → RTS, or any.
        let tgt: u32 = match target % 16 {
            0..=7 => match cur {
                QpState::Reset => 1,
                QpState::Init => 2,
                QpState::Rtr => 3,
                s => u32::from(s.raw()),
            },
            8..=14 => u32::from(target % 8),
            _ => u32::from(target),
        };
        let qt = q.as_ref().map_or(QpType::Rc, |q| q.qp_type);
        let tstate = u8::try_from(tgt).ok().and_then(QpState::from_raw);
        let table = tstate.and_then(|t| transition_masks(qt, cur, t));
        let (req, opt) = table.map_or((0, 0), |t| (t.required.bits(), t.optional.bits()));
        let m: u32 = match mode % 4 {
            0 => 1 | req | (opt & mask),
            1 => (1 | req) & !(1 << (mask % 21)),
            2 => mask,
            _ => 1 | req | (1 << (mask % 32)),
        };
        let mut a = self.qp_attr(tgt, u32::from(cur.raw()));
        match fix % 32 {
            0 => a.qp_state = v,
            1 => a.cur_qp_state = v % 8,
            2 => a.path_mtu = v % 8,
            3 => a.port_num = v as u8,
            4 => a.pkey_index = v as u16,
            5 => a.ah_attr.is_global = 0,
            6 => a.ah_attr.grh.sgid_index = v as u8,
            7 => a.ah_attr.port_num = v as u8,
            8 => a.max_rd_atomic = v as u8,
            9 => a.max_dest_rd_atomic = v as u8,
            10 => a.timeout = v as u8,
            11 => a.retry_cnt = v as u8,
            12 => a.rnr_retry = v as u8,
            13 => a.min_rnr_timer = v as u8,
            14 => a.dest_qp_num = v,
            15 => a.qp_access_flags = v,
            16 => a.path_mtu = v,
            17 => a.sq_psn = v,
            _ => {}
        }
        let null = null % 8 == 7;
        let w = match (&q, null) {
            (None, _) | (_, true) => want(&[EINVAL]),
            (Some(q), false) => self.modify_want(q, cur, &a, m),
        };
        let Some(r) = self
            .c
            .modify_qp(k.map(QpKey::r), (!null).then_some(&a), m as i32)
        else {
            return;
        };
        let got = self.int_ret("ibv_modify_qp", r, &w);
        let Some(k) = k else { return };
        if got == 0 {
            let next = if m & 1 != 0 {
                u8::try_from(a.qp_state).ok().and_then(QpState::from_raw)
            } else {
                Some(cur)
            };
            // To RESET the queues empty without completions; those the device made before
            // may still be in the CQ (retired: they may come once).
            let mut dropped = None;
            if let Some(q) = self.qp_mut(k) {
                q.state = next;
                match next {
                    Some(QpState::Reset) => {
                        let mut all = std::mem::take(&mut q.sq);
                        all.append(&mut q.rq);
                        q.sq_sig.clear();
                        q.touched = false;
                        dropped = Some((q.qp_num, all));
                    }
                    Some(QpState::Err) => q.touched = true,
                    _ => {}
                }
            }
            if let Some((qpn, mut all)) = dropped {
                self.retired.entry(qpn).or_default().append(&mut all);
            }
            if m & 1 != 0 {
                let cached = self.c.qp_info(k.r()).map(|i| i.state);
                if cached != Some(a.qp_state) {
                    self.fail(format!(
                        "ibv_modify_qp to {} returned 0 but qp->state is {cached:?}",
                        a.qp_state
                    ));
                }
            }
        } else if q.is_some_and(|q| q.touched) {
            // The refused modify may have met a QP that had just gone to ERR.
            self.sync(k);
        }
    }

    /// `ibv_modify_qp`'s result for `q` in `cur` (see the module docs).
    fn modify_want(&self, q: &QpM, cur: QpState, a: &ibv_qp_attr, m: u32) -> Want {
        let e = self.env;
        // libibverbs `ibv_cmd_modify_qp` (RATE_LIMIT and up) and the kernel's
        // `IB_QP_ATTR_STANDARD_BITS` (above DEST_QPN).
        if m & !((1 << 21) - 1) != 0 {
            return want(&[EOPNOTSUPP]);
        }
        let mask = QpAttrMask::from_bits_retain(m);
        let st = |v: u32| {
            u8::try_from(v)
                .ok()
                .and_then(QpState::from_raw)
                .filter(|s| *s != QpState::Unknown)
        };
        let mut exact = false;
        let mut loose = false;
        if mask.contains(QpAttrMask::STATE) && st(a.qp_state).is_none() {
            exact = true;
        }
        if mask.contains(QpAttrMask::CUR_STATE) {
            match st(a.cur_qp_state) {
                None => exact = true,
                // verbs-core: a claimed current state must be the QP's (rxe takes the claim).
                Some(c) if c != cur => exact = true,
                _ => {}
            }
        }
        if !exact {
            let next = if mask.contains(QpAttrMask::STATE) {
                st(a.qp_state).unwrap_or(cur)
            } else {
                cur
            };
            match transition_masks(q.qp_type, cur, next) {
                None => exact = true,
                Some(t) => {
                    let given = mask.difference(QpAttrMask::STATE);
                    if !t.required.difference(given).is_empty()
                        || !given.difference(t.required.union(t.optional)).is_empty()
                    {
                        exact = true;
                    }
                }
            }
        }
        let has = |b: QpAttrMask| mask.contains(b);
        if has(QpAttrMask::PATH_MTU) && !(1..=5).contains(&a.path_mtu) {
            exact = true;
        }
        if has(QpAttrMask::PORT) && a.port_num != 1 {
            exact = true;
        }
        if has(QpAttrMask::PKEY_INDEX) && a.pkey_index != 0 {
            exact = true;
        }
        if has(QpAttrMask::AV) {
            let av = &a.ah_attr;
            if av.is_global == 0 || av.grh.sgid_index != 0 || av.port_num > 1 {
                exact = true;
            } else if av.port_num == 0 {
                loose = true;
            }
        }
        if has(QpAttrMask::MAX_QP_RD_ATOMIC) && u32::from(a.max_rd_atomic) > e.max_init_rd_atom {
            exact = true;
        }
        if has(QpAttrMask::MAX_DEST_RD_ATOMIC) && u32::from(a.max_dest_rd_atomic) > e.max_rd_atom {
            exact = true;
        }
        if has(QpAttrMask::TIMEOUT) && a.timeout > 31 {
            exact = true;
        }
        // Fields rxe takes as they are and the simulated device range-checks.
        if (has(QpAttrMask::RETRY_CNT) && a.retry_cnt > 7)
            || (has(QpAttrMask::RNR_RETRY) && a.rnr_retry > 7)
            || (has(QpAttrMask::MIN_RNR_TIMER) && a.min_rnr_timer > 31)
            || (has(QpAttrMask::DEST_QPN) && a.dest_qp_num > 0xFF_FFFF)
        {
            loose = true;
        }
        if exact {
            want(&[EINVAL])
        } else if loose {
            want(&[0, EINVAL])
        } else {
            want(&[0])
        }
    }

    fn query_qp(&mut self, qp: u8, null: u8) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let null_attr = null % 8 == 7;
        let Some((r, a, cap)) = self
            .c
            .query_qp(k.map(QpKey::r), null_attr, null.is_multiple_of(2))
        else {
            return;
        };
        let q = k.and_then(|k| self.qp(k)).cloned();
        let w = if q.is_none() || null_attr {
            [EINVAL]
        } else {
            [0]
        };
        if self.int_ret("ibv_query_qp", r, &w) != 0 {
            return;
        }
        let (Some(q), Some(a)) = (q, a) else { return };
        let s = u8::try_from(a.qp_state).ok().and_then(QpState::from_raw);
        let ok_state = s == q.state || (q.touched && s == Some(QpState::Err));
        if !ok_state || a.cur_qp_state != a.qp_state {
            self.fail(format!(
                "ibv_query_qp: state {}/{}, the calls made {:?}",
                a.qp_state, a.cur_qp_state, q.state
            ));
        }
        if let Some(c) = cap {
            let want = QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            };
            // Granted capabilities are at least what was asked for.
            let asked = q.cap;
            if want.max_send_wr < asked.max_send_wr
                || want.max_recv_wr < asked.max_recv_wr
                || want.max_send_sge < asked.max_send_sge
                || want.max_recv_sge < asked.max_recv_sge
                || want.max_inline_data < asked.max_inline_data
            {
                self.fail(format!("ibv_query_qp: caps {want:?} below {asked:?}"));
            }
        }
        if let Some(k) = k {
            if let Some(m) = self.qp_mut(k) {
                m.state = s;
            }
        }
    }

    /// A WR's SGE list from its specs; `(list, sum of lengths, every SGE inside a live
    /// region's range)`.
    fn sges(&self, specs: &[SgeSpec]) -> (Vec<Sge>, u64, bool) {
        let mrs: Vec<MrM> = self.mrs.values().copied().collect();
        let mut inside = true;
        let mut total = 0u64;
        let v = specs
            .iter()
            .take(MAX_SGES)
            .map(|g| {
                let mr =
                    (g.mr < 0xF8 && !mrs.is_empty()).then(|| mrs[usize::from(g.mr) % mrs.len()]);
                let off = i64::from(g.off as i16);
                let len = u32::from(g.len).wrapping_mul(match g.key >> 6 {
                    0 => 1,
                    1 => 16,
                    2 => 0x1_0000,
                    _ => 0x2_0000,
                });
                let (addr, lkey) = match mr {
                    Some(m) => (
                        m.iova.wrapping_add_signed(off),
                        match g.key % 4 {
                            0 => m.lkey,
                            1 => m.rkey,
                            2 => self.dead_keys.last().copied().unwrap_or(0xDEAD),
                            _ => u32::from(g.off) << 16 | u32::from(g.len),
                        },
                    ),
                    None => (u64::from(g.off) << 12, u32::from(g.len)),
                };
                total += u64::from(len);
                let within = |m: &MrM| {
                    addr >= m.iova
                        && addr
                            .checked_add(u64::from(len))
                            .is_some_and(|e| m.iova.checked_add(m.len).is_some_and(|end| e <= end))
                };
                if len > 0 && !mrs.iter().any(within) {
                    inside = false;
                }
                Sge {
                    addr,
                    length: len,
                    lkey,
                }
            })
            .collect();
        (v, total, inside)
    }

    fn num_sge(nsge: u8, listed: usize) -> i32 {
        match nsge % 8 {
            n @ 0..=4 => i32::from(n).min(listed as i32),
            5 => listed as i32,
            6 => -1,
            _ => i32::MIN,
        }
    }

    fn post_send(&mut self, qp: u8, bad: u8, specs: &[SendSpec]) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let q = k.and_then(|k| self.qp(k)).cloned();
        let mrs: Vec<MrM> = self.mrs.values().copied().collect();
        let mut wrs = Vec::new();
        // Per WR: exact EINVAL, or which results it allows.
        let mut verdicts: Vec<Want> = Vec::new();
        for sp in specs.iter().take(MAX_WRS) {
            let (list, _, _) = self.sges(&sp.sges);
            let null_list = sp.sges.is_empty() && sp.nsge == 0xFF;
            let n = if null_list {
                i32::from(sp.flags >> 7)
            } else {
                Self::num_sge(sp.nsge, list.len())
            };
            let used = usize::try_from(n).unwrap_or(0).min(list.len());
            let (_, total, inside) = self.sges(&sp.sges[..used.min(sp.sges.len())]);
            let opcode = if sp.opcode < 0xE0 {
                u32::from(sp.opcode % 7)
            } else {
                u32::from(sp.opcode & 0x1F)
            };
            let flags = u32::from(sp.flags & 0x0F)
                | if sp.flags & 0x40 != 0 {
                    u32::from(sp.flags) << 8
                } else {
                    0
                };
            let remote = (sp.remote < 0xF8 && !mrs.is_empty())
                .then(|| mrs[usize::from(sp.remote & 0x7F) % mrs.len()]);
            let (raddr, rkey) = match remote {
                Some(m) if sp.remote & 0x80 == 0 => {
                    (m.iova.wrapping_add(u64::from(sp.roff)), m.rkey)
                }
                _ => (u64::from(sp.roff), u32::from(sp.roff)),
            };
            let ah = self.pick(Kind::Ah, sp.ah);
            let wr_id = self.next_wr;
            self.next_wr += 1;
            wrs.push(SendWr {
                wr_id,
                sg_list: (!null_list).then(|| list.clone()),
                num_sge: n,
                opcode,
                send_flags: flags,
                imm_data: 0x1234_5678,
                remote_addr: raddr,
                rkey,
                compare_add: 1,
                swap: 2,
                ah,
                remote_qpn: 0x11,
                remote_qkey: 0x1111_1111,
            });
            let Some(q) = &q else {
                verdicts.push(want(&[EINVAL]));
                continue;
            };
            let atomic =
                opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
            let send = opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM;
            let inline = flags & IBV_SEND_INLINE != 0;
            let v = if opcode > 6 {
                if [7, 8, 9, 10, 11, 15].contains(&opcode) {
                    want(&[EINVAL, EOPNOTSUPP])
                } else {
                    want(&[EINVAL])
                }
            } else if n < 0
                || (null_list && n > 0)
                || n as u32 > q.cap.max_send_sge
                || (atomic && (total < 8 || raddr % 8 != 0))
                || (inline && total > u64::from(q.cap.max_inline_data))
            {
                want(&[EINVAL])
            } else if total > 1 << 31
                || (atomic && total != 8)
                || (q.qp_type == QpType::Ud && (!send || total > 1024))
                || (inline && (atomic || opcode == IBV_WR_RDMA_READ || !inside))
            {
                // rxe takes these and fails them at execution; the simulated device refuses
                // them at the post (or, for inline data, needs registered memory).
                want(&[0, EINVAL])
            } else {
                want(&[0])
            };
            verdicts.push(v);
        }
        let with_bad = bad.is_multiple_of(2);
        let Some((rc, b)) = self.c.post_send(k.map(QpKey::r), &wrs, with_bad) else {
            return;
        };
        let sig_all = q.as_ref().is_some_and(|q| q.sig_all);
        let ids: Vec<(u64, bool)> = wrs
            .iter()
            .map(|w| (w.wr_id, sig_all || w.send_flags & IBV_SEND_SIGNALED != 0))
            .collect();
        self.post_result(
            "ibv_post_send",
            k,
            q.as_ref(),
            rc,
            b,
            with_bad,
            &verdicts,
            &ids,
            true,
        );
    }

    fn post_recv(&mut self, qp: u8, bad: u8, specs: &[RecvSpec]) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let q = k.and_then(|k| self.qp(k)).cloned();
        let mut wrs = Vec::new();
        let mut verdicts = Vec::new();
        for sp in specs.iter().take(MAX_WRS) {
            let (list, _, _) = self.sges(&sp.sges);
            let null_list = sp.sges.is_empty() && sp.nsge == 0xFF;
            let n = if null_list {
                1
            } else {
                Self::num_sge(sp.nsge, list.len())
            };
            let wr_id = self.next_wr;
            self.next_wr += 1;
            wrs.push(RecvWr {
                wr_id,
                sg_list: (!null_list).then_some(list),
                num_sge: n,
            });
            let v = match &q {
                None => want(&[EINVAL]),
                Some(q) if n < 0 || null_list || n as u32 > q.cap.max_recv_sge => want(&[EINVAL]),
                Some(_) => want(&[0]),
            };
            verdicts.push(v);
        }
        let with_bad = bad.is_multiple_of(2);
        let Some((rc, b)) = self.c.post_recv(k.map(QpKey::r), &wrs, with_bad) else {
            return;
        };
        let ids: Vec<(u64, bool)> = wrs.iter().map(|w| (w.wr_id, true)).collect();
        self.post_result(
            "ibv_post_recv",
            k,
            q.as_ref(),
            rc,
            b,
            with_bad,
            &verdicts,
            &ids,
            false,
        );
    }

    /// Checks a post's result against the per-WR verdicts (see the module docs) and records
    /// the posted WRs.
    #[allow(clippy::too_many_arguments)]
    fn post_result(
        &mut self,
        what: &str,
        k: Option<QpKey>,
        q: Option<&QpM>,
        rc: i32,
        bad: BadWr,
        with_bad: bool,
        verdicts: &[Want],
        ids: &[(u64, bool)],
        send: bool,
    ) {
        self.note(what, format!("{rc}, *bad_wr {bad:?}"));
        if rc < 0 {
            self.fail(format!("{what} returned {rc}: negative, not an errno"));
        }
        let (Some(k), Some(q)) = (k, q) else {
            // NULL QP: EINVAL, `*bad_wr` untouched or the first WR.
            self.verdict(what, rc, &[EINVAL]);
            return;
        };
        if ids.is_empty() {
            // An empty (NULL) list: librnic posts nothing (mlx5 too), rxe says EINVAL.
            self.verdict(what, rc, &[0, EINVAL]);
            return;
        }
        let state = q.state.unwrap_or(QpState::Err);
        let refuses = if send {
            matches!(state, QpState::Reset | QpState::Init | QpState::Rtr)
        } else {
            state == QpState::Reset
        };
        let (cap, out) = if send {
            (q.cap.max_send_wr as usize, q.sq.len())
        } else {
            (q.cap.max_recv_wr as usize, q.rq.len())
        };
        let err = state == QpState::Err;
        // What WR i may return, given i accepted before it.
        let allows = |i: usize, got: i32| -> bool {
            if refuses {
                return got == EINVAL && i == 0;
            }
            let v = &verdicts[i];
            v.contains(&got) || (got == ENOMEM && !err && out + i >= cap && v.contains(&0))
        };
        let posted = if rc == 0 {
            if let Some(i) = (0..ids.len()).find(|&i| !allows(i, 0)) {
                self.fail(format!(
                    "{what} returned 0 but WR {i} should have failed ({:?}; state {state:?})",
                    if refuses { &[EINVAL][..] } else { &verdicts[i] }
                ));
            }
            if bad != BadWr::Untouched {
                self.fail(format!("{what} returned 0 and set *bad_wr to {bad:?}"));
            }
            ids.len()
        } else {
            // The WR that failed: `*bad_wr`, or without it any that may have (the WRs
            // between the first and the last candidate may have been posted).
            let fits = |j: usize| allows(j, rc) && (0..j).all(|i| allows(i, 0));
            let (j, maybe) = match (bad, with_bad) {
                (BadWr::Index(j), true) => (j, j),
                (b, true) => self.fail(format!("{what} returned {rc} with *bad_wr {b:?}")),
                (_, false) => {
                    let first = (0..ids.len()).find(|&j| fits(j)).unwrap_or(ids.len());
                    let last = (0..ids.len()).rev().find(|&j| fits(j)).unwrap_or(first);
                    (first, last)
                }
            };
            if j >= ids.len() || !fits(j) {
                self.fail(format!(
                    "{what} returned {rc} naming WR {j} of {}: verdicts {verdicts:?}, state \
                     {state:?}, {out} outstanding of {cap}",
                    ids.len()
                ));
            }
            if maybe > j {
                let qpn = q.qp_num;
                self.retired
                    .entry(qpn)
                    .or_default()
                    .extend(ids[j..maybe].iter().map(|&(id, _)| id));
            }
            j
        };
        if posted > 0 {
            if let Some(m) = self.qp_mut(k) {
                m.touched = true;
                let set = if send { &mut m.sq } else { &mut m.rq };
                set.extend(ids[..posted].iter().map(|&(id, _)| id));
                if send {
                    m.sq_sig
                        .extend(ids[..posted].iter().filter(|x| x.1).map(|&(id, _)| id));
                }
            }
            let cqs: Vec<usize> = [q.send_cq, q.recv_cq].into_iter().flatten().collect();
            for c in cqs {
                if let Some(e) = self.cqs.get_mut(&c) {
                    e.2 += posted as u64;
                }
            }
        }
    }

    /// Forgets a destroyed QP; its WRs may still complete in a CQ.
    fn retire(&mut self, q: &QpM) {
        let all: BTreeSet<u64> = q.sq.union(&q.rq).copied().collect();
        self.retired.entry(q.qp_num).or_default().extend(all);
    }

    /// Checks polled completions of CQ `cq`.
    fn completions(&mut self, cq: usize, wcs: &[ibv_wc]) {
        for wc in wcs {
            if wc.status > 21 {
                self.fail(format!("completion status {}", wc.status));
            }
            let mut found = false;
            let keys: Vec<QpKey> = self
                .qps
                .keys()
                .map(|&s| QpKey::Qp(s))
                .chain(
                    self.ids
                        .iter()
                        .filter(|(_, i)| i.qp.is_some())
                        .map(|(&s, _)| QpKey::Id(s)),
                )
                .collect();
            for k in keys {
                let Some(q) = self.qp_mut(k) else { continue };
                if q.qp_num != wc.qp_num {
                    continue;
                }
                let (s_cq, r_cq) = (q.send_cq, q.recv_cq);
                let in_sq = q.sq.remove(&wc.wr_id);
                q.sq_sig.remove(&wc.wr_id);
                let in_rq = !in_sq && q.rq.remove(&wc.wr_id);
                if (in_sq && s_cq == Some(cq)) || (in_rq && r_cq == Some(cq)) {
                    found = true;
                } else if in_sq || in_rq {
                    self.fail(format!(
                        "completion of WR {} of QP {:#x} on CQ {cq}, not its queue's",
                        wc.wr_id, wc.qp_num
                    ));
                }
                break;
            }
            if !found {
                found = self
                    .retired
                    .get_mut(&wc.qp_num)
                    .is_some_and(|s| s.remove(&wc.wr_id));
            }
            if !found {
                self.fail(format!(
                    "completion of WR {} on QP {:#x} (status {}): never posted there, or completed twice",
                    wc.wr_id, wc.qp_num, wc.status
                ));
            }
        }
    }

    fn poll(&mut self, s: Option<usize>, n: i32, null_wc: bool) {
        let n = match n {
            -128..=-100 => i32::MIN,
            x if x > 64 => 0x7FFF_FFFF,
            x => x,
        };
        let Some((rc, wcs)) = self.c.poll_cq(s, n, null_wc) else {
            return;
        };
        let st: Vec<u32> = wcs.iter().map(|w| w.status).collect();
        self.note("ibv_poll_cq", format!("{rc}, statuses {st:?}"));
        let Some(s) = s else {
            // librnic: -EINVAL; rdma-core crashes.
            self.verdict("ibv_poll_cq(NULL)", -rc, &[EINVAL]);
            return;
        };
        if n > 0 && null_wc {
            self.verdict("ibv_poll_cq(wc NULL)", -rc, &[EINVAL]);
            return;
        }
        if n < 0 {
            // rxe and mlx5 poll nothing (0); librnic says -EINVAL.
            if rc != 0 {
                self.verdict("ibv_poll_cq(n < 0)", -rc, &[EINVAL]);
            }
            return;
        }
        if rc < 0 {
            // -EIO: a CQ that overran (more WRs were posted on its QPs than it holds).
            let (_, cqe, posted) = self.cqs.get(&s).copied().unwrap_or((None, 0, 0));
            let w = if posted > u64::from(cqe) { [EIO] } else { [0] };
            self.verdict("ibv_poll_cq", -rc, &w);
            return;
        }
        if rc > n || wcs.len() != rc as usize {
            self.fail(format!(
                "ibv_poll_cq({n}) returned {rc} ({} written)",
                wcs.len()
            ));
        }
        self.completions(s, &wcs);
    }

    fn poll_all(&mut self) {
        for s in self.c.live(Kind::Cq) {
            for _ in 0..64 {
                let Some((rc, wcs)) = self.c.poll_cq(Some(s), 16, false) else {
                    break;
                };
                if rc <= 0 {
                    break;
                }
                self.completions(s, &wcs);
            }
        }
    }

    // ---- rdma_cm ------------------------------------------------------------------------------

    fn create_id(&mut self, ch: u8, ps: u8, null: u8) {
        if self.full(Kind::Id) {
            return;
        }
        let chan = (usize::from(ch % 3) < CM_CHANNELS).then(|| usize::from(ch % 3));
        let psv = match ps % 8 {
            0..=2 => RDMA_PS_TCP,
            3 => RDMA_PS_UDP,
            4 => RDMA_PS_IB,
            5 => RDMA_PS_IPOIB,
            6 => 0,
            _ => u32::from(ps) << 4,
        };
        let null = null % 8 == 7;
        let Some(m) = self.c.create_id(chan, psv, null) else {
            return;
        };
        let known = [RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB, RDMA_PS_IPOIB].contains(&psv);
        let w = if null {
            want(&[EINVAL])
        } else if chan.is_none() {
            // Synchronous ids are not implemented (docs/capi.md).
            want(&[EOPNOTSUPP])
        } else if !known {
            want(&[EINVAL])
        } else {
            want(&[0])
        };
        // rdma_create_id is 0 / -1 + errno: `Made` carries errno, the slot for 0.
        let r = Ret {
            rc: if m.slot.is_some() { 0 } else { -1 },
            errno: m.errno,
        };
        self.neg1_ret("rdma_create_id", r, &w);
        if let (Some(s), Some(ch)) = (m.slot, chan) {
            self.ids.insert(
                s,
                IdM {
                    ps: psv,
                    channel: ch,
                    state: Cm::Idle,
                    bound: false,
                    src_port: None,
                    dst_port: None,
                    cm_id: false,
                    qp: None,
                },
            );
        }
    }

    /// Forgets a destroyed id: its events, held and queued, and its QP.
    fn forget_id(&mut self, s: usize) {
        if let Some(mut i) = self.ids.remove(&s) {
            if let Some(q) = i.qp.take() {
                self.retire(&q);
            }
        }
        for q in &mut self.queues {
            q.retain(|&(id, _)| id != s);
        }
        self.events.retain(|_, &mut id| id != s);
    }

    fn unknown(&mut self, s: Option<usize>) {
        if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
            i.state = Cm::Unknown;
        }
    }

    fn unknown_if_not(&mut self, s: Option<usize>, keep: &[Cm]) {
        if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
            if !keep.contains(&i.state) {
                i.state = Cm::Unknown;
            }
        }
    }

    /// An address: `(argument, family is IP, IP is this RNIC's or the wildcard)`.
    fn addr(&self, b: u8, port: u16) -> (SockAddr, bool, bool) {
        let own = self.env.ip;
        let (a, local) = match b % 12 {
            0 | 1 => (SockAddr::Ip(SocketAddr::new(own.into(), port)), true),
            2 => (
                SockAddr::Ip(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)),
                true,
            ),
            3 => (
                SockAddr::Ip(SocketAddr::new(Ipv4Addr::new(10, 9, 8, 7).into(), port)),
                false,
            ),
            4 => (
                SockAddr::Ip(SocketAddr::V6(SocketAddrV6::new(
                    own.to_ipv6_mapped(),
                    port,
                    0,
                    0,
                ))),
                true,
            ),
            5 => (
                SockAddr::Ip(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)),
                true,
            ),
            6 => (
                SockAddr::Ip(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port)),
                false,
            ),
            7 => (SockAddr::Family(AF_IB), false),
            8 => (SockAddr::Family(0), false),
            9 => (SockAddr::Family(u16::from(b)), false),
            10 => {
                let other = Ipv4Addr::from(u32::from(own) ^ 1);
                (SockAddr::Ip(SocketAddr::new(other.into(), port)), false)
            }
            _ => (
                SockAddr::Ip(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)),
                own == Ipv4Addr::LOCALHOST,
            ),
        };
        let ip = matches!(a, SockAddr::Ip(_))
            || matches!(a, SockAddr::Family(f) if f == AF_INET || f == AF_INET6);
        (a, ip, local)
    }

    fn port(p: u16) -> u16 {
        match p % 8 {
            0..=2 => 0,
            3 => 7471,
            4 => 7472,
            5 => 32768,
            _ => p,
        }
    }

    fn bind_addr(&mut self, id: u8, addr: u8, port: u16) {
        let s = self.pick(Kind::Id, id);
        let null = addr >= 0xF8;
        let port = Self::port(port);
        let (a, ip, local) = self.addr(addr, port);
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            _ if null => want(&[EINVAL]),
            None => want(&[EINVAL]),
            Some(_) if !ip => {
                if a == SockAddr::Family(AF_IB) {
                    want(&[EINVAL, EAFNOSUPPORT])
                } else {
                    want(&[EINVAL])
                }
            }
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL, EADDRINUSE, EADDRNOTAVAIL]),
            Some(i) if i.state != Cm::Idle => want(&[EINVAL]),
            Some(i) => {
                let clash: Vec<&IdM> = self
                    .ids
                    .iter()
                    .filter(|&(&o, x)| {
                        Some(o) != s && x.ps == i.ps && port != 0 && x.src_port == Some(port)
                    })
                    .map(|(_, x)| x)
                    .collect();
                // The kernel checks the address before the port; cm-core the port first. A
                // port taken by an id that resolved an address is free for cm-core.
                let mut w = Vec::new();
                if !local {
                    w.push(EADDRNOTAVAIL);
                    if !clash.is_empty() {
                        w.push(EADDRINUSE);
                    }
                } else if clash.iter().any(|x| x.dst_port.is_none()) {
                    w.push(EADDRINUSE);
                } else if !clash.is_empty() {
                    w.extend([0, EADDRINUSE]);
                } else if i.ps == RDMA_PS_IB || self.ids.values().any(|x| x.state == Cm::Unknown) {
                    // RDMA_PS_IB shares the TCP and UDP port spaces in the kernel.
                    w.extend([0, EADDRINUSE]);
                } else {
                    w.push(0);
                }
                w
            }
        };
        let Some(r) = self.c.bind_addr(s, (!null).then_some(&a)) else {
            return;
        };
        if self.neg1_ret("rdma_bind_addr", r, &w) == 0 {
            let Some(s) = s else { return };
            let (sp, _) = self.c.ports(Some(s)).unwrap_or((0, 0));
            if sp == 0 || (port != 0 && sp != port) {
                self.fail(format!(
                    "rdma_bind_addr to port {port}: the id has port {sp}"
                ));
            }
            let wildcard = matches!(a, SockAddr::Ip(x) if x.ip().is_unspecified());
            if let Some(i) = self.ids.get_mut(&s) {
                if i.state != Cm::Unknown {
                    i.state = Cm::AddrBound;
                }
                i.src_port = Some(sp);
                i.bound = !wildcard;
            }
            let info = self.c.id_info(s);
            if info.map(|x| x.bound) != Some(!wildcard) {
                self.fail(format!(
                    "rdma_bind_addr: id->verbs {info:?} after binding {a:?}"
                ));
            }
        }
    }

    fn resolve_addr(&mut self, id: u8, src: u8, dst: u8, port: u16) {
        let s = self.pick(Kind::Id, id);
        let port = Self::port(port).max(1);
        let (d, dip, _) = self.addr(dst, port);
        let (sa, sip, slocal) = self.addr(src, 0);
        let dnull = dst >= 0xF8;
        let snull = src >= 0xF0;
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let fam = |a: &SockAddr| match a {
            SockAddr::Ip(x) => {
                x.is_ipv4()
                    || matches!(x.ip(), std::net::IpAddr::V6(v) if v.to_ipv4_mapped().is_some())
            }
            SockAddr::Family(_) => true,
        };
        let w = if dnull || !dip || i.is_none() {
            want(&[EINVAL])
        } else if !snull && !sip {
            // librdmacm: a source of no family it knows is EINVAL (AF_IB it knows; librnic
            // does not).
            want(&[EINVAL])
        } else {
            let i = i.as_ref().map_or(Cm::Idle, |i| i.state);
            match i {
                Cm::Unknown => want(&[0, EINVAL, EADDRNOTAVAIL]),
                Cm::Idle | Cm::AddrBound => {
                    let mut w = Vec::new();
                    if !snull && !slocal {
                        w.push(EADDRNOTAVAIL);
                        if i == Cm::AddrBound {
                            // The kernel ignores the source of a bound id.
                            w.push(0);
                        }
                    } else {
                        w.push(0);
                    }
                    if !snull && fam(&sa) != fam(&d) {
                        w.push(EINVAL);
                        w.push(0);
                    }
                    if matches!(d, SockAddr::Ip(x) if x.is_ipv6() && !fam(&d)) {
                        w.push(EADDRNOTAVAIL);
                        w.push(0);
                    }
                    w
                }
                _ => want(&[EINVAL]),
            }
        };
        let Some(r) = self
            .c
            .resolve_addr(s, (!snull).then_some(&sa), (!dnull).then_some(&d), 2000)
        else {
            return;
        };
        if self.neg1_ret("rdma_resolve_addr", r, &w) == 0 {
            let Some(s) = s else { return };
            let (sp, dp) = self.c.ports(Some(s)).unwrap_or((0, 0));
            if let Some(i) = self.ids.get_mut(&s) {
                if i.state != Cm::Unknown {
                    i.state = Cm::AddrResolved;
                }
                i.bound = true;
                i.src_port = Some(sp);
                i.dst_port = Some(dp);
                let ch = i.channel;
                self.queues[ch].push_back((s, RDMA_CM_EVENT_ADDR_RESOLVED));
            }
            if dp != port {
                self.fail(format!("rdma_resolve_addr to port {port}: dst port {dp}"));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rdma_create_qp(&mut self, id: u8, pd: u8, null: u8, scq: u8, rcq: u8, t: u8, caps: u32) {
        let s = self.pick(Kind::Id, id);
        let pds = if pd & 0x80 == 0 {
            None
        } else {
            self.pick(Kind::Pd, pd & 0x7F)
        };
        let (sc, rc) = (self.pick(Kind::Cq, scq), self.pick(Kind::Cq, rcq));
        let null = null % 8 == 7;
        let init = QpInit {
            send_cq: sc,
            recv_cq: rc,
            cap: self.caps(caps),
            qp_type: Self::qp_type(t),
            sq_sig_all: 0,
        };
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            _ if null => want(&[EINVAL]),
            None => want(&[EINVAL]),
            Some(i) if !i.bound => want(&[EINVAL]),
            Some(i) if i.qp.is_some() => want(&[EINVAL]),
            // librdmacm: a PD of another context than `id->verbs` is EINVAL.
            Some(_) if pds.is_some_and(|p| self.pds.get(&p) != Some(&self.cm_ctx)) => {
                want(&[EINVAL])
            }
            Some(i) => {
                let mut w = self.qp_want(init.qp_type, &init.cap);
                let ud_ps = i.ps == RDMA_PS_UDP || i.ps == RDMA_PS_IPOIB;
                let ud_qp = init.qp_type == IBV_QPT_UD;
                if w.contains(&0) && (ud_ps || ud_qp) {
                    // UD on rdma_cm (SIDR) is not implemented; librdmacm moves a QP with the
                    // id's QP type's attributes, which the other type refuses.
                    w.push(EINVAL);
                }
                let e = self.env;
                // librdmacm makes a CQ for each NULL one, before the QP, sized by its queue
                // (none for an empty queue, then the QP is refused), and reports one it could
                // not make as ENOMEM.
                let made = [(sc, init.cap.max_send_wr), (rc, init.cap.max_recv_wr)];
                let made = made.iter().filter(|(cq, _)| cq.is_none());
                if made.clone().any(|&(_, n)| n > e.max_cqe) {
                    w = want(&[ENOMEM]);
                } else if made.clone().any(|&(_, n)| n == 0) {
                    w.extend([0, EINVAL]);
                }
                w
            }
        };
        let Some(r) = self.c.rdma_create_qp(s, pds, (!null).then_some(&init)) else {
            return;
        };
        if self.neg1_ret("rdma_create_qp", r, &w) != 0 {
            return;
        }
        let Some(s) = s else { return };
        let Some(info) = self.c.qp_info(QpRef::Id(s)) else {
            self.fail("rdma_create_qp returned 0 but id->qp is NULL".to_string());
        };
        let Some(qp_type) = qp_type_ok(init.qp_type) else {
            return;
        };
        let state = (qp_type == QpType::Rc && info.state == IBV_QPS_INIT).then_some(QpState::Init);
        if let Some(i) = self.ids.get_mut(&s) {
            i.qp = Some(QpM {
                qp_type,
                cap: init.cap,
                state,
                touched: false,
                pd: pds,
                send_cq: sc,
                recv_cq: rc,
                qp_num: info.qp_num,
                sig_all: false,
                sq: BTreeSet::new(),
                rq: BTreeSet::new(),
                sq_sig: BTreeSet::new(),
            });
        }
    }

    fn conn_param(p: &ParamSpec) -> Option<ConnParam> {
        (p.null < 0xF0).then(|| ConnParam {
            private_data: (p.data_null < 0xF0).then(|| vec![0xA5; usize::from(p.len)]),
            private_data_len: p.len,
            responder_resources: p.rr,
            initiator_depth: p.depth,
            flow_control: 0,
            retry_count: p.retries & 0xF,
            rnr_retry_count: p.retries >> 4,
            srq: 0,
            qp_num: 0x11,
        })
    }

    fn connect(&mut self, id: u8, p: &ParamSpec, accept: bool) {
        let s = self.pick(Kind::Id, id);
        let param = Self::conn_param(p);
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let e = self.env;
        let eff = param.as_ref().map_or(0, |c| {
            if c.private_data.is_some() {
                c.private_data_len
            } else {
                0
            }
        });
        let w = match &i {
            None => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL]),
            Some(i) => {
                let tcp = i.ps == RDMA_PS_TCP;
                let bad_param = param.as_ref().is_some_and(|c| {
                    (c.responder_resources != RDMA_MAX
                        && u32::from(c.responder_resources) > e.max_rd_atom)
                        || (c.initiator_depth != RDMA_MAX
                            && u32::from(c.initiator_depth) > e.max_init_rd_atom)
                });
                if tcp && (bad_param || (param.is_none() && i.qp.is_none())) {
                    // librdmacm `ucma_valid_param`.
                    want(&[EINVAL])
                } else if accept {
                    // No id here has a connection request to accept.
                    want(&[EINVAL])
                } else if i.state != Cm::RouteResolved {
                    want(&[EINVAL])
                } else if !(tcp || i.ps == RDMA_PS_IB) {
                    // UDP/IPOIB ids connect with SIDR, not implemented.
                    want(&[0, EINVAL, EOPNOTSUPP, ENOSYS])
                } else if eff > 56 {
                    want(&[EINVAL])
                } else {
                    want(&[0])
                }
            }
        };
        let r = if accept {
            self.c.accept(s, param.as_ref())
        } else {
            self.c.connect(s, param.as_ref())
        };
        let Some(r) = r else { return };
        let name = if accept {
            "rdma_accept"
        } else {
            "rdma_connect"
        };
        if self.neg1_ret(name, r, &w) == 0 {
            if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
                if accept || !(i.ps == RDMA_PS_TCP || i.ps == RDMA_PS_IB) {
                    i.state = Cm::Unknown;
                } else if i.state != Cm::Unknown {
                    i.state = Cm::Connect;
                }
                i.cm_id = true;
            }
        }
        // The id's QP stays as it was (librdmacm moves it only when the kernel answers).
        if let Some(s) = s {
            if self.ids.get(&s).is_some_and(|i| i.qp.is_some()) {
                self.sync(QpKey::Id(s));
            }
        }
    }

    fn listen(&mut self, id: u8, backlog: u8) {
        let s = self.pick(Kind::Id, id);
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            None => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL, EBUSY, EADDRINUSE]),
            Some(i) if matches!(i.state, Cm::Idle | Cm::AddrBound) => {
                let taken = |p: Option<u16>| {
                    self.ids.iter().any(|(&o, x)| {
                        Some(o) != s
                            && x.ps == i.ps
                            && x.src_port.is_some()
                            && (p.is_none() || x.src_port == p)
                    })
                };
                // The ephemeral port an unbound id gets may be one another id bound by
                // number; a second listener on a port is EBUSY (cm-core) or EADDRINUSE.
                if taken(if i.state == Cm::Idle {
                    None
                } else {
                    i.src_port
                }) || i.ps == RDMA_PS_IB
                    || self.ids.values().any(|x| x.state == Cm::Unknown)
                {
                    want(&[0, EBUSY, EADDRINUSE])
                } else {
                    want(&[0])
                }
            }
            Some(_) => want(&[EINVAL]),
        };
        let bl = match backlog % 4 {
            0 => 0,
            1 => -1,
            2 => i32::from(backlog),
            _ => i32::MAX,
        };
        let Some(r) = self.c.listen(s, bl) else {
            return;
        };
        if self.neg1_ret("rdma_listen", r, &w) == 0 {
            let Some(s) = s else { return };
            let (sp, _) = self.c.ports(Some(s)).unwrap_or((0, 0));
            if let Some(i) = self.ids.get_mut(&s) {
                if i.state != Cm::Unknown {
                    i.state = Cm::Listen;
                }
                i.cm_id = true;
                i.src_port = Some(sp);
            }
        }
    }

    fn disconnect(&mut self, id: u8) {
        let s = self.pick(Kind::Id, id);
        if let Some(s) = s.filter(|s| self.ids.get(s).is_some_and(|i| i.qp.is_some())) {
            self.sync(QpKey::Id(s));
        }
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let qp_state = i.as_ref().and_then(|i| i.qp.as_ref()).map(|q| q.state);
        let w = match &i {
            None => want(&[EINVAL]),
            // librdmacm's `ucma_shutdown` moves the QP to ERR first and returns its error: a
            // QP in RESET cannot go to ERR.
            Some(_) if qp_state == Some(Some(QpState::Reset)) => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL]),
            Some(i) if i.bound && i.cm_id => want(&[0]),
            Some(_) => want(&[EINVAL]),
        };
        // librdmacm moves the QP to ERR first, whatever the kernel then says.
        if let Some(q) = s
            .and_then(|s| self.ids.get_mut(&s))
            .and_then(|i| i.qp.as_mut())
        {
            q.touched = true;
        }
        let Some(r) = self.c.disconnect(s) else {
            return;
        };
        let got = self.neg1_ret("rdma_disconnect", r, &w);
        if let Some(s) = s {
            if self.ids.get(&s).is_some_and(|i| i.qp.is_some()) {
                self.sync(QpKey::Id(s));
                let st = self
                    .ids
                    .get(&s)
                    .and_then(|i| i.qp.as_ref())
                    .and_then(|q| q.state);
                if got == 0 && st != Some(QpState::Err) {
                    self.fail(format!(
                        "rdma_disconnect returned 0 with the id's QP in {st:?}"
                    ));
                }
            }
        }
    }

    fn init_qp_attr(&mut self, id: u8, state: u8, null: u8) {
        let s = self.pick(Kind::Id, id);
        let st = match state % 8 {
            0..=3 => IBV_QPS_INIT,
            4 => IBV_QPS_RTR,
            5 => IBV_QPS_RTS,
            _ => u32::from(state),
        };
        let null_attr = null % 8 == 6;
        let null_mask = null % 8 == 7;
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            _ if null_attr || null_mask => want(&[EINVAL]),
            None => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL]),
            // The kernel needs the id bound to a device even for INIT (`ucma_init_qp_attr`);
            // librnic answers INIT from the id alone.
            Some(i) if st == IBV_QPS_INIT && !i.bound => want(&[0, EINVAL]),
            Some(_) if st == IBV_QPS_INIT => want(&[0]),
            // RTR and RTS need the peer's REQ or REP, which no id here has.
            Some(_) => want(&[EINVAL]),
        };
        let Some((r, out)) = self
            .c
            .init_qp_attr(s, (!null_attr).then_some(st), null_mask)
        else {
            return;
        };
        if self.neg1_ret("rdma_init_qp_attr", r, &w) == 0 {
            let Some((a, m)) = out else { return };
            let need = (QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT).bits();
            if a.qp_state != IBV_QPS_INIT
                || (m as u32) & need != need
                || a.port_num != 1
                || a.pkey_index != 0
            {
                self.fail(format!(
                    "rdma_init_qp_attr(INIT): state {} mask {m:#x} port {} pkey {}",
                    a.qp_state, a.port_num, a.pkey_index
                ));
            }
        }
    }

    fn get_cm_event(&mut self, ch: u8, null: u8) {
        let chan = (usize::from(ch % 3) < CM_CHANNELS).then(|| usize::from(ch % 3));
        let null = null % 8 == 7;
        if self.events.len() >= MAX_LIVE {
            return;
        }
        let head = chan.and_then(|c| self.queues[c].front().copied());
        let loose = self.ids.values().any(|i| i.state == Cm::Unknown);
        let w = if chan.is_none() || null {
            want(&[EINVAL])
        } else if loose {
            want(&[0, EAGAIN])
        } else if head.is_some() {
            want(&[0])
        } else {
            want(&[EAGAIN])
        };
        let Some((r, ev)) = self.c.get_cm_event(chan, null) else {
            return;
        };
        if self.neg1_ret("rdma_get_cm_event", r, &w) != 0 {
            return;
        }
        let Some(ev) = ev else {
            self.fail("rdma_get_cm_event returned 0 without an event".to_string());
        };
        let Some(info) = self.c.event_info(ev) else {
            return;
        };
        let Some(id) = info.id else {
            self.fail(format!(
                "rdma_get_cm_event: {info:?} names no id of this input"
            ));
        };
        self.events.insert(ev, id);
        let Some(c) = chan else { return };
        match head {
            Some((hid, hev)) if hid == id && hev == info.event && info.status == 0 => {
                self.queues[c].pop_front();
            }
            _ if loose => {
                if let Some(p) = self.queues[c].iter().position(|&(i, _)| i == id) {
                    self.queues[c].remove(p);
                }
            }
            _ => self.fail(format!(
                "rdma_get_cm_event: {info:?}, the calls queued {head:?} first"
            )),
        }
    }

    // ---- the end ------------------------------------------------------------------------------

    /// After every CQ was polled empty: a QP in ERR has flushed all it had, so every receive
    /// and every signaled send it accepted has completed, unless one of its CQs may have
    /// overrun (or is one `rdma_create_qp` made, which is not polled here).
    fn check_flushed(&mut self) {
        let keys: Vec<QpKey> = self
            .qps
            .keys()
            .map(|&s| QpKey::Qp(s))
            .chain(
                self.ids
                    .iter()
                    .filter(|(_, i)| i.qp.is_some())
                    .map(|(&s, _)| QpKey::Id(s)),
            )
            .collect();
        for k in keys {
            self.sync(k);
            let Some(q) = self.qp(k) else { continue };
            if q.state != Some(QpState::Err) {
                continue;
            }
            let polled = |c: Option<usize>| {
                c.and_then(|c| self.cqs.get(&c))
                    .is_some_and(|&(_, cqe, posted)| posted <= u64::from(cqe))
            };
            let lost: Vec<u64> = (polled(q.send_cq).then(|| q.sq_sig.iter().copied()))
                .into_iter()
                .flatten()
                .chain(
                    (polled(q.recv_cq).then(|| q.rq.iter().copied()))
                        .into_iter()
                        .flatten(),
                )
                .collect();
            if !lost.is_empty() {
                self.fail(format!(
                    "QP {k:?} is in ERR and its CQs are empty, but WRs {lost:?} it accepted never \
                     completed"
                ));
            }
        }
    }

    fn finish(&mut self) {
        self.poll_all();
        self.check_flushed();
        let failed = self.c.teardown();
        if !failed.is_empty() {
            self.fail(format!("teardown failed: {failed:?}"));
        }
    }
}

// ---- seeds -----------------------------------------------------------------------------------

/// The seed corpus (`regenerate_corpus` in `tests/tests/fuzz_corpus.rs` writes it): call
/// sequences written by hand (there is nothing to capture: API calls are not on the wire),
/// each `(name, input)`.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let enc = |calls: &[Call]| {
        let mut o = Output::default();
        for c in calls {
            c.write(&mut o);
        }
        o.bytes
    };
    let sge = |len: u16| SgeSpec {
        mr: 0,
        off: 0,
        len,
        key: 0,
    };
    // Contexts: index 0 is the first opened device, the rdma_cm context is last.
    let verbs_setup = vec![
        Call::OpenDevice { null: 0 },
        Call::AllocPd { ctx: 0 },
        Call::RegMr {
            pd: 0,
            off: 0,
            len: 8192,
            iova: 0,
            v: 0,
            access: 0b111,
        },
        Call::CreateCompChannel { ctx: 0 },
        Call::CreateCq {
            ctx: 0,
            cqe: 3, // 16
            raw: 0,
            ch: 0,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0,
            rcq: 0,
            qp_type: 0,
            caps: 8 | 8 << 6 | 4 << 12 | 4 << 18 | 1 << 24,
            sig: 1,
        },
    ];
    let to_rts = |qp: u8| {
        (0..3).map(move |_| Call::ModifyQp {
            qp,
            null: 0,
            target: 0,
            mode: 0,
            mask: 0,
            fix: 0xFF,
            v: 0,
        })
    };
    let mut good = verbs_setup.clone();
    good.extend(to_rts(0));
    good.push(Call::PostRecv {
        qp: 0,
        bad: 0,
        wrs: vec![RecvSpec {
            nsge: 1,
            sges: vec![sge(64)],
        }],
    });
    good.push(Call::ReqNotifyCq {
        cq: 0,
        solicited: 0,
    });
    good.push(Call::PostSend {
        qp: 0,
        bad: 0,
        wrs: vec![
            SendSpec {
                opcode: 2, // SEND
                flags: 2,  // SIGNALED
                nsge: 1,
                sges: vec![sge(64)],
                ..SendSpec::default()
            },
            SendSpec {
                opcode: 0, // RDMA WRITE
                flags: 2 | 8,
                nsge: 1,
                sges: vec![sge(32)],
                remote: 0,
                roff: 128,
                ah: 0xFF,
            },
            SendSpec {
                opcode: 6, // FETCH_AND_ADD
                flags: 2,
                nsge: 1,
                sges: vec![sge(8)],
                remote: 0,
                roff: 64,
                ah: 0xFF,
            },
        ],
    });
    good.push(Call::PollCq {
        cq: 0,
        n: 4,
        null: 0,
    });
    good.push(Call::QueryQp { qp: 0, null: 0 });
    good.push(Call::ModifyQp {
        qp: 0,
        null: 0,
        target: 14, // ERR
        mode: 0,
        mask: 0,
        fix: 0xFF,
        v: 0,
    });
    good.push(Call::PollAll {});
    good.push(Call::DestroyQp { qp: 0 });
    good.push(Call::DestroyCq { cq: 0 });
    good.push(Call::DestroyCompChannel { ch: 0 });
    good.push(Call::DeregMr { mr: 0 });
    good.push(Call::DeallocPd { pd: 0 });
    good.push(Call::CloseDevice { ctx: 0 });

    let mut bad_verbs = verbs_setup.clone();
    bad_verbs.extend([
        // Post in RESET, modify with a missing bit, an unknown mask bit, a bad port.
        Call::PostSend {
            qp: 0,
            bad: 0,
            wrs: vec![SendSpec {
                opcode: 2,
                nsge: 1,
                sges: vec![sge(16)],
                ..SendSpec::default()
            }],
        },
        Call::ModifyQp {
            qp: 0,
            null: 0,
            target: 0,
            mode: 1,
            mask: 5,
            fix: 0xFF,
            v: 0,
        },
        Call::ModifyQp {
            qp: 0,
            null: 0,
            target: 0,
            mode: 3,
            mask: 25,
            fix: 0xFF,
            v: 0,
        },
        Call::ModifyQp {
            qp: 0,
            null: 0,
            target: 0,
            mode: 0,
            mask: 0,
            fix: 3,
            v: 2,
        },
        Call::ModifyQp {
            qp: 0xFF,
            null: 0,
            target: 0,
            mode: 0,
            mask: 0,
            fix: 0xFF,
            v: 0,
        },
        // In use: PD, CQ, channel.
        Call::DeallocPd { pd: 0 },
        Call::DestroyCq { cq: 0 },
        Call::DestroyCompChannel { ch: 0 },
        // Bad registrations and CQ sizes, a QP above the limits.
        Call::RegMr {
            pd: 0,
            off: 0,
            len: 100,
            iova: 0,
            v: 0,
            access: 0b10,
        },
        Call::RegMr {
            pd: 0,
            off: 16,
            len: 100,
            iova: 3,
            v: 0x1000,
            access: 1,
        },
        Call::RegMr {
            pd: 0,
            off: 0,
            len: 0,
            iova: 0,
            v: 0,
            access: 1,
        },
        Call::CreateCq {
            ctx: 0,
            cqe: 4,
            raw: 0,
            ch: 0xFF,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0,
            rcq: 0,
            qp_type: 0,
            caps: 2 | 1 << 6,
            sig: 0,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0xFF,
            rcq: 0,
            qp_type: 6,
            caps: 8,
            sig: 0,
        },
        Call::Query {
            ctx: 0,
            what: 2,
            port: 2,
            index: 0,
            null: 0,
        },
        Call::PollCq {
            cq: 0,
            n: 0xFF,
            null: 0,
        },
    ]);

    let cm_good = vec![
        Call::CreateId {
            ch: 0,
            ps: 0,
            null: 0,
        },
        Call::ResolveAddr {
            id: 0,
            src: 0xFF,
            dst: 3,
            port: 7,
        },
        Call::GetCmEvent { ch: 0, null: 0 },
        Call::AckCmEvent { ev: 0 },
        Call::ResolveRoute { id: 0 },
        Call::GetCmEvent { ch: 0, null: 0 },
        Call::AckCmEvent { ev: 0 },
        Call::OpenDevice { null: 0 },
        Call::AllocPd { ctx: 1 }, // the rdma_cm context
        Call::RdmaCreateQp {
            id: 0,
            pd: 0x80,
            null: 0,
            scq: 0xFF,
            rcq: 0xFF,
            qp_type: 0,
            caps: 8 | 8 << 6 | 1 << 12 | 1 << 18,
        },
        Call::InitQpAttr {
            id: 0,
            state: 0,
            null: 0,
        },
        Call::Connect {
            id: 0,
            param: ParamSpec {
                null: 0,
                len: 16,
                data_null: 0,
                rr: 1,
                depth: 1,
                retries: 0x77,
            },
        },
        Call::Ports { id: 0 },
        Call::Disconnect { id: 0 },
        Call::RdmaDestroyQp { id: 0 },
        Call::DestroyId { id: 0 },
    ];

    let cm_bad = vec![
        Call::CreateId {
            ch: 1,
            ps: 0,
            null: 0,
        },
        Call::CreateId {
            ch: 2,
            ps: 0,
            null: 0,
        },
        Call::CreateId {
            ch: 0,
            ps: 6,
            null: 0,
        },
        Call::ResolveRoute { id: 0 },
        Call::Connect {
            id: 0,
            param: ParamSpec {
                null: 0xFF,
                ..ParamSpec::default()
            },
        },
        Call::BindAddr {
            id: 0,
            addr: 3,
            port: 0,
        },
        Call::BindAddr {
            id: 0,
            addr: 0,
            port: 3,
        },
        Call::BindAddr {
            id: 0,
            addr: 0,
            port: 4,
        },
        Call::RdmaCreateQp {
            id: 0,
            pd: 0,
            null: 0,
            scq: 0xFF,
            rcq: 0xFF,
            qp_type: 0,
            caps: 4 | 4 << 6 | 1 << 12 | 1 << 18,
        },
        Call::RdmaCreateQp {
            id: 0,
            pd: 0,
            null: 0,
            scq: 0xFF,
            rcq: 0xFF,
            qp_type: 0,
            caps: 4 | 4 << 6 | 1 << 12 | 1 << 18,
        },
        Call::Listen { id: 0, backlog: 0 },
        Call::Accept {
            id: 0,
            param: ParamSpec {
                null: 0xFF,
                ..ParamSpec::default()
            },
        },
        Call::Reject {
            id: 0,
            null: 0,
            len: 200,
        },
        Call::Connect {
            id: 0,
            param: ParamSpec {
                null: 0,
                len: 57,
                data_null: 0,
                rr: 200,
                depth: 1,
                retries: 0,
            },
        },
        Call::InitQpAttr {
            id: 0,
            state: 4,
            null: 0,
        },
        Call::SetOption {
            id: 0,
            opt: 5,
            null: 0,
        },
        Call::GetCmEvent { ch: 1, null: 0 },
        Call::Disconnect { id: 0 },
    ];

    let ud = vec![
        Call::OpenDevice { null: 0 },
        Call::AllocPd { ctx: 0 },
        Call::RegMr {
            pd: 0,
            off: 4096,
            len: 4096,
            iova: 2,
            v: 0x40,
            access: 1,
        },
        Call::CreateCq {
            ctx: 0,
            cqe: 3,
            raw: 0,
            ch: 0xFF,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0,
            rcq: 0,
            qp_type: 4,
            caps: 4 | 4 << 6 | 11 << 12 | 11 << 18, // 4 WRs, 2 SGEs each way
            sig: 1,
        },
        Call::CreateAh {
            pd: 0,
            null: 0,
            fix: 7,
            v: 0,
        },
        Call::CreateAh {
            pd: 0,
            null: 0,
            fix: 0,
            v: 0,
        },
    ]
    .into_iter()
    .chain(to_rts(0))
    .chain([
        Call::PostSend {
            qp: 0,
            bad: 0,
            wrs: vec![
                SendSpec {
                    opcode: 2,
                    flags: 2,
                    nsge: 1,
                    sges: vec![sge(100)],
                    ah: 0,
                    ..SendSpec::default()
                },
                SendSpec {
                    opcode: 0, // WRITE on UD
                    flags: 2,
                    nsge: 1,
                    sges: vec![sge(100)],
                    ah: 0,
                    ..SendSpec::default()
                },
            ],
        },
        Call::PollAll {},
        Call::GetAsyncEvent { ctx: 0, null: 0 },
        Call::DeallocPd { pd: 0 },
    ])
    .collect::<Vec<_>>();

    vec![
        ("verbs-rc-good", enc(&good)),
        ("verbs-bad-arguments", enc(&bad_verbs)),
        ("cm-good", enc(&cm_good)),
        ("cm-bad-states", enc(&cm_bad)),
        ("verbs-ud", enc(&ud)),
    ]
}
