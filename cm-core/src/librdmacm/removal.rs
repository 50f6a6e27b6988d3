//! Device removal and address change as librdmacm's application sees them: the kernel side
//! does the work ([`Cma::device_removal`], [`Cma::address_change`]); librdmacm passes both
//! events on untouched (`rdma_get_cm_event`'s default case).

use super::*;

impl RdmaCm {
    /// The device under this CM was removed (driven by the harness, with the device's own
    /// removal, e.g. `rnic_sim::SimDevice::remove`): every id attached to the device gets
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL` (status 0) and is left for `rdma_destroy_id` alone —
    /// every other call on it returns `ENXIO` (or, where librdmacm touches the id's QP first,
    /// the device's `EIO`). The CM sends nothing more: no REJ, DREQ or DREP for the ids it
    /// drops, no answer to what arrives; peers find out by their own timeouts (a QP's retries,
    /// a DREQ's). See [`Cma::device_removal`]. Returns the ids that moved to DEVICE_REMOVAL.
    pub fn device_removal(&mut self) -> Vec<CmIdHandle> {
        self.cma.device_removal()
    }

    /// The hardware address of the device's network device changed (a bonding failover):
    /// every id attached to the device gets `RDMA_CM_EVENT_ADDR_CHANGE` (status 0); nothing
    /// else changes. See [`Cma::address_change`]. Returns the ids that got the event.
    pub fn address_change(&mut self) -> Vec<CmIdHandle> {
        self.cma.address_change()
    }

    /// Whether the device under this CM was removed.
    pub fn device_removed(&self) -> bool {
        self.cma.device_removed()
    }
}
