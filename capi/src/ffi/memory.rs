//! The application's own buffer as the memory of a memory region (`ibv_reg_mr`).
//!
//! The simulated RNIC reads and writes a region only through
//! [`rnic_sim::ExternalMemory`]; this is that trait over a raw pointer. Like a real RNIC's DMA,
//! a peer's RDMA WRITE or an incoming SEND lands in the buffer while the application may be
//! reading other parts of it, and the library never holds a Rust reference into it: every
//! access is one guarded copy ([`super::fault`]) of exactly the bytes the device asked for, so
//! a buffer the application unmapped after registering it gives an error (an error completion,
//! a NAK) instead of a SIGSEGV in the progress thread.

use super::fault;
use rnic_sim::ExternalMemory;

/// `len` bytes at `addr` in the application's address space. See the module docs.
#[derive(Debug)]
pub struct UserMemory {
    addr: usize,
    len: usize,
}

impl UserMemory {
    /// The buffer `[addr, addr + len)` that `ibv_reg_mr` was given. Installs the fault
    /// handler its copies rely on ([`fault::install`]).
    ///
    /// # Safety
    /// While the region is registered, the buffer is the application's registered memory: the
    /// library may read and write it whenever the device asks. (It may be unmapped meanwhile:
    /// the copies then fail.)
    pub unsafe fn new(addr: usize, len: usize) -> UserMemory {
        fault::install();
        UserMemory { addr, len }
    }

    /// `[addr + offset, + n)`, if inside the buffer.
    fn at(&self, offset: usize, n: usize) -> Option<usize> {
        let end = offset.checked_add(n)?;
        (end <= self.len).then_some(self.addr + offset)
    }
}

impl ExternalMemory for UserMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, buf: &mut [u8]) -> bool {
        // The device checks bounds first; never read outside the buffer.
        let Some(src) = self.at(offset, buf.len()) else {
            return false;
        };
        // SAFETY: `src` lies inside the registered buffer (`UserMemory::new`), `buf` is a
        // distinct Rust allocation; a fault there returns false.
        unsafe { fault::read_app(buf.as_mut_ptr(), src as *const u8, buf.len()) }
    }

    fn write(&self, offset: usize, data: &[u8]) -> bool {
        let Some(dst) = self.at(offset, data.len()) else {
            return false;
        };
        // SAFETY: as in `read`: inside the registered buffer; `data` is a distinct Rust
        // allocation; a fault (unmapped, read-only) returns false.
        unsafe { fault::write_app(dst as *mut u8, data.as_ptr(), data.len()) }
    }

    fn readable(&self, offset: usize, len: usize) -> bool {
        self.at(offset, len)
            .is_some_and(|a| fault::readable(a, len))
    }
}

/// Posts `wrs` on QP `qp` of PD `pd` with their inline data (`IBV_SEND_INLINE`) readable
/// wherever it lies: ibv_post_send(3) lets inline SGEs point at any memory, read at post time
/// and not necessarily registered (rdma_server/rdma_client send from a static array they never
/// register), while the simulated device gathers inline data from its regions. Each inline
/// SGE is therefore registered for the duration of the post (a region of `pd` over exactly its
/// bytes, no access rights) and deregistered after it; the device copies the data at post
/// time, so nothing reads the range afterwards. Errors are the device's post errors.
///
/// # Safety
/// Every inline SGE of `wrs` is readable for its length (the caller's ibv_post_send(3)
/// contract).
pub unsafe fn post_send_with_inline(
    dev: &mut rnic_sim::SimDevice,
    pd: verbs_core::PdHandle,
    qp: verbs_core::QpHandle,
    wrs: &[verbs_core::SendWr],
) -> Result<(), verbs_core::PostError> {
    use verbs_core::{AccessFlags, Device, SendFlags};
    let mut temp = Vec::new();
    for s in wrs
        .iter()
        .filter(|w| w.send_flags.contains(SendFlags::INLINE))
        .flat_map(|w| w.sg_list.iter())
        .filter(|s| s.length > 0)
    {
        // SAFETY: the caller's contract: the SGE's bytes are readable during this post.
        let mem = unsafe { UserMemory::new(s.addr as usize, s.length as usize) };
        // A registration the device refuses (e.g. `max_mr` reached) leaves the SGE to the
        // application's own regions, and the post reports what it reports.
        if let Ok(mr) =
            dev.reg_mr_external(pd, std::sync::Arc::new(mem), s.addr, AccessFlags::empty())
        {
            temp.push(mr.handle);
        }
    }
    let res = dev.post_send(qp, wrs);
    for h in temp {
        let _ = dev.dereg_mr(h);
    }
    res
}
