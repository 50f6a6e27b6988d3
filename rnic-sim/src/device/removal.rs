//! The device goes away: a hot-unplug or a fatal error. Linux: the driver raises
//! `IB_EVENT_DEVICE_FATAL`, uverbs passes it to every open context (`ib_uverbs_remove_one` →
//! `ib_uverbs_free_hw_resources`) and, for a driver that can disassociate, detaches the
//! contexts from the hardware: from then on every uverbs command of the process returns `EIO`
//! (libibverbs' destroy calls too, unless `RDMAV_ALLOW_DISASSOC_DESTROY` is set,
//! `verbs_is_destroy_err` in rdma-core `cmd_write.h`).

use super::SimDevice;
use verbs_core::{AsyncElement, AsyncEvent, AsyncEventType, Errno, Error, QpState, Result};

impl SimDevice {
    /// Removes the device (hot-unplug, or a fatal error it cannot recover from):
    ///
    /// * `IBV_EVENT_DEVICE_FATAL` is queued for [`Device::get_async_event`](verbs_core::Device::get_async_event),
    ///   behind the events already queued, and nothing follows it (the flush below raises no
    ///   `QP_LAST_WQE_REACHED` or `QP_FATAL`; a CQ it overruns reports `CQ_ERR` before
    ///   `DEVICE_FATAL`);
    /// * every QP not in RESET or ERR enters ERR, its outstanding work requests flushed to
    ///   their CQs (`IBV_WC_WR_FLUSH_ERR`), so a consumer polling its CQs sees them end;
    /// * nothing more leaves the device — what was queued for the wire is dropped — and
    ///   nothing is taken from the wire: peers see a silent node (their QPs retry out, their
    ///   CM requests time out);
    /// * every later verbs call returns `EIO`, as on a disassociated context, except
    ///   `poll_cq` (the flushed completions stay readable: the CQ ring lives in the process's
    ///   memory) and `get_async_event`; `query_device`/`name` keep answering (libibverbs
    ///   keeps them in user space).
    ///
    /// Calling it again changes nothing. What Linux does to the rdma_cm ids over the device is
    /// the CM's: `cm_core::api::RdmaCm::device_removal`.
    pub fn remove(&mut self) {
        if self.removed {
            return;
        }
        let queued = self.sh.events.len();
        let live: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, q)| !matches!(q.state(), QpState::Reset | QpState::Err))
            .map(|(&qpn, _)| qpn)
            .collect();
        for qpn in live {
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.enter_err(&mut self.sh);
                q.settle(&mut self.sh);
            }
            self.touched(qpn);
        }
        // A disassociated context gets no event after DEVICE_FATAL (uverbs destroys its
        // objects without their event handlers, `uverbs_destroy_ufile_hw`), so the flush's QP
        // events (QP_LAST_WQE_REACHED, QP_FATAL) are not reported. A CQ the flush overran is
        // (CQ_ERR, before DEVICE_FATAL): it tells the application completions were lost.
        let raised: Vec<AsyncEvent> = self.sh.events.drain(queued..).collect();
        self.sh.events.extend(
            raised
                .into_iter()
                .filter(|e| e.event_type == AsyncEventType::CqErr),
        );
        let fatal = AsyncEvent {
            event_type: AsyncEventType::DeviceFatal,
            element: AsyncElement::Device,
        };
        tracing::debug!("device removed: the flush's QP events are not reported");
        crate::log::async_event(&fatal);
        self.sh.events.push_back(fatal);
        self.removed = true;
        self.sh.tx.clear();
        self.gsi_mut().rx.clear();
        self.tx_pending.clear();
        let qpns: Vec<u32> = self.deadline_of.keys().copied().collect();
        for qpn in qpns {
            self.sync_deadline(qpn);
        }
    }

    /// Whether the device was removed ([`SimDevice::remove`]).
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    /// `EIO` once the device was removed: the verbs calls' first check.
    pub(super) fn alive(&self) -> Result<()> {
        if self.removed {
            return Err(Error::new(
                Errno::EIO,
                "the device was removed (context disassociated)",
            ));
        }
        Ok(())
    }
}
