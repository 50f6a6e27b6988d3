//! # rnic-capi — unmodified RDMA programs on the simulated RNIC
//!
//! `librnic.so` exports the libibverbs and librdmacm entry points that rdma-core's tools and
//! most RDMA applications import. Loaded with `LD_PRELOAD` (or through `rnic exec`), it puts
//! one simulated RNIC ([`rnic_sim::SimDevice`] + [`cm_core`]'s connection manager on the
//! real-time UDP driver) under an unchanged binary. See `docs/capi.md`.
//!
//! Modules: [`abi`] (the C structs, laid out as rdma-core's headers on x86-64: the crate
//! `verbs-abi`, re-exported; its `tests/layout.rs` checks them), `ffi` (the `extern "C"` entry
//! points: the only module with `unsafe`), `runtime` (the process's simulated RNIC, its progress thread and object tables, and
//! its rsocket layer `runtime::rsocket`: safe code),
//! [`check`] (the checker of `rnic exec --check`: the rules a program must keep, its report),
//! [`config`] (the environment), [`mappings`] (what `ibv_reg_mr` may register), [`state_file`]
//! (what `rnic exec` and the program share, to finish the program's connections when it dies),
//! [`calls`] (the C entry points called from safe Rust, in
//! process: the fuzz target `capi_calls`; its `unsafe` is in `ffi`).

pub use verbs_abi as abi;
pub mod check;
pub mod config;
#[allow(unsafe_code)] // the one module that may: see its docs
mod ffi;
pub mod mappings;
pub mod runtime;
pub mod state_file;

pub use ffi::calls;
