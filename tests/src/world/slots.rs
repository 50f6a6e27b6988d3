//! WR buffer slots: where each outstanding WR's bytes live in its host's memory region.
//!
//! A host's application memory region has four regions of [`WorldConfig::wr_slots`] slots of
//! [`SLOT_BYTES`]: send (SEND/WRITE sources), receive, READ source (the S6 pattern of the
//! host, read by its peers) and destination (READ destinations and the peers' WRITEs). The
//! first [`SLOTS`] slots of each region keep the original layout (region `r` at
//! `r · SLOTS · SLOT_BYTES`, so [`write_slot`](super::write_slot) still names them); more slots
//! follow [`MR_BYTES`], region by region.
//!
//! Slots are handed out per outstanding WR, next-fit from the last one handed out (a freed
//! slot is reused as late as possible, as the old `wr_id % 32` mapping did), and freed when
//! the WR completes. Two outstanding WRs never share a slot, so any number of WRs up to the
//! slot count verify their data without a false S6 mismatch.
//!
//! [`WorldConfig::wr_slots`]: super::WorldConfig::wr_slots

use super::config::{MR_BYTES, SLOTS, SLOT_BYTES};

/// A region of a host's memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Region {
    Send = 0,
    Recv = 1,
    ReadSrc = 2,
    Dst = 3,
}

/// Byte offset of slot `i` of `region` with `slots` slots per region.
pub(super) fn slot_off(region: Region, i: u32, slots: u32) -> u64 {
    let (r, i) = (region as u64, u64::from(i));
    if i < SLOTS {
        (r * SLOTS + i) * SLOT_BYTES
    } else {
        let extra = u64::from(slots).saturating_sub(SLOTS);
        MR_BYTES + (r * extra + i - SLOTS) * SLOT_BYTES
    }
}

/// Bytes of a memory region with `slots` slots per region.
pub(super) fn mr_bytes(slots: u32) -> u64 {
    MR_BYTES + 4 * u64::from(slots).saturating_sub(SLOTS) * SLOT_BYTES
}

/// The free slots of one region of one host life.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    used: Vec<bool>,
    free: usize,
    cursor: usize,
}

impl Pool {
    pub(super) fn new(slots: u32) -> Self {
        Pool {
            used: vec![false; slots as usize],
            free: slots as usize,
            cursor: 0,
        }
    }

    pub(super) fn free(&self) -> usize {
        self.free
    }

    /// The next free slot from the cursor on (`None` if all are in use).
    pub(super) fn take(&mut self) -> Option<u32> {
        if self.free == 0 {
            return None;
        }
        let n = self.used.len();
        let i = (0..n)
            .map(|k| (self.cursor + k) % n)
            .find(|&i| !self.used[i])?;
        self.used[i] = true;
        self.free -= 1;
        self.cursor = (i + 1) % n;
        Some(i as u32)
    }

    pub(super) fn give_back(&mut self, i: u32) {
        if let Some(u) = self.used.get_mut(i as usize).filter(|u| **u) {
            *u = false;
            self.free += 1;
        }
    }
}

/// One host life's pools: send, receive, destination (READ sources are not allocated: their
/// bytes are a function of the slot, the same for every reader).
#[derive(Debug, Clone)]
pub(super) struct Pools {
    pub(super) epoch: u8,
    pub(super) send: Pool,
    pub(super) recv: Pool,
    pub(super) dst: Pool,
}

impl Pools {
    pub(super) fn new(epoch: u8, slots: u32) -> Self {
        Pools {
            epoch,
            send: Pool::new(slots),
            recv: Pool::new(slots),
            dst: Pool::new(slots),
        }
    }

    pub(super) fn pool(&mut self, r: Region) -> &mut Pool {
        match r {
            Region::Send | Region::ReadSrc => &mut self.send,
            Region::Recv => &mut self.recv,
            Region::Dst => &mut self.dst,
        }
    }
}

/// A slot a WR holds: (host, life, region, index).
pub(super) type Held = (usize, u8, Region, u32);
