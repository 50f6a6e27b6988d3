//! `rdma_migrate_id`, the kernel half (ucma.c `ucma_migrate_id`): the id and its events not yet
//! read move to another event channel.

use super::*;

impl Cma {
    /// The channel `id` reports to.
    pub fn channel_of(&self, id: CmIdHandle) -> Option<EventChannel> {
        self.ids.get(&id).map(|r| r.channel)
    }

    /// ucma MIGRATE_ID: `id` reports to `to` from now on, and its events not read yet move
    /// there in order, behind what `to` already holds (`ucma_migrate_id`: "Migrate events
    /// between fd's, maintaining order"). A listener's unread CONNECT_REQUESTs move with it
    /// (ucma queues them as the listener's events); a passive id's own CONNECT_REQUEST stays
    /// with its listener. Migrating to the channel the id is on changes nothing. The events
    /// handed out and not acked stay the id's (librdmacm's `rdma_migrate_id` then waits for
    /// their acks: [`crate::librdmacm::RdmaCm::migrate_id`]).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id or channel; `EBADF` for a destroyed channel; `ENXIO` for an
    /// id whose device was removed (`ucma_get_ctx`).
    pub fn migrate_id(&mut self, id: CmIdHandle, to: EventChannel) -> Result<(), Error> {
        if !self.channels.contains_key(&to) {
            return Err(self.bad_channel(to));
        }
        let from = self.rec(id)?.channel;
        if from == to {
            return Ok(());
        }
        let mine = |e: &CmEvent| match e.event {
            CmEventType::ConnectRequest => e.listen_id == Some(id),
            _ => e.id == id,
        };
        let moved: Vec<CmEvent> = match self.channels.get_mut(&from) {
            Some(q) => {
                let (moved, kept): (VecDeque<CmEvent>, VecDeque<CmEvent>) =
                    q.drain(..).partition(|e| mine(e));
                *q = kept;
                moved.into()
            }
            None => Vec::new(),
        };
        if let Some(q) = self.channels.get_mut(&to) {
            q.extend(moved);
        }
        self.rec(id)?.channel = to;
        Ok(())
    }
}
