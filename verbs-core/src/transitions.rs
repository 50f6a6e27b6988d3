//! The legal QP state transitions and their attribute masks, once, for every backend.
//!
//! This is Linux's `qp_state_table` / `ib_modify_qp_is_ok` [verbs.c] as cm-spec §5.2 restates
//! it, for RC, UC and UD QPs: a transition must be valid, every required attribute bit must be
//! present, no bit outside required ∪ optional ∪ `STATE` may be set, and `CUR_STATE` is only
//! allowed where the table lists it. Any violation is `EINVAL` and the modify changes nothing.

use crate::error::{Error, Result};
use crate::types::{QpAttrMask, QpState, QpType};

/// Required and optional attribute bits (besides `STATE`) of one transition for one QP type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionMasks {
    /// Bits that must be present.
    pub required: QpAttrMask,
    /// Bits that may be present.
    pub optional: QpAttrMask,
}

const fn masks(required: QpAttrMask, optional: QpAttrMask) -> Option<TransitionMasks> {
    Some(TransitionMasks { required, optional })
}

const NONE: QpAttrMask = QpAttrMask::empty();

/// The masks of the transition `from → to` for `qp_type`, or `None` when the transition is not
/// legal (Linux `qp_state_table` [verbs.c], cm-spec §5.2).
///
/// `Reset → Err` is not legal (Linux has no such entry). Every state but `Reset` may go to
/// `Reset` or `Err` with no attributes.
pub fn transition_masks(qp_type: QpType, from: QpState, to: QpState) -> Option<TransitionMasks> {
    use QpAttrMask as M;
    use QpState::*;
    match (from, to) {
        (Reset, Reset) => masks(NONE, NONE),
        (Reset, Init) => match qp_type {
            QpType::Rc | QpType::Uc => {
                masks(M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS), NONE)
            }
            QpType::Ud => masks(M::PKEY_INDEX.union(M::PORT).union(M::QKEY), NONE),
        },
        (Init | Rtr | Rts | Sqd | Sqe | Err, Reset) => masks(NONE, NONE),
        (Init | Rtr | Rts | Sqd | Sqe | Err, Err) => masks(NONE, NONE),
        (Init, Init) => match qp_type {
            QpType::Rc | QpType::Uc => {
                masks(NONE, M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS))
            }
            QpType::Ud => masks(NONE, M::PKEY_INDEX.union(M::PORT).union(M::QKEY)),
        },
        (Init, Rtr) => match qp_type {
            QpType::Rc => masks(
                M::AV
                    .union(M::PATH_MTU)
                    .union(M::DEST_QPN)
                    .union(M::RQ_PSN)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::MIN_RNR_TIMER),
                M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX),
            ),
            QpType::Uc => masks(
                M::AV.union(M::PATH_MTU).union(M::DEST_QPN).union(M::RQ_PSN),
                M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX),
            ),
            QpType::Ud => masks(NONE, M::PKEY_INDEX.union(M::QKEY)),
        },
        (Rtr, Rts) => match qp_type {
            QpType::Rc => masks(
                M::SQ_PSN
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC),
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
            QpType::Uc => masks(
                M::SQ_PSN,
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PATH_MIG_STATE),
            ),
            QpType::Ud => masks(M::SQ_PSN, M::CUR_STATE.union(M::QKEY)),
        },
        (Rts, Rts) => match qp_type {
            QpType::Rc => masks(
                NONE,
                M::CUR_STATE
                    .union(M::ACCESS_FLAGS)
                    .union(M::ALT_PATH)
                    .union(M::PATH_MIG_STATE)
                    .union(M::MIN_RNR_TIMER),
            ),
            QpType::Uc => masks(
                NONE,
                M::CUR_STATE
                    .union(M::ACCESS_FLAGS)
                    .union(M::ALT_PATH)
                    .union(M::PATH_MIG_STATE),
            ),
            QpType::Ud => masks(NONE, M::CUR_STATE.union(M::QKEY)),
        },
        (Rts, Sqd) => masks(NONE, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => match qp_type {
            QpType::Rc => masks(
                NONE,
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
            QpType::Uc => masks(
                NONE,
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PATH_MIG_STATE),
            ),
            QpType::Ud => masks(NONE, M::CUR_STATE.union(M::QKEY)),
        },
        (Sqd, Sqd) => match qp_type {
            QpType::Rc => masks(
                NONE,
                M::PORT
                    .union(M::AV)
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
            QpType::Uc => masks(
                NONE,
                M::AV
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::PATH_MIG_STATE),
            ),
            QpType::Ud => masks(NONE, M::PKEY_INDEX.union(M::QKEY)),
        },
        // RC QPs never enter SQE; the transition back exists for UC/UD only.
        (Sqe, Rts) => match qp_type {
            QpType::Rc => None,
            QpType::Uc => masks(NONE, M::CUR_STATE.union(M::ACCESS_FLAGS)),
            QpType::Ud => masks(NONE, M::CUR_STATE.union(M::QKEY)),
        },
        _ => None,
    }
}

/// Checks a modify of a `qp_type` QP currently in `cur` with `mask` against the table and
/// returns the target state (`ib_modify_qp_is_ok` [verbs.c], man:ibv_modify_qp.3).
///
/// `target` is the attribute's `qp_state`, read only when `mask` has `STATE`; without `STATE`
/// the modify is `cur → cur`. `claimed_cur` is the attribute's `cur_qp_state`, read only when
/// `mask` has `CUR_STATE`.
///
/// # Errors
/// `EINVAL` when the transition is not legal, a required bit is missing, a bit is neither
/// required nor optional, or `CUR_STATE` names a state other than the current one.
pub fn check_modify(
    qp_type: QpType,
    cur: QpState,
    mask: QpAttrMask,
    target: QpState,
    claimed_cur: QpState,
) -> Result<QpState> {
    if mask.contains(QpAttrMask::CUR_STATE) && claimed_cur != cur {
        return Err(Error::inval(format!(
            "IBV_QP_CUR_STATE says {claimed_cur:?} but the QP is in {cur:?}"
        )));
    }
    let next = if mask.contains(QpAttrMask::STATE) {
        target
    } else {
        cur
    };
    let Some(t) = transition_masks(qp_type, cur, next) else {
        return Err(Error::inval(format!(
            "illegal {qp_type:?} QP transition {cur:?} -> {next:?}"
        )));
    };
    let given = mask.difference(QpAttrMask::STATE);
    let missing = t.required.difference(given);
    if !missing.is_empty() {
        return Err(Error::inval(format!(
            "{cur:?} -> {next:?} requires {missing:?}"
        )));
    }
    let extra = given.difference(t.required.union(t.optional));
    if !extra.is_empty() {
        return Err(Error::inval(format!(
            "{cur:?} -> {next:?} does not accept {extra:?}"
        )));
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::*;

    const ALL_TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];
    const STATES: [QpState; 7] = [Reset, Init, Rtr, Rts, Sqd, Sqe, Err];

    #[test]
    fn reset_to_err_is_illegal() {
        for t in ALL_TYPES {
            assert!(transition_masks(t, Reset, Err).is_none());
        }
    }

    #[test]
    fn every_state_but_reset_may_go_to_reset_and_err_without_attributes() {
        for t in ALL_TYPES {
            for s in STATES.into_iter().filter(|s| *s != Reset) {
                for to in [Reset, Err] {
                    let m = transition_masks(t, s, to).expect("legal");
                    assert!(m.required.is_empty() && m.optional.is_empty());
                }
            }
        }
    }

    #[test]
    fn rc_reset_to_init_requires_pkey_port_access() {
        let ok = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        assert_eq!(check_modify(QpType::Rc, Reset, ok, Init, Reset), Ok(Init));
        let missing = ok.difference(QpAttrMask::PORT);
        let e = check_modify(QpType::Rc, Reset, missing, Init, Reset).unwrap_err();
        assert_eq!(e.errno, crate::Errno::EINVAL);
        let extra = ok | QpAttrMask::QKEY;
        assert!(check_modify(QpType::Rc, Reset, extra, Init, Reset).is_err());
    }

    #[test]
    fn ud_reset_to_init_requires_qkey_not_access() {
        let ok = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
        assert_eq!(check_modify(QpType::Ud, Reset, ok, Init, Reset), Ok(Init));
        let wrong = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        assert!(check_modify(QpType::Ud, Reset, wrong, Init, Reset).is_err());
    }

    #[test]
    fn skipping_a_state_is_illegal() {
        for (from, to) in [
            (Init, Rts),
            (Rtr, Init),
            (Err, Init),
            (Reset, Rtr),
            (Rts, Rtr),
        ] {
            for t in ALL_TYPES {
                assert!(transition_masks(t, from, to).is_none(), "{from:?}->{to:?}");
            }
        }
    }

    #[test]
    fn cur_state_must_match_and_is_only_optional_where_listed() {
        let m = QpAttrMask::STATE | QpAttrMask::CUR_STATE;
        // RTS -> RTS lists CUR_STATE as optional.
        assert_eq!(check_modify(QpType::Rc, Rts, m, Rts, Rts), Ok(Rts));
        // A wrong claimed current state is EINVAL.
        assert!(check_modify(QpType::Rc, Rts, m, Rts, Rtr).is_err());
        // RTS -> ERR does not list CUR_STATE.
        assert!(check_modify(QpType::Rc, Rts, m, Err, Rts).is_err());
    }

    #[test]
    fn modify_without_state_bit_is_a_self_transition() {
        assert_eq!(
            check_modify(QpType::Rc, Rts, QpAttrMask::MIN_RNR_TIMER, Reset, Reset),
            Ok(Rts)
        );
        // RESET -> RESET accepts no attributes.
        assert!(check_modify(QpType::Rc, Reset, QpAttrMask::PORT, Reset, Reset).is_err());
    }

    #[test]
    fn rc_never_returns_from_sqe() {
        assert!(transition_masks(QpType::Rc, Sqe, Rts).is_none());
        assert!(transition_masks(QpType::Ud, Sqe, Rts).is_some());
    }
}
