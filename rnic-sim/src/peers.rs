//! [`PeerTable`]: which UDP socket a peer GID is reached at, when it is not `(GID's IP, 4791)`
//! (several processes on one IP, a CM on the ping socket).
//!
//! Two kinds of entries: those the application sets ([`PeerTable::set`], never dropped) and
//! those learned from the wire ([`PeerTable::learn`]). The network can create learned entries
//! at will — one per spoofed source — so they are bounded: past [`PeerTable::capacity`] the
//! least recently learned one is dropped (and counted). Both directions are indexed, so a
//! lookup costs O(log n) whatever the table holds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use verbs_core::Gid;

/// The default bound on learned entries.
pub const DEFAULT_LEARNED_PEERS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: SocketAddr,
    /// When it was last learned (a sequence number); `None` for an entry the application set.
    learned: Option<u64>,
}

/// GID ↔ socket routes; see the module docs.
#[derive(Debug, Clone)]
pub struct PeerTable {
    by_gid: BTreeMap<Gid, Entry>,
    by_addr: BTreeMap<SocketAddr, Gid>,
    /// Learned entries, oldest first.
    by_age: BTreeMap<u64, Gid>,
    next_seq: u64,
    capacity: usize,
    evicted: u64,
}

impl Default for PeerTable {
    fn default() -> Self {
        PeerTable::new(DEFAULT_LEARNED_PEERS)
    }
}

impl PeerTable {
    /// An empty table keeping at most `capacity` learned entries (at least 1).
    pub fn new(capacity: usize) -> PeerTable {
        PeerTable {
            by_gid: BTreeMap::new(),
            by_addr: BTreeMap::new(),
            by_age: BTreeMap::new(),
            next_seq: 0,
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    /// The bound on learned entries.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries of either kind.
    pub fn len(&self) -> usize {
        self.by_gid.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.by_gid.is_empty()
    }

    /// Learned entries dropped to stay within [`capacity`](Self::capacity).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The socket of `gid`, if the table has one.
    pub fn addr(&self, gid: Gid) -> Option<SocketAddr> {
        self.by_gid.get(&gid).map(|e| e.addr)
    }

    /// The GID whose socket is `addr`, if the table has one.
    pub fn gid(&self, addr: SocketAddr) -> Option<Gid> {
        self.by_addr.get(&addr).copied()
    }

    /// Routes `gid` to `addr` for good (an application's choice: never dropped, never replaced
    /// by [`learn`](Self::learn)).
    pub fn set(&mut self, gid: Gid, addr: SocketAddr) {
        self.insert(gid, addr, None);
    }

    /// Routes `gid` to `addr` as learned from a datagram: replaces an earlier learned route,
    /// never one the application [`set`](Self::set); the least recently learned entry goes
    /// when there are more than [`capacity`](Self::capacity).
    pub fn learn(&mut self, gid: Gid, addr: SocketAddr) {
        if self.by_gid.get(&gid).is_some_and(|e| e.learned.is_none()) {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.insert(gid, addr, Some(seq));
        while self.by_age.len() > self.capacity {
            let Some((_, old)) = self.by_age.pop_first() else {
                break;
            };
            self.remove(old);
            self.evicted += 1;
        }
    }

    /// Makes a route the application [`set`](Self::set) an ordinary learned one (it may then
    /// be replaced or dropped): for a peer the application no longer needs held.
    pub fn release(&mut self, gid: Gid) {
        if let Some(e) = self.by_gid.get(&gid).copied() {
            if e.learned.is_none() {
                self.remove(gid);
                self.learn(gid, e.addr);
            }
        }
    }

    fn insert(&mut self, gid: Gid, addr: SocketAddr, learned: Option<u64>) {
        self.remove(gid);
        // Another GID at the same socket loses it: one socket is one peer.
        if let Some(other) = self.by_addr.get(&addr).copied() {
            self.remove(other);
        }
        self.by_gid.insert(gid, Entry { addr, learned });
        self.by_addr.insert(addr, gid);
        if let Some(seq) = learned {
            self.by_age.insert(seq, gid);
        }
    }

    fn remove(&mut self, gid: Gid) {
        if let Some(e) = self.by_gid.remove(&gid) {
            self.by_addr.remove(&e.addr);
            if let Some(seq) = e.learned {
                self.by_age.remove(&seq);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn at(i: u32, port: u16) -> (Gid, SocketAddr) {
        let ip = Ipv4Addr::from(0x0a00_0000 | i);
        (Gid::from_ipv4(ip), SocketAddr::new(IpAddr::V4(ip), port))
    }

    #[test]
    fn learned_entries_are_bounded_and_the_oldest_goes() {
        let mut t = PeerTable::new(3);
        let (g0, a0) = at(0, 7471);
        t.set(g0, a0);
        for i in 1..=5 {
            let (g, a) = at(i, 7000 + i as u16);
            t.learn(g, a);
        }
        // The application's entry and the three most recent learned ones.
        assert_eq!(t.len(), 4);
        assert_eq!(t.evicted(), 2);
        assert_eq!(t.addr(g0), Some(a0));
        assert_eq!(t.addr(at(1, 0).0), None);
        assert_eq!(t.addr(at(2, 0).0), None);
        let (g5, a5) = at(5, 7005);
        assert_eq!((t.addr(g5), t.gid(a5)), (Some(a5), Some(g5)));
    }

    #[test]
    fn learning_never_replaces_a_set_route_until_released() {
        let mut t = PeerTable::new(2);
        let (g, a) = at(1, 7471);
        let other = SocketAddr::new(a.ip(), 9999);
        t.set(g, a);
        t.learn(g, other);
        assert_eq!(t.addr(g), Some(a));
        t.release(g);
        t.learn(g, other);
        assert_eq!(
            (t.addr(g), t.gid(other), t.gid(a)),
            (Some(other), Some(g), None)
        );
    }

    #[test]
    fn relearning_refreshes_age() {
        let mut t = PeerTable::new(2);
        let (g1, a1) = at(1, 1);
        let (g2, a2) = at(2, 2);
        let (g3, a3) = at(3, 3);
        t.learn(g1, a1);
        t.learn(g2, a2);
        t.learn(g1, a1); // g1 is now the most recent
        t.learn(g3, a3); // g2 goes
        assert_eq!(
            (t.addr(g1), t.addr(g2), t.addr(g3)),
            (Some(a1), None, Some(a3))
        );
    }
}
