//! rdma_cm: ids, their QPs, the connection calls, options, ports, and CM events.

use super::process::channel_pool;
use super::{ret, Calls, ConnParam, EventInfo, IdInfo, Made, QpInit, Ret, SockAddr};
use crate::abi::*;
use crate::ffi::{cm, cm_event, cm_qp, set_errno};
use libc::{c_int, c_void};
use std::ptr::{null, null_mut};

impl Calls {
    // ---- rdma_cm ------------------------------------------------------------------------------

    fn id_ptr(&self, id: Option<usize>) -> Option<*mut rdma_cm_id> {
        Self::opt(&self.ids, id)
    }

    /// `rdma_create_id` on shared channel `channel` (`None`: NULL) with port space `ps`;
    /// `null_out`: a NULL `id` out-parameter.
    pub fn create_id(
        &mut self,
        channel: Option<usize>,
        ps: rdma_port_space,
        null_out: bool,
    ) -> Option<Made> {
        let ch = match channel {
            None => null_mut(),
            Some(i) => *channel_pool().get(i)? as *mut rdma_event_channel,
        };
        let mut id: *mut rdma_cm_id = null_mut();
        let out: *mut *mut rdma_cm_id = if null_out { null_mut() } else { &mut id };
        set_errno(0);
        // SAFETY: `ch` NULL (checked) or a live shared channel; `out` NULL (checked) or
        // writable.
        let r = ret(unsafe { cm::rdma_create_id(ch, out, null_mut(), ps) });
        let slot = (r.rc == 0 && !id.is_null()).then(|| self.ids.insert(id));
        Some(Made {
            slot,
            errno: r.errno,
        })
    }

    /// Acks every held event of `id` (or naming it as listener), so `rdma_destroy_id` does not
    /// wait for good.
    fn ack_events_of(&mut self, id: *mut rdma_cm_id) {
        for s in self.events.live() {
            let Some(e) = self.events.get(s) else {
                continue;
            };
            // SAFETY: a held, unacked event (plain fields).
            let (eid, lid) = unsafe { ((*e).id, (*e).listen_id) };
            if eid == id || lid == id {
                // SAFETY: acked once; the slot is freed.
                unsafe { cm_event::rdma_ack_cm_event(e) };
                self.events.remove(s);
            }
        }
    }

    /// `rdma_destroy_id` (a live id or NULL). librdmacm's contract first: the id's held events
    /// are acked (its `rdma_destroy_id` waits for that) and its QP destroyed
    /// (`rdma_destroy_qp`). The slot is freed on 0.
    pub fn destroy_id(&mut self, id: Option<usize>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        if !p.is_null() {
            self.ack_events_of(p);
            // SAFETY: a live id.
            if !unsafe { (*p).qp }.is_null() {
                // SAFETY: a live id with a QP of `rdma_create_qp`.
                unsafe { cm_qp::rdma_destroy_qp(p) };
            }
        }
        set_errno(0);
        // SAFETY: NULL (checked) or a live id with no unacked event, freed only on 0.
        let r = ret(unsafe { cm::rdma_destroy_id(p) });
        if let (0, Some(s)) = (r.rc, id) {
            self.ids.remove(s);
        }
        Some(r)
    }

    /// `rdma_bind_addr` (an id or NULL; an address or NULL).
    pub fn bind_addr(&mut self, id: Option<usize>, addr: Option<&SockAddr>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut a = addr.map(SockAddr::storage);
        let ap = a
            .as_mut()
            .map_or(null_mut(), |a| (a as *mut libc::sockaddr_storage).cast());
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap` NULL (checked) or a full
        // `sockaddr_storage`, long enough for any family's struct.
        Some(ret(unsafe { cm::rdma_bind_addr(p, ap) }))
    }

    /// `rdma_resolve_addr` (an id or NULL; addresses or NULL).
    pub fn resolve_addr(
        &mut self,
        id: Option<usize>,
        src: Option<&SockAddr>,
        dst: Option<&SockAddr>,
        timeout_ms: c_int,
    ) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut s = src.map(SockAddr::storage);
        let mut d = dst.map(SockAddr::storage);
        let sp = s
            .as_mut()
            .map_or(null_mut(), |a| (a as *mut libc::sockaddr_storage).cast());
        let dp = d
            .as_mut()
            .map_or(null_mut(), |a| (a as *mut libc::sockaddr_storage).cast());
        set_errno(0);
        // SAFETY: as `bind_addr`; the id's channel is a live shared channel.
        Some(ret(unsafe { cm::rdma_resolve_addr(p, sp, dp, timeout_ms) }))
    }

    /// `rdma_resolve_route` (an id or NULL).
    pub fn resolve_route(&mut self, id: Option<usize>, timeout_ms: c_int) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_resolve_route(p, timeout_ms) }))
    }

    /// `rdma_create_qp` (an id or NULL; a PD or NULL; attributes or NULL).
    pub fn rdma_create_qp(
        &mut self,
        id: Option<usize>,
        pd: Option<usize>,
        attr: Option<&QpInit>,
    ) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let pdp = Self::opt(&self.pds, pd)?;
        let mut a = match attr {
            Some(a) => Some(self.init_attr(a)?),
            None => None,
        };
        let ap = a
            .as_mut()
            .map_or(null_mut(), |a| a as *mut ibv_qp_init_attr);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `pdp` NULL (the rdma_cm PD) or live; `ap` NULL
        // (checked) or a readable, writable struct with NULL or live CQs.
        Some(ret(unsafe { cm_qp::rdma_create_qp(p, pdp, ap) }))
    }

    /// `rdma_destroy_qp` (an id or NULL): the id's QP (and the CQs `rdma_create_qp` made for
    /// it) are destroyed. A QP of an id is only ever reached through the id here, so nothing
    /// is left pointing at it.
    pub fn rdma_destroy_qp(&mut self, id: Option<usize>) -> Option<()> {
        let p = self.id_ptr(id)?;
        // SAFETY: `p` NULL (checked) or live; its QP is only reached through the id.
        unsafe { cm_qp::rdma_destroy_qp(p) };
        Some(())
    }

    /// `struct rdma_conn_param` from `c` (the data pointer into `c`); `None` when the data is
    /// shorter than its length.
    fn conn_param(c: &ConnParam) -> Option<rdma_conn_param> {
        let data: *const c_void = match &c.private_data {
            None => null(),
            Some(d) if d.len() >= usize::from(c.private_data_len) => d.as_ptr().cast(),
            Some(_) => return None,
        };
        Some(rdma_conn_param {
            private_data: data,
            private_data_len: c.private_data_len,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: c.flow_control,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            srq: c.srq,
            qp_num: c.qp_num,
        })
    }

    /// `rdma_connect` (an id or NULL; parameters or NULL).
    pub fn connect(&mut self, id: Option<usize>, param: Option<&ConnParam>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut c = match param {
            Some(c) => Some(Self::conn_param(c)?),
            None => None,
        };
        let cp = c.as_mut().map_or(null_mut(), |c| c as *mut rdma_conn_param);
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `cp` NULL or a struct whose private data holds
        // its length (borrowed from `param`).
        Some(ret(unsafe { cm::rdma_connect(p, cp) }))
    }

    /// `rdma_accept` (an id or NULL; parameters or NULL).
    pub fn accept(&mut self, id: Option<usize>, param: Option<&ConnParam>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut c = match param {
            Some(c) => Some(Self::conn_param(c)?),
            None => None,
        };
        let cp = c.as_mut().map_or(null_mut(), |c| c as *mut rdma_conn_param);
        set_errno(0);
        // SAFETY: as `connect`.
        Some(ret(unsafe { cm::rdma_accept(p, cp) }))
    }

    /// `rdma_listen` (an id or NULL).
    pub fn listen(&mut self, id: Option<usize>, backlog: c_int) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_listen(p, backlog) }))
    }

    /// `rdma_reject` (an id or NULL; `data` NULL or at least `len` bytes).
    pub fn reject(&mut self, id: Option<usize>, data: Option<&[u8]>, len: u8) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let dp: *const c_void = match data {
            None => null(),
            Some(d) if d.len() >= usize::from(len) => d.as_ptr().cast(),
            Some(_) => return None,
        };
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `dp` NULL or `len` readable bytes.
        Some(ret(unsafe { cm::rdma_reject(p, dp, len) }))
    }

    /// `rdma_disconnect` (an id or NULL).
    pub fn disconnect(&mut self, id: Option<usize>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; its QP, if any, is live.
        Some(ret(unsafe { cm::rdma_disconnect(p) }))
    }

    /// `rdma_establish` (an id or NULL).
    pub fn establish(&mut self, id: Option<usize>) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_establish(p) }))
    }

    /// `rdma_notify` (an id or NULL).
    pub fn notify(&mut self, id: Option<usize>, event: c_int) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live.
        Some(ret(unsafe { cm::rdma_notify(p, event) }))
    }

    /// `rdma_set_option` (an id or NULL; `optval` NULL or these bytes, `optlen` their length).
    pub fn set_option(
        &mut self,
        id: Option<usize>,
        level: c_int,
        optname: c_int,
        optval: Option<&[u8]>,
    ) -> Option<Ret> {
        let p = self.id_ptr(id)?;
        let mut v = optval.map(<[u8]>::to_vec);
        let (vp, len) = v.as_mut().map_or((null_mut(), 0), |v| {
            (v.as_mut_ptr().cast::<c_void>(), v.len())
        });
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `vp` NULL (checked) or `len` bytes.
        Some(ret(unsafe {
            cm::rdma_set_option(p, level, optname, vp, len)
        }))
    }

    /// `rdma_init_qp_attr` for `qp_state` (`None`: NULL `qp_attr`; `null_mask`: NULL
    /// `qp_attr_mask`); the attributes and mask written on success.
    pub fn init_qp_attr(
        &mut self,
        id: Option<usize>,
        qp_state: Option<ibv_qp_state>,
        null_mask: bool,
    ) -> Option<(Ret, Option<(ibv_qp_attr, c_int)>)> {
        let p = self.id_ptr(id)?;
        // SAFETY: integers and the GID union: all-zero is a valid value.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = qp_state.unwrap_or(0);
        let mut m: c_int = 0;
        let ap: *mut ibv_qp_attr = if qp_state.is_some() {
            &mut a
        } else {
            null_mut()
        };
        let mp: *mut c_int = if null_mask { null_mut() } else { &mut m };
        set_errno(0);
        // SAFETY: `p` NULL (checked) or live; `ap`/`mp` NULL (checked) or writable.
        let r = ret(unsafe { cm::rdma_init_qp_attr(p, ap, mp) });
        let out = (r.rc == 0 && qp_state.is_some() && !null_mask).then_some((a, m));
        Some((r, out))
    }

    /// `rdma_get_src_port` and `rdma_get_dst_port` (an id or NULL), host order.
    pub fn ports(&mut self, id: Option<usize>) -> Option<(u16, u16)> {
        let p = self.id_ptr(id)?;
        // SAFETY: `p` NULL (checked) or live.
        let (s, d) = unsafe { (cm::rdma_get_src_port(p), cm::rdma_get_dst_port(p)) };
        Some((u16::from_be(s), u16::from_be(d)))
    }

    /// `rdma_get_cm_event` on shared channel `channel` (`None`: NULL), non-blocking
    /// (-1/`EAGAIN` when none is queued); the event's slot when one was read. An id it
    /// reports that this set does not hold yet (a CONNECT_REQUEST's) gets a slot.
    pub fn get_cm_event(
        &mut self,
        channel: Option<usize>,
        null_out: bool,
    ) -> Option<(Ret, Option<usize>)> {
        let ch = match channel {
            None => null_mut(),
            Some(i) => *channel_pool().get(i)? as *mut rdma_event_channel,
        };
        let mut ev: *mut rdma_cm_event = null_mut();
        let out: *mut *mut rdma_cm_event = if null_out { null_mut() } else { &mut ev };
        set_errno(0);
        // SAFETY: `ch` NULL (checked) or a live, non-blocking shared channel; `out` NULL
        // (checked) or writable.
        let r = ret(unsafe { cm_event::rdma_get_cm_event(ch, out) });
        if r.rc != 0 || ev.is_null() {
            return Some((r, None));
        }
        // SAFETY: the event just returned (plain fields); its id is live.
        let id = unsafe { (*ev).id };
        if !id.is_null() && self.ids.find(id).is_none() {
            self.ids.insert(id);
        }
        Some((r, Some(self.events.insert(ev))))
    }

    /// `rdma_ack_cm_event` (a held event or NULL); the slot is freed (the event is gone
    /// whatever the call returns).
    pub fn ack_cm_event(&mut self, ev: Option<usize>) -> Option<Ret> {
        let p = Self::opt(&self.events, ev)?;
        set_errno(0);
        // SAFETY: NULL (checked) or a held event, acked once.
        let r = ret(unsafe { cm_event::rdma_ack_cm_event(p) });
        if let Some(s) = ev {
            self.events.remove(s);
        }
        Some(r)
    }

    /// A held event's fields.
    pub fn event_info(&self, ev: usize) -> Option<EventInfo> {
        let p = self.events.get(ev)?;
        // SAFETY: a held event (plain fields).
        let e = unsafe { &*p };
        Some(EventInfo {
            event: e.event,
            status: e.status,
            id: self.ids.find(e.id),
            listen_id: self.ids.find(e.listen_id),
            // SAFETY: `conn` is the member librnic fills (plain fields either way).
            private_data_len: unsafe { e.param.conn.private_data_len },
        })
    }

    /// A live id's fields.
    pub fn id_info(&self, id: usize) -> Option<IdInfo> {
        let p = self.ids.get(id)?;
        // SAFETY: a live id (plain fields).
        let c = unsafe { &*p };
        let ch = c.channel as usize;
        Some(IdInfo {
            has_qp: !c.qp.is_null(),
            bound: !c.verbs.is_null(),
            ps: c.ps,
            channel: channel_pool().iter().position(|&x| x == ch && x != 0),
        })
    }
}
