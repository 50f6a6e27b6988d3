//! One side of one ping connection: the blocking application logic that runs the connection
//! on a [`Node`] (the host on its UDP driver) and writes the [`PingReport`].
//!
//! Setup, the buffer-info exchange, FIN/FIN-ACK and the disconnect run on the caller's thread
//! through [`UdpHandle::with`], waiting with [`UdpHandle::wait_until`] (woken by the driver's
//! wake filter when a completion-channel or CM event arrives: no polling loop, no sleep). The
//! iterations run as a [`DataPhase`] inside the endpoint, in the driver's thread.

mod data;
mod diagnose;
mod live;
mod verdict;

use super::app::{compare, pattern, DataPhase, Layout, Ledger, Outcome, PeerInfo, Stop};
use super::endpoint::PingEndpoint;
use super::lobby::parse_busy;
use super::lobby::Lobby;
use super::nic::PingNic;
use super::node::Node;
use super::params::{conn_param, Params, MAGIC};
use super::report::{
    upper_snake, CheckRecord, EventRecord, Latency, PingReport, QpStateRecord, Throughput,
    TimelineEntry,
};
use super::{PingOp, Role};
use crate::interrupt;
use cm_core::api::{CmEvent, CmEventType, CmIdHandle, ConnParam};
use cm_core::engine::IbCmState;
use data::nanos;
use live::Live;
use rnic_sim::fabric::udp::UdpHandle;
use rnic_sim::nic::SimNic;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use verbs_core::{AccessFlags, CqHandle, Device, Mtu, Qp, QpCap, QpInitAttr, QpState, SimTime};

/// `-ETIMEDOUT`: the status of DISCONNECTED after the DREQ retries ran out (cm-spec §4.5).
pub const STATUS_ETIMEDOUT: i32 = -110;

fn qp_state_name(s: QpState) -> String {
    upper_snake(&format!("{s:?}"))
}

/// Bytes of the buffer-info message: write address, read address (u64 LE), rkey, length (u32
/// LE), magic.
const INFO_LEN: usize = 28;

/// The longest a session waits for anything once a signal asked it to stop: the FIN
/// exchange of a client, the DREP of the DREQ this side sent, TIMEWAIT_EXIT.
const GRACE: Duration = Duration::from_secs(2);

/// One side of one connection. Built by the client after `rdma_resolve_addr` and by the server
/// on CONNECT_REQUEST; [`Session::run`] does the rest.
pub struct Session<'a, N: PingNic = SimNic> {
    node: &'a Node<N>,
    role: Role,
    params: Params,
    recvs: u32,
    kill_after: Option<u32>,
    /// The QP's own RC retries and timeouts, read just before it is destroyed.
    qp_rc: Option<(u64, u64)>,
    /// WRITEs kept outstanding (`--depth`, client `--op write`).
    write_depth: u32,
    timeout: Duration,
    peer: SocketAddr,
    id: CmIdHandle,
    l: Ledger,
    peer_info: Option<PeerInfo>,
    t0: SimTime,
    pending: VecDeque<CmEvent>,
    events: Vec<EventRecord>,
    timeline: Vec<TimelineEntry>,
    qp_states: Vec<QpStateRecord>,
    /// Arm the CQ for solicited completions only (waiting for the peer's SEND, not for our
    /// own WRs' completions).
    solicited_only: bool,
    generation: u64,
    iterations: u32,
    bytes_verified: u64,
    rtts_ns: Vec<u64>,
    data_ns: Option<(u64, u64)>,
    stopped: Option<Stop>,
    failures: Vec<String>,
    established: bool,
    /// The QP's path MTU once connected (what the CM negotiated, after the device's clamp).
    path_mtu: Option<Mtu>,
    /// The signal that asked this session to stop, if one did.
    interrupted: Option<&'static str>,
    /// Past the data phase (the FIN exchange, the teardown): a signal shortens the waits to
    /// [`GRACE`] instead of ending them.
    closing: bool,
    /// Progress and per-iteration lines.
    live: Live,
    /// Clients the server served before this one, as its REP said (client).
    busy_ahead: Option<u32>,
    /// The iterations the run ended with when it ended before the count asked for
    /// (`--duration`, a signal): what the FIN said.
    ended_early: Option<u32>,
}

impl<'a, N: PingNic> Session<'a, N> {
    /// A session on `node` for the id `id` (client: address resolved; server: from a
    /// CONNECT_REQUEST whose private data gave `params`). `t0` is when the connection started.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node: &'a Node<N>,
        role: Role,
        id: CmIdHandle,
        peer: SocketAddr,
        params: Params,
        side: &super::SideOptions,
        t0: SimTime,
        setup_events: Vec<(CmEvent, SimTime)>,
    ) -> Session<'a, N> {
        let recvs = side.recvs.max(1);
        let mut s = Session {
            node,
            role,
            params,
            recvs,
            kill_after: side.kill_peer_after,
            write_depth: side.depth,
            timeout: side.timeout,
            peer,
            id,
            l: Ledger::new(Layout::new(params.size, recvs)),
            peer_info: None,
            t0,
            pending: VecDeque::new(),
            events: Vec::new(),
            timeline: Vec::new(),
            qp_states: Vec::new(),
            solicited_only: false,
            generation: 0,
            iterations: 0,
            bytes_verified: 0,
            rtts_ns: Vec::new(),
            data_ns: None,
            stopped: None,
            qp_rc: None,
            failures: Vec::new(),
            established: false,
            path_mtu: None,
            interrupted: None,
            closing: false,
            live: Live::new(side.progress, side.per_iteration).with_prefix(
                params
                    .group
                    .map_or(String::new(), |g| format!("qp {}: ", g.index)),
            ),
            busy_ahead: None,
            ended_early: None,
        };
        for (ev, at) in setup_events {
            s.record_event(&ev, at);
        }
        // Events of this id that another session's thread reads wait for this one; the
        // peer's datagrams are counted (progress).
        s.h().with(|ep, _| {
            ep.inner_mut().open_mailbox(id);
            ep.inner_mut().watch_peer(peer);
        });
        s
    }

    /// A server's session: the lobby ran the client's handshake, and the session takes over
    /// the QP and CQ the REP announced (its MR and receives come now; until then the
    /// client's SENDs met RNR NAKs and were retried).
    pub fn adopt(mut self, qp: Qp, cq: CqHandle) -> Session<'a, N> {
        self.l.qp = Some(qp);
        self.l.cq = Some(cq);
        self
    }

    fn h(&self) -> &UdpHandle<PingEndpoint<N>> {
        self.node.handle()
    }

    fn ms(&self, now: SimTime) -> f64 {
        now.as_nanos().saturating_sub(self.t0.as_nanos()) as f64 / 1e6
    }

    fn record_event(&mut self, ev: &CmEvent, now: SimTime) {
        self.events.push(EventRecord {
            t_ms: self.ms(now),
            event: upper_snake(&format!("{:?}", ev.event)),
            status: ev.status,
        });
    }

    fn note(&mut self, now: SimTime, what: String) {
        self.timeline.push(TimelineEntry {
            t_ms: self.ms(now),
            what,
        });
    }

    /// The signal that asked the process to stop, if one did (noted in the timeline once).
    fn interrupted(&mut self) -> Option<&'static str> {
        if self.interrupted.is_none() {
            interrupt::signal()?;
            let name = interrupt::signal_name();
            self.interrupted = Some(name);
            static ANNOUNCED: std::sync::Once = std::sync::Once::new();
            ANNOUNCED.call_once(|| {
                eprintln!("rnic ping: {name}: stopping cleanly (a second signal exits at once)");
            });
            let now = self.h().now();
            self.note(
                now,
                format!("{name}: stopping (a second signal exits at once)"),
            );
        }
        self.interrupted
    }

    fn qp_state(&mut self, when: &str) -> Option<QpState> {
        let qp = self.l.qp?;
        let (attr, _) = self
            .h()
            .with(|ep, _| ep.inner().host().dev().query_qp(qp.handle).ok())?;
        let st = attr.qp_state;
        if self.established {
            self.path_mtu.get_or_insert(attr.path_mtu);
        }
        self.qp_states.push(QpStateRecord {
            when: when.to_string(),
            state: qp_state_name(st),
        });
        Some(st)
    }

    /// Creates the CQ, MR and QP (`rdma_create_qp`) and posts the receives.
    fn create_resources(&mut self) -> Result<(), Stop> {
        let pd = self.node.pd();
        let len = self.l.layout.len as usize;
        let depth = Lobby::depth(self.recvs) + self.write_depth;
        let (id, l_qp, l_cq) = (self.id, self.l.qp, self.l.cq);
        let comp = self.node.comp().clone();
        let res = self.h().with(|ep, _| {
            let (cm, dev) = ep.inner_mut().host_mut().split();
            let access =
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
            let mr = dev.reg_mr(pd, len, access)?;
            if let (Some(qp), Some(cq)) = (l_qp, l_cq) {
                return Ok::<_, verbs_core::Error>((mr, cq, qp));
            }
            let cq = dev.create_cq(2 * depth + 16, Some(&comp))?;
            let init = QpInitAttr::rc(cq, cq, QpCap::uniform(depth, 1, 0), true);
            let qp = cm.create_qp(dev, id, pd, &init)?;
            Ok((mr, cq, qp))
        });
        let (mr, cq, qp) = res.map_err(|e| Stop::Failed(format!("creating resources: {e}")))?;
        self.l.mr = Some(mr);
        self.l.cq = Some(cq);
        self.l.qp = Some(qp);
        for slot in 0..self.l.layout.slots {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    fn post_recv(&mut self, slot: u64) -> Result<(), Stop> {
        let (node, l) = (self.node, &mut self.l);
        node.handle()
            .with(|ep, _| l.post_recv(ep.inner_mut().host_mut(), slot))
    }

    fn load(&self, offset: u64, len: u32) -> Result<Vec<u8>, Stop> {
        self.h()
            .with(|ep, _| self.l.load(ep.inner().host(), offset, len))
    }

    /// A solicited SEND of `data` from the send buffer.
    fn send(&mut self, data: &[u8]) -> Result<u64, Stop> {
        let (node, l) = (self.node, &mut self.l);
        node.handle()
            .with(|ep, _| l.send(ep.inner_mut().host_mut(), data))
    }

    /// Polls the CQ and the event channel once; reads and re-posts consumed receives.
    fn pump(&mut self) -> Result<(), Stop> {
        let (node, l, solicited, id) = (self.node, &mut self.l, self.solicited_only, self.id);
        let (polled, evs, generation, now) = node.handle().with(|ep, now| {
            let polled = l.poll(ep.inner_mut().host_mut(), Some(solicited));
            (
                polled,
                node.own_events(ep, now, Some(id)),
                ep.generation(),
                now,
            )
        });
        self.generation = generation;
        self.take_events(evs, now);
        polled
    }

    /// Records this connection's events and queues them for [`expect_event`](Self::expect_event).
    fn take_events(&mut self, evs: Vec<CmEvent>, now: SimTime) {
        for ev in evs {
            self.record_event(&ev, now);
            self.pending.push_back(ev);
        }
    }

    /// Pumps until `cond` holds. In the data phase an error completion, a DISCONNECTED or
    /// `--timeout` without progress ends the wait with the reason.
    /// A signal ends the wait at once, except while closing (then the limit is [`GRACE`]).
    fn wait(&mut self, what: &str, cond: impl Fn(&Session<'_, N>) -> bool) -> Result<(), Stop> {
        let mut timeout = nanos(self.timeout);
        let mut limit = self.h().now().plus_nanos(timeout);
        // `--timeout` is a limit on time without progress: datagrams still arriving (a WRITE
        // stream, which completes nothing on this side) push the limit on.
        let mut received = self.datagrams_received();
        loop {
            self.pump()?;
            if cond(self) {
                return Ok(());
            }
            if let Some(sig) = self.interrupted() {
                if !self.closing {
                    return Err(Stop::Interrupted(sig));
                }
                if timeout > nanos(GRACE) {
                    timeout = nanos(GRACE);
                    limit = limit.min(self.h().now().plus_nanos(timeout));
                }
            }
            if !self.l.disconnecting {
                if let Some(s) = self.l.transport_error {
                    return Err(Stop::Transport(s));
                }
                if self
                    .pending
                    .iter()
                    .any(|e| e.event == CmEventType::Disconnected)
                {
                    return Err(Stop::PeerDisconnected);
                }
                // A REJ after ESTABLISHED (the server gave up the handshake before it read
                // our RTU): nothing more will come.
                if let Some(e) = self
                    .pending
                    .iter()
                    .find(|e| e.event == CmEventType::Rejected)
                {
                    return Err(Stop::Failed(format!(
                        "rejected after ESTABLISHED (status {}){}",
                        e.status,
                        peer_says(e)
                    )));
                }
            }
            let now = self.h().now();
            if now >= limit {
                let r = self.datagrams_received();
                if r == received {
                    return Err(Stop::Timeout(what.to_string()));
                }
                received = r;
                limit = now.plus_nanos(timeout);
            }
            let g = self.generation;
            let left = Duration::from_nanos(limit.as_nanos() - now.as_nanos());
            let (ch, id) = (self.node.channel(), self.id);
            self.h().wait_until(left, |ep| {
                ep.generation() != g
                    || ep.inner().host().cm().pending_events(ch) > 0
                    || ep.inner().has_mail(id)
                    || interrupt::requested()
            });
        }
    }

    /// Datagrams this side has received from its peer so far (not another client's).
    fn datagrams_received(&self) -> u64 {
        let peer = self.peer;
        self.h().with_quiet(|ep, _| ep.inner().peer_datagrams(peer))
    }

    /// Waits for the next CM event, which must be `want`.
    fn expect_event(&mut self, want: CmEventType) -> Result<CmEvent, Stop> {
        let name = upper_snake(&format!("{want:?}"));
        self.wait(&name, |s| !s.pending.is_empty())?;
        let ev = self
            .pending
            .pop_front()
            .ok_or_else(|| Stop::Failed("no event".into()))?;
        if ev.event != want {
            return Err(Stop::Failed(format!(
                "expected {name}, got {:?} (status {}){}",
                ev.event,
                ev.status,
                peer_says(&ev)
            )));
        }
        Ok(ev)
    }

    fn next_message(&mut self, what: &str) -> Result<Vec<u8>, Stop> {
        self.solicited_only = true;
        let r = self.wait(what, |s| !s.l.messages.is_empty());
        self.solicited_only = false;
        r?;
        self.l
            .messages
            .pop_front()
            .ok_or_else(|| Stop::Failed("no message".into()))
    }

    fn wait_send(&mut self, wr_id: u64, what: &str) -> Result<(), Stop> {
        self.wait(what, |s| !s.l.send_out.contains_key(&wr_id))
    }

    /// The last SEND of the data phase: its completion, or the peer's DISCONNECTED. The peer
    /// may have got the message while its ACK was lost; it then disconnects before our
    /// retransmission is acknowledged, and the WR is flushed in the teardown.
    fn wait_closing_send(&mut self, wr_id: u64, what: &str) -> Result<(), Stop> {
        self.wait(what, |s| {
            !s.l.send_out.contains_key(&wr_id)
                || s.pending
                    .iter()
                    .any(|e| e.event == CmEventType::Disconnected)
        })
    }

    fn verify(&mut self, what: &str, got: &[u8], want: &[u8]) -> Result<(), Stop> {
        self.bytes_verified += compare(what, got, want)?;
        Ok(())
    }

    /// Kills the peer (fault layer) at the close when `--kill-peer-after` ≥ count (earlier
    /// points pause the data phase instead).
    fn maybe_kill(&mut self, at: u32) {
        let count = self.ended_early.unwrap_or(self.params.count);
        if self.kill_after.map(|k| k.min(count)) == Some(at) {
            let now = self.h().with(|ep, now| {
                ep.kill_peer();
                now
            });
            self.note(
                now,
                format!("--kill-peer-after: the peer is dead from iteration {at} on"),
            );
        }
    }

    /// The client's connect: QP, receives, `rdma_connect` with the parameters, ESTABLISHED.
    fn client_connect(&mut self) -> Result<(), Stop> {
        let id = self.id;
        self.h()
            .with(|ep, _| ep.inner_mut().host_mut().split().0.resolve_route(id))
            .map_err(|e| Stop::Failed(format!("rdma_resolve_route: {e}")))?;
        self.expect_event(CmEventType::RouteResolved)?;
        self.create_resources()?;
        let param = ConnParam {
            private_data: self.params.encode(N::ASYNC_COMPLETIONS),
            ..conn_param()
        };
        self.h()
            .with(|ep, now| {
                let (cm, dev) = ep.inner_mut().host_mut().split();
                cm.connect(dev, now, id, &param)
            })
            .map_err(|e| Stop::Failed(format!("rdma_connect: {e}")))?;
        let ev = match self.wait("ESTABLISHED", |s| !s.pending.is_empty()) {
            Ok(()) => self.pending.pop_front(),
            Err(stop) => return Err(self.no_connection(stop, None)),
        };
        let Some(ev) = ev else {
            return Err(Stop::Failed("no event".into()));
        };
        if ev.event != CmEventType::Established {
            let stop = Stop::Failed(format!(
                "expected ESTABLISHED, got {:?} (status {})",
                ev.event, ev.status
            ));
            return Err(self.no_connection(stop, Some(&ev)));
        }
        if let Some(ahead) = parse_busy(&ev.param.private_data) {
            self.busy_ahead = Some(ahead);
            let now = self.h().now();
            let text =
                format!("the server is busy: {ahead} client(s) before us; waiting for our turn");
            eprintln!("rnic ping: connected to {}; {text}", self.peer);
            self.note(now, text);
        }
        Ok(())
    }

    /// The server's side once the lobby accepted the client and ESTABLISHED came: MR and
    /// receives on the lobby's QP.
    fn server_accept(&mut self) -> Result<(), Stop> {
        if self.l.qp.is_none() {
            return Err(Stop::Failed(
                "no QP: a server session needs the lobby's".into(),
            ));
        }
        self.create_resources()
    }

    /// Sends this side's buffer info and receives the peer's.
    fn exchange_info(&mut self) -> Result<(), Stop> {
        let mr = self.l.mr.ok_or_else(|| Stop::Failed("no MR".into()))?;
        let mut info = Vec::with_capacity(INFO_LEN);
        info.extend_from_slice(&(mr.addr + self.l.layout.write_target).to_le_bytes());
        info.extend_from_slice(&(mr.addr + self.l.layout.read_source).to_le_bytes());
        info.extend_from_slice(&mr.rkey.to_le_bytes());
        info.extend_from_slice(&self.params.size.to_le_bytes());
        info.extend_from_slice(MAGIC);
        let wr = self.send(&info)?;
        let msg = match (self.next_message("the peer's buffer info"), self.busy_ahead) {
            (Err(Stop::Timeout(what)), Some(ahead)) => {
                return Err(Stop::Timeout(format!(
                    "{what}: the server said it had {ahead} client(s) to serve before us \
                     (a longer --timeout waits for them)"
                )))
            }
            (r, _) => r?,
        };
        self.wait_send(wr, "the info SEND's completion")?;
        let bad = || Stop::Failed(format!("bad buffer info message ({} bytes)", msg.len()));
        if msg.len() != INFO_LEN || &msg[24..28] != MAGIC {
            return Err(bad());
        }
        let u64_at = |o: usize| msg[o..o + 8].try_into().map(u64::from_le_bytes);
        let u32_at = |o: usize| msg[o..o + 4].try_into().map(u32::from_le_bytes);
        let p = PeerInfo {
            write_addr: u64_at(0).map_err(|_| bad())?,
            read_addr: u64_at(8).map_err(|_| bad())?,
            rkey: u32_at(16).map_err(|_| bad())?,
            len: u32_at(20).map_err(|_| bad())?,
        };
        if p.len != self.params.size {
            return Err(Stop::Failed(format!(
                "peer buffers are {} bytes, {} expected",
                p.len, self.params.size
            )));
        }
        self.peer_info = Some(p);
        Ok(())
    }

    fn peer(&self) -> Result<PeerInfo, Stop> {
        self.peer_info
            .ok_or_else(|| Stop::Failed("no peer info".into()))
    }

    fn rdma_disconnect(&mut self, why: &str) {
        let (id, node, l) = (self.id, self.node, &mut self.l);
        let (r, now, posted) = node.handle().with(|ep, now| {
            let host = ep.inner_mut().host_mut();
            // Completions already in the CQ are not the flush's: booked first, under the same
            // lock as the disconnect, so that no receive completes in between unseen.
            let _ = l.poll(host, None);
            let posted = l.recv_out.len() as u64;
            let (cm, dev) = host.split();
            (cm.disconnect(dev, now, id), now, posted)
        });
        if let Err(e) = r {
            self.failures.push(format!("rdma_disconnect failed: {e}"));
        }
        self.l.disconnecting = true;
        let flushed_before = self.l.tally.flushed_recvs;
        let _ = self.pump();
        let st = self.qp_state("after rdma_disconnect");
        if self.l.tally.recvs_posted_at_err == 0 {
            self.l.tally.recvs_posted_at_err = posted + flushed_before;
        }
        self.note(
            now,
            format!(
                "rdma_disconnect ({why}) → QP {}; {} receives flushed (WR_FLUSH_ERR)",
                st.map_or("?".into(), qp_state_name),
                self.l.tally.flushed_recvs - flushed_before,
            ),
        );
    }

    /// The disconnect: initiate or answer, then DISCONNECTED and TIMEWAIT_EXIT.
    fn teardown(&mut self, initiate: bool) -> (Option<i32>, bool) {
        // From here on a signal shortens the waits instead of ending them: the DREQ (ours or
        // the answer to the peer's) must go out, as a Linux kernel sends it for a process
        // that dies.
        self.closing = true;
        let why = match &self.stopped {
            Some(s) => format!("after: {s}"),
            None => "--disconnect-by".to_string(),
        };
        // The receives the QP held when it went to ERR (a transport error may have got there
        // first).
        if self.l.transport_error.is_some() {
            self.l.tally.recvs_posted_at_err =
                self.l.recv_out.len() as u64 + self.l.tally.flushed_recvs;
        }
        if initiate {
            self.rdma_disconnect(&why);
        }
        self.l.disconnecting = true;
        if self
            .pending
            .iter()
            .any(|e| e.event == CmEventType::Rejected)
        {
            // The peer rejected the connection after ESTABLISHED (its REJ put our id in
            // TimeWait): no DISCONNECTED or TIMEWAIT_EXIT will come for it.
            let now = self.h().now();
            self.note(
                now,
                "REJECTED: no DISCONNECTED or TIMEWAIT_EXIT awaited".into(),
            );
            return (None, false);
        }
        let give_up_ms = 2 * self.node.cfg().dreq_give_up_ms() + 1000;
        // A server whose client stopped answering (unplanned: no --kill-peer-after) does not
        // wait out the DREQ's retries (74 s with Linux's timers) before it serves the next
        // client: else each client killed after its handshake would hold the server that
        // long. After a transport error (the RC retries ran out: the client is gone) it does
        // not wait at all; after a timeout, one DREQ retransmission interval.
        let peer_gone = self.role == Role::Server
            && self.kill_after.is_none()
            && matches!(self.stopped, Some(Stop::Timeout(_) | Stop::Transport(_)));
        self.timeout = match &self.stopped {
            _ if !peer_gone => self.timeout.max(Duration::from_millis(give_up_ms)),
            Some(Stop::Transport(_)) => Duration::ZERO,
            _ => Duration::from_millis(self.node.cfg().dreq_timeout_ms()),
        };
        if !peer_gone
            && self.interrupted.is_none()
            && matches!(self.stopped, Some(Stop::Timeout(_) | Stop::Transport(_)))
        {
            // A silent peer: the wait can be long, say so.
            eprintln!(
                "rnic ping {}: {}; waiting for DISCONNECTED (the DREQ gives up after {:.1} s; Ctrl-C stops now)",
                self.role.name(),
                self.stopped.as_ref().map_or(String::new(), ToString::to_string),
                self.node.cfg().dreq_give_up_ms() as f64 / 1e3
            );
        }
        let status = match self.expect_event(CmEventType::Disconnected) {
            Ok(ev) => {
                let now = self.h().now();
                let st = if initiate {
                    None
                } else {
                    self.qp_state("on DISCONNECTED")
                };
                self.note(
                    now,
                    format!(
                        "DISCONNECTED (status {}){}",
                        ev.status,
                        st.map_or(String::new(), |s| format!(
                            ", QP still {}",
                            qp_state_name(s)
                        ))
                    ),
                );
                Some(ev.status)
            }
            Err(e) if peer_gone => {
                let now = self.h().now();
                self.note(
                    now,
                    format!(
                        "the client stopped answering: DISCONNECTED not awaited (the DREQ would give up after {:.0} s); the id is destroyed and the next client served",
                        self.node.cfg().dreq_give_up_ms() as f64 / 1e3
                    ),
                );
                self.failures.push(format!("DISCONNECTED: {e}"));
                return (None, false);
            }
            Err(e) => {
                self.failures.push(format!("DISCONNECTED: {e}"));
                if self.interrupted.is_some() {
                    // Stopping on a signal, with a silent peer: no TIMEWAIT_EXIT to wait for.
                    return (None, false);
                }
                None
            }
        };
        // The peer's DREQ needs our rdma_disconnect (its DREP) before TimeWait: always when
        // we did not initiate, and when we did but the two DREQs crossed (our id is then in
        // DREQ_RCVD, cm-spec §4.5).
        let id = self.id;
        let crossed = initiate
            && self
                .h()
                .with(|ep, _| ep.inner().host().cm().ib_cm_state(id))
                == Some(IbCmState::DreqRcvd);
        if !initiate {
            self.rdma_disconnect("answering the peer's DREQ");
        } else if crossed {
            self.rdma_disconnect("answering the peer's DREQ, which crossed ours");
        }
        let exited = match self.expect_event(CmEventType::TimewaitExit) {
            Ok(_) => {
                let now = self.h().now();
                self.note(now, "TIMEWAIT_EXIT".into());
                true
            }
            Err(e) => {
                self.failures.push(format!("TIMEWAIT_EXIT: {e}"));
                false
            }
        };
        let _ = self.pump();
        (status, exited)
    }

    fn destroy(&mut self) {
        let (id, qp, cq, mr, peer) = (self.id, self.l.qp, self.l.cq, self.l.mr, self.peer);
        self.h().with(|ep, now| {
            // Late events of this id (none is awaited any more) are dropped with it.
            ep.inner_mut().close_mailbox(id);
            ep.inner_mut().unwatch_peer(peer);
            let (cm, dev) = ep.inner_mut().host_mut().split();
            // Teardown errors change nothing in the report: the checks were made before.
            if let Some(qp) = qp {
                let _ = dev.destroy_qp(qp.handle);
                let _ = cm.detach_qp(id);
            }
            let _ = cm.destroy_id(dev, now, id);
            if let Some(cq) = cq {
                let _ = dev.destroy_cq(cq);
            }
            if let Some(mr) = mr {
                let _ = dev.dereg_mr(mr.handle);
            }
        });
    }

    /// Runs the connection to the end and returns the report. The server's session starts
    /// once the lobby's handshake completed (its timeline from the CONNECT_REQUEST), the
    /// client's after ADDR_RESOLVED.
    pub fn run(mut self) -> PingReport {
        let (role, peer, id) = (self.role.name(), self.peer, self.id.0);
        let _conn = tracing::info_span!("conn", role = %role, %peer, id).entered();
        let res = match self.role {
            Role::Client => self.client_connect(),
            Role::Server => self.server_accept(),
        };
        let res = res.and_then(|()| {
            self.established = true;
            let _ = self.qp_state("after ESTABLISHED");
            self.exchange_info()?;
            match self.role {
                Role::Client => self.client_data(),
                Role::Server => self.server_data(),
            }
        });
        if let Err(stop) = res {
            self.stopped = Some(stop);
        }
        let we_disconnect = match &self.stopped {
            None => self.params.disconnect_by.role() == self.role,
            // A dead QP or a silent peer: this side disconnects now. A DISCONNECTED already
            // queued is answered instead.
            Some(Stop::PeerDisconnected) => false,
            Some(_) => true,
        };
        let (status, exited) = if self.established {
            self.teardown(we_disconnect)
        } else {
            (None, false)
        };
        let final_state = self.qp_state("at the end");
        self.qp_rc = self.l.qp.and_then(|qp| self.node.qp_rc_counters(qp.qp_num));
        self.destroy();
        self.report(status, exited, final_state, we_disconnect)
    }
}

/// A REJ's private data as the peer's reason, when it is text (a ping server's is).
fn peer_says(ev: &CmEvent) -> String {
    std::str::from_utf8(&ev.param.private_data)
        .ok()
        .map(|t| t.trim_end_matches('\0'))
        .filter(|t| !t.is_empty() && t.chars().all(|c| !c.is_control()))
        .map_or(String::new(), |t| format!(": the peer says \"{t}\""))
}
