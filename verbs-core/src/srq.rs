//! Shared receive queues: the handle and attribute types of `ibv_create_srq(3)`,
//! `ibv_modify_srq(3)` and `ibv_query_srq(3)` [verbs.h].
//!
//! A shared receive queue (SRQ) holds receive work requests that any QP created with it
//! ([`crate::QpInitAttr::srq`]) consumes in arrival order; such a QP has no receive queue of
//! its own. The rules a device follows are in `docs/semantics-verbs.md`, "Shared receive
//! queues".

use bitflags::bitflags;

/// A shared receive queue (`struct ibv_srq *`), as the device hands it out. An unknown or
/// destroyed handle is `EINVAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SrqHandle(pub u32);

/// `struct ibv_srq_attr` [verbs.h, man:ibv_modify_srq.3]: the sizes and the limit of an SRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Receive WRs the SRQ holds at most (`IBV_SRQ_MAX_WR` resizes it).
    pub max_wr: u32,
    /// SGEs per receive WR at most (fixed at creation; ignored by `modify_srq`).
    pub max_sge: u32,
    /// The low watermark, in WRs: while non-zero (armed), the device raises
    /// `IBV_EVENT_SRQ_LIMIT_REACHED` once when the number of WRs in the SRQ drops below it, and
    /// disarms (sets it to 0) [man:ibv_modify_srq.3, man:ibv_query_srq.3].
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` [verbs.h, man:ibv_create_srq.3] (`srq_context` is the C
/// library's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqInitAttr {
    /// Requested sizes; a non-zero `srq_limit` arms the limit at creation, as rxe
    /// (`rxe_srq_from_init`) and mlx5 (`lwm`) do although the man page calls it irrelevant.
    pub attr: SrqAttr,
}

impl SrqInitAttr {
    /// An SRQ of `max_wr` WRs of up to `max_sge` SGEs each, limit not armed.
    pub const fn new(max_wr: u32, max_sge: u32) -> Self {
        SrqInitAttr {
            attr: SrqAttr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        }
    }
}

bitflags! {
    /// `enum ibv_srq_attr_mask` [verbs.h]: which [`SrqAttr`] fields `modify_srq` applies.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    pub struct SrqAttrMask: u32 {
        /// `IBV_SRQ_MAX_WR` (1): resize the SRQ to `max_wr`.
        const MAX_WR = 1;
        /// `IBV_SRQ_LIMIT` (2): set (arm, or with 0 disarm) the limit to `srq_limit`.
        const LIMIT = 1 << 1;
    }
}
