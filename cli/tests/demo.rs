//! The README's main job reflects real objects: its figures follow its options.

use rnic_cli::demo::{run, DemoOptions};
use verbs_core::Mtu;

fn opts(size: u32, recvs: u32, mtu: Mtu) -> DemoOptions {
    DemoOptions {
        size,
        recvs,
        mtu,
        count: 1,
        fast_timers: true,
        ..DemoOptions::default()
    }
}

#[test]
fn demo_passes_with_default_options() {
    let r = run(&DemoOptions::default()).unwrap();
    assert!(r.passed(), "{}", r.transcript);
    assert!(r.transcript.contains("verdict: PASS"));
    // The transcript ends with the disconnect timeline of both sides.
    let timeline = r.transcript.split("disconnect timeline").nth(1).unwrap();
    for step in [
        "client  rdma_disconnect",
        "server  DISCONNECTED (status 0), QP still RTS",
        "server  rdma_disconnect",
        "client  DISCONNECTED (status 0)",
        "TIMEWAIT_EXIT",
    ] {
        assert!(
            timeline.contains(step),
            "{step:?} missing:\n{}",
            r.transcript
        );
    }
}

#[test]
fn demo_bytes_verified_follow_the_buffer_size() {
    for size in [1u32, 100, 4096, 10_000] {
        let r = run(&opts(size, 2, Mtu::Mtu1024)).unwrap();
        assert!(r.passed(), "{}", r.transcript);
        // One iteration: the server checks the WRITE and the SEND, the client the reply and
        // the READ, each `size` bytes, every byte compared.
        assert_eq!(r.bytes_verified, 4 * u64::from(size));
    }
}

#[test]
fn demo_flushes_exactly_the_outstanding_receives() {
    for recvs in [1u32, 7] {
        let r = run(&opts(512, recvs, Mtu::Mtu1024)).unwrap();
        assert!(r.passed(), "{}", r.transcript);
        for side in [&r.client, &r.server] {
            // Every receive still posted at the disconnect, each flushed once; nothing else.
            assert_eq!(side.completions.flushed_recvs, u64::from(recvs));
            assert_eq!(side.completions.recvs_posted_at_err, u64::from(recvs));
            assert_eq!(side.completions.unexpected, 0);
        }
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
    assert!(run(&opts(4096, 0, Mtu::Mtu1024)).is_err());
    assert!(run(&opts(4096, 5000, Mtu::Mtu1024)).is_err());
}

/// `-v` logs at debug on stderr (the UDP drivers report the buffers and offloads they got),
/// `RUST_LOG` overrides it, and without either the output carries no log lines.
#[test]
fn verbose_flag_and_rust_log_turn_on_the_log() {
    let rnic = env!("CARGO_BIN_EXE_rnic");
    let run = |args: &[&str], rust_log: Option<&str>| {
        let mut cmd = std::process::Command::new(rnic);
        cmd.args(args).env_remove("RUST_LOG");
        if let Some(l) = rust_log {
            cmd.env("RUST_LOG", l);
        }
        let out = cmd.output().expect("rnic runs");
        assert!(out.status.success(), "{args:?} failed");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let demo = ["demo", "--size", "64"];
    let quiet = run(&demo, None);
    assert!(!quiet.contains("UDP driver ready"), "{quiet}");
    let verbose = run(&["-v", "demo", "--size", "64"], None);
    assert!(verbose.matches("DEBUG").count() >= 2, "{verbose}");
    assert!(verbose.contains("UDP driver ready"), "{verbose}");
    let by_env = run(&demo, Some("rnic_sim=debug"));
    assert!(by_env.contains("UDP driver ready"), "{by_env}");
    let env_wins = run(&["-v", "demo", "--size", "64"], Some("error"));
    assert!(!env_wins.contains("UDP driver ready"), "{env_wins}");
}

/// The largest transfer in the smallest MTU (4096 packets a message) passes: `--timeout` is
/// a limit on time without progress, not on the whole run (issue 15).
#[test]
fn demo_with_the_largest_size_and_smallest_mtu_passes_within_its_timeout() {
    let r = run(&DemoOptions {
        size: 1 << 20,
        mtu: Mtu::Mtu256,
        count: 3,
        timeout: std::time::Duration::from_secs(5),
        ..DemoOptions::default()
    })
    .unwrap();
    assert!(r.passed(), "{}", r.transcript);
    assert_eq!(r.client.path_mtu, Some(256));
    assert!(r.bytes_verified >= 3 * 4 * (1 << 20));
}

/// `rnic demo --timeout` is taken, and refused when not a positive number of seconds.
#[test]
fn demo_takes_a_timeout() {
    let rnic = env!("CARGO_BIN_EXE_rnic");
    let code = |t: &str| {
        std::process::Command::new(rnic)
            .args(["demo", "--size", "64", "--timeout", t])
            .output()
            .expect("rnic runs")
            .status
            .code()
    };
    assert_eq!(code("30"), Some(0));
    assert_eq!(code("0"), Some(2));
    assert_eq!(code("nan"), Some(2));
}
