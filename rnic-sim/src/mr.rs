//! Memory regions: their backings, keys and the protection checks of lkeys and rkeys.
//!
//! Keys are built as rxe builds them: `key_index << 8 | tag`, an index in the upper 24 bits and
//! an 8-bit tag [rxe_mr.c]. Each region takes the next slot index (1, 2, …, never reused, so a
//! stale key never names a later region). With the device's seed 0 the key index is the slot
//! index and the tag an 8-bit counter: deterministic, sequential keys. With any other seed the
//! key index is the slot index under a keyed permutation of the 24-bit space
//! ([`Perm24`](crate::ids::Perm24), inverted in O(1) to find the slot from a key) and the tag
//! is drawn from the seed's stream, as rxe draws it at random (`rxe_get_next_key`): a peer
//! that saw one rkey cannot compute the next. The rkey equals the lkey when the region allows
//! any remote access, else 0 (as rxe). Virtual addresses of device-owned regions come from a
//! bump allocator: page aligned, a one-page gap between regions, never reused, so a stale
//! address never lands in a new region; with a non-zero seed it starts at a seeded page offset
//! (below 1 TiB) above `mr_base_va`. Caller-supplied regions ([`MrMemory::External`]) take the
//! address the caller gives (the application's pointer): they may overlap each other and
//! device-owned regions, so every keyed access resolves the region by its key's index, never by
//! address.

use crate::ids::{self, Perm24};
use crate::memory::MrMemory;
use crate::rng::Rng;
use std::collections::BTreeMap;
use verbs_core::{AccessFlags, Errno, Error, Sge};

/// Page size of the virtual address allocator and of the zero-page rule of registration, in
/// bytes.
const PAGE: u64 = 4096;

/// `IB_ACCESS_SUPPORTED` of Linux (`include/rdma/ib_verbs.h`, since 6.2): the access bits the
/// kernel accepts in a registration (`ib_check_mr_access`), LOCAL_WRITE (bit 0) through
/// FLUSH_PERSISTENT (bit 9), plus the optional range bits 20–29 (`IB_ACCESS_OPTIONAL` =
/// `IBV_ACCESS_OPTIONAL_RANGE` 0x3ff0_0000, e.g. `IBV_ACCESS_RELAXED_ORDERING` 1 << 20, which
/// perftest passes). A device that does not implement an optional bit ignores it; so does
/// this one, and it ignores every accepted bit it does not model (MW_BIND, ZERO_BASED,
/// ON_DEMAND, HUGETLB, FLUSH_*).
const ACCESS_SUPPORTED: u32 = 0x0000_03ff | 0x3ff0_0000;

/// The argument checks of a registration, for a region of `length` bytes at virtual address
/// `iova` (0 for a device-owned region: the bump allocator's addresses are page aligned):
///
/// * EINVAL: `access` has a bit outside [`ACCESS_SUPPORTED`], or REMOTE_WRITE/REMOTE_ATOMIC
///   without LOCAL_WRITE [kernel `ib_check_mr_access`, man:ibv_reg_mr.3]. `AccessFlags` is a
///   `bitflags` type: only a value built with `from_bits_retain` carries unknown bits here;
///   `from_bits_truncate` has already dropped them (then nothing is refused for them).
/// * EINVAL: the region spans no page (length 0 at a page-aligned address), or
///   `iova + length` overflows [kernel `ib_umem_get`: `npages == 0`, address wrap]. A
///   zero-length region at an unaligned address covers one page there and is accepted.
/// * EINVAL: `length` above `max_mr_size`.
pub(crate) fn check_registration(
    length: u64,
    iova: u64,
    access: AccessFlags,
    max_mr_size: u64,
) -> Result<(), Error> {
    if access.bits() & !ACCESS_SUPPORTED != 0 {
        return Err(Error::inval("access flag outside IB_ACCESS_SUPPORTED"));
    }
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Error::inval(
            "REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE (man:ibv_reg_mr.3)",
        ));
    }
    let end = iova
        .checked_add(length)
        .ok_or_else(|| Error::inval("MR address range wraps"))?;
    if end.div_ceil(PAGE) <= iova / PAGE {
        return Err(Error::inval(
            "MR spans no page (length 0 at a page boundary)",
        ));
    }
    if length > max_mr_size {
        return Err(Error::inval("MR length above max_mr_size"));
    }
    Ok(())
}

/// The error of `mr_read`/`mr_write` for a range that leaves the region: EFAULT.
pub(crate) fn range_error() -> Error {
    Error::new(Errno::EFAULT, "range leaves the MR")
}

/// The largest slot index: keys are `key_index << 8 | tag` in 32 bits.
const MAX_INDEX: u32 = 0x00FF_FFFF;

/// With a non-zero seed, the bump allocator starts this many pages at most above `mr_base_va`
/// (2^28 pages of 4 KiB: 1 TiB).
const VA_SPREAD_PAGES: u64 = 1 << 28;

/// One registered region.
#[derive(Debug, Clone)]
pub(crate) struct MrEntry {
    /// Owning protection domain (handle value).
    pub pd: u32,
    /// Virtual address of byte 0.
    pub addr: u64,
    /// Access rights.
    pub access: AccessFlags,
    /// Local key.
    pub lkey: u32,
    /// Remote key (0 without remote access).
    pub rkey: u32,
    /// The region's bytes.
    pub memory: MrMemory,
}

impl MrEntry {
    /// Offset of `[addr, addr + len)` inside the region, or `None` when it leaves the region.
    fn offset_of(&self, addr: u64, len: u64) -> Option<usize> {
        let off = addr.checked_sub(self.addr)?;
        let end = off.checked_add(len)?;
        if end > self.memory.len() as u64 {
            return None;
        }
        usize::try_from(off).ok()
    }
}

/// Why a scatter into local memory failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The data does not fit in the SGE list (`LOC_LEN_ERR` on a receive).
    Length,
    /// An SGE's lkey, PD, access or bounds is wrong (`LOC_PROT_ERR`).
    Protection,
}

/// The device's regions, keyed by slot index (= handle value; [`MrTable::slot_of`] finds it
/// from a key).
#[derive(Debug, Clone)]
pub(crate) struct MrTable {
    entries: BTreeMap<u32, MrEntry>,
    next_index: u32,
    /// The next tag when unseeded (a counter).
    next_tag: u8,
    next_va: u64,
    /// Slot index → key index (the identity with seed 0).
    key_index: Perm24,
    /// The tags' stream (`None` with seed 0: the tag is `next_tag`).
    tags: Option<Rng>,
}

impl MrTable {
    /// An empty table whose first region starts at `base_va` (plus a seeded page offset with a
    /// non-zero `seed`), its keys drawn from `seed` (module docs).
    pub fn new(base_va: u64, seed: u64) -> Self {
        let base = base_va.div_ceil(PAGE).saturating_mul(PAGE).max(PAGE);
        let offset =
            ids::stream(seed, ids::MR_VA_STREAM).map_or(0, |mut r| r.below(VA_SPREAD_PAGES) * PAGE);
        MrTable {
            entries: BTreeMap::new(),
            next_index: 1,
            next_tag: 0,
            next_va: base.saturating_add(offset),
            key_index: Perm24::new(seed, ids::MR_INDEX_STREAM),
            tags: ids::stream(seed, ids::MR_TAG_STREAM),
        }
    }

    /// The slot index a key names, if it names one at all (key index 0 never does). O(1).
    fn slot_of(&self, key: u32) -> Option<u32> {
        let k = key >> 8;
        (k != 0).then(|| self.key_index.invert_from(1, k))
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when some region belongs to `pd`.
    pub fn pd_in_use(&self, pd: u32) -> bool {
        self.entries.values().any(|e| e.pd == pd)
    }

    /// Registers a zero-filled, device-owned region at the next address of the bump allocator
    /// and returns `(handle, addr, lkey, rkey)`, or `None` when the index or address space is
    /// exhausted.
    pub fn register(
        &mut self,
        pd: u32,
        length: usize,
        access: AccessFlags,
    ) -> Option<(u32, u64, u32, u32)> {
        if self.next_index > MAX_INDEX {
            return None;
        }
        let addr = self.next_va;
        let span = (length as u64).div_ceil(PAGE).checked_mul(PAGE)?;
        self.next_va = addr.checked_add(span)?.checked_add(PAGE)?;
        let (index, lkey, rkey) = self.register_at(pd, addr, access, MrMemory::owned(length))?;
        Some((index, addr, lkey, rkey))
    }

    /// Registers a region over `memory` whose byte 0 is at virtual address `addr`, taking the
    /// next index and tag, and returns `(handle, lkey, rkey)`, or `None` when the index space
    /// is exhausted. The bump allocator is not used: for caller-supplied memory the address
    /// is the caller's and may overlap other regions.
    pub fn register_at(
        &mut self,
        pd: u32,
        addr: u64,
        access: AccessFlags,
        memory: MrMemory,
    ) -> Option<(u32, u32, u32)> {
        let index = self.next_index;
        if index > MAX_INDEX {
            return None;
        }
        self.next_index += 1;
        let tag = match &mut self.tags {
            Some(r) => r.next_u64() as u8,
            None => {
                let t = self.next_tag;
                self.next_tag = t.wrapping_add(1);
                t
            }
        };
        let lkey = (self.key_index.apply_from(1, index) << 8) | u32::from(tag);
        let remote =
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        let rkey = if access.intersects(remote) { lkey } else { 0 };
        self.entries.insert(
            index,
            MrEntry {
                pd,
                addr,
                access,
                lkey,
                rkey,
                memory,
            },
        );
        Some((index, lkey, rkey))
    }

    /// Removes a region (dropping an external backing's `Arc`); false when unknown.
    pub fn deregister(&mut self, handle: u32) -> bool {
        self.entries.remove(&handle).is_some()
    }

    /// The region of a handle.
    pub fn get(&self, handle: u32) -> Option<&MrEntry> {
        self.entries.get(&handle)
    }

    /// The region of a handle, mutably.
    pub fn get_mut(&mut self, handle: u32) -> Option<&mut MrEntry> {
        self.entries.get_mut(&handle)
    }

    /// Resolves a local SGE-like range: the lkey names a live region of `pd` that has `need`
    /// and contains `[addr, addr + len)`. Returns `(handle, offset)`.
    pub fn check_local(
        &self,
        pd: u32,
        lkey: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Option<(u32, usize)> {
        let slot = self.slot_of(lkey)?;
        let e = self.entries.get(&slot)?;
        if e.lkey != lkey || e.pd != pd || !e.access.contains(need) {
            return None;
        }
        Some((slot, e.offset_of(addr, len)?))
    }

    /// Resolves a remote range for an incoming RDMA/atomic: the rkey (non-zero) names a live
    /// region of `pd` that has `need` and contains `[va, va + len)` [rxe_resp.c `check_rkey`].
    pub fn check_remote(
        &self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Option<(u32, usize)> {
        if rkey == 0 {
            return None;
        }
        let slot = self.slot_of(rkey)?;
        let e = self.entries.get(&slot)?;
        if e.rkey != rkey || e.pd != pd || !e.access.contains(need) {
            return None;
        }
        Some((slot, e.offset_of(va, len)?))
    }

    /// Gathers the bytes an SGE list describes (a SEND/WRITE payload), each SGE's region found
    /// by its lkey. `None` on a protection error (lkey, PD or bounds). Zero-length SGEs are
    /// not checked.
    pub fn gather(&self, pd: u32, sges: &[Sge]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for s in sges.iter().filter(|s| s.length > 0) {
            let len = u64::from(s.length);
            let (h, off) = self.check_local(pd, s.lkey, s.addr, len, AccessFlags::empty())?;
            let e = self.entries.get(&h)?;
            e.memory.read_into(off, s.length as usize, &mut out)?;
        }
        Some(out)
    }

    /// Gathers by address only, ignoring keys and PDs (inline data, copied at post time). Each
    /// SGE reads from the first region, in handle (registration) order, that contains all of
    /// it: caller-supplied regions may overlap, and then the oldest wins. `None` when some SGE
    /// lies in no single region.
    pub fn gather_inline(&self, sges: &[Sge]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for s in sges.iter().filter(|s| s.length > 0) {
            let len = u64::from(s.length);
            let (e, off) = self
                .entries
                .values()
                .find_map(|e| Some((e, e.offset_of(s.addr, len)?)))?;
            e.memory.read_into(off, s.length as usize, &mut out)?;
        }
        Some(out)
    }

    /// Writes `data` at logical byte `offset` of the SGE list (a receive or READ response).
    /// Every SGE touched must be a live region of `pd` with LOCAL_WRITE; all checks run before
    /// any byte is written.
    pub fn scatter(
        &mut self,
        pd: u32,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
    ) -> Result<(), ScatterError> {
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if offset.saturating_add(data.len() as u64) > total {
            return Err(ScatterError::Length);
        }
        // Plan the pieces: (handle, region offset, data range).
        let mut plan = Vec::new();
        let mut skip = offset;
        let mut done = 0usize;
        for s in sges {
            if done == data.len() {
                break;
            }
            let len = u64::from(s.length);
            if skip >= len {
                skip -= len;
                continue;
            }
            let take = ((len - skip) as usize).min(data.len() - done);
            let (h, off) = self
                .check_local(
                    pd,
                    s.lkey,
                    s.addr.wrapping_add(skip),
                    take as u64,
                    AccessFlags::LOCAL_WRITE,
                )
                .ok_or(ScatterError::Protection)?;
            plan.push((h, off, done..done + take));
            done += take;
            skip = 0;
        }
        for (h, off, range) in plan {
            let src = data.get(range).ok_or(ScatterError::Protection)?;
            self.entries
                .get_mut(&h)
                .and_then(|e| e.memory.write(off, src))
                .ok_or(ScatterError::Protection)?;
        }
        Ok(())
    }

    /// Checks that every SGE of a list is readable local memory of `pd` (a SEND/WRITE source:
    /// lkey, PD, bounds; the checks of [`gather`](Self::gather), and that external memory can
    /// still be read, [`ExternalMemory::readable`](crate::ExternalMemory::readable)), without
    /// reading. Zero-length SGEs are not checked.
    pub fn check_readable(&self, pd: u32, sges: &[Sge]) -> bool {
        sges.iter().filter(|s| s.length > 0).all(|s| {
            self.check_local(
                pd,
                s.lkey,
                s.addr,
                u64::from(s.length),
                AccessFlags::empty(),
            )
            .is_some_and(|(h, off)| self.readable(h, off, s.length as usize))
        })
    }

    /// Whether `len` bytes at byte `off` of region `h` can be read now (a live region whose
    /// memory is still there).
    pub fn readable(&self, h: u32, off: usize, len: usize) -> bool {
        self.entries
            .get(&h)
            .is_some_and(|e| e.memory.readable(off, len))
    }

    /// Checks that every SGE of a list is writable local memory of `pd` (READ/atomic targets),
    /// without writing.
    pub fn check_writable(&self, pd: u32, sges: &[Sge]) -> bool {
        sges.iter().filter(|s| s.length > 0).all(|s| {
            self.check_local(
                pd,
                s.lkey,
                s.addr,
                u64::from(s.length),
                AccessFlags::LOCAL_WRITE,
            )
            .is_some()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(seed: u64, n: usize) -> (MrTable, Vec<(u32, u32)>) {
        let mut t = MrTable::new(0x1000_0000, seed);
        let regions = (0..n)
            .map(|_| {
                let (h, _, lkey, _) = t.register(1, 8, AccessFlags::LOCAL_WRITE).unwrap();
                (h, lkey)
            })
            .collect();
        (t, regions)
    }

    #[test]
    fn seeded_keys_are_unique_and_each_resolves_to_its_own_region() {
        let (t, regions) = table_with(0x5eed, 5000);
        let mut seen = std::collections::BTreeSet::new();
        for &(h, lkey) in &regions {
            assert!(seen.insert(lkey >> 8), "key index {:#x} twice", lkey >> 8);
            let e = t.get(h).unwrap();
            let (found, off) = t
                .check_local(1, lkey, e.addr, 8, AccessFlags::LOCAL_WRITE)
                .unwrap();
            assert_eq!((found, off), (h, 0));
            // The same index with another tag names nothing.
            assert!(t
                .check_local(1, lkey ^ 0x5a, e.addr, 8, AccessFlags::empty())
                .is_none());
        }
        // Keys whose index part is 0 never name a region.
        for k in [0, 1, 0xff] {
            assert!(t.slot_of(k).is_none());
        }
    }

    #[test]
    fn a_deregistered_seeded_key_stays_dead_after_new_registrations() {
        let (mut t, regions) = table_with(77, 3);
        let (h, stale) = regions[1];
        let addr = t.get(h).unwrap().addr;
        assert!(t.deregister(h));
        for _ in 0..1000 {
            let (_, _, lkey, _) = t.register(1, 8, AccessFlags::LOCAL_WRITE).unwrap();
            assert_ne!(lkey >> 8, stale >> 8, "a key index came back");
        }
        assert!(t
            .check_local(1, stale, addr, 8, AccessFlags::empty())
            .is_none());
    }

    #[test]
    fn the_same_seed_gives_the_same_keys_and_another_seed_others() {
        let keys = |seed| table_with(seed, 16).1;
        assert_eq!(keys(5), keys(5));
        assert_ne!(keys(5), keys(6));
        assert_eq!(
            keys(0).iter().map(|&(_, k)| k).collect::<Vec<_>>(),
            (1..=16u32).map(|i| i << 8 | (i - 1)).collect::<Vec<_>>(),
            "seed 0: index << 8 | counter"
        );
    }
}
