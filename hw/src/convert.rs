//! Conversions between libibverbs' C structs (rdma-mummy-sys) and verbs-core's types.
//!
//! The numbers are rdma-core's on both sides (verbs-core names rdma-core's values), so values
//! pass through. A value libibverbs returns that verbs-core has no name for never panics: each
//! function says what it becomes. The two union reads (`ibv_gid`, `ibv_wc`'s immediate data)
//! are in [`crate::ffi`].

use crate::ffi;
use rdma_mummy_sys as sys;
use verbs_core::{
    AccessFlags, AhAttr, DeviceAttr, GlobalRoute, Mtu, PortAttr, PortState, QpAttr, QpAttrMask,
    QpCap, QpState, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};

/// A C `int` count as `u32` (a negative count, which no provider reports, reads as 0).
fn count(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// `enum ibv_mtu` as [`Mtu`]; a value outside 1..=5 reads as the nearest MTU (0 as 256, above
/// 5 as 4096).
pub(crate) fn mtu(raw: u32) -> Mtu {
    match u8::try_from(raw).ok().and_then(Mtu::from_raw) {
        Some(m) => m,
        None if raw == 0 => Mtu::Mtu256,
        None => Mtu::Mtu4096,
    }
}

/// `struct ibv_device_attr` as [`DeviceAttr`]. The GUIDs, big-endian in C, become numbers.
pub(crate) fn device_attr(a: &sys::ibv_device_attr) -> DeviceAttr {
    let fw: Vec<u8> = a
        .fw_ver
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    DeviceAttr {
        fw_ver: String::from_utf8_lossy(&fw).into_owned(),
        node_guid: u64::from_be(a.node_guid),
        sys_image_guid: u64::from_be(a.sys_image_guid),
        max_mr_size: a.max_mr_size,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        max_qp: count(a.max_qp),
        max_qp_wr: count(a.max_qp_wr),
        max_sge: count(a.max_sge),
        max_cq: count(a.max_cq),
        max_cqe: count(a.max_cqe),
        max_mr: count(a.max_mr),
        max_pd: count(a.max_pd),
        max_qp_rd_atom: count(a.max_qp_rd_atom),
        max_qp_init_rd_atom: count(a.max_qp_init_rd_atom),
        max_srq: count(a.max_srq),
        max_srq_wr: count(a.max_srq_wr),
        max_srq_sge: count(a.max_srq_sge),
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// `struct ibv_port_attr` as [`PortAttr`]; an unknown port state reads as `Nop` (0), an
/// unknown MTU as in [`mtu`].
pub(crate) fn port_attr(a: &sys::ibv_port_attr) -> PortAttr {
    PortAttr {
        state: u8::try_from(a.state)
            .ok()
            .and_then(PortState::from_raw)
            .unwrap_or(PortState::Nop),
        max_mtu: mtu(a.max_mtu),
        active_mtu: mtu(a.active_mtu),
        gid_tbl_len: count(a.gid_tbl_len),
        max_msg_sz: a.max_msg_sz,
        pkey_tbl_len: a.pkey_tbl_len,
        lid: a.lid,
        link_layer: a.link_layer,
    }
}

/// [`QpCap`] as `struct ibv_qp_cap`.
pub(crate) fn cap_to_c(c: &QpCap) -> sys::ibv_qp_cap {
    sys::ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `struct ibv_qp_cap` as [`QpCap`].
pub(crate) fn cap_from_c(c: &sys::ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// [`AhAttr`] as `struct ibv_ah_attr`.
pub(crate) fn ah_to_c(a: &AhAttr) -> sys::ibv_ah_attr {
    sys::ibv_ah_attr {
        grh: sys::ibv_global_route {
            dgid: sys::ibv_gid { raw: a.grh.dgid.0 },
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: u8::from(a.is_global),
        port_num: a.port_num,
    }
}

/// `struct ibv_ah_attr` as [`AhAttr`].
pub(crate) fn ah_from_c(a: &sys::ibv_ah_attr) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: ffi::gid_of(&a.grh.dgid),
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global != 0,
        port_num: a.port_num,
    }
}

/// What the device fills in of a modify that the connection manager cannot know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Local {
    /// The port chosen at open.
    pub(crate) port: u8,
    /// The GID index chosen at open.
    pub(crate) sgid_index: u8,
    /// The port's active MTU now, if it could be queried.
    pub(crate) active_mtu: Option<Mtu>,
}

/// [`QpAttr`] as `struct ibv_qp_attr` for `ibv_modify_qp` (the mask's bits are libibverbs'
/// `ibv_qp_attr_mask`, unchanged). Every field is written; `mask` selects what the provider
/// reads. Local facts override the CM's values:
///
/// * `AV`: `is_global` = 1, `grh.sgid_index` = the GID chosen at open, `port_num` = the port:
///   RoCE requires a GRH, and rdma_cm fills the same from its bound device (librdmacm's
///   `rdma_init_qp_attr`).
/// * `PORT`: `port_num` = the port.
/// * `PATH_MTU`: at most the port's active MTU, as the path record rdma_cm resolves carries
///   `min(path MTU, active MTU)` (a QP with a larger MTU than the netdev's would send frames
///   the link drops).
pub(crate) fn qp_attr_to_c(a: &QpAttr, mask: QpAttrMask, local: &Local) -> sys::ibv_qp_attr {
    let mut ah = ah_to_c(&a.ah_attr);
    let mut port_num = a.port_num;
    if mask.contains(QpAttrMask::AV) {
        ah.is_global = 1;
        ah.grh.sgid_index = local.sgid_index;
        ah.port_num = local.port;
    }
    if mask.contains(QpAttrMask::PORT) {
        port_num = local.port;
    }
    let path_mtu = match local.active_mtu {
        Some(active) if mask.contains(QpAttrMask::PATH_MTU) => a.path_mtu.min(active),
        _ => a.path_mtu,
    };
    sys::ibv_qp_attr {
        qp_state: u32::from(a.qp_state.raw()),
        cur_qp_state: u32::from(a.cur_qp_state.raw()),
        path_mtu: u32::from(path_mtu.raw()),
        path_mig_state: sys::ibv_mig_state::IBV_MIG_MIGRATED,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: cap_to_c(&a.cap),
        ah_attr: ah,
        alt_ah_attr: ah_to_c(&AhAttr::default()),
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: u8::from(a.en_sqd_async_notify),
        sq_draining: 0,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    }
}

/// `struct ibv_qp_attr` from `ibv_query_qp` as [`QpAttr`]: an unknown state reads as
/// `Unknown` (7), an unknown MTU as in [`mtu`], access bits verbs-core does not name are
/// dropped.
pub(crate) fn qp_attr_from_c(a: &sys::ibv_qp_attr) -> QpAttr {
    let state = |v: u32| {
        u8::try_from(v)
            .ok()
            .and_then(QpState::from_raw)
            .unwrap_or(QpState::Unknown)
    };
    QpAttr {
        qp_state: state(a.qp_state),
        cur_qp_state: state(a.cur_qp_state),
        path_mtu: mtu(a.path_mtu),
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: AccessFlags::from_bits_truncate(a.qp_access_flags),
        cap: cap_from_c(&a.cap),
        ah_attr: ah_from_c(&a.ah_attr),
        pkey_index: a.pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify != 0,
        sq_draining: a.sq_draining != 0,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
    }
}

/// `enum ibv_wc_status` as [`WcStatus`]; a status verbs-core does not name (a newer
/// rdma-core's) reads as `GeneralErr` (21), so it is still an error, with `vendor_err` kept.
pub(crate) fn wc_status(raw: u32) -> WcStatus {
    u8::try_from(raw)
        .ok()
        .and_then(WcStatus::from_raw)
        .unwrap_or(WcStatus::GeneralErr)
}

/// `enum ibv_wc_opcode` as [`WcOpcode`]; an opcode verbs-core does not name reads as `Recv`
/// when its receive bit (`IBV_WC_RECV` = 0x80) is set, else as `Send` (tag-matching and
/// driver-specific opcodes, which the QPs this device creates do not produce).
pub(crate) fn wc_opcode(raw: u32) -> WcOpcode {
    match u8::try_from(raw).ok().and_then(WcOpcode::from_raw) {
        Some(op) => op,
        None if raw & 0x80 != 0 => WcOpcode::Recv,
        None => WcOpcode::Send,
    }
}

/// `struct ibv_wc` as [`WorkCompletion`], every field: status and opcode as in [`wc_status`]
/// and [`wc_opcode`], `imm_data` the raw (network-order) value of the union, `wc_flags` the
/// bits verbs-core names (`GRH`, `WITH_IMM`; others such as `IBV_WC_IP_CSUM_OK` dropped).
pub(crate) fn wc(w: &sys::ibv_wc) -> WorkCompletion {
    WorkCompletion {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode: wc_opcode(w.opcode),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: ffi::wc_imm(w),
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: WcFlags::from_bits_truncate(w.wc_flags),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_core::Gid;

    #[test]
    fn unknown_numbers_do_not_panic() {
        assert_eq!(mtu(0), Mtu::Mtu256);
        assert_eq!(mtu(3), Mtu::Mtu1024);
        assert_eq!(mtu(77), Mtu::Mtu4096);
        assert_eq!(mtu(u32::MAX), Mtu::Mtu4096);
        assert_eq!(wc_status(5), WcStatus::WrFlushErr);
        assert_eq!(wc_status(99), WcStatus::GeneralErr);
        assert_eq!(wc_status(u32::MAX), WcStatus::GeneralErr);
        assert_eq!(wc_opcode(129), WcOpcode::RecvRdmaWithImm);
        assert_eq!(wc_opcode(133), WcOpcode::Recv);
        assert_eq!(wc_opcode(9), WcOpcode::Send);
        assert_eq!(wc_opcode(u32::MAX), WcOpcode::Recv);
    }

    #[test]
    fn modify_fills_in_the_local_port_gid_and_mtu() {
        let mut a = QpAttr {
            path_mtu: Mtu::Mtu4096,
            port_num: 9,
            ..QpAttr::default()
        };
        a.ah_attr.grh.dgid = Gid([7; 16]);
        a.ah_attr.grh.hop_limit = 64;
        let local = Local {
            port: 2,
            sgid_index: 3,
            active_mtu: Some(Mtu::Mtu1024),
        };
        let m = QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::PORT;
        let c = qp_attr_to_c(&a, m, &local);
        assert_eq!(c.ah_attr.is_global, 1);
        assert_eq!(c.ah_attr.grh.sgid_index, 3);
        assert_eq!(c.ah_attr.port_num, 2);
        assert_eq!(c.ah_attr.grh.hop_limit, 64);
        assert_eq!(c.port_num, 2);
        assert_eq!(c.path_mtu, 3);
        let back = ah_from_c(&c.ah_attr);
        assert_eq!(back.grh.dgid, Gid([7; 16]));
        // Without the bits, the CM's values pass through.
        let c = qp_attr_to_c(&a, QpAttrMask::STATE, &local);
        assert_eq!((c.ah_attr.is_global, c.port_num, c.path_mtu), (0, 9, 5));
    }
}
