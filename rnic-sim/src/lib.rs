//! # rnic-sim — a software RNIC
//!
//! The verbs objects of a real RNIC with real state-change and flush semantics, its RC and UD
//! transport, and the RoCEv2 packet format it speaks. Sans-IO: packets in, packets out, time
//! passed in; the drivers (the deterministic fabric, the UDP fabric) do the I/O.
//!
//! [`SimDevice`] implements [`verbs_core::Device`]; [`pump::pump_pair`] connects two devices
//! with a lossless wire. Behaviour choices and their sources: `docs/semantics-verbs.md`.
//! Memory regions own their bytes, or are backed by the caller's memory through
//! [`ExternalMemory`] ([`SimDevice::reg_mr_external`]).

mod copy;
mod cq;
mod device;
mod fanout;
mod gather;
mod gsi;
mod ids;
mod log;
mod memory;
mod mr;
mod psn;
mod qp;
mod rc;
mod shared;
mod srq;
mod ud;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

pub mod pump;

pub mod fabric;
pub mod multicast;
pub mod nic;
pub mod peers;
pub mod rng;
pub mod roce;

pub use device::{Counters, ObjectCounts, QpCounters, SimDevice, SimDeviceConfig, Transmit};
pub use gsi::{
    gsi_packet, gsi_payload, GsiDatagram, GsiRefusal, GSI_QKEY, GSI_QPN, GSI_RECV_DEPTH, MAD_SIZE,
};
pub use memory::ExternalMemory;
pub use psn::{psn_add, psn_diff};
pub use ud::GRH_BYTES;
