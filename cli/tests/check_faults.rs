//! Seeded faults on a real program's own RNIC (`rnic exec --fault`, `RNIC_FAULTS`) and
//! `rnic check`, with rping and ucmatose on both sides:
//!
//! * a bad fault spec is refused with exit 2 before the program starts (`--fault`,
//!   `RNIC_FAULTS`, `rnic check --server-fault`);
//! * the client's first two REQs lost: its CM sends the REQ again and rping connects; every
//!   REQ lost: `RDMA_CM_EVENT_UNREACHABLE` with `ETIMEDOUT` (-110), as Linux's CM reports a REQ
//!   that ran out of retries (`cm_req_handler` … `IB_CM_REQ_ERROR` → `cma_ib_handler`);
//! * a ucmatose client SIGKILLed on its DISCONNECTED (before it answers the server's DREQ):
//!   `rnic exec` dies of signal 9, and the server's DISCONNECTED comes with status 0 (the DREP
//!   `rnic exec` sends for the dead program); with `--on-death power-loss`, status -110 (the
//!   DREQ ran out of retries);
//! * `rnic check` over rping: the summary's counts and its exit status agree, a run whose
//!   client loses every REQ fails with the commands that rerun it, and the rping server's
//!   known finding fails a run unless `--allow` names its rule;
//! * a partition from the start, an RC loss window and an RC delay window: rping completes;
//!   a server whose RNIC goes silent: its own work ends in `IBV_WC_RETRY_EXC_ERR`;
//! * a probabilistic fault drawn from the seed fires at the same packet in two runs;
//! * `rnic check` interrupted by SIGINT: exit 130, the partial summary says so, and no program
//!   of the stopped run is left running; killed by SIGKILL: nothing of the run is left either;
//! * what makes every run fail is refused before the first (exit 2): a program not found, one
//!   address for both sides, an address whose port 4791 is taken; and `rnic exec` refuses
//!   `--check fail` (a program named `fail`) and a bad `RNIC_MTU`, and takes `;`-separated
//!   `--fault` lists as `RNIC_FAULTS` does.
//!
//! Addresses 127.0.N.1 / 127.0.N.2, N in 226 … 229; `rnic check` on 127.0.232.x,
//! 127.0.233.x and 127.0.235.x; 127.0.234.x for what is refused before a run.
//!
//!     cargo test -p rnic-cli --test check_faults -- --nocapture

// Real processes on the wall clock: the harness's deadlines and pipe readers.
#![allow(clippy::disallowed_methods)]

#[allow(unused_imports)] // the harness re-exports its parsers, which these tests do not need
mod common_programs;

use common_programs::{
    program_timeout, tools_available, Net, Program, Running, Slot, LISTEN_LOG, LISTEN_MARKER, POLL,
    RNIC,
};
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

fn wait_for(what: &str, r: &mut Running, cond: impl Fn(&Running) -> bool) {
    let deadline = Instant::now() + program_timeout();
    while !cond(r) {
        assert!(
            r.poll().is_none() || cond(r),
            "{what}: exited first\n{}\n{}",
            r.stdout_text(),
            r.stderr_text()
        );
        assert!(
            Instant::now() < deadline,
            "{what}: not within {:?}\n{}",
            program_timeout(),
            r.stderr_text()
        );
        std::thread::sleep(POLL);
    }
}

fn exit(r: &mut Running) -> ExitStatus {
    let deadline = Instant::now() + program_timeout();
    loop {
        if let Some(s) = r.poll() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "no exit within {:?}\n{}\n{}",
            program_timeout(),
            r.stdout_text(),
            r.stderr_text()
        );
        std::thread::sleep(POLL);
    }
}

/// Starts `p` as a server and waits for its `rdma_listen` (`log`: more `RUST_LOG` directives).
fn server(p: &mut Program, log: &str) -> Running {
    p.env
        .push(("RUST_LOG".into(), format!("{LISTEN_LOG}{log}")));
    p.env.push(("NO_COLOR".into(), "1".into()));
    let mut s = Running::spawn("server", p).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the server's rdma_listen", &mut s, |s| {
        s.stderr_text().contains(LISTEN_MARKER)
    });
    s
}

fn rping_pair(net: &Net, count: u32, client_args: &[&str]) -> (Program, Program) {
    let (ip, port) = (net.server_ip(), net.port_arg());
    let mut s = Program::new(&ip, &["rping", "-s", "-a", &ip, "-p", &port, "-v", "-d"]);
    s.exec_args = vec!["--fast-timers".into()];
    let count = count.to_string();
    let mut c = Program::new(
        &net.client_ip(),
        &["rping", "-c", "-a", &ip, "-p", &port, "-v", "-C", &count],
    );
    c.exec_args = ["--fast-timers"]
        .iter()
        .chain(client_args)
        .map(|s| s.to_string())
        .collect();
    (s, c)
}

fn fired(r: &Running) -> Vec<String> {
    r.stderr_text()
        .lines()
        .filter_map(|l| l.strip_prefix("rnic: fault fired: "))
        // "… at N ms": the time is not part of the point.
        .map(|l| l.rsplit_once(" at ").map_or(l, |(d, _)| d).to_string())
        .collect()
}

#[test]
fn fault_specs_are_refused_before_the_program_starts() {
    let dir = std::env::temp_dir().join(format!("rnic-check-faults-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let marker = dir.join("ran");
    let touch = ["touch", marker.to_str().unwrap_or("/nonexistent")];
    for (args, env) in [
        (vec!["--fault", "drop:REQ"], None),
        (vec!["--fault", "kill:on:NOTHING"], None),
        (vec!["--fault", "partition:1s:2"], None),
        (vec![], Some("kill:2s;drop:rc:1s")),
    ] {
        let mut cmd = Command::new(RNIC);
        cmd.args(["exec", "--addr", "127.0.226.1"])
            .args(&args)
            .arg("--")
            .args(touch);
        if let Some(v) = env {
            cmd.env("RNIC_FAULTS", v);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("{RNIC}: {e}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
        let first = err.lines().next().unwrap_or("");
        assert!(first.contains("fault \""), "{args:?} {env:?}: {err}");
        assert!(!marker.exists(), "the program ran despite {args:?} {env:?}");
    }
    for args in [
        &[
            "check",
            "--server-fault",
            "drop:NOPE:1",
            "--",
            "true",
            "--",
            "true",
        ][..],
        &[
            "check",
            "--faults",
            "cm-drop,meteor",
            "--",
            "true",
            "--",
            "true",
        ],
        &["check", "--", "true", "true"],
    ] {
        let out = Command::new(RNIC)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{RNIC}: {e}"));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lost_reqs_are_sent_again_and_all_lost_is_unreachable() {
    let name = "lost_reqs_are_sent_again_and_all_lost_is_unreachable";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let _slot = Slot::take();
    let net = Net::new(226);
    let (mut sp, cp) = rping_pair(&net, 3, &["--fault", "drop:REQ:1-2"]);
    let mut s = server(&mut sp, "");
    let mut c = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    let (cs, ss) = (exit(&mut c), exit(&mut s));
    let report = format!("client: {}\nserver: {}", c.stderr_text(), s.stderr_text());
    assert!(cs.success() && ss.success(), "{cs} {ss}\n{report}");
    assert_eq!(
        fired(&c),
        ["drop:REQ:1-2 (REQ #1 sent)", "drop:REQ:1-2 (REQ #2 sent)"],
        "{report}"
    );
    assert_eq!(
        c.stdout_text().matches("ping data: ").count(),
        3,
        "{report}"
    );

    let (mut sp, cp) = rping_pair(&net, 3, &["--fault", "drop:REQ:*"]);
    let mut s = server(&mut sp, "");
    let mut c = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    let cs = exit(&mut c);
    s.kill();
    let out = format!("{}{}", c.stdout_text(), c.stderr_text());
    assert!(!cs.success(), "{out}");
    assert!(
        out.contains("RDMA_CM_EVENT_UNREACHABLE, error -110"),
        "no UNREACHABLE with ETIMEDOUT:\n{out}"
    );
    assert!(fired(&c).len() > 2, "{out}");
}

/// The network's faults on rping, end to end: a partition from the start that the CM's REQ
/// retries outlast, an RC loss window and an RC delay window that the transport rides out
/// (rping connects and completes every ping); and a server whose RNIC goes silent after 10
/// completions (a host that lost power while the program runs): its own RDMA operations end
/// in `IBV_WC_RETRY_EXC_ERR` (12), as an RNIC reports work its peer never acknowledged — not
/// a flush, and no DISCONNECTED (nothing arrives to say the peer went).
#[test]
fn partition_rc_loss_and_silence_on_rping() {
    let name = "partition_rc_loss_and_silence_on_rping";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let _slot = Slot::take();
    let net = Net::new(229);
    for fault in [
        "partition:0ms:100ms",
        "drop:rc:0ms:10s:0.05",
        "delay:rc:0ms:10s:2ms",
    ] {
        let (mut sp, cp) = rping_pair(&net, 20, &["--seed", "5", "--fault", fault]);
        let mut s = server(&mut sp, "");
        let mut c = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
        let (cs, ss) = (exit(&mut c), exit(&mut s));
        let report = format!(
            "{fault}\nclient: {}{}\nserver: {}",
            c.stdout_text(),
            c.stderr_text(),
            s.stderr_text()
        );
        assert!(cs.success() && ss.success(), "{cs} {ss}\n{report}");
        assert_eq!(
            c.stdout_text().matches("ping data: ").count(),
            20,
            "{report}"
        );
        let fired = fired(&c);
        assert!(
            fired.len() == 1 && fired[0].starts_with(&format!("{fault} (first: ")),
            "{fired:?}\n{report}"
        );
    }

    let (mut sp, cp) = rping_pair(&net, 50, &[]);
    sp.exec_args
        .extend(["--fault".into(), "silence:after:10:completions".into()]);
    let mut s = server(&mut sp, "");
    let mut c = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    let ss = exit(&mut s);
    c.kill();
    let out = format!("{}{}", s.stdout_text(), s.stderr_text());
    assert!(!ss.success(), "{out}");
    assert_eq!(
        fired(&s),
        ["silence:after:10:completions (completion 10)"],
        "{out}"
    );
    assert!(
        out.contains("cq completion failed status 12"),
        "no RETRY_EXC_ERR on the silent server's own work:\n{out}"
    );
}

/// ucmatose: the server disconnects first; the client, SIGKILLed on its DISCONNECTED, never
/// answers with its own. Returns the server's log and the client's exit status.
fn ucmatose_client_killed_on_disconnected(
    net: &Net,
    on_death: &str,
) -> (String, ExitStatus, Vec<String>) {
    let ip = net.server_ip();
    let mut sp = Program::new(&ip, &["ucmatose", "-b", &ip, "-p", &net.port_arg()]);
    sp.exec_args = vec!["--fast-timers".into()];
    let mut s = server(&mut sp, ",rnic::ffi::cm_event=debug");
    let mut cp = Program::new(
        &net.client_ip(),
        &["ucmatose", "-s", &ip, "-p", &net.port_arg()],
    );
    let report = std::env::temp_dir().join(format!(
        "rnic-check-faults-{}-{on_death}.json",
        std::process::id()
    ));
    cp.exec_args = [
        "--fast-timers",
        "--on-death",
        on_death,
        "--fault",
        "kill:on:DISCONNECTED",
        "--check-report",
    ]
    .map(String::from)
    .into_iter()
    .chain([report.display().to_string()])
    .collect();
    let mut c = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    let (cs, ss) = (exit(&mut c), exit(&mut s));
    let log = s.stderr_text();
    assert!(ss.success(), "server {ss}\n{log}\n{}", s.stdout_text());
    // A kill of our own leaves time for the checker's report: the fault in it, marked incomplete.
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("{report:?}: {e}"));
    let _ = std::fs::remove_file(&report);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(
        v["faults"][0]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("kill:on:DISCONNECTED"))
            && v["incomplete"]
                .as_str()
                .is_some_and(|w| w.contains("signal 9"))
            && v["counts"]["cm_event.RDMA_CM_EVENT_ESTABLISHED"].as_u64() == Some(1),
        "{text}"
    );
    (log, cs, fired(&c))
}

#[test]
fn a_kill_on_disconnected_is_a_sigkill_and_rnic_exec_answers_for_the_program() {
    let name = "a_kill_on_disconnected_is_a_sigkill_and_rnic_exec_answers_for_the_program";
    if !tools_available(name, &["ucmatose"]) {
        return;
    }
    let _slot = Slot::take();
    let net = Net::new(227);
    let (log, cs, fired) = ucmatose_client_killed_on_disconnected(&net, "kernel");
    assert_eq!(cs.signal(), Some(9), "rnic exec: {cs}");
    assert_eq!(fired, ["kill:on:DISCONNECTED"]);
    assert!(
        log.contains("rdma_get_cm_event: Disconnected status 0"),
        "the server's DISCONNECTED is not the DREP's:\n{log}"
    );
    let (log, cs, _) = ucmatose_client_killed_on_disconnected(&net, "power-loss");
    assert_eq!(cs.signal(), Some(9), "rnic exec: {cs}");
    assert!(
        log.contains("rdma_get_cm_event: Disconnected status -110"),
        "with power-loss the server's DREQ should run out of retries:\n{log}"
    );
}

fn rnic_check(args: &[&str], server: &[&str], client: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(RNIC)
        .args([
            "check",
            "--server-addr",
            "127.0.232.1",
            "--client-addr",
            "127.0.232.2",
        ])
        .args(args)
        .arg("--")
        .args(server)
        .arg("--")
        .args(client)
        .output()
        .unwrap_or_else(|e| panic!("{RNIC}: {e}"));
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn rnic_check_over_rping_says_what_happened() {
    let name = "rnic_check_over_rping_says_what_happened";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let _slot = Slot::take();
    let server = ["rping", "-s", "-a", "{server}", "-p", "19232"];
    let client = ["rping", "-c", "-a", "{server}", "-p", "19232", "-C", "3"];
    let (code, out) = rnic_check(
        &[
            "--runs",
            "4",
            "--jobs",
            "2",
            "--seed",
            "11",
            "--faults",
            "cm-drop,cm-dup,kill",
            "--json",
        ],
        &server,
        &client,
    );
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    let (runs, passed, failed) = (
        v["runs"].as_u64(),
        v["passed"].as_u64(),
        v["failed"].as_u64(),
    );
    assert_eq!(runs, Some(4), "{out}");
    assert_eq!(passed.zip(failed).map(|(p, f)| p + f), Some(4), "{out}");
    assert_eq!(code, Some(if failed == Some(0) { 0 } else { 1 }), "{out}");
    assert!(
        v["faults_fired"].as_object().is_some_and(|f| !f.is_empty()),
        "{out}"
    );

    // Every REQ lost: the client gives up (UNREACHABLE), the server waits for ever.
    let (code, out) = rnic_check(
        &[
            "--runs",
            "1",
            "--seed",
            "5",
            "--timeout",
            "4",
            "--client-fault",
            "drop:REQ:*",
        ],
        &server,
        &client,
    );
    assert_eq!(code, Some(1), "{out}");
    for want in [
        "1 runs (seeds 5…5): 0 passed, 1 failed",
        "seed 5: server hung (killed at the deadline); client exited 255 (expected 0)",
        "--seed 5 --fast-timers --check --check-report ",
        "-server.json -- rping -s -a 127.0.232.1",
        "--fault 'drop:REQ:*' --check --check-report ",
        "-client.json -- rping -c -a 127.0.232.1",
        "code paths reached (runs): ",
        "cm_event.RDMA_CM_EVENT_UNREACHABLE 1/1",
        "check --rerun 5 --server-addr 127.0.232.1",
        "faults fired (runs): drop:REQ 1/1",
    ] {
        assert!(out.contains(want), "no {want:?} in\n{out}");
    }
    // The failing run's reports stay beside its logs; the client's lists the faults that fired.
    let log = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("logs:"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("no logs line in\n{out}"));
    let report = log.replace("-client.log", "-client.json");
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("{report}: {e}"));
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let faults = v["faults"].as_array().cloned().unwrap_or_default();
    assert!(
        !faults.is_empty()
            && faults.iter().all(|f| f["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("drop:REQ:*"))),
        "{text}"
    );

    // rping's server destroys its id before its QP (docs/check.md): a finding in every run,
    // unless --allow names the rule; a name that is no rule is refused.
    let no_faults = ["--runs", "1", "--seed", "3", "--faults", "none"];
    let (code, out) = rnic_check(&no_faults, &server, &client);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("seed 3: server finding: destroy-id-with-qp: "),
        "{out}"
    );
    let allowed = [&no_faults[..], &["--allow", "destroy-id-with-qp,leak"]].concat();
    let (code, out) = rnic_check(&allowed, &server, &client);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 passed, 0 failed"), "{out}");
    let (code, out) = rnic_check(&["--allow", "destroy-qp"], &server, &client);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("\"destroy-qp\" is not a rule of the checker: destroy-id-unacked-event, "),
        "{out}"
    );
}

#[test]
fn a_seeded_fault_fires_at_the_same_point_twice() {
    let name = "a_seeded_fault_fires_at_the_same_point_twice";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let _slot = Slot::take();
    let net = Net::new(228);
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (mut sp, cp) = rping_pair(
            &net,
            10,
            &[
                "--seed",
                "7",
                "--fault",
                "drop:rc:0s:60s:0.2",
                "--fault",
                "kill:after:12:completions",
            ],
        );
        let mut s = server(&mut sp, "");
        let mut c = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
        let cs = exit(&mut c);
        let _ = exit(&mut s);
        assert_eq!(cs.signal(), Some(9), "{}", c.stderr_text());
        seen.push(fired(&c));
    }
    assert_eq!(seen[0].len(), 2, "{seen:?}");
    assert!(
        seen[0][1].starts_with("kill:after:12:completions (completion "),
        "{seen:?}"
    );
    assert_eq!(seen[0], seen[1], "the same seed fired elsewhere");
}

/// The processes whose command line matches `pattern` (`pgrep -af`).
fn pgrep(pattern: &str) -> String {
    let out = Command::new("pgrep")
        .args(["-af", pattern])
        .output()
        .unwrap_or_else(|e| panic!("pgrep: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `rnic check` on 127.0.N.1/.2 with a client that pings for ever: every run would
/// last until --timeout. Its stdout and stderr are piped.
fn endless_rping_check(n: u8) -> std::process::Child {
    let (server, client, port) = (
        format!("127.0.{n}.1"),
        format!("127.0.{n}.2"),
        format!("19{n}"),
    );
    Command::new(RNIC)
        .args([
            "check",
            "--server-addr",
            &server,
            "--client-addr",
            &client,
            "--runs",
            "50",
            "--faults",
            "none",
            "--timeout",
            "600",
            "--",
            "rping",
            "-s",
            "-a",
            "{server}",
            "-p",
            &port,
            "--",
            "rping",
            "-c",
            "-a",
            "{server}",
            "-p",
            &port,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{RNIC}: {e}"))
}

/// Waits until the first run of [`endless_rping_check`]`(n)` has both programs running.
fn wait_for_rping_pair(check: &mut std::process::Child, n: u8) {
    let server = format!("rping -s -a 127.0.{n}.1");
    let client = format!("rping -c -a 127.0.{n}.1");
    let deadline = Instant::now() + program_timeout();
    while !(pgrep(&server).contains(&server) && pgrep(&client).contains(&client)) {
        assert!(
            check.try_wait().ok().flatten().is_none(),
            "rnic check ended before its first run started"
        );
        assert!(Instant::now() < deadline, "no rping pair");
        std::thread::sleep(POLL);
    }
}

/// What of [`endless_rping_check`]`(n)`'s runs is still running: its programs and their
/// `rnic exec`.
fn left_running(n: u8) -> String {
    pgrep(&format!(
        "rping -[sc] -a 127.0.{n}\\.|exec --addr 127.0.{n}\\."
    ))
}

#[test]
fn rnic_check_interrupted_kills_its_programs_and_says_so() {
    let name = "rnic_check_interrupted_kills_its_programs_and_says_so";
    if !tools_available(name, &["rping", "pgrep"]) {
        return;
    }
    let _slot = Slot::take();
    let mut check = endless_rping_check(233);
    let stderr = check.stderr.take().map(std::io::BufReader::new);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr
            .into_iter()
            .flat_map(|s| s.lines())
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut err = Vec::new();
    let line = |err: &mut Vec<String>| {
        let l = rx
            .recv_timeout(program_timeout())
            .unwrap_or_else(|e| panic!("rnic check's stderr: {e}; so far {err:?}"));
        err.push(l.clone());
        l
    };
    // Without --seed, the first seed comes from the OS, and is said.
    let first = line(&mut err);
    assert!(
        first.starts_with("rnic check: seeds ") && first.contains("(from the OS; --seed "),
        "{first}"
    );
    wait_for_rping_pair(&mut check, 233);
    let pid = nix::unistd::Pid::from_raw(check.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT)
        .unwrap_or_else(|e| panic!("SIGINT: {e}"));
    let said = line(&mut err);
    assert!(said.starts_with("rnic check: interrupted: "), "{said}");
    let out = check
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{RNIC}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{text}{err:?}");
    assert!(
        text.starts_with(
            "rnic check: 0 runs: 0 passed, 0 failed\ninterrupted (SIGINT): 50 of 50 runs not done"
        ),
        "{text}"
    );
    // Nothing of the stopped run is left: neither program nor its rnic exec.
    assert_eq!(left_running(233), "", "left running after rnic check");
}

/// `rnic check` killed with SIGKILL (nothing of it runs to clean up): the kernel tells each
/// `rnic exec` it started (SIGTERM on its parent's death), which passes it on to its program,
/// so nothing of the run is left for long.
#[test]
fn rnic_check_killed_leaves_no_run_behind() {
    let name = "rnic_check_killed_leaves_no_run_behind";
    if !tools_available(name, &["rping", "pgrep"]) {
        return;
    }
    let _slot = Slot::take();
    let mut check = endless_rping_check(235);
    wait_for_rping_pair(&mut check, 235);
    check.kill().unwrap_or_else(|e| panic!("SIGKILL: {e}"));
    let _ = check.wait();
    let deadline = Instant::now() + program_timeout();
    loop {
        let left = left_running(235);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left running {:?} after rnic check's SIGKILL:\n{left}",
            program_timeout()
        );
        std::thread::sleep(POLL);
    }
}

fn rnic_check_refused(args: &[&str], server: &str) -> String {
    let out = Command::new(RNIC)
        .arg("check")
        .args(args)
        .args(["--", server, "--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("{RNIC}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

#[test]
fn rnic_check_refuses_what_would_fail_every_run() {
    let addrs = |s: &'static str, c: &'static str| ["--server-addr", s, "--client-addr", c];
    let err = rnic_check_refused(&addrs("127.0.234.1", "127.0.234.1"), "true");
    assert!(
        err.contains("--server-addr and --client-addr are both 127.0.234.1"),
        "{err}"
    );
    // Job 1 puts the server on 127.0.234.3, job 0's client address.
    let mut jobs = addrs("127.0.234.1", "127.0.234.3").to_vec();
    jobs.extend(["--jobs", "2"]);
    let err = rnic_check_refused(&jobs, "true");
    assert!(
        err.contains("127.0.234.3 would be a server's and a client's"),
        "{err}"
    );
    for prog in ["rnic-no-such-program", "./no/such/program"] {
        let err = rnic_check_refused(&addrs("127.0.234.1", "127.0.234.2"), prog);
        assert!(
            err.contains(&format!("the server program {prog:?} is not found")),
            "{err}"
        );
    }
    // Job 1's server address (127.0.234.5 + 2) is taken.
    let taken = std::net::UdpSocket::bind("127.0.234.7:4791")
        .unwrap_or_else(|e| panic!("127.0.234.7:4791: {e}"));
    let mut jobs = addrs("127.0.234.5", "127.0.234.6").to_vec();
    jobs.extend(["--jobs", "2"]);
    let err = rnic_check_refused(&jobs, "true");
    assert!(
        err.starts_with("rnic check: 127.0.234.7:4791 is in use (")
            && err.contains("is another rnic running on it?"),
        "{err}"
    );
    drop(taken);
}

#[test]
fn rnic_exec_refuses_a_check_mode_without_equals_and_a_bad_variable() {
    let dir = std::env::temp_dir().join(format!("rnic-exec-refused-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let marker = dir.join("ran");
    let touch = ["touch", marker.to_str().unwrap_or("/nonexistent")];
    let exec = |args: &[&str], env: Option<(&str, &str)>| {
        let mut cmd = Command::new(RNIC);
        cmd.args(["exec", "--addr", "127.0.234.9"]).args(args);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("{RNIC}: {e}"));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let mut check_fail = vec!["--check", "fail", "--"];
    check_fail.extend(touch);
    let mut plain = vec!["--"];
    plain.extend(touch);
    for (args, env, want) in [
        (
            &check_fail,
            None,
            "rnic exec: `--check fail` would run a program named fail: write --check=fail",
        ),
        (
            &plain,
            Some(("RNIC_MTU", "1500")),
            "rnic exec: RNIC_MTU=\"1500\": expected 256, 512, 1024, 2048 or 4096",
        ),
    ] {
        let (code, _, err) = exec(args, env);
        assert_eq!((code, err.trim_end()), (Some(2), want), "{args:?} {env:?}");
        assert!(!marker.exists(), "the program ran despite {args:?} {env:?}");
    }
    // `;` separates faults in --fault as in RNIC_FAULTS.
    let (code, out, err) = exec(
        &[
            "--fault",
            "drop:REQ:1; drop:REP:1",
            "--",
            "sh",
            "-c",
            "printf %s \"$RNIC_FAULTS\"",
        ],
        None,
    );
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "drop:REQ:1;drop:REP:1"),
        "{err}"
    );
    let (code, _, err) = exec(&["--fault", "drop:REQ:1;drop:NOPE:1", "--", "true"], None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("fault \"drop:NOPE:1\""), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
