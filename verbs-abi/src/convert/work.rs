//! Work requests and work completions: what the hardware backend posts and polls, what
//! librnic reports.

use crate::*;
use verbs_core::{RecvWr, SendWr, Sge, WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// [`Sge`] as `struct ibv_sge`.
pub fn sge_to_c(g: &Sge) -> ibv_sge {
    ibv_sge {
        addr: g.addr,
        length: g.length,
        lkey: g.lkey,
    }
}

/// The C form of `w`, with its SGEs at `sg_list` (`num_sge` of them) and no successor
/// (`next` NULL). `opcode` and `send_flags` pass numerically (verbs-core's values are
/// libibverbs'), `imm_data` as is (network order). Atomic WRs fill the `atomic` part of the `wr`
/// union, every other opcode the `rdma` part (unused by SENDs); `qp_type` and `bind_tso` are
/// zero (no XRC, no memory windows, no TSO).
pub fn send_wr_to_c(w: &SendWr, sg_list: *mut ibv_sge, num_sge: libc::c_int) -> ibv_send_wr {
    let wr = if w.opcode.is_atomic() {
        ibv_send_wr_wr {
            atomic: ibv_send_wr_atomic {
                remote_addr: w.atomic.remote_addr,
                compare_add: w.atomic.compare_add,
                swap: w.atomic.swap,
                rkey: w.atomic.rkey,
            },
        }
    } else {
        ibv_send_wr_wr {
            rdma: ibv_send_wr_rdma {
                remote_addr: w.rdma.remote_addr,
                rkey: w.rdma.rkey,
            },
        }
    };
    ibv_send_wr {
        wr_id: w.wr_id,
        next: std::ptr::null_mut(),
        sg_list,
        num_sge,
        opcode: ibv_wr_opcode::from(w.opcode.raw()),
        send_flags: w.send_flags.bits(),
        ex: ibv_send_wr_ex {
            imm_data: w.imm_data,
        },
        wr,
        qp_type: ibv_send_wr_qp_type {
            xrc: ibv_send_wr_xrc { remote_srqn: 0 },
        },
        bind_tso: ibv_send_wr_bind_tso {
            tso: ibv_send_wr_tso {
                hdr: std::ptr::null_mut(),
                hdr_sz: 0,
                mss: 0,
            },
        },
    }
}

/// The C form of `w`, with its SGEs at `sg_list` (`num_sge` of them) and no successor.
pub fn recv_wr_to_c(w: &RecvWr, sg_list: *mut ibv_sge, num_sge: libc::c_int) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id: w.wr_id,
        next: std::ptr::null_mut(),
        sg_list,
        num_sge,
    }
}

/// `enum ibv_wc_status` as a device reports it, as [`WcStatus`]; a status verbs-core does not
/// name (a newer rdma-core's) reads as `GeneralErr` (21), so it is still an error.
pub fn wc_status_from_c(raw: ibv_wc_status) -> WcStatus {
    u8::try_from(raw)
        .ok()
        .and_then(WcStatus::from_raw)
        .unwrap_or(WcStatus::GeneralErr)
}

/// `enum ibv_wc_opcode` as a device reports it, as [`WcOpcode`]; an opcode verbs-core does not
/// name reads as `Recv` when its receive bit ([`IBV_WC_RECV`]) is set, else as `Send`
/// (tag-matching and driver-specific opcodes, which RC and UC QPs do not produce).
pub fn wc_opcode_from_c(raw: ibv_wc_opcode) -> WcOpcode {
    match u8::try_from(raw).ok().and_then(WcOpcode::from_raw) {
        Some(op) => op,
        None if raw & IBV_WC_RECV != 0 => WcOpcode::Recv,
        None => WcOpcode::Send,
    }
}

/// `struct ibv_wc` as a device fills it, as [`WorkCompletion`], every field: status and opcode
/// as in [`wc_status_from_c`] and [`wc_opcode_from_c`], `wc_flags` the bits verbs-core names
/// (`GRH`, `WITH_IMM`; others such as `IBV_WC_IP_CSUM_OK` dropped). `imm_data` is the union
/// `w.ex` read by the caller (its raw, network-order value).
pub fn wc_from_c(w: &ibv_wc, imm_data: __be32) -> WorkCompletion {
    WorkCompletion {
        wr_id: w.wr_id,
        status: wc_status_from_c(w.status),
        opcode: wc_opcode_from_c(w.opcode),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: WcFlags::from_bits_truncate(w.wc_flags),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

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

/// An all-zero `struct ibv_wc`, to poll into.
pub fn wc_zeroed() -> ibv_wc {
    ibv_wc {
        wr_id: 0,
        status: 0,
        opcode: 0,
        vendor_err: 0,
        byte_len: 0,
        ex: ibv_wc_ex { imm_data: 0 },
        qp_num: 0,
        src_qp: 0,
        wc_flags: 0,
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}
