//! The rsocket layer of the process's simulated host: stream sockets (`<rdma/rsocket.h>`) on
//! rdma_cm ids and RC QPs of this process's RNIC, kept in the [`Node`](super::Node) as a
//! kernel keeps TCP sockets.
//!
//! Like a kernel's sockets, rsockets make progress without the application: after every step
//! of the node (a datagram, a timer, an application call) [`Rsockets::progress`] reads the
//! layer's own rdma_cm event channel (address and route resolution, connection requests,
//! which a listener accepts by itself as rsocket.c's listen thread does, ESTABLISHED,
//! DISCONNECTED) and the completion channel of its CQs (data, credits, control messages), and
//! posts what credits now allow. The application's calls ([`api`]) only copy bytes in and out
//! and wait.
//!
//! **Numbers.** An rsocket's number is a real descriptor the library owns, as rsocket.c's is
//! (the fd of the id's private event channel there): here the read end of a socket pair that
//! is readable exactly while the rsocket would report `POLLIN`, `POLLHUP` or `POLLERR`. A
//! second pair is readable while it would report `POLLOUT`, `POLLHUP` or `POLLERR`. Being open
//! descriptors, the numbers cannot collide with any other descriptor of the process, and
//! `rpoll` waits for a mix of rsockets and other descriptors with one `ppoll`. A socket the
//! application has not accepted yet has no number.
//!
//! Files: [`wire`] (the protocol), `conn` (a connection's resources and data path),
//! [`options`] (socket options), `events` (what the CM and the CQs report), this file (the
//! table and the calls on one socket under the node's lock), [`api`] (the blocking calls and
//! `rpoll`, on the runtime).

pub mod api;
mod conn;
mod events;
pub mod options;
pub mod wire;

use super::signal::{Ends, Signal};
use cm_core::api::{CmIdHandle, EventChannel, RdmaCm, RdmaCmState};
use cm_core::wire::RdmaPortSpace;
use conn::Conn;
use options::Options;
use rnic_sim::{ExternalMemory, SimDevice};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::Arc;
use verbs_core::{CompChannel, CqHandle, Device, PdHandle, SimTime};
use wire::Ctrl;

/// An rsocket's key in the table (its number may change hands: see the module docs).
pub type Handle = u32;

/// Where an rsocket is in its life (rsocket.c's `enum rs_state`, flattened; readable and
/// writable are flags of [`Rsocket`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Made (`rs_init`).
    Idle,
    /// `rbind` done (`rs_bound`).
    Bound,
    /// `rlisten` done (`rs_listening`).
    Listening,
    /// `rconnect` under way: resolving, then REQ sent (`rs_resolving_*`, `rs_connecting`).
    Connecting,
    /// A listener's new connection: REP sent, ESTABLISHED not yet (`rs_accepting`).
    Accepting,
    /// Connected (`rs_connected`), possibly shut down one way.
    Connected,
    /// `rconnect` failed (`rs_connect_error`); `SO_ERROR` says why.
    ConnectError,
    /// The peer or this side closed the connection (`rs_disconnected`).
    Disconnected,
    /// The transport failed (`rs_error`).
    Error,
}

/// A listener's connections.
#[derive(Debug, Default)]
struct Listener {
    /// ESTABLISHED, not taken by `raccept` yet, oldest first.
    queue: VecDeque<Handle>,
    /// REP sent, ESTABLISHED not yet.
    pending: BTreeSet<Handle>,
    /// At most this many in `queue` and `pending` together (backlog + 1, as Linux).
    limit: usize,
}

/// One rsocket.
#[derive(Debug)]
pub struct Rsocket {
    fd: Option<RawFd>,
    /// Readiness descriptors: (`POLLIN`|`POLLHUP`|`POLLERR`, `POLLOUT`|`POLLHUP`|`POLLERR`).
    sig: Option<(Signal, Signal)>,
    /// Made with `AF_INET6`: addresses are reported IPv6 (IPv4-mapped).
    v6: bool,
    id: Option<CmIdHandle>,
    phase: Phase,
    readable: bool,
    writable: bool,
    /// `SO_ERROR`.
    err: i32,
    /// `F_GETFL` flags (`O_NONBLOCK` is what matters).
    fd_flags: i32,
    opts: Options,
    conn: Option<Conn>,
    listener: Option<Listener>,
    /// The listener of a connection not accepted yet.
    parent: Option<Handle>,
}

impl Rsocket {
    fn new(v6: bool, id: CmIdHandle, opts: Options) -> Rsocket {
        Rsocket {
            fd: None,
            sig: None,
            v6,
            id: Some(id),
            phase: Phase::Idle,
            readable: false,
            writable: false,
            err: 0,
            fd_flags: 0,
            opts,
            conn: None,
            listener: None,
            parent: None,
        }
    }

    /// What `rpoll` reports (rsocket.c `rs_poll_rs`), for every event asked or not.
    fn mask(&self) -> i16 {
        use libc::{POLLERR, POLLHUP, POLLIN, POLLOUT};
        match self.phase {
            Phase::Connected | Phase::Disconnected | Phase::Error => {
                let Some(c) = &self.conn else {
                    return POLLERR;
                };
                let mut m = 0;
                if c.has_data() || !self.readable {
                    m |= POLLIN;
                }
                let out = if self.writable {
                    c.can_write()
                } else {
                    c.drained()
                };
                if out {
                    m |= POLLOUT;
                }
                match self.phase {
                    // rsocket.c reports POLLHUP as soon as the peer's DISCONNECT arrives, even
                    // with data still to read, which makes `rstream -T a` fail its last
                    // transfers; here (as TCP) only once the data is read.
                    Phase::Disconnected if !c.has_data() => m | POLLHUP,
                    Phase::Error => m | POLLERR,
                    _ => m,
                }
            }
            Phase::Listening => match &self.listener {
                Some(l) if !l.queue.is_empty() => POLLIN,
                _ => 0,
            },
            Phase::ConnectError => POLLIN | POLLOUT | POLLERR,
            Phase::Idle | Phase::Bound | Phase::Connecting | Phase::Accepting => 0,
        }
    }

    /// Raises or withdraws the readiness descriptors' tokens to match [`Rsocket::mask`].
    fn refresh(&mut self) {
        let m = self.mask();
        if let Some((rd, wr)) = &mut self.sig {
            let any = |bits: i16| u64::from(m & (bits | libc::POLLHUP | libc::POLLERR) != 0);
            rd.raise_to(any(libc::POLLIN));
            wr.raise_to(any(libc::POLLOUT));
        }
    }

    /// `O_NONBLOCK` is set.
    pub fn nonblocking(&self) -> bool {
        self.fd_flags & libc::O_NONBLOCK != 0
    }

    /// The connection's phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }
}

/// Counters of the layer (`RNIC_STATS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RsocketStats {
    /// Connection requests refused: not an rsocket of librnic, listener gone or full, no
    /// resources.
    pub refused: u64,
    /// Malformed messages from peers, dropped.
    pub bad_messages: u64,
}

/// Every rsocket of the process and the layer's shared resources. See the module docs.
#[derive(Debug, Default)]
pub struct Rsockets {
    next: Handle,
    socks: BTreeMap<Handle, Rsocket>,
    by_fd: BTreeMap<RawFd, Handle>,
    by_id: BTreeMap<CmIdHandle, Handle>,
    by_cq: BTreeMap<CqHandle, Handle>,
    /// The layer's event channel (made with the first rsocket).
    channel: Option<EventChannel>,
    /// Where the CQs of every connection report.
    comp: CompChannel,
    pd: Option<PdHandle>,
    /// Sockets whose readiness may have changed since the last refresh.
    dirty: BTreeSet<Handle>,
    stats: RsocketStats,
}

/// The errno of an rdma_cm or verbs error.
fn errno(e: &verbs_core::Error) -> i32 {
    e.errno.code()
}

/// An address as a socket of family `v6` reports it.
fn in_family(a: SocketAddr, v6: bool) -> SocketAddr {
    match (a.ip(), v6) {
        (IpAddr::V4(ip), true) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), a.port()),
        _ => a,
    }
}

/// An address as the CM takes it (IPv4-mapped IPv6 as IPv4).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The shape of `SHUT_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// `SHUT_RD`.
    Read,
    /// `SHUT_WR`.
    Write,
    /// `SHUT_RDWR`.
    Both,
}

impl Rsockets {
    /// Whether no rsocket was ever made (the node's steps then skip the layer).
    pub fn unused(&self) -> bool {
        self.channel.is_none()
    }

    /// The counters.
    pub fn stats(&self) -> RsocketStats {
        self.stats
    }

    fn handle(&self, fd: RawFd) -> Result<Handle, i32> {
        self.by_fd.get(&fd).copied().ok_or(libc::EBADF)
    }

    fn sock(&mut self, fd: RawFd) -> Result<(Handle, &mut Rsocket), i32> {
        let h = self.handle(fd)?;
        self.dirty.insert(h);
        let s = self.socks.get_mut(&h).ok_or(libc::EBADF)?;
        Ok((h, s))
    }

    /// Whether `fd` is an rsocket.
    pub fn contains(&self, fd: RawFd) -> bool {
        self.by_fd.contains_key(&fd)
    }

    /// The readiness descriptors of `fd` (read side, write side), to wait on outside the lock.
    ///
    /// # Errors
    /// `EBADF` for a number that is not an rsocket.
    pub fn ends(&self, fd: RawFd) -> Result<(Arc<Ends>, Arc<Ends>), i32> {
        let h = self.handle(fd)?;
        self.socks
            .get(&h)
            .and_then(|s| s.sig.as_ref())
            .map(|(rd, wr)| (rd.ends(), wr.ends()))
            .ok_or(libc::EBADF)
    }

    /// What `rpoll` reports for `fd` (every event), or `None` if it is not an rsocket.
    pub fn poll_mask(&self, fd: RawFd) -> Option<i16> {
        let h = self.by_fd.get(&fd)?;
        self.socks.get(h).map(Rsocket::mask)
    }

    /// The socket `fd`.
    ///
    /// # Errors
    /// `EBADF`.
    pub fn get(&self, fd: RawFd) -> Result<&Rsocket, i32> {
        let h = self.handle(fd)?;
        self.socks.get(&h).ok_or(libc::EBADF)
    }

    /// `rsocket(domain, SOCK_STREAM, 0)`: a new socket with an rdma_cm id (`RDMA_PS_TCP`) on the
    /// layer's channel, numbered by `sig`'s read descriptor.
    ///
    /// # Errors
    /// What `alloc_pd` returns.
    pub fn create(
        &mut self,
        cm: &mut RdmaCm,
        dev: &mut SimDevice,
        v6: bool,
        fd_flags: i32,
        sig: (Signal, Signal),
    ) -> Result<RawFd, i32> {
        let ch = *self
            .channel
            .get_or_insert_with(|| cm.create_event_channel());
        if self.pd.is_none() {
            self.pd = Some(dev.alloc_pd().map_err(|e| errno(&e))?);
        }
        let id = cm
            .create_id(ch, RdmaPortSpace::Tcp)
            .map_err(|e| errno(&e))?;
        let mut s = Rsocket::new(v6, id, Options::default());
        s.fd_flags = fd_flags;
        let h = self.insert(s);
        Ok(self.attach(h, sig))
    }

    fn insert(&mut self, s: Rsocket) -> Handle {
        let h = self.next;
        self.next = self.next.wrapping_add(1);
        if let Some(id) = s.id {
            self.by_id.insert(id, h);
        }
        if let Some(c) = &s.conn {
            self.by_cq.insert(c.cq(), h);
        }
        self.socks.insert(h, s);
        self.dirty.insert(h);
        h
    }

    /// Gives socket `h` its number (its readiness descriptors).
    fn attach(&mut self, h: Handle, sig: (Signal, Signal)) -> RawFd {
        let fd = sig.0.raw_fd();
        if let Some(s) = self.socks.get_mut(&h) {
            s.fd = Some(fd);
            s.sig = Some(sig);
            self.by_fd.insert(fd, h);
            self.dirty.insert(h);
        }
        fd
    }

    /// `rbind`.
    ///
    /// # Errors
    /// `EBADF`; the CM's (`EINVAL` unless unbound, `EADDRNOTAVAIL`, `EADDRINUSE`).
    pub fn bind(&mut self, cm: &mut RdmaCm, fd: RawFd, addr: SocketAddr) -> Result<(), i32> {
        let (_, s) = self.sock(fd)?;
        let id = s.id.ok_or(libc::EINVAL)?;
        cm.bind_addr(id, canonical(addr)).map_err(|e| errno(&e))?;
        s.phase = Phase::Bound;
        Ok(())
    }

    /// `rlisten`: 0 when listening already, as rsocket.c.
    ///
    /// # Errors
    /// `EBADF`; the CM's (`EINVAL` when connecting or connected).
    pub fn listen(&mut self, cm: &mut RdmaCm, fd: RawFd, backlog: i32) -> Result<(), i32> {
        let (_, s) = self.sock(fd)?;
        if s.phase == Phase::Listening {
            return Ok(());
        }
        let id = s.id.ok_or(libc::EINVAL)?;
        // Linux: a negative backlog is somaxconn; at most somaxconn (4096).
        let backlog = if backlog < 0 { 4096 } else { backlog.min(4096) } as u32;
        cm.listen(id, backlog).map_err(|e| errno(&e))?;
        s.phase = Phase::Listening;
        s.listener = Some(Listener {
            limit: backlog as usize + 1,
            ..Listener::default()
        });
        Ok(())
    }

    /// The oldest established connection of listener `fd`, taken off its queue (it has no
    /// number until [`Rsockets::attach_accepted`]).
    ///
    /// # Errors
    /// `EBADF` (also for a socket that is not listening, as rsocket.c); `EAGAIN` when none.
    pub fn take_accepted(&mut self, fd: RawFd) -> Result<Handle, i32> {
        let (_, s) = self.sock(fd)?;
        let l = s.listener.as_mut().ok_or(libc::EBADF)?;
        let c = l.queue.pop_front().ok_or(libc::EAGAIN)?;
        if let Some(cs) = self.socks.get_mut(&c) {
            cs.parent = None;
        }
        Ok(c)
    }

    /// Numbers an accepted connection; returns its number and its peer's address.
    pub fn attach_accepted(
        &mut self,
        cm: &RdmaCm,
        h: Handle,
        sig: (Signal, Signal),
    ) -> (RawFd, Option<SocketAddr>) {
        let fd = self.attach(h, sig);
        (fd, self.peer_addr(cm, fd).ok())
    }

    /// `rconnect`: starts the connection (address resolution; route resolution and the REQ
    /// follow from [`Rsockets::progress`]). `Ok(true)` when connected already (rsocket.c
    /// returns 0 then).
    ///
    /// # Errors
    /// `EBADF`; `ENOTCONN` after a failed connect or a disconnection (rsocket.c); `EINVAL` on a
    /// listener; `EALREADY` while connecting; the CM's.
    pub fn connect(&mut self, cm: &mut RdmaCm, fd: RawFd, dst: SocketAddr) -> Result<bool, i32> {
        let (_, s) = self.sock(fd)?;
        match s.phase {
            Phase::Idle | Phase::Bound => {}
            Phase::Connected => return Ok(true),
            Phase::Connecting | Phase::Accepting => return Err(libc::EALREADY),
            Phase::Listening => return Err(libc::EINVAL),
            Phase::ConnectError | Phase::Disconnected | Phase::Error => return Err(libc::ENOTCONN),
        }
        let id = s.id.ok_or(libc::EINVAL)?;
        cm.resolve_addr(id, None, canonical(dst))
            .map_err(|e| errno(&e))?;
        s.phase = Phase::Connecting;
        Ok(false)
    }

    /// Where a connect stands: `Ok(true)` connected, `Ok(false)` still connecting.
    ///
    /// # Errors
    /// `EBADF`; the connect's error (`SO_ERROR`, not cleared).
    pub fn connect_status(&self, fd: RawFd) -> Result<bool, i32> {
        let s = self.get(fd)?;
        match s.phase {
            Phase::Connecting => Ok(false),
            Phase::ConnectError => Err(if s.err != 0 {
                s.err
            } else {
                libc::ECONNREFUSED
            }),
            _ => Ok(true),
        }
    }

    /// `rsend` without waiting: queues as much of `data` as fits and posts what credits allow.
    ///
    /// # Errors
    /// `EBADF`; `EAGAIN` while connecting or when the send ring is full; `ENOTCONN` when
    /// never connected; `ECONNRESET` when the write side is closed (shut down, disconnected,
    /// failed), as rsocket.c.
    pub fn send(&mut self, dev: &mut SimDevice, fd: RawFd, data: &[u8]) -> Result<usize, i32> {
        let (_, s) = self.sock(fd)?;
        match s.phase {
            Phase::Connecting | Phase::Accepting => return Err(libc::EAGAIN),
            Phase::Idle | Phase::Bound | Phase::Listening | Phase::ConnectError => {
                return Err(libc::ENOTCONN)
            }
            Phase::Connected | Phase::Disconnected | Phase::Error => {}
        }
        let Some(c) = s.conn.as_mut() else {
            return Err(libc::ENOTCONN);
        };
        if !s.writable || s.phase != Phase::Connected {
            return Err(libc::ECONNRESET);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let n = c.write(dev, data);
        c.push(dev);
        if n == 0 {
            return Err(libc::EAGAIN);
        }
        Ok(n)
    }

    /// `rrecv` without waiting. `Ok(0)` is end-of-file: nothing queued and the read side is
    /// closed (shut down, or the peer shut down or went away), as rsocket.c.
    ///
    /// # Errors
    /// `EBADF`; `EAGAIN` while connecting or when nothing arrived yet; `ENOTCONN` when never
    /// connected.
    pub fn recv(
        &mut self,
        dev: &mut SimDevice,
        fd: RawFd,
        buf: &mut [u8],
        peek: bool,
    ) -> Result<usize, i32> {
        let (_, s) = self.sock(fd)?;
        match s.phase {
            Phase::Connecting | Phase::Accepting => return Err(libc::EAGAIN),
            Phase::Idle | Phase::Bound | Phase::Listening | Phase::ConnectError => {
                return Err(libc::ENOTCONN)
            }
            Phase::Connected | Phase::Disconnected | Phase::Error => {}
        }
        let Some(c) = s.conn.as_mut() else {
            return Err(libc::ENOTCONN);
        };
        if buf.is_empty() {
            return Ok(0);
        }
        if c.has_data() {
            let n = c.read(dev, buf, peek);
            c.push(dev);
            return Ok(n);
        }
        if !s.readable {
            return Ok(0);
        }
        Err(libc::EAGAIN)
    }

    /// `rshutdown`, first half: closes the directions `how` says and queues the control
    /// message the peer needs (SHUTDOWN or DISCONNECT, rsocket.c's choice). Returns whether
    /// the caller must wait for the queue to drain ([`Rsockets::drained`]) and then call
    /// [`Rsockets::shutdown_done`].
    ///
    /// # Errors
    /// `EBADF`.
    pub fn shutdown(&mut self, dev: &mut SimDevice, fd: RawFd, how: How) -> Result<bool, i32> {
        let (_, s) = self.sock(fd)?;
        if s.phase != Phase::Connected {
            return Ok(false);
        }
        let ctrl = match how {
            How::Both => {
                s.readable = false;
                s.writable = false;
                Ctrl::Disconnect
            }
            How::Write => {
                s.writable = false;
                if s.readable {
                    Ctrl::Shutdown
                } else {
                    Ctrl::Disconnect
                }
            }
            How::Read => {
                s.readable = false;
                if s.writable {
                    return Ok(false);
                }
                Ctrl::Disconnect
            }
        };
        if let Some(c) = s.conn.as_mut() {
            c.write_ctrl(dev, ctrl);
            c.push(dev);
        }
        Ok(true)
    }

    /// Whether `fd`'s queue is drained (or can no longer drain: not connected, failed).
    pub fn drained(&self, fd: RawFd) -> bool {
        self.get(fd).is_ok_and(|s| {
            s.phase != Phase::Connected || s.conn.as_ref().is_none_or(|c| c.drained() || c.failed)
        })
    }

    /// `rshutdown`, second half: once both directions are closed, the connection is
    /// disconnected (the QP to ERR, the DREQ sent).
    pub fn shutdown_done(&mut self, cm: &mut RdmaCm, dev: &mut SimDevice, now: SimTime, fd: RawFd) {
        let Ok((_, s)) = self.sock(fd) else { return };
        if s.phase == Phase::Connected && !s.readable && !s.writable {
            s.phase = Phase::Disconnected;
            if let Some(id) = s.id {
                let _ = cm.disconnect(dev, now, id);
            }
        }
    }

    /// `rclose`, last step (after [`Rsockets::shutdown`] and the drain): frees the socket, its
    /// connection and id (the CM sends what the id's state calls for), and a listener's
    /// connections not accepted yet. Wakes any thread still waiting on its number.
    ///
    /// # Errors
    /// `EBADF`.
    pub fn close(
        &mut self,
        cm: &mut RdmaCm,
        dev: &mut SimDevice,
        now: SimTime,
        fd: RawFd,
    ) -> Result<(), i32> {
        let h = self.handle(fd)?;
        self.by_fd.remove(&fd);
        self.destroy(cm, dev, now, h);
        Ok(())
    }

    /// Frees socket `h` and everything it holds (see [`Rsockets::close`]).
    fn destroy(&mut self, cm: &mut RdmaCm, dev: &mut SimDevice, now: SimTime, h: Handle) {
        let Some(mut s) = self.socks.remove(&h) else {
            return;
        };
        self.dirty.remove(&h);
        if let Some(fd) = s.fd {
            if self.by_fd.get(&fd) == Some(&h) {
                self.by_fd.remove(&fd);
            }
        }
        if let Some(l) = s.listener.take() {
            for c in l.queue.into_iter().chain(l.pending) {
                self.destroy(cm, dev, now, c);
            }
        }
        if let Some(p) = s.parent.and_then(|p| self.socks.get_mut(&p)) {
            if let Some(l) = p.listener.as_mut() {
                l.pending.remove(&h);
                l.queue.retain(|c| *c != h);
            }
        }
        if let Some(id) = s.id {
            self.by_id.remove(&id);
            if let Some(c) = s.conn.take() {
                self.by_cq.remove(&c.cq());
                if matches!(cm.state(id), Some(RdmaCmState::Connect)) && s.phase == Phase::Connected
                {
                    let _ = cm.disconnect(dev, now, id);
                }
                c.destroy(cm, dev, id);
            }
            if let Err(e) = cm.destroy_id(dev, now, id) {
                tracing::debug!(id = id.0, "rsocket: rdma_destroy_id: {e}");
            }
        }
        if let Some((rd, wr)) = &mut s.sig {
            // Threads still waiting on the number see it readable and find it gone (EBADF).
            rd.raise_to(1);
            wr.raise_to(1);
        }
    }

    /// `rgetpeername`.
    ///
    /// # Errors
    /// `EBADF`; `ENOTCONN` with no peer.
    pub fn peer_addr(&self, cm: &RdmaCm, fd: RawFd) -> Result<SocketAddr, i32> {
        let s = self.get(fd)?;
        let dst = s.id.and_then(|id| cm.addrs(id)).and_then(|a| a.1);
        dst.map(|a| in_family(a, s.v6)).ok_or(libc::ENOTCONN)
    }

    /// `rgetsockname` (the unspecified address, port 0, before `rbind`/`rconnect`).
    ///
    /// # Errors
    /// `EBADF`.
    pub fn local_addr(&self, cm: &RdmaCm, fd: RawFd) -> Result<SocketAddr, i32> {
        let s = self.get(fd)?;
        let src = s.id.and_then(|id| cm.addrs(id)).and_then(|a| a.0);
        let unspecified = if s.v6 {
            SocketAddr::from(([0u16; 8], 0))
        } else {
            SocketAddr::from(([0u8; 4], 0))
        };
        Ok(src.map_or(unspecified, |a| in_family(a, s.v6)))
    }

    /// `rsetsockopt`.
    ///
    /// # Errors
    /// `EBADF`; [`Options::set`]'s.
    pub fn set_option(&mut self, fd: RawFd, level: i32, name: i32, val: &[u8]) -> Result<(), i32> {
        let (_, s) = self.sock(fd)?;
        // rsocket.c: `state >= rs_opening` (a listener is not opening).
        let opening = !matches!(s.phase, Phase::Idle | Phase::Bound | Phase::Listening);
        let resources = s.conn.is_some();
        s.opts.set(level, name, val, opening, resources)
    }

    /// `rgetsockopt`: the value's bytes. `SO_ERROR` is read and cleared; `TCP_MAXSEG` is the
    /// path MTU of a connected socket, else 2048 (rsocket.c).
    ///
    /// # Errors
    /// `EBADF`; `ENOTSUP` for an unknown option.
    pub fn get_option(
        &mut self,
        fd: RawFd,
        level: i32,
        name: i32,
        mtu: u32,
    ) -> Result<Vec<u8>, i32> {
        let (_, s) = self.sock(fd)?;
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_ERROR) => {
                let e = std::mem::take(&mut s.err);
                Ok(e.to_ne_bytes().to_vec())
            }
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
                let v: i32 = if s.conn.is_some() { mtu as i32 } else { 2048 };
                Ok(v.to_ne_bytes().to_vec())
            }
            _ => s.opts.get(level, name),
        }
    }

    /// `rfcntl(F_GETFL)`.
    ///
    /// # Errors
    /// `EBADF`.
    pub fn flags(&self, fd: RawFd) -> Result<i32, i32> {
        Ok(self.get(fd)?.fd_flags)
    }

    /// `rfcntl(F_SETFL)`.
    ///
    /// # Errors
    /// `EBADF`.
    pub fn set_flags(&mut self, fd: RawFd, flags: i32) -> Result<(), i32> {
        self.sock(fd)?.1.fd_flags = flags;
        Ok(())
    }

    /// `riomap`: registers the application's buffer `mem` (`len` bytes at `addr`) on the
    /// connection's PD; `writable` (`PROT_WRITE`) takes a free index of the peer's iomap
    /// table and queues the announcement in order with the stream. Returns the offset the
    /// map is named by (`offset`, or `addr` for −1).
    ///
    /// # Errors
    /// `EBADF`; `EINVAL` without a connection (rsocket.c: no PD yet); `ENOMEM` when the
    /// peer's table is full (or it keeps none: `RDMA_IOMAPSIZE` 0, rsocket.c's default); the
    /// device's registration error.
    pub fn iomap(
        &mut self,
        dev: &mut SimDevice,
        fd: RawFd,
        mem: Arc<dyn ExternalMemory>,
        addr: u64,
        writable: bool,
        offset: i64,
    ) -> Result<u64, i32> {
        let (_, s) = self.sock(fd)?;
        let c = s.conn.as_mut().ok_or(libc::EINVAL)?;
        let off = c.iomap(dev, mem, addr, writable, offset)?;
        c.push(dev);
        Ok(off)
    }

    /// `riounmap`.
    ///
    /// # Errors
    /// `EBADF`; `EINVAL` when no such map exists.
    pub fn iounmap(
        &mut self,
        dev: &mut SimDevice,
        fd: RawFd,
        addr: u64,
        len: u64,
    ) -> Result<(), i32> {
        let (_, s) = self.sock(fd)?;
        s.conn.as_mut().ok_or(libc::EINVAL)?.iounmap(dev, addr, len)
    }

    /// `riowrite` without waiting: queues what fits.
    ///
    /// # Errors
    /// As [`Rsockets::send`]; `EINVAL` when the peer mapped nothing at `offset`.
    pub fn iowrite(
        &mut self,
        dev: &mut SimDevice,
        fd: RawFd,
        data: &[u8],
        offset: u64,
    ) -> Result<usize, i32> {
        let (_, s) = self.sock(fd)?;
        if s.phase != Phase::Connected || !s.writable {
            return Err(match s.phase {
                Phase::Connecting | Phase::Accepting => libc::EAGAIN,
                Phase::Connected | Phase::Disconnected | Phase::Error => libc::ECONNRESET,
                _ => libc::ENOTCONN,
            });
        }
        let c = s.conn.as_mut().ok_or(libc::ENOTCONN)?;
        let n = c.iowrite(dev, data, offset)?;
        c.push(dev);
        if n == 0 && !data.is_empty() {
            return Err(libc::EAGAIN);
        }
        Ok(n)
    }
}
