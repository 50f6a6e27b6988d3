//! Scenario values: the seed swarm's space, shrinkable.

use super::*;

// ---------------------------------------------------------------------------------------------
// Scenario values: the seed swarm's space, shrinkable
// ---------------------------------------------------------------------------------------------

pub(super) fn event_type_strategy() -> impl Strategy<Value = E> {
    prop::sample::select(vec![
        E::ConnectRequest,
        E::Established,
        E::Disconnected,
        E::TimewaitExit,
        E::Rejected,
    ])
}

pub(super) fn trigger_strategy() -> impl Strategy<Value = Trigger> {
    prop_oneof![
        4 => Just(Trigger::Now),
        2 => (0..=300u64).prop_map(|us| Trigger::At(us * US)),
        4 => event_type_strategy().prop_map(Trigger::OnEvent),
        1 => (1..=4u32).prop_map(Trigger::AfterCompletions),
    ]
}

pub(super) fn action_strategy(h: usize) -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => Just(Action::Listen),
        2 => Just(Action::Connect { to: 1 - h }),
        3 => Just(Action::Accept),
        1 => Just(Action::Reject),
        2 => (0..=4u32).prop_map(|n| Action::PostRecv { n }),
        3 => (op_strategy(), 0..=3u32).prop_map(|(op, n)| Action::Post { op, n }),
        4 => Just(Action::Disconnect),
        1 => Just(Action::DisconnectTwice),
        1 => Just(Action::DestroyInsteadOfDisconnect),
        1 => prop::option::of((1..=100u64).prop_map(|us| us * US))
            .prop_map(|restart_after_ns| Action::Crash { restart_after_ns }),
        1 => Just(Action::RemoveDevice),
        1 => Just(Action::AddressChange),
    ]
}

/// Host `h`'s event mode and up to 7 random steps (they shrink away).
pub(super) fn script_strategy(h: usize) -> impl Strategy<Value = (EventMode, Vec<Step>)> {
    let step =
        (trigger_strategy(), action_strategy(h)).prop_map(|(when, action)| Step { when, action });
    (mode_strategy(), prop::collection::vec(step, 0..8))
}

pub(super) fn faults_strategy() -> impl Strategy<Value = Faults> {
    let partition =
        (0..=40u64, 1..=40u64, any::<bool>()).prop_map(|(s, len, one_way)| PartitionSpec {
            start_ns: s * 3 * MS,
            heal_ns: (s + len) * 3 * MS,
            one_way,
        });
    (
        0.0..0.3f64,
        0.0..0.5f64,
        0.0..0.05f64,
        0..=40u64,
        prop::collection::vec(partition, 0..=2),
        20..=40u64,
    )
        .prop_map(
            |(loss, duplicate, corrupt, jitter_us, partitions, heal)| Faults {
                loss,
                duplicate,
                corrupt,
                jitter_ns: jitter_us * US,
                partitions,
                heal_at_ns: heal * 12 * MS,
            },
        )
}

/// Two scripted hosts, a faulty network, fast timers: the shape of [`Scenario::generate`] as a
/// shrinkable strategy. Host 0 connects to host 1, host 1 listens and accepts (or, 1 in 10,
/// rejects) the request; the random steps after that and the fault rates shrink (to fewer
/// steps, towards 0).
pub(super) fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    let step = |when, action| Step { when, action };
    (
        any::<u64>(),
        script_strategy(0),
        script_strategy(1),
        prop::bool::weighted(0.1),
        faults_strategy(),
        1..=6u8,
    )
        .prop_map(
            move |(seed, (ev0, tail0), (ev1, tail1), reject, faults, rnr_retry)| {
                let mut active = vec![step(Trigger::Now, Action::Connect { to: 1 })];
                active.extend(tail0);
                let answer = if reject {
                    Action::Reject
                } else {
                    Action::Accept
                };
                let mut passive = vec![
                    step(Trigger::Now, Action::Listen),
                    step(Trigger::OnEvent(E::ConnectRequest), answer),
                ];
                passive.extend(tail1);
                Scenario {
                    seed,
                    hosts: vec![
                        Script {
                            events: ev0,
                            steps: active,
                        },
                        Script {
                            events: ev1,
                            steps: passive,
                        },
                    ],
                    faults,
                    fast_timers: true,
                    rnr_retry,
                    hostile: None,
                    host_cm: Vec::new(),
                    msg_faults: Vec::new(),
                    host_app: Vec::new(),
                    cq_entries: 1024,
                }
            },
        )
}

proptest! {
    #![proptest_config(config(256))]

    /// Generated scenarios pass the oracle and end quiescent.
    #[test]
    fn generated_scenarios_pass_the_oracle(sc in scenario_strategy()) {
        let w = scenario::run(&sc, false).unwrap();
        let h = w.history();
        let v = rnic_testbed::oracle::check(h);
        prop_assert!(
            v.is_empty() && h.quiescent,
            "{}\nquiescent {}\n{}",
            sc.describe(),
            h.quiescent,
            v.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
    }
}
