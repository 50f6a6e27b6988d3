//! Forged CM messages (issue 12): a REP, RTU, MRA, REJ, DREQ or DREP with a connection's right
//! comm IDs from another address is dropped and counted (`rx_wrong_source`), and the connection
//! is untouched; the very same bytes from the peer's address take effect.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

mod harness;

use cm_core::api::CmEventType as E;
use cm_core::engine::IbCmState;
use cm_core::wire::{CM_DREQ_ATTR_ID as DREQ, CM_REJ_ATTR_ID as REJ, CM_REQ_ATTR_ID as REQ};
use harness::*;
use std::net::Ipv4Addr;
use verbs_core::Gid;

/// The next MAD host `h` queued whose attribute is `attr` (taken off its outbox).
fn take_sent(w: &mut World, h: usize, attr: u16) -> (Gid, Vec<u8>) {
    let dev = &mut w.hosts[h].dev;
    let at = dev
        .outbox
        .iter()
        .position(|(_, mad)| u16::from_be_bytes([mad[16], mad[17]]) == attr)
        .expect("the MAD was queued");
    dev.outbox.remove(at).expect("present")
}

fn deliver_from(w: &mut World, h: usize, src: Gid, mad: &[u8]) {
    let now = w.now;
    let x = &mut w.hosts[h];
    x.cm.handle_datagram(&mut x.dev, now, src, mad);
    w.collect();
}

const ATTACKER: Ipv4Addr = Ipv4Addr::new(10, 66, 6, 6);

#[test]
fn a_dreq_from_another_address_does_not_disconnect() {
    let (mut w, a, b) = World::established();
    let now = w.now;
    let h = &mut w.hosts[0];
    h.cm.disconnect(&mut h.dev, now, a).unwrap();
    let (_, dreq) = take_sent(&mut w, 0, DREQ);
    deliver_from(&mut w, 1, Gid::from_ipv4(ATTACKER), &dreq);
    assert_eq!(w.hosts[1].cm.engine().counters().rx_wrong_source, 1);
    assert!(!w.has(1, E::Disconnected));
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::Established));
    // No DREP went to the forger (a DREQ for a known connection is not answered from here).
    assert!(w.hosts[1].dev.outbox.is_empty());
    // The same bytes from the peer disconnect.
    deliver_from(&mut w, 1, Gid::from_ipv4(ip(0)), &dreq);
    assert!(w.has(1, E::Disconnected));
}

#[test]
fn a_rej_from_another_address_does_not_reject() {
    let mut w = World::new();
    w.listen();
    let a = w.active_id();
    w.connect(a);
    assert!(w.run_until(1, E::ConnectRequest));
    let child = w.events_of(1, E::ConnectRequest)[0].1.id;
    let now = w.now;
    let h = &mut w.hosts[1];
    h.cm.reject(&mut h.dev, now, child, b"no").unwrap();
    let (_, rej) = take_sent(&mut w, 1, REJ);
    deliver_from(&mut w, 0, Gid::from_ipv4(ATTACKER), &rej);
    assert_eq!(w.hosts[0].cm.engine().counters().rx_wrong_source, 1);
    assert!(!w.has(0, E::Rejected));
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::ReqSent));
    deliver_from(&mut w, 0, Gid::from_ipv4(ip(1)), &rej);
    assert!(w.has(0, E::Rejected));
}

/// A REQ that reuses a live connection's CA GUID and QPN means "that peer restarted": the old
/// connection is declared stale (REJ 10, DREQ). Believed only from the peer's own address.
#[test]
fn a_stale_connection_req_from_another_address_ends_nothing() {
    let mut w = World::new();
    w.listen();
    let a = w.active_id();
    w.connect(a);
    // The REQ host 0 sent, to be replayed from elsewhere with a fresh comm ID (so it is not a
    // duplicate) but the same CA GUID and QPN.
    let mut req = w.hosts[0]
        .dev
        .outbox
        .iter()
        .find(|(_, m)| u16::from_be_bytes([m[16], m[17]]) == REQ)
        .map(|(_, m)| m.clone())
        .expect("the REQ was queued");
    assert!(w.run_until(1, E::ConnectRequest));
    let b = w.accept_last();
    assert!(w.run_until(1, E::Established));
    req[24..28].copy_from_slice(&0x7777_7777u32.to_be_bytes());
    deliver_from(&mut w, 1, Gid::from_ipv4(ATTACKER), &req);
    assert_eq!(w.hosts[1].cm.engine().counters().rx_wrong_source, 1);
    assert_eq!(w.hosts[1].cm.engine().counters().rx_stale, 0);
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::Established));
    assert!(!w.has(1, E::Disconnected));
    // From the peer's own address (a real restart), the same REQ ends the old connection.
    deliver_from(&mut w, 1, Gid::from_ipv4(ip(0)), &req);
    assert_eq!(w.hosts[1].cm.engine().counters().rx_stale, 1);
    let _ = a;
}
