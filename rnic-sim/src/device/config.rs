//! The configuration of a [`SimDevice`](super::SimDevice): identity and limits.

use super::*;

/// Configuration of a [`SimDevice`]: identity and limits. [`SimDeviceConfig::new`] gives
/// rxe-like defaults (`rxe_param.h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimDeviceConfig {
    /// Device name, e.g. `"sim0"`.
    pub name: String,
    /// The port's GID (index 0), IPv4-mapped on RoCEv2.
    pub gid: Gid,
    /// Node GUID.
    pub node_guid: u64,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum WRs per queue.
    pub max_qp_wr: u32,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum completions per CQ.
    pub max_cqe: u32,
    /// Maximum MRs.
    pub max_mr: u32,
    /// Maximum PDs.
    pub max_pd: u32,
    /// Largest MR in bytes.
    pub max_mr_size: u64,
    /// Maximum READ/atomic a QP accepts as responder (`max_dest_rd_atomic` bound).
    pub max_qp_rd_atom: u32,
    /// Maximum READ/atomic a QP issues as requester (`max_rd_atomic` bound).
    pub max_qp_init_rd_atom: u32,
    /// Maximum inline payload in bytes.
    pub max_inline_data: u32,
    /// Maximum shared receive queues (`max_srq`).
    pub max_srq: u32,
    /// Maximum WRs per SRQ (`max_srq_wr`; rxe: `RXE_MAX_SRQ_WR` = `RXE_MAX_QP_WR`).
    pub max_srq_wr: u32,
    /// Maximum SGEs per SRQ WR (`max_srq_sge`; rxe `RXE_MAX_SRQ_SGE` 27).
    pub max_srq_sge: u32,
    /// Where the QPN counter starts (24 bits; 0 and 1 are never handed out). With
    /// [`seed`](Self::seed) 0 it is the first QPN handed out; otherwise the first QPN is its
    /// image under the seed's permutation.
    pub first_qpn: u32,
    /// Virtual address of the first MR.
    pub mr_base_va: u64,
    /// Active MTU reported by `query_port` (the largest path MTU accepted is 4096).
    pub active_mtu: Mtu,
    /// Requester window: at most this many PSNs outstanding (rxe `RXE_MAX_UNACKED_PSNS` 128).
    pub max_unacked_psns: u32,
    /// Requester window in bytes: at most this many bytes of path-MTU-sized packets in flight
    /// per QP (`max(1, bytes / path MTU)` packets), on top of
    /// [`max_unacked_psns`](Self::max_unacked_psns). `u64::MAX` (the default): no byte
    /// limit. A real-time driver sets it from the socket receive buffer the kernel granted
    /// (`fabric::udp::SocketBuffers::rc_window_bytes`), so that one QP's burst never
    /// overruns the peer's buffer (a hardware RNIC has no such limit: the fabric's flow
    /// control does that job). Also settable later: [`SimDevice::set_max_unacked_bytes`].
    /// A finite value also caps all RC QPs to one peer together: they share a send budget of
    /// at most this many bytes in flight, halved on a retransmission and grown back by one
    /// path MTU per window acknowledged (AIMD; docs/performance.md, "Many QPs to one peer").
    pub max_unacked_bytes: u64,
    /// The requester asks for an ACK at least every this many packets
    /// (rxe `RXE_MAX_PKT_PER_ACK` 64).
    pub max_pkts_per_ack: u32,
    /// Seed of the identifiers a peer must not guess. 0 (the default): QPNs count up from
    /// `first_qpn`, lkeys/rkeys are `index << 8 | counter` and MR addresses start at
    /// `mr_base_va` — the sequential values of every trace made before seeds existed. Any
    /// other value: QPNs are a counter under a keyed permutation of the 24-bit space (never 0
    /// or 1, never a live QPN, the next not computable from the last), key indices likewise
    /// with a seeded 8-bit tag, and the MR address allocator starts at a seeded page offset
    /// (`docs/semantics-verbs.md`, "Objects and identity"). The device stays deterministic:
    /// the same seed gives the same identifiers. Real-time drivers pass OS randomness
    /// ([`crate::fabric::udp::os_seed`]); deterministic ones a seed derived from their own.
    pub seed: u64,
    /// Fill the fields of an error work completion that man ibv_poll_cq(3) leaves undefined
    /// ("If the completion status is other than IBV_WC_SUCCESS, only the following attributes
    /// are valid: wr_id, status, qp_num, and vendor_err") with junk: `opcode` (one the queue
    /// never completes: a receive opcode on a send completion and the reverse), `byte_len`
    /// (never 0), `imm_data`, `src_qp`, `wc_flags` (`WITH_IMM` always among the bits),
    /// `pkey_index`, `slid`, `sl`, `dlid_path_bits`. The junk is deterministic: a stream of
    /// [`seed`](Self::seed), so the same seed gives the same values. mlx5 leaves those fields
    /// as the caller's array held them (`mlx5_parse_cqe`, rdma-core providers/mlx5/cq.c), so
    /// a consumer that trusts them reads stale or random values on hardware; this catches it
    /// on the simulator. `false` (the default): they are zero, as rxe fills them (opcode reads
    /// as SEND, byte_len 0), and every trace stays as it was. librnic sets it from
    /// `RNIC_POISON_WC` (docs/capi.md).
    pub poison_undefined_wc_fields: bool,
}

impl SimDeviceConfig {
    /// A configuration named `name` with GID `gid` and rxe-like limits.
    pub fn new(name: impl Into<String>, gid: Gid) -> Self {
        let g = gid.0;
        SimDeviceConfig {
            name: name.into(),
            gid,
            // A GUID derived from the GID (modified EUI-64 style), stable per address.
            node_guid: u64::from_be_bytes([0x02, 0x00, 0x5e, 0xff, 0xfe, g[13], g[14], g[15]]),
            max_qp: 0x1_0000,
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_cq: 0x4000,
            max_cqe: 0x7FFF,
            max_mr: 0x4_0000,
            max_pd: 0x7FFC,
            max_mr_size: 1 << 32,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_inline_data: 400,
            max_srq: 0x1_0000,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            first_qpn: 0x11,
            mr_base_va: 0x1000_0000,
            active_mtu: Mtu::Mtu1024,
            max_unacked_psns: 128,
            max_unacked_bytes: u64::MAX,
            max_pkts_per_ack: 64,
            seed: 0,
            poison_undefined_wc_fields: false,
        }
    }
}
