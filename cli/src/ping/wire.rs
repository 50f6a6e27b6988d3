//! The fault layer of `rnic ping`: an [`Endpoint`] wrapper that sits between the real-time UDP
//! driver and the host, and drops datagrams — seeded random loss (`--drop-rate`) and a dead
//! peer (`--kill-peer-after`). Protocol code (NIC, CM) never sees the faults, only their
//! effect: missing packets.
//!
//! Loss is decided per datagram by a [`DropPlan`]: a function of the seed, the direction, the
//! datagram's bytes and how many copies of them came before, so the same seed drops the same
//! datagrams whatever order they cross the wire in (module [`drops`](super::drops)).
//!
//! The capture (`--pcap`) is taken here too, as each datagram crosses ([`CaptureSink`]): every
//! datagram this side sends, including those the fault layer then drops (the NIC sent them;
//! the wire lost them), and every datagram that reaches this side's NIC (not those dropped on
//! the way in).

use super::capture::CaptureSink;
use super::drops::{Direction, DropPlan};
use bytes::Bytes;
use rnic_sim::fabric::Endpoint;
use rnic_sim::roce::Flow;
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
pub struct FaultyEndpoint<E> {
    inner: E,
    drops: DropPlan,
    capture: Option<Box<dyn CaptureSink>>,
    killed: bool,
    stats: FaultStats,
    generation: u64,
}

impl<E: std::fmt::Debug> std::fmt::Debug for FaultyEndpoint<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyEndpoint")
            .field("inner", &self.inner)
            .field("killed", &self.killed)
            .field("stats", &self.stats)
            .field("capturing", &self.capture.is_some())
            .finish_non_exhaustive()
    }
}

impl<E> FaultyEndpoint<E> {
    /// `inner` on a wire that drops each datagram (in either direction) with probability
    /// `drop_rate` (0.0 ..= 1.0, clamped; resolution 1 ppm), each decision a function of
    /// `seed` and the datagram ([`DropPlan`]).
    pub fn new(inner: E, drop_rate: f64, seed: u64) -> Self {
        FaultyEndpoint {
            inner,
            drops: DropPlan::new(drop_rate, seed),
            capture: None,
            killed: false,
            stats: FaultStats::default(),
            generation: 0,
        }
    }

    /// Records every datagram from now on into `sink` (see the module docs for which).
    pub fn set_capture(&mut self, sink: Box<dyn CaptureSink>) {
        self.capture = Some(sink);
    }

    /// The capture sink, if [`set_capture`](Self::set_capture) gave one.
    pub fn capture(&self) -> Option<&dyn CaptureSink> {
        self.capture.as_deref()
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
}

impl<E: Endpoint> Endpoint for FaultyEndpoint<E> {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        self.generation += 1;
        if self.killed {
            self.stats.killed_rx += 1;
        } else if self.drops.decide(Direction::Rx, &bytes) {
            self.stats.dropped_rx += 1;
        } else {
            if let Some(c) = self.capture.as_mut() {
                c.record(now, &Flow::new(src, self.inner.addr()), &bytes);
            }
            self.inner.handle_datagram(now, src, bytes);
        }
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        loop {
            let (dst, bytes) = self.inner.poll_transmit(now)?;
            if let Some(c) = self.capture.as_mut() {
                c.record(now, &Flow::new(self.inner.addr(), dst), &bytes);
            }
            if self.killed {
                self.stats.killed_tx += 1;
            } else if self.drops.decide(Direction::Tx, &bytes) {
                self.stats.dropped_tx += 1;
            } else {
                return Some((dst, bytes));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    const ME: &str = "127.0.0.2:7000";
    const PEER: &str = "127.0.0.3:7000";

    /// An endpoint that sends what is queued and keeps what it receives.
    #[derive(Debug, Default)]
    struct Script {
        out: VecDeque<Bytes>,
        got: Vec<Bytes>,
    }

    impl Endpoint for Script {
        fn handle_datagram(&mut self, _: SimTime, _: SocketAddr, bytes: Bytes) {
            self.got.push(bytes);
        }
        fn poll_transmit(&mut self, _: SimTime) -> Option<(SocketAddr, Bytes)> {
            Some((PEER.parse().unwrap(), self.out.pop_front()?))
        }
        fn poll_timeout(&self) -> Option<SimTime> {
            None
        }
        fn handle_timeout(&mut self, _: SimTime) {}
        fn addr(&self) -> SocketAddr {
            ME.parse().unwrap()
        }
    }

    /// A capture into shared memory: (sent by this side, bytes).
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<(bool, Bytes)>>>);

    impl CaptureSink for Recorder {
        fn record(&mut self, _: SimTime, flow: &Flow, bytes: &[u8]) {
            let sent = flow.src == ME.parse().unwrap();
            let mut r = self.0.lock().unwrap();
            r.push((sent, Bytes::copy_from_slice(bytes)));
        }
        fn not_written(&self) -> u64 {
            0
        }
        fn error(&self) -> Option<String> {
            None
        }
    }

    fn datagram(tag: u8, i: u32) -> Bytes {
        let mut b = vec![tag; 32];
        b[..4].copy_from_slice(&i.to_be_bytes());
        Bytes::from(b)
    }

    /// What [`run`] saw: what went out, what came in, the counters, the capture.
    #[derive(Debug, PartialEq)]
    struct Outcome {
        sent: Vec<Bytes>,
        got: Vec<Bytes>,
        stats: FaultStats,
        capture: Vec<(bool, Bytes)>,
    }

    /// Sends `n` datagrams and receives `n`, in rounds of `tx_per_round` polls for a send then
    /// `rx_per_round` receives.
    fn run(n: u32, tx_per_round: u32, rx_per_round: u32) -> Outcome {
        let mut ep = FaultyEndpoint::new(Script::default(), 0.25, 99);
        let cap = Recorder::default();
        ep.set_capture(Box::new(cap.clone()));
        ep.inner_mut().out = (0..n).map(|i| datagram(b't', i)).collect();
        let (mut sent, mut rx) = (Vec::new(), 0);
        let now = SimTime::ZERO;
        while !ep.inner().out.is_empty() || rx < n {
            for _ in 0..tx_per_round {
                // Passes over the datagrams the fault layer drops, to the next one kept.
                sent.extend(ep.poll_transmit(now).map(|(_, b)| b));
            }
            for _ in 0..rx_per_round.min(n - rx) {
                ep.handle_datagram(now, PEER.parse().unwrap(), datagram(b'r', rx));
                rx += 1;
            }
        }
        let capture = cap.0.lock().unwrap().clone();
        Outcome {
            sent,
            got: ep.inner().got.clone(),
            stats: ep.stats(),
            capture,
        }
    }

    #[test]
    fn the_fault_layer_drops_the_same_datagrams_in_any_interleaving() {
        let a = run(300, 1, 1);
        let b = run(300, 7, 2);
        let c = run(300, 1, 300);
        for other in [&b, &c] {
            assert_eq!(a.sent, other.sent, "the same datagrams sent");
            assert_eq!(a.got, other.got, "the same datagrams received");
            assert_eq!(a.stats, other.stats);
        }
        let s = a.stats;
        assert!(s.dropped_tx > 40 && s.dropped_rx > 40, "{s:?}");
        assert_eq!(a.sent.len() as u64 + s.dropped_tx, 300);
        assert_eq!(a.got.len() as u64 + s.dropped_rx, 300);
    }

    #[test]
    fn the_capture_has_every_datagram_sent_and_those_received() {
        let o = run(100, 1, 1);
        let cap_sent: Vec<&Bytes> = o.capture.iter().filter(|c| c.0).map(|c| &c.1).collect();
        let cap_got: Vec<&Bytes> = o.capture.iter().filter(|c| !c.0).map(|c| &c.1).collect();
        // Sent: all 100, the dropped ones too (the NIC sent them; the wire lost them).
        let all: Vec<Bytes> = (0..100).map(|i| datagram(b't', i)).collect();
        assert_eq!(cap_sent, all.iter().collect::<Vec<_>>());
        assert!(o.stats.dropped_tx > 0 && o.sent.len() < 100);
        // Received: only those that reached the NIC.
        assert_eq!(cap_got, o.got.iter().collect::<Vec<_>>());
        assert!(o.stats.dropped_rx > 0);
    }
}
