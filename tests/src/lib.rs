//! # rnic-testbed — the deterministic RDMA testbed
//!
//! Harness, oracle and the `rnic` command-line tool. [`demo`] is the README's main job.

pub mod demo;
