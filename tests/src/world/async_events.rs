//! The application's async events (`ibv_get_async_event(3)`): each recorded
//! ([`Record::CqErr`], [`Record::Async`]), and COMM_EST answered with `rdma_notify` where the
//! host's application does so ([`HostApp::notify_on_comm_est`](super::HostApp)).

use super::{errno_of, AsyncOn, Call, Queue, Record, World};
use verbs_core::{AsyncElement, AsyncEventType, Device, SimTime};

impl World {
    /// Reads every async event of host `h`'s device, in order, and records it.
    pub(super) fn read_async_events(&mut self, h: usize, now: SimTime) {
        let app = self.apps[h];
        let notify = self.cfg.app_of(h).notify_on_comm_est;
        while let Some(ev) = self
            .node_quiet(h)
            .and_then(|n| n.host.split().1.get_async_event())
        {
            let on = match ev.element {
                AsyncElement::Cq(cq) if cq == app.send_cq => AsyncOn::Cq(Queue::Send),
                AsyncElement::Cq(cq) if cq == app.recv_cq => AsyncOn::Cq(Queue::Recv),
                AsyncElement::Qp(qpn) => AsyncOn::Qp(qpn),
                AsyncElement::Srq(_) => AsyncOn::Srq,
                AsyncElement::Device => AsyncOn::Device,
                _ => AsyncOn::Other,
            };
            let rec = match (ev.event_type, on) {
                (AsyncEventType::CqErr, AsyncOn::Cq(queue)) => Record::CqErr { queue },
                (event, on) => Record::Async { event, on },
            };
            self.push(now, h, app.epoch, rec);
            if let (true, AsyncEventType::CommEst, AsyncOn::Qp(qpn)) = (notify, ev.event_type, on) {
                self.notify_comm_est(h, qpn, now);
            }
        }
    }

    /// `rdma_notify(id, IBV_EVENT_COMM_EST)` on the passive id of QP `qpn` (nvmet-rdma's
    /// `nvmet_rdma_qp_event`), recorded; an active QP's COMM_EST is left alone.
    fn notify_comm_est(&mut self, h: usize, qpn: u32, now: SimTime) {
        let epoch = self.apps[h].epoch;
        let Some(&id) = self.passive_ids.get(&(h, epoch, qpn)) else {
            return;
        };
        let Some(node) = self.node_quiet(h) else {
            return;
        };
        // The notify may queue ESTABLISHED: observe the host again.
        node.touch();
        let (cm, dev) = node.host.split();
        let r = cm.notify(dev, now, id);
        self.push(
            now,
            h,
            epoch,
            Record::Call {
                call: Call::Notify { id: id.0 },
                errno: errno_of(&r),
            },
        );
    }
}
