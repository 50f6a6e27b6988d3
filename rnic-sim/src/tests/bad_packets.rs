//! Bad packets: malformed, unexpected and misaddressed packets are counted and dropped.

use super::*;
use crate::pump::pump_pair;
use crate::roce::AethKind;

#[test]
fn bad_packets_are_counted_and_dropped() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    let t = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    let now = SimTime::ZERO;
    let mut p = t.packet.clone();
    p.reth = Some(Default::default());
    b.dev.handle_packet(now, a.dev.gid(), p);
    let mut p = t.packet.clone();
    p.bth.dest_qp = 0x77_7777;
    b.dev.handle_packet(now, a.dev.gid(), p);
    b.dev.handle_packet(now, gid(99), t.packet.clone());
    let mut p = t.packet.clone();
    p.bth.pkey = 0x1234;
    b.dev.handle_packet(now, a.dev.gid(), p);
    let c = b.dev.counters();
    assert_eq!(
        (c.malformed, c.unknown_qp, c.wrong_source, c.bad_pkey),
        (1, 1, 1, 1)
    );
    assert!(poll(&mut b.dev, b.rcq).is_empty());
    // The good one still works afterwards.
    b.dev.handle_packet(now, a.dev.gid(), t.packet);
    pump(&mut a, &mut b);
    assert_eq!(poll(&mut a.dev, a.scq).len(), 1);
}

#[test]
fn unexpected_and_duplicate_responses_are_ignored() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    let req = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), req.packet);
    let ack = b.dev.poll_transmit(SimTime::ZERO).unwrap();
    assert!(matches!(
        ack.packet.aeth.unwrap().syndrome,
        AethKind::Ack(_)
    ));
    a.dev
        .handle_packet(SimTime::ZERO, b.dev.gid(), ack.packet.clone());
    a.dev.handle_packet(SimTime::ZERO, b.dev.gid(), ack.packet);
    assert_eq!(a.dev.counters().unexpected_responses, 1);
    assert_eq!(poll(&mut a.dev, a.scq).len(), 1);
}

#[test]
fn pump_drops_packets_for_other_gids() {
    let mut a = node(1);
    let mut b = node(2);
    let mut c = node(3);
    connect_with(&mut a, &mut c, |_| {});
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    assert_eq!(pump_pair(&mut a.dev, &mut b.dev, SimTime::ZERO), 0);
}
