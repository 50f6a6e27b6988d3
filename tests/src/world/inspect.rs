//! Access for power users (the simulation, the hosts, the history) and inspection of the
//! World's state (QPs, CM ids, events, completions, MADs, drops).

use super::config::host_ip;
use super::{End, EventMode, Fault, History, Node, Record, WireMsg, WordHash, World, WorldConfig};
use crate::host::Host;
use cm_core::api::{CmEventType, CmIdHandle};
use cm_core::engine::IbCmState;
use rnic_sim::fabric::{DropReason, Simulation};
use rnic_sim::nic::Captured;
use verbs_core::{Device, Qp, QpState, SimTime, WcStatus};

impl World {
    /// The configuration.
    pub fn config(&self) -> &WorldConfig {
        &self.cfg
    }

    /// The simulation (fabric, endpoints, clock).
    pub fn sim(&self) -> &Simulation<Node> {
        &self.sim
    }

    /// The simulation, mutably: change the fault plan, drive endpoints directly. Calls made
    /// this way are not recorded.
    pub fn sim_mut(&mut self) -> &mut Simulation<Node> {
        self.touch_all();
        &mut self.sim
    }

    /// Host `h`.
    pub fn host(&self, h: usize) -> Option<&Host> {
        self.sim.endpoint(h).map(Node::host)
    }

    /// Host `h`, mutably (unrecorded calls).
    pub fn host_mut(&mut self, h: usize) -> Option<&mut Host> {
        self.node_mut(h).ok().map(Node::host_mut)
    }

    /// The virtual clock.
    pub fn now(&self) -> SimTime {
        self.sim.now()
    }

    /// The history so far.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Takes the history out (the World keeps an empty one).
    pub fn take_history(&mut self) -> History {
        self.events_indexed = 0;
        std::mem::take(&mut self.history)
    }

    /// The seed of the S6 data pattern ([`payload_byte`]).
    ///
    /// [`payload_byte`]: super::payload_byte
    pub fn data_seed(&self) -> u64 {
        self.data_seed
    }

    /// Host `h`'s current life.
    pub fn epoch(&self, h: usize) -> u8 {
        self.apps.get(h).map_or(0, |a| a.epoch)
    }

    /// Whether host `h` is up now (not inside a crash window).
    pub fn is_up(&self, h: usize) -> bool {
        !self.sim.fabric.plan().is_down(host_ip(h), self.sim.now())
    }

    /// Sets how host `h`'s application treats CM events.
    pub fn set_event_mode(&mut self, h: usize, mode: EventMode) {
        if let Some(a) = self.apps.get_mut(h) {
            a.mode = mode;
        }
        if let Some(d) = self.history.deaf.get_mut(h) {
            *d = mode == EventMode::NeverRead;
        }
        // Events left unread under the old mode are read at the next observation.
        self.touch(h);
    }

    /// Every datagram captured (when [`WorldConfig::capture`]): (time, flow, UDP payload),
    /// the sends of all hosts.
    pub fn captures(&mut self) -> &[Captured] {
        self.observe();
        &self.captures
    }

    /// The history's hash ([`History::hash`]) combined with the fabric's trace hash
    /// ([`SimFabric::trace_hash`]).
    ///
    /// [`SimFabric::trace_hash`]: rnic_sim::fabric::SimFabric::trace_hash
    pub fn trace_hash(&self) -> u64 {
        let mut h = WordHash::new();
        let (n, entries) = self.entries_hash;
        h.write_u64(if n == self.history.entries.len() {
            self.history.finish_hash(entries)
        } else {
            self.history.hash()
        });
        h.write_u64(self.sim.fabric.trace_hash());
        h.finish()
    }

    /// Every QP of host `h`'s current life (for teardown).
    pub fn qps_of(&self, h: usize) -> Vec<Qp> {
        let epoch = self.epoch(h);
        self.qps
            .range((h, epoch, 0)..=(h, epoch, u32::MAX))
            .map(|(_, q)| q.0)
            .collect()
    }

    /// The state of `e`'s QP now (`ibv_query_qp`); `None` if the QP is gone (or of an
    /// earlier life of the host).
    pub fn qp_state(&self, e: End) -> Option<QpState> {
        if self.epoch(e.host) != e.epoch {
            return None;
        }
        let node = self.sim.endpoint(e.host)?;
        let (attr, _) = node.host.nic().device().query_qp(e.qp.handle).ok()?;
        Some(attr.qp_state)
    }

    /// The IB CM state (cm-spec §3.1) of host `h`'s rdma_cm id `id` now; `None` if the id is
    /// unknown (destroyed) or has no IB CM id (never connected, or a listener).
    pub fn ib_cm_state(&self, h: usize, id: CmIdHandle) -> Option<IbCmState> {
        self.host(h)?.cm().ib_cm_state(id)
    }

    /// The CM events host `h`'s application read for id `id` in the host's current life, in
    /// order: (time, type, status).
    pub fn events_of(&self, h: usize, id: CmIdHandle) -> Vec<(SimTime, CmEventType, i32)> {
        let epoch = self.epoch(h);
        self.history
            .of_host(h)
            .filter(|e| e.epoch == epoch)
            .filter_map(|e| match e.rec {
                Record::Event {
                    id: i,
                    event,
                    status,
                    ..
                } if i == id.0 => Some((e.at, event, status)),
                _ => None,
            })
            .collect()
    }

    /// The status of WR `wr_id`'s first completion the application polled, `None` if it has
    /// not completed.
    pub fn wc_status(&self, wr_id: u64) -> Option<WcStatus> {
        self.history.entries.iter().find_map(|e| match e.rec {
            Record::Completion {
                wr_id: w, status, ..
            } if w == wr_id => Some(status),
            _ => None,
        })
    }

    /// The CM MADs host `h` sent in its current life, in order: (time, message), including
    /// what the hosts queued at this instant (handed to the fabric first, as the next run
    /// would). Filter by [`WireMsg::attr`] (`cm_core::wire::CM_DREQ_ATTR_ID`, …) for one kind.
    pub fn sent_mads(&mut self, h: usize) -> Vec<(SimTime, WireMsg)> {
        self.next_wake();
        let epoch = self.epoch(h);
        self.history
            .of_host(h)
            .filter(|e| e.epoch == epoch)
            .filter_map(|e| match e.rec {
                Record::Wire { tx: true, msg, .. } if msg.attr != 0 => Some((e.at, msg)),
                _ => None,
            })
            .collect()
    }

    /// Every datagram the fabric dropped so far: (sending host, what it was, why), in order.
    /// RC packets read as attribute 0. Hands what the hosts queued at this instant to the
    /// fabric first, as the next run would.
    pub fn dropped(&mut self) -> Vec<(usize, WireMsg, DropReason)> {
        self.next_wake();
        self.history
            .entries
            .iter()
            .filter_map(|e| match e.rec {
                Record::Fault(Fault::Dropped { reason, msg }) => {
                    Some((usize::from(e.host), msg, reason))
                }
                _ => None,
            })
            .collect()
    }
}
