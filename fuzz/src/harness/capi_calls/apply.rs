//! One record: its call, made with the arguments it picks, and checked.

use rnic::abi::*;
use rnic::calls::Kind;

use super::records::Call;
use super::{want, Cm, Harness, EAGAIN, EBUSY, EINVAL, ENOSYS, EOPNOTSUPP, MAX_LIVE};

impl Harness {
    // ---- the calls ----------------------------------------------------------------------------

    pub(super) fn apply(&mut self, call: &Call) {
        match *call {
            Call::OpenDevice { null } => {
                if self.ctxs.len() >= MAX_LIVE {
                    return;
                }
                let null = null % 8 == 7;
                let m = self.c.open_device(null);
                let w = if null { want(&[EINVAL]) } else { want(&[0]) };
                self.made_ret("ibv_open_device", m, &w);
                if let Some(s) = m.slot {
                    self.ctxs.insert(s);
                }
            }
            Call::CloseDevice { ctx } => {
                let s = self.pick(Kind::Context, ctx);
                if let Some(r) = self.c.close_device(s) {
                    self.int_ret("ibv_close_device", r, &[0]);
                    if let Some(s) = s {
                        self.ctxs.remove(&s);
                        if s == self.cm_ctx {
                            self.cm_ctx = self.c.cm_context();
                        }
                    }
                }
            }
            Call::Query {
                ctx,
                what,
                port,
                index,
                null,
            } => self.query(self.ctx(ctx), what, port, index, null % 8 == 7),
            Call::AllocPd { ctx } => {
                if self.full(Kind::Pd) {
                    return;
                }
                let ctx = self.ctx(ctx);
                let Some(m) = self.c.alloc_pd(ctx) else {
                    return;
                };
                self.made_ret("ibv_alloc_pd", m, &[0]);
                if let Some(s) = m.slot {
                    self.pds.insert(s, ctx);
                }
            }
            Call::DeallocPd { pd } => {
                let s = self.pick(Kind::Pd, pd);
                let w = match s {
                    None => want(&[EINVAL]),
                    Some(s) => {
                        let used = self.mrs.values().any(|m| m.pd == s)
                            || self.all_qps().iter().any(|q| q.pd == Some(s));
                        let ah = self.ahs.values().any(|&p| p == s);
                        if used {
                            want(&[EBUSY])
                        } else if ah {
                            // rdma-core: EBUSY (the kernel counts AHs as users of the PD);
                            // librnic's AHs are not device objects.
                            want(&[0, EBUSY])
                        } else {
                            want(&[0])
                        }
                    }
                };
                let Some(r) = self.c.dealloc_pd(s) else {
                    return;
                };
                if self.int_ret("ibv_dealloc_pd", r, &w) == 0 {
                    if let Some(s) = s {
                        self.pds.remove(&s);
                    }
                }
            }
            Call::RegMr {
                pd,
                off,
                len,
                iova,
                v,
                access,
            } => self.reg_mr(pd, off, len, iova, v, access),
            Call::DeregMr { mr } => {
                let s = self.pick(Kind::Mr, mr);
                let Some(r) = self.c.dereg_mr(s) else { return };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.int_ret("ibv_dereg_mr", r, &w) == 0 {
                    if let Some(m) = s.and_then(|s| self.mrs.remove(&s)) {
                        self.dead_keys.push(m.lkey);
                        self.dead_keys.push(m.rkey);
                    }
                }
            }
            Call::CreateCompChannel { ctx } => {
                if self.full(Kind::CompChannel) {
                    return;
                }
                let Some(m) = self.c.create_comp_channel(self.ctx(ctx)) else {
                    return;
                };
                self.made_ret("ibv_create_comp_channel", m, &[0]);
                if let Some(s) = m.slot {
                    self.comps.insert(s);
                }
            }
            Call::DestroyCompChannel { ch } => {
                let s = self.pick(Kind::CompChannel, ch);
                let w = match s {
                    None => [EINVAL],
                    Some(s) if self.cqs.values().any(|c| c.0 == Some(s)) => [EBUSY],
                    Some(_) => [0],
                };
                let Some(r) = self.c.destroy_comp_channel(s) else {
                    return;
                };
                if self.int_ret("ibv_destroy_comp_channel", r, &w) == 0 {
                    if let Some(s) = s {
                        self.comps.remove(&s);
                    }
                }
            }
            Call::CreateCq { ctx, cqe, raw, ch } => {
                if self.full(Kind::Cq) {
                    return;
                }
                let max = self.env.max_cqe as i32;
                let table = [1, 2, 4, 16, 0, -1, max, max + 1, i32::MIN, i32::MAX, 3, 64];
                let n = if cqe < 0xC0 {
                    table[usize::from(cqe) % table.len()]
                } else {
                    raw as i32
                };
                let chs = self.pick(Kind::CompChannel, ch);
                let Some(m) = self.c.create_cq(self.ctx(ctx), n, chs) else {
                    return;
                };
                let w = if n < 1 || n > max { [EINVAL] } else { [0] };
                self.made_ret("ibv_create_cq", m, &w);
                if let Some(s) = m.slot {
                    self.cqs.insert(s, (chs, n as u32, 0));
                }
            }
            Call::DestroyCq { cq } => {
                let s = self.pick(Kind::Cq, cq);
                let w = match s {
                    None => [EINVAL],
                    Some(s)
                        if self
                            .all_qps()
                            .iter()
                            .any(|q| q.send_cq == Some(s) || q.recv_cq == Some(s)) =>
                    {
                        [EBUSY]
                    }
                    Some(_) => [0],
                };
                let Some(r) = self.c.destroy_cq(s) else {
                    return;
                };
                if self.int_ret("ibv_destroy_cq", r, &w) == 0 {
                    if let Some(s) = s {
                        self.cqs.remove(&s);
                    }
                }
            }
            Call::ReqNotifyCq { cq, solicited } => {
                let s = self.pick(Kind::Cq, cq);
                let w = match s {
                    None => want(&[EINVAL]),
                    // rdma-core arms a CQ without a channel and returns 0 (rxe, mlx5); the
                    // simulated device refuses it (verbs-core `req_notify_cq`).
                    Some(s) if self.cqs.get(&s).is_some_and(|c| c.0.is_none()) => {
                        want(&[0, EINVAL])
                    }
                    Some(_) => want(&[0]),
                };
                let Some(r) = self.c.req_notify_cq(s, i32::from(solicited % 2)) else {
                    return;
                };
                self.int_ret("ibv_req_notify_cq", r, &w);
            }
            Call::PollCq { cq, n, null } => {
                let s = self.pick(Kind::Cq, cq);
                self.poll(s, n as i8 as i32, null % 8 == 7);
            }
            Call::GetCqEvent { ch, null } => {
                let s = self.pick(Kind::CompChannel, ch);
                let null = null % 8 == 7;
                let Some((r, cq)) = self.c.get_cq_event(s, null) else {
                    return;
                };
                let w = if s.is_none() || null {
                    want(&[EINVAL])
                } else {
                    want(&[0, EAGAIN])
                };
                if self.neg1_ret("ibv_get_cq_event", r, &w) == 0 {
                    if let Some(cq) = cq {
                        let ch = self.cqs.get(&cq).and_then(|c| c.0);
                        if ch != s {
                            self.fail(format!(
                                "ibv_get_cq_event on channel {s:?} returned CQ {cq} of channel {ch:?}"
                            ));
                        }
                    }
                }
            }
            Call::CreateQp {
                pd,
                null,
                scq,
                rcq,
                qp_type,
                caps,
                sig,
            } => self.create_qp(pd, null, scq, rcq, qp_type, caps, sig),
            Call::ModifyQp {
                qp,
                null,
                target,
                mode,
                mask,
                fix,
                v,
            } => self.modify_qp(qp, null, target, mode, mask, fix, v),
            Call::QueryQp { qp, null } => self.query_qp(qp, null),
            Call::DestroyQp { qp } => {
                let s = self.pick(Kind::Qp, qp);
                let Some(r) = self.c.destroy_qp(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.int_ret("ibv_destroy_qp", r, &w) == 0 {
                    if let Some(q) = s.and_then(|s| self.qps.remove(&s)) {
                        self.retire(&q);
                    }
                }
            }
            Call::PostSend { qp, bad, ref wrs } => self.post_send(qp, bad, wrs),
            Call::PostRecv { qp, bad, ref wrs } => self.post_recv(qp, bad, wrs),
            Call::CreateAh { pd, null, fix, v } => {
                if self.full(Kind::Ah) {
                    return;
                }
                let s = self.pick(Kind::Pd, pd);
                let null = null % 8 == 7;
                let mut a = self.ah_attr();
                let fix = fix % 8;
                match fix {
                    0 => a.is_global = v as u8,
                    1 => a.grh.sgid_index = v as u8,
                    2 => a.port_num = v as u8,
                    3 => a.grh.dgid = ibv_gid { raw: [v as u8; 16] },
                    4 => a.grh.hop_limit = v as u8,
                    5 => a.dlid = v as u16,
                    _ => {}
                }
                let w = if s.is_none() || null || a.is_global == 0 {
                    want(&[EINVAL])
                } else if a.grh.sgid_index != 0 || a.port_num != 1 {
                    // rdma-core: the kernel refuses a GID index past the table and port 0
                    // (`rdma_check_ah_attr`); librnic takes the vector as it is.
                    want(&[0, EINVAL])
                } else {
                    want(&[0])
                };
                let Some(m) = self.c.create_ah(s, (!null).then_some(&a)) else {
                    return;
                };
                self.made_ret("ibv_create_ah", m, &w);
                if let (Some(ah), Some(pd)) = (m.slot, s) {
                    self.ahs.insert(ah, pd);
                }
            }
            Call::DestroyAh { ah } => {
                let s = self.pick(Kind::Ah, ah);
                let Some(r) = self.c.destroy_ah(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.int_ret("ibv_destroy_ah", r, &w) == 0 {
                    if let Some(s) = s {
                        self.ahs.remove(&s);
                    }
                }
            }
            Call::GetAsyncEvent { ctx, null } => {
                let s = (ctx < 0xF8).then(|| self.ctx(ctx));
                let null = null % 8 == 7;
                let Some((r, ev)) = self.c.get_async_event(s, null) else {
                    return;
                };
                let w = if s.is_none() || null {
                    want(&[EINVAL])
                } else {
                    want(&[0, EAGAIN])
                };
                if self.neg1_ret("ibv_get_async_event", r, &w) == 0 {
                    if let Some(t) = ev.filter(|&t| t > 19) {
                        self.fail(format!("ibv_get_async_event: event type {t}"));
                    }
                }
            }
            Call::CreateId { ch, ps, null } => self.create_id(ch, ps, null),
            Call::DestroyId { id } => {
                let s = self.pick(Kind::Id, id);
                let Some(r) = self.c.destroy_id(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                if self.neg1_ret("rdma_destroy_id", r, &w) == 0 {
                    if let Some(s) = s {
                        self.forget_id(s);
                    }
                }
            }
            Call::BindAddr { id, addr, port } => self.bind_addr(id, addr, port),
            Call::ResolveAddr { id, src, dst, port } => self.resolve_addr(id, src, dst, port),
            Call::ResolveRoute { id } => {
                let s = self.pick(Kind::Id, id);
                let st = s.and_then(|s| self.ids.get(&s)).map(|i| i.state);
                let w = match st {
                    None => want(&[EINVAL]),
                    Some(Cm::Unknown) => want(&[0, EINVAL]),
                    Some(Cm::AddrResolved) => want(&[0]),
                    Some(_) => want(&[EINVAL]),
                };
                let Some(r) = self.c.resolve_route(s, 2000) else {
                    return;
                };
                if self.neg1_ret("rdma_resolve_route", r, &w) == 0 {
                    if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
                        i.state = Cm::RouteResolved;
                        let ch = i.channel;
                        self.queues[ch].push_back((s.unwrap_or(0), RDMA_CM_EVENT_ROUTE_RESOLVED));
                    }
                }
            }
            Call::RdmaCreateQp {
                id,
                pd,
                null,
                scq,
                rcq,
                qp_type,
                caps,
            } => self.rdma_create_qp(id, pd, null, scq, rcq, qp_type, caps),
            Call::RdmaDestroyQp { id } => {
                let s = self.pick(Kind::Id, id);
                if self.c.rdma_destroy_qp(s).is_some() {
                    if let Some(q) = s
                        .and_then(|s| self.ids.get_mut(&s))
                        .and_then(|i| i.qp.take())
                    {
                        self.retire(&q);
                    }
                    if let Some(s) = s {
                        if self.c.id_info(s).is_some_and(|i| i.has_qp) {
                            self.fail("rdma_destroy_qp left id->qp set".to_string());
                        }
                    }
                }
            }
            Call::Connect { id, ref param } => self.connect(id, param, false),
            Call::Accept { id, ref param } => self.connect(id, param, true),
            Call::Listen { id, backlog } => self.listen(id, backlog),
            Call::Reject { id, null, len } => {
                let s = self.pick(Kind::Id, id);
                let data = vec![0x5A; usize::from(len)];
                let null = null % 4 == 3;
                let eff = if null { 0 } else { len };
                let st = s.and_then(|s| self.ids.get(&s)).map(|i| i.state);
                let w = match st {
                    None => want(&[EINVAL]),
                    Some(_) if eff > 148 => want(&[EINVAL]),
                    // The kernel can reject from REQ_SENT (`cm_send_rej_locked`); cm-core
                    // does not (nothing to reject before a REP).
                    Some(Cm::Connect | Cm::Unknown) => want(&[0, EINVAL]),
                    Some(_) => want(&[EINVAL]),
                };
                let Some(r) = self.c.reject(s, (!null).then_some(&data[..]), len) else {
                    return;
                };
                if self.neg1_ret("rdma_reject", r, &w) == 0 {
                    self.unknown(s);
                }
            }
            Call::Disconnect { id } => self.disconnect(id),
            Call::Establish { id, which } => {
                let s = self.pick(Kind::Id, id);
                let known = s.and_then(|s| self.ids.get(&s)).map(|i| (i.state, i.bound));
                let (r, w) = match which % 3 {
                    0 => {
                        let w = match known {
                            // librdmacm `rdma_establish`: EINVAL with a QP, else the kernel's
                            // accept of a CONNECT_RESPONSE, which no id here has.
                            Some((Cm::Unknown, _)) => want(&[0, EINVAL]),
                            _ => want(&[EINVAL]),
                        };
                        (self.c.establish(s), w)
                    }
                    1 => {
                        let w = match known {
                            None => want(&[EINVAL]),
                            Some(_) => want(&[0, EINVAL]),
                        };
                        (self.c.notify(s, IBV_EVENT_COMM_EST as i32), w)
                    }
                    _ => {
                        // Any other event: librdmacm and the kernel ignore it (0); the kernel's
                        // device lookup may refuse an unbound id first.
                        (self.c.notify(s, 9), want(&[0, EINVAL]))
                    }
                };
                if let Some(r) = r {
                    if self.neg1_ret("rdma_establish/rdma_notify", r, &w) == 0 {
                        self.unknown_if_not(s, &[Cm::Unknown]);
                    }
                }
            }
            Call::SetOption { id, opt, null } => {
                let s = self.pick(Kind::Id, id);
                let null = null % 8 == 7;
                let (level, name) = match opt % 8 {
                    0 => (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS),
                    1 => (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR),
                    2 => (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY),
                    3 => (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT),
                    4 => (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH),
                    5 => (RDMA_OPTION_ID, 77),
                    6 => (9, 0),
                    _ => (-1, -1),
                };
                let val = [1u8, 0, 0, 0];
                let known = opt % 8 < 4;
                let w = if s.is_none() || null {
                    want(&[EINVAL])
                } else if known {
                    // The kernel checks `optlen` and the id's state per option.
                    want(&[0, EINVAL])
                } else {
                    want(&[EOPNOTSUPP, ENOSYS, EINVAL])
                };
                let Some(r) = self
                    .c
                    .set_option(s, level, name, (!null).then_some(&val[..]))
                else {
                    return;
                };
                self.neg1_ret("rdma_set_option", r, &w);
            }
            Call::InitQpAttr { id, state, null } => self.init_qp_attr(id, state, null),
            Call::GetCmEvent { ch, null } => self.get_cm_event(ch, null),
            Call::AckCmEvent { ev } => {
                let s = self.pick(Kind::Event, ev);
                let Some(r) = self.c.ack_cm_event(s) else {
                    return;
                };
                let w = if s.is_none() { [EINVAL] } else { [0] };
                self.neg1_ret("rdma_ack_cm_event", r, &w);
                if let Some(s) = s {
                    self.events.remove(&s);
                }
            }
            Call::Ports { id } => {
                let s = self.pick(Kind::Id, id);
                let Some((sp, dp)) = self.c.ports(s) else {
                    return;
                };
                let Some(i) = s.and_then(|s| self.ids.get(&s)) else {
                    if (sp, dp) != (0, 0) {
                        self.fail(format!("rdma_get_src/dst_port(NULL) = {sp}/{dp}"));
                    }
                    return;
                };
                if i.state == Cm::Unknown {
                    return;
                }
                let ws = i.src_port.unwrap_or(0);
                let wd = i.dst_port.unwrap_or(0);
                if (sp, dp) != (ws, wd) {
                    self.fail(format!(
                        "rdma_get_src/dst_port = {sp}/{dp}, the calls made {ws}/{wd}"
                    ));
                }
            }
            Call::PollAll {} => self.poll_all(),
        }
    }
}
