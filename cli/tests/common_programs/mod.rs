//! A harness that runs unmodified RDMA programs (perftest, rping, ucmatose, qperf, …) in pairs,
//! a server and a client, each on a simulated RNIC of its own through `rnic exec`, and parsers
//! of their result lines.
//!
//! Used by `cli/tests/capi_programs.rs`; a benchmark can reuse it with
//! `#[path = "../tests/common_programs/mod.rs"] mod common_programs;` (it needs only
//! `env!("CARGO_BIN_EXE_rnic")`, which cargo sets for benches as for integration tests).
//!
//! What it guarantees, so that a failure can be debugged from the test's output alone:
//! * every process is started as `rnic exec --addr IP -- PROGRAM ARGS…` with both streams piped
//!   and read on threads into buffers, so what was read is kept even if the process hangs;
//! * the server's readiness is awaited by bounded polling, never by a blind sleep: a TCP socket
//!   in LISTEN on the port in `/proc/net/tcp{,6}` for programs that exchange over TCP, or the
//!   library's [`LISTEN_MARKER`] log line on the server's stderr for rdma_cm servers;
//! * each run has a deadline ([`program_timeout`]); on expiry both processes are killed (by
//!   their process id) and the test fails with both commands and both outputs;
//! * every process still running when its [`Running`] is dropped (a panic included) is killed.

// The harness drives real processes on the wall clock: timeouts need `Instant::now` and each
// pipe needs a reader thread (the workspace's clippy.toml forbids both in the simulated path).
#![allow(clippy::disallowed_methods)]
// Each includer uses a part of the harness (a test file, a benchmark).
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The `rnic` binary (its `exec` subcommand preloads librnic.so).
pub const RNIC: &str = env!("CARGO_BIN_EXE_rnic");

/// The line librnic.so logs (at info level, target `rnic`) when a program calls `rdma_listen`:
/// an rdma_cm server is ready once its stderr contains it.
pub const LISTEN_MARKER: &str = "rdma_listen on";

/// The line librnic.so logs (at info level, target `rnic`) when its RNIC joins a multicast
/// group in the directory other processes read (a QP attached to it): from then on, datagrams
/// sent to the group reach it.
pub const MULTICAST_MARKER: &str = "multicast group joined";

/// `RUST_LOG` given to rdma_cm servers so that the library logs [`LISTEN_MARKER`], unless
/// `RUST_LOG` is set already (it must then enable info for target `rnic`, as `debug` does).
pub const LISTEN_LOG: &str = "rnic=info";

/// The device name librnic.so gives its RNIC (`RNIC_DEVICE` unset).
pub const DEVICE: &str = "rnic0";

/// Set (to anything but `0` or empty) by CI: a missing program or a missing librnic.so is then a
/// failure instead of a SKIP.
pub const REQUIRE_ENV: &str = "RNIC_REQUIRE_RDMA_TOOLS";

/// Overrides [`DEFAULT_TIMEOUT`], in seconds.
pub const TIMEOUT_ENV: &str = "RNIC_PROGRAM_TIMEOUT_SECS";

/// Upper bound of one server/client run, from the client's start to both exits.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Upper bound of the wait for the server's readiness.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the other side may still run once one side has failed (it usually fails too, or
/// waits forever for its peer).
pub const GRACE: Duration = Duration::from_secs(5);

/// Polling period of the readiness and exit checks.
pub const POLL: Duration = Duration::from_millis(10);

/// At most this many bytes of each stream are shown in a report (the end of the stream).
const REPORT_TAIL: usize = 100_000;

/// The run deadline: `$RNIC_PROGRAM_TIMEOUT_SECS` or [`DEFAULT_TIMEOUT`].
pub fn program_timeout() -> Duration {
    std::env::var(TIMEOUT_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs)
}

/// A test's own network: the server on 127.0.N.1, the client on 127.0.N.2 (each RNIC's GID and
/// RoCEv2 UDP address), and a TCP / rdma_cm port of its own, so tests can run in parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    /// The N of 127.0.N.x.
    pub n: u8,
    /// The server's TCP (out-of-band exchange) or rdma_cm port.
    pub port: u16,
}

impl Net {
    /// Addresses 127.0.`n`.1 / 127.0.`n`.2 and port 19000 + `n`.
    pub const fn new(n: u8) -> Net {
        Net {
            n,
            port: 19_000 + n as u16,
        }
    }

    /// The server's address.
    pub fn server_ip(&self) -> String {
        format!("127.0.{}.1", self.n)
    }

    /// The client's address.
    pub fn client_ip(&self) -> String {
        format!("127.0.{}.2", self.n)
    }

    /// The port as an argument.
    pub fn port_arg(&self) -> String {
        self.port.to_string()
    }
}

/// Whether the environment asks for the tools to be present ([`REQUIRE_ENV`]).
pub fn tools_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Whether `prog` is an executable file in one of `$PATH`'s directories (or, if it contains a
/// slash, at that path).
pub fn on_path(prog: &str) -> bool {
    let is_exec = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.contains('/') {
        return is_exec(Path::new(prog));
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| is_exec(&d.join(prog))))
}

/// Whether `rnic exec` finds librnic.so, asked once per process by running
/// `rnic exec -- true`: `Err` with the reason when the library is missing. Any other failure
/// of that probe (the library found but `true` failing under it) panics: that is a bug, not a
/// reason to skip.
pub fn library_available() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let out = Command::new(RNIC)
                .args(["exec", "--", "true"])
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {RNIC}: {e}"));
            if out.status.success() {
                return Ok(());
            }
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.code() == Some(127) && err.contains("librnic.so") {
                Err(err.trim().to_string())
            } else {
                panic!(
                    "`{RNIC} exec -- true` failed ({}) although librnic.so was found:\n{err}",
                    out.status
                )
            }
        })
        .clone()
}

/// `true` when the test can run: every program of `progs` is on `$PATH` and librnic.so is
/// found. Otherwise prints `SKIP <test>: …` and returns `false`, or panics when
/// [`REQUIRE_ENV`] is set.
pub fn tools_available(test: &str, progs: &[&str]) -> bool {
    let missing: Vec<&str> = progs.iter().copied().filter(|p| !on_path(p)).collect();
    let why = if !missing.is_empty() {
        Some(format!(
            "{} not installed (Debian packages perftest, rdmacm-utils, qperf, iperf3, sockperf)",
            missing.join(", ")
        ))
    } else {
        library_available()
            .err()
            .map(|e| format!("librnic.so not found by `rnic exec`: {e}"))
    };
    match why {
        None => true,
        Some(why) if tools_required() => panic!("{test}: {why}, and {REQUIRE_ENV} is set"),
        Some(why) => {
            println!("SKIP {test}: {why}");
            false
        }
    }
}

/// How the harness knows that the server is ready for its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// A TCP socket in LISTEN on this port (programs that exchange their QP numbers over TCP).
    TcpListen(u16),
    /// [`LISTEN_MARKER`] on the server's stderr (rdma_cm servers; started with
    /// `RUST_LOG=`[`LISTEN_LOG`]).
    RdmaListen,
    /// This text on the server's stderr, from the library's info-level log (started with
    /// `RUST_LOG=`[`LISTEN_LOG`] too): for a server that listens for nothing, e.g. an mckey
    /// receiver once its RNIC joined the group ([`MULTICAST_MARKER`]).
    Stderr(&'static str),
}

/// One program to run under `rnic exec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Program {
    /// `--addr`: the RNIC's IP.
    pub addr: String,
    /// More options of `rnic exec` (`--fast-timers`, `--mtu 4096`, …).
    pub exec_args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// The program and its arguments.
    pub argv: Vec<String>,
}

impl Program {
    /// `argv` on the RNIC at `addr`.
    pub fn new<S: AsRef<str>>(addr: &str, argv: &[S]) -> Program {
        Program {
            addr: addr.to_string(),
            argv: argv.iter().map(|s| s.as_ref().to_string()).collect(),
            ..Program::default()
        }
    }

    /// The command line as a shell would take it (environment included).
    pub fn command_line(&self) -> String {
        let mut words: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        words.push(RNIC.to_string());
        words.extend(["exec".into(), "--addr".into(), self.addr.clone()]);
        words.extend(self.exec_args.iter().cloned());
        words.push("--".into());
        words.extend(self.argv.iter().cloned());
        words
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn shell_quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

fn lock(buf: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    buf.lock().unwrap_or_else(PoisonError::into_inner)
}

fn pump(mut src: impl Read + Send + 'static, buf: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match src.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => lock(&buf).extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    })
}

/// A started program: its child process and what its streams have given so far.
pub struct Running {
    role: &'static str,
    command_line: String,
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
    killed: bool,
}

impl Running {
    /// Starts `p` (`role`: "server" or "client", for the reports).
    ///
    /// # Errors
    /// The `rnic` binary could not be started.
    pub fn spawn(role: &'static str, p: &Program) -> Result<Running, String> {
        let mut cmd = Command::new(RNIC);
        cmd.args(["exec", "--addr", &p.addr])
            .args(&p.exec_args)
            .arg("--")
            .args(&p.argv)
            .envs(p.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", p.command_line()))?;
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        if let Some(o) = child.stdout.take() {
            readers.push(pump(o, Arc::clone(&stdout)));
        }
        if let Some(e) = child.stderr.take() {
            readers.push(pump(e, Arc::clone(&stderr)));
        }
        Ok(Running {
            role,
            command_line: p.command_line(),
            child,
            stdout,
            stderr,
            readers,
            status: None,
            killed: false,
        })
    }

    /// The process id (of `rnic exec`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
            }
        }
        self.status
    }

    /// Kills the process (SIGKILL to its id) if it is still running, and reaps it; then the
    /// processes it forked that still run (a qperf server forks one per request), found in
    /// `/proc` before the kill, by their ids.
    pub fn kill(&mut self) {
        if self.poll().is_none() {
            self.killed = true;
            let forked = descendants(self.child.id());
            let _ = self.child.kill();
            if let Ok(s) = self.child.wait() {
                self.status = Some(s);
            }
            if !forked.is_empty() {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .args(forked.iter().map(u32::to_string))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }

    /// The process ID of `rnic exec` (the supervisor; the program is its child).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The process ID of the program `rnic exec` started, once it runs.
    pub fn program_id(&self) -> Option<u32> {
        descendants(self.child.id()).first().copied()
    }

    /// Its stderr so far.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.stderr)).into_owned()
    }

    /// Its stdout so far.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.stdout)).into_owned()
    }

    /// Stops it if it still runs, collects the rest of its output (the readers end at EOF; one
    /// that does not within a second, because a grandchild kept the pipe, is left behind).
    pub fn finish(mut self) -> Finished {
        self.kill();
        let until = Instant::now() + Duration::from_secs(1);
        for r in std::mem::take(&mut self.readers) {
            while !r.is_finished() && Instant::now() < until {
                std::thread::sleep(POLL);
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
        Finished {
            role: self.role,
            command_line: self.command_line.clone(),
            status: self.status,
            killed: self.killed,
            stdout: self.stdout_text(),
            stderr: self.stderr_text(),
        }
    }
}

/// The processes descending from `pid` (children, their children, …), per the parent ids in
/// `/proc/<pid>/stat`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent_of: Vec<(u32, u32)> = dir
        .filter_map(|e| {
            let child: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((child, ppid))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for &(c, _) in parent_of.iter().filter(|&&(_, pp)| pp == p) {
            if !found.contains(&c) {
                found.push(c);
                frontier.push(c);
            }
        }
    }
    found
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A program after its run.
#[derive(Debug, Clone)]
pub struct Finished {
    /// "server" or "client".
    pub role: &'static str,
    /// The command, as a shell would take it.
    pub command_line: String,
    /// Its exit status; `None`: never started.
    pub status: Option<ExitStatus>,
    /// The harness killed it (timeout, its peer failed, or a server that does not exit).
    pub killed: bool,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

impl Finished {
    fn not_started(role: &'static str, p: &Program) -> Finished {
        Finished {
            role,
            command_line: p.command_line(),
            status: None,
            killed: false,
            stdout: String::new(),
            stderr: String::new(),
        }
    }

    /// It exited by itself with status 0.
    pub fn succeeded(&self) -> bool {
        !self.killed && self.status.is_some_and(|s| s.success())
    }

    fn status_text(&self) -> String {
        match (self.status, self.killed) {
            (None, _) => "not started".into(),
            (Some(s), true) => format!("killed by the harness ({s})"),
            (Some(s), false) => s.to_string(),
        }
    }

    fn render(&self) -> String {
        fn tail(s: &str) -> &str {
            if s.len() <= REPORT_TAIL {
                return s;
            }
            let mut i = s.len() - REPORT_TAIL;
            while !s.is_char_boundary(i) {
                i += 1;
            }
            &s[i..]
        }
        format!(
            "{role}: {cmd}\n{role} status: {st}\n--- {role} stdout ---\n{out}\n--- {role} stderr ---\n{err}\n",
            role = self.role,
            cmd = self.command_line,
            st = self.status_text(),
            out = tail(&self.stdout),
            err = tail(&self.stderr),
        )
    }
}

/// A server and its client.
#[derive(Debug, Clone)]
pub struct PairSpec {
    /// The test's name, for the reports.
    pub name: String,
    /// The server.
    pub server: Program,
    /// The client.
    pub client: Program,
    /// When the client may start.
    pub ready: Ready,
    /// The server does not exit after its client (qperf): it is killed once the client exits.
    pub server_stays: bool,
}

/// Both programs after a run.
#[derive(Debug, Clone)]
pub struct PairOutcome {
    /// The test's name.
    pub name: String,
    /// The server.
    pub server: Finished,
    /// The client.
    pub client: Finished,
    /// Copied from the [`PairSpec`].
    pub server_stays: bool,
    /// How long the client ran.
    pub client_time: Duration,
}

impl PairOutcome {
    /// Both commands and both outputs.
    pub fn report(&self) -> String {
        let ran = if self.client.status.is_some() {
            format!(" (client ran {:.2?})", self.client_time)
        } else {
            String::new()
        };
        format!(
            "===== {}{ran} =====\n{}{}",
            self.name,
            self.server.render(),
            self.client.render()
        )
    }

    /// Prints [`PairOutcome::report`] (seen with `--nocapture`); called once the checks have
    /// passed, as a failure's panic message carries the report already.
    pub fn show(&self) {
        println!("{}", self.report());
    }

    /// Fails the test with `why` and [`PairOutcome::report`].
    pub fn fail(&self, why: &str) -> ! {
        panic!("{}: {why}\n{}", self.name, self.report())
    }

    /// Fails the test unless `ok`; `why` says what was expected.
    pub fn check(&self, ok: bool, why: impl FnOnce() -> String) {
        if !ok {
            self.fail(&why());
        }
    }

    /// Both programs exited by themselves with status 0 (for a server that stays: the client).
    pub fn assert_success(&self) {
        self.check(self.client.succeeded(), || {
            format!("the client did not exit 0 ({})", self.client.status_text())
        });
        if !self.server_stays {
            self.check(self.server.succeeded(), || {
                format!("the server did not exit 0 ({})", self.server.status_text())
            });
        }
    }
}

/// Whether a TCP socket (IPv4 or IPv6, any local address) is in LISTEN on `port`, per
/// `/proc/net/tcp` and `/proc/net/tcp6` (column 2 `ADDR:PORT` in hex, column 4 the state,
/// `0A` = LISTEN).
pub fn tcp_listening(port: u16) -> bool {
    let want = format!("{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3
                    && cols[3] == "0A"
                    && cols[1]
                        .rsplit(':')
                        .next()
                        .is_some_and(|p| p.eq_ignore_ascii_case(&want))
            })
        })
    })
}

fn wait_ready(server: &mut Running, ready: Ready) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let ok = match ready {
            Ready::TcpListen(port) => tcp_listening(port),
            Ready::RdmaListen => server.stderr_text().contains(LISTEN_MARKER),
            Ready::Stderr(marker) => server.stderr_text().contains(marker),
        };
        if ok {
            return Ok(());
        }
        if let Some(s) = server.poll() {
            return Err(format!("the server exited ({s}) before it was ready"));
        }
        if start.elapsed() > READY_TIMEOUT {
            return Err(match ready {
                Ready::TcpListen(port) => format!(
                    "the server did not listen on TCP port {port} within {READY_TIMEOUT:?} \
                     (polled /proc/net/tcp and /proc/net/tcp6)"
                ),
                Ready::RdmaListen => format!(
                    "the server did not log `{LISTEN_MARKER}` (RUST_LOG={LISTEN_LOG}) on its \
                     stderr within {READY_TIMEOUT:?}"
                ),
                Ready::Stderr(marker) => format!(
                    "the server did not log `{marker}` (RUST_LOG={LISTEN_LOG}) on its stderr \
                     within {READY_TIMEOUT:?}"
                ),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// How many pairs run at once ([`PARALLEL_ENV`], default 3). The test harness runs every test
/// of a file on its own thread; a pair is four busy threads (two programs, each with the
/// library's progress thread), and on a 2-core machine a dozen at once starve each other long
/// enough to lose races the programs themselves leave open (perftest `-R` connects its data QP
/// while its peer is still setting up the listener).
pub const PARALLEL_ENV: &str = "RNIC_PROGRAM_PARALLEL";

/// A slot among [`PARALLEL_ENV`] pairs, held while a pair runs.
pub struct Slot;

static SLOTS: (Mutex<usize>, std::sync::Condvar) = (Mutex::new(0), std::sync::Condvar::new());

impl Slot {
    /// Waits for a free slot.
    pub fn take() -> Slot {
        let max = std::env::var(PARALLEL_ENV)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(3);
        let mut busy = SLOTS.0.lock().unwrap_or_else(PoisonError::into_inner);
        while *busy >= max {
            busy = SLOTS.1.wait(busy).unwrap_or_else(PoisonError::into_inner);
        }
        *busy += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut busy = SLOTS.0.lock().unwrap_or_else(PoisonError::into_inner);
        *busy = busy.saturating_sub(1);
        SLOTS.1.notify_one();
    }
}

/// Runs the server, waits until it is ready, runs the client, and waits for both (the server
/// is killed after the client if it stays). Panics, with both commands and both outputs, when
/// the server is not ready in time or the run passes its deadline ([`program_timeout`]);
/// exit statuses and outputs are left to the caller ([`PairOutcome::assert_success`]).
pub fn run_pair(spec: &PairSpec) -> PairOutcome {
    let _slot = Slot::take();
    let mut server_prog = spec.server.clone();
    let log_set = server_prog.env.iter().any(|(k, _)| k == "RUST_LOG")
        || std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty());
    if matches!(spec.ready, Ready::RdmaListen | Ready::Stderr(_)) && !log_set {
        server_prog
            .env
            .push(("RUST_LOG".to_string(), LISTEN_LOG.to_string()));
    }
    let outcome = |server: Running, client: Option<Running>, client_time| PairOutcome {
        name: spec.name.clone(),
        server: server.finish(),
        client: client.map_or_else(
            || Finished::not_started("client", &spec.client),
            Running::finish,
        ),
        server_stays: spec.server_stays,
        client_time,
    };
    if let Ready::TcpListen(port) = spec.ready {
        if tcp_listening(port) {
            panic!(
                "{}: TCP port {port} is already in LISTEN before the server starts (a leftover \
                 server, or another program on this port): the client would talk to it. \
                 Server command: {}",
                spec.name,
                server_prog.command_line()
            );
        }
    }
    let mut server = Running::spawn("server", &server_prog)
        .unwrap_or_else(|e| panic!("{}: the server: {e}", spec.name));
    if let Err(why) = wait_ready(&mut server, spec.ready) {
        outcome(server, None, Duration::ZERO).fail(&why);
    }
    let mut client = match Running::spawn("client", &spec.client) {
        Ok(c) => c,
        Err(e) => outcome(server, None, Duration::ZERO).fail(&format!("the client: {e}")),
    };
    let timeout = program_timeout();
    let start = Instant::now();
    let mut client_time = None;
    let mut grace_until: Option<Instant> = None;
    let mut timed_out = None;
    loop {
        let c = client.poll();
        if c.is_some() && client_time.is_none() {
            client_time = Some(start.elapsed());
        }
        let s = server.poll();
        if c.is_some() && (s.is_some() || spec.server_stays) {
            break;
        }
        let failed = |st: Option<ExitStatus>| st.is_some_and(|st| !st.success());
        if grace_until.is_none() && (failed(c) || failed(s)) {
            grace_until = Some(Instant::now() + GRACE);
        }
        if grace_until.is_some_and(|g| Instant::now() >= g) {
            break; // the other side is killed below and reported by the caller's checks
        }
        if start.elapsed() > timeout {
            timed_out = Some(format!(
                "timed out after {timeout:?} ({TIMEOUT_ENV} changes it): {} still running",
                match (c.is_none(), s.is_none() && !spec.server_stays) {
                    (true, true) => "the server and the client",
                    (true, false) => "the client",
                    _ => "the server",
                }
            ));
            break;
        }
        std::thread::sleep(POLL);
    }
    let client_time = client_time.unwrap_or_else(|| start.elapsed());
    client.kill();
    server.kill();
    let out = outcome(server, Some(client), client_time);
    if let Some(why) = timed_out {
        out.fail(&why);
    }
    out
}

mod parse;
pub use parse::*;
