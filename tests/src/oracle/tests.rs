//! Each invariant: a hand-made orderly history passes; one change breaks exactly the rule.
use super::*;
use crate::history::{Call, Entry, Op, Record, WireMsg};
use verbs_core::WcOpcode;

const A: u32 = 0xa;
const B: u32 = 0xb;
const TW: u64 = 128_000_000;

fn at(us: u64, host: u8, rec: Record) -> Entry {
    Entry {
        at: SimTime(us * 1000),
        host,
        epoch: 0,
        rec,
    }
}

fn event(us: u64, host: u8, id: u32, event: E, status: i32, comm_id: u32) -> Entry {
    let timewait_ns = if event == E::Disconnected { TW } else { 0 };
    at(
        us,
        host,
        Record::Event {
            id,
            event,
            status,
            comm_id,
            timewait_ns,
        },
    )
}

fn wire(us: u64, host: u8, tx: bool, attr: u16, local: u32, remote: u32) -> Entry {
    at(
        us,
        host,
        Record::Wire {
            tx,
            peer: 1 - host,
            msg: WireMsg {
                attr,
                local_comm_id: local,
                remote_comm_id: remote,
                reason: 0,
            },
        },
    )
}

fn call(us: u64, host: u8, call: Call, errno: i32) -> Entry {
    at(us, host, Record::Call { call, errno })
}

fn posted(us: u64, host: u8, wr_id: u64, queue: Queue, qp_err: bool) -> Entry {
    let op = if queue == Queue::Recv {
        Op::Recv
    } else {
        Op::Send
    };
    at(
        us,
        host,
        Record::Posted {
            qpn: 17,
            wr_id,
            queue,
            op,
            len: 64,
            qp_err,
        },
    )
}

fn done(us: u64, host: u8, wr_id: u64, queue: Queue, status: WcStatus, data_ok: bool) -> Entry {
    at(
        us,
        host,
        Record::Completion {
            qpn: 17,
            wr_id,
            queue,
            opcode: WcOpcode::Send,
            status,
            byte_len: 64,
            data_ok,
        },
    )
}

/// Host 0 connects to host 1, a SEND lands in a receive, host 0 disconnects, host 1
/// answers, both leave TimeWait; a receive posted to host 0's QP in ERR is flushed.
fn orderly() -> Vec<Entry> {
    let ok = WcStatus::Success;
    vec![
        at(0, 0, Record::Boot { max_cm_retries: 15 }),
        at(0, 1, Record::Boot { max_cm_retries: 15 }),
        call(
            0,
            0,
            Call::Connect {
                id: 1,
                to: 1,
                qpn: 17,
            },
            0,
        ),
        event(10, 1, 2, E::ConnectRequest, 0, B),
        call(10, 1, Call::Accept { id: 2, qpn: 17 }, 0),
        posted(10, 1, 1, Queue::Recv, false),
        posted(10, 1, 4, Queue::Recv, false),
        event(20, 0, 1, E::Established, 0, A),
        call(
            20,
            0,
            Call::Post {
                qpn: 17,
                op: Op::Send,
                n: 1,
            },
            0,
        ),
        posted(20, 0, 2, Queue::Send, false),
        event(30, 1, 2, E::Established, 0, B),
        done(30, 1, 1, Queue::Recv, ok, true),
        done(40, 0, 2, Queue::Send, ok, true),
        call(50, 0, Call::Disconnect { id: 1 }, 0),
        at(50, 0, Record::QpErr { qpn: 17 }),
        wire(50, 0, true, DREQ, A, B),
        posted(51, 0, 3, Queue::Recv, true),
        done(51, 0, 3, Queue::Recv, WcStatus::WrFlushErr, true),
        wire(60, 1, false, DREQ, A, B),
        event(60, 1, 2, E::Disconnected, 0, B),
        call(60, 1, Call::Disconnect { id: 2 }, 0),
        at(60, 1, Record::QpErr { qpn: 17 }),
        done(60, 1, 4, Queue::Recv, WcStatus::WrFlushErr, true),
        wire(60, 1, true, DREP, B, A),
        wire(70, 0, false, DREP, B, A),
        event(70, 0, 1, E::Disconnected, 0, A),
        event(70 + TW / 1000, 0, 1, E::TimewaitExit, 0, A),
        event(60 + TW / 1000, 1, 2, E::TimewaitExit, 0, B),
    ]
}

fn history(entries: Vec<Entry>) -> History {
    History {
        entries,
        rc_packets: vec![0, 0],
        quiescent: true,
        healed_at: Some(SimTime::ZERO),
        deaf: vec![false, false],
        hostile: vec![false, false],
    }
}

fn broken(entries: Vec<Entry>) -> Vec<Invariant> {
    check(&history(entries))
        .iter()
        .map(|v| v.invariant)
        .collect()
}

fn without(mut e: Vec<Entry>, pred: impl Fn(&Entry) -> bool) -> Vec<Entry> {
    let n = e.len();
    e.retain(|x| !pred(x));
    assert_eq!(e.len() + 1, n, "exactly one record removed");
    e
}

fn is_event(e: &Entry, host: u8, kind: E) -> bool {
    e.host == host && matches!(e.rec, Record::Event { event, .. } if event == kind)
}

#[test]
fn orderly_history_passes_and_reaches_no_rare_situation_but_wr_after_err() {
    let (v, s) = check_with_sometimes(&history(orderly()));
    assert!(v.is_empty(), "{v:?}");
    assert!(s.wr_posted_after_err);
    assert!(!s.dreqs_crossed && !s.drep_lost && !s.dreq_retries_exhausted);
}

#[test]
fn s1_second_disconnected_is_a_violation() {
    let mut h = orderly();
    h.insert(20, event(61, 1, 2, E::Disconnected, 0, B));
    assert!(broken(h).contains(&Invariant::S1));
}

#[test]
fn s1_timewait_exit_before_the_timewait_delay_is_a_violation() {
    let mut h = orderly();
    let last = h.len() - 1;
    h[last] = event(61, 1, 2, E::TimewaitExit, 0, B);
    assert_eq!(broken(h), [Invariant::S1]);
}

#[test]
fn s2_wr_never_completed_at_quiescence_is_a_violation() {
    let h = without(orderly(), |e| {
        matches!(e.rec, Record::Completion { wr_id: 4, .. })
    });
    assert_eq!(broken(h), [Invariant::S2]);
}

#[test]
fn s2_wr_lost_to_an_overrun_of_its_cq_is_not_a_violation() {
    let mut h = without(orderly(), |e| {
        matches!(e.rec, Record::Completion { wr_id: 4, .. })
    });
    h.push(at(60, 1, Record::CqErr { queue: Queue::Recv }));
    assert_eq!(broken(h.clone()), []);
    // The other CQ's overrun does not excuse it.
    let last = h.len() - 1;
    h[last] = at(60, 1, Record::CqErr { queue: Queue::Send });
    assert_eq!(broken(h), [Invariant::S2]);
}

#[test]
fn s2_wr_completed_twice_is_a_violation() {
    let mut h = orderly();
    h.insert(13, done(41, 0, 2, Queue::Send, WcStatus::Success, true));
    assert!(broken(h).contains(&Invariant::S2));
}

#[test]
fn s3_completions_out_of_post_order_is_a_violation() {
    let mut h = orderly();
    // WR 4 (posted after WR 1 on the same receive queue) completes first.
    let i = h
        .iter()
        .position(|e| matches!(e.rec, Record::Completion { wr_id: 4, .. }))
        .unwrap();
    let wr4 = h.remove(i);
    h.insert(
        11,
        Entry {
            at: SimTime(25_000),
            ..wr4
        },
    );
    let mut w4 = h[11];
    if let Record::Completion { ref mut status, .. } = w4.rec {
        *status = WcStatus::Success;
    }
    h[11] = w4;
    assert_eq!(broken(h), [Invariant::S3]);
}

#[test]
fn s4_success_on_a_qp_seen_in_err_is_a_violation() {
    let mut h = orderly();
    let i = h
        .iter()
        .position(|e| matches!(e.rec, Record::Completion { wr_id: 3, .. }))
        .unwrap();
    h[i] = done(51, 0, 3, Queue::Recv, WcStatus::Success, true);
    assert!(broken(h).contains(&Invariant::S4));
}

#[test]
fn s5_disconnected_0_without_drep_or_dreq_received_is_a_violation() {
    let h = without(orderly(), |e| {
        e.host == 0 && matches!(e.rec, Record::Wire { tx: false, .. })
    });
    assert!(broken(h).contains(&Invariant::S5));
}

#[test]
fn s5_minus_110_before_the_retries_ran_out_is_a_violation() {
    let mut h = without(orderly(), |e| {
        e.host == 0 && matches!(e.rec, Record::Wire { tx: false, .. })
    });
    let i = h
        .iter()
        .position(|e| is_event(e, 0, E::Disconnected))
        .unwrap();
    h[i] = event(70, 0, 1, E::Disconnected, -110, A);
    assert_eq!(broken(h), [Invariant::S5]);
}

/// The orderly history, but host 1's DREQ came from host 2, a hostile host, and host 0's
/// real DREQ never arrived.
fn dreq_from_a_hostile_host() -> History {
    let mut h = orderly();
    let i = h
        .iter()
        .position(|e| e.host == 1 && matches!(e.rec, Record::Wire { tx: false, .. }))
        .unwrap();
    if let Record::Wire { ref mut peer, .. } = h[i].rec {
        *peer = 2;
    }
    h.insert(0, at(0, 2, Record::Boot { max_cm_retries: 15 }));
    let mut h = history(h);
    h.hostile = vec![false, false, true];
    h
}

#[test]
fn s5_disconnected_0_after_only_a_hostile_hosts_dreq_is_a_violation() {
    let v = check(&dreq_from_a_hostile_host());
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].invariant, v[0].host), (Invariant::S5, 1));
}

#[test]
fn s5_the_same_dreq_from_a_host_that_is_not_hostile_is_fine() {
    let mut h = dreq_from_a_hostile_host();
    h.hostile = vec![false; 3];
    assert!(check(&h).is_empty());
}

#[test]
fn the_hostile_hosts_own_records_are_not_checked() {
    let mut h = history(orderly());
    // A completion of a WR never posted would be S2 on any other host.
    h.entries
        .push(done(80, 2, 99, Queue::Send, WcStatus::Success, false));
    h.hostile = vec![false, false, true];
    assert!(check(&h).is_empty());
    h.hostile = vec![false; 3];
    assert_eq!(broken(h.entries), [Invariant::S2, Invariant::S6]);
}

/// Host 0 connects, host 1 rejects: the REJ (reason 28) reaches host 0, which reports REJECTED.
fn rejected() -> Vec<Entry> {
    let mut rej = wire(20, 0, false, REJ, B, A);
    if let Record::Wire { ref mut msg, .. } = rej.rec {
        msg.reason = 28;
    }
    vec![
        at(0, 0, Record::Boot { max_cm_retries: 15 }),
        at(0, 1, Record::Boot { max_cm_retries: 15 }),
        call(
            0,
            0,
            Call::Connect {
                id: 1,
                to: 1,
                qpn: 17,
            },
            0,
        ),
        event(10, 1, 2, E::ConnectRequest, 0, B),
        call(10, 1, Call::Reject { id: 2 }, 0),
        rej,
        event(20, 0, 1, E::Rejected, 28, A),
    ]
}

#[test]
fn s5_rejected_after_a_rej_for_the_id_passes() {
    assert!(broken(rejected()).is_empty());
}

#[test]
fn s5_rejected_without_a_rej_for_the_id_is_a_violation() {
    let h = without(rejected(), |e| matches!(e.rec, Record::Wire { .. }));
    assert_eq!(broken(h), [Invariant::S5]);
    let mut h = rejected();
    if let Record::Wire { ref mut msg, .. } = h[5].rec {
        msg.remote_comm_id = A + 1;
    }
    assert_eq!(broken(h), [Invariant::S5]);
}

#[test]
fn s6_successful_receive_with_other_bytes_is_a_violation() {
    let mut h = orderly();
    let i = h
        .iter()
        .position(|e| matches!(e.rec, Record::Completion { wr_id: 1, .. }))
        .unwrap();
    h[i] = done(30, 1, 1, Queue::Recv, WcStatus::Success, false);
    assert_eq!(broken(h), [Invariant::S6]);
}

#[test]
fn s7_disconnect_of_a_connected_id_returning_einval_is_a_violation() {
    let mut h = orderly();
    let i = h
        .iter()
        .position(|e| {
            matches!(
                e.rec,
                Record::Call {
                    call: Call::Disconnect { id: 1 },
                    ..
                }
            )
        })
        .unwrap();
    h[i] = call(50, 0, Call::Disconnect { id: 1 }, 22);
    assert!(broken(h).contains(&Invariant::S7));
}

#[test]
fn s7_disconnect_returning_0_must_move_the_qp_to_err() {
    let h = without(orderly(), |e| {
        e.host == 0 && matches!(e.rec, Record::QpErr { .. })
    });
    let h = without(h, |e| matches!(e.rec, Record::Posted { wr_id: 3, .. }));
    let h = without(h, |e| matches!(e.rec, Record::Completion { wr_id: 3, .. }));
    assert_eq!(broken(h), [Invariant::S7]);
}

#[test]
fn s7_destroy_with_an_unacked_event_must_return_ebusy() {
    let mut h = orderly();
    h.push(call(200_000, 1, Call::Destroy { id: 2 }, 0));
    assert_eq!(broken(h), [Invariant::S7]);
    let mut h = orderly();
    h.push(call(200_000, 1, Call::Destroy { id: 2 }, 16));
    assert_eq!(broken(h), []);
}

#[test]
fn s7_send_before_rts_must_be_einval() {
    let mut h = orderly();
    h.insert(
        3,
        call(
            1,
            0,
            Call::Post {
                qpn: 17,
                op: Op::Send,
                n: 1,
            },
            0,
        ),
    );
    assert_eq!(broken(h), [Invariant::S7]);
}

#[test]
fn l1_disconnect_without_disconnected_is_a_violation() {
    let h = without(orderly(), |e| is_event(e, 0, E::TimewaitExit));
    let h = without(h, |e| is_event(e, 0, E::Disconnected));
    // The peer processed the DREQ, so the initiator's missing DISCONNECTED is also L2.
    assert_eq!(broken(h), [Invariant::L1, Invariant::L2]);
}

#[test]
fn l2_peer_that_answered_without_disconnected_is_a_violation() {
    let h = without(orderly(), |e| is_event(e, 1, E::TimewaitExit));
    let h = without(h, |e| is_event(e, 1, E::Disconnected));
    assert!(broken(h).contains(&Invariant::L2));
}

#[test]
fn l3_missing_timewait_exit_is_a_violation() {
    let h = without(orderly(), |e| is_event(e, 0, E::TimewaitExit));
    assert_eq!(broken(h), [Invariant::L3]);
}

#[test]
fn l3_not_quiescent_after_healing_is_a_violation() {
    let mut h = history(orderly());
    h.quiescent = false;
    let v: Vec<Invariant> = check(&h).iter().map(|v| v.invariant).collect();
    assert_eq!(v, [Invariant::L3]);
}

#[test]
fn violation_display_names_invariant_host_time_and_records() {
    let h = without(orderly(), |e| is_event(e, 0, E::TimewaitExit));
    let mut h = h;
    h.insert(20, event(61, 1, 2, E::Disconnected, 0, B));
    let v = check(&history(h));
    let s = v[0].to_string();
    assert!(s.starts_with("S1 violated on host 1 at 61 µs"), "{s}");
    assert!(s.contains("event Disconnected id 2"), "{s}");
}
