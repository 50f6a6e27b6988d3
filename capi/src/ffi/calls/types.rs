//! The values the calls take and return: C structs with owned memory and slots for their
//! pointers, and the fields read back from live objects.

use crate::abi::convert;
use crate::abi::*;
use crate::ffi::raw;
use libc::c_int;

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

/// The kinds of object a [`Calls`](super::Calls) holds, each with its own slot numbers.
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
    /// The arena's byte `offset` (with the length, it must stay inside
    /// [`ARENA_LEN`](super::ARENA_LEN)).
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
    pub(super) fn storage(&self) -> libc::sockaddr_storage {
        let mut ss = raw::zeroed_storage();
        let p: *mut libc::sockaddr_storage = &mut ss;
        match *self {
            SockAddr::Ip(std::net::SocketAddr::V4(a)) => {
                // SAFETY: `sockaddr_storage` is larger than, and aligned for, `sockaddr_in`.
                unsafe { p.cast::<libc::sockaddr_in>().write(convert::sockaddr_in(a)) };
            }
            SockAddr::Ip(std::net::SocketAddr::V6(a)) => {
                // SAFETY: as above, for `sockaddr_in6`.
                unsafe {
                    p.cast::<libc::sockaddr_in6>()
                        .write(convert::sockaddr_in6(a))
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
