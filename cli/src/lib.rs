//! # rnic-cli — the `rnic` command-line tool
//!
//! The real-time side of the project: the simulated RNIC and the connection manager on real
//! UDP sockets and the wall clock, between threads or processes. [`demo`] is the README's main
//! job (`rnic demo`: [`ping`] with both ends in one process); [`ping`] is `rnic ping` (rping
//! over real UDP between processes, on the simulated RNIC or, with the `hw` feature, a real one
//! through [`hw_nic`]); [`exec`] is `rnic exec` (unmodified C programs on the simulated RNIC
//! through `librnic.so`, and [`rspreload`] for its `--rsockets`); [`flood`] is `rnic flood` (a REQ flood against a listener);
//! [`bench`](mod@bench) is `rnic bench` (the ratio table: each figure against a baseline
//! measured in the same run); [`interrupt`] is the commands' SIGINT/SIGTERM/SIGHUP handling.
//! `rnic explore` and `rnic replay` run the deterministic testbed (`rnic-testbed`).

pub mod bench;
pub mod check;
pub mod demo;
pub mod exec;
pub mod flood;
pub mod hw_nic;
pub mod interrupt;
pub mod ping;
pub mod rspreload;
