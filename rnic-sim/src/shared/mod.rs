//! The tables every part of a device shares — memory regions, CQs, SRQs, async events, the transmit
//! queue, counters and the transport limits — below the QP, the transports (RC, UD, GSI) and
//! the device itself, which all use them and none of which they use.

use crate::cq::{Cq, CqPush};
use crate::mr::MrTable;
use crate::roce::Packet;
use crate::srq::Srq;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use verbs_core::{
    AsyncElement, AsyncEvent, AsyncEventType, CqHandle, Gid, WcStatus, WorkCompletion,
};

mod budget;
mod counters;
mod poison;
mod transmit;

pub(crate) use budget::PeerBudgets;
pub use counters::{Counters, ObjectCounts, QpCounters};
pub(crate) use poison::{WcPoison, WcQueue};
pub use transmit::Transmit;
pub(crate) use transmit::{fill, Outgoing};

/// State shared by all QPs of a device: memory, CQs, events, the transmit queue, counters.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// The device's GID.
    pub gid: Gid,
    /// Memory regions.
    pub mrs: MrTable,
    /// CQs by handle value.
    pub cqs: BTreeMap<u32, Cq>,
    /// Shared receive queues by handle value (the receive paths of their QPs take from them).
    pub srqs: BTreeMap<u32, Srq>,
    /// Pending async events.
    pub events: VecDeque<AsyncEvent>,
    /// Packets waiting for `poll_transmit`, in order.
    pub tx: VecDeque<Outgoing>,
    /// Multicast datagrams the device's QPs sent, to be delivered to its own QPs attached to
    /// the group: (group, sending QPN, packet).
    pub mcast_loop: VecDeque<(Gid, u32, Packet)>,
    /// Counters.
    pub counters: Counters,
    /// Requester window: PSNs sent but not acknowledged.
    pub max_unacked_psns: u32,
    /// Requester window in bytes (see [`SimDeviceConfig::max_unacked_bytes`](crate::SimDeviceConfig::max_unacked_bytes)).
    pub max_unacked_bytes: u64,
    /// The send budget of all RC QPs to one peer (none without a byte window).
    pub budgets: PeerBudgets,
    /// Request packets between two that ask for an ACK.
    pub max_pkts_per_ack: u32,
    /// QPNs of the QPs that entered ERR since [`SimDevice::take_entered_err`](crate::SimDevice::take_entered_err) last ran.
    pub entered_err: BTreeSet<u32>,
    /// The junk generator of error completions, when
    /// [`SimDeviceConfig::poison_undefined_wc_fields`](crate::SimDeviceConfig::poison_undefined_wc_fields)
    /// is set.
    pub poison: Option<WcPoison>,
}

impl Shared {
    /// An error completion of `wr_id` with `status` on QP `qpn`'s `queue`: only `wr_id`,
    /// `status`, `qp_num` and `vendor_err` are defined (man ibv_poll_cq(3)); the rest is zero
    /// (rxe) or junk when the device poisons them (see `shared/poison.rs`).
    pub fn error_wc(
        &mut self,
        wr_id: u64,
        status: WcStatus,
        qpn: u32,
        queue: WcQueue,
    ) -> WorkCompletion {
        poison::error_wc(self.poison.as_mut(), wr_id, status, qpn, queue)
    }

    /// Queues the affiliated async event `event_type` of QP `qpn`.
    pub fn qp_event(&mut self, event_type: AsyncEventType, qpn: u32) {
        let e = AsyncEvent {
            event_type,
            element: AsyncElement::Qp(qpn),
        };
        crate::log::async_event(&e);
        self.events.push_back(e);
    }

    /// Drops the queued async events of a destroyed object: the kernel frees an object's
    /// unread events when it is destroyed (`ib_uverbs_release_uevent` from `uverbs_free_qp`,
    /// `uverbs_free_cq`, `uverbs_free_srq` [uverbs_std_types.c]), so none is read for an object
    /// that is gone (or for a later one with its QPN), and an application that never reads its
    /// async events does not grow the queue past its live objects.
    pub fn forget_events_of(&mut self, element: AsyncElement) {
        self.events.retain(|e| e.element != element);
    }

    /// Adds a completion to `cq`. Returns false when it was lost to an overrun (which raises
    /// `CQ_ERR` the first time) or the CQ is unknown.
    pub fn complete(&mut self, cq: CqHandle, wc: WorkCompletion, solicited: bool) -> bool {
        let Some(c) = self.cqs.get_mut(&cq.0) else {
            self.counters.completions_lost += 1;
            return false;
        };
        match c.push(wc, solicited) {
            CqPush::Stored => true,
            CqPush::Overran => {
                self.counters.completions_lost += 1;
                let e = AsyncEvent {
                    event_type: AsyncEventType::CqErr,
                    element: AsyncElement::Cq(cq),
                };
                crate::log::async_event(&e);
                self.events.push_back(e);
                false
            }
            CqPush::Dropped => {
                self.counters.completions_lost += 1;
                false
            }
        }
    }
}
