//! What moves rsockets without the application: the layer's rdma_cm events and its CQs'
//! completion events, handled after every step of the node ([`Rsockets::progress`]).
//!
//! rdma_cm, per socket (rsocket.c `rs_do_connect`, `rs_accept`, `rs_handle_cm_event`):
//! ADDR_RESOLVED → `rdma_resolve_route`; ROUTE_RESOLVED → the QP and buffers, `rdma_connect`
//! with this side's [`ConnData`]; ESTABLISHED → connected (the REP's data read on the
//! active side); a listener's CONNECT_REQUEST → a new socket with its QP, `rdma_accept`
//! (or `rdma_reject` for a request that is not librnic's rsocket protocol, a full backlog, no
//! resources), queued for `raccept` at its ESTABLISHED; ADDR/ROUTE_ERROR, UNREACHABLE,
//! REJECTED, CONNECT_ERROR → the connect fails with librdmacm's `ucma_complete` errno;
//! DISCONNECTED → disconnected, answered at once (`rdma_disconnect`: DREP).

use super::conn::Conn;
use super::wire::ConnData;
use super::{Handle, Phase, Rsocket, Rsockets};
use cm_core::api::{CmEvent, CmEventType, ConnParam, RdmaCm};
use rnic_sim::SimDevice;
use verbs_core::{Device, SimTime};

/// The errno of a failed connect's event (librdmacm `ucma_complete`): REJECTED is
/// `ECONNREFUSED`; otherwise the status's errno (UNREACHABLE −110: `ETIMEDOUT`).
fn connect_errno(ev: &CmEvent) -> i32 {
    match (ev.event, ev.status) {
        (CmEventType::Rejected, _) => libc::ECONNREFUSED,
        (_, s) if s < 0 => -s,
        (_, s) if s > 0 => s,
        _ => libc::ECONNREFUSED,
    }
}

/// rdma_conn_param of both sides: no RDMA READ or atomics, retries as rsocket.c (7, RNR 7).
fn conn_param(data: &ConnData) -> ConnParam {
    ConnParam {
        private_data: data.encode().to_vec(),
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

impl Rsockets {
    /// Handles every rdma_cm event of the layer's channel and every completion event of its
    /// CQs (each CQ polled empty and re-armed), until none is left, then refreshes the
    /// readiness descriptors of the sockets that changed. Called by the node after each step.
    pub fn progress(&mut self, cm: &mut RdmaCm, dev: &mut SimDevice, now: SimTime) {
        let Some(ch) = self.channel else { return };
        loop {
            let mut any = false;
            while let Ok(ev) = cm.get_cm_event(dev, now, ch) {
                any = true;
                // Acked first: handling may destroy the id, which needs its events acked.
                let _ = cm.ack_cm_event(ev.clone());
                self.on_event(cm, dev, now, &ev);
            }
            while let Ok(cq) = self.comp.try_get_cq_event() {
                any = true;
                if let Some(h) = self.by_cq.get(&cq).copied() {
                    self.on_cq(cm, dev, now, h);
                }
            }
            if !any {
                break;
            }
        }
        for h in std::mem::take(&mut self.dirty) {
            if let Some(s) = self.socks.get_mut(&h) {
                s.refresh();
            }
        }
    }

    fn on_cq(&mut self, cm: &mut RdmaCm, dev: &mut SimDevice, now: SimTime, h: Handle) {
        let Some(s) = self.socks.get_mut(&h) else {
            return;
        };
        let Some(c) = s.conn.as_mut() else { return };
        let bad = c.bad;
        c.poll(dev);
        c.push(dev);
        self.stats.bad_messages += c.bad - bad;
        let (peer, failed, drained) = (c.peer, c.failed, c.drained());
        self.dirty.insert(h);
        if peer.gone && matches!(s.phase, Phase::Connected) {
            // rsocket.c RS_CTRL_DISCONNECT: disconnected (the DREQ follows from the peer).
            s.phase = Phase::Disconnected;
            s.readable = false;
            s.writable = false;
        } else if peer.eof && s.phase == Phase::Connected {
            // RS_CTRL_SHUTDOWN: end-of-file after the data before it; disconnected when this
            // side no longer writes either — once what it queued before its own shutdown is
            // delivered (else the `rshutdown` waiting for that disconnects after it).
            s.readable = false;
            if !s.writable && drained {
                s.phase = Phase::Disconnected;
                if let Some(id) = s.id {
                    let _ = cm.disconnect(dev, now, id);
                }
            }
        }
        if failed && s.phase == Phase::Connected {
            s.phase = Phase::Error;
            s.err = libc::EIO;
            s.readable = false;
            s.writable = false;
        }
    }

    fn on_event(&mut self, cm: &mut RdmaCm, dev: &mut SimDevice, now: SimTime, ev: &CmEvent) {
        use CmEventType as E;
        let Some(h) = self.by_id.get(&ev.id).copied() else {
            if ev.event == E::ConnectRequest {
                self.on_request(cm, dev, now, ev);
            }
            return;
        };
        self.dirty.insert(h);
        let Some(s) = self.socks.get_mut(&h) else {
            return;
        };
        let id = ev.id;
        match (ev.event, s.phase) {
            (E::AddrResolved, Phase::Connecting) => {
                if let Err(e) = cm.resolve_route(id) {
                    fail_connect(s, e.errno.code());
                }
            }
            (E::RouteResolved, Phase::Connecting) => self.make_conn(cm, dev, now, h),
            (E::Established, Phase::Connecting) => match ConnData::decode(&ev.param.private_data) {
                Some(d) => {
                    if let Some(c) = s.conn.as_mut() {
                        c.set_peer(d);
                    }
                    connected(s);
                }
                None => {
                    // rsocket.c: a REP of another version is ENOTSUP.
                    let _ = cm.disconnect(dev, now, id);
                    fail_connect(s, libc::ENOTSUP);
                }
            },
            (E::Established, Phase::Accepting) => {
                connected(s);
                if let Some(p) = s.parent {
                    if let Some(l) = self.socks.get_mut(&p).and_then(|l| l.listener.as_mut()) {
                        l.pending.remove(&h);
                        l.queue.push_back(h);
                    }
                    self.dirty.insert(p);
                }
            }
            (
                E::AddrError | E::RouteError | E::Unreachable | E::Rejected | E::ConnectError,
                Phase::Connecting,
            ) => fail_connect(s, connect_errno(ev)),
            (
                E::Rejected | E::Unreachable | E::ConnectError | E::Disconnected,
                Phase::Accepting,
            ) => self.destroy(cm, dev, now, h),
            (E::Disconnected, Phase::Connected | Phase::Error | Phase::Disconnected) => {
                if s.phase != Phase::Error {
                    s.phase = Phase::Disconnected;
                }
                s.readable = false;
                s.writable = false;
                let _ = cm.disconnect(dev, now, id);
            }
            (E::Unreachable, Phase::Connected) | (E::DeviceRemoval, _) => {
                s.phase = Phase::Error;
                s.err = libc::EIO;
                s.readable = false;
                s.writable = false;
            }
            _ => {}
        }
    }

    /// ROUTE_RESOLVED of an active socket: its resources, then `rdma_connect`.
    fn make_conn(&mut self, cm: &mut RdmaCm, dev: &mut SimDevice, now: SimTime, h: Handle) {
        let Some(pd) = self.pd else { return };
        let max_wr = dev.query_device().max_qp_wr;
        let Some(s) = self.socks.get_mut(&h) else {
            return;
        };
        let Some(id) = s.id else { return };
        let sizes = s.opts.sizes(max_wr);
        let res = Conn::create(cm, dev, id, pd, &self.comp, sizes).and_then(|c| {
            let cq = c.cq();
            s.conn = Some(c);
            self.by_cq.insert(cq, h);
            cm.connect(dev, now, id, &conn_param(&sizes.conn_data()))
        });
        if let Err(e) = res {
            fail_connect(s, e.errno.code());
        }
    }

    /// A listener's CONNECT_REQUEST: a new socket for `ev.id`, accepted at once (rsocket.c's
    /// listen thread), or the request refused.
    fn on_request(&mut self, cm: &mut RdmaCm, dev: &mut SimDevice, now: SimTime, ev: &CmEvent) {
        let refuse = |this: &mut Rsockets, cm: &mut RdmaCm, dev: &mut SimDevice, why: &str| {
            tracing::info!(id = ev.id.0, "rsocket: connection request refused: {why}");
            this.stats.refused += 1;
            let _ = cm.reject(dev, now, ev.id, &[]);
            let _ = cm.destroy_id(dev, now, ev.id);
        };
        let listener = ev.listen_id.and_then(|l| self.by_id.get(&l).copied());
        let Some((lh, ls)) = listener.and_then(|l| Some((l, self.socks.get(&l)?))) else {
            return refuse(self, cm, dev, "no listener");
        };
        let Some(l) = ls
            .listener
            .as_ref()
            .filter(|_| ls.phase == Phase::Listening)
        else {
            return refuse(self, cm, dev, "not listening");
        };
        if l.queue.len() + l.pending.len() >= l.limit {
            return refuse(self, cm, dev, "backlog full");
        }
        let Some(peer) = ConnData::decode(&ev.param.private_data) else {
            return refuse(self, cm, dev, "not a librnic rsocket");
        };
        let (v6, opts) = (ls.v6, ls.opts.clone());
        let Some(pd) = self.pd else {
            return refuse(self, cm, dev, "no protection domain");
        };
        let sizes = opts.sizes(dev.query_device().max_qp_wr);
        let mut conn = match Conn::create(cm, dev, ev.id, pd, &self.comp, sizes) {
            Ok(c) => c,
            Err(e) => return refuse(self, cm, dev, &e.to_string()),
        };
        conn.set_peer(peer);
        if let Err(e) = cm.accept(dev, now, ev.id, &conn_param(&sizes.conn_data())) {
            tracing::info!(id = ev.id.0, "rsocket: rdma_accept: {e}");
            self.stats.refused += 1;
            conn.destroy(cm, dev, ev.id);
            let _ = cm.destroy_id(dev, now, ev.id);
            return;
        }
        let mut s = Rsocket::new(v6, ev.id, opts);
        s.phase = Phase::Accepting;
        s.parent = Some(lh);
        s.conn = Some(conn);
        let h = self.insert(s);
        if let Some(l) = self.socks.get_mut(&lh).and_then(|s| s.listener.as_mut()) {
            l.pending.insert(h);
        }
    }
}

fn connected(s: &mut Rsocket) {
    s.phase = Phase::Connected;
    s.readable = true;
    s.writable = true;
}

fn fail_connect(s: &mut Rsocket, e: i32) {
    tracing::debug!("rsocket: connect failed: errno {e}");
    s.phase = Phase::ConnectError;
    s.err = e;
}
