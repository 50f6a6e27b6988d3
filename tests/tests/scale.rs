//! Scale: one World with 10 000 concurrently connected pairs (the World's default queue
//! depths, receives posted on every QP) fits in 1 GiB of resident memory, and disconnecting
//! all of them ends with every invariant of the oracle holding (S1–S7, L1–L3).
//!
//! The only test in its binary, so the process's peak resident set (`VmHWM` of
//! /proc/self/status) is this World's. `RNIC_SCALE_PAIRS` changes the number of pairs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use cm_core::api::CmEventType;
use rnic_testbed::world::{Conn, World, WorldConfig};

/// Peak resident set of this process in KiB, or `None` off Linux.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Receives posted on each QP before the disconnect (each must be flushed exactly once).
const RECVS: usize = 2;

#[test]
fn ten_thousand_connected_pairs_fit_in_1_gib_and_all_disconnect_with_every_invariant() {
    let pairs: usize = std::env::var("RNIC_SCALE_PAIRS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut w = World::new(WorldConfig::two_hosts(0x5ca1e)).unwrap();
    let conns: Vec<Conn> = (0..pairs).map(|_| w.establish(0, 1).unwrap()).collect();
    for c in &conns {
        w.post_recvs(c.active, RECVS);
        w.post_recvs(c.passive, RECVS);
    }
    assert_eq!(w.qps_of(0).len(), pairs);
    assert_eq!(w.qps_of(1).len(), pairs);
    let connected_kib = peak_rss_kib();

    // Host 0 disconnects every connection; host 1 answers each DISCONNECTED with its own
    // rdma_disconnect (DREP), as librdmacm applications do.
    for c in &conns {
        w.disconnect(c.active).unwrap();
    }
    for c in &conns {
        w.wait_event(1, Some(c.passive.id), CmEventType::Disconnected)
            .unwrap();
        w.disconnect(c.passive).unwrap();
    }
    assert!(w.run_to_quiescence(), "quiescent after every disconnect");
    let h = w.history();
    let count = |host: u8, kind: CmEventType| {
        h.entries
            .iter()
            .filter(|e| {
                e.host == host
                    && matches!(e.rec, rnic_testbed::world::Record::Event { event, status: 0, .. } if event == kind)
            })
            .count()
    };
    for host in [0, 1] {
        assert_eq!(count(host, CmEventType::Disconnected), pairs, "host {host}");
        assert_eq!(count(host, CmEventType::TimewaitExit), pairs, "host {host}");
    }
    w.check().unwrap();
    let peak = peak_rss_kib();
    println!(
        "{pairs} pairs: peak RSS {} MiB connected, {} MiB at the end",
        connected_kib.map_or(0, |k| k / 1024),
        peak.map_or(0, |k| k / 1024)
    );
    if let Some(kib) = peak {
        assert!(kib < 1024 * 1024, "peak RSS {kib} KiB exceeds 1 GiB");
    }
}
