//! The README's main job reflects real objects: its figures follow its options.

use rnic_testbed::demo::{run, DemoOptions};
use verbs_core::{Mtu, WcStatus};

fn opts(size: u32, recvs: u32, mtu: Mtu) -> DemoOptions {
    DemoOptions { size, recvs, mtu }
}

#[test]
fn demo_passes_with_default_options() {
    let r = run(&DemoOptions::default()).unwrap();
    assert!(r.passed(), "{}", r.transcript);
    assert!(r.transcript.contains("verdict: PASS"));
}

#[test]
fn demo_bytes_verified_follow_the_buffer_size() {
    for size in [1u32, 100, 4096, 10_000] {
        let r = run(&opts(size, 2, Mtu::Mtu1024)).unwrap();
        assert!(r.passed(), "{}", r.transcript);
        // SEND + WRITE + READ, each `size` bytes, every byte compared.
        assert_eq!(r.bytes_verified, 3 * u64::from(size));
    }
}

#[test]
fn demo_flushes_exactly_the_outstanding_receives() {
    for recvs in [0u32, 1, 7] {
        let r = run(&opts(512, recvs, Mtu::Mtu1024)).unwrap();
        let flushed = r
            .completions
            .iter()
            .filter(|(dev, wc)| dev == "sim1" && wc.status == WcStatus::WrFlushErr)
            .count();
        // The outstanding receives plus the one posted after the QP entered ERR.
        assert_eq!(flushed, recvs as usize + 1, "{}", r.transcript);
        assert!(r.passed(), "{}", r.transcript);
    }
}

#[test]
fn demo_packet_count_follows_the_path_mtu() {
    // 8 KiB per operation: SEND and WRITE are segmented by the MTU, and so is the READ response.
    let small = run(&opts(8192, 1, Mtu::Mtu256)).unwrap();
    let large = run(&opts(8192, 1, Mtu::Mtu4096)).unwrap();
    assert!(small.passed() && large.passed());
    assert!(
        small.packets > large.packets * 4,
        "MTU 256: {} packets, MTU 4096: {} packets",
        small.packets,
        large.packets
    );
}

#[test]
fn demo_rejects_out_of_range_options() {
    assert!(run(&opts(0, 1, Mtu::Mtu1024)).is_err());
    assert!(run(&opts(4096, 5000, Mtu::Mtu1024)).is_err());
}
