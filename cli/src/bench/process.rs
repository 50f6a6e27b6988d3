//! The other processes of a measurement ([`Proc`]): started with their stdout and stderr
//! piped, read line by line while they run (a readiness line), then collected with a
//! deadline; killed (by their own id) if they are still running when dropped.
//!
//! Every child still running is also listed process-wide, so that [`kill_all`] can kill and
//! reap them: it runs on the first SIGINT or SIGTERM ([`crate::interrupt`], once the program
//! installed it), so that an interrupted `rnic bench` leaves no `rnic ping` or `bench-peer`
//! behind — a child is not told of its parent's death, and would run on.

// Real processes on the wall clock: a deadline is an `Instant`, and the pipes are drained by
// threads of their own so that a chatty child never blocks on a full pipe. The workspace's
// clippy.toml forbids both in the simulated, deterministic path only.
#![allow(clippy::disallowed_methods)]

use super::BenchError;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, Once, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The children [`Proc::spawn`] started and no [`Proc`] has dropped yet.
struct Children {
    /// [`kill_all`] ran: no more children.
    stopped: bool,
    /// The next key of `live`.
    next: u64,
    /// Each child, shared with its [`Proc`]; reaped only under its lock, so that a kill
    /// never reaches a process ID the system gave to another process since.
    live: BTreeMap<u64, Arc<Mutex<Child>>>,
}

static CHILDREN: Mutex<Children> = Mutex::new(Children {
    stopped: false,
    next: 0,
    live: BTreeMap::new(),
});

/// Registers [`kill_all`] with [`crate::interrupt::on_interrupt`] (once).
static KILL_ON_INTERRUPT: Once = Once::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Kills (SIGKILL, `Child::kill`) and reaps every child of [`Proc::spawn`] still running, and
/// makes every later [`Proc::spawn`] fail: run on the first SIGINT/SIGTERM (after
/// [`crate::interrupt::install`]), and by `rnic bench` before it reports an interruption.
pub fn kill_all() {
    let mut children = lock(&CHILDREN);
    children.stopped = true;
    for child in children.live.values() {
        let mut c = lock(child);
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a finished process printed, and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// Everything it wrote to stdout after the lines read with [`Proc::read_line`].
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

/// A child process: `what` names it in errors.
#[derive(Debug)]
pub struct Proc {
    what: String,
    /// Its key in [`CHILDREN`].
    key: u64,
    child: Arc<Mutex<Child>>,
    stdout: Option<BufReader<ChildStdout>>,
    stderr: Option<JoinHandle<String>>,
}

/// `r` to its end, as text (a read error ends it: what was read is still worth showing).
fn read_all(mut r: impl Read) -> String {
    let mut bytes = Vec::new();
    let _ = r.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Reads `r` to its end on a thread of its own; the text arrives on the returned channel.
fn drain(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(read_all(r));
    });
    rx
}

impl Proc {
    /// Starts `cmd` (stdin closed, stdout and stderr piped); `what` names it in errors.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the program cannot be started; [`BenchError::Process`] after
    /// [`kill_all`] (an interruption).
    pub fn spawn(what: impl Into<String>, mut cmd: Command) -> Result<Proc, BenchError> {
        let what = what.into();
        KILL_ON_INTERRUPT.call_once(|| {
            crate::interrupt::on_interrupt(kill_all);
        });
        // Started under the lock: `kill_all` either runs first (and nothing starts) or sees
        // the child.
        let mut children = lock(&CHILDREN);
        if children.stopped {
            return Err(BenchError::Process(format!(
                "not starting {what}: interrupted"
            )));
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::io(format!("cannot start {what} ({cmd:?})"), e))?;
        let stdout = child.stdout.take().map(BufReader::new);
        let stderr = child
            .stderr
            .take()
            .map(|e| std::thread::spawn(move || read_all(e)));
        let key = children.next;
        children.next += 1;
        let child = Arc::new(Mutex::new(child));
        children.live.insert(key, Arc::clone(&child));
        Ok(Proc {
            what,
            key,
            child,
            stdout,
            stderr,
        })
    }

    /// The next line of its stdout, without the line end.
    ///
    /// # Errors
    /// [`BenchError::Process`] when it closed its stdout (exited) first, with what it wrote
    /// to stderr; [`BenchError::Io`] on a read error.
    pub fn read_line(&mut self) -> Result<String, BenchError> {
        let mut line = String::new();
        let n = match self.stdout.as_mut() {
            Some(out) => out
                .read_line(&mut line)
                .map_err(|e| BenchError::io(format!("reading {}'s output", self.what), e))?,
            None => 0,
        };
        if n == 0 {
            self.kill();
            let err = self.take_stderr();
            return Err(BenchError::Process(format!(
                "{} ended before printing a line; stderr:\n{err}",
                self.what
            )));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    /// Waits for it to exit, at most `deadline` (then kills it), and collects its output.
    ///
    /// # Errors
    /// [`BenchError::Process`] when it did not exit within `deadline`.
    pub fn finish(mut self, deadline: Duration) -> Result<Finished, BenchError> {
        let out = self.stdout.take().map(drain);
        // The pipe closes when the process exits (or closes it): then its text arrives.
        let stdout = match out {
            Some(rx) => match rx.recv_timeout(deadline) {
                Ok(s) => s,
                Err(_) => {
                    self.kill();
                    let err = self.take_stderr();
                    return Err(BenchError::Process(format!(
                        "{} did not finish within {deadline:?}; stderr:\n{err}",
                        self.what
                    )));
                }
            },
            None => String::new(),
        };
        let status = self
            .wait()
            .map_err(|e| BenchError::io(format!("waiting for {}", self.what), e))?;
        Ok(Finished {
            status,
            stdout,
            stderr: self.take_stderr(),
        })
    }

    /// Like [`finish`](Self::finish), but it must also have exited with status 0.
    ///
    /// # Errors
    /// As [`finish`](Self::finish); [`BenchError::Process`] for another exit status, with
    /// its output.
    pub fn finish_ok(self, deadline: Duration) -> Result<Finished, BenchError> {
        let what = self.what.clone();
        let f = self.finish(deadline)?;
        if f.status.success() {
            Ok(f)
        } else {
            Err(BenchError::Process(format!(
                "{what} failed ({}); stdout:\n{}\nstderr:\n{}",
                f.status, f.stdout, f.stderr
            )))
        }
    }

    /// What it wrote to stderr (once it has closed it; empty the second time).
    fn take_stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }

    /// Waits for it to exit (it has closed its stdout: it is exiting). Polls, so that
    /// [`kill_all`] never waits for the lock of a child that has not exited.
    fn wait(&self) -> std::io::Result<ExitStatus> {
        let mut pause = Duration::from_micros(100);
        loop {
            if let Some(status) = lock(&self.child).try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    fn kill(&mut self) {
        let mut child = lock(&self.child);
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        lock(&CHILDREN).live.remove(&self.key);
    }
}

/// Runs `cmd` to its end (at most `deadline`): its exit status and output.
///
/// # Errors
/// As [`Proc::spawn`] and [`Proc::finish`].
pub fn run(
    what: impl Into<String>,
    cmd: Command,
    deadline: Duration,
) -> Result<Finished, BenchError> {
    Proc::spawn(what, cmd)?.finish(deadline)
}
