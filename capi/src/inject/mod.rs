//! Seeded faults on the process's own RNIC (`RNIC_FAULTS`, `rnic exec --fault`; grammar in
//! [`spec`] and docs/check.md, "Faults"): CM messages dropped, duplicated or delayed by kind
//! and number, RC packets dropped or delayed in a window, partitions, silence, device removal
//! and SIGKILL at a time or at a program event.
//!
//! [`Faults`] is sans-IO: the runtime's node asks it about each datagram it sends or receives
//! and when its next timer is, and tells it the program's events; it answers with verdicts and
//! [`Action`]s the node carries out. Random choices come from the node's seed. Each fault that
//! fires prints one `rnic: fault fired: …` line on stderr and is kept for [`fired`].

pub mod spec;

use rnic_sim::rng::Rng;
use spec::{CmAction, CmKind, Dir, Fault, FaultSpec, Shot, When};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use verbs_core::SimTime;

/// Most fired faults kept for [`fired`] (a window fault fires once per packet it touches).
const FIRED_MAX: usize = 10_000;

static FIRED: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

/// Whether a fault waits for a program event ([`Faults::program_event`]): the C entry points
/// skip the lock when none does.
static WATCHING: AtomicBool = AtomicBool::new(false);

/// The faults that fired so far in this process: each one's description and when, in ms since
/// the RNIC started.
pub fn fired() -> Vec<(String, u64)> {
    FIRED.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Whether some fault waits for a program event.
pub fn watching() -> bool {
    WATCHING.load(Ordering::Relaxed)
}

fn fire(desc: String, now: SimTime) {
    let ms = now.as_nanos() / 1_000_000;
    eprintln!("rnic: fault fired: {desc} at {ms} ms");
    let mut f = FIRED.lock().unwrap_or_else(PoisonError::into_inner);
    if f.len() < FIRED_MAX {
        f.push((desc, ms));
    }
}

/// What to do with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let it through.
    Pass,
    /// Lose it.
    Drop,
    /// Let it through, and a copy right after.
    Duplicate,
    /// Hold it back until then.
    DelayUntil(SimTime),
}

/// What the node must do because a one-shot fault fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Remove the device.
    Remove,
    /// SIGKILL the program (after releasing the node).
    Kill,
}

/// A program event a one-shot fault may wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramEvent {
    /// `rdma_get_cm_event` returned an event of this type.
    CmEvent(u32),
    /// Polls returned this many more completions.
    Completions(u64),
}

#[derive(Debug)]
struct Armed {
    spec: FaultSpec,
    /// Messages of its kind seen (CM faults).
    seen: u64,
    /// Packets in its window, sent and received (window faults).
    window: [u64; 2],
    /// Whether it fired (one-shots fire once; a window fault prints its first hit only).
    done: bool,
}

/// The faults of one RNIC and their state. See the module docs.
#[derive(Debug)]
pub struct Faults {
    armed: Vec<Armed>,
    /// The seed of the random choices: the choice on a packet depends on the fault, the
    /// direction and the packet's number only, not on how sends and receives interleave.
    seed: u64,
    silent: bool,
    /// Events by type returned so far.
    events: [u64; spec::CM_EVENTS.len()],
    completions: u64,
    /// Datagrams held back: (when due, incoming?, source or destination, bytes).
    held: VecDeque<(SimTime, bool, std::net::SocketAddr, bytes::Bytes)>,
}

/// What a datagram is, as far as faults care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Cm(CmKind),
    Rc,
    Other,
}

/// Reads the BTH opcode and, for a GSI MAD of the CM class, its AttributeID (wire layout in
/// rnic-sim's codec: BTH(12) ‖ DETH(8) ‖ MAD, whose class is at byte 1 and AttributeID at
/// bytes 16–17).
fn classify(b: &[u8]) -> Class {
    let Some(&opcode) = b.first() else {
        return Class::Other;
    };
    if opcode < 0x20 {
        return Class::Rc;
    }
    const MAD: usize = 20;
    const CM_CLASS: u8 = 0x07;
    if opcode == 0x64 && b.get(MAD + 1) == Some(&CM_CLASS) {
        if let Some(id) = b.get(MAD + 16..MAD + 18) {
            if let Some(k) = CmKind::from_attr_id(u16::from_be_bytes([id[0], id[1]])) {
                return Class::Cm(k);
            }
        }
    }
    Class::Other
}

impl Faults {
    /// The faults `specs` on an RNIC whose seed is `seed`.
    pub fn new(specs: Vec<FaultSpec>, seed: u64) -> Faults {
        if specs.iter().any(|s| {
            matches!(
                s.fault,
                Fault::Shot(_, When::OnEvent(..) | When::AfterCompletions(_))
            )
        }) {
            WATCHING.store(true, Ordering::Relaxed);
        }
        Faults {
            armed: specs
                .into_iter()
                .map(|spec| Armed {
                    spec,
                    seen: 0,
                    window: [0; 2],
                    done: false,
                })
                .collect(),
            seed: Rng::new(seed).fork(0x6661_756c).key(), // "faul"
            silent: false,
            events: [0; spec::CM_EVENTS.len()],
            completions: 0,
            held: VecDeque::new(),
        }
    }

    /// Whether a `silence:` fault fired: nothing goes in or out any more.
    pub fn silent(&self) -> bool {
        self.silent
    }

    /// Whether there is no fault at all (the node's fast path).
    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }

    /// The verdict on a datagram sent (`incoming` false) or received at `now`.
    pub fn datagram(&mut self, now: SimTime, incoming: bool, bytes: &[u8]) -> Verdict {
        if self.silent {
            return Verdict::Drop;
        }
        let class = classify(bytes);
        let t = now.as_nanos();
        let way = if incoming { "received" } else { "sent" };
        let mut verdict = Verdict::Pass;
        let seed = self.seed;
        for (i, a) in self.armed.iter_mut().enumerate() {
            let in_window =
                |start: &u64, len: &u64| (*start..start.saturating_add(*len)).contains(&t);
            let v = match (&a.spec.fault, class) {
                (
                    Fault::Cm {
                        action,
                        kind,
                        nth,
                        dir,
                    },
                    Class::Cm(k),
                ) if *kind == k => {
                    if matches!((dir, incoming), (Dir::Tx, true) | (Dir::Rx, false)) {
                        continue;
                    }
                    a.seen += 1;
                    if !nth.contains(a.seen) {
                        continue;
                    }
                    fire(format!("{} ({} #{} {way})", a.spec, k.name(), a.seen), now);
                    match action {
                        CmAction::Drop => Verdict::Drop,
                        CmAction::Duplicate => Verdict::Duplicate,
                        CmAction::Delay(d) => Verdict::DelayUntil(SimTime::from_nanos(t + d)),
                    }
                }
                (
                    Fault::Rc {
                        start,
                        len,
                        p,
                        delay,
                    },
                    Class::Rc,
                ) if in_window(start, len) => {
                    let n = &mut a.window[usize::from(incoming)];
                    *n += 1;
                    let draw = Rng::new(seed)
                        .fork((i as u64) << 48 | u64::from(incoming) << 47 | *n)
                        .below(1_000_000);
                    if delay.is_none() && *p < 1.0 && draw >= (p * 1e6) as u64 {
                        continue;
                    }
                    if !a.done {
                        a.done = true;
                        fire(
                            format!("{} (first: RC packet #{n} {way} in the window)", a.spec),
                            now,
                        );
                    }
                    match delay {
                        Some(d) => Verdict::DelayUntil(SimTime::from_nanos(t + d)),
                        None => Verdict::Drop,
                    }
                }
                (Fault::Partition { start, len }, _) if in_window(start, len) => {
                    if !a.done {
                        a.done = true;
                        fire(format!("{} (first: a datagram {way})", a.spec), now);
                    }
                    Verdict::Drop
                }
                _ => continue,
            };
            // The first fault that acts decides; a drop wins over the rest.
            if verdict == Verdict::Pass || v == Verdict::Drop {
                verdict = v;
            }
        }
        verdict
    }

    /// Holds back a datagram until `due` (an incoming one from `peer`, or an outgoing one to it).
    pub fn hold(
        &mut self,
        due: SimTime,
        incoming: bool,
        peer: std::net::SocketAddr,
        b: bytes::Bytes,
    ) {
        let at = self.held.partition_point(|h| h.0 <= due);
        self.held.insert(at, (due, incoming, peer, b));
    }

    /// The next held datagram due by `now`, if any: (incoming?, peer, bytes).
    pub fn take_due(&mut self, now: SimTime) -> Option<(bool, std::net::SocketAddr, bytes::Bytes)> {
        if self.silent {
            self.held.clear();
        }
        if self.held.front().is_some_and(|h| h.0 <= now) {
            self.held.pop_front().map(|(_, i, p, b)| (i, p, b))
        } else {
            None
        }
    }

    /// When the next timed fault or held datagram is due.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        let shots = self
            .armed
            .iter()
            .filter(|a| !a.done)
            .filter_map(|a| match a.spec.fault {
                Fault::Shot(_, When::At(t)) => Some(SimTime::from_nanos(t)),
                _ => None,
            });
        shots.chain(self.held.front().map(|h| h.0)).min()
    }

    /// Fires the timed one-shot faults due by `now`.
    pub fn handle_timeout(&mut self, now: SimTime) -> Vec<Action> {
        self.fire_shots(now, |w| matches!(w, When::At(t) if *t <= now.as_nanos()))
    }

    /// Tells the faults of a program event; returns what the node must do.
    pub fn program_event(&mut self, now: SimTime, ev: ProgramEvent) -> Vec<Action> {
        match ev {
            ProgramEvent::CmEvent(ty) => {
                let Some(n) = self.events.get_mut(ty as usize) else {
                    return Vec::new();
                };
                *n += 1;
                let n = *n;
                self.fire_shots(now, |w| *w == When::OnEvent(ty, n))
            }
            ProgramEvent::Completions(k) => {
                self.completions += k;
                let c = self.completions;
                self.fire_shots(now, |w| matches!(w, When::AfterCompletions(n) if *n <= c))
            }
        }
    }

    /// How many more completions a poll may return before an armed `after:N:completions`
    /// shot is due (at least 1), so that it fires after exactly the Nth completion however
    /// many entries the program asked for; `None` when no such shot waits.
    pub fn completions_until_shot(&self) -> Option<u64> {
        self.armed
            .iter()
            .filter(|a| !a.done)
            .filter_map(|a| match a.spec.fault {
                Fault::Shot(_, When::AfterCompletions(n)) => {
                    Some(n.saturating_sub(self.completions).max(1))
                }
                _ => None,
            })
            .min()
    }

    fn fire_shots(&mut self, now: SimTime, due: impl Fn(&When) -> bool) -> Vec<Action> {
        let mut out = Vec::new();
        for a in &mut self.armed {
            let Fault::Shot(shot, when) = &a.spec.fault else {
                continue;
            };
            if a.done || !due(when) {
                continue;
            }
            a.done = true;
            let detail = match when {
                When::AfterCompletions(_) => format!(" (completion {})", self.completions),
                _ => String::new(),
            };
            fire(format!("{}{detail}", a.spec), now);
            match shot {
                Shot::Silence => self.silent = true,
                Shot::Remove => out.push(Action::Remove),
                Shot::Kill => out.push(Action::Kill),
            }
        }
        out
    }
}

/// Kills this process with SIGKILL, as `kill -9` would (the last thing a `kill:` fault does).
pub fn sigkill_self() {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mad(attr: u16) -> Vec<u8> {
        let mut b = vec![0u8; 300];
        b[0] = 0x64;
        b[21] = 0x07;
        b[36..38].copy_from_slice(&attr.to_be_bytes());
        b
    }

    #[test]
    fn the_nth_cm_message_of_a_kind_is_dropped_each_way_as_asked() {
        let specs =
            spec::parse_list("drop:REQ:2-3:tx;dup:REP:1:rx").unwrap_or_else(|e| panic!("{e}"));
        let mut f = Faults::new(specs, 1);
        let t = SimTime::from_nanos(0);
        let req = mad(0x0010);
        let got: Vec<Verdict> = (0..4).map(|_| f.datagram(t, false, &req)).collect();
        assert_eq!(
            got,
            [Verdict::Pass, Verdict::Drop, Verdict::Drop, Verdict::Pass]
        );
        assert_eq!(
            f.datagram(t, true, &req),
            Verdict::Pass,
            "received REQs are not counted"
        );
        assert_eq!(f.datagram(t, false, &mad(0x0013)), Verdict::Pass);
        assert_eq!(f.datagram(t, true, &mad(0x0013)), Verdict::Duplicate);
        assert_eq!(
            f.datagram(t, false, &[0x04; 40]),
            Verdict::Pass,
            "an RC packet"
        );
    }

    #[test]
    fn a_probabilistic_window_draws_from_the_seed() {
        let run = |seed| {
            let specs = spec::parse_list("drop:rc:0s:1s:0.5").unwrap_or_else(|e| panic!("{e}"));
            let mut f = Faults::new(specs, seed);
            (0..64)
                .map(|i| f.datagram(SimTime::from_nanos(i), false, &[0x04; 40]) == Verdict::Drop)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert!(run(7).iter().any(|d| *d) && !run(7).iter().all(|d| *d));
        let specs = spec::parse_list("drop:rc:0s:1s").unwrap_or_else(|e| panic!("{e}"));
        let mut f = Faults::new(specs, 1);
        assert_eq!(
            f.datagram(SimTime::from_nanos(2_000_000_000), false, &[0x04; 40]),
            Verdict::Pass
        );
    }

    #[test]
    fn one_shots_fire_once_at_their_time_or_event() {
        let specs = spec::parse_list("kill:after:3:completions;remove:on:DISCONNECTED;silence:1s")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut f = Faults::new(specs, 1);
        let t = SimTime::from_nanos(5);
        assert_eq!(f.completions_until_shot(), Some(3));
        assert!(f.program_event(t, ProgramEvent::Completions(2)).is_empty());
        assert_eq!(
            f.completions_until_shot(),
            Some(1),
            "a poll may return one more"
        );
        assert_eq!(
            f.program_event(t, ProgramEvent::Completions(2)),
            [Action::Kill]
        );
        assert_eq!(f.completions_until_shot(), None, "fired");
        assert!(f.program_event(t, ProgramEvent::Completions(2)).is_empty());
        assert!(f.program_event(t, ProgramEvent::CmEvent(9)).is_empty());
        assert_eq!(
            f.program_event(t, ProgramEvent::CmEvent(10)),
            [Action::Remove]
        );
        assert_eq!(f.poll_timeout(), Some(SimTime::from_nanos(1_000_000_000)));
        assert!(f
            .handle_timeout(SimTime::from_nanos(1_000_000_000))
            .is_empty());
        assert_eq!(f.datagram(t, true, &mad(0x0010)), Verdict::Drop, "silent");
        assert_eq!(f.poll_timeout(), None);
    }
}
