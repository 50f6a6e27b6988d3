//! The generator's share of the World's knobs of issue 14: per-host CM timers, targeted
//! message faults, a late accept that draws an MRA, and deep posts. Drawn after everything else
//! of a scenario, so a scenario that draws none of them keeps the scripts and faults it had.

use super::{pick, Action, Step, Trigger};
use crate::world::{HostCm, MsgFault, Occurrence, Op};
use cm_core::api::CmEventType as E;
use cm_core::wire::{
    CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ, CM_MRA_ATTR_ID as MRA, CM_REP_ATTR_ID as REP,
    CM_REQ_ATTR_ID as REQ, CM_RTU_ATTR_ID as RTU,
};
use rnic_sim::rng::Rng;

/// The share of scenarios whose passive application accepts late (0.5–4 REQ timeouts after
/// the CONNECT_REQUEST): the active side's REQ retry draws an MRA (cm-spec §4.2).
pub const LATE_ACCEPT_SHARE: f64 = 0.06;
/// The share of scenarios with one targeted message fault drawn at random.
pub const MSG_FAULT_SHARE: f64 = 0.08;
/// The share of hosts with their own CM timers.
pub const HOST_CM_SHARE: f64 = 0.06;
/// The share of scenarios whose active side posts 33–60 WRs at once.
pub const DEEP_POST_SHARE: f64 = 0.012;

/// What [`draw`] adds to a scenario.
pub(super) struct Knobs {
    pub(super) host_cm: Vec<HostCm>,
    pub(super) msg_faults: Vec<MsgFault>,
}

/// Draws the knobs of a two-host scenario and adapts its scripts (`a` active, `p` passive,
/// whose step 1 answers the CONNECT_REQUEST). `unit` is the timer scale: one REQ/DREQ
/// timeout (`2·ms(packet life time) + ms(response timeout)`) with the World's timers.
pub(super) fn draw(
    rng: &mut Rng,
    unit: u64,
    fast_timers: bool,
    a: &mut [Step],
    p: &mut [Step],
) -> Knobs {
    let mut host_cm = vec![HostCm::default(); 2];
    let mut msg_faults = Vec::new();
    for cm in &mut host_cm {
        if rng.chance(HOST_CM_SHARE) {
            let resp = if fast_timers { 8..=12 } else { 17..=21 };
            *cm = HostCm {
                max_cm_retries: rng.chance(0.6).then(|| rng.range_u64(0..=6) as u8),
                cm_response_timeout: rng.chance(0.6).then(|| rng.range_u64(resp) as u8),
                packet_life_time: None,
            };
        }
    }
    let accepts = matches!(p.get(1), Some(s) if s.action == Action::Accept);
    if accepts && rng.chance(LATE_ACCEPT_SHARE) {
        let late = unit * rng.range_u64(1..=8) / 2;
        p[1].when = Trigger::OnEventAfter(E::ConnectRequest, late);
        if rng.chance(0.5) {
            // Few REQ retries: with the MRAs lost, the active side gives up first.
            host_cm[0].max_cm_retries = Some(rng.range_u64(1..=3) as u8);
        }
        if rng.chance(0.5) {
            let which = if rng.chance(0.6) {
                Occurrence::Every
            } else {
                Occurrence::Nth(1)
            };
            msg_faults.push(MsgFault::drop(1, MRA, which));
        }
    }
    if rng.chance(MSG_FAULT_SHARE) {
        let from = rng.below(2) as usize;
        let attr = if from == 0 {
            pick(
                rng,
                &[(3, REQ), (2, RTU), (3, DREQ), (2, DREP), (2, MsgFault::RC)],
            )
        } else {
            pick(
                rng,
                &[(3, REP), (1, MRA), (3, DREQ), (3, DREP), (2, MsgFault::RC)],
            )
        };
        let which = pick(
            rng,
            &[
                (6, Occurrence::Nth(1)),
                (2, Occurrence::Nth(2)),
                (2, Occurrence::Every),
            ],
        );
        msg_faults.push(if rng.chance(0.6) {
            MsgFault::drop(from, attr, which)
        } else {
            MsgFault::delay(from, attr, which, rng.range_u64(1..=8) * unit / 4)
        });
    }
    if rng.chance(DEEP_POST_SHARE) {
        let n = rng.range_u64(33..=60) as u32;
        let op = pick(rng, &[(2, Op::Write), (1, Op::Read), (1, Op::Send)]);
        if let Some(s) = a
            .iter_mut()
            .find(|s| matches!(s.action, Action::Post { .. }))
        {
            s.action = Action::Post { op, n };
        }
        if op == Op::Send {
            if let Some(s) = p
                .iter_mut()
                .find(|s| matches!(s.action, Action::PostRecv { .. }))
            {
                s.action = Action::PostRecv { n };
            }
        }
    }
    if host_cm.iter().all(|c| *c == HostCm::default()) {
        host_cm.clear();
    }
    Knobs {
        host_cm,
        msg_faults,
    }
}
