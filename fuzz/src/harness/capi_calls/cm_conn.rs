//! rdma_cm on an id: `rdma_create_qp`, connect, accept, listen, disconnect,
//! `rdma_init_qp_attr`, and the CM events.

use std::collections::BTreeSet;

use rnic::abi::*;
use rnic::calls::{ConnParam, Kind, QpInit, QpRef, CM_CHANNELS};
use verbs_core::{QpAttrMask, QpState, QpType};

use super::records::ParamSpec;
use super::{
    qp_type_ok, want, Cm, Harness, QpKey, QpM, EADDRINUSE, EAGAIN, EBUSY, EINVAL, ENOMEM, ENOSYS,
    EOPNOTSUPP, MAX_LIVE, RDMA_MAX,
};

impl Harness {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rdma_create_qp(
        &mut self,
        id: u8,
        pd: u8,
        null: u8,
        scq: u8,
        rcq: u8,
        t: u8,
        caps: u32,
    ) {
        let s = self.pick(Kind::Id, id);
        let pds = if pd & 0x80 == 0 {
            None
        } else {
            self.pick(Kind::Pd, pd & 0x7F)
        };
        let (sc, rc) = (self.pick(Kind::Cq, scq), self.pick(Kind::Cq, rcq));
        let null = null % 8 == 7;
        let init = QpInit {
            send_cq: sc,
            recv_cq: rc,
            cap: self.caps(caps),
            qp_type: Self::qp_type(t),
            sq_sig_all: 0,
        };
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            _ if null => want(&[EINVAL]),
            None => want(&[EINVAL]),
            Some(i) if !i.bound => want(&[EINVAL]),
            Some(i) if i.qp.is_some() => want(&[EINVAL]),
            // librdmacm: a PD of another context than `id->verbs` is EINVAL.
            Some(_) if pds.is_some_and(|p| self.pds.get(&p) != Some(&self.cm_ctx)) => {
                want(&[EINVAL])
            }
            Some(i) => {
                let mut w = self.qp_want(init.qp_type, &init.cap);
                let ud_ps = i.ps == RDMA_PS_UDP || i.ps == RDMA_PS_IPOIB;
                let ud_qp = init.qp_type == IBV_QPT_UD;
                if w.contains(&0) && (ud_ps || ud_qp) {
                    // UD on rdma_cm (SIDR) is not implemented; librdmacm moves a QP with the
                    // id's QP type's attributes, which the other type refuses.
                    w.push(EINVAL);
                }
                let e = self.env;
                // librdmacm makes a CQ for each NULL one, before the QP, sized by its queue
                // (none for an empty queue, then the QP is refused), and reports one it could
                // not make as ENOMEM.
                let made = [(sc, init.cap.max_send_wr), (rc, init.cap.max_recv_wr)];
                let made = made.iter().filter(|(cq, _)| cq.is_none());
                if made.clone().any(|&(_, n)| n > e.max_cqe) {
                    w = want(&[ENOMEM]);
                } else if made.clone().any(|&(_, n)| n == 0) {
                    w.extend([0, EINVAL]);
                }
                w
            }
        };
        let Some(r) = self.c.rdma_create_qp(s, pds, (!null).then_some(&init)) else {
            return;
        };
        if self.neg1_ret("rdma_create_qp", r, &w) != 0 {
            return;
        }
        let Some(s) = s else { return };
        let Some(info) = self.c.qp_info(QpRef::Id(s)) else {
            self.fail("rdma_create_qp returned 0 but id->qp is NULL".to_string());
        };
        let Some(qp_type) = qp_type_ok(init.qp_type) else {
            return;
        };
        let state = (qp_type == QpType::Rc && info.state == IBV_QPS_INIT).then_some(QpState::Init);
        if let Some(i) = self.ids.get_mut(&s) {
            i.qp = Some(QpM {
                qp_type,
                cap: init.cap,
                state,
                touched: false,
                pd: pds,
                send_cq: sc,
                recv_cq: rc,
                qp_num: info.qp_num,
                sig_all: false,
                sq: BTreeSet::new(),
                rq: BTreeSet::new(),
                sq_sig: BTreeSet::new(),
            });
        }
    }

    fn conn_param(p: &ParamSpec) -> Option<ConnParam> {
        (p.null < 0xF0).then(|| ConnParam {
            private_data: (p.data_null < 0xF0).then(|| vec![0xA5; usize::from(p.len)]),
            private_data_len: p.len,
            responder_resources: p.rr,
            initiator_depth: p.depth,
            flow_control: 0,
            retry_count: p.retries & 0xF,
            rnr_retry_count: p.retries >> 4,
            srq: 0,
            qp_num: 0x11,
        })
    }

    pub(super) fn connect(&mut self, id: u8, p: &ParamSpec, accept: bool) {
        let s = self.pick(Kind::Id, id);
        let param = Self::conn_param(p);
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let e = self.env;
        let eff = param.as_ref().map_or(0, |c| {
            if c.private_data.is_some() {
                c.private_data_len
            } else {
                0
            }
        });
        let w = match &i {
            None => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL]),
            Some(i) => {
                let tcp = i.ps == RDMA_PS_TCP;
                let bad_param = param.as_ref().is_some_and(|c| {
                    (c.responder_resources != RDMA_MAX
                        && u32::from(c.responder_resources) > e.max_rd_atom)
                        || (c.initiator_depth != RDMA_MAX
                            && u32::from(c.initiator_depth) > e.max_init_rd_atom)
                });
                if tcp && (bad_param || (param.is_none() && i.qp.is_none())) {
                    // librdmacm `ucma_valid_param`.
                    want(&[EINVAL])
                } else if accept {
                    // No id here has a connection request to accept.
                    want(&[EINVAL])
                } else if i.state != Cm::RouteResolved {
                    want(&[EINVAL])
                } else if !(tcp || i.ps == RDMA_PS_IB) {
                    // UDP/IPOIB ids connect with SIDR, not implemented.
                    want(&[0, EINVAL, EOPNOTSUPP, ENOSYS])
                } else if eff > 56 {
                    want(&[EINVAL])
                } else {
                    want(&[0])
                }
            }
        };
        let r = if accept {
            self.c.accept(s, param.as_ref())
        } else {
            self.c.connect(s, param.as_ref())
        };
        let Some(r) = r else { return };
        let name = if accept {
            "rdma_accept"
        } else {
            "rdma_connect"
        };
        if self.neg1_ret(name, r, &w) == 0 {
            if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
                if accept || !(i.ps == RDMA_PS_TCP || i.ps == RDMA_PS_IB) {
                    i.state = Cm::Unknown;
                } else if i.state != Cm::Unknown {
                    i.state = Cm::Connect;
                }
                i.cm_id = true;
            }
        }
        // The id's QP stays as it was (librdmacm moves it only when the kernel answers).
        if let Some(s) = s {
            if self.ids.get(&s).is_some_and(|i| i.qp.is_some()) {
                self.sync(QpKey::Id(s));
            }
        }
    }

    pub(super) fn listen(&mut self, id: u8, backlog: u8) {
        let s = self.pick(Kind::Id, id);
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            None => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL, EBUSY, EADDRINUSE]),
            Some(i) if matches!(i.state, Cm::Idle | Cm::AddrBound) => {
                let taken = |p: Option<u16>| {
                    self.ids.iter().any(|(&o, x)| {
                        Some(o) != s
                            && x.ps == i.ps
                            && x.src_port.is_some()
                            && (p.is_none() || x.src_port == p)
                    })
                };
                // The ephemeral port an unbound id gets may be one another id bound by
                // number; a second listener on a port is EBUSY (cm-core) or EADDRINUSE.
                if taken(if i.state == Cm::Idle {
                    None
                } else {
                    i.src_port
                }) || i.ps == RDMA_PS_IB
                    || self.ids.values().any(|x| x.state == Cm::Unknown)
                {
                    want(&[0, EBUSY, EADDRINUSE])
                } else {
                    want(&[0])
                }
            }
            Some(_) => want(&[EINVAL]),
        };
        let bl = match backlog % 4 {
            0 => 0,
            1 => -1,
            2 => i32::from(backlog),
            _ => i32::MAX,
        };
        let Some(r) = self.c.listen(s, bl) else {
            return;
        };
        if self.neg1_ret("rdma_listen", r, &w) == 0 {
            let Some(s) = s else { return };
            let (sp, _) = self.c.ports(Some(s)).unwrap_or((0, 0));
            if let Some(i) = self.ids.get_mut(&s) {
                if i.state != Cm::Unknown {
                    i.state = Cm::Listen;
                }
                i.cm_id = true;
                i.src_port = Some(sp);
            }
        }
    }

    pub(super) fn disconnect(&mut self, id: u8) {
        let s = self.pick(Kind::Id, id);
        if let Some(s) = s.filter(|s| self.ids.get(s).is_some_and(|i| i.qp.is_some())) {
            self.sync(QpKey::Id(s));
        }
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let qp_state = i.as_ref().and_then(|i| i.qp.as_ref()).map(|q| q.state);
        let w = match &i {
            None => want(&[EINVAL]),
            // librdmacm's `ucma_shutdown` moves the QP to ERR first and returns its error: a
            // QP in RESET cannot go to ERR.
            Some(_) if qp_state == Some(Some(QpState::Reset)) => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL]),
            Some(i) if i.bound && i.cm_id => want(&[0]),
            Some(_) => want(&[EINVAL]),
        };
        // librdmacm moves the QP to ERR first, whatever the kernel then says.
        if let Some(q) = s
            .and_then(|s| self.ids.get_mut(&s))
            .and_then(|i| i.qp.as_mut())
        {
            q.touched = true;
        }
        let Some(r) = self.c.disconnect(s) else {
            return;
        };
        let got = self.neg1_ret("rdma_disconnect", r, &w);
        if let Some(s) = s {
            if self.ids.get(&s).is_some_and(|i| i.qp.is_some()) {
                self.sync(QpKey::Id(s));
                let st = self
                    .ids
                    .get(&s)
                    .and_then(|i| i.qp.as_ref())
                    .and_then(|q| q.state);
                if got == 0 && st != Some(QpState::Err) {
                    self.fail(format!(
                        "rdma_disconnect returned 0 with the id's QP in {st:?}"
                    ));
                }
            }
        }
    }

    pub(super) fn init_qp_attr(&mut self, id: u8, state: u8, null: u8) {
        let s = self.pick(Kind::Id, id);
        let st = match state % 8 {
            0..=3 => IBV_QPS_INIT,
            4 => IBV_QPS_RTR,
            5 => IBV_QPS_RTS,
            _ => u32::from(state),
        };
        let null_attr = null % 8 == 6;
        let null_mask = null % 8 == 7;
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            _ if null_attr || null_mask => want(&[EINVAL]),
            None => want(&[EINVAL]),
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL]),
            // The kernel needs the id bound to a device even for INIT (`ucma_init_qp_attr`);
            // librnic answers INIT from the id alone.
            Some(i) if st == IBV_QPS_INIT && !i.bound => want(&[0, EINVAL]),
            Some(_) if st == IBV_QPS_INIT => want(&[0]),
            // RTR and RTS need the peer's REQ or REP, which no id here has.
            Some(_) => want(&[EINVAL]),
        };
        let Some((r, out)) = self
            .c
            .init_qp_attr(s, (!null_attr).then_some(st), null_mask)
        else {
            return;
        };
        if self.neg1_ret("rdma_init_qp_attr", r, &w) == 0 {
            let Some((a, m)) = out else { return };
            let need = (QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT).bits();
            if a.qp_state != IBV_QPS_INIT
                || (m as u32) & need != need
                || a.port_num != 1
                || a.pkey_index != 0
            {
                self.fail(format!(
                    "rdma_init_qp_attr(INIT): state {} mask {m:#x} port {} pkey {}",
                    a.qp_state, a.port_num, a.pkey_index
                ));
            }
        }
    }

    pub(super) fn get_cm_event(&mut self, ch: u8, null: u8) {
        let chan = (usize::from(ch % 3) < CM_CHANNELS).then(|| usize::from(ch % 3));
        let null = null % 8 == 7;
        if self.events.len() >= MAX_LIVE {
            return;
        }
        let head = chan.and_then(|c| self.queues[c].front().copied());
        let loose = self.ids.values().any(|i| i.state == Cm::Unknown);
        let w = if chan.is_none() || null {
            want(&[EINVAL])
        } else if loose {
            want(&[0, EAGAIN])
        } else if head.is_some() {
            want(&[0])
        } else {
            want(&[EAGAIN])
        };
        let Some((r, ev)) = self.c.get_cm_event(chan, null) else {
            return;
        };
        if self.neg1_ret("rdma_get_cm_event", r, &w) != 0 {
            return;
        }
        let Some(ev) = ev else {
            self.fail("rdma_get_cm_event returned 0 without an event".to_string());
        };
        let Some(info) = self.c.event_info(ev) else {
            return;
        };
        let Some(id) = info.id else {
            self.fail(format!(
                "rdma_get_cm_event: {info:?} names no id of this input"
            ));
        };
        self.events.insert(ev, id);
        let Some(c) = chan else { return };
        match head {
            Some((hid, hev)) if hid == id && hev == info.event && info.status == 0 => {
                self.queues[c].pop_front();
            }
            _ if loose => {
                if let Some(p) = self.queues[c].iter().position(|&(i, _)| i == id) {
                    self.queues[c].remove(p);
                }
            }
            _ => self.fail(format!(
                "rdma_get_cm_event: {info:?}, the calls queued {head:?} first"
            )),
        }
    }
}
