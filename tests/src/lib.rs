//! # rnic-testbed — the deterministic RDMA testbed
//!
//! Simulated hosts on a virtual-time fabric, and what checks them. [`host`] puts the connection
//! manager and the simulated RNIC together on the deterministic fabric; [`world`] runs hosts
//! and records their [`history`], [`oracle`] checks the disconnect invariants on a history,
//! [`scenario`] scripts and generates runs (and replays one seed), [`explore`] runs seed
//! swarms. Nothing here
//! reads a clock or a socket for the runs themselves: same seed, same trace.
//!
//! The `rnic` command-line tool (`rnic explore`, `rnic replay`, and `demo`, `ping`, `exec`,
//! `bench`, …) is the `rnic-cli` crate, which depends on this one.

pub mod explore;
pub mod history;
pub mod host;
pub mod oracle;
pub mod scenario;
pub mod world;

/// The README's Rust examples, compiled and run as doctests so that they stay true (here,
/// where every crate they use is a dependency).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The Rust examples of `docs/rust.md`, compiled and run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../../docs/rust.md")]
pub struct RustGuideDoctests;
