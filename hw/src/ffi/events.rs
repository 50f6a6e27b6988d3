//! The two event sources of a context: the completion channel (`ibv_get_cq_event`) and the
//! async fd (`ibv_get_async_event`). Both descriptors are non-blocking, so each call returns at
//! once; every event is acknowledged as soon as it is read, so `ibv_destroy_cq` and
//! `ibv_destroy_qp` never wait for an acknowledgement.

use super::Verbs;
use std::os::fd::RawFd;
use std::ptr::{null_mut, NonNull};
use verbs_abi as abi;
use verbs_core::{AsyncElement, AsyncEvent, AsyncEventType, CqHandle, SrqHandle};

impl Verbs {
    /// The descriptors a driver polls for readability: the completion channel's, then the
    /// async fd (if the library has one).
    pub(crate) fn event_fds(&self) -> Vec<RawFd> {
        let async_fd = self.ctx.async_fd();
        let mut fds = vec![self.channel_fd()];
        if async_fd >= 0 {
            fds.push(async_fd);
        }
        fds
    }

    /// The next CQ event, acknowledged: `None` when none is pending (`EAGAIN`) or the call
    /// fails; `Some(None)` for an event of a CQ this device does not know (acknowledged and
    /// dropped).
    pub(crate) fn next_cq_event(&mut self) -> Option<Option<CqHandle>> {
        let mut cq: *mut abi::ibv_cq = null_mut();
        let mut cq_context: *mut libc::c_void = null_mut();
        // SAFETY: the context's live channel, non-blocking; two writable out-pointers.
        let ret = unsafe {
            (self.ctx.lib.ibv_get_cq_event)(self.channel.as_ptr(), &mut cq, &mut cq_context)
        };
        if ret != 0 {
            return None;
        }
        let cq = NonNull::new(cq)?;
        // SAFETY: the CQ the event is for, live until its events are acknowledged (here, once
        // per event read, as man:ibv_get_cq_event.3 requires).
        unsafe { (self.ctx.lib.ibv_ack_cq_events)(cq.as_ptr(), 1) };
        let h = u32::try_from(cq_context.addr()).ok();
        Some(
            h.filter(|&h| self.cqs.get(h).is_some_and(|e| e.cq == cq))
                .map(CqHandle),
        )
    }

    /// The next async event, acknowledged and converted: `None` when none is pending or the
    /// call fails (`EOPNOTSUPP` where the library has no async events); `Some(None)` for an
    /// event type verbs-core does not name (acknowledged and dropped).
    ///
    /// The element is read by event type (man:ibv_get_async_event.3): QP events give the QP's
    /// number, `CQ_ERR` the CQ's handle, SRQ events the SRQ's handle, port events the port;
    /// device events and WQ events (this device creates no WQ) are [`AsyncElement::Device`].
    pub(crate) fn next_async_event(&mut self) -> Option<Option<AsyncEvent>> {
        // `event_type` is the plain `enum` integer it is in C (verbs-abi): a value verbs-core does
        // not name (a newer kernel's event) is read safely and dropped below.
        let mut ev = abi::ibv_async_event {
            element: abi::ibv_async_event_element { cq: null_mut() },
            event_type: 0,
        };
        // SAFETY: a live context with a non-blocking async fd; `ev` is a writable
        // `struct ibv_async_event`.
        let ret = unsafe { (self.ctx.lib.ibv_get_async_event)(self.ctx.as_ptr(), &mut ev) };
        if ret != 0 {
            return None;
        }
        let ty = u8::try_from(ev.event_type)
            .ok()
            .and_then(AsyncEventType::from_raw);
        let event = ty.map(|t| AsyncEvent {
            event_type: t,
            element: self.element(t, &ev),
        });
        // SAFETY: the event just returned, acknowledged once; libibverbs reads only its type
        // and element.
        unsafe { (self.ctx.lib.ibv_ack_async_event)(&mut ev) };
        Some(event)
    }

    /// What an event of type `t` is about (read before the event is acknowledged, while the
    /// object it names is guaranteed alive).
    fn element(&self, t: AsyncEventType, ev: &abi::ibv_async_event) -> AsyncElement {
        use AsyncEventType as T;
        match t {
            T::QpFatal
            | T::QpReqErr
            | T::QpAccessErr
            | T::CommEst
            | T::SqDrained
            | T::PathMig
            | T::PathMigErr
            | T::QpLastWqeReached => {
                // SAFETY: for QP events libibverbs sets `element.qp`.
                let qp = unsafe { ev.element.qp };
                match NonNull::new(qp) {
                    // SAFETY: the QP of an unacknowledged event is alive.
                    Some(qp) => AsyncElement::Qp(unsafe { (*qp.as_ptr()).qp_num }),
                    None => AsyncElement::Device,
                }
            }
            T::CqErr => {
                // SAFETY: for CQ events libibverbs sets `element.cq`.
                let cq = unsafe { ev.element.cq };
                self.cqs
                    .iter()
                    .find(|(_, e)| e.cq.as_ptr() == cq)
                    .map_or(AsyncElement::Device, |(h, _)| AsyncElement::Cq(CqHandle(h)))
            }
            T::PortActive
            | T::PortErr
            | T::LidChange
            | T::PkeyChange
            | T::SmChange
            | T::ClientReregister
            | T::GidChange => {
                // SAFETY: for port events libibverbs sets `element.port_num`.
                let port = unsafe { ev.element.port_num };
                u8::try_from(port).map_or(AsyncElement::Device, AsyncElement::Port)
            }
            T::SrqErr | T::SrqLimitReached => {
                // SAFETY: for SRQ events libibverbs sets `element.srq`.
                let srq = unsafe { ev.element.srq };
                self.srqs
                    .iter()
                    .find(|(_, s)| s.as_ptr() == srq)
                    .map_or(AsyncElement::Device, |(h, _)| {
                        AsyncElement::Srq(SrqHandle(h))
                    })
            }
            T::DeviceFatal | T::DeviceSpeedChange | T::WqFatal => AsyncElement::Device,
        }
    }
}
