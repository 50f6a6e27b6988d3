//! The real-time fabric: runs one [`Endpoint`] on a real UDP socket with the wall clock
//! (ARCHITECTURE.md, "real-time driver").
//!
//! **I/O boundary.** This module is the only place in `rnic-sim` that reads a clock, owns a
//! socket or starts a thread; everything it drives is the same sans-IO [`Endpoint`] that runs
//! on the deterministic [`Simulation`](super::Simulation). Its time is "nanoseconds since the
//! driver was created", handed to the endpoint as a [`SimTime`].
//!
//! Two ways to use it:
//! * async, in your tokio runtime: [`UdpDriver::bind`] (or [`UdpDriver::from_socket`]), take a
//!   [`UdpHandle`], then `tokio::spawn(driver.run())`;
//! * blocking, without a runtime of your own: [`UdpDriver::spawn`] runs the driver on its own
//!   thread with a current-thread runtime and returns a [`SpawnedUdpDriver`].
//!
//! The loop: drain [`poll_transmit`](Endpoint::poll_transmit) onto the socket, then wait for
//! the first of datagrams ([`handle_datagram`](Endpoint::handle_datagram)), the endpoint's
//! deadline ([`handle_timeout`](Endpoint::handle_timeout)), a poke from a handle, or a stop.
//! UDP is lossy by nature: a failed send drops the datagram and is counted, as the simulated
//! fabric would drop it.
//!
//! **Batching** (`batch.rs`): consecutive datagrams to one destination leave in one system call
//! (UDP GSO), and one `recvmmsg` reads up to 32 messages, each possibly several coalesced
//! datagrams (UDP GRO); all of them are handed to the endpoint before it is asked what to send,
//! so one ACK answers the batch. The socket buffers are sized for the bursts the endpoint emits
//! ([`SOCKET_BUFFER_BYTES`]), read back, and reported ([`UdpHandle::socket_buffers`]).
//!
//! **Latency.** On a [`spawn`](UdpDriver::spawn)ed driver, [`UdpHandle::with`] sends what the
//! endpoint queued straight from the caller's thread (a clone of the socket, non-blocking,
//! under the endpoint lock so datagrams leave in the order queued), and wakes the driver only
//! when the endpoint's deadline moved earlier than the one the driver sleeps on, or when the
//! socket would block (the driver then sends the backlog when the socket is writable). A
//! request/response exchange thus costs one thread hand-off per direction (driver → waiting
//! application), not two.

// This module is the I/O driver: reading the wall clock (`Instant::now`) and owning a thread
// (`thread::Builder::spawn`) is its job, so the determinism lints of clippy.toml are lifted here
// and only here.
#![allow(clippy::disallowed_methods)]

mod batch;
mod caller;
mod standby;
mod wait;

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use verbs_core::SimTime;

use super::Endpoint;
use crate::roce::ROCE_V2_UDP_DPORT;
use batch::{send_all, socket_state, RecvBufs};
pub use batch::{size_socket_buffers, SocketBuffers, SOCKET_BUFFER_BYTES};
use quinn_udp::UdpSocketState;

/// The default local address: `127.0.0.1:4791` (the RoCEv2 port on loopback).
pub const DEFAULT_BIND: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, ROCE_V2_UDP_DPORT));

/// The longest the driver loop sleeps without looking at the endpoint's deadline (an idle
/// driver wakes 100 times a second). [`UdpHandle::with`] wakes the driver only for a deadline
/// earlier than the driver's next wake-up, so the common call — post a work request whose
/// retransmission timer is further out than this — costs no thread wake-up.
const IDLE_TICK: Duration = Duration::from_millis(10);

/// How long the driver keeps polling the socket after traffic before it sleeps
/// (`UdpDriver::spin`): longer than a loopback round trip, short enough that an idle driver
/// costs nothing. The CPU is yielded between tries.
const BUSY_POLL: Duration = Duration::from_micros(50);

/// How long a handle lets a driver that waits for the endpoint lock go first
/// (`Shared::lock`): long enough for a driver running on another core to take it, shorter
/// than any round trip worth measuring.
const YIELD_TO_DRIVER: Duration = Duration::from_micros(20);

/// The largest UDP payload in bytes.
pub const MAX_DATAGRAM: usize = 65_535;

/// Eight bytes of OS randomness (`/dev/urandom`): the default seed of a real-time driver, for
/// the identifiers a peer must not guess (comm IDs, transaction IDs and start PSNs of the CM,
/// QPNs and keys of [`SimDeviceConfig::seed`](crate::SimDeviceConfig::seed)). Never 0, which
/// a device reads as "unseeded". Without `/dev/urandom`, the wall clock and the process ID
/// (they still differ between runs, but are guessable; a warning says so).
pub fn os_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    let seed = match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => u64::from_le_bytes(b),
        Err(e) => {
            tracing::warn!("/dev/urandom: {e}; seeding identifiers from the clock and PID");
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            t ^ (u64::from(std::process::id()) << 32)
        }
    };
    seed.max(1)
}

/// Counters of a UDP driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct UdpStats {
    /// Datagrams received and handed to the endpoint.
    pub received: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams dropped because the kernel refused to send them.
    pub send_errors: u64,
    /// Receive errors that were ignored (ICMP-induced `ECONNREFUSED`/`ECONNRESET`).
    pub recv_errors: u64,
    /// Send system calls (`sendmsg`, each one datagram or one GSO batch): `sent / send_calls`
    /// is the batching achieved.
    pub send_calls: u64,
    /// Receive system calls that returned data (`recvmmsg`, each up to 32 messages).
    pub recv_calls: u64,
    /// Of `recv_calls`, those made from a caller's thread ([`UdpHandle::progress`]).
    pub caller_recv_calls: u64,
    /// Times the driver stood by off the socket while callers spun (see `standby`).
    pub standbys: u64,
    /// Of `caller_recv_calls`, those whose answer (the coalesced ACK) waited for the caller's
    /// next call (see `standby`).
    pub deferred_answers: u64,
}

struct State<E> {
    endpoint: E,
    stats: UdpStats,
    stop_requested: bool,
    stopped: bool,
    /// The deadline the driver loop sleeps on (`None`: none).
    armed: Option<SimTime>,
    /// Datagrams waiting to be sent (for the socket to become writable), in order.
    backlog: VecDeque<(SocketAddr, Bytes)>,
    /// Where a GSO batch is assembled.
    gso: Vec<u8>,
    /// Decides whether a datagram or timeout wakes the waiters (see
    /// [`UdpHandle::set_wake_filter`]); `None`: always.
    wake_filter: Option<WakeFilter<E>>,
    /// The receive buffers of [`UdpHandle::progress`] (made on its first use).
    caller_recv: Option<Box<RecvBufs>>,
}

impl<E: Endpoint> Shared<E> {
    /// Sends, non-blocking and batched, the backlog and then what the endpoint has queued at
    /// `now`, in that order. What the socket cannot take now stays in the backlog, in order.
    /// Failed sends are counted and dropped, as the network would drop them.
    fn send_queued(&self, st: &mut State<E>, now: SimTime, socket: &impl AsFd) {
        self.answer_waits.store(false, Ordering::Relaxed);
        while let Some(d) = st.endpoint.poll_transmit(now) {
            st.backlog.push_back(d);
        }
        send_all(
            &mut st.backlog,
            &mut st.stats,
            &mut st.gso,
            &self.udp,
            socket,
        );
    }
}

/// See [`UdpHandle::set_wake_filter`].
type WakeFilter<E> = Box<dyn FnMut(&E) -> bool + Send>;

/// What the driver and its handles share.
struct Shared<E> {
    state: Mutex<State<E>>,
    /// Held from a receive system call until its datagrams are delivered, by the driver and
    /// by [`UdpHandle::progress`] alike (taken before `state`): datagrams reach the endpoint in
    /// the order the socket gave them, whichever thread read them.
    rx: Mutex<()>,
    /// The driver thread wants the lock: handles let it in first (see [`Shared::lock`]).
    driver_waiting: AtomicBool,
    /// A handle woke the driver ([`Shared::wake`]) since the driver last looked: ends a busy
    /// poll.
    poked: AtomicBool,
    /// When (ns since the epoch) a caller last looked for datagrams itself
    /// ([`UdpHandle::progress`]): while callers poll, the driver does not busy-poll too.
    caller_polled: AtomicU64,
    /// How many polls the callers' current run holds ([`Shared::callers_spinning`]).
    caller_run: AtomicU64,
    /// What the endpoint queued in answer to datagrams a spinning caller received waits for
    /// that caller's next call, or the standing-by driver's next look (set under the state
    /// lock; see `standby`).
    answer_waits: AtomicBool,
    /// The driver stands by ([`UdpDriver::stand_by`]): it will look at the endpoint within
    /// `standby::STANDBY_TICK` whatever happens on the socket.
    standing_by: AtomicBool,
    /// The [`caller_polled`](Self::caller_polled) after which the driver last held an answer
    /// it made itself (see [`UdpDriver::hold_answer`]): once per caller poll.
    held_after: AtomicU64,
    /// The driver's thread, once it stood by ([`UdpDriver::stand_by`]): [`Shared::poke`]
    /// unparks it.
    driver_thread: OnceLock<std::thread::Thread>,
    /// The wall-clock epoch: `SimTime::ZERO`.
    epoch: Instant,
    /// Wakes blocking waiters after every change.
    changed: Condvar,
    /// How many threads sleep on `changed` (counted under the state lock): with none, a change
    /// costs no `futex` wake-up call — std's `notify_all` makes one whether or not anyone waits,
    /// and a program that spins on `ibv_poll_cq` makes changes at every call that sends.
    sleepers: AtomicUsize,
    /// Counts the changes waiters are told of: what a busy-polling waiter watches.
    changes: AtomicU64,
    /// Wakes async waiters after every change.
    changed_async: tokio::sync::Notify,
    /// Wakes the driver loop (a handle touched the endpoint or asked to stop).
    wake: tokio::sync::Notify,
    /// A clone of the socket for sending from handles' threads (spawned drivers only).
    direct: Option<std::net::UdpSocket>,
    /// quinn-udp's state of the socket (GSO support), for every sending thread.
    udp: UdpSocketState,
    /// What the kernel granted for the socket's buffers.
    buffers: SocketBuffers,
}

impl<E> Shared<E> {
    /// The shared state of a driver on `socket`: quinn-udp's socket state, and the buffers
    /// sized to [`SOCKET_BUFFER_BYTES`].
    fn new(
        endpoint: E,
        socket: &impl AsFd,
        local: SocketAddr,
        direct: Option<std::net::UdpSocket>,
    ) -> io::Result<Arc<Self>> {
        let udp = socket_state(socket)?;
        let buffers = size_socket_buffers(socket, SOCKET_BUFFER_BYTES);
        tracing::debug!(
            %local,
            recv_buffer = buffers.recv,
            send_buffer = buffers.send,
            gso_segments = udp.max_gso_segments(),
            gro_segments = udp.gro_segments(),
            "UDP driver ready (socket bound, buffers sized)"
        );
        Ok(Arc::new(Shared {
            rx: Mutex::new(()),
            caller_polled: AtomicU64::new(0),
            caller_run: AtomicU64::new(0),
            standing_by: AtomicBool::new(false),
            held_after: AtomicU64::new(0),
            answer_waits: AtomicBool::new(false),
            driver_thread: OnceLock::new(),
            driver_waiting: AtomicBool::new(false),
            poked: AtomicBool::new(false),
            state: Mutex::new(State {
                endpoint,
                stats: UdpStats::default(),
                stop_requested: false,
                stopped: false,
                armed: None,
                backlog: VecDeque::new(),
                gso: Vec::new(),
                wake_filter: None,
                caller_recv: None,
            }),
            epoch: Instant::now(),
            changed: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            changes: AtomicU64::new(0),
            changed_async: tokio::sync::Notify::new(),
            wake: tokio::sync::Notify::new(),
            direct,
            udp,
            buffers,
        }))
    }

    /// The state, for a handle; a panic in another holder does not make it unusable.
    ///
    /// While the driver thread waits for the lock, a handle yields for a while
    /// ([`YIELD_TO_DRIVER`]) before it takes the lock: an application thread that polls a
    /// completion queue in a loop would otherwise take the lock again and again before the
    /// woken driver runs (a std mutex is not fair), and the driver's timers would wait. The
    /// wait is bounded: a driver that is runnable but has no CPU yet (every core busy with
    /// spinning threads) would otherwise stall the caller for a scheduler time slice, and a
    /// caller that polls receives the datagrams itself ([`UdpHandle::progress`]).
    fn lock(&self) -> MutexGuard<'_, State<E>> {
        if self.driver_waiting.load(Ordering::Acquire) {
            let start = Instant::now();
            while self.driver_waiting.load(Ordering::Acquire) && start.elapsed() < YIELD_TO_DRIVER {
                std::thread::yield_now();
            }
        }
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, for the driver thread: announces itself so that handles step aside.
    fn lock_driver(&self) -> MutexGuard<'_, State<E>> {
        self.driver_waiting.store(true, Ordering::Release);
        let g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.driver_waiting.store(false, Ordering::Release);
        g
    }

    /// Nanoseconds since the epoch.
    fn now(&self) -> SimTime {
        SimTime::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The wall-clock instant of `t`, at most a day ahead (a day from now is as good as never,
    /// and keeps `SimTime::MAX` representable as an `Instant`).
    fn instant(&self, t: SimTime) -> tokio::time::Instant {
        const DAY_NS: u64 = 86_400 * 1_000_000_000;
        let t = t.min(self.now().plus_nanos(DAY_NS));
        let at = self
            .epoch
            .checked_add(Duration::from_nanos(t.as_nanos()))
            .unwrap_or(self.epoch);
        tokio::time::Instant::from_std(at)
    }

    /// Whether a caller looked for datagrams itself within the last [`BUSY_POLL`]: it is
    /// polling, and the driver's own busy poll would only compete with it for the CPU and the
    /// receive lock (the driver still sleeps on the socket and its deadline).
    fn callers_polling(&self) -> bool {
        let last = self.caller_polled.load(Ordering::Relaxed);
        last != 0 && self.now().as_nanos().saturating_sub(last) < BUSY_POLL.as_nanos() as u64
    }

    /// Wakes the driver loop (and ends its busy poll).
    fn poke(&self) {
        self.poked.store(true, Ordering::Release);
        self.wake.notify_one();
        if let Some(t) = self.driver_thread.get() {
            t.unpark();
        }
    }

    fn notify_changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        // A sleeper counts itself under the state lock before it checks its condition, and
        // every change is made under that lock before this call: either the sleeper's check
        // saw the change, or this load sees the sleeper.
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.changed.notify_all();
        }
        self.changed_async.notify_waiters();
    }
}

/// A cloneable handle to a running (or not yet started) driver: use the endpoint, wait for a
/// condition on it, read the counters, stop the driver.
pub struct UdpHandle<E> {
    shared: Arc<Shared<E>>,
    local_addr: SocketAddr,
}

impl<E> Clone for UdpHandle<E> {
    fn clone(&self) -> Self {
        UdpHandle {
            shared: Arc::clone(&self.shared),
            local_addr: self.local_addr,
        }
    }
}

impl<E> UdpHandle<E> {
    /// The counters.
    pub fn stats(&self) -> UdpStats {
        self.shared.lock().stats
    }

    /// The socket buffer sizes the kernel granted (see [`SOCKET_BUFFER_BYTES`]).
    pub fn socket_buffers(&self) -> SocketBuffers {
        self.shared.buffers
    }

    /// Wake [`wait_until`](Self::wait_until) waiters after a datagram or timeout only when
    /// `filter` (run by the driver, under the endpoint lock, after the endpoint handled it)
    /// returns true — e.g. "a completion channel got an event or a CM event is queued" — so
    /// that traffic the application does not wait for (ACKs) costs it no wake-up. The filter
    /// must return true for every change a waiter's condition depends on. Calls of
    /// [`with`](Self::with) always wake waiters.
    pub fn set_wake_filter(&self, filter: impl FnMut(&E) -> bool + Send + 'static) {
        self.shared.lock().wake_filter = Some(Box::new(filter));
    }

    /// Asks the driver to stop; [`UdpDriver::run`] then returns `Ok(())` and the socket is
    /// closed. The endpoint stays readable through the handle.
    pub fn stop(&self) {
        self.shared.lock().stop_requested = true;
        self.shared.poke();
    }

    /// Whether the driver loop has ended.
    pub fn is_stopped(&self) -> bool {
        self.shared.lock().stopped
    }

    /// The socket's local address (with the port the OS chose if bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The driver's current time (ns since it was created).
    pub fn now(&self) -> SimTime {
        self.shared.now()
    }

    /// The wall-clock instant of [`SimTime::ZERO`] for this driver, to put the times of two
    /// drivers in one process on one axis (`a.epoch().duration_since(b.epoch())`).
    pub fn epoch(&self) -> Instant {
        self.shared.epoch
    }

    /// Runs `f` on the endpoint with the current time (to call its API: connect, send, …),
    /// then wakes the driver so that what the endpoint now wants to send goes out and its new
    /// deadline is honoured. Blocks while the driver is inside an endpoint call. An answer
    /// deferred for the caller's next call (see `standby`) is sent before `f` runs.
    pub fn with<R>(&self, f: impl FnOnce(&mut E, SimTime) -> R) -> R
    where
        E: Endpoint,
    {
        self.call(standby::Deferred::SendFirst, f)
    }

    /// After a handle touched the endpoint: sends what it queued straight from this thread
    /// (spawned drivers), and returns whether the driver must be woken — for a deadline
    /// earlier than the one it sleeps on, or a backlog the socket would not take.
    fn flush(&self, st: &mut State<E>) -> bool
    where
        E: Endpoint,
    {
        match &self.shared.direct {
            Some(socket) => {
                let now = self.shared.now();
                let blocked = !st.backlog.is_empty();
                self.shared.send_queued(st, now, socket);
                let earlier = match (st.endpoint.poll_timeout(), st.armed) {
                    (Some(t), Some(a)) => t < a,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                // (`armed` is `None` only before the loop first ran.)
                earlier || (!blocked && !st.backlog.is_empty())
            }
            None => true,
        }
    }

    /// Runs `f` on the endpoint with the current time, for a call that queues nothing to send
    /// and moves no deadline (e.g. polling a completion queue): no send, no wake-up of the
    /// driver or of waiters. Use [`with`](Self::with) for anything else.
    pub fn with_quiet<R>(&self, f: impl FnOnce(&mut E, SimTime) -> R) -> R {
        let mut st = self.shared.lock();
        f(&mut st.endpoint, self.shared.now())
    }
}

/// Runs one [`Endpoint`] on a tokio UDP socket with the wall clock. See the module docs.
pub struct UdpDriver<E> {
    shared: Arc<Shared<E>>,
    socket: UdpSocket,
    local_addr: SocketAddr,
}

impl<E: Endpoint + Send + 'static> UdpDriver<E> {
    /// Binds a UDP socket on `addr` ([`DEFAULT_BIND`] for the usual RoCEv2 port on loopback,
    /// port 0 for any free port) for `endpoint`. Must be called inside a tokio runtime.
    ///
    /// Errors: those of `bind` (e.g. `EADDRINUSE`).
    pub async fn bind(endpoint: E, addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr).await?;
        UdpDriver::from_socket(endpoint, socket)
    }

    /// A driver for `endpoint` on an already bound tokio socket.
    ///
    /// Errors: the socket has no local address.
    pub fn from_socket(endpoint: E, socket: UdpSocket) -> io::Result<Self> {
        let local_addr = socket.local_addr()?;
        Ok(UdpDriver {
            shared: Shared::new(endpoint, &socket, local_addr, None)?,
            socket,
            local_addr,
        })
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A handle to use the endpoint and stop the driver.
    pub fn handle(&self) -> UdpHandle<E> {
        UdpHandle {
            shared: Arc::clone(&self.shared),
            local_addr: self.local_addr,
        }
    }

    /// Runs `endpoint` on a std socket bound by the caller (e.g. to `127.0.0.1:0`, to learn the
    /// port first), on a new thread with its own current-thread tokio runtime. Works with or
    /// without a runtime on the calling thread.
    ///
    /// Errors: the socket cannot be made non-blocking or has no local address; the thread
    /// cannot be created.
    pub fn spawn(endpoint: E, socket: std::net::UdpSocket) -> io::Result<SpawnedUdpDriver<E>> {
        socket.set_nonblocking(true)?;
        let local_addr = socket.local_addr()?;
        let shared = Shared::new(endpoint, &socket, local_addr, Some(socket.try_clone()?))?;
        let handle = UdpHandle {
            shared: Arc::clone(&shared),
            local_addr,
        };
        let thread = std::thread::Builder::new()
            .name(format!("rnic-udp-{local_addr}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()?;
                runtime.block_on(async move {
                    let socket = UdpSocket::from_std(socket)?;
                    let driver = UdpDriver {
                        shared,
                        socket,
                        local_addr,
                    };
                    driver.run().await
                })
            })?;
        Ok(SpawnedUdpDriver {
            handle,
            thread: Some(thread),
        })
    }

    /// Binds `addr` with a std socket and [`spawn`](Self::spawn)s a driver on it.
    ///
    /// Errors: those of `bind` (e.g. `EADDRINUSE`) and of [`spawn`](Self::spawn).
    pub fn spawn_bind(endpoint: E, addr: SocketAddr) -> io::Result<SpawnedUdpDriver<E>> {
        UdpDriver::spawn(endpoint, std::net::UdpSocket::bind(addr)?)
    }

    /// The driver loop; returns `Ok(())` after [`UdpHandle::stop`].
    ///
    /// Errors: a receive error other than the ICMP-induced `ECONNREFUSED`/`ECONNRESET` (which
    /// are counted and ignored) ends the loop with that error.
    pub async fn run(self) -> io::Result<()> {
        use tracing::Instrument;
        let shared = Arc::clone(&self.shared);
        // What the endpoint logs while the driver runs it (received datagrams, timers) is
        // logged in this span.
        let span = tracing::debug_span!("udp", local = %self.local_addr);
        let result = self.run_loop().instrument(span).await;
        let mut st = shared.lock();
        st.stopped = true;
        tracing::debug!(stats = ?st.stats, error = ?result.as_ref().err(), "UDP driver stopped");
        drop(st);
        shared.notify_changed();
        result
    }

    async fn run_loop(self) -> io::Result<()> {
        let shared = &self.shared;
        let mut recv = RecvBufs::new();
        let mut spin_until: Option<SimTime> = None;
        let mut delivered = false;
        loop {
            if std::mem::take(&mut delivered) {
                self.hold_answer();
            }
            // Send the backlog, then what the endpoint wants to send, and read its deadline
            // (no await under the lock; non-blocking sends keep the order queued).
            let (deadline, blocked, stand_by) = {
                let mut st = shared.lock_driver();
                if st.stop_requested {
                    return Ok(());
                }
                shared.poked.store(false, Ordering::Release);
                let now = shared.now();
                shared.send_queued(&mut st, now, &self.socket);
                // Sleep until the endpoint's deadline, but at most IDLE_TICK: then a handle
                // whose call sets a deadline later than that need not wake the driver.
                let tick = now.plus_nanos(IDLE_TICK.as_nanos() as u64);
                let wake = st.endpoint.poll_timeout().map_or(tick, |d| d.min(tick));
                st.armed = Some(wake);
                let blocked = !st.backlog.is_empty();
                // Decided under the lock, where `progress` reads it (see `standby`).
                let stand_by = !blocked && shared.callers_spinning();
                if stand_by {
                    st.stats.standbys += 1;
                }
                shared.standing_by.store(stand_by, Ordering::Release);
                (wake, blocked, stand_by)
            };

            // While a caller spins on the endpoint and receives for itself, stand by off the
            // socket (see `standby`).
            if stand_by {
                spin_until = None;
                if self.stand_by(deadline) {
                    shared.notify_changed();
                }
                continue;
            }

            // Busy poll: for a moment after traffic, look for the next datagrams without going
            // to sleep (a peer's answer usually comes within a few µs; waking from the
            // kernel's idle state costs more than that).
            if let Some(until) = spin_until {
                match self.spin(&mut recv, until.min(deadline)) {
                    Ok(Some(rx)) => {
                        let wake = self.deliver(&recv);
                        drop(rx);
                        delivered = true;
                        if wake {
                            shared.notify_changed();
                        }
                        spin_until = Some(shared.now().plus_nanos(BUSY_POLL.as_nanos() as u64));
                        continue;
                    }
                    Ok(None) => spin_until = None,
                    Err(e) => return Err(e),
                }
            }
            let wake_at = shared.instant(deadline);
            let visible = |st: &mut State<E>| {
                let State {
                    endpoint,
                    wake_filter,
                    ..
                } = st;
                wake_filter.as_mut().is_none_or(|f| f(endpoint))
            };
            let wake_waiters = tokio::select! {
                r = self.socket.readable() => match r.and_then(|()| {
                    let rx = shared.rx.lock().unwrap_or_else(PoisonError::into_inner);
                    self.socket
                        .try_io(Interest::READABLE, || recv.recv(&shared.udp, &self.socket))
                        .map(|_| rx)
                }) {
                    Ok(rx) => {
                        spin_until = Some(shared.now().plus_nanos(BUSY_POLL.as_nanos() as u64));
                        let wake = self.deliver(&recv);
                        drop(rx);
                        delivered = true;
                        wake
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                    Err(e) if is_icmp_error(&e) => {
                        shared.lock_driver().stats.recv_errors += 1;
                        false
                    }
                    Err(e) => return Err(e),
                },
                () = tokio::time::sleep_until(wake_at) => {
                    let mut st = shared.lock_driver();
                    let now = shared.now();
                    if st.endpoint.poll_timeout().is_some_and(|d| d <= now) {
                        st.endpoint.handle_timeout(now);
                        visible(&mut st)
                    } else {
                        false
                    }
                }
                // A handle already woke the waiters when it touched the endpoint.
                () = shared.wake.notified() => false,
                r = self.socket.writable(), if blocked => {
                    r?;
                    false
                }
            };
            if wake_waiters {
                shared.notify_changed();
            }
        }
    }
}

impl<E: Endpoint> UdpDriver<E> {
    /// Hands every datagram of the last receive to the endpoint — all of them before the
    /// endpoint is asked what to send (the loop's top), so one ACK answers them all. Returns
    /// whether waiters should be woken.
    fn deliver(&self, recv: &RecvBufs) -> bool {
        let mut st = self.shared.lock_driver();
        let now = self.shared.now();
        for (src, d) in recv.datagrams() {
            st.endpoint
                .handle_datagram(now, src, Bytes::copy_from_slice(d));
            st.stats.received += 1;
        }
        st.stats.recv_calls += 1;
        let State {
            endpoint,
            wake_filter,
            ..
        } = &mut *st;
        wake_filter.as_mut().is_none_or(|f| f(endpoint))
    }

    /// Polls the socket without sleeping, yielding the CPU between tries, until datagrams
    /// arrive (`Ok(Some(rx))`, with the receive lock held until they are delivered), or `until`
    /// passes, a handle asks for the driver or callers poll themselves (`Ok(None)`). Reads the
    /// socket directly, not
    /// through tokio (whose readiness only changes when the runtime polls).
    fn spin(&self, recv: &mut RecvBufs, until: SimTime) -> io::Result<Option<MutexGuard<'_, ()>>> {
        let shared = &self.shared;
        while shared.now() < until
            && !shared.poked.load(Ordering::Acquire)
            && !shared.callers_polling()
        {
            let rx = shared.rx.lock().unwrap_or_else(PoisonError::into_inner);
            match recv.recv(&shared.udp, &self.socket) {
                Ok(_) => return Ok(Some(rx)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    drop(rx);
                    std::thread::yield_now();
                }
                Err(e) if is_icmp_error(&e) => shared.lock_driver().stats.recv_errors += 1,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

/// A receive error caused by an ICMP message about an earlier send (a closed port on the peer):
/// UDP semantics say drop and go on.
fn is_icmp_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset
    )
}

/// A [`UdpDriver`] running on its own thread (from [`UdpDriver::spawn`]). Dropping it stops the
/// driver and joins the thread.
pub struct SpawnedUdpDriver<E> {
    handle: UdpHandle<E>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl<E> SpawnedUdpDriver<E> {
    /// The handle (clone it to keep it after [`shutdown`](Self::shutdown)).
    pub fn handle(&self) -> &UdpHandle<E> {
        &self.handle
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.handle.local_addr
    }

    /// Stops the driver and waits for its thread.
    ///
    /// Errors: the error the driver loop ended with, or `Other` if the thread panicked (e.g.
    /// the endpoint panicked).
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> io::Result<()> {
        self.handle.stop();
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("UDP driver thread panicked"))),
            None => Ok(()),
        }
    }
}

impl<E> Drop for SpawnedUdpDriver<E> {
    fn drop(&mut self) {
        // Errors were the caller's to collect with `shutdown`.
        let _ = self.stop_and_join();
    }
}
