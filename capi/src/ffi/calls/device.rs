//! Contexts (open, close, queries, async events), PDs and MRs.

use super::process::nonblocking;
use super::slots::{made, Ctx};
use super::{errno, ret, Calls, Made, MrAddr, MrInfo, Ret, ARENA_LEN};
use crate::abi::*;
use crate::ffi::verbs::cm_context;
use crate::ffi::{async_event, set_errno, verbs};
use libc::{c_int, c_void};
use std::ptr::null_mut;

impl Calls {
    // ---- contexts ---------------------------------------------------------------------------

    /// `ibv_get_device_list`, `ibv_open_device` of its device (or of NULL), then
    /// `ibv_free_device_list`. The context's `async_fd` is made non-blocking.
    pub fn open_device(&mut self, null_device: bool) -> Made {
        let mut n: c_int = 0;
        // SAFETY: `n` is a writable int.
        let list = unsafe { verbs::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Made {
                slot: None,
                errno: errno(),
            };
        }
        // SAFETY: a non-NULL list holds its device and a terminating NULL.
        let listed = unsafe { *list };
        let dev = if null_device { null_mut() } else { listed };
        set_errno(0);
        // SAFETY: `dev` is the listed device or NULL (checked by the call).
        let ctx = unsafe { verbs::ibv_open_device(dev) };
        let e = errno();
        // SAFETY: `list` came from `ibv_get_device_list`, freed once.
        unsafe { verbs::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Made {
                slot: None,
                errno: e,
            };
        }
        // SAFETY: `ctx` was just opened.
        nonblocking(unsafe { (*ctx).async_fd });
        Made {
            slot: Some(self.ctxs.insert(Ctx {
                p: ctx,
                owned: true,
            })),
            errno: e,
        }
    }

    /// A slot for the rdma_cm context (`id->verbs` of a bound id; PDs made on it are what
    /// `rdma_create_qp` accepts); the same slot each time.
    pub fn cm_context(&mut self) -> usize {
        let c = Ctx {
            p: cm_context(),
            owned: false,
        };
        self.ctxs.find(c).unwrap_or_else(|| self.ctxs.insert(c))
    }

    fn ctx_in_use(&self, ctx: *mut ibv_context) -> bool {
        let mut used = Vec::new();
        for p in self.pds.values() {
            // SAFETY: a live PD (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.mrs.values() {
            // SAFETY: a live MR (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.comps.values() {
            // SAFETY: a live channel (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.cqs.values() {
            // SAFETY: a live CQ (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.qps.values() {
            // SAFETY: a live QP (plain fields).
            used.push(unsafe { (*p).context });
        }
        for p in self.ahs.values() {
            // SAFETY: a live AH (plain fields).
            used.push(unsafe { (*p).context });
        }
        used.contains(&ctx)
    }

    /// `ibv_close_device` (NULL, or a context none of this set's objects uses: libibverbs
    /// leaves what a closed context's objects point to undefined). The slot is freed on 0.
    pub fn close_device(&mut self, ctx: Option<usize>) -> Option<Ret> {
        let c = match ctx {
            None => None,
            Some(s) => Some(self.ctxs.get(s)?),
        };
        let p = c.map_or(null_mut(), |c| c.p);
        if c.is_some() && self.ctx_in_use(p) {
            return None;
        }
        set_errno(0);
        // SAFETY: NULL, or a live context no live object uses; the rdma_cm context is never
        // freed by this call.
        let r = ret(unsafe { verbs::ibv_close_device(p) });
        if let (0, Some(s)) = (r.rc, ctx) {
            self.ctxs.remove(s);
        }
        Some(r)
    }

    /// `ibv_query_device` into a zeroed struct, or NULL.
    pub fn query_device(
        &mut self,
        ctx: usize,
        null_attr: bool,
    ) -> Option<(Ret, Option<ibv_device_attr>)> {
        let c = self.ctxs.get(ctx)?;
        // SAFETY: `ibv_device_attr` is integers and a char array: all-zero is a valid value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        let ap: *mut ibv_device_attr = if null_attr { null_mut() } else { &mut a };
        set_errno(0);
        // SAFETY: a live context; `ap` is NULL (checked) or a writable struct.
        let r = ret(unsafe { verbs::ibv_query_device(c.p, ap) });
        Some((r, (!null_attr).then_some(a)))
    }

    /// `ibv_query_port` into a zeroed struct, or NULL.
    pub fn query_port(
        &mut self,
        ctx: usize,
        port: u8,
        null_attr: bool,
    ) -> Option<(Ret, Option<ibv_port_attr>)> {
        let c = self.ctxs.get(ctx)?;
        // SAFETY: `ibv_port_attr` is integers: all-zero is a valid value.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        let ap: *mut ibv_port_attr = if null_attr { null_mut() } else { &mut a };
        set_errno(0);
        // SAFETY: a live context; `ap` NULL (checked) or a writable full `ibv_port_attr`.
        let r = ret(unsafe { verbs::ibv_query_port(c.p, port, ap.cast()) });
        Some((r, (!null_attr).then_some(a)))
    }

    /// `ibv_query_gid` (the GID's 16 bytes), or with a NULL `gid`.
    pub fn query_gid(
        &mut self,
        ctx: usize,
        port: u8,
        index: c_int,
        null_gid: bool,
    ) -> Option<(Ret, Option<[u8; 16]>)> {
        let c = self.ctxs.get(ctx)?;
        let mut g = ibv_gid { raw: [0; 16] };
        let gp: *mut ibv_gid = if null_gid { null_mut() } else { &mut g };
        set_errno(0);
        // SAFETY: a live context; `gp` NULL (checked) or a writable GID.
        let r = ret(unsafe { verbs::ibv_query_gid(c.p, port, index, gp) });
        // SAFETY: both members of the union are plain bytes.
        let raw = unsafe { g.raw };
        Some((r, (!null_gid).then_some(raw)))
    }

    /// `ibv_query_pkey`, or with a NULL `pkey`.
    pub fn query_pkey(
        &mut self,
        ctx: usize,
        port: u8,
        index: c_int,
        null_pkey: bool,
    ) -> Option<(Ret, Option<u16>)> {
        let c = self.ctxs.get(ctx)?;
        let mut k: u16 = 0;
        let kp: *mut u16 = if null_pkey { null_mut() } else { &mut k };
        set_errno(0);
        // SAFETY: a live context; `kp` NULL (checked) or a writable `__be16`.
        let r = ret(unsafe { verbs::ibv_query_pkey(c.p, port, index, kp) });
        Some((r, (!null_pkey).then_some(k)))
    }

    /// `ibv_get_async_event` on a context (or NULL), non-blocking: -1/`EAGAIN` when none is
    /// queued; the event type when one was read (`ibv_ack_async_event` follows).
    pub fn get_async_event(
        &mut self,
        ctx: Option<usize>,
        null_event: bool,
    ) -> Option<(Ret, Option<ibv_event_type>)> {
        let c = match ctx {
            None => null_mut(),
            Some(s) => self.ctxs.get(s)?.p,
        };
        if !c.is_null() {
            // SAFETY: a live context of this library (plain field).
            nonblocking(unsafe { (*c).async_fd });
        }
        let mut ev = ibv_async_event {
            element: ibv_async_event_element { port_num: 0 },
            event_type: 0,
        };
        let ep: *mut ibv_async_event = if null_event { null_mut() } else { &mut ev };
        set_errno(0);
        // SAFETY: NULL or a live context; `ep` NULL (checked) or writable. The async
        // descriptors are non-blocking (above, and `open_device`), so this returns.
        let r = ret(unsafe { async_event::ibv_get_async_event(c, ep) });
        if r.rc == 0 && !null_event {
            // SAFETY: the event just written.
            unsafe { async_event::ibv_ack_async_event(&mut ev) };
            return Some((r, Some(ev.event_type)));
        }
        Some((r, None))
    }

    // ---- PDs, MRs ---------------------------------------------------------------------------

    /// `ibv_alloc_pd` on a live context.
    pub fn alloc_pd(&mut self, ctx: usize) -> Option<Made> {
        let c = self.ctxs.get(ctx)?;
        set_errno(0);
        // SAFETY: a live context.
        let p = unsafe { verbs::ibv_alloc_pd(c.p) };
        Some(made(&mut self.pds, p))
    }

    /// `ibv_dealloc_pd` (a live PD or NULL); the slot is freed on 0.
    pub fn dealloc_pd(&mut self, pd: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.pds, pd)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live PD, freed by the call only on 0.
        let r = ret(unsafe { verbs::ibv_dealloc_pd(p) });
        if let (0, Some(s)) = (r.rc, pd) {
            self.pds.remove(s);
        }
        Some(r)
    }

    /// `ibv_reg_mr` (`iova` `None`) or `ibv_reg_mr_iova2` of `length` bytes at `addr`. An
    /// arena range must lie inside the arena; a NULL address may have any length (the call
    /// refuses a non-zero one before using it).
    pub fn reg_mr(
        &mut self,
        pd: Option<usize>,
        addr: MrAddr,
        length: usize,
        iova: Option<u64>,
        access: c_int,
    ) -> Option<Made> {
        let p = Self::opt(&self.pds, pd)?;
        let base = self.arena.as_ref()?.p;
        let a: *mut c_void = match addr {
            MrAddr::Null => null_mut(),
            MrAddr::Arena(off) => {
                if off.checked_add(length)? > ARENA_LEN {
                    return None;
                }
                base.wrapping_add(off).cast()
            }
        };
        set_errno(0);
        // SAFETY: NULL (checked) or a live PD; `a`/`length` is NULL (a non-zero length is
        // refused) or a range inside the arena, which stays allocated while any region is
        // registered (`teardown`).
        let m = unsafe {
            match iova {
                None => verbs::ibv_reg_mr(p, a, length, access),
                Some(v) => verbs::ibv_reg_mr_iova2(p, a, length, v, access as libc::c_uint),
            }
        };
        Some(made(&mut self.mrs, m))
    }

    /// `ibv_dereg_mr` (a live MR or NULL); the slot is freed on 0.
    pub fn dereg_mr(&mut self, mr: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.mrs, mr)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a live MR, freed by the call only on 0.
        let r = ret(unsafe { verbs::ibv_dereg_mr(p) });
        if let (0, Some(s)) = (r.rc, mr) {
            self.mrs.remove(s);
        }
        Some(r)
    }

    /// A live MR's fields.
    pub fn mr_info(&self, mr: usize) -> Option<MrInfo> {
        let p = self.mrs.get(mr)?;
        // SAFETY: a live MR (plain fields).
        let m = unsafe { *p };
        Some(MrInfo {
            addr: m.addr as u64,
            length: m.length,
            lkey: m.lkey,
            rkey: m.rkey,
        })
    }
}
