//! The SimDevice side of shared receive queues: `ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq`, `ibv_post_srq_recv` (the [`Device`] methods call these),
//! and the SRQ checks of `ibv_create_qp`/`ibv_destroy_qp`. The queue itself is
//! [`crate::srq::Srq`]; the rules and their sources are in `docs/semantics-verbs.md`, "Shared
//! receive queues".

use super::*;
use crate::srq::Srq;
use verbs_core::{SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr};

fn srq_handle_err() -> Error {
    Error::inval("unknown SRQ handle")
}

impl SimDevice {
    /// `ibv_create_srq` (rxe `rxe_create_srq` → `rxe_srq_chk_init`): `max_wr` in
    /// 1..=`max_srq_wr`, `max_sge` at most `max_srq_sge` (0 is raised to 1, rxe
    /// `RXE_MIN_SRQ_SGE`), else `EINVAL`; `ENOMEM` past `max_srq`. Grants exactly `max_wr`
    /// (rxe rounds its ring up to a power of two less one; the simulated QPs grant exactly what
    /// is asked too).
    pub(super) fn srq_create(&mut self, pd: PdHandle, init: &SrqInitAttr) -> Result<SrqHandle> {
        if !self.pds.contains(&pd.0) {
            return Err(Error::inval("unknown PD"));
        }
        let a = &init.attr;
        if a.max_wr == 0 || a.max_wr > self.cfg.max_srq_wr {
            return Err(Error::inval("SRQ max_wr 0 or above max_srq_wr"));
        }
        if a.max_sge > self.cfg.max_srq_sge {
            return Err(Error::inval("SRQ max_sge above max_srq_sge"));
        }
        if self.sh.srqs.len() >= self.cfg.max_srq as usize {
            return Err(Error::new(Errno::ENOMEM, "max_srq reached"));
        }
        let mut h = self.next_srq;
        while self.sh.srqs.contains_key(&h) {
            h = h.wrapping_add(1).max(1);
        }
        self.next_srq = h.wrapping_add(1).max(1);
        let attr = SrqAttr {
            max_sge: a.max_sge.max(1),
            ..*a
        };
        self.sh.srqs.insert(h, Srq::new(pd.0, &attr));
        Ok(SrqHandle(h))
    }

    /// `ibv_modify_srq` (rxe `rxe_modify_srq` → `rxe_srq_chk_attr`, `rxe_srq_from_attr`):
    /// every check first, then both changes, so a refused call changes nothing
    /// (man:ibv_modify_srq.3 NOTES).
    pub(super) fn srq_modify(
        &mut self,
        srq: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<()> {
        let max_srq_wr = self.cfg.max_srq_wr;
        let s = self.sh.srqs.get_mut(&srq.0).ok_or_else(srq_handle_err)?;
        let new_max = if mask.contains(SrqAttrMask::MAX_WR) {
            if attr.max_wr == 0 || attr.max_wr > max_srq_wr {
                return Err(Error::inval("SRQ max_wr 0 or above max_srq_wr"));
            }
            if s.limit != 0 && attr.max_wr < s.limit {
                return Err(Error::inval("SRQ max_wr below the armed limit"));
            }
            // rxe `rxe_queue_resize` refuses a ring too small for the WQEs it holds.
            if (attr.max_wr as usize) < s.wqes.len() {
                return Err(Error::inval("SRQ max_wr below the WQEs it holds"));
            }
            attr.max_wr
        } else {
            s.max_wr
        };
        if mask.contains(SrqAttrMask::LIMIT) && attr.srq_limit > s.max_wr {
            // Against the size before this call's resize, as rxe checks the ring's
            // `index_mask` before resizing it.
            return Err(Error::inval("srq_limit above the SRQ's max_wr"));
        }
        s.max_wr = new_max;
        if mask.contains(SrqAttrMask::LIMIT) {
            s.limit = attr.srq_limit;
        }
        Ok(())
    }

    /// `ibv_query_srq` (rxe `rxe_query_srq`).
    pub(super) fn srq_query(&self, srq: SrqHandle) -> Result<SrqAttr> {
        self.sh
            .srqs
            .get(&srq.0)
            .map(Srq::attr)
            .ok_or_else(srq_handle_err)
    }

    /// `ibv_destroy_srq`: `EBUSY` while a QP uses it (kernel `ib_destroy_srq_user` tests
    /// `srq->usecnt`).
    pub(super) fn srq_destroy(&mut self, srq: SrqHandle) -> Result<()> {
        let s = self.sh.srqs.get(&srq.0).ok_or_else(srq_handle_err)?;
        if s.users > 0 {
            return Err(Error::new(Errno::EBUSY, "SRQ still used by a QP"));
        }
        self.sh.srqs.remove(&srq.0);
        self.sh.forget_events_of(AsyncElement::Srq(srq));
        Ok(())
    }

    /// `ibv_post_srq_recv` ([`Srq::post`]).
    pub(super) fn srq_post_recv(
        &mut self,
        srq: SrqHandle,
        wrs: &[RecvWr],
    ) -> Result<(), PostError> {
        let s = self.sh.srqs.get_mut(&srq.0).ok_or_else(|| PostError {
            error: srq_handle_err(),
            bad_wr: 0,
        })?;
        s.post(wrs)
    }

    /// The SRQ part of `ibv_create_qp`: an unknown SRQ is `EINVAL`; a known one counts a user.
    /// The creation attributes kept (and reported by `query_qp`) have no receive queue
    /// (`max_recv_wr`/`max_recv_sge` 0, as rxe's `rxe_qp_to_init` reports for an SRQ QP).
    pub(super) fn srq_attach(&mut self, init: &QpInitAttr) -> Result<QpInitAttr> {
        let Some(h) = init.srq else {
            return Ok(*init);
        };
        if !self.sh.srqs.contains_key(&h.0) {
            return Err(srq_handle_err());
        }
        let mut kept = *init;
        kept.cap.max_recv_wr = 0;
        kept.cap.max_recv_sge = 0;
        Ok(kept)
    }

    /// Counts (`attach`) or releases (not `attach`) a QP's use of its SRQ.
    pub(super) fn srq_count_user(&mut self, init: &QpInitAttr, attach: bool) {
        if let Some(s) = init.srq.and_then(|h| self.sh.srqs.get_mut(&h.0)) {
            if attach {
                s.users += 1;
            } else {
                s.users = s.users.saturating_sub(1);
            }
        }
    }

    /// True while an SRQ lives in `pd` (`dealloc_pd` is `EBUSY` then).
    pub(super) fn pd_has_srq(&self, pd: u32) -> bool {
        self.sh.srqs.values().any(|s| s.pd == pd)
    }
}
