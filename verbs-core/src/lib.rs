//! # verbs-core — the RDMA verbs device model
//!
//! The types of libibverbs under their libibverbs names and numbers (`QpState::Rts`,
//! `WcStatus::WrFlushErr` = 5, `QpAttrMask::SQ_PSN` = 1 << 16, …), the legal QP transition
//! table with its attribute masks, an [`Error`] that carries the errno rdma-core would set, and
//! the [`Device`] trait that the simulated RNIC (`rnic-sim`) and a hardware backend implement.
//!
//! Sources for every rule are tagged as in the project's cm-spec (e.g. `[verbs.h]`,
//! `[man:ibv_post_send.3]`); the table of our names next to rdma-core's is in `docs/naming.md`.

mod device;
mod error;
pub mod manual;
mod srq;
mod time;
mod transitions;
mod types;

pub use device::{
    AsyncElement, AsyncEvent, CompChannel, CqHandle, CqNotifier, Device, GsiDatagram, GsiEndpoint,
    Mr, MrHandle, PdHandle, Qp, QpHandle, QpInitAttr,
};
pub use error::{Errno, Error, PostError, Result};
pub use srq::{SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr};
pub use time::SimTime;
pub use transitions::{check_modify, transition_masks, TransitionMasks};
pub use types::*;
