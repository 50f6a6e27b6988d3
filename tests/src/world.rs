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
//! * every QP the application sees move to ERR ([`Record::QpErr`]), and every overrun of its
//!   CQs (the async event CQ_ERR, [`Record::CqErr`]; other async events are read and dropped);
//! * every CM MAD sent or received ([`Record::Wire`]): attribute, comm IDs, REJ reason. They
//!   are read from the raw datagram in the host's [`Endpoint`] wrapper (a few byte loads, no
//!   decode); RC packets are only counted ([`History::rc_packets`]);
//! * faults ([`Record::Fault`]): the fabric's drops (with reason) and duplicates, read
//!   incrementally from the fabric trace and matched to the datagram by the sender's send
//!   order; crashes and restarts.
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

use crate::host::Host;
use crate::oracle::{self, Violation};
use bytes::Bytes;
use cm_core::api::{CmEvent, CmEventType, CmIdHandle, ConnParam, EventChannel, RdmaCm};
use cm_core::engine::{CmConfig, IbCmState};
use cm_core::wire::RdmaPortSpace;
use rnic_sim::fabric::{
    Crash, DropReason, Endpoint, FaultPlan, Partition, PathFaults, SimFabric, Simulation,
};
use rnic_sim::nic::{Captured, SimNic};
use rnic_sim::rng::Rng;
use rnic_sim::{SimDevice, SimDeviceConfig, GSI_QPN};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use verbs_core::{
    AccessFlags, CqHandle, Device, Errno, Error, Gid, Mr, PdHandle, Qp, QpAttr, QpAttrMask, QpCap,
    QpInitAttr, QpState, RecvWr, SendWr, SimTime, WcOpcode, WcStatus, WorkCompletion,
};

mod forge;
mod observe;
pub use forge::{
    forged_ack, forged_req, forged_send, forged_write, write_slot, FORGED_TID, FORGED_WORD,
};

/// The rdma_cm port every listener binds (the `rping`/`ib_send_bw` default, 7471).
pub const CM_PORT: u16 = 7471;
/// Bytes of one WR buffer slot in a host's memory region.
pub const SLOT_BYTES: u64 = 128;
/// Slots per region (send, receive, READ source, READ/WRITE destination).
pub const SLOTS: u64 = 32;
const SEND_OFF: u64 = 0;
const RECV_OFF: u64 = SLOT_BYTES * SLOTS;
const READ_SRC_OFF: u64 = 2 * SLOT_BYTES * SLOTS;
const DST_OFF: u64 = 3 * SLOT_BYTES * SLOTS;
const MR_BYTES: u64 = 4 * SLOT_BYTES * SLOTS;
/// 1 ms in ns.
const MS: u64 = 1_000_000;

/// Host `h`'s IPv4 address: 10.0.0.(h+1).
pub fn host_ip(h: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, (h as u8).wrapping_add(1)))
}

/// Word `k` (bytes `8k..8k+8`, little-endian) of the S6 data pattern of stream `(seed, tag)`:
/// SplitMix64's finaliser of the three. `tag` is a WR id for SEND/WRITE payloads and
/// `1 << 63 | host` for a host's READ region.
pub fn payload_word(seed: u64, tag: u64, k: u64) -> u64 {
    let mut z =
        seed ^ tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Byte `i` of the S6 data pattern of stream `(seed, tag)` (see [`payload_word`]).
pub fn payload_byte(seed: u64, tag: u64, i: u64) -> u8 {
    (payload_word(seed, tag, i >> 3) >> ((i & 7) * 8)) as u8
}

/// Fills `buf` with the pattern of `(seed, tag)` starting at pattern byte `start` (a multiple
/// of 8), a word at a time.
fn fill_pattern(seed: u64, tag: u64, start: u64, buf: &mut [u8]) {
    for (k, chunk) in buf.chunks_mut(8).enumerate() {
        let w = payload_word(seed, tag, (start >> 3) + k as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Whether `got` equals the pattern of `(seed, tag)` from pattern byte `base + skip` on (`base`
/// a multiple of 8).
fn matches_pattern(seed: u64, tag: u64, base: u64, got: &[u8], skip: usize) -> bool {
    let mut want = [0u8; SLOT_BYTES as usize + 8];
    let n = got.len() + skip;
    if n > want.len() {
        return false;
    }
    fill_pattern(seed, tag, base, &mut want[..n]);
    want[skip..n] == *got
}

/// Configuration of a [`World`].
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// Number of hosts (1..=250); host `h` is at [`host_ip`]`(h)`.
    pub hosts: usize,
    /// The one seed: the fabric's fault stream, each host's CM and device seeds and the data
    /// pattern are [`Rng::fork`]s of it.
    pub seed: u64,
    /// The network's faults (the World adds crashes to it).
    pub faults: FaultPlan,
    /// Short CM timers (packet lifetime 10, response timeout 10: DREQ timeout 12 ms, TimeWait
    /// 128 ms, cm-spec §3.2) instead of Linux's defaults (4608 ms, 512 ms).
    pub fast_timers: bool,
    /// Keep the NICs' packet captures (for [`World::captures`], pcap output). Slower.
    pub capture: bool,
    /// `rnr_retry_count` of connect/accept (0–7; 7 = retry RNR NAKs forever, as rdma_cm's
    /// default users set it).
    pub rnr_retry: u8,
    /// Entries (CQEs) of each host's send CQ and receive CQ, shared by all its QPs (default
    /// 1024). A small value lets a burst of completions overrun a CQ ([`Record::CqErr`]).
    pub cq_entries: u32,
}

impl WorldConfig {
    /// Two hosts, a perfect network, Linux's default timers, no capture.
    pub fn two_hosts(seed: u64) -> Self {
        WorldConfig {
            hosts: 2,
            seed,
            faults: FaultPlan::new(PathFaults::perfect()),
            fast_timers: false,
            capture: false,
            rnr_retry: 7,
            cq_entries: 1024,
        }
    }

    /// The same with [`fast_timers`](Self::fast_timers) on.
    pub fn fast(mut self) -> Self {
        self.fast_timers = true;
        self
    }

    /// Host `h`'s [`SimDeviceConfig::seed`]: its QPNs, lkeys/rkeys and MR addresses are
    /// seeded, as a real-time driver's are, so every scenario runs with identifiers that are
    /// not the sequential defaults. The same in every life of the host: a restart with amnesia
    /// hands out the same first QPN again, as a rebooted rxe does (the stale-connection rules
    /// of cm-spec §2.9 depend on it).
    pub fn device_seed(&self, h: usize) -> u64 {
        Rng::new(self.seed)
            .fork(0x686f_7374)
            .fork(h as u64)
            .fork(0x0064_6576) // "dev"; the CM's forks are the epochs, 0..=255
            .key()
    }

    /// Host `h`'s CM configuration in life `epoch` (a restart with amnesia gets a new seed but
    /// the same CA GUID).
    pub fn cm_config(&self, h: usize, epoch: u8) -> CmConfig {
        let rng = Rng::new(self.seed).fork(0x686f_7374).fork(h as u64);
        let base = CmConfig {
            ca_guid: 0x0002_c903_0000_0000 | (h as u64 + 1),
            seed: rng.fork(u64::from(epoch)).key(),
            ..CmConfig::default()
        };
        if self.fast_timers {
            CmConfig {
                packet_life_time: 10,
                cm_response_timeout: 10,
                ..base
            }
        } else {
            base
        }
    }
}

/// A send or receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Queue {
    /// The send queue.
    Send,
    /// The receive queue.
    Recv,
}

/// The operation of a posted WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// `IBV_WR_SEND` (signaled).
    Send,
    /// `IBV_WR_RDMA_WRITE` into the peer's destination region (signaled).
    Write,
    /// `IBV_WR_RDMA_READ` of the peer's READ region (signaled).
    Read,
    /// A receive.
    Recv,
}

/// An API call the World made, with its target (CM id or QPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `rdma_create_id` + `rdma_bind_addr` + `rdma_listen` on id `id`.
    Listen {
        /// The listening id.
        id: u32,
    },
    /// `rdma_create_id` + resolve + `rdma_create_qp` + `rdma_connect` on id `id` to `to`.
    Connect {
        /// The active id.
        id: u32,
        /// The passive host.
        to: u8,
        /// The id's QPN.
        qpn: u32,
    },
    /// `rdma_create_qp` + `rdma_accept` of passive id `id`.
    Accept {
        /// The passive id.
        id: u32,
        /// The id's QPN.
        qpn: u32,
    },
    /// `rdma_reject` of passive id `id`.
    Reject {
        /// The passive id.
        id: u32,
    },
    /// `rdma_disconnect(id)`.
    Disconnect {
        /// The id.
        id: u32,
    },
    /// `rdma_destroy_id(id)`.
    Destroy {
        /// The id.
        id: u32,
    },
    /// `rdma_ack_cm_event` of an event of id `id`.
    Ack {
        /// The id of the acked event.
        id: u32,
        /// Its type.
        event: CmEventType,
    },
    /// `ibv_post_send`/`ibv_post_recv` of `n` WRs of `op` on QP `qpn`.
    Post {
        /// The QP.
        qpn: u32,
        /// The operation.
        op: Op,
        /// WRs in the call.
        n: u32,
    },
    /// `ibv_modify_qp(qpn, ERR)`: the application's verbs teardown.
    QpToErr {
        /// The QP.
        qpn: u32,
    },
}

/// A fault the network or the World injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The fabric dropped a datagram this host sent.
    Dropped {
        /// Why.
        reason: DropReason,
        /// What it was.
        msg: WireMsg,
    },
    /// The fabric delivers a datagram this host sent twice.
    Duplicated {
        /// What it was.
        msg: WireMsg,
    },
    /// A datagram arrived at this host corrupted and its NIC dropped it (bad ICRC or
    /// undecodable: counted, never a panic); `msg` is what the damaged bytes read as.
    Corrupted {
        /// What it was (as read from the damaged bytes).
        msg: WireMsg,
    },
    /// The host crashed; it comes back with amnesia at `restart_ns` (virtual ns), or never
    /// (`None`).
    Crash {
        /// Restart time in ns.
        restart_ns: Option<u64>,
    },
}

/// A datagram as the history keeps it: the CM attribute and key fields of a MAD, or attribute
/// 0 for any other (RC) packet — whose other fields are 0, except for a packet
/// [injected](World::inject): destination QPN, PSN, opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WireMsg {
    /// CM attribute ID (REQ 0x10 … DREP 0x16, cm-spec §2.1); 0 for RC packets.
    pub attr: u16,
    /// Local Comm ID (bytes 0..4 of the CM message).
    pub local_comm_id: u32,
    /// Remote Comm ID (bytes 4..8; reserved 0 in a REQ).
    pub remote_comm_id: u32,
    /// The REJ reason (REJ bytes 10..12), 0 otherwise.
    pub reason: u16,
}

impl WireMsg {
    /// Reads a RoCEv2 UDP payload: BTH (12 bytes; dest QP in bytes 5..8) then, for QP1,
    /// DETH (8) and the MAD (header 24 bytes, attribute ID at 16..18), cm-spec §1.2–§1.4.
    pub fn parse(bytes: &[u8]) -> WireMsg {
        let be16 = |o: usize| {
            bytes
                .get(o..o + 2)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
        };
        let be32 = |o: usize| {
            bytes
                .get(o..o + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let dqp = be32(4) & 0x00ff_ffff;
        if dqp != GSI_QPN {
            return WireMsg::default();
        }
        const MAD: usize = 20;
        const DATA: usize = MAD + 24;
        let attr = be16(MAD + 16);
        WireMsg {
            attr,
            local_comm_id: be32(DATA),
            remote_comm_id: be32(DATA + 4),
            reason: if attr == cm_core::wire::CM_REJ_ATTR_ID {
                be16(DATA + 10)
            } else {
                0
            },
        }
    }

    /// The IBTA name of the attribute (`"RC"` for 0).
    pub fn name(&self) -> &'static str {
        attr_name(self.attr)
    }
}

/// The IBTA name of CM attribute `attr` (cm-spec §2.1), `"RC"` for 0.
pub fn attr_name(attr: u16) -> &'static str {
    match attr {
        0 => "RC",
        0x10 => "REQ",
        0x11 => "MRA",
        0x12 => "REJ",
        0x13 => "REP",
        0x14 => "RTU",
        0x15 => "DREQ",
        0x16 => "DREP",
        0x17 => "SIDR_REQ",
        0x18 => "SIDR_REP",
        0x19 => "LAP",
        0x1a => "APR",
        _ => "MAD?",
    }
}

/// One history record (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The host (re)started: life `epoch` of the entry begins, with this CM retry budget.
    Boot {
        /// `max_cm_retries` of the host's CM (DREQ sends = 1 + this, cm-spec §3.2).
        max_cm_retries: u8,
    },
    /// An API call and its result: 0 or the errno (positive, rdma-core's value).
    Call {
        /// What was called.
        call: Call,
        /// 0 on success, else the errno.
        errno: i32,
    },
    /// A WR a post accepted.
    Posted {
        /// The QP.
        qpn: u32,
        /// Its `wr_id` (unique in the World).
        wr_id: u64,
        /// The queue.
        queue: Queue,
        /// The operation.
        op: Op,
        /// Bytes.
        len: u32,
        /// The QP was in ERR (as the application last saw it) when posted.
        qp_err: bool,
    },
    /// A work completion the application polled.
    Completion {
        /// Local QPN.
        qpn: u32,
        /// Its `wr_id`.
        wr_id: u64,
        /// The queue it came from.
        queue: Queue,
        /// Opcode (valid on success).
        opcode: WcOpcode,
        /// Status.
        status: WcStatus,
        /// Bytes (valid on success).
        byte_len: u32,
        /// S6: the data at the destination is the data posted (true when not applicable).
        data_ok: bool,
    },
    /// A CM event the application read.
    Event {
        /// The id (CONNECT_REQUEST: the new passive id).
        id: u32,
        /// The type.
        event: CmEventType,
        /// 0, −errno or a REJ reason (cm-spec §4.7).
        status: i32,
        /// The id's Local Comm ID when the event was read (0 if none).
        comm_id: u32,
        /// For DISCONNECTED: the TimeWait of the id's QP, `ms(timeout)` in ns (cm-spec §3.2).
        timewait_ns: u64,
    },
    /// The application saw QP `qpn` in ERR (first time).
    QpErr {
        /// The QP.
        qpn: u32,
    },
    /// A CM MAD the host's NIC sent (`tx`) or received.
    Wire {
        /// Sent (true) or received.
        tx: bool,
        /// The other host (destination if sent, source if received).
        peer: u8,
        /// The message.
        msg: WireMsg,
    },
    /// A fault.
    Fault(Fault),
    /// The application read the async event `IBV_EVENT_CQ_ERR` for its CQ of `queue`: the CQ
    /// overran, the completion that did not fit and every later one aimed at it are lost, and
    /// the QP that overflowed it is in ERR (rdmavt behaviour, docs/semantics-verbs.md "CQ
    /// overrun"). Other async events are read and not recorded.
    CqErr {
        /// Which of the host's two CQs.
        queue: Queue,
    },
}

/// A record with its virtual time, host and host life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Virtual time.
    pub at: SimTime,
    /// Host index.
    pub host: u8,
    /// The host's life (0, +1 per restart with amnesia).
    pub epoch: u8,
    /// What happened.
    pub rec: Record,
}

/// The recorded history of a World: every host's records in one append-only list, in
/// recording order (non-decreasing time).
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The records.
    pub entries: Vec<Entry>,
    /// Per host: RC (non-MAD) datagrams sent.
    pub rc_packets: Vec<u64>,
    /// Whether the World reached quiescence at the end (no datagram in flight, no timer).
    pub quiescent: bool,
    /// The time from which the network was healed (liveness checks apply), if it was.
    pub healed_at: Option<SimTime>,
    /// Hosts whose application never reads CM events (the oracle skips their event checks).
    pub deaf: Vec<bool>,
    /// Hostile hosts ([`World::set_hostile`]): the oracle skips their records and takes nothing
    /// they sent as a peer's doing.
    pub hostile: Vec<bool>,
}

impl History {
    /// The records of host `h`.
    pub fn of_host(&self, h: usize) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(move |e| usize::from(e.host) == h)
    }

    /// [`WordHash`] over the canonical integer encoding of every record: platform
    /// independent, no formatting, no pointers.
    pub fn hash(&self) -> u64 {
        let mut h = WordHash::new();
        for e in &self.entries {
            hash_entry(&mut h, e);
        }
        self.finish_hash(h)
    }

    /// [`hash`](Self::hash) from `h`, the hash of the entries.
    fn finish_hash(&self, mut h: WordHash) -> u64 {
        for &n in &self.rc_packets {
            h.write_u64(n);
        }
        h.write_u8(u8::from(self.quiescent));
        h.write_u64(self.healed_at.map_or(u64::MAX, |t| t.as_nanos()));
        h.finish()
    }
}

/// The history's hash: a word-at-a-time multiply-rotate mix over little-endian integers
/// (platform independent, not cryptographic), ~8× cheaper than byte-wise FNV-1a.
#[derive(Debug, Clone, Copy)]
pub struct WordHash(u64);

impl WordHash {
    /// The initial state (the FNV-1a offset basis, for want of a better constant).
    pub fn new() -> Self {
        WordHash(0xcbf2_9ce4_8422_2325)
    }

    /// Mixes in `v`.
    pub fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    /// Mixes in `v`.
    pub fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }

    /// Mixes in `v`.
    pub fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    /// The hash (a final avalanche of the state).
    pub fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Default for WordHash {
    fn default() -> Self {
        WordHash::new()
    }
}

fn hash_wire(h: &mut WordHash, m: &WireMsg) {
    h.write_u16(m.attr);
    h.write_u64(u64::from(m.local_comm_id) << 32 | u64::from(m.remote_comm_id));
    h.write_u16(m.reason);
}

fn hash_entry(h: &mut WordHash, e: &Entry) {
    h.write_u64(e.at.as_nanos());
    h.write_u8(e.host);
    h.write_u8(e.epoch);
    match e.rec {
        Record::Boot { max_cm_retries } => {
            h.write_u8(1);
            h.write_u8(max_cm_retries);
        }
        Record::Call { call, errno } => {
            h.write_u8(2);
            let (tag, a, b) = match call {
                Call::Listen { id } => (1, id, 0),
                Call::Connect { id, to, qpn } => (2, id, qpn | u32::from(to) << 24),
                Call::Accept { id, qpn } => (3, id, qpn),
                Call::Reject { id } => (4, id, 0),
                Call::Disconnect { id } => (5, id, 0),
                Call::Destroy { id } => (6, id, 0),
                Call::Ack { id, event } => (7, id, event as u32),
                Call::Post { qpn, op, n } => (8, qpn, n << 4 | op as u32),
                Call::QpToErr { qpn } => (9, qpn, 0),
            };
            h.write_u8(tag);
            h.write_u64(u64::from(a) << 32 | u64::from(b));
            h.write_u64(errno as u64);
        }
        Record::Posted {
            qpn,
            wr_id,
            queue,
            op,
            len,
            qp_err,
        } => {
            h.write_u8(3);
            h.write_u64(u64::from(qpn) << 32 | u64::from(len));
            h.write_u64(wr_id);
            h.write_u8(queue as u8 | (op as u8) << 2 | u8::from(qp_err) << 5);
        }
        Record::Completion {
            qpn,
            wr_id,
            queue,
            opcode,
            status,
            byte_len,
            data_ok,
        } => {
            h.write_u8(4);
            h.write_u64(u64::from(qpn) << 32 | u64::from(byte_len));
            h.write_u64(wr_id);
            h.write_u8(queue as u8 | u8::from(data_ok) << 1);
            h.write_u16(opcode as u16);
            h.write_u16(status as u16);
        }
        Record::Event {
            id,
            event,
            status,
            comm_id,
            timewait_ns,
        } => {
            h.write_u8(5);
            h.write_u64(u64::from(id) << 32 | u64::from(comm_id));
            h.write_u8(event as u8);
            h.write_u64(status as u64);
            h.write_u64(timewait_ns);
        }
        Record::QpErr { qpn } => {
            h.write_u8(6);
            h.write_u64(u64::from(qpn));
        }
        Record::Wire { tx, peer, msg } => {
            h.write_u8(7);
            h.write_u8(u8::from(tx));
            h.write_u8(peer);
            hash_wire(h, &msg);
        }
        Record::Fault(f) => {
            h.write_u8(8);
            match f {
                Fault::Dropped { reason, msg } => {
                    h.write_u8(1);
                    h.write_u8(reason as u8);
                    hash_wire(h, &msg);
                }
                Fault::Duplicated { msg } => {
                    h.write_u8(2);
                    hash_wire(h, &msg);
                }
                Fault::Corrupted { msg } => {
                    h.write_u8(4);
                    hash_wire(h, &msg);
                }
                Fault::Crash { restart_ns } => {
                    h.write_u8(3);
                    h.write_u64(restart_ns.map_or(u64::MAX, |t| t));
                }
            }
        }
        Record::CqErr { queue } => {
            h.write_u8(9);
            h.write_u8(queue as u8);
        }
    }
}

fn errno_name(e: i32) -> String {
    match e {
        0 => "0".into(),
        22 => "EINVAL".into(),
        16 => "EBUSY".into(),
        _ => format!("errno {e}"),
    }
}

impl fmt::Display for Entry {
    /// One line: time in µs, host.life, what happened.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.at.as_nanos() as f64 / 1000.0;
        write!(f, "{us:>14.3}µs host {}.{} ", self.host, self.epoch)?;
        match self.rec {
            Record::Boot { max_cm_retries } => write!(f, "boot (max_cm_retries {max_cm_retries})"),
            Record::Call { call, errno } => write!(f, "call {call:?} -> {}", errno_name(errno)),
            Record::Posted {
                qpn,
                wr_id,
                op,
                len,
                qp_err,
                ..
            } => write!(
                f,
                "post {op:?} wr {wr_id} on QP {qpn:#x}, {len} B{}",
                if qp_err { " (QP in ERR)" } else { "" }
            ),
            Record::Completion {
                qpn,
                wr_id,
                queue,
                opcode,
                status,
                byte_len,
                data_ok,
            } => write!(
                f,
                "wc {queue:?} wr {wr_id} QP {qpn:#x} {status:?} {opcode:?} {byte_len} B{}",
                if data_ok { "" } else { " DATA MISMATCH" }
            ),
            Record::Event {
                id,
                event,
                status,
                comm_id,
                ..
            } => write!(
                f,
                "event {event:?} id {id} status {status} comm {comm_id:#010x}"
            ),
            Record::QpErr { qpn } => write!(f, "QP {qpn:#x} in ERR"),
            Record::Wire { tx, peer, msg } if msg.attr == 0 => write!(
                f,
                "{} RC opcode {:#04x} {} host {peer} QP {:#x} PSN {:#x}",
                if tx { "sent" } else { "recv" },
                msg.reason,
                if tx { "to" } else { "from" },
                msg.local_comm_id,
                msg.remote_comm_id
            ),
            Record::Wire { tx, peer, msg } => write!(
                f,
                "{} {} {} host {peer} local {:#010x} remote {:#010x}{}",
                if tx { "sent" } else { "recv" },
                msg.name(),
                if tx { "to" } else { "from" },
                msg.local_comm_id,
                msg.remote_comm_id,
                if msg.reason != 0 {
                    format!(" reason {}", msg.reason)
                } else {
                    String::new()
                }
            ),
            Record::Fault(Fault::Dropped { reason, msg }) => {
                write!(f, "fault: {} dropped ({})", msg.name(), reason.name())
            }
            Record::Fault(Fault::Duplicated { msg }) => {
                write!(f, "fault: {} duplicated", msg.name())
            }
            Record::Fault(Fault::Corrupted { msg }) => {
                write!(
                    f,
                    "fault: {} arrived corrupted, dropped by the NIC",
                    msg.name()
                )
            }
            Record::Fault(Fault::Crash { restart_ns }) => match restart_ns {
                Some(t) => write!(f, "fault: crash, restart with amnesia at {} µs", t / 1000),
                None => write!(f, "fault: crash for good"),
            },
            Record::CqErr { queue } => write!(f, "async event CQ_ERR: {queue:?} CQ overrun"),
        }
    }
}

/// A host as a fabric endpoint: the [`Host`] plus the cheap wire tap (see the module docs).
#[derive(Debug)]
pub struct Node {
    host: Host,
    /// (time, direction, other host, message) since the World last drained it.
    wire: Vec<(SimTime, Dir, u8, WireMsg)>,
    /// Something may have changed since the World last observed the host (`world/observe.rs`).
    dirty: bool,
    /// `host.poll_timeout()` as last asked (the simulation asks several times per event);
    /// `None` once the host may have changed: every `&mut` path to it clears it.
    timeout: Cell<Option<Option<SimTime>>>,
}

/// What the wire tap saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Tx,
    Rx,
    /// Received, and dropped by the NIC as undecodable.
    RxDropped,
}

impl Node {
    /// The host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The host, mutably.
    pub fn host_mut(&mut self) -> &mut Host {
        self.touch();
        &mut self.host
    }

    /// Marks the host changed: observed again, its timer asked again.
    fn touch(&mut self) {
        self.dirty = true;
        self.timeout.set(None);
    }
}

impl Endpoint for Node {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        self.touch();
        let msg = WireMsg::parse(&bytes);
        let bad_before = self.host.nic().datagram_counters().rx_decode_errors;
        self.host.handle_datagram(now, src, bytes);
        let dropped = self.host.nic().datagram_counters().rx_decode_errors != bad_before;
        if msg.attr != 0 || dropped {
            let dir = if dropped { Dir::RxDropped } else { Dir::Rx };
            self.wire.push((now, dir, host_index(src.ip()) as u8, msg));
        }
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        // A transmit pass can complete WRs (and move QPs to ERR) without sending anything, and
        // arms timers; without work it sends and changes nothing (asked after every event).
        if !self.host.nic().device().transmit_pending() {
            return None;
        }
        self.touch();
        let (dst, bytes) = self.host.poll_transmit(now)?;
        self.wire.push((
            now,
            Dir::Tx,
            host_index(dst.ip()) as u8,
            WireMsg::parse(&bytes),
        ));
        Some((dst, bytes))
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        if let Some(t) = self.timeout.get() {
            return t;
        }
        let t = self.host.poll_timeout();
        self.timeout.set(Some(t));
        t
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.touch();
        self.host.handle_timeout(now)
    }

    fn addr(&self) -> SocketAddr {
        self.host.addr()
    }
}

/// How a host's application treats its CM events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventMode {
    /// Reads every event at once and acks it at once.
    AckAtOnce,
    /// Reads at once, acks `ns` later (destroy meanwhile returns EBUSY).
    AckAfter(u64),
    /// Reads, never acks.
    NeverAck,
    /// Never reads events (they stay queued; not recorded). librdmacm's fetch-time work never
    /// happens either: an active QP stays in INIT, no RTU leaves, a REJECTED leaves the QP alone.
    NeverRead,
}

/// One end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// Host index.
    pub host: usize,
    /// The host's life the end belongs to.
    pub epoch: u8,
    /// The rdma_cm id.
    pub id: CmIdHandle,
    /// Its QP.
    pub qp: Qp,
    /// The peer host (for RDMA READ/WRITE targets).
    pub peer: usize,
}

/// A connection: the end that called connect and the end that accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// The active end.
    pub active: End,
    /// The passive end.
    pub passive: End,
}

/// Errors of the World's convenience calls.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// A verbs or rdma_cm call failed.
    #[error("{0}")]
    Verbs(#[from] Error),
    /// The awaited event did not come before quiescence or the time limit.
    #[error("host {host}: no {what} by {at}")]
    Timeout {
        /// The host waited on.
        host: usize,
        /// What was awaited.
        what: String,
        /// When the World gave up.
        at: SimTime,
    },
    /// No such host.
    #[error("no host {0}")]
    NoHost(usize),
}

/// The oracle's verdict as an error (`w.check()?`). Its `Debug` is the readable report too,
/// so that `w.check().unwrap()` and a test returning the error print the violations and
/// their records.
pub struct Violations(pub Vec<Violation>);

impl fmt::Debug for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} oracle violation(s):", self.0.len())?;
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in &self.0 {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

/// The application's objects on one host.
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
}

/// A WR not yet completed: what to check when it does.
#[derive(Debug, Clone, Copy)]
struct Pending {
    op: Op,
    off: u64,
    len: u32,
    peer: usize,
    epoch: u8,
    peer_epoch: u8,
}

/// How long [`World::run_to_quiescence`] may run past now before giving up: 400 s of virtual
/// time (the default DREQ give-up is ~74 s, TimeWait 0.5 s).
pub const QUIESCE_LIMIT_NS: u64 = 400_000 * MS;

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
    acks: Vec<(SimTime, usize, u8, CmEvent)>,
    next_wr: u64,
    data_seed: u64,
    captures: Vec<Captured>,
    wcs: Vec<WorkCompletion>,
}

fn new_node(cfg: &WorldConfig, h: usize, epoch: u8) -> Result<Node, Error> {
    let mut dcfg = SimDeviceConfig::new("sim", Gid::from_ip(host_ip(h)));
    dcfg.seed = cfg.device_seed(h);
    let dev = SimDevice::new(dcfg);
    let mut nic = SimNic::at_gid(dev);
    if cfg.capture {
        nic.start_capture();
    }
    Ok(Node {
        host: Host::new(nic, cfg.cm_config(h, epoch))?,
        wire: Vec::new(),
        dirty: true,
        timeout: Cell::new(None),
    })
}

fn errno_of<T>(r: &Result<T, Error>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno as i32,
    }
}

impl World {
    /// A World of `cfg.hosts` hosts, each with an application (event channel, PD, a 16 KiB MR
    /// with local and remote access, a send CQ and a receive CQ).
    ///
    /// # Errors
    /// A device or CM call failing (not expected on the simulated device).
    pub fn new(cfg: WorldConfig) -> Result<World, Error> {
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
            event_index: BTreeSet::new(),
            events_indexed: 0,
            // Sized for a generated scenario's datagrams: grown once or not at all.
            tx_meta: (0..n).map(|_| Vec::with_capacity(32)).collect(),
            tx_matched: vec![0; n],
            packets: Vec::with_capacity(64),
            trace_cursor: 0,
            pending: BTreeMap::new(),
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
        let node = self.node_mut(h)?;
        let (cm, dev) = node.host.split();
        let ch = cm.create_event_channel();
        let pd = dev.alloc_pd()?;
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let mr = dev.reg_mr(pd, MR_BYTES as usize, access)?;
        let send_cq = dev.create_cq(cqe, None)?;
        let recv_cq = dev.create_cq(cqe, None)?;
        let at = self.sim.now();
        self.push(at, h, epoch, Record::Boot { max_cm_retries });
        Ok(App {
            ch,
            pd,
            mr,
            send_cq,
            recv_cq,
            epoch,
            mode: EventMode::AckAtOnce,
            listen: None,
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

    // ---- access for power users ----

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

    // ---- running ----

    /// The next time something happens: a simulation event or a deferred ack.
    pub fn next_wake(&mut self) -> Option<SimTime> {
        let ev = self.sim.next_event_time();
        // That flushed the hosts' transmit queues at the current time: record those sends now,
        // so the history stays in time order.
        for h in 0..self.apps.len() {
            self.drain_wire(h);
        }
        self.match_trace();
        let ack = self.acks.iter().map(|a| a.0).min();
        match (ev, ack) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs every event up to and including `deadline`, observing after each; the clock ends
    /// at `deadline`.
    pub fn run_until(&mut self, deadline: SimTime) {
        self.observe();
        while let Some(t) = self.next_wake().filter(|&t| t <= deadline) {
            self.sim.run_until(t);
            self.observe();
        }
        self.sim.run_until(deadline);
        self.observe();
    }

    /// Runs for `ns` nanoseconds of virtual time.
    pub fn run_for(&mut self, ns: u64) {
        let t = self.now().plus_nanos(ns);
        self.run_until(t);
    }

    /// Runs one step: the next event (or deferred ack), if it is not after `limit`. Returns
    /// false when there is none.
    pub fn step(&mut self, limit: SimTime) -> bool {
        match self.next_wake() {
            Some(t) if t <= limit => {
                self.sim.run_until(t);
                self.observe();
                true
            }
            _ => false,
        }
    }

    /// Runs every event up to and including `t` (normally [`next_wake`](Self::next_wake)'s
    /// answer) and observes once, without asking for the next event again.
    pub fn advance_to(&mut self, t: SimTime) {
        self.sim.run_until(t);
        self.observe();
    }

    /// Runs until nothing is left (no datagram in flight, no timer armed, no deferred ack) or
    /// [`QUIESCE_LIMIT_NS`] has passed; returns whether it got quiescent (also kept in
    /// [`History::quiescent`]).
    pub fn run_to_quiescence(&mut self) -> bool {
        let limit = self.now().plus_nanos(QUIESCE_LIMIT_NS);
        self.observe();
        while self.step(limit) {}
        let q = self.next_wake().is_none();
        self.history.quiescent = q;
        q
    }

    /// Runs until host `h` has read an event of `kind` on `id` (any id if `None`); returns
    /// the id.
    ///
    /// # Errors
    /// [`WorldError::Timeout`] if it does not come before quiescence.
    pub fn wait_event(
        &mut self,
        h: usize,
        id: Option<CmIdHandle>,
        kind: CmEventType,
    ) -> Result<CmIdHandle, WorldError> {
        self.wait_event_from(0, h, id, kind)
    }

    /// Files the CM events recorded since the last call in `event_index`.
    fn index_events(&mut self) {
        let entries = self.history.entries.iter().enumerate();
        for (index, e) in entries.skip(self.events_indexed) {
            if let Record::Event { id, event, .. } = e.rec {
                self.event_index.insert((e.host, e.epoch, id, event, index));
            }
        }
        self.events_indexed = self.history.entries.len();
    }

    /// [`wait_event`](Self::wait_event), looking only at history entries from index `from`
    /// on (e.g. `history().entries.len()` before a call, to skip older events).
    ///
    /// # Errors
    /// [`WorldError::Timeout`] if it does not come before quiescence.
    pub fn wait_event_from(
        &mut self,
        mut from: usize,
        h: usize,
        id: Option<CmIdHandle>,
        kind: CmEventType,
    ) -> Result<CmIdHandle, WorldError> {
        let limit = self.now().plus_nanos(QUIESCE_LIMIT_NS);
        loop {
            let epoch = self.epoch(h);
            let found = if let Some(id) = id {
                self.index_events();
                let key = |i| (h as u8, epoch, id.0, kind, i);
                self.event_index
                    .range(key(from)..=key(usize::MAX))
                    .next()
                    .map(|_| id)
            } else {
                self.history.entries[from..]
                    .iter()
                    .find_map(|e| match e.rec {
                        Record::Event { id: i, event, .. }
                            if usize::from(e.host) == h && e.epoch == epoch && event == kind =>
                        {
                            Some(CmIdHandle(i))
                        }
                        _ => None,
                    })
            };
            if let Some(i) = found {
                return Ok(i);
            }
            from = self.history.entries.len();
            if !self.step(limit) {
                return Err(WorldError::Timeout {
                    host: h,
                    what: format!("{kind:?}"),
                    at: self.now(),
                });
            }
        }
    }

    // ---- the application's calls ----

    fn cm_call<R>(
        &mut self,
        h: usize,
        f: impl FnOnce(&mut RdmaCm, &mut SimDevice, SimTime) -> R,
    ) -> Result<R, Error> {
        let now = self.sim.now();
        let node = self.node_mut(h)?;
        let (cm, dev) = node.host.split();
        Ok(f(cm, dev, now))
    }

    fn qp_init(&self, h: usize) -> QpInitAttr {
        let a = &self.apps[h];
        QpInitAttr::rc(a.send_cq, a.recv_cq, QpCap::uniform(64, 1, 0), true)
    }

    fn conn_param(&self) -> ConnParam {
        ConnParam {
            rnr_retry_count: self.cfg.rnr_retry.min(7),
            ..ConnParam::rping_defaults()
        }
    }

    /// Host `h` listens on [`CM_PORT`] (once; later calls return the same id).
    ///
    /// # Errors
    /// The rdma_cm call's error (recorded too).
    pub fn listen(&mut self, h: usize) -> Result<CmIdHandle, Error> {
        self.observe();
        if let Some(id) = self.apps.get(h).and_then(|a| a.listen) {
            return Ok(id);
        }
        let ch = self
            .apps
            .get(h)
            .map(|a| a.ch)
            .ok_or_else(|| Error::new(Errno::EINVAL, "no host"))?;
        let r = self.cm_call(h, |cm, _, _| {
            let id = cm.create_id(ch, RdmaPortSpace::Tcp)?;
            cm.bind_addr(id, SocketAddr::new(host_ip(h), CM_PORT))?;
            cm.listen(id, 8)?;
            Ok::<_, Error>(id)
        })?;
        let errno = errno_of(&r);
        let id = r.as_ref().map_or(0, |i| i.0);
        self.record(
            h,
            Record::Call {
                call: Call::Listen { id },
                errno,
            },
        );
        let id = r?;
        self.apps[h].listen = Some(id);
        self.observe();
        Ok(id)
    }

    /// Host `h` creates an id, resolves `to`:[`CM_PORT`], creates its QP (INIT) and connects
    /// ([`resolve`](Self::resolve) then [`connect_resolved`](Self::connect_resolved)).
    ///
    /// # Errors
    /// The first failing rdma_cm call's error (the connect call's errno is recorded).
    pub fn connect(&mut self, h: usize, to: usize) -> Result<End, Error> {
        let e = self.resolve(h, to)?;
        self.connect_call(e)?;
        Ok(e)
    }

    /// Host `h` gives passive id `id` (from a CONNECT_REQUEST) a QP and accepts. The peer
    /// host is the id's peer address (`rdma_get_peer_addr`).
    ///
    /// # Errors
    /// The rdma_cm call's error (recorded).
    pub fn accept(&mut self, h: usize, id: CmIdHandle) -> Result<End, Error> {
        self.observe();
        let peer = self
            .host(h)
            .and_then(|host| host.cm().addrs(id))
            .and_then(|(_, dst)| dst)
            .map_or(h, |a| host_index(a.ip()));
        let (pd, init) = (self.apps[h].pd, self.qp_init(h));
        let param = self.conn_param();
        let (qp, res) = self.cm_call(h, |cm, dev, now| {
            let qp = cm.create_qp(dev, id, pd, &init)?;
            Ok::<_, Error>((qp, cm.accept(dev, now, id, &param)))
        })??;
        let epoch = self.apps[h].epoch;
        self.qps.insert((h, epoch, qp.qp_num), (qp, false));
        self.record(
            h,
            Record::Call {
                call: Call::Accept {
                    id: id.0,
                    qpn: qp.qp_num,
                },
                errno: errno_of(&res),
            },
        );
        res?;
        self.observe();
        Ok(End {
            host: h,
            epoch,
            id,
            qp,
            peer,
        })
    }

    /// Host `h` rejects passive id `id` (REJ 28).
    ///
    /// # Errors
    /// The rdma_cm call's error (recorded).
    pub fn reject(&mut self, h: usize, id: CmIdHandle) -> Result<(), Error> {
        self.observe();
        let r = self.cm_call(h, |cm, dev, now| cm.reject(dev, now, id, &[]))?;
        self.record(
            h,
            Record::Call {
                call: Call::Reject { id: id.0 },
                errno: errno_of(&r),
            },
        );
        self.observe();
        r
    }

    /// `p` listens, `a` connects, `p` accepts the request; runs until both ends are
    /// ESTABLISHED.
    ///
    /// # Errors
    /// A failing call, or [`WorldError::Timeout`] if an event does not come.
    pub fn establish(&mut self, a: usize, p: usize) -> Result<Conn, WorldError> {
        self.listen(p)?;
        let start = self.history.entries.len();
        let active = self.connect(a, p)?;
        let pid = self.wait_event_from(start, p, None, CmEventType::ConnectRequest)?;
        let passive = self.accept(p, pid)?;
        self.wait_event(a, Some(active.id), CmEventType::Established)?;
        self.wait_event(p, Some(passive.id), CmEventType::Established)?;
        Ok(Conn { active, passive })
    }

    /// `rdma_disconnect` of `e`'s id (recorded with its errno).
    ///
    /// # Errors
    /// What rdma_disconnect returns (cm-spec §4.4); EINVAL for an `End` of an earlier life
    /// of its host (not recorded).
    pub fn disconnect(&mut self, e: End) -> Result<(), Error> {
        self.observe();
        self.current(e)?;
        let r = self.cm_call(e.host, |cm, dev, now| cm.disconnect(dev, now, e.id))?;
        self.record(
            e.host,
            Record::Call {
                call: Call::Disconnect { id: e.id.0 },
                errno: errno_of(&r),
            },
        );
        self.refresh_qp_states();
        self.observe();
        r
    }

    /// `rdma_destroy_id` of `e`'s id (recorded; see [`destroy_id`](Self::destroy_id)).
    ///
    /// # Errors
    /// EBUSY with un-acked events, EINVAL for an unknown id or an `End` of an earlier life.
    pub fn destroy(&mut self, e: End) -> Result<(), Error> {
        self.current(e)?;
        self.destroy_id(e.host, e.id)
    }

    /// The application's verbs teardown of `e`'s QP: `ibv_modify_qp(ERR)` (flushes what is
    /// posted).
    ///
    /// # Errors
    /// The modify's error; EINVAL for an `End` of an earlier life (not recorded).
    pub fn qp_to_err(&mut self, e: End) -> Result<(), Error> {
        self.observe();
        self.current(e)?;
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let r = self.cm_call(e.host, |_, dev, _| {
            dev.modify_qp(e.qp.handle, &attr, QpAttrMask::STATE)
        })?;
        self.record(
            e.host,
            Record::Call {
                call: Call::QpToErr { qpn: e.qp.qp_num },
                errno: errno_of(&r),
            },
        );
        self.refresh_qp_states();
        self.observe();
        r
    }

    /// Posts `n` receives of [`SLOT_BYTES`] on `e`'s QP; returns their `wr_id`s.
    pub fn post_recvs(&mut self, e: End, n: usize) -> Vec<u64> {
        self.post(e, Op::Recv, n)
    }

    /// `Ok` if `e` belongs to its host's current life: an [`End`] kept from before a crash
    /// and restart names an id and QP of the old life, whose handles a new life may reuse.
    ///
    /// # Errors
    /// EINVAL (not recorded: the call never reaches the host) for an unknown host or an
    /// earlier life.
    fn current(&self, e: End) -> Result<(), Error> {
        match self.apps.get(e.host) {
            Some(a) if a.epoch == e.epoch => Ok(()),
            _ => Err(Error::new(
                Errno::EINVAL,
                "End of an earlier life of its host",
            )),
        }
    }

    /// Posts `n` signaled WRs of `op` on `e`'s QP (SEND/WRITE: 8 bytes of `wr_id` + pattern,
    /// 16..=128 bytes; READ: a slot of the peer's READ region). The call and each accepted WR
    /// are recorded; returns the accepted `wr_id`s (a refused post returns fewer).
    pub fn post(&mut self, e: End, op: Op, n: usize) -> Vec<u64> {
        self.observe();
        if self.current(e).is_err() {
            return Vec::new();
        }
        let seed = self.data_seed;
        let ids = self.next_wr..self.next_wr + n as u64;
        self.next_wr += n as u64;
        let mr = self.apps[e.host].mr;
        let peer = self.apps.get(e.peer).copied();
        let peer_epoch = peer.map_or(0, |p| p.epoch);
        let slot = |id: u64| (id % SLOTS) * SLOT_BYTES;
        let len_of = |id: u64| 16 + (id * 37 % (SLOT_BYTES - 15)) as u32;
        // Where WR `id` lands (what `check_data` reads) and its length.
        let info = |id: u64| match op {
            Op::Recv => (RECV_OFF + slot(id), SLOT_BYTES as u32),
            Op::Send => (0, len_of(id)),
            Op::Write | Op::Read => (DST_OFF + slot(id), len_of(id)),
        };
        if op == Op::Read {
            // The READ source: the peer's slot holds the pattern of (seed, peer) at the slot's
            // offset (filled here, before the READ can reach it, not at boot: cheaper).
            if let (Some(p), Ok(node)) = (peer, self.node_mut(e.peer)) {
                let dev = node.host.nic_mut().device_mut();
                for id in ids.clone() {
                    let mut buf = [0u8; SLOT_BYTES as usize];
                    fill_pattern(seed, 1 << 63 | e.peer as u64, slot(id), &mut buf);
                    let _ = dev.mr_write(p.mr.handle, READ_SRC_OFF + slot(id), &buf);
                }
            }
        }
        let Ok(node) = self.node_mut(e.host) else {
            return Vec::new();
        };
        let nic = node.host.nic_mut();
        let r = match op {
            Op::Recv => {
                let wrs: Vec<RecvWr> = ids
                    .clone()
                    .map(|id| RecvWr::new(id, vec![mr.sge(RECV_OFF + slot(id), SLOT_BYTES as u32)]))
                    .collect();
                nic.post_recv(e.qp.handle, &wrs)
            }
            Op::Send | Op::Write => {
                let mut wrs = Vec::with_capacity(n);
                for id in ids.clone() {
                    let len = len_of(id);
                    let mut buf = [0u8; SLOT_BYTES as usize];
                    let buf = &mut buf[..len as usize];
                    fill_pattern(seed, id, 0, buf);
                    buf[..8].copy_from_slice(&id.to_le_bytes());
                    let _ = nic.mr_write(mr.handle, SEND_OFF + slot(id), buf);
                    let sge = vec![mr.sge(SEND_OFF + slot(id), len)];
                    if op == Op::Send {
                        wrs.push(SendWr::send(id, sge));
                    } else {
                        let (addr, rkey) =
                            peer.map_or((0, 0), |p| (p.mr.addr + DST_OFF + slot(id), p.mr.rkey));
                        wrs.push(SendWr::rdma_write(id, sge, addr, rkey));
                    }
                }
                nic.post_send(e.qp.handle, &wrs)
            }
            Op::Read => {
                let wrs: Vec<SendWr> = ids
                    .clone()
                    .map(|id| {
                        let len = len_of(id);
                        let (addr, rkey) = peer
                            .map_or((0, 0), |p| (p.mr.addr + READ_SRC_OFF + slot(id), p.mr.rkey));
                        SendWr::rdma_read(id, vec![mr.sge(DST_OFF + slot(id), len)], addr, rkey)
                    })
                    .collect();
                nic.post_send(e.qp.handle, &wrs)
            }
        };
        let (accepted, errno) = match &r {
            Ok(()) => (n, 0),
            Err(pe) => (pe.bad_wr.min(n), pe.errno() as i32),
        };
        self.record(
            e.host,
            Record::Call {
                call: Call::Post {
                    qpn: e.qp.qp_num,
                    op,
                    n: n as u32,
                },
                errno,
            },
        );
        let qp_err = self.qp_in_err(e.host, e.qp.qp_num);
        let queue = if op == Op::Recv {
            Queue::Recv
        } else {
            Queue::Send
        };
        for id in ids.clone().take(accepted) {
            let (off, len) = info(id);
            self.pending.insert(
                id,
                Pending {
                    op,
                    off,
                    len,
                    peer: e.peer,
                    epoch: e.epoch,
                    peer_epoch,
                },
            );
            self.record(
                e.host,
                Record::Posted {
                    qpn: e.qp.qp_num,
                    wr_id: id,
                    queue,
                    op,
                    len,
                    qp_err,
                },
            );
        }
        self.refresh_qp_states();
        self.observe();
        ids.take(accepted).collect()
    }

    /// Crashes host `h` now; with `restart_after_ns`, it comes back that much later with
    /// amnesia (a fresh device and CM with the same address and CA GUID, so its first QP
    /// reuses the first QPN; a new CM seed; a new application). Without, it stays down.
    ///
    /// # Errors
    /// Creating the new host's objects failed.
    pub fn crash(&mut self, h: usize, restart_after_ns: Option<u64>) -> Result<(), Error> {
        self.observe();
        let now = self.now();
        let restart = restart_after_ns.map(|d| now.plus_nanos(d.max(1)));
        self.sim.fabric.plan_mut().crashes.push(Crash {
            host: host_ip(h),
            at: now,
            restart,
        });
        self.record(
            h,
            Record::Fault(Fault::Crash {
                restart_ns: restart.map(|t| t.as_nanos()),
            }),
        );
        if restart.is_some() {
            let epoch = self.apps[h].epoch.wrapping_add(1);
            let node = new_node(&self.cfg, h, epoch)?;
            *self.node_mut(h)? = node;
            let mode = self.apps[h].mode;
            self.apps[h] = self.create_app(h, epoch)?;
            self.apps[h].mode = mode;
        }
        Ok(())
    }

    /// The applications' exit: runs to quiescence, then every live host moves each of its QPs
    /// to ERR (what `ibv_destroy_qp` or process exit does: what is still posted is flushed),
    /// then runs to quiescence again. Returns whether it got quiescent.
    pub fn teardown(&mut self) -> bool {
        self.run_to_quiescence();
        for h in 0..self.apps.len() {
            if !self.is_up(h) {
                continue;
            }
            let epoch = self.epoch(h);
            for qp in self.qps_of(h) {
                let e = End {
                    host: h,
                    epoch,
                    id: CmIdHandle(0),
                    qp,
                    peer: h,
                };
                let _ = self.qp_to_err(e);
            }
        }
        self.run_to_quiescence()
    }

    /// [`teardown`](Self::teardown), then checks the whole history with the
    /// [`oracle`] (S1–S7; L1–L3 too if the World was [healed](Self::heal)).
    ///
    /// # Errors
    /// The violations found, or an S2/L3 violation if the World did not get quiescent.
    pub fn check(&mut self) -> Result<(), Violations> {
        self.teardown();
        self.check_now()
    }

    /// Checks the history as it is, without running anything.
    ///
    /// # Errors
    /// The violations found.
    pub fn check_now(&self) -> Result<(), Violations> {
        let v = oracle::check(&self.history);
        if v.is_empty() {
            Ok(())
        } else {
            Err(Violations(v))
        }
    }

    /// Every QP of host `h`'s current life (for teardown).
    pub fn qps_of(&self, h: usize) -> Vec<Qp> {
        let epoch = self.epoch(h);
        self.qps
            .range((h, epoch, 0)..=(h, epoch, u32::MAX))
            .map(|(_, q)| q.0)
            .collect()
    }

    /// Marks the network healed from now on: loss, duplication and corruption off, every
    /// partition healed now (delays stay). Liveness checks apply from here.
    pub fn heal(&mut self) {
        let now = self.now();
        let plan = self.sim.fabric.plan_mut();
        plan.default.loss = 0.0;
        plan.default.duplicate = 0.0;
        plan.default.corrupt = 0.0;
        for p in plan.paths.values_mut() {
            p.loss = 0.0;
            p.duplicate = 0.0;
            p.corrupt = 0.0;
        }
        for p in &mut plan.partitions {
            if p.heal.is_none_or(|t| t > now) {
                p.heal = Some(now);
            }
        }
        self.history.healed_at = Some(now);
    }
    // ---- more calls and inspection (the regression gallery, tests/tests/gallery.rs) ----

    /// Host `h`'s first half of [`connect`](Self::connect): `rdma_create_id`,
    /// `rdma_resolve_addr`/`rdma_resolve_route` to `to`:[`CM_PORT`] and `rdma_create_qp` (QP
    /// in INIT), without connecting. The ADDR/ROUTE_RESOLVED events are read by the next call
    /// or run; the calls themselves are not recorded (the oracle knows the id from its events).
    ///
    /// # Errors
    /// The first failing call's error.
    pub fn resolve(&mut self, h: usize, to: usize) -> Result<End, Error> {
        self.observe();
        let app = *self
            .apps
            .get(h)
            .ok_or_else(|| Error::new(Errno::EINVAL, format!("no host {h}")))?;
        let init = self.qp_init(h);
        let (id, qp) = self.cm_call(h, |cm, dev, _| {
            let id = cm.create_id(app.ch, RdmaPortSpace::Tcp)?;
            cm.resolve_addr(id, None, SocketAddr::new(host_ip(to), CM_PORT))?;
            cm.resolve_route(id)?;
            let qp = cm.create_qp(dev, id, app.pd, &init)?;
            Ok::<_, Error>((id, qp))
        })??;
        self.qps.insert((h, app.epoch, qp.qp_num), (qp, false));
        Ok(End {
            host: h,
            epoch: app.epoch,
            id,
            qp,
            peer: to,
        })
    }

    /// `rdma_connect` of an end made by [`resolve`](Self::resolve) (recorded with its errno).
    ///
    /// # Errors
    /// What rdma_connect returns (EINVAL unless the id's route is resolved, cm-spec §4.3).
    pub fn connect_resolved(&mut self, e: End) -> Result<(), Error> {
        self.observe();
        self.connect_call(e)
    }

    fn connect_call(&mut self, e: End) -> Result<(), Error> {
        let param = self.conn_param();
        let res = self.cm_call(e.host, |cm, dev, now| cm.connect(dev, now, e.id, &param))?;
        self.record(
            e.host,
            Record::Call {
                call: Call::Connect {
                    id: e.id.0,
                    to: e.peer as u8,
                    qpn: e.qp.qp_num,
                },
                errno: errno_of(&res),
            },
        );
        res?;
        self.observe();
        Ok(())
    }

    /// `rdma_destroy_id` of host `h`'s id `id` (recorded), e.g. a listener or a passive id
    /// whose CONNECT_REQUEST was not accepted. Destroying the listener of
    /// [`listen`](Self::listen) lets a later `listen` create a new one.
    ///
    /// # Errors
    /// EBUSY with un-acked events of the id (cm-spec §4.6, TESTING.md behaviour choices),
    /// EINVAL for an unknown id.
    pub fn destroy_id(&mut self, h: usize, id: CmIdHandle) -> Result<(), Error> {
        self.observe();
        let r = self.cm_call(h, |cm, dev, now| cm.destroy_id(dev, now, id))?;
        self.record(
            h,
            Record::Call {
                call: Call::Destroy { id: id.0 },
                errno: errno_of(&r),
            },
        );
        if r.is_ok() {
            if let Some(a) = self.apps.get_mut(h).filter(|a| a.listen == Some(id)) {
                a.listen = None;
            }
        }
        self.observe();
        r
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

    /// Cuts the network from host `from` to host `to` (one way; call twice for both) from now
    /// for `for_ns` nanoseconds of virtual time, or until [`heal`](Self::heal) if `None`.
    /// Virtual time makes a window around one instant drop exactly the datagrams sent in it.
    pub fn partition_one_way(&mut self, from: usize, to: usize, for_ns: Option<u64>) {
        let now = self.now();
        let heal = for_ns.map(|d| now.plus_nanos(d));
        self.sim
            .fabric
            .plan_mut()
            .partitions
            .push(Partition::one_way(host_ip(from), host_ip(to), now, heal));
    }
}

fn host_index(ip: IpAddr) -> usize {
    match ip {
        IpAddr::V4(v4) => usize::from(v4.octets()[3]).saturating_sub(1),
        IpAddr::V6(_) => 0,
    }
}
