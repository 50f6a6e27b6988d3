//! Signalling a running `rnic` process in tests: start it with its output piped, wait (with a
//! deadline, polling) until it is busy or has children, send SIGINT/SIGTERM, collect its
//! output. Linux `/proc` only. Shared by `cli/tests/explore_cli.rs` and
//! `cli/tests/bench_cli.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]
// test helpers; each file uses some
// Real processes on the wall clock: deadlines are `Instant`s, pipes are drained by threads.
#![allow(clippy::disallowed_methods)]

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A process under test, its output read by threads of their own.
pub struct Running {
    pub child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
}

/// What it printed and how it ended.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

fn read_to_end(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Starts `program args` with stdout and stderr piped.
pub fn start(program: &str, args: &[&str]) -> Running {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the program");
    let out = read_to_end(child.stdout.take().unwrap());
    let err = read_to_end(child.stderr.take().unwrap());
    Running { child, out, err }
}

impl Running {
    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends it `sig`.
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid() as i32), sig).expect("kill(2)");
    }

    /// Polls `ready` (every 10 ms) until it holds; panics, killing the process, after
    /// `deadline` or if the process exits first.
    pub fn wait_until(
        &mut self,
        what: &str,
        deadline: Duration,
        mut ready: impl FnMut(u32) -> bool,
    ) {
        let until = Instant::now() + deadline;
        while !ready(self.pid()) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("exited ({status}) before {what}");
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("not {what} within {deadline:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for it to exit, at most `deadline` (then kills it and panics), and collects
    /// its output.
    pub fn end(mut self, deadline: Duration) -> Ended {
        let until = Instant::now() + deadline;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "did not exit within {deadline:?} of the signal; stderr:\n{}",
                    self.err.join().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Ended {
            status,
            stdout: self.out.join().unwrap(),
            stderr: self.err.join().unwrap(),
        }
    }
}

/// The fields of `/proc/PID/stat` after the command name (field 3, the state, first), or
/// `None` when there is no such process.
fn stat(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU time `pid` has used, in clock ticks (utime + stime, fields 14 and 15).
pub fn cpu_ticks(pid: u32) -> u64 {
    stat(pid).map_or(0, |f| {
        f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
    })
}

/// A process, named by its ID and start time (field 22) so that a reused ID is not taken
/// for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub start: String,
    pub cmdline: String,
}

impl Proc {
    /// True while it exists and is not a zombie.
    pub fn alive(&self) -> bool {
        stat(self.pid).is_some_and(|f| f[19] == self.start && f[0] != "Z" && f[0] != "X")
    }
}

/// The live children of `parent` (not zombies).
pub fn children(parent: u32) -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(f) = stat(pid) else { continue };
        if f[1] == parent.to_string() && f[0] != "Z" {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            out.push(Proc {
                pid,
                start: f[19].clone(),
                cmdline,
            });
        }
    }
    out
}
