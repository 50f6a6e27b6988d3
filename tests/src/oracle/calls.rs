//! S7 for the API calls the applications made (module docs of `oracle.rs`): the errno each
//! call may return given the state the history shows, and what a successful call implies.

use super::{Checker, Invariant};
use crate::history::{Call, Entry, Op};
use cm_core::api::CmEventType as E;

impl Checker {
    /// Checks one call and its errno (S7), and records what it changes.
    pub(super) fn call(&mut self, e: &Entry, call: Call, errno: i32) {
        const EINVAL: i32 = 22;
        const EBUSY: i32 = 16;
        let (h, ep) = (e.host, e.epoch);
        let expect = |this: &mut Self, want: i32, what: &str| {
            if errno != want {
                this.violate(
                    Invariant::S7,
                    e,
                    format!("{what} returned errno {errno}, cm-spec says {want}"),
                );
            }
        };
        if self.removed_call(e, call, errno) {
            return;
        }
        match call {
            Call::Connect { id, qpn, .. } => {
                if errno == 0 {
                    let s = self.ids.entry((h, ep, id)).or_default();
                    s.has_cm_id = true;
                    s.qpn = qpn;
                } else if errno != EINVAL {
                    expect(self, EINVAL, "rdma_connect");
                }
            }
            Call::Accept { id, qpn } => {
                let s = self.ids.entry((h, ep, id)).or_default();
                s.qpn = qpn;
                if errno == 0 {
                    self.host(h).ready.insert(qpn);
                } else if errno != EINVAL {
                    expect(self, EINVAL, "rdma_accept");
                }
            }
            Call::Listen { id } => {
                if errno == 0 {
                    self.host(h).listener = Some(id);
                } else if errno != EINVAL {
                    expect(self, 0, "rdma_listen");
                }
            }
            Call::Reject { .. } => {
                if errno != 0 && errno != EINVAL {
                    expect(self, 0, "rdma_listen/rdma_reject");
                }
            }
            Call::Disconnect { id } => {
                let Some(s) = self.ids.get_mut(&(h, ep, id)) else {
                    return;
                };
                let want = if s.destroyed || !s.has_cm_id {
                    EINVAL
                } else {
                    0
                };
                if errno == 0 && s.qpn != 0 {
                    self.must_be_err.push_back((h, ep, s.qpn, *e));
                }
                if errno == 0 {
                    if s.established && s.disconnected == 0 {
                        s.disconnect_connected = true;
                    }
                    if !s.established && s.disconnected == 0 {
                        self.sometimes.disconnect_during_setup = true;
                    }
                    if s.disconnected > 0 {
                        s.answered = true;
                    }
                }
                expect(self, want, "rdma_disconnect");
            }
            Call::Destroy { id } => {
                let requests = self.listener_unacked.get(&(h, ep, id)).copied();
                let s = self.ids.entry((h, ep, id)).or_default();
                let want = if s.destroyed {
                    EINVAL
                } else if s.unacked > 0 || requests.unwrap_or(0) > 0 {
                    EBUSY
                } else {
                    0
                };
                if errno == 0 {
                    s.destroyed = true;
                }
                expect(self, want, "rdma_destroy_id");
            }
            Call::Ack { id, event } => {
                let n = match (event, self.host(h).listener) {
                    (E::ConnectRequest, Some(l)) => self.listener_unacked.get_mut(&(h, ep, l)),
                    _ => self.ids.get_mut(&(h, ep, id)).map(|s| &mut s.unacked),
                };
                if let Some(n) = n {
                    *n = n.saturating_sub(1);
                }
                expect(self, 0, "rdma_ack_cm_event");
            }
            Call::Post { qpn, op, .. } => {
                // An active QP reaches RTS only when its application fetches the
                // CONNECT_RESPONSE (librdmacm's work, §4.3), which the history records as
                // ESTABLISHED: a deaf host's QP stays in INIT.
                let ready = self.host(h).ready.contains(&qpn);
                let want = if op == Op::Recv || ready { 0 } else { EINVAL };
                expect(self, want, "ibv_post");
            }
            Call::QpToErr { .. } => expect(self, 0, "ibv_modify_qp(ERR)"),
            Call::Notify { id } => self.notify_call(e, id, errno),
        }
    }
}
