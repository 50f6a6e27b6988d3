//! The fault layer of `rnic ping`: an [`Endpoint`] wrapper that sits between the real-time UDP
//! driver and the host, and drops datagrams — seeded random loss (`--drop-rate`) and a dead
//! peer (`--kill-peer-after`). Protocol code (NIC, CM) never sees the faults, only their
//! effect: missing packets.
//!
//! Loss draws from [`Rng`] seeded by the caller, one draw per datagram in either direction, so
//! the same seed drops the same sequence of datagrams (the order of datagrams on a real wire
//! still varies from run to run).

use bytes::Bytes;
use rnic_sim::fabric::Endpoint;
use rnic_sim::rng::Rng;
use serde::Serialize;
use std::net::SocketAddr;
use verbs_core::SimTime;

/// Datagrams the fault layer dropped, by cause and direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FaultStats {
    /// Outgoing datagrams dropped by `--drop-rate`.
    pub dropped_tx: u64,
    /// Incoming datagrams dropped by `--drop-rate`.
    pub dropped_rx: u64,
    /// Outgoing datagrams dropped because the peer is dead (`--kill-peer-after`).
    pub killed_tx: u64,
    /// Incoming datagrams dropped because the peer is dead (`--kill-peer-after`).
    pub killed_rx: u64,
}

/// `inner` behind a lossy wire. See the module docs.
#[derive(Debug)]
pub struct FaultyEndpoint<E> {
    inner: E,
    /// Drop probability in parts per million.
    drop_ppm: u64,
    rng: Rng,
    killed: bool,
    stats: FaultStats,
    generation: u64,
}

impl<E> FaultyEndpoint<E> {
    /// `inner` on a wire that drops each datagram (in either direction) with probability
    /// `drop_rate` (0.0 ..= 1.0, clamped; resolution 1 ppm), drawing from `Rng::new(seed)`.
    pub fn new(inner: E, drop_rate: f64, seed: u64) -> Self {
        let drop_ppm = (drop_rate.clamp(0.0, 1.0) * 1e6).round() as u64;
        FaultyEndpoint {
            inner,
            drop_ppm,
            rng: Rng::new(seed),
            killed: false,
            stats: FaultStats::default(),
            generation: 0,
        }
    }

    /// The wrapped endpoint.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The wrapped endpoint, mutably (application calls).
    pub fn inner_mut(&mut self) -> &mut E {
        &mut self.inner
    }

    /// From now on the peer is dead: every datagram in either direction is dropped, as if the
    /// peer's host had lost power. Cannot be undone.
    pub fn kill_peer(&mut self) {
        self.killed = true;
    }

    /// Whether [`kill_peer`](Self::kill_peer) was called.
    pub fn is_peer_killed(&self) -> bool {
        self.killed
    }

    /// The drop counters.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Incremented by every datagram and timeout the driver hands in (and every
    /// [`note_event`](Self::note_event)): a waiter that saw
    /// generation `g` has something new to look at once this differs from `g`.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Something the driver does not see happened (a hardware device's completion): a new
    /// [`generation`](Self::generation) for waiters.
    pub fn note_event(&mut self) {
        self.generation += 1;
    }

    fn lose(&mut self) -> bool {
        self.drop_ppm > 0 && self.rng.below(1_000_000) < self.drop_ppm
    }
}

impl<E: Endpoint> Endpoint for FaultyEndpoint<E> {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        self.generation += 1;
        if self.killed {
            self.stats.killed_rx += 1;
        } else if self.lose() {
            self.stats.dropped_rx += 1;
        } else {
            self.inner.handle_datagram(now, src, bytes);
        }
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        loop {
            let t = self.inner.poll_transmit(now)?;
            if self.killed {
                self.stats.killed_tx += 1;
            } else if self.lose() {
                self.stats.dropped_tx += 1;
            } else {
                return Some(t);
            }
        }
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.inner.poll_timeout()
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.generation += 1;
        self.inner.handle_timeout(now);
    }

    fn addr(&self) -> SocketAddr {
        self.inner.addr()
    }
}
