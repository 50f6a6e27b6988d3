//! What a hostile host in the [`World`] can send, and what it is handed to aim with (issue 12,
//! docs/explore.md "The hostile host").
//!
//! A hostile host is an ordinary host of the World whose application sends forgeries instead
//! of using the CM: CM MADs from its QP1 ([`World::forge_mad`]) and raw RoCEv2 datagrams from
//! its UDP socket ([`World::inject`]; [`forged_write`], [`forged_send`], [`forged_ack`] build
//! them). Its addresses are its own, or (issue 25) another port of a host's IP
//! ([`World::inject_as`]: on a real host any process can bind one, so a datagram from a
//! peer's IP on a port other than its RNIC's proves nothing); everything inside a datagram is
//! the attacker's choice, and the tests hand it the best possible guess:
//! a connection's comm IDs ([`World::comm_id`]), QPNs, PSNs ([`World::rq_psn`],
//! [`World::sq_psn`]) and a memory region's address and rkey ([`World::write_target`]).
//!
//! Every forged payload is made of [`FORGED_WORD`], so a forged byte that landed in a host's
//! memory is found by [`World::forged_word_in`] after the run. Marking the host hostile
//! ([`World::set_hostile`]) tells the oracle that what it sends is no evidence of a peer's
//! action (S5 takes a DISCONNECTED or REJECTED to follow a DREQ, DREP or REJ from a host that
//! is not hostile), and that its own records are not an application to check.

use super::config::{host_ip, CM_PORT, DST_OFF, MR_BYTES, SLOTS, SLOT_BYTES};
use super::{End, World};
use bytes::Bytes;
use cm_core::engine::IbCmId;
use cm_core::wire::{ip_service_id, CmMessage, IpCmHeader, RdmaPortSpace, Req, ReqPath};
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::Captured;
use rnic_sim::roce::{encode, Aeth, AethKind, Flow, Opcode, Packet, Reth};
use std::ops::Range;
use verbs_core::{Device, Errno, Error, Gid, GsiEndpoint, Mr, Mtu, DEFAULT_PKEY, PSN_MASK};

/// The 8 bytes every forged payload repeats. The World's own payloads are a pseudo-random
/// pattern ([`super::payload_word`]), so an aligned copy of this word in a host's memory is a
/// forged write that landed (a chance match is a 2^-64 event per word).
pub const FORGED_WORD: [u8; 8] = *b"FORGED!!";

/// The transaction ID of every forged MAD (a DREQ for an unknown connection is answered with a
/// DREP carrying it back, cm-spec §3.3).
pub const FORGED_TID: u64 = 0x0046_4f52_4745_4421;

/// The offsets, in a host's application memory region, of slot `slot` (mod [`SLOTS`]) of its
/// RDMA WRITE destination region ([`World::write_target`]'s address is its start).
pub fn write_slot(slot: u64) -> Range<u64> {
    let start = DST_OFF + (slot % SLOTS) * SLOT_BYTES;
    start..start + SLOT_BYTES
}

fn payload(len: u32) -> Bytes {
    FORGED_WORD
        .iter()
        .copied()
        .cycle()
        .take(len as usize)
        .collect::<Vec<u8>>()
        .into()
}

fn request(opcode: Opcode, qpn: u32, psn: u32, payload: Bytes) -> Packet {
    let mut p = Packet::bare(opcode, qpn & 0x00ff_ffff, psn, payload);
    p.bth.ack_req = opcode != Opcode::RcAcknowledge;
    p
}

/// An RDMA WRITE ONLY of `len` bytes of [`FORGED_WORD`]s to `remote_addr` under `rkey`, for
/// QP `qpn` with PSN `psn`.
pub fn forged_write(qpn: u32, psn: u32, remote_addr: u64, rkey: u32, len: u32) -> Packet {
    let mut p = request(Opcode::RcRdmaWriteOnly, qpn, psn, payload(len));
    p.reth = Some(Reth {
        va: remote_addr,
        rkey,
        dma_len: len,
    });
    p
}

/// A SEND ONLY of `len` bytes of [`FORGED_WORD`]s for QP `qpn` with PSN `psn` (it would
/// consume a posted receive).
pub fn forged_send(qpn: u32, psn: u32, len: u32) -> Packet {
    request(Opcode::RcSendOnly, qpn, psn, payload(len))
}

/// An ACKNOWLEDGE of every request up to PSN `psn` for QP `qpn` (a requester that believed it
/// would complete its outstanding work requests without the responder having seen them).
pub fn forged_ack(qpn: u32, psn: u32, msn: u32) -> Packet {
    let mut p = request(Opcode::RcAcknowledge, qpn, psn, Bytes::new());
    p.aeth = Some(Aeth {
        syndrome: AethKind::Ack(0x1f),
        msn: msn & PSN_MASK,
    });
    p
}

/// A REQ for host `to`'s listener on [`CM_PORT`] as rdma_cm sends it, from an active side that
/// calls itself host `claimed` in the IP-CM header (the header is private data: the sender
/// writes what it likes), with CA GUID `ca_guid`, comm ID `local_comm_id`, QPN `qpn`.
///
/// # Errors
/// Not expected: the IP-CM header always fits.
pub fn forged_req(
    claimed: usize,
    to: usize,
    ca_guid: u64,
    local_comm_id: u32,
    qpn: u32,
) -> Result<CmMessage, Error> {
    let hdr = IpCmHeader {
        src_port: 0xc000 | (local_comm_id as u16 & 0x3fff),
        src_addr: host_ip(claimed),
        dst_addr: host_ip(to),
    };
    let private_data = hdr
        .req_private_data(&[])
        .map_err(|e| Error::new(Errno::EINVAL, format!("forged REQ: {e}")))?;
    Ok(CmMessage::Req(Req {
        local_comm_id,
        service_id: ip_service_id(RdmaPortSpace::Tcp, CM_PORT),
        local_ca_guid: ca_guid,
        local_qpn: qpn & 0x00ff_ffff,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        starting_psn: local_comm_id & PSN_MASK,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: DEFAULT_PKEY,
        path_packet_payload_mtu: Mtu::Mtu1024.raw(),
        rnr_retry_count: 7,
        max_cm_retries: 15,
        primary_path: ReqPath {
            local_port_lid: 0xffff,
            remote_port_lid: 0xffff,
            local_port_gid: Gid::from_ip(host_ip(claimed)),
            remote_port_gid: Gid::from_ip(host_ip(to)),
            hop_limit: 64,
            local_ack_timeout: 18,
            ..ReqPath::default()
        },
        private_data,
        ..Req::default()
    }))
}

impl World {
    /// Marks host `h` hostile: its application only forges from now on — the World reads none
    /// of its CM events and polls none of its CQs (what it sends is still recorded) — and the
    /// oracle skips its records and takes no DREQ, DREP or REJ it sent as a peer's doing
    /// (module docs).
    pub fn set_hostile(&mut self, h: usize) {
        if self.history.hostile.len() <= h {
            self.history.hostile.resize(h + 1, false);
        }
        self.history.hostile[h] = true;
    }

    /// Host `h`'s application memory region (address, length, keys).
    pub fn app_mr(&self, h: usize) -> Option<Mr> {
        self.apps.get(h).map(|a| a.mr)
    }

    /// The remote address and rkey of slot `slot` (mod [`SLOTS`]) of host `h`'s RDMA WRITE
    /// destination region: where a peer's [`Op::Write`](super::Op::Write) lands.
    pub fn write_target(&self, h: usize, slot: u64) -> Option<(u64, u32)> {
        let mr = self.app_mr(h)?;
        Some((mr.addr + write_slot(slot).start, mr.rkey))
    }

    /// The Local Comm ID of `e`'s rdma_cm id now (`None` for an id that is gone or of an
    /// earlier life of its host).
    pub fn comm_id(&self, e: End) -> Option<u32> {
        self.end_query(e, |w| {
            w.host(e.host)?.cm().engine().local_comm_id(IbCmId(e.id.0))
        })
    }

    /// The PSN `e`'s QP expects next (its receive PSN now).
    pub fn rq_psn(&self, e: End) -> Option<u32> {
        self.end_query(e, |w| {
            let dev = w.host(e.host)?.nic().device();
            dev.query_qp(e.qp.handle).ok().map(|(a, _)| a.rq_psn)
        })
    }

    /// The PSN `e`'s QP sends next (its send PSN now).
    pub fn sq_psn(&self, e: End) -> Option<u32> {
        self.end_query(e, |w| {
            let dev = w.host(e.host)?.nic().device();
            dev.query_qp(e.qp.handle).ok().map(|(a, _)| a.sq_psn)
        })
    }

    fn end_query<T>(&self, e: End, f: impl FnOnce(&World) -> Option<T>) -> Option<T> {
        (self.epoch(e.host) == e.epoch).then(|| f(self)).flatten()
    }

    /// Host `from` sends `msg` from its QP1 to host `to`'s QP1 (transaction ID [`FORGED_TID`]),
    /// as its CM would: it goes out at the next run and is recorded as any MAD is.
    ///
    /// # Errors
    /// No host `from`, or `msg` does not encode.
    pub fn forge_mad(&mut self, from: usize, to: usize, msg: &CmMessage) -> Result<(), Error> {
        let mad = msg
            .encode(FORGED_TID, 0)
            .map_err(|e| Error::new(e.errno(), format!("forged MAD: {e}")))?;
        let (_, dev) = self.node_mut(from)?.host.split();
        GsiEndpoint::gsi_send(dev, Gid::from_ip(host_ip(to)), &mad)
    }

    /// Host `from` puts `packet` on the wire to host `to` now, from its own UDP socket and not
    /// through its RNIC (a raw socket: no QP of its own, any header). Unlike the RNICs' RC
    /// packets, which are only counted, it is recorded (a [`Record::Wire`](super::Record::Wire)
    /// whose [`WireMsg`](super::WireMsg) is the MAD's, or for an RC packet attribute 0 with the
    /// destination QPN, PSN and opcode), and captured when the World captures.
    ///
    /// # Errors
    /// No host `from` or `to`, or `packet` does not encode.
    pub fn inject(&mut self, from: usize, to: usize, packet: &Packet) -> Result<(), Error> {
        self.inject_as(from, None, to, Ok(packet))
    }

    /// [`inject`](Self::inject) from socket `src` (`None`: host `from`'s own) — e.g. another
    /// port of the target's peer's IP — of `packet`, or of raw `bytes` that need not be a
    /// RoCEv2 datagram at all (junk). Recorded as host `from`'s.
    ///
    /// # Errors
    /// No host `from` or `to`, or `packet` does not encode.
    pub fn inject_as(
        &mut self,
        from: usize,
        src: Option<std::net::SocketAddr>,
        to: usize,
        packet: Result<&Packet, Bytes>,
    ) -> Result<(), Error> {
        // Hand what the hosts queued at this instant to the fabric first: the per-sender send
        // order of `tx_meta` must stay the fabric's.
        self.next_wake();
        let addr = |h: usize| self.sim.endpoint(h).map(|n| n.host.addr());
        let (Some(own), Some(dst)) = (addr(from), addr(to)) else {
            return Err(Error::new(Errno::EINVAL, "forged packet: no such host"));
        };
        let src = src.unwrap_or(own);
        let flow = Flow::new(src, dst);
        let (bytes, packet) = match packet {
            Ok(p) => (
                encode(p, &flow)
                    .map_err(|e| Error::new(Errno::EINVAL, format!("forged packet: {e}")))?
                    .freeze(),
                p.clone(),
            ),
            Err(junk) => (
                junk.clone(),
                Packet::bare(Opcode::RcAcknowledge, 0, 0, junk),
            ),
        };
        let packet = &packet;
        let msg = match super::WireMsg::parse(&bytes) {
            m if m.attr != 0 => m,
            _ => super::WireMsg {
                attr: 0,
                local_comm_id: packet.bth.dest_qp,
                remote_comm_id: packet.bth.psn,
                reason: packet.bth.opcode as u16,
            },
        };
        let now = self.now();
        self.tx_meta[from].push(msg);
        self.history.rc_packets[from] += u64::from(msg.attr == 0);
        let rec = super::Record::Wire {
            tx: true,
            peer: to as u8,
            msg,
        };
        self.record(from, rec);
        if self.cfg.capture {
            self.captures.push(Captured {
                at: now,
                flow,
                bytes: bytes.clone(),
            });
        }
        self.sim.fabric.send(now, src, dst, bytes);
        Ok(())
    }

    /// The offset of the first aligned [`FORGED_WORD`] in bytes `range` (offsets, clipped to
    /// the region) of host `h`'s application memory region, if any: a forged payload that
    /// landed. Reads only `range`: a region the run never touched costs page faults.
    pub fn forged_word_in(&self, h: usize, range: Range<u64>) -> Option<u64> {
        let forged = u64::from_le_bytes(FORGED_WORD);
        let word = |c: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        };
        let (start, end) = (range.start & !7, range.end.min(MR_BYTES));
        let mut buf = [0u8; 1024];
        (start..end).step_by(buf.len()).find_map(|base| {
            let n = ((end - base) as usize & !7).min(buf.len());
            if !self.read_mr(h, base, &mut buf[..n]) {
                return None;
            }
            buf[..n]
                .chunks_exact(8)
                .position(|c| word(c) == forged)
                .map(|i| base + i as u64 * 8)
        })
    }
}
