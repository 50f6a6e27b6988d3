//! The device's counters: packets dropped or ignored by reason, transport events, and the
//! live objects of each kind.

/// Counters of packets the device dropped or ignored, by reason, and of transport events.
/// Every malformed or unexpected packet from the network lands in exactly one drop counter;
/// none of them panics or disturbs an unrelated QP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Dropped: extension headers do not match the opcode, or a payload where none may be.
    pub malformed: u64,
    /// Dropped: P_Key is not the default partition (0xFFFF / 0x7FFF).
    pub bad_pkey: u64,
    /// Dropped: no QP with the BTH destination QPN.
    pub unknown_qp: u64,
    /// Dropped: opcode of another transport than the QP's (e.g. UD on an RC QP).
    pub wrong_qp_type: u64,
    /// Dropped: the QP's state does not accept it (RESET, INIT, ERR; responses outside RTS/SQD).
    pub qp_not_ready: u64,
    /// Dropped: RC packet from a GID other than the QP's destination.
    pub wrong_source: u64,
    /// Dropped: request PSN ahead of the expected one (a NAK is sent once).
    pub psn_out_of_seq: u64,
    /// Duplicate requests (answered from the ACK state or responder resources, not executed).
    pub duplicate_requests: u64,
    /// Ignored: responses older than the oldest unacknowledged PSN, or out of order.
    pub stale_responses: u64,
    /// Ignored: responses with no outstanding request.
    pub unexpected_responses: u64,
    /// Dropped: UD datagram whose Q_Key does not match the QP's.
    pub qkey_mismatch: u64,
    /// Dropped: UD datagram with no receive posted (UD has no RNR).
    pub ud_no_recv: u64,
    /// Dropped: UD datagram larger than the receive buffer.
    pub ud_too_long: u64,
    /// Dropped: a multicast datagram for a group no QP of the device is attached to.
    pub mcast_unattached: u64,
    /// Not sent: a request or READ response whose payload region was deregistered between
    /// the packet being queued and being polled (only a caller that buffers packets across
    /// verbs calls sees it; see `SimDevice::poll_transmit`).
    pub tx_region_gone: u64,
    /// Completions lost because their CQ had overrun.
    pub completions_lost: u64,
    /// Coalesced ACKs sent.
    pub acks_sent: u64,
    /// PSN-sequence-error NAKs sent.
    pub seq_naks_sent: u64,
    /// PSN-sequence-error NAKs received.
    pub seq_naks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Retransmit-timer expiries that led to a retry.
    pub timeouts: u64,
    /// Go-back-N retries started (timeouts and sequence NAKs).
    pub retries: u64,
}

/// The number of live objects of each kind ([`SimDevice::object_counts`](crate::SimDevice::object_counts)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs (the GSI endpoint, QP1, is not one of them).
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
}

/// One QP's transport counters over its whole life, whatever its state changes
/// ([`SimDevice::qp_counters`](crate::SimDevice::qp_counters)); the device's
/// [`Counters::retries`] and [`Counters::timeouts`] are their sums over every QP it had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Go-back-N retries started (timeouts and sequence NAKs).
    pub retries: u64,
    /// Retransmit-timer expiries that led to a retry.
    pub timeouts: u64,
}
