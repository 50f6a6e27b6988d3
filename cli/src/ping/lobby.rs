//! The ping server's lobby: clients whose connection handshake runs while the server serves
//! another, so that only a client whose handshake completed (RTU received: ESTABLISHED) ever
//! gets a session.
//!
//! A serial server that accepts one request at a time can be held by a *phantom*: a REQ
//! from an address that never answers the REP (a forgery, or a client gone). Until the REP's
//! retries run out (up to 16 × 4 s with Linux's timers) nobody else is served, and a flood of
//! such requests locks real clients out. The lobby accepts every waiting request
//! at once instead, with a QP and CQ of its own (the MR comes when its session starts), and
//! hands the server the first one whose handshake completes — the way a TCP listener's
//! kernel completes handshakes before `accept(2)` returns. A phantom never gets that far; when
//! the lobby is full, a new request evicts the oldest one still in its handshake ("server
//! busy" REJ). One client per IP address at a time (the route of a peer's GID is its IP): a
//! newer request from an address supersedes its handshake still running, and waits
//! (deferred) behind one that completed or is in session (docs/hostile-input.md).
//!
//! A phantom can also *complete* its handshake (send the RTU) and then say nothing.
//! A real ping client sends its buffer info the moment it is connected (RNR-NAKed and retried
//! until its session starts), so the server serves, among the completed handshakes, only a
//! client it has heard from since; one that stays silent for the server's `--timeout` is
//! disconnected (`ping.silent_clients`). Twenty silent ones cost a real client nothing. (On a
//! hardware RNIC the data does not cross the CM's socket: every completed handshake is served
//! in order, as before.)
//!
//! The lobby's size follows the socket's receive buffer as the kernel granted it
//! ([`lobby_size`]): a real client's RTU must be read before as many newer requests as the
//! socket can hold ahead of it evict its handshake.

use super::endpoint::PingHost;
use super::nic::PingNic;
use super::params::{conn_param, Params};
use super::wire::FaultyEndpoint;
use cm_core::api::{CmEvent, CmEventType, CmIdHandle, ConnParam};
use cm_core::engine::IbCmId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use verbs_core::{
    CompChannel, CqHandle, Device, Gid, PdHandle, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    SimTime,
};

/// The RNR NAK timer code of a server's QPs (IBTA table 45: 1 = 0.01 ms), see
/// [`Lobby`]'s accept.
const LOBBY_MIN_RNR_TIMER: u8 = 1;

/// The fewest requests whose handshake may run at once. Under a flood the lobby is full of
/// phantoms and a real client's handshake must complete (one round trip) before this many
/// newer requests evict it; each costs a QP and a CQ with no buffers (≈ 2.8 kB).
pub const LOBBY_SIZE: usize = 4096;

/// The least receive-buffer space one REQ datagram takes in a Linux UDP socket (its
/// `truesize`: the 280-byte RoCEv2 datagram in an skb; 1280 B measured on loopback, 332 of
/// them fill the default 425 984-byte buffer, 6553 a 8 MiB one), rounded down.
pub const REQ_RECV_COST: usize = 1024;

/// How many handshakes a server whose socket got `recv_buffer` bytes of receive buffer runs
/// at once: more than the requests that fit in that buffer plus the listen backlog
/// (`backlog`), so that those queued ahead of a real client's RTU cannot evict its handshake
/// before the RTU is read — and never fewer than [`LOBBY_SIZE`]. With the 4 MiB asked
/// (8 MiB granted once `net.core.rmem_max` allows it): 9216.
pub fn lobby_size(recv_buffer: usize, backlog: usize) -> usize {
    (recv_buffer / REQ_RECV_COST + backlog).max(LOBBY_SIZE)
}

/// A client whose handshake the lobby runs.
#[derive(Debug)]
pub struct Candidate {
    /// Its passive id.
    pub id: CmIdHandle,
    /// Its IP address.
    pub ip: IpAddr,
    /// Its ping parameters.
    pub params: Params,
    /// Its CONNECT_REQUEST.
    pub request: CmEvent,
    /// Its ESTABLISHED and when it came, once the handshake completed.
    pub established: Option<(CmEvent, SimTime)>,
    /// Its socket: the route its REQ was learned at (the REP went there), held as the route
    /// of its IP's GID from ESTABLISHED on (`held`): datagrams of its IP from other sockets
    /// (another process, a spoofer) are dropped meanwhile, and neither they nor a flood of
    /// other sources (which evicts learned routes) can move it while it waits for its session.
    pub peer: SocketAddr,
    /// Whether `peer` is held.
    pub held: bool,
    /// The QP the REP announced.
    pub qp: Qp,
    /// The QP's send and receive CQ.
    pub cq: CqHandle,
    /// When the request arrived.
    pub t0: SimTime,
    /// A datagram came from `peer` since the handshake completed (a real client's first
    /// SEND): only such a candidate is served.
    pub heard: bool,
    /// A datagram came from `peer` since its REQ (an RTU, a REQ retransmission, a SEND): a
    /// real client's handshake, not evicted for a newer request.
    pub spoke: bool,
}

/// What the lobby did with a CONNECT_REQUEST it could not take.
#[derive(Debug)]
pub enum Refusal {
    /// Not a ping client, or on the other kind of RNIC: REJ id `id` with `why` (`quiet`:
    /// not worth a line on stderr).
    Reject {
        /// The request's id.
        id: CmIdHandle,
        /// The REJ's private data.
        why: String,
        /// Not a ping client at all.
        quiet: bool,
    },
    /// Its IP address already has a client in the lobby or in session: try again later.
    Wait(CmEvent),
}

/// See the module docs.
pub struct Lobby {
    recvs: u32,
    /// Handshakes at once at most ([`lobby_size`]).
    size: usize,
    /// How long a completed handshake may stay silent (the server's `--timeout`), ns.
    silent_ns: u64,
    /// Clients disconnected for staying silent after their handshake.
    pub silent: u64,
    /// The candidates by id.
    candidates: BTreeMap<CmIdHandle, Candidate>,
    /// The candidate of each IP address (one at a time).
    /// (A `--qps` client has one per connection of its group: by the connection's index.)
    by_ip: BTreeMap<(IpAddr, u16), CmIdHandle>,
    /// Admission order of the handshakes still running, oldest first; ids that left or
    /// completed their handshake are skipped (and dropped) when met.
    running: VecDeque<CmIdHandle>,
    /// The completed handshakes by the time they completed: the order of service.
    ready: BTreeSet<(SimTime, CmIdHandle)>,
    /// The IP address of the client in session, if any.
    serving: Option<IpAddr>,
    /// Requests evicted by newer ones while still in their handshake.
    pub evicted: u64,
}

/// What a candidate's resources and the CM need: the endpoint, the time, the PD and the
/// completion channel.
pub struct Ctx<'a, N: PingNic> {
    /// The endpoint (under the driver's lock).
    pub ep: &'a mut FaultyEndpoint<PingHost<N>>,
    /// Now.
    pub now: SimTime,
    /// The node's PD.
    pub pd: PdHandle,
    /// The node's completion channel.
    pub comp: &'a CompChannel,
}

impl Lobby {
    /// An empty lobby of `size` handshakes ([`lobby_size`]) whose QPs keep `recvs` receives
    /// posted once in session, and whose completed handshakes may stay silent for `silent`.
    pub fn new(recvs: u32, size: usize, silent: std::time::Duration) -> Lobby {
        Lobby {
            recvs: recvs.max(1),
            size: size.max(1),
            silent_ns: u64::try_from(silent.as_nanos()).unwrap_or(u64::MAX),
            silent: 0,
            candidates: BTreeMap::new(),
            by_ip: BTreeMap::new(),
            running: VecDeque::new(),
            ready: BTreeSet::new(),
            serving: None,
            evicted: 0,
        }
    }

    /// The QP depth of a session with `recvs` receives (as the session sizes its own).
    pub fn depth(recvs: u32) -> u32 {
        recvs.max(1) + 8
    }

    /// Notes the IP address of the client in session (`None` when the session ended).
    pub fn set_serving(&mut self, ip: Option<IpAddr>) {
        self.serving = ip;
    }

    /// Accepts a CONNECT_REQUEST into the lobby (creates its QP and CQ and sends the REP).
    /// It takes the place of a handshake still running for the same IP address, or, when
    /// the lobby is full, of the oldest handshake still running (both are rejected "server
    /// busy"). A request whose address has a client in session, or one whose handshake
    /// completed, waits.
    ///
    /// # Errors
    /// [`Refusal`]: what the caller does with a request the lobby did not take.
    pub fn admit<N: PingNic>(&mut self, cx: &mut Ctx<'_, N>, ev: CmEvent) -> Result<(), Refusal> {
        let id = ev.id;
        let reject = |why: String| Refusal::Reject {
            id,
            why,
            quiet: false,
        };
        let Some((params, hardware)) = Params::decode(&ev.param.private_data) else {
            return Err(Refusal::Reject {
                id,
                why: "not an rnic ping client".into(),
                quiet: true,
            });
        };
        if hardware != N::ASYNC_COMPLETIONS {
            // The CM would connect, but the data could never meet: one side's QP is on a
            // hardware RNIC, the other's on the simulated one.
            return Err(reject(if hardware {
                "this server runs on the simulated RNIC and the client on a hardware one: give --device on both sides or on neither".into()
            } else {
                "this server runs on a hardware RNIC (--device) and the client on the simulated one: give --device on both sides or on neither".into()
            }));
        }
        // The address the REQ came from, not the one its IP-CM header claims (any text a
        // sender likes): the GID the CM answers, whose route the session pins.
        let host = cx.ep.inner().host();
        let Ok(path) = host.cm().engine().qp_params(IbCmId(id.0)) else {
            return Err(reject("no peer address".into()));
        };
        let ip = path.remote_gid.to_ip();
        if self.serving == Some(ip) {
            return Err(Refusal::Wait(ev));
        }
        // The address's candidates this request does not join: another client's (or an
        // earlier run's) group, or the same connection of this group asked again.
        let (index, nonce) = params.group.map_or((0, 0), |g| (g.index, g.nonce));
        let others: Vec<CmIdHandle> = self
            .by_ip
            .range((ip, 0)..=(ip, u16::MAX))
            .map(|(_, id)| *id)
            .filter(|other| {
                self.candidates.get(other).is_none_or(|c| {
                    let (i, n) = c.params.group.map_or((0, 0), |g| (g.index, g.nonce));
                    n != nonce || i == index
                })
            })
            .collect();
        if others.iter().any(|other| {
            self.candidates
                .get(other)
                .is_some_and(|c| c.established.is_some())
        }) {
            return Err(Refusal::Wait(ev));
        }
        for other in others {
            // A newer request from the address supersedes a handshake that has not
            // completed: else a phantom with a client's address would lock it out until
            // the REP's retries ran out.
            self.evict(cx, other);
        }
        if self.candidates.len() >= self.size {
            let Some(oldest) = self.oldest_running(cx) else {
                // Every one is a real client waiting for its session: the newcomer waits.
                return Err(Refusal::Wait(ev));
            };
            self.evict(cx, oldest);
        }
        let peer = cx.ep.inner().host().nic().peer_addr(Gid::from_ip(ip));
        let depth = Self::depth(self.recvs);
        // Clients served before this one: its REP says so, so that it can tell a busy server
        // from a dead one while it waits.
        // (A `--qps` client's own connections do not count.)
        let group = params.group.map(|g| g.nonce);
        let ahead = self
            .ready
            .iter()
            .filter(|(_, id)| {
                self.candidates.get(id).is_some_and(|c| {
                    c.ip != ip || group.is_none() || c.params.group.map(|g| g.nonce) != group
                })
            })
            .count()
            + usize::from(self.serving.is_some());
        let param = ConnParam {
            private_data: busy_note(ahead),
            ..conn_param()
        };
        let (cm, dev) = cx.ep.inner_mut().host_mut().split();
        let cq = dev
            .create_cq(2 * depth + 16, Some(cx.comp))
            .map_err(|e| reject(format!("no CQ: {e}")))?;
        let init = QpInitAttr::rc(cq, cq, QpCap::uniform(depth, 1, 0), true);
        let qp = match cm
            .create_qp(dev, id, cx.pd, &init)
            .and_then(|qp| cm.accept(dev, cx.now, id, &param).map(|()| qp))
            .and_then(|qp| {
                // The receives are posted when the client's session starts, after
                // ESTABLISHED; a SEND that comes first is RNR NAKed with this QP's timer,
                // which the CM's RTR transition set to Linux's 0 = 655 ms (cm.c
                // `cm_init_qp_rtr_attr`). rping posts its receive before `rdma_accept`; a
                // lobby of thousands of handshakes cannot own a buffer for each, so it asks
                // for a retry after 10 µs instead (an RTS → RTS attribute, ibv_modify_qp(3)).
                let attr = QpAttr {
                    min_rnr_timer: LOBBY_MIN_RNR_TIMER,
                    ..QpAttr::default()
                };
                dev.modify_qp(qp.handle, &attr, QpAttrMask::MIN_RNR_TIMER)
                    .map(|()| qp)
            }) {
            Ok(qp) => qp,
            Err(e) => {
                let _ = dev.destroy_cq(cq);
                return Err(reject(format!("cannot accept: {e}")));
            }
        };
        self.by_ip.insert((ip, index), id);
        self.running.push_back(id);
        // Quiet until its client sends something after the REQ (see `oldest_running`).
        cx.ep.inner_mut().watch_quiet(peer);
        if self.running.len() > 2 * self.candidates.len() + 64 {
            // Compact the ids that left meanwhile.
            let live = &self.candidates;
            self.running
                .retain(|i| live.get(i).is_some_and(|c| c.established.is_none()));
        }
        self.candidates.insert(
            id,
            Candidate {
                id,
                ip,
                params,
                request: ev,
                established: None,
                peer,
                held: false,
                qp,
                cq,
                t0: cx.now,
                heard: false,
                spoke: false,
            },
        );
        Ok(())
    }

    /// Takes an event of a candidate's id: ESTABLISHED makes it ready; REJECTED,
    /// UNREACHABLE, CONNECT_ERROR or DISCONNECTED (the client gave up or went away) ends it.
    /// Returns the event back when it is no candidate's.
    pub fn on_event<N: PingNic>(&mut self, cx: &mut Ctx<'_, N>, ev: CmEvent) -> Option<CmEvent> {
        let Some(c) = self.candidates.get_mut(&ev.id) else {
            return Some(ev);
        };
        match ev.event {
            CmEventType::Established if c.established.is_none() => {
                if !c.spoke {
                    // No datagram since the REQ (ESTABLISHED through COMM_EST): one watch.
                    cx.ep.inner_mut().forget_quiet(c.peer);
                }
                c.spoke = true;
                if N::ASYNC_COMPLETIONS {
                    // A hardware RNIC's data does not cross this socket: nothing to hear.
                    c.heard = true;
                } else {
                    cx.ep.inner_mut().watch_quiet(c.peer);
                }
                let nic = cx.ep.inner_mut().host_mut().nic_mut();
                nic.set_peer_addr(Gid::from_ip(c.ip), c.peer);
                c.held = true;
                self.ready.insert((cx.now, c.id));
                c.established = Some((ev, cx.now));
            }
            CmEventType::Rejected
            | CmEventType::Unreachable
            | CmEventType::ConnectError
            | CmEventType::Disconnected => {
                if let Some(c) = self.remove(ev.id) {
                    release(cx, &c, None);
                }
            }
            _ => {}
        }
        None
    }

    /// `IBV_EVENT_COMM_EST` on QP `qpn`: if it is a candidate's whose RTU has not come (lost),
    /// its client is connected and sending: `rdma_notify` makes the id ESTABLISHED now (its
    /// event follows), instead of after the REP's retransmission (≈ 4 s with Linux's timers)
    /// while the client's first SEND meets RNR NAKs — under loss long enough for its
    /// transport retries to run out. The call fails harmlessly (EISCONN) if the RTU came
    /// meanwhile.
    pub fn on_comm_est<N: PingNic>(&mut self, cx: &mut Ctx<'_, N>, qpn: u32) {
        let Some(c) = self
            .candidates
            .values()
            .find(|c| c.qp.qp_num == qpn && c.established.is_none())
        else {
            return;
        };
        let (id, now) = (c.id, cx.now);
        let (cm, dev) = cx.ep.inner_mut().host_mut().split();
        let _ = cm.notify(dev, now, id);
    }

    /// The oldest candidate whose handshake still runs and whose client said nothing since
    /// its REQ (dropping the ids met on the way that left or completed; one that spoke — a
    /// real client whose RTU the socket lost, retrying its REQ or sending its first SEND — goes
    /// to the back instead: it is not the one to evict).
    fn oldest_running<N: PingNic>(&mut self, cx: &Ctx<'_, N>) -> Option<CmIdHandle> {
        let mut spoke = 0;
        while let Some(&id) = self.running.front() {
            let Some(c) = self.candidates.get_mut(&id) else {
                self.running.pop_front();
                continue;
            };
            if c.established.is_some() {
                self.running.pop_front();
                continue;
            }
            c.spoke |= !cx.ep.inner().is_quiet(c.peer);
            if !c.spoke {
                return Some(id);
            }
            spoke += 1;
            if spoke > self.running.len() {
                return None;
            }
            self.running.rotate_left(1);
        }
        None
    }

    /// Takes candidate `id` out of every index.
    fn remove(&mut self, id: CmIdHandle) -> Option<Candidate> {
        let c = self.candidates.remove(&id)?;
        let key = (c.ip, c.params.group.map_or(0, |g| g.index));
        if self.by_ip.get(&key) == Some(&id) {
            self.by_ip.remove(&key);
        }
        if let Some((_, at)) = &c.established {
            self.ready.remove(&(*at, id));
        }
        Some(c)
    }

    /// Rejects ("server busy") and releases candidate `id`, whose handshake still runs.
    fn evict<N: PingNic>(&mut self, cx: &mut Ctx<'_, N>, id: CmIdHandle) {
        if let Some(c) = self.remove(id) {
            self.evicted += 1;
            release(cx, &c, Some("server busy"));
        }
    }

    /// Takes the client whose handshake completed first among those heard from since
    /// ([`Candidate::heard`]), if any.
    pub fn take_ready<N: PingNic>(&mut self, cx: &mut Ctx<'_, N>) -> Option<Candidate> {
        let id = self.ready.iter().map(|&(_, id)| id).find(|id| {
            self.candidates.get_mut(id).is_some_and(|c| {
                c.heard |= !cx.ep.inner().is_quiet(c.peer);
                c.heard
            })
        })?;
        self.remove(id)
    }

    /// Disconnects the clients whose handshake completed more than the silence allowance ago
    /// and that have sent nothing since (counted in [`silent`](Self::silent)); returns when
    /// the next one would expire.
    pub fn expire_silent<N: PingNic>(&mut self, cx: &mut Ctx<'_, N>) -> Option<SimTime> {
        let mut next = None;
        let mut gone = Vec::new();
        for &(at, id) in &self.ready {
            let Some(c) = self.candidates.get_mut(&id) else {
                continue;
            };
            c.heard |= !cx.ep.inner().is_quiet(c.peer);
            if c.heard {
                continue;
            }
            let expiry = at.plus_nanos(self.silent_ns);
            if expiry <= cx.now {
                gone.push(id);
            } else {
                next = Some(next.map_or(expiry, |n: SimTime| n.min(expiry)));
            }
        }
        for id in gone {
            if let Some(c) = self.remove(id) {
                self.silent += 1;
                let (cm, dev) = cx.ep.inner_mut().host_mut().split();
                let _ = cm.disconnect(dev, cx.now, c.id);
                release(cx, &c, None);
            }
        }
        next
    }

    /// Ends every candidate, as a dying server process's ids end (the kernel destroys them):
    /// a connected one is disconnected (its client gets a DREQ, DISCONNECTED status 0), one
    /// still in its handshake is rejected with `why`.
    pub fn close<N: PingNic>(&mut self, cx: &mut Ctx<'_, N>, why: &str) {
        let ids: Vec<CmIdHandle> = self.candidates.keys().copied().collect();
        for id in ids {
            let Some(c) = self.remove(id) else { continue };
            if c.established.is_some() {
                let (cm, dev) = cx.ep.inner_mut().host_mut().split();
                let _ = cm.disconnect(dev, cx.now, c.id);
            }
            release(cx, &c, Some(why));
        }
    }

    /// Takes a connection of the group `nonce` of address `ip` whose handshake completed,
    /// if any (the rest of a `--qps` client's group).
    pub fn take_ready_of(&mut self, ip: IpAddr, nonce: u32) -> Option<Candidate> {
        let id = self.ready.iter().map(|(_, id)| *id).find(|id| {
            self.candidates
                .get(id)
                .is_some_and(|c| c.ip == ip && c.params.group.is_some_and(|g| g.nonce == nonce))
        })?;
        self.remove(id)
    }
}

/// Destroys a candidate's QP, id and CQ, rejecting it first with `why` while its handshake
/// runs. Teardown errors change nothing: the id is gone either way.
fn release<N: PingNic>(cx: &mut Ctx<'_, N>, c: &Candidate, why: Option<&str>) {
    if let (Some(why), None) = (why, &c.established) {
        // The REJ goes where the REP went: the route of a GID with a handshake in progress
        // neither moves nor is evicted (`rnic_sim::peers`).
        let (cm, dev) = cx.ep.inner_mut().host_mut().split();
        let _ = cm.reject(dev, cx.now, c.id, why.as_bytes());
    }
    if (c.established.is_some() && !c.heard) || (c.established.is_none() && !c.spoke) {
        cx.ep.inner_mut().forget_quiet(c.peer);
    }
    let (cm, dev) = cx.ep.inner_mut().host_mut().split();
    let _ = dev.destroy_qp(c.qp.handle);
    let _ = cm.detach_qp(c.id);
    let _ = cm.destroy_id(dev, cx.now, c.id);
    let _ = dev.destroy_cq(c.cq);
    if c.held {
        cx.ep
            .inner_mut()
            .host_mut()
            .nic_mut()
            .release_peer(Gid::from_ip(c.ip));
    }
}

/// The first bytes of a REP's private data that says the server is busy.
const BUSY: &[u8] = b"RNPG-BUSY";

/// A REP's private data when `ahead` clients are served before this one: `RNPG-BUSY` and
/// `ahead` (LE u32); empty when none is.
pub fn busy_note(ahead: usize) -> Vec<u8> {
    if ahead == 0 {
        return Vec::new();
    }
    let mut v = BUSY.to_vec();
    v.extend_from_slice(&u32::try_from(ahead).unwrap_or(u32::MAX).to_le_bytes());
    v
}

/// The clients ahead of this one, from a REP's private data (ESTABLISHED's on the client);
/// `None` when the server was free.
pub fn parse_busy(private_data: &[u8]) -> Option<u32> {
    let n = private_data.strip_prefix(BUSY)?.get(..4)?;
    Some(u32::from_le_bytes(n.try_into().ok()?))
}
