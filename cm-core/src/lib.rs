//! # cm-core — the IB connection manager
//!
//! The InfiniBand CM wire protocol (IBTA vol. 1 ch. 12 MADs) carried over UDP, a sans-IO CM
//! protocol engine and an rdma_cm-shaped API. It depends on `verbs-core` only, never on the
//! simulated RNIC, so the same code drives real hardware.
//!
//! Only the modules listed below exist so far; the engine and API arrive with their issue.

pub mod engine;
pub mod wire;
