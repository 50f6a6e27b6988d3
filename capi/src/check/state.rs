//! What the checker remembers of the program's history — the objects it made and has not
//! destroyed, the CM events it fetched and has not acked — and the rules that run on it, as
//! the program calls and at exit. Objects are named by their addresses (as the program sees
//! them) or numbers; nothing here dereferences them.

use super::report::Finding;
use super::rules::Rule;
use std::collections::{BTreeMap, BTreeSet};
use std::thread::ThreadId;

/// A CM event returned by `rdma_get_cm_event` and not acked yet.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The id whose count of unacked events it is in: the listener for a CONNECT_REQUEST
    /// (librdmacm's `evt->id_priv`), else the event's id.
    pub counted_against: usize,
    /// `RDMA_CM_EVENT_…`.
    pub kind: &'static str,
    /// The thread that fetched it.
    pub thread: ThreadId,
    /// When.
    pub at_ms: u64,
}

/// An id alive at exit, as librnic's tables have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveId {
    /// The `rdma_cm_id *`.
    pub id: usize,
    /// Its event channel (0: none, a synchronous id).
    pub channel: usize,
    /// Its QP if that QP still exists.
    pub qp: Option<usize>,
}

/// The objects alive at exit, as librnic's tables have them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// rdma_cm ids.
    pub ids: Vec<LiveId>,
    /// QPs: address and number.
    pub qps: Vec<(usize, u32)>,
    /// CQs: address and whether each overran.
    pub cqs: Vec<(usize, bool)>,
    /// Events queued on a live id's channel and never fetched: the id (the listener, for a
    /// CONNECT_REQUEST) and the event's name. [`State::at_exit`] decides which of them are
    /// findings.
    pub unfetched: Vec<(usize, &'static str)>,
}

/// The checker's memory (see the module docs).
#[derive(Debug, Default)]
pub struct State {
    /// Findings so far, in order.
    pub findings: Vec<Finding>,
    /// Unacked events, by `rdma_cm_event *`.
    pub events: BTreeMap<usize, Fetched>,
    /// Ids that got DEVICE_REMOVAL: when.
    pub removed: BTreeMap<usize, u64>,
    /// Passive ids: the new ids of the CONNECT_REQUESTs fetched, until destroyed.
    pub passive: BTreeSet<usize>,
    /// PDs from `ibv_alloc_pd`.
    pub pds: BTreeSet<usize>,
    /// MRs from `ibv_reg_mr*`.
    pub mrs: BTreeSet<usize>,
    /// Event channels from `rdma_create_event_channel`.
    pub channels: BTreeSet<usize>,
    /// CQs already reported as overrun.
    pub overran: BTreeSet<usize>,
    /// Events fetched, by name.
    pub cm_events: BTreeMap<&'static str, u64>,
}

impl State {
    fn find(&mut self, rule: Rule, at_ms: u64, call: Option<&'static str>, message: String) {
        self.findings.push(Finding::new(rule, at_ms, call, message));
    }

    /// `rdma_get_cm_event` returned `event` (see [`Fetched`]).
    pub fn fetched(&mut self, event: usize, id: usize, f: Fetched) {
        *self.cm_events.entry(f.kind).or_default() += 1;
        match f.kind {
            "RDMA_CM_EVENT_DEVICE_REMOVAL" => {
                self.removed.insert(id, f.at_ms);
            }
            "RDMA_CM_EVENT_CONNECT_REQUEST" => {
                self.passive.insert(id);
            }
            _ => {}
        }
        self.events.insert(event, f);
    }

    /// `rdma_ack_cm_event(event)`.
    pub fn acked(&mut self, event: usize) {
        self.events.remove(&event);
    }

    /// `rdma_destroy_id(id)` is called by `thread`; `qp` is the id's QP if it still exists.
    pub fn destroying_id(&mut self, id: usize, qp: Option<usize>, thread: ThreadId, at_ms: u64) {
        let call = Some("rdma_destroy_id");
        let mine: Vec<(usize, &'static str)> = self
            .events
            .iter()
            .filter(|(_, f)| f.counted_against == id && f.thread == thread)
            .map(|(e, f)| (*e, f.kind))
            .collect();
        for (e, kind) in mine {
            self.find(
                Rule::DestroyIdUnackedEvent,
                at_ms,
                call,
                format!(
                    "rdma_destroy_id(id {id:#x}) by the thread that fetched {kind} (event \
                     {e:#x}) for it and has not acked it: the call waits for that ack forever"
                ),
            );
        }
        if let Some(qp) = qp {
            self.find(
                Rule::DestroyIdWithQp,
                at_ms,
                call,
                format!(
                    "rdma_destroy_id(id {id:#x}) while its QP {qp:#x} exists (call \
                     rdma_destroy_qp first)"
                ),
            );
        }
    }

    /// `rdma_destroy_id(id)` succeeded.
    pub fn id_destroyed(&mut self, id: usize) {
        self.removed.remove(&id);
        self.passive.remove(&id);
    }

    /// Whether leaving event `kind` of `id` unfetched breaks `event-never-fetched`: not for
    /// TIMEWAIT_EXIT (programs commonly destroy the id without waiting for it), nor for
    /// ESTABLISHED on a passive id — librdmacm's `rdma_accept` already moved the QP to RTS
    /// (cma.c `rdma_accept`: `ucma_modify_qp_rtr`, `ucma_modify_qp_rts`) and fetching the event
    /// only copies its parameters, so a server may send and receive without reading it (on
    /// the active side the same event is the CONNECT_RESPONSE, whose fetch moves the QP to
    /// RTS and sends the RTU: unread, the connection never completes).
    fn must_fetch(&self, id: usize, kind: &str) -> bool {
        match kind {
            "RDMA_CM_EVENT_TIMEWAIT_EXIT" => false,
            "RDMA_CM_EVENT_ESTABLISHED" => !self.passive.contains(&id),
            _ => true,
        }
    }

    /// `rdma_destroy_event_channel(channel)` is called while `ids` ids report to it.
    pub fn destroying_channel(&mut self, channel: usize, ids: usize, at_ms: u64) {
        self.channels.remove(&channel);
        if ids > 0 {
            self.find(
                Rule::DestroyChannelWithIds,
                at_ms,
                Some("rdma_destroy_event_channel"),
                format!(
                    "rdma_destroy_event_channel(channel {channel:#x}) while {ids} id(s) still \
                     report to it"
                ),
            );
        }
    }

    /// `ibv_dereg_mr(mr)` is called; `posted` is a posted WR naming it: QP number, `wr_id`.
    pub fn deregistering(&mut self, mr: usize, lkey: u32, posted: Option<(u32, u64)>, at_ms: u64) {
        self.mrs.remove(&mr);
        if let Some((qpn, wr_id)) = posted {
            self.find(
                Rule::DeregMrUnderPostedWr,
                at_ms,
                Some("ibv_dereg_mr"),
                format!(
                    "ibv_dereg_mr(mr {mr:#x}, lkey {lkey:#x}) while WR wr_id {wr_id} posted on \
                     QP {qpn} names it and has not completed"
                ),
            );
        }
    }

    /// CQ `cq` overran (seen at `call`, or at exit): reported once per CQ.
    pub fn overran(&mut self, cq: usize, call: Option<&'static str>, at_ms: u64) {
        if self.overran.insert(cq) {
            self.find(
                Rule::CqOverrun,
                at_ms,
                call,
                format!(
                    "CQ {cq:#x} overran: more completions were due than it has entries, and \
                     some were lost (size it for every WR that can complete on it)"
                ),
            );
        }
    }

    /// The rules checked at a normal exit, on what is `live`.
    pub fn at_exit(&mut self, live: &Live, at_ms: u64) {
        let events: Vec<(usize, Fetched)> =
            self.events.iter().map(|(e, f)| (*e, f.clone())).collect();
        for (e, f) in &events {
            self.find(
                Rule::EventNotAcked,
                at_ms,
                None,
                format!(
                    "{} (event {e:#x}, fetched at {} ms for id {:#x}) never acked",
                    f.kind, f.at_ms, f.counted_against
                ),
            );
        }
        let removed: Vec<(usize, u64)> = live
            .ids
            .iter()
            .filter_map(|i| Some((i.id, *self.removed.get(&i.id)?)))
            .collect();
        for (id, at) in &removed {
            self.find(
                Rule::DeviceRemovalIgnored,
                at_ms,
                None,
                format!(
                    "id {id:#x} got RDMA_CM_EVENT_DEVICE_REMOVAL at {at} ms and was never \
                     destroyed"
                ),
            );
        }
        let unfetched: Vec<(usize, &'static str)> = live
            .unfetched
            .iter()
            .copied()
            .filter(|(id, kind)| self.must_fetch(*id, kind))
            .collect();
        for (id, kind) in &unfetched {
            self.find(
                Rule::EventNeverFetched,
                at_ms,
                None,
                format!("{kind} for id {id:#x} arrived and was never fetched"),
            );
        }
        for (cq, overran) in &live.cqs {
            if *overran {
                self.overran(*cq, None, at_ms);
            }
        }
        // What a finding above already names is not a leak too: an id with an unacked event
        // could not be destroyed (rdma_destroy_id would wait), nor its channel and QP.
        let named: BTreeSet<usize> = events
            .iter()
            .map(|(_, f)| f.counted_against)
            .chain(removed.iter().map(|(id, _)| *id))
            .chain(unfetched.iter().map(|(id, _)| *id))
            .collect();
        let mut excused_channels = BTreeSet::new();
        let mut excused_qps = BTreeSet::new();
        let mut leaked = Vec::new();
        for i in &live.ids {
            if named.contains(&i.id) {
                excused_channels.insert(i.channel);
                excused_qps.extend(i.qp);
            } else {
                leaked.push(format!("id {:#x}", i.id));
            }
        }
        leaked.extend(
            live.qps
                .iter()
                .filter(|(p, _)| !excused_qps.contains(p))
                .map(|(p, n)| format!("QP {p:#x} (qp_num {n})")),
        );
        leaked.extend(live.cqs.iter().map(|(p, _)| format!("CQ {p:#x}")));
        leaked.extend(self.mrs.iter().map(|p| format!("MR {p:#x}")));
        leaked.extend(self.pds.iter().map(|p| format!("PD {p:#x}")));
        leaked.extend(
            self.channels
                .iter()
                .filter(|c| !excused_channels.contains(c))
                .map(|c| format!("event channel {c:#x}")),
        );
        if !leaked.is_empty() {
            self.find(
                Rule::Leak,
                at_ms,
                None,
                format!("at exit, never destroyed: {}", leaked.join(", ")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(kind: &'static str, against: usize) -> Fetched {
        Fetched {
            counted_against: against,
            kind,
            thread: std::thread::current().id(),
            at_ms: 1,
        }
    }

    fn rules(s: &State) -> Vec<&'static str> {
        s.findings.iter().map(|f| f.rule).collect()
    }

    #[test]
    fn destroying_an_id_with_an_event_this_thread_holds_is_a_finding() {
        let mut s = State::default();
        s.fetched(0x10, 0x1, fetched("RDMA_CM_EVENT_ADDR_RESOLVED", 0x1));
        s.destroying_id(0x2, None, std::thread::current().id(), 2);
        assert!(s.findings.is_empty(), "another id's event");
        s.destroying_id(0x1, None, std::thread::current().id(), 2);
        assert_eq!(rules(&s), ["destroy-id-unacked-event"]);
    }

    #[test]
    fn another_threads_event_is_not_a_finding() {
        // rping: the CM thread acks the event main's rdma_destroy_id waits for.
        let mut s = State::default();
        let other = std::thread::Builder::new()
            .spawn(|| std::thread::current().id())
            .unwrap()
            .join()
            .unwrap();
        s.fetched(0x10, 0x1, fetched("RDMA_CM_EVENT_DISCONNECTED", 0x1));
        s.destroying_id(0x1, None, other, 2);
        assert!(s.findings.is_empty());
    }

    #[test]
    fn a_clean_exit_has_no_finding_and_leaks_are_one() {
        let mut s = State::default();
        s.at_exit(&Live::default(), 5);
        assert!(s.findings.is_empty());
        s.pds.insert(0x30);
        s.at_exit(
            &Live {
                qps: vec![(0x40, 17)],
                ..Live::default()
            },
            6,
        );
        assert_eq!(rules(&s), ["leak"]);
        assert!(s.findings[0].message.contains("qp_num 17"));
        assert!(s.findings[0].message.contains("PD 0x30"));
    }

    #[test]
    fn an_unacked_event_excuses_its_id_and_channel_from_the_leak() {
        let mut s = State::default();
        s.channels.insert(0x50);
        s.fetched(0x10, 0x1, fetched("RDMA_CM_EVENT_ADDR_RESOLVED", 0x1));
        let live = Live {
            ids: vec![LiveId {
                id: 0x1,
                channel: 0x50,
                qp: None,
            }],
            ..Live::default()
        };
        s.at_exit(&live, 5);
        assert_eq!(rules(&s), ["event-not-acked"]);
    }

    #[test]
    fn an_unfetched_disconnected_names_its_id_instead_of_a_leak() {
        let mut s = State::default();
        s.channels.insert(0x50);
        let live = Live {
            ids: vec![LiveId {
                id: 0x1,
                channel: 0x50,
                qp: None,
            }],
            unfetched: vec![(0x1, "RDMA_CM_EVENT_DISCONNECTED")],
            ..Live::default()
        };
        s.at_exit(&live, 5);
        assert_eq!(rules(&s), ["event-never-fetched"]);
        assert!(s.findings[0].message.contains("DISCONNECTED"));
    }

    /// perftest's `-R` server: it accepts its control connection and never reads the
    /// ESTABLISHED, nor destroys the id: a leak, not an event left unfetched.
    #[test]
    fn an_unfetched_established_of_a_passive_id_is_no_finding_but_the_leak_is() {
        let mut s = State::default();
        s.channels.insert(0x50);
        s.fetched(0x10, 0x2, fetched("RDMA_CM_EVENT_CONNECT_REQUEST", 0x1));
        s.acked(0x10);
        let live = Live {
            ids: vec![LiveId {
                id: 0x2,
                channel: 0x50,
                qp: None,
            }],
            unfetched: vec![
                (0x2, "RDMA_CM_EVENT_ESTABLISHED"),
                (0x2, "RDMA_CM_EVENT_TIMEWAIT_EXIT"),
            ],
            ..Live::default()
        };
        s.at_exit(&live, 5);
        assert_eq!(rules(&s), ["leak"]);
        assert!(s.findings[0].message.contains("id 0x2"), "{:?}", s.findings);
    }

    #[test]
    fn an_unfetched_established_of_an_active_id_is_a_finding() {
        // The same address reused by an active id after the passive one was destroyed.
        let mut s = State::default();
        s.fetched(0x10, 0x2, fetched("RDMA_CM_EVENT_CONNECT_REQUEST", 0x1));
        s.acked(0x10);
        s.id_destroyed(0x2);
        let live = Live {
            ids: vec![LiveId {
                id: 0x2,
                channel: 0x50,
                qp: None,
            }],
            unfetched: vec![(0x2, "RDMA_CM_EVENT_ESTABLISHED")],
            ..Live::default()
        };
        s.at_exit(&live, 5);
        assert_eq!(rules(&s), ["event-never-fetched"]);
    }

    #[test]
    fn device_removal_then_no_destroy_is_one_finding() {
        let mut s = State::default();
        s.fetched(0x10, 0x1, fetched("RDMA_CM_EVENT_DEVICE_REMOVAL", 0x1));
        s.acked(0x10);
        let live = Live {
            ids: vec![LiveId {
                id: 0x1,
                channel: 0,
                qp: None,
            }],
            ..Live::default()
        };
        s.at_exit(&live, 5);
        assert_eq!(rules(&s), ["device-removal-ignored"]);
    }
}
