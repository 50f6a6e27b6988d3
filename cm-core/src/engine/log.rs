//! The [`CmEngine`]'s debug log (`tracing`, level DEBUG, target `cm_core::engine::log`): every
//! state change of an id, every MAD sent (first send or retransmission) and received, send
//! timeouts, and every received MAD dropped, with the reason. The names are those of the Linux
//! kernel's `ib_cma` tracepoints (`drivers/infiniband/core/cm_trace.h`: `show_ib_cm_state`,
//! `local_id`/`remote_id`) and of IBTA (attribute names, cm-spec §2.1).
//!
//! Logging never changes what the engine does: every field is read, never computed with a side
//! effect, and nothing is evaluated unless a subscriber wants the event.

use super::*;
use tracing::{debug, trace};

impl IbCmState {
    /// The state's name as the kernel's CM tracepoints print it (`show_ib_cm_state`,
    /// `drivers/infiniband/core/cm_trace.h`): the `enum ib_cm_state` name without its `IB_CM_`
    /// prefix, e.g. `"REQ_SENT"`, `"TIMEWAIT"`.
    pub const fn name(self) -> &'static str {
        use IbCmState as S;
        match self {
            S::Idle => "IDLE",
            S::Listen => "LISTEN",
            S::ReqSent => "REQ_SENT",
            S::ReqRcvd => "REQ_RCVD",
            S::MraReqSent => "MRA_REQ_SENT",
            S::MraReqRcvd => "MRA_REQ_RCVD",
            S::RepSent => "REP_SENT",
            S::RepRcvd => "REP_RCVD",
            S::MraRepSent => "MRA_REP_SENT",
            S::MraRepRcvd => "MRA_REP_RCVD",
            S::Established => "ESTABLISHED",
            S::DreqSent => "DREQ_SENT",
            S::DreqRcvd => "DREQ_RCVD",
            S::Timewait => "TIMEWAIT",
            S::SidrReqSent => "SIDR_REQ_SENT",
            S::SidrReqRcvd => "SIDR_REQ_RCVD",
        }
    }
}

impl IbCmEventType {
    /// The event's name as the kernel's tracepoints print it (`rdma_show_ib_cm_event`,
    /// `include/trace/misc/rdma.h`): the `enum ib_cm_event_type` name without its
    /// `IB_CM_` prefix, e.g. `"REP_RECEIVED"`, `"TIMEWAIT_EXIT"`.
    pub const fn name(self) -> &'static str {
        use IbCmEventType as E;
        match self {
            E::ReqError => "REQ_ERROR",
            E::ReqReceived => "REQ_RECEIVED",
            E::RepError => "REP_ERROR",
            E::RepReceived => "REP_RECEIVED",
            E::RtuReceived => "RTU_RECEIVED",
            E::UserEstablished => "USER_ESTABLISHED",
            E::DreqError => "DREQ_ERROR",
            E::DreqReceived => "DREQ_RECEIVED",
            E::DrepReceived => "DREP_RECEIVED",
            E::TimewaitExit => "TIMEWAIT_EXIT",
            E::MraReceived => "MRA_RECEIVED",
            E::RejReceived => "REJ_RECEIVED",
            E::LapError => "LAP_ERROR",
            E::LapReceived => "LAP_RECEIVED",
            E::AprReceived => "APR_RECEIVED",
            E::SidrReqError => "SIDR_REQ_ERROR",
            E::SidrReqReceived => "SIDR_REQ_RECEIVED",
            E::SidrRepReceived => "SIDR_REP_RECEIVED",
        }
    }
}

/// The big-endian `N`-byte field at `at` of `mad`, as a `u64`; 0 past the end.
fn be(mad: &[u8], at: usize, n: usize) -> u64 {
    mad.get(at..at + n)
        .map_or(0, |b| b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
}

/// What a log line shows of a CM MAD, read from its bytes: the attribute, the two comm IDs
/// (message offsets 0 and 4: every CM message but SIDR starts with Local then Remote Comm ID;
/// the REQ's second word is reserved, 0) and, for a REJ, the reason (message offset 10).
struct MadView {
    attr: u16,
    local_comm_id: u32,
    remote_comm_id: u32,
}

impl MadView {
    fn of(mad: &[u8]) -> MadView {
        let data = wire::MAD_HEADER_SIZE;
        MadView {
            attr: be(mad, 16, 2) as u16,
            local_comm_id: be(mad, data, 4) as u32,
            remote_comm_id: be(mad, data + 4, 4) as u32,
        }
    }

    fn name(&self) -> &'static str {
        wire::attribute_name(self.attr)
    }

    /// The REJ reason, for a REJ.
    fn rej_reason(&self, mad: &[u8]) -> Option<u16> {
        (self.attr == wire::CM_REJ_ATTR_ID).then(|| be(mad, wire::MAD_HEADER_SIZE + 10, 2) as u16)
    }
}

/// Logs one MAD leaving for `peer`: its first transmission (`send` 1) or a retransmission.
pub(super) fn mad_sent(peer: Gid, mad: &[u8], send: u32) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let m = MadView::of(mad);
    let peer = peer.to_ip();
    match (m.rej_reason(mad), send) {
        (Some(r), _) => debug!(
            attr = %m.name(),
            local_comm_id = m.local_comm_id,
            remote_comm_id = m.remote_comm_id,
            %peer,
            reason = r,
            why = %wire::ibcm_reject_msg(r),
            "MAD sent"
        ),
        (None, 1) => debug!(
            attr = %m.name(),
            local_comm_id = m.local_comm_id,
            remote_comm_id = m.remote_comm_id,
            %peer,
            "MAD sent"
        ),
        (None, _) => debug!(
            attr = %m.name(),
            local_comm_id = m.local_comm_id,
            remote_comm_id = m.remote_comm_id,
            %peer,
            send,
            "MAD retransmitted"
        ),
    }
}

/// Logs one MAD received from `peer` that decoded.
pub(super) fn mad_received(peer: Gid, mad: &[u8]) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let m = MadView::of(mad);
    let peer = peer.to_ip();
    match m.rej_reason(mad) {
        Some(r) => debug!(
            attr = %m.name(),
            local_comm_id = m.local_comm_id,
            remote_comm_id = m.remote_comm_id,
            %peer,
            reason = r,
            why = %wire::ibcm_reject_msg(r),
            "MAD received"
        ),
        None => debug!(
            attr = %m.name(),
            local_comm_id = m.local_comm_id,
            remote_comm_id = m.remote_comm_id,
            %peer,
            "MAD received"
        ),
    }
}

/// Logs a received MAD (`attr`, already logged as received) dropped, or only answered, without
/// touching a connection; `why` names the [`CmCounters`] field it was counted in and the reason.
pub(super) fn mad_dropped(attr: &'static str, why: &'static str) {
    debug!(attr = %attr, why = %why, "MAD dropped");
}

/// Logs an IB CM event (`trace`: the state change before it says as much).
pub(super) fn event(id: IbCmId, kind: &IbCmEventKind) {
    trace!(id = id.0, event = %kind.event_type().name(), "IB CM event");
}

impl Conn {
    /// Moves the id to `to`, logging the change (with the comm IDs, as the kernel's CM
    /// tracepoints show an id).
    pub(super) fn set_state(&mut self, id: IbCmId, to: IbCmState) {
        if self.state != to {
            debug!(
                id = id.0,
                local_comm_id = self.local_comm_id,
                remote_comm_id = self.remote_comm_id,
                from = %self.state.name(),
                state = %to.name(),
                "IB CM state"
            );
        }
        self.state = to;
    }
}

/// Logs the end of a MAD's retries: `sends` transmissions and no answer (Linux: the MAD
/// layer's send completes with `IB_WC_RESP_TIMEOUT_ERR`; rdma_cm reports −ETIMEDOUT, −110).
pub(super) fn gave_up(id: IbCmId, mad: &[u8], sends: u32) {
    debug!(
        id = id.0,
        attr = %MadView::of(mad).name(),
        sends,
        "MAD timed out: no answer, retries exhausted"
    );
}

#[cfg(test)]
mod tests;
