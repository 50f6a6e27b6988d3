//! The send budget a device shares among all its RC QPs to one peer: how many bytes of
//! request packets (and of the READ responses they ask for) may be unacknowledged towards
//! that peer together, whatever the number of QPs.
//!
//! Each QP keeps its own IB/rxe limits — the PSN window (`RXE_MAX_UNACKED_PSNS`), one READ
//! credit per outstanding READ/atomic (`max_rd_atomic`, IBTA 9.4.4), its retry counters — but
//! nothing in IB makes QPs to one peer slow down together: a hardware fabric has link-level
//! credits for that, which UDP sockets do not. So the budget sits above the QPs, one per peer
//! GID, as TCP's congestion window sits above a connection's data (RFC 5681):
//!
//! * its ceiling is the byte window of one QP
//!   ([`SimDeviceConfig::max_unacked_bytes`](crate::SimDeviceConfig::max_unacked_bytes), sized
//!   by a real-time driver from the peer's receive buffer): 64 QPs fill that buffer no more
//!   than one does. Without a byte window (`u64::MAX`, the default) there is no budget.
//! * additive increase: each acknowledged byte grows the window by `MTU / window` bytes (one
//!   path MTU per window acknowledged, RFC 5681 §3.1 congestion avoidance), up to the ceiling;
//! * multiplicative decrease: a retransmission (RC timeout or PSN sequence NAK) of any QP to
//!   the peer halves it, at least [`MIN_WINDOW`]; one loss episode halves it once — further
//!   signals are ignored until the bytes in flight at the first one are acknowledged (as
//!   NewReno's recovery, RFC 6582).
//!
//! A QP sends new PSNs only within the room left, except when nothing at all is in flight to
//! the peer (so every QP can always make progress); retransmissions are charged already. A QP
//! refused waits, and is woken when bytes are released.

use std::collections::{BTreeMap, BTreeSet};
use verbs_core::Gid;

/// The smallest window a loss leaves: 16 KiB (four 4 KiB packets), the smallest byte window
/// a real-time driver sets.
pub const MIN_WINDOW: u64 = 16 << 10;

/// Idle peers (nothing in flight, no QP waiting) whose window is remembered at most; past it
/// they are forgotten (their next use starts again at the ceiling). Entries in use are one per
/// peer of a QP with bytes in flight, so the table stays bounded by the device's QPs.
pub const MAX_IDLE_PEERS: usize = 4096;

/// The budget towards one peer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budget {
    /// Bytes that may be in flight together (the congestion window).
    pub window: u64,
    /// Bytes in flight: the sum of every QP's charge.
    pub in_flight: u64,
    /// Bytes still to be acknowledged before another loss may shrink the window again.
    pub recover: u64,
    /// QPs refused for lack of room, to be woken when bytes are released.
    waiting: BTreeSet<u32>,
}

/// The budgets of a device, by peer GID.
#[derive(Debug, Clone)]
pub struct PeerBudgets {
    /// The ceiling of every window; `u64::MAX`: no budget at all.
    ceiling: u64,
    peers: BTreeMap<Gid, Budget>,
    /// QPs woken since the device last took them.
    woken: Vec<u32>,
}

impl PeerBudgets {
    /// Budgets with windows of at most `ceiling` bytes (`u64::MAX`: none).
    pub fn new(ceiling: u64) -> PeerBudgets {
        PeerBudgets {
            ceiling,
            peers: BTreeMap::new(),
            woken: Vec::new(),
        }
    }

    /// Whether QPs are budgeted at all.
    pub fn enabled(&self) -> bool {
        self.ceiling != u64::MAX
    }

    /// Changes the ceiling; windows above it come down to it.
    pub fn set_ceiling(&mut self, ceiling: u64) {
        self.ceiling = ceiling;
        for b in self.peers.values_mut() {
            b.window = b.window.min(ceiling);
        }
    }

    /// The budget towards `peer`, if it has one.
    pub fn get(&self, peer: Gid) -> Option<&Budget> {
        self.peers.get(&peer)
    }

    fn entry(&mut self, peer: Gid) -> &mut Budget {
        if !self.peers.contains_key(&peer) && self.peers.len() >= MAX_IDLE_PEERS {
            self.peers
                .retain(|_, b| b.in_flight > 0 || !b.waiting.is_empty());
        }
        let ceiling = self.ceiling;
        self.peers.entry(peer).or_insert_with(|| Budget {
            window: ceiling,
            ..Budget::default()
        })
    }

    /// Whether `bytes` more may go to `peer` now: within the room left, or anything when
    /// nothing is in flight to it. Without a budget, always.
    pub fn admits(&self, peer: Gid, bytes: u64) -> bool {
        match self.peers.get(&peer) {
            _ if !self.enabled() => true,
            None => true,
            Some(b) => b.in_flight == 0 || b.in_flight.saturating_add(bytes) <= b.window,
        }
    }

    /// The room left towards `peer`, in bytes (`u64::MAX` without a budget).
    #[cfg(test)]
    pub fn room(&self, peer: Gid) -> u64 {
        match self.peers.get(&peer) {
            _ if !self.enabled() => u64::MAX,
            None => self.ceiling,
            Some(b) => b.window.saturating_sub(b.in_flight),
        }
    }

    /// Counts `bytes` more in flight to `peer`.
    pub fn charge(&mut self, peer: Gid, bytes: u64) {
        if self.enabled() && bytes > 0 {
            let b = self.entry(peer);
            b.in_flight = b.in_flight.saturating_add(bytes);
        }
    }

    /// `bytes` to `peer` are no longer in flight: acknowledged (`acked`: the window grows by
    /// `mtu` per window acknowledged) or given up (a QP left RTS). Wakes the waiting QPs.
    pub fn release(&mut self, peer: Gid, bytes: u64, acked: bool, mtu: u32) {
        if !self.enabled() || bytes == 0 {
            return;
        }
        let ceiling = self.ceiling;
        let Some(b) = self.peers.get_mut(&peer) else {
            return;
        };
        b.in_flight = b.in_flight.saturating_sub(bytes);
        if acked {
            if b.recover > 0 {
                b.recover = b.recover.saturating_sub(bytes);
            } else {
                let grow = (u64::from(mtu).saturating_mul(bytes) / b.window.max(1)).max(1);
                b.window = b.window.saturating_add(grow).min(ceiling);
            }
        }
        if b.in_flight == 0 {
            b.recover = 0;
        }
        self.woken.extend(std::mem::take(&mut b.waiting));
        if b.in_flight == 0 && b.window == ceiling {
            self.peers.remove(&peer);
        }
    }

    /// A QP to `peer` retransmits: the window halves, once per loss episode.
    pub fn on_loss(&mut self, peer: Gid) {
        if !self.enabled() {
            return;
        }
        let floor = MIN_WINDOW.min(self.ceiling);
        let b = self.entry(peer);
        if b.recover == 0 {
            b.window = (b.window / 2).max(floor);
            b.recover = b.in_flight.max(1);
        }
    }

    /// QP `qpn` was refused: wake it at the next release to `peer`.
    pub fn wait(&mut self, peer: Gid, qpn: u32) {
        if self.enabled() {
            self.entry(peer).waiting.insert(qpn);
        }
    }

    /// Takes the QPs woken since the last call.
    pub fn take_woken(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.woken)
    }

    /// Whether some QP was woken and not taken yet.
    pub fn has_woken(&self) -> bool {
        !self.woken.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u32 = 4096;

    fn peer(n: u8) -> Gid {
        Gid::from_ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n)))
    }

    #[test]
    fn without_ceiling_everything_is_admitted_and_nothing_kept() {
        let mut b = PeerBudgets::new(u64::MAX);
        b.charge(peer(1), 1 << 40);
        assert!(b.admits(peer(1), 1 << 40));
        b.on_loss(peer(1));
        b.wait(peer(1), 7);
        assert!(b.get(peer(1)).is_none());
        assert_eq!(b.room(peer(1)), u64::MAX);
    }

    #[test]
    fn qps_to_one_peer_share_the_window_and_other_peers_do_not() {
        let mut b = PeerBudgets::new(64 << 10);
        // Two QPs to peer 1 take 32 KiB each: the window is full for a third.
        b.charge(peer(1), 32 << 10);
        b.charge(peer(1), 32 << 10);
        assert!(!b.admits(peer(1), 4096));
        assert_eq!(b.room(peer(1)), 0);
        // Another peer has its own.
        assert!(b.admits(peer(2), 64 << 10));
        b.wait(peer(1), 9);
        assert!(!b.has_woken());
        b.release(peer(1), 4096, true, MTU);
        assert_eq!(b.take_woken(), vec![9]);
        assert!(b.admits(peer(1), 4096));
        assert!(!b.admits(peer(1), 8192));
    }

    #[test]
    fn nothing_in_flight_admits_anything() {
        let mut b = PeerBudgets::new(16 << 10);
        b.on_loss(peer(1));
        assert!(b.admits(peer(1), 1 << 20));
    }

    #[test]
    fn a_loss_halves_once_per_episode_and_acks_grow_it_back() {
        let ceiling = 1 << 20;
        let mut b = PeerBudgets::new(ceiling);
        b.charge(peer(1), 256 << 10);
        b.on_loss(peer(1));
        assert_eq!(b.get(peer(1)).map(|x| x.window), Some(ceiling / 2));
        // Other QPs' retransmissions of the same episode do not halve it again.
        b.on_loss(peer(1));
        b.on_loss(peer(1));
        assert_eq!(b.get(peer(1)).map(|x| x.window), Some(ceiling / 2));
        // The bytes in flight at the loss acknowledged: the episode is over, no growth yet.
        b.release(peer(1), 256 << 10, true, MTU);
        assert_eq!(b.get(peer(1)).map(|x| x.window), Some(ceiling / 2));
        // The next loss halves again.
        b.charge(peer(1), 64 << 10);
        b.on_loss(peer(1));
        assert_eq!(b.get(peer(1)).map(|x| x.window), Some(ceiling / 4));
        b.release(peer(1), 64 << 10, true, MTU);
        // Additive increase: one MTU per window acknowledged.
        let w = ceiling / 4;
        b.charge(peer(1), w);
        b.release(peer(1), w, true, MTU);
        assert_eq!(b.get(peer(1)).map(|x| x.window), Some(w + u64::from(MTU)));
        // It never passes the ceiling; at the ceiling and idle the entry is forgotten.
        for _ in 0..1000 {
            b.charge(peer(1), ceiling);
            b.release(peer(1), ceiling, true, MTU);
        }
        assert!(b.get(peer(1)).is_none());
        assert_eq!(b.room(peer(1)), ceiling);
    }

    #[test]
    fn the_window_never_drops_below_the_floor() {
        let mut b = PeerBudgets::new(1 << 20);
        for _ in 0..20 {
            b.charge(peer(1), 4096);
            b.on_loss(peer(1));
            b.release(peer(1), 4096, false, MTU);
        }
        b.charge(peer(1), 1);
        assert_eq!(b.get(peer(1)).map(|x| x.window), Some(MIN_WINDOW));
    }

    #[test]
    fn given_up_bytes_do_not_grow_the_window() {
        let mut b = PeerBudgets::new(1 << 20);
        b.charge(peer(1), 512 << 10);
        b.on_loss(peer(1));
        b.release(peer(1), 512 << 10, false, MTU);
        b.charge(peer(1), 1);
        assert_eq!(b.get(peer(1)).map(|x| x.window), Some(512 << 10));
    }

    #[test]
    fn idle_peers_are_bounded() {
        let mut b = PeerBudgets::new(1 << 20);
        for i in 0..(MAX_IDLE_PEERS as u32 + 10) {
            let g = Gid::from_ip(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                0x0a00_0000 + i,
            )));
            b.charge(g, 4096);
            b.on_loss(g);
            b.release(g, 4096, false, MTU);
        }
        assert!(b.peers.len() <= MAX_IDLE_PEERS);
    }
}
