//! The generator: [`Scenario::generate`] draws one scenario (scripts, fault rates, timers)
//! from a seed's workload stream.

use super::{
    Action, Faults, Hostile, PartitionSpec, Scenario, Script, Step, Trigger, HOSTILE_SHARE, MS, US,
};
use crate::world::{EventMode, Op};
use cm_core::api::CmEventType;
use rnic_sim::rng::Rng;

pub(super) fn pick<T: Copy>(rng: &mut Rng, choices: &[(u32, T)]) -> T {
    let total: u32 = choices.iter().map(|c| c.0).sum();
    let mut x = rng.below(u64::from(total)) as u32;
    for &(w, v) in choices {
        if x < w {
            return v;
        }
        x -= w;
    }
    choices[0].1
}

fn step(when: Trigger, action: Action) -> Step {
    Step { when, action }
}

impl Scenario {
    /// Draws one two-host scenario from `rng` (a [hostile](Hostile) third host with probability
    /// [`HOSTILE_SHARE`]), fault rates included, biased so that every
    /// "sometimes" situation of TESTING.md comes up (see [`Sometimes`](super::Sometimes)).
    pub fn generate(rng: &mut Rng) -> Scenario {
        use CmEventType as E;
        let seed = rng.next_u64();
        let fast_timers = rng.chance(0.85);
        let lossy = rng.chance(0.5);
        let loss = if lossy { rng.next_f64() * 0.3 } else { 0.0 };
        let duplicate = if rng.chance(0.4) {
            rng.next_f64() * 0.5
        } else {
            0.0
        };
        let corrupt = if rng.chance(0.1) {
            rng.next_f64() * 0.05
        } else {
            0.0
        };
        let jitter_ns = if rng.chance(0.4) {
            rng.range_u64(1..=40) * US
        } else {
            0
        };
        // Timer scale: DREQ timeout 12 ms (fast) or 4608 ms (default).
        let unit = if fast_timers { 12 * MS } else { 4608 * MS };
        let mut partitions = Vec::new();
        let cuts = pick(rng, &[(80, 0), (15, 1), (5, 2)]);
        for _ in 0..cuts {
            let start = rng.range_u64(0..=200) * US + rng.range_u64(0..=4) * unit / 2;
            partitions.push(PartitionSpec {
                start_ns: start,
                heal_ns: start + rng.range_u64(1..=40) * unit / 4,
                one_way: rng.chance(0.5),
            });
        }
        let heal_at_ns = unit * rng.range_u64(20..=40);
        // Finite RNR retries: a SEND without a receive ends in RNR_RETRY_EXC_ERR instead of
        // an RNR NAK loop until the heal (thousands of events, no new situation).
        let rnr_retry = rng.range_u64(1..=6) as u8;
        let events = |rng: &mut Rng| {
            let late = rng.range_u64(1..=100) * US;
            pick(
                rng,
                &[
                    (88, EventMode::AckAtOnce),
                    (6, EventMode::AckAfter(late)),
                    (3, EventMode::NeverAck),
                    (3, EventMode::NeverRead),
                ],
            )
        };
        let ops = |rng: &mut Rng| pick(rng, &[(3, Op::Send), (1, Op::Write), (1, Op::Read)]);
        let early = |rng: &mut Rng| Trigger::At(rng.range_u64(0..=60) * US);

        // Host 0: the active side.
        let mut a = Vec::new();
        a.push(step(Trigger::Now, Action::Connect { to: 1 }));
        a.push(step(
            Trigger::Now,
            Action::PostRecv {
                n: rng.below(4) as u32,
            },
        ));
        let stale = rng.chance(0.08);
        let (k, t_early, t_mid) = (
            rng.range_u64(1..=3) as u32,
            early(rng),
            Trigger::At(rng.range_u64(20..=300) * US),
        );
        let disconnect = pick(
            rng,
            &[
                (40, Trigger::OnEvent(E::Established)),
                (20, Trigger::AfterCompletions(k)),
                (12, t_early),
                (10, t_mid),
                (8, Trigger::OnEvent(E::Disconnected)),
                (10, Trigger::OnEvent(E::TimewaitExit)), // i.e. never, unless the peer starts
            ],
        );
        a.push(step(
            Trigger::OnEvent(E::Established),
            Action::Post {
                op: ops(rng),
                n: rng.below(4) as u32,
            },
        ));
        if stale {
            a.push(step(
                Trigger::OnEvent(E::Established),
                Action::Crash {
                    restart_after_ns: Some(rng.range_u64(1..=100) * US),
                },
            ));
            a.push(step(Trigger::Now, Action::Connect { to: 1 }));
            a.push(step(Trigger::Now, Action::PostRecv { n: 1 }));
        } else {
            let action = pick(
                rng,
                &[
                    (85, Action::Disconnect),
                    (8, Action::DisconnectTwice),
                    (7, Action::DestroyInsteadOfDisconnect),
                ],
            );
            a.push(step(disconnect, action));
            if rng.chance(0.2) {
                a.push(step(Trigger::Now, Action::PostRecv { n: 1 }));
            }
            if rng.chance(0.03) {
                a.push(step(
                    Trigger::At(rng.range_u64(0..=10) * unit),
                    Action::Crash {
                        restart_after_ns: None,
                    },
                ));
            }
        }

        // Host 1: the passive side.
        let mut p = Vec::new();
        p.push(step(Trigger::Now, Action::Listen));
        let reject = rng.chance(0.05);
        p.push(step(
            Trigger::OnEvent(E::ConnectRequest),
            if reject {
                Action::Reject
            } else {
                Action::Accept
            },
        ));
        p.push(step(
            Trigger::Now,
            Action::PostRecv {
                n: rng.below(5) as u32,
            },
        ));
        if rng.chance(0.05) {
            p.push(step(Trigger::Now, Action::Disconnect));
        }
        if rng.chance(0.3) {
            p.push(step(
                Trigger::OnEvent(E::Established),
                Action::Post {
                    op: ops(rng),
                    n: rng.range_u64(1..=3) as u32,
                },
            ));
        }
        let t_p = Trigger::At(rng.range_u64(20..=200) * US);
        let answer = pick(
            rng,
            &[
                (62, Some(Trigger::OnEvent(E::Disconnected))),
                (14, None),
                (14, Some(Trigger::OnEvent(E::Established))),
                (10, Some(t_p)),
            ],
        );
        if let Some(t) = answer {
            let action = pick(
                rng,
                &[
                    (90, Action::Disconnect),
                    (5, Action::DisconnectTwice),
                    (5, Action::DestroyInsteadOfDisconnect),
                ],
            );
            p.push(step(t, action));
            if rng.chance(0.5) {
                // Answer a crossing DREQ: disconnect again once DISCONNECTED.
                p.push(step(Trigger::OnEvent(E::Disconnected), Action::Disconnect));
            }
            if rng.chance(0.2) {
                p.push(step(Trigger::Now, Action::PostRecv { n: 1 }));
            }
        }
        if rng.chance(0.04) {
            // The server dies (and maybe comes back with amnesia, without a listener).
            let at = rng.range_u64(0..=8) * unit / 4 + rng.range_u64(0..=100) * US;
            let restart = rng.chance(0.5).then(|| rng.range_u64(1..=4) * unit);
            p.push(step(
                Trigger::At(at),
                Action::Crash {
                    restart_after_ns: restart,
                },
            ));
        }
        if stale {
            // The old connection gets a DREQ from the stale-connection handling: answer it.
            p.push(step(Trigger::OnEvent(E::Disconnected), Action::Disconnect));
        }
        let a_events = events(rng);
        let p_events = events(rng);
        // Drawn last, so that a scenario without one is the one this seed drew before.
        let hostile = rng
            .chance(HOSTILE_SHARE)
            .then(|| Hostile::generate(rng, unit));
        let knobs = super::knobs::draw(rng, unit, fast_timers, &mut a, &mut p);
        let mut msg_faults = knobs.msg_faults;
        let ev = super::event_knobs::draw(rng, unit, &mut a, &mut p, &mut msg_faults);
        Scenario {
            seed,
            hosts: vec![
                Script {
                    events: a_events,
                    steps: a,
                },
                Script {
                    events: p_events,
                    steps: p,
                },
            ],
            faults: Faults {
                loss,
                duplicate,
                corrupt,
                jitter_ns,
                partitions,
                heal_at_ns,
            },
            fast_timers,
            rnr_retry,
            hostile,
            host_cm: knobs.host_cm,
            msg_faults,
            host_app: ev.host_app,
            cq_entries: ev.cq_entries,
        }
    }
}
