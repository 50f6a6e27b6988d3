//! A third, hostile host on the deterministic fabric (issue 12): it knows (here: is handed)
//! a live connection's comm IDs and QPN — the best an attacker could guess — and sends the
//! messages that would tear it down. Each test names the invariant it protects: **no
//! unrelated teardown** — a connection ends only by its own peers' doing. The oracle then
//! checks the whole history (S1–S7, L1–L3) after an ordinary disconnect.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use cm_core::api::{CmEventType, CmIdHandle};
use cm_core::engine::{IbCmId, IbCmState};
use cm_core::wire::{CmMessage, Dreq, Rej, RejectReason};
use rnic_testbed::world::{host_ip, World, WorldConfig};
use verbs_core::{Gid, GsiEndpoint};

const ATTACKER: usize = 2;

fn world(seed: u64) -> World {
    let cfg = WorldConfig {
        hosts: 3,
        ..WorldConfig::two_hosts(seed).fast()
    };
    World::new(cfg).unwrap()
}

fn comm_id(w: &World, h: usize, id: CmIdHandle) -> u32 {
    let e = w.host(h).unwrap().cm().engine();
    e.local_comm_id(IbCmId(id.0)).unwrap()
}

/// Sends `msg` from the attacker's QP1 to host `to`.
fn forge(w: &mut World, to: usize, msg: &CmMessage) {
    let mad = msg.encode(0x1234_5678, 0).unwrap();
    let dst = Gid::from_ip(host_ip(to));
    let (_, dev) = w.host_mut(ATTACKER).unwrap().split();
    GsiEndpoint::gsi_send(dev, dst, &mad).unwrap();
}

/// No unrelated teardown: a DREQ with the connection's exact IDs and QPN, sent by another
/// host, neither disconnects the passive side nor draws a DREP; the connection then ends
/// normally and the history passes the oracle.
#[test]
fn a_forged_dreq_from_a_third_host_disconnects_nothing() {
    let mut w = world(7);
    let c = w.establish(0, 1).unwrap();
    let dreq = CmMessage::Dreq(Dreq {
        local_comm_id: comm_id(&w, 0, c.active.id),
        remote_comm_id: comm_id(&w, 1, c.passive.id),
        remote_qpn_eecn: c.passive.qp.qp_num,
        private_data: Vec::new(),
    });
    forge(&mut w, 1, &dreq);
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
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), CmEventType::Disconnected)
        .unwrap();
    w.disconnect(c.passive).unwrap();
    w.run_to_quiescence();
    w.check().unwrap();
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
        remote_comm_id: comm_id(&w, 0, a.id),
        message_rejected: cm_core::wire::CmMsgResponse::Req,
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
    w.disconnect(a).unwrap();
    w.wait_event(1, Some(p.id), CmEventType::Disconnected)
        .unwrap();
    w.disconnect(p).unwrap();
    w.run_to_quiescence();
    w.check().unwrap();
}
