//! The device goes away, or its network device's hardware address changes: the kernel side of
//! `RDMA_CM_EVENT_DEVICE_REMOVAL` (cma.c `cma_process_remove` → `cma_send_device_removal_put`,
//! ucma.c `ucma_event_handler` → `ucma_close_id`) and `RDMA_CM_EVENT_ADDR_CHANGE` (cma.c
//! `cma_netdev_callback` → `cma_netdev_change`).

use super::*;

impl Cma {
    /// Whether the device was removed ([`Cma::device_removal`]).
    pub fn device_removed(&self) -> bool {
        self.device_removed
    }

    /// `ENODEV` when an address would attach an id to the device and the device is gone
    /// (Linux `cma_acquire_dev_by_src_ip` finds no device for the address); `want` `None` or
    /// a specific IP attaches, the wildcard does not.
    pub(super) fn device_present(&self, want: Option<SocketAddr>) -> Result<(), Error> {
        let attaches = want.is_none_or(|a| !a.ip().is_unspecified());
        if self.device_removed && attaches {
            return Err(Error::new(Errno::ENODEV, "the RDMA device was removed"));
        }
        Ok(())
    }

    /// The device is removed (hot-unplug, fatal error): every id attached to it — bound to its
    /// address, resolving or resolved through it, connecting, connected, a passive id, a
    /// listener on its address — moves to `RDMA_CM_DEVICE_REMOVAL` and gets
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL` with status 0, behind the events it already has queued
    /// (`cma_send_device_removal_put`). ucma then closes it (`ucma_close_id`): its IB CM id is
    /// destroyed and every later call on it but `rdma_destroy_id` returns `ENXIO`
    /// (`ucma_get_ctx`). A passive id the application has not accepted yet gets no event (ucma
    /// drops events until `ucma_accept` sets the uid) but is closed alike. Ids not attached
    /// (IDLE, bound to the wildcard address — a wildcard listener's per-device listeners go
    /// silently, `cma_listen_handler`) get nothing.
    ///
    /// The device can send nothing more, so the destroyed IB CM ids send no REJ, DREQ or DREP
    /// (a surprise removal; an orderly unregistration of a working device, e.g. `rdma link
    /// delete` of rxe, may still send what `ib_destroy_cm_id` sends — not modelled), and from
    /// now on no MAD leaves or is taken and no CM timer runs. Binding an id to the device's
    /// address or resolving through it returns `ENODEV` afterwards. Returns the ids moved to
    /// DEVICE_REMOVAL. Calling it again changes nothing.
    pub fn device_removal(&mut self) -> Vec<CmIdHandle> {
        if self.device_removed {
            return Vec::new();
        }
        self.device_removed = true;
        self.engine.discard_transmit();
        let attached: Vec<CmIdHandle> = self
            .ids
            .iter()
            .filter(|(_, r)| r.bound && !r.removed)
            .map(|(id, _)| *id)
            .collect();
        for &id in &attached {
            if let Some(r) = self.ids.get_mut(&id) {
                r.set_state(id, RdmaCmState::DeviceRemoval);
                r.removed = true;
            }
            self.deliver(
                id,
                CmEventType::DeviceRemoval,
                0,
                None,
                ConnEventParam::default(),
            );
            self.engine.forget_id(IbCmId(id.0));
        }
        attached
    }

    /// The hardware address of the device's network device changed (Linux raises this only
    /// for a bonding failover, `NETDEV_BONDING_FAILOVER` in `cma_netdev_callback`, and only
    /// for an id whose bound netdev is the bond and whose source hardware address differs,
    /// `cma_netdev_change`; an IP address change raises nothing). Every id attached to the
    /// device gets `RDMA_CM_EVENT_ADDR_CHANGE` with status 0 in whatever state it is (but
    /// DEVICE_REMOVAL): no state changes, the connection is left alone — what to do (typically
    /// disconnect and reconnect) is the application's (`cma_work_handler` with no state
    /// change). A passive id not accepted yet gets nothing (ucma drops it). Returns the ids
    /// that got the event.
    pub fn address_change(&mut self) -> Vec<CmIdHandle> {
        if self.device_removed {
            return Vec::new();
        }
        let attached: Vec<CmIdHandle> = self
            .ids
            .iter()
            .filter(|(_, r)| r.bound && r.uid_set && !r.removed)
            .map(|(id, _)| *id)
            .collect();
        for &id in &attached {
            self.deliver(
                id,
                CmEventType::AddrChange,
                0,
                None,
                ConnEventParam::default(),
            );
        }
        attached
    }
}
