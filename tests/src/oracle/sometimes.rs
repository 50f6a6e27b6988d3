//! The rare situations a run reached ([`Sometimes`], TESTING.md "Sometimes" counters).

/// The rare situations a run reached (TESTING.md "Sometimes" counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sometimes {
    /// Two DREQs of one connection crossed: a host received the peer's DREQ for a connection
    /// after sending its own.
    pub dreqs_crossed: bool,
    /// A DISCONNECTED with status −110 (DREQ retries exhausted).
    pub dreq_retries_exhausted: bool,
    /// The fabric dropped a DREP.
    pub drep_lost: bool,
    /// A host received a DREQ for a connection it had already answered with a DREP (TimeWait).
    pub dup_dreq_in_timewait: bool,
    /// A WR was posted to a QP the application had seen in ERR.
    pub wr_posted_after_err: bool,
    /// rdma_disconnect was called on an id that was connecting (not yet ESTABLISHED).
    pub disconnect_during_setup: bool,
    /// A REJ with reason 10 (stale connection) was sent.
    pub stale_connection_rej: bool,
}

impl Sometimes {
    /// The snake_case names, in field order.
    pub const NAMES: [&'static str; 7] = [
        "dreqs_crossed",
        "dreq_retries_exhausted",
        "drep_lost",
        "dup_dreq_in_timewait",
        "wr_posted_after_err",
        "disconnect_during_setup",
        "stale_connection_rej",
    ];

    /// The flags, in field order.
    pub fn flags(&self) -> [bool; 7] {
        [
            self.dreqs_crossed,
            self.dreq_retries_exhausted,
            self.drep_lost,
            self.dup_dreq_in_timewait,
            self.wr_posted_after_err,
            self.disconnect_during_setup,
            self.stale_connection_rej,
        ]
    }
}
