//! Gallery of the device and CM events the World records and the oracle checks (issue 14),
//! one test per rule, written as a test writer uses the World: device removal (DEVICE_FATAL,
//! DEVICE_REMOVAL, a silent host, failing calls, the peer's DREQ retries), address change,
//! shared receive queues (SRQ_LIMIT_REACHED, LAST_WQE_REACHED), CQ overrun (CQ_ERR then
//! QP_FATAL), COMM_EST, and `rdma_notify` answering COMM_EST when the RTU is lost.

use cm_core::api::CmEventType as E;
use cm_core::wire::{CM_DREQ_ATTR_ID as DREQ, CM_RTU_ATTR_ID as RTU};
use rnic_testbed::world::{
    AsyncOn, Call, Fault, HostApp, HostCm, MsgFault, Occurrence, Op, Queue, Record, World,
    WorldConfig,
};
use verbs_core::{AsyncEventType as A, QpState, SimTime, WcStatus};

type R = Result<(), Box<dyn std::error::Error>>;

const MS: u64 = 1_000_000;

/// The async events (other than CQ_ERR) host `h` read, with their time and element.
fn async_events(w: &World, h: usize) -> Vec<(SimTime, A, AsyncOn)> {
    w.history()
        .of_host(h)
        .filter_map(|e| match e.rec {
            Record::Async { event, on } => Some((e.at, event, on)),
            _ => None,
        })
        .collect()
}

/// The errno of every recorded call of host `h` matching `f`.
fn errnos(w: &World, h: usize, f: impl Fn(Call) -> bool) -> Vec<i32> {
    w.history()
        .of_host(h)
        .filter_map(|e| match e.rec {
            Record::Call { call, errno } if f(call) => Some(errno),
            _ => None,
        })
        .collect()
}

/// The time of host `h`'s first fault matching `f`.
fn fault_at(w: &World, h: usize, f: impl Fn(Fault) -> bool) -> Option<SimTime> {
    w.history().of_host(h).find_map(|e| match e.rec {
        Record::Fault(x) if f(x) => Some(e.at),
        _ => None,
    })
}

/// Removing host 1's device: its id reads DEVICE_REMOVAL and nothing after; DEVICE_FATAL
/// comes once; its posted receives are flushed; `rdma_disconnect` and `ibv_post_recv` fail
/// (ENXIO/EIO, EIO); it sends no MAD afterwards; the peer's DREQ goes out 1 + max_cm_retries
/// times and ends in DISCONNECTED −110 (docs/cm-semantics.md "Device removal and address
/// change"). The oracle passes.
#[test]
fn a_removed_device_goes_silent_and_its_peer_times_out() -> R {
    let cfg = WorldConfig::two_hosts(21).fast().with_host_cm(
        0,
        HostCm {
            max_cm_retries: Some(2),
            ..HostCm::default()
        },
    );
    let mut w = World::new(cfg)?;
    let c = w.establish(0, 1)?;
    let recvs = w.post_recvs(c.passive, 2);
    w.remove_device(1)?;
    w.remove_device(1)?; // a second removal changes nothing
    w.run_for(MS);
    let removed = fault_at(&w, 1, |f| matches!(f, Fault::DeviceRemoved { .. })).unwrap();
    let events = w.events_of(1, c.passive.id);
    assert_eq!(
        events.last().map(|e| (e.1, e.2)),
        Some((E::DeviceRemoval, 0))
    );
    for wr in recvs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
    let fatal: Vec<_> = async_events(&w, 1)
        .into_iter()
        .filter(|e| e.1 == A::DeviceFatal)
        .collect();
    assert_eq!(fatal.len(), 1, "DEVICE_FATAL once per device life");
    assert!(w.disconnect(c.passive).is_err());
    assert!(w.post_recvs(c.passive, 1).is_empty());
    let disc = errnos(&w, 1, |c| matches!(c, Call::Disconnect { .. }));
    assert!(disc.iter().all(|&e| e == 6 || e == 5), "{disc:?}");
    // The post before the removal, then the one after: EIO.
    assert_eq!(errnos(&w, 1, |c| matches!(c, Call::Post { .. })), [0, 5]);
    w.disconnect(c.active)?;
    w.run_to_quiescence();
    assert!(w.sent_mads(1).iter().all(|(t, _)| *t < removed));
    let dreqs = w.sent_mads(0).iter().filter(|m| m.1.attr == DREQ).count();
    assert_eq!(dreqs, 3, "1 + max_cm_retries DREQs");
    let disc = w.events_of(0, c.active.id);
    assert!(disc.iter().any(|e| e.1 == E::Disconnected && e.2 == -110));
    assert_eq!(w.events_of(1, c.passive.id).len(), events.len());
    w.check()?;
    Ok(())
}

/// An address change gives the connected ids ADDR_CHANGE (status 0) and changes nothing: the
/// QP stays in RTS, data still flows, and the disconnect that follows is the orderly one.
#[test]
fn an_address_change_changes_no_state() -> R {
    let mut w = World::new(WorldConfig::two_hosts(22).fast())?;
    let c = w.establish(0, 1)?;
    w.address_change(0)?;
    w.run_for(MS);
    let ev = w.events_of(0, c.active.id);
    assert_eq!(ev.last().map(|e| (e.1, e.2)), Some((E::AddrChange, 0)));
    assert_eq!(w.qp_state(c.active), Some(QpState::Rts));
    let r = w.post_recvs(c.passive, 1);
    let s = w.post(c.active, Op::Send, 1);
    w.run_for(MS);
    assert_eq!(w.wc_status(s[0]), Some(WcStatus::Success));
    assert_eq!(w.wc_status(r[0]), Some(WcStatus::Success));
    w.disconnect(c.active)?;
    w.wait_event(1, Some(c.passive.id), E::Disconnected)?;
    w.disconnect(c.passive)?;
    w.run_to_quiescence();
    for e in [c.active, c.passive] {
        let kinds: Vec<E> = w.events_of(e.host, e.id).iter().map(|x| x.1).collect();
        assert_eq!(kinds.last(), Some(&E::TimewaitExit), "{kinds:?}");
    }
    w.check()?;
    Ok(())
}

/// Host 1 receives from an SRQ with its limit armed at 2: taking receives until fewer than 2
/// are left raises SRQ_LIMIT_REACHED once; its QP's move to ERR raises LAST_WQE_REACHED once,
/// and no receive completion of that QP follows it.
#[test]
fn an_srq_host_reports_its_limit_and_the_last_wqe_once() -> R {
    let app = HostApp {
        srq: true,
        srq_limit: 2,
        ..HostApp::default()
    };
    let mut w = World::new(WorldConfig::two_hosts(23).fast().with_host_app(1, app))?;
    let c = w.establish(0, 1)?;
    let r = w.post_recvs(c.passive, 3);
    let posted_on: Vec<u32> = w
        .history()
        .of_host(1)
        .filter_map(|e| match e.rec {
            Record::Posted { qpn, .. } => Some(qpn),
            _ => None,
        })
        .collect();
    assert_eq!(posted_on, [rnic_testbed::world::SRQ_QPN; 3]);
    let s = w.post(c.active, Op::Send, 2);
    w.run_for(MS);
    assert_eq!(w.wc_status(s[1]), Some(WcStatus::Success));
    assert_eq!(w.wc_status(r[1]), Some(WcStatus::Success));
    let limit: Vec<_> = async_events(&w, 1)
        .into_iter()
        .filter(|e| e.1 == A::SrqLimitReached)
        .collect();
    assert_eq!(limit.len(), 1);
    assert_eq!(limit[0].2, AsyncOn::Srq);
    w.disconnect(c.active)?;
    w.wait_event(1, Some(c.passive.id), E::Disconnected)?;
    w.disconnect(c.passive)?;
    w.run_to_quiescence();
    let qpn = c.passive.qp.qp_num;
    let last: Vec<_> = async_events(&w, 1)
        .into_iter()
        .filter(|e| e.1 == A::QpLastWqeReached)
        .collect();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].2, AsyncOn::Qp(qpn));
    let late_wc = w.history().of_host(1).any(|e| {
        e.at > last[0].0
            && matches!(e.rec, Record::Completion { qpn: q, queue: Queue::Recv, .. } if q == qpn)
    });
    assert!(!late_wc, "no receive completion after LAST_WQE_REACHED");
    // The third receive stays in the SRQ: it goes with the SRQ, not with the QP.
    assert_eq!(w.wc_status(r[2]), None);
    w.check()?;
    Ok(())
}

/// CQs of one CQE: the flush of three receives overruns the receive CQ, CQ_ERR comes first,
/// then QP_FATAL for the QP whose completion did not fit (docs/semantics-verbs.md "CQ
/// overrun").
#[test]
fn qp_fatal_follows_the_cq_err_of_its_cq() -> R {
    let mut w = World::new(WorldConfig {
        cq_entries: 1,
        ..WorldConfig::two_hosts(24).fast()
    })?;
    let c = w.establish(0, 1)?;
    w.post_recvs(c.passive, 3);
    w.qp_to_err(c.passive)?;
    w.run_for(MS);
    let h = w.history();
    let cq_err = h
        .of_host(1)
        .position(|e| matches!(e.rec, Record::CqErr { queue: Queue::Recv }));
    let fatal = h.of_host(1).position(|e| {
        matches!(e.rec, Record::Async { event: A::QpFatal, on: AsyncOn::Qp(q) } if q == c.passive.qp.qp_num)
    });
    assert!(cq_err.is_some() && fatal.is_some(), "{cq_err:?} {fatal:?}");
    assert!(cq_err < fatal, "CQ_ERR before QP_FATAL");
    w.check()?;
    Ok(())
}

/// COMM_EST comes once per QP, on the first request it receives since RTR (here in RTS,
/// after the RTU), however much data follows.
#[test]
fn comm_est_comes_once_per_qp() -> R {
    let mut w = World::new(WorldConfig::two_hosts(25).fast())?;
    let c = w.establish(0, 1)?;
    w.post_recvs(c.passive, 2);
    w.post_recvs(c.active, 2);
    w.post(c.active, Op::Send, 2);
    w.post(c.passive, Op::Send, 2);
    w.post(c.active, Op::Write, 2);
    w.run_for(MS);
    for e in [c.active, c.passive] {
        let n = async_events(&w, e.host)
            .iter()
            .filter(|x| x.1 == A::CommEst && x.2 == AsyncOn::Qp(e.qp.qp_num))
            .count();
        assert_eq!(n, 1, "host {}", e.host);
    }
    w.check()?;
    Ok(())
}

/// The first RTU is lost; the active side writes at once. The passive QP (in RTR) sees the
/// WRITE, raises COMM_EST, and its application — like nvmet-rdma — calls `rdma_notify`: the
/// passive id reads ESTABLISHED before any RTU arrives (cm-spec §4.3), once.
#[test]
fn rdma_notify_on_comm_est_establishes_the_passive_side_before_the_rtu() -> R {
    let app = HostApp {
        notify_on_comm_est: true,
        ..HostApp::default()
    };
    let cfg = WorldConfig::two_hosts(26)
        .fast()
        .with_host_app(1, app)
        .with_msg_fault(MsgFault::drop(0, RTU, Occurrence::Nth(1)));
    let mut w = World::new(cfg)?;
    w.listen(1)?;
    let active = w.connect(0, 1)?;
    let id = w.wait_event(1, None, E::ConnectRequest)?;
    let passive = w.accept(1, id)?;
    w.wait_event(0, Some(active.id), E::Established)?;
    let wr = w.post(active, Op::Write, 1);
    w.wait_event(1, Some(passive.id), E::Established)?;
    let est = w.events_of(1, passive.id);
    let at = est.iter().find(|e| e.1 == E::Established).map(|e| e.0);
    let rtu_rcvd = w.history().of_host(1).find_map(|e| match e.rec {
        Record::Wire { tx: false, msg, .. } if msg.attr == RTU => Some(e.at),
        _ => None,
    });
    assert!(
        rtu_rcvd.is_none_or(|t| Some(t) > at),
        "ESTABLISHED came before the RTU"
    );
    assert_eq!(
        errnos(&w, 1, |c| matches!(c, Call::Notify { .. })),
        [0],
        "one rdma_notify, answered 0"
    );
    w.run_for(50 * MS);
    assert_eq!(w.wc_status(wr[0]), Some(WcStatus::Success));
    let n = w
        .events_of(1, passive.id)
        .iter()
        .filter(|e| e.1 == E::Established)
        .count();
    assert_eq!(n, 1, "one ESTABLISHED, also when the RTU comes again");
    w.check()?;
    Ok(())
}
