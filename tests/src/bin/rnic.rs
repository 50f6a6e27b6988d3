//! The `rnic` command-line tool.

use clap::{Parser, Subcommand};
use rnic_testbed::demo::{self, DemoOptions};
use std::process::ExitCode;
use verbs_core::Mtu;

/// rnic: a software RDMA NIC for testing connection teardown.
#[derive(Debug, Parser)]
#[command(name = "rnic", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    },
    /// rping over real UDP: `--listen ADDR` (server) or `--connect ADDR` (client), each with its
    /// own simulated RNIC; CM connect, WRITE/READ/SEND with every byte checked, disconnect with
    /// receives posted. Exits non-zero if a check fails.
    Ping(rnic_testbed::ping::cli::PingArgs),
}

fn parse_mtu(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|e| format!("{e}"))?;
    match v {
        256 | 512 | 1024 | 2048 | 4096 => Ok(v),
        _ => Err("MTU must be 256, 512, 1024, 2048 or 4096".into()),
    }
}

fn mtu(bytes: u32) -> Mtu {
    match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo {
            size,
            recvs,
            mtu: m,
        } => {
            match demo::run(&DemoOptions {
                size,
                recvs,
                mtu: mtu(m),
                ..DemoOptions::default()
            }) {
                Ok(report) => {
                    print!("{}", report.transcript);
                    if report.passed() {
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
        Command::Ping(args) => ExitCode::from(rnic_testbed::ping::cli::main(&args)),
    }
}
