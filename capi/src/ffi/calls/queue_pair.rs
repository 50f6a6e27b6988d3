//! QPs (create, modify, query, destroy), AHs, and posting send and receive WR lists.

use super::slots::made;
use super::{
    link, ops_of, ops_of_object, ret, BadWr, Calls, Made, QpInfo, QpInit, QpRef, RecvWr, Ret,
    SendWr,
};
use crate::abi::convert;
use crate::abi::*;
use crate::ffi::{qp, set_errno};
use libc::c_int;
use std::ptr::null_mut;

impl Calls {
    // ---- QPs, AHs -----------------------------------------------------------------------------

    /// Builds `ibv_qp_init_attr` from `a`; `None` if a CQ slot is empty.
    pub(super) fn init_attr(&self, a: &QpInit) -> Option<ibv_qp_init_attr> {
        Some(ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: Self::opt(&self.cqs, a.send_cq)?,
            recv_cq: Self::opt(&self.cqs, a.recv_cq)?,
            srq: null_mut(),
            cap: convert::cap_to_c(&a.cap),
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        })
    }

    /// `ibv_create_qp` (a live PD or NULL; attributes or NULL).
    pub fn create_qp(&mut self, pd: Option<usize>, attr: Option<&QpInit>) -> Option<Made> {
        let p = Self::opt(&self.pds, pd)?;
        let mut a = match attr {
            Some(a) => Some(self.init_attr(a)?),
            None => None,
        };
        let ap = a
            .as_mut()
            .map_or(null_mut(), |a| a as *mut ibv_qp_init_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or a struct whose CQs are
        // NULL (checked) or live and whose SRQ is NULL.
        let q = unsafe { qp::ibv_create_qp(p, ap) };
        Some(made(&mut self.qps, q))
    }

    /// `ibv_modify_qp` (a QP or NULL; attributes or NULL).
    pub fn modify_qp(
        &mut self,
        q: Option<QpRef>,
        attr: Option<&ibv_qp_attr>,
        mask: c_int,
    ) -> Option<Ret> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        let mut a = attr.copied();
        let ap = a.as_mut().map_or(null_mut(), |a| a as *mut ibv_qp_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or a live QP; `ap` NULL (checked) or readable.
        Some(ret(unsafe { qp::ibv_modify_qp(p, ap, mask) }))
    }

    /// `ibv_query_qp` (a QP or NULL; NULL `attr` when `null_attr`; `init_attr` when
    /// `with_init`): the attributes and the granted capabilities.
    pub fn query_qp(
        &mut self,
        q: Option<QpRef>,
        null_attr: bool,
        with_init: bool,
    ) -> Option<(Ret, Option<ibv_qp_attr>, Option<ibv_qp_cap>)> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        // SAFETY: integers and the GID union: all-zero is a valid value.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: pointers (NULL) and integers: all-zero is a valid value.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let ap: *mut ibv_qp_attr = if null_attr { null_mut() } else { &mut a };
        let ip: *mut ibv_qp_init_attr = if with_init { &mut init } else { null_mut() };
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or writable; `ip` NULL or
        // writable.
        let r = ret(unsafe { qp::ibv_query_qp(p, ap, 0, ip) });
        let ok = r.rc == 0;
        Some((
            r,
            (ok && !null_attr).then_some(a),
            (ok && with_init).then_some(init.cap),
        ))
    }

    /// `ibv_destroy_qp` (a QP of `ibv_create_qp` or NULL); the slot is freed on 0.
    pub fn destroy_qp(&mut self, q: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.qps, q)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live QP, freed only on 0.
        let r = ret(unsafe { qp::ibv_destroy_qp(p) });
        if let (0, Some(s)) = (r.rc, q) {
            self.qps.remove(s);
        }
        Some(r)
    }

    /// A QP's fields (`None`: no such QP, or the id has none).
    pub fn qp_info(&self, q: QpRef) -> Option<QpInfo> {
        let p = self.qp_ptr(q)?;
        if p.is_null() {
            return None;
        }
        // SAFETY: a live QP (plain fields).
        let (qp_num, qp_type, state) = unsafe { ((*p).qp_num, (*p).qp_type, (*p).state) };
        Some(QpInfo {
            qp_num,
            qp_type,
            state,
        })
    }

    /// `ibv_create_ah` (a live PD or NULL; an address vector or NULL).
    pub fn create_ah(&mut self, pd: Option<usize>, attr: Option<&ibv_ah_attr>) -> Option<Made> {
        let p = Self::opt(&self.pds, pd)?;
        let mut a = attr.copied();
        let ap = a.as_mut().map_or(null_mut(), |a| a as *mut ibv_ah_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or readable.
        let h = unsafe { qp::ibv_create_ah(p, ap) };
        Some(made(&mut self.ahs, h))
    }

    /// `ibv_destroy_ah` (a live AH or NULL); the slot is freed on 0.
    pub fn destroy_ah(&mut self, ah: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.ahs, ah)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live AH, freed once on 0.
        let r = ret(unsafe { qp::ibv_destroy_ah(p) });
        if let (0, Some(s)) = (r.rc, ah) {
            self.ahs.remove(s);
        }
        Some(r)
    }

    /// The SGE list pointer of a WR; `None` when it is shorter than a positive `num_sge`.
    fn sg_ptr(list: &mut Option<Vec<ibv_sge>>, num_sge: c_int) -> Option<*mut ibv_sge> {
        let need = usize::try_from(num_sge).unwrap_or(0);
        match list {
            None => Some(null_mut()),
            Some(v) if v.len() >= need => Some(v.as_mut_ptr()),
            Some(_) => None,
        }
    }

    /// `ibv_post_send` through `qp->context->ops` (a QP or NULL) with the WRs linked in order
    /// (an empty list is NULL), `bad_wr` NULL unless `with_bad_wr`.
    pub fn post_send(
        &mut self,
        q: Option<QpRef>,
        wrs: &[SendWr],
        with_bad_wr: bool,
    ) -> Option<(c_int, BadWr)> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        let mut lists: Vec<Option<Vec<ibv_sge>>> = wrs.iter().map(|w| c_sges(&w.sg_list)).collect();
        let mut c = Vec::with_capacity(wrs.len());
        for (w, l) in wrs.iter().zip(lists.iter_mut()) {
            let sg_list = Self::sg_ptr(l, w.num_sge)?;
            let ah = Self::opt(&self.ahs, w.ah)?;
            let mut u = ibv_send_wr_wr {
                atomic: ibv_send_wr_atomic {
                    remote_addr: w.remote_addr,
                    compare_add: w.compare_add,
                    swap: w.swap,
                    rkey: w.rkey,
                },
            };
            match w.opcode {
                IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                    u.rdma = ibv_send_wr_rdma {
                        remote_addr: w.remote_addr,
                        rkey: w.rkey,
                    };
                }
                IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => {
                    u.ud = ibv_send_wr_ud {
                        ah: ah.cast(),
                        remote_qpn: w.remote_qpn,
                        remote_qkey: w.remote_qkey,
                    };
                }
                _ => {}
            }
            c.push(ibv_send_wr {
                wr_id: w.wr_id,
                next: null_mut(),
                sg_list,
                num_sge: w.num_sge,
                opcode: w.opcode,
                send_flags: w.send_flags,
                ex: ibv_send_wr_ex {
                    imm_data: w.imm_data,
                },
                wr: u,
                qp_type: ibv_send_wr_qp_type {
                    xrc: ibv_send_wr_xrc { remote_srqn: 0 },
                },
                bind_tso: ibv_send_wr_bind_tso {
                    tso: ibv_send_wr_tso {
                        hdr: null_mut(),
                        hdr_sz: 0,
                        mss: 0,
                    },
                },
            });
        }
        let (base, head) = link(&mut c, |w, next| w.next = next);
        let mut bad: *mut ibv_send_wr = null_mut();
        let bp: *mut *mut ibv_send_wr = if with_bad_wr { &mut bad } else { null_mut() };
        // SAFETY: NULL or a live QP, whose context is live.
        let ops = unsafe { ops_of_object!(p) };
        let f = ops.post_send?;
        // SAFETY: `p` NULL (checked) or live; `head` a NULL-terminated list of WRs in `c`
        // (not moved since `base` was taken), each with an SGE list of at least `num_sge`
        // entries or NULL (checked), and a live AH or NULL (checked) in `wr.ud` for the
        // SENDs; `bp` NULL or writable.
        let rc = unsafe { f(p, head, bp) };
        drop(lists);
        Some((rc, bad_index(bad, base, c.len())))
    }

    /// `ibv_post_recv` through `qp->context->ops`, as [`Calls::post_send`].
    pub fn post_recv(
        &mut self,
        q: Option<QpRef>,
        wrs: &[RecvWr],
        with_bad_wr: bool,
    ) -> Option<(c_int, BadWr)> {
        let p = match q {
            None => null_mut(),
            Some(r) => self.qp_ptr(r)?,
        };
        let mut lists: Vec<Option<Vec<ibv_sge>>> = wrs.iter().map(|w| c_sges(&w.sg_list)).collect();
        let mut c = Vec::with_capacity(wrs.len());
        for (w, l) in wrs.iter().zip(lists.iter_mut()) {
            c.push(ibv_recv_wr {
                wr_id: w.wr_id,
                next: null_mut(),
                sg_list: Self::sg_ptr(l, w.num_sge)?,
                num_sge: w.num_sge,
            });
        }
        let (base, head) = link(&mut c, |w, next| w.next = next);
        let mut bad: *mut ibv_recv_wr = null_mut();
        let bp: *mut *mut ibv_recv_wr = if with_bad_wr { &mut bad } else { null_mut() };
        // SAFETY: as `post_send`.
        let ops = unsafe { ops_of_object!(p) };
        let f = ops.post_recv?;
        // SAFETY: as `post_send` (no AHs).
        let rc = unsafe { f(p, head, bp) };
        drop(lists);
        Some((rc, bad_index(bad, base, c.len())))
    }
}

/// An SGE list as `struct ibv_sge`s.
fn c_sges(l: &Option<Vec<verbs_core::Sge>>) -> Option<Vec<ibv_sge>> {
    l.as_ref().map(|v| {
        v.iter()
            .map(|g| ibv_sge {
                addr: g.addr,
                length: g.length,
                lkey: g.lkey,
            })
            .collect()
    })
}

/// Where `bad` points in the `n` WRs at `base`.
fn bad_index<T>(bad: *mut T, base: *mut T, n: usize) -> BadWr {
    if bad.is_null() {
        return BadWr::Untouched;
    }
    (0..n)
        .find(|&i| base.wrapping_add(i) == bad)
        .map_or(BadWr::Other, BadWr::Index)
}
