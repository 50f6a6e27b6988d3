//! [`Simulation`]: the single-threaded driver that runs [`Endpoint`]s on a [`SimFabric`] in
//! virtual time. The clock jumps from event to event, so idle time is free: a 60 s timer costs
//! one event, not 60 000 ticks (TESTING.md, "Determinism rules").

use std::collections::BTreeMap;
use std::net::SocketAddr;

use verbs_core::{Errno, Error, SimTime};

use super::sim::SimFabric;
use super::Endpoint;

/// How a `run_*` call of [`Simulation`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// Quiescent: nothing in flight and no endpoint deadline left (on an up host or one that
    /// ever comes back).
    Idle,
    /// Events remain, all after the deadline; the clock is at the deadline.
    Deadline,
    /// The call processed [`Simulation::set_step_limit`] events without reaching idle or the
    /// deadline: a livelock (e.g. an endpoint that never moves a past deadline).
    StepLimit,
}

/// The kind of the next event, in tie-break order: deliveries (by packet id, inside the fabric)
/// before timeouts (by endpoint index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Delivery,
    Timeout(usize),
}

/// Endpoints on a deterministic fabric, a virtual clock, and the loop that runs them.
///
/// Each step: every endpoint of an up host, in index order, has its
/// [`poll_transmit`](Endpoint::poll_transmit) drained into the fabric at the current time;
/// then the earliest event is processed — ordered by (time, deliveries before timeouts,
/// packet id / endpoint index) — and the clock jumps to it. Endpoints of a crashed host get
/// nothing (no datagrams, no timeouts, no polls) until it restarts; a deadline that passed while
/// it was down fires at the restart.
#[derive(Debug)]
pub struct Simulation<E: Endpoint = Box<dyn Endpoint>> {
    /// The network; its plan may be changed between runs.
    pub fabric: SimFabric,
    endpoints: Vec<E>,
    by_addr: BTreeMap<SocketAddr, usize>,
    now: SimTime,
    steps: u64,
    step_limit: u64,
}

impl<E: Endpoint> Simulation<E> {
    /// A simulation on `fabric` at time zero, with no endpoints and no step limit.
    pub fn new(fabric: SimFabric) -> Self {
        Simulation {
            fabric,
            endpoints: Vec::new(),
            by_addr: BTreeMap::new(),
            now: SimTime::ZERO,
            steps: 0,
            step_limit: u64::MAX,
        }
    }

    /// Adds `endpoint`, binds its [`addr`](Endpoint::addr) on the fabric and returns its index.
    ///
    /// Errors: `EADDRINUSE` if the address is already bound.
    pub fn add_endpoint(&mut self, endpoint: E) -> Result<usize, Error> {
        let addr = endpoint.addr();
        if self.by_addr.contains_key(&addr) {
            return Err(Error::new(
                Errno::EADDRINUSE,
                format!("an endpoint already has {addr}"),
            ));
        }
        self.fabric.bind(addr)?;
        let index = self.endpoints.len();
        self.endpoints.push(endpoint);
        self.by_addr.insert(addr, index);
        Ok(index)
    }

    /// Makes room for `additional` more endpoints (an endpoint may be large: no moves while
    /// adding them).
    pub fn reserve(&mut self, additional: usize) {
        self.endpoints.reserve(additional);
    }

    /// The endpoints, by index.
    pub fn endpoints(&self) -> &[E] {
        &self.endpoints
    }

    /// Endpoint `index`, if it exists.
    pub fn endpoint(&self, index: usize) -> Option<&E> {
        self.endpoints.get(index)
    }

    /// Endpoint `index`, to drive its API between runs (what it then wants to send goes out
    /// at the start of the next run, at the current time). Replacing it must keep its address.
    pub fn endpoint_mut(&mut self, index: usize) -> Option<&mut E> {
        self.endpoints.get_mut(index)
    }

    /// The virtual clock.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Events processed since creation (each delivery attempt or timeout is one).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Makes each `run_*` call stop with [`RunOutcome::StepLimit`] after `max_steps` events.
    pub fn set_step_limit(&mut self, max_steps: u64) {
        self.step_limit = max_steps;
    }

    /// The time of the next event (after the pending transmits are flushed), if any.
    pub fn next_event_time(&mut self) -> Option<SimTime> {
        self.flush_transmits();
        self.next_event().map(|(t, _)| t)
    }

    /// Processes every event up to and including `deadline`, then sets the clock to
    /// `deadline` (if it is later). [`RunOutcome::Idle`] if nothing is left at all.
    pub fn run_until(&mut self, deadline: SimTime) -> RunOutcome {
        let outcome = self.run(deadline);
        if outcome != RunOutcome::StepLimit {
            self.now = self.now.max(deadline);
        }
        outcome
    }

    /// Processes events until the simulation is quiescent ([`RunOutcome::Idle`], the clock at
    /// the last event) or the next event is after `max_time` ([`RunOutcome::Deadline`], the
    /// clock at `max_time`).
    pub fn run_until_idle(&mut self, max_time: SimTime) -> RunOutcome {
        let outcome = self.run(max_time);
        if outcome == RunOutcome::Deadline {
            self.now = self.now.max(max_time);
        }
        outcome
    }

    fn run(&mut self, deadline: SimTime) -> RunOutcome {
        let mut budget = self.step_limit;
        loop {
            self.flush_transmits();
            let Some((at, event)) = self.next_event() else {
                return RunOutcome::Idle;
            };
            if at > deadline {
                return RunOutcome::Deadline;
            }
            if budget == 0 {
                return RunOutcome::StepLimit;
            }
            budget -= 1;
            self.process(at, event);
        }
    }

    /// The earliest event: (time, kind), ties by [`Event`] order.
    ///
    /// Candidates come in [`Event`] order (the delivery, then timeouts by index), so only a
    /// strictly earlier one replaces the best so far; and an endpoint whose deadline is not
    /// before the best cannot win (its host is up at that deadline or later), so its host's
    /// crash windows are not searched.
    fn next_event(&self) -> Option<(SimTime, Event)> {
        let mut best = self
            .fabric
            .next_delivery_time()
            .map(|t| (t.max(self.now), Event::Delivery));
        for (i, e) in self.endpoints.iter().enumerate() {
            let Some(due) = e.poll_timeout().map(|t| t.max(self.now)) else {
                continue;
            };
            if best.is_some_and(|(b, _)| b <= due) {
                continue;
            }
            let Some(up) = self.fabric.plan().next_up(e.addr().ip(), due) else {
                continue;
            };
            if best.is_none_or(|(b, _)| up < b) {
                best = Some((up, Event::Timeout(i)));
            }
        }
        best
    }

    fn process(&mut self, at: SimTime, event: Event) {
        self.now = at;
        self.steps += 1;
        match event {
            Event::Delivery => {
                // `None`: dropped on arrival (crash, partition, unbound), already traced.
                if let Some(d) = self.fabric.pop_delivery(at) {
                    // A destination bound on the fabric without an endpoint swallows it.
                    if let Some(&i) = self.by_addr.get(&d.dst) {
                        self.endpoints[i].handle_datagram(at, d.src, d.bytes);
                    }
                }
            }
            Event::Timeout(i) => self.endpoints[i].handle_timeout(at),
        }
    }

    /// Drains every up endpoint's transmit queue into the fabric, in index order.
    fn flush_transmits(&mut self) {
        let now = self.now;
        for e in &mut self.endpoints {
            let src = e.addr();
            if !self.fabric.host_is_up(src.ip(), now) {
                continue;
            }
            while let Some((dst, bytes)) = e.poll_transmit(now) {
                self.fabric.send(now, src, dst, bytes);
            }
        }
    }
}
