//! # rnic-testbed — the deterministic RDMA testbed
//!
//! Harness, oracle and the `rnic` command-line tool. [`demo`] is the README's main job; [`host`] puts the
//! connection manager and the simulated RNIC together on the deterministic fabric. [`world`]
//! runs hosts with recorded histories, [`scenario`] scripts and generates runs, [`oracle`]
//! checks the disconnect invariants, [`explore`] runs seed swarms, [`ping`] is `rnic ping`
//! (rping over real UDP between processes), [`exec`] is `rnic exec` (unmodified C programs on
//! the simulated RNIC through `librnic.so`), [`bench`](mod@bench) is `rnic bench` (issue 13's
//! ratio table: each figure against a baseline measured in the same run).

pub mod bench;
pub mod demo;
pub mod exec;
pub mod explore;
pub mod flood;
pub mod host;
pub mod hw_nic;
pub mod interrupt;
pub mod oracle;
pub mod ping;
pub mod scenario;
pub mod world;

/// The README's Rust examples, compiled and run as doctests so that they stay true (here,
/// where every crate they use is a dependency).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
