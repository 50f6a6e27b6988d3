//! A QP's side of the send budget it shares with the device's other RC QPs to its peer
//! (crate `shared::budget`): what it charges (the PSNs from its oldest unacknowledged one to
//! the highest it sent, in path-MTU bytes), when it must wait, and the loss signal it gives.

use super::*;

impl SimQp {
    /// Whether a request covering PSNs up to `end` (exclusive) may go now: PSNs already
    /// charged (a retransmission) always may; new ones need room in the peer's budget.
    pub(super) fn budget_room(&self, sh: &Shared, end: u32) -> bool {
        let new = psn_diff(end, self.req.sent_high);
        if new <= 0 || !sh.budgets.enabled() {
            return true;
        }
        let bytes = u64::from(new.unsigned_abs()) * u64::from(self.mtu());
        sh.budgets.admits(self.attr.ah_attr.grh.dgid, bytes)
    }

    /// [`budget_room`](Self::budget_room), and when there is none the QP waits for a
    /// release.
    pub(super) fn budget_admits(&self, sh: &mut Shared, end: u32) -> bool {
        if self.budget_room(sh, end) {
            return true;
        }
        sh.budgets.wait(self.attr.ah_attr.grh.dgid, self.qpn);
        false
    }

    /// A request covering PSNs up to `end` (exclusive) left: charges what it added.
    pub(super) fn budget_sent(&mut self, sh: &mut Shared, end: u32) {
        if psn_diff(end, self.req.sent_high) > 0 {
            self.req.sent_high = end;
        }
        self.sync_charge(sh, false);
    }

    /// Brings the charge to what is in flight now (PSNs from `comp_psn` to `sent_high`; none
    /// outside RTS and SQD): more is charged, less released — as acknowledged (`acked`, which
    /// grows the window) or given up.
    pub(super) fn sync_charge(&mut self, sh: &mut Shared, acked: bool) {
        if psn_diff(self.req.comp_psn, self.req.sent_high) > 0 {
            self.req.sent_high = self.req.comp_psn;
        }
        let live = matches!(self.state(), QpState::Rts | QpState::Sqd) && sh.budgets.enabled();
        let target = if live {
            let pkts = psn_diff(self.req.sent_high, self.req.comp_psn).max(0);
            u64::from(pkts.unsigned_abs()) * u64::from(self.mtu())
        } else {
            0
        };
        let peer = self.attr.ah_attr.grh.dgid;
        if self.req.charged > 0 && (target == 0 || self.req.charged_to != peer) {
            sh.budgets
                .release(self.req.charged_to, self.req.charged, acked, self.mtu());
            self.req.charged = 0;
        }
        if target > self.req.charged {
            sh.budgets.charge(peer, target - self.req.charged);
        } else if target < self.req.charged {
            sh.budgets
                .release(peer, self.req.charged - target, acked, self.mtu());
        }
        self.req.charged = target;
        self.req.charged_to = peer;
    }

    /// Releases the whole charge (the QP leaves RTS, is reset or destroyed).
    pub(crate) fn release_charge(&mut self, sh: &mut Shared) {
        if self.req.charged > 0 {
            sh.budgets
                .release(self.req.charged_to, self.req.charged, false, self.mtu());
            self.req.charged = 0;
        }
    }

    /// A retransmission: the peer's budget shrinks (once per loss episode).
    pub(super) fn budget_loss(&self, sh: &mut Shared) {
        sh.budgets.on_loss(self.attr.ah_attr.grh.dgid);
    }
}
