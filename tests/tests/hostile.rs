//! A third, hostile host on the deterministic fabric (issue 12): it knows (here: is handed) a
//! live connection's comm IDs, QPNs, PSNs and the peer's memory key and address — the best an
//! attacker could guess — and sends the messages and packets that would tear the connection
//! down, complete it, or write into memory. Each test names the invariant it protects:
//!
//! * **no unrelated teardown** — a connection is set up, rejected or ended only by its own
//!   peers' doing;
//! * **bounded state** — what a flood of requests leaves behind is bounded by the listener's
//!   backlog;
//! * **no write into an MR without the right peer** — a forged WRITE or SEND lands nowhere;
//! * **nothing completed twice**, and nothing completed by anyone but the peer.
//!
//! The oracle then checks the whole history (S1–S7, L1–L3) after an ordinary disconnect; the
//! attacker is marked hostile, so nothing it sent counts as a peer's action there (S5).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use cm_core::api::{CmEventType, CmIdHandle};
use cm_core::engine::{CmCounters, IbCmState};
use cm_core::wire::{
    CmMessage, CmMsgResponse, Drep, Dreq, Rej, RejectReason, Rtu, CM_DREP_ATTR_ID,
};
use rnic_testbed::world::{
    forged_ack, forged_req, forged_send, forged_write, Conn, End, Op, Record, World, WorldConfig,
};
use verbs_core::{Device, WcStatus, PSN_MASK};

const ATTACKER: usize = 2;

fn world(seed: u64) -> World {
    let cfg = WorldConfig {
        hosts: 3,
        ..WorldConfig::two_hosts(seed).fast()
    };
    let mut w = World::new(cfg).unwrap();
    w.set_hostile(ATTACKER);
    w
}

fn comm_id(w: &World, e: End) -> u32 {
    w.comm_id(e).unwrap()
}

fn cm(w: &World, h: usize) -> CmCounters {
    *w.host(h).unwrap().cm().counters()
}

/// A DREQ as `from`'s peer would send it to `to` (`to`'s QPN in it).
fn dreq(w: &World, from: End, to: End) -> CmMessage {
    CmMessage::Dreq(Dreq {
        local_comm_id: comm_id(w, from),
        remote_comm_id: comm_id(w, to),
        remote_qpn_eecn: to.qp.qp_num,
        private_data: Vec::new(),
    })
}

/// Sends `msg` from the attacker's QP1 to host `to`.
fn forge(w: &mut World, to: usize, msg: &CmMessage) {
    w.forge_mad(ATTACKER, to, msg).unwrap();
}

/// Disconnects `c` from its active end, answers on the passive end, runs to quiescence and
/// checks the whole history.
fn disconnect_and_check(w: &mut World, c: Conn) {
    w.disconnect(c.active).unwrap();
    w.wait_event(
        c.passive.host,
        Some(c.passive.id),
        CmEventType::Disconnected,
    )
    .unwrap();
    w.disconnect(c.passive).unwrap();
    w.wait_event(c.active.host, Some(c.active.id), CmEventType::Disconnected)
        .unwrap();
    w.run_to_quiescence();
    w.check().unwrap();
}

/// The events host `h` read for `e`'s id.
fn kinds(w: &World, e: End) -> Vec<CmEventType> {
    w.events_of(e.host, e.id).iter().map(|x| x.1).collect()
}

/// No unrelated teardown: a DREQ with the connection's exact IDs and QPN, sent by another
/// host, neither disconnects the passive side nor draws a DREP; the connection then ends
/// normally and the history passes the oracle.
#[test]
fn a_forged_dreq_from_a_third_host_disconnects_nothing() {
    let mut w = world(7);
    let c = w.establish(0, 1).unwrap();
    let m = dreq(&w, c.active, c.passive);
    forge(&mut w, 1, &m);
    w.run_to_quiescence();
    let passive = w.host(1).unwrap().cm();
    assert_eq!(
        passive.ib_cm_state(c.passive.id),
        Some(IbCmState::Established)
    );
    assert_eq!(passive.engine().counters().rx_wrong_source, 1);
    assert_eq!(
        passive.engine().counters().tx_mads,
        1,
        "only the REP went out"
    );
    disconnect_and_check(&mut w, c);
}

/// No unrelated teardown: a REJ for a connection still being set up (REQ sent, no REP yet),
/// with the right IDs, from another host, does not reject it; the real peer's REP completes it.
#[test]
fn a_forged_rej_from_a_third_host_rejects_nothing() {
    let mut w = world(8);
    w.listen(1).unwrap();
    let a = w.connect(0, 1).unwrap();
    // The REQ is on its way; host 1 has not answered yet.
    let rej = CmMessage::Rej(Rej {
        local_comm_id: 0,
        remote_comm_id: comm_id(&w, a),
        message_rejected: CmMsgResponse::Req,
        reason: u16::from(RejectReason::ConsumerDefined),
        ari: Vec::new(),
        private_data: Vec::new(),
    });
    forge(&mut w, 0, &rej);
    // Long enough for the REJ (and the REQ) to arrive, far shorter than the REQ's timeout.
    w.run_for(2_000_000);
    let active = w.host(0).unwrap().cm();
    assert_eq!(active.engine().counters().rx_wrong_source, 1);
    assert_eq!(active.ib_cm_state(a.id), Some(IbCmState::ReqSent));
    let pid = w.wait_event(1, None, CmEventType::ConnectRequest).unwrap();
    let p = w.accept(1, pid).unwrap();
    w.wait_event(0, Some(a.id), CmEventType::Established)
        .unwrap();
    disconnect_and_check(
        &mut w,
        Conn {
            active: a,
            passive: p,
        },
    );
}

/// No unrelated teardown (here: no set-up either): while the active side has not sent its RTU
/// (its application has not read the CONNECT_RESPONSE yet), an RTU with the right IDs from
/// another host does not establish the passive side; the real RTU does.
#[test]
fn a_forged_rtu_from_a_third_host_establishes_nothing() {
    let mut w = world(9);
    w.listen(1).unwrap();
    // The active application is busy: librdmacm sends the RTU only when it reads the event.
    w.set_event_mode(0, rnic_testbed::world::EventMode::NeverRead);
    let a = w.connect(0, 1).unwrap();
    let pid = w.wait_event(1, None, CmEventType::ConnectRequest).unwrap();
    let p = w.accept(1, pid).unwrap();
    w.run_for(1_000_000);
    assert_eq!(w.ib_cm_state(1, p.id), Some(IbCmState::RepSent));
    let rtu = CmMessage::Rtu(Rtu {
        local_comm_id: comm_id(&w, a),
        remote_comm_id: comm_id(&w, p),
        private_data: Vec::new(),
    });
    forge(&mut w, 1, &rtu);
    w.run_for(1_000_000);
    assert_eq!(cm(&w, 1).rx_wrong_source, 1);
    assert_eq!(w.ib_cm_state(1, p.id), Some(IbCmState::RepSent));
    assert!(!kinds(&w, p).contains(&CmEventType::Established));
    w.set_event_mode(0, rnic_testbed::world::EventMode::AckAtOnce);
    w.wait_event(0, Some(a.id), CmEventType::Established)
        .unwrap();
    w.wait_event(1, Some(p.id), CmEventType::Established)
        .unwrap();
    disconnect_and_check(
        &mut w,
        Conn {
            active: a,
            passive: p,
        },
    );
}

/// No unrelated teardown: while the active side waits for the DREP of its DREQ, a DREP with the
/// right IDs from another host does not end its wait (no DISCONNECTED, still DREQ_SENT); the
/// real peer's DREP does.
#[test]
fn a_forged_drep_from_a_third_host_ends_no_disconnect() {
    let mut w = world(10);
    let c = w.establish(0, 1).unwrap();
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), CmEventType::Disconnected)
        .unwrap();
    // The passive application has not answered: host 0 is in DREQ_SENT.
    let drep = CmMessage::Drep(Drep {
        local_comm_id: comm_id(&w, c.passive),
        remote_comm_id: comm_id(&w, c.active),
        private_data: Vec::new(),
    });
    forge(&mut w, 0, &drep);
    w.run_for(1_000_000);
    assert_eq!(cm(&w, 0).rx_wrong_source, 1);
    assert_eq!(w.ib_cm_state(0, c.active.id), Some(IbCmState::DreqSent));
    assert!(!kinds(&w, c.active).contains(&CmEventType::Disconnected));
    w.disconnect(c.passive).unwrap();
    w.wait_event(0, Some(c.active.id), CmEventType::Disconnected)
        .unwrap();
    assert_eq!(
        w.events_of(0, c.active.id).last().map(|e| (e.1, e.2)),
        Some((CmEventType::Disconnected, 0))
    );
    w.run_to_quiescence();
    w.check().unwrap();
}

/// No unrelated teardown: a REJ and a DREQ from another host with wrong comm IDs match no
/// connection (`rx_unmatched`, `rx_dreq_unknown`). The DREQ is answered as Linux answers any
/// DREQ for an unknown connection — a DREP to its sender, IDs swapped, which the attacker's own
/// CM drops as unmatched — and nothing else moves.
#[test]
fn forged_rej_and_dreq_with_wrong_ids_from_a_third_host_match_nothing() {
    let mut w = world(11);
    let c = w.establish(0, 1).unwrap();
    let (ida, idp) = (comm_id(&w, c.active), comm_id(&w, c.passive));
    let rej = CmMessage::Rej(Rej {
        local_comm_id: idp ^ 0x5a5a,
        remote_comm_id: ida ^ 0x5a5a,
        message_rejected: CmMsgResponse::Other,
        reason: u16::from(RejectReason::ConsumerDefined),
        ari: Vec::new(),
        private_data: Vec::new(),
    });
    forge(&mut w, 0, &rej);
    let bad_dreq = CmMessage::Dreq(Dreq {
        local_comm_id: ida ^ 0x5a5a,
        remote_comm_id: idp ^ 0x5a5a,
        remote_qpn_eecn: c.passive.qp.qp_num,
        private_data: Vec::new(),
    });
    let tx_before = cm(&w, 1).tx_mads;
    forge(&mut w, 1, &bad_dreq);
    w.run_to_quiescence();
    assert_eq!(cm(&w, 0).rx_unmatched, 1, "the REJ");
    assert_eq!(cm(&w, 1).rx_dreq_unknown, 1, "the DREQ");
    assert_eq!(cm(&w, 1).tx_mads, tx_before + 1, "one DREP");
    let (_, drep) = *w.sent_mads(1).last().unwrap();
    assert_eq!(
        (drep.attr, drep.local_comm_id, drep.remote_comm_id),
        (CM_DREP_ATTR_ID, idp ^ 0x5a5a, ida ^ 0x5a5a)
    );
    assert_eq!(cm(&w, ATTACKER).rx_unmatched, 1, "the DREP came back");
    for e in [c.active, c.passive] {
        assert_eq!(w.ib_cm_state(e.host, e.id), Some(IbCmState::Established));
    }
    disconnect_and_check(&mut w, c);
}

/// No unrelated teardown, from the right address: a DREQ from the real peer host whose comm
/// IDs are wrong is a DREQ for an unknown connection — answered with a DREP (IDs swapped, the
/// TID copied, as Linux `cm_issue_drep` does), which the peer's CM drops as unmatched — and a
/// DREQ with the right IDs but another QPN is dropped (`rx_wrong_qpn`, no answer). The
/// connection lives on and ends normally.
#[test]
fn a_dreq_with_wrong_ids_from_the_real_peer_is_answered_as_linux_does() {
    let mut w = world(12);
    let c = w.establish(0, 1).unwrap();
    let (ida, idp) = (comm_id(&w, c.active), comm_id(&w, c.passive));
    let wrong_ids = CmMessage::Dreq(Dreq {
        local_comm_id: ida.wrapping_add(1),
        remote_comm_id: idp.wrapping_add(1),
        remote_qpn_eecn: c.passive.qp.qp_num,
        private_data: Vec::new(),
    });
    w.forge_mad(0, 1, &wrong_ids).unwrap();
    w.run_to_quiescence();
    assert_eq!(cm(&w, 1).rx_dreq_unknown, 1);
    let (_, drep) = *w.sent_mads(1).last().unwrap();
    assert_eq!(
        (drep.attr, drep.local_comm_id, drep.remote_comm_id),
        (CM_DREP_ATTR_ID, idp.wrapping_add(1), ida.wrapping_add(1))
    );
    assert_eq!(
        cm(&w, 0).rx_unmatched,
        1,
        "the DREP matches nothing on host 0"
    );
    let wrong_qpn = CmMessage::Dreq(Dreq {
        local_comm_id: ida,
        remote_comm_id: idp,
        remote_qpn_eecn: c.passive.qp.qp_num ^ 1,
        private_data: Vec::new(),
    });
    let tx_before = cm(&w, 1).tx_mads;
    w.forge_mad(0, 1, &wrong_qpn).unwrap();
    w.run_to_quiescence();
    assert_eq!(cm(&w, 1).rx_wrong_qpn, 1);
    assert_eq!(cm(&w, 1).tx_mads, tx_before, "no answer");
    for e in [c.active, c.passive] {
        assert_eq!(w.ib_cm_state(e.host, e.id), Some(IbCmState::Established));
        assert!(!kinds(&w, e).contains(&CmEventType::Disconnected));
    }
    disconnect_and_check(&mut w, c);
}

/// No unrelated teardown: a REQ that reuses the live connection's CA GUID and QPN says "the
/// active side restarted" (stale connection, cm-spec §2.9): believed only from the active
/// side's address. From another host it draws no REJ 10 and no DREQ to the real peer.
#[test]
fn a_forged_stale_req_from_a_third_host_ends_nothing() {
    let mut w = world(13);
    let c = w.establish(0, 1).unwrap();
    let guid = w.config().cm_config(0, 0).ca_guid;
    let req = forged_req(0, 1, guid, 0x00c0_ffee, c.active.qp.qp_num).unwrap();
    let tx_before = cm(&w, 1).tx_mads;
    forge(&mut w, 1, &req);
    w.run_to_quiescence();
    assert_eq!(cm(&w, 1).rx_wrong_source, 1);
    assert_eq!((cm(&w, 1).rx_stale, cm(&w, 1).tx_mads), (0, tx_before));
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::Established));
    disconnect_and_check(&mut w, c);
}

/// Bounded state, and no unrelated teardown: 3000 REQs with distinct comm IDs and QPNs from
/// another host, while the server's application is busy (reads no event), leave at most the
/// listener's backlog (8) of requests behind — the rest are dropped and counted
/// (`rx_backlog_full`) — and the established connection keeps carrying data. Once the
/// application reads again, it rejects and destroys the 8, and the connection ends normally.
#[test]
fn a_req_flood_from_a_third_host_is_bounded_by_the_backlog() {
    const FLOOD: u32 = 3000;
    const BACKLOG: usize = 8; // World::listen's
    let mut w = world(14);
    let c = w.establish(0, 1).unwrap();
    w.post_recvs(c.passive, 2);
    let ids_before = w.host(1).unwrap().cm().ids().len();
    w.set_event_mode(1, rnic_testbed::world::EventMode::NeverRead);
    let guid = w.config().cm_config(ATTACKER, 0).ca_guid;
    let mut sends = Vec::new();
    for burst in 0..FLOOD / 100 {
        for i in burst * 100..(burst + 1) * 100 {
            let req = forged_req(ATTACKER, 1, guid, 0x1000 + i, 0x10_0000 + i).unwrap();
            forge(&mut w, 1, &req);
        }
        if burst == FLOOD / 200 {
            sends.extend(w.post(c.active, Op::Send, 1));
        }
        w.run_for(100_000);
        let ids = w.host(1).unwrap().cm().ids().len();
        assert!(ids <= ids_before + BACKLOG, "{ids} ids after burst {burst}");
    }
    w.run_to_quiescence();
    let passive = cm(&w, 1);
    assert_eq!(passive.rx_backlog_full, u64::from(FLOOD) - BACKLOG as u64);
    assert_eq!(w.host(1).unwrap().cm().ids().len(), ids_before + BACKLOG);
    assert_eq!(sends.len(), 1);
    assert_eq!(w.wc_status(sends[0]), Some(WcStatus::Success));
    // The application reads again: 8 requests, none of them from its peer.
    let from = w.history().entries.len();
    w.set_event_mode(1, rnic_testbed::world::EventMode::AckAtOnce);
    w.run_for(1_000);
    let requests: Vec<CmIdHandle> = w.history().entries[from..]
        .iter()
        .filter_map(|e| match e.rec {
            Record::Event {
                id,
                event: CmEventType::ConnectRequest,
                ..
            } if e.host == 1 => Some(CmIdHandle(id)),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), BACKLOG);
    // Nobody answered them: each expired once its (forged) active side would have given up,
    // back in IDLE (cm-semantics.md, passive request expiry); the application destroys them.
    assert_eq!(cm(&w, 1).requests_expired, BACKLOG as u64);
    for id in requests {
        assert_eq!(w.ib_cm_state(1, id), Some(IbCmState::Idle));
        w.destroy_id(1, id).unwrap();
    }
    w.run_to_quiescence();
    assert_eq!(w.host(1).unwrap().cm().ids().len(), ids_before);
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::Established));
    disconnect_and_check(&mut w, c);
}

/// The bytes of host `h`'s application memory region.
fn memory(w: &World, h: usize) -> Vec<u8> {
    let mr = w.app_mr(h).unwrap();
    let mut buf = vec![0u8; mr.length as usize];
    w.host(h)
        .unwrap()
        .nic()
        .device()
        .mr_read(mr.handle, 0, &mut buf)
        .unwrap();
    buf
}

/// The offset of the first byte where `a` and `b` differ, if any.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// The completions polled for `wr_id`: (status, S6 data check).
fn completions(w: &World, wr_id: u64) -> Vec<(WcStatus, bool)> {
    w.history()
        .entries
        .iter()
        .filter_map(|e| match e.rec {
            Record::Completion {
                wr_id: id,
                status,
                data_ok,
                ..
            } if id == wr_id => Some((status, data_ok)),
            _ => None,
        })
        .collect()
}

/// No write into an MR without the right peer, nothing completed twice: forged WRITEs into
/// the passive side's WRITE destination (its real address and rkey) and forged SENDs, for the
/// live QP, with every PSN from 8 below to 8 above the one it expects, from another host,
/// change no byte of its memory, consume no receive and move no PSN; the device counts each
/// (`wrong_source`). The real peer's WRITE afterwards lands and completes once.
#[test]
fn forged_writes_and_sends_from_a_third_host_change_no_memory() {
    let mut w = world(15);
    let c = w.establish(0, 1).unwrap();
    w.post_recvs(c.passive, 4);
    w.run_to_quiescence();
    let (qpn, epsn) = (c.passive.qp.qp_num, w.rq_psn(c.passive).unwrap());
    let (addr, rkey) = w.write_target(1, 0).unwrap();
    let before = memory(&w, 1);
    let entries = w.history().entries.len();
    let mut forged = 0;
    for d in 0..=16u32 {
        let psn = epsn.wrapping_add(d).wrapping_sub(8) & PSN_MASK;
        let len = 16 + 8 * d;
        w.inject(ATTACKER, 1, &forged_write(qpn, psn, addr, rkey, len))
            .unwrap();
        w.inject(ATTACKER, 1, &forged_send(qpn, psn, len)).unwrap();
        forged += 2;
    }
    w.run_to_quiescence();
    let dev = w.host(1).unwrap().nic().device().counters();
    assert_eq!(dev.wrong_source, forged);
    assert_eq!(w.history().rc_packets[ATTACKER], forged);
    assert_eq!(
        first_difference(&memory(&w, 1), &before),
        None,
        "a forged byte landed"
    );
    assert_eq!(w.forged_word_in(1, 0..u64::MAX), None);
    assert_eq!(w.rq_psn(c.passive), Some(epsn));
    assert!(
        !w.history().entries[entries..]
            .iter()
            .any(|e| matches!(e.rec, Record::Completion { .. })),
        "a forged packet completed something"
    );
    let ids = w.post(c.active, Op::Write, 1);
    w.run_to_quiescence();
    assert_eq!(completions(&w, ids[0]), [(WcStatus::Success, true)]);
    assert!(
        first_difference(&memory(&w, 1), &before).is_some(),
        "the real WRITE landed"
    );
    disconnect_and_check(&mut w, c);
}

/// Nothing completed but by the peer, nothing completed twice: while the active side's WRITE
/// is cut off from the peer (unacknowledged), forged ACKs for every PSN it may wait on, from
/// another host, complete nothing; once the path heals, the WRITE is retransmitted, lands and
/// completes once, with the right bytes.
#[test]
fn forged_acks_from_a_third_host_complete_nothing() {
    let mut w = world(16);
    let c = w.establish(0, 1).unwrap();
    w.partition_one_way(0, 1, Some(5_000_000));
    let ids = w.post(c.active, Op::Write, 1);
    w.run_for(1_000_000);
    assert_eq!(completions(&w, ids[0]), []);
    let (qpn, next) = (c.active.qp.qp_num, w.sq_psn(c.active).unwrap());
    for d in 0..8u32 {
        let psn = next.wrapping_add(d).wrapping_sub(4) & PSN_MASK;
        w.inject(ATTACKER, 0, &forged_ack(qpn, psn, d)).unwrap();
    }
    w.run_for(1_000_000);
    assert_eq!(w.host(0).unwrap().nic().device().counters().wrong_source, 8);
    assert_eq!(
        completions(&w, ids[0]),
        [],
        "a forged ACK completed the WRITE"
    );
    w.run_to_quiescence();
    assert_eq!(completions(&w, ids[0]), [(WcStatus::Success, true)]);
    disconnect_and_check(&mut w, c);
}

/// The seed swarm's hostile host (docs/explore.md): about one generated scenario in ten has
/// one, every kind of forgery comes up, the forgeries reach the scripted hosts and are dropped
/// there for their source (or, with wrong IDs, match nothing), and every such scenario passes
/// the oracle — no unrelated teardown, nothing completed by a forgery, no forged byte landed.
#[test]
fn generated_hostile_hosts_attack_with_every_forgery_and_pass_the_oracle() {
    use rnic_testbed::scenario::{self, CmKind, Foreign, Forgery};
    let mut kinds = std::collections::BTreeSet::new();
    let (mut hostile, mut cm_wrong_source, mut rc_wrong_source, mut dreq_unknown) = (0, 0, 0, 0);
    let (mut foreign_socket, mut route_in_use) = (0, 0);
    for seed in 0..3000 {
        let sc = scenario::scenario_of(seed);
        let Some(x) = &sc.hostile else {
            continue;
        };
        hostile += 1;
        for a in &x.attacks {
            kinds.insert(match a.forgery {
                Forgery::Cm { kind, right_ids } => {
                    let k = match kind {
                        CmKind::Rej(_) => "REJ",
                        CmKind::Dreq => "DREQ",
                        CmKind::Drep => "DREP",
                        CmKind::Rtu => "RTU",
                        CmKind::Mra => "MRA",
                    };
                    format!("{k} right IDs {right_ids}")
                }
                Forgery::ReqFlood { .. } => "REQ flood".into(),
                Forgery::StaleReq => "stale REQ".into(),
                Forgery::Rc { write, .. } => format!("RC write {write}"),
                Forgery::Ack { .. } => "ACK".into(),
                Forgery::ForeignPort { what } => match what {
                    Foreign::Cm(_) => "foreign-port CM",
                    Foreign::Write => "foreign-port WRITE",
                    Foreign::Junk => "foreign-port junk",
                }
                .into(),
            });
        }
        let report = scenario::run_seed(seed);
        assert!(report.passed(), "seed {seed}: {:?}", report.violations);
        let w = scenario::run(&sc, false).unwrap();
        assert_eq!(w.trace_hash(), report.trace_hash, "seed {seed}");
        for h in 0..2 {
            let host = w.host(h).unwrap();
            cm_wrong_source += host.cm().counters().rx_wrong_source;
            dreq_unknown += host.cm().counters().rx_dreq_unknown;
            rc_wrong_source += host.nic().device().counters().wrong_source;
            foreign_socket += host.nic().datagram_counters().rx_foreign_socket;
            route_in_use += host.nic().peers().counters().route_in_use;
        }
    }
    assert!((210..=390).contains(&hostile), "{hostile} of 3000 seeds");
    assert_eq!(kinds.len(), 18, "{kinds:?}");
    // Datagrams from a peer's IP on another port are refused by the NIC for their socket (a
    // MAD of a GID in use among them), never taken.
    assert!(foreign_socket > 10, "{foreign_socket}");
    assert!(route_in_use > 0, "{route_in_use}");
    assert!(cm_wrong_source > 100, "{cm_wrong_source}");
    assert!(rc_wrong_source > 100, "{rc_wrong_source}");
    assert!(dreq_unknown > 0);
}

/// Determinism: a seed with a hostile host replays byte for byte, its forgeries in the trace.
#[test]
fn a_seed_with_a_hostile_host_replays_byte_for_byte() {
    use rnic_testbed::scenario;
    let seed = (0..100)
        .find(|&s| scenario::scenario_of(s).hostile.is_some())
        .unwrap();
    let a = scenario::replay_seed(seed).trace();
    assert!(a.contains(" host 2.0 sent "), "{a}");
    assert_eq!(a, scenario::replay_seed(seed).trace());
}
