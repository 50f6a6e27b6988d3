//! # rnic-testbed — the deterministic RDMA testbed
//!
//! Harness, oracle and the `rnic` command-line tool. [`demo`] is the README's main job; [`host`] puts the
//! connection manager and the simulated RNIC together on the deterministic fabric.

pub mod demo;
pub mod explore;
pub mod host;
pub mod scenario;
