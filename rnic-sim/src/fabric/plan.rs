//! The fault plan of the deterministic fabric: what the network does to each datagram
//! (loss, duplication, delay with jitter, corruption), when paths are cut (partitions) and when
//! hosts are down (crashes). A plan is data; the random draws happen in
//! [`SimFabric`](super::SimFabric) with its seeded [`Rng`].

use std::collections::BTreeMap;
use std::net::IpAddr;

use verbs_core::SimTime;

use crate::rng::Rng;

/// The default one-way latency of a path, in ns (10 µs: a datacenter hop).
pub const DEFAULT_LATENCY_NS: u64 = 10_000;

/// How the one-way delay of a datagram beyond the base latency is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Jitter {
    /// No jitter: every datagram takes exactly the base latency, so a path keeps send order.
    #[default]
    None,
    /// Uniform in `0..=max_ns` nanoseconds (one draw per datagram).
    Uniform {
        /// The largest extra delay, ns.
        max_ns: u64,
    },
    /// Exponential with mean `mean_ns` nanoseconds (one draw per datagram): mostly small, with
    /// a long tail that reorders datagrams sent far apart.
    Exponential {
        /// The mean extra delay, ns.
        mean_ns: u64,
    },
}

/// The one-way delay of a datagram: `base_ns` plus [`Jitter`]. Datagrams whose delays differ
/// by more than their send spacing arrive out of order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delay {
    /// Fixed latency, ns.
    pub base_ns: u64,
    /// Random extra delay.
    pub jitter: Jitter,
}

impl Default for Delay {
    /// [`DEFAULT_LATENCY_NS`], no jitter.
    fn default() -> Self {
        Delay {
            base_ns: DEFAULT_LATENCY_NS,
            jitter: Jitter::None,
        }
    }
}

impl Delay {
    /// A fixed delay of `base_ns` ns, no jitter.
    pub const fn fixed(base_ns: u64) -> Self {
        Delay {
            base_ns,
            jitter: Jitter::None,
        }
    }

    /// Draws one delay in ns (no draw for [`Jitter::None`], one otherwise); saturating.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let extra = match self.jitter {
            Jitter::None => 0,
            Jitter::Uniform { max_ns } => rng.range_u64(0..=max_ns),
            Jitter::Exponential { mean_ns } => rng.exponential(mean_ns),
        };
        self.base_ns.saturating_add(extra)
    }
}

/// What a path (source host → destination host) does to each datagram. Probabilities are in
/// `[0, 1]`; values `<= 0` (or NaN) mean never and `>= 1` always.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PathFaults {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram that was not lost is delivered twice (the copy has its own
    /// delay and corruption draw).
    pub duplicate: f64,
    /// Probability that one copy arrives with one uniformly chosen bit flipped (never for an
    /// empty datagram).
    pub corrupt: f64,
    /// One-way delay.
    pub delay: Delay,
}

impl PathFaults {
    /// A perfect path: no loss, duplication or corruption, [`DEFAULT_LATENCY_NS`], no jitter.
    pub fn perfect() -> Self {
        PathFaults::default()
    }
}

/// Which directions a [`Partition`] cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Only datagrams from `a` to `b` are dropped.
    OneWay,
    /// Datagrams both ways between `a` and `b` are dropped.
    Symmetric,
}

/// A cut between two hosts from `start` until `heal` (exclusive; `None`: never heals).
///
/// A datagram is dropped if the cut is active when it is sent or when it would arrive: the
/// cable is cut, in-flight datagrams are lost too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// The first host (the sender side of a one-way cut).
    pub a: IpAddr,
    /// The second host (the receiver side of a one-way cut).
    pub b: IpAddr,
    /// One-way (`a` → `b`) or both ways.
    pub direction: Direction,
    /// When the cut starts (inclusive).
    pub start: SimTime,
    /// When it heals (exclusive), if ever.
    pub heal: Option<SimTime>,
}

impl Partition {
    /// Cut datagrams from `from` to `to` (not the reverse) during `[start, heal)`.
    pub fn one_way(from: IpAddr, to: IpAddr, start: SimTime, heal: Option<SimTime>) -> Self {
        Partition {
            a: from,
            b: to,
            direction: Direction::OneWay,
            start,
            heal,
        }
    }

    /// Cut datagrams both ways between `a` and `b` during `[start, heal)`.
    pub fn symmetric(a: IpAddr, b: IpAddr, start: SimTime, heal: Option<SimTime>) -> Self {
        Partition {
            a,
            b,
            direction: Direction::Symmetric,
            start,
            heal,
        }
    }

    /// Whether this cut drops a datagram from `src` to `dst` at time `at`.
    pub fn blocks(&self, src: IpAddr, dst: IpAddr, at: SimTime) -> bool {
        let active = self.start <= at && self.heal.is_none_or(|h| at < h);
        let forward = src == self.a && dst == self.b;
        let backward = src == self.b && dst == self.a;
        active && (forward || (self.direction == Direction::Symmetric && backward))
    }
}

/// A host crash: from `at` the host neither sends nor receives, until `restart` (exclusive; `None`:
/// it stays down). The driver does not run a down host's endpoints; at restart they continue
/// with the state they had (a frozen machine). A testbed that wants a reboot with amnesia
/// replaces the endpoint at the restart time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crash {
    /// The host that crashes.
    pub host: IpAddr,
    /// When it goes down (inclusive).
    pub at: SimTime,
    /// When it comes back (exclusive), if ever.
    pub restart: Option<SimTime>,
}

impl Crash {
    /// Whether this crash has the host down at `t`.
    pub fn covers(&self, t: SimTime) -> bool {
        self.at <= t && self.restart.is_none_or(|r| t < r)
    }
}

/// Everything the fabric does wrong: the default [`PathFaults`] of every path, per-path
/// overrides keyed by (source IP, destination IP), partitions and crashes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultPlan {
    /// Faults of every path without an override.
    pub default: PathFaults,
    /// Overrides per (source host, destination host); one direction each.
    pub paths: BTreeMap<(IpAddr, IpAddr), PathFaults>,
    /// Scheduled cuts.
    pub partitions: Vec<Partition>,
    /// Scheduled host crashes (a host may crash several times).
    pub crashes: Vec<Crash>,
}

impl FaultPlan {
    /// A plan with `default` faults on every path, no overrides, no partitions, no crashes.
    pub fn new(default: PathFaults) -> Self {
        FaultPlan {
            default,
            ..FaultPlan::default()
        }
    }

    /// This plan with `faults` on the path `src` → `dst` (one direction).
    pub fn with_path(mut self, src: IpAddr, dst: IpAddr, faults: PathFaults) -> Self {
        self.paths.insert((src, dst), faults);
        self
    }

    /// This plan with one more partition.
    pub fn with_partition(mut self, partition: Partition) -> Self {
        self.partitions.push(partition);
        self
    }

    /// This plan with one more crash.
    pub fn with_crash(mut self, crash: Crash) -> Self {
        self.crashes.push(crash);
        self
    }

    /// The faults of the path `src` → `dst`: its override, else the default.
    pub fn faults_for(&self, src: IpAddr, dst: IpAddr) -> &PathFaults {
        self.paths.get(&(src, dst)).unwrap_or(&self.default)
    }

    /// Whether some partition drops datagrams from `src` to `dst` at `at`.
    pub fn is_partitioned(&self, src: IpAddr, dst: IpAddr, at: SimTime) -> bool {
        self.partitions.iter().any(|p| p.blocks(src, dst, at))
    }

    /// Whether `host` is down (crashed, not yet restarted) at `at`.
    pub fn is_down(&self, host: IpAddr, at: SimTime) -> bool {
        self.crashes.iter().any(|c| c.host == host && c.covers(at))
    }

    /// The earliest time `>= at` at which `host` is up, or `None` if it never comes back.
    pub fn next_up(&self, host: IpAddr, at: SimTime) -> Option<SimTime> {
        let mut t = at;
        // Each step moves t to a restart strictly later than t, so this ends within
        // `crashes.len()` steps.
        while let Some(c) = self.crashes.iter().find(|c| c.host == host && c.covers(t)) {
            t = c.restart?;
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn one_way_partition_blocks_only_its_direction_inside_its_window() {
        let p = Partition::one_way(
            ip(1),
            ip(2),
            SimTime::from_millis(1),
            Some(SimTime::from_millis(2)),
        );
        assert!(p.blocks(ip(1), ip(2), SimTime::from_millis(1)));
        assert!(!p.blocks(ip(2), ip(1), SimTime::from_millis(1)));
        assert!(!p.blocks(ip(1), ip(2), SimTime::from_micros(999)));
        assert!(!p.blocks(ip(1), ip(2), SimTime::from_millis(2)));
    }

    #[test]
    fn symmetric_partition_blocks_both_directions() {
        let p = Partition::symmetric(ip(1), ip(2), SimTime::ZERO, None);
        assert!(p.blocks(ip(1), ip(2), SimTime::MAX));
        assert!(p.blocks(ip(2), ip(1), SimTime::ZERO));
        assert!(!p.blocks(ip(1), ip(3), SimTime::ZERO));
    }

    #[test]
    fn path_override_applies_to_its_direction_only() {
        let lossy = PathFaults {
            loss: 1.0,
            ..PathFaults::perfect()
        };
        let plan = FaultPlan::default().with_path(ip(1), ip(2), lossy);
        assert_eq!(plan.faults_for(ip(1), ip(2)).loss, 1.0);
        assert_eq!(plan.faults_for(ip(2), ip(1)).loss, 0.0);
    }

    #[test]
    fn next_up_follows_chained_crash_windows() {
        let ms = SimTime::from_millis;
        let plan = FaultPlan::default()
            .with_crash(Crash {
                host: ip(1),
                at: ms(1),
                restart: Some(ms(5)),
            })
            .with_crash(Crash {
                host: ip(1),
                at: ms(4),
                restart: Some(ms(9)),
            })
            .with_crash(Crash {
                host: ip(2),
                at: ms(1),
                restart: None,
            });
        assert_eq!(plan.next_up(ip(1), ms(0)), Some(ms(0)));
        assert_eq!(plan.next_up(ip(1), ms(2)), Some(ms(9)));
        assert_eq!(plan.next_up(ip(2), ms(2)), None);
        assert!(plan.is_down(ip(1), ms(8)));
        assert!(!plan.is_down(ip(1), ms(9)));
    }
}
