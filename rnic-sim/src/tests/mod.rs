//! Unit tests of the verbs and RC rules, one test per rule, named after it.

mod async_events;
mod bad_packets;
mod cq_events;
mod err_flush;
mod memory;
mod memory_gone;
mod modify_qp;
mod objects;
mod payload_read;
mod peer_budget;
mod posting;
mod rc_acks_timers;
mod rc_data;
mod rc_remote_errors;
mod srq;
mod ud_gsi;

use crate::testutil::*;
use verbs_core::*;

fn send(n: &Node, id: u64, off: u64, len: u32) -> SendWr {
    SendWr::send(id, vec![n.mr.sge(off, len)])
}

fn recv(n: &Node, id: u64, off: u64, len: u32) -> RecvWr {
    RecvWr::new(id, vec![n.mr.sge(off, len)])
}

fn err_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    }
}

fn state(n: &Node) -> QpState {
    n.dev.query_qp(n.qp.handle).unwrap().0.qp_state
}
