//! The `rnic` command-line tool: parses the command line and runs a subcommand — `demo`,
//! `ping`, `exec`, `flood`, `bench` from this crate's library (`rnic_cli`), `explore` and
//! `replay` from the deterministic testbed (`rnic_testbed`) — with SIGINT/SIGTERM handling
//! ([`rnic_cli::interrupt`]) and logging on stderr (`-v`, `RUST_LOG`).

use clap::{Parser, Subcommand};
use rnic_cli::demo::{self, DemoOptions};
use rnic_cli::exec;
use rnic_cli::flood;
use rnic_cli::interrupt;
use rnic_cli::ping::cli::{mtu, parse_mtu};
use rnic_testbed::explore::{self, ExploreOptions, Summary};
use rnic_testbed::scenario;
use std::path::PathBuf;
use std::process::ExitCode;

/// rnic: a software RDMA NIC for testing connection teardown.
#[derive(Debug, Parser)]
#[command(name = "rnic", version, about)]
struct Cli {
    /// Log what happens, on stderr: `-v` the important state changes (debug), `-vv` everything
    /// (trace). `RUST_LOG` (e.g. `RUST_LOG=rnic_sim=debug`, `RUST_LOG=warn`), when set, decides
    /// instead. Without either, only errors are logged.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Installs the `tracing` subscriber: `RUST_LOG` if set, else the level `-v` gives.
fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "error",
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // A second subscriber cannot be installed (only in tests that call main twice): keep the
    // first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[derive(Debug, Subcommand)]
enum Command {
    /// `ping` with both ends in one process over loopback UDP: CM connect, RDMA WRITE, SEND and
    /// RDMA READ with every byte checked, disconnect with receives posted, then the disconnect
    /// timeline of both sides. Exits non-zero if a check fails.
    Demo {
        /// Bytes moved by each SEND, WRITE and READ (1..=1048576).
        #[arg(long, default_value_t = 4096)]
        size: u32,
        /// Receives each side keeps posted, all flushed at the disconnect (1..=1024).
        #[arg(long, default_value_t = 4)]
        recvs: u32,
        /// Path MTU in bytes (256, 512, 1024, 2048 or 4096).
        #[arg(long, default_value_t = 1024, value_parser = parse_mtu)]
        mtu: u32,
        /// Seconds without progress before a side gives up (as `rnic ping --timeout`).
        #[arg(long, value_name = "SECS", default_value_t = 10.0)]
        timeout: f64,
    },
    /// rping over real UDP: `--listen ADDR` (server) or `--connect ADDR` (client), each with its
    /// own simulated RNIC; CM connect, WRITE/READ/SEND with every byte checked, disconnect with
    /// receives posted. Exits non-zero if a check fails.
    Ping(rnic_cli::ping::cli::PingArgs),
    /// A swarm over seeds: each seed draws its own faults (loss, duplication, reordering
    /// delays, partitions, crashes) and workload, runs on the deterministic World and is checked
    /// by the oracle (S1–S7, L1–L3). Prints a summary with the "sometimes" counters and the
    /// replay command of every failing seed; exits 1 if any seed failed. On SIGINT (Ctrl-C) or
    /// SIGTERM it finishes the seeds in progress and prints a PARTIAL summary with the
    /// commands that run the rest; exits 130 (SIGINT) or 143 (SIGTERM).
    Explore {
        /// Number of seeds (scenarios) to run (≥ 1; `--start + --seeds` at most 2^64 − 1).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        seeds: u64,
        /// First seed; a shard of a larger campaign runs `--start K*N --seeds N`.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Worker threads (default: all cores). The summary is the same whatever the value.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
        jobs: Option<u64>,
        /// Print the summary as one JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
        /// Also fail (exit 1) if a "sometimes" counter is still zero at the end.
        #[arg(long)]
        require_sometimes: bool,
        /// Merge these shard summaries (JSON files written by `explore --json`, partial ones
        /// included) instead of running seeds; exits 1 if the shards leave seeds out.
        #[arg(long, num_args = 1.., value_name = "FILE", conflicts_with_all = ["seeds", "start", "jobs"])]
        merge: Vec<PathBuf>,
    },
    /// Runs an unmodified RDMA program (perftest, rping, qperf, your own) on a simulated RNIC
    /// of its own: preloads librnic.so and sets its environment. Two programs on one machine
    /// need two addresses (`--addr 127.0.0.1`, `--addr 127.0.0.2`); without `--addr` the
    /// first free loopback address is taken. `rnic exec` stays the program's parent, passes
    /// signals on, and when the program dies (any signal, any exit) finishes its connections as
    /// the Linux kernel would (DREQ, REJ), then exits with the program's status. See
    /// docs/capi.md.
    Exec(exec::ExecOptions),
    /// Runs a server and a client (`rnic check [OPTIONS] -- SERVER ARGS… -- CLIENT ARGS…`),
    /// each under `rnic exec` on its own address, many times, each run with faults drawn from
    /// its seed; `{server}` and `{client}` in the arguments are the two addresses. A run fails
    /// on a finding of the checker, a hang, a crash or an unexpected exit status. Prints the
    /// failing seeds with the commands that rerun them; exits 1 if a run failed. On SIGINT
    /// (Ctrl-C) or SIGTERM it stops the runs in progress, kills their programs and prints the
    /// summary of the finished runs; exits 130 (SIGINT) or 143 (SIGTERM). docs/check.md.
    Check(rnic_cli::check::CheckOptions),
    /// Floods an rdma_cm listener (`rnic ping --listen ADDR`) with connection requests from
    /// many loopback addresses, none of which answers: for testing a server under a REQ flood
    /// (docs/hostile-input.md). Only sends; prints what it sent. Exits 0 when every REQ was
    /// sent; 1 when some were refused (nothing listens at the target: an ICMP port unreachable
    /// refuses the next REQ of its socket; or another send error), counted in what it prints;
    /// 2 for bad options or a target the 127.0.0.0/8 sources cannot reach.
    Flood(flood::FloodOptions),
    /// Measures rnic against its performance goals, each next to a baseline measured in the
    /// same run on the same machine (TCP, UDP, memcpy), and prints the ratio table: WRITE stream, 1 MiB WRITEs,
    /// SEND round trip, CM connect rate, in-process WRITE, explore. Exits 0 when every
    /// measurement was made (goals met or not), 1 when one failed. docs/performance.md.
    Bench(rnic_cli::bench::BenchArgs),
    /// The far end of a `bench` baseline (a process of its own): binds, prints `ready ADDR`,
    /// serves one round, exits.
    #[command(hide = true)]
    BenchPeer {
        #[command(subcommand)]
        role: rnic_cli::bench::peer::PeerRole,
    },
    /// Re-runs one seed of `explore` and prints its trace, the oracle's verdict and the
    /// replay's trace hash; exits 1 if an invariant failed.
    Replay {
        /// The seed to replay.
        #[arg(long)]
        seed: u64,
        /// Write a Mermaid sequence diagram (wire messages and CM events per host) to FILE.
        #[arg(long, value_name = "FILE")]
        mermaid: Option<PathBuf>,
        /// Write the packets to FILE (pcap, readable by tshark/Wireshark).
        #[arg(long, value_name = "FILE")]
        pcap: Option<PathBuf>,
        /// Print only the verdict, not the trace.
        #[arg(long)]
        quiet: bool,
    },
}

/// Writes `text` to stdout. When the reader has gone (`rnic replay … | head`), exits at once
/// with status 141, as a process killed by SIGPIPE would, instead of panicking.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(141);
    }
}

/// The command that started this process, for exact replay commands.
fn program() -> String {
    std::env::args().next().unwrap_or_else(|| "rnic".into())
}

fn run_explore(
    opts: ExploreOptions,
    json: bool,
    require_sometimes: bool,
    merge: &[PathBuf],
) -> ExitCode {
    let summary = if merge.is_empty() {
        // Ctrl-C keeps the report: the first SIGINT/SIGTERM stops handing out seeds, a second
        // one exits at once.
        match rnic_cli::interrupt::install() {
            Ok(()) => rnic_cli::interrupt::on_interrupt(|| {
                eprintln!(
                    "rnic explore: interrupted: finishing the seeds in progress, then the \
                     partial summary (again to exit at once)"
                );
            }),
            Err(e) => eprintln!(
                "rnic explore: cannot catch SIGINT/SIGTERM ({e}): Ctrl-C loses the summary"
            ),
        }
        explore::explore_until(&opts, interrupt::requested, || {
            interrupt::signal().map(|_| interrupt::signal_name().to_string())
        })
    } else {
        let mut shards = Vec::new();
        for path in merge {
            let parsed = std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|text| serde_json::from_str::<Summary>(&text).map_err(|e| e.to_string()));
            match parsed {
                Ok(s) => shards.push(s),
                Err(e) => {
                    eprintln!("rnic explore: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
        }
        match Summary::merge_as(&shards, &program()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rnic explore --merge: {e}");
                return ExitCode::from(2);
            }
        }
    };
    if json {
        match serde_json::to_string_pretty(&summary) {
            Ok(text) => emit(&(text + "\n")),
            Err(e) => {
                eprintln!("rnic explore: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        emit(&summary.render_requiring(require_sometimes));
    }
    let blind = require_sometimes && !summary.blind_spots().is_empty();
    if blind {
        eprintln!(
            "rnic explore: sometimes counters at zero: {}",
            summary.blind_spots().join(", ")
        );
    }
    if let (Some(i), true) = (&summary.interruption, json) {
        eprintln!(
            "rnic explore: partial summary: {} seed(s) not run; {}",
            i.seeds_not_run(),
            i.resume.join("; ")
        );
    }
    if rnic_cli::interrupt::requested() {
        // Interrupted: 130 (SIGINT) or 143 (SIGTERM), as a shell reports a process the signal
        // killed, even when the last seeds were already running and the summary is whole.
        ExitCode::from(rnic_cli::interrupt::exit_status())
    } else if summary.passed() && !blind && !summary.partial {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_replay(seed: u64, mermaid: Option<PathBuf>, pcap: Option<PathBuf>, quiet: bool) -> ExitCode {
    let replay = scenario::replay_seed(seed);
    let r = &replay.report;
    if quiet {
        emit(&format!("seed {seed}: {}\n", replay.scenario.describe()));
        for v in &r.violations {
            emit(&format!("{v}\n"));
        }
    } else {
        // Header (seed, faults), one line per record, then the violations.
        emit(&replay.trace());
    }
    emit(&format!("trace hash: {:016x}\n", r.trace_hash));
    if !r.quiescent {
        emit("NOT QUIESCENT at the end of the run\n");
    }
    let mut writes = Vec::new();
    if let Some(path) = mermaid {
        writes.push((path, replay.mermaid().into_bytes()));
    }
    if let Some(path) = pcap {
        writes.push((path, replay.pcap()));
    }
    for (path, bytes) in writes {
        if let Err(e) = std::fs::write(&path, bytes) {
            eprintln!("rnic replay: {}: {e}", path.display());
            return ExitCode::from(2);
        }
        emit(&format!("wrote {}\n", path.display()));
    }
    let passed = r.violations.is_empty() && r.quiescent;
    emit(&format!(
        "verdict: {}\n",
        if passed { "PASS" } else { "FAIL" }
    ));
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match cli.command {
        Command::Explore {
            seeds,
            start,
            jobs,
            json,
            require_sometimes,
            merge,
        } => {
            if start.checked_add(seeds).is_none() {
                eprintln!(
                    "rnic explore: --start {start} --seeds {seeds} runs past the last seed \
                     (2^64 − 2); `replay --seed` takes any seed"
                );
                return ExitCode::from(2);
            }
            let opts = ExploreOptions {
                start,
                seeds,
                jobs: jobs.map_or_else(explore::default_jobs, |j| j as usize),
                progress: !json,
                program: program(),
            };
            run_explore(opts, json, require_sometimes, &merge)
        }
        Command::Replay {
            seed,
            mermaid,
            pcap,
            quiet,
        } => run_replay(seed, mermaid, pcap, quiet),
        Command::Demo {
            size,
            recvs,
            mtu: m,
            timeout,
        } => {
            // (NaN fails both comparisons.)
            if !(timeout > 0.0 && timeout <= 1e6) {
                eprintln!(
                    "rnic demo: --timeout {timeout}: give seconds, more than 0 and at most 1000000"
                );
                return ExitCode::from(2);
            }
            if let Err(e) = interrupt::install() {
                eprintln!("rnic demo: cannot catch SIGINT/SIGTERM: {e}");
            }
            match demo::run(&DemoOptions {
                size,
                recvs,
                mtu: mtu(m),
                timeout: std::time::Duration::from_secs_f64(timeout),
                ..DemoOptions::default()
            }) {
                Ok(report) => {
                    print!("{}", report.transcript);
                    if interrupt::requested() {
                        ExitCode::from(interrupt::exit_status())
                    } else if report.passed() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("rnic demo: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Flood(opts) => match flood::run(&opts) {
            Ok(r) => {
                let of = if r.sent < opts.count {
                    format!(" of {}", opts.count)
                } else {
                    String::new()
                };
                emit(&format!(
                    "sent {}{of} REQs from {} address(es) to {} in {:.2} s ({:.0}/s)\n",
                    r.sent,
                    r.sources,
                    opts.target,
                    r.elapsed.as_secs_f64(),
                    r.sent as f64 / r.elapsed.as_secs_f64().max(1e-9),
                ));
                if r.unreachable > 0 {
                    emit(&format!(
                        "{} refused: nothing listens at {} (ICMP port unreachable)\n",
                        r.unreachable, opts.target
                    ));
                }
                if r.send_errors > 0 {
                    emit(&format!("{} refused by the kernel\n", r.send_errors));
                }
                if opts.complete {
                    emit(&format!(
                        "{} handshakes completed (RTU sent), then silent\n",
                        r.completed
                    ));
                }
                if r.unreachable + r.send_errors > 0 {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("rnic flood: {e}");
                ExitCode::from(2)
            }
        },
        Command::Ping(args) => {
            if let Err(e) = interrupt::install() {
                eprintln!("rnic ping: cannot catch SIGINT/SIGTERM: {e}");
            }
            ExitCode::from(rnic_cli::ping::cli::main(&args))
        }
        Command::Bench(args) => match std::env::current_exe() {
            Ok(rnic) => {
                if cfg!(debug_assertions) {
                    eprintln!(
                        "rnic bench: warning: this rnic is a debug build, its figures are \
                         meaningless: measure with `cargo build --release`'s target/release/rnic"
                    );
                }
                // On SIGINT/SIGTERM bench kills its processes and prints what it measured.
                if let Err(e) = rnic_cli::interrupt::install() {
                    eprintln!(
                        "rnic bench: cannot catch SIGINT/SIGTERM ({e}): Ctrl-C may leave its \
                         processes running"
                    );
                }
                ExitCode::from(rnic_cli::bench::main(&args, &rnic))
            }
            Err(e) => {
                eprintln!("rnic bench: cannot find this program's path: {e}");
                ExitCode::from(2)
            }
        },
        Command::BenchPeer { role } => match rnic_cli::bench::peer::serve(&role) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rnic bench-peer: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Exec(opts) => exec::main(&opts),
        Command::Check(opts) => {
            // The first SIGINT/SIGTERM stops the runs in progress (their programs killed) and
            // prints what the finished runs found; a second one exits at once.
            match interrupt::install() {
                Ok(()) => interrupt::on_interrupt(|| {
                    eprintln!(
                        "rnic check: interrupted: stopping the runs in progress, then the \
                         partial summary (again to exit at once)"
                    );
                }),
                Err(e) => eprintln!(
                    "rnic check: cannot catch SIGINT/SIGTERM ({e}): Ctrl-C may leave programs \
                     running"
                ),
            }
            ExitCode::from(rnic_cli::check::main(&opts))
        }
    }
}
