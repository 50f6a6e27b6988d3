//! The deterministic fabric and its driver: each test is named after the rule it checks.

// Test helpers outside #[test] fns may unwrap too (clippy.toml allows it only inside tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use bytes::Bytes;
use rnic_sim::fabric::{
    Crash, Delay, DropReason, Endpoint, FabricEventKind, FaultPlan, Jitter, Partition, PathFaults,
    RunOutcome, SimFabric, Simulation,
};
use verbs_core::SimTime;

fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, host))
}

fn addr(host: u8) -> SocketAddr {
    SocketAddr::new(ip(host), 4791)
}

fn ms(v: u64) -> SimTime {
    SimTime::from_millis(v)
}

/// A scripted endpoint: sends scheduled datagrams at their times, records what it receives,
/// and optionally echoes every datagram back to its sender.
struct Node {
    addr: SocketAddr,
    schedule: VecDeque<(SimTime, SocketAddr, Bytes)>,
    outbox: VecDeque<(SocketAddr, Bytes)>,
    echo: bool,
    received: Vec<(SimTime, SocketAddr, Bytes)>,
    timeouts: Vec<SimTime>,
}

impl Node {
    fn new(addr: SocketAddr) -> Self {
        Node {
            addr,
            schedule: VecDeque::new(),
            outbox: VecDeque::new(),
            echo: false,
            received: Vec::new(),
            timeouts: Vec::new(),
        }
    }

    fn echo(addr: SocketAddr) -> Self {
        Node {
            echo: true,
            ..Node::new(addr)
        }
    }

    /// Sends `count` datagrams `"<tag> <i>"` to `dst`, the i-th at `start + i * every`.
    fn sending(
        mut self,
        dst: SocketAddr,
        tag: &str,
        count: u64,
        start: SimTime,
        every: u64,
    ) -> Self {
        for i in 0..count {
            let at = start.plus_nanos(i * every);
            self.schedule
                .push_back((at, dst, Bytes::from(format!("{tag} {i}"))));
        }
        self
    }

    fn payloads(&self) -> Vec<String> {
        self.received
            .iter()
            .map(|(_, _, b)| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
}

impl Endpoint for Node {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        if self.echo {
            self.outbox.push_back((src, bytes.clone()));
        }
        self.received.push((now, src, bytes));
    }

    fn poll_transmit(&mut self, _now: SimTime) -> Option<(SocketAddr, Bytes)> {
        self.outbox.pop_front()
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.schedule.front().map(|&(at, _, _)| at)
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.timeouts.push(now);
        while let Some(&(at, dst, ref bytes)) = self.schedule.front() {
            if at > now {
                break;
            }
            self.outbox.push_back((dst, bytes.clone()));
            self.schedule.pop_front();
        }
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// A lossy, duplicating, corrupting, reordering path in both directions.
fn nasty_faults() -> PathFaults {
    PathFaults {
        loss: 0.1,
        duplicate: 0.1,
        corrupt: 0.05,
        delay: Delay {
            base_ns: 100_000,
            jitter: Jitter::Uniform { max_ns: 2_000_000 },
        },
    }
}

/// Host 1 pings host 2 (an echo) 20 times, 1 ms apart, over `plan`; runs to quiescence.
fn ping_scenario(seed: u64, plan: FaultPlan) -> Simulation<Node> {
    let mut sim = Simulation::new(SimFabric::with_seed(seed, plan));
    sim.add_endpoint(Node::new(addr(1)).sending(addr(2), "ping", 20, ms(1), 1_000_000))
        .unwrap();
    sim.add_endpoint(Node::echo(addr(2))).unwrap();
    assert_eq!(
        sim.run_until_idle(SimTime::from_millis(10_000)),
        RunOutcome::Idle
    );
    sim
}

#[test]
fn same_seed_gives_identical_trace_and_hash() {
    let a = ping_scenario(7, FaultPlan::new(nasty_faults()));
    let b = ping_scenario(7, FaultPlan::new(nasty_faults()));
    assert!(!a.fabric.trace().is_empty());
    assert_eq!(a.fabric.trace(), b.fabric.trace());
    assert_eq!(a.fabric.trace_hash(), b.fabric.trace_hash());
    assert_eq!(
        a.endpoint(0).unwrap().received,
        b.endpoint(0).unwrap().received
    );
}

#[test]
fn different_seeds_give_different_traces() {
    let a = ping_scenario(7, FaultPlan::new(nasty_faults()));
    let b = ping_scenario(8, FaultPlan::new(nasty_faults()));
    assert_ne!(a.fabric.trace(), b.fabric.trace());
    assert_ne!(a.fabric.trace_hash(), b.fabric.trace_hash());
}

/// Golden value: the hash of `ping_scenario(42, nasty)`. It guards against accidental changes
/// of the PRNG, the fault-draw order, the event queue order or the trace encoding, any of which
/// would silently change every recorded seed's replay. If you change one of them on purpose,
/// update the value and say so in the commit message. The run-twice equality is checked too,
/// so a failure tells "nondeterministic" apart from "algorithm changed".
#[test]
fn trace_hash_is_stable_across_runs_and_versions() {
    const GOLDEN: u64 = 0xf014_1d70_7ad7_c520;
    let a = ping_scenario(42, FaultPlan::new(nasty_faults()));
    let b = ping_scenario(42, FaultPlan::new(nasty_faults()));
    assert_eq!(
        a.fabric.trace_hash(),
        b.fabric.trace_hash(),
        "nondeterministic"
    );
    assert_eq!(
        a.fabric.trace_hash(),
        GOLDEN,
        "algorithm changed: {:#018x}",
        a.fabric.trace_hash()
    );
}

#[test]
fn perfect_path_delivers_everything_in_order_after_the_base_latency() {
    let sim = ping_scenario(1, FaultPlan::default());
    let pinger = sim.endpoint(0).unwrap();
    let expected: Vec<String> = (0..20).map(|i| format!("ping {i}")).collect();
    assert_eq!(pinger.payloads(), expected);
    // Sent at 1 ms, echoed after one hop, back after another: 2 × 10 µs.
    assert_eq!(pinger.received[0].0, ms(1).plus_nanos(20_000));
}

#[test]
fn loss_probability_one_drops_every_datagram() {
    let plan = FaultPlan::new(PathFaults {
        loss: 1.0,
        ..PathFaults::perfect()
    });
    let sim = ping_scenario(3, plan);
    assert!(sim.endpoint(1).unwrap().received.is_empty());
    let stats = sim.fabric.stats();
    assert_eq!((stats.sent, stats.lost, stats.delivered), (20, 20, 0));
    assert!(sim.fabric.trace().iter().all(|e| matches!(
        e.kind,
        FabricEventKind::Sent { .. } | FabricEventKind::Dropped(DropReason::Lost)
    )));
}

#[test]
fn duplication_probability_one_delivers_every_datagram_twice() {
    let mut fabric = SimFabric::with_seed(
        5,
        FaultPlan::new(PathFaults {
            duplicate: 1.0,
            ..PathFaults::perfect()
        }),
    );
    fabric.bind(addr(2)).unwrap();
    for i in 0..10u8 {
        fabric.send(ms(u64::from(i)), addr(1), addr(2), Bytes::from(vec![i]));
    }
    let mut got = Vec::new();
    while let Some(d) = fabric.pop_delivery(SimTime::MAX) {
        got.push(d.bytes[0]);
    }
    let expected: Vec<u8> = (0..10).flat_map(|i| [i, i]).collect();
    assert_eq!(got, expected);
    let dups = fabric
        .trace()
        .iter()
        .filter(|e| matches!(e.kind, FabricEventKind::Duplicated { .. }))
        .count();
    assert_eq!(dups, 10);
}

#[test]
fn corruption_flips_exactly_one_bit() {
    let mut fabric = SimFabric::with_seed(
        6,
        FaultPlan::new(PathFaults {
            corrupt: 1.0,
            ..PathFaults::perfect()
        }),
    );
    fabric.bind(addr(2)).unwrap();
    let original = Bytes::from_static(&[0u8; 64]);
    for i in 0..50 {
        fabric.send(ms(i), addr(1), addr(2), original.clone());
    }
    let mut n = 0;
    while let Some(d) = fabric.pop_delivery(SimTime::MAX) {
        let flipped: u32 = d.bytes.iter().map(|b| b.count_ones()).sum();
        assert_eq!(flipped, 1);
        n += 1;
    }
    assert_eq!((n, fabric.stats().corrupted), (50, 50));
    // An empty datagram has no bit to flip and arrives intact.
    fabric.send(ms(100), addr(1), addr(2), Bytes::new());
    assert!(fabric.pop_delivery(SimTime::MAX).unwrap().bytes.is_empty());
}

#[test]
fn jitter_reorders_datagrams_and_no_jitter_keeps_order() {
    let jittery = FaultPlan::new(PathFaults {
        delay: Delay {
            base_ns: 10_000,
            jitter: Jitter::Exponential { mean_ns: 3_000_000 },
        },
        ..PathFaults::perfect()
    });
    let inversions = |sim: &Simulation<Node>| {
        let seq: Vec<u64> = sim
            .endpoint(1)
            .unwrap()
            .payloads()
            .iter()
            .map(|p| p["ping ".len()..].parse().unwrap())
            .collect();
        seq.windows(2).filter(|w| w[0] > w[1]).count()
    };
    let sim = ping_scenario(9, jittery);
    assert_eq!(sim.endpoint(1).unwrap().received.len(), 20);
    assert!(inversions(&sim) > 0, "no reordering with 3 ms mean jitter");
    assert_eq!(inversions(&ping_scenario(9, FaultPlan::default())), 0);
}

#[test]
fn one_way_partition_drops_only_one_direction_until_heal() {
    // Host 1 → host 2 is cut from 0 to 10 ms; host 2 → host 1 is not.
    let plan = FaultPlan::default().with_partition(Partition::one_way(
        ip(1),
        ip(2),
        SimTime::ZERO,
        Some(ms(10)),
    ));
    let mut sim = Simulation::new(SimFabric::with_seed(1, plan));
    let one = Node::new(addr(1)).sending(addr(2), "a", 20, ms(1), 1_000_000);
    let two = Node::new(addr(2)).sending(addr(1), "b", 20, ms(1), 1_000_000);
    sim.add_endpoint(one).unwrap();
    sim.add_endpoint(two).unwrap();
    assert_eq!(sim.run_until_idle(ms(1_000)), RunOutcome::Idle);

    // "a i" sent at 1+i ms: dropped while i + 1 < 10, delivered from i = 9 (sent at 10 ms).
    let at_two = sim.endpoint(1).unwrap().payloads();
    let expected: Vec<String> = (9..20).map(|i| format!("a {i}")).collect();
    assert_eq!(at_two, expected);
    assert!(sim
        .endpoint(1)
        .unwrap()
        .received
        .iter()
        .all(|r| r.0 >= ms(10)));
    // The reverse direction lost nothing.
    assert_eq!(sim.endpoint(0).unwrap().received.len(), 20);
    assert_eq!(sim.fabric.stats().partitioned, 9);
}

#[test]
fn partition_drops_datagrams_in_flight_when_it_starts() {
    let plan = FaultPlan::new(PathFaults {
        delay: Delay::fixed(5_000_000),
        ..PathFaults::perfect()
    })
    .with_partition(Partition::symmetric(ip(1), ip(2), ms(3), Some(ms(4))));
    let mut fabric = SimFabric::with_seed(1, plan);
    fabric.bind(addr(2)).unwrap();
    // Sent at 0 (arrives at 5: open), at 1 (arrives at 6: open), at 3.5 (cut when sent).
    fabric.send(ms(0), addr(1), addr(2), Bytes::from_static(b"x"));
    fabric.send(ms(1), addr(1), addr(2), Bytes::from_static(b"y"));
    fabric.send(
        SimTime::from_micros(3_500),
        addr(1),
        addr(2),
        Bytes::from_static(b"z"),
    );
    assert_eq!(fabric.stats().partitioned, 1);
    // Now cut the cable at 5.5 ms too: "y" (arriving at 6) is lost in flight.
    fabric.plan_mut().partitions.push(Partition::symmetric(
        ip(2),
        ip(1),
        SimTime::from_micros(5_500),
        None,
    ));
    assert_eq!(fabric.pop_delivery(ms(10)).unwrap().bytes, "x");
    assert!(fabric.pop_delivery(ms(10)).is_none());
    assert_eq!(fabric.stats().partitioned, 2);
}

#[test]
fn crash_stops_a_host_sending_and_receiving_until_restart() {
    // Host 2 is down from 5 ms to 12 ms. Host 1 sends "a i" at 1+i ms; host 2 sends "b i".
    let plan = FaultPlan::default().with_crash(Crash {
        host: ip(2),
        at: ms(5),
        restart: Some(ms(12)),
    });
    let mut sim = Simulation::new(SimFabric::with_seed(1, plan));
    sim.add_endpoint(Node::new(addr(1)).sending(addr(2), "a", 15, ms(1), 1_000_000))
        .unwrap();
    sim.add_endpoint(Node::new(addr(2)).sending(addr(1), "b", 15, ms(1), 1_000_000))
        .unwrap();
    assert_eq!(sim.run_until_idle(ms(1_000)), RunOutcome::Idle);

    // Host 2 received nothing while down (arrivals at 5.01 .. 11.01 ms are dropped).
    let two = sim.endpoint(1).unwrap();
    assert!(two.received.iter().all(|r| r.0 < ms(5) || r.0 >= ms(12)));
    let expected: Vec<String> = [0, 1, 2, 3, 11, 12, 13, 14]
        .iter()
        .map(|i| format!("a {i}"))
        .collect();
    assert_eq!(two.payloads(), expected);
    // Its timers did not fire while down: the deadlines of 5..=11 ms fire once, at restart, and
    // its datagrams "b 4".."b 10" go out then.
    assert!(two.timeouts.iter().all(|&t| t < ms(5) || t >= ms(12)));
    assert!(two.timeouts.contains(&ms(12)));
    let at_one = &sim.endpoint(0).unwrap().received;
    assert_eq!(at_one.len(), 15);
    assert!(at_one.iter().all(|r| r.0 < ms(5) || r.0 >= ms(12)));
    assert_eq!(sim.fabric.stats().crashed, 7);
}

#[test]
fn host_that_never_restarts_leaves_the_simulation_idle() {
    let plan = FaultPlan::default().with_crash(Crash {
        host: ip(1),
        at: ms(3),
        restart: None,
    });
    let sim = ping_scenario(1, plan);
    // Pings 0 and 1 (sent at 1 and 2 ms) came back; nothing is sent after the crash.
    assert_eq!(sim.endpoint(0).unwrap().received.len(), 2);
    assert_eq!(sim.endpoint(1).unwrap().received.len(), 2);
}

#[test]
fn clock_jumps_to_the_next_event_so_a_60_s_timer_costs_one_step() {
    let mut sim: Simulation<Node> = Simulation::new(SimFabric::with_seed(1, FaultPlan::default()));
    sim.add_endpoint(Node::new(addr(1)).sending(
        addr(2),
        "late",
        1,
        SimTime::from_millis(60_000),
        0,
    ))
    .unwrap();
    sim.add_endpoint(Node::new(addr(2))).unwrap();
    assert_eq!(
        sim.run_until_idle(SimTime::from_millis(120_000)),
        RunOutcome::Idle
    );
    // One timeout at 60 s, one delivery at 60 s + 10 µs.
    assert_eq!(sim.steps(), 2);
    assert_eq!(sim.endpoint(0).unwrap().timeouts, [ms(60_000)]);
    assert_eq!(
        sim.endpoint(1).unwrap().received[0].0,
        ms(60_000).plus_nanos(10_000)
    );
    assert_eq!(sim.now(), ms(60_000).plus_nanos(10_000));
}

#[test]
fn run_until_stops_at_the_deadline_and_idle_time_is_free() {
    let mut sim: Simulation<Node> = Simulation::new(SimFabric::with_seed(1, FaultPlan::default()));
    sim.add_endpoint(Node::new(addr(1)).sending(addr(2), "x", 3, ms(10), 10_000_000))
        .unwrap();
    sim.add_endpoint(Node::new(addr(2))).unwrap();
    assert_eq!(sim.run_until(ms(15)), RunOutcome::Deadline);
    assert_eq!(sim.now(), ms(15));
    assert_eq!(sim.endpoint(1).unwrap().received.len(), 1);
    assert_eq!(sim.steps(), 2);
    assert_eq!(sim.run_until(ms(1_000)), RunOutcome::Idle);
    assert_eq!(sim.now(), ms(1_000));
    assert_eq!(sim.endpoint(1).unwrap().received.len(), 3);
}

#[test]
fn simultaneous_events_break_ties_deliveries_first_then_endpoint_index() {
    // Both hosts fire a timer at 1 ms; host 3 receives both datagrams at the same instant:
    // the lower packet id (host 1's, flushed first) is delivered first.
    let mut sim: Simulation<Node> = Simulation::new(SimFabric::with_seed(1, FaultPlan::default()));
    sim.add_endpoint(Node::new(addr(2)).sending(addr(3), "from 2", 1, ms(1), 0))
        .unwrap();
    sim.add_endpoint(Node::new(addr(1)).sending(addr(3), "from 1", 1, ms(1), 0))
        .unwrap();
    sim.add_endpoint(Node::new(addr(3))).unwrap();
    sim.run_until_idle(ms(10));
    assert_eq!(
        sim.endpoint(2).unwrap().payloads(),
        ["from 2 0", "from 1 0"]
    );
    let r = &sim.endpoint(2).unwrap().received;
    assert_eq!(r[0].0, r[1].0);
}

#[test]
fn datagram_to_an_unbound_address_is_dropped_as_no_listener() {
    let mut sim: Simulation<Node> = Simulation::new(SimFabric::with_seed(1, FaultPlan::default()));
    sim.add_endpoint(Node::new(addr(1)).sending(addr(9), "void", 1, ms(1), 0))
        .unwrap();
    assert_eq!(sim.run_until_idle(ms(10)), RunOutcome::Idle);
    assert_eq!(sim.fabric.stats().no_listener, 1);
    assert!(sim.add_endpoint(Node::new(addr(1))).is_err());
}

#[test]
fn traffic_on_one_path_does_not_change_the_faults_of_another() {
    // Same seed; the second run adds traffic between hosts 3 and 4. The events of the 1 ↔ 2
    // path must not change, since each path draws from its own fork.
    let run = |extra: bool| {
        let mut sim = Simulation::new(SimFabric::with_seed(11, FaultPlan::new(nasty_faults())));
        sim.add_endpoint(Node::new(addr(1)).sending(addr(2), "ping", 20, ms(1), 1_000_000))
            .unwrap();
        sim.add_endpoint(Node::echo(addr(2))).unwrap();
        if extra {
            sim.add_endpoint(Node::new(addr(3)).sending(addr(4), "noise", 50, ms(1), 300_000))
                .unwrap();
            sim.add_endpoint(Node::echo(addr(4))).unwrap();
        }
        sim.run_until_idle(ms(10_000));
        let path: Vec<_> = sim
            .fabric
            .trace()
            .iter()
            .filter(|e| e.src.ip() != ip(3) && e.src.ip() != ip(4))
            .map(|e| {
                // Packet ids are global (send order over all paths): compare without them.
                let kind = match e.kind {
                    FabricEventKind::Duplicated { .. } => FabricEventKind::Duplicated { copy: 0 },
                    k => k,
                };
                (e.at, e.src, e.dst, kind)
            })
            .collect();
        (path, sim.endpoint(0).unwrap().received.clone())
    };
    let (quiet_path, quiet_rx) = run(false);
    let (busy_path, busy_rx) = run(true);
    assert_eq!(quiet_rx, busy_rx);
    assert_eq!(quiet_path, busy_path);
}

/// An endpoint whose deadline never moves: a livelock at one instant.
struct Stuck(SocketAddr);

impl Endpoint for Stuck {
    fn handle_datagram(&mut self, _: SimTime, _: SocketAddr, _: Bytes) {}
    fn poll_transmit(&mut self, _: SimTime) -> Option<(SocketAddr, Bytes)> {
        None
    }
    fn poll_timeout(&self) -> Option<SimTime> {
        Some(SimTime::ZERO)
    }
    fn handle_timeout(&mut self, _: SimTime) {}
    fn addr(&self) -> SocketAddr {
        self.0
    }
}

#[test]
fn step_limit_reports_a_livelocked_endpoint_instead_of_hanging() {
    let mut sim: Simulation = Simulation::new(SimFabric::with_seed(1, FaultPlan::default()));
    sim.add_endpoint(Box::new(Stuck(addr(1)))).unwrap();
    sim.set_step_limit(1_000);
    assert_eq!(sim.run_until_idle(ms(1)), RunOutcome::StepLimit);
    assert_eq!(sim.steps(), 1_000);
    assert_eq!(sim.now(), SimTime::ZERO);
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn faults() -> impl Strategy<Value = PathFaults> {
        (
            0.0..0.5f64,
            0.0..0.5f64,
            0.0..0.5f64,
            0u64..3_000_000,
            any::<bool>(),
        )
            .prop_map(
                |(loss, duplicate, corrupt, jitter, exponential)| PathFaults {
                    loss,
                    duplicate,
                    corrupt,
                    delay: Delay {
                        base_ns: 50_000,
                        jitter: if exponential {
                            Jitter::Exponential { mean_ns: jitter }
                        } else {
                            Jitter::Uniform { max_ns: jitter }
                        },
                    },
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_seed_and_plan_replay_identically(seed in any::<u64>(), f in faults()) {
            let a = ping_scenario(seed, FaultPlan::new(f));
            let b = ping_scenario(seed, FaultPlan::new(f));
            prop_assert_eq!(a.fabric.trace_hash(), b.fabric.trace_hash());
            prop_assert_eq!(a.fabric.trace(), b.fabric.trace());
        }

        #[test]
        fn every_datagram_ends_exactly_once_delivered_or_dropped(seed in any::<u64>(), f in faults()) {
            let sim = ping_scenario(seed, FaultPlan::new(f));
            prop_assert_eq!(sim.fabric.in_flight(), 0);
            let mut endings: BTreeMap<u64, u32> = BTreeMap::new();
            for e in sim.fabric.trace() {
                match e.kind {
                    FabricEventKind::Sent { .. } => {
                        endings.entry(e.packet).or_default();
                    }
                    FabricEventKind::Duplicated { copy } => {
                        endings.entry(copy).or_default();
                    }
                    FabricEventKind::Delivered { .. } | FabricEventKind::Dropped(_) => {
                        *endings.entry(e.packet).or_default() += 1;
                    }
                    FabricEventKind::Corrupted { .. } => {}
                }
            }
            prop_assert!(endings.values().all(|&n| n == 1), "{:?}", endings);
            let s = sim.fabric.stats();
            prop_assert_eq!(
                s.sent + s.duplicated,
                s.delivered + s.lost + s.partitioned + s.crashed + s.no_listener
            );
        }
    }
}
