//! QPs: capabilities, create, modify (the attribute sets and what a transition allows),
//! query, and address vectors.

use std::collections::BTreeSet;

use rnic::abi::*;
use rnic::calls::{Kind, QpInit, QpRef};
use verbs_core::{transition_masks, QpAttrMask, QpCap, QpState, QpType};

use super::{qp_type_ok, want, Harness, QpKey, QpM, Want, EINVAL, EOPNOTSUPP};

impl Harness {
    /// Capabilities from four 6-bit fields (send WRs, receive WRs, send SGEs, receive SGEs:
    /// 0 → 0, 1 → the device's maximum, 2 → one more, 3 → `u32::MAX`, `x` → `x % 9`) and the
    /// inline size in bits 24–25 (0, 64, the maximum, one more).
    pub(super) fn caps(&self, caps: u32) -> QpCap {
        let e = self.env;
        let pick = |b: u32, max: u32| -> u32 {
            match b & 0x3F {
                0 => 0,
                1 => max,
                2 => max + 1,
                3 => u32::MAX,
                x => x % 9,
            }
        };
        QpCap {
            max_send_wr: pick(caps, e.max_qp_wr),
            max_recv_wr: pick(caps >> 6, e.max_qp_wr),
            max_send_sge: pick(caps >> 12, e.max_sge),
            max_recv_sge: pick(caps >> 18, e.max_sge),
            max_inline_data: match (caps >> 24) & 3 {
                0 => 0,
                1 => 64,
                2 => e.max_inline,
                _ => e.max_inline + 1,
            },
        }
    }

    /// The send limits librnic grants for `cap`, as rxe's `rxe_qp_init_req` rounds them: a
    /// send WQE of max(16 × `max_send_sge`, `max_inline_data`) bytes, both limits grown to fill
    /// it, up to the device's maxima.
    pub(super) fn granted(&self, mut cap: QpCap) -> QpCap {
        let e = self.env;
        if cap.max_send_sge <= e.max_sge && cap.max_inline_data <= e.max_inline {
            let wqe = cap.max_send_sge.saturating_mul(16).max(cap.max_inline_data);
            cap.max_inline_data = wqe.min(e.max_inline);
            cap.max_send_sge = (wqe / 16).min(e.max_sge).max(cap.max_send_sge);
        }
        cap
    }

    pub(super) fn qp_type(t: u8) -> u32 {
        match t % 8 {
            0..=3 => IBV_QPT_RC,
            4 | 5 => IBV_QPT_UD,
            6 => IBV_QPT_UC,
            _ => u32::from(t),
        }
    }

    /// The expectation for a QP of `cap` and type `t`, as `ibv_create_qp` checks them.
    pub(super) fn qp_want(&self, t: u32, cap: &QpCap) -> Want {
        let e = self.env;
        if t == IBV_QPT_UC {
            return want(&[EOPNOTSUPP]);
        }
        if qp_type_ok(t).is_none() {
            return want(&[EOPNOTSUPP, EINVAL]);
        }
        if cap.max_send_wr > e.max_qp_wr
            || cap.max_recv_wr > e.max_qp_wr
            || cap.max_send_sge > e.max_sge
            || cap.max_recv_sge > e.max_sge
            || cap.max_inline_data > e.max_inline
        {
            return want(&[EINVAL]);
        }
        if cap.max_send_wr == 0 && cap.max_recv_wr == 0 {
            // rxe takes such a QP; the simulated device refuses it.
            return want(&[0, EINVAL]);
        }
        want(&[0])
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_qp(
        &mut self,
        pd: u8,
        null: u8,
        scq: u8,
        rcq: u8,
        t: u8,
        caps: u32,
        sig: u8,
    ) {
        if self.full(Kind::Qp) {
            return;
        }
        let s = self.pick(Kind::Pd, pd);
        let (sc, rc) = (self.pick(Kind::Cq, scq), self.pick(Kind::Cq, rcq));
        let null = null % 8 == 7;
        let init = QpInit {
            send_cq: sc,
            recv_cq: rc,
            cap: self.caps(caps),
            qp_type: Self::qp_type(t),
            sq_sig_all: i32::from(sig % 2),
        };
        let w = if s.is_none() || null || sc.is_none() || rc.is_none() {
            want(&[EINVAL])
        } else {
            self.qp_want(init.qp_type, &init.cap)
        };
        let Some(m) = self.c.create_qp(s, (!null).then_some(&init)) else {
            return;
        };
        self.made_ret("ibv_create_qp", m, &w);
        if let Some(q) = m.slot {
            let Some(info) = self.c.qp_info(QpRef::Qp(q)) else {
                return;
            };
            if info.state != IBV_QPS_RESET || info.qp_type != init.qp_type {
                self.fail(format!("ibv_create_qp: {info:?}"));
            }
            let Some(qp_type) = qp_type_ok(init.qp_type) else {
                return;
            };
            let cap = self.granted(init.cap);
            self.qps.insert(
                q,
                QpM {
                    qp_type,
                    cap,
                    state: Some(QpState::Reset),
                    touched: false,
                    pd: s,
                    send_cq: sc,
                    recv_cq: rc,
                    qp_num: info.qp_num,
                    sig_all: init.sq_sig_all != 0,
                    sq: BTreeSet::new(),
                    rq: BTreeSet::new(),
                    sq_sig: BTreeSet::new(),
                },
            );
        }
    }

    /// A valid address vector to this RNIC's own GID.
    pub(super) fn ah_attr(&self) -> ibv_ah_attr {
        ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: self.env.ip.to_ipv6_mapped().octets(),
                },
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        }
    }

    /// A valid attribute set for a modify to `target` (the transition's required attributes
    /// with in-range values), to be corrupted by one field.
    fn qp_attr(&self, target: u32, cur: u32) -> ibv_qp_attr {
        let dest = self.all_qps().first().map_or(0x11, |q| q.qp_num);
        ibv_qp_attr {
            qp_state: target,
            cur_qp_state: cur,
            path_mtu: 3,
            path_mig_state: 0,
            qkey: 0x1111_1111,
            rq_psn: 0x10,
            sq_psn: 0x20,
            dest_qp_num: dest,
            qp_access_flags: 0b111,
            cap: ibv_qp_cap {
                max_send_wr: 0,
                max_recv_wr: 0,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            ah_attr: self.ah_attr(),
            alt_ah_attr: self.ah_attr(),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: 0,
            sq_draining: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            alt_port_num: 1,
            alt_timeout: 14,
            rate_limit: 0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn modify_qp(
        &mut self,
        qp: u8,
        null: u8,
        target: u8,
        mode: u8,
        mask: u32,
        fix: u8,
        v: u32,
    ) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let q = k.and_then(|k| self.qp(k)).cloned();
        let cur = q.as_ref().and_then(|q| q.state).unwrap_or(QpState::Reset);
        // The target: mostly the next state on RESET → INIT → RTR → RTS, or any.
        let tgt: u32 = match target % 16 {
            0..=7 => match cur {
                QpState::Reset => 1,
                QpState::Init => 2,
                QpState::Rtr => 3,
                s => u32::from(s.raw()),
            },
            8..=14 => u32::from(target % 8),
            _ => u32::from(target),
        };
        let qt = q.as_ref().map_or(QpType::Rc, |q| q.qp_type);
        let tstate = u8::try_from(tgt).ok().and_then(QpState::from_raw);
        let table = tstate.and_then(|t| transition_masks(qt, cur, t));
        let (req, opt) = table.map_or((0, 0), |t| (t.required.bits(), t.optional.bits()));
        let m: u32 = match mode % 4 {
            0 => 1 | req | (opt & mask),
            1 => (1 | req) & !(1 << (mask % 21)),
            2 => mask,
            _ => 1 | req | (1 << (mask % 32)),
        };
        let mut a = self.qp_attr(tgt, u32::from(cur.raw()));
        match fix % 32 {
            0 => a.qp_state = v,
            1 => a.cur_qp_state = v % 8,
            2 => a.path_mtu = v % 8,
            3 => a.port_num = v as u8,
            4 => a.pkey_index = v as u16,
            5 => a.ah_attr.is_global = 0,
            6 => a.ah_attr.grh.sgid_index = v as u8,
            7 => a.ah_attr.port_num = v as u8,
            8 => a.max_rd_atomic = v as u8,
            9 => a.max_dest_rd_atomic = v as u8,
            10 => a.timeout = v as u8,
            11 => a.retry_cnt = v as u8,
            12 => a.rnr_retry = v as u8,
            13 => a.min_rnr_timer = v as u8,
            14 => a.dest_qp_num = v,
            15 => a.qp_access_flags = v,
            16 => a.path_mtu = v,
            17 => a.sq_psn = v,
            _ => {}
        }
        let null = null % 8 == 7;
        let w = match (&q, null) {
            (None, _) | (_, true) => want(&[EINVAL]),
            (Some(q), false) => self.modify_want(q, cur, &a, m),
        };
        let Some(r) = self
            .c
            .modify_qp(k.map(QpKey::r), (!null).then_some(&a), m as i32)
        else {
            return;
        };
        let got = self.int_ret("ibv_modify_qp", r, &w);
        let Some(k) = k else { return };
        if got == 0 {
            let next = if m & 1 != 0 {
                u8::try_from(a.qp_state).ok().and_then(QpState::from_raw)
            } else {
                Some(cur)
            };
            // To RESET the queues empty without completions; those the device made before
            // may still be in the CQ (retired: they may come once).
            let mut dropped = None;
            if let Some(q) = self.qp_mut(k) {
                q.state = next;
                match next {
                    Some(QpState::Reset) => {
                        let mut all = std::mem::take(&mut q.sq);
                        all.append(&mut q.rq);
                        q.sq_sig.clear();
                        q.touched = false;
                        dropped = Some((q.qp_num, all));
                    }
                    Some(QpState::Err) => q.touched = true,
                    _ => {}
                }
            }
            if let Some((qpn, mut all)) = dropped {
                self.retired.entry(qpn).or_default().append(&mut all);
            }
            if m & 1 != 0 {
                let cached = self.c.qp_info(k.r()).map(|i| i.state);
                if cached != Some(a.qp_state) {
                    self.fail(format!(
                        "ibv_modify_qp to {} returned 0 but qp->state is {cached:?}",
                        a.qp_state
                    ));
                }
            }
        } else if q.is_some_and(|q| q.touched) {
            // The refused modify may have met a QP that had just gone to ERR.
            self.sync(k);
        }
    }

    /// `ibv_modify_qp`'s result for `q` in `cur` (see the module docs).
    fn modify_want(&self, q: &QpM, cur: QpState, a: &ibv_qp_attr, m: u32) -> Want {
        let e = self.env;
        // libibverbs `ibv_cmd_modify_qp` (RATE_LIMIT and up) and the kernel's
        // `IB_QP_ATTR_STANDARD_BITS` (above DEST_QPN).
        if m & !((1 << 21) - 1) != 0 {
            return want(&[EOPNOTSUPP]);
        }
        let mask = QpAttrMask::from_bits_retain(m);
        let st = |v: u32| {
            u8::try_from(v)
                .ok()
                .and_then(QpState::from_raw)
                .filter(|s| *s != QpState::Unknown)
        };
        let mut exact = false;
        let mut loose = false;
        if mask.contains(QpAttrMask::STATE) && st(a.qp_state).is_none() {
            exact = true;
        }
        if mask.contains(QpAttrMask::CUR_STATE) {
            match st(a.cur_qp_state) {
                None => exact = true,
                // verbs-core: a claimed current state must be the QP's (rxe takes the claim).
                Some(c) if c != cur => exact = true,
                _ => {}
            }
        }
        if !exact {
            let next = if mask.contains(QpAttrMask::STATE) {
                st(a.qp_state).unwrap_or(cur)
            } else {
                cur
            };
            match transition_masks(q.qp_type, cur, next) {
                None => exact = true,
                Some(t) => {
                    let given = mask.difference(QpAttrMask::STATE);
                    if !t.required.difference(given).is_empty()
                        || !given.difference(t.required.union(t.optional)).is_empty()
                    {
                        exact = true;
                    }
                }
            }
        }
        let has = |b: QpAttrMask| mask.contains(b);
        if has(QpAttrMask::PATH_MTU) && !(1..=5).contains(&a.path_mtu) {
            exact = true;
        }
        if has(QpAttrMask::PORT) && a.port_num != 1 {
            exact = true;
        }
        if has(QpAttrMask::PKEY_INDEX) && a.pkey_index != 0 {
            exact = true;
        }
        if has(QpAttrMask::AV) {
            let av = &a.ah_attr;
            if av.is_global == 0 || av.grh.sgid_index != 0 || av.port_num > 1 {
                exact = true;
            } else if av.port_num == 0 {
                loose = true;
            }
        }
        if has(QpAttrMask::MAX_QP_RD_ATOMIC) && u32::from(a.max_rd_atomic) > e.max_init_rd_atom {
            exact = true;
        }
        if has(QpAttrMask::MAX_DEST_RD_ATOMIC) && u32::from(a.max_dest_rd_atomic) > e.max_rd_atom {
            exact = true;
        }
        if has(QpAttrMask::TIMEOUT) && a.timeout > 31 {
            exact = true;
        }
        // Fields rxe takes as they are and the simulated device range-checks.
        if (has(QpAttrMask::RETRY_CNT) && a.retry_cnt > 7)
            || (has(QpAttrMask::RNR_RETRY) && a.rnr_retry > 7)
            || (has(QpAttrMask::MIN_RNR_TIMER) && a.min_rnr_timer > 31)
            || (has(QpAttrMask::DEST_QPN) && a.dest_qp_num > 0xFF_FFFF)
        {
            loose = true;
        }
        if exact {
            want(&[EINVAL])
        } else if loose {
            want(&[0, EINVAL])
        } else {
            want(&[0])
        }
    }

    pub(super) fn query_qp(&mut self, qp: u8, null: u8) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let null_attr = null % 8 == 7;
        let Some((r, a, cap)) = self
            .c
            .query_qp(k.map(QpKey::r), null_attr, null.is_multiple_of(2))
        else {
            return;
        };
        let q = k.and_then(|k| self.qp(k)).cloned();
        let w = if q.is_none() || null_attr {
            [EINVAL]
        } else {
            [0]
        };
        if self.int_ret("ibv_query_qp", r, &w) != 0 {
            return;
        }
        let (Some(q), Some(a)) = (q, a) else { return };
        let s = u8::try_from(a.qp_state).ok().and_then(QpState::from_raw);
        let ok_state = s == q.state || (q.touched && s == Some(QpState::Err));
        if !ok_state || a.cur_qp_state != a.qp_state {
            self.fail(format!(
                "ibv_query_qp: state {}/{}, the calls made {:?}",
                a.qp_state, a.cur_qp_state, q.state
            ));
        }
        if let Some(c) = cap {
            let want = QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            };
            // Granted capabilities are at least what was asked for.
            let asked = q.cap;
            if want.max_send_wr < asked.max_send_wr
                || want.max_recv_wr < asked.max_recv_wr
                || want.max_send_sge < asked.max_send_sge
                || want.max_recv_sge < asked.max_recv_sge
                || want.max_inline_data < asked.max_inline_data
            {
                self.fail(format!("ibv_query_qp: caps {want:?} below {asked:?}"));
            }
        }
        if let Some(k) = k {
            if let Some(m) = self.qp_mut(k) {
                m.state = s;
            }
        }
    }
}
