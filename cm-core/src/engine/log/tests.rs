//! The log tells a connection's story, and logging changes nothing the engine does.

use super::super::*;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata};

/// One logged event: its message and its other fields, as text (quotes stripped).
#[derive(Debug, Clone)]
struct Line {
    message: String,
    fields: BTreeMap<String, String>,
}

impl Line {
    fn get(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }
}

/// A subscriber that keeps every event (any level).
struct Capture(Arc<Mutex<Vec<Line>>>);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let v = format!("{value:?}").trim_matches('"').to_string();
        if field.name() == "message" {
            self.message = v;
        } else {
            self.fields.insert(field.name().to_string(), v);
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut line = Line {
            message: String::new(),
            fields: BTreeMap::new(),
        };
        e.record(&mut line);
        if let Ok(mut v) = self.0.lock() {
            v.push(line);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Runs `f` with [`Capture`] as this thread's subscriber: `f`'s result and the events.
fn captured<R>(f: impl FnOnce() -> R) -> (R, Vec<Line>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let r = tracing::subscriber::with_default(Capture(seen.clone()), f);
    let lines = seen.lock().map(|v| v.clone()).unwrap_or_default();
    (r, lines)
}

fn gid(n: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, n))
}

fn engine(guid: u64) -> CmEngine {
    CmEngine::new(CmConfig {
        ca_guid: guid,
        seed: guid,
        ..CmConfig::default()
    })
}

/// Delivers every MAD `from` queued to `to`; returns them (destination and bytes).
fn pump(now: SimTime, from: &mut CmEngine, src: Gid, to: &mut CmEngine) -> Vec<(Gid, Vec<u8>)> {
    let mut sent = Vec::new();
    while let Some((dst, mad)) = from.poll_transmit() {
        to.handle_datagram(now, src, &mad);
        sent.push((dst, mad.to_vec()));
    }
    sent
}

/// What one run of [`story`] did: every MAD on the wire in order, every event of both sides.
type Outcome = (Vec<(Gid, Vec<u8>)>, Vec<IbCmEvent>, Vec<IbCmEvent>);

/// Connect, disconnect from `a`, TimeWait on both sides, then destroy: the whole life of one
/// connection between `a` (10.0.0.1) and `b` (10.0.0.2).
fn story() -> Outcome {
    let (mut a, mut b) = (engine(0xA), engine(0xB));
    let (mut wire, mut ev_a, mut ev_b) = (Vec::new(), Vec::new(), Vec::new());
    let mut drain = |a: &mut CmEngine, b: &mut CmEngine| {
        ev_a.extend(std::iter::from_fn(|| a.poll_event()));
        ev_b.extend(std::iter::from_fn(|| b.poll_event()));
    };
    let t0 = SimTime::ZERO;
    let l = b.create_id();
    b.listen(l, 7471, 4).unwrap();
    let ia = a.create_id();
    let req = ReqParams {
        service_id: 7471,
        local_gid: gid(1),
        remote_gid: gid(2),
        local_qpn: 0x11,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        private_data: vec![],
    };
    a.send_req(t0, ia, &req).unwrap();
    wire.extend(pump(t0, &mut a, gid(1), &mut b));
    let ib = b.poll_event().unwrap().id;
    let rep = RepParams {
        local_qpn: 0x22,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: vec![],
    };
    b.send_rep(t0, ib, &rep).unwrap();
    wire.extend(pump(t0, &mut b, gid(2), &mut a));
    a.send_rtu(ia, &[]).unwrap();
    wire.extend(pump(t0, &mut a, gid(1), &mut b));
    a.send_dreq(t0, ia, &[]).unwrap();
    wire.extend(pump(t0, &mut a, gid(1), &mut b));
    b.send_drep(t0, ib, &[]).unwrap();
    wire.extend(pump(t0, &mut b, gid(2), &mut a));
    drain(&mut a, &mut b);
    let later = SimTime::from_millis(10_000);
    a.handle_timeout(later);
    b.handle_timeout(later);
    drain(&mut a, &mut b);
    a.destroy_id(later, ia);
    b.destroy_id(later, ib);
    (wire, ev_a, ev_b)
}

/// The state changes logged for the id whose Local Comm ID is `comm`, as `from→to`.
fn changes(lines: &[Line], comm: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.message == "IB CM state" && l.get("local_comm_id") == Some(comm))
        .map(|l| format!("{}→{}", l.get("from").unwrap(), l.get("state").unwrap()))
        .collect()
}

#[test]
fn the_log_tells_the_story_of_a_connection() {
    let ((wire, _, _), lines) = captured(story);
    // The active side's comm ID, from its REQ (message offset 0).
    let req = wire.first().unwrap();
    let comm = u32::from_be_bytes(req.1[24..28].try_into().unwrap()).to_string();
    assert_eq!(
        changes(&lines, &comm),
        [
            "IDLE→REQ_SENT",
            "REQ_SENT→REP_RCVD",
            "REP_RCVD→ESTABLISHED",
            "ESTABLISHED→DREQ_SENT",
            "DREQ_SENT→TIMEWAIT",
            "TIMEWAIT→IDLE",
        ]
    );
    // Every MAD is logged once when sent and once when received, with its IBTA name, in
    // wire order.
    let named = |msg: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.message == msg)
            .map(|l| l.get("attr").unwrap().to_string())
            .collect()
    };
    let order = ["REQ", "REP", "RTU", "DREQ", "DREP"];
    assert_eq!(named("MAD sent"), order);
    assert_eq!(named("MAD received"), order);
    let destroyed = lines.iter().filter(|l| l.message == "IB CM id destroyed");
    assert_eq!(destroyed.count(), 2);
}

/// Tracing must never change behaviour: the same run with every event wanted and with no
/// subscriber at all puts the same MADs on the wire and raises the same events.
#[test]
fn logging_changes_nothing_the_engine_does() {
    let (logged, lines) = captured(story);
    assert!(lines.len() > 20, "{} lines", lines.len());
    let silent =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), story);
    assert_eq!(logged, silent);
}

/// Drops of bad input are logged with the counter they are counted in.
#[test]
fn dropped_mads_say_why() {
    let (mut a, mut b) = (engine(0xA), engine(0xB));
    let ((), lines) = captured(|| {
        let t0 = SimTime::ZERO;
        // Malformed: too short.
        a.handle_datagram(t0, gid(9), &[0u8; 10]);
        // A DREP for no connection.
        let drep = CmMessage::Drep(Drep {
            local_comm_id: 5,
            remote_comm_id: 6,
            private_data: vec![],
        });
        a.handle_datagram(t0, gid(9), &drep.encode(1, 0).unwrap());
        // A REQ for a service nobody listens on: answered with REJ 8.
        let ib = b.create_id();
        let req = ReqParams {
            service_id: 99,
            local_gid: gid(2),
            remote_gid: gid(1),
            local_qpn: 0x22,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            private_data: vec![],
        };
        b.send_req(t0, ib, &req).unwrap();
        pump(t0, &mut b, gid(2), &mut a);
        pump(t0, &mut a, gid(1), &mut b);
    });
    let whys: Vec<&str> = lines
        .iter()
        .filter(|l| l.message.starts_with("MAD dropped"))
        .map(|l| l.get("why").or(l.get("error")).unwrap())
        .collect();
    assert_eq!(whys.len(), 3, "{lines:#?}");
    assert!(whys[0].contains("256"), "{whys:?}"); // the decode error names the length
    assert!(whys[1].starts_with("rx_unmatched"), "{whys:?}");
    assert!(whys[2].starts_with("rx_no_listener"), "{whys:?}");
    assert_eq!(a.counters().rx_malformed, 1);
    assert_eq!(a.counters().rx_unmatched, 1);
    // The REJ is logged on both sides with its reason, as Linux names it.
    let rej: Vec<&Line> = lines
        .iter()
        .filter(|l| l.get("attr") == Some("REJ"))
        .collect();
    assert_eq!(rej.len(), 2);
    for l in rej {
        assert_eq!(l.get("reason"), Some("8"));
        assert_eq!(l.get("why"), Some("invalid service ID"));
    }
}

/// A REQ nobody answers: every retransmission is logged with its send number, then the
/// give-up, and the id goes back to IDLE.
#[test]
fn retransmissions_and_the_give_up_are_logged() {
    let mut a = engine(0xA);
    let ((), lines) = captured(|| {
        let ia = a.create_id();
        let req = ReqParams {
            service_id: 1,
            local_gid: gid(1),
            remote_gid: gid(2),
            local_qpn: 0x11,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            private_data: vec![],
        };
        a.send_req(SimTime::ZERO, ia, &req).unwrap();
        while let Some(t) = a.poll_timeout() {
            while a.poll_transmit().is_some() {}
            a.handle_timeout(t);
        }
    });
    let sends: Vec<&str> = lines
        .iter()
        .filter(|l| l.message == "MAD retransmitted")
        .map(|l| l.get("send").unwrap())
        .collect();
    let expected: Vec<String> = (2..=16).map(|n| n.to_string()).collect();
    assert_eq!(sends, expected);
    let gave_up = lines
        .iter()
        .position(|l| l.message.starts_with("MAD timed out"))
        .unwrap();
    assert_eq!(lines[gave_up].get("attr"), Some("REQ"));
    assert_eq!(lines[gave_up].get("sends"), Some("16"));
    let idle = &lines[gave_up + 1];
    assert_eq!(
        (idle.get("from"), idle.get("state")),
        (Some("REQ_SENT"), Some("IDLE"))
    );
}
