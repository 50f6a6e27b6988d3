//! The application's rdma_cm and verbs calls, each recorded with its errno.

use super::config::{host_index, host_ip, CM_PORT};
use super::{errno_of, Call, Conn, End, Record, World, WorldError};
use cm_core::api::{CmEventType, CmIdHandle, ConnParam, RdmaCm};
use cm_core::wire::RdmaPortSpace;
use rnic_sim::SimDevice;
use std::net::SocketAddr;
use verbs_core::{Device, Errno, Error, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, SimTime};

impl World {
    fn cm_call<R>(
        &mut self,
        h: usize,
        f: impl FnOnce(&mut RdmaCm, &mut SimDevice, SimTime) -> R,
    ) -> Result<R, Error> {
        let now = self.sim.now();
        let node = self.node_mut(h)?;
        let (cm, dev) = node.host.split();
        Ok(f(cm, dev, now))
    }

    fn qp_init(&self, h: usize) -> QpInitAttr {
        let a = &self.apps[h];
        let depth = self.cfg.qp_depth;
        let init = QpInitAttr::rc(a.send_cq, a.recv_cq, QpCap::uniform(depth, 1, 0), true);
        match a.srq {
            Some(srq) => init.with_srq(srq),
            None => init,
        }
    }

    fn conn_param(&self) -> ConnParam {
        ConnParam {
            rnr_retry_count: self.cfg.rnr_retry.min(7),
            ..ConnParam::rping_defaults()
        }
    }

    /// `Ok` if `e` belongs to its host's current life: an [`End`] kept from before a crash
    /// and restart names an id and QP of the old life, whose handles a new life may reuse.
    ///
    /// # Errors
    /// EINVAL (not recorded: the call never reaches the host) for an unknown host or an
    /// earlier life.
    pub(super) fn current(&self, e: End) -> Result<(), Error> {
        match self.apps.get(e.host) {
            Some(a) if a.epoch == e.epoch => Ok(()),
            _ => Err(Error::new(
                Errno::EINVAL,
                "End of an earlier life of its host",
            )),
        }
    }

    /// Host `h` listens on [`CM_PORT`] (once; later calls return the same id).
    ///
    /// # Errors
    /// The rdma_cm call's error (recorded too).
    pub fn listen(&mut self, h: usize) -> Result<CmIdHandle, Error> {
        self.observe();
        if let Some(id) = self.apps.get(h).and_then(|a| a.listen) {
            return Ok(id);
        }
        let ch = self
            .apps
            .get(h)
            .map(|a| a.ch)
            .ok_or_else(|| Error::new(Errno::EINVAL, "no host"))?;
        let r = self.cm_call(h, |cm, _, _| {
            let id = cm.create_id(ch, RdmaPortSpace::Tcp)?;
            cm.bind_addr(id, SocketAddr::new(host_ip(h), CM_PORT))?;
            cm.listen(id, 8)?;
            Ok::<_, Error>(id)
        })?;
        let errno = errno_of(&r);
        let id = r.as_ref().map_or(0, |i| i.0);
        self.record(
            h,
            Record::Call {
                call: Call::Listen { id },
                errno,
            },
        );
        let id = r?;
        self.apps[h].listen = Some(id);
        self.observe();
        Ok(id)
    }

    /// Host `h` creates an id, resolves `to`:[`CM_PORT`], creates its QP (INIT) and connects
    /// ([`resolve`](Self::resolve) then [`connect_resolved`](Self::connect_resolved)).
    ///
    /// # Errors
    /// The first failing rdma_cm call's error (the connect call's errno is recorded).
    pub fn connect(&mut self, h: usize, to: usize) -> Result<End, Error> {
        let e = self.resolve(h, to)?;
        self.connect_call(e)?;
        Ok(e)
    }

    /// Host `h`'s first half of [`connect`](Self::connect): `rdma_create_id`,
    /// `rdma_resolve_addr`/`rdma_resolve_route` to `to`:[`CM_PORT`] and `rdma_create_qp` (QP
    /// in INIT), without connecting. The ADDR/ROUTE_RESOLVED events are read by the next call
    /// or run; the calls themselves are not recorded (the oracle knows the id from its events).
    ///
    /// # Errors
    /// The first failing call's error.
    pub fn resolve(&mut self, h: usize, to: usize) -> Result<End, Error> {
        self.observe();
        let app = *self
            .apps
            .get(h)
            .ok_or_else(|| Error::new(Errno::EINVAL, format!("no host {h}")))?;
        let init = self.qp_init(h);
        let (id, qp) = self.cm_call(h, |cm, dev, _| {
            let id = cm.create_id(app.ch, RdmaPortSpace::Tcp)?;
            cm.resolve_addr(id, None, SocketAddr::new(host_ip(to), CM_PORT))?;
            cm.resolve_route(id)?;
            let qp = cm.create_qp(dev, id, app.pd, &init)?;
            Ok::<_, Error>((id, qp))
        })??;
        self.qps.insert((h, app.epoch, qp.qp_num), (qp, false));
        Ok(End {
            host: h,
            epoch: app.epoch,
            id,
            qp,
            peer: to,
        })
    }

    /// `rdma_connect` of an end made by [`resolve`](Self::resolve) (recorded with its errno).
    ///
    /// # Errors
    /// What rdma_connect returns (EINVAL unless the id's route is resolved, cm-spec §4.3).
    pub fn connect_resolved(&mut self, e: End) -> Result<(), Error> {
        self.observe();
        self.connect_call(e)
    }

    fn connect_call(&mut self, e: End) -> Result<(), Error> {
        let param = self.conn_param();
        let res = self.cm_call(e.host, |cm, dev, now| cm.connect(dev, now, e.id, &param))?;
        self.record(
            e.host,
            Record::Call {
                call: Call::Connect {
                    id: e.id.0,
                    to: e.peer as u8,
                    qpn: e.qp.qp_num,
                },
                errno: errno_of(&res),
            },
        );
        res?;
        self.observe();
        Ok(())
    }

    /// Host `h` gives passive id `id` (from a CONNECT_REQUEST) a QP and accepts. The peer
    /// host is the id's peer address (`rdma_get_peer_addr`).
    ///
    /// # Errors
    /// The rdma_cm call's error (recorded).
    pub fn accept(&mut self, h: usize, id: CmIdHandle) -> Result<End, Error> {
        self.observe();
        let peer = self
            .host(h)
            .and_then(|host| host.cm().addrs(id))
            .and_then(|(_, dst)| dst)
            .map_or(h, |a| host_index(a.ip()));
        let (pd, init) = (self.apps[h].pd, self.qp_init(h));
        let param = self.conn_param();
        let (qp, res) = self.cm_call(h, |cm, dev, now| {
            let qp = cm.create_qp(dev, id, pd, &init)?;
            Ok::<_, Error>((qp, cm.accept(dev, now, id, &param)))
        })??;
        let epoch = self.apps[h].epoch;
        self.qps.insert((h, epoch, qp.qp_num), (qp, false));
        self.passive_ids.insert((h, epoch, qp.qp_num), id);
        self.record(
            h,
            Record::Call {
                call: Call::Accept {
                    id: id.0,
                    qpn: qp.qp_num,
                },
                errno: errno_of(&res),
            },
        );
        res?;
        self.observe();
        Ok(End {
            host: h,
            epoch,
            id,
            qp,
            peer,
        })
    }

    /// Host `h` rejects passive id `id` (REJ 28).
    ///
    /// # Errors
    /// The rdma_cm call's error (recorded).
    pub fn reject(&mut self, h: usize, id: CmIdHandle) -> Result<(), Error> {
        self.observe();
        let r = self.cm_call(h, |cm, dev, now| cm.reject(dev, now, id, &[]))?;
        self.record(
            h,
            Record::Call {
                call: Call::Reject { id: id.0 },
                errno: errno_of(&r),
            },
        );
        self.observe();
        r
    }

    /// `p` listens, `a` connects, `p` accepts the request; runs until both ends are
    /// ESTABLISHED.
    ///
    /// # Errors
    /// A failing call, or [`WorldError::Timeout`] if an event does not come.
    pub fn establish(&mut self, a: usize, p: usize) -> Result<Conn, WorldError> {
        self.listen(p)?;
        let start = self.history.entries.len();
        let active = self.connect(a, p)?;
        let pid = self.wait_event_from(start, p, None, CmEventType::ConnectRequest)?;
        let passive = self.accept(p, pid)?;
        self.wait_event(a, Some(active.id), CmEventType::Established)?;
        self.wait_event(p, Some(passive.id), CmEventType::Established)?;
        Ok(Conn { active, passive })
    }

    /// `rdma_disconnect` of `e`'s id (recorded with its errno).
    ///
    /// # Errors
    /// What rdma_disconnect returns (cm-spec §4.4); EINVAL for an `End` of an earlier life
    /// of its host (not recorded).
    pub fn disconnect(&mut self, e: End) -> Result<(), Error> {
        self.observe();
        self.current(e)?;
        let r = self.cm_call(e.host, |cm, dev, now| cm.disconnect(dev, now, e.id))?;
        self.record(
            e.host,
            Record::Call {
                call: Call::Disconnect { id: e.id.0 },
                errno: errno_of(&r),
            },
        );
        self.refresh_qp_states();
        self.observe();
        r
    }

    /// `rdma_destroy_id` of `e`'s id (recorded; see [`destroy_id`](Self::destroy_id)).
    ///
    /// # Errors
    /// EBUSY with un-acked events, EINVAL for an unknown id or an `End` of an earlier life.
    pub fn destroy(&mut self, e: End) -> Result<(), Error> {
        self.current(e)?;
        self.destroy_id(e.host, e.id)
    }

    /// `rdma_destroy_id` of host `h`'s id `id` (recorded), e.g. a listener or a passive id
    /// whose CONNECT_REQUEST was not accepted. Destroying the listener of
    /// [`listen`](Self::listen) lets a later `listen` create a new one.
    ///
    /// # Errors
    /// EBUSY with un-acked events of the id (cm-spec §4.6, TESTING.md behaviour choices),
    /// EINVAL for an unknown id.
    pub fn destroy_id(&mut self, h: usize, id: CmIdHandle) -> Result<(), Error> {
        self.observe();
        let r = self.cm_call(h, |cm, dev, now| cm.destroy_id(dev, now, id))?;
        self.record(
            h,
            Record::Call {
                call: Call::Destroy { id: id.0 },
                errno: errno_of(&r),
            },
        );
        if r.is_ok() {
            if let Some(a) = self.apps.get_mut(h).filter(|a| a.listen == Some(id)) {
                a.listen = None;
            }
        }
        self.observe();
        r
    }

    /// The application's verbs teardown of `e`'s QP: `ibv_modify_qp(ERR)` (flushes what is
    /// posted).
    ///
    /// # Errors
    /// The modify's error; EINVAL for an `End` of an earlier life (not recorded).
    pub fn qp_to_err(&mut self, e: End) -> Result<(), Error> {
        self.observe();
        self.current(e)?;
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let r = self.cm_call(e.host, |_, dev, _| {
            dev.modify_qp(e.qp.handle, &attr, QpAttrMask::STATE)
        })?;
        self.record(
            e.host,
            Record::Call {
                call: Call::QpToErr { qpn: e.qp.qp_num },
                errno: errno_of(&r),
            },
        );
        self.refresh_qp_states();
        self.observe();
        r
    }
}
