//! The harness's bookkeeping: picking the objects a record names, checking a call's result
//! against what it may return, keeping the model's QP states, and the end of an input.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rnic::calls::{Calls, Kind, Made, Ret, CM_CHANNELS};
use verbs_core::QpState;

use super::{Env, Harness, QpKey, QpM, EIO, MAX_LIVE};

impl Harness {
    pub(super) fn new(env: &'static Env) -> Harness {
        let mut c = Calls::new();
        let cm_ctx = c.cm_context();
        Harness {
            env,
            c,
            log: RefCell::new(Vec::new()),
            ctxs: BTreeSet::new(),
            cm_ctx,
            pds: BTreeMap::new(),
            mrs: BTreeMap::new(),
            dead_keys: Vec::new(),
            comps: BTreeSet::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            retired: BTreeMap::new(),
            ahs: BTreeMap::new(),
            ids: BTreeMap::new(),
            events: BTreeMap::new(),
            queues: vec![VecDeque::new(); CM_CHANNELS],
            next_wr: 1,
        }
    }

    pub(super) fn fail(&self, msg: String) -> ! {
        panic!(
            "capi_calls: {msg}\ncalls of this input:\n{}",
            self.log.borrow().join("\n")
        )
    }

    /// Adds a result to the log.
    pub(super) fn note(&self, what: &str, got: impl std::fmt::Display) {
        if let Some(l) = self.log.borrow_mut().last_mut() {
            l.push_str(&format!("\n    {what}: {got}"));
        }
    }

    pub(super) fn verdict(&self, what: &str, got: i32, w: &[i32]) {
        self.note(what, got);
        if !w.contains(&got) {
            let hint = if got == EIO {
                " (EIO: a panic inside the entry point?)"
            } else {
                ""
            };
            self.fail(format!(
                "{what} returned errno {got}{hint}, expected one of {w:?}"
            ));
        }
    }

    /// An `int` verb: 0 or a positive errno.
    pub(super) fn int_ret(&self, what: &str, r: Ret, w: &[i32]) -> i32 {
        if r.rc < 0 {
            self.fail(format!("{what} returned {r:?}: negative, not an errno"));
        }
        self.verdict(what, r.rc, w);
        r.rc
    }

    /// An rdma_cm-style call: 0, or -1 with errno.
    pub(super) fn neg1_ret(&self, what: &str, r: Ret, w: &[i32]) -> i32 {
        let got = match r.rc {
            0 => 0,
            -1 if r.errno > 0 => r.errno,
            _ => self.fail(format!(
                "{what} returned {r:?}: not 0, nor -1 with errno set"
            )),
        };
        self.verdict(what, got, w);
        got
    }

    /// An object call: non-NULL, or NULL with errno.
    pub(super) fn made_ret(&self, what: &str, m: Made, w: &[i32]) -> i32 {
        let got = match m.slot {
            Some(_) => 0,
            None if m.errno > 0 => m.errno,
            None => self.fail(format!("{what} returned NULL without errno")),
        };
        self.verdict(what, got, w);
        got
    }

    /// A live object of `k` chosen by `b` (0xF8..: NULL; none live: NULL).
    pub(super) fn pick(&self, k: Kind, b: u8) -> Option<usize> {
        if b >= 0xF8 {
            return None;
        }
        let live = match k {
            Kind::Context => {
                let mut v: Vec<usize> = self.ctxs.iter().copied().collect();
                v.push(self.cm_ctx);
                v
            }
            _ => self.c.live(k),
        };
        (!live.is_empty()).then(|| live[usize::from(b) % live.len()])
    }

    /// A context (never NULL: the entry points that take one do not check it).
    pub(super) fn ctx(&self, b: u8) -> usize {
        self.pick(Kind::Context, b & 0x7F).unwrap_or(self.cm_ctx)
    }

    /// A QP argument (bit 6: an id's QP).
    pub(super) fn pick_qp(&self, b: u8) -> Option<QpKey> {
        if b >= 0xF8 {
            return None;
        }
        if b & 0x40 != 0 {
            let ids: Vec<usize> = self.ids.keys().copied().collect();
            (!ids.is_empty()).then(|| QpKey::Id(ids[usize::from(b & 0x3F) % ids.len()]))
        } else {
            let qps: Vec<usize> = self.qps.keys().copied().collect();
            (!qps.is_empty()).then(|| QpKey::Qp(qps[usize::from(b) % qps.len()]))
        }
    }

    pub(super) fn qp(&self, k: QpKey) -> Option<&QpM> {
        match k {
            QpKey::Qp(s) => self.qps.get(&s),
            QpKey::Id(s) => self.ids.get(&s).and_then(|i| i.qp.as_ref()),
        }
    }

    pub(super) fn qp_mut(&mut self, k: QpKey) -> Option<&mut QpM> {
        match k {
            QpKey::Qp(s) => self.qps.get_mut(&s),
            QpKey::Id(s) => self.ids.get_mut(&s).and_then(|i| i.qp.as_mut()),
        }
    }

    pub(super) fn all_qps(&self) -> Vec<&QpM> {
        self.qps
            .values()
            .chain(self.ids.values().filter_map(|i| i.qp.as_ref()))
            .collect()
    }

    pub(super) fn full(&self, k: Kind) -> bool {
        self.c.live(k).len() >= MAX_LIVE
    }

    /// Brings the model's state of QP `k` in line with the device: an unknown state is
    /// adopted; a touched QP may have gone to ERR on its own; anything else must match.
    pub(super) fn sync(&mut self, k: QpKey) {
        let Some(q) = self.qp(k) else { return };
        if q.state.is_some() && !q.touched {
            return;
        }
        let Some((r, attr, _)) = self.c.query_qp(Some(k.r()), false, false) else {
            return;
        };
        let Some(a) = attr.filter(|_| r.rc == 0) else {
            self.fail(format!("ibv_query_qp of a live QP: {r:?}"));
        };
        let dev = u8::try_from(a.qp_state).ok().and_then(QpState::from_raw);
        let Some(dev) = dev else {
            self.fail(format!("ibv_query_qp: unknown qp_state {}", a.qp_state));
        };
        let model = self.qp(k).and_then(|q| q.state);
        match model {
            None => {}
            Some(s) if s == dev => {}
            Some(_) if dev == QpState::Err => {}
            Some(s) => self.fail(format!(
                "QP {k:?}: the device says {dev:?}, the calls made it {s:?}"
            )),
        }
        if let Some(q) = self.qp_mut(k) {
            q.state = Some(dev);
        }
    }

    // ---- the end ------------------------------------------------------------------------------

    /// After every CQ was polled empty: a QP in ERR has flushed all it had, so every receive
    /// and every signaled send it accepted has completed, unless one of its CQs may have
    /// overrun (or is one `rdma_create_qp` made, which is not polled here).
    fn check_flushed(&mut self) {
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
            self.sync(k);
            let Some(q) = self.qp(k) else { continue };
            if q.state != Some(QpState::Err) {
                continue;
            }
            let polled = |c: Option<usize>| {
                c.and_then(|c| self.cqs.get(&c))
                    .is_some_and(|&(_, cqe, posted)| posted <= u64::from(cqe))
            };
            let lost: Vec<u64> = (polled(q.send_cq).then(|| q.sq_sig.iter().copied()))
                .into_iter()
                .flatten()
                .chain(
                    (polled(q.recv_cq).then(|| q.rq.iter().copied()))
                        .into_iter()
                        .flatten(),
                )
                .collect();
            if !lost.is_empty() {
                self.fail(format!(
                    "QP {k:?} is in ERR and its CQs are empty, but WRs {lost:?} it accepted never \
                     completed"
                ));
            }
        }
    }

    pub(super) fn finish(&mut self) {
        self.poll_all();
        self.check_flushed();
        let failed = self.c.teardown();
        if !failed.is_empty() {
            self.fail(format!("teardown failed: {failed:?}"));
        }
    }
}
