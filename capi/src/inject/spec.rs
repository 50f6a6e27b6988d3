//! The fault grammar of `rnic exec --fault SPEC` and `RNIC_FAULTS` (`;`-separated specs),
//! documented in docs/check.md, "Faults":
//!
//! ```text
//! drop:KIND:NTH[:DIR]        KIND: REQ REP RTU MRA REJ DREQ DREP; NTH: N, N-M or *;
//!                            DIR: tx, rx, any
//! dup:KIND:NTH[:DIR]
//! delay:KIND:NTH:DUR[:DIR]
//! drop:rc:T:D[:P]            RC packets, both ways, from T for D, each with probability P
//!                            (default 1)
//! delay:rc:T:D:DUR           RC packets from T for D held back DUR
//! partition:T:D              every datagram, both ways, from T for D
//! silence:WHEN               from WHEN on, no datagram in or out (a host that lost power)
//! remove:WHEN                device removal (hot unplug)
//! kill:WHEN                  SIGKILL of the program
//! WHEN: DUR | on:EVENT[:N] | after:N:completions
//! DUR: a number with unit us, ms or s (e.g. 1500ms, 2s); times count from the RNIC's start
//! ```

use std::fmt;

/// A CM message kind (IBTA 12.6 AttributeIDs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmKind {
    /// REQ (0x0010).
    Req,
    /// MRA (0x0011).
    Mra,
    /// REJ (0x0012).
    Rej,
    /// REP (0x0013).
    Rep,
    /// RTU (0x0014).
    Rtu,
    /// DREQ (0x0015).
    Dreq,
    /// DREP (0x0016).
    Drep,
}

const KINDS: [(&str, CmKind, u16); 7] = [
    ("REQ", CmKind::Req, 0x0010),
    ("MRA", CmKind::Mra, 0x0011),
    ("REJ", CmKind::Rej, 0x0012),
    ("REP", CmKind::Rep, 0x0013),
    ("RTU", CmKind::Rtu, 0x0014),
    ("DREQ", CmKind::Dreq, 0x0015),
    ("DREP", CmKind::Drep, 0x0016),
];

impl CmKind {
    /// The kind of a MAD's AttributeID, if it is one of the seven.
    pub fn from_attr_id(id: u16) -> Option<CmKind> {
        KINDS.iter().find(|k| k.2 == id).map(|k| k.1)
    }

    /// The IBTA name (`REQ`, …).
    pub fn name(self) -> &'static str {
        KINDS.iter().find(|k| k.1 == self).map_or("?", |k| k.0)
    }
}

/// Which way a datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Sent by this RNIC.
    Tx,
    /// Received by it.
    Rx,
    /// Either (one count over both).
    Any,
}

/// Which messages of a kind: the Nth to the Mth (1-based, inclusive), or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nth {
    /// First (1-based).
    pub from: u64,
    /// Last, inclusive (`u64::MAX`: every one).
    pub to: u64,
}

impl Nth {
    /// Whether the `n`th message (1-based) is selected.
    pub fn contains(self, n: u64) -> bool {
        (self.from..=self.to).contains(&n)
    }
}

/// When a one-shot fault fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// This many ns after the RNIC started.
    At(u64),
    /// When the program has been returned the `n`th event of this type by `rdma_get_cm_event`
    /// (the number is `enum rdma_cm_event_type`'s).
    OnEvent(u32, u64),
    /// When the program has polled its `n`th completion.
    AfterCompletions(u64),
}

/// What a one-shot fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shot {
    /// No datagram in or out from then on.
    Silence,
    /// Device removal.
    Remove,
    /// SIGKILL of the program.
    Kill,
}

/// What a CM message fault does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CmAction {
    /// Lose it.
    Drop,
    /// Deliver (or send) it twice.
    Duplicate,
    /// Hold it back this many ns.
    Delay(u64),
}

/// One fault, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Drop, duplicate or delay the selected CM messages of a kind.
    Cm {
        /// What to do.
        action: CmAction,
        /// The kind.
        kind: CmKind,
        /// Which ones.
        nth: Nth,
        /// Counted which way.
        dir: Dir,
    },
    /// Drop (with probability `p`) or delay RC packets in `[start, start + len)` ns.
    Rc {
        /// Window start, ns.
        start: u64,
        /// Window length, ns.
        len: u64,
        /// Drop probability (`delay` is `None`).
        p: f64,
        /// Delay, ns, instead of a drop.
        delay: Option<u64>,
    },
    /// Every datagram dropped in `[start, start + len)` ns.
    Partition {
        /// Start, ns.
        start: u64,
        /// Length, ns.
        len: u64,
    },
    /// A one-shot fault.
    Shot(Shot, When),
}

/// A spec as written and what it means.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    /// The text, as given (it names the fault in messages).
    pub text: String,
    /// Its meaning.
    pub fault: Fault,
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `rdma_cm_event_type` names without their `RDMA_CM_EVENT_` prefix, by value (librdmacm's
/// `rdma_cma.h`).
pub const CM_EVENTS: [&str; 19] = [
    "ADDR_RESOLVED",
    "ADDR_ERROR",
    "ROUTE_RESOLVED",
    "ROUTE_ERROR",
    "CONNECT_REQUEST",
    "CONNECT_RESPONSE",
    "CONNECT_ERROR",
    "UNREACHABLE",
    "REJECTED",
    "ESTABLISHED",
    "DISCONNECTED",
    "DEVICE_REMOVAL",
    "MULTICAST_JOIN",
    "MULTICAST_ERROR",
    "ADDR_CHANGE",
    "TIMEWAIT_EXIT",
    "ROUTE_ERROR",
    "ADDRINFO_RESOLVED",
    "ADDRINFO_ERROR",
];

/// The grammar in one line, for error messages.
pub const GRAMMAR: &str =
    "drop|dup:KIND:NTH[:DIR], delay:KIND:NTH:DUR[:DIR], drop:rc:T:D[:P], delay:rc:T:D:DUR, \
     partition:T:D, silence|remove|kill:WHEN (WHEN: DUR, on:EVENT[:N], after:N:completions); \
     docs/check.md";

/// Parses `;`-separated specs (`RNIC_FAULTS`); empty pieces are ignored.
///
/// # Errors
/// The first bad spec: the spec and what is wrong with it, one line.
pub fn parse_list(s: &str) -> Result<Vec<FaultSpec>, String> {
    s.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(parse)
        .collect()
}

/// Parses one spec.
///
/// # Errors
/// What is wrong with it, one line naming the spec.
pub fn parse(s: &str) -> Result<FaultSpec, String> {
    let text = s.trim();
    parse_fault(text)
        .map(|fault| FaultSpec {
            text: text.to_string(),
            fault,
        })
        .map_err(|e| format!("fault {text:?}: {e} (grammar: {GRAMMAR})"))
}

fn parse_fault(s: &str) -> Result<Fault, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let (&what, rest) = parts.split_first().ok_or("empty")?;
    match (what, rest) {
        ("drop", ["rc", t, d]) => rc(t, d, 1.0, None),
        ("drop", ["rc", t, d, p]) => rc(t, d, probability(p)?, None),
        ("delay", ["rc", t, d, by]) => rc(t, d, 1.0, Some(duration(by)?)),
        ("dup", ["rc", ..]) => Err("RC packets can be dropped or delayed, not duplicated".into()),
        ("drop", ["rc", ..]) => Err("drop:rc takes T:D[:P]".into()),
        ("delay", ["rc", ..]) => Err("delay:rc takes T:D:DUR".into()),
        ("drop" | "dup", [kind, nth, dir @ ..]) => cm(
            if what == "drop" {
                CmAction::Drop
            } else {
                CmAction::Duplicate
            },
            kind,
            nth,
            dir,
        ),
        ("delay", [kind, nth, by, dir @ ..]) => cm(CmAction::Delay(duration(by)?), kind, nth, dir),
        ("partition", [t, d]) => Ok(Fault::Partition {
            start: duration(t)?,
            len: duration(d)?,
        }),
        ("silence" | "remove" | "kill", when) if !when.is_empty() => {
            let shot = match what {
                "silence" => Shot::Silence,
                "remove" => Shot::Remove,
                _ => Shot::Kill,
            };
            Ok(Fault::Shot(shot, parse_when(when)?))
        }
        ("drop" | "dup" | "delay" | "partition" | "silence" | "remove" | "kill", _) => {
            Err(format!("wrong number of fields for {what}"))
        }
        _ => Err(format!(
            "unknown fault {what:?}: expected drop, dup, delay, partition, silence, remove or kill"
        )),
    }
}

fn rc(t: &str, d: &str, p: f64, delay: Option<u64>) -> Result<Fault, String> {
    Ok(Fault::Rc {
        start: duration(t)?,
        len: duration(d)?,
        p,
        delay,
    })
}

fn cm(action: CmAction, kind: &str, nth: &str, dir: &[&str]) -> Result<Fault, String> {
    let kind = KINDS
        .iter()
        .find(|k| k.0.eq_ignore_ascii_case(kind))
        .map(|k| k.1)
        .ok_or_else(|| {
            format!("{kind:?} is not a CM message: REQ, REP, RTU, MRA, REJ, DREQ, DREP (or rc)")
        })?;
    let dir = match dir {
        [] | ["any"] => Dir::Any,
        ["tx"] => Dir::Tx,
        ["rx"] => Dir::Rx,
        [d] => return Err(format!("{d:?} is not a direction: tx, rx or any")),
        _ => return Err("too many fields".into()),
    };
    Ok(Fault::Cm {
        action,
        kind,
        nth: parse_nth(nth)?,
        dir,
    })
}

fn parse_nth(s: &str) -> Result<Nth, String> {
    let n = |v: &str| {
        v.parse::<u64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{v:?} is not a message number (1, 2, …)"))
    };
    if s == "*" {
        return Ok(Nth {
            from: 1,
            to: u64::MAX,
        });
    }
    let (from, to) = match s.split_once('-') {
        Some((a, b)) => (n(a)?, n(b)?),
        None => (n(s)?, n(s)?),
    };
    if from > to {
        return Err(format!("empty range {s:?}"));
    }
    Ok(Nth { from, to })
}

fn parse_when(w: &[&str]) -> Result<When, String> {
    let count = |v: &str| {
        v.parse::<u64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{v:?} is not a count (1, 2, …)"))
    };
    match w {
        [t] => Ok(When::At(duration(t)?)),
        ["on", ev, n @ ..] => {
            let name = ev.strip_prefix("RDMA_CM_EVENT_").unwrap_or(ev);
            let ty = CM_EVENTS
                .iter()
                .position(|e| e.eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    format!("{ev:?} is not an rdma_cm event (e.g. ESTABLISHED, DISCONNECTED)")
                })?;
            let n = match n {
                [] => 1,
                [n] => count(n)?,
                _ => return Err("on:EVENT[:N] has too many fields".into()),
            };
            Ok(When::OnEvent(ty as u32, n))
        }
        ["after", n, "completions" | "completion"] => Ok(When::AfterCompletions(count(n)?)),
        _ => Err("WHEN is DUR (e.g. 2s), on:EVENT[:N] or after:N:completions".into()),
    }
}

/// A duration with its unit (`us`, `ms`, `s`), in ns.
///
/// # Errors
/// No unit, not a number, or too large.
pub fn duration(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a duration (e.g. 500ms, 2s, 250us)");
    let (num, scale) = if let Some(n) = s.strip_suffix("us") {
        (n, 1_000.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1_000_000.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(bad());
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let ns = v * scale;
    if !(0.0..1e18).contains(&ns) {
        return Err(bad());
    }
    Ok(ns.round() as u64)
}

fn probability(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|p| (0.0..=1.0).contains(p))
        .ok_or_else(|| format!("{s:?} is not a probability 0 … 1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Fault {
        parse(s).unwrap_or_else(|e| panic!("{e}")).fault
    }

    #[test]
    fn the_grammar_parses() {
        assert_eq!(
            ok("drop:REQ:1-3"),
            Fault::Cm {
                action: CmAction::Drop,
                kind: CmKind::Req,
                nth: Nth { from: 1, to: 3 },
                dir: Dir::Any
            }
        );
        assert_eq!(
            ok("delay:dreq:2:1500ms:rx"),
            Fault::Cm {
                action: CmAction::Delay(1_500_000_000),
                kind: CmKind::Dreq,
                nth: Nth { from: 2, to: 2 },
                dir: Dir::Rx
            }
        );
        assert!(matches!(
            ok("dup:RTU:*:tx"),
            Fault::Cm {
                nth: Nth { to: u64::MAX, .. },
                ..
            }
        ));
        assert_eq!(
            ok("drop:rc:1s:500ms:0.25"),
            Fault::Rc {
                start: 1_000_000_000,
                len: 500_000_000,
                p: 0.25,
                delay: None
            }
        );
        assert_eq!(
            ok("partition:1s:3s"),
            Fault::Partition {
                start: 1_000_000_000,
                len: 3_000_000_000
            }
        );
        assert_eq!(
            ok("kill:on:DISCONNECTED"),
            Fault::Shot(Shot::Kill, When::OnEvent(10, 1))
        );
        assert_eq!(
            ok("remove:on:RDMA_CM_EVENT_ESTABLISHED:2"),
            Fault::Shot(Shot::Remove, When::OnEvent(9, 2))
        );
        assert_eq!(
            ok("kill:after:5:completions"),
            Fault::Shot(Shot::Kill, When::AfterCompletions(5))
        );
        assert_eq!(
            ok("silence:2s"),
            Fault::Shot(Shot::Silence, When::At(2_000_000_000))
        );
        let l = parse_list("kill:2s; drop:REP:1 ;").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].text, "drop:REP:1");
    }

    #[test]
    fn bad_specs_are_refused_with_one_line() {
        for bad in [
            "",
            "explode:1s",
            "drop:REQ",
            "drop:FOO:1",
            "drop:REQ:0",
            "drop:REQ:3-1",
            "drop:REQ:1:sideways",
            "delay:REQ:1",
            "delay:REQ:1:5",
            "drop:rc:1s",
            "drop:rc:1s:1s:1.5",
            "dup:rc:1s:1s",
            "partition:1s",
            "partition:1:2",
            "kill",
            "kill:on:NOPE",
            "kill:after:0:completions",
            "kill:after:3:calls",
            "remove:-1s",
        ] {
            let e = parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(
                !e.contains('\n') && e.contains(&format!("{:?}", bad.trim())),
                "{e}"
            );
        }
    }
}
