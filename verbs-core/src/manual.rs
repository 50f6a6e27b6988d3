//! Connecting an RC QP by hand, as an `ibv_*` program does after exchanging QPN, PSN and GID
//! out of band (the way `ibv_rc_pingpong` does, without a CM). The attribute masks are the
//! required ones of cm-spec §5.2.

use crate::device::{CompChannel, CqHandle, Device, Mr, PdHandle, Qp, QpHandle, QpInitAttr};
use crate::error::Result;
use crate::types::{
    AccessFlags, AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpCap, QpState,
};

/// What [`RcEndpoint::create`] allocates: sizes and options of the usual "one PD, one MR, CQs,
/// one RC QP" set-up of a verbs program.
#[derive(Debug, Clone)]
pub struct RcEndpointSpec {
    /// Bytes of the one memory region.
    pub mr_len: usize,
    /// Access flags of the memory region.
    pub mr_access: AccessFlags,
    /// Completions each CQ holds (`cqe` of `ibv_create_cq`).
    pub cqe: u32,
    /// One CQ for both queues (true) or a send CQ and a receive CQ (false).
    pub shared_cq: bool,
    /// Completion channel the CQs report to, if any.
    pub channel: Option<CompChannel>,
    /// Queue sizes of the QP.
    pub cap: QpCap,
    /// Every send WR completes, whatever its SIGNALED flag.
    pub sq_sig_all: bool,
}

impl Default for RcEndpointSpec {
    /// A 64 KiB MR with local write and remote write/read/atomic access, two 256-entry CQs, and a
    /// QP of 16 WRs and 4 SGEs per queue with 64 bytes of inline data.
    fn default() -> Self {
        RcEndpointSpec {
            mr_len: 64 * 1024,
            mr_access: RcParams::default().access,
            cqe: 256,
            shared_cq: false,
            channel: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
        .queues(16, 4, 64)
    }
}

impl RcEndpointSpec {
    /// The same spec with both queues of the QP holding `wr` work requests of up to `sge`
    /// scatter/gather elements each, and up to `max_inline_data` bytes of inline data.
    pub fn queues(mut self, wr: u32, sge: u32, max_inline_data: u32) -> Self {
        self.cap = QpCap::uniform(wr, sge, max_inline_data);
        self
    }
}

/// The objects of one RC endpoint, created by [`RcEndpoint::create`]; the QP is in RESET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcEndpoint {
    /// The protection domain.
    pub pd: PdHandle,
    /// The memory region.
    pub mr: Mr,
    /// CQ of the send queue.
    pub send_cq: CqHandle,
    /// CQ of the receive queue (equal to `send_cq` when shared).
    pub recv_cq: CqHandle,
    /// The RC QP.
    pub qp: Qp,
}

impl RcEndpoint {
    /// `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_cq` (once or twice) and `ibv_create_qp` with
    /// `spec`.
    ///
    /// # Errors
    /// The first failing call's error (e.g. `EINVAL` for a zero-length MR or caps above the
    /// device limits); objects created before it are left allocated.
    pub fn create<D: Device + ?Sized>(dev: &mut D, spec: &RcEndpointSpec) -> Result<Self> {
        let pd = dev.alloc_pd()?;
        let mr = dev.reg_mr(pd, spec.mr_len, spec.mr_access)?;
        let send_cq = dev.create_cq(spec.cqe, spec.channel.as_ref())?;
        let recv_cq = if spec.shared_cq {
            send_cq
        } else {
            dev.create_cq(spec.cqe, spec.channel.as_ref())?
        };
        let qp = dev.create_qp(
            pd,
            &QpInitAttr::rc(send_cq, recv_cq, spec.cap, spec.sq_sig_all),
        )?;
        Ok(RcEndpoint {
            pd,
            mr,
            send_cq,
            recv_cq,
            qp,
        })
    }

    /// What this endpoint tells its peer: `gid`, its QP number and the receive PSN `psn`.
    pub fn info(&self, gid: Gid, psn: u32) -> RcPeerInfo {
        RcPeerInfo {
            gid,
            qpn: self.qp.qp_num,
            psn,
        }
    }
}

/// The transport attributes of a hand-made RC connection. Defaults: MTU 1024, `timeout` 14
/// (4.096 µs × 2^14 ≈ 67 ms), `retry_cnt` 7, `rnr_retry` 7 (infinite), `min_rnr_timer` 12
/// (0.64 ms), 4 outstanding READ/atomic each way, local write + remote write/read/atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcParams {
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Transport retries, 0–7.
    pub retry_cnt: u8,
    /// RNR retries, 0–7 (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code this side advertises (IBTA table: 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic this QP issues (`max_rd_atomic`).
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic this QP accepts (`max_dest_rd_atomic`).
    pub max_dest_rd_atomic: u8,
    /// What the peer may do to this side's memory.
    pub access: AccessFlags,
}

impl Default for RcParams {
    fn default() -> Self {
        RcParams {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }
    }
}

/// What one side tells the other out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcPeerInfo {
    /// The side's port GID.
    pub gid: Gid,
    /// The side's QP number (24 bits).
    pub qpn: u32,
    /// The PSN the side expects first (its receive PSN; the peer sends from it), 24 bits.
    pub psn: u32,
}

/// Attributes an RC QP's RESET → INIT `modify_qp` requires (cm-spec §5.2).
pub const INIT_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::PKEY_INDEX)
    .union(QpAttrMask::PORT)
    .union(QpAttrMask::ACCESS_FLAGS);

/// Attributes an RC QP's INIT → RTR `modify_qp` requires (cm-spec §5.2).
pub const RTR_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::AV)
    .union(QpAttrMask::PATH_MTU)
    .union(QpAttrMask::DEST_QPN)
    .union(QpAttrMask::RQ_PSN)
    .union(QpAttrMask::MAX_DEST_RD_ATOMIC)
    .union(QpAttrMask::MIN_RNR_TIMER);

/// Attributes an RC QP's RTR → RTS `modify_qp` requires (cm-spec §5.2).
pub const RTS_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::SQ_PSN)
    .union(QpAttrMask::TIMEOUT)
    .union(QpAttrMask::RETRY_CNT)
    .union(QpAttrMask::RNR_RETRY)
    .union(QpAttrMask::MAX_QP_RD_ATOMIC);

/// RESET → INIT with pkey index 0, port 1 and `p.access`.
///
/// # Errors
/// Whatever `modify_qp` returns (`EINVAL` if the QP is not in RESET or INIT).
pub fn modify_to_init<D: Device + ?Sized>(dev: &mut D, qp: QpHandle, p: &RcParams) -> Result<()> {
    let attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: p.access,
        ..QpAttr::default()
    };
    dev.modify_qp(qp, &attr, INIT_MASK)
}

/// INIT → RTR towards `peer`; this side receives from `rq_psn`.
///
/// # Errors
/// Whatever `modify_qp` returns.
pub fn modify_to_rtr<D: Device + ?Sized>(
    dev: &mut D,
    qp: QpHandle,
    peer: &RcPeerInfo,
    rq_psn: u32,
    p: &RcParams,
) -> Result<()> {
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: p.mtu,
        dest_qp_num: peer.qpn,
        rq_psn,
        max_dest_rd_atomic: p.max_dest_rd_atomic,
        min_rnr_timer: p.min_rnr_timer,
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid: peer.gid,
                hop_limit: 64,
                ..GlobalRoute::default()
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    dev.modify_qp(qp, &attr, RTR_MASK)
}

/// RTR → RTS; this side sends from `sq_psn` (the peer's advertised receive PSN).
///
/// # Errors
/// Whatever `modify_qp` returns.
pub fn modify_to_rts<D: Device + ?Sized>(
    dev: &mut D,
    qp: QpHandle,
    sq_psn: u32,
    p: &RcParams,
) -> Result<()> {
    let attr = QpAttr {
        qp_state: QpState::Rts,
        sq_psn,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
        max_rd_atomic: p.max_rd_atomic,
        ..QpAttr::default()
    };
    dev.modify_qp(qp, &attr, RTS_MASK)
}

/// RESET → INIT → RTR → RTS: `local` is this side's own info (its `psn` is the receive PSN it
/// advertised), `peer` the other side's.
///
/// # Errors
/// The first failing `modify_qp`; the QP stays in the state it had reached.
pub fn connect_rc<D: Device + ?Sized>(
    dev: &mut D,
    qp: QpHandle,
    local: &RcPeerInfo,
    peer: &RcPeerInfo,
    p: &RcParams,
) -> Result<()> {
    modify_to_init(dev, qp, p)?;
    modify_to_rtr(dev, qp, peer, local.psn, p)?;
    modify_to_rts(dev, qp, peer.psn, p)
}
