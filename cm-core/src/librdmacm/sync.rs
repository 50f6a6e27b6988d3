//! Synchronous ids and `rdma_migrate_id`: librdmacm's `rdma_create_id` with a NULL channel
//! (`ucma_alloc_id`: a private channel, `id_priv->sync`), `ucma_complete`, `rdma_get_request`
//! and `rdma_migrate_id` [lib-cma].

use super::*;

/// What `ucma_complete` makes of a synchronous call's event: 0 for status 0; `ECONNREFUSED`
/// for REJECTED; for CONNECT_ERROR `EPERM` (librdmacm stores `ucma_process_conn_resp`'s −1 as
/// the status, and `ERR(-status)` turns it into errno 1); else the errno of a negative status
/// (−110 → `ETIMEDOUT`) or of a positive one.
fn completion(ev: &CmEvent) -> Result<(), Error> {
    if ev.status == 0 {
        return Ok(());
    }
    let errno = match ev.event {
        CmEventType::Rejected => Errno::ECONNREFUSED,
        CmEventType::ConnectError => Errno::EPERM,
        _ => Errno::from_raw(ev.status.saturating_abs()).unwrap_or(Errno::EIO),
    };
    Err(Error::new(
        errno,
        format!("{:?} with status {}", ev.event, ev.status),
    ))
}

impl RdmaCm {
    /// `rdma_create_id(NULL, &id, ctx, ps)`: a synchronous id in IDLE, reporting to a private
    /// channel librdmacm makes for it (`ucma_alloc_id`) and destroys with it (`ucma_free_id`).
    /// Its calls that raise an event complete through [`RdmaCm::complete`]; a synchronous
    /// listener's requests are taken with [`RdmaCm::get_request`], and the ids they make are
    /// synchronous too.
    ///
    /// # Errors
    /// None in practice (the private channel is the one just made); the kernel's refusal
    /// otherwise.
    pub fn create_sync_id(&mut self, ps: RdmaPortSpace) -> Result<CmIdHandle, Error> {
        let ch = self.cma.create_event_channel();
        let id = self.cma.create_id(ch, ps)?;
        self.ids.insert(
            id,
            UserId {
                sync: true,
                ..UserId::default()
            },
        );
        Ok(id)
    }

    /// Whether `id` is synchronous (`id_priv->sync`); `None` for an unknown id.
    pub fn is_sync(&self, id: CmIdHandle) -> Option<bool> {
        self.cma
            .contains(id)
            .then(|| self.ids.get(&id).is_some_and(|u| u.sync))
    }

    /// The channel `id` reports to (a synchronous id's private one included).
    pub fn channel_of(&self, id: CmIdHandle) -> Option<EventChannel> {
        self.cma.channel_of(id)
    }

    /// `id->event`: the event the last synchronous call on `id` returned (for an id made by
    /// [`RdmaCm::get_request`], its CONNECT_REQUEST), not acked yet.
    pub fn sync_event(&self, id: CmIdHandle) -> Option<&CmEvent> {
        self.ids.get(&id).and_then(|u| u.event.as_ref())
    }

    /// `ucma_complete`, the end of every librdmacm call that raises an event on a synchronous
    /// id — `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`, `rdma_accept`,
    /// `rdma_disconnect` (the DISCONNECTED after the DREP, or TIMEWAIT_EXIT when nothing was
    /// sent) — called after the call itself returned `Ok`: acks the previous `id->event`,
    /// takes the next event of the id's private channel, keeps it as `id->event` and returns
    /// its result (see `completion`: REJECTED → `ECONNREFUSED`, UNREACHABLE → `ETIMEDOUT`…).
    /// `Ok` at once for an id that is not synchronous. librdmacm blocks for the event; this
    /// returns `EAGAIN` until it is there (call again; [`crate::blocking::SharedCm::complete`]
    /// waits).
    ///
    /// # Errors
    /// `EAGAIN` (no event yet), `EINVAL` (unknown id), or the event's result.
    pub fn complete(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let u = self.user(id)?;
        if !u.sync {
            return Ok(());
        }
        if let Some(ev) = u.event.take() {
            let _ = self.ack_cm_event(ev);
        }
        let ch = self
            .cma
            .channel_of(id)
            .ok_or_else(|| inval("unknown rdma_cm id"))?;
        let ev = self.get_cm_event(dev, now, ch)?;
        let res = completion(&ev);
        self.user(id)?.event = Some(ev);
        res
    }

    /// `rdma_get_request` on a synchronous listener: acks the listener's previous event, takes
    /// the next event of its private channel and, for a CONNECT_REQUEST, returns the new
    /// (synchronous) id, whose `id->event` the request becomes. librdmacm blocks; this returns
    /// `EAGAIN` until a request is there.
    ///
    /// # Errors
    /// `EINVAL` for a listener that is not synchronous or an unknown one, or when the event is
    /// not a CONNECT_REQUEST; `ECONNREFUSED` for REJECTED, the errno of another failed event;
    /// `EAGAIN` when nothing is queued. The event is then kept as the listener's `id->event`.
    pub fn get_request(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        listen: CmIdHandle,
    ) -> Result<CmIdHandle, Error> {
        let u = self.user(listen)?;
        if !u.sync {
            return Err(inval("rdma_get_request: the listener is not synchronous"));
        }
        if let Some(ev) = u.event.take() {
            let _ = self.ack_cm_event(ev);
        }
        let ch = self
            .cma
            .channel_of(listen)
            .ok_or_else(|| inval("unknown rdma_cm id"))?;
        let ev = self.get_cm_event(dev, now, ch)?;
        let res = completion(&ev).and_then(|()| {
            if ev.event == CmEventType::ConnectRequest {
                Ok(ev.id)
            } else {
                Err(inval("rdma_get_request: not a CONNECT_REQUEST"))
            }
        });
        let keeper = if res.is_ok() { ev.id } else { listen };
        self.ids.entry(keeper).or_default().event = Some(ev);
        res
    }

    /// `rdma_migrate_id(id, channel)`: `id` reports to `channel` from now on, and its events
    /// not read yet move there with it ([`Cma::migrate_id`]). `None` makes the id synchronous
    /// on a new private channel (EINVAL if it is synchronous already); a synchronous id that
    /// moves to `channel` acks its `id->event` and its private channel is destroyed.
    ///
    /// librdmacm then blocks until every event returned for the id is acked
    /// (`while (id_priv->events_completed < resp.events_reported) pthread_cond_wait`): this
    /// non-blocking call migrates and returns; the caller waits until
    /// [`RdmaCm::unacked_events`] of `id` is 0 ([`crate::blocking::SharedCm::migrate_id`]
    /// does, as librnic's `rdma_migrate_id`).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id or channel, or `None` for a synchronous id; `EBADF` for a
    /// destroyed channel; `ENXIO` for an id whose device was removed. Nothing changes then.
    pub fn migrate_id(
        &mut self,
        id: CmIdHandle,
        channel: Option<EventChannel>,
    ) -> Result<(), Error> {
        let was_sync = self.user(id)?.sync;
        if was_sync && channel.is_none() {
            return Err(inval("rdma_migrate_id: the id is synchronous already"));
        }
        let to = match channel {
            Some(ch) => ch,
            None => self.cma.create_event_channel(),
        };
        let old = self.cma.channel_of(id);
        if let Err(e) = self.cma.migrate_id(id, to) {
            if channel.is_none() {
                let _ = self.cma.destroy_event_channel(to);
            }
            return Err(e);
        }
        if was_sync {
            if let Some(ev) = self.user(id)?.event.take() {
                let _ = self.ack_cm_event(ev);
            }
            if let Some(old) = old.filter(|&o| o != to) {
                let _ = self.cma.destroy_event_channel(old);
            }
        }
        self.user(id)?.sync = channel.is_none();
        Ok(())
    }
}
