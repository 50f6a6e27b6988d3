//! Work completions: `struct ibv_wc`.

use super::*;

/// `struct ibv_wc` [verbs.h, man:ibv_poll_cq.3]: a work completion.
///
/// For a status other than `Success` only `wr_id`, `status`, `qp_num` and `vendor_err` are
/// valid; the simulated device zeroes the other fields, as rxe does (cm-spec §5.3), or fills
/// them with junk when `SimDeviceConfig::poison_undefined_wc_fields` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` of the completed work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (valid on success only).
    pub opcode: WcOpcode,
    /// Vendor syndrome (0 on the simulated device).
    pub vendor_err: u32,
    /// Bytes transferred (receives: bytes received; valid on success only).
    pub byte_len: u32,
    /// Immediate data (valid when `wc_flags` has `WITH_IMM`).
    pub imm_data: u32,
    /// Local QP number (24 bits).
    pub qp_num: u32,
    /// Source QP number (UD receives).
    pub src_qp: u32,
    /// Completion flags.
    pub wc_flags: WcFlags,
    /// P_Key index (UD receives).
    pub pkey_index: u16,
    /// Source LID (UD receives; 0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
}

impl WorkCompletion {
    /// An error completion: only `wr_id`, `status`, `qp_num` (and `vendor_err` = 0) set; the
    /// rest zeroed (opcode reads as `Send` = 0), as rxe fills them (cm-spec §5.3).
    pub fn error(wr_id: u64, status: WcStatus, qp_num: u32) -> Self {
        WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::empty(),
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }

    /// A successful completion of `opcode` with `byte_len` bytes.
    pub fn success(wr_id: u64, opcode: WcOpcode, byte_len: u32, qp_num: u32) -> Self {
        WorkCompletion {
            opcode,
            byte_len,
            ..WorkCompletion::error(wr_id, WcStatus::Success, qp_num)
        }
    }
}
