//! The hostile host of a scenario (issue 12): with some probability the generator adds a
//! third host whose application forges, at generated trigger points, CM messages and RC
//! packets aimed at the scripted hosts' connection — with the connection's real comm IDs,
//! QPNs, PSNs and the peer's real rkey and address, which the runner reads from the World (it
//! is a test oracle; an attacker could at best guess them). The oracle must still pass: a
//! forgery must not end, reject or complete anything (S5, S2, S6 on the history), and after the
//! run no forged payload may be found in a scripted host's memory ([`landed`], reported as S6).
//! What the World gives the attacker to send with is `world/forge.rs`.
//!
//! Since issue 25 the attacker also speaks from the target's peer's IP address on another
//! port ([`Forgery::ForeignPort`]: what any process on that host can do): a CM forgery with
//! the right IDs, a forged WRITE or plain junk. Before it, such a datagram moved the peer's
//! route to the attacker's socket in librnic and the ping server; the NIC's route rule
//! (`rnic_sim::peers`) must drop every one of them.

use super::{pick, Runner, Trigger, US};
use crate::oracle::{Invariant, Violation};
use crate::world::{
    forged_ack, forged_req, forged_send, forged_write, host_ip, write_slot, End, World, FORGED_TID,
};
use bytes::Bytes;
use cm_core::api::CmEventType;
use cm_core::engine::IbCmState;
use cm_core::wire::{CmMessage, CmMsgResponse, Drep, Dreq, Mra, Rej, RejectReason, Rtu};
use rnic_sim::rng::Rng;
use rnic_sim::{gsi_packet, GSI_QPN};
use std::fmt::Write as _;
use std::net::SocketAddr;
use verbs_core::{SimTime, PSN_MASK};

/// A CM message an [`Attack`] forges, as the target's peer would send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmKind {
    /// A DREQ (with the target's QPN).
    Dreq,
    /// A REJ with this reason; REJ "timeout" (4) carries the peer's CA GUID as ARI.
    Rej(u16),
    /// A DREP.
    Drep,
    /// An RTU.
    Rtu,
    /// An MRA (service timeout 24: 67 s more, were it believed).
    Mra,
}

/// What one [`Attack`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgery {
    /// A CM message with the target's and its peer's comm IDs now, or (`right_ids` false) both
    /// XORed with a constant.
    Cm {
        /// Which message.
        kind: CmKind,
        /// The live IDs, or wrong ones.
        right_ids: bool,
    },
    /// `n` REQs with fresh comm IDs and QPNs for the target's listener, claiming (in the IP-CM
    /// header) to come from the target's peer.
    ReqFlood {
        /// REQs.
        n: u32,
    },
    /// A REQ reusing the live connection's peer CA GUID and QPN: "the peer restarted".
    StaleReq,
    /// `count` RC requests for the target's QP, PSNs from its expected PSN + `offset` on:
    /// WRITEs into its WRITE destination region with its real rkey, or SENDs.
    Rc {
        /// WRITE (true) or SEND.
        write: bool,
        /// First PSN relative to the expected one.
        offset: i8,
        /// Packets.
        count: u8,
    },
    /// `count` ACKs for the target's QP, for PSNs around the last one it sent.
    Ack {
        /// Packets.
        count: u8,
    },
    /// From the target's peer's IP address on another port (not its RNIC's socket): `what`.
    ForeignPort {
        /// What is sent.
        what: Foreign,
    },
}

/// What a [`Forgery::ForeignPort`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// A CM message with the live comm IDs, as the peer would send it.
    Cm(CmKind),
    /// A WRITE into the target's WRITE destination with its real rkey, at the expected PSN.
    Write,
    /// Bytes that are no RoCEv2 datagram.
    Junk,
}

/// One forgery and when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attack {
    /// When: a time, or an event / a number of completions of host `watch`'s connection.
    pub when: Trigger,
    /// The scripted host whose runner `when` reads.
    pub watch: usize,
    /// The scripted host the forgery is sent to.
    pub target: usize,
    /// What is sent.
    pub forgery: Forgery,
}

/// The hostile host's attacks; each fires once, when its trigger holds (in any order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostile {
    /// The attacks.
    pub attacks: Vec<Attack>,
}

impl Hostile {
    /// Draws 1–6 attacks on hosts 0 and 1 (CM forgeries most often, with the right IDs most
    /// often), timed around connection set-up, the connection's events and completions, and
    /// the rest of the run (`unit`: the scenario's DREQ timeout).
    pub fn generate(rng: &mut Rng, unit: u64) -> Hostile {
        use CmEventType as E;
        let n = rng.range_u64(1..=6);
        let attacks = (0..n)
            .map(|_| {
                let when = match rng.below(10) {
                    0..=2 => Trigger::At(rng.range_u64(0..=40) * US),
                    3..=4 => Trigger::At(rng.range_u64(0..=300) * US),
                    5 => Trigger::At(rng.range_u64(0..=8) * unit / 2),
                    6..=8 => Trigger::OnEvent(pick(
                        rng,
                        &[
                            (3, E::ConnectRequest),
                            (5, E::Established),
                            (4, E::Disconnected),
                            (1, E::TimewaitExit),
                        ],
                    )),
                    _ => Trigger::AfterCompletions(rng.range_u64(1..=3) as u32),
                };
                let rej = pick(
                    rng,
                    &[
                        (3, RejectReason::ConsumerDefined),
                        (1, RejectReason::StaleConn),
                        (1, RejectReason::Timeout),
                    ],
                );
                let kind = pick(
                    rng,
                    &[
                        (5, CmKind::Dreq),
                        (5, CmKind::Rej(u16::from(rej))),
                        (3, CmKind::Drep),
                        (3, CmKind::Rtu),
                        (3, CmKind::Mra),
                    ],
                );
                let right_ids = rng.chance(0.85);
                let forgery = match rng.below(23) {
                    0..=9 => Forgery::Cm { kind, right_ids },
                    10..=13 => Forgery::Rc {
                        write: rng.chance(0.6),
                        offset: rng.range_u64(0..=12) as i8 - 6,
                        count: rng.range_u64(1..=8) as u8,
                    },
                    14..=15 => Forgery::Ack {
                        count: rng.range_u64(1..=4) as u8,
                    },
                    16..=17 => Forgery::ReqFlood {
                        n: rng.range_u64(1..=10) as u32,
                    },
                    18..=19 => Forgery::StaleReq,
                    _ => Forgery::ForeignPort {
                        what: match rng.below(3) {
                            0 => Foreign::Cm(kind),
                            1 => Foreign::Write,
                            _ => Foreign::Junk,
                        },
                    },
                };
                Attack {
                    when,
                    watch: rng.below(2) as usize,
                    target: rng.below(2) as usize,
                    forgery,
                }
            })
            .collect();
        Hostile { attacks }
    }

    /// One line: each attack's forgery, target and trigger.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for a in &self.attacks {
            let _ = write!(
                s,
                " {:?}->h{}@{:?}/h{}",
                a.forgery, a.target, a.when, a.watch
            );
        }
        s
    }

    /// The earliest time trigger of an attack not fired yet, after `now`.
    pub(super) fn next_at(&self, fired: &[bool], now: SimTime) -> Option<SimTime> {
        self.attacks
            .iter()
            .zip(fired)
            .filter_map(|(a, &f)| match a.when {
                Trigger::At(t) if !f => Some(SimTime(t)),
                _ => None,
            })
            .filter(|&t| t > now)
            .min()
    }

    /// Fires every attack not fired yet whose trigger holds; returns whether one did.
    pub(super) fn strike(
        &self,
        w: &mut World,
        attacker: usize,
        rs: &[Runner],
        fired: &mut [bool],
    ) -> bool {
        let mut acted = false;
        for (i, a) in self.attacks.iter().enumerate() {
            let Some(r) = rs.get(a.watch) else {
                continue;
            };
            let ready = match a.when {
                Trigger::Now => true,
                Trigger::At(t) => w.now() >= SimTime(t),
                Trigger::OnEvent(ev) => r.seen & (1 << ev as u32) != 0,
                Trigger::AfterCompletions(n) => r.completions >= n,
                Trigger::OnEventAfter(ev, ns) => {
                    r.seen & (1 << ev as u32) != 0
                        && w.now() >= SimTime(r.seen_at[ev as usize & 31].saturating_add(ns))
                }
            };
            if fired[i] || !ready {
                continue;
            }
            fired[i] = true;
            acted = true;
            // The attacker keeps going whatever a forgery's fate: errors are not its concern.
            let _ = fire(w, attacker, rs, i as u32, a);
        }
        acted
    }
}

/// The connection end of scripted host `h`, if its runner has one.
fn end_of(rs: &[Runner], h: usize) -> Option<End> {
    rs.get(h).and_then(|r| r.conn)
}

/// Sends attack `a` (number `k` of the scenario, for fresh IDs).
fn fire(
    w: &mut World,
    attacker: usize,
    rs: &[Runner],
    k: u32,
    a: &Attack,
) -> Result<(), verbs_core::Error> {
    let (t, p) = (a.target, 1 - a.target.min(1));
    let target = end_of(rs, t);
    let peer = end_of(rs, p);
    match a.forgery {
        Forgery::Cm { kind, right_ids } => {
            let msg = cm_forgery(w, t, p, kind, right_ids, rs);
            w.forge_mad(attacker, t, &msg)
        }
        Forgery::ForeignPort { what } => {
            // Another port of the peer's IP: any process on that host can bind one.
            let src = SocketAddr::new(host_ip(p), 5555 + (k % 1000) as u16);
            match what {
                Foreign::Cm(kind) => {
                    let msg = cm_forgery(w, t, p, kind, true, rs);
                    let mad = msg.encode(FORGED_TID, 0).map_err(|e| {
                        verbs_core::Error::new(e.errno(), format!("forged MAD: {e}"))
                    })?;
                    let packet = gsi_packet(GSI_QPN, 0, Bytes::copy_from_slice(&mad));
                    w.inject_as(attacker, Some(src), t, Ok(&packet))
                }
                Foreign::Write => {
                    let Some(te) = target else {
                        return Ok(());
                    };
                    let (Some(epsn), Some((addr, rkey))) =
                        (w.rq_psn(te), w.write_target(t, u64::from(k)))
                    else {
                        return Ok(());
                    };
                    let packet = forged_write(te.qp.qp_num, epsn, addr, rkey, 32);
                    w.inject_as(attacker, Some(src), t, Ok(&packet))
                }
                Foreign::Junk => w.inject_as(
                    attacker,
                    Some(src),
                    t,
                    Err(Bytes::from_static(b"\x01junk from another port")),
                ),
            }
        }
        Forgery::ReqFlood { n } => {
            let guid = w.config().cm_config(attacker, 0).ca_guid;
            for i in 0..n {
                let id = (k + 1) << 16 | i;
                let req = forged_req(p, t, guid, id, 0x00a0_0000 | id)?;
                w.forge_mad(attacker, t, &req)?;
            }
            Ok(())
        }
        Forgery::StaleReq => {
            let Some(pe) = peer else {
                return Ok(());
            };
            let guid = w.config().cm_config(p, pe.epoch).ca_guid;
            let req = forged_req(p, t, guid, (k + 1) << 20, pe.qp.qp_num)?;
            w.forge_mad(attacker, t, &req)
        }
        Forgery::Rc {
            write,
            offset,
            count,
        } => {
            let Some(te) = target else {
                return Ok(());
            };
            let (Some(epsn), Some((addr, rkey))) = (w.rq_psn(te), w.write_target(t, u64::from(k)))
            else {
                return Ok(());
            };
            let first = epsn.wrapping_add(offset as u32);
            for d in 0..u32::from(count) {
                let psn = first.wrapping_add(d) & PSN_MASK;
                let len = 16 + 8 * (d % 8);
                let packet = if write {
                    forged_write(te.qp.qp_num, psn, addr, rkey, len)
                } else {
                    forged_send(te.qp.qp_num, psn, len)
                };
                w.inject(attacker, t, &packet)?;
            }
            Ok(())
        }
        Forgery::Ack { count } => {
            let Some(te) = target else {
                return Ok(());
            };
            let Some(next) = w.sq_psn(te) else {
                return Ok(());
            };
            let first = next.wrapping_sub(u32::from(count));
            for d in 0..u32::from(count) {
                let psn = first.wrapping_add(d) & PSN_MASK;
                w.inject(attacker, t, &forged_ack(te.qp.qp_num, psn, psn))?;
            }
            Ok(())
        }
    }
}

/// The CM message `kind` as host `p` (the target `t`'s peer) would send it on the connection
/// now: its comm IDs (XORed with a constant unless `right_ids`), the target's QPN, the
/// message the target is waiting on.
fn cm_forgery(
    w: &World,
    t: usize,
    p: usize,
    kind: CmKind,
    right_ids: bool,
    rs: &[Runner],
) -> CmMessage {
    let target = end_of(rs, t);
    let peer = end_of(rs, p);
    let id_of = |e: Option<End>| e.and_then(|e| w.comm_id(e)).unwrap_or(0);
    let (tc, pc) = (id_of(target), id_of(peer));
    let x = if right_ids { 0 } else { 0x5a5a_5a5a };
    let (tc, pc) = (tc ^ x, pc ^ x);
    let state = target.and_then(|e| w.ib_cm_state(t, e.id));
    let responding_to = match state {
        Some(IbCmState::ReqSent | IbCmState::MraReqRcvd) => CmMsgResponse::Req,
        Some(IbCmState::RepSent | IbCmState::MraRepRcvd) => CmMsgResponse::Rep,
        _ => CmMsgResponse::Other,
    };
    match kind {
        CmKind::Dreq => CmMessage::Dreq(Dreq {
            local_comm_id: pc,
            remote_comm_id: tc,
            remote_qpn_eecn: target.map_or(0, |e| e.qp.qp_num),
            private_data: Vec::new(),
        }),
        CmKind::Rej(reason) => {
            let timeout = reason == u16::from(RejectReason::Timeout);
            let guid = w.config().cm_config(p, w.epoch(p)).ca_guid;
            CmMessage::Rej(Rej {
                local_comm_id: pc,
                remote_comm_id: tc,
                message_rejected: responding_to,
                reason,
                ari: if timeout {
                    guid.to_be_bytes().to_vec()
                } else {
                    Vec::new()
                },
                private_data: Vec::new(),
            })
        }
        CmKind::Drep => CmMessage::Drep(Drep {
            local_comm_id: pc,
            remote_comm_id: tc,
            private_data: Vec::new(),
        }),
        CmKind::Rtu => CmMessage::Rtu(Rtu {
            local_comm_id: pc,
            remote_comm_id: tc,
            private_data: Vec::new(),
        }),
        CmKind::Mra => CmMessage::Mra(Mra {
            local_comm_id: pc,
            remote_comm_id: tc,
            message_mraed: responding_to,
            service_timeout: 24,
            private_data: Vec::new(),
        }),
    }
}

impl Hostile {
    /// After the run: a forged WRITE's payload found where it was aimed (the target's WRITE
    /// destination slot of the attack's number) is a write into an MR without the right peer —
    /// reported as S6. (A forged SEND that landed completes a receive with other bytes: S6 at
    /// once.)
    pub(super) fn landed(&self, w: &World) -> Vec<Violation> {
        let aimed = self
            .attacks
            .iter()
            .enumerate()
            .filter_map(|(k, a)| match a.forgery {
                Forgery::Rc { write: true, .. } => Some((a.target, k as u64)),
                _ => None,
            });
        aimed
            .filter_map(|(h, k)| {
                let off = w.forged_word_in(h, write_slot(k))?;
                Some(Violation {
                    invariant: Invariant::S6,
                    host: h,
                    at: w.now(),
                    message: format!(
                        "a forged payload landed in the host's memory region at offset {off}"
                    ),
                    events: Vec::new(),
                })
            })
            .collect()
    }
}
