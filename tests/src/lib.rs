//! # rnic-testbed — the deterministic RDMA testbed
//!
//! Harness, oracle and the `rnic` command-line tool.
