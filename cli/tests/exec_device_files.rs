//! `rnic exec --device-files` (docs/capi.md, "Device files"): the program sees
//! `/dev/infiniband/uverbs0` as a character device it may read and write, and the device's
//! sysfs entries, in a mount namespace of its own; the host's `/dev` is unchanged; where no
//! namespace can be made, one line says so and the program runs (or, with `require`, does not).
//!
//! Addresses 127.0.165.1–3.

// The programs run under timeout(1).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

const RNIC: &str = env!("CARGO_BIN_EXE_rnic");

/// What the program prints: the uverbs file's type and access, then the sysfs entries.
const SHOW: &str = "stat -c '%F' /dev/infiniband/uverbs0 && test -r /dev/infiniband/uverbs0 \
    && test -w /dev/infiniband/uverbs0 && echo rw && \
    cat /sys/class/infiniband/rnic0/node_type /sys/class/infiniband/rnic0/ports/1/link_layer \
    /sys/class/infiniband/rnic0/ports/1/gid_attrs/types/0 /sys/class/infiniband/rnic0/ports/1/gids/0 \
    /sys/class/infiniband_verbs/uverbs0/ibdev && echo x >/dev/null && ls /dev/shm >/dev/null";

/// `prefix… rnic exec --addr ADDR extra… -- sh -c script`, under timeout(1).
fn run(prefix: &[&str], addr: &str, extra: &[&str], script: &str) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("30")
        .args(prefix)
        .args([RNIC, "exec", "--addr", addr])
        .args(extra)
        .args(["--", "sh", "-c", script]);
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether `prog args` exits 0 here.
fn works(prog: &str, args: &[&str]) -> bool {
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_program_sees_the_device_files_and_the_host_does_not() {
    if Path::new("/dev/infiniband/uverbs0").exists() {
        println!("SKIP: this host has an RDMA device (/dev/infiniband/uverbs0): nothing is made");
        return;
    }
    // As root the mount namespace alone; as another user (setpriv, when root can switch) a
    // user namespace too.
    let mut runs: Vec<Vec<&str>> = vec![vec![]];
    if is_root() && works("setpriv", &["--reuid", "65534", "true"]) {
        runs.push(vec![
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
        ]);
    }
    for prefix in runs {
        let o = run(&prefix, "127.0.165.1", &[], SHOW);
        let t = text(&o);
        assert!(o.status.success(), "{prefix:?}: {t}");
        let lines: Vec<&str> = std::str::from_utf8(&o.stdout)
            .unwrap_or_default()
            .lines()
            .collect();
        assert_eq!(
            lines,
            [
                "character special file",
                "rw",
                "1: CA",
                "Ethernet",
                "RoCE v2",
                "0000:0000:0000:0000:0000:ffff:7f00:a501",
                "rnic0",
            ],
            "{prefix:?}: {t}"
        );
        assert!(o.stderr.is_empty(), "{prefix:?}: nothing on stderr: {t}");
    }
    assert!(
        !Path::new("/dev/infiniband").exists()
            && !Path::new("/sys/class/infiniband/rnic0").exists(),
        "the host's /dev or /sys changed"
    );
    let off = run(
        &[],
        "127.0.165.2",
        &["--device-files", "off"],
        "test -e /dev/infiniband",
    );
    assert_eq!(
        off.status.code(),
        Some(1),
        "--device-files off: {}",
        text(&off)
    );
}

#[test]
fn without_namespaces_one_line_says_so() {
    if Path::new("/dev/infiniband/uverbs0").exists() {
        println!("SKIP: this host has an RDMA device: nothing is made");
        return;
    }
    // In a user namespace with no uid mapped, no further user namespace can be made (EPERM),
    // as where unprivileged user namespaces are not allowed.
    if !works("unshare", &["-U", "true"]) {
        println!("SKIP: unshare -U does not work here");
        return;
    }
    let prefix = ["unshare", "-U"];
    let o = run(
        &prefix,
        "127.0.165.3",
        &[],
        "test -e /dev/infiniband || echo ran",
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n", "{t}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {t}");
    assert!(
        err.starts_with("rnic exec: /dev/infiniband/uverbs0 and /sys/class/infiniband/rnic0 not made (unshare(CLONE_NEWUSER | CLONE_NEWNS): EPERM")
            && err.contains("--device-files off silences this"),
        "{t}"
    );
    let o = run(
        &prefix,
        "127.0.165.3",
        &["--device-files", "require"],
        "echo ran",
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(127), "{t}");
    assert!(o.stdout.is_empty(), "the program must not run: {t}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--device-files require was given"),
        "{t}"
    );
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}
