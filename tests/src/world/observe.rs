//! Observation: what the applications do after every simulation event — drain the wire taps,
//! name the fabric's drops, read (and ack) CM events, poll CQs, check the S6 data pattern, read
//! async events (`world/async_events.rs`), note QPs in ERR — and record it in the
//! [`History`](super::History).

use super::config::{host_ip, MS, SLOT_BYTES};
use super::node::Dir;
use super::payload::matches_pattern;
use super::{errno_of, Call, EventMode, Fault, Node, Op, Queue, Record, WireMsg, World};
use cm_core::api::{CmEvent, CmEventType};
use cm_core::engine::IbCmId;
use rnic_sim::fabric::FabricEventKind;
use verbs_core::{Device, SimTime, WcOpcode, WcStatus, WorkCompletion};

impl World {
    /// What the applications do after every simulation event: drain the wire taps, match the
    /// fabric's drops, read (and ack) CM events, poll CQs, note QPs in ERR.
    ///
    /// A host nothing touched since it was last observed ([`Node`]'s `dirty` flag: no
    /// datagram, timeout or transmit pass, no call of the World's) has nothing new to read, so
    /// it is skipped unless one of its deferred acks is due: the history is the same as if it
    /// were read again, at a fraction of the cost (most observations follow an event on one
    /// host, and every World call observes before and after).
    pub(super) fn observe(&mut self) {
        let now = self.sim.now();
        for h in 0..self.apps.len() {
            // A hostile host's application only forges: it reads no event, polls no CQ.
            if self.history.hostile.get(h).copied().unwrap_or(false) {
                self.drain_wire(h);
            } else if self.take_dirty(h) || self.acks.iter().any(|a| a.1 == h && a.0 <= now) {
                self.observe_host(h, now);
                // An `rdma_notify` answering a COMM_EST may have queued ESTABLISHED.
                if self.take_dirty(h) {
                    self.observe_host(h, now);
                }
            }
        }
        self.match_trace();
        self.refresh_qp_states();
    }

    /// Marks host `h` for the next observation.
    pub(super) fn touch(&mut self, h: usize) {
        if let Some(n) = self.sim.endpoint_mut(h) {
            n.touch();
        }
    }

    /// Marks every host for the next observation (before handing out the whole simulation).
    pub(super) fn touch_all(&mut self) {
        for h in 0..self.sim.endpoints().len() {
            self.touch(h);
        }
    }

    /// Host `h`'s node for the application's reads (events, acks, CQs), which change its
    /// state without needing another observation: forgets its timer only.
    pub(super) fn node_quiet(&mut self, h: usize) -> Option<&mut Node> {
        let node = self.sim.endpoint_mut(h)?;
        node.timeout.set(None);
        Some(node)
    }

    /// Whether host `h` changed since it was last observed; clears the mark.
    fn take_dirty(&mut self, h: usize) -> bool {
        self.sim
            .endpoint_mut(h)
            .is_some_and(|n| std::mem::take(&mut n.dirty))
    }

    pub(super) fn drain_wire(&mut self, h: usize) {
        let Some(node) = self.sim.endpoint_mut(h) else {
            return;
        };
        if self.cfg.capture {
            for c in node.host.nic_mut().take_capture() {
                if c.flow.src.ip() == host_ip(h) {
                    self.captures.push(c);
                }
            }
        }
        if node.wire.is_empty() {
            return;
        }
        let mut wire = std::mem::take(&mut node.wire);
        let app = self.apps[h];
        for &(at, dir, peer, msg) in &wire {
            match dir {
                Dir::Tx => {
                    self.tx_meta[h].push(msg);
                    if msg.attr == 0 {
                        self.history.rc_packets[h] += 1;
                    } else {
                        self.push(
                            at,
                            h,
                            app.epoch,
                            Record::Wire {
                                tx: true,
                                peer,
                                msg,
                            },
                        );
                    }
                }
                Dir::TxDropped { .. } | Dir::TxDelayed { .. } => {
                    // The host sent it: recorded now, with the fault; the network never
                    // carries a dropped one, a delayed one enters it later (`TxReleased`).
                    if msg.attr == 0 {
                        self.history.rc_packets[h] += 1;
                    } else {
                        let rec = Record::Wire {
                            tx: true,
                            peer,
                            msg,
                        };
                        self.push(at, h, app.epoch, rec);
                    }
                    let fault = match dir {
                        Dir::TxDelayed { nth, ns } => Fault::Delayed {
                            msg,
                            nth,
                            by_ns: ns,
                        },
                        Dir::TxDropped { nth } => Fault::TargetedDrop { msg, nth },
                        _ => continue,
                    };
                    self.push(at, h, app.epoch, Record::Fault(fault));
                }
                Dir::TxReleased => self.tx_meta[h].push(msg),
                Dir::Rx => self.push(
                    at,
                    h,
                    app.epoch,
                    Record::Wire {
                        tx: false,
                        peer,
                        msg,
                    },
                ),
                Dir::RxDropped => {
                    self.push(at, h, app.epoch, Record::Fault(Fault::Corrupted { msg }))
                }
            }
        }
        wire.clear();
        if let Some(node) = self.sim.endpoint_mut(h) {
            node.wire = wire;
        }
    }

    fn observe_host(&mut self, h: usize, now: SimTime) {
        let app = self.apps[h];
        self.drain_wire(h);
        // Due acks.
        if !self.acks.is_empty() {
            let mut i = 0;
            while i < self.acks.len() {
                if self.acks[i].0 <= now && self.acks[i].1 == h {
                    let (_, _, epoch, ev) = self.acks.remove(i);
                    if epoch == app.epoch {
                        self.ack(h, ev);
                    }
                } else {
                    i += 1;
                }
            }
        }
        if app.mode != EventMode::NeverRead {
            loop {
                let Some(node) = self.node_quiet(h) else {
                    return;
                };
                let (cm, dev) = node.host.split();
                // `get_cm_event` on an empty channel builds an EAGAIN error (a String): ask first.
                if cm.pending_events(app.ch) == 0 {
                    break;
                }
                let Ok(ev) = cm.get_cm_event(dev, now, app.ch) else {
                    break;
                };
                let comm_id = cm.engine().local_comm_id(IbCmId(ev.id.0)).unwrap_or(0);
                let timewait_ns = if ev.event == CmEventType::Disconnected {
                    cm.qp(ev.id)
                        .and_then(|qp| dev.query_qp(qp.handle).ok())
                        .map_or(0, |(a, _)| (1u64 << a.timeout.saturating_sub(8)) * MS)
                } else {
                    0
                };
                self.push(
                    now,
                    h,
                    app.epoch,
                    Record::Event {
                        id: ev.id.0,
                        event: ev.event,
                        status: ev.status,
                        comm_id,
                        timewait_ns,
                    },
                );
                match app.mode {
                    EventMode::AckAtOnce => self.ack(h, ev),
                    EventMode::AckAfter(d) => self.acks.push((now.plus_nanos(d), h, app.epoch, ev)),
                    EventMode::NeverAck | EventMode::NeverRead => {}
                }
            }
        }
        self.poll_cqs(h, now);
    }

    fn ack(&mut self, h: usize, ev: CmEvent) {
        let (id, event) = (ev.id.0, ev.event);
        let Some(node) = self.node_quiet(h) else {
            return;
        };
        let r = node.host.split().0.ack_cm_event(ev);
        let errno = errno_of(&r);
        self.record(
            h,
            Record::Call {
                call: Call::Ack { id, event },
                errno,
            },
        );
    }

    fn poll_cqs(&mut self, h: usize, now: SimTime) {
        let app = self.apps[h];
        let mut wcs = std::mem::take(&mut self.wcs);
        for (cq, queue) in [(app.send_cq, Queue::Send), (app.recv_cq, Queue::Recv)] {
            wcs.clear();
            let Some(node) = self.node_quiet(h) else {
                break;
            };
            let dev = node.host.split().1;
            // Fewer than asked: the CQ is empty now (asking again would only build an error).
            while matches!(dev.poll_cq(cq, 64, &mut wcs), Ok(64)) {}
            for wc in &wcs {
                let data_ok = self.check_data(h, wc);
                // Only `wr_id`, `status` and `qp_num` are defined in an error completion
                // (man:ibv_poll_cq.3; the devices poison the rest): its opcode and length
                // are recorded as SEND, 0.
                let ok = wc.status == WcStatus::Success;
                let (opcode, byte_len) = if ok {
                    (wc.opcode, wc.byte_len)
                } else {
                    (WcOpcode::Send, 0)
                };
                self.push(
                    now,
                    h,
                    app.epoch,
                    Record::Completion {
                        qpn: wc.qp_num,
                        wr_id: wc.wr_id,
                        queue,
                        opcode,
                        status: wc.status,
                        byte_len,
                        data_ok,
                    },
                );
            }
        }
        self.wcs = wcs;
        // After the CQs: a completion written before an event (the flush before
        // LAST_WQE_REACHED) is polled before the event is read.
        self.read_async_events(h, now);
    }

    /// S6 for one completion: reads the destination and compares it with the pattern.
    fn check_data(&mut self, h: usize, wc: &WorkCompletion) -> bool {
        let Some(p) = self.pending.remove(&wc.wr_id) else {
            return true;
        };
        self.free_slots(p.held);
        if wc.status != WcStatus::Success {
            return true;
        }
        let seed = self.data_seed;
        let mut buf = [0u8; SLOT_BYTES as usize];
        let tag_of = |b: &[u8]| {
            let mut id = [0u8; 8];
            id.copy_from_slice(&b[..8]);
            u64::from_le_bytes(id)
        };
        match p.op {
            Op::Recv => {
                let n = (wc.byte_len as usize).min(buf.len());
                if n < 8 || !self.read_mr(h, p.off, &mut buf[..n]) {
                    return false;
                }
                matches_pattern(seed, tag_of(&buf), 0, &buf[8..n], 8)
            }
            Op::Read => {
                let n = p.len as usize;
                if !self.read_mr(h, p.off, &mut buf[..n]) {
                    return false;
                }
                // The slot of the READ region the WR read: same slot index as its destination.
                matches_pattern(seed, 1 << 63 | p.peer as u64, p.base, &buf[..n], 0)
            }
            Op::Write => {
                // The peer's memory, if it is still the life the WRITE went to.
                if self.apps.get(p.peer).map(|a| a.epoch) != Some(p.peer_epoch)
                    || p.epoch != self.apps[h].epoch
                {
                    return true;
                }
                let n = p.len as usize;
                if !self.read_mr(p.peer, p.off, &mut buf[..n]) {
                    return false;
                }
                let tag = tag_of(&buf);
                // A later WRITE to the same slot may have landed already: only a torn or
                // foreign payload is a mismatch.
                tag >= wc.wr_id && matches_pattern(seed, tag, 0, &buf[8..n], 8)
            }
            Op::Send => true,
        }
    }

    /// Reads `buf.len()` bytes at `off` of host `h`'s application MR; false if it cannot.
    pub(super) fn read_mr(&self, h: usize, off: u64, buf: &mut [u8]) -> bool {
        match (self.sim.endpoint(h), self.apps.get(h)) {
            (Some(node), Some(app)) => node
                .host
                .nic()
                .device()
                .mr_read(app.mr.handle, off, buf)
                .is_ok(),
            _ => false,
        }
    }

    /// Names the fabric's new drops and duplicates by the sender's send order.
    pub(super) fn match_trace(&mut self) {
        let end = self.sim.fabric.trace().len();
        for i in self.trace_cursor..end {
            let Some(&ev) = self.sim.fabric.trace().get(i) else {
                break;
            };
            let pid = ev.packet as usize;
            let fault = |h: u8| {
                (
                    usize::from(h),
                    self.apps.get(usize::from(h)).map_or(0, |a| a.epoch),
                )
            };
            match ev.kind {
                FabricEventKind::Sent { .. } => {
                    let last = u8::try_from(self.apps.len().saturating_sub(1)).unwrap_or(u8::MAX);
                    let h = usize::from(super::node::sender(ev.src, last));
                    let k = self.tx_matched.get(h).copied().unwrap_or(0);
                    let msg = self
                        .tx_meta
                        .get(h)
                        .and_then(|v| v.get(k))
                        .copied()
                        .unwrap_or_default();
                    if let Some(m) = self.tx_matched.get_mut(h) {
                        *m += 1;
                    }
                    if self.packets.len() <= pid {
                        self.packets.resize(pid + 1, (0, WireMsg::default()));
                    }
                    self.packets[pid] = (h as u8, msg);
                }
                FabricEventKind::Duplicated { copy } => {
                    let (h, msg) = self.packets.get(pid).copied().unwrap_or_default();
                    let c = copy as usize;
                    if self.packets.len() <= c {
                        self.packets.resize(c + 1, (0, WireMsg::default()));
                    }
                    self.packets[c] = (h, msg);
                    let (h, epoch) = fault(h);
                    self.push(ev.at, h, epoch, Record::Fault(Fault::Duplicated { msg }));
                }
                FabricEventKind::Dropped(reason) => {
                    let (h, msg) = self.packets.get(pid).copied().unwrap_or_default();
                    let (h, epoch) = fault(h);
                    self.push(
                        ev.at,
                        h,
                        epoch,
                        Record::Fault(Fault::Dropped { reason, msg }),
                    );
                }
                _ => {}
            }
        }
        self.trace_cursor = self.trace_cursor.max(end);
    }

    /// Records the QPs of the application that entered ERR since the last call, as the
    /// devices report them ([`SimDevice::take_entered_err`]; no per-QP query).
    pub(super) fn refresh_qp_states(&mut self) {
        for h in 0..self.apps.len() {
            let epoch = self.apps[h].epoch;
            let Some(dev) = self
                .sim
                .endpoint_mut(h)
                .map(|n| n.host.nic_mut().device_mut())
            else {
                continue;
            };
            if !dev.has_entered_err() {
                continue;
            }
            for qpn in dev.take_entered_err() {
                match self.qps.get_mut(&(h, epoch, qpn)) {
                    Some((_, err)) if !*err => *err = true,
                    _ => continue,
                }
                self.record(h, Record::QpErr { qpn });
            }
        }
    }

    pub(super) fn qp_in_err(&self, h: usize, qpn: u32) -> bool {
        let epoch = self.apps[h].epoch;
        self.qps.get(&(h, epoch, qpn)).is_some_and(|q| q.1)
    }
}
