//! Hostile SIDR input to the engine: arbitrary SIDR_REQs and SIDR_REPs — any field values, any
//! of three senders, Request IDs aimed at the ids that exist — are each counted at most once
//! and dropped or answered, never panic, never move an id they do not belong to, and never
//! hold more passive ids than the listener's backlog (the bound on what the network can make
//! the engine keep).

use cm_core::engine::{CmConfig, CmEngine, IbCmEventKind, IbCmId, IbCmState, SidrReqParams};
use cm_core::wire::{ip_service_id, CmMessage, RdmaPortSpace, SidrRep, SidrReq};
use proptest::prelude::*;
use std::net::Ipv4Addr;
use verbs_core::{Gid, SimTime};

const BACKLOG: u32 = 4;

fn gid(n: u8) -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, n))
}

fn service() -> u64 {
    ip_service_id(RdmaPortSpace::Udp, 7174)
}

/// One forged MAD: kind, sender (1: the active id's peer, 2 and 3: others), Request ID
/// choice, status, service ID choice, QPN, Q_Key.
type Forged = (bool, u8, u8, u32, u8, bool, u32, u32);

fn forged() -> impl Strategy<Value = Forged> {
    (
        any::<bool>(),
        1u8..=3,
        0u8..3,
        any::<u32>(),
        any::<u8>(),
        any::<bool>(),
        any::<u32>(),
        any::<u32>(),
    )
}

fn rx_sum(e: &CmEngine) -> u64 {
    let c = e.counters();
    c.rx_malformed
        + c.rx_wrong_source
        + c.rx_unmatched
        + c.rx_duplicates
        + c.rx_wrong_state
        + c.rx_wrong_qpn
        + c.rx_stale
        + c.rx_no_listener
        + c.rx_backlog_full
        + c.rx_dreq_unknown
}

proptest! {
    #[test]
    fn forged_sidr_mads_are_counted_answered_or_dropped_and_bounded(
        mads in proptest::collection::vec(forged(), 1..40),
    ) {
        let mut e = CmEngine::new(CmConfig { ca_guid: 0xB, seed: 5, ..CmConfig::default() });
        let listener = e.create_id();
        e.listen(listener, service(), BACKLOG).unwrap();
        // An active SIDR id of this engine, resolving a service at host 1.
        let active = e.create_id();
        let p = SidrReqParams {
            service_id: service(),
            local_gid: gid(9),
            remote_gid: gid(1),
            pkey: 0xFFFF,
            private_data: vec![],
        };
        e.send_sidr_req(SimTime::ZERO, active, &p).unwrap();
        while e.poll_transmit().is_some() {}
        let active_req = e.local_comm_id(active).unwrap();
        let mut passive: Vec<IbCmId> = Vec::new();
        for (is_req, from, which, raw_id, status, right_service, qpn, qkey) in mads {
            let request_id = match which {
                0 => active_req,
                1 => raw_id & 0xF, // a few values, so that duplicates happen
                _ => raw_id,
            };
            let msg = if is_req {
                CmMessage::SidrReq(SidrReq {
                    request_id,
                    partition_key: 0xFFFF,
                    service_id: if right_service { service() } else { u64::from(raw_id) },
                    private_data: vec![],
                })
            } else {
                CmMessage::SidrRep(SidrRep {
                    request_id,
                    status,
                    qpn,
                    q_key: qkey,
                    service_id: service(),
                    ..SidrRep::default()
                })
            };
            let mad = msg.encode(u64::from(raw_id), 0).unwrap();
            let before_state = e.state(active);
            let before = (e.counters().rx_mads, rx_sum(&e));
            e.handle_datagram(SimTime::ZERO, gid(from), &mad);
            prop_assert_eq!(e.counters().rx_mads, before.0 + 1);
            prop_assert!(rx_sum(&e) - before.1 <= 1, "one MAD moved more than one counter");
            if from != 1 {
                prop_assert_eq!(e.state(active), before_state, "a stranger moved the active id");
            }
            while let Some(ev) = e.poll_event() {
                match ev.kind {
                    IbCmEventKind::SidrReqReceived(info) => {
                        prop_assert_eq!(info.listen_id, listener);
                        prop_assert_eq!(e.state(ev.id), Some(IbCmState::SidrReqRcvd));
                        passive.push(ev.id);
                    }
                    IbCmEventKind::SidrRepReceived(_) => {
                        prop_assert_eq!(ev.id, active);
                        prop_assert_eq!(e.state(active), Some(IbCmState::Idle));
                    }
                    other => return Err(TestCaseError::fail(format!("{other:?}"))),
                }
            }
            prop_assert!(passive.len() <= BACKLOG as usize, "more requests than the backlog");
            while e.poll_transmit().is_some() {}
        }
        // Every request is still answerable: destroying them answers each with status 2.
        for id in passive {
            e.destroy_id(SimTime::ZERO, id);
            let (_, mad) = e.poll_transmit().unwrap();
            let (_, m) = cm_core::wire::decode(&mad).unwrap();
            prop_assert!(matches!(m, CmMessage::SidrRep(r) if r.status == 2));
        }
    }
}
