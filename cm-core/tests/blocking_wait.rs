//! The blocking and async waits return events the sans-IO core queued (no timing involved).

mod harness;

use cm_core::api::CmEventType;
use cm_core::blocking::SharedCm;
use cm_core::wire::RdmaPortSpace;
use harness::World;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[test]
fn wait_event_returns_an_already_queued_event() {
    let h = World::host(0, harness::cfg(0, 1));
    let ch = h.ch;
    let shared = SharedCm::new(h.cm, h.dev);
    shared.with(|cm, _| {
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        let dst = SocketAddr::new(IpAddr::V4(harness::ip(1)), harness::PORT);
        cm.resolve_addr(id, None, dst).unwrap();
    });
    let ev = shared.wait_event(ch, Duration::from_secs(60)).unwrap();
    assert_eq!(ev.event, CmEventType::AddrResolved);
    shared.with(|cm, _| cm.ack_cm_event(ev)).unwrap();
}

#[test]
fn next_event_async_returns_an_already_queued_event() {
    let h = World::host(0, harness::cfg(0, 1));
    let ch = h.ch;
    let shared = SharedCm::new(h.cm, h.dev);
    shared.with(|cm, _| {
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        let dst = SocketAddr::new(IpAddr::V4(harness::ip(1)), harness::PORT);
        cm.resolve_addr(id, None, dst).unwrap();
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ev = rt.block_on(shared.next_event(ch)).unwrap();
    assert_eq!(ev.event, CmEventType::AddrResolved);
}
