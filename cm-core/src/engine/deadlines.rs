//! The [`CmEngine`]'s deadlines: the index of armed timers, and what fires when one is due —
//! retransmissions, send timeouts, TimeWait expiry and the expiry of passive requests the
//! consumer never answered.

use super::*;

/// An index of every armed deadline, so the next one is found without scanning every id (a
/// host may hold thousands of connections). Ids whose deadlines may have changed are noted in
/// `touched` (by `CmEngine::conn_mut`) and re-indexed lazily by `sync`, before any read.
#[derive(Debug, Clone, Default)]
pub(super) struct TimerIndex {
    by_time: BTreeSet<(SimTime, IbCmId)>,
    armed: BTreeMap<IbCmId, SimTime>,
    touched: Vec<IbCmId>,
    /// `handle_timeout`'s list of due ids, kept for its buffer.
    due: Vec<IbCmId>,
}

impl TimerIndex {
    /// Notes that `id`'s deadlines may have changed (once for a run of touches of one id: a
    /// handler touches its id several times, and `sync` would find the later ones unchanged).
    pub(super) fn touch(&mut self, id: IbCmId) {
        if self.touched.last() != Some(&id) {
            self.touched.push(id);
        }
    }

    pub(super) fn sync(&mut self, conns: &BTreeMap<IbCmId, Conn>) {
        if self.touched.is_empty() {
            return;
        }
        // Taken and given back emptied: the list keeps its buffer (it fills on every MAD).
        let mut touched = std::mem::take(&mut self.touched);
        for &id in &touched {
            let want = conns.get(&id).and_then(Conn::deadline);
            let had = match want {
                Some(t) => self.armed.insert(id, t),
                None => self.armed.remove(&id),
            };
            if had == want {
                continue;
            }
            if let Some(t) = had {
                self.by_time.remove(&(t, id));
            }
            if let Some(t) = want {
                self.by_time.insert((t, id));
            }
        }
        touched.clear();
        self.touched = touched;
    }
}

impl CmEngine {
    /// The earliest armed timer (retransmission or TimeWait), if any.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        let mut timers = self.timers.borrow_mut();
        timers.sync(&self.conns);
        let next = timers.by_time.first().map(|(t, _)| *t);
        // Tests run with debug assertions: every call cross-checks the index against a scan
        // (up to 256 ids, so that scale tests stay linear).
        debug_assert!(
            self.conns.len() > 256 || next == self.conns.values().filter_map(Conn::deadline).min(),
            "CM timer index out of step with the connections"
        );
        next
    }

    /// Runs every timer due at `now`: retransmissions (with the [`Backoff`] schedule), send
    /// timeouts (REQ → IDLE + REQ_ERROR, REP → IDLE + REP_ERROR, DREQ → TIMEWAIT +
    /// DREQ_ERROR, SIDR_REQ → IDLE + SIDR_REQ_ERROR; cm-spec §3.3), TimeWait expiry (→ IDLE + TIMEWAIT_EXIT) and the expiry
    /// of passive requests. Due ids fire in id order.
    ///
    /// **Passive request expiry** (a difference from Linux): a passive id the consumer has
    /// neither accepted nor rejected (REQ_RCVD, MRA_REQ_SENT) expires once its active side
    /// has certainly given up — the REQ's own timeout fields bound that (see
    /// `request_lifetime_ms`). It then goes to IDLE with the event a REJ (reason 4, Timeout,
    /// ARI the active CA GUID) would have raised, as if the REJ an active side sends when its
    /// REQ times out had arrived: rdma_cm consumers see `RDMA_CM_EVENT_REJECTED` status 4,
    /// as on Linux when that REJ does arrive. Linux keeps such an id until the consumer
    /// answers, so a forged REQ (whose active side never existed, and never sends that REJ)
    /// held its state forever.
    pub fn handle_timeout(&mut self, now: SimTime) {
        let timers = self.timers.get_mut();
        timers.sync(&self.conns);
        let mut due = std::mem::take(&mut timers.due);
        due.extend(
            timers
                .by_time
                .iter()
                .take_while(|(t, _)| *t <= now)
                .map(|(_, id)| *id),
        );
        due.sort_unstable();
        for &id in &due {
            self.fire_timers(now, id);
        }
        due.clear();
        self.timers.get_mut().due = due;
    }

    fn fire_timers(&mut self, now: SimTime, id: IbCmId) {
        let backoff = self.cfg.backoff;
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        let waiting = matches!(c.state, IbCmState::ReqRcvd | IbCmState::MraReqSent);
        if waiting && c.request_expires.is_some_and(|t| t <= now) {
            c.request_expires = None;
            let ari = c.remote_ca_guid.to_be_bytes().to_vec();
            tracing::debug!(
                id = id.0,
                "passive request expired unanswered (as REJ 4 timeout)"
            );
            self.counters.requests_expired += 1;
            self.reset_to_idle(id);
            let reason = RejectReason::Timeout.into();
            let private_data = Vec::new();
            self.event(
                id,
                IbCmEventKind::RejReceived {
                    reason,
                    ari,
                    private_data,
                },
            );
            return;
        }
        if c.timewait_at.is_some_and(|t| t <= now) {
            c.timewait_at = None;
            if c.state == IbCmState::Timewait {
                c.set_state(id, IbCmState::Idle);
                self.event(id, IbCmEventKind::TimewaitExit);
            }
            return;
        }
        let Some(p) = c.pending.as_mut() else {
            return;
        };
        if p.deadline > now {
            return;
        }
        if p.retries_left > 0 {
            p.retries_left -= 1;
            p.sends += 1;
            p.deadline = now.plus_nanos(backoff.timeout_ms(p.timeout_ms, p.sends) * 1_000_000);
            let (dst, mad, sends) = (p.dst, p.mad, p.sends);
            self.counters.tx_retransmits += 1;
            self.queue_send(dst, mad, sends);
            return;
        }
        log::gave_up(id, &p.mad, p.sends);
        c.pending = None;
        self.counters.tx_timeouts += 1;
        match c.state {
            IbCmState::ReqSent | IbCmState::MraReqRcvd => {
                self.reset_to_idle(id);
                self.event(id, IbCmEventKind::ReqError);
            }
            IbCmState::RepSent | IbCmState::MraRepRcvd => {
                self.reset_to_idle(id);
                self.event(id, IbCmEventKind::RepError);
            }
            IbCmState::DreqSent => {
                self.enter_timewait(now, id);
                self.event(id, IbCmEventKind::DreqError);
            }
            IbCmState::SidrReqSent => {
                // cm_process_send_error: the id goes back to IDLE.
                if let Some(c) = conn_mut!(self, id) {
                    c.set_state(id, IbCmState::Idle);
                }
                self.event(id, IbCmEventKind::SidrReqError);
            }
            _ => {}
        }
    }
}

impl CmEngine {
    /// How long, in ms, a passive request may wait for the consumer's answer: until its
    /// active side has certainly given up. The active side waits `per_try` ms after each of
    /// its `max_cm_retries + 1` REQs (the [`Backoff`] schedule of this node, Linux's linear
    /// one by default): `2·ms(packet life time) + ms(Remote CM Response Timeout)` (Linux
    /// `cm_send_req`). Once this side has sent an MRA, one wait is pushed back by
    /// `ms(MRA service timeout) + ms(av.timeout)` (`cm_mra_handler`, as this engine's active
    /// side does; a peer that keeps the longer wait for every try sends its next REQ within
    /// it, and each REQ from the peer moves the expiry out again). The REQ's fields are taken
    /// up to this node's own packet life time, `cm_response_timeout` and `max_cm_retries`
    /// (the path's packet life time is the REQ's Local ACK Timeout − 1), so a REQ cannot buy
    /// hours: expiring early costs a genuine active side nothing but a fresh request from its
    /// next REQ.
    pub(super) fn request_lifetime_ms(&self, r: &Req, mra_sent: bool) -> u64 {
        let cfg = &self.cfg;
        // The REQ's fields, no larger than this node's own or Linux's defaults, whichever is
        // larger: a peer tuned slower than this node (but not than Linux) is still waited for.
        let linux = CmConfig::default();
        let plt = r
            .primary_path
            .local_ack_timeout
            .saturating_sub(1)
            .min(cfg.packet_life_time.max(linux.packet_life_time));
        let per_try = 2 * cm_convert_to_ms(plt)
            + cm_convert_to_ms(
                r.remote_cm_response_timeout
                    .min(cfg.cm_response_timeout.max(linux.cm_response_timeout)),
            );
        let sends = u32::from(
            r.max_cm_retries
                .min(cfg.max_cm_retries.max(linux.max_cm_retries)),
        ) + 1;
        let retries = (1..=sends)
            .map(|k| cfg.backoff.timeout_ms(per_try, k))
            .fold(0u64, u64::saturating_add);
        let mra = if mra_sent {
            cm_convert_to_ms(cfg.mra_service_timeout)
                + cm_convert_to_ms(plt.saturating_add(1).min(31))
        } else {
            0
        };
        retries.saturating_add(mra)
    }
}
