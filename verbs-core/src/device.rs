//! The device trait: what an RNIC offers through libibverbs, as one Rust interface that the
//! simulated RNIC and a hardware backend both implement.
//!
//! Objects are named by small copyable handles ([`PdHandle`], [`MrHandle`], [`CqHandle`],
//! [`QpHandle`]) that the device hands out and checks; an unknown or destroyed handle is
//! `EINVAL`, as a freed pointer would be in rdma-core's own checks. Memory regions own their
//! memory: the application reads and writes it through [`Device::mr_read`] and
//! [`Device::mr_write`], so the device never aliases a user buffer.

use crate::error::{Errno, Error, PostError, Result};
use crate::types::{
    AccessFlags, AsyncEventType, DeviceAttr, Gid, PortAttr, QpAttr, QpAttrMask, QpCap, QpType,
    RecvWr, SendWr, WorkCompletion,
};
use crate::{SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::Duration;

macro_rules! handle {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);
    };
}

handle!(
    /// A protection domain (`struct ibv_pd *`).
    PdHandle
);
handle!(
    /// A memory region (`struct ibv_mr *`).
    MrHandle
);
handle!(
    /// A completion queue (`struct ibv_cq *`).
    CqHandle
);
handle!(
    /// A queue pair (`struct ibv_qp *`).
    QpHandle
);

/// A registered memory region as `ibv_reg_mr` returns it (`struct ibv_mr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// The handle to deregister or access it with.
    pub handle: MrHandle,
    /// Virtual address of byte 0 of the region (what SGEs and remote addresses use).
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Local key, for SGEs.
    pub lkey: u32,
    /// Remote key, for peers' RDMA and atomics.
    pub rkey: u32,
}

impl Mr {
    /// An SGE covering `length` bytes at `offset` into this region.
    pub fn sge(&self, offset: u64, length: u32) -> crate::types::Sge {
        crate::types::Sge {
            addr: self.addr.wrapping_add(offset),
            length,
            lkey: self.lkey,
        }
    }
}

/// A created queue pair: its handle and its 24-bit QP number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qp {
    /// The handle to modify, post to, query or destroy it with.
    pub handle: QpHandle,
    /// The QP number peers address (24 bits; never 0 or 1).
    pub qp_num: u32,
}

/// `struct ibv_qp_init_attr` [verbs.h, man:ibv_create_qp.3].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// CQ for send completions.
    pub send_cq: CqHandle,
    /// CQ for receive completions.
    pub recv_cq: CqHandle,
    /// Requested queue sizes. Hardware providers may round up (`query_qp` reports what was
    /// granted); the simulated device grants exactly what is asked.
    pub cap: QpCap,
    /// Transport.
    pub qp_type: QpType,
    /// When true every send WR completes, whatever its SIGNALED flag.
    pub sq_sig_all: bool,
    /// The shared receive queue the QP takes its receive WRs from, if any (`srq` of
    /// `ibv_qp_init_attr`). Such a QP has no receive queue: `cap.max_recv_wr` and
    /// `cap.max_recv_sge` are ignored (reported as 0) and `post_recv` on it is `EINVAL`
    /// [rxe `rxe_post_recv`, kernel `ib_create_qp`].
    pub srq: Option<SrqHandle>,
}

impl QpInitAttr {
    /// An RC QP reporting to `send_cq` and `recv_cq` (which may be the same CQ).
    pub fn rc(send_cq: CqHandle, recv_cq: CqHandle, cap: QpCap, sq_sig_all: bool) -> Self {
        QpInitAttr {
            send_cq,
            recv_cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all,
            srq: None,
        }
    }

    /// The same QP taking its receive WRs from `srq` instead of a receive queue of its own.
    pub fn with_srq(self, srq: SrqHandle) -> Self {
        QpInitAttr {
            srq: Some(srq),
            ..self
        }
    }
}

/// What an async event is about (`element` of `struct ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncElement {
    /// A QP, by number.
    Qp(u32),
    /// A CQ.
    Cq(CqHandle),
    /// A port, 1-based.
    Port(u8),
    /// A shared receive queue (`IBV_EVENT_SRQ_LIMIT_REACHED`, `IBV_EVENT_SRQ_ERR`).
    Srq(SrqHandle),
    /// The whole device.
    Device,
}

/// `struct ibv_async_event` [verbs.h, man:ibv_get_async_event.3].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: AsyncEventType,
    /// What it happened to.
    pub element: AsyncElement,
}

/// A completion event channel (`struct ibv_comp_channel`, man:ibv_create_comp_channel.3).
///
/// A CQ created with a channel reports itself on the channel once per arming: after
/// [`Device::req_notify_cq`], the next completion added to the CQ (the next solicited one when
/// armed with `solicited_only`) sends the CQ's handle here and disarms it. Waiting may block the
/// calling thread; the device itself never blocks. Clones share the same queue.
#[derive(Debug, Clone)]
pub struct CompChannel {
    tx: Sender<CqHandle>,
    rx: Receiver<CqHandle>,
}

impl Default for CompChannel {
    fn default() -> Self {
        Self::new()
    }
}

impl CompChannel {
    /// A new, empty channel.
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        CompChannel { tx, rx }
    }

    /// Number of CQ events queued and not yet taken (what a `poll()` on the channel's fd
    /// reports as readable).
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// True when no CQ event is queued.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// The sending side, for a device that delivers CQ events here.
    pub fn notifier(&self) -> CqNotifier {
        CqNotifier(self.tx.clone())
    }

    /// `ibv_get_cq_event` in blocking mode: waits for the next CQ event.
    ///
    /// # Errors
    /// `EIO` when every notifier (every device end) is gone and no event is queued.
    pub fn get_cq_event(&self) -> Result<CqHandle> {
        self.rx
            .recv()
            .map_err(|_| Error::new(Errno::EIO, "completion channel closed"))
    }

    /// `ibv_get_cq_event` on a non-blocking channel.
    ///
    /// # Errors
    /// `EAGAIN` when no event is queued.
    pub fn try_get_cq_event(&self) -> Result<CqHandle> {
        self.rx.try_recv().map_err(|e| match e {
            TryRecvError::Empty => Error::new(Errno::EAGAIN, "no CQ event"),
            TryRecvError::Disconnected => Error::new(Errno::EIO, "completion channel closed"),
        })
    }

    /// Waits at most `timeout` for the next CQ event (`poll(2)` on the channel fd, then get).
    ///
    /// # Errors
    /// `EAGAIN` when the timeout passes with no event.
    pub fn get_cq_event_timeout(&self, timeout: Duration) -> Result<CqHandle> {
        self.rx.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => Error::new(Errno::EAGAIN, "no CQ event before timeout"),
            RecvTimeoutError::Disconnected => Error::new(Errno::EIO, "completion channel closed"),
        })
    }
}

/// The device's end of a [`CompChannel`].
#[derive(Debug, Clone)]
pub struct CqNotifier(Sender<CqHandle>);

impl CqNotifier {
    /// Reports `cq` on the channel. A channel whose every receiver is gone drops the event.
    pub fn notify(&self, cq: CqHandle) {
        // The application may have dropped its channel; an event nobody can read is dropped,
        // as the kernel drops events of a closed channel file.
        let _ = self.0.send(cq);
    }
}

/// An opened RDMA device context (`struct ibv_context`) and every verbs call on it.
///
/// Semantics follow libibverbs and the rules of cm-spec §5; each method says which errno it
/// returns. Methods take `&mut self`: a device is driven by one owner (a driver shares it behind
/// a lock).
pub trait Device {
    /// The device name (`ibv_get_device_name`), e.g. `"sim0"` or `"rxe0"`.
    fn name(&self) -> &str;

    /// `ibv_query_device`: device limits.
    fn query_device(&self) -> DeviceAttr;

    /// `ibv_query_port`: port attributes.
    ///
    /// # Errors
    /// `EINVAL` for a port number other than 1..=`phys_port_cnt`.
    fn query_port(&self, port_num: u8) -> Result<PortAttr>;

    /// `ibv_query_gid`: the GID at `index` of the port's GID table.
    ///
    /// # Errors
    /// `EINVAL` for a bad port or an index past the table.
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid>;

    /// `ibv_alloc_pd`.
    ///
    /// # Errors
    /// `ENOMEM` past `max_pd`.
    fn alloc_pd(&mut self) -> Result<PdHandle>;

    /// `ibv_dealloc_pd`.
    ///
    /// # Errors
    /// `EBUSY` while an MR or QP still uses the PD; `EINVAL` for an unknown handle.
    fn dealloc_pd(&mut self, pd: PdHandle) -> Result<()>;

    /// `ibv_reg_mr`: registers a zero-filled region of `length` bytes that the device owns.
    ///
    /// # Errors
    /// `EINVAL` for an unknown PD, a zero or oversize length, or REMOTE_WRITE/REMOTE_ATOMIC
    /// without LOCAL_WRITE (man:ibv_reg_mr.3); `ENOMEM` past `max_mr`.
    fn reg_mr(&mut self, pd: PdHandle, length: usize, access: AccessFlags) -> Result<Mr>;

    /// `ibv_dereg_mr`.
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle.
    fn dereg_mr(&mut self, mr: MrHandle) -> Result<()>;

    /// Copies `data` into the region at byte `offset` (the application's store to its buffer).
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle; `EFAULT` when `[offset, offset + len)` leaves the region.
    fn mr_write(&mut self, mr: MrHandle, offset: u64, data: &[u8]) -> Result<()>;

    /// Copies `buf.len()` bytes from the region at byte `offset` (the application's load).
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle; `EFAULT` when the range leaves the region.
    fn mr_read(&self, mr: MrHandle, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// `ibv_create_cq` with room for at least `cqe` completions, reporting to `channel` if given.
    ///
    /// # Errors
    /// `EINVAL` for `cqe` of 0 or above `max_cqe`; `ENOMEM` past `max_cq`.
    fn create_cq(&mut self, cqe: u32, channel: Option<&CompChannel>) -> Result<CqHandle>;

    /// `ibv_destroy_cq`.
    ///
    /// # Errors
    /// `EBUSY` while a QP still uses the CQ; `EINVAL` for an unknown handle.
    fn destroy_cq(&mut self, cq: CqHandle) -> Result<()>;

    /// `ibv_req_notify_cq`: arms the CQ's channel for the next completion (or the next solicited
    /// one when `solicited_only`).
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle or a CQ created without a channel.
    fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<()>;

    /// `ibv_poll_cq`: removes up to `max` completions, oldest first, appends them to `out` and
    /// returns how many.
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle; `EIO` for a CQ that overran (`CQ_ERR`, unusable) once the
    /// completions it stored before the overrun have been returned.
    fn poll_cq(&mut self, cq: CqHandle, max: usize, out: &mut Vec<WorkCompletion>)
        -> Result<usize>;

    /// `ibv_create_qp`: a QP in RESET.
    ///
    /// # Errors
    /// `EINVAL` for unknown PD/CQs/SRQ, `cap` values above the device limits or a QP with
    /// neither send nor receive WRs; `EOPNOTSUPP` for a QP type the device does not support; `ENOMEM`
    /// past `max_qp`.
    fn create_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<Qp>;

    /// `ibv_modify_qp`: applies the attributes `mask` selects, atomically.
    ///
    /// # Errors
    /// `EINVAL` when the transition table refuses it ([`crate::check_modify`]) or an attribute
    /// value is out of range; nothing changes then.
    fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;

    /// `ibv_query_qp`: the current attributes and the creation attributes.
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle.
    fn query_qp(&self, qp: QpHandle) -> Result<(QpAttr, QpInitAttr)>;

    /// `ibv_destroy_qp`. Outstanding WRs are discarded without completions.
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle.
    fn destroy_qp(&mut self, qp: QpHandle) -> Result<()>;

    /// `ibv_post_send`: posts `wrs` in order.
    ///
    /// # Errors
    /// A [`PostError`] naming the first WR not posted (`bad_wr`): `EINVAL` in RESET/INIT/RTR,
    /// for too many SGEs or a malformed WR; `ENOMEM` when the send queue is full.
    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr]) -> Result<(), PostError>;

    /// `ibv_post_recv`: posts `wrs` in order.
    ///
    /// # Errors
    /// A [`PostError`] naming the first WR not posted: `EINVAL` in RESET, for too many SGEs or
    /// on a QP created with an SRQ; `ENOMEM` when the receive queue is full.
    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr]) -> Result<(), PostError>;

    /// `ibv_create_srq`: an empty shared receive queue in `pd` holding at least
    /// `init.attr.max_wr` WRs of up to `init.attr.max_sge` SGEs; a non-zero
    /// `init.attr.srq_limit` arms the limit (rxe `rxe_srq_from_init`). [`Device::query_srq`]
    /// reports what was granted (man:ibv_create_srq.3: at least what was asked).
    ///
    /// # Errors
    /// `EINVAL` for an unknown PD, `max_wr` of 0 or above `max_srq_wr`, `max_sge` above
    /// `max_srq_sge` (rxe `rxe_srq_chk_init`); `ENOMEM` past `max_srq`; `EOPNOTSUPP` on a
    /// device without SRQs (libibverbs' dummy `create_srq`).
    fn create_srq(&mut self, pd: PdHandle, init: &SrqInitAttr) -> Result<SrqHandle>;

    /// `ibv_modify_srq`: applies what `mask` selects, all or nothing: [`SrqAttrMask::MAX_WR`]
    /// resizes the queue, [`SrqAttrMask::LIMIT`] arms the limit (0 disarms it).
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle, a `max_wr` of 0, above `max_srq_wr`, below the WRs the
    /// SRQ holds or below the armed limit, or a `srq_limit` above the SRQ's `max_wr`
    /// (rxe `rxe_srq_chk_attr`, `rxe_queue_resize`); on a device that cannot resize
    /// (mlx5 `mlx5_ib_modify_srq`), `MAX_WR` is `EINVAL`.
    fn modify_srq(&mut self, srq: SrqHandle, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()>;

    /// `ibv_query_srq`: `max_wr`, `max_sge` and the current `srq_limit` (0 once the limit
    /// event fired, man:ibv_query_srq.3).
    ///
    /// # Errors
    /// `EINVAL` for an unknown handle.
    fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr>;

    /// `ibv_destroy_srq`. Receive WRs still in the SRQ are discarded without completions.
    ///
    /// # Errors
    /// `EBUSY` while a QP uses the SRQ (kernel `ib_destroy_srq_user`, `srq->usecnt`;
    /// man:ibv_create_srq.3 NOTES); `EINVAL` for an unknown handle.
    fn destroy_srq(&mut self, srq: SrqHandle) -> Result<()>;

    /// `ibv_post_srq_recv`: posts `wrs` in order to the SRQ.
    ///
    /// # Errors
    /// A [`PostError`] naming the first WR not posted: `ENOMEM` when the SRQ is full, `EINVAL`
    /// for more SGEs than its `max_sge` (checked in that order, as rxe's `post_one_recv`
    /// does); `EINVAL` (`bad_wr` 0) for an unknown handle.
    fn post_srq_recv(&mut self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<(), PostError>;

    /// `ibv_get_async_event` on a non-blocking async fd: the oldest pending async event, or
    /// `None`. Events are handed over already acknowledged (`ibv_ack_async_event` is implied).
    fn get_async_event(&mut self) -> Option<AsyncEvent>;

    /// `ibv_attach_mcast`: UD QP `qp` receives the datagrams sent to multicast group `gid`
    /// (`lid`: the group's LID, 0 on RoCE). Attaching twice is not an error.
    ///
    /// # Errors
    /// `EINVAL` for a GID that is not a multicast one (`ff00::/8`, or IPv4-mapped class D), a
    /// QP that is not UD, or an unknown handle (Linux `ib_attach_mcast`); `ENOMEM` past the
    /// device's group limits; `EOPNOTSUPP` for a device without multicast (this default).
    fn attach_mcast(&mut self, qp: QpHandle, gid: Gid, lid: u16) -> Result<()> {
        let _ = (qp, gid, lid);
        Err(Error::new(
            Errno::EOPNOTSUPP,
            "ibv_attach_mcast: no multicast on this device",
        ))
    }

    /// `ibv_detach_mcast`: undoes [`attach_mcast`](Self::attach_mcast).
    ///
    /// # Errors
    /// `EINVAL` when the QP is not attached to the group, or as `attach_mcast`.
    fn detach_mcast(&mut self, qp: QpHandle, gid: Gid, lid: u16) -> Result<()> {
        let _ = (qp, gid, lid);
        Err(Error::new(
            Errno::EOPNOTSUPP,
            "ibv_detach_mcast: no multicast on this device",
        ))
    }
}

/// A management datagram received on the GSI endpoint (QP1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GsiDatagram {
    /// The sender's port GID (RoCEv2: its IPv4-mapped IP address).
    pub peer: Gid,
    /// The MAD: 256 bytes when well formed (cm-spec §1.4); the CM validates it.
    pub mad: Vec<u8>,
}

/// The General Services Interface endpoint (QP1, Q_Key 0x80010000) through which the connection
/// manager sends and receives its MADs (cm-spec §1.1–1.3).
///
/// The simulated RNIC carries MADs as RoCEv2 UD SEND_ONLY packets to QP1 of the destination;
/// a hardware backend, whose QP1 the kernel owns, carries the same bytes over a host UDP socket.
pub trait GsiEndpoint {
    /// Sends one MAD to the GSI QP of the port whose GID is `dst`. Delivery is unreliable, as UD
    /// is; the CM retransmits.
    ///
    /// # Errors
    /// `EINVAL` when `mad` is not 256 bytes; `ENETUNREACH` when `dst` cannot be routed.
    fn gsi_send(&mut self, dst: Gid, mad: &[u8]) -> Result<()>;

    /// The oldest received MAD not yet taken, or `None`.
    fn gsi_recv(&mut self) -> Option<GsiDatagram>;
}
