//! QP attributes the CM negotiates (Linux `ib_cm_init_qp_attr`, cm-spec §5.2 last paragraph).

use verbs_core::{
    AccessFlags, AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpState, PSN_MASK,
};

/// The negotiated connection parameters one side needs for its QP.
///
/// PSN semantics (cm-spec §4.3): each side advertises its own receive PSN; `rq_psn` is this
/// side's advertised value and `sq_psn` the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// The peer's GID (RTR address vector).
    pub remote_gid: Gid,
    /// The peer's QPN (24 bits).
    pub dest_qp_num: u32,
    /// Expected PSN of the first incoming request (24 bits).
    pub rq_psn: u32,
    /// PSN of the first outgoing request (24 bits).
    pub sq_psn: u32,
    /// RDMA READ/atomic requests this side accepts (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA READ/atomic requests this side issues (`max_rd_atomic`).
    pub initiator_depth: u8,
    /// Transport retry count, 0–7.
    pub retry_count: u8,
    /// RNR retry count, 0–7.
    pub rnr_retry_count: u8,
    /// Local ACK timeout exponent (= the CM's `av.timeout`).
    pub timeout: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Hop limit for the GRH.
    pub hop_limit: u8,
}

/// One QP modification the CM asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpAction {
    /// (RESET or INIT) → INIT: pkey index 0, port 1, access REMOTE_WRITE (+ READ and ATOMIC
    /// when responder resources > 0). The same mask is legal from RESET and from INIT.
    Init(QpAttr, QpAttrMask),
    /// INIT → RTR: AV, path MTU, dest QPN, RQ PSN, max_dest_rd_atomic, min_rnr_timer 0.
    Rtr(QpAttr, QpAttrMask),
    /// RTR → RTS: SQ PSN, timeout, retry count, RNR retry, max_rd_atomic.
    Rts(QpAttr, QpAttrMask),
    /// Any → ERR (disconnect, REJ received, failed accept): the device flushes every WR.
    Err,
}

impl QpAction {
    /// The `ibv_modify_qp` arguments of this action.
    pub fn attr_mask(&self) -> (QpAttr, QpAttrMask) {
        match *self {
            QpAction::Init(a, m) | QpAction::Rtr(a, m) | QpAction::Rts(a, m) => (a, m),
            QpAction::Err => (
                QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                },
                QpAttrMask::STATE,
            ),
        }
    }

    /// The state this action moves the QP to.
    pub fn target(&self) -> QpState {
        self.attr_mask().0.qp_state
    }

    /// (RESET or INIT) → INIT with pkey index 0, port 1 and `access`.
    pub fn init(access: AccessFlags) -> QpAction {
        let init = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: access,
            ..QpAttr::default()
        };
        use QpAttrMask as M;
        QpAction::Init(init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
    }
}

impl QpParams {
    /// INIT, RTR and RTS, in order, with the attributes Linux's CM fills in.
    pub fn actions(&self) -> [QpAction; 3] {
        let mut access = AccessFlags::REMOTE_WRITE;
        if self.responder_resources > 0 {
            access |= AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
        }
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr {
                grh: GlobalRoute {
                    dgid: self.remote_gid,
                    hop_limit: self.hop_limit,
                    ..GlobalRoute::default()
                },
                is_global: true,
                port_num: 1,
                ..AhAttr::default()
            },
            path_mtu: self.path_mtu,
            dest_qp_num: self.dest_qp_num,
            rq_psn: self.rq_psn & PSN_MASK,
            max_dest_rd_atomic: self.responder_resources,
            min_rnr_timer: 0,
            ..QpAttr::default()
        };
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: self.sq_psn & PSN_MASK,
            timeout: self.timeout,
            retry_cnt: self.retry_count,
            rnr_retry: self.rnr_retry_count,
            max_rd_atomic: self.initiator_depth,
            ..QpAttr::default()
        };
        use QpAttrMask as M;
        [
            QpAction::init(access),
            QpAction::Rtr(
                rtr,
                M::STATE
                    | M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
            ),
            QpAction::Rts(
                rts,
                M::STATE
                    | M::SQ_PSN
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::MAX_QP_RD_ATOMIC,
            ),
        ]
    }
}
