//! State-machine property test: random scripts of post_send / post_recv / modify_qp (to ERR,
//! RESET, reconnect to RTS) / poll_cq / pump / timer ticks on a connected pair of simulated
//! devices, checked after every step against a small reference model of the verbs rules:
//!
//! * every WR completes at most once, and after the final move to ERR exactly once (an
//!   unsignaled send that succeeded is the one WR allowed to leave no completion);
//! * per queue, completions come in post order;
//! * once a queue saw an unsuccessful completion, every later one is `WR_FLUSH_ERR` until the
//!   QP is reset; a flush is never `SUCCESS`; an unsignaled send never completes successfully;
//! * entering ERR flushes everything at once; posts in ERR are flushed at once;
//! * return codes: EINVAL in RESET, ENOMEM exactly when the queue is full.

// Test code: a failed setup call is a test failure.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use rnic_sim::{pump::pump_pair, SimDevice, SimDeviceConfig};
use std::collections::{BTreeSet, VecDeque};
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::*;

const CAP: u32 = 6;
const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

#[derive(Debug, Clone)]
enum Op {
    PostSend {
        side: usize,
        kind: u8,
        len: u32,
        signaled: bool,
        count: usize,
    },
    PostRecv {
        side: usize,
        len: u32,
        count: usize,
    },
    Pump,
    Tick,
    ToErr {
        side: usize,
    },
    Reset {
        side: usize,
    },
    Reconnect {
        psn: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let side = 0usize..2;
    prop_oneof![
        6 => (side.clone(), 0u8..6, prop_oneof![0u32..300, 200u32..700], any::<bool>(), 1usize..4)
            .prop_map(|(side, kind, len, signaled, count)| Op::PostSend { side, kind, len, signaled, count }),
        5 => (side.clone(), prop_oneof![Just(256u32), Just(1024u32)], 1usize..4)
            .prop_map(|(side, len, count)| Op::PostRecv { side, len, count }),
        6 => Just(Op::Pump),
        2 => Just(Op::Tick),
        1 => side.clone().prop_map(|side| Op::ToErr { side }),
        1 => side.prop_map(|side| Op::Reset { side }),
        1 => prop_oneof![Just(0u32), Just(0xFF_FFF0), 0u32..0x100_0000]
            .prop_map(|psn| Op::Reconnect { psn }),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Reset,
    Rts,
    Err,
}

struct Side {
    dev: SimDevice,
    qp: Qp,
    cq: CqHandle,
    mr: Mr,
    st: St,
    /// Outstanding send WRs in post order: (wr_id, signaled).
    sq: VecDeque<(u64, bool)>,
    /// Outstanding receive WRs in post order.
    rq: VecDeque<u64>,
    sq_failed: bool,
    rq_failed: bool,
    next_id: u64,
    seen: BTreeSet<u64>,
}

fn gid(i: usize) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, i as u8 + 1))
}

fn side(i: usize) -> Side {
    let mut dev = SimDevice::new(SimDeviceConfig::new(format!("sim{i}"), gid(i)));
    let spec = RcEndpointSpec {
        mr_len: 8192,
        mr_access: ACCESS,
        cqe: 4096,
        shared_cq: true,
        sq_sig_all: false,
        ..RcEndpointSpec::default()
    }
    .queues(CAP, 2, 0);
    let RcEndpoint {
        qp,
        send_cq: cq,
        mr,
        ..
    } = RcEndpoint::create(&mut dev, &spec).unwrap();
    Side {
        dev,
        qp,
        cq,
        mr,
        st: St::Reset,
        sq: VecDeque::new(),
        rq: VecDeque::new(),
        sq_failed: false,
        rq_failed: false,
        // Send WR ids are even, receive ids odd, unique per side for the whole run.
        next_id: 0,
        seen: BTreeSet::new(),
    }
}

fn modify(s: &mut Side, st: QpState) {
    let attr = QpAttr {
        qp_state: st,
        ..QpAttr::default()
    };
    s.dev
        .modify_qp(s.qp.handle, &attr, QpAttrMask::STATE)
        .unwrap();
}

fn connect(sides: &mut [Side; 2], psn: u32) {
    let p = RcParams {
        mtu: Mtu::Mtu256,
        timeout: 10,
        retry_cnt: 2,
        rnr_retry: 2,
        min_rnr_timer: 1,
        max_rd_atomic: 2,
        max_dest_rd_atomic: 2,
        access: ACCESS,
    };
    for i in 0..2 {
        let peer = RcPeerInfo {
            gid: gid(1 - i),
            qpn: sides[1 - i].qp.qp_num,
            psn,
        };
        let s = &mut sides[i];
        // Whatever is still on the wire towards the old incarnation is lost.
        while s.dev.poll_transmit(SimTime::ZERO).is_some() {}
        if s.st != St::Reset {
            modify(s, QpState::Reset);
            reset_model(s);
        }
        let local = RcPeerInfo {
            gid: gid(i),
            qpn: s.qp.qp_num,
            psn,
        };
        connect_rc(&mut s.dev, s.qp.handle, &local, &peer, &p).unwrap();
        s.st = St::Rts;
    }
}

fn reset_model(s: &mut Side) {
    s.sq.clear();
    s.rq.clear();
    s.sq_failed = false;
    s.rq_failed = false;
    s.st = St::Reset;
}

/// Polls the side's CQ and checks every completion against the model.
fn poll_check(s: &mut Side) -> Result<(), TestCaseError> {
    let mut wcs = Vec::new();
    s.dev.poll_cq(s.cq, usize::MAX, &mut wcs).unwrap();
    for wc in wcs {
        prop_assert_eq!(wc.qp_num, s.qp.qp_num);
        prop_assert!(s.seen.insert(wc.wr_id), "wr {} completed twice", wc.wr_id);
        if wc.wr_id % 2 == 0 {
            let pos = s.sq.iter().position(|(id, _)| *id == wc.wr_id);
            let Some(pos) = pos else {
                return Err(TestCaseError::fail(format!(
                    "unknown send completion {wc:?}"
                )));
            };
            // Everything posted before it must have completed: only silently successful
            // unsignaled sends may be skipped.
            for (id, signaled) in s.sq.drain(..pos) {
                prop_assert!(!signaled, "send {} skipped (order)", id);
                prop_assert!(
                    !s.sq_failed,
                    "unsignaled send {} vanished after an error",
                    id
                );
            }
            let (_, signaled) = s.sq.pop_front().unwrap();
            if wc.status == WcStatus::Success {
                prop_assert!(signaled, "unsignaled send {} completed", wc.wr_id);
            }
            if s.sq_failed {
                prop_assert_eq!(wc.status, WcStatus::WrFlushErr);
            }
            if wc.status != WcStatus::Success {
                prop_assert_eq!(wc, WorkCompletion::error(wc.wr_id, wc.status, s.qp.qp_num));
                s.sq_failed = true;
            }
        } else {
            prop_assert_eq!(s.rq.pop_front(), Some(wc.wr_id), "receive order");
            if s.rq_failed {
                prop_assert_eq!(wc.status, WcStatus::WrFlushErr);
            }
            if wc.status != WcStatus::Success {
                s.rq_failed = true;
            }
        }
    }
    // Sync the state: a transport error may have moved the QP to ERR.
    let st = s.dev.query_qp(s.qp.handle).unwrap().0.qp_state;
    let st = match st {
        QpState::Reset => St::Reset,
        QpState::Rts => St::Rts,
        QpState::Err => St::Err,
        other => return Err(TestCaseError::fail(format!("unexpected state {other:?}"))),
    };
    prop_assert!(
        st == s.st || (s.st == St::Rts && st == St::Err),
        "state {:?} -> {:?}",
        s.st,
        st
    );
    s.st = st;
    if st == St::Err {
        // Flushes are synchronous: nothing is left but silently completed unsignaled sends.
        prop_assert!(s.rq.is_empty(), "receives not flushed: {:?}", s.rq);
        for (id, signaled) in s.sq.drain(..) {
            prop_assert!(!signaled, "send {} not flushed", id);
        }
    }
    Ok(())
}

fn post_send(
    s: &mut Side,
    peer_mr: Mr,
    kind: u8,
    len: u32,
    signaled: bool,
    count: usize,
) -> Result<(), TestCaseError> {
    let mut wrs = Vec::new();
    let flags = if signaled {
        SendFlags::SIGNALED
    } else {
        SendFlags::empty()
    };
    for _ in 0..count {
        let id = s.next_id * 2;
        s.next_id += 1;
        let sge = vec![s.mr.sge(0, len)];
        let wr = match kind {
            0 | 1 => SendWr::send(id, sge),
            2 => SendWr::send_with_imm(id, sge, 7),
            3 => SendWr::rdma_write(id, sge, peer_mr.addr + 512, peer_mr.rkey),
            4 => SendWr::rdma_write_with_imm(id, sge, peer_mr.addr, peer_mr.rkey, 9),
            _ => SendWr::rdma_read(id, sge, peer_mr.addr + 1024, peer_mr.rkey),
        };
        wrs.push(wr.with_flags(flags));
    }
    // Bounds of the send queue's occupancy. Completed WRs form a prefix of the queue, and a
    // signaled WR not yet seen has not completed: everything from the first such WR on is
    // surely queued; unsignaled WRs before it may have completed silently.
    let upper = s.sq.len();
    let lower =
        s.sq.iter()
            .position(|(_, sig)| *sig)
            .map_or(0, |p| s.sq.len() - p);
    let r = s.dev.post_send(s.qp.handle, &wrs);
    let accepted = match (&r, s.st) {
        (Err(e), St::Reset) => {
            prop_assert_eq!((e.errno(), e.bad_wr), (Errno::EINVAL, 0));
            0
        }
        (Ok(()), St::Reset) => return Err(TestCaseError::fail("post_send in RESET accepted")),
        (Ok(()), St::Err) => count,
        (Ok(()), _) => {
            prop_assert!(
                lower + count <= CAP as usize,
                "accepted past the queue size"
            );
            count
        }
        (Err(e), St::Rts) => {
            prop_assert_eq!(e.errno(), Errno::ENOMEM);
            prop_assert!(upper + e.bad_wr >= CAP as usize && lower + e.bad_wr <= CAP as usize);
            e.bad_wr
        }
        (Err(e), St::Err) => return Err(TestCaseError::fail(format!("post in ERR refused: {e}"))),
    };
    for wr in &wrs[..accepted] {
        s.sq.push_back((wr.wr_id, signaled));
    }
    Ok(())
}

fn post_recv(s: &mut Side, len: u32, count: usize) -> Result<(), TestCaseError> {
    let mut wrs = Vec::new();
    for _ in 0..count {
        let id = s.next_id * 2 + 1;
        s.next_id += 1;
        wrs.push(RecvWr::new(id, vec![s.mr.sge(4096, len)]));
    }
    let r = s.dev.post_recv(s.qp.handle, &wrs);
    let accepted = match (&r, s.st) {
        (Err(e), St::Reset) => {
            prop_assert_eq!((e.errno(), e.bad_wr), (Errno::EINVAL, 0));
            0
        }
        (Ok(()), St::Reset) => return Err(TestCaseError::fail("post_recv in RESET accepted")),
        (Ok(()), St::Err) => count,
        (Ok(()), St::Rts) => {
            prop_assert!(s.rq.len() + count <= CAP as usize);
            count
        }
        (Err(e), St::Rts) => {
            prop_assert_eq!(e.errno(), Errno::ENOMEM);
            prop_assert_eq!(s.rq.len() + e.bad_wr, CAP as usize);
            e.bad_wr
        }
        (Err(e), St::Err) => return Err(TestCaseError::fail(format!("post in ERR refused: {e}"))),
    };
    for wr in &wrs[..accepted] {
        s.rq.push_back(wr.wr_id);
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut sides = [side(0), side(1)];
    connect(&mut sides, 0x100);
    let mut now = SimTime::ZERO;
    for op in ops {
        match op {
            Op::PostSend {
                side,
                kind,
                len,
                signaled,
                count,
            } => {
                let peer = sides[1 - side].mr;
                post_send(&mut sides[side], peer, kind, len, signaled, count)?;
            }
            Op::PostRecv { side, len, count } => post_recv(&mut sides[side], len, count)?,
            Op::Pump => {
                let [a, b] = &mut sides;
                pump_pair(&mut a.dev, &mut b.dev, now);
            }
            Op::Tick => {
                let next = sides.iter().filter_map(|s| s.dev.poll_timeout()).min();
                if let Some(t) = next {
                    now = now.max(t);
                    for s in sides.iter_mut() {
                        s.dev.handle_timeout(now);
                    }
                }
            }
            Op::ToErr { side } => {
                let s = &mut sides[side];
                let attr = QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                };
                let r = s.dev.modify_qp(s.qp.handle, &attr, QpAttrMask::STATE);
                if s.st == St::Reset {
                    prop_assert_eq!(r.unwrap_err().errno, Errno::EINVAL);
                } else {
                    prop_assert!(r.is_ok());
                    s.st = St::Err;
                }
            }
            Op::Reset { side } => {
                let s = &mut sides[side];
                poll_check(s)?;
                modify(s, QpState::Reset);
                reset_model(s);
            }
            Op::Reconnect { psn } => {
                for s in sides.iter_mut() {
                    poll_check(s)?;
                }
                connect(&mut sides, psn);
            }
        }
        for s in sides.iter_mut() {
            poll_check(s)?;
        }
    }
    // Quiesce, then ERR: every WR still outstanding must now be completed.
    for _ in 0..64 {
        let [a, b] = &mut sides;
        pump_pair(&mut a.dev, &mut b.dev, now);
        match sides.iter().filter_map(|s| s.dev.poll_timeout()).min() {
            Some(t) => {
                now = now.max(t);
                for s in sides.iter_mut() {
                    s.dev.handle_timeout(now);
                }
            }
            None => break,
        }
    }
    for s in sides.iter_mut() {
        poll_check(s)?;
        if s.st != St::Reset {
            modify(s, QpState::Err);
            s.st = St::Err;
        }
        poll_check(s)?;
        prop_assert!(s.sq.is_empty() && s.rq.is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_wr_completes_once_in_order_and_flushes_are_never_success(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        run(ops)?;
    }
}
