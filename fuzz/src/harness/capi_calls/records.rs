//! The records of an input: [`Call`], one per call, and the [`Field`]s its arguments are
//! read from (and written in, by the seeds).

use super::super::input::{Input, Output};
use super::MAX_WRS;

/// One field of a record: read from the input, written by the corpus generator.
pub trait Field: Sized {
    /// Reads the field; `None` at the end of the input.
    fn read(inp: &mut Input<'_>) -> Option<Self>;
    /// Appends the field.
    fn write(&self, out: &mut Output);
}

impl Field for u8 {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        inp.u8()
    }
    fn write(&self, out: &mut Output) {
        out.u8(*self);
    }
}

impl Field for u16 {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        inp.u16()
    }
    fn write(&self, out: &mut Output) {
        out.u16(*self);
    }
}

impl Field for u32 {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        let lo = inp.u16()?;
        let hi = inp.u16()?;
        Some(u32::from(lo) | u32::from(hi) << 16)
    }
    fn write(&self, out: &mut Output) {
        out.u16(*self as u16).u16((*self >> 16) as u16);
    }
}

/// A list: a count byte (modulo `MAX_WRS + 1`), then the items.
impl<T: Field> Field for Vec<T> {
    fn read(inp: &mut Input<'_>) -> Option<Self> {
        let n = usize::from(inp.u8()?) % (MAX_WRS + 1);
        (0..n).map(|_| T::read(inp)).collect()
    }
    fn write(&self, out: &mut Output) {
        let n = self.len().min(MAX_WRS);
        out.u8(n as u8);
        for x in self.iter().take(n) {
            x.write(out);
        }
    }
}

macro_rules! fields_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        impl Field for $name {
            fn read(inp: &mut Input<'_>) -> Option<Self> {
                Some($name { $($f: <$t>::read(inp)?),* })
            }
            fn write(&self, out: &mut Output) {
                $(self.$f.write(out);)*
            }
        }
    };
}

fields_struct! {
    /// One SGE of a WR: which region its key and address come from, and how.
    SgeSpec {
        /// The region (a live MR slot by index; 0xF8.. none: the key and address below raw).
        mr: u8,
        /// Offset from the region's start (signed 16 bits: may start before it).
        off: u16,
        /// Length.
        len: u16,
        /// Key: 0 the MR's lkey, 1 its rkey, 2 a deregistered key, 3 `off`/`len` as a raw key.
        key: u8,
    }
}

fields_struct! {
    /// A send WR.
    SendSpec {
        /// `opcode`: below 7 as is, 7.. any value (`opcode` itself).
        opcode: u8,
        /// `send_flags` (IBV_SEND_*: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8; others raw).
        flags: u8,
        /// `num_sge`: 0..=4 as is (the list's length), 5 one more than the list, 6 -1, 7 large.
        nsge: u8,
        /// The SGE list (empty and `nsge` 0xFF: `sg_list` NULL).
        sges: Vec<SgeSpec>,
        /// Remote region (an MR slot by index) for RDMA/atomics; bit 7: rkey raw.
        remote: u8,
        /// Offset into it (may be unaligned or outside).
        roff: u16,
        /// AH (an AH slot by index, 0xF8.. NULL).
        ah: u8,
    }
}

fields_struct! {
    /// A receive WR.
    RecvSpec {
        /// `num_sge`, as [`SendSpec::nsge`].
        nsge: u8,
        /// The SGE list.
        sges: Vec<SgeSpec>,
    }
}

fields_struct! {
    /// `struct rdma_conn_param`, or NULL.
    ParamSpec {
        /// 0xF0..: NULL parameters.
        null: u8,
        /// `private_data_len`.
        len: u8,
        /// 0xF0..: `private_data` NULL (with `len` as given).
        data_null: u8,
        /// `responder_resources`.
        rr: u8,
        /// `initiator_depth`.
        depth: u8,
        /// `retry_count`, `rnr_retry_count` (4 bits each).
        retries: u8,
    }
}

macro_rules! calls {
    ($($n:literal => $(#[$m:meta])* $name:ident { $($f:ident : $t:ty),* $(,)? }),* $(,)?) => {
        /// One record: a call and the choices its arguments are made from (object choices
        /// are bytes: below 0xF8 an index into the live objects of the kind, else NULL).
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Call { $($(#[$m])* $name { $($f: $t),* }),* }

        /// The number of record kinds.
        pub const CALLS: u8 = [$($n),*].len() as u8;

        impl Call {
            /// Reads the next record; `None` at the end of the input.
            pub fn read(inp: &mut Input<'_>) -> Option<Call> {
                let op = inp.u8()? % CALLS;
                $(if op == $n {
                    return Some(Call::$name { $($f: <$t>::read(inp)?),* });
                })*
                None
            }

            /// Appends this record in the form [`Call::read`] reads.
            pub fn write(&self, out: &mut Output) {
                match self {
                    $(Call::$name { $($f),* } => {
                        out.u8($n);
                        $(Field::write($f, out);)*
                    })*
                }
            }
        }
    };
}

calls! {
    0 => /// `ibv_open_device` (of NULL when `null % 8 == 7`).
    OpenDevice { null: u8 },
    1 => /// `ibv_close_device`.
    CloseDevice { ctx: u8 },
    2 => /// `what % 4`: `ibv_query_device`, `_port`, `_gid`, `_pkey`; `null % 8 == 7`: NULL out.
    Query { ctx: u8, what: u8, port: u8, index: u8, null: u8 },
    3 => /// `ibv_alloc_pd`.
    AllocPd { ctx: u8 },
    4 => /// `ibv_dealloc_pd`.
    DeallocPd { pd: u8 },
    5 => /// `ibv_reg_mr` / `ibv_reg_mr_iova2`: arena offset (0xFFFF: NULL), length, iova mode
    /// (`iova % 5`: none, = addr, page-offset-preserving `v << 12`, raw `v`, near 2^64),
    /// access bits.
    RegMr { pd: u8, off: u16, len: u16, iova: u8, v: u32, access: u32 },
    6 => /// `ibv_dereg_mr`.
    DeregMr { mr: u8 },
    7 => /// `ibv_create_comp_channel`.
    CreateCompChannel { ctx: u8 },
    8 => /// `ibv_destroy_comp_channel`.
    DestroyCompChannel { ch: u8 },
    9 => /// `ibv_create_cq` (cqe from a table of edge values, or raw).
    CreateCq { ctx: u8, cqe: u8, raw: u32, ch: u8 },
    10 => /// `ibv_destroy_cq`.
    DestroyCq { cq: u8 },
    11 => /// `ibv_req_notify_cq`.
    ReqNotifyCq { cq: u8, solicited: u8 },
    12 => /// `ibv_poll_cq` (`n`: the count, signed; `null % 8 == 7`: NULL `wc`).
    PollCq { cq: u8, n: u8, null: u8 },
    13 => /// `ibv_get_cq_event`.
    GetCqEvent { ch: u8, null: u8 },
    14 => /// `ibv_create_qp` (`null % 8 == 7`: NULL attributes; caps from a table or raw).
    CreateQp { pd: u8, null: u8, scq: u8, rcq: u8, qp_type: u8, caps: u32, sig: u8 },
    15 => /// `ibv_modify_qp` on a QP (bit 6 of `qp`: an id's QP): target state, mask mode,
    /// raw mask bits, one field corrupted (`fix`) to `v`.
    ModifyQp { qp: u8, null: u8, target: u8, mode: u8, mask: u32, fix: u8, v: u32 },
    16 => /// `ibv_query_qp`.
    QueryQp { qp: u8, null: u8 },
    17 => /// `ibv_destroy_qp`.
    DestroyQp { qp: u8 },
    18 => /// `ibv_post_send` (`bad`: bit 0 `bad_wr` given).
    PostSend { qp: u8, bad: u8, wrs: Vec<SendSpec> },
    19 => /// `ibv_post_recv`.
    PostRecv { qp: u8, bad: u8, wrs: Vec<RecvSpec> },
    20 => /// `ibv_create_ah` (a valid vector with one field corrupted).
    CreateAh { pd: u8, null: u8, fix: u8, v: u32 },
    21 => /// `ibv_destroy_ah`.
    DestroyAh { ah: u8 },
    22 => /// `ibv_get_async_event` (non-blocking).
    GetAsyncEvent { ctx: u8, null: u8 },
    23 => /// `rdma_create_id` on shared channel `ch % 3` (2: NULL); port space by `ps`.
    CreateId { ch: u8, ps: u8, null: u8 },
    24 => /// `rdma_destroy_id`.
    DestroyId { id: u8 },
    25 => /// `rdma_bind_addr` (`addr`: which address; `port`).
    BindAddr { id: u8, addr: u8, port: u16 },
    26 => /// `rdma_resolve_addr`.
    ResolveAddr { id: u8, src: u8, dst: u8, port: u16 },
    27 => /// `rdma_resolve_route`.
    ResolveRoute { id: u8 },
    28 => /// `rdma_create_qp` (PD: bit 7 of `pd` clear: NULL; CQs may be NULL).
    RdmaCreateQp { id: u8, pd: u8, null: u8, scq: u8, rcq: u8, qp_type: u8, caps: u32 },
    29 => /// `rdma_destroy_qp`.
    RdmaDestroyQp { id: u8 },
    30 => /// `rdma_connect`.
    Connect { id: u8, param: ParamSpec },
    31 => /// `rdma_listen`.
    Listen { id: u8, backlog: u8 },
    32 => /// `rdma_accept`.
    Accept { id: u8, param: ParamSpec },
    33 => /// `rdma_reject`.
    Reject { id: u8, null: u8, len: u8 },
    34 => /// `rdma_disconnect`.
    Disconnect { id: u8 },
    35 => /// `which % 3`: `rdma_establish`, `rdma_notify(COMM_EST)`, `rdma_notify(other)`.
    Establish { id: u8, which: u8 },
    36 => /// `rdma_set_option`.
    SetOption { id: u8, opt: u8, null: u8 },
    37 => /// `rdma_init_qp_attr` (`state`: the `qp_state` asked; `null`: which pointer NULL).
    InitQpAttr { id: u8, state: u8, null: u8 },
    38 => /// `rdma_get_cm_event` on shared channel `ch % 3` (2: NULL).
    GetCmEvent { ch: u8, null: u8 },
    39 => /// `rdma_ack_cm_event`.
    AckCmEvent { ev: u8 },
    40 => /// `rdma_get_src_port` / `rdma_get_dst_port`.
    Ports { id: u8 },
    41 => /// Polls every CQ until empty.
    PollAll {},
}
