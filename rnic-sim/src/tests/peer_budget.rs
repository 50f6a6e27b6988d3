//! The send budget all RC QPs of a device share towards one peer (`shared/budget.rs`), and
//! READs asked for in pieces holding one responder resource (`rc/resources.rs`).

use super::*;

/// One READ credit each way: the responder keeps one resource, so the pieces of a READ
/// must share it.
fn one_read_credit(a: &mut QpAttr) {
    a.max_rd_atomic = 1;
    a.max_dest_rd_atomic = 1;
}

/// `n` more QPs on each node, connected pairwise (a's i-th to b's i-th), MTU 256.
fn more_qps(a: &mut Node, b: &mut Node, n: usize) -> Vec<(QpHandle, QpHandle)> {
    let mut v = Vec::new();
    for _ in 0..n {
        let qa = a
            .dev
            .create_qp(a.pd, &QpInitAttr::rc(a.scq, a.rcq, caps(16), false))
            .unwrap();
        let qb = b
            .dev
            .create_qp(b.pd, &QpInitAttr::rc(b.scq, b.rcq, caps(16), false))
            .unwrap();
        let (ga, gb) = (a.dev.gid(), b.dev.gid());
        for (dev, q, peer, peer_qpn) in [
            (&mut a.dev, qa.handle, gb, qb.qp_num),
            (&mut b.dev, qb.handle, ga, qa.qp_num),
        ] {
            let p = verbs_core::manual::RcParams {
                access: ALL_ACCESS,
                ..verbs_core::manual::RcParams::default()
            };
            verbs_core::manual::modify_to_init(dev, q, &p).unwrap();
            let mut at = conn_attr(peer, peer_qpn, 0x10);
            one_read_credit(&mut at);
            let rtr = QpAttr {
                qp_state: QpState::Rtr,
                ..at
            };
            dev.modify_qp(q, &rtr, RTR_MASK).unwrap();
            let rts = QpAttr {
                qp_state: QpState::Rts,
                ..at
            };
            dev.modify_qp(q, &rts, RTS_MASK).unwrap();
        }
        v.push((qa.handle, qb.handle));
    }
    v
}

/// Moves packets both ways, dropping those `drop` says (by a running count of the datagrams
/// each side sent), firing timers when nothing moves; returns the most bytes of requests `a` had
/// unacknowledged towards `b` at once.
fn run_lossy(a: &mut Node, b: &mut Node, drop: impl Fn(u64) -> bool) -> u64 {
    let mut now = SimTime::ZERO;
    let (mut sent, mut answered) = (0u64, 0u64);
    let mut most = 0;
    for _ in 0..100_000 {
        let mut moved = false;
        while let Some(t) = a.dev.poll_transmit(now) {
            moved = true;
            sent += 1;
            if let Some((_, in_flight)) = a.dev.peer_budget(b.dev.gid()) {
                most = most.max(in_flight);
            }
            if !drop(sent) {
                b.dev.handle_packet(now, a.dev.gid(), t.packet);
            }
        }
        while let Some(t) = b.dev.poll_transmit(now) {
            moved = true;
            answered += 1;
            if !drop(answered) {
                a.dev.handle_packet(now, b.dev.gid(), t.packet);
            }
        }
        if moved {
            continue;
        }
        let next = [a.dev.poll_timeout(), b.dev.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else {
            return most;
        };
        now = now.max(t);
        a.dev.handle_timeout(now);
        b.dev.handle_timeout(now);
    }
    panic!("no quiescence");
}

/// 16 QPs each WRITE then READ 2 000 bytes at once, with a 2 KiB byte window (8 packets of
/// 256 bytes: each READ is asked for in two pieces) and one READ credit: every WR succeeds,
/// every byte arrives.
fn many_qps_write_and_read(drop: impl Fn(u64) -> bool) -> (Node, Node, u64) {
    let (mut a, mut b) = (node(1), node(2));
    connect_with(&mut a, &mut b, one_read_credit);
    a.dev.set_max_unacked_bytes(2048);
    b.dev.set_max_unacked_bytes(2048);
    let qps = more_qps(&mut a, &mut b, 15);
    let len = 2000u32;
    let data = pattern(64 * 1024, 3);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev.mr_write(b.mr.handle, 0, &data).unwrap();
    let all: Vec<QpHandle> = std::iter::once(a.qp.handle)
        .chain(qps.iter().map(|q| q.0))
        .collect();
    for (i, &q) in all.iter().enumerate() {
        let off = i as u64 * u64::from(len);
        let w = SendWr::rdma_write(
            1,
            vec![a.mr.sge(off, len)],
            b.mr.addr + 32_768 + off,
            b.mr.rkey,
        );
        let r = SendWr::rdma_read(
            2,
            vec![a.mr.sge(32_768 + off, len)],
            b.mr.addr + off,
            b.mr.rkey,
        );
        a.dev.post_send(q, &[w, r]).unwrap();
    }
    let most = run_lossy(&mut a, &mut b, drop);
    let wcs = poll(&mut a.dev, a.scq);
    assert_eq!(wcs.len(), 2 * all.len(), "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let mut got = vec![0; 32_768];
    b.dev.mr_read(b.mr.handle, 32_768, &mut got).unwrap();
    assert_eq!(got[..16 * len as usize], data[..16 * len as usize]);
    a.dev.mr_read(a.mr.handle, 32_768, &mut got).unwrap();
    assert_eq!(got[..16 * len as usize], data[..16 * len as usize]);
    (a, b, most)
}

#[test]
fn qps_to_one_peer_keep_no_more_than_the_window_in_flight_together() {
    let (a, b, most) = many_qps_write_and_read(|_| false);
    // Each QP's own window is 2 KiB too: without the shared budget 16 QPs would have had
    // 32 KiB in flight.
    assert!(most <= 2048, "{most} bytes in flight");
    assert_eq!(a.dev.counters().retries, 0);
    // All acknowledged: nothing charged is left.
    assert_eq!(a.dev.peer_budget(b.dev.gid()), None);
}

#[test]
fn under_loss_every_qp_completes_and_nothing_stays_charged() {
    let (a, b, _) = many_qps_write_and_read(|n| n % 7 == 3);
    assert!(a.dev.counters().retries > 0);
    assert!(a
        .dev
        .peer_budget(b.dev.gid())
        .is_none_or(|(_, in_flight)| in_flight == 0));
}
