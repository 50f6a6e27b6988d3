//! `rnic exec`: runs an unmodified RDMA program on a simulated RNIC of its own, by preloading
//! `librnic.so` (the `rnic-capi` crate) and setting its environment (`docs/capi.md`).
//!
//! `rnic exec` stays the program's parent and plays the part of the RNIC that the kernel owns
//! on Linux, which outlives the program: it binds the RNIC's socket and makes the state file
//! (both inherited by the program, `rnic::state_file`), forwards signals, and when the program
//! dies, however, finishes its connections as `ucma_close` and the CM would before exiting with
//! the program's status. Files: [`supervise`] (start, signals, wait, exit status), [`teardown`]
//! (the CM that speaks for the dead program), [`check`] (`--check`: the checker's switch and
//! its report), [`device_files`] (`/dev/infiniband` and `/sys/class/infiniband` for UCX).

pub mod check;
pub mod device_files;
pub mod supervise;
pub mod teardown;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The library's file name.
pub const LIB_NAME: &str = "librnic.so";

/// What `rnic exec` was asked for (its command line).
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct ExecOptions {
    /// IP of this RNIC (its GID; RoCEv2 on UDP 4791 of it). Sets RNIC_ADDR; without it the
    /// library takes the first free loopback address.
    #[arg(long, value_parser = parse_ip)]
    pub addr: Option<String>,
    /// Device name (`ibv_devices`, `-d` of perftest). Sets RNIC_DEVICE.
    #[arg(long)]
    pub device: Option<String>,
    /// Active MTU in bytes (256, 512, 1024, 2048 or 4096). Sets RNIC_MTU.
    #[arg(long, value_parser = crate::ping::cli::parse_mtu)]
    pub mtu: Option<u32>,
    /// Drop each datagram, in either direction, with this probability. Sets RNIC_DROP_RATE.
    #[arg(long, value_parser = parse_probability)]
    pub drop_rate: Option<f64>,
    /// Seed of the drops and of the CM's identifiers (default: from the OS). Sets RNIC_SEED.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Short CM and transport timers, as `ping --fast-timers`. Sets RNIC_FAST_TIMERS=1.
    #[arg(long)]
    pub fast_timers: bool,
    /// Remove the RNIC this many ms after the program starts using it, as a hot-unplug does:
    /// every rdma_cm id gets RDMA_CM_EVENT_DEVICE_REMOVAL, the context IBV_EVENT_DEVICE_FATAL,
    /// QPs are flushed and verbs answer EIO. Sets RNIC_REMOVE_DEVICE_MS.
    #[arg(long, value_name = "MS")]
    pub remove_device_after: Option<u64>,
    /// A fault on this RNIC (repeatable, or `;`-separated as in RNIC_FAULTS): e.g.
    /// `drop:REQ:1`, `drop:rc:1s:500ms`, `partition:1s:3s`, `silence:2s`,
    /// `remove:on:ESTABLISHED`, `kill:after:3:completions` (grammar: docs/check.md, "Faults").
    /// Random choices come from --seed. Sets RNIC_FAULTS.
    #[arg(long = "fault", value_name = "SPEC", value_parser = parse_faults)]
    pub faults: Vec<String>,
    /// The library to preload (default: librnic.so beside this executable, or RNIC_LIB).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// What the program's peers see when it dies without closing its connections (a signal, a
    /// crash): `kernel`, what Linux does — its connections are destroyed (DREQ when connected,
    /// REJ in a handshake) and the RNIC still answers for a while; `power-loss`, a host that
    /// vanished — nothing is sent.
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = OnDeath::Kernel)]
    pub on_death: OnDeath,
    /// After the program's death, answer its peers this long (ms) before exiting (default: the
    /// CM's TimeWait, 512 ms with Linux's timers, 16 ms with --fast-timers).
    #[arg(long, value_name = "MS")]
    pub linger: Option<u64>,
    /// Also preload rdma-core's librspreload.so (after librnic.so): the program's TCP sockets
    /// become rsockets on this RNIC (RNIC_RSPRELOAD names the library). docs/capi.md.
    #[arg(long)]
    pub rsockets: bool,
    /// Whether the program sees `/dev/infiniband/uverbs0` and `/sys/class/infiniband/<device>`,
    /// which UCX looks for: `auto` makes them, where they are missing, in a mount namespace of
    /// the program's own (unprivileged: needs user namespaces), and says in one line when it
    /// cannot; `require` refuses to start the program then; `off` never makes them.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = device_files::DeviceFiles::Auto)]
    pub device_files: device_files::DeviceFiles,
    /// Check the program's teardown and use of verbs and rdma_cm against the rules of
    /// docs/check.md; the findings are printed on stderr when it ends (exit, SIGINT, SIGTERM,
    /// a crash). `--check=fail`: a program that exited 0 with findings makes `rnic exec` exit
    /// with 3. Sets RNIC_CHECK.
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true,
          default_missing_value = "report", value_name = "MODE")]
    pub check: Option<check::CheckMode>,
    /// Also write the check's report as JSON to FILE (implies --check). Sets
    /// RNIC_CHECK_REPORT.
    #[arg(long, value_name = "FILE")]
    pub check_report: Option<PathBuf>,
    /// The program and its arguments (`--` before them is optional unless the program's name
    /// starts with `-`).
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub argv: Vec<OsString>,
}

/// What `rnic exec` does when the program dies (`--on-death`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDeath {
    /// What the kernel does on Linux (`ucma_close`, `cm_destroy_id`): DREQ, REJ or DREP as
    /// each connection's state calls for, then answer as a CM with no ids.
    #[default]
    Kernel,
    /// Nothing: the RNIC vanishes with the program, as a host losing power.
    PowerLoss,
}

fn parse_ip(s: &str) -> Result<String, String> {
    s.parse::<std::net::IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| format!("{s:?} is not an IP address (e.g. 127.0.0.2)"))
}

/// Parses a `--fault`: one spec, or several separated by `;` as in `RNIC_FAULTS`; returns
/// them `;`-separated.
///
/// # Errors
/// The first bad spec (one line), or none given.
pub fn parse_faults(s: &str) -> Result<String, String> {
    let list = rnic::inject::spec::parse_list(s)?;
    if list.is_empty() {
        return Err("no fault given".into());
    }
    Ok(list
        .iter()
        .map(|f| f.text.as_str())
        .collect::<Vec<_>>()
        .join(";"))
}

/// Where `name` is, as `execvp` would look for it: the file itself when the name has a `/`,
/// else the first file of that name in a directory of `PATH`.
pub fn find_program(name: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let is_file = |p: &Path| p.is_file().then(|| p.to_path_buf());
    if name.as_bytes().contains(&b'/') {
        return is_file(Path::new(name));
    }
    if name.is_empty() {
        return None;
    }
    std::env::split_paths(&std::env::var_os("PATH")?).find_map(|d| is_file(&d.join(name)))
}

fn parse_probability(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|p| (0.0..=1.0).contains(p))
        .ok_or_else(|| format!("{s:?} is not a probability 0 … 1"))
}

/// Where `librnic.so` is: `$RNIC_LIB`, else beside the running executable (`target/<profile>/`,
/// where cargo puts it when `rnic-capi` is built as a workspace member) or in its `deps/`
/// (where it is when built as a dependency of `rnic`), the newer of the two.
pub fn find_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RNIC_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let mut candidates = vec![dir.join(LIB_NAME), dir.join("deps").join(LIB_NAME)];
    // A test binary lives in target/<profile>/deps itself.
    if let Some(up) = dir.parent() {
        candidates.push(up.join(LIB_NAME));
    }
    // Cargo refreshes the copy in deps/ whenever rnic-capi is rebuilt as a dependency, but the
    // one beside the executable only when rnic-capi itself is built: take the newer.
    candidates
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
}

/// The command that runs `opts.argv` with the library preloaded and the options as
/// environment variables (an `LD_PRELOAD` already set is kept, after ours).
///
/// # Errors
/// No program given; the library not found (the message says how to build it).
pub fn command(opts: &ExecOptions) -> Result<Command, String> {
    let Some((prog, args)) = opts.argv.split_first() else {
        return Err("no program given: rnic exec [OPTIONS] -- PROGRAM [ARGS...]".into());
    };
    let lib = match &opts.lib {
        Some(l) => l.clone(),
        None => find_library().ok_or_else(|| {
            format!(
                "{LIB_NAME} not found beside {} (build it with `cargo build --release` at the repository's top, \
                 or name it with --lib or RNIC_LIB)",
                std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "rnic".into())
            )
        })?,
    };
    if !lib.is_file() {
        return Err(format!("{}: no such file", lib.display()));
    }
    let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
    let mut existing = std::env::var_os("LD_PRELOAD").filter(|e| !e.is_empty());
    if opts.rsockets {
        let rs = crate::rspreload::find_rspreload()?;
        existing = Some(crate::rspreload::after_librnic(rs.as_os_str(), existing));
    }
    let mut cmd = Command::new(prog);
    cmd.args(args);
    cmd.env("LD_PRELOAD", preload_value(&lib, existing));
    let mut set = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    };
    set("RNIC_ADDR", opts.addr.clone());
    set("RNIC_DEVICE", opts.device.clone());
    set("RNIC_MTU", opts.mtu.map(|m| m.to_string()));
    set("RNIC_DROP_RATE", opts.drop_rate.map(|p| p.to_string()));
    set("RNIC_SEED", opts.seed.map(|s| s.to_string()));
    set(
        "RNIC_REMOVE_DEVICE_MS",
        opts.remove_device_after.map(|ms| ms.to_string()),
    );
    set(
        "RNIC_FAULTS",
        (!opts.faults.is_empty()).then(|| opts.faults.join(";")),
    );
    set(
        "RNIC_FAST_TIMERS",
        opts.fast_timers.then(|| "1".to_string()),
    );
    if let Some(c) = check::checking(opts.check, opts.check_report.as_deref()) {
        c.set_env(&mut cmd);
    }
    Ok(cmd)
}

fn preload_value(lib: &Path, existing: Option<OsString>) -> OsString {
    let mut v = lib.as_os_str().to_os_string();
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(e);
    }
    v
}

/// What `get(name)` is in the program's environment: the value `cmd` sets, else this
/// process's.
fn program_env(cmd: &Command, name: &str) -> Option<String> {
    for (k, v) in cmd.get_envs() {
        if k == name {
            return v.map(|v| v.to_string_lossy().into_owned());
        }
    }
    std::env::var(name).ok()
}

/// `rnic exec`: runs the program under a supervisor (see the module docs) and returns its exit
/// status; a program killed by a signal has that signal re-raised on `rnic` itself, so that
/// the shell sees the same death. Errors before the program starts are printed; their status
/// is 127.
pub fn main(opts: &ExecOptions) -> std::process::ExitCode {
    // `--check fail -- prog` gives `--check` no value (it takes one only after `=`) and would
    // run a program named `fail`.
    if let (Some(_), Some(prog)) = (opts.check, opts.argv.first()) {
        let mode = prog.to_string_lossy();
        if ["fail", "report"].contains(&mode.as_ref()) && find_program(prog).is_none() {
            eprintln!(
                "rnic exec: `--check {mode}` would run a program named {mode}: write --check={mode}"
            );
            return std::process::ExitCode::from(2);
        }
    }
    let cmd = match command(opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rnic exec: {e}");
            return std::process::ExitCode::from(127);
        }
    };
    // A bad variable in the environment (RNIC_MTU, RNIC_SEED, RNIC_STATS, RNIC_FAULTS, …) is
    // refused before the program starts, with librnic's own rules, as a bad option is.
    if let Err(e) = rnic::config::Config::from_lookup(|k| program_env(&cmd, k)) {
        eprintln!("rnic exec: {e}");
        return std::process::ExitCode::from(2);
    }
    // The report's file is made by the program at its end: a path it cannot write is refused
    // now, not after the run.
    if let Some(p) = opts.check_report.as_deref() {
        if let Err(e) = std::fs::File::create(p).and_then(|_| std::fs::remove_file(p)) {
            eprintln!("rnic exec: --check-report {}: {e}", p.display());
            return std::process::ExitCode::from(2);
        }
    }
    supervise::run(opts, cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preload_keeps_an_existing_one_after_ours() {
        let v = preload_value(Path::new("/x/librnic.so"), Some("/y/other.so".into()));
        assert_eq!(v, OsString::from("/x/librnic.so:/y/other.so"));
        let v = preload_value(Path::new("/x/librnic.so"), Some("".into()));
        assert_eq!(v, OsString::from("/x/librnic.so"));
    }

    #[test]
    fn options_become_the_environment() {
        let dir = std::env::temp_dir().join(format!("rnic-exec-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let lib = dir.join(LIB_NAME);
        let _ = std::fs::write(&lib, b"");
        let opts = ExecOptions {
            addr: Some("127.0.0.7".into()),
            mtu: Some(4096),
            fast_timers: true,
            lib: Some(lib),
            argv: vec!["true".into()],
            ..ExecOptions::default()
        };
        let cmd = command(&opts).unwrap_or_else(|e| panic!("{e}"));
        let env: Vec<(String, String)> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
            .collect();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("RNIC_ADDR"), Some("127.0.0.7"));
        assert_eq!(get("RNIC_MTU"), Some("4096"));
        assert_eq!(get("RNIC_FAST_TIMERS"), Some("1"));
        assert_eq!(get("RNIC_SEED"), None);
        assert!(get("LD_PRELOAD").is_some_and(|v| v.ends_with(LIB_NAME)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_program_is_an_error() {
        assert!(command(&ExecOptions::default()).is_err());
    }
}
