//! RoCEv2 packets: the transport headers the simulated RNIC sends and receives
//! (cm-spec §1.2–1.5, IBTA vol. 1 ch. 9, rxe's `rxe_hdr.h` and `rxe_opcode.c`).
//!
//! A [`Packet`] is the UDP payload of a RoCEv2 datagram (destination port 4791): BTH, the
//! extended transport headers its opcode implies, the payload with its pad bytes, and the
//! 4-byte ICRC. The types here are the structured form the transport works with; the codec
//! turns them into bytes and back.

use bytes::Bytes;

pub mod codec;
pub mod icrc;
pub mod pcap;

pub use codec::{decode, decode_bytes, decode_verbose, encode, encode_into, CodecError, Decoded};
pub use icrc::Flow;

/// The IANA UDP destination port of RoCEv2 (`ROCE_V2_UDP_DPORT`, [ib_verbs.h]).
pub const ROCE_V2_UDP_DPORT: u16 = 4791;

/// Base Transport Header length in bytes.
pub const BTH_BYTES: usize = 12;
/// RDMA Extended Transport Header length in bytes.
pub const RETH_BYTES: usize = 16;
/// ACK Extended Transport Header length in bytes.
pub const AETH_BYTES: usize = 4;
/// Datagram Extended Transport Header length in bytes.
pub const DETH_BYTES: usize = 8;
/// Immediate data header length in bytes.
pub const IMMDT_BYTES: usize = 4;
/// Atomic Extended Transport Header length in bytes.
pub const ATOMIC_ETH_BYTES: usize = 28;
/// Atomic ACK Extended Transport Header length in bytes.
pub const ATOMIC_ACK_ETH_BYTES: usize = 8;
/// Invariant CRC trailer length in bytes.
pub const ICRC_BYTES: usize = 4;

/// BTH opcodes the simulated RNIC speaks (IBTA Table 38; rxe `enum ib_opcode` [ib_pack.h]).
///
/// RC opcodes are `0x00 | op`, UD opcodes `0x60 | op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// RC SEND First (0x00).
    RcSendFirst = 0x00,
    /// RC SEND Middle (0x01).
    RcSendMiddle = 0x01,
    /// RC SEND Last (0x02).
    RcSendLast = 0x02,
    /// RC SEND Last with Immediate (0x03).
    RcSendLastWithImm = 0x03,
    /// RC SEND Only (0x04).
    RcSendOnly = 0x04,
    /// RC SEND Only with Immediate (0x05).
    RcSendOnlyWithImm = 0x05,
    /// RC RDMA WRITE First (0x06).
    RcRdmaWriteFirst = 0x06,
    /// RC RDMA WRITE Middle (0x07).
    RcRdmaWriteMiddle = 0x07,
    /// RC RDMA WRITE Last (0x08).
    RcRdmaWriteLast = 0x08,
    /// RC RDMA WRITE Last with Immediate (0x09).
    RcRdmaWriteLastWithImm = 0x09,
    /// RC RDMA WRITE Only (0x0A).
    RcRdmaWriteOnly = 0x0A,
    /// RC RDMA WRITE Only with Immediate (0x0B).
    RcRdmaWriteOnlyWithImm = 0x0B,
    /// RC RDMA READ Request (0x0C).
    RcRdmaReadRequest = 0x0C,
    /// RC RDMA READ Response First (0x0D).
    RcRdmaReadResponseFirst = 0x0D,
    /// RC RDMA READ Response Middle (0x0E).
    RcRdmaReadResponseMiddle = 0x0E,
    /// RC RDMA READ Response Last (0x0F).
    RcRdmaReadResponseLast = 0x0F,
    /// RC RDMA READ Response Only (0x10).
    RcRdmaReadResponseOnly = 0x10,
    /// RC Acknowledge (0x11).
    RcAcknowledge = 0x11,
    /// RC ATOMIC Acknowledge (0x12).
    RcAtomicAcknowledge = 0x12,
    /// RC CmpSwap (0x13).
    RcCompareSwap = 0x13,
    /// RC FetchAdd (0x14).
    RcFetchAdd = 0x14,
    /// UD SEND Only (0x64): how CM MADs travel to QP1.
    UdSendOnly = 0x64,
    /// UD SEND Only with Immediate (0x65).
    UdSendOnlyWithImm = 0x65,
}

impl Opcode {
    /// Every opcode, in numeric order.
    pub const ALL: [Opcode; 23] = [
        Opcode::RcSendFirst,
        Opcode::RcSendMiddle,
        Opcode::RcSendLast,
        Opcode::RcSendLastWithImm,
        Opcode::RcSendOnly,
        Opcode::RcSendOnlyWithImm,
        Opcode::RcRdmaWriteFirst,
        Opcode::RcRdmaWriteMiddle,
        Opcode::RcRdmaWriteLast,
        Opcode::RcRdmaWriteLastWithImm,
        Opcode::RcRdmaWriteOnly,
        Opcode::RcRdmaWriteOnlyWithImm,
        Opcode::RcRdmaReadRequest,
        Opcode::RcRdmaReadResponseFirst,
        Opcode::RcRdmaReadResponseMiddle,
        Opcode::RcRdmaReadResponseLast,
        Opcode::RcRdmaReadResponseOnly,
        Opcode::RcAcknowledge,
        Opcode::RcAtomicAcknowledge,
        Opcode::RcCompareSwap,
        Opcode::RcFetchAdd,
        Opcode::UdSendOnly,
        Opcode::UdSendOnlyWithImm,
    ];

    /// The opcode for a BTH opcode byte, or `None` for one this RNIC does not speak.
    pub fn from_raw(raw: u8) -> Option<Opcode> {
        Opcode::ALL.iter().copied().find(|o| *o as u8 == raw)
    }

    /// Which extension headers follow the BTH, in wire order (rxe `rxe_opcode` table).
    pub const fn headers(self) -> HeaderSet {
        use Opcode::*;
        let none = HeaderSet::NONE;
        match self {
            RcSendFirst | RcSendMiddle | RcSendLast | RcSendOnly => none,
            RcSendLastWithImm | RcSendOnlyWithImm => HeaderSet { imm: true, ..none },
            RcRdmaWriteFirst | RcRdmaWriteOnly => HeaderSet { reth: true, ..none },
            RcRdmaWriteMiddle | RcRdmaWriteLast => none,
            RcRdmaWriteLastWithImm => HeaderSet { imm: true, ..none },
            RcRdmaWriteOnlyWithImm => HeaderSet {
                reth: true,
                imm: true,
                ..none
            },
            RcRdmaReadRequest => HeaderSet { reth: true, ..none },
            RcRdmaReadResponseFirst | RcRdmaReadResponseLast | RcRdmaReadResponseOnly => {
                HeaderSet { aeth: true, ..none }
            }
            RcRdmaReadResponseMiddle => none,
            RcAcknowledge => HeaderSet { aeth: true, ..none },
            RcAtomicAcknowledge => HeaderSet {
                aeth: true,
                atomic_ack_eth: true,
                ..none
            },
            RcCompareSwap | RcFetchAdd => HeaderSet {
                atomic_eth: true,
                ..none
            },
            UdSendOnly => HeaderSet { deth: true, ..none },
            UdSendOnlyWithImm => HeaderSet {
                deth: true,
                imm: true,
                ..none
            },
        }
    }

    /// True for the packets a responder sends (READ responses, ACK, atomic ACK).
    pub const fn is_response(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcRdmaReadResponseFirst
                | RcRdmaReadResponseMiddle
                | RcRdmaReadResponseLast
                | RcRdmaReadResponseOnly
                | RcAcknowledge
                | RcAtomicAcknowledge
        )
    }

    /// True when packets of this opcode may carry a payload.
    pub const fn has_payload(self) -> bool {
        use Opcode::*;
        !matches!(
            self,
            RcRdmaReadRequest | RcAcknowledge | RcAtomicAcknowledge | RcCompareSwap | RcFetchAdd
        )
    }
}

/// Which extension headers a packet carries. Wire order: RETH or DETH, AtomicETH, AETH,
/// AtomicAckETH, ImmDt (IBTA 9.2; rxe `rxe_opcode.c` offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderSet {
    /// RDMA ETH.
    pub reth: bool,
    /// Datagram ETH.
    pub deth: bool,
    /// Atomic ETH.
    pub atomic_eth: bool,
    /// ACK ETH.
    pub aeth: bool,
    /// Atomic ACK ETH.
    pub atomic_ack_eth: bool,
    /// Immediate data.
    pub imm: bool,
}

impl HeaderSet {
    /// No extension header.
    pub const NONE: HeaderSet = HeaderSet {
        reth: false,
        deth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        imm: false,
    };
}

/// Base Transport Header (12 bytes; cm-spec §1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    /// Operation.
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad bytes (0–3) appended to the payload to a 4-byte multiple.
    pub pad_cnt: u8,
    /// Transport header version (0).
    pub tver: u8,
    /// Partition key (0xFFFF on RoCE).
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification.
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

/// RDMA Extended Transport Header (16 bytes): target of a WRITE or READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Total length of the DMA in bytes.
    pub dma_len: u32,
}

/// AETH syndrome kinds (IBTA Table 43): bits 6..5 of the syndrome byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AethKind {
    /// ACK; the low 5 bits are the credit count (0x1F = invalid / none).
    Ack(u8),
    /// RNR NAK; the low 5 bits are the RNR timer code the requester must wait.
    RnrNak(u8),
    /// NAK; the low 5 bits are the NAK code.
    Nak(NakCode),
}

/// NAK codes (IBTA Table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NakCode {
    /// PSN sequence error (0): the requester goes back to the expected PSN.
    PsnSeqError = 0,
    /// Invalid request (1) → `IBV_WC_REM_INV_REQ_ERR`.
    InvalidRequest = 1,
    /// Remote access error (2) → `IBV_WC_REM_ACCESS_ERR`.
    RemoteAccessError = 2,
    /// Remote operational error (3) → `IBV_WC_REM_OP_ERR`.
    RemoteOperationalError = 3,
    /// Invalid RD request (4).
    InvalidRdRequest = 4,
}

/// ACK Extended Transport Header (4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    /// The syndrome byte: ACK/RNR NAK/NAK and its 5-bit value.
    pub syndrome: AethKind,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// Datagram Extended Transport Header (8 bytes; cm-spec §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deth {
    /// Queue key.
    pub qkey: u32,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

/// Atomic Extended Transport Header (28 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (CmpSwap) or addend (FetchAdd).
    pub swap_add: u64,
    /// Compare value (CmpSwap).
    pub compare: u64,
}

/// Atomic ACK Extended Transport Header (8 bytes): the original remote value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicAckEth {
    /// The value at the remote address before the atomic.
    pub orig: u64,
}

/// One RoCEv2 transport packet (the UDP payload without the ICRC, which the codec adds and
/// checks). The `Option` headers must match `bth.opcode.headers()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Base Transport Header.
    pub bth: Bth,
    /// RDMA ETH.
    pub reth: Option<Reth>,
    /// Datagram ETH.
    pub deth: Option<Deth>,
    /// Atomic ETH.
    pub atomic_eth: Option<AtomicEth>,
    /// ACK ETH.
    pub aeth: Option<Aeth>,
    /// Atomic ACK ETH.
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Payload without pad bytes.
    pub payload: Bytes,
}

impl Packet {
    /// A packet with no extension headers, on the default partition, nothing flagged: BTH
    /// (PadCnt from the payload, PSN masked to 24 bits) and the payload.
    pub fn bare(opcode: Opcode, dest_qp: u32, psn: u32, payload: Bytes) -> Packet {
        Packet {
            bth: Bth {
                opcode,
                se: false,
                mig_req: false,
                pad_cnt: codec::pad_cnt_for(payload.len()),
                tver: 0,
                pkey: verbs_core::DEFAULT_PKEY,
                fecn: false,
                becn: false,
                dest_qp,
                ack_req: false,
                psn: psn & verbs_core::PSN_MASK,
            },
            reth: None,
            deth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm: None,
            payload,
        }
    }

    /// The headers this packet actually carries.
    pub fn header_set(&self) -> HeaderSet {
        HeaderSet {
            reth: self.reth.is_some(),
            deth: self.deth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack_eth: self.atomic_ack_eth.is_some(),
            imm: self.imm.is_some(),
        }
    }

    /// True when the headers present are exactly those the opcode implies.
    pub fn is_consistent(&self) -> bool {
        self.header_set() == self.bth.opcode.headers()
            && (self.bth.opcode.has_payload() || self.payload.is_empty())
    }
}
