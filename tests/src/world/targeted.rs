//! Targeted message faults ([`MsgFault`]): drop or delay one chosen message — "the first DREP
//! host 1 sends", "every MRA", "the third RC packet of host 0" — instead of a random share.
//!
//! A rule belongs to the sending host and is applied by its [`Node`](super::Node) as the host
//! hands a datagram to the network, before the fabric sees it: a dropped message never enters
//! the fabric (no draw of the fabric's random streams is spent on it), a delayed one enters it
//! `ns` later (and then gets the path's latency, jitter and faults as any other). The host
//! itself did send it, so the history records the send ([`Record::Wire`], or the RC packet
//! count) and the fault ([`Fault::TargetedDrop`], [`Fault::Delayed`]) at the moment of the
//! send (the oracle's retry counts are the host's sends, whatever the network did).
//! A World without rules runs exactly as before (the traces of such runs do not change).
//!
//! Occurrences are counted per rule and per host life: a host restarted with amnesia counts
//! from 1 again (its rules stay). A delayed message still held when its host crashes is lost
//! with the host, like one still in the sender's queue. [`World::heal`] removes every rule
//! (held messages still leave at their time).
//!
//! [`Record::Wire`]: super::Record::Wire
//! [`Fault::TargetedDrop`]: super::Fault::TargetedDrop
//! [`Fault::Delayed`]: super::Fault::Delayed
//! [`World::heal`]: super::World::heal

use super::WireMsg;

/// Which occurrences of the chosen message a [`MsgFault`] hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurrence {
    /// Only the `n`-th (1 = the first) the host sends in this life.
    Nth(u32),
    /// Every one.
    Every,
}

/// What a [`MsgFault`] does to the message it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgAction {
    /// The network loses it.
    Drop,
    /// It enters the network `ns` nanoseconds (virtual time) after the host sent it: later
    /// messages of the host may overtake it.
    Delay {
        /// The hold, ns.
        ns: u64,
    },
}

/// A targeted fault: what host `from` sends of kind `attr` — a CM attribute ID
/// (`cm_core::wire::CM_REQ_ATTR_ID` 0x10 … `CM_DREP_ATTR_ID` 0x16, see
/// [`attr_name`](super::attr_name)), or [`RC`](Self::RC) (0) for every RC packet — is dropped
/// or delayed at the chosen occurrence(s). See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgFault {
    /// The sending host.
    pub from: usize,
    /// The CM attribute ID, or [`MsgFault::RC`].
    pub attr: u16,
    /// Which occurrences.
    pub which: Occurrence,
    /// Drop or delay.
    pub action: MsgAction,
}

impl MsgFault {
    /// The `attr` that selects RC (non-MAD) packets.
    pub const RC: u16 = 0;

    /// Checks that the fault can fire in a World of `hosts` hosts: `from` is one of them,
    /// `attr` is [`MsgFault::RC`] or a CM attribute the World sends (REQ 0x10 … DREP 0x16),
    /// and an `Nth` occurrence counts from 1.
    ///
    /// # Errors
    /// `EINVAL` naming what is wrong.
    pub fn check(&self, hosts: usize) -> Result<(), verbs_core::Error> {
        let inval = |m: String| Err(verbs_core::Error::inval(m));
        if self.from >= hosts {
            return inval(format!("MsgFault from host {} of {hosts}", self.from));
        }
        if self.attr != Self::RC && !(0x10..=0x16).contains(&self.attr) {
            return inval(format!(
                "MsgFault attribute {:#x}: not RC (0) or a CM message (0x10 REQ … 0x16 DREP)",
                self.attr
            ));
        }
        if self.which == Occurrence::Nth(0) {
            return inval("MsgFault occurrence Nth(0): the first is Nth(1)".into());
        }
        Ok(())
    }

    /// Drop what `from` sends of kind `attr` at `which`.
    pub fn drop(from: usize, attr: u16, which: Occurrence) -> Self {
        MsgFault {
            from,
            attr,
            which,
            action: MsgAction::Drop,
        }
    }

    /// Delay what `from` sends of kind `attr` at `which` by `ns` nanoseconds.
    pub fn delay(from: usize, attr: u16, which: Occurrence, ns: u64) -> Self {
        MsgFault {
            from,
            attr,
            which,
            action: MsgAction::Delay { ns },
        }
    }
}

/// A host's rules with their occurrence counters (kept by its node).
#[derive(Debug, Clone, Default)]
pub(super) struct Rules {
    rules: Vec<(MsgFault, u32)>,
}

impl Rules {
    pub(super) fn new(from: usize, all: &[MsgFault]) -> Self {
        Rules {
            rules: all
                .iter()
                .filter(|f| f.from == from)
                .map(|&f| (f, 0))
                .collect(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub(super) fn push(&mut self, f: MsgFault) {
        self.rules.push((f, 0));
    }

    pub(super) fn clear(&mut self) {
        self.rules.clear();
    }

    /// Counts `msg` against every rule of its kind; the first rule that hits it decides:
    /// (action, occurrence number).
    pub(super) fn hit(&mut self, msg: &WireMsg) -> Option<(MsgAction, u32)> {
        let mut out = None;
        for (f, seen) in &mut self.rules {
            if f.attr != msg.attr {
                continue;
            }
            *seen += 1;
            let hits = match f.which {
                Occurrence::Nth(n) => *seen == n,
                Occurrence::Every => true,
            };
            if hits && out.is_none() {
                out = Some((f.action, *seen));
            }
        }
        out
    }
}
