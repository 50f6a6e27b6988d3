//! The World, the scenario swarm and the oracle, end to end: a user-style test, replay equals
//! run, determinism, a batch of generated seeds passing the oracle, and every "sometimes"
//! situation reached.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use rnic_testbed::scenario::{replay_seed, run_seed, Sometimes};
use rnic_testbed::world::{Op, World, WorldConfig};

#[test]
fn user_style_test_connect_post_disconnect_passes_the_oracle(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut w = World::new(WorldConfig::two_hosts(7))?;
    let c = w.establish(0, 1)?;
    w.post_recvs(c.passive, 4);
    w.post(c.active, Op::Send, 2);
    w.run_for(1_000_000);
    w.disconnect(c.active)?;
    w.wait_event(
        1,
        Some(c.passive.id),
        cm_core::api::CmEventType::Disconnected,
    )?;
    w.disconnect(c.passive)?;
    w.check()?;
    Ok(())
}

/// The World seeds each host's RNIC from its own seed, as real-time drivers seed theirs from
/// the OS: QPNs are not the sequential defaults (0x11, 0x12, …), the same seed gives the same
/// QPNs, and another seed others.
#[test]
fn world_rnics_have_seeded_qpns_that_repeat_with_the_world_seed(
) -> Result<(), Box<dyn std::error::Error>> {
    let qpns = |seed| -> Result<(u32, u32), Box<dyn std::error::Error>> {
        let mut w = World::new(WorldConfig::two_hosts(seed))?;
        let c = w.establish(0, 1)?;
        Ok((c.active.qp.qp_num, c.passive.qp.qp_num))
    };
    let a = qpns(7)?;
    assert_eq!(a, qpns(7)?);
    assert_ne!(a, qpns(8)?);
    assert!(a.0 != 0x11 && a.1 != 0x11, "{a:x?}");
    let cfg = WorldConfig::two_hosts(7);
    assert_ne!(cfg.device_seed(0), cfg.device_seed(1));
    assert_ne!(cfg.device_seed(0), 0);
    Ok(())
}

#[test]
fn replay_seed_reports_exactly_what_run_seed_reports() {
    for seed in 0..50 {
        let a = run_seed(seed);
        let b = replay_seed(seed);
        assert_eq!(a, b.report, "seed {seed}");
    }
}

#[test]
fn same_seed_same_hash_different_seeds_differ() {
    let hashes: Vec<u64> = (0..500).map(|s| run_seed(s).trace_hash).collect();
    let again: Vec<u64> = (0..500).map(|s| run_seed(s).trace_hash).collect();
    assert_eq!(hashes, again);
    let mut sorted = hashes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        hashes.len(),
        "two seeds gave the same trace hash"
    );
}

#[test]
fn two_thousand_generated_seeds_pass_the_oracle() {
    let mut failed = Vec::new();
    for seed in 0..2000 {
        let r = run_seed(seed);
        if !r.passed() {
            failed.push(r);
        }
    }
    for r in failed.iter().take(5) {
        eprintln!(
            "seed {} quiescent {} {}\n{}",
            r.seed,
            r.quiescent,
            r.faults,
            r.violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(failed.is_empty(), "{} of 2000 seeds failed", failed.len());
}

#[test]
fn every_sometimes_situation_is_reached_in_the_first_2000_seeds() {
    let mut counts = [0u32; Sometimes::COUNT];
    for seed in 0..2000 {
        for (c, f) in counts.iter_mut().zip(run_seed(seed).sometimes.flags()) {
            *c += u32::from(f);
        }
    }
    for (name, c) in Sometimes::NAMES.iter().zip(counts) {
        assert!(c > 0, "{name} never reached: {counts:?}");
    }
}

#[test]
fn replay_renders_trace_mermaid_and_a_pcap() {
    let r = replay_seed(3);
    let t = r.trace();
    assert!(t.contains("sent REQ"), "{t}");
    let m = r.mermaid();
    assert!(m.starts_with("sequenceDiagram"));
    assert!(m.contains("H0->>H1: REQ"), "{m}");
    let p = r.pcap();
    let mut reader = pcap_file::pcap::PcapReader::new(&p[..]).unwrap();
    let mut n = 0;
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.unwrap();
        // Ethernet (14) + IPv4 (20) + UDP: destination port 4791 (RoCEv2).
        assert_eq!(u16::from_be_bytes([pkt.data[36], pkt.data[37]]), 4791);
        n += 1;
    }
    assert_eq!(n, r.captures.len());
    let cm_sent = r
        .history
        .entries
        .iter()
        .filter(|e| matches!(e.rec, rnic_testbed::world::Record::Wire { tx: true, .. }))
        .count() as u64;
    assert_eq!(
        n as u64,
        cm_sent + r.history.rc_packets.iter().sum::<u64>(),
        "every datagram sent is in the pcap"
    );
    assert!(n >= 3);
}

#[test]
fn the_readme_example_lazy_peer_passes_with_the_initiator_timing_out(
) -> Result<(), Box<dyn std::error::Error>> {
    use cm_core::api::CmEventType as E;
    use rnic_testbed::world::Record;
    let mut w = World::new(WorldConfig::two_hosts(42))?;
    let c = w.establish(0, 1)?;
    w.post_recvs(c.passive, 4);
    w.disconnect(c.active)?;
    w.run_to_quiescence();
    w.check()?;
    // The passive application never answered: the initiator's DREQ retries ran out (16 DREQs
    // on the wire, DISCONNECTED -110), the passive side got DISCONNECTED(0) at once.
    let h = w.history();
    let dreqs = h
        .of_host(0)
        .filter(|e| matches!(e.rec, Record::Wire { tx: true, msg, .. } if msg.name() == "DREQ"))
        .count();
    assert_eq!(dreqs, 16);
    let statuses = |host: usize| -> Vec<i32> {
        h.of_host(host)
            .filter_map(|e| match e.rec {
                Record::Event {
                    event: E::Disconnected,
                    status,
                    ..
                } => Some(status),
                _ => None,
            })
            .collect()
    };
    assert_eq!(statuses(0), [-110]);
    assert_eq!(statuses(1), [0]);
    Ok(())
}

#[test]
fn three_hosts_two_connections_to_one_server_with_data_and_simultaneous_disconnects_pass(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut w = World::new(WorldConfig {
        hosts: 3,
        ..WorldConfig::two_hosts(9).fast()
    })?;
    let c1 = w.establish(0, 1)?;
    let c2 = w.establish(2, 1)?;
    assert_eq!((c1.passive.peer, c2.passive.peer), (0, 2));
    for c in [c1, c2] {
        w.post_recvs(c.passive, 2);
        w.post(c.active, Op::Send, 1);
        w.post(c.active, Op::Write, 1);
        w.post(c.active, Op::Read, 1);
    }
    w.run_for(1_000_000);
    // Both ends of c1 at once (DREQs cross); c2's client only.
    w.disconnect(c1.active)?;
    w.disconnect(c1.passive)?;
    w.disconnect(c2.active)?;
    w.check()?;
    let ok = w
        .history()
        .entries
        .iter()
        .filter(|e| {
            matches!(
                e.rec,
                rnic_testbed::world::Record::Completion {
                    status: verbs_core::WcStatus::Success,
                    ..
                }
            )
        })
        .count();
    assert_eq!(
        ok,
        2 * (3 + 1),
        "SEND, WRITE, READ and one receive per connection"
    );
    Ok(())
}

/// An `End` kept across a crash and restart names the old life's id and QP: the World refuses
/// it (EINVAL) instead of touching whatever the new life put behind the same handles.
#[test]
fn an_end_from_before_a_restart_is_refused_and_the_new_life_is_untouched() {
    let cfg = WorldConfig {
        hosts: 3,
        ..WorldConfig::two_hosts(9).fast()
    };
    let mut w = World::new(cfg).unwrap();
    let old = w.establish(0, 1).unwrap();
    w.crash(0, Some(1_000_000)).unwrap();
    w.run_for(2_000_000);
    assert_eq!(w.epoch(0), 1);
    // (Host 1 still holds the old connection: a REQ to it from the reused QPN would be a
    // stale connection, REJ 10. Host 2 has never heard of it.)
    let new = w.establish(0, 2).unwrap();
    assert_eq!(
        new.active.id, old.active.id,
        "the new life reuses the handle"
    );
    for r in [
        w.disconnect(old.active),
        w.destroy(old.active),
        w.qp_to_err(old.active),
    ] {
        assert_eq!(r.unwrap_err().errno, verbs_core::Errno::EINVAL);
    }
    assert!(w
        .post(old.active, rnic_testbed::world::Op::Send, 1)
        .is_empty());
    assert_eq!(w.qp_state(new.active), Some(verbs_core::QpState::Rts));
    w.disconnect(new.active).unwrap();
    w.run_to_quiescence();
    w.check().unwrap();
}
