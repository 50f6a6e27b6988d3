//! What the tests that load librnic.so share: re-running the test binary in a child process
//! whose libibverbs.so.1 is librnic.so (the dynamic loader reads `LD_LIBRARY_PATH` when the
//! process starts, and the backend keeps the library it loaded for the process's life, so the
//! parent cannot switch), and helpers to set up and wait on QPs.

#![allow(dead_code, unsafe_code, clippy::unwrap_used, clippy::expect_used)] // each binary uses a part

use rnic_hw::HwDevice;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use verbs_core::{
    AccessFlags, CompChannel, CqHandle, Device, Gid, Mtu, QpAttr, QpAttrMask, QpHandle, QpState,
    WorkCompletion,
};

/// Set in the child to the name of the test it runs.
pub const CHILD: &str = "RNIC_HW_TEST_CHILD";

/// What the child's `LD_LIBRARY_PATH` directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    /// `libibverbs.so.1` and `librdmacm.so.1`, symlinks to librnic.so.
    Rnic,
    /// Nothing: the system's libibverbs is found, if installed.
    Empty,
    /// A `libibverbs.so.1` that is not a shared object: `dlopen` fails (glibc stops at the
    /// first file of that name instead of searching on), so libibverbs is missing for sure.
    NotElf,
}

/// True in the child process that runs test `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD).as_deref() == Ok(name)
}

/// librnic.so, built by cargo as a dev-dependency beside the test binary
/// (target/<profile>/deps) or one level up (refreshed only when rnic-capi itself is built):
/// the newer of the two.
pub fn librnic() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    let newest = [Some(deps), deps.parent()]
        .into_iter()
        .flatten()
        .map(|dir| dir.join("librnic.so"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t);
    if let Some((_, p)) = newest {
        return p;
    }
    panic!(
        "librnic.so not found next to {} (cargo builds it as the dev-dependency rnic-capi; \
         try `cargo build -p rnic-capi`)",
        exe.display()
    );
}

fn lib_dir(name: &str, lib: Lib) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rnic-hw-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    match lib {
        Lib::Rnic => {
            let so = librnic();
            for link in ["libibverbs.so.1", "librdmacm.so.1"] {
                std::os::unix::fs::symlink(&so, dir.join(link)).expect("symlink");
            }
        }
        Lib::Empty => {}
        Lib::NotElf => {
            std::fs::write(dir.join("libibverbs.so.1"), "not a shared object\n").expect("write");
        }
    }
    dir
}

/// Runs test `name` of this binary again in a child process with `LD_LIBRARY_PATH` holding
/// `lib`, `RNIC_ADDR=addr` and `RNIC_FAST_TIMERS=1`; forwards its output and asserts that it
/// ran that one test and passed.
pub fn run_child(name: &str, addr: &str, lib: Lib) {
    let dir = lib_dir(name, lib);
    let out = Command::new(std::env::current_exe().expect("current_exe"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", &dir)
        .env("RNIC_ADDR", addr)
        .env("RNIC_FAST_TIMERS", "1")
        .env(CHILD, name)
        .output()
        .expect("run the test binary");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "--- child {name} (LD_LIBRARY_PATH={}) stdout:\n{stdout}",
        dir.display()
    );
    eprintln!("--- child {name} stderr:\n{stderr}");
    assert!(out.status.success(), "child {name} failed: {}", out.status);
    assert!(
        stdout.contains("1 passed"),
        "child {name} did not run its test"
    );
}

/// True when the library loaded as libibverbs.so.1 is the system's (its name is in
/// /proc/self/maps), false when nothing is loaded under that name.
pub fn real_libibverbs_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .map(|m| m.contains("libibverbs.so.1"))
        .unwrap_or(false)
}

/// `poll(2)` on `fds` for readability, at most `ms` milliseconds: true when one is readable.
pub fn wait_readable(fds: &[RawFd], ms: i32) -> bool {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` is an array of `p.len()` initialised pollfd structs, alive for the call.
    let n = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    n > 0
}

/// Every remote access right.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// RESET → INIT → RTR → RTS of an RC QP towards `remote_qpn` at `dgid` (see [`to_rtr`]).
pub fn connect(dev: &mut HwDevice, qp: QpHandle, remote_qpn: u32, dgid: Gid) {
    use QpAttrMask as M;
    to_rtr(dev, qp, remote_qpn, dgid);
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 100,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let m = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    dev.modify_qp(qp, &rts, m).expect("RTR -> RTS");
}

/// RESET → INIT → RTR of an RC QP towards `remote_qpn` at `dgid`. The address vector
/// deliberately has no GRH flag, a wrong source GID index and port: the device must fill those
/// in (and clamp the 4096-byte path MTU to the port's).
pub fn to_rtr(dev: &mut HwDevice, qp: QpHandle, remote_qpn: u32, dgid: Gid) {
    use QpAttrMask as M;
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 7,
        qp_access_flags: all_access(),
        ..QpAttr::default()
    };
    dev.modify_qp(
        qp,
        &init,
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    )
    .expect("RESET -> INIT");
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu4096,
        dest_qp_num: remote_qpn,
        rq_psn: 100,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    rtr.ah_attr.grh.dgid = dgid;
    rtr.ah_attr.grh.hop_limit = 64;
    rtr.ah_attr.grh.sgid_index = 9;
    rtr.ah_attr.is_global = false;
    rtr.ah_attr.port_num = 7;
    let m = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    dev.modify_qp(qp, &rtr, m).expect("INIT -> RTR");
}

/// Polls `cq` until `n` completions arrived (at most 10 s), sleeping on the device's event
/// descriptors between polls as an event-driven application does (arm, re-poll, `poll(2)`,
/// `process_events`, take the CQ events from `chan`). Returns the completions and how many CQ
/// events `chan` delivered.
#[allow(clippy::disallowed_methods)] // a test waits on the wall clock
pub fn collect(
    dev: &mut HwDevice,
    chan: &CompChannel,
    cq: CqHandle,
    n: usize,
) -> (Vec<WorkCompletion>, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    let mut events = 0;
    loop {
        dev.poll_cq(cq, 64, &mut out).expect("poll_cq");
        if out.len() >= n {
            break;
        }
        dev.req_notify_cq(cq, false).expect("req_notify_cq");
        dev.poll_cq(cq, 64, &mut out).expect("poll_cq");
        if out.len() >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} completions after 10 s: {out:?}",
            out.len()
        );
        if wait_readable(&dev.event_fds(), 100) {
            dev.process_events();
        }
        while let Ok(h) = chan.try_get_cq_event() {
            assert_eq!(h, cq);
            events += 1;
        }
    }
    assert_eq!(out.len(), n, "more completions than expected: {out:?}");
    (out, events)
}
