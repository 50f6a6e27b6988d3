//! `rnic exec` as the program's parent: what it sets up before the program starts, how it
//! passes signals on, and how it ends (docs/capi.md, "Process death").
//!
//! * **Before**: the RNIC's UDP socket is bound here, with librnic's own rules
//!   (`rnic::runtime::bind`: `RNIC_ADDR`, else the first free 127.0.0.x:4791, read from the
//!   program's environment), and the state file made (a memfd, `rnic::state_file`); the program
//!   inherits both and finds them through `RNIC_SUPERVISOR=<pid>:<socket fd>:<state fd>`. When
//!   the environment is bad or the address cannot be bound, the program runs without them and
//!   librnic reports the problem itself, as it did before `rnic exec` supervised.
//! * **Signals**: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to `rnic exec`
//!   are passed on to the program, once each. When `rnic exec` runs in the foreground of a
//!   terminal, the program stays in its process group, so that job control (Ctrl-Z, `fg`) and
//!   the terminal's signals work as for any command: Ctrl-C, Ctrl-\ and a hang-up reach the
//!   program from the terminal itself, so SIGINT, SIGQUIT and SIGHUP are not passed on again
//!   (as `system(3)` and `time(1)` ignore SIGINT and SIGQUIT while they wait); SIGTERM, SIGUSR1
//!   and SIGUSR2 are. Otherwise (a script, a test harness, a background job) the program gets
//!   a process group of its own and all six are passed on: a signal to `rnic exec`'s process
//!   group reaches the program once, through `rnic exec`. The handlers are signal-hook's
//!   (nothing runs in them but a write); the program starts with the default dispositions (a
//!   caught signal's is reset by `exec`) and the mask `rnic exec` was started with. The program
//!   is never signalled after it was reaped (the wait does not reap until forwarding stopped),
//!   so its process ID cannot have been reused.
//! * **After**: with `--check`, the program's report is read ([`super::check`]);
//!   `--on-death kernel` runs [`super::teardown`], then `rnic exec` exits with the program's
//!   status (but 3 under `--check=fail` for an exit 0 with findings): its exit code, or its
//!   signal raised again on `rnic exec` itself (with core dumps off: the program's core, if
//!   any, is the one that matters).

use super::device_files::{make_visible, Device, DeviceFiles, UVERBS};
use super::teardown;
use super::{program_env, ExecOptions, OnDeath};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use rnic::config::Config;
use rnic::runtime::SUPERVISOR_ENV;
use rnic::state_file::StateFile;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The signals passed on to the program.
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Those a terminal sends to its whole foreground process group.
const FROM_TERMINAL: [Signal; 3] = [Signal::SIGINT, Signal::SIGQUIT, Signal::SIGHUP];

/// The program's RNIC as the supervisor holds it.
struct Rnic {
    socket: UdpSocket,
    /// The state file, for reading after the death.
    state: StateFile,
    /// The descriptor the program inherits.
    state_fd: OwnedFd,
    /// The device name (`RNIC_DEVICE`).
    device: String,
}

/// Binds the socket and makes the state file; `Ok(None)` when the program's environment or
/// address is bad (the program's librnic then says why).
fn prepare(cmd: &Command) -> Result<Option<Rnic>, String> {
    let Ok(config) = Config::from_lookup(|k| program_env(cmd, k)) else {
        return Ok(None);
    };
    let Ok(socket) = rnic::runtime::bind(&config) else {
        return Ok(None);
    };
    let memfd =
        nix::sys::memfd::memfd_create(c"rnic-exec-state", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(|e| format!("cannot make the state file (memfd_create): {e}"))?;
    let dup = memfd.try_clone().map_err(|e| format!("state file: {e}"))?;
    let state = StateFile::create(std::fs::File::from(dup), std::process::id())
        .map_err(|e| format!("cannot size the state file: {e}"))?;
    Ok(Some(Rnic {
        socket,
        state,
        state_fd: memfd,
        device: config.device,
    }))
}

/// `--device-files`: makes the device's files visible to the program (before any thread is
/// started: a user namespace is entered only by a single-threaded process); `false` when
/// they were required and could not be made (the reason printed).
fn device_files(mode: DeviceFiles, rnic: Option<&Rnic>) -> bool {
    if mode == DeviceFiles::Off {
        return true;
    }
    let dev = Device {
        name: rnic.map_or_else(|| "rnic0".into(), |r| r.device.clone()),
        addr: rnic
            .and_then(|r| r.socket.local_addr().ok())
            .map(|a| a.ip()),
    };
    match make_visible(&dev) {
        Ok(o) => {
            tracing::debug!(?o, "rnic exec: device files");
            true
        }
        Err(e) => {
            eprintln!(
                "rnic exec: /dev/infiniband/{UVERBS} and /sys/class/infiniband/{} not made ({e}); \
                 programs that look for them (UCX) will not see the device{}",
                dev.name,
                if mode == DeviceFiles::Require {
                    ", and --device-files require was given"
                } else {
                    "; --device-files off silences this"
                }
            );
            mode != DeviceFiles::Require
        }
    }
}

/// Lets the program inherit `fd` (clears `FD_CLOEXEC`).
fn inheritable(fd: &impl AsFd) -> nix::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map(drop)
}

/// Whether this process is in the foreground process group of its controlling terminal.
fn in_terminal_foreground() -> bool {
    std::fs::File::open("/dev/tty")
        .ok()
        .and_then(|tty| nix::unistd::tcgetpgrp(&tty).ok())
        .is_some_and(|pg| pg == nix::unistd::getpgrp())
}

/// Set by `rnic check` on each `rnic exec` it starts: its own process ID. When that process
/// dies, even of SIGKILL, the kernel sends `rnic exec` SIGTERM (`PR_SET_PDEATHSIG`, prctl(2)),
/// which is passed on to the program like any SIGTERM: no run outlives its `rnic check`.
pub const DIE_WITH_ENV: &str = "RNIC_EXEC_DIE_WITH";

/// Asks for SIGTERM when the process named by [`DIE_WITH_ENV`] (the parent) dies, and keeps
/// the variable from the program. Returns `false` when that parent is gone already (the
/// signal would never come): the program must not start.
fn die_with_parent(cmd: &mut Command) -> bool {
    cmd.env_remove(DIE_WITH_ENV);
    let Some(parent) = std::env::var(DIE_WITH_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
    else {
        return true;
    };
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM) {
        eprintln!("rnic exec: cannot ask for a signal when rnic check dies ({e})");
    }
    // Checked after asking: a parent that died before is not our parent any more.
    if nix::unistd::getppid() != Pid::from_raw(parent) {
        eprintln!("rnic exec: rnic check (process {parent}) is gone; the program does not start");
        return false;
    }
    true
}

/// Runs the program (see the module docs) and returns the status to exit with.
pub fn run(opts: &ExecOptions, mut cmd: Command) -> ExitCode {
    // Caught from now on, queued until the forwarder runs.
    let signals = match signal_hook::iterator::Signals::new(FORWARDED.map(|s| s as std::ffi::c_int))
    {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("rnic exec: cannot catch signals ({e}): they are not passed on");
            None
        }
    };
    if !die_with_parent(&mut cmd) {
        return ExitCode::from(143);
    }
    let rnic = prepare(&cmd).unwrap_or_else(|e| {
        eprintln!("rnic exec: {e}; the program runs without a supervisor");
        None
    });
    cmd.env_remove(SUPERVISOR_ENV);
    if !device_files(opts.device_files, rnic.as_ref()) {
        return ExitCode::from(127);
    }
    if let Some(r) = &rnic {
        if let Err(e) = inheritable(&r.socket).and_then(|()| inheritable(&r.state_fd)) {
            eprintln!("rnic exec: cannot pass the RNIC to the program: {e}");
            return ExitCode::from(127);
        }
        cmd.env(
            SUPERVISOR_ENV,
            format!(
                "{}:{}:{}",
                std::process::id(),
                r.socket.as_raw_fd(),
                r.state_fd.as_raw_fd()
            ),
        );
    }
    let interactive = in_terminal_foreground();
    if !interactive {
        cmd.process_group(0);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let prog = opts
                .argv
                .first()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            eprintln!("rnic exec: {prog}: {e}");
            return ExitCode::from(127);
        }
    };
    let forwarder = Forwarder::new(Pid::from_raw(child.id() as i32), interactive);
    let (tx, rx) = mpsc::channel();
    if let Some(mut caught) = signals {
        let f = forwarder.clone();
        let spawned = std::thread::Builder::new()
            .name("rnic-exec-signals".into())
            .spawn(move || {
                for sig in caught.forever() {
                    if let Ok(sig) = Signal::try_from(sig) {
                        f.forward(sig);
                        let _ = tx.send(sig);
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!("rnic exec: cannot start the signal thread ({e}): signals are not passed on");
        }
    }
    let pid = child.id();
    let status = wait(&mut child, &forwarder);
    let checking = super::check::checking(opts.check, opts.check_report.as_deref());
    let failed = checking.and_then(|c| {
        let program = opts.argv.first().map(|p| p.to_string_lossy().into_owned());
        let n = c.findings(program.as_deref().unwrap_or(""), pid, status);
        super::check::verdict(c.mode, status, n)
    });
    if let (Some(r), OnDeath::Kernel) = (rnic, opts.on_death) {
        let linger = opts.linger.map(Duration::from_millis);
        match teardown::run(r.socket, &r.state, linger, status.code().is_some(), &rx) {
            Ok(o) => {
                tracing::info!(
                    status = %status,
                    destroyed = o.destroyed,
                    sent = ?o.sent,
                    "rnic exec: the program's connections finished as the kernel would"
                );
                if o.invalid > 0 || o.unpublished > 0 {
                    eprintln!(
                        "rnic exec: {} connection(s) of the program could not be finished \
                         ({} unreadable, {} never published)",
                        o.invalid + o.unpublished,
                        o.invalid,
                        o.unpublished
                    );
                }
            }
            Err(e) => eprintln!("rnic exec: {e}"),
        }
    }
    match failed {
        Some(code) => ExitCode::from(code),
        None => exit_as(status),
    }
}

/// Passes signals on to the program until it is reaped.
#[derive(Debug, Clone)]
struct Forwarder {
    /// The program, until it is reaped (`None` after).
    pid: Arc<Mutex<Option<Pid>>>,
    interactive: bool,
}

impl Forwarder {
    fn new(pid: Pid, interactive: bool) -> Forwarder {
        Forwarder {
            pid: Arc::new(Mutex::new(Some(pid))),
            interactive,
        }
    }

    fn forward(&self, sig: Signal) {
        if self.interactive && FROM_TERMINAL.contains(&sig) {
            return; // the terminal sent it to the program too
        }
        let pid = self.pid.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = *pid {
            let _ = kill(p, sig);
        }
    }

    /// No more forwarding: the program is about to be reaped.
    fn stop(&self) {
        *self.pid.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// Waits for the program's end without reaping it, stops the forwarding, then reaps it.
fn wait(child: &mut Child, forwarder: &Forwarder) -> ExitStatus {
    let pid = Pid::from_raw(child.id() as i32);
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => break,
            Err(e) => {
                eprintln!("rnic exec: waitid: {e}");
                break;
            }
        }
    }
    forwarder.stop();
    child
        .wait()
        .unwrap_or_else(|_| ExitStatus::from_raw(127 << 8))
}

/// The program's exit status as this process's: its exit code, or its signal raised again.
fn exit_as(status: ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(code as u8);
    }
    let Some(sig) = status.signal() else {
        return ExitCode::FAILURE;
    };
    // No core of this process: the program's is the one that matters.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_CORE) {
        // 1 byte: too small for a core file, and the kernel's "no core" for a core pipe.
        let _ = setrlimit(Resource::RLIMIT_CORE, hard.min(1), hard);
    }
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    // Still here: the signal does not end a process (or could not be raised).
    ExitCode::from((128 + sig).clamp(0, 255) as u8)
}
