//! # cm-core — the IB connection manager
//!
//! The InfiniBand CM wire protocol (IBTA vol. 1 ch. 12 MADs) carried over UDP, a sans-IO CM
//! protocol engine and an rdma_cm-shaped API. It depends on `verbs-core` only, never on the
//! simulated RNIC, so the same code drives real hardware.
//!
//! Modules: [`wire`] (MAD codec), [`engine`] (sans-IO IB CM), [`api`] (rdma_cm shape),
//! [`blocking`] (condvar and tokio waits for real-time drivers).

pub mod api;
pub mod blocking;
pub mod engine;
pub mod wire;
