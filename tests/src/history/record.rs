//! A history record ([`Record`]), with its time, host and life ([`Entry`]) and its text.

use super::fault::Fault;
use super::ops::{Call, Op, Queue};
use super::wire::WireMsg;
use cm_core::api::CmEventType;
use std::fmt;
use verbs_core::{AsyncEventType, SimTime, WcOpcode, WcStatus};

/// One history record (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The host (re)started: life `epoch` of the entry begins, with this CM retry budget.
    Boot {
        /// `max_cm_retries` of the host's CM (DREQ sends = 1 + this, cm-spec §3.2).
        max_cm_retries: u8,
    },
    /// An API call and its result: 0 or the errno (positive, rdma-core's value).
    Call {
        /// What was called.
        call: Call,
        /// 0 on success, else the errno.
        errno: i32,
    },
    /// A WR a post accepted.
    Posted {
        /// The QP.
        qpn: u32,
        /// Its `wr_id` (unique in the World).
        wr_id: u64,
        /// The queue.
        queue: Queue,
        /// The operation.
        op: Op,
        /// Bytes.
        len: u32,
        /// The QP was in ERR (as the application last saw it) when posted.
        qp_err: bool,
    },
    /// A work completion the application polled.
    Completion {
        /// Local QPN.
        qpn: u32,
        /// Its `wr_id`.
        wr_id: u64,
        /// The queue it came from.
        queue: Queue,
        /// Opcode (valid on success).
        opcode: WcOpcode,
        /// Status.
        status: WcStatus,
        /// Bytes (valid on success).
        byte_len: u32,
        /// S6: the data at the destination is the data posted (true when not applicable).
        data_ok: bool,
    },
    /// A CM event the application read.
    Event {
        /// The id (CONNECT_REQUEST: the new passive id).
        id: u32,
        /// The type.
        event: CmEventType,
        /// 0, −errno or a REJ reason (cm-spec §4.7).
        status: i32,
        /// The id's Local Comm ID when the event was read (0 if none).
        comm_id: u32,
        /// For DISCONNECTED: the TimeWait of the id's QP, `ms(timeout)` in ns (cm-spec §3.2).
        timewait_ns: u64,
    },
    /// The application saw QP `qpn` in ERR (first time).
    QpErr {
        /// The QP.
        qpn: u32,
    },
    /// A CM MAD the host's NIC sent (`tx`) or received.
    Wire {
        /// Sent (true) or received.
        tx: bool,
        /// The other host (destination if sent, source if received).
        peer: u8,
        /// The message.
        msg: WireMsg,
    },
    /// A fault.
    Fault(Fault),
    /// The application read the async event `IBV_EVENT_CQ_ERR` for its CQ of `queue`: the CQ
    /// overran, the completion that did not fit and every later one aimed at it are lost, and
    /// the QP that overflowed it is in ERR (rdmavt behaviour, docs/semantics-verbs.md "CQ
    /// overrun"). Every other async event is a [`Record::Async`].
    CqErr {
        /// Which of the host's two CQs.
        queue: Queue,
    },
    /// The application read an async event of its device (`ibv_get_async_event(3)`) other
    /// than CQ_ERR: QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, LAST_WQE_REACHED (per QP),
    /// SRQ_LIMIT_REACHED (its SRQ), DEVICE_FATAL (the device); docs/semantics-verbs.md "Async
    /// events".
    Async {
        /// `enum ibv_event_type`.
        event: AsyncEventType,
        /// What it is about.
        on: AsyncOn,
    },
}

/// The element of a recorded async event ([`Record::Async`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncOn {
    /// A QP, by number.
    Qp(u32),
    /// One of the host's two CQs.
    Cq(Queue),
    /// The host's SRQ ([`HostApp::srq`](crate::world::HostApp)).
    Srq,
    /// The whole device.
    Device,
    /// Anything else (a port).
    Other,
}

/// A record with its virtual time, host and host life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Virtual time.
    pub at: SimTime,
    /// Host index.
    pub host: u8,
    /// The host's life (0, +1 per restart with amnesia).
    pub epoch: u8,
    /// What happened.
    pub rec: Record,
}

fn errno_name(e: i32) -> String {
    match e {
        0 => "0".into(),
        22 => "EINVAL".into(),
        16 => "EBUSY".into(),
        _ => format!("errno {e}"),
    }
}

impl fmt::Display for Entry {
    /// One line: time in µs, host.life, what happened.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.at.as_nanos() as f64 / 1000.0;
        write!(f, "{us:>14.3}µs host {}.{} ", self.host, self.epoch)?;
        match self.rec {
            Record::Boot { max_cm_retries } => write!(f, "boot (max_cm_retries {max_cm_retries})"),
            Record::Call { call, errno } => write!(f, "call {call:?} -> {}", errno_name(errno)),
            Record::Posted {
                qpn,
                wr_id,
                op,
                len,
                qp_err,
                ..
            } => write!(
                f,
                "post {op:?} wr {wr_id} on QP {qpn:#x}, {len} B{}",
                if qp_err { " (QP in ERR)" } else { "" }
            ),
            Record::Completion {
                qpn,
                wr_id,
                queue,
                opcode,
                status,
                byte_len,
                data_ok,
            } => write!(
                f,
                "wc {queue:?} wr {wr_id} QP {qpn:#x} {status:?} {opcode:?} {byte_len} B{}",
                if data_ok { "" } else { " DATA MISMATCH" }
            ),
            Record::Event {
                id,
                event,
                status,
                comm_id,
                ..
            } => write!(
                f,
                "event {event:?} id {id} status {status} comm {comm_id:#010x}"
            ),
            Record::QpErr { qpn } => write!(f, "QP {qpn:#x} in ERR"),
            Record::Wire { tx, peer, msg } if msg.attr == 0 => write!(
                f,
                "{} RC opcode {:#04x} {} host {peer} QP {:#x} PSN {:#x}",
                if tx { "sent" } else { "recv" },
                msg.reason,
                if tx { "to" } else { "from" },
                msg.local_comm_id,
                msg.remote_comm_id
            ),
            Record::Wire { tx, peer, msg } => write!(
                f,
                "{} {} {} host {peer} local {:#010x} remote {:#010x}{}",
                if tx { "sent" } else { "recv" },
                msg.name(),
                if tx { "to" } else { "from" },
                msg.local_comm_id,
                msg.remote_comm_id,
                if msg.reason != 0 {
                    format!(" reason {}", msg.reason)
                } else {
                    String::new()
                }
            ),
            Record::Fault(Fault::Dropped { reason, msg }) => {
                write!(f, "fault: {} dropped ({})", msg.name(), reason.name())
            }
            Record::Fault(Fault::Duplicated { msg }) => {
                write!(f, "fault: {} duplicated", msg.name())
            }
            Record::Fault(Fault::Corrupted { msg }) => {
                write!(
                    f,
                    "fault: {} arrived corrupted, dropped by the NIC",
                    msg.name()
                )
            }
            Record::Fault(Fault::TargetedDrop { msg, nth }) => {
                write!(f, "fault: {} #{nth} dropped (targeted)", msg.name())
            }
            Record::Fault(Fault::Delayed { msg, nth, by_ns }) => write!(
                f,
                "fault: {} #{nth} held {} µs (targeted delay)",
                msg.name(),
                by_ns / 1000
            ),
            Record::Fault(Fault::Crash { restart_ns }) => match restart_ns {
                Some(t) => write!(f, "fault: crash, restart with amnesia at {} µs", t / 1000),
                None => write!(f, "fault: crash for good"),
            },
            Record::CqErr { queue } => write!(f, "async event CQ_ERR: {queue:?} CQ overrun"),
            Record::Async { event, on } => match on {
                AsyncOn::Qp(qpn) => write!(f, "async event {event:?} on QP {qpn:#x}"),
                AsyncOn::Cq(q) => write!(f, "async event {event:?} on the {q:?} CQ"),
                AsyncOn::Srq => write!(f, "async event {event:?} on the SRQ"),
                AsyncOn::Device => write!(f, "async event {event:?} on the device"),
                AsyncOn::Other => write!(f, "async event {event:?}"),
            },
            Record::Fault(Fault::DeviceRemoved { rc_sent }) => write!(
                f,
                "fault: device removed (DEVICE_FATAL, DEVICE_REMOVAL; {rc_sent} RC packets sent before)"
            ),
            Record::Fault(Fault::AddressChange) => {
                write!(f, "fault: address change (ADDR_CHANGE to every attached id)")
            }
        }
    }
}
