//! [`World`]: N simulated hosts (a [`SimDevice`] in a [`SimNic`] plus its [`RdmaCm`], i.e. a
//! [`Host`]) on the deterministic [`Simulation`]/[`SimFabric`], an application on each host, and
//! the [`History`] the [`oracle`] checks.
//!
//! The application of each host reads its CM events and polls its CQs after **every**
//! simulation event, so the recorded virtual times are the times at which things happened
//! (TESTING.md, "The history and the oracle"). What is recorded, per host, append-only:
//!
//! * every API call the World makes on the application's behalf, with its errno
//!   ([`Record::Call`]), and every WR a post accepted ([`Record::Posted`]);
//! * every work completion ([`Record::Completion`]), with the S6 data check already done: a
//!   SEND/WRITE payload is 8 bytes of `wr_id` then bytes derived from `(seed, wr_id)`
//!   ([`payload_byte`]); a READ reads the peer's READ region, filled from `(seed, host)`;
//! * every CM event read ([`Record::Event`]), with the id's local comm ID and TimeWait;
//! * every QP the application sees move to ERR ([`Record::QpErr`]), every overrun of its
//!   CQs (the async event CQ_ERR, [`Record::CqErr`]) and every other async event of its
//!   device ([`Record::Async`]: COMM_EST, QP_FATAL, LAST_WQE_REACHED, SRQ_LIMIT_REACHED,
//!   DEVICE_FATAL, …; `world/async_events.rs`);
//! * every CM MAD sent or received ([`Record::Wire`]): attribute, comm IDs, REJ reason. They
//!   are read from the raw datagram in the host's [`Endpoint`] wrapper (a few byte loads, no
//!   decode); RC packets are only counted ([`History::rc_packets`]);
//! * faults ([`Record::Fault`]): the fabric's drops (with reason) and duplicates, read
//!   incrementally from the fabric trace and matched to the datagram by the sender's send
//!   order; crashes and restarts; device removals and address changes (`world/disrupt.rs`).
//!
//! Nothing is formatted while running: records are small `Copy` enums; text is made only on
//! replay ([`Entry`]'s `Display`).
//!
//! A deterministic test in a few lines:
//!
//! ```
//! use rnic_testbed::world::{World, WorldConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut w = World::new(WorldConfig::two_hosts(42))?;
//! let c = w.establish(0, 1)?;
//! w.post_recvs(c.passive, 4);
//! w.disconnect(c.active)?;
//! w.run_to_quiescence();
//! w.check()?; // teardown, then S1–S7 over the history
//! # Ok(())
//! # }
//! ```
//!
//! The [`Simulation`] and every [`Host`] stay reachable ([`World::sim_mut`],
//! [`World::host_mut`]) for what the convenience calls do not cover.
//!
//! [`SimDevice`]: rnic_sim::SimDevice
//! [`SimNic`]: rnic_sim::nic::SimNic
//! [`RdmaCm`]: cm_core::api::RdmaCm
//! [`Host`]: crate::host::Host
//! [`oracle`]: crate::oracle
//! [`Endpoint`]: rnic_sim::fabric::Endpoint

mod async_events;
mod calls;
mod config;
mod conn;
mod disrupt;
mod error;
mod forge;
mod host_app;
mod inspect;
mod node;
mod observe;
mod payload;
mod post;
mod run;
mod slots;
mod targeted;

pub use crate::history::{
    attr_name, AsyncOn, Call, Entry, Fault, History, Op, Queue, Record, WireMsg, WordHash, SRQ_QPN,
};
pub use config::{host_ip, HostCm, WorldConfig, CM_PORT, QUIESCE_LIMIT_NS, SLOTS, SLOT_BYTES};
pub use conn::{Conn, End};
pub use error::{Violations, WorldError};
pub use forge::{
    forged_ack, forged_req, forged_send, forged_write, write_slot, FORGED_TID, FORGED_WORD,
};
pub use host_app::{EventMode, HostApp};
pub use node::Node;
pub use payload::{payload_byte, payload_word};
pub use targeted::{MsgAction, MsgFault, Occurrence};

use crate::history::hash_entry;
use cm_core::api::{CmEvent, CmEventType, CmIdHandle, EventChannel};
use node::new_node;
use rnic_sim::fabric::{SimFabric, Simulation};
use rnic_sim::nic::Captured;
use rnic_sim::rng::Rng;
use slots::{mr_bytes, Held, Pools};
use std::collections::{BTreeMap, BTreeSet};
use verbs_core::{
    AccessFlags, CqHandle, Device, Errno, Error, Mr, PdHandle, Qp, SimTime, SrqHandle, SrqInitAttr,
    WorkCompletion,
};

/// The application's objects on one host (its memory region: `world/slots.rs`).
#[derive(Debug, Clone, Copy)]
struct App {
    ch: EventChannel,
    pd: PdHandle,
    mr: Mr,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    epoch: u8,
    mode: EventMode,
    listen: Option<CmIdHandle>,
    /// The shared receive queue every QP of the host takes its receives from
    /// ([`HostApp::srq`]).
    srq: Option<SrqHandle>,
}

/// A WR not yet completed: what to check when it does.
#[derive(Debug, Clone, Copy)]
struct Pending {
    op: Op,
    off: u64,
    /// READ: the pattern byte its source slot starts at.
    base: u64,
    len: u32,
    peer: usize,
    epoch: u8,
    peer_epoch: u8,
    /// The buffer slots it holds until it completes.
    held: [Option<Held>; 2],
}

/// See the module docs.
#[derive(Debug)]
pub struct World {
    sim: Simulation<Node>,
    cfg: WorldConfig,
    apps: Vec<App>,
    history: History,
    /// The [`WordHash`] of the first `.0` history entries, kept as they are recorded (off the
    /// critical path of `trace_hash`).
    entries_hash: (usize, WordHash),
    /// (host, epoch, QPN) → (QP, seen in ERR).
    qps: BTreeMap<(usize, u8, u32), (Qp, bool)>,
    /// (host, epoch, QPN) → the passive id the QP was accepted on (for `rdma_notify`).
    passive_ids: BTreeMap<(usize, u8, u32), CmIdHandle>,
    /// Every CM event in the history by (host, epoch, id, type, history index), so that
    /// waiting for one id's event does not scan the history; filed when a wait asks, up to
    /// history index `events_indexed` (a run that never waits files nothing).
    event_index: BTreeSet<(u8, u8, u32, CmEventType, usize)>,
    events_indexed: usize,
    /// Per host: every datagram it sent, in order (to name the fabric's drops).
    tx_meta: Vec<Vec<WireMsg>>,
    /// Per host: how many of its Sent events of the fabric trace were matched.
    tx_matched: Vec<usize>,
    /// Packet id → (sender, message) for packets seen in the trace.
    packets: Vec<(u8, WireMsg)>,
    trace_cursor: usize,
    pending: BTreeMap<u64, Pending>,
    /// Per host: the free WR buffer slots of its current life.
    pools: Vec<Pools>,
    acks: Vec<(SimTime, usize, u8, CmEvent)>,
    next_wr: u64,
    data_seed: u64,
    captures: Vec<Captured>,
    wcs: Vec<WorkCompletion>,
}

fn errno_of<T>(r: &Result<T, Error>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno as i32,
    }
}

impl World {
    /// A World of `cfg.hosts` hosts, each with an application (event channel, PD, an MR of
    /// 16 KiB plus 2 KiB per [`wr_slots`](WorldConfig::wr_slots) above 32
    /// with local and remote access, a send CQ and a receive CQ).
    ///
    /// # Errors
    /// A device or CM call failing (not expected on the simulated device).
    pub fn new(cfg: WorldConfig) -> Result<World, Error> {
        cfg.check()?;
        let root = Rng::new(cfg.seed);
        let mut fabric = SimFabric::new(root.fork(0x006e_6574), cfg.faults.clone());
        fabric.set_trace_recording(true);
        let mut sim = Simulation::new(fabric);
        let n = cfg.hosts;
        sim.reserve(n);
        for h in 0..n {
            sim.add_endpoint(new_node(&cfg, h, 0)?)?;
        }
        let mut w = World {
            sim,
            apps: Vec::with_capacity(n),
            history: History {
                // A generated scenario records ~60 entries: grow once or not at all.
                entries: Vec::with_capacity(128),
                rc_packets: vec![0; n],
                deaf: vec![false; n],
                hostile: vec![false; n],
                ..History::default()
            },
            entries_hash: (0, WordHash::new()),
            qps: BTreeMap::new(),
            passive_ids: BTreeMap::new(),
            event_index: BTreeSet::new(),
            events_indexed: 0,
            // Sized for a generated scenario's datagrams: grown once or not at all.
            tx_meta: (0..n).map(|_| Vec::with_capacity(32)).collect(),
            tx_matched: vec![0; n],
            packets: Vec::with_capacity(64),
            trace_cursor: 0,
            pending: BTreeMap::new(),
            pools: Vec::with_capacity(n),
            acks: Vec::new(),
            next_wr: 1,
            data_seed: root.fork(0x6461_7461).key(),
            captures: Vec::new(),
            wcs: Vec::new(),
            cfg,
        };
        for h in 0..n {
            let app = w.create_app(h, 0)?;
            w.apps.push(app);
        }
        Ok(w)
    }

    fn create_app(&mut self, h: usize, epoch: u8) -> Result<App, Error> {
        let max_cm_retries = self.cfg.cm_config(h, epoch).max_cm_retries;
        let cqe = self.cfg.cq_entries;
        let slots = self.slots_per_region();
        let host_app = self.cfg.app_of(h);
        let srq_init = SrqInitAttr {
            attr: verbs_core::SrqAttr {
                srq_limit: host_app.srq_limit,
                ..SrqInitAttr::new(self.cfg.qp_depth, 1).attr
            },
        };
        let node = self.node_mut(h)?;
        let (cm, dev) = node.host.split();
        let ch = cm.create_event_channel();
        let pd = dev.alloc_pd()?;
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let mr = dev.reg_mr(pd, mr_bytes(slots) as usize, access)?;
        let send_cq = dev.create_cq(cqe, None)?;
        let recv_cq = dev.create_cq(cqe, None)?;
        let srq = if host_app.srq {
            Some(dev.create_srq(pd, &srq_init)?)
        } else {
            None
        };
        let at = self.sim.now();
        self.push(at, h, epoch, Record::Boot { max_cm_retries });
        let pools = Pools::new(epoch, slots);
        match self.pools.get_mut(h) {
            Some(p) => *p = pools,
            None => self.pools.push(pools),
        }
        Ok(App {
            ch,
            pd,
            mr,
            send_cq,
            recv_cq,
            epoch,
            mode: EventMode::AckAtOnce,
            listen: None,
            srq,
        })
    }

    /// Host `h`'s node, marked for the next observation.
    fn node_mut(&mut self, h: usize) -> Result<&mut Node, Error> {
        match self.sim.endpoint_mut(h) {
            Some(n) => {
                n.touch();
                Ok(n)
            }
            None => Err(Error::new(Errno::EINVAL, format!("no host {h}"))),
        }
    }

    fn push(&mut self, at: SimTime, h: usize, epoch: u8, rec: Record) {
        let e = Entry {
            at,
            host: h as u8,
            epoch,
            rec,
        };
        if self.entries_hash.0 == self.history.entries.len() {
            hash_entry(&mut self.entries_hash.1, &e);
            self.entries_hash.0 += 1;
        }
        self.history.entries.push(e);
    }

    fn record(&mut self, h: usize, rec: Record) {
        let (at, epoch) = (self.sim.now(), self.apps[h].epoch);
        self.push(at, h, epoch, rec);
    }
}
