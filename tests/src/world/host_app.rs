//! Per-host application behaviours beyond the CM's timers ([`HostApp`]): receiving from a
//! shared receive queue, and answering `IBV_EVENT_COMM_EST` with `rdma_notify`; how an
//! application treats its CM events ([`EventMode`]).

/// How host `h`'s application is built ([`WorldConfig::host_app`](super::WorldConfig)); the
/// default is the plain application (a receive queue per QP, COMM_EST recorded and ignored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostApp {
    /// The host's QPs take their receives from one shared receive queue
    /// (`ibv_create_srq(3)`, `QpInitAttr::with_srq`): [`World::post_recvs`] on any of its
    /// ends posts to the SRQ (`ibv_post_srq_recv`), recorded as posted to
    /// [`SRQ_QPN`](super::SRQ_QPN).
    ///
    /// [`World::post_recvs`]: super::World::post_recvs
    pub srq: bool,
    /// With [`srq`](Self::srq): the SRQ's limit, armed at creation (`srq_limit` of
    /// `ibv_create_srq`, as rxe and mlx5 honour it): `IBV_EVENT_SRQ_LIMIT_REACHED` once the
    /// SRQ holds fewer WRs (docs/semantics-verbs.md "Shared receive queues"). 0: not armed.
    pub srq_limit: u32,
    /// The application answers `IBV_EVENT_COMM_EST` on a passive QP with
    /// `rdma_notify(id, IBV_EVENT_COMM_EST)`, as nvmet-rdma does (`nvmet_rdma_qp_event`):
    /// data arriving before a lost RTU establishes the passive id (cm-spec §4.3).
    pub notify_on_comm_est: bool,
}

/// How a host's application treats its CM events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventMode {
    /// Reads every event at once and acks it at once.
    AckAtOnce,
    /// Reads at once, acks `ns` later (destroy meanwhile returns EBUSY).
    AckAfter(u64),
    /// Reads, never acks.
    NeverAck,
    /// Never reads events (they stay queued; not recorded). librdmacm's fetch-time work never
    /// happens either: an active QP stays in INIT, no RTU leaves, a REJECTED leaves the QP alone.
    NeverRead,
}
