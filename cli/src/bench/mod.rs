//! `rnic bench`: the performance goals, each rnic figure next to a baseline measured in the same run
//! on the same machine, as a ratio table (docs/performance.md, "The ratio table").
//!
//! | measure ([`measure::Measure`]) | baseline | goal |
//! |---|---|---|
//! | `rnic ping --op write --size 65536 --mtu 4096` (two processes, `--depth 16`), MB/s | TCP stream of 64 KiB writes between two processes ([`baseline::tcp_stream`]) | ≥ 0.5× |
//! | 1 MiB WRITEs with Linux's timers | — | all pass, 0 RC retransmissions and timeouts |
//! | `rnic ping --op send --size 64`, median RTT | UDP ping-pong of 64 B between two processes ([`baseline::udp_pingpong`]) | ≤ 1.5× |
//! | CM connect+disconnect per second, two processes ([`cm`]) | TCP connect+close per second ([`baseline::tcp_connect_close`]) | ≥ 0.8× |
//! | in-process RDMA WRITE of 64 KiB, ICRC checked ([`inproc`]), GB/s | memcpy of 64 MiB; (memcpy of 64 KiB in cache, for reference) ([`baseline::memcpy_bytes_per_s`]) | ≥ 0.5× |
//! | `rnic explore --jobs 1` scenarios/s | — | ≥ 20 000/s |
//!
//! The rnic figures come from the real commands: `rnic ping --listen` / `--connect` and
//! `rnic explore` processes of the same binary, read through their `--json` output
//! ([`rnic_cmd`]). Every baseline's far end is a process too: `rnic bench-peer ROLE`
//! ([`peer`]; hidden from `--help`). `--rounds` rounds, the measures interleaved round by
//! round so that load hits a figure and its baseline alike; the table gives the median of the
//! rounds ([`table`]), then every round's figures. Progress goes to stderr.
//!
//! On SIGINT or SIGTERM (once the program installed [`crate::interrupt`]) [`main`] kills and
//! reaps its processes ([`process::kill_all`]), prints the table of the rounds finished so far
//! marked PARTIAL, and returns 130 or 143.
//!
//! The capi bench (`cli/benches/capi.rs`) uses the same baselines and peers.

pub mod baseline;
pub mod cm;
pub mod inproc;
pub mod measure;
pub mod peer;
pub mod process;
pub mod rnic_cmd;
pub mod stats;
pub mod table;

use measure::{Config, Measure, Sizes};
use serde::Serialize;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use table::{render, render_rounds, Row, RowSummary};

/// Why a measurement could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A socket, pipe or process call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A verbs or rdma_cm call failed.
    #[error("{what}: {source}")]
    Verbs {
        /// The call.
        what: &'static str,
        /// Its error.
        #[source]
        source: verbs_core::Error,
    },
    /// A process of the measurement failed, did not start, or did not finish in time.
    #[error("{0}")]
    Process(String),
    /// A measurement went wrong: a check failed, a figure is missing, an event was unexpected.
    #[error("{0}")]
    Measure(String),
    /// A bad option.
    #[error("{0}")]
    Options(String),
}

impl BenchError {
    /// An [`Io`](BenchError::Io) error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            what: what.into(),
            source,
        }
    }
}

/// The [`BenchError::Verbs`] error of the call `what`.
fn verbs(what: &'static str) -> impl FnOnce(verbs_core::Error) -> BenchError {
    move |source| BenchError::Verbs { what, source }
}

/// `rnic bench` options.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Rounds of every measure; the table gives the median of the rounds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Run only these measures (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "MEASURES")]
    pub only: Vec<Measure>,
    /// Print the result as one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Outstanding WRITEs of the WRITE pings (`rnic ping --depth N`).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::ping::MAX_DEPTH)))]
    pub depth: u32,
    /// 64 KiB WRITEs per round of `write-stream` (the TCP stream sends as many bytes).
    #[arg(long, default_value_t = 10_000, help_heading = "Sizes of a round",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub write_count: u32,
    /// 1 MiB WRITEs per round of `write-1m`.
    #[arg(long, default_value_t = 100, help_heading = "Sizes of a round",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub big_count: u32,
    /// Timed round trips per round of `send-rtt` (and of its UDP baseline).
    #[arg(long, default_value_t = 10_000, help_heading = "Sizes of a round",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub rtt_count: u32,
    /// Timed connect+disconnect cycles per round of `cm` (and of TCP connect+close).
    #[arg(long, default_value_t = 2_000, help_heading = "Sizes of a round",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub cm_cycles: u32,
    /// Timed 64 KiB WRITEs per round of `inproc`.
    #[arg(long, default_value_t = 20_000, help_heading = "Sizes of a round",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub inproc_writes: u32,
    /// Seeds per round of `explore`.
    #[arg(long, default_value_t = 20_000, help_heading = "Sizes of a round",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub explore_seeds: u64,
}

/// The machine a run measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// The CPU's model name (`/proc/cpuinfo`; `unknown` elsewhere).
    pub cpu: String,
    /// CPUs this process may run on.
    pub cpus: usize,
}

impl Machine {
    /// This machine.
    pub fn this() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Machine { cpu, cpus }
    }
}

/// What `rnic bench --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// Where it ran.
    pub machine: Machine,
    /// Rounds of every measure.
    pub rounds: u32,
    /// The WRITE pings' `--depth` (`None`: no WRITE measure ran).
    pub depth: Option<u32>,
    /// One summary per row of the table.
    pub rows: Vec<RowSummary>,
    /// True when the run was interrupted (SIGINT, SIGTERM) before its last round: `rows`
    /// are then the measures with at least one round finished, each over the rounds it
    /// finished (`rnic_rounds`).
    pub partial: bool,
}

impl BenchReport {
    /// The report as text: a header (machine, units), the ratio table, every round's figures.
    pub fn to_text(&self) -> String {
        let partial = if !self.partial {
            String::new()
        } else if self.rows.is_empty() {
            "rnic bench: INTERRUPTED: no measure finished a round\n".to_string()
        } else {
            "rnic bench: INTERRUPTED: a PARTIAL table, of the rounds finished \
             (each measure's are listed under rounds:)\n"
                .to_string()
        };
        format!(
            "{partial}rnic bench: median of {} round(s); {}, {} CPU(s){}\n\
             MB = 10^6 bytes, GB = 10^9 bytes; ratio = rnic / baseline\n\n{}\n{}",
            self.rounds,
            self.machine.cpu,
            self.machine.cpus,
            self.depth
                .map_or(String::new(), |d| format!("; WRITE pings with --depth {d}")),
            render(&self.rows),
            render_rounds(&self.rows)
        )
    }
}

/// Runs the measures `args` selects, `args.rounds` times each, interleaved; `rnic` is the
/// path of the `rnic` binary (for its subcommands and the peers). Progress on stderr.
///
/// # Errors
/// The first measurement that failed ([`BenchError`]).
pub fn run(args: &BenchArgs, rnic: &Path) -> Result<BenchReport, BenchError> {
    run_noting(args, rnic, &mut |_| {})
}

/// The report of `rows` (rows without a finished round left out).
fn report_of(args: &BenchArgs, measures: &[Measure], rows: &[(Measure, Vec<Row>)]) -> BenchReport {
    BenchReport {
        machine: Machine::this(),
        rounds: args.rounds,
        depth: measures
            .iter()
            .any(|m| matches!(m, Measure::WriteStream | Measure::Write1m))
            .then_some(args.depth),
        rows: rows
            .iter()
            .flat_map(|(_, rows)| rows.iter().filter(|r| !r.rnic.is_empty()).map(Row::summary))
            .collect(),
        partial: false,
    }
}

/// [`run`], handing `noted` the report of the rounds finished so far after each measure's
/// round.
fn run_noting(
    args: &BenchArgs,
    rnic: &Path,
    noted: &mut dyn FnMut(BenchReport),
) -> Result<BenchReport, BenchError> {
    let mut measures = if args.only.is_empty() {
        Measure::ALL.to_vec()
    } else {
        args.only.clone()
    };
    measures.sort();
    measures.dedup();
    let cfg = Config {
        rnic: rnic.to_path_buf(),
        depth: args.depth,
        sizes: Sizes {
            write_count: args.write_count,
            big_count: args.big_count,
            rtt_count: args.rtt_count,
            cm_cycles: args.cm_cycles,
            inproc_writes: args.inproc_writes,
            explore_seeds: args.explore_seeds,
        },
    };
    let mut rows: Vec<(Measure, Vec<Row>)> = measures.iter().map(|&m| (m, m.rows(&cfg))).collect();
    for round in 1..=args.rounds {
        for i in 0..rows.len() {
            let (m, measure_rows) = &mut rows[i];
            let m = *m;
            eprintln!("rnic bench: round {round}/{}: {} …", args.rounds, m.name());
            let said = m.round(&cfg, measure_rows)?;
            eprintln!(
                "rnic bench: round {round}/{}: {}: {said}",
                args.rounds,
                m.name()
            );
            noted(report_of(args, &measures, &rows));
        }
    }
    Ok(report_of(args, &measures, &rows))
}

/// Prints `report` (text or `--json`) on stdout; false when it cannot be serialised.
fn print_report(report: &BenchReport, json: bool) -> bool {
    let text = if json {
        match serde_json::to_string_pretty(report) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("rnic bench: {e}");
                return false;
            }
        }
    } else {
        report.to_text()
    };
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    // A closed stdout (`rnic bench | head`) loses the report, nothing else.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    true
}

/// `rnic bench`: runs, prints the report (text or `--json`) on stdout; returns the exit code:
/// 0 when every measurement was made (met goals or not), 1 when one failed. On SIGINT or
/// SIGTERM ([`crate::interrupt::requested`]): kills its processes ([`process::kill_all`]),
/// prints the report of the rounds finished, marked partial, and returns 130 or 143
/// ([`crate::interrupt::exit_status`]).
pub fn main(args: &BenchArgs, rnic: &Path) -> u8 {
    // The measures run on a thread of their own, so that an interruption is answered
    // whatever they are blocked on; this thread watches both.
    let so_far: Arc<Mutex<Option<BenchReport>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let (args, rnic, so_far) = (args.clone(), rnic.to_path_buf(), Arc::clone(&so_far));
        std::thread::Builder::new()
            .name("rnic-bench".into())
            .spawn(move || {
                let mut note = |r: BenchReport| {
                    *so_far.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
                };
                let _ = tx.send(run_noting(&args, &rnic, &mut note));
            })
    };
    let worker = match worker {
        Ok(w) => w,
        Err(e) => {
            eprintln!("rnic bench: cannot start a thread: {e}");
            return 1;
        }
    };
    let outcome = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(r) => break Some(r),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if crate::interrupt::requested() {
                    break None;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // The worker ended without a result: it panicked.
                if let Err(p) = worker.join() {
                    std::panic::resume_unwind(p);
                }
                return 1;
            }
        }
    };
    // A run cut short by the interruption (its processes killed under it) is no failure.
    if crate::interrupt::requested() {
        process::kill_all();
        let report = match outcome {
            Some(Ok(full)) => full,
            _ => {
                let noted = so_far.lock().unwrap_or_else(PoisonError::into_inner).take();
                let mut r = noted.unwrap_or_else(|| BenchReport {
                    machine: Machine::this(),
                    rounds: args.rounds,
                    depth: None,
                    rows: Vec::new(),
                    partial: true,
                });
                r.partial = true;
                r
            }
        };
        let sig = crate::interrupt::signal_name();
        eprintln!("rnic bench: interrupted by {sig}: its processes are killed");
        print_report(&report, args.json);
        return crate::interrupt::exit_status();
    }
    match outcome {
        Some(Ok(report)) => u8::from(!print_report(&report, args.json)),
        Some(Err(e)) => {
            eprintln!("rnic bench: {e}");
            1
        }
        None => 1,
    }
}
