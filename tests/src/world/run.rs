//! Running the World: stepping, waiting for events, quiescence, teardown and the oracle's check.

use super::config::QUIESCE_LIMIT_NS;
use super::{End, Record, Violations, World, WorldError};
use crate::oracle;
use cm_core::api::{CmEventType, CmIdHandle};
use verbs_core::SimTime;

impl World {
    /// The next time something happens: a simulation event or a deferred ack.
    pub fn next_wake(&mut self) -> Option<SimTime> {
        let ev = self.sim.next_event_time();
        // That flushed the hosts' transmit queues at the current time: record those sends now,
        // so the history stays in time order.
        for h in 0..self.apps.len() {
            self.drain_wire(h);
        }
        self.match_trace();
        let ack = self.acks.iter().map(|a| a.0).min();
        match (ev, ack) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs every event up to and including `deadline`, observing after each; the clock ends
    /// at `deadline`.
    pub fn run_until(&mut self, deadline: SimTime) {
        self.observe();
        while let Some(t) = self.next_wake().filter(|&t| t <= deadline) {
            self.sim.run_until(t);
            self.observe();
        }
        self.sim.run_until(deadline);
        self.observe();
    }

    /// Runs for `ns` nanoseconds of virtual time.
    pub fn run_for(&mut self, ns: u64) {
        let t = self.now().plus_nanos(ns);
        self.run_until(t);
    }

    /// Runs one step: the next event (or deferred ack), if it is not after `limit`. Returns
    /// false when there is none.
    pub fn step(&mut self, limit: SimTime) -> bool {
        match self.next_wake() {
            Some(t) if t <= limit => {
                self.sim.run_until(t);
                self.observe();
                true
            }
            _ => false,
        }
    }

    /// Runs every event up to and including `t` (normally [`next_wake`](Self::next_wake)'s
    /// answer) and observes once, without asking for the next event again.
    pub fn advance_to(&mut self, t: SimTime) {
        self.sim.run_until(t);
        self.observe();
    }

    /// Runs until nothing is left (no datagram in flight, no timer armed, no deferred ack) or
    /// [`QUIESCE_LIMIT_NS`] has passed; returns whether it got quiescent (also kept in
    /// [`History::quiescent`]).
    ///
    /// [`History::quiescent`]: super::History::quiescent
    pub fn run_to_quiescence(&mut self) -> bool {
        let limit = self.now().plus_nanos(QUIESCE_LIMIT_NS);
        self.observe();
        while self.step(limit) {}
        let q = self.next_wake().is_none();
        self.history.quiescent = q;
        q
    }

    /// Runs until host `h` has read an event of `kind` on `id` (any id if `None`); returns
    /// the id.
    ///
    /// # Errors
    /// [`WorldError::Timeout`] if it does not come before quiescence.
    pub fn wait_event(
        &mut self,
        h: usize,
        id: Option<CmIdHandle>,
        kind: CmEventType,
    ) -> Result<CmIdHandle, WorldError> {
        self.wait_event_from(0, h, id, kind)
    }

    /// Files the CM events recorded since the last call in `event_index`.
    fn index_events(&mut self) {
        let entries = self.history.entries.iter().enumerate();
        for (index, e) in entries.skip(self.events_indexed) {
            if let Record::Event { id, event, .. } = e.rec {
                self.event_index.insert((e.host, e.epoch, id, event, index));
            }
        }
        self.events_indexed = self.history.entries.len();
    }

    /// [`wait_event`](Self::wait_event), looking only at history entries from index `from`
    /// on (e.g. `history().entries.len()` before a call, to skip older events).
    ///
    /// # Errors
    /// [`WorldError::Timeout`] if it does not come before quiescence.
    pub fn wait_event_from(
        &mut self,
        mut from: usize,
        h: usize,
        id: Option<CmIdHandle>,
        kind: CmEventType,
    ) -> Result<CmIdHandle, WorldError> {
        let limit = self.now().plus_nanos(QUIESCE_LIMIT_NS);
        loop {
            let epoch = self.epoch(h);
            let found = if let Some(id) = id {
                self.index_events();
                let key = |i| (h as u8, epoch, id.0, kind, i);
                self.event_index
                    .range(key(from)..=key(usize::MAX))
                    .next()
                    .map(|_| id)
            } else {
                self.history.entries[from..]
                    .iter()
                    .find_map(|e| match e.rec {
                        Record::Event { id: i, event, .. }
                            if usize::from(e.host) == h && e.epoch == epoch && event == kind =>
                        {
                            Some(CmIdHandle(i))
                        }
                        _ => None,
                    })
            };
            if let Some(i) = found {
                return Ok(i);
            }
            from = self.history.entries.len();
            if !self.step(limit) {
                return Err(WorldError::Timeout {
                    host: h,
                    what: format!("{kind:?}"),
                    at: self.now(),
                });
            }
        }
    }

    /// The applications' exit: runs to quiescence, then every live host moves each of its QPs
    /// to ERR (what `ibv_destroy_qp` or process exit does: what is still posted is flushed),
    /// then runs to quiescence again. Returns whether it got quiescent.
    pub fn teardown(&mut self) -> bool {
        self.run_to_quiescence();
        for h in 0..self.apps.len() {
            if !self.is_up(h) {
                continue;
            }
            let epoch = self.epoch(h);
            for qp in self.qps_of(h) {
                let e = End {
                    host: h,
                    epoch,
                    id: CmIdHandle(0),
                    qp,
                    peer: h,
                };
                let _ = self.qp_to_err(e);
            }
        }
        self.run_to_quiescence()
    }

    /// [`teardown`](Self::teardown), then checks the whole history with the
    /// [`oracle`] (S1–S7; L1–L3 too if the World was [healed](Self::heal)).
    ///
    /// # Errors
    /// The violations found, or an S2/L3 violation if the World did not get quiescent.
    pub fn check(&mut self) -> Result<(), Violations> {
        self.teardown();
        self.check_now()
    }

    /// Checks the history as it is, without running anything.
    ///
    /// # Errors
    /// The violations found.
    pub fn check_now(&self) -> Result<(), Violations> {
        let v = oracle::check(&self.history);
        if v.is_empty() {
            Ok(())
        } else {
            Err(Violations(v))
        }
    }
}
