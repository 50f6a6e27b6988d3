//! The driver stands by while a caller spins.
//!
//! A program that spins on `ibv_poll_cq` receives its peer's datagrams itself
//! ([`UdpHandle::progress`]). If the driver's thread meanwhile sleeps in `epoll_wait` on the
//! socket, every datagram that arrives wakes it — the sender's `sendmsg` pays for the wake-up,
//! and the woken thread takes a core from a spinning one (two processes spinning on two
//! cores), only to find the datagram already taken. Measured with `ib_send_lat -s 64` on two
//! cores: ≈ 1.5 `epoll_wait` returns and 1.7 `futex` calls of the driver per round trip.
//!
//! So while callers spin (an unbroken run of polls, [`Shared::callers_spinning`]),
//! the driver parks off the socket and wakes only for the endpoint's deadline (the RC and CM
//! timers), a handle's [`poke`](Shared::poke), or [`STANDBY_TICK`], after which it looks again.
//! A caller about to block in the library, or arming a CQ ([`UdpHandle::caller_sleeps`]),
//! ends the stand-by at once; a program that stops polling and blocks elsewhere without arming
//! a CQ (its own `poll(2)` on a CM channel's descriptor) is heard again within
//! [`BUSY_POLL`](super::BUSY_POLL) + [`STANDBY_TICK`]. An event-driven program's one or two
//! empty polls after an event are no run: it arms the CQ between them, and the driver keeps
//! listening for it.
//!
//! While the driver stands by, what the endpoint queues in answer to datagrams a caller
//! received (the coalesced ACK of a message) is not sent from inside that `progress`: it
//! waits for the caller's next call into the endpoint, which is usually the reply the
//! application posts on the message — and `SimDevice::poll_transmit` puts requests before
//! pure ACKs, so the reply and the ACK leave in one GSO send. The next `progress`, any
//! [`UdpHandle::with`] or the driver's next look (at most [`STANDBY_TICK`] later) sends it.
//! Receive WRs posted in between ([`UdpHandle::with_local`]) leave it waiting. An answer the
//! driver itself made just after callers stopped spinning is held the same way, briefly
//! ([`UdpDriver::hold_answer`]).
//!
//! Measured on two cores, release build, `rnic exec` on both sides, against `rnic ping --op
//! send -S 64` in the same run: `ib_send_lat -s 64` round trip (2 × t_typical) 21–29 µs
//! against 17–20 µs before (1.3–1.6×), 15–20 µs against 16–19 µs with the stand-by and the
//! deferred ACK; `ibv_rc_pingpong -s 64` 33–48 µs per iteration before, 17–23 µs after.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Endpoint, Shared, State, UdpDriver, UdpHandle, BUSY_POLL};
use verbs_core::SimTime;

/// Polls of the callers further apart than this (ns) start a new run.
const RUN_GAP: u64 = 200_000;

/// A run of this many polls is a caller spinning, not a program that looks once or twice after
/// an event (it arms the CQ in between, which ends the run: [`UdpHandle::caller_sleeps`]).
const SPIN_POLLS: u64 = 32;

/// The longest the driver stands by before it looks again (whether callers still spin, an
/// answer waits): how late a program that stopped spinning without arming a CQ is heard, and
/// how long an ACK waits for a caller that went on computing after its receive — far below
/// any RC ACK timeout a program sets (`timeout` 8 is 1.05 ms; rdma_cm's and perftest's are
/// 67 ms and more). Every look costs a spinning caller a context switch: with 100 µs,
/// `ibv_rc_pingpong` took 24–30 µs per iteration instead of 17–23.
const STANDBY_TICK: Duration = Duration::from_millis(1);

/// How recent the callers' last poll is for the driver to hold an answer it made itself
/// ([`UdpDriver::hold_answer`]): a program that stopped polling to spin on memory is heard
/// by the driver within a scheduler slice or a [`STANDBY_TICK`].
const HOLD_RECENT: Duration = Duration::from_millis(4);

impl<E> Shared<E> {
    /// Records a caller's poll at `now_ns` (ns since the epoch, never 0).
    pub(super) fn caller_polls(&self, now_ns: u64) {
        let last = self.caller_polled.swap(now_ns, Ordering::Relaxed);
        if last == 0 || now_ns.saturating_sub(last) > RUN_GAP {
            self.caller_run.store(1, Ordering::Relaxed);
        } else {
            self.caller_run.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether callers spin: their last poll is recent ([`BUSY_POLL`]) and ends a run of at
    /// least [`SPIN_POLLS`] polls.
    pub(super) fn callers_spinning(&self) -> bool {
        let last = self.caller_polled.load(Ordering::Relaxed);
        last != 0
            && self.now().as_nanos().saturating_sub(last) < BUSY_POLL.as_nanos() as u64
            && self.caller_run.load(Ordering::Relaxed) >= SPIN_POLLS
    }
}

impl<E> UdpHandle<E> {
    /// Tells the driver that the calling thread stops polling: it is about to block (on a
    /// channel's descriptor), or it armed a CQ to wait for its event. Ends the callers' run of
    /// polls; a driver standing by listens on the socket again at once.
    pub fn caller_sleeps(&self) {
        let shared = &self.shared;
        shared.caller_run.store(0, Ordering::Relaxed);
        if shared.caller_polled.swap(0, Ordering::Relaxed) != 0
            && shared.standing_by.load(Ordering::Acquire)
        {
            shared.poke();
        }
    }
}

impl<E: Endpoint> UdpDriver<E> {
    /// Parks the driver's thread until `deadline`, then runs the endpoint's timers if they are
    /// due; returns whether waiters should be woken. Returns early (`false`) for the loop to
    /// look again on a poke, an answer waiting to be sent, or callers that stopped spinning —
    /// checked every [`STANDBY_TICK`] without the state lock, so a spinning caller is not
    /// made to step aside for the driver at every tick.
    pub(super) fn stand_by(&self, deadline: SimTime) -> bool {
        let shared = &self.shared;
        shared.driver_thread.get_or_init(std::thread::current);
        loop {
            let now = shared.now();
            if now >= deadline {
                break;
            }
            if shared.poked.load(Ordering::Acquire) {
                return false;
            }
            let until = deadline.min(now.plus_nanos(STANDBY_TICK.as_nanos() as u64));
            // A poke between the check and the park leaves an unpark token: no wake-up is lost.
            std::thread::park_timeout(Duration::from_nanos(until.as_nanos() - now.as_nanos()));
            if shared.poked.load(Ordering::Acquire)
                || shared.answer_waits.load(Ordering::Relaxed)
                || !shared.callers_spinning()
            {
                return false;
            }
        }
        let mut st = shared.lock_driver();
        let now = shared.now();
        if st.endpoint.poll_timeout().is_none_or(|d| d > now) {
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

impl<E: Endpoint> UdpDriver<E> {
    /// After the driver delivered datagrams: if the callers were spinning until a moment ago
    /// ([`HOLD_RECENT`]) and did not say they sleep, holds what the endpoint queued in answer
    /// for their next call, for at most [`BUSY_POLL`] — once per caller poll.
    ///
    /// A program that spins on memory for its peer's RDMA WRITE (perftest's `ib_write_lat`:
    /// poll the CQ for its own WRITE's completion, then spin on the buffer) does not poll while
    /// the peer's WRITE arrives, so the driver receives it. Sent at once, the ACK of that WRITE
    /// leaves alone and the peer takes its completion before this side's WRITE follows: then
    /// each side's WRITE lands while its program spins on memory, and is received only when
    /// the driver gets a CPU from the two spinning programs — on two cores, when the
    /// scheduler's slice ends (≈ 1–2 ms a message, measured). Held, the ACK leaves with the
    /// WRITE the program posts a few µs later, the peer's poll receives both, and the programs
    /// receive for themselves again.
    pub(super) fn hold_answer(&self) {
        let shared = &self.shared;
        let last = shared.caller_polled.load(Ordering::Relaxed);
        let now = shared.now();
        if last == 0
            || shared.caller_run.load(Ordering::Relaxed) < SPIN_POLLS
            || now.as_nanos().saturating_sub(last) > HOLD_RECENT.as_nanos() as u64
            || shared.held_after.swap(last, Ordering::Relaxed) == last
        {
            return;
        }
        {
            let mut st = shared.lock_driver();
            shared.answer_waits.store(true, Ordering::Relaxed);
            // What callers receive meanwhile is answered in their next call too.
            shared.standing_by.store(true, Ordering::Release);
            st.stats.deferred_answers += 1;
        }
        shared.driver_thread.get_or_init(std::thread::current);
        let until = now.plus_nanos(BUSY_POLL.as_nanos() as u64);
        loop {
            let now = shared.now();
            if now >= until
                || shared.poked.load(Ordering::Acquire)
                || !shared.answer_waits.load(Ordering::Relaxed)
            {
                return;
            }
            std::thread::park_timeout(Duration::from_nanos(until.as_nanos() - now.as_nanos()));
        }
    }
}

/// What a handle's call does with an answer deferred for the caller's next call.
pub(super) enum Deferred {
    /// Sends it before the call runs ([`UdpHandle::with`]): the call may destroy the QP whose
    /// coalesced ACK it is, or change the memory a READ response is read from.
    SendFirst,
    /// Sends it after what the call queued ([`UdpHandle::with_send`]).
    SendAfter,
    /// Leaves it waiting ([`UdpHandle::with_local`]).
    Keep,
}

impl<E: Endpoint> UdpHandle<E> {
    /// [`with`](Self::with) for a call that posts send work requests: what it queues leaves
    /// before an answer deferred for this call (the reply before the ACK of the message it
    /// answers, both in one GSO send when they fit).
    pub fn with_send<R>(&self, f: impl FnOnce(&mut E, SimTime) -> R) -> R {
        self.call(Deferred::SendAfter, f)
    }

    /// [`with`](Self::with) for a call that queues no datagram of its own (posting receive
    /// WRs): an answer deferred for the caller's next call keeps waiting for the call that
    /// sends — perftest reposts a receive between taking a message and posting its reply.
    pub fn with_local<R>(&self, f: impl FnOnce(&mut E, SimTime) -> R) -> R {
        self.call(Deferred::Keep, f)
    }

    /// Runs `f` on the endpoint, sends what is queued (a deferred answer as `deferred` says),
    /// wakes the driver if its deadline moved earlier and tells waiters of the change.
    pub(super) fn call<R>(&self, deferred: Deferred, f: impl FnOnce(&mut E, SimTime) -> R) -> R {
        let shared = &self.shared;
        let (r, wake) = {
            let mut st = shared.lock();
            let waits = shared.answer_waits.load(Ordering::Relaxed);
            let first = waits && matches!(deferred, Deferred::SendFirst) && self.flush(&mut st);
            let r = f(&mut st.endpoint, shared.now());
            let keep = waits && matches!(deferred, Deferred::Keep);
            let after = !keep && self.flush(&mut st);
            (r, first || after)
        };
        if wake {
            shared.poke();
        }
        shared.notify_changed();
        r
    }
}
