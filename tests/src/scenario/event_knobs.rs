//! The generator's share of the device and CM events of issue 14: hosts that receive from a
//! shared receive queue (with its limit armed), a passive application that answers COMM_EST
//! with `rdma_notify` while the RTU is lost, small CQs that overrun (CQ_ERR → QP_FATAL), device
//! removal and address change at a random point of a script. Drawn after everything else of a
//! scenario ([`super::knobs`] included), so a scenario that draws none keeps what it had.

use super::{Action, Step, Trigger};
use crate::world::{HostApp, MsgFault, Occurrence, Op};
use cm_core::api::CmEventType as E;
use cm_core::wire::CM_RTU_ATTR_ID as RTU;
use rnic_sim::rng::Rng;

/// The share of hosts whose QPs take their receives from a shared receive queue.
pub const SRQ_SHARE: f64 = 0.05;
/// The share of scenarios whose passive application answers COMM_EST with `rdma_notify`
/// (most of them with the first RTU dropped and the active side writing at once).
pub const NOTIFY_SHARE: f64 = 0.04;
/// The share of scenarios whose CQs hold 1–2 CQEs (a flush of a few WRs overruns them).
pub const CQ_OVERRUN_SHARE: f64 = 0.02;
/// The share of scenarios in which one host's device is removed.
pub const REMOVE_DEVICE_SHARE: f64 = 0.03;
/// The share of scenarios in which one host's address changes.
pub const ADDR_CHANGE_SHARE: f64 = 0.02;

/// What [`draw`] adds to a scenario.
pub(super) struct EventKnobs {
    pub(super) host_app: Vec<HostApp>,
    pub(super) cq_entries: u32,
}

/// Inserts `action` into `script`: right after its connection step, once ESTABLISHED (the
/// connection is up), or at the end at a random time within a few timer `unit`s.
fn insert(rng: &mut Rng, unit: u64, script: &mut Vec<Step>, action: Action) {
    if rng.chance(0.5) {
        let at = script.len().min(2);
        let when = if rng.chance(0.5) {
            Trigger::OnEvent(E::Established)
        } else {
            Trigger::At(rng.range_u64(0..=400) * 1_000)
        };
        script.insert(at, Step { when, action });
    } else {
        let when = Trigger::At(rng.range_u64(0..=16) * unit / 4 + rng.range_u64(0..=100) * 1_000);
        script.push(Step { when, action });
    }
}

/// Draws the event knobs of a two-host scenario (`a` active, `p` passive) and adapts the
/// scripts; may add a targeted RTU drop to `msg_faults`.
pub(super) fn draw(
    rng: &mut Rng,
    unit: u64,
    a: &mut Vec<Step>,
    p: &mut Vec<Step>,
    msg_faults: &mut Vec<MsgFault>,
) -> EventKnobs {
    let mut host_app = vec![HostApp::default(); 2];
    for app in &mut host_app {
        if rng.chance(SRQ_SHARE) {
            app.srq = true;
            app.srq_limit = if rng.chance(0.7) {
                rng.range_u64(1..=3) as u32
            } else {
                0
            };
        }
    }
    if rng.chance(NOTIFY_SHARE) {
        host_app[1].notify_on_comm_est = true;
        if rng.chance(0.7) {
            // The RTU is lost: the active side's data reaches the passive QP in RTR first.
            msg_faults.push(MsgFault::drop(0, RTU, Occurrence::Nth(1)));
            if let Some(s) = a
                .iter_mut()
                .find(|s| matches!(s.action, Action::Post { .. }))
            {
                s.action = Action::Post {
                    op: Op::Write,
                    n: rng.range_u64(1..=3) as u32,
                };
            }
        }
    }
    let cq_entries = if rng.chance(CQ_OVERRUN_SHARE) {
        // Receives to flush: more than the CQ holds.
        if let Some(s) = p
            .iter_mut()
            .find(|s| matches!(s.action, Action::PostRecv { .. }))
        {
            s.action = Action::PostRecv {
                n: rng.range_u64(3..=6) as u32,
            };
        }
        rng.range_u64(1..=2) as u32
    } else {
        1024
    };
    if rng.chance(REMOVE_DEVICE_SHARE) {
        let script = if rng.chance(0.5) { &mut *a } else { &mut *p };
        insert(rng, unit, script, Action::RemoveDevice);
    }
    if rng.chance(ADDR_CHANGE_SHARE) {
        let script = if rng.chance(0.5) { &mut *a } else { &mut *p };
        insert(rng, unit, script, Action::AddressChange);
    }
    if host_app.iter().all(|x| *x == HostApp::default()) {
        host_app.clear();
    }
    EventKnobs {
        host_app,
        cq_entries,
    }
}
