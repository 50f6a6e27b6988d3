//! Memory backings of memory regions: bytes the device owns, or memory the caller supplies.
//!
//! A region registered with [`Device::reg_mr`](verbs_core::Device::reg_mr) owns its bytes (a
//! `Vec<u8>` inside the device); the application reaches them through `mr_read`/`mr_write`.
//! A region registered with [`SimDevice::reg_mr_external`](crate::SimDevice::reg_mr_external)
//! is backed by an [`ExternalMemory`]: the application's own buffer, as `ibv_reg_mr` registers
//! it on a real RNIC. A peer's RDMA WRITE, a received SEND, an atomic and a READ response land
//! in it, and SEND/WRITE gathers and READ responses read it, through the trait's `read` and
//! `write`, with no copy step in between.
//!
//! rnic-sim stays free of `unsafe`: the implementation over a raw pointer (the C ABI's) lives
//! outside, behind this trait.

use crate::copy;
use bytes::BytesMut;
use std::fmt;
use std::sync::Arc;

/// Memory the caller supplies as the backing of a memory region: the application's buffer,
/// shared with it the way a real RNIC shares a registered buffer through DMA.
///
/// The methods take `&self` because the memory is shared: the application may touch its
/// buffer while the region is registered, as it may on hardware. The device never holds a Rust
/// reference (`&[u8]`) into the memory; every access is one call that copies in or out and
/// returns. Concurrent access to the same bytes by the application and the device gives
/// unspecified bytes, as with DMA (`man:ibv_post_send.3`: a buffer belongs to the device until
/// its work request completes); the implementation decides how that stays free of undefined
/// behaviour.
///
/// # Contract the device keeps
///
/// * [`len`](ExternalMemory::len) is read once, when the region is registered; every later
///   `read`/`write` lies inside `[0, that length)`: `offset + buf.len() <= len`. An
///   implementation may rely on that for memory safety.
/// * Calls come only from inside a call on the [`SimDevice`](crate::SimDevice) (`&mut self` or
///   `&self`), never from another thread on the device's behalf, and never re-entrantly.
/// * Atomics (`ATOMIC_CMP_AND_SWP`, `ATOMIC_FETCH_AND_ADD`) are a `read` then a `write` of 8
///   bytes within one device call: atomic with respect to other device operations (the device
///   is single-threaded, or behind its driver's lock), not with respect to the application's
///   own CPU accesses. Real RNICs give no such guarantee either
///   (`IBV_ATOMIC_HCA`, `man:ibv_query_device.3`).
///
/// # Contract the implementation keeps
///
/// * `len` does not change while the region is registered.
/// * `read`/`write` do not panic for in-bounds arguments and do not call back into the device.
/// * `read`/`write` return false when the memory could not be accessed (the application
///   unmapped it or took away the protection since it was registered): then some or none of
///   the bytes were copied, and the device treats the access as it treats one outside the
///   region — an error completion, a NAK (docs/capi.md, "Memory unmapped after
///   registration"). They never fault.
///
/// # Sharing
///
/// The device holds the memory as an `Arc`. [`SimDevice`](crate::SimDevice) is `Clone` (the
/// model checker explores from copies): a clone shares the `Arc`, so the original and the clone
/// read and write the same external bytes, unlike device-owned regions, which are copied.
/// Deregistering the region (`dereg_mr`) drops the device's `Arc`.
pub trait ExternalMemory: Send + Sync + fmt::Debug {
    /// Length of the memory in bytes (read once, at registration).
    fn len(&self) -> usize;

    /// True when [`len`](ExternalMemory::len) is 0.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `buf.len()` bytes starting at byte `offset` into `buf`. The device guarantees
    /// `offset + buf.len() <= len()`. False when the memory could not be read (`buf` then
    /// holds unspecified bytes).
    fn read(&self, offset: usize, buf: &mut [u8]) -> bool;

    /// Copies `data` to the memory starting at byte `offset`. The device guarantees
    /// `offset + data.len() <= len()`. False when the memory could not be written (part of
    /// `data` may have been).
    fn write(&self, offset: usize, data: &[u8]) -> bool;

    /// Whether `len` bytes at `offset` can be read now, without reading them all: what the
    /// device asks before it commits to reading them later, when their packet leaves (a
    /// SEND/WRITE payload when its WQE starts, a READ response when the request is taken), so
    /// that memory already gone gives an error completion rather than a payload read
    /// afterwards. The default (memory that cannot go away) is always true.
    fn readable(&self, offset: usize, len: usize) -> bool {
        let _ = (offset, len);
        true
    }
}

/// The largest alignment of device-owned bytes: a page, as the region's virtual address.
const PAGE: usize = 4096;

/// Device-owned bytes, zero-filled, whose first byte is aligned as the region's virtual address
/// is (a page; a smaller region to its length rounded up to a power of two, at least 64
/// bytes): copies into and out of it then see the alignment a buffer from the page allocator
/// has, and their speed does not depend on where the heap put it (see crate `copy`). Safe
/// code: an over-allocated `Vec` and the offset of its first aligned byte.
#[derive(Debug)]
pub(crate) struct OwnedBytes {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl OwnedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        let align = len
            .checked_next_power_of_two()
            .unwrap_or(PAGE)
            .clamp(64, PAGE);
        let buf = vec![0; len.saturating_add(align - 1)];
        // `align_offset` may decline (usize::MAX); the bytes are then merely unaligned.
        let start = buf.as_ptr().align_offset(align);
        let start = if start < align { start } else { 0 };
        OwnedBytes { buf, start, len }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf
            .get_mut(self.start..self.start + self.len)
            .unwrap_or(&mut [])
    }
}

impl Clone for OwnedBytes {
    /// A copy in a new, again aligned, allocation.
    fn clone(&self) -> Self {
        let mut c = OwnedBytes::zeroed(self.len);
        c.as_mut_slice().copy_from_slice(self.as_slice());
        c
    }
}

/// The bytes of one memory region: owned by the device, or caller-supplied.
///
/// `Clone` copies an owned backing and shares an external one (the `Arc`; see
/// [`ExternalMemory`], "Sharing").
#[derive(Debug, Clone)]
pub(crate) enum MrMemory {
    /// Device-owned bytes ([`Device::reg_mr`](verbs_core::Device::reg_mr)), zero-filled at
    /// registration.
    Owned(OwnedBytes),
    /// Caller-supplied memory and its length as read at registration.
    External {
        /// The memory.
        memory: Arc<dyn ExternalMemory>,
        /// `memory.len()` at registration: the bound of every access.
        len: usize,
    },
}

impl MrMemory {
    /// A device-owned backing of `len` zero bytes.
    pub fn owned(len: usize) -> Self {
        MrMemory::Owned(OwnedBytes::zeroed(len))
    }

    /// An external backing; reads `memory.len()` once.
    pub fn external(memory: Arc<dyn ExternalMemory>) -> Self {
        let len = memory.len();
        MrMemory::External { memory, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            MrMemory::Owned(v) => v.len,
            MrMemory::External { len, .. } => *len,
        }
    }

    /// `offset + n` when `[offset, offset + n)` lies inside the backing.
    fn end(&self, offset: usize, n: usize) -> Option<usize> {
        offset.checked_add(n).filter(|&end| end <= self.len())
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`; `None` when the range leaves the
    /// backing (nothing read) or external memory could not be read.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Option<()> {
        let end = self.end(offset, buf.len())?;
        match self {
            MrMemory::Owned(v) => copy::copy(buf, v.as_slice().get(offset..end)?),
            MrMemory::External { memory, .. } => memory.read(offset, buf).then_some(())?,
        }
        Some(())
    }

    /// Whether the `n` bytes at `offset` lie inside the backing and can be read now
    /// ([`ExternalMemory::readable`]).
    pub fn readable(&self, offset: usize, n: usize) -> bool {
        self.end(offset, n).is_some()
            && match self {
                MrMemory::Owned(_) => true,
                MrMemory::External { memory, .. } => n == 0 || memory.readable(offset, n),
            }
    }

    /// Appends the `n` bytes at `offset` to `out` (one copy for an owned backing; a gather
    /// builds its payload this way); `None` (nothing appended) when the range leaves the
    /// backing.
    pub fn read_into(&self, offset: usize, n: usize, out: &mut Vec<u8>) -> Option<()> {
        let end = self.end(offset, n)?;
        match self {
            MrMemory::Owned(v) => copy::append_vec(out, v.as_slice().get(offset..end)?),
            MrMemory::External { memory, .. } => {
                let start = out.len();
                out.resize(start + n, 0);
                if !memory.read(offset, out.get_mut(start..)?) {
                    out.truncate(start);
                    return None;
                }
            }
        }
        Some(())
    }

    /// The `n` bytes at `offset`, to be read later ([`Source::append_to`]); `None` when the
    /// range leaves the backing.
    pub fn source(&self, offset: usize, n: usize) -> Option<Source<'_>> {
        let end = self.end(offset, n)?;
        Some(match self {
            MrMemory::Owned(v) => Source::Slice(v.as_slice().get(offset..end)?),
            MrMemory::External { memory, .. } => Source::External {
                memory: memory.as_ref(),
                offset,
                len: n,
            },
        })
    }

    /// Copies `data` to `offset`; `None` when the range leaves the backing (nothing written)
    /// or external memory could not be written.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Option<()> {
        let end = self.end(offset, data.len())?;
        match self {
            MrMemory::Owned(v) => copy::copy(v.as_mut_slice().get_mut(offset..end)?, data),
            MrMemory::External { memory, .. } => memory.write(offset, data).then_some(())?,
        }
        Some(())
    }
}

/// A run of a backing's bytes, found and bounds-checked, not yet copied: a slice of device-owned
/// bytes, or a range of external memory (read through [`ExternalMemory::read`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source<'a> {
    /// Device-owned bytes.
    Slice(&'a [u8]),
    /// `len` bytes at `offset` of caller-supplied memory, inside its registered length.
    External {
        /// The memory.
        memory: &'a dyn ExternalMemory,
        /// First byte.
        offset: usize,
        /// Byte count.
        len: usize,
    },
}

impl Source<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Source::Slice(s) => s.len(),
            Source::External { len, .. } => *len,
        }
    }

    /// Appends the bytes to `out`: one copy, straight from the backing. External memory that
    /// can no longer be read (unmapped since the device checked it was readable, when the
    /// packet's WQE started or its READ was taken) gives zero bytes: the packet is already
    /// committed to the wire (docs/capi.md, "Memory unmapped after registration").
    pub fn append_to(&self, out: &mut BytesMut) {
        match *self {
            Source::Slice(s) => copy::append(out, s),
            Source::External {
                memory,
                offset,
                len,
            } => {
                let at = out.len();
                out.resize(at + len, 0);
                if let Some(dst) = out.get_mut(at..) {
                    if !memory.read(offset, dst) {
                        dst.fill(0);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_bytes_are_aligned_as_a_page_or_their_length_and_so_are_clones() {
        for (len, align) in [(0, 64), (10, 64), (200, 256), (4096, 4096), (100_000, 4096)] {
            let mut b = OwnedBytes::zeroed(len);
            assert_eq!(b.as_slice().len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
            assert_eq!(b.as_slice().as_ptr() as usize % align, 0, "len {len}");
            b.as_mut_slice().fill(7);
            let c = b.clone();
            assert_eq!(
                c.as_slice().as_ptr() as usize % align,
                0,
                "clone of len {len}"
            );
            assert_eq!(c.as_slice(), b.as_slice());
        }
    }
}
