//! [`HwDevice`] of a build without the `hw` feature: the same API, no value of it can exist
//! ([`HwDevice::open`] always fails with [`HwError::NotBuilt`]), so every method is
//! unreachable.

use crate::{HwError, HwOptions};
use std::convert::Infallible;
use std::os::fd::RawFd;
use verbs_core::{
    AccessFlags, AsyncEvent, CompChannel, CqHandle, Device, DeviceAttr, Gid, GsiDatagram,
    GsiEndpoint, Mr, MrHandle, PdHandle, PortAttr, PostError, Qp, QpAttr, QpAttrMask, QpHandle,
    QpInitAttr, RecvWr, Result, SendWr, SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr,
    WorkCompletion,
};

/// An RDMA device opened through libibverbs. This build has no libibverbs backend (feature
/// `hw` off): [`HwDevice::open`] returns [`HwError::NotBuilt`] and no value of the type exists.
/// The methods are those of the `hw` build, documented there.
#[derive(Debug)]
pub struct HwDevice {
    never: Infallible,
}

impl HwDevice {
    /// Always [`HwError::NotBuilt`] (`EOPNOTSUPP`): rebuild with `--features hw`.
    ///
    /// # Errors
    /// [`HwError::NotBuilt`].
    pub fn open(_opts: &HwOptions) -> std::result::Result<HwDevice, HwError> {
        Err(HwError::NotBuilt)
    }

    /// The port in use (unreachable in this build).
    pub fn port_num(&self) -> u8 {
        match self.never {}
    }

    /// The GID index in use (unreachable in this build).
    pub fn gid_index(&self) -> u32 {
        match self.never {}
    }

    /// The GID in use (unreachable in this build).
    pub fn gid(&self) -> Gid {
        match self.never {}
    }

    /// The descriptors to poll (unreachable in this build).
    pub fn event_fds(&self) -> Vec<RawFd> {
        match self.never {}
    }

    /// A waiter on the event descriptors (unreachable in this build).
    ///
    /// # Errors
    /// None: no value of the type exists.
    pub fn event_waiter(&self) -> std::io::Result<EventWaiter> {
        match self.never {}
    }

    /// Handles pending events (unreachable in this build).
    pub fn process_events(&mut self) -> usize {
        match self.never {}
    }

    /// The oldest MAD sent (unreachable in this build).
    pub fn take_gsi_send(&mut self) -> Option<(Gid, Vec<u8>)> {
        match self.never {}
    }

    /// Queues a received MAD (unreachable in this build).
    pub fn push_gsi_recv(&mut self, _d: GsiDatagram) {
        match self.never {}
    }

    /// MADs dropped by full queues (unreachable in this build).
    pub fn gsi_dropped(&self) -> u64 {
        match self.never {}
    }
}

/// Waits for a device's events; in this build no device, hence no waiter, exists.
#[derive(Debug)]
pub struct EventWaiter {
    never: Infallible,
}

impl EventWaiter {
    /// Waits for the device's events (unreachable in this build).
    ///
    /// # Errors
    /// None: no value of the type exists.
    pub fn wait(&self, _timeout: std::time::Duration) -> std::io::Result<bool> {
        match self.never {}
    }
}

impl Device for HwDevice {
    fn name(&self) -> &str {
        match self.never {}
    }
    fn query_device(&self) -> DeviceAttr {
        match self.never {}
    }
    fn query_port(&self, _port_num: u8) -> Result<PortAttr> {
        match self.never {}
    }
    fn query_gid(&self, _port_num: u8, _index: u32) -> Result<Gid> {
        match self.never {}
    }
    fn alloc_pd(&mut self) -> Result<PdHandle> {
        match self.never {}
    }
    fn dealloc_pd(&mut self, _pd: PdHandle) -> Result<()> {
        match self.never {}
    }
    fn reg_mr(&mut self, _pd: PdHandle, _length: usize, _access: AccessFlags) -> Result<Mr> {
        match self.never {}
    }
    fn dereg_mr(&mut self, _mr: MrHandle) -> Result<()> {
        match self.never {}
    }
    fn mr_write(&mut self, _mr: MrHandle, _offset: u64, _data: &[u8]) -> Result<()> {
        match self.never {}
    }
    fn mr_read(&self, _mr: MrHandle, _offset: u64, _buf: &mut [u8]) -> Result<()> {
        match self.never {}
    }
    fn create_cq(&mut self, _cqe: u32, _channel: Option<&CompChannel>) -> Result<CqHandle> {
        match self.never {}
    }
    fn destroy_cq(&mut self, _cq: CqHandle) -> Result<()> {
        match self.never {}
    }
    fn req_notify_cq(&mut self, _cq: CqHandle, _solicited_only: bool) -> Result<()> {
        match self.never {}
    }
    fn poll_cq(
        &mut self,
        _cq: CqHandle,
        _max: usize,
        _out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        match self.never {}
    }
    fn create_qp(&mut self, _pd: PdHandle, _init: &QpInitAttr) -> Result<Qp> {
        match self.never {}
    }
    fn modify_qp(&mut self, _qp: QpHandle, _attr: &QpAttr, _mask: QpAttrMask) -> Result<()> {
        match self.never {}
    }
    fn query_qp(&self, _qp: QpHandle) -> Result<(QpAttr, QpInitAttr)> {
        match self.never {}
    }
    fn destroy_qp(&mut self, _qp: QpHandle) -> Result<()> {
        match self.never {}
    }
    fn post_send(&mut self, _qp: QpHandle, _wrs: &[SendWr]) -> Result<(), PostError> {
        match self.never {}
    }
    fn post_recv(&mut self, _qp: QpHandle, _wrs: &[RecvWr]) -> Result<(), PostError> {
        match self.never {}
    }
    fn create_srq(&mut self, _pd: PdHandle, _init: &SrqInitAttr) -> Result<SrqHandle> {
        match self.never {}
    }
    fn modify_srq(&mut self, _srq: SrqHandle, _attr: &SrqAttr, _mask: SrqAttrMask) -> Result<()> {
        match self.never {}
    }
    fn query_srq(&self, _srq: SrqHandle) -> Result<SrqAttr> {
        match self.never {}
    }
    fn destroy_srq(&mut self, _srq: SrqHandle) -> Result<()> {
        match self.never {}
    }
    fn post_srq_recv(&mut self, _srq: SrqHandle, _wrs: &[RecvWr]) -> Result<(), PostError> {
        match self.never {}
    }
    fn get_async_event(&mut self) -> Option<AsyncEvent> {
        match self.never {}
    }
}

impl GsiEndpoint for HwDevice {
    fn gsi_send(&mut self, _dst: Gid, _mad: &[u8]) -> Result<()> {
        match self.never {}
    }
    fn gsi_recv(&mut self) -> Option<GsiDatagram> {
        match self.never {}
    }
}
