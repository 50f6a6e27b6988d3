//! The device's debug log (`tracing`, target `rnic_sim::log`): QP state changes (with the
//! number of work requests an entry to ERR flushes), completions in error, RC retries, NAKs
//! and retry exhaustion, asynchronous events. Every line names its QP (`qpn`), so a log read
//! with the rdma_cm's (cm-core) tells one connection's story.
//!
//! Logging never changes what the device does: nothing here is computed unless a subscriber
//! wants the event, and nothing computed has a side effect.

use tracing::debug;
use verbs_core::{AsyncEvent, QpState, WcStatus};

/// The name of a QP state: `enum ibv_qp_state` without its `IBV_QPS_` prefix (verbs.h), e.g.
/// `"RTS"`, `"ERR"`.
pub(crate) const fn qp_state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::Sqe => "SQE",
        QpState::Err => "ERR",
        QpState::Unknown => "UNKNOWN",
    }
}

/// QP `qpn` moved from `from` to `to` (not to ERR: [`entered_err`] says that).
pub(crate) fn qp_state(qpn: u32, from: QpState, to: QpState) {
    debug!(
        qpn,
        from = %qp_state_name(from),
        state = %qp_state_name(to),
        "QP state"
    );
}

/// QP `qpn` entered ERR from `from`; `send` and `recv` work requests are flushed with
/// `WR_FLUSH_ERR` (man:ibv_modify_qp.3).
pub(crate) fn entered_err(qpn: u32, from: QpState, send: usize, recv: usize) {
    debug!(
        qpn,
        from = %qp_state_name(from),
        state = %"ERR",
        flushed_send = send,
        flushed_recv = recv,
        "QP state"
    );
}

/// A work request of QP `qpn` completed with error `status` (not a flush).
pub(crate) fn completion_error(qpn: u32, wr_id: u64, status: WcStatus, queue: &'static str) {
    debug!(qpn, wr_id, status = ?status, queue = %queue, "completion in error");
}

/// An asynchronous event was raised.
pub(crate) fn async_event(e: &AsyncEvent) {
    debug!(event = ?e.event_type, element = ?e.element, "async event");
}
