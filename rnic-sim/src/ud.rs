//! The UD transport of a QP: SEND ONLY (+imm) datagrams with a DETH, Q_Key check, GRH in front
//! of the received payload (IBTA 9.8, 11.4.1.1; rxe `rxe_req.c`, `rxe_resp.c`).

use crate::multicast::is_multicast_gid;
use crate::psn::psn_add;
use crate::roce::codec::encoded_len;
use crate::roce::{Deth, Flow, Opcode, Packet, ROCE_V2_UDP_DPORT};
use crate::shared::Shared;
use crate::shared::Transmit;
use bytes::Bytes;
use std::net::SocketAddr;
use verbs_core::{Gid, QpState, SimTime, WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// Bytes of the Global Route Header a UD receive buffer gets in front of the payload.
pub const GRH_BYTES: usize = 40;

/// The 40 bytes a RoCEv2 RNIC writes in front of a UD payload (what `IBV_WC_GRH`
/// announces): the datagram's IP header, as rxe's `rxe_resp.c` copies it — for IPv4 (both GIDs
/// IPv4-mapped) 20 zero bytes then the 20-byte IPv4 header, otherwise the 40-byte IPv6 header
/// (next header UDP). The header is the canonical one the ICRC is computed over
/// ([`Flow::ip_udp_header`]: TTL 64, DF, checksum valid), so `ibv_init_ah_from_wc` finds the
/// sender's address in it as it does in a real one (libibverbs `get_grh_header_version`,
/// `set_ah_attr_by_ipv4`). `transport_len` is the RoCEv2 UDP payload's length (BTH … ICRC).
fn grh(src: Gid, dst: Gid, transport_len: usize) -> [u8; GRH_BYTES] {
    let mut g = [0u8; GRH_BYTES];
    let flow = Flow::new(
        SocketAddr::new(src.to_ip(), ROCE_V2_UDP_DPORT),
        SocketAddr::new(dst.to_ip(), ROCE_V2_UDP_DPORT),
    );
    if let Some(h) = flow.ip_udp_header(transport_len) {
        let ip = h.as_bytes().get(..h.ip_len()).unwrap_or_default();
        if let Some(at) = g.get_mut(GRH_BYTES - ip.len()..) {
            at.copy_from_slice(ip);
        }
    }
    g
}

/// What a UD receive completion's `sl` holds on RoCE, as mlx5 reports it (the CQE's
/// `flags_rqpn` bits 27:24, `mlx5_parse_cqe` in rdma-core providers/mlx5/cq.c; the PRM's "RoCE
/// packet type": bit 3 a UDP header, bits 2:0 the L3 header, 1 IPv6, 2 IPv4). UCX's UD
/// transport reads it to find the destination GID in the GRH (`uct_ud_iface_check_grh`) and
/// drops the datagram when it looks in the wrong place.
/// IPv4 when both GIDs are IPv4-mapped, as in [`grh`].
fn roce_packet_type(src: Gid, dst: Gid) -> u8 {
    const UDP: u8 = 0x8;
    if src.to_ip().is_ipv4() && dst.to_ip().is_ipv4() {
        UDP | 0x2
    } else {
        UDP | 0x1
    }
}

impl crate::qp::SimQp {
    /// Sends the queued UD datagrams; a UD send completes once it is on the wire.
    pub(crate) fn transmit_ud(&mut self, sh: &mut Shared) {
        if !matches!(self.state(), QpState::Rts) {
            return;
        }
        while let Some(w) = self.sq.front() {
            let payload = match &w.payload {
                Some(p) => Some(p.clone()),
                None => sh.mrs.gather(self.pd, &w.wr.sg_list).map(Bytes::from),
            };
            let Some(payload) = payload else {
                self.complete_head(sh, WcStatus::LocProtErr);
                self.enter_err(sh);
                return;
            };
            let imm = w.wr.opcode.has_imm();
            let op = if imm {
                Opcode::UdSendOnlyWithImm
            } else {
                Opcode::UdSendOnly
            };
            let mut p = Packet::bare(op, w.wr.ud.remote_qpn, self.req.psn, payload);
            // A Q_Key with the high bit set means "use the QP's own Q_Key" (IBTA 10.2.5).
            let qkey = if w.wr.ud.remote_qkey & 0x8000_0000 != 0 {
                self.attr.qkey
            } else {
                w.wr.ud.remote_qkey
            };
            p.deth = Some(Deth {
                qkey,
                src_qp: self.qpn,
            });
            if imm {
                p.imm = Some(w.wr.imm_data);
            }
            p.bth.se = w.wr.send_flags.contains(verbs_core::SendFlags::SOLICITED);
            self.req.psn = psn_add(self.req.psn, 1);
            let dst = w.wr.ud.ah.grh.dgid;
            if is_multicast_gid(dst) {
                // This RNIC is a member too: its QPs attached to the group get a copy
                // (device/multicast.rs).
                sh.mcast_loop.push_back((dst, self.qpn, p.clone()));
            }
            sh.tx.push_back(Transmit { dst, packet: p }.into());
            self.complete_head(sh, WcStatus::Success);
        }
    }

    /// Receives a UD datagram from `src` to `dst` (this device's GID, or a multicast group's):
    /// Q_Key must match; no receive posted or a buffer too small for GRH + payload drops it
    /// silently (UD has no RNR; rxe class D).
    pub(crate) fn on_ud(&mut self, sh: &mut Shared, src: Gid, dst: Gid, pkt: Packet) {
        if !matches!(self.state(), QpState::Rtr | QpState::Rts | QpState::Sqd) {
            sh.counters.qp_not_ready += 1;
            return;
        }
        let Some(deth) = pkt.deth else {
            sh.counters.malformed += 1;
            return;
        };
        if deth.qkey != self.attr.qkey {
            sh.counters.qkey_mismatch += 1;
            return;
        }
        let Some(r) = self.peek_recv(sh) else {
            sh.counters.ud_no_recv += 1;
            return;
        };
        let total = GRH_BYTES + pkt.payload.len();
        if r.total_len() < total as u64 {
            sh.counters.ud_too_long += 1;
            return;
        }
        // The datagram fits: take the WQE (from the SRQ, if the QP has one).
        if !self.claim_recv(sh) {
            return;
        }
        let Some(r) = self.rq.front() else {
            return;
        };
        let mut buf = Vec::with_capacity(total);
        buf.extend_from_slice(&grh(src, dst, encoded_len(&pkt)));
        buf.extend_from_slice(&pkt.payload);
        let sges = r.sg_list.clone();
        if sh.mrs.scatter(self.pd, &sges, 0, &buf).is_err() {
            self.fail_recv_head(sh, WcStatus::LocProtErr);
            self.enter_err(sh);
            return;
        }
        let Some(r) = self.rq.pop_front() else {
            return;
        };
        let mut wc = WorkCompletion::success(r.wr_id, WcOpcode::Recv, total as u32, self.qpn);
        wc.src_qp = deth.src_qp;
        wc.sl = roce_packet_type(src, dst);
        wc.wc_flags = WcFlags::GRH;
        if let Some(imm) = pkt.imm {
            wc.imm_data = imm;
            wc.wc_flags |= WcFlags::WITH_IMM;
        }
        self.complete(sh, self.init.recv_cq, wc, pkt.bth.se);
    }

    /// Emits what the QP has to send now (RC or UD).
    pub(crate) fn transmit(&mut self, sh: &mut Shared, now: SimTime) {
        match self.init.qp_type {
            verbs_core::QpType::Ud => self.transmit_ud(sh),
            _ => self.transmit_rc(sh, now),
        }
    }

    /// Fires due timers (RC only).
    pub(crate) fn timeout(&mut self, sh: &mut Shared, now: SimTime) {
        if self.init.qp_type == verbs_core::QpType::Rc {
            self.timeout_rc(sh, now);
        }
    }
}
