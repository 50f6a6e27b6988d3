//! What one side of a ping saw, as a serialisable [`PingReport`], and its text rendering.

use super::wire::FaultStats;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One CM event as the application got it (`rdma_get_cm_event`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    /// Milliseconds since this side started the connection (client: `rdma_resolve_addr`;
    /// server: CONNECT_REQUEST).
    pub t_ms: f64,
    /// The `rdma_cm_event_type` name without the prefix, e.g. `DISCONNECTED`.
    pub event: String,
    /// The event's status: 0, or a negative errno (-110 = ETIMEDOUT).
    pub status: i32,
}

/// One step of the disconnect as this side saw it, for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEntry {
    /// Milliseconds since this side started the connection.
    pub t_ms: f64,
    /// What happened, in words.
    pub what: String,
}

/// Completions polled from the connection's CQ.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompletionTally {
    /// Status `IBV_WC_SUCCESS`.
    pub success: u64,
    /// Status `IBV_WC_WR_FLUSH_ERR` (5), all queues.
    pub flushed: u64,
    /// Receives flushed with `WR_FLUSH_ERR`.
    pub flushed_recvs: u64,
    /// Receives still posted when the QP went to ERR.
    pub recvs_posted_at_err: u64,
    /// Other statuses, by name (e.g. `RETRY_EXC_ERR`) and count.
    pub errors: Vec<(String, u64)>,
    /// Completions for a work request that was not outstanding (a second flush, an unknown id).
    pub unexpected: u64,
}

/// A QP state observed with `ibv_query_qp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QpStateRecord {
    /// When it was observed.
    pub when: String,
    /// `IBV_QPS_*` name without the prefix, e.g. `RTS`.
    pub state: String,
}

/// One check and whether it held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckRecord {
    /// What was checked.
    pub what: String,
    /// True when it held.
    pub ok: bool,
}

/// Latency of the ping-pong iterations, µs (round trip as the client measures it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    /// Iterations measured.
    pub samples: usize,
    /// Smallest round trip, µs.
    pub min_us: f64,
    /// Median round trip, µs.
    pub median_us: f64,
    /// Mean round trip, µs.
    pub mean_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

/// Data-phase throughput (client), payload bytes per second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Throughput {
    /// Payload bytes moved by the measured operations.
    pub bytes: u64,
    /// Seconds the data phase took.
    pub seconds: f64,
    /// Payload megabits per second (10^6 bit/s).
    pub mbit_per_s: f64,
}

/// Datagram counters of this side's wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WireRecord {
    /// Datagrams the NIC sent (before the fault layer).
    pub nic_tx: u64,
    /// Datagrams the NIC received (after the fault layer).
    pub nic_rx: u64,
    /// What the fault layer dropped.
    pub faults: FaultStats,
    /// Datagrams dropped because they came from a socket other than the one their sender's
    /// GID is routed to: another client on the peer's IP while this connection was served
    /// ([`Host::pin_peer`](rnic_testbed::host::Host::pin_peer)), or a forgery.
    pub other_client_drops: u64,
    /// CM MADs retransmitted (REQ, REP, DREQ … resent after a timeout).
    pub cm_retransmits: u64,
    /// RC go-back-N retries (after a transport timeout or NAK): in a report, those of the
    /// connection's QP over its life where the device tells (the simulated RNIC), else the
    /// process's.
    pub rc_retransmits: u64,
    /// Send system calls of the UDP driver (one per datagram, or per GSO batch of several).
    pub send_calls: u64,
    /// Receive system calls of the UDP driver that returned datagrams (`recvmmsg`).
    pub recv_calls: u64,
    /// RC retransmission-timer expiries that led to a retry (a subset of the causes of
    /// `rc_retransmits`; 0 where the device does not tell).
    pub rc_timeouts: u64,
    /// Input refused, by reason (`cm.rx_wrong_source`, `rnic.wrong_source`,
    /// `nic.peers_evicted`, `ping.clients_refused`, …): only the reasons that counted.
    pub drops: BTreeMap<String, u64>,
}

impl WireRecord {
    /// The counts since `start` (counters of the same node taken earlier).
    pub fn since(&self, start: &WireRecord) -> WireRecord {
        let f = &self.faults;
        let g = &start.faults;
        WireRecord {
            nic_tx: self.nic_tx.saturating_sub(start.nic_tx),
            nic_rx: self.nic_rx.saturating_sub(start.nic_rx),
            faults: FaultStats {
                dropped_tx: f.dropped_tx.saturating_sub(g.dropped_tx),
                dropped_rx: f.dropped_rx.saturating_sub(g.dropped_rx),
                killed_tx: f.killed_tx.saturating_sub(g.killed_tx),
                killed_rx: f.killed_rx.saturating_sub(g.killed_rx),
            },
            other_client_drops: self
                .other_client_drops
                .saturating_sub(start.other_client_drops),
            cm_retransmits: self.cm_retransmits.saturating_sub(start.cm_retransmits),
            rc_retransmits: self.rc_retransmits.saturating_sub(start.rc_retransmits),
            send_calls: self.send_calls.saturating_sub(start.send_calls),
            recv_calls: self.recv_calls.saturating_sub(start.recv_calls),
            rc_timeouts: self.rc_timeouts.saturating_sub(start.rc_timeouts),
            drops: self
                .drops
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.saturating_sub(start.drops.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, v)| *v > 0)
                .collect(),
        }
    }
}

/// What one side of one connection saw and concluded. `--json` prints it as one object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingReport {
    /// `client` or `server`.
    pub role: String,
    /// What this side ran on: the simulated RNIC, or the RDMA device, port and GID.
    pub device: String,
    /// The seed of this side's identifiers and drops (`--seed`, or the one drawn from the
    /// OS): `--seed` with this value repeats the run. In JSON a decimal string: a 64-bit
    /// value does not survive a reader that parses numbers as doubles (JavaScript, jq 1.6).
    #[serde(serialize_with = "decimal_string")]
    pub seed: u64,
    /// The connected QP's path MTU, bytes (what the CM negotiated, within the port's; `None`
    /// when no connection was made).
    pub path_mtu: Option<u32>,
    /// This side's UDP socket.
    pub local: String,
    /// The peer's UDP socket.
    pub peer: String,
    /// `all`, `send` or `write`.
    pub op: String,
    /// Iterations asked for (with `duration_s`: the iterations the client ran, once its FIN
    /// said so).
    pub count: u32,
    /// The run's length in seconds when the client gave `--duration` instead of a count.
    pub duration_s: Option<f64>,
    /// WRITEs kept outstanding (`--depth`; a `--op write` client only, else `None`).
    pub depth: Option<u32>,
    /// Bytes per SEND/WRITE/READ.
    pub size: u32,
    /// Who disconnects: `client` or `server`.
    pub disconnect_by: String,
    /// Iterations completed and verified.
    pub iterations: u32,
    /// Bytes compared equal to what the peer wrote or sent.
    pub bytes_verified: u64,
    /// CM events in the order the application got them.
    pub events: Vec<EventRecord>,
    /// Completions polled.
    pub completions: CompletionTally,
    /// QP states observed.
    pub qp_states: Vec<QpStateRecord>,
    /// The disconnect, step by step.
    pub timeline: Vec<TimelineEntry>,
    /// Round-trip latency (client, `send` and `all` ops).
    pub latency: Option<Latency>,
    /// Throughput of the data phase (client).
    pub throughput: Option<Throughput>,
    /// Wire counters.
    pub wire: WireRecord,
    /// Why the data phase stopped early, if it did.
    pub stopped: Option<String>,
    /// Every check.
    pub checks: Vec<CheckRecord>,
    /// `PASS` when every check held, else `FAIL`; `INTERRUPTED` when a signal stopped the
    /// session (the checks then say how far it got).
    pub verdict: String,
    /// The signal that stopped the session (`SIGINT`, `SIGTERM`), if one did: the report is
    /// partial.
    pub interrupted: Option<String>,
    /// Driver time of this side's start of the connection, ns (to merge two sides in one
    /// process; see [`UdpHandle::epoch`](rnic_sim::fabric::udp::UdpHandle::epoch)).
    #[serde(skip)]
    pub t0_ns: u64,
}

impl PingReport {
    /// True when every check held and no signal stopped the session.
    pub fn passed(&self) -> bool {
        self.interrupted.is_none() && self.checks.iter().all(|c| c.ok)
    }

    /// The report as text, one fact a line, ending with the verdict.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let runs = match self.duration_s {
            Some(d) => format!("{d:.1} s of {} B", self.size),
            None => format!("{} × {} B", self.count, self.size),
        };
        let _ = writeln!(
            s,
            "rnic ping {}: {} <-> {} (op {}{}, {runs}, disconnect by {})",
            self.role,
            self.local,
            self.peer,
            self.op,
            self.depth.map_or(String::new(), |d| format!(" depth {d}")),
            self.disconnect_by
        );
        if let Some(sig) = &self.interrupted {
            let _ = writeln!(
                s,
                "  INTERRUPTED by {sig}: a partial report of what ran until then"
            );
        }
        let _ = match self.path_mtu {
            Some(mtu) => writeln!(s, "  on {}, path MTU {mtu}", self.device),
            None => writeln!(s, "  on {}", self.device),
        };
        let _ = writeln!(s, "  seed {} (repeat with --seed {})", self.seed, self.seed);
        let _ = writeln!(s, "  CM events:");
        for e in &self.events {
            let _ = writeln!(
                s,
                "    {:>10.3} ms  {:<16} status {}",
                e.t_ms, e.event, e.status
            );
        }
        let c = &self.completions;
        let errors = if c.errors.is_empty() {
            "0 errors".to_string()
        } else {
            c.errors
                .iter()
                .map(|(n, k)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "  completions: {} succeeded, {} flushed (WR_FLUSH_ERR; {} of {} posted receives), {}, {} unexpected",
            c.success, c.flushed, c.flushed_recvs, c.recvs_posted_at_err, errors, c.unexpected
        );
        let states: Vec<String> = self
            .qp_states
            .iter()
            .map(|q| format!("{} {}", q.when, q.state))
            .collect();
        let _ = writeln!(s, "  QP states: {}", states.join("; "));
        let _ = match self.duration_s {
            Some(d) => writeln!(
                s,
                "  data: {} iterations in a {d:.1} s run, {} bytes verified",
                self.iterations, self.bytes_verified
            ),
            None => writeln!(
                s,
                "  data: {} of {} iterations{}, {} bytes verified",
                self.iterations,
                self.count,
                if self.iterations < self.count && self.stopped.is_none() {
                    " (the client ended the run early)"
                } else {
                    ""
                },
                self.bytes_verified
            ),
        };
        if let Some(l) = &self.latency {
            let _ = writeln!(
                s,
                "  latency: {} round trips, min {:.1} µs, median {:.1} µs, mean {:.1} µs, p99 {:.1} µs",
                l.samples, l.min_us, l.median_us, l.mean_us, l.p99_us
            );
        }
        if let Some(t) = &self.throughput {
            let _ = writeln!(
                s,
                "  throughput: {} bytes in {:.3} s = {:.1} Mbit/s ({:.1} MB/s)",
                t.bytes,
                t.seconds,
                t.mbit_per_s,
                t.mbit_per_s / 8.0
            );
        }
        let w = &self.wire;
        let _ = writeln!(
            s,
            "  wire: {} datagrams sent, {} received; dropped {}+{} (loss tx+rx), {}+{} (dead peer tx+rx), {} (other clients); retransmits: {} CM, {} RC ({} RC timeouts)",
            w.nic_tx,
            w.nic_rx,
            w.faults.dropped_tx,
            w.faults.dropped_rx,
            w.faults.killed_tx,
            w.faults.killed_rx,
            w.other_client_drops,
            w.cm_retransmits,
            w.rc_retransmits,
            w.rc_timeouts
        );
        let _ = writeln!(
            s,
            "  system calls: {} sends, {} receives",
            w.send_calls, w.recv_calls
        );
        if !w.drops.is_empty() {
            let list: Vec<String> = w.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(s, "  refused input: {}", list.join(", "));
        }
        if let Some(why) = &self.stopped {
            let _ = writeln!(s, "  stopped early: {why}");
        }
        for c in &self.checks {
            let _ = writeln!(
                s,
                "  check: {} ... {}",
                c.what,
                if c.ok { "ok" } else { "FAILED" }
            );
        }
        let _ = writeln!(s, "verdict: {}", self.verdict);
        s
    }
}

/// Serialises a `u64` as its decimal string.
fn decimal_string<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// `CamelCase` → `UPPER_SNAKE` (`WrFlushErr` → `WR_FLUSH_ERR`, `TimewaitExit` →
/// `TIMEWAIT_EXIT`): the rdma-core spelling of our enum variants' names.
pub fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}
