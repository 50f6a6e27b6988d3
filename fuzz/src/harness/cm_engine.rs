//! Target `cm_engine`: the connection manager (cm-core's engine under its rdma_cm layers,
//! [`RdmaCm`]) of two hosts, each on a simulated RNIC ([`SimDevice`]), with a live connection
//! established first; the input is then a sequence of records, each a forged datagram, an
//! application call or a time advance.
//!
//! Set-up (once, then cloned for every input): host A (10.0.0.1) connects to host B
//! (10.0.0.2), which listens on port 7471 and accepts; both reach ESTABLISHED. The MADs the two
//! CMs really exchanged — REQ, REP, RTU, and, on copies of the world, DREQ/DREP both ways, a
//! REJ and whatever a duplicate REQ draws (MRA) — are the *templates* the input mutates.
//!
//! Records (see [`Record`]): a control byte, then
//!
//! * `Template`: a template index and up to eight (offset, value) byte patches;
//! * `Raw`: 256 bytes of MAD (the seed corpus puts MADs captured by `rnic replay` here);
//! * `App`: an application call (disconnect or destroy the live ids, reject/accept/destroy a
//!   connection request a forged REQ created, open another connection);
//! * `Advance`: virtual time moves 2^k ns; due CM and RNIC timers fire.
//!
//! A datagram goes to A or B, from the other host's GID or from a third, foreign GID, and can
//! be *rebased*: its communication IDs (and a DREQ's remote QPN) are overwritten with the live
//! connection's, as an attacker who guessed them would (issue 12). Datagrams are handed to
//! `RdmaCm::handle_datagram` directly; what the CMs answer travels between A and B through
//! their RNICs (answers to the foreign GID are lost).
//!
//! Checked, besides "no panic":
//!
//! * counters: every datagram handed to the CM adds exactly 1 to `rx_mads` and at most 1 to the
//!   other `rx_*` counters together; one that does not decode adds exactly 1 to
//!   `rx_malformed` and changes nothing else;
//! * events: every event names an id that exists; a CONNECT_REQUEST names the listener; per
//!   id, at most one ESTABLISHED, at most one DISCONNECTED, no ESTABLISHED after
//!   DISCONNECTED, at most one TIMEWAIT_EXIT and only after DISCONNECTED (oracle S1); every
//!   event fetched can be acked;
//! * timers: after `handle_timeout(now)`, no CM or RNIC timer is still due at `now`; the two
//!   CMs fall silent at one instant (no endless exchange without time passing).
//!
//! * forgeries: a MAD from the foreign GID leaves the IB CM state of every existing id as it
//!   was (it may only start a connection of its own, or be answered: a DREQ for no
//!   connection draws a DREP), issue 12 item 2.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cm_core::api::{CmEvent, CmEventType, CmIdHandle, ConnParam, EventChannel, RdmaCm};
use cm_core::engine::{CmConfig, CmCounters};
use cm_core::wire::{self, CmMessage, RdmaPortSpace, MAD_SIZE};
use rnic_sim::{SimDevice, SimDeviceConfig, GSI_QPN};
use verbs_core::{CqHandle, Device, Gid, PdHandle, QpCap, QpInitAttr, SimTime};

use super::input::{Input, Output, Route};

/// The port B listens on.
pub const PORT: u16 = 7471;
/// Host A (active side).
pub const A: usize = 0;
/// Host B (passive side).
pub const B: usize = 1;
/// Rounds of delivery at one instant before the harness calls it an endless exchange.
const MAX_ROUNDS: usize = 1000;
/// Timer firings per time advance; past this the clock jumps to the target.
const MAX_TIMER_STEPS: usize = 2000;
/// Connections host A may open on top of the live one.
const MAX_EXTRA_CONNECTIONS: usize = 4;

/// The IPv4 address of host `h` (0: A, 1: B, 2: the foreign sender).
pub fn ip(h: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, [1, 2, 66][h.min(2)])
}

fn gid(h: usize) -> Gid {
    Gid::from_ipv4(ip(h))
}

fn b_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip(B)), PORT)
}

/// An application call (`App` record); the byte is taken modulo 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppCall {
    /// `rdma_disconnect` of A's live id.
    DisconnectA = 0,
    /// `rdma_disconnect` of B's live id.
    DisconnectB = 1,
    /// `rdma_destroy_id` of A's live id.
    DestroyA = 2,
    /// `rdma_destroy_id` of B's live id.
    DestroyB = 3,
    /// `rdma_reject` of the oldest connection request B has not answered.
    RejectPending = 4,
    /// QP + `rdma_accept` of the oldest connection request B has not answered.
    AcceptPending = 5,
    /// `rdma_destroy_id` of the oldest connection request B has not answered.
    DestroyPending = 6,
    /// A opens another connection to B (at most a few).
    ConnectAgain = 7,
}

impl AppCall {
    fn from_byte(b: u8) -> AppCall {
        match b % 8 {
            0 => AppCall::DisconnectA,
            1 => AppCall::DisconnectB,
            2 => AppCall::DestroyA,
            3 => AppCall::DestroyB,
            4 => AppCall::RejectPending,
            5 => AppCall::AcceptPending,
            6 => AppCall::DestroyPending,
            _ => AppCall::ConnectAgain,
        }
    }
}

/// One record of a `cm_engine` input. Control byte: bits 0–1 the [`Route`], bits 2–3 the
/// kind (0 template, 1 raw, 2 app, 3 advance), bit 4 "rebase".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Template `index` (modulo the number of templates) with byte patches.
    Template {
        /// Destination and claimed source.
        route: Route,
        /// Overwrite the communication IDs with the live connection's.
        rebase: bool,
        /// Which template.
        index: u8,
        /// (offset, value) patches, at most 8.
        patches: Vec<(u8, u8)>,
    },
    /// A whole MAD (zero-padded to 256 bytes if the input ends early).
    Raw {
        /// Destination and claimed source.
        route: Route,
        /// Overwrite the communication IDs with the live connection's.
        rebase: bool,
        /// The MAD.
        mad: Vec<u8>,
    },
    /// An application call.
    App(AppCall),
    /// Advance virtual time by 2^(`exp` mod 40) ns.
    Advance(u8),
}

impl Record {
    /// Reads the next record; `None` at the end of the input.
    pub fn read(inp: &mut Input<'_>) -> Option<Record> {
        let ctl = inp.u8()?;
        let route = Route::from_bits(ctl);
        let rebase = ctl & 0x10 != 0;
        Some(match (ctl >> 2) & 3 {
            0 => {
                let index = inp.u8()?;
                let n = inp.u8()? % 9;
                let mut patches = Vec::new();
                for _ in 0..n {
                    patches.push((inp.u8()?, inp.u8()?));
                }
                Record::Template {
                    route,
                    rebase,
                    index,
                    patches,
                }
            }
            1 => {
                let mut mad = inp.bytes(MAD_SIZE).to_vec();
                mad.resize(MAD_SIZE, 0);
                Record::Raw { route, rebase, mad }
            }
            2 => Record::App(AppCall::from_byte(inp.u8()?)),
            _ => Record::Advance(inp.u8()?),
        })
    }

    /// Appends this record in the form [`Record::read`] reads.
    pub fn write(&self, out: &mut Output) {
        let ctl = |route: Route, kind: u8, rebase: bool| {
            route as u8 | kind << 2 | if rebase { 0x10 } else { 0 }
        };
        match self {
            Record::Template {
                route,
                rebase,
                index,
                patches,
            } => {
                out.u8(ctl(*route, 0, *rebase)).u8(*index);
                out.u8(patches.len().min(8) as u8);
                for (o, v) in patches.iter().take(8) {
                    out.u8(*o).u8(*v);
                }
            }
            Record::Raw { route, rebase, mad } => {
                out.u8(ctl(*route, 1, *rebase));
                let mut m = mad.clone();
                m.resize(MAD_SIZE, 0);
                out.bytes(&m);
            }
            Record::App(call) => {
                out.u8(ctl(Route::ToBFromA, 2, false)).u8(*call as u8);
            }
            Record::Advance(exp) => {
                out.u8(ctl(Route::ToBFromA, 3, false)).u8(*exp);
            }
        }
    }
}

/// Events seen for one id (oracle S1).
#[derive(Debug, Clone, Default)]
struct IdHistory {
    established: u32,
    disconnected: u32,
    timewait_exit: u32,
}

#[derive(Debug, Clone)]
struct Host {
    dev: SimDevice,
    cm: RdmaCm,
    ch: EventChannel,
    pd: PdHandle,
    cq: CqHandle,
    hist: BTreeMap<CmIdHandle, IdHistory>,
    /// CONNECT_REQUEST ids not answered yet.
    pending: Vec<CmIdHandle>,
}

fn qp_init(cq: CqHandle) -> QpInitAttr {
    QpInitAttr::rc(cq, cq, QpCap::uniform(16, 1, 0), true)
}

/// `what` succeeded, or the harness cannot be set up (a bug in the harness or a regression).
fn setup<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("cm_engine set-up: {what}: {e}"),
    }
}

impl Host {
    fn new(h: usize) -> Host {
        let mut dev = SimDevice::new(SimDeviceConfig::new(format!("fuzz{h}"), gid(h)));
        let cfg = CmConfig {
            ca_guid: 0x0002_c903_0000_0100 | h as u64,
            seed: 0x5eed_0000 + h as u64,
            ..CmConfig::default()
        };
        let mut cm = setup("RdmaCm::new", RdmaCm::new(&dev, cfg));
        let ch = cm.create_event_channel();
        let pd = setup("alloc_pd", dev.alloc_pd());
        let cq = setup("create_cq", dev.create_cq(1024, None));
        Host {
            dev,
            cm,
            ch,
            pd,
            cq,
            hist: BTreeMap::new(),
            pending: Vec::new(),
        }
    }
}

/// Two hosts with a live connection, the templates, and the virtual clock.
#[derive(Debug, Clone)]
pub struct World {
    now: SimTime,
    hosts: [Host; 2],
    listen: CmIdHandle,
    /// A's active id and B's passive id of the live connection.
    live: [CmIdHandle; 2],
    /// Local communication IDs of the live connection: A's, B's.
    comm_ids: [u32; 2],
    /// QP numbers of the live connection: A's, B's.
    qpns: [u32; 2],
    /// Real MADs of this world's CMs: (sending host, MAD).
    templates: Vec<(usize, Vec<u8>)>,
    /// MADs seen between the hosts while capturing: (sending host, MAD).
    tap: Option<Vec<(usize, Vec<u8>)>>,
    extra_connections: usize,
}

fn counters_rx_sum(c: &CmCounters) -> u64 {
    c.rx_malformed
        + c.rx_wrong_source
        + c.rx_unmatched
        + c.rx_duplicates
        + c.rx_wrong_state
        + c.rx_wrong_qpn
        + c.rx_stale
        + c.rx_no_listener
        + c.rx_backlog_full
        + c.rx_dreq_unknown
}

impl World {
    /// The established world (built once, then cloned).
    pub fn established() -> World {
        // Per thread: the CM is not `Sync` (libFuzzer runs one thread; the replay test several).
        thread_local! {
            static WORLD: World = World::build();
        }
        WORLD.with(World::clone)
    }

    /// The templates: (sending host, MAD).
    pub fn templates(&self) -> &[(usize, Vec<u8>)] {
        &self.templates
    }

    fn build() -> World {
        let mut hosts = [Host::new(A), Host::new(B)];
        let b = &mut hosts[B];
        let listen = setup("create_id", b.cm.create_id(b.ch, RdmaPortSpace::Tcp));
        setup("bind_addr", b.cm.bind_addr(listen, b_addr()));
        setup("listen", b.cm.listen(listen, 8));
        let mut w = World {
            now: SimTime::ZERO,
            hosts,
            listen,
            live: [listen, listen],
            comm_ids: [0, 0],
            qpns: [0, 0],
            templates: Vec::new(),
            tap: Some(Vec::new()),
            extra_connections: 0,
        };
        let a_id = setup("connect", w.connect_from_a());
        w.pump();
        let Some(&b_id) = w.hosts[B].pending.first() else {
            panic!("cm_engine set-up: no CONNECT_REQUEST on B");
        };
        let before_accept = w.clone();
        setup("accept", w.accept(b_id));
        w.pump();
        w.live = [a_id, b_id];
        for (h, id) in [(A, a_id), (B, b_id)] {
            let est = w.hosts[h].hist.get(&id).map_or(0, |x| x.established);
            assert_eq!(est, 1, "cm_engine set-up: host {h} not ESTABLISHED");
            let qp = w.hosts[h].cm.qp(id);
            w.qpns[h] = qp.map_or(0, |q| q.qp_num);
        }
        let mut mads = w.tap.take().unwrap_or_default();

        // More real MADs, each from a copy of the world: disconnects both ways, a REJ, and
        // what a duplicate REQ draws.
        let mut copy = w.clone();
        copy.tap = Some(Vec::new());
        copy.call(AppCall::DisconnectA);
        copy.call(AppCall::DisconnectB);
        mads.extend(copy.tap.take().unwrap_or_default());
        let mut copy = w.clone();
        copy.tap = Some(Vec::new());
        copy.call(AppCall::DisconnectB);
        copy.call(AppCall::DisconnectA);
        mads.extend(copy.tap.take().unwrap_or_default());
        let mut copy = before_accept.clone();
        copy.tap = Some(Vec::new());
        copy.call(AppCall::RejectPending);
        mads.extend(copy.tap.take().unwrap_or_default());
        if let Some((_, req)) = mads.first().cloned() {
            let mut copy = before_accept;
            copy.tap = Some(Vec::new());
            copy.inject(B, gid(A), &req);
            copy.pump();
            mads.extend(copy.tap.take().unwrap_or_default());
        }

        // One template per (sender, attribute ID), in the order first seen.
        let mut seen = Vec::new();
        for (from, mad) in mads {
            let key = (from, mad.get(16..18).map(|b| [b[0], b[1]]));
            if !seen.contains(&key) {
                seen.push(key);
                w.templates.push((from, mad));
            }
        }
        for (from, mad) in &w.templates {
            if let Ok((_, CmMessage::Req(r))) = wire::decode(mad) {
                w.comm_ids[*from] = r.local_comm_id;
            }
            if let Ok((_, CmMessage::Rep(r))) = wire::decode(mad) {
                w.comm_ids[*from] = r.local_comm_id;
            }
        }
        assert!(
            w.comm_ids[A] != 0 && w.comm_ids[B] != 0,
            "cm_engine set-up: no REQ/REP captured"
        );
        w
    }

    /// A: a new id, resolved, with a QP, connecting to B.
    fn connect_from_a(&mut self) -> Result<CmIdHandle, verbs_core::Error> {
        let now = self.now;
        let a = &mut self.hosts[A];
        let id = a.cm.create_id(a.ch, RdmaPortSpace::Tcp)?;
        a.cm.resolve_addr(id, None, b_addr())?;
        a.cm.resolve_route(id)?;
        a.cm.create_qp(&mut a.dev, id, a.pd, &qp_init(a.cq))?;
        a.cm.connect(&mut a.dev, now, id, &ConnParam::rping_defaults())?;
        Ok(id)
    }

    /// B: a QP for connection request `id`, and accept.
    fn accept(&mut self, id: CmIdHandle) -> Result<(), verbs_core::Error> {
        let now = self.now;
        let b = &mut self.hosts[B];
        b.pending.retain(|p| *p != id);
        b.cm.create_qp(&mut b.dev, id, b.pd, &qp_init(b.cq))?;
        b.cm.accept(&mut b.dev, now, id, &ConnParam::rping_defaults())
    }

    /// Makes an application call (errors are the API's answers, not findings), then lets
    /// the hosts exchange what it caused.
    pub fn call(&mut self, call: AppCall) {
        let now = self.now;
        let destroy = |host: &mut Host, id: CmIdHandle| {
            if host.cm.destroy_id(&mut host.dev, now, id).is_ok() {
                host.hist.remove(&id);
                host.pending.retain(|p| *p != id);
            }
        };
        match call {
            AppCall::DisconnectA | AppCall::DisconnectB => {
                let h = if call == AppCall::DisconnectA { A } else { B };
                let id = self.live[h];
                let host = &mut self.hosts[h];
                let _ = host.cm.disconnect(&mut host.dev, now, id);
            }
            AppCall::DestroyA | AppCall::DestroyB => {
                let h = if call == AppCall::DestroyA { A } else { B };
                let id = self.live[h];
                destroy(&mut self.hosts[h], id);
            }
            AppCall::RejectPending => {
                let b = &mut self.hosts[B];
                if let Some(id) = b.pending.first().copied() {
                    b.pending.remove(0);
                    let _ = b.cm.reject(&mut b.dev, now, id, b"no");
                }
            }
            AppCall::AcceptPending => {
                if let Some(id) = self.hosts[B].pending.first().copied() {
                    let _ = self.accept(id);
                }
            }
            AppCall::DestroyPending => {
                if let Some(id) = self.hosts[B].pending.first().copied() {
                    self.hosts[B].pending.remove(0);
                    destroy(&mut self.hosts[B], id);
                }
            }
            AppCall::ConnectAgain => {
                if self.extra_connections < MAX_EXTRA_CONNECTIONS {
                    self.extra_connections += 1;
                    let _ = self.connect_from_a();
                }
            }
        }
        self.pump();
    }

    /// Hands `mad` from `src` to host `to`'s CM and checks the counters it moved.
    pub fn inject(&mut self, to: usize, src: Gid, mad: &[u8]) {
        let now = self.now;
        let host = &mut self.hosts[to];
        let before = *host.cm.counters();
        let states: Vec<_> = host
            .cm
            .ids()
            .into_iter()
            .map(|id| (id, host.cm.ib_cm_state(id)))
            .collect();
        host.cm.handle_datagram(&mut host.dev, now, src, mad);
        if src == gid(2) {
            for (id, was) in &states {
                assert_eq!(
                    host.cm.ib_cm_state(*id),
                    *was,
                    "host {to}: a MAD from the foreign GID changed id {id:?}"
                );
            }
        }
        let after = *host.cm.counters();
        assert_eq!(
            after.rx_mads,
            before.rx_mads + 1,
            "one datagram, rx_mads {} -> {}",
            before.rx_mads,
            after.rx_mads
        );
        let moved = counters_rx_sum(&after) - counters_rx_sum(&before);
        assert!(
            moved <= 1,
            "one datagram moved {moved} rx_* counters: {before:?} -> {after:?}"
        );
        if wire::decode(mad).is_err() {
            assert_eq!(
                after,
                CmCounters {
                    rx_mads: before.rx_mads + 1,
                    rx_malformed: before.rx_malformed + 1,
                    ..before
                },
                "a MAD that does not decode must count as malformed and do nothing else"
            );
        }
    }

    /// Overwrites the communication IDs of `mad` (and a DREQ's remote QPN) with those of the
    /// live connection, as seen by a sender talking to host `to`.
    fn rebase(&self, mad: &mut [u8], to: usize) {
        let from = 1 - to;
        let attr = mad.get(16..18).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let mut put = |off: usize, bytes: &[u8]| {
            if let Some(dst) = mad.get_mut(off..off + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        };
        match attr {
            Some(wire::CM_REQ_ATTR_ID) => put(24, &self.comm_ids[from].to_be_bytes()),
            Some(a) if (wire::CM_MRA_ATTR_ID..=wire::CM_DREP_ATTR_ID).contains(&a) => {
                put(24, &self.comm_ids[from].to_be_bytes());
                put(28, &self.comm_ids[to].to_be_bytes());
                if a == wire::CM_DREQ_ATTR_ID {
                    put(32, &self.qpns[to].to_be_bytes()[1..]);
                }
            }
            _ => {}
        }
    }

    /// Carries every packet between the two RNICs, hands MADs to the CMs and reads events,
    /// until nothing moves (time stands still).
    fn pump(&mut self) {
        let now = self.now;
        for _ in 0..MAX_ROUNDS {
            let mut moved = false;
            for from in [A, B] {
                let to = 1 - from;
                let dst = self.hosts[to].dev.gid();
                let mut out = Vec::new();
                while let Some(t) = self.hosts[from].dev.poll_transmit(now) {
                    out.push(t);
                }
                for t in out {
                    moved = true;
                    if t.dst != dst {
                        continue; // to the foreign GID: nobody there
                    }
                    if let Some(tap) = &mut self.tap {
                        if t.packet.bth.dest_qp == GSI_QPN {
                            tap.push((from, t.packet.payload.to_vec()));
                        }
                    }
                    self.hosts[to].dev.handle_packet(now, gid(from), t.packet);
                }
            }
            for h in [A, B] {
                let host = &mut self.hosts[h];
                host.cm.poll_gsi(&mut host.dev, now);
                moved |= self.read_events(h) > 0;
            }
            if !moved {
                return;
            }
        }
        panic!("the CMs still exchange datagrams after {MAX_ROUNDS} rounds at one instant");
    }

    /// Fetches, checks and acks every event of host `h`; returns how many.
    fn read_events(&mut self, h: usize) -> usize {
        let now = self.now;
        let listen = self.listen;
        let host = &mut self.hosts[h];
        let mut n = 0;
        while let Ok(ev) = host.cm.get_cm_event(&mut host.dev, now, host.ch) {
            n += 1;
            check_event(host, h, listen, &ev);
            if let Err(e) = host.cm.ack_cm_event(ev.clone()) {
                panic!("host {h}: an event just fetched cannot be acked: {e} ({ev:?})");
            }
        }
        n
    }

    /// Moves the clock forward by `delta_ns`, firing every CM and RNIC timer due meanwhile.
    pub fn advance(&mut self, delta_ns: u64) {
        let target = self.now.plus_nanos(delta_ns);
        for _ in 0..MAX_TIMER_STEPS {
            let next = self
                .hosts
                .iter()
                .flat_map(|h| [h.cm.poll_timeout(), h.dev.poll_timeout()])
                .flatten()
                .min();
            let Some(next) = next.filter(|t| *t <= target) else {
                break;
            };
            self.now = self.now.max(next);
            let now = self.now;
            for (h, host) in self.hosts.iter_mut().enumerate() {
                if host.cm.poll_timeout().is_some_and(|t| t <= now) {
                    host.cm.handle_timeout(&mut host.dev, now);
                    if let Some(t) = host.cm.poll_timeout().filter(|t| *t <= now) {
                        panic!("host {h}: CM timer due at {t:?} still armed after handle_timeout({now:?})");
                    }
                }
                if host.dev.poll_timeout().is_some_and(|t| t <= now) {
                    host.dev.handle_timeout(now);
                }
            }
            self.pump();
            for (h, host) in self.hosts.iter().enumerate() {
                if let Some(t) = host.dev.poll_timeout().filter(|t| *t <= now) {
                    panic!("host {h}: RNIC timer due at {t:?} still armed at {now:?}");
                }
            }
        }
        self.now = self.now.max(target);
    }

    /// Applies one record.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Template {
                route,
                rebase,
                index,
                patches,
            } => {
                let n = self.templates.len().max(1);
                let Some((_, t)) = self.templates.get(usize::from(*index) % n) else {
                    return;
                };
                let mut mad = t.clone();
                for &(o, v) in patches {
                    if let Some(b) = mad.get_mut(usize::from(o)) {
                        *b = v;
                    }
                }
                self.deliver(*route, *rebase, mad);
            }
            Record::Raw { route, rebase, mad } => self.deliver(*route, *rebase, mad.clone()),
            Record::App(call) => self.call(*call),
            Record::Advance(exp) => self.advance(1u64 << (exp % 40)),
        }
    }

    fn deliver(&mut self, route: Route, rebase: bool, mut mad: Vec<u8>) {
        let (to, from) = route.hosts();
        if rebase {
            self.rebase(&mut mad, to);
        }
        self.inject(to, gid(from), &mad);
        self.pump();
    }

    /// Checks that hold at the end of any input.
    fn check_end(&self) {
        for (h, host) in self.hosts.iter().enumerate() {
            let c = host.cm.counters();
            assert!(
                counters_rx_sum(c) <= c.rx_mads,
                "host {h}: more drops than MADs received: {c:?}"
            );
        }
    }
}

/// The per-event checks (module docs).
fn check_event(host: &mut Host, h: usize, listen: CmIdHandle, ev: &CmEvent) {
    use CmEventType as E;
    assert!(
        host.cm.state(ev.id).is_some(),
        "host {h}: event for an id that does not exist: {ev:?}"
    );
    let hist = host.hist.entry(ev.id).or_default();
    match ev.event {
        E::ConnectRequest => {
            assert!(
                h == B && ev.listen_id == Some(listen),
                "host {h}: CONNECT_REQUEST not from the listener: {ev:?}"
            );
            host.pending.push(ev.id);
        }
        E::Established => {
            assert_eq!(
                hist.disconnected, 0,
                "host {h}: ESTABLISHED after DISCONNECTED: {ev:?}"
            );
            hist.established += 1;
            assert!(
                hist.established <= 1,
                "host {h}: second ESTABLISHED: {ev:?}"
            );
        }
        E::Disconnected => {
            hist.disconnected += 1;
            assert!(
                hist.disconnected <= 1,
                "host {h}: second DISCONNECTED (S1): {ev:?}"
            );
        }
        E::TimewaitExit => {
            assert!(
                hist.disconnected >= 1,
                "host {h}: TIMEWAIT_EXIT without DISCONNECTED (S1): {ev:?}"
            );
            hist.timewait_exit += 1;
            assert!(
                hist.timewait_exit <= 1,
                "host {h}: second TIMEWAIT_EXIT (S1): {ev:?}"
            );
        }
        _ => {}
    }
}

/// The target body.
pub fn run(data: &[u8]) {
    let mut w = World::established();
    let mut inp = Input::new(data);
    while let Some(r) = Record::read(&mut inp) {
        w.apply(&r);
    }
    w.check_end();
}
