//! The runner: [`run`] drives a [`Scenario`]'s scripts on a [`World`] through its three phases
//! (scenario, liveness, teardown).

use super::Action;
use super::Scenario;
use super::Trigger;
use crate::world::{End, Op, Record, World, WorldConfig, SLOTS};
use cm_core::api::{CmEventType, CmIdHandle};
use cm_core::engine::IbCmId;
use verbs_core::{Gid, SimTime};

/// Per host: where its script is and what its application knows.
#[derive(Debug, Default, Clone)]
pub(super) struct Runner {
    pub(super) next: usize,
    pub(super) epoch: u8,
    pub(super) conn: Option<End>,
    pub(super) request: Option<CmIdHandle>,
    /// Bit `t` set: the connection had an event of type `t`.
    pub(super) seen: u32,
    /// When each bit of `seen` was first set (virtual ns).
    pub(super) seen_at: [u64; 32],
    pub(super) completions: u32,
}

/// Whether a step of `scenario` posts more WRs than the base layout has slots.
fn deep(scenario: &Scenario) -> bool {
    scenario.hosts.iter().flat_map(|s| &s.steps).any(|st| {
        matches!(st.action, Action::Post { n, .. } | Action::PostRecv { n } if u64::from(n) > SLOTS)
    })
}

impl Runner {
    /// Notes that the host's connection (or any id, for CONNECT_REQUEST) had `event` at `at`.
    fn see(&mut self, event: CmEventType, at: SimTime) {
        let bit = 1 << event as u32;
        if self.seen & bit == 0 {
            self.seen_at[event as usize & 31] = at.as_nanos();
        }
        self.seen |= bit;
    }
}

/// Runs `scenario`; returns the World after the teardown (history complete, quiescent or not).
///
/// # Errors
/// Creating the World failed (not expected).
pub fn run(scenario: &Scenario, capture: bool) -> Result<World, verbs_core::Error> {
    let scripted = scenario.hosts.len();
    let cfg = WorldConfig {
        hosts: scripted + usize::from(scenario.hostile.is_some()),
        seed: scenario.seed,
        faults: scenario.faults.plan(),
        fast_timers: scenario.fast_timers,
        capture,
        rnr_retry: scenario.rnr_retry,
        cq_entries: scenario.cq_entries,
        host_cm: scenario.host_cm.clone(),
        msg_faults: scenario.msg_faults.clone(),
        qp_depth: 64,
        // Room for a deep post (more than the 32 slots of the base layout).
        wr_slots: if deep(scenario) { 64 } else { SLOTS as u32 },
        host_app: scenario.host_app.clone(),
    };
    let mut w = World::new(cfg)?;
    for (h, s) in scenario.hosts.iter().enumerate() {
        w.set_event_mode(h, s.events);
    }
    let attacker = scenario.hostile.as_ref().map(|_| {
        w.set_hostile(scripted);
        scripted
    });
    let mut fired = vec![false; scenario.hostile.as_ref().map_or(0, |x| x.attacks.len())];
    let mut rs = vec![Runner::default(); scenario.hosts.len()];
    let mut cursor = 0;
    let heal_at = SimTime(scenario.faults.heal_at_ns);
    let mut healed = false;
    let limit = heal_at.plus_nanos(crate::world::QUIESCE_LIMIT_NS);
    loop {
        cursor = learn(&w, &mut rs, cursor, attacker);
        let mut acted = false;
        for h in 0..rs.len() {
            acted |= drive(&mut w, scenario, &mut rs, h);
        }
        if let (Some(x), Some(a)) = (&scenario.hostile, attacker) {
            acted |= x.strike(&mut w, a, &rs, &mut fired);
        }
        if acted {
            continue;
        }
        if !healed && w.now() >= heal_at {
            w.heal();
            healed = true;
        }
        let mut wake = w.next_wake();
        let timed = rs
            .iter()
            .zip(&scenario.hosts)
            .filter_map(|(r, s)| match s.steps.get(r.next)?.when {
                Trigger::At(t) => Some(SimTime(t)),
                Trigger::OnEventAfter(ev, ns) if r.seen & (1 << ev as u32) != 0 => {
                    Some(SimTime(r.seen_at[ev as usize & 31].saturating_add(ns)))
                }
                _ => None,
            })
            .chain((!healed).then_some(heal_at))
            .chain(
                scenario
                    .hostile
                    .as_ref()
                    .and_then(|x| x.next_at(&fired, w.now())),
            )
            .filter(|&t| t > w.now())
            .min();
        if let Some(t) = timed {
            wake = Some(wake.map_or(t, |x| x.min(t)));
        }
        match wake {
            Some(t) if t <= limit => w.advance_to(t),
            _ => break,
        }
    }
    w.teardown();
    Ok(w)
}

/// Reads the history since `cursor` into the runners' knowledge. A CONNECT_REQUEST from host
/// `attacker` is not one the application answers (it serves its script's peer).
fn learn(w: &World, rs: &mut [Runner], cursor: usize, attacker: Option<usize>) -> usize {
    let entries = &w.history().entries;
    for e in &entries[cursor..] {
        let Some(r) = rs.get_mut(usize::from(e.host)) else {
            continue;
        };
        if e.epoch != r.epoch {
            continue;
        }
        match e.rec {
            Record::Event { id, event, .. } => {
                if event == CmEventType::ConnectRequest {
                    if attacker.is_some_and(|a| sent_by(w, usize::from(e.host), id) == Some(a)) {
                        continue;
                    }
                    r.request = Some(CmIdHandle(id));
                    r.see(event, e.at);
                } else if r.conn.is_some_and(|c| c.id.0 == id) {
                    r.see(event, e.at);
                }
            }
            Record::Completion { .. } => r.completions += 1,
            _ => {}
        }
    }
    entries.len()
}

/// The host whose REQ made passive id `id` of host `h`: the REQ's source address, as the CM
/// took it (not the IP-CM header's claim).
fn sent_by(w: &World, h: usize, id: u32) -> Option<usize> {
    let p = w.host(h)?.cm().engine().qp_params(IbCmId(id)).ok()?;
    (0..w.config().hosts).find(|&i| p.remote_gid == Gid::from_ip(crate::world::host_ip(i)))
}

/// Runs host `h`'s next step if its trigger holds; returns whether it did.
fn drive(w: &mut World, scenario: &Scenario, rs: &mut [Runner], h: usize) -> bool {
    let Some(st) = scenario
        .hosts
        .get(h)
        .and_then(|s| s.steps.get(rs[h].next))
        .copied()
    else {
        return false;
    };
    if !w.is_up(h) {
        return false;
    }
    let r = &rs[h];
    let ready = match st.when {
        Trigger::Now => true,
        Trigger::At(t) => w.now() >= SimTime(t),
        Trigger::OnEvent(ev) => r.seen & (1 << ev as u32) != 0,
        Trigger::AfterCompletions(n) => r.completions >= n,
        Trigger::OnEventAfter(ev, ns) => {
            r.seen & (1 << ev as u32) != 0
                && w.now() >= SimTime(r.seen_at[ev as usize & 31].saturating_add(ns))
        }
    };
    if !ready {
        return false;
    }
    rs[h].next += 1;
    let conn = rs[h].conn;
    match st.action {
        Action::Listen => {
            let _ = w.listen(h);
        }
        Action::Connect { to } => {
            if let Ok(e) = w.connect(h, to) {
                rs[h].conn = Some(e);
                rs[h].seen = 0;
            }
        }
        Action::Accept => {
            if let Some(id) = rs[h].request.take() {
                if let Ok(e) = w.accept(h, id) {
                    rs[h].conn = Some(e);
                    rs[h].seen = 0;
                }
            }
        }
        Action::Reject => {
            if let Some(id) = rs[h].request.take() {
                let _ = w.reject(h, id);
            }
        }
        Action::PostRecv { n } => {
            if let Some(c) = conn {
                w.post(c, Op::Recv, n as usize);
            }
        }
        Action::Post { op, n } => {
            if let Some(c) = conn {
                w.post(c, op, n as usize);
            }
        }
        Action::Disconnect => {
            if let Some(c) = conn {
                let _ = w.disconnect(c);
            }
        }
        Action::DisconnectTwice => {
            if let Some(c) = conn {
                let _ = w.disconnect(c);
                let _ = w.disconnect(c);
            }
        }
        Action::DestroyInsteadOfDisconnect => {
            if let Some(c) = conn {
                let _ = w.destroy(c);
                let _ = w.qp_to_err(c);
            }
        }
        Action::RemoveDevice => {
            let _ = w.remove_device(h);
        }
        Action::AddressChange => {
            let _ = w.address_change(h);
        }
        Action::Crash { restart_after_ns } => {
            if w.crash(h, restart_after_ns).is_ok() {
                rs[h] = Runner {
                    next: rs[h].next,
                    epoch: w.epoch(h),
                    ..Runner::default()
                };
            }
        }
    }
    true
}
