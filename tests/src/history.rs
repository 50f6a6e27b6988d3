//! The recorded [`History`] and its hash ([`WordHash`] over the records' integer encoding),
//! with the types of its records: [`Record`] and [`Entry`] (`record`), [`Fault`], the
//! [`Call`]s, [`Op`]s and [`Queue`]s of the application (`ops`) and the datagrams as kept
//! ([`WireMsg`]).
//!
//! A leaf of the testbed: the [`World`](crate::world::World) records a history, the
//! [`oracle`](crate::oracle) checks one, and neither is named here (the World re-exports
//! these types, `rnic_testbed::world::Record` is this module's [`Record`]).

mod fault;
mod ops;
mod record;
mod wire;

pub use fault::Fault;
pub use ops::{Call, Op, Queue, SRQ_QPN};
pub use record::{AsyncOn, Entry, Record};
pub use wire::{attr_name, WireMsg};

use verbs_core::SimTime;

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
    ///
    /// [`World::set_hostile`]: crate::world::World::set_hostile
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
    pub(crate) fn finish_hash(&self, mut h: WordHash) -> u64 {
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

pub(crate) fn hash_entry(h: &mut WordHash, e: &Entry) {
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
                Call::Notify { id } => (10, id, 0),
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
                Fault::TargetedDrop { msg, nth } => {
                    h.write_u8(5);
                    h.write_u64(u64::from(nth));
                    hash_wire(h, &msg);
                }
                Fault::Delayed { msg, nth, by_ns } => {
                    h.write_u8(6);
                    h.write_u64(u64::from(nth));
                    h.write_u64(by_ns);
                    hash_wire(h, &msg);
                }
                Fault::Crash { restart_ns } => {
                    h.write_u8(3);
                    h.write_u64(restart_ns.map_or(u64::MAX, |t| t));
                }
                Fault::DeviceRemoved { rc_sent } => {
                    h.write_u8(7);
                    h.write_u64(rc_sent);
                }
                Fault::AddressChange => h.write_u8(8),
            }
        }
        Record::CqErr { queue } => {
            h.write_u8(9);
            h.write_u8(queue as u8);
        }
        Record::Async { event, on } => {
            h.write_u8(10);
            h.write_u8(event as u8);
            let (tag, v) = match on {
                AsyncOn::Qp(qpn) => (1, u64::from(qpn)),
                AsyncOn::Cq(q) => (2, q as u64),
                AsyncOn::Srq => (3, 0),
                AsyncOn::Device => (4, 0),
                AsyncOn::Other => (5, 0),
            };
            h.write_u64(tag << 32 | v);
        }
    }
}
