//! [`PingHost`]: the endpoint a ping node's UDP driver runs (behind the fault layer:
//! [`PingEndpoint`]): the host, the [`DataPhase`] of every connection in its data phase, and
//! the mailboxes of the sessions that run at once.

use super::app::DataPhase;
use super::wire::FaultyEndpoint;
use bytes::Bytes;
use cm_core::api::{CmEvent, CmIdHandle};
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::SimNic;
use rnic_testbed::host::{Host, Nic};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use verbs_core::{AsyncElement, AsyncEventType, Device, SimTime};

/// The endpoint a ping node runs on its UDP driver: the host behind the fault layer.
pub type PingEndpoint<N = SimNic> = FaultyEndpoint<PingHost<N>>;

/// A [`Host`] with the ping application's [`DataPhase`]s attached while they run (one per
/// connection: `--qps` runs several at once): the endpoint the UDP driver runs (behind the
/// fault layer). Also the mailboxes of the sessions that run at once: a CM event read by one
/// session's thread for another's id waits there, where the other's wait condition sees it.
#[derive(Debug)]
pub struct PingHost<N: Nic = SimNic> {
    host: Host<N>,
    /// The running data phases, by connection.
    pub data: BTreeMap<CmIdHandle, DataPhase>,
    /// CM events for the sessions in progress, by id (see [`PingHost::open_mailbox`]).
    mailboxes: BTreeMap<CmIdHandle, VecDeque<CmEvent>>,
    /// QPs that got their first request (`IBV_EVENT_COMM_EST`) since the application last
    /// looked, oldest first, at most [`MAX_COMM_EST`].
    comm_est: VecDeque<u32>,
    /// Datagrams received from the peers of the sessions in progress (by socket: sessions
    /// using it, datagrams): a session's sign of progress, which another client's traffic
    /// (a queued client's RNR-retried SENDs) must not fake.
    watched: BTreeMap<SocketAddr, (u32, u64)>,
    /// Sockets of lobby clients whose handshake completed and that have sent nothing since
    /// (with how many such handshakes each): a real client sends its buffer info at once, a
    /// phantom never (see [`super::lobby`]).
    quiet: BTreeMap<SocketAddr, u32>,
    /// A socket of `quiet` sent a datagram since the lobby last looked.
    heard: bool,
}

/// The most COMM_EST QPNs kept for the application (one per connection: a server that does
/// not look for a while forgets the oldest).
const MAX_COMM_EST: usize = 4096;

impl<N: Nic> PingHost<N> {
    /// `host` without a data phase.
    pub fn new(host: Host<N>) -> PingHost<N> {
        PingHost {
            host,
            data: BTreeMap::new(),
            mailboxes: BTreeMap::new(),
            comm_est: VecDeque::new(),
            watched: BTreeMap::new(),
            quiet: BTreeMap::new(),
            heard: false,
        }
    }

    /// Notes that a lobby client at `peer` completed its handshake: it is quiet until a
    /// datagram comes from `peer`.
    pub fn watch_quiet(&mut self, peer: SocketAddr) {
        *self.quiet.entry(peer).or_default() += 1;
    }

    /// A quiet lobby client at `peer` left (one handshake fewer).
    pub fn forget_quiet(&mut self, peer: SocketAddr) {
        if let Some(n) = self.quiet.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.quiet.remove(&peer);
            }
        }
    }

    /// Whether nothing came from `peer` since its handshake completed.
    pub fn is_quiet(&self, peer: SocketAddr) -> bool {
        self.quiet.contains_key(&peer)
    }

    /// Whether a quiet lobby client spoke since [`take_heard`](Self::take_heard).
    pub fn heard(&self) -> bool {
        self.heard
    }

    /// [`heard`](Self::heard), clearing it.
    pub fn take_heard(&mut self) -> bool {
        std::mem::take(&mut self.heard)
    }

    /// Counts the datagrams from `peer` from now on (one more session of that peer).
    pub fn watch_peer(&mut self, peer: SocketAddr) {
        self.watched.entry(peer).or_default().0 += 1;
    }

    /// One session of `peer` fewer; its count is forgotten with the last.
    pub fn unwatch_peer(&mut self, peer: SocketAddr) {
        if let Some(w) = self.watched.get_mut(&peer) {
            w.0 = w.0.saturating_sub(1);
            if w.0 == 0 {
                self.watched.remove(&peer);
            }
        }
    }

    /// Datagrams received from `peer` since it was first watched.
    pub fn peer_datagrams(&self, peer: SocketAddr) -> u64 {
        self.watched.get(&peer).map_or(0, |w| w.1)
    }

    /// Reads the device's async events: keeps the QPNs of `IBV_EVENT_COMM_EST` (a passive
    /// QP whose RTU was lost learns from its first request that the client is connected;
    /// the lobby then calls `rdma_notify`, as nvmet-rdma does); the rest concern no one here.
    fn read_async_events(&mut self) {
        while let Some(ev) = self.host.dev_mut().get_async_event() {
            if let (AsyncEventType::CommEst, AsyncElement::Qp(qpn)) = (ev.event_type, ev.element) {
                if self.comm_est.len() == MAX_COMM_EST {
                    self.comm_est.pop_front();
                }
                self.comm_est.push_back(qpn);
            }
        }
    }

    /// Takes the QPNs that got their first request since the last call.
    pub fn take_comm_est(&mut self) -> Vec<u32> {
        self.comm_est.drain(..).collect()
    }

    /// Whether a QP got its first request since the last [`take_comm_est`](Self::take_comm_est).
    pub fn has_comm_est(&self) -> bool {
        !self.comm_est.is_empty()
    }

    /// From now on events of `id` read by another session wait in its mailbox.
    pub fn open_mailbox(&mut self, id: CmIdHandle) {
        self.mailboxes.entry(id).or_default();
    }

    /// Ends `id`'s mailbox (its session ended); returns what was still in it.
    pub fn close_mailbox(&mut self, id: CmIdHandle) -> VecDeque<CmEvent> {
        self.mailboxes.remove(&id).unwrap_or_default()
    }

    /// Posts `ev` to its id's mailbox if it has one; else returns it.
    pub fn post(&mut self, ev: CmEvent) -> Option<CmEvent> {
        match self.mailboxes.get_mut(&ev.id) {
            Some(m) => {
                m.push_back(ev);
                None
            }
            None => Some(ev),
        }
    }

    /// Takes the events waiting in `id`'s mailbox.
    pub fn take_mail(&mut self, id: CmIdHandle) -> Vec<CmEvent> {
        self.mailboxes
            .get_mut(&id)
            .map(|m| m.drain(..).collect())
            .unwrap_or_default()
    }

    /// Whether `id`'s mailbox holds an event.
    pub fn has_mail(&self, id: CmIdHandle) -> bool {
        self.mailboxes.get(&id).is_some_and(|m| !m.is_empty())
    }

    /// The host.
    pub fn host(&self) -> &Host<N> {
        &self.host
    }

    /// The host, mutably.
    pub fn host_mut(&mut self) -> &mut Host<N> {
        &mut self.host
    }

    /// Attaches `d` as connection `id`'s and runs its first step at `now`.
    pub fn start(&mut self, id: CmIdHandle, mut d: DataPhase, now: SimTime) {
        d.step(&mut self.host, now);
        self.data.insert(id, d);
    }

    /// Steps every data phase at `now`.
    pub fn step(&mut self, now: SimTime) {
        for d in self.data.values_mut() {
            d.step(&mut self.host, now);
        }
    }

    /// Whether connection `id`'s data phase has an outcome (or none runs).
    pub fn data_settled(&self, id: CmIdHandle) -> bool {
        self.data.get(&id).is_none_or(|d| d.outcome.is_some())
    }

    /// Whether some data phase has an outcome the application has not taken.
    pub fn any_settled(&self) -> bool {
        self.data.values().any(|d| d.outcome.is_some())
    }

    /// Whether connection `id`'s data phase (`None`: any) has per-iteration lines for the
    /// application to print.
    pub fn data_lines(&self, id: Option<CmIdHandle>) -> bool {
        self.data
            .iter()
            .filter(|(k, _)| id.is_none_or(|id| **k == id))
            .any(|(_, d)| d.lines.as_ref().is_some_and(|l| !l.is_empty()))
    }
}

impl<N: Nic> Endpoint for PingHost<N> {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        if let Some(w) = self.watched.get_mut(&src) {
            w.1 += 1;
        }
        if !self.quiet.is_empty() && self.quiet.remove(&src).is_some() {
            self.heard = true;
        }
        self.host.handle_datagram(now, src, bytes);
        self.read_async_events();
        self.step(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        self.host.poll_transmit(now)
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.host.poll_timeout()
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.host.handle_timeout(now);
        self.step(now);
    }

    fn addr(&self) -> SocketAddr {
        self.host.addr()
    }
}
