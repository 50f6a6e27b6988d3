//! The rare situations a run reached ([`Sometimes`], TESTING.md "Sometimes" counters).

/// The rare situations a run reached (TESTING.md "Sometimes" counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sometimes {
    /// Two DREQs of one connection crossed: a host received the peer's DREQ for a connection
    /// after sending its own.
    pub dreqs_crossed: bool,
    /// A DISCONNECTED with status −110 (DREQ retries exhausted).
    pub dreq_retries_exhausted: bool,
    /// The fabric dropped a DREP.
    pub drep_lost: bool,
    /// A host received a DREQ for a connection it had already answered with a DREP (TimeWait).
    pub dup_dreq_in_timewait: bool,
    /// A WR was posted to a QP the application had seen in ERR.
    pub wr_posted_after_err: bool,
    /// rdma_disconnect was called on an id that was connecting (not yet ESTABLISHED).
    pub disconnect_during_setup: bool,
    /// A REJ with reason 10 (stale connection) was sent.
    pub stale_connection_rej: bool,
    /// A host sent an MRA (its application had not answered a CONNECT_REQUEST when the REQ
    /// came again: the delayed MRA of cm-spec §4.2).
    pub mra_sent: bool,
    /// An id got ESTABLISHED after its host had sent an MRA for it.
    pub mra_then_established: bool,
    /// A targeted fault dropped a message ([`Fault::TargetedDrop`](crate::history::Fault)).
    pub targeted_drop: bool,
    /// A targeted fault held a message back ([`Fault::Delayed`](crate::history::Fault)).
    pub targeted_delay: bool,
    /// An UNREACHABLE with status −110 (REQ or REP retries ran out) after a targeted fault
    /// dropped a REQ, REP or MRA.
    pub cm_retries_exhausted_by_targeted_drop: bool,
    /// More than 32 WRs (the World's former slot count) were outstanding on one queue.
    pub deep_post: bool,
    /// An SRQ's armed limit was crossed: `IBV_EVENT_SRQ_LIMIT_REACHED`.
    pub srq_limit_reached: bool,
    /// A QP on an SRQ entered ERR: `IBV_EVENT_QP_LAST_WQE_REACHED`.
    pub last_wqe_reached: bool,
    /// A QP's completion overran its CQ: `IBV_EVENT_QP_FATAL` (after CQ_ERR).
    pub qp_fatal: bool,
    /// A passive id got ESTABLISHED after its application answered COMM_EST with `rdma_notify` (the RTU had not arrived).
    pub comm_est_notify_established: bool,
    /// An id got `RDMA_CM_EVENT_DEVICE_REMOVAL` (its host's device was removed).
    pub device_removed: bool,
    /// An id got `RDMA_CM_EVENT_ADDR_CHANGE`.
    pub addr_change: bool,
}

impl Sometimes {
    /// The number of situations.
    pub const COUNT: usize = 19;

    /// The snake_case names, in field order.
    pub const NAMES: [&'static str; Self::COUNT] = [
        "dreqs_crossed",
        "dreq_retries_exhausted",
        "drep_lost",
        "dup_dreq_in_timewait",
        "wr_posted_after_err",
        "disconnect_during_setup",
        "stale_connection_rej",
        "mra_sent",
        "mra_then_established",
        "targeted_drop",
        "targeted_delay",
        "cm_retries_exhausted_by_targeted_drop",
        "deep_post",
        "srq_limit_reached",
        "last_wqe_reached",
        "qp_fatal",
        "comm_est_notify_established",
        "device_removed",
        "addr_change",
    ];

    /// The flags, in field order.
    pub fn flags(&self) -> [bool; Self::COUNT] {
        [
            self.dreqs_crossed,
            self.dreq_retries_exhausted,
            self.drep_lost,
            self.dup_dreq_in_timewait,
            self.wr_posted_after_err,
            self.disconnect_during_setup,
            self.stale_connection_rej,
            self.mra_sent,
            self.mra_then_established,
            self.targeted_drop,
            self.targeted_delay,
            self.cm_retries_exhausted_by_targeted_drop,
            self.deep_post,
            self.srq_limit_reached,
            self.last_wqe_reached,
            self.qp_fatal,
            self.comm_est_notify_established,
            self.device_removed,
            self.addr_change,
        ]
    }
}
