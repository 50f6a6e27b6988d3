//! UD multicast (IBTA vol. 1 §10.5.2 and §11.4.1.1 "Multicast"; libibverbs
//! `ibv_attach_mcast(3)`; rxe `rxe_mcast.c`): which QPs of a device are attached to which
//! group, and which RNICs of a fabric belong to a group.
//!
//! On a RoCEv2 network a multicast datagram is one IP datagram to the group's address (the
//! GID `::ffff:a.b.c.d` of an IPv4 group), which the network delivers to every host that
//! joined it; each RNIC then delivers a copy to each of its QPs attached to the group. Here a
//! group's membership is a [`GroupDirectory`] shared by the RNICs of one fabric: an RNIC is a
//! member while one of its QPs is attached, and a sender's [`SimNic`](crate::nic::SimNic)
//! sends one copy of the datagram to each member's socket — byte for byte the UDP payload a
//! real multicast datagram carries, its ICRC computed over the group's address, which is how
//! the receiving RNIC tells which group it is for. The sending RNIC delivers to its own
//! attached QPs itself (the sending QP included, as IP multicast loops back, unless it was
//! made with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`).
//!
//! [`SharedGroups`] is the in-memory directory of one process (the deterministic fabric, the
//! tests); a real-time driver with RNICs in several processes provides its own (librnic keeps
//! one in a directory of files, `docs/capi.md`). The NIC's side (the copies, the group of a
//! datagram received) is in `fanout.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use verbs_core::{Errno, Error, Gid, Result};

/// The destination QPN of a multicast datagram (IBTA vol. 1 §10.5.2.1: 0xFFFFFF).
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// Groups a device may have QPs attached to (rxe `RXE_MAX_MCAST_GRP`).
pub const MAX_MCAST_GROUPS: usize = 8192;
/// QPs one group may have attached on one device (rxe `RXE_MAX_MCAST_QP_ATTACH`).
pub const MAX_MCAST_QP_ATTACH: usize = 56;
/// Attachments of all groups of a device together (rxe `RXE_MAX_TOT_MCAST_QP_ATTACH`).
pub const MAX_TOTAL_MCAST_QP_ATTACH: usize = 0x70000;

/// At most this many members of a group get a copy of one multicast datagram (the rest are
/// counted, [`NicCounters::tx_multicast_members_cut`](crate::nic::NicCounters)): a directory
/// full of stale or forged entries cannot make one send unbounded.
pub const MAX_GROUP_MEMBERS: usize = 1024;

/// Whether `gid` is a multicast GID (Linux `rdma_is_multicast_addr`): an IPv6 multicast
/// address (`ff00::/8`), or an IPv4-mapped class D address (224.0.0.0/4).
pub fn is_multicast_gid(gid: Gid) -> bool {
    let [first, ..] = gid.0;
    if first == 0xFF {
        return true;
    }
    let [.., a, _, _, _] = gid.0;
    gid.0[..10].iter().all(|&b| b == 0) && gid.0[10..12] == [0xFF, 0xFF] && (a & 0xF0) == 0xE0
}

/// The RNICs of a fabric that belong to each multicast group: what a sender's
/// [`SimNic`](crate::nic::SimNic) reads to know where copies of a multicast datagram go. An
/// RNIC joins a group while at least one of its QPs is attached to it.
pub trait GroupDirectory: std::fmt::Debug + Send {
    /// The RNIC whose socket is `member` joins group `mgid`.
    fn join(&mut self, mgid: Gid, member: SocketAddr);
    /// It leaves the group.
    fn leave(&mut self, mgid: Gid, member: SocketAddr);
    /// The sockets of the group's members, in a stable order, into `out` (cleared first).
    fn members(&mut self, mgid: Gid, out: &mut Vec<SocketAddr>);
}

/// A [`GroupDirectory`] in memory, shared by its clones (one per RNIC of a fabric in one
/// process). Deterministic: members are listed in address order.
#[derive(Debug, Clone, Default)]
pub struct SharedGroups {
    groups: Arc<Mutex<BTreeMap<Gid, BTreeSet<SocketAddr>>>>,
}

impl SharedGroups {
    /// An empty directory.
    pub fn new() -> Self {
        SharedGroups::default()
    }
}

impl GroupDirectory for SharedGroups {
    fn join(&mut self, mgid: Gid, member: SocketAddr) {
        let mut g = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        g.entry(mgid).or_default().insert(member);
    }

    fn leave(&mut self, mgid: Gid, member: SocketAddr) {
        let mut g = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = g.get_mut(&mgid) {
            m.remove(&member);
            if m.is_empty() {
                g.remove(&mgid);
            }
        }
    }

    fn members(&mut self, mgid: Gid, out: &mut Vec<SocketAddr>) {
        out.clear();
        let g = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        out.extend(g.get(&mgid).into_iter().flatten().copied());
    }
}

/// The multicast attachments of one device's QPs (rxe's `mcg` pool and the QPs' `mca`s).
#[derive(Debug, Clone, Default)]
pub(crate) struct McastTable {
    /// Group GID → attached QPNs.
    groups: BTreeMap<Gid, BTreeSet<u32>>,
    /// Attachments of all groups together.
    total: usize,
    /// Groups that gained their first QP (true) or lost their last (false), for the NIC to
    /// tell its [`GroupDirectory`]; at most one entry per group.
    changes: BTreeMap<Gid, bool>,
    /// QPs made with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: they get no copy of their own
    /// multicast sends.
    pub(crate) block_self: BTreeSet<u32>,
}

impl McastTable {
    /// Attaches `qpn` to `mgid` (a second attach is a no-op, rxe `rxe_attach_mcg`).
    ///
    /// # Errors
    /// `ENOMEM` past [`MAX_MCAST_GROUPS`], [`MAX_MCAST_QP_ATTACH`] or
    /// [`MAX_TOTAL_MCAST_QP_ATTACH`].
    pub(crate) fn attach(&mut self, mgid: Gid, qpn: u32) -> Result<()> {
        if self.groups.get(&mgid).is_some_and(|q| q.contains(&qpn)) {
            return Ok(());
        }
        let full = |what: &str| Err(Error::new(Errno::ENOMEM, what.to_string()));
        if !self.groups.contains_key(&mgid) && self.groups.len() >= MAX_MCAST_GROUPS {
            return full("too many multicast groups on the device");
        }
        if self.groups.get(&mgid).map_or(0, BTreeSet::len) >= MAX_MCAST_QP_ATTACH {
            return full("too many QPs attached to the group");
        }
        if self.total >= MAX_TOTAL_MCAST_QP_ATTACH {
            return full("too many multicast attachments on the device");
        }
        if !self.groups.contains_key(&mgid) {
            self.note(mgid, true);
        }
        self.groups.entry(mgid).or_default().insert(qpn);
        self.total += 1;
        Ok(())
    }

    /// Detaches `qpn` from `mgid`.
    ///
    /// # Errors
    /// `EINVAL` when it is not attached (rxe `rxe_detach_mcg`).
    pub(crate) fn detach(&mut self, mgid: Gid, qpn: u32) -> Result<()> {
        let removed = self.groups.get_mut(&mgid).is_some_and(|q| q.remove(&qpn));
        if !removed {
            return Err(Error::inval("the QP is not attached to this group"));
        }
        self.total -= 1;
        if self.groups.get(&mgid).is_some_and(BTreeSet::is_empty) {
            self.groups.remove(&mgid);
            self.note(mgid, false);
        }
        Ok(())
    }

    /// Detaches `qpn` from every group (its QP is destroyed: uverbs detaches it,
    /// `ib_uverbs_detach_umcast`).
    pub(crate) fn detach_all(&mut self, qpn: u32) {
        let mine: Vec<Gid> = self
            .groups
            .iter()
            .filter(|(_, q)| q.contains(&qpn))
            .map(|(g, _)| *g)
            .collect();
        for g in mine {
            let _ = self.detach(g, qpn);
        }
        self.block_self.remove(&qpn);
    }

    fn note(&mut self, mgid: Gid, joined: bool) {
        // A join undone before anyone looked (or the reverse) is no change at all.
        match self.changes.get(&mgid) {
            Some(&was) if was != joined => {
                self.changes.remove(&mgid);
            }
            _ => {
                self.changes.insert(mgid, joined);
            }
        }
    }

    /// The QPs attached to `mgid`, in QPN order.
    pub(crate) fn attached(&self, mgid: Gid) -> impl Iterator<Item = u32> + '_ {
        self.groups.get(&mgid).into_iter().flatten().copied()
    }

    /// The groups with at least one QP attached, in GID order.
    pub(crate) fn groups(&self) -> impl Iterator<Item = Gid> + '_ {
        self.groups.keys().copied()
    }

    /// The changes of membership since the last call.
    pub(crate) fn take_changes(&mut self) -> Vec<(Gid, bool)> {
        std::mem::take(&mut self.changes).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> Gid {
        Gid::from_ipv4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn multicast_gids_are_ipv6_ff_and_mapped_class_d() {
        assert!(is_multicast_gid(v4(224, 0, 0, 1)));
        assert!(is_multicast_gid(v4(239, 255, 1, 2)));
        assert!(!is_multicast_gid(v4(223, 255, 255, 255)));
        assert!(!is_multicast_gid(v4(240, 0, 0, 1)));
        assert!(!is_multicast_gid(v4(127, 0, 0, 1)));
        let mut g = [0u8; 16];
        g[0] = 0xFF;
        g[1] = 0x12;
        assert!(is_multicast_gid(Gid(g)));
        assert!(!is_multicast_gid(Gid([0; 16])));
    }

    #[test]
    fn membership_changes_once_per_first_attach_and_last_detach() {
        let mut t = McastTable::default();
        let g = v4(239, 1, 1, 1);
        t.attach(g, 5).unwrap();
        t.attach(g, 5).unwrap();
        t.attach(g, 6).unwrap();
        assert_eq!(t.take_changes(), vec![(g, true)]);
        assert_eq!(t.attached(g).collect::<Vec<_>>(), vec![5, 6]);
        t.detach(g, 5).unwrap();
        assert!(t.take_changes().is_empty());
        assert_eq!(t.detach(g, 5).map_err(|e| e.errno), Err(Errno::EINVAL));
        t.detach_all(6);
        assert_eq!(t.take_changes(), vec![(g, false)]);
        t.attach(g, 7).unwrap();
        t.detach(g, 7).unwrap();
        assert!(t.take_changes().is_empty(), "joined and left unseen");
    }

    #[test]
    fn a_group_takes_at_most_56_qps() {
        let mut t = McastTable::default();
        let g = v4(239, 1, 1, 1);
        for q in 0..MAX_MCAST_QP_ATTACH as u32 {
            t.attach(g, q + 2).unwrap();
        }
        assert_eq!(t.attach(g, 1000).map_err(|e| e.errno), Err(Errno::ENOMEM));
    }

    #[test]
    fn shared_groups_list_members_in_order() {
        let mut a = SharedGroups::new();
        let mut b = a.clone();
        let g = v4(239, 1, 1, 1);
        let (sa, sb): (SocketAddr, SocketAddr) = (
            "10.0.0.2:4791".parse().unwrap(),
            "10.0.0.1:4791".parse().unwrap(),
        );
        a.join(g, sa);
        b.join(g, sb);
        let mut out = Vec::new();
        a.members(g, &mut out);
        assert_eq!(out, vec![sb, sa]);
        b.leave(g, sb);
        a.members(g, &mut out);
        assert_eq!(out, vec![sa]);
    }
}
