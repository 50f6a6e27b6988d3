//! # cm-core — the IB connection manager
//!
//! The InfiniBand CM wire protocol (IBTA vol. 1 ch. 12 MADs) carried over UDP, a sans-IO CM
//! protocol engine and an rdma_cm-shaped API split as Linux splits it: a kernel side and a
//! librdmacm side. It depends on `verbs-core` only, never on the simulated RNIC, so the same
//! code drives real hardware.
//!
//! Modules, each depending only on those before it: [`wire`] (MAD codec), [`engine`] (sans-IO
//! IB CM, Linux `cm.c`), [`cma`] (kernel-side rdma_cm, Linux `cma.c`/`ucma.c`: ids, channels,
//! events; MADs only, no QP), [`librdmacm`] (`RdmaCm`, rdma-core's `librdmacm/cma.c`: QPs and
//! the work done when an event is fetched), [`blocking`] (condvar and tokio waits for
//! real-time drivers). [`api`] is the public path for `RdmaCm` and the types applications see
//! (they live in a private leaf module both rdma_cm layers share).

pub mod api;
pub mod blocking;
pub mod cma;
pub mod engine;
pub mod librdmacm;
mod shared;
pub mod wire;
