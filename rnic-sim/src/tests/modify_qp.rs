//! `modify_qp`: legal transitions, required and in-range attributes, PSN masking.

use super::*;

#[test]
fn modify_qp_illegal_transition_is_einval_and_changes_nothing() {
    let mut a = node(1);
    let e = a
        .dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "RESET -> ERR is not in the table");
    assert_eq!(state(&a), QpState::Reset);
    to_init(&mut a);
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..conn_attr(gid(2), 5, 0)
    };
    assert_eq!(
        a.dev
            .modify_qp(a.qp.handle, &rts, RTS_MASK)
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    assert_eq!(state(&a), QpState::Init);
}

#[test]
fn modify_qp_missing_required_attribute_is_einval() {
    let mut a = node(1);
    let attr = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    let e = a
        .dev
        .modify_qp(a.qp.handle, &attr, QpAttrMask::STATE | QpAttrMask::PORT)
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
    assert_eq!(state(&a), QpState::Reset);
}

#[test]
fn modify_qp_out_of_range_attribute_is_einval_and_changes_nothing() {
    let mut a = node(1);
    to_init(&mut a);
    let good = conn_attr(gid(2), 5, 7);
    for bad in [
        QpAttr {
            max_dest_rd_atomic: 200,
            ..good
        },
        QpAttr {
            ah_attr: AhAttr {
                is_global: false,
                ..good.ah_attr
            },
            ..good
        },
        QpAttr {
            dest_qp_num: 1 << 24,
            ..good
        },
        QpAttr {
            min_rnr_timer: 32,
            ..good
        },
    ] {
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            ..bad
        };
        assert_eq!(
            a.dev
                .modify_qp(a.qp.handle, &attr, RTR_MASK)
                .unwrap_err()
                .errno,
            Errno::EINVAL
        );
        assert_eq!(state(&a), QpState::Init);
    }
    to_rtr(&mut a, &good);
    for bad in [
        QpAttr {
            timeout: 32,
            ..good
        },
        QpAttr {
            retry_cnt: 8,
            ..good
        },
        QpAttr {
            rnr_retry: 8,
            ..good
        },
        QpAttr {
            max_rd_atomic: 255,
            ..good
        },
    ] {
        let attr = QpAttr {
            qp_state: QpState::Rts,
            ..bad
        };
        assert_eq!(
            a.dev
                .modify_qp(a.qp.handle, &attr, RTS_MASK)
                .unwrap_err()
                .errno,
            Errno::EINVAL
        );
        assert_eq!(state(&a), QpState::Rtr);
    }
}

#[test]
fn psns_are_masked_to_24_bits() {
    let mut a = node(1);
    to_init(&mut a);
    let at = conn_attr(gid(2), 5, 0x7F12_3456);
    to_rtr(&mut a, &at);
    to_rts(&mut a, &at);
    let (q, _) = a.dev.query_qp(a.qp.handle).unwrap();
    assert_eq!((q.sq_psn, q.rq_psn), (0x12_3456, 0x12_3456));
}
