//! RoCEv2 wire codec: [`Packet`] ⇄ UDP payload bytes (cm-spec §1.2–1.5; IBTA vol. 1 ch. 9;
//! rxe `rxe_hdr.h`). Design notes and the choices below: `docs/roce-wire.md`.
//!
//! Wire layout: `BTH(12) ‖ extension headers in wire order (RETH or DETH, AtomicETH, AETH,
//! AtomicAckETH, ImmDt) ‖ payload ‖ pad (PadCnt zero bytes to a 4-byte multiple) ‖ ICRC(4)`.
//! All fields are big-endian except the ICRC, stored least-significant byte first as x86 rxe
//! does.
//!
//! [`decode`] is total: every byte string yields a [`Packet`] or a [`CodecError`], never a
//! panic. Reserved bits are **ignored** on receive (IBTA: "ignored by the receiver") and
//! reported through [`Decoded::reserved_bits_set`] so a device can count them; they are written
//! as zero on send.

use bytes::{BufMut, Bytes, BytesMut};

use super::icrc::{icrc, icrc_for_ip_udp, Flow};
use super::{
    Aeth, AethKind, AtomicAckEth, AtomicEth, Bth, Deth, NakCode, Opcode, Packet, Reth, AETH_BYTES,
    ATOMIC_ACK_ETH_BYTES, ATOMIC_ETH_BYTES, BTH_BYTES, DETH_BYTES, ICRC_BYTES, IMMDT_BYTES,
    RETH_BYTES,
};

/// Why a packet could not be encoded or decoded. Received packets that fail to decode are
/// counted and dropped by the device (IBTA 9.6: silently dropped); none of these is fatal, and
/// none reaches the application, so they carry no errno. Encode errors are bugs in the caller
/// (the transport built an impossible packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The datagram is shorter than BTH + the opcode's headers + ICRC.
    #[error("truncated RoCE packet: {len} bytes, need at least {need}")]
    Truncated {
        /// Bytes received.
        len: usize,
        /// Bytes the headers require.
        need: usize,
    },
    /// The datagram length is not a multiple of 4 bytes (headers, padded payload and ICRC
    /// all are; IBTA 9.3).
    #[error("RoCE packet length {0} is not a multiple of 4")]
    BadLength(usize),
    /// The datagram does not fit the IP/UDP 16-bit length fields (encode: payload too long).
    #[error("RoCE packet of {0} bytes does not fit in a UDP datagram")]
    TooLong(usize),
    /// BTH opcode this RNIC does not speak.
    #[error("unknown BTH opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// BTH TVer is not 0 (IBTA 9.2: packets with another version are dropped).
    #[error("BTH transport version {0} is not 0")]
    BadTver(u8),
    /// ICRC mismatch: the packet was corrupted (or the sender's pseudo header differs).
    #[error("ICRC mismatch: carried {carried:#010x}, computed {computed:#010x}")]
    BadIcrc {
        /// ICRC in the packet.
        carried: u32,
        /// ICRC computed over the received bytes.
        computed: u32,
    },
    /// PadCnt larger than the padded payload, or non-zero on an opcode without payload.
    #[error("BTH PadCnt {0} inconsistent with the payload")]
    BadPadCnt(u8),
    /// A payload (or pad) on an opcode that carries none (READ request, ACK, atomics).
    #[error("payload of {0} bytes on an opcode without payload")]
    UnexpectedPayload(usize),
    /// Encode: the `Packet`'s optional headers are not those its opcode implies.
    #[error("packet headers do not match opcode {0:?}")]
    HeaderMismatch(Opcode),
    /// AETH syndrome with the reserved type (bits 6..5 = 0b10) or an unknown NAK code.
    #[error("invalid AETH syndrome {0:#04x}")]
    BadAethSyndrome(u8),
    /// Encode: a payload source appended another number of bytes than its length (a bug in
    /// the source).
    #[error("payload source appended {appended} bytes, its length is {declared}")]
    PayloadLength {
        /// The source's length.
        declared: usize,
        /// Bytes it appended.
        appended: usize,
    },
    /// Encode: a field is wider than its wire field (e.g. a PSN over 24 bits).
    #[error("field {field} = {value:#x} does not fit its {bits}-bit wire field")]
    FieldOutOfRange {
        /// IBTA field name.
        field: &'static str,
        /// Value given.
        value: u64,
        /// Wire width in bits.
        bits: u32,
    },
}

/// A decoded packet plus what the decoder noticed but tolerated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The packet.
    pub packet: Packet,
    /// True when some reserved bit was non-zero (BTH resv6a/resv7, DETH reserved byte, AETH
    /// syndrome bit 7). Ignored per IBTA; a device may count it.
    pub reserved_bits_set: bool,
}

/// Length of the extension headers an opcode carries, in bytes.
pub fn ext_headers_len(opcode: Opcode) -> usize {
    let h = opcode.headers();
    let mut n = 0;
    for (present, len) in [
        (h.reth, RETH_BYTES),
        (h.deth, DETH_BYTES),
        (h.atomic_eth, ATOMIC_ETH_BYTES),
        (h.aeth, AETH_BYTES),
        (h.atomic_ack_eth, ATOMIC_ACK_ETH_BYTES),
        (h.imm, IMMDT_BYTES),
    ] {
        if present {
            n += len;
        }
    }
    n
}

/// PadCnt for a payload of `len` bytes: pad bytes to the next 4-byte multiple (0–3).
pub const fn pad_cnt_for(len: usize) -> u8 {
    ((4 - (len % 4)) % 4) as u8
}

/// Bytes [`encode`] produces for `packet`: BTH + extension headers + payload + pad + ICRC.
pub fn encoded_len(packet: &Packet) -> usize {
    datagram_len(packet.bth.opcode, packet.payload.len())
}

/// Bytes of a datagram of `opcode` with `payload` bytes of payload.
fn datagram_len(opcode: Opcode, payload: usize) -> usize {
    BTH_BYTES + ext_headers_len(opcode) + payload + usize::from(pad_cnt_for(payload)) + ICRC_BYTES
}

/// The payload of a packet as [`encode_from`] takes it: bytes it copies into the datagram from
/// where they live (the device's registered memory), instead of from [`Packet::payload`].
pub(crate) trait PayloadSource {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// True when [`len`](Self::len) is 0.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends exactly [`len`](Self::len) bytes to `out`.
    fn append_to(&self, out: &mut BytesMut);
}

impl PayloadSource for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn append_to(&self, out: &mut BytesMut) {
        crate::copy::append(out, self);
    }
}

fn check_bits(field: &'static str, value: u64, bits: u32) -> Result<(), CodecError> {
    if value >> bits == 0 {
        Ok(())
    } else {
        Err(CodecError::FieldOutOfRange { field, value, bits })
    }
}

fn put_u24(out: &mut BytesMut, v: u32) {
    out.put_slice(&v.to_be_bytes()[1..]);
}

fn aeth_syndrome(kind: AethKind) -> Result<u8, CodecError> {
    match kind {
        AethKind::Ack(credit) => check_bits("AETH credit", credit.into(), 5).map(|()| credit),
        AethKind::RnrNak(timer) => {
            check_bits("AETH RNR timer", timer.into(), 5).map(|()| 0x20 | timer)
        }
        AethKind::Nak(code) => Ok(0x60 | code as u8),
    }
}

/// Encode `packet` as the UDP payload of a RoCEv2 datagram on `flow`, ICRC included.
///
/// `bth.pad_cnt` is ignored: the pad count is computed from the payload length
/// ([`pad_cnt_for`]) and pad bytes are zero. Reserved bits are written as zero.
///
/// Errors: [`CodecError::HeaderMismatch`] if the optional headers are not those of
/// `bth.opcode.headers()`; [`CodecError::UnexpectedPayload`] for a payload on an opcode without
/// one; [`CodecError::BadTver`] if `bth.tver != 0`; [`CodecError::FieldOutOfRange`] for a
/// 24-bit field (DestQP, PSN, MSN, SrcQP) or 5-bit AETH value that does not fit;
/// [`CodecError::TooLong`] if the datagram exceeds the IP/UDP length fields.
pub fn encode(packet: &Packet, flow: &Flow) -> Result<BytesMut, CodecError> {
    encode_from(packet, &packet.payload[..], flow)
}

/// [`encode`] with the payload read from `payload`; `packet.payload` is not used. One copy of
/// the payload, straight into the datagram.
pub(crate) fn encode_from<P: PayloadSource + ?Sized>(
    packet: &Packet,
    payload: &P,
    flow: &Flow,
) -> Result<BytesMut, CodecError> {
    let mut out = BytesMut::with_capacity(datagram_len(packet.bth.opcode, payload.len()));
    encode_parts(packet, payload, flow, &mut out)?;
    Ok(out)
}

/// [`encode`], appending to `out` (which may already hold other data; on error `out` is left
/// as it was).
pub fn encode_into(packet: &Packet, flow: &Flow, out: &mut BytesMut) -> Result<(), CodecError> {
    encode_parts(packet, &packet.payload[..], flow, out)
}

/// [`encode_into`] with the payload read from `payload`.
fn encode_parts<P: PayloadSource + ?Sized>(
    packet: &Packet,
    payload: &P,
    flow: &Flow,
    out: &mut BytesMut,
) -> Result<(), CodecError> {
    let bth = &packet.bth;
    let op = bth.opcode;
    if packet.header_set() != op.headers() {
        return Err(CodecError::HeaderMismatch(op));
    }
    if !op.has_payload() && !payload.is_empty() {
        return Err(CodecError::UnexpectedPayload(payload.len()));
    }
    if bth.tver != 0 {
        return Err(CodecError::BadTver(bth.tver));
    }
    check_bits("BTH DestQP", bth.dest_qp.into(), 24)?;
    check_bits("BTH PSN", bth.psn.into(), 24)?;
    let syndrome = match &packet.aeth {
        Some(a) => {
            check_bits("AETH MSN", a.msn.into(), 24)?;
            Some(aeth_syndrome(a.syndrome)?)
        }
        None => None,
    };
    if let Some(d) = &packet.deth {
        check_bits("DETH SrcQP", d.src_qp.into(), 24)?;
    }
    let total = datagram_len(op, payload.len());
    // Validates the length against the IP/UDP fields before anything is written; the same
    // header is the ICRC's pseudo header (built once per packet).
    let Some(header) = flow.ip_udp_header(total) else {
        return Err(CodecError::TooLong(total));
    };
    let pad = pad_cnt_for(payload.len());
    let start = out.len();
    out.reserve(total);

    out.put_u8(op as u8);
    out.put_u8(u8::from(bth.se) << 7 | u8::from(bth.mig_req) << 6 | pad << 4);
    out.put_u16(bth.pkey);
    out.put_u8(u8::from(bth.fecn) << 7 | u8::from(bth.becn) << 6);
    put_u24(out, bth.dest_qp);
    out.put_u8(u8::from(bth.ack_req) << 7);
    put_u24(out, bth.psn);

    if let Some(r) = &packet.reth {
        out.put_u64(r.va);
        out.put_u32(r.rkey);
        out.put_u32(r.dma_len);
    }
    if let Some(d) = &packet.deth {
        out.put_u32(d.qkey);
        out.put_u8(0);
        put_u24(out, d.src_qp);
    }
    if let Some(a) = &packet.atomic_eth {
        out.put_u64(a.va);
        out.put_u32(a.rkey);
        out.put_u64(a.swap_add);
        out.put_u64(a.compare);
    }
    if let (Some(a), Some(s)) = (&packet.aeth, syndrome) {
        out.put_u8(s);
        put_u24(out, a.msn);
    }
    if let Some(a) = &packet.atomic_ack_eth {
        out.put_u64(a.orig);
    }
    if let Some(imm) = packet.imm {
        out.put_u32(imm);
    }
    let at = out.len();
    payload.append_to(out);
    let appended = out.len() - at;
    if appended != payload.len() {
        out.truncate(start);
        return Err(CodecError::PayloadLength {
            declared: payload.len(),
            appended,
        });
    }
    out.put_bytes(0, usize::from(pad));

    // The ICRC: one pass over the transport bytes, payload included, as they sit in the
    // datagram (a pass fused with the copy, piece by piece, measured no faster: the payload of
    // one packet stays in L1 between the two).
    let transport = out.get(start..).unwrap_or(&[]);
    match icrc_for_ip_udp(header.as_bytes(), transport) {
        Some(crc) => {
            out.put_u32_le(crc);
            Ok(())
        }
        None => {
            out.truncate(start);
            Err(CodecError::TooLong(total))
        }
    }
}

/// A cursor over a byte slice whose reads cannot panic (the length was checked up front, but
/// the reads stay total anyway).
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let (head, rest) = self
            .buf
            .split_first_chunk::<N>()
            .ok_or(CodecError::Truncated {
                len: self.buf.len(),
                need: N,
            })?;
        self.buf = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(self.take()?))
    }
    /// A reserved byte followed by a 24-bit field.
    fn u8_u24(&mut self) -> Result<(u8, u32), CodecError> {
        let [a, b, c, d] = self.take()?;
        Ok((a, u32::from_be_bytes([0, b, c, d])))
    }
}

fn decode_aeth_syndrome(s: u8) -> Result<AethKind, CodecError> {
    let value = s & 0x1F;
    match (s >> 5) & 0x3 {
        0 => Ok(AethKind::Ack(value)),
        1 => Ok(AethKind::RnrNak(value)),
        3 => Ok(AethKind::Nak(match value {
            0 => NakCode::PsnSeqError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return Err(CodecError::BadAethSyndrome(s)),
        })),
        _ => Err(CodecError::BadAethSyndrome(s)),
    }
}

/// Decode the UDP payload of a RoCEv2 datagram received on `flow` (source = the sender).
/// The payload is copied; see [`decode_bytes`] for a zero-copy variant.
///
/// Total: any input gives `Ok` or `Err`, never a panic. Checks, in order: length ≥ BTH + ICRC
/// ([`CodecError::Truncated`]); length a multiple of 4 ([`CodecError::BadLength`]); the ICRC
/// when `check_icrc` ([`CodecError::BadIcrc`]; skipped when false, e.g. for a fabric that
/// cannot corrupt); a known opcode ([`CodecError::UnknownOpcode`]); TVer 0
/// ([`CodecError::BadTver`]); the opcode's headers present ([`CodecError::Truncated`]); PadCnt
/// and payload ([`CodecError::BadPadCnt`], [`CodecError::UnexpectedPayload`]); AETH syndrome
/// ([`CodecError::BadAethSyndrome`]). Reserved bits are ignored.
pub fn decode(bytes: &[u8], flow: &Flow, check_icrc: bool) -> Result<Packet, CodecError> {
    decode_with(bytes, flow, check_icrc, Bytes::copy_from_slice).map(|d| d.packet)
}

/// [`decode`] without copying the payload: it is a slice of `bytes`.
pub fn decode_bytes(bytes: &Bytes, flow: &Flow, check_icrc: bool) -> Result<Packet, CodecError> {
    decode_with(bytes, flow, check_icrc, |p| bytes.slice_ref(p)).map(|d| d.packet)
}

/// [`decode`], also reporting tolerated anomalies (reserved bits set) for the device's
/// counters.
pub fn decode_verbose(bytes: &[u8], flow: &Flow, check_icrc: bool) -> Result<Decoded, CodecError> {
    decode_with(bytes, flow, check_icrc, Bytes::copy_from_slice)
}

fn decode_with<'a>(
    bytes: &'a [u8],
    flow: &Flow,
    check_icrc: bool,
    payload_of: impl FnOnce(&'a [u8]) -> Bytes,
) -> Result<Decoded, CodecError> {
    let len = bytes.len();
    let (transport, crc) = bytes
        .split_last_chunk::<ICRC_BYTES>()
        .filter(|(t, _)| t.len() >= BTH_BYTES)
        .ok_or(CodecError::Truncated {
            len,
            need: BTH_BYTES + ICRC_BYTES,
        })?;
    if !len.is_multiple_of(4) {
        return Err(CodecError::BadLength(len));
    }
    if check_icrc {
        let carried = u32::from_le_bytes(*crc);
        let computed = icrc(flow, transport).ok_or(CodecError::TooLong(len))?;
        if carried != computed {
            return Err(CodecError::BadIcrc { carried, computed });
        }
    }

    let mut r = Reader { buf: transport };
    let raw_op = r.u8()?;
    let opcode = Opcode::from_raw(raw_op).ok_or(CodecError::UnknownOpcode(raw_op))?;
    let b1 = r.u8()?;
    let tver = b1 & 0x0F;
    if tver != 0 {
        return Err(CodecError::BadTver(tver));
    }
    let pad_cnt = (b1 >> 4) & 0x3;
    let pkey = u16::from_be_bytes(r.take()?);
    let (b4, dest_qp) = r.u8_u24()?;
    let (b8, psn) = r.u8_u24()?;
    let mut reserved = b4 & 0x3F != 0 || b8 & 0x7F != 0;
    let bth = Bth {
        opcode,
        se: b1 & 0x80 != 0,
        mig_req: b1 & 0x40 != 0,
        pad_cnt,
        tver,
        pkey,
        fecn: b4 & 0x80 != 0,
        becn: b4 & 0x40 != 0,
        dest_qp,
        ack_req: b8 & 0x80 != 0,
        psn,
    };

    let need = BTH_BYTES + ext_headers_len(opcode) + ICRC_BYTES;
    if len < need {
        return Err(CodecError::Truncated { len, need });
    }
    let h = opcode.headers();
    let reth = if h.reth {
        Some(Reth {
            va: r.u64()?,
            rkey: r.u32()?,
            dma_len: r.u32()?,
        })
    } else {
        None
    };
    let deth = if h.deth {
        let qkey = r.u32()?;
        let (resv, src_qp) = r.u8_u24()?;
        reserved |= resv != 0;
        Some(Deth { qkey, src_qp })
    } else {
        None
    };
    let atomic_eth = if h.atomic_eth {
        Some(AtomicEth {
            va: r.u64()?,
            rkey: r.u32()?,
            swap_add: r.u64()?,
            compare: r.u64()?,
        })
    } else {
        None
    };
    let aeth = if h.aeth {
        let (s, msn) = r.u8_u24()?;
        reserved |= s & 0x80 != 0;
        Some(Aeth {
            syndrome: decode_aeth_syndrome(s)?,
            msn,
        })
    } else {
        None
    };
    let atomic_ack_eth = if h.atomic_ack_eth {
        Some(AtomicAckEth { orig: r.u64()? })
    } else {
        None
    };
    let imm = if h.imm { Some(r.u32()?) } else { None };

    // What is left is payload + pad.
    let padded = r.buf;
    if !opcode.has_payload() {
        if pad_cnt != 0 {
            return Err(CodecError::BadPadCnt(pad_cnt));
        }
        if !padded.is_empty() {
            return Err(CodecError::UnexpectedPayload(padded.len()));
        }
    }
    let payload_len = padded
        .len()
        .checked_sub(usize::from(pad_cnt))
        .ok_or(CodecError::BadPadCnt(pad_cnt))?;
    let payload = padded
        .get(..payload_len)
        .ok_or(CodecError::BadPadCnt(pad_cnt))?;

    Ok(Decoded {
        packet: Packet {
            bth,
            reth,
            deth,
            atomic_eth,
            aeth,
            atomic_ack_eth,
            imm,
            payload: payload_of(payload),
        },
        reserved_bits_set: reserved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::Opcode;

    /// A source that appends one byte fewer than it announces.
    struct Short;
    impl PayloadSource for Short {
        fn len(&self) -> usize {
            8
        }
        fn append_to(&self, out: &mut BytesMut) {
            out.put_slice(&[1; 7]);
        }
    }

    fn flow() -> Flow {
        Flow::new(
            "10.0.0.1:49152".parse().unwrap_or_else(|_| unreachable!()),
            "10.0.0.2:4791".parse().unwrap_or_else(|_| unreachable!()),
        )
    }

    #[test]
    fn encode_from_a_source_equals_encode_of_the_same_bytes() {
        let p = Packet::bare(Opcode::RcSendOnly, 5, 9, Bytes::new());
        let data = [3u8; 4097];
        let from = encode_from(&p, &data[..], &flow());
        let mut whole = p.clone();
        whole.payload = Bytes::copy_from_slice(&data);
        assert_eq!(from, encode(&whole, &flow()));
    }

    #[test]
    fn a_source_that_appends_another_length_is_an_error_and_leaves_nothing() {
        let p = Packet::bare(Opcode::RcSendOnly, 5, 9, Bytes::new());
        let mut out = BytesMut::from(&b"kept"[..]);
        assert_eq!(
            encode_parts(&p, &Short, &flow(), &mut out),
            Err(CodecError::PayloadLength {
                declared: 8,
                appended: 7
            })
        );
        assert_eq!(&out[..], b"kept");
    }
}
