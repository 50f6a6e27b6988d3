//! [`SimFabric`]: the in-memory, deterministic network. Sans-IO and single-threaded: the caller
//! passes the virtual time in, the fabric keeps datagrams in flight in an event queue ordered by
//! (arrival time, packet id) and applies the [`FaultPlan`] with its seeded [`Rng`].

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::net::{IpAddr, SocketAddr};

use bytes::{Bytes, BytesMut};
use verbs_core::{Errno, Error, SimTime};

use super::plan::FaultPlan;
use super::trace::{payload_digest, DropReason, FabricEvent, FabricEventKind, Fnv1a};
use crate::rng::Rng;

/// A datagram handed out by [`SimFabric::pop_delivery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Arrival time (virtual).
    pub at: SimTime,
    /// The packet id (as in the trace).
    pub packet: u64,
    /// The sender's address.
    pub src: SocketAddr,
    /// The destination address.
    pub dst: SocketAddr,
    /// The payload, possibly with one bit flipped.
    pub bytes: Bytes,
}

/// Counters of what the fabric did (for "sometimes" reporting; the trace has the detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FabricStats {
    /// Datagrams handed to [`SimFabric::send`].
    pub sent: u64,
    /// Datagrams delivered (copies included).
    pub delivered: u64,
    /// Datagrams lost to the loss probability.
    pub lost: u64,
    /// Datagrams dropped by a partition.
    pub partitioned: u64,
    /// Datagrams dropped because their source or destination host was down.
    pub crashed: u64,
    /// Datagrams dropped because nothing was bound to their destination.
    pub no_listener: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Copies with a flipped bit.
    pub corrupted: u64,
}

/// A datagram on the wire.
#[derive(Debug)]
struct InFlight {
    /// (arrival time, packet id): its place in the queue, unique (packet ids are).
    key: (SimTime, u64),
    src: SocketAddr,
    dst: SocketAddr,
    bytes: Bytes,
    /// `payload_digest(bytes)`, computed once when the copy is put in flight.
    digest: u64,
}

/// Ordered by [`InFlight::key`] alone.
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for InFlight {}

/// The deterministic in-memory network.
///
/// Datagrams between bound [`SocketAddr`]s (hosts are identified by IP). Every datagram draws
/// its faults from the random stream of its path (source IP, destination IP), a
/// [`fork`](Rng::fork) of the fabric's generator, so traffic on one path never changes the
/// faults of another. Per datagram, in this order: partition and crash checks (no draw), loss
/// (one draw), duplication (one draw), then for each copy corruption (one draw, plus one for
/// the bit) and delay ([`Delay::sample`](super::Delay::sample)).
///
/// Same generator + same calls ⇒ the same trace and [`trace_hash`](Self::trace_hash).
#[derive(Debug)]
pub struct SimFabric {
    plan: FaultPlan,
    rng: Rng,
    path_rngs: BTreeMap<(IpAddr, IpAddr), Rng>,
    /// In flight, earliest (arrival time, packet id) first: ties break by send order. A heap:
    /// the keys are unique, so it pops in exactly the order of a sorted map, without a node
    /// allocation per datagram.
    queue: BinaryHeap<Reverse<InFlight>>,
    next_packet: u64,
    bound: BTreeSet<SocketAddr>,
    record_trace: bool,
    trace: Vec<FabricEvent>,
    hash: Fnv1a,
    stats: FabricStats,
}

impl SimFabric {
    /// A fabric with the fault plan `plan` drawing from `rng` (give it its own fork of the
    /// world's generator). Records the trace.
    pub fn new(rng: Rng, plan: FaultPlan) -> Self {
        SimFabric {
            plan,
            rng,
            path_rngs: BTreeMap::new(),
            queue: BinaryHeap::new(),
            next_packet: 0,
            bound: BTreeSet::new(),
            record_trace: true,
            trace: Vec::new(),
            hash: Fnv1a::new(),
            stats: FabricStats::default(),
        }
    }

    /// `SimFabric::new(Rng::new(seed), plan)`.
    pub fn with_seed(seed: u64, plan: FaultPlan) -> Self {
        SimFabric::new(Rng::new(seed), plan)
    }

    /// The fault plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// The fault plan, to change it mid-run (a change applies to later sends and arrivals).
    pub fn plan_mut(&mut self) -> &mut FaultPlan {
        &mut self.plan
    }

    /// Starts accepting datagrams for `addr` (like binding a UDP socket).
    ///
    /// Errors: `EADDRINUSE` if `addr` is already bound.
    pub fn bind(&mut self, addr: SocketAddr) -> Result<(), Error> {
        if self.bound.insert(addr) {
            Ok(())
        } else {
            Err(Error::new(
                Errno::EADDRINUSE,
                format!("{addr} is already bound"),
            ))
        }
    }

    /// Stops accepting datagrams for `addr`; later arrivals are dropped as
    /// [`DropReason::NoListener`]. Returns whether it was bound.
    pub fn unbind(&mut self, addr: SocketAddr) -> bool {
        self.bound.remove(&addr)
    }

    /// Whether `host` is up (not crashed) at `at` according to the plan.
    pub fn host_is_up(&self, host: IpAddr, at: SimTime) -> bool {
        !self.plan.is_down(host, at)
    }

    /// Sends `bytes` from `src` to `dst` at virtual time `now` and returns its packet id. The
    /// datagram may be dropped, duplicated, corrupted and delayed per the plan; every outcome
    /// is traced. Never fails: a datagram the network does not carry is dropped, as UDP does.
    pub fn send(&mut self, now: SimTime, src: SocketAddr, dst: SocketAddr, bytes: Bytes) -> u64 {
        let packet = self.alloc_packet();
        self.stats.sent += 1;
        let digest = payload_digest(&bytes);
        let kind = FabricEventKind::Sent {
            len: bytes.len(),
            digest,
        };
        self.record(now, packet, src, dst, kind);

        let (sip, dip) = (src.ip(), dst.ip());
        if self.plan.is_down(sip, now) {
            self.drop_packet(now, packet, src, dst, DropReason::SourceCrashed);
            return packet;
        }
        if self.plan.is_partitioned(sip, dip, now) {
            self.drop_packet(now, packet, src, dst, DropReason::Partitioned);
            return packet;
        }

        let faults = *self.plan.faults_for(sip, dip);
        let root = &self.rng;
        let rng = self
            .path_rngs
            .entry((sip, dip))
            .or_insert_with(|| root.fork(path_label(sip, dip)));
        if rng.chance(faults.loss) {
            self.drop_packet(now, packet, src, dst, DropReason::Lost);
            return packet;
        }
        let duplicate = rng.chance(faults.duplicate);
        // Per copy: the corrupted bit (if any) and the delay, drawn before any tracing.
        let mut draw_copy = || {
            let corrupt = rng.chance(faults.corrupt) && !bytes.is_empty();
            let bit = corrupt.then(|| rng.below(bytes.len() as u64 * 8));
            (bit, faults.delay.sample(rng))
        };
        let first = draw_copy();
        let second = duplicate.then(draw_copy);

        // The first copy takes `bytes` itself: a clone (an allocation, for a buffer not shared
        // yet) only for a duplicate.
        let second = second.map(|draw| (bytes.clone(), draw));
        self.enqueue(now, packet, src, dst, (bytes, digest), first);
        if let Some((bytes, second)) = second {
            let copy = self.alloc_packet();
            self.stats.duplicated += 1;
            self.record(now, packet, src, dst, FabricEventKind::Duplicated { copy });
            self.enqueue(now, copy, src, dst, (bytes, digest), second);
        }
        packet
    }

    /// The arrival time of the earliest datagram in flight, if any. (It may still be dropped on
    /// arrival, in which case [`pop_delivery`](Self::pop_delivery) at that time returns `None`.)
    pub fn next_delivery_time(&self) -> Option<SimTime> {
        self.queue.peek().map(|f| f.0.key.0)
    }

    /// The earliest datagram that has arrived by `now`, in (arrival time, packet id) order.
    /// Datagrams whose destination host is down, whose path is cut at arrival or whose
    /// destination is not bound are dropped (and traced) on the way; `None` if nothing is due.
    pub fn pop_delivery(&mut self, now: SimTime) -> Option<Delivery> {
        loop {
            let (at, packet) = self.queue.peek()?.0.key;
            if at > now {
                return None;
            }
            let Reverse(f) = self.queue.pop()?;
            let reason = if self.plan.is_down(f.dst.ip(), at) {
                Some(DropReason::DestinationCrashed)
            } else if self.plan.is_partitioned(f.src.ip(), f.dst.ip(), at) {
                Some(DropReason::Partitioned)
            } else if !self.bound.contains(&f.dst) {
                Some(DropReason::NoListener)
            } else {
                None
            };
            match reason {
                Some(r) => self.drop_packet(at, packet, f.src, f.dst, r),
                None => {
                    self.stats.delivered += 1;
                    let kind = FabricEventKind::Delivered { digest: f.digest };
                    self.record(at, packet, f.src, f.dst, kind);
                    return Some(Delivery {
                        at,
                        packet,
                        src: f.src,
                        dst: f.dst,
                        bytes: f.bytes,
                    });
                }
            }
        }
    }

    /// Datagrams in flight (copies included).
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// The counters.
    pub fn stats(&self) -> &FabricStats {
        &self.stats
    }

    /// Turns recording of [`trace`](Self::trace) on or off (on by default). The
    /// [`trace_hash`](Self::trace_hash) covers every event either way, so a seed swarm can
    /// run without storing traces and still compare hashes.
    pub fn set_trace_recording(&mut self, on: bool) {
        self.record_trace = on;
    }

    /// The recorded events, in the order they happened.
    pub fn trace(&self) -> &[FabricEvent] {
        &self.trace
    }

    /// Removes and returns the recorded events (the hash is unaffected).
    pub fn take_trace(&mut self) -> Vec<FabricEvent> {
        std::mem::take(&mut self.trace)
    }

    /// The FNV-1a hash of the canonical encoding ([`FabricEvent::hash_into`]) of every event
    /// so far. Pinned: same events ⇒ same value on every machine and Rust version.
    pub fn trace_hash(&self) -> u64 {
        self.hash.finish()
    }

    /// Puts one copy of `bytes` (whose digest is `digest`) in flight: `bit` flipped if given,
    /// arriving `delay_ns` after `now`.
    fn enqueue(
        &mut self,
        now: SimTime,
        id: u64,
        src: SocketAddr,
        dst: SocketAddr,
        (bytes, digest): (Bytes, u64),
        (bit, delay_ns): (Option<u64>, u64),
    ) {
        let mut inflight = InFlight {
            key: (now.plus_nanos(delay_ns), id),
            src,
            dst,
            bytes,
            digest,
        };
        if let Some(bit) = bit {
            let mut buf = BytesMut::from(&inflight.bytes[..]);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
            inflight.bytes = buf.freeze();
            inflight.digest = payload_digest(&inflight.bytes);
            self.stats.corrupted += 1;
            self.record(now, id, src, dst, FabricEventKind::Corrupted { bit });
        }
        self.queue.push(Reverse(inflight));
    }

    fn alloc_packet(&mut self) -> u64 {
        let id = self.next_packet;
        self.next_packet += 1;
        id
    }

    fn drop_packet(
        &mut self,
        at: SimTime,
        packet: u64,
        src: SocketAddr,
        dst: SocketAddr,
        reason: DropReason,
    ) {
        let counter = match reason {
            DropReason::Lost => &mut self.stats.lost,
            DropReason::Partitioned => &mut self.stats.partitioned,
            DropReason::SourceCrashed | DropReason::DestinationCrashed => &mut self.stats.crashed,
            DropReason::NoListener => &mut self.stats.no_listener,
        };
        *counter += 1;
        self.record(at, packet, src, dst, FabricEventKind::Dropped(reason));
    }

    fn record(
        &mut self,
        at: SimTime,
        packet: u64,
        src: SocketAddr,
        dst: SocketAddr,
        kind: FabricEventKind,
    ) {
        let event = FabricEvent {
            at,
            packet,
            src,
            dst,
            kind,
        };
        event.hash_into(&mut self.hash);
        if self.record_trace {
            self.trace.push(event);
        }
    }
}

/// The fork label of the random stream of the path `src` → `dst`.
fn path_label(src: IpAddr, dst: IpAddr) -> u64 {
    let mut h = Fnv1a::new();
    for ip in [src, dst] {
        h.write_addr(SocketAddr::new(ip, 0));
    }
    h.finish()
}
