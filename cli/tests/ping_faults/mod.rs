//! `--drop-rate P --seed S` that replays, and `--pcap` written as it goes: two-process tests
//! of the fault layer (`cli/src/ping/wire.rs`) and the capture (`cli/src/ping/capture.rs`).

mod pcap;

use super::{report, run_client, spawn_server, tshark_present, RNIC};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A directory of this test's own under the cargo test tmpdir.
fn test_dir(name: &str) -> PathBuf {
    let d =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `--drop-rate P --seed S` replays: the same ping twice, with the same seed and the same
/// socket addresses on both sides (the server's `--listen`, the client's `--bind`), has the
/// same identifiers, hence the same datagrams, and every datagram sent as many times in both
/// runs reaches the peer as many times: its fate depends on the seed and the datagram, not on
/// the order of the wire. (Whether a timer adds a copy in one run only is the wall clock's
/// business: such datagrams are left out of the comparison, and must be few.)
#[test]
fn seeded_drops_replay_datagram_by_datagram_with_fixed_addresses() {
    let dir = test_dir("replay");
    let listen = format!("127.0.0.1:{}", pcap::free_udp_port("127.0.0.1"));
    let pid = std::process::id();
    let client_ip = format!("127.77.{}.{}", (pid >> 8) as u8, pid as u8);
    let bind = format!("{client_ip}:{}", pcap::free_udp_port(&client_ip));
    let (server, client): (SocketAddr, SocketAddr) =
        (listen.parse().unwrap(), bind.parse().unwrap());
    let common = [
        "--fast-timers",
        "--json",
        "--seed",
        "7",
        "--drop-rate",
        "0.01",
    ];
    let run = |n: u32| {
        let (sp, cp) = (
            dir.join(format!("server{n}.pcap")),
            dir.join(format!("client{n}.pcap")),
        );
        let s = spawn_server(
            &[],
            &listen,
            &[&common[..], &["--pcap", sp.to_str().unwrap()]].concat(),
        );
        let client_args = [
            "--bind",
            &bind,
            "--op",
            "send",
            "--size",
            "256",
            "--count",
            "400",
            "--pcap",
            cp.to_str().unwrap(),
        ];
        let (cc, cout) = run_client(&[], s.addr, &[&common[..], &client_args].concat());
        let (sc, sout) = s.finish();
        assert_eq!((cc, sc), (0, 0), "client:\n{cout}\nserver:\n{sout}");
        let (c, s) = (report(&cout), report(&sout));
        assert_eq!(c["local"], bind, "{c:#}");
        let (cap_c, cap_s) = (pcap::read(&cp), pcap::read(&sp));
        (
            [c["wire"]["faults"].clone(), s["wire"]["faults"].clone()],
            [
                pcap::fates(&cap_c, &cap_s, client),
                pcap::fates(&cap_s, &cap_c, server),
            ],
        )
    };
    let (faults1, fates1) = run(1);
    let (faults2, fates2) = run(2);
    println!("drops: run 1 {faults1:?}, run 2 {faults2:?}");
    for (way, (a, b)) in ["client → server", "server → client"]
        .iter()
        .zip(fates1.iter().zip(&fates2))
    {
        let (mut compared, mut lost) = (0, 0);
        for (frame, (sent, got)) in a {
            if b.get(frame).map(|f| f.0) == Some(*sent) {
                compared += 1;
                lost += sent - got;
                assert_eq!(
                    b[frame].1, *got,
                    "{way}: a datagram sent {sent} times in both runs reached the peer {got} \
                     times in run 1, {} in run 2",
                    b[frame].1
                );
            }
        }
        // The same datagrams: the identifiers replayed. Some lost: the comparison meant
        // something.
        assert!(
            compared * 100 >= a.len() * 95 && compared * 100 >= b.len() * 95,
            "{way}: {compared} datagrams in common of {} and {}",
            a.len(),
            b.len()
        );
        assert!(lost > 0, "{way}: nothing lost in {compared} datagrams");
    }
}

/// `--pcap` writes as it goes: a server killed with SIGKILL in the middle of a long run leaves
/// a capture tshark reads, with the CM handshake and the RoCE traffic up to the kill.
#[test]
#[allow(clippy::disallowed_methods)] // a deadline for real processes: wall-clock time
fn pcap_of_a_server_killed_mid_run_decodes_in_tshark() {
    if !tshark_present() {
        return;
    }
    let pcap = test_dir("pcap-kill").join("server.pcap");
    let mut s = spawn_server(&[], "127.0.0.1:0", &["--pcap", pcap.to_str().unwrap()]);
    let port = s.addr.port();
    let mut client = Command::new(RNIC)
        .args(["ping", "--connect", &s.addr.to_string()])
        .args(["--op", "send", "--size", "64", "--count", "100000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Polled with a deadline: the file grows while the server runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let grown = 64 << 10;
    loop {
        let len = std::fs::metadata(&pcap).map_or(0, |m| m.len());
        if len > grown {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the capture is {len} bytes after 60 s"
        );
        assert!(
            client.try_wait().unwrap().is_none(),
            "the client ended before the capture grew"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    s.child.kill().unwrap(); // SIGKILL
    s.child.wait().unwrap();
    let _ = client.kill();
    client.wait().unwrap();
    let cap = pcap::read(&pcap);
    assert!(cap.whole_len as u64 > grown, "{} bytes", cap.whole_len);
    // A kill that lands inside a write can cut that one record short (the kernel stops a
    // write between pages): the records before it are whole, and tshark reads them.
    let mut file = pcap.clone();
    if cap.partial_tail > 0 {
        println!("the last record was cut short ({} bytes)", cap.partial_tail);
        file = pcap.with_extension("whole.pcap");
        let bytes = std::fs::read(&pcap).unwrap();
        std::fs::write(&file, &bytes[..cap.whole_len]).unwrap();
    }
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-d", &format!("udp.port=={port},infiniband")])
        .args(["-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "infiniband.mad.attributeid",
            "-e",
            "infiniband.bth.opcode",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "tshark failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once(',').unwrap_or((l, "")))
        .collect();
    assert_eq!(rows.len(), cap.frames.len(), "one row per record");
    // The CM handshake: REQ, REP, RTU (a MAD's BTH is a UD SEND ONLY, opcode 100).
    let mads: Vec<&str> = rows
        .iter()
        .filter(|r| !r.0.is_empty())
        .map(|r| r.0)
        .collect();
    assert_eq!(mads[..3], ["0x0010", "0x0013", "0x0014"], "{mads:?}");
    // Then RC traffic: SEND ONLY (4) and ACKs (17), many of them.
    let count = |op: &str| rows.iter().filter(|r| r.0.is_empty() && r.1 == op).count();
    assert!(count("4") > 100 && count("17") > 100, "{text}");
}

/// `--bind` is the client's: on the server's IP (the simulated RNIC's GID is its IP) or with
/// `--listen` it is refused with exit 2, before anything is sent.
#[test]
fn bind_is_refused_on_the_servers_ip_and_on_a_server() {
    let server: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let (code, out) = run_client(&[], server, &["--bind", "127.0.0.1"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("--bind 127.0.0.1:0: that is the server's IP"),
        "{out}"
    );
    let (code, out) = run_client(&[], server, &["--bind", "[::1]:5000"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not the IP family"), "{out}");
    let out = Command::new(RNIC)
        .args(["ping", "--listen", "127.0.0.1:0", "--bind", "127.0.0.2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
