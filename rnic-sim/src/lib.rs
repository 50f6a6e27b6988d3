//! # rnic-sim — a software RNIC
//!
//! The verbs objects of a real RNIC with real state-change and flush semantics, its RC and UD
//! transport, and the RoCEv2 packet format it speaks. Sans-IO: packets in, packets out, time
//! passed in; the drivers (the deterministic fabric, the UDP fabric) do the I/O.

pub mod fabric;
pub mod rng;
pub mod roce;
