//! # The regression gallery
//!
//! Every rule of RDMA connection teardown the testbed implements, as a short named test on the
//! deterministic [`World`]: the rows of cm-spec §4.4 (`rdma_disconnect` in every state), the
//! disconnect sequences of §4.5 (normal, simultaneous, unanswered), the races of connection
//! setup, `rdma_destroy_id` in every IB CM state (§3.3), lost DREPs, the setup rejections
//! (REJ 10, REJ 8), and the "behaviour choices where real stacks differ" of TESTING.md.
//!
//! ## How to copy a test
//!
//! Each test is self-contained apart from the few helpers in the first section:
//!
//! 1. build a World: `World::new(WorldConfig::two_hosts(seed))` (Linux's timers) or
//!    `WorldConfig::two_hosts(seed).fast()` (12 ms DREQ timeout, 128 ms TimeWait), or start
//!    from [`established`] (host 0 connected to host 1, some traffic done);
//! 2. act as the applications: `w.disconnect(end)`, `w.destroy(end)`, `w.post(end, Op::Send,
//!    n)`, `w.qp_to_err(end)`; inject faults: `w.partition_one_way(from, to, Some(ns))`,
//!    `w.crash(host, restart)`; let time pass: `w.run_for(ns)`, `w.wait_event(host, id,
//!    kind)`;
//! 3. assert what the rule says, on what the applications saw ([`World::events_of`],
//!    [`World::wc_status`]), the states ([`World::qp_state`], [`World::ib_cm_state`]) and the
//!    wire ([`World::sent_mads`], [`World::dropped`]);
//! 4. end with `w.check()`: the World tears the applications down (every QP to ERR), runs to
//!    quiescence and checks the whole history with the oracle (S1–S7 of TESTING.md; L1–L3 too
//!    after `w.heal()`). A failing check prints the violated invariant and the records.
//!
//! A copied test has this shape:
//!
//! ```text
//! #[test]
//! fn lost_dreq_is_retransmitted_after_the_dreq_timeout() {
//!     let (mut w, c) = established();              // host 0 ⇄ host 1, ESTABLISHED
//!     w.partition_one_way(0, 1, Some(MS));         // drop what host 0 sends in the next 1 ms
//!     w.disconnect(c.active).unwrap();             // its DREQ is lost ...
//!     answer(&mut w, c.active, c.passive);         // ... resent 4608 ms later: host 1 answers
//!     assert_eq!(sent(&mut w, 0, DREQ), 2);
//!     w.check().unwrap();                          // S1–S7 over the whole history
//! }
//! ```
//!
//! Everything runs in virtual time: a 74 s DREQ give-up costs a few events, and a test that
//! fails fails the same way every run. `w.history()` renders as a readable trace
//! (`for e in &w.history().entries { println!("{e}") }`) when a test needs debugging.
//!
//! ## Sections (one file each)
//!
//! `main.rs`: the helpers · `handshake_and_disconnect_rows.rs`: the handshake, `rdma_disconnect`
//! row by row (§4.4) · `sequences.rs`: disconnect sequences (§4.5), unanswered disconnects,
//! races with connection setup · `destroy.rs`: `rdma_destroy_id` per IB CM state (§3.3) ·
//! `lost_and_rejected.rs`: lost DREQ/DREP, setup rejections · `choices.rs`: behaviour choices
//! (TESTING.md), regressions · `srq.rs`: shared receive queues (two devices through the
//! `Device` trait, no World) · `async_events.rs`: async QP events and error completions (a
//! `Simulation` of two hosts: the World does not record QP events) · `cm_calls.rs`: rdma_cm calls
//! beyond connect/disconnect (`rdma_migrate_id`, synchronous ids, `rdma_notify`), device removal
//! and address change · `world_knobs.rs`: per-host CM timers, targeted message faults, late
//! accept (MRA), deep posts · `world_events.rs`: the device and CM events the World records
//! and the oracle checks (device removal, address change, SRQ limit and LAST_WQE, QP_FATAL,
//! COMM_EST and `rdma_notify`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use cm_core::api::{CmEventType as E, CmIdHandle};
use cm_core::engine::IbCmState;
use cm_core::wire::{
    CmMessage, CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ, CM_MRA_ATTR_ID as MRA,
    CM_REJ_ATTR_ID as REJ, CM_REP_ATTR_ID as REP, CM_REQ_ATTR_ID as REQ, CM_RTU_ATTR_ID as RTU,
};
use rnic_sim::fabric::{DropReason, FabricEventKind};
use rnic_testbed::world::{host_ip, Conn, End, EventMode, Op, Queue, Record, World, WorldConfig};
use verbs_core::{Device, Errno, QpCap, QpInitAttr, QpState, SimTime, WcStatus};

/// 1 ms of virtual time, in ns.
const MS: u64 = 1_000_000;
/// Linux's active DREQ retransmission timeout on RoCE: 2·ms(PLT 16) + ms(20) = 4608 ms
/// (cm-spec §3.2).
const DREQ_TIMEOUT_NS: u64 = 4608 * MS;
/// The same with [`WorldConfig::fast`]: 2·ms(10) + ms(10) = 12 ms.
const FAST_DREQ_TIMEOUT_NS: u64 = 12 * MS;
/// DREQ sends before DREQ_ERROR: 1 + CMA_MAX_CM_RETRIES (15) (cm-spec §3.2).
const DREQ_SENDS: u64 = 16;

// =============================================================================================
// Helpers: a connected World, and short names for what the tests look at
// =============================================================================================

/// Two hosts, Linux's default timers, a perfect network; host 0 connected to host 1, and
/// [`traffic`] done on the connection.
fn established() -> (World, Conn) {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let c = w.establish(0, 1).unwrap();
    traffic(&mut w, c);
    (w, c)
}

/// Each end posts 3 receives and one SEND: both SENDs and one receive per end succeed, the
/// other receives stay posted (for the teardown to flush). Returns those, (active, passive).
fn traffic(w: &mut World, c: Conn) -> (Vec<u64>, Vec<u64>) {
    let ra = w.post_recvs(c.active, 3);
    let rp = w.post_recvs(c.passive, 3);
    let sa = w.post(c.active, Op::Send, 1);
    let sp = w.post(c.passive, Op::Send, 1);
    w.run_for(MS);
    for wr in [sa[0], sp[0], ra[0], rp[0]] {
        assert_eq!(w.wc_status(wr), Some(WcStatus::Success), "WR {wr}");
    }
    for wr in [&ra[1..], &rp[1..]].concat() {
        assert_eq!(w.wc_status(wr), None, "WR {wr} still posted");
    }
    (ra[1..].to_vec(), rp[1..].to_vec())
}

/// The peer's part of a disconnect `init` started: `peer` reads DISCONNECTED(0) with its QP
/// untouched (cm-spec §4.2), while `init` still waits for the DREP; `peer` answers with
/// `rdma_disconnect` (DREP, its QP → ERR).
fn answer(w: &mut World, init: End, peer: End) {
    w.wait_event(peer.host, Some(peer.id), E::Disconnected)
        .unwrap();
    assert_eq!(statuses(w, peer, E::Disconnected), [0]);
    assert_eq!(w.qp_state(peer), Some(QpState::Rts), "DREQ leaves the QP");
    assert!(
        statuses(w, init, E::Disconnected).is_empty(),
        "the initiator waits for the DREP"
    );
    assert_eq!(w.disconnect(peer), Ok(()));
    assert_eq!(w.qp_state(peer), Some(QpState::Err));
}

/// The orderly end of a connection: one DISCONNECTED(0) on each end, one DREQ from the
/// initiator, one DREP from the responder, and TIMEWAIT_EXIT last on both ends.
fn assert_orderly(w: &mut World, init: End, resp: End) {
    for e in [init, resp] {
        assert_eq!(statuses(w, e, E::Disconnected), [0], "{e:?}");
        assert_eq!(statuses(w, e, E::TimewaitExit), [0], "{e:?}");
        assert_eq!(kinds(w, e).last(), Some(&E::TimewaitExit), "{e:?}");
    }
    assert_eq!(sent(w, init.host, DREQ), 1);
    assert_eq!(sent(w, resp.host, DREP), 1);
}

/// The CM event types `e`'s application read for its id, in order.
fn kinds(w: &World, e: End) -> Vec<E> {
    w.events_of(e.host, e.id).iter().map(|x| x.1).collect()
}

/// The statuses of `e`'s events of type `kind`, in order.
fn statuses(w: &World, e: End, kind: E) -> Vec<i32> {
    w.events_of(e.host, e.id)
        .iter()
        .filter(|x| x.1 == kind)
        .map(|x| x.2)
        .collect()
}

/// When `e` read its first event of type `kind`.
fn time_of(w: &World, e: End, kind: E) -> SimTime {
    w.events_of(e.host, e.id)
        .iter()
        .find(|x| x.1 == kind)
        .unwrap()
        .0
}

/// How many CM MADs of attribute `attr` host `h` sent (current life).
fn sent(w: &mut World, h: usize, attr: u16) -> usize {
    w.sent_mads(h).iter().filter(|m| m.1.attr == attr).count()
}

/// The attributes of every CM MAD host `h` sent (current life), in order.
fn sent_attrs(w: &mut World, h: usize) -> Vec<u16> {
    w.sent_mads(h).iter().map(|m| m.1.attr).collect()
}

/// The reasons of the REJs host `h` sent.
fn rej_reasons(w: &mut World, h: usize) -> Vec<u16> {
    w.sent_mads(h)
        .iter()
        .filter(|m| m.1.attr == REJ)
        .map(|m| m.1.reason)
        .collect()
}

/// CM MADs sent by both hosts.
fn mads_on_wire(w: &mut World) -> usize {
    w.sent_mads(0).len() + w.sent_mads(1).len()
}

/// The initiator `init` disconnected at `t0` and nothing answers: 16 DREQs `timeout_ns`
/// apart, then DISCONNECTED(-110) exactly 16 × `timeout_ns` after `t0` (cm-spec §3.2, §4.2),
/// and the IB CM id in TimeWait.
fn assert_dreq_timeout(w: &mut World, init: End, t0: SimTime, timeout_ns: u64) {
    w.wait_event(init.host, Some(init.id), E::Disconnected)
        .unwrap();
    assert_eq!(statuses(w, init, E::Disconnected), [-110]);
    assert_eq!(
        time_of(w, init, E::Disconnected),
        t0.plus_nanos(DREQ_SENDS * timeout_ns)
    );
    let times: Vec<SimTime> = w
        .sent_mads(init.host)
        .iter()
        .filter(|m| m.1.attr == DREQ)
        .map(|m| m.0)
        .collect();
    let want: Vec<SimTime> = (0..DREQ_SENDS)
        .map(|i| t0.plus_nanos(i * timeout_ns))
        .collect();
    assert_eq!(times, want, "DREQ send times");
    assert_eq!(w.ib_cm_state(init.host, init.id), Some(IbCmState::Timewait));
}

/// Like [`World::establish`], with the RTU dropped: a one-way partition 0 → 1 from the accept
/// until 1 ms later (the RTU is the only datagram host 0 sends in that window). Host 0 is
/// ESTABLISHED, host 1 stays in REP_SENT.
fn establish_without_rtu(w: &mut World) -> Conn {
    w.listen(1).unwrap();
    let active = w.connect(0, 1).unwrap();
    let pid = w.wait_event(1, None, E::ConnectRequest).unwrap();
    w.partition_one_way(0, 1, Some(MS));
    let passive = w.accept(1, pid).unwrap();
    w.wait_event(0, Some(active.id), E::Established).unwrap();
    w.run_for(MS);
    let dropped: Vec<_> = w.dropped().iter().map(|d| (d.0, d.1.attr, d.2)).collect();
    assert_eq!(dropped, [(0, RTU, DropReason::Partitioned)]);
    assert_eq!(w.ib_cm_state(1, passive.id), Some(IbCmState::RepSent));
    Conn { active, passive }
}

mod async_events;
mod choices;
mod cm_calls;
mod destroy;
mod handshake_and_disconnect_rows;
mod lost_and_rejected;
mod sequences;
mod srq;
mod world_events;
mod world_knobs;
