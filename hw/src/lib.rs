//! # rnic-hw — the verbs-core device trait over a real RDMA NIC
//!
//! [`HwDevice`] implements [`verbs_core::Device`] and [`verbs_core::GsiEndpoint`] over the
//! system's libibverbs, so the connection manager (`cm-core`) and everything else written
//! against the trait runs on a real RNIC (ConnectX, soft-RoCE `rxe`, …) as it runs on the
//! simulated one.
//!
//! * **Loading.** With the feature `hw`, the first [`HwDevice::open`] `dlopen`s
//!   `libibverbs.so.1` (through `libloading`) and resolves every `ibv_*` function the backend
//!   calls, typed with the C layouts of `verbs-abi` (checked against rdma-core's headers); the
//!   library then stays loaded for the process's life. Nothing links against libibverbs and the
//!   crate exports no `ibv_*` symbol, so it can share a binary with librnic's own entry points.
//!   The functions verbs.h implements inline (`ibv_post_send`, `ibv_post_recv`,
//!   `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) go through `context->ops`, as the
//!   header's do. A library that cannot be loaded, or lacks one of those functions, is
//!   [`HwError::NoLibrary`], never a panic. Without the feature the crate builds with no
//!   libibverbs code at all and [`HwDevice::open`] returns [`HwError::NotBuilt`]; the public API
//!   is the same in both builds.
//! * **Objects.** PDs, MRs, CQs and QPs are named by the trait's `u32` handles, indices into
//!   tables of the libibverbs pointers the device owns; an unknown handle is `EINVAL` without a
//!   libibverbs call. Memory regions are page-aligned, zero-filled buffers the device allocates
//!   and registers (`ibv_reg_mr`), read and written through [`verbs_core::Device::mr_read`] and
//!   [`verbs_core::Device::mr_write`].
//! * **Events.** One completion channel (`ibv_comp_channel`) serves every CQ, and the context's
//!   async fd carries the async events; both descriptors are non-blocking. A driver polls
//!   [`HwDevice::event_fds`] for readability and calls [`HwDevice::process_events`], which
//!   forwards each CQ event to the [`verbs_core::CompChannel`] the CQ was created with and
//!   queues async events for [`verbs_core::Device::get_async_event`]. A driver whose event
//!   thread must not hold the device waits with an [`EventWaiter`] (duplicates of the same
//!   descriptors) instead.
//! * **GSI.** The kernel owns the real QP1, so the MADs of the connection manager do not go
//!   through a verbs QP: [`verbs_core::GsiEndpoint::gsi_send`] queues them for
//!   [`HwDevice::take_gsi_send`], and the driver hands received ones to
//!   [`HwDevice::push_gsi_recv`] (it carries them over a UDP socket).
//! * **Addressing.** RoCE needs a GRH on every connected QP; the CM knows nothing of ports or
//!   GID indices. [`verbs_core::Device::modify_qp`] therefore fills in the port and the source
//!   GID index chosen at open (an IPv4-mapped RoCE v2 GID) and clamps the path MTU to the port's
//!   active MTU, as rdma_cm does through its path record.
//!
//! Errors carry the errno libibverbs reported ([`verbs_core::Errno`]; a number verbs-core does
//! not list becomes `EIO`, its value kept in the message).
//!
//! All `unsafe` code lives in one private module (`ffi`), each block with a `SAFETY` comment.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod error;
mod options;

#[cfg(feature = "hw")]
mod device;
#[cfg(feature = "hw")]
mod ffi;
#[cfg(feature = "hw")]
mod modify;
#[cfg(feature = "hw")]
mod queue;
#[cfg(feature = "hw")]
mod select;
#[cfg(feature = "hw")]
mod table;
#[cfg(feature = "hw")]
mod waiter;

#[cfg(not(feature = "hw"))]
mod stub;

pub use error::HwError;
pub use options::HwOptions;

#[cfg(feature = "hw")]
pub use device::HwDevice;
#[cfg(not(feature = "hw"))]
pub use stub::{EventWaiter, HwDevice};
#[cfg(feature = "hw")]
pub use waiter::EventWaiter;

/// Size in bytes of a MAD, the only size [`verbs_core::GsiEndpoint::gsi_send`] accepts
/// (IBTA 13.4.1; cm-spec §1.4).
pub const MAD_SIZE: usize = 256;

/// How many MADs each GSI queue (sent, received) and the async-event queue hold before the
/// oldest is dropped: the CM retransmits, and a driver that stopped draining should not make
/// the device grow without bound.
pub const QUEUE_CAPACITY: usize = 1024;
