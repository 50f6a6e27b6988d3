//! Posting send and receive WR lists, polling, and the completions polled.

use std::collections::BTreeSet;

use rnic::abi::*;
use rnic::calls::{BadWr, Kind, RecvWr, SendWr};
use verbs_core::{QpState, QpType, Sge};

use super::records::{RecvSpec, SendSpec, SgeSpec};
use super::{
    want, Harness, MrM, QpKey, QpM, Want, EINVAL, EIO, ENOMEM, EOPNOTSUPP, MAX_SGES, MAX_WRS,
};

impl Harness {
    /// A WR's SGE list from its specs; `(list, sum of lengths, every SGE inside a live
    /// region's range)`.
    fn sges(&self, specs: &[SgeSpec]) -> (Vec<Sge>, u64, bool) {
        let mrs: Vec<MrM> = self.mrs.values().copied().collect();
        let mut inside = true;
        let mut total = 0u64;
        let v = specs
            .iter()
            .take(MAX_SGES)
            .map(|g| {
                let mr =
                    (g.mr < 0xF8 && !mrs.is_empty()).then(|| mrs[usize::from(g.mr) % mrs.len()]);
                let off = i64::from(g.off as i16);
                let len = u32::from(g.len).wrapping_mul(match g.key >> 6 {
                    0 => 1,
                    1 => 16,
                    2 => 0x1_0000,
                    _ => 0x2_0000,
                });
                let (addr, lkey) = match mr {
                    Some(m) => (
                        m.iova.wrapping_add_signed(off),
                        match g.key % 4 {
                            0 => m.lkey,
                            1 => m.rkey,
                            2 => self.dead_keys.last().copied().unwrap_or(0xDEAD),
                            _ => u32::from(g.off) << 16 | u32::from(g.len),
                        },
                    ),
                    None => (u64::from(g.off) << 12, u32::from(g.len)),
                };
                total += u64::from(len);
                let within = |m: &MrM| {
                    addr >= m.iova
                        && addr
                            .checked_add(u64::from(len))
                            .is_some_and(|e| m.iova.checked_add(m.len).is_some_and(|end| e <= end))
                };
                if len > 0 && !mrs.iter().any(within) {
                    inside = false;
                }
                Sge {
                    addr,
                    length: len,
                    lkey,
                }
            })
            .collect();
        (v, total, inside)
    }

    fn num_sge(nsge: u8, listed: usize) -> i32 {
        match nsge % 8 {
            n @ 0..=4 => i32::from(n).min(listed as i32),
            5 => listed as i32,
            6 => -1,
            _ => i32::MIN,
        }
    }

    pub(super) fn post_send(&mut self, qp: u8, bad: u8, specs: &[SendSpec]) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let q = k.and_then(|k| self.qp(k)).cloned();
        let mrs: Vec<MrM> = self.mrs.values().copied().collect();
        let mut wrs = Vec::new();
        // Per WR: exact EINVAL, or which results it allows.
        let mut verdicts: Vec<Want> = Vec::new();
        for sp in specs.iter().take(MAX_WRS) {
            let (list, _, _) = self.sges(&sp.sges);
            let null_list = sp.sges.is_empty() && sp.nsge == 0xFF;
            let n = if null_list {
                i32::from(sp.flags >> 7)
            } else {
                Self::num_sge(sp.nsge, list.len())
            };
            let used = usize::try_from(n).unwrap_or(0).min(list.len());
            let (_, total, inside) = self.sges(&sp.sges[..used.min(sp.sges.len())]);
            let opcode = if sp.opcode < 0xE0 {
                u32::from(sp.opcode % 7)
            } else {
                u32::from(sp.opcode & 0x1F)
            };
            let flags = u32::from(sp.flags & 0x0F)
                | if sp.flags & 0x40 != 0 {
                    u32::from(sp.flags) << 8
                } else {
                    0
                };
            let remote = (sp.remote < 0xF8 && !mrs.is_empty())
                .then(|| mrs[usize::from(sp.remote & 0x7F) % mrs.len()]);
            let (raddr, rkey) = match remote {
                Some(m) if sp.remote & 0x80 == 0 => {
                    (m.iova.wrapping_add(u64::from(sp.roff)), m.rkey)
                }
                _ => (u64::from(sp.roff), u32::from(sp.roff)),
            };
            let ah = self.pick(Kind::Ah, sp.ah);
            let wr_id = self.next_wr;
            self.next_wr += 1;
            wrs.push(SendWr {
                wr_id,
                sg_list: (!null_list).then(|| list.clone()),
                num_sge: n,
                opcode,
                send_flags: flags,
                imm_data: 0x1234_5678,
                remote_addr: raddr,
                rkey,
                compare_add: 1,
                swap: 2,
                ah,
                remote_qpn: 0x11,
                remote_qkey: 0x1111_1111,
            });
            let Some(q) = &q else {
                verdicts.push(want(&[EINVAL]));
                continue;
            };
            let atomic =
                opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
            let send = opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM;
            let inline = flags & IBV_SEND_INLINE != 0;
            let v = if opcode > 6 {
                if [7, 8, 9, 10, 11, 15].contains(&opcode) {
                    want(&[EINVAL, EOPNOTSUPP])
                } else {
                    want(&[EINVAL])
                }
            } else if n < 0
                || (null_list && n > 0)
                || n as u32 > q.cap.max_send_sge
                || (atomic && (total < 8 || raddr % 8 != 0))
                || (inline && total > u64::from(q.cap.max_inline_data))
            {
                want(&[EINVAL])
            } else if total > 1 << 31
                || (atomic && total != 8)
                || (q.qp_type == QpType::Ud && (!send || total > 1024))
                || (inline && (atomic || opcode == IBV_WR_RDMA_READ || !inside))
            {
                // rxe takes these and fails them at execution; the simulated device refuses
                // them at the post (or, for inline data, needs registered memory).
                want(&[0, EINVAL])
            } else {
                want(&[0])
            };
            verdicts.push(v);
        }
        let with_bad = bad.is_multiple_of(2);
        let Some((rc, b)) = self.c.post_send(k.map(QpKey::r), &wrs, with_bad) else {
            return;
        };
        let sig_all = q.as_ref().is_some_and(|q| q.sig_all);
        let ids: Vec<(u64, bool)> = wrs
            .iter()
            .map(|w| (w.wr_id, sig_all || w.send_flags & IBV_SEND_SIGNALED != 0))
            .collect();
        self.post_result(
            "ibv_post_send",
            k,
            q.as_ref(),
            rc,
            b,
            with_bad,
            &verdicts,
            &ids,
            true,
        );
    }

    pub(super) fn post_recv(&mut self, qp: u8, bad: u8, specs: &[RecvSpec]) {
        let k = self.pick_qp(qp);
        if let Some(k) = k {
            self.sync(k);
        }
        let q = k.and_then(|k| self.qp(k)).cloned();
        let mut wrs = Vec::new();
        let mut verdicts = Vec::new();
        for sp in specs.iter().take(MAX_WRS) {
            let (list, _, _) = self.sges(&sp.sges);
            let null_list = sp.sges.is_empty() && sp.nsge == 0xFF;
            let n = if null_list {
                1
            } else {
                Self::num_sge(sp.nsge, list.len())
            };
            let wr_id = self.next_wr;
            self.next_wr += 1;
            wrs.push(RecvWr {
                wr_id,
                sg_list: (!null_list).then_some(list),
                num_sge: n,
            });
            let v = match &q {
                None => want(&[EINVAL]),
                Some(q) if n < 0 || null_list || n as u32 > q.cap.max_recv_sge => want(&[EINVAL]),
                Some(_) => want(&[0]),
            };
            verdicts.push(v);
        }
        let with_bad = bad.is_multiple_of(2);
        let Some((rc, b)) = self.c.post_recv(k.map(QpKey::r), &wrs, with_bad) else {
            return;
        };
        let ids: Vec<(u64, bool)> = wrs.iter().map(|w| (w.wr_id, true)).collect();
        self.post_result(
            "ibv_post_recv",
            k,
            q.as_ref(),
            rc,
            b,
            with_bad,
            &verdicts,
            &ids,
            false,
        );
    }

    /// Checks a post's result against the per-WR verdicts (see the module docs) and records
    /// the posted WRs.
    #[allow(clippy::too_many_arguments)]
    fn post_result(
        &mut self,
        what: &str,
        k: Option<QpKey>,
        q: Option<&QpM>,
        rc: i32,
        bad: BadWr,
        with_bad: bool,
        verdicts: &[Want],
        ids: &[(u64, bool)],
        send: bool,
    ) {
        self.note(what, format!("{rc}, *bad_wr {bad:?}"));
        if rc < 0 {
            self.fail(format!("{what} returned {rc}: negative, not an errno"));
        }
        let (Some(k), Some(q)) = (k, q) else {
            // NULL QP: EINVAL, `*bad_wr` untouched or the first WR.
            self.verdict(what, rc, &[EINVAL]);
            return;
        };
        if ids.is_empty() {
            // An empty (NULL) list: librnic posts nothing (mlx5 too), rxe says EINVAL.
            self.verdict(what, rc, &[0, EINVAL]);
            return;
        }
        let state = q.state.unwrap_or(QpState::Err);
        let refuses = if send {
            matches!(state, QpState::Reset | QpState::Init | QpState::Rtr)
        } else {
            state == QpState::Reset
        };
        let (cap, out) = if send {
            (q.cap.max_send_wr as usize, q.sq.len())
        } else {
            (q.cap.max_recv_wr as usize, q.rq.len())
        };
        let err = state == QpState::Err;
        // What WR i may return, given i accepted before it.
        let allows = |i: usize, got: i32| -> bool {
            if refuses {
                return got == EINVAL && i == 0;
            }
            let v = &verdicts[i];
            v.contains(&got) || (got == ENOMEM && !err && out + i >= cap && v.contains(&0))
        };
        let posted = if rc == 0 {
            if let Some(i) = (0..ids.len()).find(|&i| !allows(i, 0)) {
                self.fail(format!(
                    "{what} returned 0 but WR {i} should have failed ({:?}; state {state:?})",
                    if refuses { &[EINVAL][..] } else { &verdicts[i] }
                ));
            }
            if bad != BadWr::Untouched {
                self.fail(format!("{what} returned 0 and set *bad_wr to {bad:?}"));
            }
            ids.len()
        } else {
            // The WR that failed: `*bad_wr`, or without it any that may have (the WRs
            // between the first and the last candidate may have been posted).
            let fits = |j: usize| allows(j, rc) && (0..j).all(|i| allows(i, 0));
            let (j, maybe) = match (bad, with_bad) {
                (BadWr::Index(j), true) => (j, j),
                (b, true) => self.fail(format!("{what} returned {rc} with *bad_wr {b:?}")),
                (_, false) => {
                    let first = (0..ids.len()).find(|&j| fits(j)).unwrap_or(ids.len());
                    let last = (0..ids.len()).rev().find(|&j| fits(j)).unwrap_or(first);
                    (first, last)
                }
            };
            if j >= ids.len() || !fits(j) {
                self.fail(format!(
                    "{what} returned {rc} naming WR {j} of {}: verdicts {verdicts:?}, state \
                     {state:?}, {out} outstanding of {cap}",
                    ids.len()
                ));
            }
            if maybe > j {
                let qpn = q.qp_num;
                self.retired
                    .entry(qpn)
                    .or_default()
                    .extend(ids[j..maybe].iter().map(|&(id, _)| id));
            }
            j
        };
        if posted > 0 {
            if let Some(m) = self.qp_mut(k) {
                m.touched = true;
                let set = if send { &mut m.sq } else { &mut m.rq };
                set.extend(ids[..posted].iter().map(|&(id, _)| id));
                if send {
                    m.sq_sig
                        .extend(ids[..posted].iter().filter(|x| x.1).map(|&(id, _)| id));
                }
            }
            let cqs: Vec<usize> = [q.send_cq, q.recv_cq].into_iter().flatten().collect();
            for c in cqs {
                if let Some(e) = self.cqs.get_mut(&c) {
                    e.2 += posted as u64;
                }
            }
        }
    }

    /// Forgets a destroyed QP; its WRs may still complete in a CQ.
    pub(super) fn retire(&mut self, q: &QpM) {
        let all: BTreeSet<u64> = q.sq.union(&q.rq).copied().collect();
        self.retired.entry(q.qp_num).or_default().extend(all);
    }

    /// Checks polled completions of CQ `cq`.
    fn completions(&mut self, cq: usize, wcs: &[ibv_wc]) {
        for wc in wcs {
            if wc.status > 21 {
                self.fail(format!("completion status {}", wc.status));
            }
            let mut found = false;
            let keys: Vec<QpKey> = self
                .qps
                .keys()
                .map(|&s| QpKey::Qp(s))
                .chain(
                    self.ids
                        .iter()
                        .filter(|(_, i)| i.qp.is_some())
                        .map(|(&s, _)| QpKey::Id(s)),
                )
                .collect();
            for k in keys {
                let Some(q) = self.qp_mut(k) else { continue };
                if q.qp_num != wc.qp_num {
                    continue;
                }
                let (s_cq, r_cq) = (q.send_cq, q.recv_cq);
                let in_sq = q.sq.remove(&wc.wr_id);
                q.sq_sig.remove(&wc.wr_id);
                let in_rq = !in_sq && q.rq.remove(&wc.wr_id);
                if (in_sq && s_cq == Some(cq)) || (in_rq && r_cq == Some(cq)) {
                    found = true;
                } else if in_sq || in_rq {
                    self.fail(format!(
                        "completion of WR {} of QP {:#x} on CQ {cq}, not its queue's",
                        wc.wr_id, wc.qp_num
                    ));
                }
                break;
            }
            if !found {
                found = self
                    .retired
                    .get_mut(&wc.qp_num)
                    .is_some_and(|s| s.remove(&wc.wr_id));
            }
            if !found {
                self.fail(format!(
                    "completion of WR {} on QP {:#x} (status {}): never posted there, or completed twice",
                    wc.wr_id, wc.qp_num, wc.status
                ));
            }
        }
    }

    pub(super) fn poll(&mut self, s: Option<usize>, n: i32, null_wc: bool) {
        let n = match n {
            -128..=-100 => i32::MIN,
            x if x > 64 => 0x7FFF_FFFF,
            x => x,
        };
        let Some((rc, wcs)) = self.c.poll_cq(s, n, null_wc) else {
            return;
        };
        let st: Vec<u32> = wcs.iter().map(|w| w.status).collect();
        self.note("ibv_poll_cq", format!("{rc}, statuses {st:?}"));
        let Some(s) = s else {
            // librnic: -EINVAL; rdma-core crashes.
            self.verdict("ibv_poll_cq(NULL)", -rc, &[EINVAL]);
            return;
        };
        if n > 0 && null_wc {
            self.verdict("ibv_poll_cq(wc NULL)", -rc, &[EINVAL]);
            return;
        }
        if n < 0 {
            // rxe and mlx5 poll nothing (0); librnic says -EINVAL.
            if rc != 0 {
                self.verdict("ibv_poll_cq(n < 0)", -rc, &[EINVAL]);
            }
            return;
        }
        if rc < 0 {
            // -EIO: a CQ that overran (more WRs were posted on its QPs than it holds).
            let (_, cqe, posted) = self.cqs.get(&s).copied().unwrap_or((None, 0, 0));
            let w = if posted > u64::from(cqe) { [EIO] } else { [0] };
            self.verdict("ibv_poll_cq", -rc, &w);
            return;
        }
        if rc > n || wcs.len() != rc as usize {
            self.fail(format!(
                "ibv_poll_cq({n}) returned {rc} ({} written)",
                wcs.len()
            ));
        }
        self.completions(s, &wcs);
    }

    pub(super) fn poll_all(&mut self) {
        for s in self.c.live(Kind::Cq) {
            for _ in 0..64 {
                let Some((rc, wcs)) = self.c.poll_cq(Some(s), 16, false) else {
                    break;
                };
                if rc <= 0 {
                    break;
                }
                self.completions(s, &wcs);
            }
        }
    }
}
