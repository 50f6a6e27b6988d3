//! Waiting for CM events from real-time drivers: a blocking wait on a condvar and an async
//! (tokio) wait. The sans-IO [`RdmaCm`] is untouched: this wrapper owns it, the device behind
//! one lock and the driver's clock, and wakes waiters after every call made through
//! [`SharedCm::with`].

use crate::api::{CmDevice, CmEvent, CmIdHandle, EventChannel, RdmaCm};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::Duration;
use verbs_core::{Errno, Error, SimTime};

/// The driver's clock: the [`SimTime`] it runs the CM at.
type Clock = Box<dyn Fn() -> SimTime + Send + Sync>;

struct Inner<D> {
    state: Mutex<(RdmaCm, D)>,
    cond: Condvar,
    notify: tokio::sync::Notify,
    clock: Clock,
}

/// An [`RdmaCm`] and its device shared between a driver (feeding MADs and timers) and
/// application threads or tasks (calling the API and waiting for events). Clones share it.
pub struct SharedCm<D> {
    inner: Arc<Inner<D>>,
}

impl<D> Clone for SharedCm<D> {
    fn clone(&self) -> Self {
        SharedCm {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: CmDevice> SharedCm<D> {
    /// Wraps a CM and its device. `clock` is the driver's time: a fetched event may do work
    /// that needs it (librdmacm's CONNECT_RESPONSE step, [`RdmaCm::get_cm_event`]).
    pub fn new(cm: RdmaCm, dev: D, clock: impl Fn() -> SimTime + Send + Sync + 'static) -> Self {
        SharedCm {
            inner: Arc::new(Inner {
                state: Mutex::new((cm, dev)),
                cond: Condvar::new(),
                notify: tokio::sync::Notify::new(),
                clock: Box::new(clock),
            }),
        }
    }

    /// Runs `f` with the CM and the device under the lock, then wakes every waiter (an API call
    /// or a driver input may have queued events).
    pub fn with<R>(&self, f: impl FnOnce(&mut RdmaCm, &mut D) -> R) -> R {
        let r = {
            let mut g = self.inner.state.lock();
            let (cm, dev) = &mut *g;
            f(cm, dev)
        };
        self.inner.cond.notify_all();
        self.inner.notify.notify_waiters();
        r
    }

    /// [`RdmaCm::get_cm_event`] under the lock held in `st`, at the clock's time.
    fn get(&self, st: &mut (RdmaCm, D), channel: EventChannel) -> Result<CmEvent, Error> {
        let (cm, dev) = st;
        cm.get_cm_event(dev, (self.inner.clock)(), channel)
    }

    /// `rdma_get_cm_event` on a blocking channel with a timeout (`poll(2)` then get).
    ///
    /// A thread already waiting here when the channel is destroyed is not woken (Linux:
    /// `close` on the channel's descriptor does not end a `read` in progress, whose file
    /// reference keeps the file open); it returns at `timeout` with `EBADF`.
    ///
    /// # Errors
    /// `EAGAIN` when nothing arrives within `timeout`; `EBADF` for a destroyed channel
    /// (librdmacm's `write` on the closed descriptor); `EINVAL` for an unknown channel.
    pub fn wait_event(&self, channel: EventChannel, timeout: Duration) -> Result<CmEvent, Error> {
        let mut g = self.inner.state.lock();
        match self.get(&mut g, channel) {
            Err(e) if e.errno == Errno::EAGAIN => {}
            other => return other,
        }
        // parking_lot keeps the deadline; spurious wake-ups re-check the condition.
        // `pending_events` > 0 guarantees that the get below returns an event.
        self.inner
            .cond
            .wait_while_for(&mut g, |st| st.0.pending_events(channel) == 0, timeout);
        self.get(&mut g, channel)
    }

    /// Waits (async) for the next event on `channel`.
    ///
    /// # Errors
    /// `EINVAL` for an unknown channel.
    pub async fn next_event(&self, channel: EventChannel) -> Result<CmEvent, Error> {
        loop {
            let notified = self.inner.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match self.get(&mut self.inner.state.lock(), channel) {
                Err(e) if e.errno == Errno::EAGAIN => {}
                other => return other,
            }
            notified.await;
        }
    }
}

/// Synchronous ids and `rdma_migrate_id`: the waits librdmacm does inside the call.
impl<D: CmDevice> SharedCm<D> {
    /// Runs `step` under the lock until it returns something other than `EAGAIN`, waiting for
    /// events on `id`'s channel in between; `EAGAIN` when a wait of `timeout` sees none (each
    /// wait is up to `timeout`: the layer reads no clock).
    fn until_event<R>(
        &self,
        id: CmIdHandle,
        timeout: Duration,
        mut step: impl FnMut(&mut RdmaCm, &mut D, SimTime) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut g = self.inner.state.lock();
        loop {
            let now = (self.inner.clock)();
            let (cm, dev) = &mut *g;
            match step(cm, dev, now) {
                Err(e) if e.errno == Errno::EAGAIN => {}
                other => return other,
            }
            let ch = g.0.channel_of(id);
            let timed_out = self
                .inner
                .cond
                .wait_while_for(
                    &mut g,
                    |st| ch.is_some_and(|c| st.0.pending_events(c) == 0),
                    timeout,
                )
                .timed_out();
            if timed_out {
                return Err(Error::new(Errno::EAGAIN, "no CM event within the timeout"));
            }
        }
    }

    /// `ucma_complete` with librdmacm's wait: after a call on a synchronous id returned `Ok`
    /// ([`RdmaCm::is_sync`]), waits for the id's next event and returns its result
    /// ([`RdmaCm::complete`]). `Ok` at once for an id that is not synchronous.
    ///
    /// # Errors
    /// The event's result (`ECONNREFUSED` for REJECTED, `ETIMEDOUT` for UNREACHABLE…);
    /// `EAGAIN` when no event comes within `timeout`; `EINVAL` for an unknown id.
    pub fn complete(&self, id: CmIdHandle, timeout: Duration) -> Result<(), Error> {
        self.until_event(id, timeout, |cm, dev, now| cm.complete(dev, now, id))
    }

    /// `rdma_get_request` on a synchronous listener, waiting for the request
    /// ([`RdmaCm::get_request`]).
    ///
    /// # Errors
    /// As [`RdmaCm::get_request`]; `EAGAIN` when nothing comes within `timeout`.
    pub fn get_request(&self, listen: CmIdHandle, timeout: Duration) -> Result<CmIdHandle, Error> {
        self.until_event(listen, timeout, |cm, dev, now| {
            cm.get_request(dev, now, listen)
        })
    }

    /// `rdma_migrate_id` with librdmacm's wait: migrates ([`RdmaCm::migrate_id`]), then waits
    /// until every event returned for `id` is acked (by any thread, through
    /// [`SharedCm::with`]).
    ///
    /// # Errors
    /// As [`RdmaCm::migrate_id`] (nothing migrated then); `EAGAIN` when the acks do not come
    /// within `timeout` (librdmacm would wait for ever; the id is migrated already).
    pub fn migrate_id(
        &self,
        id: CmIdHandle,
        channel: Option<EventChannel>,
        timeout: Duration,
    ) -> Result<(), Error> {
        let mut g = self.inner.state.lock();
        g.0.migrate_id(id, channel)?;
        let timed_out = self
            .inner
            .cond
            .wait_while_for(&mut g, |st| st.0.unacked_events(id) > 0, timeout)
            .timed_out();
        drop(g);
        // The migration may have moved events onto a channel someone waits on.
        self.inner.cond.notify_all();
        self.inner.notify.notify_waiters();
        if timed_out {
            return Err(Error::new(
                Errno::EAGAIN,
                "events of the id still not acked",
            ));
        }
        Ok(())
    }
}
