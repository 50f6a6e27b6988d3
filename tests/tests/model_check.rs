//! Exhaustive model checking of the CM disconnect protocol with `stateright` (TESTING.md, the
//! fourth layer): every interleaving of a small configuration, checked against S1–S5.
//!
//! **What is real.** The model state holds, for each of the two hosts, the real
//! [`RdmaCm`] (with its sans-IO IB CM engine) and the real [`SimDevice`] it drives: every
//! action calls the same code the fabric tests and the UDP driver run — `rdma_disconnect`, MAD
//! decoding and the §3.3 transition table, the DREQ retransmission and TimeWait timers, the QP
//! moving to ERR and the device flushing its WRs, the GSI (QP1) path of the device. Nothing of
//! the protocol is re-implemented here; the model only chooses what happens next.
//!
//! **What is abstracted.** The network is a multiset of in-flight packets (the device's own
//! RoCE packets, UD SEND ONLY to QP1 for MADs): any one may be delivered, dropped, or duplicated
//! (once: both copies are then marked and never duplicated again), in any order. Each host has
//! its own virtual clock; "fire a timer" advances that host's clock to its earliest armed
//! deadline and runs it, so timers fire in any order relative to deliveries and to the other
//! host (over-approximating every delay and clock skew). The application reads and acks every
//! CM event and polls its CQ after every step and records a compact history, which the
//! properties check.
//!
//! **State identity.** stateright identifies states by the `Hash` of the state. The real types
//! are `Clone` (derived: plain data, ordered maps) but not `Hash`, and deriving `Hash` through
//! every verbs type and the engine's `RefCell` timer index would be a large change for no gain.
//! The model state therefore hashes its full `Debug` rendering (into a reused buffer, then a
//! 64-bit digest). That is *exact*: derived `Debug` shows every field, and every container
//! in these crates is ordered (no HashMap), so two states hash alike only if every field of both
//! engines, both devices, the network and the history agree. An abstract digest (CM states, QP
//! states, …) would merge states whose futures differ (e.g. DREQ retries left) and could hide a
//! bug; the price of exactness is that states differing only in counters are kept apart. The
//! timer index is synced (`poll_timeout`) after every step, so its lazy bookkeeping never
//! distinguishes states.
//!
//! Bounds, figures and how to run: docs/testing-model-check.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code, helpers outside #[test]

use cm_core::api::{CmEventType as E, CmIdHandle, ConnParam, EventChannel, RdmaCm};
use cm_core::engine::{CmConfig, IbCmId, IbCmState};
use cm_core::wire::{self, RdmaPortSpace, CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ};
use rnic_sim::fabric::payload_digest;
use rnic_sim::roce::Packet;
use rnic_sim::{SimDevice, SimDeviceConfig};
use stateright::{Checker, Expectation, Model, Property};
use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use verbs_core::{
    CqHandle, Device, Gid, Qp, QpCap, QpInitAttr, QpState, RecvWr, SendWr, SimTime, WcStatus,
};

/// Host 0 connected (active side), host 1 listened and accepted (passive side).
const HOSTS: usize = 2;
const PORT: u16 = 7471;
/// ETIMEDOUT as an event status (cm-spec §4.7).
const ETIMEDOUT: i32 = -110;

/// The bounds of the exploration.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// `CmConfig::max_cm_retries`: DREQ tries = 1 + this (the passive side takes it from the
    /// REQ, cm-spec §3.2).
    max_cm_retries: u8,
    /// Receives posted on each side before the exploration.
    recvs: u64,
    /// `rdma_disconnect` calls each application may make (the second one answers a DREQ that
    /// crossed its own).
    disconnect_calls: u8,
    /// Packets the network may duplicate in one run.
    duplicates: u8,
    /// Whether each application posts one SEND right after its first `rdma_disconnect` (to its
    /// QP in ERR, so it must be flushed: S4).
    send_after_err: bool,
    /// Adds the deliberately wrong property "at most one DREQ sent per host" (mutation check).
    wrong_property: bool,
}

impl Bounds {
    fn standard() -> Bounds {
        Bounds {
            max_cm_retries: 1,
            recvs: 2,
            disconnect_calls: 2,
            duplicates: 0,
            send_after_err: true,
            wrong_property: false,
        }
    }
}

/// A value behind a `Mutex`, only to make it `Sync`: stateright shares states between its
/// threads, and the engine's timer index is a `RefCell` (`Send`, not `Sync`). Mutation goes
/// through `Mutex::get_mut` (no locking); `Clone` and `Debug` lock.
struct SyncCell<T>(Mutex<T>);

impl<T> SyncCell<T> {
    fn new(v: T) -> Self {
        SyncCell(Mutex::new(v))
    }

    fn get(&mut self) -> &mut T {
        self.0.get_mut().unwrap()
    }

    fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap()
    }
}

impl<T: Clone> Clone for SyncCell<T> {
    fn clone(&self) -> Self {
        SyncCell::new(self.lock().clone())
    }
}

impl<T: fmt::Debug> fmt::Debug for SyncCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.lock().fmt(f)
    }
}

/// One host: the real rdma_cm and RNIC, its clock and the application's handles.
#[derive(Clone, Debug)]
struct Node {
    cm: SyncCell<RdmaCm>,
    dev: SimDevice,
    now: SimTime,
    ch: EventChannel,
    id: CmIdHandle,
    qp: Qp,
    cq: CqHandle,
}

impl Node {
    /// The earliest armed deadline of the CM or the device.
    fn deadline(&self) -> Option<SimTime> {
        match (self.cm.lock().poll_timeout(), self.dev.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn qp_state(&self) -> QpState {
        self.dev.query_qp(self.qp.handle).unwrap().0.qp_state
    }
}

/// A packet sent.
#[derive(Clone, Debug)]
struct Msg {
    from: usize,
    /// CM attribute ID of the MAD (0 for a non-MAD packet).
    attr: u16,
    packet: Packet,
}

impl Msg {
    fn key(&self) -> (usize, u16, u32, &[u8]) {
        let p = &self.packet;
        (self.from, self.attr, p.bth.psn, &p.payload[..])
    }
}

/// A CM event as the application saw it, with what the model knew at that moment.
#[derive(Clone, Debug)]
struct Ev {
    event: E,
    status: i32,
    at: SimTime,
    /// TimeWait of the id in ns (for DISCONNECTED).
    timewait_ns: u64,
    /// The peer's CM had processed a DREQ from this host.
    peer_got_dreq: bool,
    /// This host's CM had processed a DREQ from the peer.
    got_dreq: bool,
    /// DREQs this host had sent (first try and retransmissions).
    dreq_tx: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    Send,
    Recv,
}

#[derive(Clone, Debug)]
struct Posted {
    wr_id: u64,
    queue: Queue,
    /// Posted while the QP was in ERR.
    in_err: bool,
}

#[derive(Clone, Debug)]
struct Done {
    wr_id: u64,
    status: WcStatus,
    /// The QP was in ERR when this completion was polled.
    after_err: bool,
}

/// One host's history: what the application did and saw, and the MADs counted on the wire.
#[derive(Clone, Debug, Default)]
struct Hist {
    events: Vec<Ev>,
    posted: Vec<Posted>,
    done: Vec<Done>,
    disconnect_calls: u8,
    /// `rdma_disconnect` calls that did not return 0 (S7, cm-spec §4.4).
    disconnect_errors: u8,
    sent_after_err: bool,
    qp_err_seen: bool,
    dreq_tx: u8,
    dreq_rx: u8,
    drep_tx: u8,
}

impl Hist {
    fn count(&self, e: E) -> usize {
        self.events.iter().filter(|x| x.event == e).count()
    }
}

/// The model state: both hosts, the network, the histories.
#[derive(Clone, Debug)]
struct State {
    nodes: Vec<Node>,
    /// Packets just sent whose fate (lost, in flight, duplicated) is not chosen yet, oldest
    /// first.
    sent: Vec<Msg>,
    /// Packets in flight (a multiset, in canonical order), each to be delivered.
    net: Vec<Msg>,
    /// Duplications the network may still make.
    dups_left: u8,
    hist: Vec<Hist>,
}

/// Exact identity: the full `Debug` rendering (see the module docs), rendered into a reused
/// per-thread buffer and digested with the fabric's word-at-a-time hash — feeding the text to
/// the checker's hasher byte by byte cost a third of the run.
impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        thread_local!(static TEXT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) });
        TEXT.with(|text| {
            let mut text = text.borrow_mut();
            text.clear();
            write!(text, "{self:?}").unwrap();
            h.write_u64(payload_digest(text.as_bytes()));
        });
    }
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

/// What can happen next.
#[derive(Clone, Debug, PartialEq)]
enum Action {
    /// The application of host `h` calls `rdma_disconnect`.
    Disconnect(usize),
    /// Host `h`'s earliest timer fires (its clock jumps to the deadline).
    Fire(usize),
    /// The oldest packet just sent goes in flight.
    Transmit,
    /// The oldest packet just sent is lost.
    Lose,
    /// The oldest packet just sent goes in flight twice.
    Duplicate,
    /// The `i`-th packet in flight reaches its destination.
    Deliver(usize),
}

/// The model: only its bounds (the engines are not `Sync`, the model must be; the initial state
/// is rebuilt deterministically when asked for).
struct DisconnectModel {
    bounds: Bounds,
}

fn ip(h: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, h as u8 + 1))
}

fn gid(h: usize) -> Gid {
    Gid::from_ip(ip(h))
}

fn conn_param() -> ConnParam {
    ConnParam::rping_defaults()
}

/// Moves every packet both devices want to send, losslessly, until both are idle (setup only).
fn pump(nodes: &mut [Node]) {
    loop {
        let mut moved = false;
        for from in 0..HOSTS {
            let now = nodes[from].now;
            while let Some(t) = nodes[from].dev.poll_transmit(now) {
                moved = true;
                let to = 1 - from;
                assert_eq!(t.dst, gid(to));
                let n = &mut nodes[to];
                n.dev.handle_packet(n.now, gid(from), t.packet);
                n.cm.get().poll_gsi(&mut n.dev, n.now);
            }
        }
        if !moved {
            return;
        }
    }
}

/// The next CM event of `n`'s channel, acked.
fn event(n: &mut Node, ch: EventChannel) -> Option<cm_core::api::CmEvent> {
    let ev = n.cm.get().get_cm_event(&mut n.dev, n.now, ch).ok()?;
    n.cm.get().ack_cm_event(ev.clone()).unwrap();
    Some(ev)
}

fn expect(n: &mut Node, ch: EventChannel, want: E) -> cm_core::api::CmEvent {
    let ev = event(n, ch).unwrap_or_else(|| panic!("no event, expected {want:?}"));
    assert_eq!(ev.event, want, "{ev:?}");
    ev
}

/// Two hosts connected through a perfect pipe (the rdma_cm calls of `cm_sim.rs`), `recvs`
/// receives posted on each side: the state the exploration starts from.
fn established(b: &Bounds) -> State {
    let mk = |h: usize| {
        let dev = SimDevice::new(SimDeviceConfig::new(format!("sim{h}"), gid(h)));
        let cfg = CmConfig {
            ca_guid: 0x0002_c903_0000_0000 | (h as u64 + 1),
            seed: (h as u64 + 1) * 0x9e37_79b9,
            max_cm_retries: b.max_cm_retries,
            ..CmConfig::default()
        };
        let cm = RdmaCm::new(&dev, cfg).unwrap();
        (cm, dev)
    };
    let ((mut cm0, mut dev0), (mut cm1, dev1)) = (mk(0), mk(1));
    let t0 = SimTime::ZERO;
    let server = SocketAddr::new(ip(1), PORT);

    // Passive side: bind + listen.
    let ch1 = cm1.create_event_channel();
    let lid = cm1.create_id(ch1, RdmaPortSpace::Tcp).unwrap();
    cm1.bind_addr(lid, server).unwrap();
    cm1.listen(lid, 4).unwrap();

    // Active side: resolve, QP, connect.
    let ch0 = cm0.create_event_channel();
    let id0 = cm0.create_id(ch0, RdmaPortSpace::Tcp).unwrap();
    cm0.resolve_addr(id0, None, server).unwrap();
    let resources = |cm: &mut RdmaCm, dev: &mut SimDevice, id| {
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64, None).unwrap();
        let init = QpInitAttr::rc(cq, cq, QpCap::uniform(8, 1, 0), true);
        (cm.create_qp(dev, id, pd, &init).unwrap(), cq)
    };
    let (qp0, cq0) = resources(&mut cm0, &mut dev0, id0);
    let node = |cm, dev, ch, id, qp, cq| Node {
        cm: SyncCell::new(cm),
        dev,
        now: t0,
        ch,
        id,
        qp,
        cq,
    };
    // The passive node's id, QP and CQ are placeholders until it accepts.
    let mut nodes = vec![
        node(cm0, dev0, ch0, id0, qp0, cq0),
        node(cm1, dev1, ch1, lid, qp0, cq0),
    ];
    expect(&mut nodes[0], ch0, E::AddrResolved);
    nodes[0].cm.get().resolve_route(id0).unwrap();
    expect(&mut nodes[0], ch0, E::RouteResolved);
    {
        let n = &mut nodes[0];
        n.cm.get()
            .connect(&mut n.dev, t0, id0, &conn_param())
            .unwrap();
    }
    pump(&mut nodes);

    // Passive side: accept the CONNECT_REQUEST's new id.
    let req = expect(&mut nodes[1], ch1, E::ConnectRequest);
    {
        let n = &mut nodes[1];
        let (qp, cq) = resources(n.cm.get(), &mut n.dev, req.id);
        n.cm.get()
            .accept(&mut n.dev, t0, req.id, &conn_param())
            .unwrap();
        (n.id, n.qp, n.cq) = (req.id, qp, cq);
    }
    pump(&mut nodes);
    // Fetching the CONNECT_RESPONSE moves the active QP to RTS and sends the RTU (librdmacm's
    // work in rdma_get_cm_event); the passive side is ESTABLISHED once the RTU arrives.
    expect(&mut nodes[0], ch0, E::Established);
    pump(&mut nodes);
    expect(&mut nodes[1], ch1, E::Established);

    let mut hist = vec![Hist::default(), Hist::default()];
    for (h, n) in nodes.iter_mut().enumerate() {
        assert_eq!(n.qp_state(), QpState::Rts);
        assert_eq!(n.cm.get().ib_cm_state(n.id), Some(IbCmState::Established));
        assert_eq!(n.deadline(), None, "no timer armed once established");
        let wrs: Vec<RecvWr> = (0..b.recvs)
            .map(|i| RecvWr::new(100 * h as u64 + i + 1, Vec::new()))
            .collect();
        n.dev.post_recv(n.qp.handle, &wrs).unwrap();
        for w in &wrs {
            hist[h].posted.push(Posted {
                wr_id: w.wr_id,
                queue: Queue::Recv,
                in_err: false,
            });
        }
    }
    let mut s = State {
        nodes,
        sent: Vec::new(),
        net: Vec::new(),
        dups_left: b.duplicates,
        hist,
    };
    settle(&mut s);
    s
}

/// After every step: every packet the devices queued goes in flight (counting the MADs), the
/// applications read their events and poll their CQs, the network is put in canonical order.
fn settle(s: &mut State) {
    for from in 0..HOSTS {
        let now = s.nodes[from].now;
        while let Some(t) = s.nodes[from].dev.poll_transmit(now) {
            let attr = if t.packet.deth.is_some() {
                wire::decode(&t.packet.payload).map_or(0, |(h, _)| h.attribute_id)
            } else {
                0
            };
            match attr {
                DREQ => s.hist[from].dreq_tx += 1,
                DREP => s.hist[from].drep_tx += 1,
                _ => {}
            }
            s.sent.push(Msg {
                from,
                attr,
                packet: t.packet,
            });
        }
    }
    for h in 0..HOSTS {
        app_step(s, h);
    }
    s.net.sort_by(|a, b| a.key().cmp(&b.key()));
    for n in &mut s.nodes {
        // Syncs the engine's lazy timer index so that it never tells states apart.
        let _ = n.cm.get().poll_timeout();
    }
}

/// The application of host `h`: reads and acks every CM event, then polls its CQ.
fn app_step(s: &mut State, h: usize) {
    let peer = 1 - h;
    let peer_got_dreq = s.hist[peer].dreq_rx > 0;
    let n = &mut s.nodes[h];
    let hist = &mut s.hist[h];
    while let Some(ev) = event(n, n.ch) {
        assert_eq!(ev.id, n.id, "only the connected id has events");
        let timewait_ns = n.cm.get().engine().timewait_ms(IbCmId(n.id.0)).unwrap_or(0) * 1_000_000;
        hist.events.push(Ev {
            event: ev.event,
            status: ev.status,
            at: n.now,
            timewait_ns,
            peer_got_dreq,
            got_dreq: hist.dreq_rx > 0,
            dreq_tx: hist.dreq_tx,
        });
    }
    hist.qp_err_seen |= n.qp_state() == QpState::Err;
    let mut wcs = Vec::new();
    while n.dev.poll_cq(n.cq, 8, &mut wcs).unwrap() > 0 {}
    for wc in wcs {
        hist.done.push(Done {
            wr_id: wc.wr_id,
            status: wc.status,
            after_err: hist.qp_err_seen,
        });
    }
}

impl DisconnectModel {
    fn new(bounds: Bounds) -> Self {
        DisconnectModel { bounds }
    }

    fn is_quiescent(&self, s: &State) -> bool {
        let mut a = Vec::new();
        self.actions(s, &mut a);
        a.is_empty()
    }
}

impl Model for DisconnectModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![established(&self.bounds)]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if !s.sent.is_empty() {
            // A packet's fate is chosen when it is sent: losing or duplicating it later would
            // reach the same states through more interleavings.
            out.push(Action::Transmit);
            out.push(Action::Lose);
            if s.dups_left > 0 {
                out.push(Action::Duplicate);
            }
            return;
        }
        for h in 0..HOSTS {
            let hist = &s.hist[h];
            // The first call at any time; another only in answer to DISCONNECTED.
            let may_call = hist.disconnect_calls == 0 || hist.count(E::Disconnected) > 0;
            if may_call && hist.disconnect_calls < self.bounds.disconnect_calls {
                out.push(Action::Disconnect(h));
            }
            if s.nodes[h].deadline().is_some() {
                out.push(Action::Fire(h));
            }
        }
        for (i, m) in s.net.iter().enumerate() {
            // Identical copies are one choice, not two.
            if i > 0 && s.net[i - 1].key() == m.key() {
                continue;
            }
            out.push(Action::Deliver(i));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Disconnect(h) => {
                let n = &mut s.nodes[h];
                let r = n.cm.get().disconnect(&mut n.dev, n.now, n.id);
                s.hist[h].disconnect_calls += 1;
                s.hist[h].disconnect_errors += u8::from(r.is_err());
                if self.bounds.send_after_err && !s.hist[h].sent_after_err {
                    post_send(&mut s, h);
                }
            }
            Action::Fire(h) => {
                let n = &mut s.nodes[h];
                let t = n.deadline()?;
                n.now = n.now.max(t);
                if n.dev.poll_timeout().is_some_and(|d| d <= n.now) {
                    n.dev.handle_timeout(n.now);
                }
                if n.cm.get().poll_timeout().is_some_and(|d| d <= n.now) {
                    n.cm.get().handle_timeout(&mut n.dev, n.now);
                }
                n.cm.get().poll_gsi(&mut n.dev, n.now);
            }
            Action::Deliver(i) => {
                let m = s.net.remove(i);
                let to = 1 - m.from;
                if m.attr == DREQ {
                    s.hist[to].dreq_rx += 1;
                }
                let n = &mut s.nodes[to];
                n.dev.handle_packet(n.now, gid(m.from), m.packet);
                n.cm.get().poll_gsi(&mut n.dev, n.now);
            }
            Action::Transmit => s.net.push(s.sent.remove(0)),
            Action::Lose => {
                s.sent.remove(0);
            }
            Action::Duplicate => {
                let m = s.sent.remove(0);
                s.net.push(m.clone());
                s.net.push(m);
                s.dups_left -= 1;
            }
        }
        settle(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::always("S1 DISCONNECTED once, nothing after but TIMEWAIT_EXIT", s1),
            Property::always("S2 every WR completes at most once", s2_at_most_once),
            Property::always(
                "S2 every WR completed exactly once at quiescence",
                |m: &DisconnectModel, s: &State| !m.is_quiescent(s) || s2_exactly_once(s),
            ),
            Property::always("S3 completions in post order per queue", s3),
            Property::always("S4 flushes after ERR, no SUCCESS after a flush", s4),
            Property::always("S5 DISCONNECTED status is caused", s5),
            Property::always("S7 rdma_disconnect returns 0", |_, s: &State| {
                s.hist.iter().all(|h| h.disconnect_errors == 0)
            }),
            Property::always(
                "L1 at quiescence every side that disconnected has one DISCONNECTED",
                |m: &DisconnectModel, s: &State| !m.is_quiescent(s) || l1(s),
            ),
            Property::sometimes("both sides DISCONNECTED", |_, s: &State| {
                s.hist.iter().all(|h| h.count(E::Disconnected) == 1)
            }),
            Property::sometimes("both sides TIMEWAIT_EXIT", |_, s: &State| {
                s.hist.iter().all(|h| h.count(E::TimewaitExit) == 1)
            }),
            Property::sometimes("a DREQ retransmitted", |_, s: &State| {
                s.hist.iter().any(|h| h.dreq_tx >= 2)
            }),
            Property::sometimes("DREQs crossing", |_, s: &State| {
                s.hist.iter().all(|h| h.dreq_tx > 0 && h.dreq_rx > 0)
            }),
            Property::sometimes("DISCONNECTED with -110", |_, s: &State| {
                s.hist
                    .iter()
                    .flat_map(|h| &h.events)
                    .any(|e| e.event == E::Disconnected && e.status == ETIMEDOUT)
            }),
            Property::sometimes("duplicate DREQ answered from TimeWait", |_, s: &State| {
                s.hist.iter().any(|h| h.drep_tx >= 2)
            }),
            Property::sometimes("SEND posted in ERR flushed", |_, s: &State| {
                s.hist.iter().any(|h| {
                    h.posted
                        .iter()
                        .any(|p| p.queue == Queue::Send && p.in_err && done_count(h, p.wr_id) == 1)
                })
            }),
        ];
        if self.bounds.wrong_property {
            p.push(Property::always(
                "WRONG: at most one DREQ sent per host",
                |_, s: &State| s.hist.iter().all(|h| h.dreq_tx <= 1),
            ));
        }
        p
    }
}

/// The application of host `h` posts one SEND (no SGE).
fn post_send(s: &mut State, h: usize) {
    let n = &mut s.nodes[h];
    let in_err = n.qp_state() == QpState::Err;
    let wr_id = 100 * h as u64 + 50;
    n.dev
        .post_send(n.qp.handle, &[SendWr::send(wr_id, Vec::new())])
        .unwrap();
    s.hist[h].sent_after_err = true;
    s.hist[h].posted.push(Posted {
        wr_id,
        queue: Queue::Send,
        in_err,
    });
}

fn done_count(h: &Hist, wr_id: u64) -> usize {
    h.done.iter().filter(|d| d.wr_id == wr_id).count()
}

/// S1: at most one DISCONNECTED; after it, only TIMEWAIT_EXIT, at most once, not before the
/// TimeWait delay; TIMEWAIT_EXIT never without DISCONNECTED before it.
fn s1(_: &DisconnectModel, s: &State) -> bool {
    s.hist.iter().all(|h| {
        let disc = h.events.iter().position(|e| e.event == E::Disconnected);
        let exits = h.count(E::TimewaitExit);
        let ok_after = match disc {
            None => exits == 0,
            Some(i) => {
                let d = &h.events[i];
                let rest = &h.events[i + 1..];
                exits <= 1
                    && rest.iter().all(|e| {
                        e.event == E::TimewaitExit
                            && e.at.as_nanos() >= d.at.as_nanos() + d.timewait_ns
                    })
            }
        };
        h.count(E::Disconnected) <= 1 && ok_after
    })
}

/// S2: a completion names a posted WR, and no WR completes twice.
fn s2_at_most_once(_: &DisconnectModel, s: &State) -> bool {
    s.hist.iter().all(|h| {
        h.done
            .iter()
            .all(|d| h.posted.iter().any(|p| p.wr_id == d.wr_id))
            && h.posted.iter().all(|p| done_count(h, p.wr_id) <= 1)
    })
}

fn s2_exactly_once(s: &State) -> bool {
    s.hist
        .iter()
        .all(|h| h.posted.iter().all(|p| done_count(h, p.wr_id) == 1))
}

/// S3: per queue, completions come in post order.
fn s3(_: &DisconnectModel, s: &State) -> bool {
    s.hist.iter().all(|h| {
        [Queue::Send, Queue::Recv].iter().all(|&q| {
            let order: Vec<usize> = h
                .done
                .iter()
                .filter_map(|d| h.posted.iter().position(|p| p.wr_id == d.wr_id))
                .filter(|&i| h.posted[i].queue == q)
                .collect();
            order.windows(2).all(|w| w[0] < w[1])
        })
    })
}

/// S4: a WR completed after its QP was seen in ERR, or posted to a QP in ERR, is flushed; no
/// SUCCESS after a flush.
fn s4(_: &DisconnectModel, s: &State) -> bool {
    s.hist.iter().all(|h| {
        let mut flushed = false;
        h.done.iter().all(|d| {
            let posted_in_err = h.posted.iter().any(|p| p.wr_id == d.wr_id && p.in_err);
            let ok = if d.after_err || posted_in_err || flushed {
                d.status == WcStatus::WrFlushErr
            } else {
                true
            };
            flushed |= d.status == WcStatus::WrFlushErr;
            ok
        })
    })
}

/// S5: DISCONNECTED with status 0 only once a DREQ was processed — by the peer (ours; its DREP
/// or nothing came back) or by us (the peer's; the peer initiated); status -110 only after all
/// 1 + max_cm_retries DREQ tries went out. No other status.
fn s5(m: &DisconnectModel, s: &State) -> bool {
    let tries = 1 + m.bounds.max_cm_retries;
    s.hist.iter().flat_map(|h| &h.events).all(|e| {
        e.event != E::Disconnected
            || match e.status {
                0 => e.peer_got_dreq || e.got_dreq,
                ETIMEDOUT => e.dreq_tx == tries,
                _ => false,
            }
    })
}

/// L1 (at quiescence): a side that called `rdma_disconnect` has exactly one DISCONNECTED; L3:
/// and its TIMEWAIT_EXIT unless it is still in DREQ_RCVD (it never answered the peer's DREQ,
/// cm-spec §4.5).
fn l1(s: &State) -> bool {
    s.hist.iter().zip(&s.nodes).all(|(h, n)| {
        let dreq_rcvd = n.cm.lock().ib_cm_state(n.id) == Some(IbCmState::DreqRcvd);
        h.disconnect_calls == 0
            || (h.count(E::Disconnected) == 1 && (dreq_rcvd || h.count(E::TimewaitExit) == 1))
    })
}

/// Runs the checker to the end (BFS, 2 threads) and returns it.
fn check(bounds: Bounds) -> impl Checker<DisconnectModel> {
    DisconnectModel::new(bounds)
        .checker()
        .threads(2)
        .spawn_bfs()
        .join()
}

/// Explores every interleaving under `bounds`, asserts no `always` property has a
/// counterexample (printing its actions if one has), every `sometimes` property was reached and
/// more than `floor` unique states were explored (so a collapsed model fails), and prints the
/// figures.
fn check_all(name: &str, bounds: Bounds, floor: usize) {
    #[allow(clippy::disallowed_methods)] // wall time for the printed figure only, not asserted
    let start = std::time::Instant::now();
    let checker = check(bounds);
    let elapsed = start.elapsed();
    let unique = checker.unique_state_count();
    println!(
        "model_check {name}: {unique} unique states ({} generated), max depth {}, {elapsed:.2?}",
        checker.state_count(),
        checker.max_depth()
    );
    for p in checker.model().properties() {
        let found = checker.discovery(p.name);
        if p.expectation == Expectation::Sometimes {
            assert!(found.is_some(), "{name}: never reached: {}", p.name);
        } else if let Some(path) = found {
            panic!(
                "{name}: {} violated by {:?}\nlast state: {:#?}",
                p.name,
                path.clone().into_actions(),
                path.last_state()
            );
        }
    }
    assert!(
        unique > floor,
        "{name}: the model collapsed to {unique} states"
    );
}

/// Lossy network, 2 DREQ tries, 2 receives + 1 SEND per side, up to 2 `rdma_disconnect` calls
/// per side (the second in answer to DISCONNECTED).
#[test]
fn every_interleaving_of_a_lossy_disconnect_satisfies_s1_to_s5() {
    check_all("lossy", Bounds::standard(), 100_000);
}

/// Lossy network that also duplicates one packet, 2 DREQ tries, 1 receive + 1 SEND per side,
/// one `rdma_disconnect` call per side.
#[test]
fn every_interleaving_with_one_duplicated_packet_satisfies_s1_to_s5() {
    let bounds = Bounds {
        recvs: 1,
        disconnect_calls: 1,
        duplicates: 1,
        ..Bounds::standard()
    };
    check_all("duplicating", bounds, 100_000);
}

#[test]
fn the_checker_finds_a_counterexample_to_a_wrong_property() {
    let bounds = Bounds {
        wrong_property: true,
        duplicates: 0,
        send_after_err: false,
        recvs: 1,
        disconnect_calls: 1,
        ..Bounds::standard()
    };
    let checker = check(bounds);
    let path = checker
        .discovery("WRONG: at most one DREQ sent per host")
        .expect("a DREQ retransmission violates the wrong property");
    let actions = path.into_actions();
    assert!(actions.contains(&Action::Fire(0)) || actions.contains(&Action::Fire(1)));
    assert!(checker
        .discovery("S1 DISCONNECTED once, nothing after but TIMEWAIT_EXIT")
        .is_none());
}
