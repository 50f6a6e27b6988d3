//! `rnic check -- SERVER… -- CLIENT…`: runs a server and a client, each under `rnic exec`
//! with the checker (`--check --check-report`) on its own address,
//! many times, each run with faults drawn from its seed; a run fails on a finding, a hang, a
//! crash or an unexpected exit status. Prints a summary with the failing seeds and the
//! commands that rerun them, and "sometimes" counters. docs/check.md, "rnic check".
//! Files: [`draw`] (the faults of a seed), [`run`] (one run and its verdict), [`summary`].

pub mod draw;
pub mod run;
pub mod summary;

use draw::Side;
use run::{Expect, SideSpec};
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// `rnic check`'s command line.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckOptions {
    /// Number of runs (seeds `--seed` … `--seed + N − 1`).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: u64,
    /// Runs at a time; job J puts its programs on the addresses plus 2·J.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: u64,
    /// The first run's seed (default: drawn from the OS, and printed, so that two campaigns
    /// run different seeds).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run this one seed only (overrides --runs and --seed), and print its commands and logs.
    #[arg(long, value_name = "SEED")]
    pub rerun: Option<u64>,
    /// Fault classes each run draws one fault from (comma-separated): none, cm-drop, cm-dup,
    /// cm-delay, rc, partition, kill, remove, silence.
    #[arg(long, value_name = "CLASSES", value_parser = draw::parse_classes)]
    pub faults: Option<draw::Classes>,
    /// A fault on the server in every run (repeatable, or `;`-separated; `rnic exec --fault`).
    /// With explicit faults and no --faults, nothing is drawn.
    #[arg(long, value_name = "SPEC", value_parser = parse_spec)]
    pub server_fault: Vec<String>,
    /// A fault on the client in every run (repeatable, or `;`-separated).
    #[arg(long, value_name = "SPEC", value_parser = parse_spec)]
    pub client_fault: Vec<String>,
    /// Faults at a time (partitions, RC windows, `kill:`/`remove:`/`silence:` at T) are drawn
    /// in the first MS ms of each RNIC's life: about how long the programs run.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    pub window: u64,
    /// Seconds a run may take (from the server's start) before it counts as a hang.
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = parse_secs)]
    pub timeout: f64,
    /// Milliseconds between the server's start and the client's.
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub server_delay: u64,
    /// The exit status both programs must end with: a number, or `any` (any exit, no signal).
    #[arg(long, value_name = "N|any", default_value = "0", value_parser = parse_expect)]
    pub expect_exit: Expect,
    /// A finding of this checker rule fails no run (repeatable, or comma-separated): a known
    /// bug of the program, such as rping's `destroy-id-with-qp`, that would fail every run.
    /// A failing run's reports keep them; a passing run's logs are not kept.
    #[arg(long = "allow", value_name = "RULE", value_delimiter = ',', value_parser = parse_rule)]
    pub allow: Vec<String>,
    /// The server's address (`{server}` in the arguments).
    #[arg(long, default_value = "127.0.200.1")]
    pub server_addr: Ipv4Addr,
    /// The client's address (`{client}` in the arguments).
    #[arg(long, default_value = "127.0.200.2")]
    pub client_addr: Ipv4Addr,
    /// Linux's CM and transport timers instead of `--fast-timers` (a lost DREQ then takes
    /// seconds, not milliseconds).
    #[arg(long)]
    pub linux_timers: bool,
    /// Print the summary as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Where the runs' logs and reports go (default: a new directory under the temporary
    /// directory); the failing runs' are kept.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// `SERVER ARGS… -- CLIENT ARGS…`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "SERVER… -- CLIENT…"
    )]
    pub programs: Vec<OsString>,
}

fn parse_spec(s: &str) -> Result<String, String> {
    crate::exec::parse_faults(s)
}

fn parse_secs(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0 && *v < 1e6)
        .ok_or_else(|| format!("{s:?} is not a number of seconds > 0"))
}

fn parse_rule(s: &str) -> Result<String, String> {
    let names = rnic::check::rules::Rule::ALL.map(|r| r.name());
    if names.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a rule of the checker: {}",
            names.join(", ")
        ))
    }
}

fn parse_expect(s: &str) -> Result<Expect, String> {
    if s == "any" {
        return Ok(Expect::Any);
    }
    s.parse::<u8>()
        .map(|c| Expect::Code(c.into()))
        .map_err(|_| format!("{s:?} is not an exit status 0 … 255 or `any`"))
}

/// Splits `SERVER… -- CLIENT…`.
///
/// # Errors
/// No `--`, or an empty side.
pub fn split_programs(p: &[OsString]) -> Result<(Vec<String>, Vec<String>), String> {
    let p: Vec<String> = p.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let p = match p.first().map(String::as_str) {
        Some("--") => &p[1..],
        _ => &p[..],
    };
    let Some(i) = p.iter().position(|a| a == "--") else {
        return Err("expected SERVER ARGS… -- CLIENT ARGS… (no `--` between them)".into());
    };
    let (s, c) = (&p[..i], &p[i + 1..]);
    if s.is_empty() || c.is_empty() {
        return Err("expected SERVER ARGS… -- CLIENT ARGS… (a side is empty)".into());
    }
    Ok((s.to_vec(), c.to_vec()))
}

/// A shell word: as it is when it is safe, else single-quoted.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+{}".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn offset(ip: Ipv4Addr, by: u64) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(ip).wrapping_add(by as u32))
}

/// The seed of one side's RNIC in run `seed` (the client's differs, so that the two RNICs'
/// identifiers do).
pub fn side_seed(seed: u64, side: Side) -> u64 {
    match side {
        Side::Server => seed,
        Side::Client => seed ^ 0x9e37_79b9_7f4a_7c15,
    }
}

/// One run's plan: both sides' `rnic exec` arguments.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The seed.
    pub seed: u64,
    /// The server.
    pub server: SideSpec,
    /// The client.
    pub client: SideSpec,
    /// The faults, by side.
    pub faults: Vec<(Side, String)>,
}

struct Setup {
    opts: CheckOptions,
    server: Vec<String>,
    client: Vec<String>,
    classes: Vec<String>,
    dir: PathBuf,
}

impl Setup {
    fn plan(&self, seed: u64, job: u64) -> Plan {
        let o = &self.opts;
        let (sa, ca) = (
            offset(o.server_addr, 2 * job),
            offset(o.client_addr, 2 * job),
        );
        // One fault a `--fault`: a `;`-separated list is split.
        let each = |side: Side, list: &[String]| -> Vec<(Side, String)> {
            list.iter()
                .flat_map(|l| l.split(';'))
                .map(|f| (side, f.to_string()))
                .collect()
        };
        let mut faults = each(Side::Server, &o.server_fault);
        faults.extend(each(Side::Client, &o.client_fault));
        faults.extend(draw::draw(seed, &self.classes, o.window));
        let side = |side: Side, addr: Ipv4Addr, argv: &[String]| {
            let name = match side {
                Side::Server => "server",
                Side::Client => "client",
            };
            let mut args = vec![
                "exec".to_string(),
                "--addr".into(),
                addr.to_string(),
                "--seed".into(),
                side_seed(seed, side).to_string(),
            ];
            if !o.linux_timers {
                args.push("--fast-timers".into());
            }
            let mine: Vec<&String> = faults
                .iter()
                .filter(|f| f.0 == side)
                .map(|f| &f.1)
                .collect();
            for f in &mine {
                args.push("--fault".into());
                args.push((*f).clone());
            }
            let report = self.dir.join(format!("seed-{seed}-{name}.json"));
            args.extend([
                "--check".into(),
                "--check-report".into(),
                report.display().to_string(),
            ]);
            args.push("--".into());
            args.extend(argv.iter().map(|a| {
                a.replace("{server}", &sa.to_string())
                    .replace("{client}", &ca.to_string())
            }));
            SideSpec {
                side,
                args,
                report,
                log: self.dir.join(format!("seed-{seed}-{name}.log")),
                kill_fault: mine.iter().any(|f| f.starts_with("kill:")),
            }
        };
        Plan {
            seed,
            server: side(Side::Server, sa, &self.server),
            client: side(Side::Client, ca, &self.client),
            faults,
        }
    }
}

/// `rnic check`: returns the exit status (0 every run passed, 1 one failed, 2 usage, 130 or
/// 143 interrupted by SIGINT or SIGTERM).
pub fn main(opts: &CheckOptions) -> u8 {
    let (server, client) = match split_programs(&opts.programs) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rnic check: {e}");
            return 2;
        }
    };
    let (first, runs) = match (opts.rerun, opts.seed) {
        (Some(s), _) => (s, 1),
        (None, Some(s)) => (s, opts.runs),
        // Short enough to read and type; two campaigns rarely meet.
        (None, None) => (rnic_sim::fabric::udp::os_seed() % 1_000_000_000, opts.runs),
    };
    let Some(last) = first.checked_add(runs - 1) else {
        eprintln!("rnic check: --seed {first} --runs {runs} runs past the last seed (2^64 − 1)");
        return 2;
    };
    if let Err(e) = preflight(opts, &server, &client, runs) {
        eprintln!("rnic check: {e}");
        return 2;
    }
    let rnic = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rnic check: cannot find this program's path: {e}");
            return 2;
        }
    };
    let dir = opts
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("rnic-check-{}", std::process::id())));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("rnic check: cannot make {}: {e}", dir.display());
        return 2;
    }
    let explicit = !opts.server_fault.is_empty() || !opts.client_fault.is_empty();
    let classes = match (&opts.faults, explicit) {
        (Some(c), _) => c.0.clone(),
        (None, true) => Vec::new(),
        (None, false) => draw::parse_classes(draw::DEFAULT).map_or_else(|_| Vec::new(), |c| c.0),
    };
    let setup = Setup {
        opts: opts.clone(),
        server,
        client,
        classes,
        dir,
    };
    if opts.rerun.is_none() && opts.seed.is_none() {
        eprintln!("rnic check: seeds {first}…{last} (from the OS; --seed {first} runs them again)");
    }
    let results = run_all(&setup, &rnic, first, runs);
    let mut sum = summary::Summary::new(&setup_info(&setup, &rnic), results);
    if crate::interrupt::requested() {
        sum = sum.interrupted(crate::interrupt::signal_name(), runs);
    }
    if opts.dir.is_none() {
        // Only the failing runs' logs are left; no directory when there are none.
        let _ = std::fs::remove_dir(&setup.dir);
    }
    if opts.json {
        println!("{}", sum.json());
    } else {
        print!("{}", sum.text(opts.rerun.is_some()));
    }
    if crate::interrupt::requested() {
        crate::interrupt::exit_status()
    } else if sum.failed() > 0 {
        1
    } else {
        0
    }
}

/// What would make every run fail, found before the first: a program not found, the two
/// sides on one address (in any job), an address whose RoCEv2 port cannot be bound.
fn preflight(
    opts: &CheckOptions,
    server: &[String],
    client: &[String],
    runs: u64,
) -> Result<(), String> {
    for (side, argv) in [("server", server), ("client", client)] {
        let prog = argv.first().map_or("", String::as_str);
        if crate::exec::find_program(prog.as_ref()).is_none() {
            return Err(format!(
                "the {side} program {prog:?} is not found (not in PATH, not a file)"
            ));
        }
    }
    let (s, c) = (opts.server_addr, opts.client_addr);
    if s == c {
        return Err(format!(
            "--server-addr and --client-addr are both {s}: each program needs an address of its \
             own (e.g. --client-addr {})",
            offset(s, 1)
        ));
    }
    let jobs = opts.jobs.min(runs);
    let addrs: Vec<Ipv4Addr> = (0..jobs)
        .flat_map(|j| [offset(s, 2 * j), offset(c, 2 * j)])
        .collect();
    for (i, a) in addrs.iter().enumerate() {
        if addrs[..i].contains(a) {
            return Err(format!(
                "with --jobs {jobs}, {a} would be a server's and a client's address (job J adds \
                 2·J to both): give addresses an odd distance apart (e.g. --client-addr {})",
                offset(s, 1)
            ));
        }
    }
    for a in addrs {
        let at = SocketAddr::from((a, rnic::config::ROCE_PORT));
        if let Err(e) = UdpSocket::bind(at) {
            return Err(match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    format!("{at} is in use ({e}): is another rnic running on it?")
                }
                _ => format!("cannot bind {at} ({e})"),
            });
        }
    }
    Ok(())
}

fn setup_info(s: &Setup, rnic: &Path) -> summary::Info {
    summary::Info {
        rnic: rnic.display().to_string(),
        dir: s.dir.clone(),
        rerun_prefix: std::env::args().collect(),
    }
}

fn run_all(setup: &Setup, rnic: &Path, first: u64, runs: u64) -> Vec<summary::Outcome> {
    let next = AtomicU64::new(0);
    let out = Mutex::new(Vec::new());
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) && !setup.opts.json {
        indicatif::ProgressBar::new(runs)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let failed = AtomicU64::new(0);
    let jobs = setup.opts.jobs.min(runs);
    std::thread::scope(|sc| {
        for job in 0..jobs {
            let (next, out, bar, failed) = (&next, &out, &bar, &failed);
            sc.spawn(move || loop {
                // Interrupted: no new run.
                if crate::interrupt::requested() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= runs {
                    break;
                }
                let plan = setup.plan(first.wrapping_add(i), job);
                let r = run::run(
                    rnic,
                    &plan.server,
                    &plan.client,
                    Duration::from_millis(setup.opts.server_delay),
                    Duration::from_secs_f64(setup.opts.timeout),
                );
                // A run the interrupt stopped says nothing about the programs: not counted.
                // (From a terminal, Ctrl-C reaches the programs too: one may have died of it.)
                let by_interrupt = |r: &run::SideResult| {
                    r.interrupted
                        || r.signal
                            .is_some_and(|sig| crate::interrupt::signal() == Some(sig))
                };
                let stopped = r
                    .as_ref()
                    .is_ok_and(|(s, c)| by_interrupt(s) || by_interrupt(c));
                let o = summary::Outcome::of(&plan, r, &setup.opts);
                if o.reasons.is_empty() || stopped {
                    for f in [
                        &plan.server.log,
                        &plan.client.log,
                        &plan.server.report,
                        &plan.client.report,
                    ] {
                        let _ = std::fs::remove_file(f);
                    }
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                if stopped {
                    continue;
                }
                bar.set_message(format!("{} failed", failed.load(Ordering::Relaxed)));
                bar.inc(1);
                out.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(o);
            });
        }
    });
    bar.finish_and_clear();
    let mut v = out
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    v.sort_by_key(|o| o.seed);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_split_at_the_double_dash() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let (s, c) = split_programs(&a(&["--", "rping", "-s", "--", "rping", "-c"]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (s, c),
            (
                vec!["rping".into(), "-s".into()],
                vec!["rping".into(), "-c".into()]
            )
        );
        assert!(split_programs(&a(&["rping", "-s"])).is_err());
        assert!(split_programs(&a(&["rping", "--"])).is_err());
    }

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(quote("drop:REQ:1"), "drop:REQ:1");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("drop:REQ:*"), "'drop:REQ:*'");
    }
}
