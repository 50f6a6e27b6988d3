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
//!
//! Files: `records.rs` (the input's records: [`Call`] and its fields), `checks.rs` (the
//! harness's bookkeeping: picking objects, checking results, the end of an input), `apply.rs`
//! (one record's call), `device.rs` (queries, MRs), `qp.rs` (QPs: create, modify, query),
//! `post.rs` (posting, polling, completions), `cm_ids.rs` (ids: create, bind, resolve),
//! `cm_conn.rs` (`rdma_create_qp`, connect, listen, accept, CM events), `seeds.rs` (the seed
//! corpus).

mod apply;
mod checks;
mod cm_conn;
mod cm_ids;
mod device;
mod post;
mod qp;
mod records;
mod seeds;

pub use records::*;
pub use seeds::seeds;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use rnic::abi::*;
use rnic::calls::{self, Calls, QpInit, QpRef, SockAddr, CM_CHANNELS};
use rnic::config::Config;
use verbs_core::{Mtu, QpCap, QpState, QpType};

use super::input::Input;

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
        poison_wc: false,
        remove_device_ms: None,
        resolve_us: 0,
        stats: None,
        faults: Vec::new(),
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
