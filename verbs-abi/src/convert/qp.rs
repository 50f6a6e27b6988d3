//! Queue pairs and shared receive queues: capacities, address vectors, attributes, types.
//! What an application passes to librnic is read strictly (`EINVAL` for a value verbs-core
//! does not name, as a provider refuses it); what a device reports to the hardware backend
//! leniently ([`qp_attr_from_query`]).

use super::device::mtu_from_c;
use crate::*;
use verbs_core::{
    AccessFlags, AhAttr, Error, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType,
    SrqAttr,
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

/// [`QpAttr`] as `struct ibv_qp_attr`, every field (what librnic's `ibv_query_qp` reports, what
/// the hardware backend passes to `ibv_modify_qp`); fields with no counterpart (`alt_*`,
/// `path_mig_state`, `rate_limit`) are 0.
pub fn qp_attr_to_c(q: &QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: ibv_qp_state::from(q.qp_state.raw()),
        cur_qp_state: ibv_qp_state::from(q.cur_qp_state.raw()),
        path_mtu: ibv_mtu::from(q.path_mtu.raw()),
        path_mig_state: IBV_MIG_MIGRATED,
        qkey: q.qkey,
        rq_psn: q.rq_psn,
        sq_psn: q.sq_psn,
        dest_qp_num: q.dest_qp_num,
        qp_access_flags: q.qp_access_flags.bits(),
        cap: cap_to_c(&q.cap),
        ah_attr: ah_to_c(&q.ah_attr),
        alt_ah_attr: ah_to_c(&AhAttr::default()),
        pkey_index: q.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: u8::from(q.en_sqd_async_notify),
        sq_draining: u8::from(q.sq_draining),
        max_rd_atomic: q.max_rd_atomic,
        max_dest_rd_atomic: q.max_dest_rd_atomic,
        min_rnr_timer: q.min_rnr_timer,
        port_num: q.port_num,
        timeout: q.timeout,
        retry_cnt: q.retry_cnt,
        rnr_retry: q.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    }
}

/// `struct ibv_qp_attr` as a device's `ibv_query_qp` fills it, as [`QpAttr`], leniently: an
/// unknown state reads as `Unknown` (7), an unknown MTU as in [`mtu_from_c`], access bits
/// verbs-core does not name are dropped. `dgid` is `a.ah_attr.grh.dgid`, read by the caller (a
/// union).
pub fn qp_attr_from_query(a: &ibv_qp_attr, dgid: Gid) -> QpAttr {
    let state = |v: ibv_qp_state| {
        u8::try_from(v)
            .ok()
            .and_then(QpState::from_raw)
            .unwrap_or(QpState::Unknown)
    };
    QpAttr {
        qp_state: state(a.qp_state),
        cur_qp_state: state(a.cur_qp_state),
        path_mtu: mtu_from_c(a.path_mtu),
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: access_from_c(a.qp_access_flags),
        cap: cap_from_c(&a.cap),
        ah_attr: ah_from_c(&a.ah_attr, dgid),
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

/// [`SrqAttr`] as `struct ibv_srq_attr`.
pub fn srq_attr_to_c(a: &SrqAttr) -> ibv_srq_attr {
    ibv_srq_attr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// `struct ibv_srq_attr` as [`SrqAttr`].
pub fn srq_attr_from_c(a: &ibv_srq_attr) -> SrqAttr {
    SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
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
