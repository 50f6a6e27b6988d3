//! Memory regions: device-owned memory, keys and the protection checks of lkeys and rkeys.
//!
//! Keys are built as rxe builds them: `index << 8 | key`, where `index` is the region's slot and
//! `key` an 8-bit tag [rxe_mr.c]. rxe draws the tag at random; here it is a counter, so keys are
//! deterministic. The rkey equals the lkey when the region allows any remote access, else 0
//! (as rxe). Virtual addresses come from a bump allocator: page aligned, a one-page gap between
//! regions, never reused, so a stale address never lands in a new region.

use std::collections::BTreeMap;
use verbs_core::{AccessFlags, Sge};

/// Page size of the virtual address allocator, in bytes.
const PAGE: u64 = 4096;

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
    pub data: Vec<u8>,
}

impl MrEntry {
    /// Offset of `[addr, addr + len)` inside the region, or `None` when it leaves the region.
    fn offset_of(&self, addr: u64, len: u64) -> Option<usize> {
        let off = addr.checked_sub(self.addr)?;
        let end = off.checked_add(len)?;
        if end > self.data.len() as u64 {
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

/// The device's regions, keyed by slot index (= handle value = `lkey >> 8`).
#[derive(Debug, Clone)]
pub(crate) struct MrTable {
    entries: BTreeMap<u32, MrEntry>,
    next_index: u32,
    next_tag: u8,
    next_va: u64,
}

impl MrTable {
    /// An empty table whose first region starts at `base_va`.
    pub fn new(base_va: u64) -> Self {
        MrTable {
            entries: BTreeMap::new(),
            next_index: 1,
            next_tag: 0,
            next_va: base_va.div_ceil(PAGE).saturating_mul(PAGE).max(PAGE),
        }
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when some region belongs to `pd`.
    pub fn pd_in_use(&self, pd: u32) -> bool {
        self.entries.values().any(|e| e.pd == pd)
    }

    /// Registers a zero-filled region and returns `(handle, addr, lkey, rkey)`, or `None` when
    /// the index or address space is exhausted.
    pub fn register(
        &mut self,
        pd: u32,
        length: usize,
        access: AccessFlags,
    ) -> Option<(u32, u64, u32, u32)> {
        let index = self.next_index;
        if index > 0x00FF_FFFF {
            return None;
        }
        let addr = self.next_va;
        let span = (length as u64).div_ceil(PAGE).checked_mul(PAGE)?;
        self.next_va = addr.checked_add(span)?.checked_add(PAGE)?;
        self.next_index += 1;
        let lkey = (index << 8) | u32::from(self.next_tag);
        self.next_tag = self.next_tag.wrapping_add(1);
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
                data: vec![0; length],
            },
        );
        Some((index, addr, lkey, rkey))
    }

    /// Removes a region; false when unknown.
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
        let e = self.entries.get(&(lkey >> 8))?;
        if e.lkey != lkey || e.pd != pd || !e.access.contains(need) {
            return None;
        }
        Some((lkey >> 8, e.offset_of(addr, len)?))
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
        let e = self.entries.get(&(rkey >> 8))?;
        if e.rkey != rkey || e.pd != pd || !e.access.contains(need) {
            return None;
        }
        Some((rkey >> 8, e.offset_of(va, len)?))
    }

    /// Gathers the bytes an SGE list describes (a SEND/WRITE payload). `None` on a protection
    /// error (lkey, PD or bounds). Zero-length SGEs are not checked.
    pub fn gather(&self, pd: u32, sges: &[Sge]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for s in sges.iter().filter(|s| s.length > 0) {
            let len = u64::from(s.length);
            let (h, off) = self.check_local(pd, s.lkey, s.addr, len, AccessFlags::empty())?;
            let e = self.entries.get(&h)?;
            out.extend_from_slice(e.data.get(off..off + s.length as usize)?);
        }
        Some(out)
    }

    /// Gathers by address only, ignoring keys (inline data, copied at post time).
    pub fn gather_inline(&self, sges: &[Sge]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for s in sges.iter().filter(|s| s.length > 0) {
            let len = u64::from(s.length);
            let e = self
                .entries
                .values()
                .find(|e| e.offset_of(s.addr, len).is_some())?;
            let off = e.offset_of(s.addr, len)?;
            out.extend_from_slice(e.data.get(off..off + s.length as usize)?);
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
            let n = range.len();
            let dst = self
                .entries
                .get_mut(&h)
                .and_then(|e| e.data.get_mut(off..off + n))
                .ok_or(ScatterError::Protection)?;
            let src = data.get(range).ok_or(ScatterError::Protection)?;
            dst.copy_from_slice(src);
        }
        Ok(())
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
