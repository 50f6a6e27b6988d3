//! One connected stream rsocket's verbs resources and data path: the QP and CQ, the send ring,
//! the receive slots, the credits, and the iomap tables (the protocol of [`super::wire`]).
//!
//! Sending: `rsend`/`riowrite` copy the application's bytes into the send ring (a region the
//! device owns) and queue them; [`Conn::push`] posts what is queued, in order, as far as
//! credits and the send queue allow: stream bytes as SEND_WITH_IMM of at most the peer's slot
//! size (what queued up while no credit was left goes out in as few messages as possible),
//! `riowrite` bytes as RDMA WRITEs. Ring bytes are free again when the WR that carried them
//! completes (RC completes in order).
//!
//! Receiving: each completed receive is a DATA message (its bytes stay in its slot until the
//! application has read them all; then the slot is reposted and counted as owed to the
//! peer), a CTRL message (applied, reposted, owed) or a CREDIT (reposted, not owed). Owed
//! credits travel in the immediate of the next message; when half the slots are owed and
//! nothing is queued to carry them, a CREDIT goes.

use super::wire::{ConnData, Ctrl, Imm, Iomap, Kind, SPARE_SLOTS};
use cm_core::api::{CmIdHandle, RdmaCm};
use rnic_sim::{ExternalMemory, SimDevice};
use std::collections::VecDeque;
use std::sync::Arc;
use verbs_core::{
    AccessFlags, CompChannel, CqHandle, Device, Mr, MrHandle, PdHandle, Qp, QpCap, QpInitAttr,
    RecvWr, SendWr, Sge, WcFlags, WcStatus, WorkCompletion,
};

/// `wr_id` bit of receives (sends carry the ring position after their bytes).
const RECV: u64 = 1 << 63;

/// The largest RDMA WRITE one `riowrite` chunk is posted as.
const MAX_WRITE: u64 = 1 << 20;

/// The free ring space at which an rsocket is writable (rsocket.c `RS_SNDLOWAT`).
pub const SNDLOWAT: u64 = 2048;

/// The sizes of a connection's resources, fixed when it is made (from the socket options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Send ring bytes (`SO_SNDBUF`).
    pub ring: u64,
    /// Receive slots advertised (credits the peer gets).
    pub slots: u32,
    /// Bytes per receive slot.
    pub slot_size: u32,
    /// Send queue depth (`RDMA_SQSIZE`).
    pub sq_depth: u32,
    /// Iomap announcements this side keeps (`RDMA_IOMAPSIZE`).
    pub iomap_entries: u16,
}

impl Sizes {
    /// What this side says about itself in the REQ/REP.
    pub fn conn_data(&self) -> ConnData {
        ConnData {
            slots: u16::try_from(self.slots).unwrap_or(u16::MAX),
            slot_size: self.slot_size,
            iomap_entries: self.iomap_entries,
        }
    }
}

/// Bytes queued in the send ring and how they go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Stream bytes.
    Data(u64),
    /// One encoded control message of this many bytes.
    Ctrl(u64),
    /// `riowrite` bytes for `addr`/`rkey` on the peer.
    Write { len: u64, addr: u64, rkey: u32 },
}

/// Stream bytes received and not read yet: `len` bytes from `off` in slot `slot`.
#[derive(Debug, Clone, Copy)]
struct Rx {
    slot: u32,
    off: u32,
    len: u32,
}

/// A region this side registered with `riomap`.
#[derive(Debug)]
struct LocalMap {
    addr: u64,
    len: u64,
    mr: MrHandle,
    /// Its index in the peer's table (`PROT_WRITE` maps only).
    index: Option<u16>,
}

/// What the peer told us through the connection (read by the rsocket after each poll).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerState {
    /// SHUTDOWN received: end-of-file once the data before it is read.
    pub eof: bool,
    /// DISCONNECT received.
    pub gone: bool,
}

/// A connected rsocket's resources and protocol state. See the module docs.
#[derive(Debug)]
pub struct Conn {
    qp: Qp,
    cq: CqHandle,
    pd: PdHandle,
    send_mr: Mr,
    recv_mr: Mr,
    sizes: Sizes,
    /// Ring positions (monotonic byte counts): freed up to `head`, posted up to `posted`,
    /// written up to `tail`.
    head: u64,
    posted: u64,
    tail: u64,
    pending: VecDeque<Pending>,
    /// Control messages not in the ring yet (it was full); stream bytes wait behind them.
    unsent: VecDeque<Ctrl>,
    sq_free: u32,
    /// DATA/CTRL messages the peer can still take; negative never (posting checks).
    credits: u32,
    peer_slot: u32,
    peer_iomap_entries: u16,
    rx: VecDeque<Rx>,
    owed: u32,
    local_maps: Vec<LocalMap>,
    remote_maps: Vec<Option<Iomap>>,
    /// What the peer said.
    pub peer: PeerState,
    /// A send completed in error or a post failed: the connection is broken.
    pub failed: bool,
    /// Malformed messages from the peer, dropped.
    pub bad: u64,
}

/// Undoes what [`Conn::create`] did when a later step fails.
fn release(
    cm: &mut RdmaCm,
    dev: &mut SimDevice,
    id: CmIdHandle,
    qp: Option<Qp>,
    cq: CqHandle,
    mrs: &[MrHandle],
) {
    if let Some(qp) = qp {
        let _ = cm.detach_qp(id);
        let _ = dev.destroy_qp(qp.handle);
    }
    let _ = dev.destroy_cq(cq);
    for mr in mrs {
        let _ = dev.dereg_mr(*mr);
    }
}

impl Conn {
    /// Makes the resources of the connection of `id`: a CQ reporting to `comp` (armed), an RC
    /// QP on the id (INIT, through the CM as `rdma_create_qp`), the send ring and the receive
    /// slots (all posted). The peer's parameters come later ([`Conn::set_peer`]).
    ///
    /// # Errors
    /// The device's error (e.g. `ENOMEM` at a limit); nothing is left behind.
    pub fn create(
        cm: &mut RdmaCm,
        dev: &mut SimDevice,
        id: CmIdHandle,
        pd: PdHandle,
        comp: &CompChannel,
        sizes: Sizes,
    ) -> Result<Conn, verbs_core::Error> {
        let rq = sizes.slots + SPARE_SLOTS;
        let cq = dev.create_cq(sizes.sq_depth + rq, Some(comp))?;
        let cap = QpCap {
            max_send_wr: sizes.sq_depth,
            max_recv_wr: rq,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = match cm.create_qp(dev, id, pd, &QpInitAttr::rc(cq, cq, cap, true)) {
            Ok(qp) => qp,
            Err(e) => {
                release(cm, dev, id, None, cq, &[]);
                return Err(e);
            }
        };
        let send_mr = match dev.reg_mr(pd, sizes.ring as usize, AccessFlags::empty()) {
            Ok(m) => m,
            Err(e) => {
                release(cm, dev, id, Some(qp), cq, &[]);
                return Err(e);
            }
        };
        let recv_len = rq as usize * sizes.slot_size as usize;
        let recv_mr = match dev.reg_mr(pd, recv_len, AccessFlags::LOCAL_WRITE) {
            Ok(m) => m,
            Err(e) => {
                release(cm, dev, id, Some(qp), cq, &[send_mr.handle]);
                return Err(e);
            }
        };
        let mut c = Conn {
            qp,
            cq,
            pd,
            send_mr,
            recv_mr,
            sizes,
            head: 0,
            posted: 0,
            tail: 0,
            pending: VecDeque::new(),
            unsent: VecDeque::new(),
            sq_free: sizes.sq_depth,
            credits: 0,
            peer_slot: 0,
            peer_iomap_entries: 0,
            rx: VecDeque::new(),
            owed: 0,
            local_maps: Vec::new(),
            remote_maps: vec![None; usize::from(sizes.iomap_entries)],
            peer: PeerState::default(),
            failed: false,
            bad: 0,
        };
        let posted = (0..rq).try_for_each(|s| c.repost(dev, s));
        let armed = dev.req_notify_cq(cq, false);
        if let Err(e) = posted.and(armed) {
            c.destroy(cm, dev, id);
            return Err(e);
        }
        Ok(c)
    }

    /// The peer's parameters, from its REQ or REP: its slots become our credits.
    pub fn set_peer(&mut self, d: ConnData) {
        self.credits = u32::from(d.slots);
        self.peer_slot = d.slot_size;
        self.peer_iomap_entries = d.iomap_entries;
    }

    /// The CQ, whose events name this connection.
    pub fn cq(&self) -> CqHandle {
        self.cq
    }

    /// Frees everything: the QP (detached from the id), the CQ, the regions. The id itself is
    /// the caller's.
    pub fn destroy(self, cm: &mut RdmaCm, dev: &mut SimDevice, id: CmIdHandle) {
        let mut mrs = vec![self.send_mr.handle, self.recv_mr.handle];
        mrs.extend(self.local_maps.iter().map(|m| m.mr));
        release(cm, dev, id, Some(self.qp), self.cq, &mrs);
    }

    fn repost(&mut self, dev: &mut SimDevice, slot: u32) -> Result<(), verbs_core::Error> {
        let sge = self.recv_mr.sge(
            u64::from(slot) * u64::from(self.sizes.slot_size),
            self.sizes.slot_size,
        );
        dev.post_recv(
            self.qp.handle,
            &[RecvWr::new(RECV | u64::from(slot), vec![sge])],
        )
        .map_err(|e| e.error)
    }

    /// Reposts `slot` and counts it owed to the peer (a QP already in ERR refuses: ignored,
    /// the connection is ending).
    fn release_slot(&mut self, dev: &mut SimDevice, slot: u32, owed: bool) {
        let _ = self.repost(dev, slot);
        if owed {
            self.owed += 1;
        }
    }

    // ---- sending --------------------------------------------------------------------------

    /// Free bytes in the send ring.
    pub fn ring_free(&self) -> u64 {
        self.sizes.ring - (self.tail - self.head)
    }

    /// Whether `rsend` would take bytes now ([`SNDLOWAT`] free, or the whole ring if smaller).
    pub fn can_write(&self) -> bool {
        self.ring_free() >= SNDLOWAT.min(self.sizes.ring)
    }

    /// Nothing queued and every posted WR completed: what `rshutdown` waits for.
    pub fn drained(&self) -> bool {
        self.pending.is_empty() && self.unsent.is_empty() && self.sq_free == self.sizes.sq_depth
    }

    /// Copies `data` to the ring at `tail` (wrapping); the caller checked the space.
    fn put(&mut self, dev: &mut SimDevice, data: &[u8]) {
        let cap = self.sizes.ring;
        let off = self.tail % cap;
        let first = (cap - off).min(data.len() as u64) as usize;
        let _ = dev.mr_write(self.send_mr.handle, off, &data[..first]);
        if first < data.len() {
            let _ = dev.mr_write(self.send_mr.handle, 0, &data[first..]);
        }
        self.tail += data.len() as u64;
    }

    /// Queues as much of `data` as the ring takes, behind any control message still waiting
    /// for room; returns how much.
    pub fn write(&mut self, dev: &mut SimDevice, data: &[u8]) -> usize {
        self.queue_ctrl(dev);
        if !self.unsent.is_empty() {
            return 0;
        }
        let n = (data.len() as u64).min(self.ring_free()) as usize;
        if n == 0 {
            return 0;
        }
        self.put(dev, &data[..n]);
        match self.pending.back_mut() {
            Some(Pending::Data(len)) => *len += n as u64,
            _ => self.pending.push_back(Pending::Data(n as u64)),
        }
        n
    }

    /// Queues a control message after everything written before it (it waits in a queue of
    /// its own while the ring is full).
    pub fn write_ctrl(&mut self, dev: &mut SimDevice, c: Ctrl) {
        self.unsent.push_back(c);
        self.queue_ctrl(dev);
    }

    /// Moves the control messages that wait for ring space into the ring, in order.
    fn queue_ctrl(&mut self, dev: &mut SimDevice) {
        while let Some(c) = self.unsent.front() {
            let b = c.encode();
            if (b.len() as u64) > self.ring_free() {
                break;
            }
            self.put(dev, &b);
            self.pending.push_back(Pending::Ctrl(b.len() as u64));
            self.unsent.pop_front();
        }
    }

    fn sges(&self, from: u64, n: u64) -> Vec<Sge> {
        let cap = self.sizes.ring;
        let off = from % cap;
        let first = (cap - off).min(n);
        let mut v = vec![self.send_mr.sge(off, first as u32)];
        if first < n {
            v.push(self.send_mr.sge(0, (n - first) as u32));
        }
        v
    }

    fn post(&mut self, dev: &mut SimDevice, wr: SendWr) -> bool {
        match dev.post_send(self.qp.handle, &[wr]) {
            Ok(()) => {
                self.sq_free -= 1;
                true
            }
            Err(e) => {
                tracing::debug!(qpn = self.qp.qp_num, "rsocket: post failed: {}", e.error);
                self.failed = true;
                false
            }
        }
    }

    fn take_owed(&mut self) -> u16 {
        let n = self.owed.min(u32::from(u16::MAX));
        self.owed -= n;
        n as u16
    }

    /// Posts what is queued, in order, as far as credits and the send queue allow (one send
    /// queue entry stays free for a CREDIT); then a CREDIT if half the slots are owed and
    /// nothing carried them. Nothing is posted before the peer's parameters are known.
    pub fn push(&mut self, dev: &mut SimDevice) {
        if self.peer_slot == 0 || self.failed {
            return;
        }
        self.queue_ctrl(dev);
        while let Some(&front) = self.pending.front() {
            if self.sq_free < 2 {
                break;
            }
            let (n, wr_kind) = match front {
                Pending::Data(len) | Pending::Ctrl(len) => {
                    if self.credits == 0 {
                        break;
                    }
                    let data = matches!(front, Pending::Data(_));
                    let n = if data {
                        len.min(u64::from(self.peer_slot))
                    } else {
                        len
                    };
                    (n, Some(if data { Kind::Data } else { Kind::Ctrl }))
                }
                Pending::Write { len, .. } => (len.min(MAX_WRITE), None),
            };
            let (from, end) = (self.posted, self.posted + n);
            let sges = self.sges(from, n);
            let wr = match (wr_kind, front) {
                (Some(kind), _) => {
                    let credits = self.take_owed();
                    SendWr::send_with_imm(end, sges, Imm { kind, credits }.encode())
                }
                (None, Pending::Write { addr, rkey, .. }) => {
                    SendWr::rdma_write(end, sges, addr, rkey)
                }
                (None, _) => break,
            };
            if !self.post(dev, wr) {
                return;
            }
            if wr_kind.is_some() {
                self.credits -= 1;
            }
            self.posted = end;
            match self.pending.front_mut() {
                Some(Pending::Data(len) | Pending::Ctrl(len)) => *len -= n,
                Some(Pending::Write { len, addr, .. }) => {
                    *len -= n;
                    *addr += n;
                }
                None => {}
            }
            if matches!(
                self.pending.front(),
                Some(Pending::Data(0) | Pending::Ctrl(0) | Pending::Write { len: 0, .. })
            ) {
                self.pending.pop_front();
            }
        }
        let threshold = (self.sizes.slots / 2).max(1);
        if self.owed >= threshold && self.sq_free >= 1 {
            let credits = self.take_owed();
            let imm = Imm {
                kind: Kind::Credit,
                credits,
            };
            self.post(
                dev,
                SendWr::send_with_imm(self.posted, Vec::new(), imm.encode()),
            );
        }
    }

    // ---- receiving ------------------------------------------------------------------------

    /// Whether stream bytes wait to be read.
    pub fn has_data(&self) -> bool {
        !self.rx.is_empty()
    }

    /// Copies up to `buf.len()` received bytes into `buf` (without consuming them when
    /// `peek`); fully read slots are reposted and owed. Returns the count.
    pub fn read(&mut self, dev: &mut SimDevice, buf: &mut [u8], peek: bool) -> usize {
        let mut done = 0;
        let mut i = 0;
        while done < buf.len() {
            let Some(r) = self.rx.get(i).copied() else {
                break;
            };
            let n = (r.len - r.off).min((buf.len() - done) as u32);
            let at = u64::from(r.slot) * u64::from(self.sizes.slot_size) + u64::from(r.off);
            let _ = dev.mr_read(self.recv_mr.handle, at, &mut buf[done..done + n as usize]);
            done += n as usize;
            if peek {
                i += 1;
                continue;
            }
            if r.off + n == r.len {
                self.rx.pop_front();
                self.release_slot(dev, r.slot, true);
            } else if let Some(front) = self.rx.front_mut() {
                front.off += n;
            }
        }
        done
    }

    /// Polls the CQ empty and applies every completion, then re-arms it.
    pub fn poll(&mut self, dev: &mut SimDevice) {
        let mut wcs = Vec::new();
        loop {
            wcs.clear();
            match dev.poll_cq(self.cq, 64, &mut wcs) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            for wc in &wcs {
                self.complete(dev, wc);
            }
        }
        let _ = dev.req_notify_cq(self.cq, false);
    }

    fn complete(&mut self, dev: &mut SimDevice, wc: &WorkCompletion) {
        if wc.wr_id & RECV == 0 {
            self.sq_free += 1;
            if wc.status == WcStatus::Success {
                self.head = self.head.max(wc.wr_id);
            } else {
                tracing::debug!(status = ?wc.status, "rsocket: send completion in error");
                self.failed = true;
            }
            return;
        }
        let slot = (wc.wr_id & !RECV) as u32;
        if wc.status != WcStatus::Success || slot >= self.sizes.slots + SPARE_SLOTS {
            return; // flushed: the connection is ending
        }
        let imm = wc
            .wc_flags
            .contains(WcFlags::WITH_IMM)
            .then(|| Imm::decode(wc.imm_data))
            .flatten();
        let Some(imm) = imm else {
            self.bad += 1;
            self.release_slot(dev, slot, true);
            return;
        };
        self.credits = self.credits.saturating_add(u32::from(imm.credits));
        match imm.kind {
            Kind::Data if wc.byte_len > 0 => self.rx.push_back(Rx {
                slot,
                off: 0,
                len: wc.byte_len,
            }),
            Kind::Data => self.release_slot(dev, slot, true),
            Kind::Credit => self.release_slot(dev, slot, false),
            Kind::Ctrl => {
                let mut b = vec![0u8; (wc.byte_len as usize).min(64)];
                let at = u64::from(slot) * u64::from(self.sizes.slot_size);
                let _ = dev.mr_read(self.recv_mr.handle, at, &mut b);
                match Ctrl::decode(&b) {
                    Some(Ctrl::Shutdown) => self.peer.eof = true,
                    Some(Ctrl::Disconnect) => self.peer.gone = true,
                    Some(Ctrl::Iomap(m)) => match self.remote_maps.get_mut(usize::from(m.index)) {
                        Some(e) => *e = Some(m),
                        None => self.bad += 1,
                    },
                    None => self.bad += 1,
                }
                self.release_slot(dev, slot, true);
            }
        }
    }

    // ---- iomaps ---------------------------------------------------------------------------

    /// `riomap`: registers `mem` (the application's `len` bytes at `addr`) on the
    /// connection's PD; with `writable` (`PROT_WRITE`) it takes a free index of the peer's
    /// table and the announcement is queued. Returns the offset the map is named by (`offset`,
    /// or `addr` for `offset == -1`).
    ///
    /// # Errors
    /// `ENOMEM` when the peer's table is full (or it keeps none); the device's registration
    /// error.
    pub fn iomap(
        &mut self,
        dev: &mut SimDevice,
        mem: Arc<dyn ExternalMemory>,
        addr: u64,
        writable: bool,
        offset: i64,
    ) -> Result<u64, i32> {
        let index = if writable {
            let used: Vec<u16> = self.local_maps.iter().filter_map(|m| m.index).collect();
            let free = (0..self.peer_iomap_entries).find(|i| !used.contains(i));
            Some(free.ok_or(libc::ENOMEM)?)
        } else {
            None
        };
        let access = if writable {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
        } else {
            AccessFlags::LOCAL_WRITE
        };
        let len = mem.len() as u64;
        let mr = dev
            .reg_mr_external(self.pd, mem, addr, access)
            .map_err(|e| e.errno.code())?;
        let offset = if offset == -1 { addr } else { offset as u64 };
        self.local_maps.push(LocalMap {
            addr,
            len,
            mr: mr.handle,
            index,
        });
        if let Some(index) = index {
            let m = Iomap {
                index,
                offset,
                addr: mr.addr,
                len,
                rkey: mr.rkey,
            };
            self.write_ctrl(dev, Ctrl::Iomap(m));
        }
        Ok(offset)
    }

    /// `riounmap`: deregisters the map of exactly `len` bytes at `addr` (the peer is not told,
    /// as with rsocket.c).
    ///
    /// # Errors
    /// `EINVAL` when no such map exists.
    pub fn iounmap(&mut self, dev: &mut SimDevice, addr: u64, len: u64) -> Result<(), i32> {
        let i = self
            .local_maps
            .iter()
            .position(|m| m.addr == addr && m.len == len)
            .ok_or(libc::EINVAL)?;
        let m = self.local_maps.remove(i);
        let _ = dev.dereg_mr(m.mr);
        if let Some(index) = m.index {
            self.unsent
                .retain(|u| !matches!(u, Ctrl::Iomap(q) if q.index == index));
        }
        Ok(())
    }

    /// `riowrite`: queues as much of `data` as the ring takes (and the peer's map holds) for
    /// the peer's map containing `offset`. Returns how much.
    ///
    /// # Errors
    /// `EINVAL` when no map the peer announced contains `offset`.
    pub fn iowrite(&mut self, dev: &mut SimDevice, data: &[u8], offset: u64) -> Result<usize, i32> {
        let m = self
            .remote_maps
            .iter()
            .flatten()
            .find(|m| offset >= m.offset && offset - m.offset < m.len)
            .copied()
            .ok_or(libc::EINVAL)?;
        self.queue_ctrl(dev);
        if !self.unsent.is_empty() {
            return Ok(0);
        }
        let room = m.len - (offset - m.offset);
        let n = (data.len() as u64).min(room).min(self.ring_free()) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.put(dev, &data[..n]);
        self.pending.push_back(Pending::Write {
            len: n as u64,
            addr: m.addr + (offset - m.offset),
            rkey: m.rkey,
        });
        Ok(n)
    }
}
