//! Behaviour choices where real stacks differ (TESTING.md), and regressions.

use super::*;

// =============================================================================================
// Behaviour choices where real stacks differ (TESTING.md)
// =============================================================================================

/// **Choice: IB CM semantics, not iWARP.** A second, a late and a simultaneous
/// `rdma_disconnect` all return 0: on IB/RoCE, Linux's `rdma_disconnect` tries
/// `ib_send_cm_dreq`, then `ib_send_cm_drep`, and ignores both failures (cm-spec §4.4 [cma.c]).
/// Where stacks differ: on iWARP it returns what `iw_cm_disconnect` returns, so the same calls
/// can fail there.
#[test]
fn choice_ib_cm_second_late_or_simultaneous_disconnect_returns_0() {
    let (mut w, c) = established();
    // Simultaneous: both ends in the same virtual instant (the DREQs cross) ...
    assert_eq!(w.disconnect(c.active), Ok(()));
    assert_eq!(w.disconnect(c.passive), Ok(()));
    // ... second: the own DREQ is still outstanding.
    assert_eq!(w.disconnect(c.active), Ok(()));
    w.run_for(MS);
    // Late: after DISCONNECTED (this call answers the peer's DREQ with a DREP) ...
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::Disconnected), [0]);
        assert_eq!(w.disconnect(e), Ok(()));
    }
    // ... and after TIMEWAIT_EXIT.
    w.run_to_quiescence();
    for e in [c.active, c.passive] {
        assert_eq!(kinds(&w, e).last(), Some(&E::TimewaitExit));
        assert_eq!(w.disconnect(e), Ok(()));
    }
    w.check().unwrap();
    assert_eq!((sent(&mut w, 0, DREQ), sent(&mut w, 1, DREQ)), (1, 1));
}

/// **Choice: a received DREQ raises DISCONNECTED but does not touch the QP** (as librdmacm and
/// the kernel's cma, cm-spec §4.2): the QP stays in RTS, receives posted to it stay posted, until
/// that side calls `rdma_disconnect`, which moves it to ERR (flushing them) and answers with the
/// DREP. Where stacks differ: an application that waits for its receives to flush to learn of
/// the peer's disconnect waits forever on IB; on iWARP the connection is the QP's and the peer's
/// close moves the QP by itself.
#[test]
fn choice_dreq_raises_disconnected_qp_untouched_until_disconnect() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    assert_eq!(w.qp_state(c.passive), Some(QpState::Rts));
    let recvs = w.post_recvs(c.passive, 2);
    w.run_for(100 * MS);
    assert_eq!(w.qp_state(c.passive), Some(QpState::Rts));
    assert_eq!(
        w.wc_status(recvs[0]),
        None,
        "not flushed: the QP is untouched"
    );
    assert_eq!(sent(&mut w, 1, DREP), 0);
    w.disconnect(c.passive).unwrap();
    assert_eq!(w.qp_state(c.passive), Some(QpState::Err));
    assert_eq!(sent(&mut w, 1, DREP), 1);
    w.check().unwrap();
    for wr in recvs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

/// The same choice, the other way out: the side that got DISCONNECTED destroys its id (which
/// answers with the DREP, cm-spec §4.5, and still leaves the QP alone) and then its QP
/// (`ibv_destroy_qp`: the QP goes to ERR, what is posted is flushed).
#[test]
fn choice_dreq_raises_disconnected_qp_untouched_until_the_qp_is_destroyed() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    let recvs = w.post_recvs(c.passive, 2);
    w.destroy(c.passive).unwrap();
    assert_eq!(sent(&mut w, 1, DREP), 1);
    assert_eq!(
        w.qp_state(c.passive),
        Some(QpState::Rts),
        "destroy_id leaves the QP"
    );
    w.qp_to_err(c.passive).unwrap(); // what ibv_destroy_qp does to what is posted
    w.check().unwrap();
    assert_eq!(statuses(&w, c.active, E::Disconnected), [0]);
    for wr in recvs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

/// **Choice: posts to a QP in ERR are accepted and flushed** (as rxe; the IBTA has a QP in the
/// Error state complete new work requests with WR_FLUSH_ERR, docs/semantics-verbs.md). Every
/// operation is accepted by the post and completes with WR_FLUSH_ERR. Where stacks differ:
/// providers are not uniform here, and some fail such a post with an errno; portable code
/// handles both.
#[test]
fn choice_posts_to_a_qp_in_err_are_accepted_and_flushed() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    assert_eq!(w.qp_state(c.active), Some(QpState::Err));
    let mut wrs = Vec::new();
    for op in [Op::Send, Op::Write, Op::Read, Op::Recv] {
        let posted = w.post(c.active, op, 2);
        assert_eq!(posted.len(), 2, "{op:?} accepted in ERR");
        wrs.extend(posted);
    }
    w.run_for(MS);
    for &wr in &wrs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr), "WR {wr}");
    }
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
}

/// **Choice: a CQ overrun raises CQ_ERR and moves the overflowing QP to ERR** (as rdmavt;
/// docs/semantics-verbs.md "CQ overrun"). Host 1's receive CQ holds 4 completions; 8 SENDs
/// arrive in one instant: 4 receives complete, the 5th completion does not fit, the async event
/// CQ_ERR is raised and host 1's QP enters ERR. The message whose completion was lost is not
/// acknowledged, so the sender's 5th SEND ends in RETRY_EXC_ERR and the rest are flushed. Where
/// stacks differ: rxe only fails the completion and leaves the QP alone; the IBTA leaves the QP
/// state unspecified.
#[test]
fn choice_cq_overrun_raises_cq_err_and_moves_the_overflowing_qp_to_err() {
    let mut w = World::new(WorldConfig {
        cq_entries: 4,
        ..WorldConfig::two_hosts(1)
    })
    .unwrap();
    let c = w.establish(0, 1).unwrap();
    let recvs = w.post_recvs(c.passive, 8);
    let sends = w.post(c.active, Op::Send, 8);
    w.run_for(MS);
    let cq_errs: Vec<_> = w
        .history()
        .of_host(1)
        .filter(|e| matches!(e.rec, Record::CqErr { .. }))
        .map(|e| e.rec)
        .collect();
    assert_eq!(cq_errs, [Record::CqErr { queue: Queue::Recv }]);
    assert_eq!(w.qp_state(c.passive), Some(QpState::Err));
    for &wr in &recvs[..4] {
        assert_eq!(w.wc_status(wr), Some(WcStatus::Success));
    }
    w.check().unwrap(); // the completions lost to the overrun are exempt from S2
    for &wr in &recvs[4..] {
        assert_eq!(w.wc_status(wr), None, "lost with the overrun CQ");
    }
    let status: Vec<_> = sends.iter().map(|&wr| w.wc_status(wr).unwrap()).collect();
    assert_eq!(status[..4], [WcStatus::Success; 4]);
    assert_eq!(status[4], WcStatus::RetryExcErr);
    assert_eq!(status[5..], [WcStatus::WrFlushErr; 3]);
}

/// **Choice: destroying a CM id with un-acked events returns EBUSY and logs a warning naming
/// the event.** Real librdmacm's `rdma_destroy_id` blocks until every event it handed out for
/// the id is acked, and deadlocks when the same thread holds the event (cm-spec §4.6); the
/// testbed returns EBUSY and warns through `tracing`, so the bug is found in a test. Once the
/// event is acked, the same call succeeds.
#[test]
fn choice_destroy_with_an_unacked_event_returns_ebusy_and_warns_naming_the_event() {
    let (mut w, c) = established();
    w.set_event_mode(1, EventMode::AckAfter(MS)); // host 1 acks each event 1 ms after reading it
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    let (r, warnings) = with_warnings(|| w.destroy(c.passive));
    let err = r.unwrap_err();
    assert_eq!(err.errno, Errno::EBUSY);
    assert!(err.to_string().contains("Disconnected"), "{err}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("rdma_destroy_id"), "{warnings:?}");
    assert!(warnings[0].contains("Disconnected"), "{warnings:?}");
    w.run_for(MS); // the ack
    assert_eq!(w.destroy(c.passive), Ok(()));
    w.qp_to_err(c.passive).unwrap();
    w.check().unwrap();
    assert_eq!(sent(&mut w, 1, DREP), 1, "the destroy answered the DREQ");
    assert_eq!(statuses(&w, c.active, E::Disconnected), [0]);
}

/// Runs `f` with a `tracing` subscriber on this thread that keeps the WARN and ERROR events;
/// returns `f`'s result and those events' fields, one string each.
fn with_warnings<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record as SpanRecord};
    use tracing::{Event, Level, Metadata};

    struct Warnings(Arc<Mutex<Vec<String>>>);
    struct Fields(String);
    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0 += &format!("{}={value:?} ", field.name());
        }
    }
    impl tracing::Subscriber for Warnings {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            *m.level() <= Level::WARN
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &SpanRecord<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            let mut fields = Fields(String::new());
            e.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    let seen = Arc::new(Mutex::new(Vec::new()));
    let r = tracing::subscriber::with_default(Warnings(seen.clone()), f);
    let seen = seen.lock().unwrap().clone();
    (r, seen)
}

/// The TimeWait the World recorded with `e`'s DISCONNECTED (`ms(av.timeout)`, cm-spec §3.2).
fn timewait_ns(w: &World, e: End) -> u64 {
    w.history()
        .of_host(e.host)
        .find_map(|x| match x.rec {
            Record::Event {
                id,
                event: E::Disconnected,
                timewait_ns,
                ..
            } if id == e.id.0 => Some(timewait_ns),
            _ => None,
        })
        .unwrap()
}

/// An initiator whose peer never answers (the peer's application reads DISCONNECTED and does
/// nothing): the DREQ schedule of [`assert_dreq_timeout`] with `timeout_ns`, then TimeWait of
/// `timewait_ns`, then TIMEWAIT_EXIT.
fn assert_unanswered_dreq_schedule(mut w: World, timeout_ns: u64, timewait: u64) {
    let c = w.establish(0, 1).unwrap();
    let t0 = w.now();
    w.disconnect(c.active).unwrap();
    assert_dreq_timeout(&mut w, c.active, t0, timeout_ns);
    w.run_to_quiescence();
    assert_eq!(timewait_ns(&w, c.active), timewait);
    let exit = time_of(&w, c.active, E::TimewaitExit);
    assert!(exit >= time_of(&w, c.active, E::Disconnected).plus_nanos(timewait));
    w.qp_to_err(c.passive).unwrap(); // the lazy peer's application exits
    w.check().unwrap();
}

/// **Choice: the default timers are Linux's** (cm-spec §3.2, docs/cm-semantics.md "Timers"):
/// with the default configuration an unanswered DREQ is sent 16 times (1 + 15 retries),
/// 4608 ms apart (2·ms(PLT 16) + ms(20)), and the initiator reads DISCONNECTED(-110) exactly
/// 16 × 4608 ms = 73.728 s after its `rdma_disconnect`; TimeWait is ms(17) = 512 ms. Virtual
/// time makes the 74 s cost a few events. Where stacks differ: the constants change between
/// kernels (PLT 18 in older ones; response timeout 18 and exponential backoff in newer series).
#[test]
fn choice_default_timers_are_linux_unanswered_dreq_gives_minus_110_after_16_dreqs_4608_ms_apart() {
    let w = World::new(WorldConfig::two_hosts(1)).unwrap();
    assert_unanswered_dreq_schedule(w, DREQ_TIMEOUT_NS, 512 * MS);
}

/// **Choice: every timer is configurable** (`cm_core::engine::CmConfig`: packet lifetime,
/// response timeout, retries, backoff). [`WorldConfig::fast`] sets PLT 10 and response timeout
/// 10: the same unanswered DREQ now gives up after 16 × 12 ms and TimeWait is ms(15) = 128 ms.
#[test]
fn choice_every_timer_is_configurable_short_timers_give_the_same_schedule_in_12_ms_steps() {
    let w = World::new(WorldConfig::two_hosts(1).fast()).unwrap();
    assert_unanswered_dreq_schedule(w, FAST_DREQ_TIMEOUT_NS, 128 * MS);
}

// =============================================================================================
// Regressions found while writing these tests
// =============================================================================================

/// Regression: the fabric trace's payload digest used to be a CRC-32 of the RoCEv2 UDP payload,
/// which ends with its own ICRC; CRC-32 being affine, that digest depended only on the flow, the
/// length and the masked fields, so the REQ and the RTU (both 280 bytes, 10.0.0.1 → 10.0.0.2)
/// got the same digest and trace hashes could not see payload divergence.
#[test]
fn fabric_trace_digest_tells_different_payloads_apart() {
    let (mut w, _) = established();
    let mads: Vec<u64> = w
        .sim()
        .fabric
        .trace()
        .iter()
        .filter(|ev| ev.src.ip() == host_ip(0))
        .filter_map(|ev| match ev.kind {
            FabricEventKind::Sent { len: 280, digest } => Some(digest),
            _ => None,
        })
        .collect();
    assert_eq!(sent_attrs(&mut w, 0), [REQ, RTU]);
    assert_eq!(mads.len(), 2);
    assert_ne!(mads[0], mads[1], "REQ and RTU have the same digest");
    w.check().unwrap();
}
