//! The reference model: what the API calls must return and what must follow, predicted
//! without running the World.

use super::*;

/// One transition: an application call on `host`, time passing, or a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum T {
    /// `rdma_listen` (the World returns the same id on a repeat).
    Listen(usize),
    /// Host connects to the other host.
    Connect(usize),
    /// Accept the pending CONNECT_REQUEST (nothing if none arrived).
    Accept(usize),
    /// Reject it (REJ 28).
    Reject(usize),
    /// `ibv_post_recv` of `n` WRs on the host's connection.
    PostRecv(usize, u32),
    /// `ibv_post_send` of `n` signaled WRs.
    Post(usize, Op, u32),
    /// `rdma_disconnect` (again, if already called).
    Disconnect(usize),
    /// `rdma_disconnect` of the listening id. A listener bound to an address has an IB CM id
    /// (cma.c `cma_ib_listen`): DREQ and DREP are refused and ignored, the call returns 0
    /// (§4.4; EINVAL is only for an id without a CM id or device, which the World never hands
    /// out).
    DisconnectListener(usize),
    /// `rdma_destroy_id` instead of a disconnect, then the QP to ERR.
    Destroy(usize),
    /// Run the World for this many ns.
    Advance(u64),
    /// Crash; restart with amnesia that much later, or never.
    Crash(usize, Option<u64>),
    /// Drop the next datagram(s) (those sent at one instant) from the host to the other.
    DropNext(usize),
    /// Cut the hosts for `window` ns (`one_way`: only the host's sends).
    Partition {
        from: usize,
        one_way: bool,
        window: u64,
    },
    /// End every partition and armed drop now.
    Heal,
}

/// What the reference knows about one end of a connection.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RefEnd {
    pub(super) host: usize,
    /// Made by connect (else by accept).
    pub(super) active: bool,
    /// The SUT surely has it (an accept the reference could not predict may have done nothing).
    pub(super) certain: bool,
    /// The QP is in RTS for sure (passive after a successful accept, active once the REP
    /// surely arrived).
    pub(super) rts: bool,
    /// The QP is surely still in INIT (active, before any answer could have arrived).
    pub(super) init: bool,
    /// The QP is in ERR for sure (own disconnect or destroy; REJ).
    pub(super) err: bool,
    /// Whether rdma_destroy_id succeeded: `Some(false)` never called or refused for sure.
    pub(super) destroyed: Option<bool>,
    /// When disconnect (or destroy, which answers with a DREP too) was first called.
    pub(super) answered_at: Option<u64>,
    /// Disconnect was first called while the connection was surely ESTABLISHED.
    pub(super) disc_while_est: bool,
    /// The host crashed after this end was made.
    pub(super) dead: bool,
    /// The other end's index in [`RefState::ends`].
    pub(super) peer: Option<usize>,
    /// WRs posted to the send / receive queue so far (predictions stop near the 64-WR
    /// capacity: completions are not tracked).
    pub(super) posted: [u32; 2],
}

/// One host.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RefHost {
    pub(super) mode: EventMode,
    /// Up from this time on (`None`: down for good).
    pub(super) up_from: Option<u64>,
    pub(super) listening: bool,
    /// The host's current connection (index into [`RefState::ends`]).
    pub(super) cur: Option<usize>,
    /// A CONNECT_REQUEST may be pending: the peer's connect time and active end.
    pub(super) request_from: Option<(u64, usize)>,
    /// A REQ of an earlier connect may be pending or still reach this host's listener (it
    /// listened after that connect, or never answered it): which request is pending is no
    /// longer sure.
    pub(super) stray_request: bool,
    /// The last connect to this host while it did not listen.
    pub(super) unheard_req_at: Option<u64>,
}

/// The link of the latest connect, for the ESTABLISHED prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Link {
    pub(super) active: usize,
    pub(super) passive: Option<usize>,
    pub(super) connect_at: u64,
    /// The passive side listened before the connect.
    pub(super) listened: bool,
    /// A certain successful accept, at this time.
    pub(super) accepted_at: Option<u64>,
    /// Disconnect/destroy/reject on either side before the setup surely completed.
    pub(super) touched: bool,
    pub(super) established: bool,
}

/// The reference state: time, hosts, ends, what it predicts for the last call.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RefState {
    pub(super) seed: u64,
    pub(super) rnr_retry: u8,
    pub(super) now: u64,
    /// This run may inject faults and crashes (half of the runs stay clean).
    pub(super) faulty: bool,
    /// No fault, drop, partition or crash so far: the network does exactly what the reference
    /// expects.
    pub(super) clean: bool,
    pub(super) hosts: [RefHost; 2],
    pub(super) ends: Vec<RefEnd>,
    pub(super) link: Option<Link>,
    /// Prediction for the last transition: the call's errno (`None`: not predicted).
    pub(super) expect: Option<i32>,
    /// Prediction for the last accept/reject: whether a request was there to answer.
    pub(super) expect_applied: Option<bool>,
}

impl RefState {
    pub(super) fn up(&self, h: usize) -> bool {
        self.hosts[h].up_from.is_some_and(|t| self.now >= t)
    }

    pub(super) fn cur(&self, h: usize) -> Option<&RefEnd> {
        self.hosts[h].cur.map(|i| &self.ends[i])
    }

    /// The host has a connection end it may call on.
    pub(super) fn has_end(&self, h: usize) -> bool {
        self.up(h) && self.cur(h).is_some()
    }

    /// The host's slot is free for a new connection.
    pub(super) fn free(&self, h: usize) -> bool {
        self.cur(h).is_none_or(|e| e.destroyed == Some(true))
    }

    /// Learns what time passing made certain (only on a clean network).
    pub(super) fn settle(&mut self) {
        if !self.clean {
            return;
        }
        let Some(mut l) = self.link else { return };
        // The setup completes only if the active application fetches its CONNECT_RESPONSE:
        // librdmacm moves its QP to RTS and sends the RTU then (cm-spec §4.3). A deaf active
        // host leaves its QP in INIT and the passive side waiting for the RTU.
        let fetches = self.hosts[self.ends[l.active].host].mode != EventMode::NeverRead;
        if let (Some(ta), false, false, true) = (l.accepted_at, l.touched, l.established, fetches) {
            if self.now >= ta + SETTLE_NS {
                l.established = true;
                if let Some(p) = l.passive {
                    self.ends[p].rts = true;
                }
                self.ends[l.active].rts = true;
                self.ends[l.active].init = false;
            }
        }
        // Without a listener a REJ 8 comes (and moves the QP to ERR); after FRESH_NS the REQ
        // may time out: the active QP's state is no longer sure.
        if self.now >= l.connect_at + FRESH_NS || !l.listened {
            self.ends[l.active].init = false;
        }
        self.link = Some(l);
    }

    /// A fault or crash: from now on only robust predictions.
    pub(super) fn dirty(&mut self) {
        self.settle();
        self.clean = false;
        for e in &mut self.ends {
            e.init = false;
        }
    }

    pub(super) fn touch(&mut self) {
        if let Some(l) = &mut self.link {
            if !l.established {
                l.touched = true;
            }
        }
    }

    /// The request the passive host would answer: certain or not.
    pub(super) fn request_certain(&self, h: usize) -> Option<bool> {
        let (from, a) = self.hosts[h].request_from?;
        let l = self.link.filter(|l| l.active == a);
        let readable = self.hosts[h].mode != EventMode::NeverRead;
        if !readable {
            return Some(false);
        }
        let l = l?;
        if self.clean && l.listened && !l.touched && !self.hosts[h].stray_request {
            // The REQ arrives after the 10 µs latency and stays pending until answered.
            if self.now >= from + ARRIVE_NS {
                return Some(true);
            }
            if self.now < from + DEFAULT_LATENCY_NS {
                return Some(false);
            }
        }
        None
    }

    pub(super) fn apply(mut self, t: &T) -> Self {
        self.settle();
        self.expect = None;
        self.expect_applied = None;
        match *t {
            T::Listen(h) => {
                // A REQ sent while this host did not listen may still be in flight.
                let in_flight = self.hosts[h]
                    .unheard_req_at
                    .is_some_and(|t| self.now < t + ARRIVE_NS);
                self.hosts[h].stray_request |= in_flight;
                self.hosts[h].listening = true;
                self.expect = Some(0);
            }
            T::Connect(h) => {
                let p = 1 - h;
                let i = self.ends.len();
                self.ends.push(RefEnd {
                    host: h,
                    active: true,
                    certain: true,
                    rts: false,
                    init: self.clean,
                    err: false,
                    destroyed: Some(false),
                    answered_at: None,
                    disc_while_est: false,
                    dead: false,
                    peer: None,
                    posted: [0; 2],
                });
                self.hosts[h].cur = Some(i);
                let listened = self.hosts[p].listening && self.up(p);
                if !listened {
                    self.hosts[p].unheard_req_at = Some(self.now);
                }
                // An unanswered earlier request may still be pending.
                self.hosts[p].stray_request |= self.hosts[p].request_from.is_some();
                self.hosts[p].request_from = listened.then_some((self.now, i));
                self.link = Some(Link {
                    active: i,
                    passive: None,
                    connect_at: self.now,
                    listened,
                    accepted_at: None,
                    touched: false,
                    established: false,
                });
                self.expect = Some(0);
            }
            T::Accept(h) | T::Reject(h) => {
                let applied = self.request_certain(h);
                self.expect_applied = applied;
                // The answer surely finds the active side waiting for it (before its first
                // REQ timeout): accept/reject return 0 and the setup completes.
                let (at, a) = self.hosts[h].request_from.unwrap();
                let fresh = self.now < at + FRESH_NS;
                let certain = applied.filter(|&a| a && fresh);
                self.expect = certain.map(|_| 0);
                self.hosts[h].request_from = None;
                // Nothing answered for sure: the request may still come and stay pending.
                self.hosts[h].stray_request |= applied != Some(true);
                // `applied` is only known for the current link's request.
                let mut l = self.link.filter(|l| l.active == a);
                if matches!(t, T::Reject(_)) {
                    let Some(mut l) = l else { return self };
                    l.touched = true;
                    self.ends[l.active].init = false;
                    self.link = Some(l);
                    return self;
                }
                let i = self.ends.len();
                self.ends.push(RefEnd {
                    host: h,
                    active: false,
                    certain: certain == Some(true),
                    rts: certain == Some(true),
                    init: false,
                    err: false,
                    destroyed: Some(false),
                    answered_at: None,
                    disc_while_est: false,
                    dead: false,
                    peer: Some(a),
                    posted: [0; 2],
                });
                self.ends[a].peer = Some(i);
                self.ends[a].init = false;
                self.hosts[h].cur = Some(i);
                if let Some(l) = &mut l {
                    l.passive = Some(i);
                    if certain == Some(true) {
                        l.accepted_at = Some(self.now);
                    }
                    self.link = Some(*l);
                }
            }
            T::PostRecv(h, n) => {
                let e = &mut self.ends[self.hosts[h].cur.unwrap()];
                e.posted[1] += n;
                // Receives are accepted from INIT on (§5.4); the QP is never in RESET here.
                self.expect = (e.certain && e.posted[1] <= 60).then_some(0);
            }
            T::Post(h, _, n) => {
                let e = &mut self.ends[self.hosts[h].cur.unwrap()];
                e.posted[0] += n;
                self.expect = if !e.certain || e.posted[0] > 60 {
                    None
                } else if e.err || e.rts {
                    Some(0) // RTS, or ERR: accepted and flushed (§5.4)
                } else if e.init {
                    Some(EINVAL) // sends before RTS (§5.4)
                } else {
                    None
                };
            }
            T::Disconnect(h) => {
                let i = self.hosts[h].cur.unwrap();
                let est = self
                    .link
                    .is_some_and(|l| l.established && (l.active == i || l.passive == Some(i)));
                let e = &mut self.ends[i];
                // §4.4: 0 on any id that connected or accepted, whatever the CM state;
                // EINVAL once destroyed (unknown id).
                self.expect = match (e.certain, e.destroyed) {
                    (true, Some(true)) => Some(EINVAL),
                    (true, Some(false)) => Some(0),
                    _ => None,
                };
                if e.destroyed != Some(true) {
                    e.err = e.certain;
                    if e.answered_at.is_none() {
                        e.answered_at = Some(self.now);
                        e.disc_while_est = est;
                    }
                }
                self.touch();
            }
            T::DisconnectListener(_) => self.expect = Some(0),
            T::Destroy(h) => {
                let i = self.hosts[h].cur.unwrap();
                let mode = self.hosts[h].mode;
                let e = &mut self.ends[i];
                let expect = match (e.certain, e.destroyed, mode) {
                    (true, Some(true), _) => Some(EINVAL),
                    (true, Some(false), EventMode::AckAtOnce | EventMode::NeverRead) => Some(0),
                    // Never acking: a passive id's CONNECT_REQUEST is the listener's event
                    // (ucma.c), so the id is busy only if it read an event of its own since,
                    // which the reference does not track; the oracle checks the exact count.
                    _ => None,
                };
                self.expect = expect;
                e.destroyed = match (e.destroyed, expect) {
                    (Some(true), _) => Some(true),
                    (_, Some(0)) => Some(true),
                    _ => None,
                };
                // The QP goes to ERR anyway (the call that follows).
                e.err = e.certain;
                if e.answered_at.is_none() && expect == Some(0) {
                    e.answered_at = Some(self.now);
                }
                self.touch();
            }
            T::Advance(d) => {
                self.now += d;
                self.settle();
            }
            T::Crash(h, restart) => {
                self.dirty();
                let host = &mut self.hosts[h];
                host.listening = false;
                host.request_from = None;
                host.cur = None;
                host.up_from = restart.map(|d| self.now + d.max(1));
                for e in self.ends.iter_mut().filter(|e| e.host == h) {
                    e.dead = true;
                }
            }
            T::DropNext(_) | T::Partition { .. } => self.dirty(),
            T::Heal => {}
        }
        self
    }

    pub(super) fn preconditions(&self, t: &T) -> bool {
        match *t {
            T::Listen(h) => self.up(h),
            T::Connect(h) => self.up(h) && self.free(h) && self.free(1 - h),
            T::Accept(h) | T::Reject(h) => {
                self.up(h) && self.hosts[h].request_from.is_some() && self.free(h)
            }
            T::PostRecv(h, _) | T::Post(h, _, _) | T::Disconnect(h) | T::Destroy(h) => {
                self.has_end(h)
            }
            T::DisconnectListener(h) => self.up(h) && self.hosts[h].listening,
            T::Crash(h, _) => self.faulty && self.up(h),
            T::DropNext(_) | T::Partition { .. } | T::Heal => self.faulty,
            T::Advance(_) => true,
        }
    }
}

pub(super) fn mode_strategy() -> impl Strategy<Value = EventMode> {
    prop_oneof![
        8 => Just(EventMode::AckAtOnce),
        1 => (1..=100u64).prop_map(|us| EventMode::AckAfter(us * US)),
        1 => Just(EventMode::NeverAck),
        1 => Just(EventMode::NeverRead),
    ]
}

pub(super) fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![2 => Just(Op::Send), 1 => Just(Op::Write), 1 => Just(Op::Read)]
}

/// Virtual time steps: a few latencies, past the settle time, past DREQ retries, past TimeWait.
pub(super) fn advance_strategy() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![3 * US, 15 * US, 120 * US, 2 * MS, 25 * MS, 400 * MS])
}

pub(super) struct ApiMachine;

impl ReferenceStateMachine for ApiMachine {
    type State = RefState;
    type Transition = T;

    fn init_state() -> BoxedStrategy<RefState> {
        (
            any::<u64>(),
            1..=6u8,
            mode_strategy(),
            mode_strategy(),
            any::<bool>(),
        )
            .prop_map(|(seed, rnr_retry, m0, m1, faulty)| {
                let host = |mode| RefHost {
                    mode,
                    up_from: Some(0),
                    listening: false,
                    cur: None,
                    request_from: None,
                    stray_request: false,
                    unheard_req_at: None,
                };
                RefState {
                    seed,
                    rnr_retry,
                    now: 0,
                    faulty,
                    clean: true,
                    hosts: [host(m0), host(m1)],
                    ends: Vec::new(),
                    link: None,
                    expect: None,
                    expect_applied: None,
                }
            })
            .boxed()
    }

    fn transitions(s: &RefState) -> BoxedStrategy<T> {
        // Weights follow the story (listen, connect, accept, post, disconnect) so that clean
        // runs get far enough for the strong predictions; faults only in `faulty` runs.
        let mut choices: Vec<(u32, BoxedStrategy<T>)> =
            vec![(6, advance_strategy().prop_map(T::Advance).boxed())];
        if s.faulty {
            choices.push((1, (0..2usize).prop_map(T::DropNext).boxed()));
            choices.push((
                1,
                (0..2usize, any::<bool>(), advance_strategy())
                    .prop_map(|(from, one_way, window)| T::Partition {
                        from,
                        one_way,
                        window,
                    })
                    .boxed(),
            ));
            choices.push((1, Just(T::Heal).boxed()));
        }
        for h in 0..2 {
            let disconnected = s.cur(h).is_some_and(|e| e.answered_at.is_some());
            let peer_listens = s.hosts[1 - h].listening;
            let arrived = s.hosts[h]
                .request_from
                .is_some_and(|(t, _)| s.now >= t + ARRIVE_NS);
            let all = [
                (T::Listen(h), if s.hosts[h].listening { 0 } else { 4 }),
                (T::Connect(h), if peer_listens { 4 } else { 1 }),
                (T::Accept(h), if arrived { 10 } else { 1 }),
                (T::Reject(h), if arrived { 2 } else { 1 }),
                (T::Disconnect(h), if disconnected { 1 } else { 4 }),
                (T::DisconnectListener(h), 1),
                (T::Destroy(h), 1),
            ];
            for (t, w) in all {
                if w > 0 && s.preconditions(&t) {
                    choices.push((w, Just(t).boxed()));
                }
            }
            if s.has_end(h) {
                choices.push((2, (1..=3u32).prop_map(move |n| T::PostRecv(h, n)).boxed()));
                choices.push((
                    3,
                    (op_strategy(), 1..=3u32)
                        .prop_map(move |(op, n)| T::Post(h, op, n))
                        .boxed(),
                ));
            }
            if s.faulty && s.up(h) {
                choices.push((
                    1,
                    prop::option::of(prop::sample::select(vec![50 * US, 5 * MS]))
                        .prop_map(move |r| T::Crash(h, r))
                        .boxed(),
                ));
            }
        }
        prop::strategy::Union::new_weighted(choices).boxed()
    }

    fn apply(state: RefState, t: &T) -> RefState {
        state.apply(t)
    }

    fn preconditions(state: &RefState, t: &T) -> bool {
        state.preconditions(t)
    }
}
