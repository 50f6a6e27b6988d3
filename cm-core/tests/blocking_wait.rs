//! The blocking and async waits return events the sans-IO core queued (no timing involved).

mod harness;

use cm_core::api::CmEventType;
use cm_core::blocking::SharedCm;
use cm_core::wire::RdmaPortSpace;
use harness::World;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use verbs_core::SimTime;

#[test]
fn wait_event_returns_an_already_queued_event() {
    let h = World::host(0, harness::cfg(0, 1));
    let ch = h.ch;
    let shared = SharedCm::new(h.cm, h.dev, || SimTime::ZERO);
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
    let shared = SharedCm::new(h.cm, h.dev, || SimTime::ZERO);
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

#[test]
fn wait_event_wakes_when_another_thread_queues_an_event() {
    let h = World::host(0, harness::cfg(0, 1));
    let ch = h.ch;
    let shared = SharedCm::new(h.cm, h.dev, || SimTime::ZERO);
    let id = shared
        .with(|cm, _| cm.create_id(ch, RdmaPortSpace::Tcp))
        .unwrap();
    let other = shared.clone();
    // The waiter starts with nothing queued; the event is made by a call on another thread
    // (a real-time test of the blocking wrapper, outside the simulated path).
    #[allow(clippy::disallowed_methods)]
    let caller = std::thread::spawn(move || {
        let dst = SocketAddr::new(IpAddr::V4(harness::ip(1)), harness::PORT);
        other.with(|cm, _| cm.resolve_addr(id, None, dst)).unwrap();
    });
    let ev = shared.wait_event(ch, Duration::from_secs(60)).unwrap();
    caller.join().unwrap();
    assert_eq!(ev.event, CmEventType::AddrResolved);
    assert_eq!(ev.id, id);
}

#[test]
fn wait_event_times_out_with_eagain_and_rejects_an_unknown_channel() {
    let h = World::host(0, harness::cfg(0, 1));
    let ch = h.ch;
    let shared = SharedCm::new(h.cm, h.dev, || SimTime::ZERO);
    let e = shared.wait_event(ch, Duration::from_millis(1)).unwrap_err();
    assert_eq!(e.errno, verbs_core::Errno::EAGAIN);
    let gone = shared.with(|cm, _| {
        let c = cm.create_event_channel();
        cm.destroy_event_channel(c).map(|()| c)
    });
    let e = shared
        .wait_event(gone.unwrap(), Duration::from_secs(60))
        .unwrap_err();
    // Destroyed: its descriptor is closed, librdmacm's `write` fails with EBADF at once.
    assert_eq!(e.errno, verbs_core::Errno::EBADF);
    let never = verbs_core::Errno::EINVAL;
    let e = shared
        .wait_event(cm_core::api::EventChannel(999), Duration::ZERO)
        .unwrap_err();
    assert_eq!(e.errno, never);
}
