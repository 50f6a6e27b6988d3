//! The rsocket protocol between two librnic processes: what travels in the connection's
//! private data, in each message's immediate data and in control messages.
//!
//! Both ends of an rsocket run librnic (`rnic exec`), so the protocol is ours, not rsocket.c's
//! (which RDMA-WRITEs into a ring on the peer and exchanges SGLs). It is RC SEND/RECV with
//! credits (docs/capi.md, "rsockets"):
//!
//! * Each side posts `slots + SPARE_SLOTS` receives of `slot_size` bytes and says so in the
//!   REQ/REP private data ([`ConnData`]); the peer may have `slots` DATA or CTRL messages
//!   outstanding (its *credits*).
//! * Every message is a SEND_WITH_IMM whose immediate ([`Imm`]) says its kind and returns
//!   credits: the receive slots its sender has freed since its previous message.
//! * DATA carries stream bytes (at most the peer's `slot_size`); CTRL carries a [`Ctrl`]
//!   (shutdown, disconnect, an iomap announcement); CREDIT is empty and only returns credits.
//!   A CREDIT costs no credit: its receive is reposted at once, in the same step of the node
//!   that received it, so a spare slot is always there for the next one.
//! * `riowrite` data is an RDMA WRITE (no immediate, no receive consumed) into a region the
//!   peer announced with an IOMAP control message.
//!
//! A peer that is not librnic (or a future version) is recognised by [`MAGIC`] and
//! [`VERSION`] and refused at connection time. Bad input is never a panic: decoding returns
//! `None` and the caller counts and drops it.

/// First bytes of [`ConnData`]: "rnRS".
pub const MAGIC: [u8; 4] = *b"rnRS";

/// Protocol version in [`ConnData`].
pub const VERSION: u8 = 1;

/// Receives posted beyond the advertised `slots`, for CREDIT messages (which take no credit).
pub const SPARE_SLOTS: u32 = 2;

/// What each side says about itself in the REQ (active side) or REP (passive side) private
/// data: 16 bytes, big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnData {
    /// DATA/CTRL messages the peer may have outstanding (credits it starts with).
    pub slots: u16,
    /// Bytes of each receive slot: the largest DATA message the peer may send.
    pub slot_size: u32,
    /// Iomap announcements this side keeps (`RDMA_IOMAPSIZE`): the indexes the peer may use.
    pub iomap_entries: u16,
}

impl ConnData {
    /// Encoded length.
    pub const LEN: usize = 16;

    /// The 16 bytes: magic, version, flags (0), slots, slot size, iomap entries, reserved.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[6..8].copy_from_slice(&self.slots.to_be_bytes());
        b[8..12].copy_from_slice(&self.slot_size.to_be_bytes());
        b[12..14].copy_from_slice(&self.iomap_entries.to_be_bytes());
        b
    }

    /// Decodes the start of a private data block; `None` for another protocol or version, or
    /// values no librnic sends (no slot, a slot under 64 bytes).
    pub fn decode(b: &[u8]) -> Option<ConnData> {
        let b = b.get(..Self::LEN)?;
        if b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        let d = ConnData {
            slots: u16::from_be_bytes([b[6], b[7]]),
            slot_size: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            iomap_entries: u16::from_be_bytes([b[12], b[13]]),
        };
        (d.slots > 0 && d.slot_size >= 64).then_some(d)
    }
}

/// What a message is (top 4 bits of the immediate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Stream bytes.
    Data,
    /// A [`Ctrl`] message.
    Ctrl,
    /// Credits only, no payload.
    Credit,
}

/// The immediate data of every message: kind (bits 31..28) and credits returned (15..0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imm {
    /// The message's kind.
    pub kind: Kind,
    /// Receive slots the sender freed since its previous message.
    pub credits: u16,
}

impl Imm {
    /// The 32-bit immediate.
    pub fn encode(self) -> u32 {
        let k: u32 = match self.kind {
            Kind::Data => 1,
            Kind::Ctrl => 2,
            Kind::Credit => 3,
        };
        (k << 28) | u32::from(self.credits)
    }

    /// The immediate's fields; `None` for an unknown kind or reserved bits set.
    pub fn decode(v: u32) -> Option<Imm> {
        if v & 0x0FFF_0000 != 0 {
            return None;
        }
        let kind = match v >> 28 {
            1 => Kind::Data,
            2 => Kind::Ctrl,
            3 => Kind::Credit,
            _ => return None,
        };
        Some(Imm {
            kind,
            credits: (v & 0xFFFF) as u16,
        })
    }
}

/// A region the sender registered for the peer's `riowrite` (`riomap` with `PROT_WRITE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iomap {
    /// Slot in the receiver's table (below the receiver's `iomap_entries`).
    pub index: u16,
    /// The offset `riowrite` names byte 0 of the region by (`riomap`'s return value).
    pub offset: u64,
    /// The region's address for RDMA WRITE.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its remote key.
    pub rkey: u32,
}

/// A control message (the payload of a CTRL message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctrl {
    /// The sender will send no more data (`rshutdown(SHUT_WR)` while still reading): the
    /// receiver reads end-of-file after the data before it.
    Shutdown,
    /// The sender closed both directions (`rshutdown(SHUT_RDWR)`, `rclose`).
    Disconnect,
    /// A region the receiver may `riowrite` into.
    Iomap(Iomap),
}

impl Ctrl {
    /// The encoded message: a code byte, then the fields big-endian.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Ctrl::Shutdown => vec![1],
            Ctrl::Disconnect => vec![2],
            Ctrl::Iomap(m) => {
                let mut b = Vec::with_capacity(31);
                b.push(3);
                b.extend_from_slice(&m.index.to_be_bytes());
                b.extend_from_slice(&m.offset.to_be_bytes());
                b.extend_from_slice(&m.addr.to_be_bytes());
                b.extend_from_slice(&m.len.to_be_bytes());
                b.extend_from_slice(&m.rkey.to_be_bytes());
                b
            }
        }
    }

    /// Decodes a control message; `None` when malformed.
    pub fn decode(b: &[u8]) -> Option<Ctrl> {
        let be64 = |s: &[u8]| s.try_into().ok().map(u64::from_be_bytes);
        match (b.first()?, b.len()) {
            (1, 1) => Some(Ctrl::Shutdown),
            (2, 1) => Some(Ctrl::Disconnect),
            (3, 31) => Some(Ctrl::Iomap(Iomap {
                index: u16::from_be_bytes([b[1], b[2]]),
                offset: be64(&b[3..11])?,
                addr: be64(&b[11..19])?,
                len: be64(&b[19..27])?,
                rkey: u32::from_be_bytes([b[27], b[28], b[29], b[30]]),
            })),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_round_trips_and_refuses_other_protocols() {
        let d = ConnData {
            slots: 16,
            slot_size: 65536,
            iomap_entries: 1,
        };
        let mut pd = d.encode().to_vec();
        pd.resize(56, 0); // a REQ's private data is padded
        assert_eq!(ConnData::decode(&pd), Some(d));
        // rsocket.c's `struct rs_conn_data` starts with version 1
        let mut rs = pd.clone();
        rs[..4].copy_from_slice(&[1, 2, 0, 4]);
        assert_eq!(ConnData::decode(&rs), None);
        let mut v2 = pd.clone();
        v2[4] = 2;
        assert_eq!(ConnData::decode(&v2), None);
        assert_eq!(ConnData::decode(&pd[..10]), None);
        let zero = ConnData { slots: 0, ..d };
        assert_eq!(ConnData::decode(&zero.encode()), None);
    }

    #[test]
    fn imm_round_trips_and_refuses_reserved_bits() {
        for kind in [Kind::Data, Kind::Ctrl, Kind::Credit] {
            for credits in [0, 1, 0xFFFF] {
                let i = Imm { kind, credits };
                assert_eq!(Imm::decode(i.encode()), Some(i));
            }
        }
        assert_eq!(Imm::decode(0), None);
        assert_eq!(Imm::decode(0x4000_0000), None);
        assert_eq!(Imm::decode(0x1001_0000), None);
    }

    #[test]
    fn ctrl_round_trips_and_refuses_malformed() {
        let m = Iomap {
            index: 3,
            offset: 0x1234,
            addr: 0xdead_beef_0000,
            len: 4096,
            rkey: 0x55aa,
        };
        for c in [Ctrl::Shutdown, Ctrl::Disconnect, Ctrl::Iomap(m)] {
            assert_eq!(Ctrl::decode(&c.encode()), Some(c));
        }
        assert_eq!(Ctrl::decode(&[]), None);
        assert_eq!(Ctrl::decode(&[1, 0]), None);
        assert_eq!(Ctrl::decode(&[9]), None);
        assert_eq!(Ctrl::decode(&Ctrl::Iomap(m).encode()[..30]), None);
    }
}
