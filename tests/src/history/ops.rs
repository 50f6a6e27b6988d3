//! What the World did on an application's behalf, as its history records it: the queues, WR
//! operations and API calls, and the QPN of receives posted to an SRQ.

use cm_core::api::CmEventType;

/// A send or receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Queue {
    /// The send queue.
    Send,
    /// The receive queue.
    Recv,
}

/// The operation of a posted WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// `IBV_WR_SEND` (signaled).
    Send,
    /// `IBV_WR_RDMA_WRITE` into the peer's destination region (signaled).
    Write,
    /// `IBV_WR_RDMA_READ` of the peer's READ region (signaled).
    Read,
    /// A receive.
    Recv,
}

/// An API call the World made, with its target (CM id or QPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `rdma_create_id` + `rdma_bind_addr` + `rdma_listen` on id `id`.
    Listen {
        /// The listening id.
        id: u32,
    },
    /// `rdma_create_id` + resolve + `rdma_create_qp` + `rdma_connect` on id `id` to `to`.
    Connect {
        /// The active id.
        id: u32,
        /// The passive host.
        to: u8,
        /// The id's QPN.
        qpn: u32,
    },
    /// `rdma_create_qp` + `rdma_accept` of passive id `id`.
    Accept {
        /// The passive id.
        id: u32,
        /// The id's QPN.
        qpn: u32,
    },
    /// `rdma_reject` of passive id `id`.
    Reject {
        /// The passive id.
        id: u32,
    },
    /// `rdma_disconnect(id)`.
    Disconnect {
        /// The id.
        id: u32,
    },
    /// `rdma_destroy_id(id)`.
    Destroy {
        /// The id.
        id: u32,
    },
    /// `rdma_ack_cm_event` of an event of id `id`.
    Ack {
        /// The id of the acked event.
        id: u32,
        /// Its type.
        event: CmEventType,
    },
    /// `ibv_post_send`/`ibv_post_recv` of `n` WRs of `op` on QP `qpn`.
    Post {
        /// The QP.
        qpn: u32,
        /// The operation.
        op: Op,
        /// WRs in the call.
        n: u32,
    },
    /// `rdma_notify(id, IBV_EVENT_COMM_EST)` on passive id `id`, answering the COMM_EST of
    /// its QP ([`HostApp::notify_on_comm_est`](crate::world::HostApp)).
    Notify {
        /// The passive id.
        id: u32,
    },
    /// `ibv_modify_qp(qpn, ERR)`: the application's verbs teardown.
    QpToErr {
        /// The QP.
        qpn: u32,
    },
}

/// The QPN a receive posted to a host's SRQ is recorded under ([`Record::Posted`],
/// [`Call::Post`]): above every 24-bit QPN, so it names no QP. Its completion names the QP
/// that took it.
///
/// [`Record::Posted`]: super::Record::Posted
/// [`Call::Post`]: Call::Post
pub const SRQ_QPN: u32 = 1 << 24;
