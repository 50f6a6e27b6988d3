//! SIGINT, SIGTERM and SIGHUP for the `rnic` commands: the first asks the work in progress to stop
//! cleanly (a ping session disconnects, so that the peer gets its DREQ as it would from a
//! Linux kernel destroying a dying process's ids; `explore` stops handing out seeds) and to
//! report what it did; a second one ends the process at once.
//!
//! [`install`] starts one thread that receives the signals (signal-hook's self-pipe: nothing
//! runs in the signal handler but a write). Work polls [`requested`]; a waiter blocked on
//! something else registers a [`on_interrupt`] callback that wakes it. Library users who never
//! call [`install`] see [`requested`] stay false.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, PoisonError};

/// The first signal received (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Whether [`install`] ran.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Callbacks run (on the signal thread) when the first signal arrives.
type Waker = Box<dyn Fn() + Send>;
static WAKERS: Mutex<Vec<Waker>> = Mutex::new(Vec::new());

/// `SIGINT` (2).
pub const SIGINT: i32 = signal_hook::consts::SIGINT;
/// `SIGTERM` (15).
pub const SIGTERM: i32 = signal_hook::consts::SIGTERM;
/// `SIGHUP` (1): the terminal went away (an ssh session closed); treated as SIGTERM.
pub const SIGHUP: i32 = signal_hook::consts::SIGHUP;

/// Catches SIGINT, SIGTERM and SIGHUP from now on: the first sets [`requested`] and runs the
/// [`on_interrupt`] callbacks; a second one exits the process with status 128 + its number
/// (130 for SIGINT), as the default action's status would read in a shell.
///
/// # Errors
/// The signal handlers cannot be installed (`sigaction` failed) or the thread not started.
pub fn install() -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("rnic-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if SIGNAL
                    .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    eprintln!("rnic: second signal ({}): exiting now", name_of(sig));
                    std::process::exit(128 + sig);
                }
                let wakers = WAKERS.lock().unwrap_or_else(PoisonError::into_inner);
                for w in wakers.iter() {
                    w();
                }
            }
        })?;
    INSTALLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived (after [`install`]).
pub fn requested() -> bool {
    SIGNAL.load(Ordering::SeqCst) != 0
}

/// The first signal received, if any: [`SIGINT`], [`SIGTERM`] or [`SIGHUP`].
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The name of the first signal received: `SIGINT`, `SIGTERM`, or `none`.
pub fn signal_name() -> &'static str {
    signal().map_or("none", name_of)
}

/// The exit status of an interrupted command: 128 + the signal's number (130 for SIGINT, 143
/// for SIGTERM), as a shell reports a process the signal killed; 130 if none arrived.
pub fn exit_status() -> u8 {
    (128 + signal().unwrap_or(SIGINT)).clamp(0, 255) as u8
}

/// Runs `wake` when the first signal arrives (at once if one already has): for a thread
/// blocked on a condition variable that [`requested`] alone would not end. Does nothing
/// before [`install`] (a library user's process, whose signals are its own business): the
/// callbacks are kept for the life of the process.
pub fn on_interrupt(wake: impl Fn() + Send + 'static + Clone) {
    if !INSTALLED.load(Ordering::SeqCst) {
        return;
    }
    WAKERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Box::new(wake.clone()));
    // Registered first, checked after: a signal that came in between has either run the
    // callback or is seen here (at worst both: a second wake-up is harmless).
    if requested() {
        wake();
    }
}

/// The name of signal `sig` (one [`install`] catches).
fn name_of(sig: i32) -> &'static str {
    match sig {
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "SIGINT",
    }
}
