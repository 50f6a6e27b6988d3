//! # verbs-abi — the one definition of the libibverbs and librdmacm C ABI
//!
//! The C structs of libibverbs and librdmacm, laid out as rdma-core 44's headers lay them out on
//! x86-64 Linux. Both directions of the C ABI use them: `rnic-capi` (librnic.so) exports them
//! to C programs, and `rnic-hw` (feature `hw`) reads them from a real libibverbs it loads at
//! run time.
//!
//! * `/usr/include/infiniband/verbs.h` → [`verbs`] (the `ibv_*` structs) and [`verbs_ex`]
//!   (the extended verbs: `verbs_context`, `ibv_cq_ex`, `ibv_qp_ex`, `ibv_device_attr_ex`, and
//!   `verbs_device` of libibverbs's private `driver.h`),
//! * `/usr/include/rdma/rdma_cma.h`, `/usr/include/infiniband/sa.h` (`ibv_sa_path_rec`) and
//!   `/usr/include/infiniband/ib.h` (`sockaddr_ib`) → [`cm`] (the `rdma_*` structs),
//! * the constants of both, and the integer types of their enums → [`consts`];
//! * [`functions`]: the prototypes of the libibverbs functions both directions use, as
//!   function pointer types;
//! * [`convert`]: the conversions between these structs and `verbs-core`'s types (pure field
//!   mapping; what needs a pointer dereferenced or a union read stays in the FFI crates).
//!
//! All three are re-exported here: `verbs_abi::ibv_qp`, `verbs_abi::IBV_WR_SEND` are the paths to
//! use (`rnic::abi::…` in `rnic-capi`, which re-exports this crate as `abi`).
//! Types, fields and constants carry the C names, every field is in header order with the
//! header's type (`uint32_t` → `u32`, `int` → [`c_int`](libc::c_int), `__be32` → [`__be32`],
//! `pthread_mutex_t` → [`libc::pthread_mutex_t`], a function pointer →
//! `Option<unsafe extern "C" fn(..)>`, so a zeroed slot is `NULL`). A named C `enum` is a type
//! alias of the integer the compiler gives it (`c_uint`, or `c_int` when it has a negative
//! value); its values are `pub const`s of that alias. Flag sets and anonymous enums are
//! `pub const`s of the type of the field (or parameter) that holds them, e.g. `IBV_SEND_*:
//! c_uint` for `ibv_send_wr.send_flags`, `IBV_QP_*: c_int` for `ibv_modify_qp`'s `attr_mask`.
//! [`CONSTANTS`] lists every constant by C name.
//!
//! `tests/layout.rs` compiles a C probe against the installed headers and checks the size and
//! alignment of every type, the offset and size of every field (nested ones included) and the
//! value of every constant against these definitions.
//!
//! # Names for what C leaves anonymous
//!
//! A C anonymous union must be a named field in Rust. The C member names stay as they are, one
//! level down:
//!
//! | C | Rust field | Rust type | members |
//! |---|---|---|---|
//! | `ibv_send_wr`'s `union { imm_data; invalidate_rkey; }` | `ex` | [`ibv_send_wr_ex`] | `imm_data`, `invalidate_rkey` |
//! | `ibv_send_wr.wr` | `wr` | [`ibv_send_wr_wr`] | `rdma` ([`ibv_send_wr_rdma`]: `remote_addr`, `rkey`), `atomic` ([`ibv_send_wr_atomic`]: `remote_addr`, `compare_add`, `swap`, `rkey`), `ud` ([`ibv_send_wr_ud`]: `ah`, `remote_qpn`, `remote_qkey`) |
//! | `ibv_send_wr.qp_type` | `qp_type` | [`ibv_send_wr_qp_type`] | `xrc` ([`ibv_send_wr_xrc`]: `remote_srqn`) |
//! | `ibv_send_wr`'s `union { bind_mw; tso; }` | `bind_tso` | [`ibv_send_wr_bind_tso`] | `bind_mw` ([`ibv_send_wr_bind_mw`]: `mw`, `rkey`, `bind_info`), `tso` ([`ibv_send_wr_tso`]: `hdr`, `hdr_sz`, `mss`) |
//! | `ibv_wc`'s `union { imm_data; invalidated_rkey; }` | `ex` | [`ibv_wc_ex`] | `imm_data`, `invalidated_rkey` |
//! | `union ibv_gid` | — | [`ibv_gid`] (a union) | `raw`, `global` ([`ibv_gid_global`]: `subnet_prefix`, `interface_id`) |
//! | `ibv_async_event.element` | `element` | [`ibv_async_event_element`] | `cq`, `qp`, `srq`, `wq`, `port_num` |
//! | `rdma_addr`'s first `union` | `src` | [`rdma_addr_src`] | `src_addr`, `src_sin`, `src_sin6`, `src_storage` |
//! | `rdma_addr`'s second `union` | `dst` | [`rdma_addr_dst`] | `dst_addr`, `dst_sin`, `dst_sin6`, `dst_storage` |
//! | `rdma_addr.addr` | `addr` | [`rdma_addr_addr`] | `ibaddr` |
//! | `rdma_cm_event.param` | `param` | [`rdma_cm_event_param`] | `conn`, `ud` |
//! | `ib_addr.ib_u` | `ib_u` | [`ib_addr_ib_u`] | `uib_addr8`, `uib_addr16`, `uib_addr32`, `uib_addr64` |
//!
//! `src_storage`/`dst_storage` are `struct sockaddr_storage` (128 bytes), as in the header;
//! an `AF_IB` address ([`sockaddr_ib`], 48 bytes) fits in it. The C field `ibv_mw.type` is
//! `r#type`, the C fields named `priv` (`verbs_context.priv`, `ibv_wc_tm_info.priv`) are
//! `r#priv`. `ibv_odp_caps.per_transport_caps`, an anonymous struct in C, has the type
//! [`ibv_odp_caps_per_transport`].
//!
//! Reading a union field is `unsafe`; this crate only defines the types (it forbids
//! `unsafe_code`: the FFI crates read unions). Every type is `Clone + Copy`, as union members must be.

// C names: `ibv_qp`, `__be32`, `_ibv_device_ops`.
#![allow(non_camel_case_types)]

/// `__be16` (`<linux/types.h>`): a `u16` in network byte order.
pub type __be16 = u16;
/// `__be32` (`<linux/types.h>`): a `u32` in network byte order.
pub type __be32 = u32;
/// `__be64` (`<linux/types.h>`): a `u64` in network byte order.
pub type __be64 = u64;

/// Defines C constants, each with a generated doc, and a table of them all by C name.
///
/// ```text
/// c_constants! {
///     /// doc of the table
///     TABLE_NAME;
///     /// `enum ibv_wr_opcode`: what it is for.   (becomes part of each constant's doc)
///     rust_type { C_NAME = value, ... }
///     ...
/// }
/// ```
macro_rules! c_constants {
    (
        $(#[doc = $table_doc:literal])*
        $table:ident;
        $(
            #[doc = $group_doc:literal]
            $ty:ty { $($name:ident = $value:expr),+ $(,)? }
        )+
    ) => {
        $($(
            #[doc = concat!("`", stringify!($name), "` = `", stringify!($value), "`:", $group_doc)]
            pub const $name: $ty = $value;
        )+)+

        $(#[doc = $table_doc])*
        pub const $table: &[(&str, i128)] = &[$($((stringify!($name), $name as i128),)+)+];
    };
}

pub mod cm;
pub mod consts;
pub mod convert;
pub mod functions;
pub mod verbs;
pub mod verbs_ex;

pub use cm::*;
pub use consts::*;
pub use verbs::*;
pub use verbs_ex::*;
