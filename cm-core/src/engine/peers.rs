//! Which peers the engine's ids talk to: the index a NIC asks before it lets a datagram from
//! an unknown socket reach the CM (`rnic_sim::peers`: a route a live connection uses never
//! moves), and the verdict on each received MAD that confirms a new route.

use super::*;

impl CmEngine {
    /// Makes `gid` the peer of `id` (keeping the peer index exact).
    pub(super) fn set_peer(&mut self, id: IbCmId, gid: Gid) {
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        let old = std::mem::replace(&mut c.remote_gid, gid);
        self.by_peer.remove(&(old, id));
        self.by_peer.insert((gid, id));
    }

    /// Whether an id of this engine has a connection with `gid` in progress: any state but
    /// IDLE and LISTEN (a handshake, ESTABLISHED, a disconnect, TIMEWAIT — every state in
    /// which the engine may still send to the peer or take its MADs). O(log n + ids of that
    /// peer).
    pub fn peer_in_use(&self, gid: Gid) -> bool {
        self.by_peer
            .range((gid, IbCmId(0))..=(gid, IbCmId(u32::MAX)))
            .any(|(_, id)| {
                self.conns
                    .get(id)
                    .is_some_and(|c| !matches!(c.state, IbCmState::Idle | IbCmState::Listen))
            })
    }

    /// MADs dropped so far, whatever the reason (the `rx_*` drop counters, duplicates
    /// included): [`CmEngine::handle_datagram`]'s verdict is whether this moved.
    pub(super) fn refused_mads(&self) -> u64 {
        let c = &self.counters;
        c.rx_malformed
            + c.rx_unmatched
            + c.rx_duplicates
            + c.rx_wrong_state
            + c.rx_wrong_qpn
            + c.rx_wrong_source
            + c.rx_backlog_full
    }
}
