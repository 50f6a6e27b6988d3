//! The conversions both ways: round trips, and what an unknown number from a device becomes.

use super::*;
use crate::*;
use verbs_core::{
    AccessFlags, DeviceAttr, Gid, Mtu, PortAttr, PortState, QpAttr, QpCap, QpState, SendWr, Sge,
    WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

#[test]
fn unknown_numbers_from_a_device_do_not_fail() {
    assert_eq!(mtu_from_c(0), Mtu::Mtu256);
    assert_eq!(mtu_from_c(IBV_MTU_1024), Mtu::Mtu1024);
    assert_eq!(mtu_from_c(77), Mtu::Mtu4096);
    assert_eq!(mtu_from_c(u32::MAX), Mtu::Mtu4096);
    assert_eq!(wc_status_from_c(IBV_WC_WR_FLUSH_ERR), WcStatus::WrFlushErr);
    assert_eq!(wc_status_from_c(99), WcStatus::GeneralErr);
    assert_eq!(wc_status_from_c(u32::MAX), WcStatus::GeneralErr);
    assert_eq!(
        wc_opcode_from_c(IBV_WC_RECV_RDMA_WITH_IMM),
        WcOpcode::RecvRdmaWithImm
    );
    assert_eq!(wc_opcode_from_c(IBV_WC_TM_RECV), WcOpcode::Recv);
    assert_eq!(wc_opcode_from_c(IBV_WC_ATOMIC_WRITE), WcOpcode::Send);
    assert_eq!(wc_opcode_from_c(u32::MAX), WcOpcode::Recv);
    let port = ibv_port_attr {
        state: 42,
        max_mtu: 9,
        active_mtu: IBV_MTU_2048,
        gid_tbl_len: -1,
        ..zeroed_port_attr()
    };
    let p = port_attr_from_c(&port);
    assert_eq!(p.state, PortState::Nop);
    assert_eq!((p.max_mtu, p.active_mtu), (Mtu::Mtu4096, Mtu::Mtu2048));
    assert_eq!(p.gid_tbl_len, 0);
    let mut q = qp_attr_to_c(&QpAttr::default());
    q.qp_state = 99;
    q.qp_access_flags = u32::MAX;
    let a = qp_attr_from_query(&q, Gid::default());
    assert_eq!(a.qp_state, QpState::Unknown);
    assert_eq!(a.qp_access_flags, AccessFlags::all());
}

#[test]
fn an_application_s_unknown_numbers_are_einval() {
    let mut q = qp_attr_to_c(&QpAttr::default());
    q.qp_state = 99;
    let mask = IBV_QP_STATE as u32;
    let e = qp_attr_from_c(&q, mask, Gid::default()).err();
    assert_eq!(e.map(|e| e.errno), Some(verbs_core::Errno::EINVAL));
    q.qp_state = IBV_QPS_RTS;
    // Fields outside the mask are not read.
    q.path_mtu = 99;
    let (a, m) = qp_attr_from_c(&q, mask, Gid::default()).expect("valid");
    assert_eq!((a.qp_state, m.bits()), (QpState::Rts, mask));
    assert!(qp_attr_from_c(&q, mask | IBV_QP_PATH_MTU as u32, Gid::default()).is_err());
}

#[test]
fn qp_attributes_round_trip() {
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        cur_qp_state: QpState::Init,
        path_mtu: Mtu::Mtu1024,
        qkey: 0x1111_2222,
        rq_psn: 7,
        sq_psn: 9,
        dest_qp_num: 0x12,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 2,
            max_send_sge: 3,
            max_recv_sge: 4,
            max_inline_data: 5,
        },
        pkey_index: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 8,
        min_rnr_timer: 12,
        port_num: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 6,
        ..QpAttr::default()
    };
    a.ah_attr.grh.dgid = Gid([3; 16]);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.is_global = true;
    a.ah_attr.dlid = 0x77;
    let c = qp_attr_to_c(&a);
    assert_eq!(c.qp_state, IBV_QPS_RTR);
    assert_eq!(c.path_mtu, IBV_MTU_1024);
    assert_eq!((c.alt_port_num, c.rate_limit), (0, 0));
    assert_eq!(qp_attr_from_query(&c, a.ah_attr.grh.dgid), a);
    let all = (1u32 << 21) - 1; // IBV_QP_STATE ..= IBV_QP_DEST_QPN
    let (strict, mask) = qp_attr_from_c(&c, all, a.ah_attr.grh.dgid).expect("valid");
    assert_eq!(mask.bits(), all);
    assert_eq!(strict, a);
}

#[test]
fn device_and_port_attributes_round_trip() {
    let d = DeviceAttr {
        fw_ver: "1.2.3".into(),
        node_guid: 0x0102_0304_0506_0708,
        sys_image_guid: 9,
        max_mr_size: 1 << 40,
        vendor_id: 0x02c9,
        vendor_part_id: 4123,
        max_qp: 100,
        max_qp_wr: 200,
        max_sge: 3,
        max_cq: 4,
        max_cqe: 5,
        max_mr: 6,
        max_pd: 7,
        max_qp_rd_atom: 8,
        max_qp_init_rd_atom: 9,
        max_srq: 10,
        max_srq_wr: 11,
        max_srq_sge: 12,
        phys_port_cnt: 1,
    };
    let mut c = zeroed_device_attr();
    device_attr_to_c(&d, &mut c);
    // Big-endian in C, as the kernel reports GUIDs.
    assert_eq!(c.node_guid.to_ne_bytes()[0], 0x01);
    assert_eq!(device_attr_from_c(&c), d);
    let p = PortAttr {
        state: PortState::Active,
        max_mtu: Mtu::Mtu4096,
        active_mtu: Mtu::Mtu1024,
        gid_tbl_len: 2,
        max_msg_sz: 1 << 31,
        pkey_tbl_len: 1,
        lid: 0,
        link_layer: IBV_LINK_LAYER_ETHERNET,
    };
    let mut c = zeroed_port_attr();
    port_attr_to_c(&p, &mut c);
    assert_eq!(port_attr_from_c(&c), p);
}

#[test]
fn work_requests_and_completions() {
    let mut w = SendWr::send(
        5,
        vec![Sge {
            addr: 0x1000,
            length: 64,
            lkey: 0x11,
        }],
    );
    w.opcode = WrOpcode::AtomicCmpAndSwp;
    w.atomic.remote_addr = 0x2000;
    w.atomic.compare_add = 1;
    w.atomic.swap = 2;
    w.atomic.rkey = 0x22;
    w.imm_data = 0xabcd;
    let sge = sge_to_c(&w.sg_list[0]);
    assert_eq!((sge.addr, sge.length, sge.lkey), (0x1000, 64, 0x11));
    let c = send_wr_to_c(&w, std::ptr::null_mut(), 1);
    assert_eq!(
        (c.wr_id, c.opcode, c.num_sge),
        (5, IBV_WR_ATOMIC_CMP_AND_SWP, 1)
    );
    assert!(c.next.is_null());
    let wc = WorkCompletion {
        wr_id: 5,
        status: WcStatus::RemAccessErr,
        opcode: WcOpcode::RecvRdmaWithImm,
        vendor_err: 3,
        byte_len: 100,
        imm_data: 0x0102_0304,
        qp_num: 17,
        src_qp: 18,
        wc_flags: WcFlags::WITH_IMM,
        pkey_index: 0,
        slid: 1,
        sl: 2,
        dlid_path_bits: 3,
    };
    let c = wc_to_c(&wc);
    assert_eq!(c.status, IBV_WC_REM_ACCESS_ERR);
    assert_eq!(c.wc_flags, IBV_WC_WITH_IMM);
    assert_eq!(wc_from_c(&c, wc.imm_data), wc);
}

fn zeroed_port_attr() -> ibv_port_attr {
    ibv_port_attr {
        state: 0,
        max_mtu: 0,
        active_mtu: 0,
        gid_tbl_len: 0,
        port_cap_flags: 0,
        max_msg_sz: 0,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 0,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 0,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 0,
        active_speed: 0,
        phys_state: 0,
        link_layer: 0,
        flags: 0,
        port_cap_flags2: 0,
    }
}

fn zeroed_device_attr() -> ibv_device_attr {
    ibv_device_attr {
        fw_ver: [0; 64],
        node_guid: 0,
        sys_image_guid: 0,
        max_mr_size: 0,
        page_size_cap: 0,
        vendor_id: 0,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 0,
        max_qp_wr: 0,
        device_cap_flags: 0,
        max_sge: 0,
        max_sge_rd: 0,
        max_cq: 0,
        max_cqe: 0,
        max_mr: 0,
        max_pd: 0,
        max_qp_rd_atom: 0,
        max_ee_rd_atom: 0,
        max_res_rd_atom: 0,
        max_qp_init_rd_atom: 0,
        max_ee_init_rd_atom: 0,
        atomic_cap: 0,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 0,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: 0,
        max_srq_wr: 0,
        max_srq_sge: 0,
        max_pkeys: 0,
        local_ca_ack_delay: 0,
        phys_port_cnt: 0,
    }
}
