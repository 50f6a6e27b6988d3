//! Completion channels and CQs: create, destroy, arm, poll, get events.

use super::process::nonblocking;
use super::slots::made;
use super::{ops_of, ops_of_object, ret, Calls, Made, Ret, MAX_POLL};
use crate::abi::*;
use crate::ffi::{cq, set_errno};
use libc::{c_int, c_void};
use std::ptr::null_mut;

impl Calls {
    // ---- completion channels, CQs -------------------------------------------------------------

    /// `ibv_create_comp_channel`; its descriptor is made non-blocking.
    pub fn create_comp_channel(&mut self, ctx: usize) -> Option<Made> {
        let c = self.ctxs.get(ctx)?;
        set_errno(0);
        // SAFETY: a live context.
        let ch = unsafe { cq::ibv_create_comp_channel(c.p) };
        if !ch.is_null() {
            // SAFETY: just made.
            nonblocking(unsafe { (*ch).fd });
        }
        Some(made(&mut self.comps, ch))
    }

    /// `ibv_destroy_comp_channel` (a live channel or NULL); the slot is freed on 0.
    pub fn destroy_comp_channel(&mut self, ch: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.comps, ch)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live channel, freed only on 0 (EBUSY while CQs use it).
        let r = ret(unsafe { cq::ibv_destroy_comp_channel(p) });
        if let (0, Some(s)) = (r.rc, ch) {
            self.comps.remove(s);
        }
        Some(r)
    }

    /// `ibv_create_cq(ctx, cqe, NULL, channel, 0)`.
    pub fn create_cq(&mut self, ctx: usize, cqe: c_int, channel: Option<usize>) -> Option<Made> {
        let c = self.ctxs.get(ctx)?;
        let ch = Self::opt(&self.comps, channel)?;
        set_errno(0);
        // SAFETY: a live context; `ch` NULL or a live channel.
        let p = unsafe { cq::ibv_create_cq(c.p, cqe, null_mut(), ch, 0) };
        Some(made(&mut self.cqs, p))
    }

    /// `ibv_destroy_cq` (a live CQ or NULL); the slot is freed on 0.
    pub fn destroy_cq(&mut self, cq: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.cqs, cq)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live CQ, freed only on 0 (EBUSY while a QP uses it).
        let r = ret(unsafe { cq::ibv_destroy_cq(p) });
        if let (0, Some(s)) = (r.rc, cq) {
            self.cqs.remove(s);
        }
        Some(r)
    }

    /// `ibv_req_notify_cq` through `cq->context->ops` (a live CQ or NULL).
    pub fn req_notify_cq(&mut self, cq: Option<usize>, solicited_only: c_int) -> Option<Ret> {
        let p = Self::opt(&self.cqs, cq)?;
        // SAFETY: NULL or a live CQ, whose context is live (contexts in use are not closed).
        let ops = unsafe { ops_of_object!(p) };
        let f = ops.req_notify_cq?;
        set_errno(0);
        // SAFETY: the library's own slot; `p` NULL (checked) or live.
        Some(ret(unsafe { f(p, solicited_only) }))
    }

    /// `ibv_poll_cq` through `cq->context->ops` with room for `num_entries` completions (NULL
    /// `wc` when `null_wc`); the return value and the completions written. `None` when the
    /// array would be longer than [`MAX_POLL`].
    pub fn poll_cq(
        &mut self,
        cq: Option<usize>,
        num_entries: c_int,
        null_wc: bool,
    ) -> Option<(c_int, Vec<ibv_wc>)> {
        let p = Self::opt(&self.cqs, cq)?;
        let room = if null_wc {
            0
        } else {
            usize::try_from(num_entries).unwrap_or(0)
        };
        if room > MAX_POLL {
            return None;
        }
        let blank = ibv_wc {
            wr_id: 0,
            status: 0,
            opcode: 0,
            vendor_err: 0,
            byte_len: 0,
            ex: ibv_wc_ex { imm_data: 0 },
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        };
        let mut wcs = vec![blank; room];
        let wp = if null_wc {
            null_mut()
        } else {
            wcs.as_mut_ptr()
        };
        // SAFETY: as `req_notify_cq`.
        let ops = unsafe { ops_of_object!(p) };
        let f = ops.poll_cq?;
        // SAFETY: `p` NULL (checked) or live; `wp` NULL (checked when `num_entries > 0`) or
        // `num_entries` writable entries.
        let n = unsafe { f(p, num_entries, wp) };
        let got = if null_wc {
            0
        } else {
            usize::try_from(n).unwrap_or(0).min(room)
        };
        wcs.truncate(got);
        Some((n, wcs))
    }

    /// `ibv_get_cq_event` on a live channel (or NULL), non-blocking, then
    /// `ibv_ack_cq_events(cq, 1)` for a CQ it returns; the CQ's slot (`None` for a CQ not in
    /// this set, e.g. one `rdma_create_qp` made).
    pub fn get_cq_event(
        &mut self,
        ch: Option<usize>,
        null_cq: bool,
    ) -> Option<(Ret, Option<usize>)> {
        let p = Self::opt(&self.comps, ch)?;
        let mut cqp: *mut ibv_cq = null_mut();
        let mut ctxp: *mut c_void = null_mut();
        let out: *mut *mut ibv_cq = if null_cq { null_mut() } else { &mut cqp };
        set_errno(0);
        // SAFETY: NULL (checked) or a live, non-blocking channel; writable out-parameters.
        let r = ret(unsafe { cq::ibv_get_cq_event(p, out, &mut ctxp) });
        if r.rc == 0 && !cqp.is_null() {
            // SAFETY: a live CQ the call returned.
            unsafe { cq::ibv_ack_cq_events(cqp, 1) };
        }
        Some((r, self.cqs.find(cqp)))
    }
}
