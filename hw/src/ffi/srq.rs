//! Shared receive queues over libibverbs: `ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq` and `ibv_post_srq_recv` (verbs.h's inline:
//! `context->ops.post_srq_recv`). The provider and the kernel make every check (rxe: resize
//! supported; mlx5: `IBV_SRQ_MAX_WR` is `EINVAL`); `destroy_srq` of an SRQ a QP uses is the
//! kernel's `EBUSY`.

use super::post::{flat_sges, index_of, post_error, recv_chain};
use super::verbs::Verbs;
use super::{check, errno_of_ret, null_error};
use crate::error::verbs_error;
use std::ptr::{null_mut, NonNull};
use verbs_abi as abi;
use verbs_abi::convert::{srq_attr_from_c, srq_attr_to_c};
use verbs_core::{
    Error, PdHandle, PostError, RecvWr, SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr,
};

impl Verbs {
    /// The live SRQ of handle `srq`.
    pub(super) fn srq(&self, srq: SrqHandle) -> Result<NonNull<abi::ibv_srq>, Error> {
        self.srqs
            .get(srq.0)
            .copied()
            .ok_or_else(|| Error::inval(format!("unknown SRQ handle {}", srq.0)))
    }

    /// `ibv_create_srq` in `pd`.
    pub(crate) fn create_srq(
        &mut self,
        pd: PdHandle,
        init: &SrqInitAttr,
    ) -> Result<SrqHandle, Error> {
        let p = self.pd(pd)?;
        let mut attr = abi::ibv_srq_init_attr {
            srq_context: null_mut(),
            attr: srq_attr_to_c(&init.attr),
        };
        // SAFETY: a live PD of this context; `attr` is readable and writable (the provider
        // writes the granted sizes back).
        let srq = unsafe { (self.ctx.lib.ibv_create_srq)(p.as_ptr(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| null_error("ibv_create_srq"))?;
        Ok(SrqHandle(self.srqs.insert(srq)))
    }

    /// `ibv_modify_srq` with `mask` (`ibv_srq_attr_mask` bits, verbs-core's values).
    pub(crate) fn modify_srq(
        &mut self,
        srq: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<(), Error> {
        let s = self.srq(srq)?;
        let mut a = srq_attr_to_c(attr);
        let m = libc::c_int::try_from(mask.bits())
            .map_err(|_| verbs_error("ibv_modify_srq mask", libc::EINVAL))?;
        // SAFETY: a live SRQ; `a` is a readable `ibv_srq_attr` (integers only).
        check("ibv_modify_srq", unsafe {
            (self.ctx.lib.ibv_modify_srq)(s.as_ptr(), &mut a, m)
        })
    }

    /// `ibv_query_srq`.
    pub(crate) fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr, Error> {
        let s = self.srq(srq)?;
        let mut a = srq_attr_to_c(&SrqAttr::default());
        // SAFETY: a live SRQ and a writable `ibv_srq_attr`.
        check("ibv_query_srq", unsafe {
            (self.ctx.lib.ibv_query_srq)(s.as_ptr(), &mut a)
        })?;
        Ok(srq_attr_from_c(&a))
    }

    /// `ibv_destroy_srq` (`EBUSY` from the kernel while a QP uses it).
    pub(crate) fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), Error> {
        let s = self.srq(srq)?;
        // SAFETY: a live SRQ; its async events were acked at once, so libibverbs does not
        // wait; on success it leaves the table.
        check("ibv_destroy_srq", unsafe {
            (self.ctx.lib.ibv_destroy_srq)(s.as_ptr())
        })?;
        self.srqs.remove(srq.0);
        Ok(())
    }

    /// `ibv_post_srq_recv` of `wrs` as one chain; `bad_wr` as in [`Verbs::post_recv`].
    pub(crate) fn post_srq_recv(
        &mut self,
        srq: SrqHandle,
        wrs: &[RecvWr],
    ) -> Result<(), PostError> {
        let s = self.srq(srq).map_err(|e| post_error(e, 0))?;
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges = flat_sges(wrs.iter().map(|w| w.sg_list.as_slice()));
        let mut chain = recv_chain(wrs, &mut sges)?;
        let base = chain.as_mut_ptr();
        // SAFETY: a live SRQ of a live context: `ops` is the provider's table.
        let f = unsafe { (*(*s.as_ptr()).context).ops.post_srq_recv };
        let f =
            f.ok_or_else(|| post_error(verbs_error("ibv_post_srq_recv", libc::EOPNOTSUPP), 0))?;
        let mut bad: *mut abi::ibv_recv_wr = null_mut();
        // SAFETY: the provider's entry point on its SRQ, with a NULL-terminated chain whose
        // `sg_list`s point into `sges`; both outlive the call (the provider copies what it
        // needs, man:ibv_post_srq_recv.3).
        let ret = unsafe { f(s.as_ptr(), base, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let size = std::mem::size_of::<abi::ibv_recv_wr>();
        let i = index_of(base as usize, bad as usize, size, chain.len());
        Err(post_error(
            verbs_error("ibv_post_srq_recv", errno_of_ret(ret)),
            i,
        ))
    }
}
