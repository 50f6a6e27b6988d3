//! Error work completions, and the junk that
//! [`SimDeviceConfig::poison_undefined_wc_fields`](crate::SimDeviceConfig::poison_undefined_wc_fields)
//! puts in their undefined fields.
//!
//! man ibv_poll_cq(3): "Not all wc attributes are always valid. If the completion status is
//! other than IBV_WC_SUCCESS, only the following attributes are valid: wr_id, status, qp_num,
//! and vendor_err." rxe zero-fills the rest (`memset(&cqe, 0, …)` in `do_complete`,
//! rxe_resp.c and rxe_comp.c), so an error completion reads as opcode SEND, byte_len 0. mlx5
//! writes only `status`, `vendor_err`, `wr_id`, `qp_num` and `wc_flags = 0` for an error CQE
//! (`mlx5_parse_cqe`, rdma-core providers/mlx5/cq.c, case `MLX5_CQE_REQ_ERR` /
//! `MLX5_CQE_RESP_ERR`): `opcode`, `byte_len`, `imm_data`, `src_qp`, `pkey_index`, `slid`,
//! `sl` and `dlid_path_bits` keep whatever the caller's `struct ibv_wc` array held — stale
//! values of an earlier completion, or uninitialised stack. Poisoning models that: a consumer
//! that reads them gets values that mean nothing.

use crate::rng::Rng;
use verbs_core::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// Stream label of the poison generator (`"wcpz"`), so its values are independent of the
/// identifier streams of the same seed.
const POISON_STREAM: u64 = 0x7763_707a;

/// Which queue an error completion belongs to: the junk opcode is one the queue never
/// completes, so a consumer dispatching on it is wrong every time, not by chance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WcQueue {
    /// A send WQE's completion.
    Send,
    /// A receive WQE's completion.
    Recv,
}

/// The deterministic junk generator of one device (seeded from `SimDeviceConfig::seed`).
#[derive(Debug, Clone)]
pub(crate) struct WcPoison {
    rng: Rng,
}

impl WcPoison {
    /// A generator for device seed `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        WcPoison {
            rng: Rng::new(seed).fork(POISON_STREAM),
        }
    }

    /// Fills every field of `wc` that ibv_poll_cq(3) leaves undefined for an error status with
    /// junk; `wr_id`, `status`, `qp_num` and `vendor_err` are untouched.
    pub fn poison(&mut self, wc: &mut WorkCompletion, queue: WcQueue) {
        let a = self.rng.next_u64();
        let b = self.rng.next_u64();
        // A send completion gets a receive opcode and the reverse.
        wc.opcode = match (queue, a & 1) {
            (WcQueue::Send, 0) => WcOpcode::Recv,
            (WcQueue::Send, _) => WcOpcode::RecvRdmaWithImm,
            (WcQueue::Recv, _) => [
                WcOpcode::Send,
                WcOpcode::RdmaWrite,
                WcOpcode::RdmaRead,
                WcOpcode::CompSwap,
                WcOpcode::FetchAdd,
            ][((a >> 1) % 5) as usize],
        };
        // Never 0: a zero length looks like a plausible empty message.
        wc.byte_len = ((a >> 8) as u32) | 1;
        wc.imm_data = (a >> 40) as u32 ^ b as u32;
        wc.src_qp = (b >> 8) as u32 & 0x00FF_FFFF;
        wc.wc_flags = WcFlags::from_bits_retain((b >> 32) as u32 | WcFlags::WITH_IMM.bits());
        wc.pkey_index = (b >> 16) as u16;
        wc.slid = (a >> 24) as u16;
        wc.sl = (b >> 56) as u8;
        wc.dlid_path_bits = (b >> 48) as u8;
    }
}

/// An error completion of `wr_id` on QP `qpn`: `wr_id`, `status`, `qp_num` and `vendor_err`
/// (0) set; the rest zero as rxe leaves them, or junk from `poison` when the device poisons.
pub(crate) fn error_wc(
    poison: Option<&mut WcPoison>,
    wr_id: u64,
    status: WcStatus,
    qpn: u32,
    queue: WcQueue,
) -> WorkCompletion {
    let mut wc = WorkCompletion::error(wr_id, status, qpn);
    if let Some(p) = poison {
        p.poison(&mut wc, queue);
    }
    wc
}
