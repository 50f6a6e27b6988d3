//! Why a client got no connection, in words that name the cause and the address: no answer
//! (how many REQs went out), rejected (the REJ's reason, and the server's own words), or a
//! busy server (it acknowledged the REQ with an MRA but has not accepted it yet).

use super::*;
use cm_core::wire::RejectReason;

impl<N: PingNic> Session<'_, N> {
    /// `stop` (why the wait for ESTABLISHED ended, with the event that ended it if one did)
    /// restated with its cause, from the CM's counters and the id's IB CM state.
    pub(super) fn no_connection(&self, stop: Stop, ev: Option<&CmEvent>) -> Stop {
        let (peer, id) = (self.peer, self.id);
        let (sent, retries, received, state) = self.h().with_quiet(|ep, _| {
            let cm = ep.inner().host().cm();
            let c = cm.counters();
            (c.tx_mads, c.tx_retransmits, c.rx_mads, cm.ib_cm_state(id))
        });
        let reqs = format!(
            "{sent} REQ{} sent ({retries} retransmission{})",
            plural(sent),
            plural(retries)
        );
        match (ev.map(|e| e.event), stop) {
            (Some(CmEventType::Rejected), _) => {
                let Some(e) = ev else {
                    return Stop::Failed("no event".into());
                };
                Stop::Failed(format!(
                    "rejected by {peer}: REJ reason {} ({}){}",
                    e.status,
                    reject_reason_name(e.status),
                    peer_says(e)
                ))
            }
            (Some(CmEventType::Unreachable), _) if received > 0 => Stop::Failed(format!(
                "server busy: {peer} acknowledged our request (MRA) but did not accept it \
                 before our REQ's retries ran out ({reqs})"
            )),
            (Some(CmEventType::Unreachable), _) => Stop::Failed(format!(
                "no answer from {peer}: {reqs}, none answered (UNREACHABLE, status {}); is \
                 `rnic ping --listen {peer}` running?",
                ev.map_or(0, |e| e.status)
            )),
            (None, Stop::Timeout(_)) if state == Some(IbCmState::MraReqRcvd) => {
                Stop::Failed(format!(
                    "server busy: {peer} acknowledged our request (MRA) but has not accepted it \
                     within --timeout {:.1} s (it serves one client per IP address at a time)",
                    self.timeout.as_secs_f64()
                ))
            }
            (None, Stop::Timeout(_)) if received == 0 => Stop::Failed(format!(
                "no answer from {peer}: {reqs} in --timeout {:.1} s, nothing came back; is \
                 `rnic ping --listen {peer}` running?",
                self.timeout.as_secs_f64()
            )),
            (_, stop) => stop,
        }
    }
}

/// The IBTA name of a REJ reason (table 112), as Linux's `ib_cm_rej_reason` spells it
/// without the `IB_CM_REJ_` prefix; `UNKNOWN` for a code it does not define.
pub(super) fn reject_reason_name(status: i32) -> String {
    RejectReason::ALL
        .iter()
        .find(|r| **r as i32 == status)
        .map_or_else(|| "UNKNOWN".into(), |r| upper_snake(&format!("{r:?}")))
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
