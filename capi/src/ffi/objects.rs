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
