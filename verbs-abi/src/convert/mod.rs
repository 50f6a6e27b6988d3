//! Conversions between the C structs of this crate and the Rust types of `verbs-core`. Values
//! are passed through unchanged: the enums and flag bits of `verbs-core` have rdma-core's
//! numbers (a value `verbs-core` has no name for is `EINVAL`, as a provider refuses it). The
//! callers turn pointers into references and read unions first (both are `unsafe`, which this
//! crate forbids): a conversion that needs a union member takes it as an argument.
//!
//! Files: `qp` (QP capacities, address vectors, attributes, types), `device` (device and
//! port attributes), `work` (work completions), `sockaddr` (socket addresses), `grh` (the
//! address vector back to a UD datagram's sender, `ibv_init_ah_from_wc`). Everything is
//! re-exported here.

mod device;
mod grh;
mod qp;
mod sockaddr;
mod work;

pub use device::*;
pub use grh::*;
pub use qp::*;
pub use sockaddr::*;
pub use work::*;

#[cfg(test)]
mod tests;
