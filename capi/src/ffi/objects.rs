//! The objects handed to C: each a `Box` whose first field is the C struct (so the C pointer
//! and the box pointer are the same address), leaked on create and freed on destroy; and the
//! registry that maps the device's and the CM's handles back to those pointers (a CQ event
//! names a `CqHandle`, an async event a `CqHandle` or a QP number, a CM event a `CmIdHandle`;
//! C wants the `struct ibv_cq *` / `struct ibv_qp *` / `struct rdma_cm_id *` it was given).

use super::raw::{gid_from_c, zeroed_storage};
use crate::abi::convert::ah_from_c;
use crate::abi::*;
use crate::runtime::Ends;
use cm_core::api::{CmEvent, CmIdHandle, EventChannel};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use verbs_core::AhAttr;

/// `struct ibv_comp_channel` and the node's number for it.
#[repr(C)]
pub struct CompChannelBox {
    /// What C sees.
    pub c: ibv_comp_channel,
    /// The node's channel number (`Node::comp`).
    pub num: u32,
    /// Its descriptor pair, to wait on without the node lock.
    pub fd: Arc<Ends>,
}

/// Every CQ (`ibv_create_cq`, `ibv_create_cq_ex`): `struct ibv_cq_ex`, whose first members are
/// `struct ibv_cq`'s, so the CQ pointer C holds is this box's address whichever call made it.
/// A CQ of `ibv_create_cq` leaves the extended slots NULL (C may not call them, as with
/// libibverbs).
#[repr(C)]
pub struct CqBox {
    /// What C sees.
    pub c: ibv_cq_ex,
    /// The completion the poll API is on, between `ibv_start_poll` and `ibv_end_poll`: what
    /// the `ibv_wc_read_*` calls read.
    pub cur: ibv_wc,
}

impl CqBox {
    /// A CQ of the device's CQ `handle` with `cqe` entries, reporting to `channel`.
    pub fn new(
        context: *mut ibv_context,
        channel: *mut ibv_comp_channel,
        cq_context: *mut c_void,
        handle: u32,
        cqe: libc::c_int,
    ) -> CqBox {
        // SAFETY: `ibv_cq_ex` is pointers, integers, `Option`s of function pointers and the
        // glibc mutex and condition variable, whose all-zero value is their static initializer:
        // all-zero is a valid value (NULL pointers, `None` slots).
        let mut c: ibv_cq_ex = unsafe { std::mem::zeroed() };
        c.context = context;
        c.channel = channel;
        c.cq_context = cq_context;
        c.handle = handle;
        c.cqe = cqe;
        CqBox {
            c,
            cur: crate::abi::convert::wc_zeroed(),
        }
    }
}

/// Every QP (`ibv_create_qp`, `ibv_create_qp_ex`, `rdma_create_qp`): `struct ibv_qp_ex`, whose
/// first member is the `struct ibv_qp`, so the QP pointer C holds is this box's address.
#[repr(C)]
pub struct QpBox {
    /// What C sees.
    pub c: ibv_qp_ex,
    /// Made by `ibv_create_qp_ex`: `ibv_qp_to_qp_ex` returns `c` (libibverbs's `VERBS_QP_EX`,
    /// which rxe sets for every QP of `create_qp_ex`); otherwise NULL.
    pub extended: bool,
    /// The granted `max_inline_data` and `max_send_sge` (the `ibv_wr_set_*` limits).
    pub max_inline_data: u32,
    /// See `max_inline_data`.
    pub max_send_sge: u32,
    /// The work requests being built between `ibv_wr_start` and `ibv_wr_complete`.
    pub batch: Mutex<WrBatch>,
}

/// The work requests of one `ibv_wr_start` … `ibv_wr_complete` sequence.
#[derive(Debug, Default)]
pub struct WrBatch {
    /// The WRs, in the order built.
    pub wrs: Vec<verbs_core::SendWr>,
    /// Copies of the inline data of `ibv_wr_set_inline_data*` (the application may reuse its
    /// buffer as soon as the call returns); the WRs' SGEs point into them until the post.
    pub inline: Vec<Vec<u8>>,
    /// The first error a builder or setter met (`ibv_wr_complete` returns it and posts
    /// nothing), 0 if none: rxe's `qp->err`.
    pub err: i32,
}

impl QpBox {
    /// The box of a new QP: `qp_base` as given, no builders (the extended API's slots are set
    /// by `ibv_create_qp_ex`).
    pub fn new(qp_base: ibv_qp, cap: &ibv_qp_cap) -> QpBox {
        // SAFETY: `ibv_qp_ex` is an `ibv_qp` (pointers, integers, glibc mutex and condition
        // variable), integers and `Option`s of function pointers: all-zero is valid.
        let mut c: ibv_qp_ex = unsafe { std::mem::zeroed() };
        c.qp_base = qp_base;
        QpBox {
            c,
            extended: false,
            max_inline_data: cap.max_inline_data,
            max_send_sge: cap.max_send_sge,
            batch: Mutex::new(WrBatch::default()),
        }
    }
}

/// `struct ibv_ah` and its address vector.
#[repr(C)]
pub struct AhBox {
    /// What C sees.
    pub c: ibv_ah,
    /// The address vector of `ibv_create_ah`.
    pub attr: AhAttr,
}

impl AhBox {
    /// A new AH of `pd` for `attr`.
    pub fn new(pd: *mut ibv_pd, context: *mut ibv_context, attr: &ibv_ah_attr) -> AhBox {
        AhBox {
            c: ibv_ah {
                context,
                pd,
                handle: 0,
            },
            attr: ah_from_c(attr, gid_from_c(&attr.grh.dgid)),
        }
    }
}

/// `struct rdma_event_channel` and the CM's channel.
#[repr(C)]
pub struct ChannelBox {
    /// What C sees.
    pub c: rdma_event_channel,
    /// The CM's channel.
    pub handle: EventChannel,
    /// Its descriptor pair, to wait on without the node lock.
    pub fd: Arc<Ends>,
}

/// `struct rdma_cm_id` and what librdmacm keeps beside it (`struct cma_id_private`).
#[repr(C)]
pub struct IdBox {
    /// What C sees.
    pub c: rdma_cm_id,
    /// The CM's id.
    pub handle: CmIdHandle,
    /// From the CONNECT_REQUEST, in this side's perspective: the defaults `rdma_accept(id,
    /// NULL)` uses (librdmacm `ucma_process_conn_req`).
    pub req_resources: (u8, u8),
    /// `rdma_create_qp` made the CQs (and their channels): `rdma_destroy_qp` frees them.
    pub own_cqs: bool,
    /// A passive endpoint's QP attributes (`rdma_create_ep` with `RAI_PASSIVE`, librdmacm's
    /// `id_priv->qp_init_attr`): `rdma_get_request` makes each new id's QP with them.
    pub qp_init_attr: Option<ibv_qp_init_attr>,
    /// The multicast joins' `context`s (librdmacm's `mc->context`), by the address joined,
    /// in join order: a MULTICAST_JOIN/ERROR's `param.ud.private_data` (cm_mcast.rs).
    pub mc_contexts: Vec<(std::net::SocketAddr, usize)>,
}

impl IdBox {
    /// A new id reporting to `channel` with the application's `context`.
    pub fn new(
        handle: CmIdHandle,
        channel: *mut rdma_event_channel,
        context: *mut c_void,
        ps: rdma_port_space,
        qp_type: ibv_qp_type,
    ) -> IdBox {
        IdBox {
            c: rdma_cm_id {
                verbs: std::ptr::null_mut(),
                channel,
                context,
                qp: std::ptr::null_mut(),
                route: rdma_route {
                    addr: rdma_addr {
                        src: rdma_addr_src {
                            src_storage: zeroed_storage(),
                        },
                        dst: rdma_addr_dst {
                            dst_storage: zeroed_storage(),
                        },
                        addr: rdma_addr_addr {
                            ibaddr: rdma_ib_addr {
                                sgid: ibv_gid { raw: [0; 16] },
                                dgid: ibv_gid { raw: [0; 16] },
                                pkey: 0xffff_u16.to_be(),
                            },
                        },
                    },
                    path_rec: std::ptr::null_mut(),
                    num_paths: 0,
                },
                ps,
                port_num: 0,
                event: std::ptr::null_mut(),
                send_cq_channel: std::ptr::null_mut(),
                send_cq: std::ptr::null_mut(),
                recv_cq_channel: std::ptr::null_mut(),
                recv_cq: std::ptr::null_mut(),
                srq: std::ptr::null_mut(),
                pd: std::ptr::null_mut(),
                qp_type,
            },
            handle,
            req_resources: (0, 0),
            own_cqs: false,
            qp_init_attr: None,
            mc_contexts: Vec::new(),
        }
    }
}

/// `struct rdma_cm_event` with the CM event it reports and the private data it points to.
#[repr(C)]
pub struct EventBox {
    /// What C sees.
    pub c: rdma_cm_event,
    /// The CM's event, handed back by `rdma_ack_cm_event`.
    pub event: CmEvent,
    /// `param.conn.private_data` (`param.ud.private_data`) points here.
    pub private_data: Vec<u8>,
}

/// Handle → C pointer maps (pointers as addresses: the registry itself never dereferences).
#[derive(Debug, Default)]
pub struct Registry {
    /// CQ handle → `struct ibv_cq *`.
    pub cqs: BTreeMap<u32, usize>,
    /// QP number → `struct ibv_qp *` (from `ibv_create_qp` or `rdma_create_qp`).
    pub qps: BTreeMap<u32, usize>,
    /// SRQ handle → `struct ibv_srq *` (from `ibv_create_srq`).
    pub srqs: BTreeMap<u32, usize>,
    /// CM id → `struct rdma_cm_id *` (the `IdBox`).
    pub ids: BTreeMap<CmIdHandle, usize>,
}

/// The registry. Lock order: the node lock (`Runtime::with`) may be held while taking this
/// one, never the other way round.
pub fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| Mutex::new(Registry::default()))
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Leaks `b` to C.
pub fn leak<T>(b: T) -> *mut T {
    Box::into_raw(Box::new(b))
}
