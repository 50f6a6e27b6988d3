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

/// One host life's free slots of its send, receive and destination regions (READ sources are
/// not allocated: their bytes are a function of the slot, the same for every reader), in one
/// allocation.
#[derive(Debug, Clone)]
pub(super) struct Pools {
    pub(super) epoch: u8,
    slots: usize,
    /// Region `k`'s slots at `k·slots..`.
    used: Vec<bool>,
    free: [usize; 3],
    cursor: [usize; 3],
}

impl Pools {
    pub(super) fn new(epoch: u8, slots: u32) -> Self {
        let slots = slots as usize;
        Pools {
            epoch,
            slots,
            used: vec![false; 3 * slots],
            free: [slots; 3],
            cursor: [0; 3],
        }
    }

    fn k(r: Region) -> usize {
        match r {
            Region::Send | Region::ReadSrc => 0,
            Region::Recv => 1,
            Region::Dst => 2,
        }
    }

    /// Free slots of region `r`.
    pub(super) fn free(&self, r: Region) -> usize {
        self.free[Self::k(r)]
    }

    /// The next free slot of region `r` from its cursor on (`None` if all are in use).
    pub(super) fn take(&mut self, r: Region) -> Option<u32> {
        let (k, n) = (Self::k(r), self.slots);
        if self.free[k] == 0 {
            return None;
        }
        let used = &mut self.used[k * n..(k + 1) * n];
        let i = (0..n)
            .map(|j| (self.cursor[k] + j) % n)
            .find(|&i| !used[i])?;
        used[i] = true;
        self.free[k] -= 1;
        self.cursor[k] = (i + 1) % n;
        Some(i as u32)
    }

    /// Frees slot `i` of region `r` (if it is in use).
    pub(super) fn give_back(&mut self, r: Region, i: u32) {
        let (k, n, i) = (Self::k(r), self.slots, i as usize);
        if i < n && self.used[k * n + i] {
            self.used[k * n + i] = false;
            self.free[k] += 1;
        }
    }
}

/// A slot a WR holds: (host, life, region, index).
pub(super) type Held = (usize, u8, Region, u32);
