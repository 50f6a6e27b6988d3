//! Fabrics: the networks the sans-IO machines run on (ARCHITECTURE.md, "Two drivers").
//!
//! * Deterministic, in memory, virtual time — [`SimFabric`] (the network, with a seeded
//!   [`FaultPlan`]: loss, duplication, delay/jitter and so reordering, corruption, partitions,
//!   crashes) and [`Simulation`] (runs [`Endpoint`]s on it to quiescence, jumping the clock from
//!   event to event). Same seed ⇒ byte-identical trace.
//! * Real, wall clock — [`udp`]: runs one [`Endpoint`] on a tokio UDP socket. The only module of
//!   this tree that does I/O.
//!
//! Both run the same [`Endpoint`] state machines: a datagram is a [`Bytes`] between two
//! [`SocketAddr`]s (host IP + UDP port).

use std::net::SocketAddr;

use bytes::Bytes;
use verbs_core::SimTime;

mod driver;
mod plan;
mod sim;
mod trace;
pub mod udp;

pub use driver::{RunOutcome, Simulation};
pub use plan::{
    Crash, Delay, Direction, FaultPlan, Jitter, Partition, PathFaults, DEFAULT_LATENCY_NS,
};
pub use sim::{Delivery, FabricStats, SimFabric};
pub use trace::{fnv1a64, payload_digest, DropReason, FabricEvent, FabricEventKind, Fnv1a};

/// A sans-IO datagram endpoint (in the style of `quinn-proto`): the driver feeds it datagrams
/// and timeouts with the current time, and drains what it wants to send. It never reads a clock
/// or touches a socket, so the same endpoint runs on [`Simulation`] and on [`udp`].
///
/// Contract: after any `handle_*` call the driver drains [`poll_transmit`](Self::poll_transmit)
/// until `None` and then asks [`poll_timeout`](Self::poll_timeout) again.
pub trait Endpoint {
    /// A datagram from `src` arrived at time `now`.
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes);

    /// The next datagram to send, as (destination, payload), or `None` when there is nothing
    /// more to send now.
    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)>;

    /// When [`handle_timeout`](Self::handle_timeout) should next be called, if ever. A time in
    /// the past means "as soon as possible".
    fn poll_timeout(&self) -> Option<SimTime>;

    /// The deadline returned by [`poll_timeout`](Self::poll_timeout) has passed; `now` is at or
    /// after it. The endpoint must move or clear its deadline, or it is called again at once.
    fn handle_timeout(&mut self, now: SimTime);

    /// The endpoint's own address (host IP + UDP port). [`Simulation`] binds it on the fabric
    /// and uses it as the source of what the endpoint sends; the UDP driver uses its socket's
    /// address instead.
    fn addr(&self) -> SocketAddr;
}

impl<E: Endpoint + ?Sized> Endpoint for Box<E> {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        (**self).handle_datagram(now, src, bytes)
    }
    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        (**self).poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<SimTime> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: SimTime) {
        (**self).handle_timeout(now)
    }
    fn addr(&self) -> SocketAddr {
        (**self).addr()
    }
}
