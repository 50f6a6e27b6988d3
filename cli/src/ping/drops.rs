//! The drop decisions of `--drop-rate P --seed S` ([`DropPlan`]): each datagram's fate is a
//! function of the seed, its direction, its bytes and how many copies of those bytes this
//! side saw before in that direction — not of the order datagrams cross the wire in, nor of
//! how many other datagrams went before it. Two runs with one seed therefore drop the same
//! datagrams wherever both runs have them, however the two directions interleave; and a
//! retransmission (the same bytes again) gets a decision of its own, so a dropped packet is
//! not dropped forever.
//!
//! The copy count lives in two generations of maps, rotated every
//! [`DEFAULT_GENERATION`] distinct datagrams, so memory stays bounded on a side facing a
//! network (at most two generations' entries, a few MiB). The edge: a datagram whose previous
//! copy is older than one full generation of other datagrams may be forgotten; its next copy
//! then counts as a first copy again and gets the first copy's decision (dropped again if
//! that one was), and the copy after it a fresh one. An RC retransmission comes within one
//! send window of the original (at most a few thousand packets), far inside a generation.
//!
//! The hash is written here (SplitMix64's output function, Steele, Lea and Flood 2014, over
//! the bytes in 8-byte words), so a seed means the same decisions on every machine and with
//! every version of the toolchain, which `std`'s hashers do not promise.

use std::collections::BTreeMap;

/// Which way a datagram crosses this side's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Sent by this side.
    Tx,
    /// Received by this side.
    Rx,
}

impl Direction {
    /// The hash label of the direction ("tx", "rx"): the same datagram is decided
    /// independently on the way out of one side and on the way into the other.
    fn label(self) -> u64 {
        match self {
            Direction::Tx => 0x7478,
            Direction::Rx => 0x7278,
        }
    }
}

/// Distinct datagrams per generation of the copy counts: memory holds at most twice this
/// many entries.
pub const DEFAULT_GENERATION: usize = 1 << 16;

/// The SplitMix64 increment (the 64-bit golden ratio).
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function (a bijection of `u64`; Vigna, `splitmix64.c`).
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 64-bit hash of `bytes` keyed by `key` and `label`, the length included.
fn keyed_hash(key: u64, label: u64, bytes: &[u8]) -> u64 {
    let mut h = mix64(key ^ mix64(label.wrapping_add(GOLDEN_GAMMA) ^ bytes.len() as u64));
    for chunk in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = mix64(h ^ u64::from_le_bytes(w)).wrapping_add(GOLDEN_GAMMA);
    }
    mix64(h)
}

/// Keep/drop decisions for one side: see the module docs.
#[derive(Debug, Clone)]
pub struct DropPlan {
    key: u64,
    /// Drop probability in parts per million.
    ppm: u64,
    /// Copies seen of each datagram (by its hash, which includes the direction), this
    /// generation.
    current: BTreeMap<u64, u32>,
    /// The same, the generation before.
    previous: BTreeMap<u64, u32>,
    generation: usize,
}

impl DropPlan {
    /// Drops each datagram with probability `drop_rate` (0.0 ..= 1.0, clamped; resolution
    /// 1 ppm), decided by `key` (the seed's drop stream).
    pub fn new(drop_rate: f64, key: u64) -> DropPlan {
        DropPlan::with_generation(drop_rate, key, DEFAULT_GENERATION)
    }

    /// [`new`](Self::new) with `generation` distinct datagrams per generation of the copy
    /// counts (at least 1).
    pub fn with_generation(drop_rate: f64, key: u64, generation: usize) -> DropPlan {
        DropPlan {
            key,
            ppm: (drop_rate.clamp(0.0, 1.0) * 1e6).round() as u64,
            current: BTreeMap::new(),
            previous: BTreeMap::new(),
            generation: generation.max(1),
        }
    }

    /// Whether the datagram `bytes`, crossing in direction `dir`, is dropped; counts it as
    /// one more copy of those bytes in that direction. With a drop rate of 0 nothing is
    /// counted.
    pub fn decide(&mut self, dir: Direction, bytes: &[u8]) -> bool {
        if self.ppm == 0 {
            return false;
        }
        let id = keyed_hash(self.key, dir.label(), bytes);
        let copy = self.bump(id);
        let r = mix64(id.wrapping_add(GOLDEN_GAMMA.wrapping_mul(u64::from(copy) + 1)));
        // The top of a 64-bit uniform value scaled to 0 .. 1e6 (no modulo bias to speak of).
        let draw = ((u128::from(r) * 1_000_000) >> 64) as u64;
        draw < self.ppm
    }

    /// How many copies of `id` came before this one; counts this one.
    fn bump(&mut self, id: u64) -> u32 {
        let seen = self
            .current
            .get(&id)
            .or_else(|| self.previous.get(&id))
            .copied()
            .unwrap_or(0);
        if !self.current.contains_key(&id) && self.current.len() >= self.generation {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(id, seen.saturating_add(1));
        seen
    }

    /// Datagrams whose copy count is remembered (at most twice the generation).
    pub fn remembered(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Datagram `i` of direction `dir`: distinct bytes of varied lengths.
    fn datagram(dir: Direction, i: u32) -> Vec<u8> {
        let mut b = vec![dir as u8; 20 + (i as usize % 37)];
        b[..4].copy_from_slice(&i.to_be_bytes());
        b
    }

    #[test]
    fn the_same_datagrams_get_the_same_decisions_in_any_interleaving() {
        let n = 400;
        let txs: Vec<Vec<u8>> = (0..n).map(|i| datagram(Direction::Tx, i)).collect();
        let rxs: Vec<Vec<u8>> = (0..n).map(|i| datagram(Direction::Rx, i)).collect();
        // Run 1: every send, then every receive.
        let mut a = DropPlan::new(0.3, 7);
        let a_tx: Vec<bool> = txs.iter().map(|d| a.decide(Direction::Tx, d)).collect();
        let a_rx: Vec<bool> = rxs.iter().map(|d| a.decide(Direction::Rx, d)).collect();
        // Run 2: receives first and alternating, the receives in reverse order.
        let mut b = DropPlan::new(0.3, 7);
        let mut b_tx = vec![false; n as usize];
        let mut b_rx = vec![false; n as usize];
        for i in (0..n as usize).rev() {
            b_rx[i] = b.decide(Direction::Rx, &rxs[i]);
            let j = n as usize - 1 - i;
            b_tx[j] = b.decide(Direction::Tx, &txs[j]);
        }
        assert_eq!(a_tx, b_tx);
        assert_eq!(a_rx, b_rx);
        // About 30 % dropped each way; some kept, some dropped.
        for d in [&a_tx, &a_rx] {
            let dropped = d.iter().filter(|&&x| x).count();
            assert!((80..=160).contains(&dropped), "{dropped} of {n}");
        }
        // Another seed decides otherwise.
        let mut c = DropPlan::new(0.3, 8);
        let c_tx: Vec<bool> = txs.iter().map(|d| c.decide(Direction::Tx, d)).collect();
        assert_ne!(a_tx, c_tx);
    }

    #[test]
    fn a_datagram_is_decided_independently_in_each_direction() {
        let mut p = DropPlan::new(0.5, 3);
        let same: Vec<Vec<u8>> = (0..200).map(|i| datagram(Direction::Tx, i)).collect();
        let tx: Vec<bool> = same.iter().map(|d| p.decide(Direction::Tx, d)).collect();
        let rx: Vec<bool> = same.iter().map(|d| p.decide(Direction::Rx, d)).collect();
        assert_ne!(tx, rx);
    }

    #[test]
    fn each_copy_of_a_datagram_gets_a_fresh_decision_that_replays() {
        let d = datagram(Direction::Tx, 42);
        let copies = |key| {
            let mut p = DropPlan::new(0.5, key);
            (0..64)
                .map(|_| p.decide(Direction::Tx, &d))
                .collect::<Vec<bool>>()
        };
        let first = copies(11);
        // Retransmissions are not all dropped (nor all kept) ...
        assert!(first.contains(&true) && first.contains(&false), "{first:?}");
        // ... and the k-th copy's fate is the same in every run.
        assert_eq!(first, copies(11));
        // Other datagrams in between do not change the copies' fates.
        let mut p = DropPlan::new(0.5, 11);
        let mut between = Vec::new();
        for i in 0..64 {
            between.push(p.decide(Direction::Tx, &d));
            p.decide(Direction::Rx, &datagram(Direction::Rx, i));
            p.decide(Direction::Tx, &datagram(Direction::Tx, 1000 + i));
        }
        assert_eq!(first, between);
    }

    #[test]
    fn rates_zero_and_one_keep_and_drop_everything() {
        let mut keep = DropPlan::new(0.0, 1);
        let mut drop = DropPlan::new(1.0, 1);
        for i in 0..100 {
            let d = datagram(Direction::Rx, i % 10);
            assert!(!keep.decide(Direction::Rx, &d));
            assert!(drop.decide(Direction::Rx, &d));
        }
        assert_eq!(keep.remembered(), 0);
    }

    #[test]
    fn copy_counts_stay_bounded_and_survive_one_rotation() {
        let gen = 64;
        let mut p = DropPlan::with_generation(0.5, 5, gen);
        for i in 0..10_000 {
            p.decide(Direction::Tx, &datagram(Direction::Tx, i));
            assert!(p.remembered() <= 2 * gen, "{}", p.remembered());
        }
        // A datagram whose earlier copy is less than a generation back still counts as a
        // retransmission: the same fates as on a plan that never rotated.
        let d = datagram(Direction::Rx, 7);
        let unrotated = {
            let mut q = DropPlan::new(0.5, 5);
            (0..32)
                .map(|_| q.decide(Direction::Rx, &d))
                .collect::<Vec<_>>()
        };
        let mut fates = Vec::new();
        for k in 0..32u32 {
            fates.push(p.decide(Direction::Rx, &d));
            for j in 0..(gen as u32 - 2) {
                p.decide(
                    Direction::Tx,
                    &datagram(Direction::Tx, 20_000 + k * 100 + j),
                );
            }
        }
        assert_eq!(fates, unrotated);
        // Forgotten after two generations of other datagrams: counted as a first copy again.
        for j in 0..(2 * gen as u32) {
            p.decide(Direction::Tx, &datagram(Direction::Tx, 90_000 + j));
        }
        assert_eq!(p.decide(Direction::Rx, &d), unrotated[0]);
        assert_eq!(p.decide(Direction::Rx, &d), unrotated[1]);
    }
}
