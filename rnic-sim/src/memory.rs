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
    /// `offset + buf.len() <= len()`.
    fn read(&self, offset: usize, buf: &mut [u8]);

    /// Copies `data` to the memory starting at byte `offset`. The device guarantees
    /// `offset + data.len() <= len()`.
    fn write(&self, offset: usize, data: &[u8]);
}

/// The bytes of one memory region: owned by the device, or caller-supplied.
///
/// `Clone` copies an owned backing and shares an external one (the `Arc`; see
/// [`ExternalMemory`], "Sharing").
#[derive(Debug, Clone)]
pub(crate) enum MrMemory {
    /// Device-owned bytes ([`Device::reg_mr`](verbs_core::Device::reg_mr)), zero-filled at
    /// registration.
    Owned(Vec<u8>),
    /// Caller-supplied memory and its length as read at registration.
    External {
        /// The memory.
        memory: Arc<dyn ExternalMemory>,
        /// `memory.len()` at registration: the bound of every access.
        len: usize,
    },
}

impl MrMemory {
    /// An external backing; reads `memory.len()` once.
    pub fn external(memory: Arc<dyn ExternalMemory>) -> Self {
        let len = memory.len();
        MrMemory::External { memory, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            MrMemory::Owned(v) => v.len(),
            MrMemory::External { len, .. } => *len,
        }
    }

    /// `offset + n` when `[offset, offset + n)` lies inside the backing.
    fn end(&self, offset: usize, n: usize) -> Option<usize> {
        offset.checked_add(n).filter(|&end| end <= self.len())
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`; `None` (nothing read) when the range
    /// leaves the backing.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Option<()> {
        let end = self.end(offset, buf.len())?;
        match self {
            MrMemory::Owned(v) => buf.copy_from_slice(v.get(offset..end)?),
            MrMemory::External { memory, .. } => memory.read(offset, buf),
        }
        Some(())
    }

    /// Appends the `n` bytes at `offset` to `out` (one copy for an owned backing; a gather
    /// builds its payload this way); `None` (nothing appended) when the range leaves the
    /// backing.
    pub fn read_into(&self, offset: usize, n: usize, out: &mut Vec<u8>) -> Option<()> {
        let end = self.end(offset, n)?;
        match self {
            MrMemory::Owned(v) => out.extend_from_slice(v.get(offset..end)?),
            MrMemory::External { memory, .. } => {
                let start = out.len();
                out.resize(start + n, 0);
                memory.read(offset, out.get_mut(start..)?);
            }
        }
        Some(())
    }

    /// Copies `data` to `offset`; `None` (nothing written) when the range leaves the backing.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Option<()> {
        let end = self.end(offset, data.len())?;
        match self {
            MrMemory::Owned(v) => v.get_mut(offset..end)?.copy_from_slice(data),
            MrMemory::External { memory, .. } => memory.write(offset, data),
        }
        Some(())
    }
}
