//! The librdmacm layer's work at `rdma_get_cm_event` time and its QP transitions (cm-spec §4.3,
//! §4.5; rdma-core `librdmacm/cma.c`: `rdma_get_cm_event`, `ucma_process_conn_resp`,
//! `rdma_accept`, `rdma_establish`), over the harness's two `RdmaCm`s. The active host's
//! events are held in its channel (`read_events = false`) so each test fetches them itself.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod harness;

use cm_core::api::{CmEvent, CmEventType as E, CmIdHandle, ConnParam};
use cm_core::engine::IbCmState;
use cm_core::wire::{RdmaPortSpace, CM_REJ_ATTR_ID as REJ, CM_REP_ATTR_ID as REP};
use cm_core::wire::{CM_DREQ_ATTR_ID as DREQ, CM_RTU_ATTR_ID as RTU};
use harness::*;
use std::net::{IpAddr, SocketAddr};
use verbs_core::{Device, Errno, Error, PdHandle, QpAttr, QpAttrMask, QpState};

/// `rdma_get_cm_event` on host `h`'s channel at the harness's time.
fn fetch(w: &mut World, h: usize) -> Result<CmEvent, Error> {
    let now = w.now;
    let x = &mut w.hosts[h];
    x.cm.get_cm_event(&mut x.dev, now, x.ch)
}

/// The CM attribute IDs waiting in host `h`'s GSI outbox (sent, not yet on the wire).
fn outbox_attrs(w: &World, h: usize) -> Vec<u16> {
    w.hosts[h]
        .dev
        .outbox
        .iter()
        .map(|(_, mad)| u16::from_be_bytes([mad[16], mad[17]]))
        .collect()
}

fn pending(w: &World, h: usize) -> usize {
    w.hosts[h].cm.pending_events(w.hosts[h].ch)
}

/// Host 1 listens; host 0 connects with a QP in INIT and holds its events from then on.
/// Returns (active id, passive id) once host 1 has read the CONNECT_REQUEST.
fn requested() -> (World, CmIdHandle, CmIdHandle) {
    let mut w = World::new();
    w.listen();
    let a = w.active_id();
    w.hosts[0].read_events = false;
    w.connect(a);
    assert!(w.run_until(1, E::ConnectRequest));
    let b = w.events_of(1, E::ConnectRequest)[0].1.id;
    (w, a, b)
}

/// [`requested`], then host 1 accepts. Returns (active id, passive id) once the REP has
/// reached host 0.
fn rep_arrived() -> (World, CmIdHandle, CmIdHandle) {
    let (mut w, a, _) = requested();
    let b = w.accept_last();
    w.run_for_ms(1);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::RepRcvd));
    (w, a, b)
}

/// ibv_modify_qp(ERR) by the application, behind librdmacm's back.
fn qp_to_err(w: &mut World, h: usize, id: CmIdHandle) {
    let qp = w.hosts[h].cm.qp(id).unwrap();
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    w.hosts[h]
        .dev
        .modify_qp(qp.handle, &err, QpAttrMask::STATE)
        .unwrap();
}

#[test]
fn rtu_leaves_only_when_the_active_application_fetches_the_connect_response() {
    let (mut w, a, b) = rep_arrived();
    // The REP arrived: nothing moved yet. The QP waits in INIT, no RTU left, the passive side
    // waits in REP_SENT.
    assert_eq!(w.qp_state(0, a), QpState::Init);
    assert_eq!(w.sent(0, RTU), 0);
    assert!(outbox_attrs(&w, 0).is_empty());
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::RepSent));
    assert!(!w.has(1, E::Established));
    assert_eq!(pending(&w, 0), 1);
    w.run_for_ms(100);
    assert_eq!(w.sent(0, RTU), 0, "still nothing while the event is unread");

    // The fetch: QP RTR → RTS, RTU handed to the GSI endpoint before get_cm_event returns,
    // event reported as ESTABLISHED with the REP's parameters.
    let ev = fetch(&mut w, 0).unwrap();
    assert_eq!((ev.event, ev.status, ev.id), (E::Established, 0, a));
    assert_eq!(ev.param.qp_num, w.hosts[1].cm.qp(b).unwrap().qp_num);
    assert_eq!(w.qp_state(0, a), QpState::Rts);
    assert_eq!(outbox_attrs(&w, 0), [RTU]);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::Established));
    w.hosts[0].cm.ack_cm_event(ev).unwrap();

    w.run_for_ms(1);
    assert_eq!(w.sent(0, RTU), 1);
    assert_eq!(w.types(1), [E::ConnectRequest, E::Established]);
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::Established));
}

#[test]
fn without_a_qp_the_event_is_connect_response_and_accept_sends_the_rtu() {
    let mut w = World::new();
    w.listen();
    let h = &mut w.hosts[0];
    let a = h.cm.create_id(h.ch, RdmaPortSpace::Tcp).unwrap();
    let dst = SocketAddr::new(IpAddr::V4(ip(1)), PORT);
    h.cm.resolve_addr(a, None, dst).unwrap();
    h.cm.resolve_route(a).unwrap();
    let param = ConnParam {
        qp_num: 0x777,
        ..conn_param()
    };
    let now = w.now;
    let h = &mut w.hosts[0];
    h.cm.connect(&mut h.dev, now, a, &param).unwrap();
    assert!(w.run_until(1, E::ConnectRequest));
    assert_eq!(w.events_of(1, E::ConnectRequest)[0].1.param.qp_num, 0x777);
    let b = w.accept_last();
    assert!(w.run_until(0, E::ConnectResponse));

    // No QP: librdmacm reports the REP as it is and sends nothing.
    let resp = &w.events_of(0, E::ConnectResponse)[0].1;
    assert_eq!((resp.id, resp.status), (a, 0));
    assert_eq!(resp.param.qp_num, w.hosts[1].cm.qp(b).unwrap().qp_num);
    w.run_for_ms(1);
    assert_eq!(w.sent(0, RTU), 0);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::RepRcvd));
    assert!(!w.has(1, E::Established));

    // rdma_accept on the active id: the kernel sends the RTU. No event on this side (the
    // kernel reports none for it); the passive side gets ESTABLISHED.
    let now = w.now;
    let h = &mut w.hosts[0];
    h.cm.accept(&mut h.dev, now, a, &conn_param()).unwrap();
    assert!(w.run_until(1, E::Established));
    assert_eq!(w.sent(0, RTU), 1);
    assert_eq!(
        w.types(0),
        [E::AddrResolved, E::RouteResolved, E::ConnectResponse]
    );
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::Established));
}

#[test]
fn rdma_establish_completes_an_active_id_without_a_qp_and_refuses_one_with_a_qp() {
    // With a QP: rdma_establish is EINVAL (the fetch does that work).
    let (mut w, a, _) = rep_arrived();
    let now = w.now;
    let h = &mut w.hosts[0];
    let e = h.cm.establish(&mut h.dev, now, a).unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
    assert!(outbox_attrs(&w, 0).is_empty());

    // The same connection once the application dropped its QP from the id: the fetch
    // reports CONNECT_RESPONSE, rdma_establish sends the RTU.
    w.hosts[0].cm.detach_qp(a).unwrap();
    let ev = fetch(&mut w, 0).unwrap();
    assert_eq!(ev.event, E::ConnectResponse);
    w.hosts[0].cm.ack_cm_event(ev).unwrap();
    let h = &mut w.hosts[0];
    h.cm.establish(&mut h.dev, now, a).unwrap();
    assert_eq!(outbox_attrs(&w, 0), [RTU]);
    assert!(w.run_until(1, E::Established));
    assert_eq!(pending(&w, 0), 0, "no event on the active side");
}

#[test]
fn rejected_moves_the_qp_to_err_when_fetched_not_when_the_rej_arrives() {
    let (mut w, a, b) = requested();
    let now = w.now;
    let h = &mut w.hosts[1];
    h.cm.reject(&mut h.dev, now, b, b"no").unwrap();
    w.run_for_ms(1);
    assert_eq!(w.sent(1, REJ), 1);
    // The REJ arrived: the kernel queued REJECTED and left the QP alone.
    assert_eq!(pending(&w, 0), 1);
    assert_eq!(w.qp_state(0, a), QpState::Init);

    let ev = fetch(&mut w, 0).unwrap();
    assert_eq!((ev.event, ev.status), (E::Rejected, 28));
    assert_eq!(&ev.param.private_data[..2], b"no");
    assert_eq!(w.qp_state(0, a), QpState::Err);
}

#[test]
fn qp_failure_at_fetch_gives_connect_error_and_the_rejected_behind_it_is_swallowed() {
    let (mut w, a, b) = rep_arrived();
    // The application moved its QP to ERR before reading the CONNECT_RESPONSE; then the
    // passive side gives up (REJ 28 from REP_SENT) and a REJECTED queues behind it.
    qp_to_err(&mut w, 0, a);
    w.destroy(1, b).unwrap();
    w.run_for_ms(1);
    assert_eq!(w.sent(1, REJ), 1);
    assert_eq!(
        pending(&w, 0),
        2,
        "CONNECT_RESPONSE and REJECTED, as far as is known"
    );

    // ucma_process_conn_resp fails at ERR → INIT: CONNECT_ERROR with the errno, QP in ERR,
    // nothing sent (the kernel's accept is never reached).
    let ev = fetch(&mut w, 0).unwrap();
    assert_eq!(
        (ev.event, ev.status),
        (E::ConnectError, -(Errno::EINVAL as i32))
    );
    assert_eq!(w.qp_state(0, a), QpState::Err);
    assert!(outbox_attrs(&w, 0).is_empty());
    // connect_error: the REJECTED no longer counts and is never returned.
    assert_eq!(pending(&w, 0), 0);
    assert_eq!(fetch(&mut w, 0).unwrap_err().errno, Errno::EAGAIN);
    // Only the CONNECT_ERROR needs an ack before rdma_destroy_id.
    assert_eq!(w.destroy(0, a).unwrap_err().errno, Errno::EBUSY);
    w.hosts[0].cm.ack_cm_event(ev).unwrap();
    w.destroy(0, a).unwrap();
}

#[test]
fn a_disconnected_after_connect_error_is_swallowed() {
    let (mut w, a, b) = rep_arrived();
    qp_to_err(&mut w, 0, a);
    let ev = fetch(&mut w, 0).unwrap();
    assert_eq!(ev.event, E::ConnectError);
    w.hosts[0].cm.ack_cm_event(ev).unwrap();
    assert_eq!(w.sent(0, RTU), 0);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::RepRcvd));
    // The application completes the connection without its QP (rdma_establish sends the RTU);
    // then the passive side disconnects. The kernel reports DISCONNECTED; librdmacm swallows it.
    w.hosts[0].cm.detach_qp(a).unwrap();
    let now = w.now;
    let h = &mut w.hosts[0];
    h.cm.establish(&mut h.dev, now, a).unwrap();
    assert!(w.run_until(1, E::Established));
    w.disconnect(1, b).unwrap();
    w.run_for_ms(1);
    assert_eq!(w.sent(1, DREQ), 1);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::DreqRcvd));
    assert_eq!(w.hosts[0].cm.cma().queued(w.hosts[0].ch).count(), 1);
    assert_eq!(pending(&w, 0), 0);
    assert_eq!(fetch(&mut w, 0).unwrap_err().errno, Errno::EAGAIN);
}

#[test]
fn accept_with_a_qp_that_cannot_reach_rtr_returns_the_error_and_sends_nothing() {
    let (mut w, _, b) = requested();
    w.hosts[0].read_events = true;
    let now = w.now;
    let h = &mut w.hosts[1];
    h.cm.create_qp(&mut h.dev, b, PdHandle(1), &qp_init())
        .unwrap();
    qp_to_err(&mut w, 1, b);
    // librdmacm's rdma_accept: ucma_modify_qp_rtr fails (ERR → INIT) and returns; the REP is
    // never asked for and the QP is left as it was.
    let h = &mut w.hosts[1];
    let e = h.cm.accept(&mut h.dev, now, b, &conn_param()).unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
    w.run_for_ms(1);
    assert_eq!(w.sent(1, REP), 0);
    assert_eq!(w.qp_state(1, b), QpState::Err);
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::MraReqSent));
    // The request is still there to answer: rdma_reject.
    let h = &mut w.hosts[1];
    h.cm.reject(&mut h.dev, now, b, &[]).unwrap();
    assert!(w.run_until(0, E::Rejected));
    assert_eq!(w.events_of(0, E::Rejected)[0].1.status, 28);
}
