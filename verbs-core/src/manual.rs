//! Connecting an RC QP by hand, as an `ibv_*` program does after exchanging QPN, PSN and GID
//! out of band (the way `ibv_rc_pingpong` does, without a CM). The attribute masks are the
//! required ones of cm-spec §5.2.

use crate::device::{Device, QpHandle};
use crate::error::Result;
use crate::types::{AccessFlags, AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpState};

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
    dev.modify_qp(
        qp,
        &attr,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
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
    dev.modify_qp(
        qp,
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
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
    dev.modify_qp(
        qp,
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
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
