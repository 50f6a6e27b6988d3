//! The rules of `oracle/device_events.rs`: a hand-made history that breaks one rule is caught
//! under its invariant; the same history without the break passes.
use super::*;
use crate::history::{AsyncOn, Call, Entry, Op, Record};
use verbs_core::AsyncEventType as A;

const QPN: u32 = 0x11;

fn at(us: u64, host: u8, rec: Record) -> Entry {
    Entry {
        at: SimTime(us * 1000),
        host,
        epoch: 0,
        rec,
    }
}

fn boot() -> Entry {
    at(0, 0, Record::Boot { max_cm_retries: 15 })
}

fn ev(us: u64, event: E, status: i32) -> Entry {
    let rec = Record::Event {
        id: 1,
        event,
        status,
        comm_id: 0,
        timewait_ns: 0,
    };
    at(us, 0, rec)
}

fn asy(us: u64, event: A, on: AsyncOn) -> Entry {
    at(us, 0, Record::Async { event, on })
}

fn removed(us: u64) -> Entry {
    at(us, 0, Record::Fault(Fault::DeviceRemoved { rc_sent: 0 }))
}

/// The invariants `entries` violate.
fn broken(entries: Vec<Entry>) -> Vec<Invariant> {
    let h = History {
        entries,
        rc_packets: vec![0],
        deaf: vec![false],
        hostile: vec![false],
        ..History::default()
    };
    check(&h).into_iter().map(|v| v.invariant).collect()
}

#[test]
fn no_event_after_device_removal() {
    let ok = vec![boot(), removed(1), ev(2, E::DeviceRemoval, 0)];
    assert_eq!(broken(ok.clone()), []);
    let mut bad = ok;
    bad.push(ev(3, E::Disconnected, 0));
    assert!(broken(bad).contains(&Invariant::S1));
}

#[test]
fn device_removal_needs_a_removed_device() {
    assert_eq!(
        broken(vec![boot(), ev(2, E::DeviceRemoval, 0)]),
        [Invariant::S5]
    );
}

#[test]
fn calls_after_removal_fail() {
    let ok = vec![
        boot(),
        removed(1),
        ev(2, E::DeviceRemoval, 0),
        at(
            3,
            0,
            Record::Call {
                call: Call::Disconnect { id: 1 },
                errno: 6,
            },
        ),
        at(
            3,
            0,
            Record::Call {
                call: Call::QpToErr { qpn: QPN },
                errno: 5,
            },
        ),
    ];
    assert_eq!(broken(ok.clone()), []);
    let mut bad = ok;
    bad.push(at(
        4,
        0,
        Record::Call {
            call: Call::QpToErr { qpn: QPN },
            errno: 0,
        },
    ));
    assert_eq!(broken(bad), [Invariant::S7]);
}

#[test]
fn a_removed_host_sends_nothing() {
    let mad = Record::Wire {
        tx: true,
        peer: 1,
        msg: crate::history::WireMsg {
            attr: cm_core::wire::CM_DREQ_ATTR_ID,
            ..Default::default()
        },
    };
    assert_eq!(broken(vec![boot(), at(1, 0, mad)]), []);
    assert_eq!(
        broken(vec![boot(), removed(1), at(2, 0, mad)]),
        [Invariant::S5]
    );
    let rc = History {
        entries: vec![boot(), removed(1)],
        rc_packets: vec![3],
        deaf: vec![false],
        hostile: vec![false],
        ..History::default()
    };
    let v: Vec<_> = check(&rc).into_iter().map(|v| v.invariant).collect();
    assert_eq!(v, [Invariant::S5]);
}

#[test]
fn device_fatal_once_per_device_life() {
    let ok = vec![boot(), removed(1), asy(2, A::DeviceFatal, AsyncOn::Device)];
    assert_eq!(broken(ok.clone()), []);
    let mut bad = ok;
    bad.push(asy(3, A::DeviceFatal, AsyncOn::Device));
    assert_eq!(broken(bad), [Invariant::S1]);
}

#[test]
fn no_async_event_after_device_fatal() {
    let mut bad = vec![boot(), removed(1), asy(2, A::DeviceFatal, AsyncOn::Device)];
    bad.push(asy(3, A::QpLastWqeReached, AsyncOn::Qp(0x11)));
    assert_eq!(broken(bad), [Invariant::S1]);
}

#[test]
fn last_wqe_once_and_after_the_last_flush() {
    let ok = vec![boot(), asy(2, A::QpLastWqeReached, AsyncOn::Qp(QPN))];
    assert_eq!(broken(ok.clone()), []);
    let mut twice = ok.clone();
    twice.push(asy(3, A::QpLastWqeReached, AsyncOn::Qp(QPN)));
    assert_eq!(broken(twice), [Invariant::S4]);
    let mut late = ok;
    late.push(at(
        1,
        0,
        Record::Posted {
            qpn: QPN,
            wr_id: 7,
            queue: Queue::Recv,
            op: Op::Recv,
            len: 128,
            qp_err: false,
        },
    ));
    late.push(at(
        3,
        0,
        Record::Completion {
            qpn: QPN,
            wr_id: 7,
            queue: Queue::Recv,
            opcode: verbs_core::WcOpcode::Send,
            status: WcStatus::WrFlushErr,
            byte_len: 0,
            data_ok: true,
        },
    ));
    assert_eq!(broken(late), [Invariant::S4]);
}

#[test]
fn qp_fatal_only_after_cq_err() {
    let fatal = asy(3, A::QpFatal, AsyncOn::Qp(QPN));
    let cq_err = at(2, 0, Record::CqErr { queue: Queue::Recv });
    assert_eq!(broken(vec![boot(), cq_err, fatal]), []);
    assert_eq!(broken(vec![boot(), fatal]), [Invariant::S4]);
}

#[test]
fn comm_est_once_per_qp() {
    let ce = asy(2, A::CommEst, AsyncOn::Qp(QPN));
    assert_eq!(broken(vec![boot(), ce]), []);
    assert_eq!(broken(vec![boot(), ce, ce]), [Invariant::S1]);
}

#[test]
fn addr_change_needs_an_address_change() {
    let change = at(1, 0, Record::Fault(Fault::AddressChange));
    assert_eq!(broken(vec![boot(), change, ev(2, E::AddrChange, 0)]), []);
    assert_eq!(
        broken(vec![boot(), ev(2, E::AddrChange, 0)]),
        [Invariant::S5]
    );
}

#[test]
fn notify_returns_zero_only_before_established() {
    let notify = |errno| {
        at(
            3,
            0,
            Record::Call {
                call: Call::Notify { id: 1 },
                errno,
            },
        )
    };
    assert_eq!(
        broken(vec![boot(), notify(0), ev(4, E::Established, 0)]),
        []
    );
    assert_eq!(
        broken(vec![boot(), ev(2, E::Established, 0), notify(106)]),
        []
    );
    assert_eq!(
        broken(vec![boot(), ev(2, E::Established, 0), notify(0)]),
        [Invariant::S7]
    );
    assert_eq!(
        broken(vec![
            boot(),
            ev(2, E::Established, 0),
            ev(4, E::Established, 0)
        ]),
        [Invariant::S1]
    );
}
