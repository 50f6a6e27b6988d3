//! Per-host application behaviours beyond the CM's timers ([`HostApp`]): receiving from a
//! shared receive queue, and answering `IBV_EVENT_COMM_EST` with `rdma_notify`.

/// How host `h`'s application is built ([`WorldConfig::host_app`](super::WorldConfig)); the
/// default is the plain application (a receive queue per QP, COMM_EST recorded and ignored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostApp {
    /// The host's QPs take their receives from one shared receive queue
    /// (`ibv_create_srq(3)`, `QpInitAttr::with_srq`): [`World::post_recvs`] on any of its
    /// ends posts to the SRQ (`ibv_post_srq_recv`), recorded as posted to [`SRQ_QPN`].
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

/// The QPN a receive posted to a host's SRQ is recorded under ([`Record::Posted`],
/// [`Call::Post`]): above every 24-bit QPN, so it names no QP. Its completion names the QP
/// that took it.
///
/// [`Record::Posted`]: super::Record::Posted
/// [`Call::Post`]: super::Call::Post
pub const SRQ_QPN: u32 = 1 << 24;
