//! Work completions.

use crate::*;
use verbs_core::WorkCompletion;

/// A [`WorkCompletion`] as `struct ibv_wc`. For an error completion only `wr_id`, `status`,
/// `vendor_err` and `qp_num` are defined [man:ibv_poll_cq.3]; the rest is passed as the
/// device filled it.
pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as _,
        opcode: w.opcode as _,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        ex: ibv_wc_ex {
            imm_data: w.imm_data,
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits() as _,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}
