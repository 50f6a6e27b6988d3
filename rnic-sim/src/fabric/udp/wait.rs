//! Waiting, from an application's thread, for a condition on the endpoint.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use super::{UdpHandle, BUSY_POLL};

impl<E> UdpHandle<E> {
    /// Blocks until `cond` holds for the endpoint (checked after every event the driver
    /// handles), the driver stops, or `timeout` passes. Returns whether `cond` holds. Not for
    /// use on a runtime thread: use [`wait_until_async`](Self::wait_until_async) there.
    ///
    /// For up to 50 µs it watches for changes without sleeping (yielding the CPU), as
    /// the driver does for datagrams: an answer that comes within microseconds costs no
    /// thread wake-up.
    pub fn wait_until(&self, timeout: Duration, mut cond: impl FnMut(&E) -> bool) -> bool {
        let start = Instant::now();
        let mut seen = None;
        while start.elapsed() < BUSY_POLL.min(timeout) {
            let changes = self.shared.changes.load(Ordering::Acquire);
            if seen == Some(changes) {
                std::thread::yield_now();
                continue;
            }
            seen = Some(changes);
            let st = self.shared.lock();
            if st.stopped || cond(&st.endpoint) {
                return cond(&st.endpoint);
            }
        }
        let guard = self.shared.lock();
        let rest = timeout.saturating_sub(start.elapsed());
        self.shared.sleepers.fetch_add(1, Ordering::SeqCst);
        let (guard, _) = self
            .shared
            .changed
            .wait_timeout_while(guard, rest, |st| !st.stopped && !cond(&st.endpoint))
            .unwrap_or_else(PoisonError::into_inner);
        self.shared.sleepers.fetch_sub(1, Ordering::SeqCst);
        cond(&guard.endpoint)
    }

    /// Waits until `cond` holds for the endpoint or the driver stops; returns whether `cond`
    /// holds. Wrap it in `tokio::time::timeout` to bound the wait.
    pub async fn wait_until_async(&self, mut cond: impl FnMut(&E) -> bool) -> bool {
        loop {
            let notified = self.shared.changed_async.notified();
            tokio::pin!(notified);
            // Register before checking, so a change between the check and the await is seen.
            notified.as_mut().enable();
            {
                let st = self.shared.lock();
                if cond(&st.endpoint) || st.stopped {
                    return cond(&st.endpoint);
                }
            }
            notified.await;
        }
    }
}
