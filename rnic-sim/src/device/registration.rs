//! Memory registration checks and regions over caller-supplied memory (`ibv_reg_mr` on the
//! application's buffer).

use super::SimDevice;
use crate::memory::{ExternalMemory, MrMemory};
use crate::mr::check_registration;
use std::sync::Arc;
use verbs_core::{AccessFlags, Errno, Error, Mr, MrHandle, PdHandle, Result};

impl SimDevice {
    /// Registers a memory region over caller-supplied memory: `ibv_reg_mr(pd, addr, length,
    /// access)` with the application's buffer, or `ibv_reg_mr_iova2` (rdma-core). Byte 0 of
    /// `memory` is at virtual address `iova` (the buffer's pointer value for `ibv_reg_mr`, the
    /// `iova` argument for `ibv_reg_mr_iova2`); the length is `memory.len()`, read once. SGEs,
    /// RETHs and atomics then address it as any region, and every byte the device moves in or
    /// out of it goes through `memory`'s `read`/`write` (contract: [`ExternalMemory`]).
    ///
    /// Keys come from the same scheme as [`verbs_core::Device::reg_mr`]'s. The address is not
    /// allocated: it may overlap other regions, external or device-owned; keyed accesses find
    /// the region by key, inline gathers take the oldest region containing the range
    /// (`docs/semantics-verbs.md`, "Memory backings").
    ///
    /// Errors, as `reg_mr`'s [man:ibv_reg_mr.3, kernel `ib_check_mr_access`, `ib_umem_get`]:
    /// EINVAL for an unknown PD, an access bit outside Linux's `IB_ACCESS_SUPPORTED` (the
    /// optional range 0x3ff0_0000, e.g. RELAXED_ORDERING, is accepted and ignored),
    /// REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE, a region spanning no page (length 0 at a
    /// page-aligned `iova`), `iova + length` wrapping, or a length above `max_mr_size`; ENOMEM
    /// past `max_mr` or when keys are exhausted. On error `memory` is dropped unused.
    pub fn reg_mr_external(
        &mut self,
        pd: PdHandle,
        memory: Arc<dyn ExternalMemory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Mr> {
        let memory = MrMemory::external(memory);
        let length = memory.len() as u64;
        self.check_reg_mr(pd, length, iova, access)?;
        let (h, lkey, rkey) = self
            .sh
            .mrs
            .register_at(pd.0, iova, access, memory)
            .ok_or_else(|| Error::new(Errno::ENOMEM, "MR keys exhausted"))?;
        Ok(Mr {
            handle: MrHandle(h),
            addr: iova,
            length,
            lkey,
            rkey,
        })
    }

    /// The checks every registration makes before taking a key: PD, arguments
    /// ([`check_registration`]), `max_mr`.
    pub(super) fn check_reg_mr(
        &self,
        pd: PdHandle,
        length: u64,
        iova: u64,
        access: AccessFlags,
    ) -> Result<()> {
        if !self.pds.contains(&pd.0) {
            return Err(Error::inval("unknown PD"));
        }
        check_registration(length, iova, access, self.cfg.max_mr_size)?;
        if self.sh.mrs.len() >= self.cfg.max_mr as usize {
            return Err(Error::new(Errno::ENOMEM, "max_mr reached"));
        }
        Ok(())
    }
}
