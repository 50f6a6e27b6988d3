//! [`Verbs`]: a context with its completion channel and every object created on it, by handle.
//! PDs, MRs (with their buffers), CQs and QPs; the data path is in `post.rs`, the event
//! channels in `events.rs`, SRQs in `srq.rs`.

use super::context::{set_nonblocking, Context};
use super::{check, gid_of, null_error, wc_imm};
use crate::error::verbs_error;
use crate::table::Table;
use std::alloc::Layout;
use std::ptr::NonNull;
use verbs_abi as abi;
use verbs_abi::convert::{cap_from_c, cap_to_c, qp_attr_from_query, wc_from_c, wc_zeroed};
use verbs_core::{
    AccessFlags, CqHandle, Error, Mr, MrHandle, PdHandle, Qp, QpAttr, QpHandle, QpInitAttr, QpType,
    WorkCompletion,
};

/// Alignment of memory-region buffers: a page, as registration pins whole pages.
const MR_ALIGN: usize = 4096;

/// How many completions one `ibv_poll_cq` call fetches.
const POLL_BATCH: usize = 64;

/// All of `ibv_qp_attr_mask`'s attribute bits a query asks for (`IBV_QP_STATE` …
/// `IBV_QP_DEST_QPN`).
const QUERY_MASK: libc::c_int = (1 << 21) - 1;

/// A registered memory region and the buffer the device allocated for it.
///
/// Invariant: `buf` is an allocation of `layout` (size = the MR's length, > 0), registered as
/// `mr`.
#[derive(Debug)]
pub(super) struct MrEntry {
    mr: NonNull<abi::ibv_mr>,
    buf: NonNull<u8>,
    layout: Layout,
}

/// A CQ and whether it reports to the device's completion channel.
#[derive(Debug)]
pub(super) struct CqEntry {
    pub(super) cq: NonNull<abi::ibv_cq>,
    channel: bool,
}

/// A QP with its creation attributes (the handles it was created with, the granted `cap`).
#[derive(Debug)]
pub(super) struct QpEntry {
    pub(super) qp: NonNull<abi::ibv_qp>,
    init: QpInitAttr,
}

/// A device context, its completion channel, and every object created on it.
///
/// Invariants: every pointer in the tables is a live object of `ctx`, created through it and
/// not yet destroyed; `channel` is `ctx`'s live completion channel, its fd and `ctx`'s async fd
/// are non-blocking. Dropping destroys QPs, SRQs, CQs, MRs (freeing their buffers), PDs, the channel
/// and closes the context, in that order.
#[derive(Debug)]
pub(crate) struct Verbs {
    pub(super) channel: NonNull<abi::ibv_comp_channel>,
    pub(super) pds: Table<NonNull<abi::ibv_pd>>,
    pub(super) mrs: Table<MrEntry>,
    pub(super) cqs: Table<CqEntry>,
    pub(super) qps: Table<QpEntry>,
    /// Shared receive queues (`srq.rs`).
    pub(super) srqs: Table<NonNull<abi::ibv_srq>>,
    /// Last field: closed after everything above is destroyed in `Drop`.
    pub(super) ctx: Context,
}

// SAFETY: libibverbs objects are heap memory not tied to the thread that created them, and its
// verbs may be called from any thread (rdma-core's providers lock their queues; the man pages
// state no thread affinity). `Verbs` owns its pointers exclusively and is not `Sync`: it is
// moved between threads, never shared.
unsafe impl Send for Verbs {}

fn unknown(what: &str, h: u32) -> Error {
    Error::inval(format!("unknown {what} handle {h}"))
}

impl Verbs {
    /// Takes over `ctx`: creates its completion channel and makes the channel's fd and the
    /// async fd non-blocking.
    pub(super) fn new(ctx: Context) -> Result<Verbs, Error> {
        // SAFETY: a live context.
        let channel = unsafe { (ctx.lib.ibv_create_comp_channel)(ctx.as_ptr()) };
        let channel = NonNull::new(channel).ok_or_else(|| null_error("ibv_create_comp_channel"))?;
        let verbs = Verbs {
            channel,
            pds: Table::default(),
            mrs: Table::default(),
            cqs: Table::default(),
            qps: Table::default(),
            srqs: Table::default(),
            ctx,
        };
        set_nonblocking(verbs.channel_fd())?;
        if verbs.ctx.async_fd() >= 0 {
            set_nonblocking(verbs.ctx.async_fd())?;
        }
        Ok(verbs)
    }

    /// The context (queries).
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    /// The completion channel's descriptor.
    pub(crate) fn channel_fd(&self) -> std::os::fd::RawFd {
        // SAFETY: a live channel (invariant); `fd` is set at creation and never changed.
        unsafe { (*self.channel.as_ptr()).fd }
    }

    pub(super) fn pd(&self, pd: PdHandle) -> Result<NonNull<abi::ibv_pd>, Error> {
        self.pds
            .get(pd.0)
            .copied()
            .ok_or_else(|| unknown("PD", pd.0))
    }

    fn cq(&self, cq: CqHandle) -> Result<&CqEntry, Error> {
        self.cqs.get(cq.0).ok_or_else(|| unknown("CQ", cq.0))
    }

    pub(super) fn qp(&self, qp: QpHandle) -> Result<&QpEntry, Error> {
        self.qps.get(qp.0).ok_or_else(|| unknown("QP", qp.0))
    }

    fn mr(&self, mr: MrHandle) -> Result<&MrEntry, Error> {
        self.mrs.get(mr.0).ok_or_else(|| unknown("MR", mr.0))
    }

    /// `ibv_alloc_pd`.
    pub(crate) fn alloc_pd(&mut self) -> Result<PdHandle, Error> {
        // SAFETY: a live context.
        let pd = unsafe { (self.ctx.lib.ibv_alloc_pd)(self.ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| null_error("ibv_alloc_pd"))?;
        Ok(PdHandle(self.pds.insert(pd)))
    }

    /// `ibv_dealloc_pd` (`EBUSY` from the kernel while MRs or QPs use it).
    pub(crate) fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), Error> {
        let p = self.pd(pd)?;
        // SAFETY: a live PD of this context; on success it is removed from the table.
        check("ibv_dealloc_pd", unsafe {
            (self.ctx.lib.ibv_dealloc_pd)(p.as_ptr())
        })?;
        self.pds.remove(pd.0);
        Ok(())
    }

    /// Allocates a zero-filled, page-aligned buffer of `length` bytes and registers it with
    /// `access` (`ibv_reg_mr`). `EINVAL` for a zero or unallocatable length, `ENOMEM` when the
    /// allocation fails, else libibverbs' errno.
    pub(crate) fn reg_mr(
        &mut self,
        pd: PdHandle,
        length: usize,
        access: AccessFlags,
    ) -> Result<Mr, Error> {
        let p = self.pd(pd)?;
        if length == 0 {
            return Err(Error::inval("zero-length memory region"));
        }
        let layout = Layout::from_size_align(length, MR_ALIGN)
            .map_err(|_| Error::inval(format!("memory region of {length} bytes")))?;
        let access = libc::c_int::try_from(access.bits())
            .map_err(|_| Error::inval("access flags out of range"))?;
        // SAFETY: `layout` has a non-zero size.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(buf) = NonNull::new(buf) else {
            return Err(verbs_error("memory region allocation", libc::ENOMEM));
        };
        // SAFETY: a live PD; `buf` is `length` bytes the device owns until deregistration.
        let mr =
            unsafe { (self.ctx.lib.ibv_reg_mr)(p.as_ptr(), buf.as_ptr().cast(), length, access) };
        let Some(mr) = NonNull::new(mr) else {
            let e = null_error("ibv_reg_mr");
            // SAFETY: allocated above with `layout`, not registered, freed once.
            unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
            return Err(e);
        };
        // SAFETY: a live MR just returned by `ibv_reg_mr`.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        let h = self.mrs.insert(MrEntry { mr, buf, layout });
        Ok(Mr {
            handle: MrHandle(h),
            addr: buf.as_ptr() as u64,
            length: length as u64,
            lkey,
            rkey,
        })
    }

    /// `ibv_dereg_mr`, then frees the buffer.
    pub(crate) fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), Error> {
        let m = self.mr(mr)?;
        // SAFETY: a live MR; on success it is removed from the table and its buffer freed.
        check("ibv_dereg_mr", unsafe {
            (self.ctx.lib.ibv_dereg_mr)(m.mr.as_ptr())
        })?;
        if let Some(m) = self.mrs.remove(mr.0) {
            // SAFETY: the buffer of a deregistered MR (the device no longer accesses it),
            // allocated with `m.layout`, freed once.
            unsafe { std::alloc::dealloc(m.buf.as_ptr(), m.layout) };
        }
        Ok(())
    }

    /// The byte range `[offset, offset + len)` of an MR's buffer, checked: `EFAULT` outside.
    fn range(&self, mr: MrHandle, offset: u64, len: usize) -> Result<NonNull<u8>, Error> {
        let m = self.mr(mr)?;
        let size = m.layout.size();
        let start = usize::try_from(offset).ok().filter(|&o| o <= size);
        match start {
            Some(start) if len <= size - start => {
                // SAFETY: `start <= size`: in bounds of (or one past) the allocation.
                Ok(unsafe { m.buf.add(start) })
            }
            _ => Err(Error::new(
                verbs_core::Errno::EFAULT,
                format!("bytes {offset}+{len} outside the {size}-byte memory region"),
            )),
        }
    }

    /// Copies `data` into the MR at `offset`.
    pub(crate) fn mr_write(&mut self, mr: MrHandle, offset: u64, data: &[u8]) -> Result<(), Error> {
        let dst = self.range(mr, offset, data.len())?;
        // SAFETY: `[dst, dst + len)` lies in the MR's buffer (checked) and cannot overlap
        // `data`, a Rust slice the device does not own. The NIC may write the same bytes
        // concurrently only if the application let it (an operation targeting them in flight),
        // in which case the bytes are unspecified, as on any RNIC; no reference to the buffer
        // is formed.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.as_ptr(), data.len()) };
        Ok(())
    }

    /// Copies `buf.len()` bytes of the MR at `offset` into `buf`.
    pub(crate) fn mr_read(&self, mr: MrHandle, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let src = self.range(mr, offset, buf.len())?;
        // SAFETY: as in `mr_write`, with source and destination swapped.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// `ibv_create_cq` of at least `cqe` entries, with the CQ's handle as `cq_context`, on the
    /// device's channel when `channel`. `EINVAL` for `cqe` 0 or above `i32::MAX`.
    pub(crate) fn create_cq(&mut self, cqe: u32, channel: bool) -> Result<CqHandle, Error> {
        let n = libc::c_int::try_from(cqe)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::inval(format!("CQ of {cqe} entries")))?;
        let h = self.cqs.vacant();
        let ch = if channel {
            self.channel.as_ptr()
        } else {
            std::ptr::null_mut()
        };
        let cq_context = std::ptr::without_provenance_mut(h as usize);
        // SAFETY: a live context and channel (or none); `cq_context` is an opaque value
        // libibverbs only hands back.
        let cq = unsafe { (self.ctx.lib.ibv_create_cq)(self.ctx.as_ptr(), n, cq_context, ch, 0) };
        let cq = NonNull::new(cq).ok_or_else(|| null_error("ibv_create_cq"))?;
        // Nothing was inserted since `vacant`: this is `h`, the CQ's `cq_context`.
        Ok(CqHandle(self.cqs.insert(CqEntry { cq, channel })))
    }

    /// `ibv_destroy_cq` (`EBUSY` from the kernel while a QP uses it).
    pub(crate) fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), Error> {
        let c = self.cq(cq)?.cq;
        // SAFETY: a live CQ; every event it reported was acked at once (`next_cq_event`), so
        // libibverbs does not wait; on success it leaves the table.
        check("ibv_destroy_cq", unsafe {
            (self.ctx.lib.ibv_destroy_cq)(c.as_ptr())
        })?;
        self.cqs.remove(cq.0);
        Ok(())
    }

    /// `ibv_req_notify_cq` (verbs.h's inline: `context->ops.req_notify_cq`). `EINVAL` for a CQ
    /// without channel.
    pub(crate) fn req_notify_cq(
        &mut self,
        cq: CqHandle,
        solicited_only: bool,
    ) -> Result<(), Error> {
        let e = self.cq(cq)?;
        if !e.channel {
            return Err(Error::inval(format!(
                "CQ {} has no completion channel",
                cq.0
            )));
        }
        // SAFETY: a live CQ of a live context: `ops` is the provider's table.
        let f = unsafe { (*(*e.cq.as_ptr()).context).ops.req_notify_cq };
        let f = f.ok_or_else(|| verbs_error("ibv_req_notify_cq", libc::EOPNOTSUPP))?;
        // SAFETY: the provider's own entry point, called on its CQ.
        let ret = unsafe { f(e.cq.as_ptr(), libc::c_int::from(solicited_only)) };
        check("ibv_req_notify_cq", ret)
    }

    /// `ibv_poll_cq` (verbs.h's inline: `context->ops.poll_cq`) in batches until `max`
    /// completions or the CQ is empty, handing each to `each` (converted, `imm_data` the
    /// union's raw value); returns how many. A negative
    /// return is `EIO` (with the value in the message) when it comes first; after some
    /// completions it ends the call, and the next call reports it.
    pub(crate) fn poll_cq(
        &mut self,
        cq: CqHandle,
        max: usize,
        mut each: impl FnMut(WorkCompletion),
    ) -> Result<usize, Error> {
        let c = self.cq(cq)?.cq;
        // SAFETY: a live CQ of a live context.
        let f = unsafe { (*(*c.as_ptr()).context).ops.poll_cq };
        let f = f.ok_or_else(|| verbs_error("ibv_poll_cq", libc::EOPNOTSUPP))?;
        let mut buf = [wc_zeroed(); POLL_BATCH];
        let mut total = 0;
        while total < max {
            let want = (max - total).min(POLL_BATCH);
            // `want` <= 64 always fits.
            let n = libc::c_int::try_from(want).unwrap_or(1);
            // SAFETY: the provider's entry point on its CQ; `buf` has room for `n` entries.
            let got = unsafe { f(c.as_ptr(), n, buf.as_mut_ptr()) };
            if got < 0 {
                if total > 0 {
                    break;
                }
                return Err(Error::new(
                    verbs_core::Errno::EIO,
                    format!("ibv_poll_cq returned {got}"),
                ));
            }
            let got = usize::try_from(got).unwrap_or(0).min(want);
            buf.iter()
                .take(got)
                .for_each(|w| each(wc_from_c(w, wc_imm(w))));
            total += got;
            if got < want {
                break;
            }
        }
        Ok(total)
    }

    /// `ibv_create_qp`: RC and UC (UD needs address handles per WR: `EOPNOTSUPP`). The granted
    /// `cap` (providers round up) is kept for [`Verbs::query_qp`].
    pub(crate) fn create_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<Qp, Error> {
        let p = self.pd(pd)?;
        let send_cq = self.cq(init.send_cq)?.cq;
        let recv_cq = self.cq(init.recv_cq)?.cq;
        let srq = match init.srq {
            Some(h) => self.srq(h)?.as_ptr(),
            None => std::ptr::null_mut(),
        };
        if init.qp_type == QpType::Ud {
            return Err(Error::new(
                verbs_core::Errno::EOPNOTSUPP,
                "UD QPs are not supported by the hardware backend",
            ));
        }
        let mut attr = abi::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            srq,
            cap: cap_to_c(&init.cap),
            qp_type: abi::ibv_qp_type::from(init.qp_type.raw()),
            sq_sig_all: libc::c_int::from(init.sq_sig_all),
        };
        // SAFETY: a live PD and live CQs of this context; `attr` is readable and writable (the
        // provider writes the granted `cap` back).
        let qp = unsafe { (self.ctx.lib.ibv_create_qp)(p.as_ptr(), &mut attr) };
        let qp = NonNull::new(qp).ok_or_else(|| null_error("ibv_create_qp"))?;
        // SAFETY: a live QP just created.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        let init = QpInitAttr {
            cap: cap_from_c(&attr.cap),
            ..*init
        };
        let h = self.qps.insert(QpEntry { qp, init });
        Ok(Qp {
            handle: QpHandle(h),
            qp_num,
        })
    }

    /// `ibv_modify_qp` with `attr` and `mask` (`ibv_qp_attr_mask` bits).
    pub(crate) fn modify_qp(
        &mut self,
        qp: QpHandle,
        attr: &mut abi::ibv_qp_attr,
        mask: libc::c_int,
    ) -> Result<(), Error> {
        let q = self.qp(qp)?.qp;
        // SAFETY: a live QP; `attr` is a readable `ibv_qp_attr` (no pointers in it).
        check("ibv_modify_qp", unsafe {
            (self.ctx.lib.ibv_modify_qp)(q.as_ptr(), attr, mask)
        })
    }

    /// `ibv_query_qp` of every attribute (read leniently: `qp_attr_from_query`); the creation
    /// attributes with the `cap` the query reports (the granted one).
    pub(crate) fn query_qp(&self, qp: QpHandle) -> Result<(QpAttr, QpInitAttr), Error> {
        let e = self.qp(qp)?;
        // SAFETY: integers, arrays and unions of integers: all-zero is valid.
        let mut attr: abi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above, plus raw pointers, for which all-zero is NULL.
        let mut init: abi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live QP and two writable structs of the right types.
        let ret =
            unsafe { (self.ctx.lib.ibv_query_qp)(e.qp.as_ptr(), &mut attr, QUERY_MASK, &mut init) };
        check("ibv_query_qp", ret)?;
        let granted = QpInitAttr {
            cap: cap_from_c(&init.cap),
            ..e.init
        };
        Ok((
            qp_attr_from_query(&attr, gid_of(&attr.ah_attr.grh.dgid)),
            granted,
        ))
    }

    /// `ibv_destroy_qp`.
    pub(crate) fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), Error> {
        let q = self.qp(qp)?.qp;
        // SAFETY: a live QP; its async events were acked at once, so libibverbs does not wait;
        // on success it leaves the table.
        check("ibv_destroy_qp", unsafe {
            (self.ctx.lib.ibv_destroy_qp)(q.as_ptr())
        })?;
        self.qps.remove(qp.0);
        Ok(())
    }
}

impl Drop for Verbs {
    fn drop(&mut self) {
        // Errors are ignored: there is no one to report them to, and each object is gone or
        // belongs to a context about to be closed (the kernel then frees it).
        for q in self.qps.drain() {
            // SAFETY: a live QP of this context, destroyed once.
            let _ = unsafe { (self.ctx.lib.ibv_destroy_qp)(q.qp.as_ptr()) };
        }
        for s in self.srqs.drain() {
            // SAFETY: a live SRQ of this context, destroyed once (after its QPs).
            let _ = unsafe { (self.ctx.lib.ibv_destroy_srq)(s.as_ptr()) };
        }
        for c in self.cqs.drain() {
            // SAFETY: a live CQ of this context, destroyed once (after its QPs).
            let _ = unsafe { (self.ctx.lib.ibv_destroy_cq)(c.cq.as_ptr()) };
        }
        for m in self.mrs.drain() {
            // SAFETY: a live MR of this context, deregistered once.
            if unsafe { (self.ctx.lib.ibv_dereg_mr)(m.mr.as_ptr()) } == 0 {
                // SAFETY: the buffer of a deregistered MR, allocated with `m.layout`. When
                // deregistration fails the buffer is leaked instead: the NIC may still write it.
                unsafe { std::alloc::dealloc(m.buf.as_ptr(), m.layout) };
            }
        }
        for p in self.pds.drain() {
            // SAFETY: a live PD of this context, deallocated once (after its MRs, QPs and
            // SRQs).
            let _ = unsafe { (self.ctx.lib.ibv_dealloc_pd)(p.as_ptr()) };
        }
        // SAFETY: the context's channel, destroyed once, after every CQ that used it.
        let _ = unsafe { (self.ctx.lib.ibv_destroy_comp_channel)(self.channel.as_ptr()) };
        // `self.ctx` closes the device when dropped, after this body.
    }
}
