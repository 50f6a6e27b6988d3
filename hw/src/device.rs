//! [`HwDevice`]: the [`Device`] and [`GsiEndpoint`] traits over libibverbs.

use crate::error::verbs_error;
use crate::ffi::{self, Verbs};
use crate::modify::{fill_local, Local};
use crate::queue::BoundedQueue;
use crate::{EventWaiter, HwError, HwOptions, MAD_SIZE, QUEUE_CAPACITY};
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use verbs_abi::convert;
use verbs_core::{
    AccessFlags, AsyncEvent, CompChannel, CqHandle, CqNotifier, Device, DeviceAttr, Errno, Error,
    Gid, GsiDatagram, GsiEndpoint, Mr, MrHandle, PdHandle, PortAttr, PostError, Qp, QpAttr,
    QpAttrMask, QpHandle, QpInitAttr, RecvWr, Result, SendWr, SrqAttr, SrqAttrMask, SrqHandle,
    SrqInitAttr, WorkCompletion,
};

/// An RDMA device opened through libibverbs, one port and one GID of it: the [`Device`] of a
/// real RNIC.
///
/// Semantics are libibverbs': each method makes the call its trait method names, with the
/// errno libibverbs reports (the provider's and kernel's checks, e.g. `EINVAL` for an illegal
/// QP transition, `EBUSY` for a PD in use). What this type adds:
///
/// * handles checked before any call (`EINVAL` for an unknown one);
/// * memory regions whose buffers it allocates (page-aligned, zero-filled) and frees;
/// * in [`Device::modify_qp`], the port, the GID index and the MTU clamp (see there);
/// * one completion channel for all CQs, relayed by [`HwDevice::process_events`] to the
///   [`CompChannel`] each CQ was created with; async events queued the same way;
/// * the GSI queues ([`HwDevice::take_gsi_send`], [`HwDevice::push_gsi_recv`]).
///
/// Dropping it destroys QPs, CQs, MRs (freeing their memory), PDs and the channel, then closes
/// the device, ignoring errors.
#[derive(Debug)]
pub struct HwDevice {
    verbs: Verbs,
    name: String,
    port: u8,
    gid_index: u8,
    gid: Gid,
    device_attr: DeviceAttr,
    notifiers: BTreeMap<u32, CqNotifier>,
    async_events: BoundedQueue<AsyncEvent>,
    gsi_out: BoundedQueue<(Gid, Vec<u8>)>,
    gsi_in: BoundedQueue<GsiDatagram>,
}

impl HwDevice {
    /// Opens the device, port and GID `opts` selects.
    ///
    /// * Device: the one named `opts.device`, else the first (in libibverbs' order) with an
    ///   ACTIVE port.
    /// * Port: `opts.port` (which must be ACTIVE), else the device's first ACTIVE port.
    /// * GID: `opts.gid_index` as given, else the first index of the port's table whose GID is
    ///   IPv4-mapped (`::ffff:a.b.c.d`; with `opts.ip`, the GID of that IP) and RoCE v2:
    ///   `ibv_query_gid_type` says `IBV_GID_TYPE_SYSFS_ROCE_V2`, or, where that call fails,
    ///   `/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>` says `RoCE v2`;
    ///   when neither answers, the address alone decides.
    ///
    /// It then creates the device's completion channel and makes its fd and the context's
    /// async fd non-blocking ([`HwDevice::event_fds`]).
    ///
    /// # Errors
    /// [`HwError::NoLibrary`] when libibverbs.so.1 cannot be loaded (the first open loads it;
    /// a failed load is tried again by the next) or lacks a function the backend calls;
    /// [`HwError::NoDevice`] when it lists no device (`ibv_get_device_list` fails, e.g.
    /// `ENOSYS` without kernel support, or returns an empty list);
    /// [`HwError::DeviceNotFound`] for an unknown name; [`HwError::NoActivePort`];
    /// [`HwError::NoRoceV2Gid`]; [`HwError::Verbs`] when a call fails (e.g. `EINVAL` for a
    /// `gid_index` past the table or above 255, `EACCES` opening the device).
    pub fn open(opts: &HwOptions) -> std::result::Result<HwDevice, HwError> {
        let o = ffi::open(opts)?;
        Ok(HwDevice {
            device_attr: convert::device_attr_from_c(&o.device_attr),
            verbs: o.verbs,
            name: o.name,
            port: o.port,
            gid_index: o.gid_index,
            gid: o.gid,
            notifiers: BTreeMap::new(),
            async_events: BoundedQueue::new(QUEUE_CAPACITY),
            gsi_out: BoundedQueue::new(QUEUE_CAPACITY),
            gsi_in: BoundedQueue::new(QUEUE_CAPACITY),
        })
    }

    /// The port in use, 1-based.
    pub fn port_num(&self) -> u8 {
        self.port
    }

    /// The index of [`HwDevice::gid`] in the port's GID table (the `sgid_index` of every
    /// address vector).
    pub fn gid_index(&self) -> u32 {
        u32::from(self.gid_index)
    }

    /// The port GID in use: the device's address for the CM (RoCE v2, IPv4-mapped unless an
    /// IPv6 address or an index was asked for).
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The descriptors to poll for readability (`POLLIN`) before calling
    /// [`HwDevice::process_events`]: the completion channel's fd, then the async fd. Both are
    /// non-blocking and owned by the device (do not close them).
    pub fn event_fds(&self) -> Vec<RawFd> {
        self.verbs.event_fds()
    }

    /// An [`EventWaiter`] on duplicates of [`HwDevice::event_fds`], for a thread that waits
    /// for events while another owns the device.
    ///
    /// # Errors
    /// The descriptors cannot be duplicated (`EMFILE`, …).
    pub fn event_waiter(&self) -> std::io::Result<EventWaiter> {
        self.verbs.dup_event_fds().map(EventWaiter::new)
    }

    /// Handles every pending event without blocking, and returns how many it handled:
    ///
    /// * each CQ event (`ibv_get_cq_event`, acknowledged at once with `ibv_ack_cq_events`) is
    ///   sent to the [`CompChannel`] the CQ was created with (`cq_context` holds the handle);
    /// * each async event (`ibv_get_async_event`, acknowledged at once) is converted and queued
    ///   for [`Device::get_async_event`] (at most [`QUEUE_CAPACITY`], oldest dropped); an event
    ///   type verbs-core does not name is counted but dropped.
    pub fn process_events(&mut self) -> usize {
        let mut n = 0;
        while let Some(ev) = self.verbs.next_cq_event() {
            n += 1;
            if let Some(h) = ev {
                if let Some(notifier) = self.notifiers.get(&h.0) {
                    notifier.notify(h);
                }
            }
        }
        n + self.drain_async_events()
    }

    fn drain_async_events(&mut self) -> usize {
        let mut n = 0;
        while let Some(ev) = self.verbs.next_async_event() {
            n += 1;
            if let Some(ev) = ev {
                self.async_events.push(ev);
            }
        }
        n
    }

    /// The oldest MAD the CM sent with [`GsiEndpoint::gsi_send`] and the driver has not taken
    /// yet, with its destination GID. The driver carries it to the peer (a UDP socket: the
    /// kernel owns the real QP1).
    pub fn take_gsi_send(&mut self) -> Option<(Gid, Vec<u8>)> {
        self.gsi_out.pop()
    }

    /// Queues a MAD that arrived for [`GsiEndpoint::gsi_recv`] (at most [`QUEUE_CAPACITY`],
    /// oldest dropped).
    pub fn push_gsi_recv(&mut self, d: GsiDatagram) {
        self.gsi_in.push(d);
    }

    /// How many MADs were dropped because a GSI queue was full (sent ones the driver did not
    /// take, received ones the CM did not read).
    pub fn gsi_dropped(&self) -> u64 {
        self.gsi_out.dropped() + self.gsi_in.dropped()
    }

    /// What a modify needs from the port now.
    fn local(&self, mask: QpAttrMask) -> Local {
        let active_mtu = if mask.contains(QpAttrMask::PATH_MTU) {
            self.verbs
                .context()
                .query_port(self.port)
                .ok()
                .map(|p| convert::mtu_from_c(p.active_mtu))
        } else {
            None
        };
        Local {
            port: self.port,
            sgid_index: self.gid_index,
            active_mtu,
        }
    }
}

impl Device for HwDevice {
    fn name(&self) -> &str {
        &self.name
    }

    /// Queried once, at open (device limits do not change).
    fn query_device(&self) -> DeviceAttr {
        self.device_attr.clone()
    }

    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        if port_num == 0 || port_num > self.device_attr.phys_port_cnt {
            return Err(Error::inval(format!("no port {port_num}")));
        }
        let a = self.verbs.context().query_port(port_num)?;
        Ok(convert::port_attr_from_c(&a))
    }

    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        self.verbs.context().query_gid(port_num, index)
    }

    fn alloc_pd(&mut self) -> Result<PdHandle> {
        self.verbs.alloc_pd()
    }

    fn dealloc_pd(&mut self, pd: PdHandle) -> Result<()> {
        self.verbs.dealloc_pd(pd)
    }

    /// Allocates `length` bytes, page-aligned and zero-filled (`ENOMEM` when that fails), and
    /// registers them (`ibv_reg_mr`, access bits passed as they are: verbs-core's values are
    /// `ibv_access_flags`'). [`Mr::addr`] is the buffer's virtual address.
    fn reg_mr(&mut self, pd: PdHandle, length: usize, access: AccessFlags) -> Result<Mr> {
        self.verbs.reg_mr(pd, length, access)
    }

    /// `ibv_dereg_mr`, then frees the region's memory.
    fn dereg_mr(&mut self, mr: MrHandle) -> Result<()> {
        self.verbs.dereg_mr(mr)
    }

    fn mr_write(&mut self, mr: MrHandle, offset: u64, data: &[u8]) -> Result<()> {
        self.verbs.mr_write(mr, offset, data)
    }

    fn mr_read(&self, mr: MrHandle, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.verbs.mr_read(mr, offset, buf)
    }

    /// `ibv_create_cq` on the device's completion channel when `channel` is given (its
    /// notifier is kept: [`HwDevice::process_events`] forwards the CQ's events to it).
    fn create_cq(&mut self, cqe: u32, channel: Option<&CompChannel>) -> Result<CqHandle> {
        let h = self.verbs.create_cq(cqe, channel.is_some())?;
        if let Some(ch) = channel {
            self.notifiers.insert(h.0, ch.notifier());
        }
        Ok(h)
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<()> {
        self.verbs.destroy_cq(cq)?;
        self.notifiers.remove(&cq.0);
        Ok(())
    }

    fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<()> {
        self.verbs.req_notify_cq(cq, solicited_only)
    }

    /// `ibv_poll_cq` in batches of 64, every `ibv_wc` field converted (an unknown status reads
    /// as `GENERAL_ERR`; `imm_data` stays the network-order value). A negative return of
    /// `ibv_poll_cq` is `EIO`.
    fn poll_cq(
        &mut self,
        cq: CqHandle,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        self.verbs.poll_cq(cq, max, |w| out.push(w))
    }

    /// `ibv_create_qp` (RC and UC; UD is `EOPNOTSUPP`: its WRs need address handles). The
    /// provider may grant more than `init.cap` asks; [`Device::query_qp`] reports it.
    fn create_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<Qp> {
        self.verbs.create_qp(pd, init)
    }

    /// `ibv_modify_qp`, with what the CM cannot know filled in: with `AV`, `ah_attr` gets
    /// `is_global` = 1, `grh.sgid_index` = [`HwDevice::gid_index`] and `port_num` = the port
    /// (RoCE needs a GRH); with `PORT`, `port_num` = the port; with `PATH_MTU`, the MTU is
    /// clamped to the port's active MTU, as rdma_cm's path record would be. Everything else
    /// passes through; the provider checks the transition (`EINVAL`).
    fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let mut c = convert::qp_attr_to_c(attr);
        fill_local(&mut c, mask, &self.local(mask));
        let m = libc::c_int::try_from(mask.bits())
            .map_err(|_| verbs_error("ibv_modify_qp mask", libc::EINVAL))?;
        self.verbs.modify_qp(qp, &mut c, m)
    }

    /// `ibv_query_qp`; the creation attributes carry the `cap` the provider granted.
    fn query_qp(&self, qp: QpHandle) -> Result<(QpAttr, QpInitAttr)> {
        self.verbs.query_qp(qp)
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<()> {
        self.verbs.destroy_qp(qp)
    }

    /// `ibv_post_send` of all `wrs` as one chain (`bad_wr` mapped back to its index).
    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr]) -> Result<(), PostError> {
        self.verbs.post_send(qp, wrs)
    }

    /// `ibv_post_recv` of all `wrs` as one chain (`bad_wr` mapped back to its index).
    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.verbs.post_recv(qp, wrs)
    }

    /// `ibv_create_srq`; the provider may grant more than asked ([`Device::query_srq`]).
    fn create_srq(&mut self, pd: PdHandle, init: &SrqInitAttr) -> Result<SrqHandle> {
        self.verbs.create_srq(pd, init)
    }

    /// `ibv_modify_srq`; the provider checks (mlx5 refuses `MAX_WR` with `EINVAL`).
    fn modify_srq(&mut self, srq: SrqHandle, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.verbs.modify_srq(srq, attr, mask)
    }

    fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr> {
        self.verbs.query_srq(srq)
    }

    /// `ibv_destroy_srq` (the kernel's `EBUSY` while a QP uses it).
    fn destroy_srq(&mut self, srq: SrqHandle) -> Result<()> {
        self.verbs.destroy_srq(srq)
    }

    /// `ibv_post_srq_recv` of all `wrs` as one chain (`bad_wr` mapped back to its index).
    fn post_srq_recv(&mut self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.verbs.post_srq_recv(srq, wrs)
    }

    /// Reads every pending async event first (non-blocking), then returns the oldest queued.
    fn get_async_event(&mut self) -> Option<AsyncEvent> {
        self.drain_async_events();
        self.async_events.pop()
    }
}

impl GsiEndpoint for HwDevice {
    /// Queues the MAD for [`HwDevice::take_gsi_send`] (at most [`QUEUE_CAPACITY`], oldest
    /// dropped, [`HwDevice::gsi_dropped`] counts them). `EINVAL` unless it is [`MAD_SIZE`]
    /// bytes.
    fn gsi_send(&mut self, dst: Gid, mad: &[u8]) -> Result<()> {
        if mad.len() != MAD_SIZE {
            return Err(Error::new(
                Errno::EINVAL,
                format!("MAD of {} bytes (must be {MAD_SIZE})", mad.len()),
            ));
        }
        self.gsi_out.push((dst, mad.to_vec()));
        Ok(())
    }

    /// The oldest MAD given to [`HwDevice::push_gsi_recv`] and not yet read.
    fn gsi_recv(&mut self) -> Option<GsiDatagram> {
        self.gsi_in.pop()
    }
}
