//! A shared receive queue: receive WQEs that every QP attached to it takes, oldest first, and
//! the low-watermark ("limit") that reports when few are left. A leaf: the device's shared
//! tables ([`crate::shared::Shared`]) hold the SRQs by handle; the QPs' receive paths take from
//! them (`SimQp::claim_recv`); the verbs calls are in `device/srq.rs`.
//!
//! Sources: rxe `rxe_srq.c` (checks), `rxe_verbs.c`/rdma-core `providers/rxe/rxe.c`
//! (`post_one_recv`), `rxe_resp.c` (`get_srq_wqe`: the limit event); man:ibv_modify_srq.3,
//! man:ibv_query_srq.3.

use std::collections::VecDeque;
use verbs_core::{Errno, Error, PostError, RecvWr, SrqAttr};

/// A shared receive queue.
#[derive(Debug, Clone)]
pub(crate) struct Srq {
    /// Protection domain handle value.
    pub pd: u32,
    /// Capacity in WRs.
    pub max_wr: u32,
    /// SGEs per WR at most.
    pub max_sge: u32,
    /// The armed limit (0: not armed).
    pub limit: u32,
    /// Posted WQEs not yet taken by a QP, oldest first.
    pub wqes: VecDeque<RecvWr>,
    /// QPs created with this SRQ and not destroyed (kernel `srq->usecnt`).
    pub users: u32,
}

impl Srq {
    /// An empty SRQ of `attr`'s sizes, its limit armed at `attr.srq_limit` (rxe
    /// `rxe_srq_from_init` copies it).
    pub fn new(pd: u32, attr: &SrqAttr) -> Self {
        Srq {
            pd,
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            limit: attr.srq_limit,
            wqes: VecDeque::new(),
            users: 0,
        }
    }

    /// The attributes `ibv_query_srq` reports.
    pub fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.limit,
        }
    }

    /// `ibv_post_srq_recv`: queues `wrs` in order. Per WR, a full queue is `ENOMEM` and then
    /// too many SGEs `EINVAL`, in that order (rdma-core `providers/rxe/rxe.c`
    /// `rxe_post_one_recv`; the kernel's `post_one_recv` checks the same way); the WRs before
    /// the bad one stay posted.
    pub fn post(&mut self, wrs: &[RecvWr]) -> Result<(), PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            if self.wqes.len() >= self.max_wr as usize {
                return Err(PostError {
                    error: Error::new(Errno::ENOMEM, "shared receive queue full"),
                    bad_wr: i,
                });
            }
            if wr.sg_list.len() > self.max_sge as usize {
                return Err(PostError {
                    error: Error::inval(format!(
                        "{} SGEs > the SRQ's max_sge {}",
                        wr.sg_list.len(),
                        self.max_sge
                    )),
                    bad_wr: i,
                });
            }
            self.wqes.push_back(wr.clone());
        }
        Ok(())
    }

    /// The oldest WQE, not taken.
    pub fn front(&self) -> Option<&RecvWr> {
        self.wqes.front()
    }

    /// Takes the oldest WQE for a QP that starts a message. The second value is true when
    /// this take fired the limit: it was armed and the WQEs left are now fewer than it
    /// ("below", strictly: rxe `get_srq_wqe` tests `count < srq->limit`; man:ibv_modify_srq.3
    /// "drops below srq_limit"), which disarms it (`srq_limit` reads 0 afterwards,
    /// man:ibv_query_srq.3).
    pub fn take(&mut self) -> Option<(RecvWr, bool)> {
        let wr = self.wqes.pop_front()?;
        let fired = self.limit != 0 && (self.wqes.len() as u64) < u64::from(self.limit);
        if fired {
            self.limit = 0;
        }
        Some((wr, fired))
    }
}
