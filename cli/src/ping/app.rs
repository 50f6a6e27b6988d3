//! The ping application's sans-IO parts: the [`Ledger`] of one connection's work requests and
//! buffers, and the [`DataPhase`] machine that runs the iterations inside the endpoint
//! ([`PingHost`](super::endpoint::PingHost)), so that the UDP driver's thread reacts to a completion in the same wake-up
//! that delivered the packet — as an `ibv_poll_cq` busy loop would — instead of handing it to
//! the application's thread and back.

use super::report::upper_snake;
use super::{PingOp, Role};
use rnic_testbed::host::{Host, Nic};
use std::collections::{BTreeMap, VecDeque};
use verbs_core::{
    CqHandle, Device, Mr, Qp, RecvWr, SendFlags, SendWr, SimTime, WcStatus, WorkCompletion,
};

/// Why the data phase ended early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A work request completed with an error status (the QP is in ERR).
    Transport(WcStatus),
    /// DISCONNECTED arrived during the data phase.
    PeerDisconnected,
    /// Nothing happened for `--timeout`.
    Timeout(String),
    /// SIGINT or SIGTERM (the signal's name).
    Interrupted(&'static str),
    /// A check failed or a verb refused a call.
    Failed(String),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Transport(s) => write!(f, "a work request completed with {}", wc_name(*s)),
            Stop::PeerDisconnected => f.write_str("the peer disconnected during the data phase"),
            Stop::Timeout(what) => write!(f, "timed out waiting for {what}"),
            Stop::Interrupted(sig) => write!(f, "interrupted by {sig}"),
            Stop::Failed(what) => f.write_str(what),
        }
    }
}

/// `IBV_WC_*` name without the prefix.
pub fn wc_name(s: WcStatus) -> String {
    upper_snake(&format!("{s:?}"))
}

/// The byte pattern of iteration `i`, message kind `k`, `len` bytes: every byte depends on
/// its offset, the iteration and the kind, so a stale or misplaced byte is caught.
pub fn pattern(i: u32, k: u8, len: u32) -> Vec<u8> {
    (0..len)
        .map(|j| {
            let x = j.wrapping_mul(0x9e37_79b1) ^ i.wrapping_mul(0x85eb_ca6b) ^ u32::from(k) << 24;
            (x >> 24) as u8 ^ (j as u8)
        })
        .collect()
}

/// Offsets into the connection's MR. Receive slots first, then the SEND buffer, the region
/// the peer WRITEs into, the region the peer READs from, and a local scratch region (WRITE
/// source, READ destination).
#[derive(Debug, Clone, Copy, Default)]
pub struct Layout {
    /// Bytes per receive slot.
    pub slot: u64,
    /// Receive slots.
    pub slots: u64,
    /// Offset of the SEND buffer.
    pub send: u64,
    /// Offset of the region the peer WRITEs into.
    pub write_target: u64,
    /// Offset of the region the peer READs from.
    pub read_source: u64,
    /// Offset of the scratch region.
    pub scratch: u64,
    /// MR length.
    pub len: u64,
}

impl Layout {
    /// The layout for `size`-byte transfers and `recvs` receive slots.
    pub fn new(size: u32, recvs: u32) -> Layout {
        let slot = u64::from(size.max(64));
        let slots = u64::from(recvs);
        let send = slot * slots;
        let region = u64::from(size);
        Layout {
            slot,
            slots,
            send,
            write_target: send + slot,
            read_source: send + slot + region,
            scratch: send + slot + 2 * region,
            len: send + slot + 3 * region,
        }
    }
}

/// The peer's buffers, from its info message.
#[derive(Debug, Clone, Copy)]
pub struct PeerInfo {
    /// Address of its write region.
    pub write_addr: u64,
    /// Address of its read region.
    pub read_addr: u64,
    /// Its MR's rkey.
    pub rkey: u32,
    /// Region length, bytes.
    pub len: u32,
}

/// High bit of send WR ids (receive ids are below it).
const SEND_WR: u64 = 1 << 32;

/// One connection's verbs objects and the bookkeeping of every WR posted on them: which are
/// outstanding, the messages received, completion counts.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The QP, once created.
    pub qp: Option<Qp>,
    /// The CQ (send and receive).
    pub cq: Option<CqHandle>,
    /// The MR.
    pub mr: Option<Mr>,
    /// Where things are in the MR.
    pub layout: Layout,
    /// Outstanding receives: wr_id → slot.
    pub recv_out: BTreeMap<u64, u64>,
    /// Outstanding sends: wr_id → what.
    pub send_out: BTreeMap<u64, &'static str>,
    next_wr: u64,
    /// Messages received and not yet consumed.
    pub messages: VecDeque<Vec<u8>>,
    /// Completion counts.
    pub tally: super::report::CompletionTally,
    /// Error statuses other than WR_FLUSH_ERR, by name.
    pub errors: BTreeMap<String, u64>,
    /// The first error status seen.
    pub transport_error: Option<WcStatus>,
    /// Disconnecting: consumed receives are not re-posted.
    pub disconnecting: bool,
}

fn no(what: &str) -> Stop {
    Stop::Failed(format!("no {what}"))
}

impl Ledger {
    /// An empty ledger for `layout`.
    pub fn new(layout: Layout) -> Ledger {
        Ledger {
            layout,
            next_wr: 1,
            ..Ledger::default()
        }
    }

    /// Posts a receive into `slot`.
    pub fn post_recv<N: Nic>(&mut self, host: &mut Host<N>, slot: u64) -> Result<(), Stop> {
        let (qp, mr) = (
            self.qp.ok_or_else(|| no("QP"))?,
            self.mr.ok_or_else(|| no("MR"))?,
        );
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let sge = mr.sge(slot * self.layout.slot, self.layout.slot as u32);
        host.dev_mut()
            .post_recv(qp.handle, &[RecvWr::new(wr_id, vec![sge])])
            .map_err(|e| Stop::Failed(format!("ibv_post_recv: {}", e.error)))?;
        self.recv_out.insert(wr_id, slot);
        Ok(())
    }

    /// Posts one send WR built by `make(wr_id, mr)`; returns its wr_id.
    pub fn post_send<N: Nic>(
        &mut self,
        host: &mut Host<N>,
        what: &'static str,
        make: impl FnOnce(u64, &Mr) -> SendWr,
    ) -> Result<u64, Stop> {
        let (qp, mr) = (
            self.qp.ok_or_else(|| no("QP"))?,
            self.mr.ok_or_else(|| no("MR"))?,
        );
        let wr_id = SEND_WR | self.next_wr;
        self.next_wr += 1;
        host.dev_mut()
            .post_send(qp.handle, &[make(wr_id, &mr)])
            .map_err(|e| Stop::Failed(format!("ibv_post_send ({what}): {}", e.error)))?;
        self.send_out.insert(wr_id, what);
        Ok(wr_id)
    }

    /// A solicited SEND of `data` from the send buffer (the receiver waits for solicited
    /// completions only).
    pub fn send<N: Nic>(&mut self, host: &mut Host<N>, data: &[u8]) -> Result<u64, Stop> {
        self.store(host, self.layout.send, data)?;
        let (off, len) = (self.layout.send, data.len() as u32);
        self.post_send(host, "SEND", |id, mr| {
            SendWr::send(id, vec![mr.sge(off, len)])
                .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED)
        })
    }

    /// Writes `data` at `offset` of the MR (the application's store).
    pub fn store<N: Nic>(&self, host: &mut Host<N>, offset: u64, data: &[u8]) -> Result<(), Stop> {
        let mr = self.mr.ok_or_else(|| no("MR"))?;
        host.dev_mut()
            .mr_write(mr.handle, offset, data)
            .map_err(|e| Stop::Failed(format!("mr_write: {e}")))
    }

    /// Reads `len` bytes at `offset` of the MR.
    pub fn load<N: Nic>(&self, host: &Host<N>, offset: u64, len: u32) -> Result<Vec<u8>, Stop> {
        let mr = self.mr.ok_or_else(|| no("MR"))?;
        let mut buf = vec![0u8; len as usize];
        host.dev()
            .mr_read(mr.handle, offset, &mut buf)
            .map_err(|e| Stop::Failed(format!("mr_read: {e}")))?;
        Ok(buf)
    }

    /// Polls the CQ empty; with `arm = Some(solicited_only)` re-arms it and polls again (a
    /// thread that will wait for the channel); books every completion, reads and re-posts
    /// consumed receives. The data phase, stepped on every event, passes `None`.
    pub fn poll<N: Nic>(&mut self, host: &mut Host<N>, arm: Option<bool>) -> Result<(), Stop> {
        let Some(cq) = self.cq else { return Ok(()) };
        let mut wcs: Vec<WorkCompletion> = Vec::new();
        let nic = host.dev_mut();
        while nic.poll_cq(cq, 32, &mut wcs).unwrap_or(0) > 0 {}
        if let Some(solicited_only) = arm {
            // Re-arm, then poll again: a completion between the two would not notify.
            let _ = nic.req_notify_cq(cq, solicited_only);
            while nic.poll_cq(cq, 32, &mut wcs).unwrap_or(0) > 0 {}
        }
        for wc in wcs {
            self.complete(host, &wc)?;
        }
        Ok(())
    }

    fn complete<N: Nic>(&mut self, host: &mut Host<N>, wc: &WorkCompletion) -> Result<(), Stop> {
        match wc.status {
            WcStatus::Success => self.tally.success += 1,
            WcStatus::WrFlushErr => self.tally.flushed += 1,
            other => {
                *self.errors.entry(wc_name(other)).or_insert(0) += 1;
                self.transport_error.get_or_insert(other);
            }
        }
        if let Some(slot) = self.recv_out.remove(&wc.wr_id) {
            match wc.status {
                WcStatus::Success => {
                    let data = self.load(host, slot * self.layout.slot, wc.byte_len)?;
                    self.messages.push_back(data);
                    if !self.disconnecting {
                        self.post_recv(host, slot)?;
                    }
                }
                WcStatus::WrFlushErr => self.tally.flushed_recvs += 1,
                _ => {}
            }
        } else if self.send_out.remove(&wc.wr_id).is_none() {
            self.tally.unexpected += 1;
        }
        Ok(())
    }
}

/// Checks that `got` equals `want` byte for byte; returns the bytes verified.
///
/// # Errors
/// [`Stop::Failed`] naming `what`, the lengths and the first differing offset.
pub fn compare(what: &str, got: &[u8], want: &[u8]) -> Result<u64, Stop> {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        return Err(Stop::Failed(format!(
            "{what}: {} bytes received, {} expected, first difference at {at:?}",
            got.len(),
            want.len()
        )));
    }
    Ok(want.len() as u64)
}

/// How a [`DataPhase`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every iteration done and verified.
    Done,
    /// Stopped at the `--kill-peer-after` point; the caller kills the peer and resumes.
    Paused,
    /// Stopped early.
    Stopped(Stop),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Client: about to start iteration `i`. Server: waiting for request `i`.
    Next,
    /// Client: waiting for the reply SEND.
    WaitReply,
    /// Client: waiting for the READ's completion.
    WaitRead(u64),
    /// Server: request `i` checked; reply next.
    Reply,
}

/// The iterations of one side as a state machine, stepped inside the endpoint after every
/// datagram and timeout (see the module docs).
#[derive(Debug)]
pub struct DataPhase {
    role: Role,
    op: PingOp,
    count: u32,
    size: u32,
    peer: PeerInfo,
    /// Pause (for the kill) when iteration `pause_at` is reached.
    pub pause_at: Option<u32>,
    /// WRITEs kept outstanding by a `--op write` client (at least 1).
    pub depth: u32,
    /// The outstanding WRITEs (`--op write`), oldest first.
    writes: VecDeque<u64>,
    /// WRITEs posted (`--op write`).
    posted: u32,
    /// Whether the source of the stream's WRITEs holds its pattern (`--op write`).
    staged: bool,
    /// The ledger, lent by the session for the data phase.
    pub ledger: Ledger,
    i: u32,
    st: St,
    t_iter: SimTime,
    /// Round trips of the reply SEND, ns (client).
    pub rtts_ns: Vec<u64>,
    /// Bytes verified.
    pub bytes_verified: u64,
    /// Iterations done.
    pub iterations: u32,
    /// Datagrams and timeouts seen: the session's sign of progress.
    pub steps: u64,
    /// How it ended, once it has.
    pub outcome: Option<Outcome>,
    /// One line per iteration for the application to print (`--per-iteration`), while it is
    /// `Some`: at most [`MAX_LINES`] wait unread; past that they are counted in
    /// `lines_lost`.
    pub lines: Option<VecDeque<String>>,
    /// Lines not kept because [`MAX_LINES`] were waiting.
    pub lines_lost: u64,
}

/// The most per-iteration lines a [`DataPhase`] holds for its application.
pub const MAX_LINES: usize = 4096;

/// The FIN that ends the data phase: `RNPG-FIN` and the number of iterations the client ran
/// (LE u32), which is fewer than asked when it ended early (`--duration`, SIGINT).
pub fn fin_message(iterations: u32) -> Vec<u8> {
    let mut v = FIN.to_vec();
    v.extend_from_slice(&iterations.to_le_bytes());
    v
}

/// The iteration count of a [`fin_message`], `None` for any other message.
pub fn parse_fin(msg: &[u8]) -> Option<u32> {
    let count = msg.strip_prefix(FIN)?;
    Some(u32::from_le_bytes(count.try_into().ok()?))
}

/// The first bytes of a FIN (not a prefix of [`FIN_ACK`]).
const FIN: &[u8] = b"RNPG-FIN:";

/// The server's answer to a FIN.
pub const FIN_ACK: &[u8] = b"RNPG-FIN-ACK";

impl DataPhase {
    /// The data phase of `role` for `count` iterations of `op` with `size` bytes.
    pub fn new(
        role: Role,
        op: PingOp,
        count: u32,
        size: u32,
        peer: PeerInfo,
        ledger: Ledger,
    ) -> DataPhase {
        DataPhase {
            role,
            op,
            count,
            size,
            peer,
            pause_at: None,
            depth: 1,
            writes: VecDeque::new(),
            posted: 0,
            staged: false,
            ledger,
            i: 0,
            st: St::Next,
            t_iter: SimTime::ZERO,
            rtts_ns: Vec::new(),
            bytes_verified: 0,
            iterations: 0,
            steps: 0,
            outcome: None,
            lines: None,
            lines_lost: 0,
        }
    }

    /// Ends the phase early (`--duration` ran out, or SIGINT): a client finishes the
    /// iteration in progress (a WRITE stream: posts its last, checked WRITE once the
    /// outstanding ones completed) and stops there; [`iterations`](Self::iterations) is then
    /// the count its FIN announces. A server's phase ends when the client's FIN comes.
    pub fn finish_early(&mut self) {
        let end = match (self.role, self.op) {
            (Role::Server, _) => return,
            (Role::Client, PingOp::Write) => self.posted.saturating_add(1),
            (Role::Client, _) if self.st == St::Next => self.i,
            (Role::Client, _) => self.i.saturating_add(1),
        };
        self.count = self.count.min(end);
    }

    fn line(&mut self, text: impl FnOnce() -> String) {
        if let Some(lines) = self.lines.as_mut() {
            if lines.len() < MAX_LINES {
                lines.push_back(text());
            } else {
                self.lines_lost += 1;
            }
        }
    }

    /// Resumes after a pause.
    pub fn resume(&mut self) {
        self.pause_at = None;
        self.outcome = None;
    }

    fn verify(&mut self, what: &str, got: &[u8], want: &[u8]) -> Result<(), Stop> {
        self.bytes_verified += compare(what, got, want)?;
        Ok(())
    }

    /// Polls the CQ and moves as far as the completions allow. On a NIC whose completions
    /// arrive without the driver ([`Nic::ASYNC_COMPLETIONS`]) the CQ is re-armed each time,
    /// so that the next completion raises a CQ event that steps the phase again.
    pub fn step<N: Nic>(&mut self, host: &mut Host<N>, now: SimTime) {
        self.steps += 1;
        if self.outcome.is_some() {
            return;
        }
        if let Err(stop) = self.advance(host, now) {
            self.outcome = Some(Outcome::Stopped(stop));
        }
    }

    fn advance<N: Nic>(&mut self, host: &mut Host<N>, now: SimTime) -> Result<(), Stop> {
        let (size, l) = (self.size, self.ledger.layout);
        let p = self.peer;
        loop {
            self.ledger
                .poll(host, N::ASYNC_COMPLETIONS.then_some(false))?;
            if let Some(s) = self.ledger.transport_error {
                return Err(Stop::Transport(s));
            }
            match (self.role, self.st) {
                (_, St::Next) if self.i == self.count => {
                    self.outcome = Some(Outcome::Done);
                    return Ok(());
                }
                (Role::Client, St::Next) if self.op == PingOp::Write => {
                    return self.stream_writes(host);
                }
                (Role::Client, St::Next) => {
                    if self.pause_at == Some(self.i) {
                        self.outcome = Some(Outcome::Paused);
                        return Ok(());
                    }
                    self.t_iter = now;
                    let i = self.i;
                    if self.op == PingOp::All {
                        self.ledger
                            .store(host, l.scratch, &pattern(i, b'W', size))?;
                        self.post_write(host)?;
                    }
                    self.ledger.send(host, &pattern(i, b'S', size))?;
                    self.st = St::WaitReply;
                    if N::ASYNC_COMPLETIONS {
                        // A device that runs by itself may answer within this step, whose
                        // `now` is already past: what comes back is seen in a later step,
                        // with its own time (else a round trip would measure 0).
                        return Ok(());
                    }
                }
                (Role::Client, St::WaitReply) => {
                    let Some(msg) = self.ledger.messages.pop_front() else {
                        return Ok(());
                    };
                    let rtt = now.as_nanos().saturating_sub(self.t_iter.as_nanos());
                    self.rtts_ns.push(rtt);
                    self.verify("reply SEND", &msg, &pattern(self.i, b'P', size))?;
                    if self.op == PingOp::Send {
                        let i = self.i;
                        self.line(|| {
                            format!(
                                "rnic-ping-{i}: SEND {size} B, reply verified, rtt {:.1} µs",
                                rtt as f64 / 1e3
                            )
                        });
                    }
                    if self.op == PingOp::All {
                        let wr = self.ledger.post_send(host, "RDMA READ", |id, mr| {
                            SendWr::rdma_read(
                                id,
                                vec![mr.sge(l.scratch, size)],
                                p.read_addr,
                                p.rkey,
                            )
                        })?;
                        self.st = St::WaitRead(wr);
                    } else {
                        self.next_iteration();
                    }
                }
                (Role::Client, St::WaitRead(wr)) => {
                    if self.ledger.send_out.contains_key(&wr) {
                        return Ok(());
                    }
                    let got = self.ledger.load(host, l.scratch, size)?;
                    self.verify("RDMA READ", &got, &pattern(self.i, b'R', size))?;
                    let (i, rtt) = (self.i, self.rtts_ns.last().copied().unwrap_or(0));
                    self.line(|| {
                        format!(
                            "rnic-ping-{i}: WRITE, SEND, reply and READ of {size} B verified, rtt {:.1} µs",
                            rtt as f64 / 1e3
                        )
                    });
                    self.next_iteration();
                }
                (Role::Server, St::Next) => {
                    let Some(msg) = self.ledger.messages.pop_front() else {
                        return Ok(());
                    };
                    if parse_fin(&msg).is_some() {
                        // The client ended early: the session reads the FIN.
                        self.ledger.messages.push_front(msg);
                        self.outcome = Some(Outcome::Done);
                        return Ok(());
                    }
                    let i = self.i;
                    self.verify("SEND", &msg, &pattern(i, b'S', size))?;
                    if self.op == PingOp::All {
                        // The WRITE was posted before the SEND on the same QP: it has landed.
                        let got = self.ledger.load(host, l.write_target, size)?;
                        self.verify("RDMA WRITE", &got, &pattern(i, b'W', size))?;
                        self.ledger
                            .store(host, l.read_source, &pattern(i, b'R', size))?;
                    }
                    self.st = St::Reply;
                }
                (Role::Server, St::Reply) => {
                    if self.pause_at == Some(self.i) {
                        self.outcome = Some(Outcome::Paused);
                        return Ok(());
                    }
                    // The reply's completion is booked later: the client's next request
                    // proves it arrived; a failure shows as an error completion.
                    self.ledger.send(host, &pattern(self.i, b'P', size))?;
                    let (i, op) = (self.i, self.op);
                    self.line(|| match op {
                        PingOp::All => {
                            format!(
                                "rnic-ping-{i}: WRITE and SEND of {size} B verified, reply sent"
                            )
                        }
                        _ => format!("rnic-ping-{i}: SEND of {size} B verified, reply sent"),
                    });
                    self.next_iteration();
                }
                (_, state) => {
                    return Err(Stop::Failed(format!(
                        "{} in state {state:?}",
                        self.role.name()
                    )))
                }
            }
        }
    }

    /// Posts an RDMA WRITE of the scratch region to the peer's write region.
    fn post_write<N: Nic>(&mut self, host: &mut Host<N>) -> Result<u64, Stop> {
        let (size, l, p) = (self.size, self.ledger.layout, self.peer);
        self.ledger.post_send(host, "RDMA WRITE", |id, mr| {
            SendWr::rdma_write(id, vec![mr.sge(l.scratch, size)], p.write_addr, p.rkey)
        })
    }

    /// `--op write`: counts the WRITEs completed (in order, as RC completes them) and keeps
    /// [`depth`](Self::depth) outstanding. The source buffer must not change while a WRITE
    /// reading it is outstanding (`ibv_post_send(3)`), so every WRITE but the last sends one
    /// pattern written once, and the last — the one the server checks — is posted alone, after
    /// the others completed, with its own.
    fn stream_writes<N: Nic>(&mut self, host: &mut Host<N>) -> Result<(), Stop> {
        while let Some(&wr) = self.writes.front() {
            if self.ledger.send_out.contains_key(&wr) {
                break;
            }
            self.writes.pop_front();
            let i = self.i;
            let size = self.size;
            self.line(|| format!("rnic-ping-{i}: WRITE of {size} B completed"));
            self.next_iteration();
        }
        if self.i == self.count {
            self.outcome = Some(Outcome::Done);
            return Ok(());
        }
        if self.writes.is_empty() && self.pause_at == Some(self.i) {
            self.outcome = Some(Outcome::Paused);
            return Ok(());
        }
        let limit = self.pause_at.unwrap_or(self.count).min(self.count);
        while self.posted < limit && (self.writes.len() as u32) < self.depth.max(1) {
            let last = self.posted + 1 == self.count;
            if last {
                if !self.writes.is_empty() {
                    break;
                }
                let want = pattern(self.posted, b'W', self.size);
                self.ledger.store(host, self.ledger.layout.scratch, &want)?;
            } else if !self.staged {
                let filler = pattern(u32::MAX, b'W', self.size);
                self.ledger
                    .store(host, self.ledger.layout.scratch, &filler)?;
                self.staged = true;
            }
            let wr = self.post_write(host)?;
            self.writes.push_back(wr);
            self.posted += 1;
        }
        Ok(())
    }

    fn next_iteration(&mut self) {
        self.i += 1;
        self.iterations = self.i;
        self.st = St::Next;
    }
}
