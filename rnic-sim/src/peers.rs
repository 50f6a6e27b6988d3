//! [`PeerTable`]: which UDP socket a peer GID is reached at, when it is not `(GID's IP, the
//! default port)` (several processes on one IP, a CM on the ping socket), and the one rule
//! by which the wire may change that (issue 25; docs/hostile-input.md, "Routes").
//!
//! Two kinds of entries: those the application sets ([`PeerTable::set`], held: never dropped
//! or replaced) and those learned from the wire. A route is learned only in two steps:
//!
//! 1. [`PeerTable::admit`], when a datagram *decoded*: one from a socket the table maps to a
//!    GID, or from `(IP, default port)` of a GID with no entry, is that GID's. One from any
//!    other socket is a *candidate* only if it is a MAD for QP1 (the connection manager's, the
//!    only traffic that may start a conversation) and its GID is not in use — no connected
//!    QP and no live CM connection has it as peer, and no route of it is held. Everything
//!    else from an unknown socket is dropped and counted, never answered.
//! 2. [`PeerTable::settle`], after the CM handled the candidate's MAD: only if the CM
//!    accepted it (a REQ it took, a DREQ for an unknown connection it answered, …) does the
//!    socket become the GID's learned route; otherwise the candidate is forgotten.
//!
//! So nothing is learned or replaced before decoding, and a route a live QP or CM id uses
//! never moves. The network can still create learned entries at will — one per spoofed
//! source whose REQ the CM takes — so they are bounded: past [`PeerTable::capacity`] the least
//! recently learned entry that is not in use goes (counted); when every learned entry is in
//! use the new one is refused (counted). Both directions are indexed, so a lookup costs
//! O(log n) whatever the table holds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use verbs_core::Gid;

/// The default bound on learned entries.
pub const DEFAULT_LEARNED_PEERS: usize = 4096;

/// The most entries in use that learning one route skips over (refreshing them) before it gives
/// up: the table full of routes in use refuses the new one at a bounded cost.
pub const MAX_IN_USE_SKIPPED: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: SocketAddr,
    /// When it was last learned (a sequence number); `None` for an entry the application set.
    learned: Option<u64>,
}

/// What the route counters say: each datagram or route decision the table made, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RouteCounters {
    /// Routes learned from a candidate the CM accepted (new or refreshed).
    pub learned: u64,
    /// Learned routes of a GID that moved to another socket (the old one was not in use).
    pub replaced: u64,
    /// Learned routes dropped to stay within the capacity (the least recently learned one
    /// not in use).
    pub evicted: u64,
    /// Candidates whose route could not be learned: the table was full of routes in use.
    pub refused_full: u64,
    /// MADs from an unknown socket of a GID in use (a connected QP, a live CM connection or a
    /// held route names it): dropped before the CM saw them.
    pub route_in_use: u64,
    /// Candidates whose MAD the CM did not accept: forgotten, nothing learned.
    pub candidates_discarded: u64,
}

/// How [`PeerTable::admit`] classified a decoded datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// From a known socket of this GID (or the GID's default socket): deliver.
    Known(Gid),
    /// A MAD for QP1 from an unknown socket of a GID not in use: deliver to the CM, then
    /// [`settle`](PeerTable::settle) with its verdict.
    Candidate(Gid),
    /// From an unknown socket and not a candidate: dropped (counted).
    Refused(Refusal),
}

/// Why a datagram from an unknown socket was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a MAD for QP1: RC/UD traffic is taken only from a GID's known socket.
    NotGsi,
    /// The GID is in use: its route must not move.
    InUse,
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
    /// The candidate of the datagram [`admit`](Self::admit) last let through, until settled.
    candidate: Option<(Gid, SocketAddr)>,
    counters: RouteCounters,
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
            candidate: None,
            counters: RouteCounters::default(),
        }
    }

    /// The bound on learned entries.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Changes the bound on learned entries (at least 1); entries above it go as new ones are
    /// learned. A server that runs many handshakes at once needs a route for each
    /// (`rnic ping`'s lobby).
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
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
        self.counters.evicted
    }

    /// The route decisions so far, by reason.
    pub fn counters(&self) -> RouteCounters {
        self.counters
    }

    /// The socket of `gid`, if the table has one.
    pub fn addr(&self, gid: Gid) -> Option<SocketAddr> {
        self.by_gid.get(&gid).map(|e| e.addr)
    }

    /// The GID whose socket is `addr`, if the table has one.
    pub fn gid(&self, addr: SocketAddr) -> Option<Gid> {
        self.by_addr.get(&addr).copied()
    }

    /// Whether `gid`'s route is one the application set and holds.
    pub fn is_held(&self, gid: Gid) -> bool {
        self.by_gid.get(&gid).is_some_and(|e| e.learned.is_none())
    }

    /// Routes `gid` to `addr` for good (an application's choice: never dropped, never replaced
    /// by the wire).
    pub fn set(&mut self, gid: Gid, addr: SocketAddr) {
        self.insert(gid, addr, None);
    }

    /// Makes a route the application [`set`](Self::set) an ordinary learned one (it may then
    /// be replaced or dropped when not in use): for a peer the application no longer needs
    /// held.
    pub fn release(&mut self, gid: Gid) {
        if let Some(e) = self.by_gid.get(&gid).copied() {
            if e.learned.is_none() {
                // The newest learned entry (the table may exceed its capacity by one until the
                // next route is learned, which makes room).
                let seq = self.next_seq;
                self.next_seq += 1;
                self.insert(gid, e.addr, Some(seq));
            }
        }
    }

    /// Classifies a datagram that decoded, from socket `src` (`gsi`: a MAD for QP1), where a
    /// GID without an entry is reached at `default_port` of its IP; `in_use` says whether a
    /// GID has a connected QP or a live CM connection. See the module docs. A
    /// [`Admission::Candidate`] is remembered until [`settle`](Self::settle) (a newer one
    /// replaces it unsettled).
    pub fn admit(
        &mut self,
        src: SocketAddr,
        default_port: u16,
        gsi: bool,
        in_use: &dyn Fn(Gid) -> bool,
    ) -> Admission {
        if let Some(g) = self.gid(src) {
            return Admission::Known(g);
        }
        let gid = Gid::from_ip(src.ip());
        if src.port() == default_port && !self.by_gid.contains_key(&gid) {
            return Admission::Known(gid);
        }
        if !gsi {
            return Admission::Refused(Refusal::NotGsi);
        }
        if self.is_held(gid) || in_use(gid) {
            self.counters.route_in_use += 1;
            return Admission::Refused(Refusal::InUse);
        }
        self.candidate = Some((gid, src));
        Admission::Candidate(gid)
    }

    /// The candidate [`admit`](Self::admit) let through and not settled yet.
    pub fn candidate(&self) -> Option<(Gid, SocketAddr)> {
        self.candidate
    }

    /// Settles the pending candidate: `accepted(gid)` says whether the CM accepted a MAD of
    /// the candidate's GID since it was admitted. Accepted, its socket becomes the GID's
    /// learned route (replacing a learned route of the GID that is not in use: the CM's new
    /// connection is what uses it now); else it is forgotten. `in_use` protects other routes
    /// from eviction. Returns the route learned, if any.
    pub fn settle(
        &mut self,
        accepted: impl FnOnce(Gid) -> bool,
        in_use: &dyn Fn(Gid) -> bool,
    ) -> Option<(Gid, SocketAddr)> {
        let (gid, addr) = self.candidate.take()?;
        if !accepted(gid) {
            self.counters.candidates_discarded += 1;
            return None;
        }
        if self.is_held(gid) {
            // The application held the GID meanwhile: its choice stands.
            self.counters.candidates_discarded += 1;
            return None;
        }
        self.learn(gid, addr, &|g| g != gid && in_use(g))
            .then_some((gid, addr))
    }

    /// Routes `gid` to `addr` as learned (the application's own choice of an unheld route,
    /// e.g. where a REJ must go): replaces an earlier learned route, never one the application
    /// [`set`](Self::set); past [`capacity`](Self::capacity) the least recently learned entry
    /// for which `in_use` is false goes. Returns false (counted) when every learned entry is in
    /// use, or when `gid` is held.
    pub fn learn(&mut self, gid: Gid, addr: SocketAddr, in_use: &dyn Fn(Gid) -> bool) -> bool {
        let old = self.by_gid.get(&gid).copied();
        if old.is_some_and(|e| e.learned.is_none()) {
            return false;
        }
        // Another GID's learned route at this socket would lose it: one socket is one peer.
        if let Some(other) = self.gid(addr).filter(|&o| o != gid) {
            if self.is_held(other) {
                return false;
            }
        }
        if old.is_none() && !self.make_room(in_use) {
            self.counters.refused_full += 1;
            return false;
        }
        if old.is_some_and(|e| e.addr != addr) {
            self.counters.replaced += 1;
        }
        self.counters.learned += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.insert(gid, addr, Some(seq));
        true
    }

    /// Makes room for one more learned entry: evicts the least recently learned entries not in
    /// use; those in use are refreshed (they stay, as the newest). False when the
    /// [`MAX_IN_USE_SKIPPED`] oldest entries are all in use (a bounded cost per datagram
    /// whatever the table holds).
    fn make_room(&mut self, in_use: &dyn Fn(Gid) -> bool) -> bool {
        let mut looked = 0;
        while self.by_age.len() >= self.capacity {
            if looked >= self.by_age.len().min(MAX_IN_USE_SKIPPED) {
                return false;
            }
            looked += 1;
            let Some((_, old)) = self.by_age.pop_first() else {
                return true;
            };
            if in_use(old) {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.by_age.insert(seq, old);
                if let Some(e) = self.by_gid.get_mut(&old) {
                    e.learned = Some(seq);
                }
                continue;
            }
            if let Some(e) = self.by_gid.remove(&old) {
                self.by_addr.remove(&e.addr);
            }
            self.counters.evicted += 1;
        }
        true
    }

    fn insert(&mut self, gid: Gid, addr: SocketAddr, learned: Option<u64>) {
        self.remove(gid);
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

    const PORT: u16 = 4791;

    fn at(i: u32, port: u16) -> (Gid, SocketAddr) {
        let ip = Ipv4Addr::from(0x0a00_0000 | i);
        (Gid::from_ipv4(ip), SocketAddr::new(IpAddr::V4(ip), port))
    }

    fn free(_: Gid) -> bool {
        false
    }

    /// Admits a MAD from `a` and settles it with the CM's verdict `ok`.
    fn mad(t: &mut PeerTable, a: SocketAddr, ok: bool, in_use: &dyn Fn(Gid) -> bool) -> bool {
        match t.admit(a, PORT, true, in_use) {
            Admission::Candidate(_) => t.settle(|_| ok, in_use).is_some(),
            _ => false,
        }
    }

    #[test]
    fn learned_entries_are_bounded_and_the_oldest_goes() {
        let mut t = PeerTable::new(3);
        let (g0, a0) = at(0, 7471);
        t.set(g0, a0);
        for i in 1..=5 {
            let (_, a) = at(i, 7000 + i as u16);
            assert!(mad(&mut t, a, true, &free));
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
    fn routes_in_use_are_never_evicted_and_a_full_table_refuses() {
        let mut t = PeerTable::new(2);
        let (g1, a1) = at(1, 1);
        let (g2, a2) = at(2, 2);
        let (_, a3) = at(3, 3);
        let (_, a4) = at(4, 4);
        assert!(mad(&mut t, a1, true, &free));
        assert!(mad(&mut t, a2, true, &free));
        // g1 is in use: g2, the next oldest, goes instead.
        let uses_g1 = move |g: Gid| g == g1;
        assert!(mad(&mut t, a3, true, &uses_g1));
        assert_eq!((t.addr(g1), t.addr(g2)), (Some(a1), None));
        // Every entry in use: refused and counted.
        let all = |_: Gid| true;
        assert!(!mad(&mut t, a4, true, &|g| g != at(4, 0).0 && all(g)));
        assert_eq!(t.counters().refused_full, 1);
        assert_eq!(t.addr(at(4, 0).0), None);
        assert_eq!(t.addr(g1), Some(a1));
    }

    #[test]
    fn nothing_is_learned_without_the_cms_verdict() {
        let mut t = PeerTable::new(8);
        let (g, a) = at(1, 5555);
        assert!(!mad(&mut t, a, false, &free));
        assert_eq!(t.addr(g), None);
        assert_eq!(t.counters().candidates_discarded, 1);
        // RC traffic from an unknown socket is never a candidate.
        assert_eq!(
            t.admit(a, PORT, false, &free),
            Admission::Refused(Refusal::NotGsi)
        );
        assert_eq!(t.candidate(), None);
    }

    #[test]
    fn a_gid_in_use_keeps_its_route() {
        let mut t = PeerTable::new(8);
        let (g, a) = at(1, 7000);
        assert!(mad(&mut t, a, true, &free));
        let other = SocketAddr::new(a.ip(), 5555);
        let uses_g = move |x: Gid| x == g;
        assert_eq!(
            t.admit(other, PORT, true, &uses_g),
            Admission::Refused(Refusal::InUse)
        );
        assert_eq!(t.addr(g), Some(a));
        // The default socket of a GID with a learned route is another socket too.
        let default = SocketAddr::new(a.ip(), PORT);
        assert_eq!(
            t.admit(default, PORT, true, &uses_g),
            Admission::Refused(Refusal::InUse)
        );
        assert_eq!(t.counters().route_in_use, 2);
        // Not in use: a candidate the CM accepts replaces it (counted).
        assert!(mad(&mut t, other, true, &free));
        assert_eq!((t.addr(g), t.gid(a)), (Some(other), None));
        assert_eq!(t.counters().replaced, 1);
    }

    #[test]
    fn a_held_route_never_moves_until_released() {
        let mut t = PeerTable::new(2);
        let (g, a) = at(1, 7471);
        let other = SocketAddr::new(a.ip(), 9999);
        t.set(g, a);
        assert!(!mad(&mut t, other, true, &free));
        assert_eq!(t.addr(g), Some(a));
        t.release(g);
        assert!(mad(&mut t, other, true, &free));
        assert_eq!(
            (t.addr(g), t.gid(other), t.gid(a)),
            (Some(other), Some(g), None)
        );
    }

    #[test]
    fn the_default_socket_of_an_unrouted_gid_is_known() {
        let mut t = PeerTable::new(2);
        let (g, a) = at(1, PORT);
        assert_eq!(t.admit(a, PORT, false, &free), Admission::Known(g));
        assert!(t.is_empty());
    }

    #[test]
    fn relearning_refreshes_age() {
        let mut t = PeerTable::new(2);
        let (g1, a1) = at(1, 1);
        let (g2, a2) = at(2, 2);
        let (g3, a3) = at(3, 3);
        t.learn(g1, a1, &free);
        t.learn(g2, a2, &free);
        t.learn(g1, a1, &free); // g1 is now the most recent
        t.learn(g3, a3, &free); // g2 goes
        assert_eq!(
            (t.addr(g1), t.addr(g2), t.addr(g3)),
            (Some(a1), None, Some(a3))
        );
    }
}
