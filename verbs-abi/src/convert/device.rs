//! Device and port attributes, both ways: what librnic reports (`*_to_c`) and what a real
//! device reports to the hardware backend (`*_from_c`, lenient: a value verbs-core has no name
//! for never fails, each function says what it becomes).

use crate::*;
use verbs_core::{DeviceAttr, Mtu, PortAttr, PortState};

/// A C `int` count as `u32` (a negative count, which no provider reports, reads as 0).
fn count(v: libc::c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// `enum ibv_mtu` as a device reports it, as [`Mtu`]; a value outside 1..=5 reads as the
/// nearest MTU (0 as 256, above 5 as 4096).
pub fn mtu_from_c(raw: ibv_mtu) -> Mtu {
    match u8::try_from(raw).ok().and_then(Mtu::from_raw) {
        Some(m) => m,
        None if raw == 0 => Mtu::Mtu256,
        None => Mtu::Mtu4096,
    }
}

/// `struct ibv_device_attr` as [`DeviceAttr`]. The GUIDs, big-endian in C, become numbers;
/// `fw_ver` is read up to its NUL (invalid UTF-8 replaced).
pub fn device_attr_from_c(a: &ibv_device_attr) -> DeviceAttr {
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
/// unknown MTU as in [`mtu_from_c`].
pub fn port_attr_from_c(a: &ibv_port_attr) -> PortAttr {
    PortAttr {
        state: u8::try_from(a.state)
            .ok()
            .and_then(PortState::from_raw)
            .unwrap_or(PortState::Nop),
        max_mtu: mtu_from_c(a.max_mtu),
        active_mtu: mtu_from_c(a.active_mtu),
        gid_tbl_len: count(a.gid_tbl_len),
        max_msg_sz: a.max_msg_sz,
        pkey_tbl_len: a.pkey_tbl_len,
        lid: a.lid,
        link_layer: a.link_layer,
    }
}

/// [`DeviceAttr`] into `struct ibv_device_attr`; limits the simulated RNIC does not have (SRQ,
/// multicast, address handles beyond UD, …) are reported as rxe reports them where it matters
/// to applications sizing their queues, else 0.
pub fn device_attr_to_c(d: &DeviceAttr, out: &mut ibv_device_attr) {
    let fw = d.fw_ver.as_bytes();
    let n = fw.len().min(out.fw_ver.len() - 1);
    for (dst, src) in out.fw_ver.iter_mut().zip(fw.iter().take(n)) {
        *dst = *src as libc::c_char;
    }
    out.node_guid = d.node_guid.to_be();
    out.sys_image_guid = d.sys_image_guid.to_be();
    out.max_mr_size = d.max_mr_size;
    out.page_size_cap = 0xffff_f000;
    out.vendor_id = d.vendor_id;
    out.vendor_part_id = d.vendor_part_id;
    out.hw_ver = 0;
    let int = |v: u32| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
    out.max_qp = int(d.max_qp);
    out.max_qp_wr = int(d.max_qp_wr);
    // `IBV_DEVICE_SRQ_RESIZE` (1 << 13, verbs.h): `ibv_modify_srq` takes `IBV_SRQ_MAX_WR`
    // (rxe's `RXE_DEVICE_CAP_FLAGS` has it too); no other capability is advertised.
    out.device_cap_flags = if d.max_srq > 0 { 1 << 13 } else { 0 };
    out.max_sge = int(d.max_sge);
    out.max_sge_rd = int(d.max_sge);
    out.max_cq = int(d.max_cq);
    out.max_cqe = int(d.max_cqe);
    out.max_mr = int(d.max_mr);
    out.max_pd = int(d.max_pd);
    out.max_qp_rd_atom = int(d.max_qp_rd_atom);
    out.max_ee_rd_atom = 0;
    out.max_res_rd_atom = int(d.max_qp_rd_atom);
    out.max_qp_init_rd_atom = int(d.max_qp_init_rd_atom);
    out.max_srq = int(d.max_srq);
    out.max_srq_wr = int(d.max_srq_wr);
    out.max_srq_sge = int(d.max_srq_sge);
    out.max_ee_init_rd_atom = 0;
    out.atomic_cap = IBV_ATOMIC_HCA;
    out.max_ah = int(d.max_qp);
    out.max_pkeys = 1;
    out.local_ca_ack_delay = 15;
    out.phys_port_cnt = d.phys_port_cnt;
}

/// [`PortAttr`] into the fields of `struct ibv_port_attr` that the old (`_compat`) layout has
/// too; the rest stays as the caller left it.
pub fn port_attr_to_c(p: &PortAttr, out: &mut ibv_port_attr) {
    out.state = p.state as _;
    out.max_mtu = p.max_mtu as _;
    out.active_mtu = p.active_mtu as _;
    out.gid_tbl_len = libc::c_int::try_from(p.gid_tbl_len).unwrap_or(1);
    out.port_cap_flags = 0;
    out.max_msg_sz = p.max_msg_sz;
    out.bad_pkey_cntr = 0;
    out.qkey_viol_cntr = 0;
    out.pkey_tbl_len = p.pkey_tbl_len;
    out.lid = p.lid;
    out.sm_lid = 0;
    out.lmc = 0;
    out.max_vl_num = 1;
    out.sm_sl = 0;
    out.subnet_timeout = 0;
    out.init_type_reply = 0;
    out.active_width = 2; // 4X
    out.active_speed = 32; // 25 Gb/s (EDR), so bandwidth tools print a plausible line rate
    out.phys_state = 5; // LinkUp
    out.link_layer = p.link_layer;
}
