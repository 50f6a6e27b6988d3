//! The process's simulated RNIC: one [`Node`] (a [`SimNic`] and the [`RdmaCm`] that drives
//! it, behind a seeded fault layer) on the real-time UDP driver of `rnic-sim`, started the first
//! time the application touches the library, and shared by every thread of the application.
//!
//! The driver's thread is the progress thread: it receives datagrams, runs the transport's and
//! the CM's timers and sends what they queue. Application threads call in through
//! [`Runtime::with`], which locks the node, runs the call with the current time, sends what the
//! call queued from the caller's thread, and tops up the descriptors of channels that got events.
//! Safe code only: raw pointers stay in `ffi`.

mod groups;
mod publish;
pub mod rsocket;
mod signal;
mod stats;

pub use groups::FileGroups;
pub use publish::{parse_supervisor, FdTaker, Publisher, SUPERVISOR_ENV};
pub use signal::{is_nonblocking, try_token, wait_token, Ends, Signal};
pub use stats::Stats;

use crate::config::{Config, ROCE_PORT};
use crate::inject::{Action, Faults, ProgramEvent, Verdict};
use bytes::Bytes;
use cm_core::api::{EventChannel, RdmaCm};
use cm_core::engine::CmConfig;
use rnic_sim::fabric::udp::{
    os_seed, size_socket_buffers, SpawnedUdpDriver, UdpDriver, UdpHandle, SOCKET_BUFFER_BYTES,
};
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::SimNic;
use rnic_sim::rng::Rng;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use verbs_core::{CompChannel, Gid, SimTime};

/// Datagrams the fault layer (`RNIC_DROP_RATE`) dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DropStats {
    /// Outgoing datagrams dropped.
    pub tx: u64,
    /// Incoming datagrams dropped.
    pub rx: u64,
}

/// A completion channel: the device's queue of CQ events and the descriptor the application sees.
#[derive(Debug)]
pub struct CompSignal {
    /// The queue the device reports armed CQs to.
    pub channel: CompChannel,
    /// Its readiness.
    pub signal: Signal,
}

/// The simulated host of this process. See the module docs.
#[derive(Debug)]
pub struct Node {
    nic: SimNic,
    cm: RdmaCm,
    drop_ppm: u64,
    rng: Rng,
    drops: DropStats,
    /// Completion channels by the number the library gave them.
    pub comp: BTreeMap<u32, CompSignal>,
    /// Event channels' readiness.
    pub cm_signals: BTreeMap<EventChannel, Signal>,
    /// Channels whose readiness is held back until the time given (address and route
    /// resolution in progress, [`Node::resolving`]).
    held: BTreeMap<EventChannel, SimTime>,
    /// How long address and route resolution take ([`Config::resolve_us`]).
    resolve_ns: u64,
    next_comp: u32,
    /// Readiness of the device's async events (`ibv_get_async_event`): one for the process,
    /// as there is one device, whose queue of async events every context shares
    /// ([`Runtime::async_fd`]).
    async_signal: Signal,
    /// When the device is to be removed (`RNIC_REMOVE_DEVICE_MS`), until it is.
    remove_at: Option<SimTime>,
    /// Under `rnic exec`: where the connections are published (`publish.rs`).
    publisher: Option<Publisher>,
    /// The rsocket layer (`<rdma/rsocket.h>`), moved on after every step.
    rsockets: rsocket::Rsockets,
    /// The seeded faults (`RNIC_FAULTS`).
    faults: Faults,
}

impl Node {
    /// The device and the CM at once, for the rdma_cm calls that take the device.
    pub fn split(&mut self) -> (&mut RdmaCm, &mut SimDevice) {
        (&mut self.cm, self.nic.device_mut())
    }

    /// The device.
    pub fn dev(&mut self) -> &mut SimDevice {
        self.nic.device_mut()
    }

    /// The device, read-only.
    pub fn device(&self) -> &SimDevice {
        self.nic.device()
    }

    /// The CM, read-only.
    pub fn cm(&self) -> &RdmaCm {
        &self.cm
    }

    /// The rsocket layer with the CM and the device it runs on.
    pub fn rsockets(&mut self) -> (&mut rsocket::Rsockets, &mut RdmaCm, &mut SimDevice) {
        (&mut self.rsockets, &mut self.cm, self.nic.device_mut())
    }

    /// Registers a completion channel and returns its number.
    ///
    /// # Errors
    /// The descriptor pair could not be made.
    pub fn add_comp_channel(&mut self) -> io::Result<(u32, &CompSignal)> {
        let n = self.next_comp;
        self.next_comp += 1;
        let cs = CompSignal {
            channel: CompChannel::new(),
            signal: Signal::new()?,
        };
        Ok((n, self.comp.entry(n).or_insert(cs)))
    }

    /// A reader consumed one token of the async events' descriptor.
    pub fn async_claimed(&mut self) {
        self.async_signal.claimed();
    }

    /// `rdma_resolve_addr`/`rdma_resolve_route` on `ch` just queued their event: Linux runs
    /// both resolutions on work queues (`addr_wq`, `cma_wq`), so the event reaches the
    /// application later, not within the call. The channel's readiness is held back for the
    /// resolution time (`RNIC_RESOLVE_US`). This matters to programs that race a peer's
    /// `rdma_listen` against their own connect, such as perftest `-R`.
    pub fn resolving(&mut self, ch: EventChannel, now: SimTime) {
        if self.resolve_ns > 0 {
            self.held.insert(ch, now.plus_nanos(self.resolve_ns));
        }
    }

    /// Sets every channel's descriptor to the number of events queued on it, and publishes the
    /// connections that changed (under `rnic exec`): called after each step of the node (driver
    /// input or application call).
    pub fn signal(&mut self, now: SimTime) {
        if !self.rsockets.unused() {
            let dev = self.nic.device_mut();
            self.rsockets.progress(&mut self.cm, dev, now);
        }
        for cs in self.comp.values_mut() {
            cs.signal.raise_to(cs.channel.len() as u64);
        }
        self.async_signal
            .raise_to(self.nic.device().pending_async_events() as u64);
        self.held.retain(|_, until| *until > now);
        for (ch, s) in &mut self.cm_signals {
            if !self.held.contains_key(ch) {
                s.raise_to(self.cm.pending_events(*ch) as u64);
            }
        }
        self.publish();
    }

    /// Removes the device as a hot-unplug does: the device raises `IBV_EVENT_DEVICE_FATAL`,
    /// flushes its QPs and answers EIO from then on; every rdma_cm id on it gets
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL` (docs/cm-semantics.md, "Device removal and address
    /// change").
    fn remove_device(&mut self) {
        self.remove_at = None;
        let (cm, dev) = self.split();
        dev.remove();
        let ids = cm.device_removal();
        tracing::info!(ids = ids.len(), "device removed (RNIC_REMOVE_DEVICE_MS)");
    }

    /// Carries out what a fault asks but a kill, which is left to the caller (returns whether
    /// to kill): it kills once the connections are published for rnic exec's teardown
    /// ([`Node::signal`]).
    fn act(&mut self, actions: Vec<Action>) -> bool {
        let mut kill = false;
        for a in actions {
            match a {
                Action::Remove => self.remove_device(),
                Action::Kill => kill = true,
            }
        }
        kill
    }

    /// Receives one datagram, past the fault layer.
    fn receive(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        // Decoded first, then admitted by its socket (`rnic_sim::peers`, as the testbed's
        // `Host` does): a peer on a port other than 4791 (an `rnic ping` process) is answered
        // where it sent from only once the CM accepted a MAD from it there, and a route a live
        // QP or CM id uses never moves.
        let cm = &self.cm;
        self.nic.receive(now, src, bytes, &|g| cm.peer_in_use(g));
        match self.nic.candidate() {
            None => self.poll_gsi(now),
            Some(gid) => {
                let mut accepted = false;
                let (cm, dev) = self.split();
                cm.poll_gsi_with(dev, now, &mut |peer, ok| accepted |= ok && peer == gid);
                let cm = &self.cm;
                self.nic.settle_candidate(accepted, &|g| cm.peer_in_use(g));
            }
        }
    }

    fn lose(&mut self) -> bool {
        self.drop_ppm > 0 && self.rng.below(1_000_000) < self.drop_ppm
    }

    fn poll_gsi(&mut self, now: SimTime) {
        let (cm, dev) = self.split();
        cm.poll_gsi(dev, now);
    }
}

impl Endpoint for Node {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        if self.lose() {
            self.drops.rx += 1;
            return;
        }
        if !self.faults.is_empty() {
            match self.faults.datagram(now, true, &bytes) {
                Verdict::Pass => {}
                Verdict::Drop => return,
                Verdict::Duplicate => self.receive(now, src, bytes.clone()),
                Verdict::DelayUntil(t) => return self.faults.hold(t, true, src, bytes),
            }
        }
        self.receive(now, src, bytes);
        self.signal(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        // Held-back datagrams first: they passed the fault layer already.
        while let Some((incoming, peer, b)) = self.faults.take_due(now) {
            if !incoming {
                return Some((peer, b));
            }
            self.receive(now, peer, b);
        }
        loop {
            let Some(t) = Endpoint::poll_transmit(&mut self.nic, now) else {
                // The send step makes completions too (a UD SEND completes when its datagram
                // leaves): raise the channels once it is over, as after every other step.
                self.signal(now);
                return None;
            };
            if self.lose() {
                self.drops.tx += 1;
                continue;
            }
            if self.faults.is_empty() {
                return Some(t);
            }
            match self.faults.datagram(now, false, &t.1) {
                Verdict::Pass => return Some(t),
                Verdict::Drop => {}
                Verdict::Duplicate => {
                    self.faults.hold(now, false, t.0, t.1.clone());
                    return Some(t);
                }
                Verdict::DelayUntil(due) => self.faults.hold(due, false, t.0, t.1),
            }
        }
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        [
            Endpoint::poll_timeout(&self.nic),
            self.cm.poll_timeout(),
            self.held.values().min().copied(),
            self.remove_at,
            self.faults.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: SimTime) {
        if Endpoint::poll_timeout(&self.nic).is_some_and(|t| t <= now) {
            Endpoint::handle_timeout(&mut self.nic, now);
        }
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            let (cm, dev) = self.split();
            cm.handle_timeout(dev, now);
        }
        if self.remove_at.is_some_and(|t| t <= now) {
            self.remove_device();
        }
        // Held-back datagrams due now go in and out from poll_transmit, which the driver calls
        // after every step.
        let mut kill = false;
        if self.faults.poll_timeout().is_some_and(|t| t <= now) {
            let actions = self.faults.handle_timeout(now);
            kill = self.act(actions);
        }
        self.poll_gsi(now);
        self.signal(now);
        if kill {
            // After `signal`, which published the connections for rnic exec's teardown.
            kill_by_fault();
        }
    }

    fn addr(&self) -> SocketAddr {
        Endpoint::addr(&self.nic)
    }
}

/// The process's RNIC and its progress thread. See the module docs.
pub struct Runtime {
    _driver: SpawnedUdpDriver<Node>,
    handle: UdpHandle<Node>,
    config: Config,
    addr: SocketAddr,
    /// Signalled on every `rdma_ack_cm_event`, for `rdma_destroy_id`'s wait.
    acked: (Mutex<u64>, Condvar),
    /// The node's async event descriptor pair ([`Runtime::async_fd`]).
    async_ends: Arc<Ends>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("addr", &self.addr).finish()
    }
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The process's runtime, started on first use (reads the environment, binds the socket,
/// starts the progress thread, installs the `RUST_LOG` subscriber).
///
/// # Errors
/// Why it could not start (bad variable, address not bindable), the same message every call;
/// it was also printed once on stderr.
pub fn runtime() -> Result<&'static Runtime, &'static str> {
    runtime_or_start(|| Config::from_env().map_err(|e| e.to_string()), None)
}

/// As [`runtime`], taking the socket and state file `rnic exec` gave this process, if it did
/// (`publish.rs`; `take_fd` owns an inherited descriptor).
///
/// # Errors
/// As [`runtime`].
pub fn runtime_inheriting(take_fd: FdTaker) -> Result<&'static Runtime, &'static str> {
    runtime_or_start(
        || Config::from_env().map_err(|e| e.to_string()),
        Some(take_fd),
    )
}

/// The process's runtime, started with `config` instead of the environment if it is not
/// running yet: for a Rust program (a test, the fuzzer) that calls the C entry points in
/// process ([`crate::calls`]) and must not depend on, or change, its environment. When the
/// runtime is already running, it is returned as it is: compare [`Runtime::config`] with what
/// was asked for.
///
/// # Errors
/// As [`runtime`].
pub fn runtime_with(config: Config) -> Result<&'static Runtime, &'static str> {
    runtime_or_start(|| Ok(config), None)
}

thread_local! {
    /// This thread is starting the runtime ([`starting_here`]).
    static STARTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is inside the runtime's start. Its `socket(2)` call may come back into
/// the library through an interposer (rdma-core's librspreload turns it into `rsocket`), which
/// must then decline instead of waiting for the start it is part of.
pub fn starting_here() -> bool {
    STARTING.with(|s| s.get())
}

fn runtime_or_start(
    config: impl FnOnce() -> Result<Config, String>,
    take_fd: Option<FdTaker>,
) -> Result<&'static Runtime, &'static str> {
    RUNTIME
        .get_or_init(|| {
            init_logging();
            STARTING.with(|s| s.set(true));
            let r = config().and_then(|c| Runtime::start(c, take_fd));
            STARTING.with(|s| s.set(false));
            if let Err(e) = &r {
                eprintln!("librnic: {e}");
            }
            r
        })
        .as_ref()
        .map_err(String::as_str)
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Another subscriber (the application's own, if it is Rust) wins.
    // Colours only for a terminal: a redirected stderr gets plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&io::stderr()))
        .try_init();
}

/// [`Rng::fork`] label of the device's seed ("dev"): the CM takes the process's seed as it
/// is, the simulated RNIC (QPNs, keys, MR addresses) a fork of it.
const DEVICE_SEED_STREAM: u64 = 0x0064_6576;

/// The device's `max_cqe`: mlx5's (ConnectX-5 and later report 2^22 − 1), not rxe's 32 767,
/// because libfabric's `ofi_rxm` asks for a CQ of (MSG rx size + tx size) × `FI_UNIVERSE_SIZE`
/// entries, 65 536 with its defaults (`rxm_ep_msg_cq_open`). A CQ's entries are allocated as
/// completions arrive, never up front, so the limit costs nothing.
const MAX_CQE: u32 = (1 << 22) - 1;

impl Runtime {
    fn start(config: Config, take_fd: Option<FdTaker>) -> Result<Runtime, String> {
        let (socket, state) = match take_fd.and_then(|t| publish::inherited(&config, t)) {
            Some((socket, state)) => (socket, Some(state)),
            None => (bind(&config)?, None),
        };
        let addr = socket
            .local_addr()
            .map_err(|e| format!("socket has no address: {e}"))?;
        let seed = config.seed.unwrap_or_else(os_seed);
        let gid = Gid::from_ip(addr.ip());
        let mut dcfg = SimDeviceConfig::new(config.device.clone(), gid);
        dcfg.active_mtu = config.mtu;
        dcfg.seed = Rng::new(seed).fork(DEVICE_SEED_STREAM).key();
        dcfg.poison_undefined_wc_fields = config.poison_wc;
        dcfg.max_cqe = MAX_CQE;
        // Each QP's burst fits the receive buffer the kernel grants (the driver would size it
        // too; sizing it first gives the window).
        dcfg.max_unacked_bytes =
            size_socket_buffers(&socket, SOCKET_BUFFER_BYTES).rc_window_bytes();
        let dev = SimDevice::new(dcfg);
        let mut cm_cfg = CmConfig {
            ca_guid: dev.config().node_guid,
            seed,
            path_mtu: config.mtu,
            ..CmConfig::default()
        };
        if config.fast_timers {
            cm_cfg = cm_cfg.with_fast_timers();
        }
        let mut cm = RdmaCm::new(&dev, cm_cfg).map_err(|e| format!("connection manager: {e}"))?;
        let publisher = match state {
            Some(file) => {
                cm.track_conn_changes(true);
                let owner = crate::state_file::Owner {
                    pid: std::process::id(),
                    addr,
                    local_gid: gid,
                    cm: cm_cfg,
                    unpublished: 0,
                    device_removed: false,
                };
                Some(
                    Publisher::new(file, owner)
                        .map_err(|e| format!("cannot write rnic exec's state file: {e}"))?,
                )
            }
            None => None,
        };
        let async_signal =
            Signal::new().map_err(|e| format!("cannot make the async event descriptor: {e}"))?;
        let async_ends = async_signal.ends();
        let mut nic = SimNic::new(dev, addr);
        // Multicast groups shared with the other processes' RNICs (groups.rs).
        nic.set_group_directory(Box::new(FileGroups::from_env()));
        let node = Node {
            nic,
            cm,
            drop_ppm: (config.drop_rate * 1e6).round() as u64,
            rng: Rng::new(seed ^ 0x6472_6f70), // "drop": its own stream
            drops: DropStats::default(),
            comp: BTreeMap::new(),
            cm_signals: BTreeMap::new(),
            held: BTreeMap::new(),
            resolve_ns: config.resolve_us.saturating_mul(1000),
            next_comp: 1,
            async_signal,
            remove_at: config
                .remove_device_ms
                .map(|ms| SimTime::from_nanos(ms.saturating_mul(1_000_000))),
            publisher,
            rsockets: rsocket::Rsockets::default(),
            faults: Faults::new(config.faults.clone(), seed),
        };
        let driver = UdpDriver::spawn(node, socket)
            .map_err(|e| format!("cannot start the progress thread: {e}"))?;
        let handle = driver.handle().clone();
        // Application threads wait on channel descriptors, not on the driver's condvar.
        handle.set_wake_filter(|_| false);
        tracing::info!(%addr, device = %config.device, "simulated RNIC up");
        Ok(Runtime {
            _driver: driver,
            handle,
            config,
            addr,
            acked: (Mutex::new(0), Condvar::new()),
            async_ends,
        })
    }

    /// A new descriptor on the device's async events, for one context's `async_fd`: readable
    /// exactly while the device has an async event queued. Every context's descriptor is a
    /// duplicate of the same socket (one device, one queue): an event goes to whichever context
    /// reads it first, and `O_NONBLOCK` set on one context's `async_fd` applies to all. Takes
    /// no lock: contexts are opened from inside other calls (rdma_cm's `id->verbs`).
    ///
    /// # Errors
    /// What `fcntl(F_DUPFD_CLOEXEC)` returns (e.g. `EMFILE`).
    pub fn async_fd(&self) -> io::Result<OwnedFd> {
        self.async_ends.dup_app()
    }

    /// The async events' descriptor pair, to wait on outside the node lock.
    pub fn async_ends(&self) -> &Arc<Ends> {
        &self.async_ends
    }

    /// Runs `f` on the node with the current time, sends what it queued and raises the
    /// channels' descriptors.
    pub fn with<R>(&self, f: impl FnOnce(&mut Node, SimTime) -> R) -> R {
        self.handle.with(|node, now| {
            let r = f(node, now);
            node.signal(now);
            r
        })
    }

    /// [`with`](Self::with) for a call that posts send work requests: what it queues leaves
    /// before the answer a spinning caller's last receive queued ([`UdpHandle::with_send`]).
    pub fn with_send<R>(&self, f: impl FnOnce(&mut Node, SimTime) -> R) -> R {
        self.handle.with_send(|node, now| {
            let r = f(node, now);
            node.signal(now);
            r
        })
    }

    /// [`with`](Self::with) for a call that queues no datagram of its own (posting receive
    /// WRs): what a spinning caller's last receive queued in answer keeps waiting for the call
    /// that sends ([`UdpHandle::with_local`]).
    pub fn with_local<R>(&self, f: impl FnOnce(&mut Node, SimTime) -> R) -> R {
        self.handle.with_local(|node, now| {
            let r = f(node, now);
            node.signal(now);
            r
        })
    }

    /// Runs `f` on the node for a call that queues no datagram and no event (polling or arming
    /// a CQ, queries): nothing is sent, no channel is signalled, the progress thread is not woken.
    pub fn with_quiet<R>(&self, f: impl FnOnce(&mut Node, SimTime) -> R) -> R {
        self.handle.with_quiet(f)
    }

    /// Receives and delivers, from the calling thread, the datagrams waiting on the socket
    /// (rnic-sim's `UdpHandle::progress`), so that a thread that polls an empty CQ, or a
    /// non-blocking channel, gets its peer's answer without waiting for the progress thread
    /// to be scheduled. Returns whether any datagram came.
    pub fn progress(&self) -> bool {
        self.handle.progress()
    }

    /// [`wait_token`] on a channel's descriptor (`ibv_get_cq_event`, `rdma_get_cm_event`): when
    /// it is empty, first [`progress`](Self::progress) and look once more; then, on a blocking
    /// descriptor, tell the driver that this thread stops polling
    /// ([`UdpHandle::caller_sleeps`]) and wait.
    ///
    /// # Errors
    /// As [`wait_token`].
    pub fn wait_token_or_progress(&self, ends: &Ends) -> io::Result<()> {
        let empty =
            |r: &io::Result<()>| matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        let r = try_token(ends);
        if !empty(&r) {
            return r;
        }
        if self.progress() {
            let r = try_token(ends);
            if !empty(&r) {
                return r;
            }
        }
        if is_nonblocking(ends) {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        self.caller_sleeps();
        wait_token(ends)
    }

    /// Tells the driver that the calling thread stops polling — it is about to block on a
    /// descriptor, or arms a CQ — so that it listens on the socket again at once
    /// ([`UdpHandle::caller_sleeps`]).
    pub fn caller_sleeps(&self) {
        self.handle.caller_sleeps();
    }

    /// The socket address of this RNIC (its GID's IP, port 4791).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every counter of this RNIC: UDP socket, datagram codec, routes, transport (drops by
    /// reason, ACKs, NAKs, retries), CM MADs, fault-layer drops, rsockets.
    pub fn stats(&self) -> Stats {
        let udp = self.handle.stats();
        self.with_quiet(|n, now| Stats {
            librnic: self.addr.to_string(),
            t_s: now.as_nanos() as f64 / 1e9,
            udp,
            datagrams: n.nic.datagram_counters(),
            routes: n.nic.peers().counters(),
            transport: n.device().counters(),
            cm: *n.cm.counters(),
            fault_drops: n.drops,
            rsockets: n.rsockets.stats(),
        })
    }

    /// Tells the faults of a program event (an event returned, completions polled) and carries
    /// out what fires; a SIGKILL does not return. Cheap when no fault waits for one.
    pub fn program_event(&self, ev: ProgramEvent) {
        if !crate::inject::watching() {
            return;
        }
        let kill = self.with(|n, now| {
            let actions = n.faults.program_event(now, ev);
            n.act(actions)
        });
        if kill {
            kill_by_fault();
        }
    }

    /// At most how many completions a poll may take now: `max`, or fewer when a
    /// `kill`/`remove`/`silence` fault is due after a number of completions (it then fires
    /// after exactly that one, whatever batch the program polls in).
    pub fn completion_cap(&self, max: usize) -> usize {
        if !crate::inject::watching() {
            return max;
        }
        let left = self.with(|n, _| n.faults.completions_until_shot());
        left.map_or(max, |l| max.min(usize::try_from(l).unwrap_or(usize::MAX)))
    }

    /// Records an `rdma_ack_cm_event` and wakes `rdma_destroy_id` waiters.
    pub fn note_ack(&self) {
        let mut n = self.acked.0.lock().unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        self.acked.1.notify_all();
    }

    /// Blocks until `done()` holds, re-checking after every ack (librdmacm's
    /// `rdma_destroy_id` waits for every event it returned to be acked).
    pub fn wait_for_acks(&self, mut done: impl FnMut() -> bool) {
        let mut n = self.acked.0.lock().unwrap_or_else(PoisonError::into_inner);
        while !done() {
            let seen = *n;
            while *n == seen {
                n = self.acked.1.wait(n).unwrap_or_else(PoisonError::into_inner);
            }
        }
    }
}

/// The address after `ip` (127.0.0.1 → 127.0.0.2), for a hint.
fn next_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(u32::from(v4).wrapping_add(1).into()),
        IpAddr::V6(v6) => IpAddr::V6(u128::from(v6).wrapping_add(1).into()),
    }
}

/// Binds the RNIC's UDP socket: `RNIC_ADDR` (any error is final), or the first loopback
/// address whose port is free. (`rnic exec` binds with it too.)
///
/// # Errors
/// The message to print: the address and why it cannot be bound.
pub fn bind(config: &Config) -> Result<UdpSocket, String> {
    let mut last = String::new();
    for ip in config.candidate_addrs() {
        let addr = SocketAddr::new(ip, ROCE_PORT);
        match UdpSocket::bind(addr) {
            Ok(s) => return Ok(s),
            Err(e) if config.addr.is_none() && e.kind() == io::ErrorKind::AddrInUse => {
                last = format!("{addr}: {e}");
            }
            Err(e) => {
                let hint = match e.kind() {
                    io::ErrorKind::AddrInUse => format!(
                        " (another simulated RNIC uses it: give each process its own \
                         RNIC_ADDR, e.g. {})",
                        next_ip(ip)
                    ),
                    io::ErrorKind::AddrNotAvailable => " (not an address of this host)".into(),
                    _ => String::new(),
                };
                return Err(format!("cannot bind RNIC_ADDR {addr}: {e}{hint}"));
            }
        }
    }
    Err(format!(
        "no free loopback address for the simulated RNIC (port {} taken on 127.0.0.1 … 127.0.0.254; last: {last}); set RNIC_ADDR",
        ROCE_PORT
    ))
}

/// What a `kill:` fault does: the checker, when on, writes its report first (a `kill -9` from
/// outside leaves no time for it, a fault of our own does), then SIGKILL, as `kill -9`.
fn kill_by_fault() {
    let _ = crate::check::finish(crate::check::Exit::Signal(libc::SIGKILL));
    crate::inject::sigkill_self();
}
