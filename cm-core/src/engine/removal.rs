//! The IB CM ids of a device that went away (Linux: the rdma_cm destroys a user id's IB CM id
//! after `RDMA_CM_EVENT_DEVICE_REMOVAL`, `ucma_close_id`; on a surprise removal the device
//! cannot transmit what `ib_destroy_cm_id` would send).

use super::*;

impl CmEngine {
    /// Frees `id` as [`CmEngine::destroy_id`] does, but sends nothing: no REJ, DREQ or DREP
    /// (the device is gone, so nothing it would send can leave), and raises no further event
    /// for it. Its timers stop; its comm ID no longer matches anything. Unknown ids are
    /// ignored.
    pub fn forget_id(&mut self, id: IbCmId) {
        self.remove_from_tables(id);
        self.forget_sidr(id);
        if let Some(c) = self.conns.remove(&id) {
            self.timers.get_mut().touch(id);
            self.note_changed(id);
            self.by_peer.remove(&(c.remote_gid, id));
            self.by_local.remove(&c.local_comm_id);
            if let Some(l) = c.listener {
                self.listeners.remove(&l.service_id);
            }
        }
        self.events.retain(|e| e.id != id);
    }

    /// Drops every MAD queued for transmission (a removed device sends none of them).
    pub fn discard_transmit(&mut self) {
        self.transmit.clear();
    }
}
