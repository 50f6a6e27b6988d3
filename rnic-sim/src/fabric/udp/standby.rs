//! The driver stands by while a caller spins.
//!
//! A program that spins on `ibv_poll_cq` receives its peer's datagrams itself
//! ([`UdpHandle::progress`]). If the driver's thread meanwhile sleeps in `epoll_wait` on the
//! socket, every datagram that arrives wakes it — the sender's `sendmsg` pays for the wake-up,
//! and the woken thread takes a core from a spinning one (two processes spinning on two
//! cores), only to find the datagram already taken. Measured with `ib_send_lat -s 64` on two
//! cores: ≈ 1.5 `epoll_wait` returns and 1.7 `futex` calls of the driver per round trip.
//!
//! So while callers spin (their polls come in one unbroken run, [`Shared::callers_spinning`]),
//! the driver parks off the socket and wakes only for the endpoint's deadline (the RC and CM
//! timers), a handle's [`poke`](Shared::poke), or [`STANDBY_TICK`], after which it looks again.
//! A caller about to block in the library ([`UdpHandle::caller_sleeps`]) ends the stand-by at
//! once; a program that stops polling and blocks elsewhere (its own `poll(2)` on a channel's
//! descriptor) is heard again within [`BUSY_POLL`](super::BUSY_POLL) + [`STANDBY_TICK`].
//! An event-driven program's one or two empty polls after an event are no run: the driver
//! keeps listening for it.
//!
//! While the driver stands by, what the endpoint queues in answer to datagrams a caller
//! received (the coalesced ACK of a message) is not sent from inside that `progress`: it
//! waits for the caller's next call into the endpoint, which is usually the reply the
//! application posts on the message — and `SimDevice::poll_transmit` puts requests before
//! pure ACKs, so the reply leaves first and the ACK's system call is off the round trip.
//! The next `progress`, any [`UdpHandle::with`] or the driver's next look (at most
//! [`STANDBY_TICK`] later) sends it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Endpoint, Shared, State, UdpDriver, UdpHandle, BUSY_POLL};
use verbs_core::SimTime;

/// Polls of the callers this close together (ns) are one run.
pub(super) const STREAK_GAP: u64 = 20_000;

/// A run of polls this long (ns) is a caller spinning, not a program that looked once after an
/// event.
const STREAK_MIN: u64 = 30_000;

/// The longest the driver stands by before it looks again (whether callers still spin).
const STANDBY_TICK: Duration = Duration::from_micros(100);

impl<E> Shared<E> {
    /// Records a caller's poll at `now_ns` (ns since the epoch, never 0).
    pub(super) fn caller_polls(&self, now_ns: u64) {
        let last = self.caller_polled.swap(now_ns, Ordering::Relaxed);
        if last == 0 || now_ns.saturating_sub(last) > STREAK_GAP {
            self.caller_streak.store(now_ns, Ordering::Relaxed);
        }
    }

    /// Whether callers spin: their last poll is recent ([`BUSY_POLL`]) and ends a run of polls
    /// at least [`STREAK_MIN`] long.
    pub(super) fn callers_spinning(&self) -> bool {
        let last = self.caller_polled.load(Ordering::Relaxed);
        let streak = self.caller_streak.load(Ordering::Relaxed);
        let now = self.now().as_nanos();
        last != 0
            && now.saturating_sub(last) < BUSY_POLL.as_nanos() as u64
            && last.saturating_sub(streak) >= STREAK_MIN
    }
}

impl<E> UdpHandle<E> {
    /// Tells the driver that the calling thread stops polling and is about to block (e.g. on a
    /// channel's descriptor): the driver listens on the socket again at once.
    pub fn caller_sleeps(&self) {
        let shared = &self.shared;
        if shared.caller_polled.swap(0, Ordering::Relaxed) != 0 {
            shared.poke();
        }
    }
}

impl<E: Endpoint> UdpDriver<E> {
    /// Parks the driver's thread until `deadline`, a poke or [`STANDBY_TICK`], whichever
    /// comes first, then runs the endpoint's timers if they are due. Returns whether waiters
    /// should be woken.
    pub(super) fn stand_by(&self, deadline: SimTime) -> bool {
        let shared = &self.shared;
        shared.driver_thread.get_or_init(std::thread::current);
        let now = shared.now();
        let until = deadline.min(now.plus_nanos(STANDBY_TICK.as_nanos() as u64));
        if until > now && !shared.poked.load(Ordering::Acquire) {
            // A poke between the check and the park leaves an unpark token: no wake-up is lost.
            std::thread::park_timeout(Duration::from_nanos(until.as_nanos() - now.as_nanos()));
        }
        let mut st = shared.lock_driver();
        let now = shared.now();
        if !st.endpoint.poll_timeout().is_some_and(|d| d <= now) {
            return false;
        }
        st.endpoint.handle_timeout(now);
        let State {
            endpoint,
            wake_filter,
            ..
        } = &mut *st;
        wake_filter.as_mut().is_none_or(|f| f(endpoint))
    }
}
