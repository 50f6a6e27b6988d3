//! The oracle's rules for the device's async events, device removal and address change
//! (docs/semantics-verbs.md "Async events", "Shared receive queues"; docs/cm-semantics.md
//! "Device removal and address change"); the invariant each belongs to is in the module docs
//! of `oracle.rs`.

use super::{Checker, Invariant, Violation};
use crate::history::{AsyncOn, Call, Entry, Fault, History, WireMsg};
use std::collections::BTreeSet;
use verbs_core::{AsyncEventType as A, SimTime};

const EIO: i32 = 5;
const ENXIO: i32 = 6;
const EINVAL: i32 = 22;
const EISCONN: i32 = 106;

/// One device life's async events and disruptions (reset at the host's boot).
#[derive(Debug, Default)]
pub(super) struct DevState {
    /// The device was removed ([`Fault::DeviceRemoved`]).
    pub(super) removed: bool,
    /// RC packets the host had sent when it was.
    rc_sent: u64,
    /// Address changes so far.
    pub(super) addr_changes: u32,
    /// DEVICE_FATAL events read.
    device_fatal: u32,
    /// QPNs that raised COMM_EST.
    comm_est: BTreeSet<u32>,
    /// QPNs that raised LAST_WQE_REACHED.
    last_wqe: BTreeSet<u32>,
}

impl Checker {
    pub(super) fn device_fault(&mut self, e: &Entry, f: Fault) {
        let d = &mut self.host(e.host).dev;
        match f {
            Fault::DeviceRemoved { rc_sent } => {
                d.removed = true;
                d.rc_sent = rc_sent;
            }
            Fault::AddressChange => d.addr_changes += 1,
            _ => {}
        }
    }

    /// The rules of one async event (other than CQ_ERR).
    pub(super) fn async_event(&mut self, e: &Entry, event: A, on: AsyncOn) {
        let cq_err = self.host(e.host).cq_err.iter().any(|&x| x);
        match event {
            A::QpLastWqeReached => self.sometimes.last_wqe_reached = true,
            A::QpFatal => self.sometimes.qp_fatal = true,
            A::SrqLimitReached => self.sometimes.srq_limit_reached = true,
            _ => {}
        }
        let d = &mut self.host(e.host).dev;
        let mut v: Vec<(Invariant, String)> = Vec::new();
        if d.device_fatal > 0 && event != A::DeviceFatal {
            // A disassociated context gets nothing after DEVICE_FATAL (SimDevice::remove).
            v.push((Invariant::S1, format!("{event:?} after DEVICE_FATAL")));
        }
        match (event, on) {
            (A::DeviceFatal, _) => {
                d.device_fatal += 1;
                if d.device_fatal > 1 {
                    v.push((Invariant::S1, "a second DEVICE_FATAL".into()));
                }
                if !d.removed {
                    v.push((Invariant::S5, "DEVICE_FATAL without a removal".into()));
                }
            }
            (A::CommEst, AsyncOn::Qp(qpn)) if !d.comm_est.insert(qpn) => {
                v.push((Invariant::S1, format!("a second COMM_EST on QP {qpn:#x}")));
            }
            (A::QpLastWqeReached, AsyncOn::Qp(qpn)) if !d.last_wqe.insert(qpn) => {
                v.push((
                    Invariant::S4,
                    format!("a second LAST_WQE_REACHED on QP {qpn:#x}"),
                ));
            }
            (A::QpFatal, _) if !cq_err => {
                v.push((Invariant::S4, "QP_FATAL without a CQ_ERR before".into()));
            }
            _ => {}
        }
        for (inv, m) in v {
            self.violate(inv, e, m);
        }
    }

    /// S4: no receive completion of a QP after its LAST_WQE_REACHED (it comes after the QP's
    /// last flush, docs/semantics-verbs.md "Shared receive queues").
    pub(super) fn recv_completion(&mut self, e: &Entry, qpn: u32) {
        if self.host(e.host).dev.last_wqe.contains(&qpn) {
            self.violate(
                Invariant::S4,
                e,
                format!("a receive completion on QP {qpn:#x} after its LAST_WQE_REACHED"),
            );
        }
    }

    /// S7 for the calls of a host whose device was removed: verbs return EIO, rdma_cm calls
    /// on an id fail (ENXIO, or EIO where librdmacm touches the QP first); ack and destroy
    /// keep their rules. Returns whether the call was checked here.
    pub(super) fn removed_call(&mut self, e: &Entry, call: Call, errno: i32) -> bool {
        if !self.host(e.host).dev.removed {
            return false;
        }
        let ok = match call {
            Call::Ack { .. } | Call::Destroy { .. } => return false,
            Call::Post { .. } | Call::QpToErr { .. } => errno == EIO,
            Call::Notify { .. } => errno == ENXIO || errno == EIO,
            Call::Connect { id, .. }
            | Call::Accept { id, .. }
            | Call::Reject { id }
            | Call::Disconnect { id }
            | Call::Listen { id } => {
                let (removed, destroyed) = self
                    .ids
                    .get(&(e.host, e.epoch, id))
                    .map_or((false, false), |s| (s.removed, s.destroyed));
                if destroyed {
                    // An unknown id: the usual rules (EINVAL).
                    return false;
                }
                if removed {
                    errno == ENXIO || errno == EIO
                } else {
                    errno != 0
                }
            }
        };
        if !ok {
            self.violate(
                Invariant::S7,
                e,
                format!("{call:?} returned errno {errno} after the device was removed"),
            );
        }
        true
    }

    /// S7: `rdma_notify` returns 0 only on an id not yet ESTABLISHED, else EISCONN (or
    /// EINVAL in another state, ENXIO/EIO after a removal).
    pub(super) fn notify_call(&mut self, e: &Entry, id: u32, errno: i32) {
        let s = self.ids.entry((e.host, e.epoch, id)).or_default();
        let bad = match errno {
            0 if s.established => Some("returned 0 on an ESTABLISHED id"),
            0 => {
                s.notified = true;
                None
            }
            EISCONN | EINVAL | ENXIO | EIO => None,
            _ => Some("returned an errno rdma_notify does not return"),
        };
        if let Some(m) = bad {
            self.violate(Invariant::S7, e, format!("rdma_notify {m} ({errno})"));
        }
    }

    /// S5: a host whose device was removed sends no MAD afterwards.
    pub(super) fn removed_tx(&mut self, e: &Entry, msg: WireMsg) {
        if self.host(e.host).dev.removed {
            self.violate(
                Invariant::S5,
                e,
                format!("{} sent after the device was removed", msg.name()),
            );
        }
    }

    /// S5: a host whose device was removed (in its last life) sent no RC packet afterwards.
    pub(super) fn removed_sent_nothing(&mut self, history: &History, end: SimTime) {
        for (h, hs) in self.hosts.iter().enumerate() {
            let sent = history.rc_packets.get(h).copied().unwrap_or(0);
            if hs.dev.removed && sent != hs.dev.rc_sent {
                self.out.push(Violation {
                    invariant: Invariant::S5,
                    host: h,
                    at: end,
                    message: format!(
                        "{} RC packets sent after the device was removed",
                        sent - hs.dev.rc_sent.min(sent)
                    ),
                    events: Vec::new(),
                });
            }
        }
    }
}
