//! Completion queues: a bounded FIFO of work completions, overrun detection and the
//! completion-channel arming of `ibv_req_notify_cq`.

use std::collections::VecDeque;
use verbs_core::{CqHandle, CqNotifier, WcStatus, WorkCompletion};

/// What happened to a completion offered to a CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CqPush {
    /// Stored.
    Stored,
    /// The CQ was full: it is now overrun (first time); the completion is lost.
    Overran,
    /// The CQ had already overrun: the completion is lost.
    Dropped,
}

/// One completion queue.
#[derive(Debug, Clone)]
pub(crate) struct Cq {
    /// Its own handle (reported on the channel).
    pub handle: CqHandle,
    /// Capacity in completions (exactly the `cqe` asked for).
    pub capacity: usize,
    /// Stored completions, oldest first.
    pub entries: VecDeque<WorkCompletion>,
    /// Set once the CQ overran; it then accepts nothing more (man:ibv_poll_cq.3 "no longer
    /// usable").
    pub overrun: bool,
    /// Channel to report to, if created with one.
    pub notifier: Option<CqNotifier>,
    /// `Some(solicited_only)` while armed by `req_notify_cq`.
    pub armed: Option<bool>,
}

impl Cq {
    /// A new, empty CQ.
    pub fn new(handle: CqHandle, capacity: usize, notifier: Option<CqNotifier>) -> Self {
        Cq {
            handle,
            capacity,
            entries: VecDeque::new(),
            overrun: false,
            notifier,
            armed: None,
        }
    }

    /// Offers a completion. `solicited` is the BTH SE bit of the message a receive completes.
    ///
    /// An armed CQ notifies its channel and disarms on the next stored completion; armed with
    /// `solicited_only` it waits for a solicited receive or an unsuccessful completion (IBTA
    /// 11.4.2.2; rxe also counts flushes as solicited [rxe_resp.c `do_complete`]).
    pub fn push(&mut self, wc: WorkCompletion, solicited: bool) -> CqPush {
        if self.overrun {
            return CqPush::Dropped;
        }
        if self.entries.len() >= self.capacity {
            self.overrun = true;
            return CqPush::Overran;
        }
        self.entries.push_back(wc);
        if let Some(sol_only) = self.armed {
            if !sol_only || solicited || wc.status != WcStatus::Success {
                self.armed = None;
                if let Some(n) = &self.notifier {
                    n.notify(self.handle);
                }
            }
        }
        CqPush::Stored
    }
}
