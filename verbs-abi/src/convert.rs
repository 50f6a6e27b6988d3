//! Conversions between the C structs of this crate and the Rust types of `verbs-core`. Values
//! are passed through unchanged: the enums and flag bits of `verbs-core` have rdma-core's
//! numbers (a value `verbs-core` has no name for is `EINVAL`, as a provider refuses it). The
//! callers turn pointers into references and read unions first (both are `unsafe`, which this
//! crate forbids): a conversion that needs a union member takes it as an argument.

use crate::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use verbs_core::{
    AccessFlags, AhAttr, DeviceAttr, Error, Gid, GlobalRoute, Mtu, PortAttr, QpAttr, QpAttrMask,
    QpCap, QpState, QpType, WorkCompletion,
};

fn inval(what: &'static str) -> Error {
    Error::inval(what.to_string())
}

/// A [`Gid`] as a `union ibv_gid`.
pub fn gid_to_c(g: Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}

/// `struct ibv_qp_cap` as [`QpCap`].
pub fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// [`QpCap`] as `struct ibv_qp_cap`.
pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `struct ibv_ah_attr` as [`AhAttr`]; `dgid` is `a.grh.dgid`, read by the caller (a union).
pub fn ah_from_c(a: &ibv_ah_attr, dgid: Gid) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid,
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

/// [`AhAttr`] as `struct ibv_ah_attr`.
pub fn ah_to_c(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: gid_to_c(a.grh.dgid),
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

/// `ibv_access_flags` of `ibv_modify_qp` as [`AccessFlags`]: the bits `verbs-core` knows;
/// the others are dropped, as providers do (rxe stores the word, mlx5 reads its remote-access
/// bits): no access bit makes a modify fail in rdma-core.
pub fn access_from_c(bits: u32) -> AccessFlags {
    AccessFlags::from_bits_truncate(bits)
}

/// `struct ibv_qp_attr` + `attr_mask` as [`QpAttr`] + [`QpAttrMask`]. Fields outside the mask
/// are not read (they may be garbage, as `ibv_modify_qp(3)` allows); `dgid` is
/// `a.ah_attr.grh.dgid`, read by the caller (a union), used only with `IBV_QP_AV`.
///
/// # Errors
/// `EINVAL` for a mask bit or an enum value `verbs-core` does not know (as a provider refuses
/// them).
pub fn qp_attr_from_c(
    a: &ibv_qp_attr,
    mask: u32,
    dgid: Gid,
) -> Result<(QpAttr, QpAttrMask), Error> {
    let m = QpAttrMask::from_bits(mask).ok_or_else(|| inval("unsupported ibv_qp_attr_mask bit"))?;
    let mut q = QpAttr::default();
    let state = |v: u32| {
        u8::try_from(v)
            .ok()
            .and_then(QpState::from_raw)
            .ok_or_else(|| inval("unknown ibv_qp_state"))
    };
    if m.contains(QpAttrMask::STATE) {
        q.qp_state = state(a.qp_state)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        q.cur_qp_state = state(a.cur_qp_state)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        q.path_mtu = u8::try_from(a.path_mtu)
            .ok()
            .and_then(Mtu::from_raw)
            .ok_or_else(|| inval("unknown ibv_mtu"))?;
    }
    if m.contains(QpAttrMask::ACCESS_FLAGS) {
        q.qp_access_flags = access_from_c(a.qp_access_flags);
    }
    if m.contains(QpAttrMask::CAP) {
        q.cap = cap_from_c(&a.cap);
    }
    if m.contains(QpAttrMask::AV) {
        q.ah_attr = ah_from_c(&a.ah_attr, dgid);
    }
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.pkey_index = a.pkey_index;
    q.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.port_num = a.port_num;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    Ok((q, m))
}

/// [`QpAttr`] into `struct ibv_qp_attr` (`ibv_query_qp`); fields with no counterpart are 0.
pub fn qp_attr_to_c(q: &QpAttr, out: &mut ibv_qp_attr) {
    out.qp_state = q.qp_state as _;
    out.cur_qp_state = q.cur_qp_state as _;
    out.path_mtu = q.path_mtu as _;
    out.path_mig_state = 0;
    out.qkey = q.qkey;
    out.rq_psn = q.rq_psn;
    out.sq_psn = q.sq_psn;
    out.dest_qp_num = q.dest_qp_num;
    out.qp_access_flags = q.qp_access_flags.bits() as _;
    out.cap = cap_to_c(&q.cap);
    out.ah_attr = ah_to_c(&q.ah_attr);
    out.pkey_index = q.pkey_index;
    out.alt_pkey_index = 0;
    out.en_sqd_async_notify = u8::from(q.en_sqd_async_notify);
    out.sq_draining = u8::from(q.sq_draining);
    out.max_rd_atomic = q.max_rd_atomic;
    out.max_dest_rd_atomic = q.max_dest_rd_atomic;
    out.min_rnr_timer = q.min_rnr_timer;
    out.port_num = q.port_num;
    out.timeout = q.timeout;
    out.retry_cnt = q.retry_cnt;
    out.rnr_retry = q.rnr_retry;
    out.alt_port_num = 0;
    out.alt_timeout = 0;
    out.rate_limit = 0;
}

/// `enum ibv_qp_type` as [`QpType`].
///
/// # Errors
/// `EOPNOTSUPP` for XRC, raw packet and driver QPs (the simulated RNIC has RC, UC and UD).
pub fn qp_type_from_c(t: u32) -> Result<QpType, Error> {
    u8::try_from(t)
        .ok()
        .and_then(QpType::from_raw)
        .ok_or_else(|| Error::new(verbs_core::Errno::EOPNOTSUPP, "QP type not supported"))
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

/// `a` as a `struct sockaddr_in`.
pub fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

/// `a` as a `struct sockaddr_in6`.
pub fn sockaddr_in6(a: SocketAddrV6) -> libc::sockaddr_in6 {
    libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: a.port().to_be(),
        sin6_flowinfo: a.flowinfo(),
        sin6_addr: libc::in6_addr {
            s6_addr: a.ip().octets(),
        },
        sin6_scope_id: a.scope_id(),
    }
}

/// A `sockaddr_in`'s address and port.
pub fn sockaddr_in_to_rust(sin: &libc::sockaddr_in) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
        u16::from_be(sin.sin_port),
    ))
}

/// A `sockaddr_in6`'s address and port. A v4-mapped address becomes the IPv4 address (the
/// simulated RNIC's GIDs are IPv4-mapped).
pub fn sockaddr_in6_to_rust(sin6: &libc::sockaddr_in6) -> SocketAddr {
    let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
    let port = u16::from_be(sin6.sin6_port);
    match ip.to_ipv4_mapped() {
        Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
        None => SocketAddr::V6(SocketAddrV6::new(
            ip,
            port,
            sin6.sin6_flowinfo,
            sin6.sin6_scope_id,
        )),
    }
}
