//! The data path's posting calls: `ibv_post_send` and `ibv_post_recv`, inline in verbs.h
//! (through `context->ops`), fed with chains built from verbs-core's work requests.

use super::{errno_of_ret, Verbs};
use crate::error::verbs_error;
use std::ptr::null_mut;
use verbs_abi as abi;
use verbs_abi::convert::{recv_wr_to_c, send_wr_to_c, sge_to_c};
use verbs_core::{Error, PostError, QpHandle, RecvWr, SendWr, Sge};

pub(super) fn post_error(error: Error, bad_wr: usize) -> PostError {
    PostError { error, bad_wr }
}

/// Every SGE of `lists`, one flat array (the chain's WRs point into it).
pub(super) fn flat_sges<'a>(lists: impl Iterator<Item = &'a [Sge]>) -> Vec<abi::ibv_sge> {
    lists.flatten().map(sge_to_c).collect()
}

/// The C chain of the receive WRs `wrs`, linked in order, each `sg_list` pointing into `sges`
/// (the [`flat_sges`] of the same WRs), which must outlive every use of the chain.
pub(super) fn recv_chain(
    wrs: &[RecvWr],
    sges: &mut [abi::ibv_sge],
) -> Result<Vec<abi::ibv_recv_wr>, PostError> {
    let sge_base = sges.as_mut_ptr();
    let mut chain = Vec::with_capacity(wrs.len());
    let mut at = 0;
    for (i, w) in wrs.iter().enumerate() {
        let n = w.sg_list.len();
        let list = if n == 0 {
            null_mut()
        } else {
            sge_base.wrapping_add(at)
        };
        chain.push(recv_wr_to_c(w, list, num_sge(n, i)?));
        at += n;
    }
    let base = chain.as_mut_ptr();
    for i in 1..chain.len() {
        // SAFETY: `i - 1` and `i` are elements of `chain`, written through the one raw pointer
        // taken above; the heap buffer stays where it is when `chain` is returned.
        unsafe { (*base.add(i - 1)).next = base.add(i) };
    }
    Ok(chain)
}

/// The index in a chain starting at `base` (elements of `size` bytes, `len` of them) of the
/// element `bad` points to; 0 when `bad` is NULL or outside the chain (a provider that does not
/// set `bad_wr` refused the first).
pub(super) fn index_of(base: usize, bad: usize, size: usize, len: usize) -> usize {
    match bad.checked_sub(base) {
        Some(off) if size > 0 && off % size == 0 && off / size < len => off / size,
        _ => 0,
    }
}

/// `num_sge` of a WR, or `EINVAL` naming it.
pub(super) fn num_sge(n: usize, i: usize) -> Result<libc::c_int, PostError> {
    libc::c_int::try_from(n).map_err(|_| post_error(Error::inval(format!("{n} SGEs in one WR")), i))
}

impl Verbs {
    /// `ibv_post_send` of `wrs` as one chain. `imm_data` is passed as is (the network-order
    /// value), `send_flags` and `opcode` numerically (verbs-core's values are libibverbs').
    /// On failure, `bad_wr` is the index of the WR the provider named.
    pub(crate) fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr]) -> Result<(), PostError> {
        let q = self.qp(qp).map_err(|e| post_error(e, 0))?.qp;
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges = flat_sges(wrs.iter().map(|w| w.sg_list.as_slice()));
        let sge_base = sges.as_mut_ptr();
        let mut chain = Vec::with_capacity(wrs.len());
        let mut at = 0;
        for (i, w) in wrs.iter().enumerate() {
            let n = w.sg_list.len();
            let list = if n == 0 {
                null_mut()
            } else {
                sge_base.wrapping_add(at)
            };
            chain.push(send_wr_to_c(w, list, num_sge(n, i)?));
            at += n;
        }
        let base = chain.as_mut_ptr();
        for i in 1..chain.len() {
            // SAFETY: `i - 1` and `i` are elements of `chain`, written through the one raw
            // pointer that is used from here until the call returns.
            unsafe { (*base.add(i - 1)).next = base.add(i) };
        }
        // SAFETY: a live QP of a live context: `ops` is the provider's table.
        let f = unsafe { (*(*q.as_ptr()).context).ops.post_send };
        let f = f.ok_or_else(|| post_error(verbs_error("ibv_post_send", libc::EOPNOTSUPP), 0))?;
        let mut bad: *mut abi::ibv_send_wr = null_mut();
        // SAFETY: the provider's entry point on its QP, with a NULL-terminated chain whose
        // `sg_list`s point into `sges`; both vectors outlive the call and are not touched
        // during it. The provider copies what it needs before returning (man:ibv_post_send.3).
        let ret = unsafe { f(q.as_ptr(), base, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let size = std::mem::size_of::<abi::ibv_send_wr>();
        let i = index_of(base as usize, bad as usize, size, chain.len());
        Err(post_error(
            verbs_error("ibv_post_send", errno_of_ret(ret)),
            i,
        ))
    }

    /// `ibv_post_recv` of `wrs` as one chain; `bad_wr` as in [`Verbs::post_send`].
    pub(crate) fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr]) -> Result<(), PostError> {
        let q = self.qp(qp).map_err(|e| post_error(e, 0))?.qp;
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges = flat_sges(wrs.iter().map(|w| w.sg_list.as_slice()));
        let mut chain = recv_chain(wrs, &mut sges)?;
        let base = chain.as_mut_ptr();
        // SAFETY: a live QP of a live context.
        let f = unsafe { (*(*q.as_ptr()).context).ops.post_recv };
        let f = f.ok_or_else(|| post_error(verbs_error("ibv_post_recv", libc::EOPNOTSUPP), 0))?;
        let mut bad: *mut abi::ibv_recv_wr = null_mut();
        // SAFETY: as in `post_send`.
        let ret = unsafe { f(q.as_ptr(), base, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let size = std::mem::size_of::<abi::ibv_recv_wr>();
        let i = index_of(base as usize, bad as usize, size, chain.len());
        Err(post_error(
            verbs_error("ibv_post_recv", errno_of_ret(ret)),
            i,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::index_of;

    #[test]
    fn bad_wr_index() {
        assert_eq!(index_of(1000, 1000 + 3 * 48, 48, 4), 3);
        assert_eq!(index_of(1000, 0, 48, 4), 0);
        assert_eq!(index_of(1000, 1000 + 4 * 48, 48, 4), 0);
        assert_eq!(index_of(1000, 1001, 48, 4), 0);
    }
}
