//! The `rnic ping` command line as a user meets it (issue 15): signals (SIGINT/SIGTERM stop a
//! session cleanly, the peer gets its DREQ, the partial report is printed, exit 128 + signal),
//! `--duration`, live output (`--progress`, `--per-iteration`), errors that name the cause
//! and the address, options of the other role refused, host names. Every test runs the built
//! `rnic` binary as separate processes on loopback UDP; waits are for lines the processes
//! print, bounded by deadlines, never for time alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions
#![allow(clippy::disallowed_methods)] // drives real processes: reader threads and wall-clock deadlines

mod ping_report;

use ping_report::{events, listening_addr, report};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const RNIC: &str = env!("CARGO_BIN_EXE_rnic");

/// A running `rnic` process whose stdout and stderr lines arrive on channels.
struct Proc {
    child: Child,
    out: Receiver<String>,
    err: Receiver<String>,
}

fn lines(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn spawn(args: &[&str]) -> Proc {
    let mut child = Command::new(RNIC)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = lines(child.stdout.take().unwrap());
    let err = lines(child.stderr.take().unwrap());
    Proc { child, out, err }
}

impl Proc {
    /// The next line of `which` that satisfies `want`, within `within`.
    fn line_where(
        which: &Receiver<String>,
        within: Duration,
        want: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match which.recv_timeout(left) {
                Ok(l) if want(&l) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// Waits for the exit (at most `within`): exit code, the rest of stdout, the rest of
    /// stderr.
    fn finish(mut self, within: Duration) -> (i32, String, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the process did not exit within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(10)); // polling the exit, not a wait for behaviour
        };
        let rest = |rx: &Receiver<String>| {
            let mut s = String::new();
            while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
                s.push_str(&l);
                s.push('\n');
            }
            s
        };
        (
            status.code().unwrap_or(-1),
            rest(&self.out),
            rest(&self.err),
        )
    }
}

/// `rnic ping --listen 127.0.0.1:0 --json ARGS`, after its `{"listening":…}` line.
fn server(args: &[&str]) -> (Proc, SocketAddr) {
    let mut all = vec!["ping", "--listen", "127.0.0.1:0", "--json"];
    all.extend_from_slice(args);
    let p = spawn(&all);
    let line = Proc::line_where(&p.out, Duration::from_secs(30), |_| true)
        .expect("the server printed nothing");
    let addr = listening_addr(&line).unwrap_or_else(|| panic!("not a listening line: {line}"));
    (p, addr)
}

fn client(addr: SocketAddr, args: &[&str]) -> Proc {
    let a = addr.to_string();
    let mut all = vec!["ping", "--connect", &a];
    all.extend_from_slice(args);
    spawn(&all)
}

fn status_of(r: &Value, event: &str) -> Option<i64> {
    events(r)
        .into_iter()
        .find(|(n, _)| n == event)
        .map(|(_, s)| s)
}

#[test]
fn sigint_to_a_client_ends_its_run_cleanly_and_the_server_passes() {
    let (s, addr) = server(&["--once"]);
    let c = client(addr, &["--count", "100000000", "--progress", "--json"]);
    // The first progress line: the data phase runs.
    Proc::line_where(&c.err, Duration::from_secs(30), |l| {
        l.contains(" iterations")
    })
    .expect("no progress line");
    c.signal("INT");
    let (code, out, err) = c.finish(Duration::from_secs(30));
    assert_eq!(code, 130, "stdout: {out}\nstderr: {err}");
    let r = report(&out);
    assert_eq!(r["verdict"], "INTERRUPTED");
    assert_eq!(r["interrupted"], "SIGINT");
    let ran = r["iterations"].as_u64().unwrap();
    assert!(ran > 0 && ran < 100_000_000, "{ran}");
    assert_eq!(status_of(&r, "DISCONNECTED"), Some(0));
    // Every check held: the run ended after the iteration in progress.
    assert!(
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == true),
        "{r}"
    );
    // The server got the FIN with the count, then the DREQ: a clean run of `ran` iterations.
    let (scode, sout, _) = s.finish(Duration::from_secs(30));
    let sr = report(&sout);
    assert_eq!(scode, 0, "{sout}");
    assert_eq!(sr["verdict"], "PASS");
    assert_eq!(sr["iterations"].as_u64(), Some(ran));
    assert_eq!(status_of(&sr, "DISCONNECTED"), Some(0));
}

#[test]
fn sigterm_to_a_server_in_session_disconnects_its_client_at_once() {
    let (s, addr) = server(&["--progress"]);
    let c = client(addr, &["--count", "100000000", "--json"]);
    Proc::line_where(&s.err, Duration::from_secs(30), |l| {
        l.contains(" iterations")
    })
    .expect("no progress line from the server");
    let t = Instant::now();
    s.signal("TERM");
    let (code, cout, cerr) = c.finish(Duration::from_secs(30));
    let cr = report(&cout);
    // The kernel's behaviour for a dying process: its ids are destroyed, a DREQ goes out, the
    // peer sees DISCONNECTED with status 0 at once (not RETRY_EXC_ERR and -110 after the
    // retries).
    assert_eq!(status_of(&cr, "DISCONNECTED"), Some(0), "{cout}\n{cerr}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(code, 1);
    assert!(cr["stopped"]
        .as_str()
        .unwrap()
        .contains("peer disconnected"));
    let (scode, sout, _) = s.finish(Duration::from_secs(30));
    assert_eq!(scode, 143, "{sout}");
    let mut lines = sout.lines();
    let sr: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(sr["verdict"], "INTERRUPTED");
    assert_eq!(sr["interrupted"], "SIGTERM");
    let last: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(last["interrupted"], "SIGTERM");
    assert_eq!(last["served"], 1);
}

#[test]
fn sigint_to_an_idle_server_says_what_it_served() {
    let (s, _) = server(&[]);
    s.signal("INT");
    let (code, out, _) = s.finish(Duration::from_secs(30));
    assert_eq!(code, 130);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["interrupted"], "SIGINT");
    assert_eq!(v["served"], 0);
}

#[test]
fn duration_runs_for_its_time_and_the_fin_tells_the_server_the_count() {
    for op in ["all", "write"] {
        let (s, addr) = server(&["--once"]);
        let (code, out, err) =
            client(addr, &["-D", "0.5", "--op", op, "--json"]).finish(Duration::from_secs(60));
        assert_eq!(code, 0, "{out}\n{err}");
        let r = report(&out);
        assert_eq!(r["duration_s"], 0.5);
        let ran = r["iterations"].as_u64().unwrap();
        assert!(ran > 0);
        let secs = r["throughput"]["seconds"].as_f64().unwrap();
        assert!(secs >= 0.5, "the run lasted {secs} s");
        let (scode, sout, _) = s.finish(Duration::from_secs(30));
        assert_eq!(scode, 0, "{sout}");
        let sr = report(&sout);
        assert_eq!(sr["iterations"].as_u64(), Some(ran), "{op}");
        assert_eq!(sr["verdict"], "PASS");
    }
}

/// A server interrupted while it serves a `--duration` client (whose count is open-ended)
/// reports the iterations that ran, not the count that stands for "until the time is up".
#[test]
fn sigint_to_a_server_of_a_duration_run_reports_the_iterations_that_ran() {
    let s = spawn(&["ping", "--listen", "127.0.0.1:0", "--once", "--progress"]);
    let line = Proc::line_where(&s.out, Duration::from_secs(30), |_| true).unwrap();
    let addr = listening_addr(&line).unwrap_or_else(|| panic!("not a listening line: {line}"));
    let c = client(addr, &["-D", "600"]);
    Proc::line_where(&s.err, Duration::from_secs(30), |l| {
        l.contains(" iterations")
    })
    .expect("no progress line from the server");
    s.signal("INT");
    let (code, out, err) = s.finish(Duration::from_secs(30));
    assert_eq!(code, 130, "stdout: {out}\nstderr: {err}");
    assert!(!out.contains(&u32::MAX.to_string()), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains(" iterations of a --duration run done")),
        "{out}"
    );
    c.finish(Duration::from_secs(30));
}

#[test]
fn progress_and_per_iteration_lines_go_to_stderr_only_when_asked() {
    let (s, addr) = server(&["--once"]);
    let (code, out, err) = client(addr, &["-C", "5", "--per-iteration", "--op", "send"])
        .finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{out}");
    let pings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rnic-ping-"))
        .collect();
    assert_eq!(pings.len(), 5, "{err}");
    assert!(pings[4].starts_with("rnic-ping-4: SEND 4096 B, reply verified, rtt "));
    let (_, sout, _) = s.finish(Duration::from_secs(30));
    assert_eq!(report(&sout)["verdict"], "PASS");

    // Not a terminal, no --progress: stderr stays empty.
    let (s, addr) = server(&["--once"]);
    let (code, out, err) = client(addr, &["-D", "1.2"]).finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{out}");
    assert_eq!(err, "");
    s.finish(Duration::from_secs(30));

    let (s, addr) = server(&["--once"]);
    let (code, _, err) = client(addr, &["-D", "2.3", "--progress"]).finish(Duration::from_secs(60));
    assert_eq!(code, 0);
    let progress: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rnic ping client: ") && l.contains("retransmits"))
        .collect();
    assert_eq!(progress.len(), 2, "{err}");
    s.finish(Duration::from_secs(30));
}

#[test]
fn no_answer_names_the_address_and_the_requests_sent() {
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (code, out, err) = client(addr, &["--timeout", "0.5"]).finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains(&format!("no answer from {addr}: 1 REQ sent")),
        "{err}"
    );
    // One check, not six failures that hide the cause.
    assert_eq!(out.matches("FAILED").count(), 1, "{out}");
}

#[test]
fn a_client_queued_behind_another_is_told_the_server_is_busy() {
    let (s, addr) = server(&[]);
    let first = client(addr, &["-D", "1.5", "--op", "send", "--progress"]);
    Proc::line_where(&first.err, Duration::from_secs(30), |l| {
        l.contains(" iterations")
    })
    .expect("the first client does not run");
    let (code, out, err) = client(addr, &["-C", "3"]).finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{out}");
    assert!(
        err.contains("the server is busy: 1 client(s) before us"),
        "{err}"
    );
    assert_eq!(first.finish(Duration::from_secs(30)).0, 0);
    s.signal("INT");
    s.finish(Duration::from_secs(30));
}

#[test]
fn a_second_client_on_the_same_ip_is_told_why_nobody_answers() {
    let s = spawn(&["ping", "--listen", "127.29.3.1:0", "--json"]);
    let line = Proc::line_where(&s.out, Duration::from_secs(30), |_| true).unwrap();
    let addr = listening_addr(&line).unwrap();
    let first = client(addr, &["-I", "127.29.3.2", "-D", "3", "--progress"]);
    Proc::line_where(&first.err, Duration::from_secs(30), |l| {
        l.contains(" iterations")
    })
    .expect("the first client does not run");
    // The server takes 127.29.3.2's datagrams from the first client's socket only: the
    // second's REQs are dropped as a foreign socket's, and the second says so.
    let (code, out, err) = client(addr, &["-I", "127.29.3.2", "-C", "2", "--timeout", "1"])
        .finish(Duration::from_secs(60));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains("another UDP socket of this machine is bound to our IP 127.29.3.2"),
        "{err}"
    );
    assert!(!err.contains("running?"), "{err}");
    assert_eq!(first.finish(Duration::from_secs(30)).0, 0);
    s.signal("INT");
    s.finish(Duration::from_secs(30));
}

#[test]
fn options_that_do_not_apply_are_refused_with_exit_2() {
    let cases: [&[&str]; 6] = [
        &["ping", "--listen", "127.0.0.1:0", "--count", "3"],
        &["ping", "--listen", "127.0.0.1:0", "--depth", "8"],
        &["ping", "--connect", "127.0.0.1:7471", "--once"],
        &[
            "ping",
            "--connect",
            "127.0.0.1:7471",
            "--count",
            "3",
            "--kill-peer-after",
            "50",
        ],
        &[
            "ping",
            "--connect",
            "127.0.0.1:7471",
            "--op",
            "send",
            "--depth",
            "4",
        ],
        &["ping", "--connect", "127.0.0.1:7471", "-C", "3", "-D", "1"],
    ];
    for args in cases {
        let out = Command::new(RNIC).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let out = Command::new(RNIC)
        .args(["demo", "--timeout", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A group address is not a server: one line that says so.
    for (to, what) in [
        ("224.0.0.1:7471", "is a multicast address"),
        ("255.255.255.255:7471", "is the broadcast address"),
        ("[ff02::1]:7471", "is a multicast address"),
    ] {
        let out = Command::new(RNIC)
            .args(["ping", "--connect", to])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {err}");
        assert!(err.contains(what), "{to}: {err}");
    }
}

#[test]
fn host_names_and_short_flags_work() {
    let p = spawn(&["ping", "-l", "localhost:0", "--once", "--json"]);
    let line = Proc::line_where(&p.out, Duration::from_secs(30), |_| true).unwrap();
    let addr = listening_addr(&line).unwrap();
    assert!(addr.ip().is_loopback());
    let target = format!("localhost:{}", addr.port());
    let (code, out, _) = spawn(&["ping", "-c", &target, "-C", "2", "-S", "512", "--json"])
        .finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{out}");
    let r = report(&out);
    assert_eq!(r["count"], 2);
    assert_eq!(r["size"], 512);
    assert_eq!(p.finish(Duration::from_secs(30)).0, 0);
}

#[test]
fn a_rejected_client_names_the_rej_reason_and_the_servers_words() {
    use cm_core::api::CmEventType;
    use cm_core::wire::RdmaPortSpace;
    use rnic_cli::ping::{Client, Node, Params, SideOptions, WireOptions};
    // A server of its own that rejects every request with a reason in words.
    let wire = WireOptions::default();
    let node = Node::<rnic_sim::nic::SimNic>::new(
        "rejecting-server",
        "127.0.0.1:0".parse().unwrap(),
        &wire,
        None,
        None,
    )
    .unwrap();
    let (addr, ch) = (node.local_addr(), node.channel());
    node.handle()
        .with(|ep, _| {
            let (cm, _) = ep.inner_mut().host_mut().split();
            let id = cm.create_id(ch, RdmaPortSpace::Tcp)?;
            cm.bind_addr(id, addr)?;
            cm.listen(id, 16)
        })
        .unwrap();
    let side = SideOptions {
        timeout: Duration::from_secs(20),
        ..SideOptions::default()
    };
    let report = std::thread::scope(|scope| {
        let c = scope.spawn(|| {
            let mut c = Client::<rnic_sim::nic::SimNic>::bind(addr, &side, &wire).unwrap();
            let params = Params {
                op: rnic_cli::ping::PingOp::Send,
                count: 1,
                size: 64,
                disconnect_by: rnic_cli::ping::DisconnectBy::Client,
                duration: None,
                group: None,
            };
            let r = c.run(addr, params).unwrap();
            c.shutdown().unwrap();
            r
        });
        let req = node.next_event(Duration::from_secs(20)).unwrap();
        assert_eq!(req.event, CmEventType::ConnectRequest);
        node.handle()
            .with(|ep, now| {
                let (cm, dev) = ep.inner_mut().host_mut().split();
                cm.reject(dev, now, req.id, b"maintenance until noon")
            })
            .unwrap();
        c.join().unwrap()
    });
    let why = report.stopped.unwrap();
    assert_eq!(
        why,
        format!(
            "rejected by {addr}: REJ reason 28 (CONSUMER_DEFINED): the peer says \"maintenance until noon\""
        )
    );
    assert_eq!(report.verdict, "FAIL");
}

#[test]
fn qps_runs_several_connections_at_once_served_as_one_group() {
    let (s, addr) = server(&["--once"]);
    let (code, out, err) = client(addr, &["-q", "3", "-C", "50", "--op", "send", "--json"])
        .finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{out}\n{err}");
    // A group of its own: no "busy" note for the client's own connections.
    assert_eq!(err, "");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["qps"], 3);
    assert_eq!(v["verdict"], "PASS");
    assert_eq!(v["iterations"], 150);
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 3);
    for r in reports {
        assert_eq!(r["verdict"], "PASS");
        assert_eq!(r["iterations"], 50);
        assert_eq!(status_of(r, "DISCONNECTED"), Some(0));
    }
    // One client socket, three connections (three QPs).
    assert!(reports.iter().all(|r| r["local"] == reports[0]["local"]));
    // `--once` serves one client: its whole group.
    let (scode, sout, _) = s.finish(Duration::from_secs(30));
    assert_eq!(scode, 0, "{sout}");
    let served: Vec<Value> = sout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(served.len(), 3, "{sout}");
    assert!(served
        .iter()
        .all(|r| r["verdict"] == "PASS" && r["iterations"] == 50));
}

#[test]
fn a_queued_client_does_not_hold_a_server_whose_client_died() {
    // Its RNR-retried SENDs are no progress for the dead client's session.
    let (s, addr) = server(&["--timeout", "1"]);
    let mut dead = client(addr, &["-C", "100000000", "--op", "send", "--progress"]);
    Proc::line_where(&dead.err, Duration::from_secs(30), |l| {
        l.contains(" iterations")
    })
    .expect("the first client does not run");
    let queued = client(addr, &["-C", "3", "--json"]);
    Proc::line_where(&queued.err, Duration::from_secs(30), |l| l.contains("busy"))
        .expect("the second client is not queued");
    dead.child.kill().unwrap();
    let _ = dead.child.wait();
    let (code, out, err) = queued.finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(report(&out)["verdict"], "PASS");
    s.signal("INT");
    s.finish(Duration::from_secs(30));
}

#[test]
fn sigterm_to_a_server_disconnects_the_clients_waiting_for_their_turn() {
    let (s, addr) = server(&[]);
    let running = client(addr, &["-D", "30", "--op", "send", "--progress", "--json"]);
    Proc::line_where(&running.err, Duration::from_secs(30), |l| {
        l.contains(" iterations")
    })
    .expect("the first client does not run");
    let queued = client(addr, &["-C", "3", "--json"]);
    Proc::line_where(&queued.err, Duration::from_secs(30), |l| l.contains("busy"))
        .expect("the second client is not queued");
    let t = Instant::now();
    s.signal("TERM");
    let (code, out, err) = queued.finish(Duration::from_secs(60));
    // As a dying server process's ids end: a DREQ, DISCONNECTED status 0 at once.
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(status_of(&report(&out), "DISCONNECTED"), Some(0), "{out}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(s.finish(Duration::from_secs(30)).0, 143);
    let (_, rout, _) = running.finish(Duration::from_secs(60));
    assert_eq!(status_of(&report(&rout), "DISCONNECTED"), Some(0));
}

#[test]
fn sighup_stops_a_client_as_sigterm_does_and_qp_lines_are_labelled() {
    // A closed terminal (an ssh session gone) stops the run cleanly too: exit 129.
    let (s, addr) = server(&["--once"]);
    let c = client(
        addr,
        &["-C", "100000000", "-q", "2", "--per-iteration", "--json"],
    );
    Proc::line_where(&c.err, Duration::from_secs(30), |l| {
        l.starts_with("qp 1: rnic-ping-")
    })
    .expect("no per-iteration line of QP 1");
    c.signal("HUP");
    let (code, out, err) = c.finish(Duration::from_secs(30));
    assert_eq!(code, 129, "{out}\n{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["verdict"], "INTERRUPTED");
    for r in v["reports"].as_array().unwrap() {
        assert_eq!(r["interrupted"], "SIGHUP");
        assert_eq!(status_of(r, "DISCONNECTED"), Some(0));
    }
    assert_eq!(s.finish(Duration::from_secs(30)).0, 0);
}
