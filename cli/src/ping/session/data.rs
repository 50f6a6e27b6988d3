//! The data phase of a session: the iterations (run as a [`DataPhase`] inside the endpoint,
//! in the driver's thread) and the closing FIN / FIN-ACK, with `--duration`, SIGINT, the live
//! progress line and the per-iteration lines on the way.

use super::*;
use crate::interrupt;
use crate::ping::app::{fin_message, parse_fin, FIN_ACK};

impl<N: PingNic> Session<'_, N> {
    /// Runs the iterations as a [`DataPhase`] inside the endpoint (the driver's thread reacts
    /// to each completion), pausing once at the `--kill-peer-after` point to kill the peer.
    /// A client ends the phase early when `--duration` runs out or on SIGINT/SIGTERM (after
    /// the iteration in progress, so that its FIN closes the run cleanly); a server stops at
    /// once on a signal.
    fn run_data_phase(&mut self) -> Result<(), Stop> {
        let p = self.peer()?;
        let count = self.params.count;
        let mut d = DataPhase::new(
            self.role,
            self.params.op,
            count,
            self.params.size,
            p,
            std::mem::take(&mut self.l),
        );
        d.pause_at = self.kill_after.filter(|k| *k < count);
        d.depth = self.write_depth;
        if self.live.per_iteration {
            d.lines = Some(VecDeque::new());
        }
        let start = self.h().now();
        // (Starts the progress clock.)
        self.live.line_due(start);
        let end_at = match (self.role, self.params.duration) {
            (Role::Client, Some(d)) => Some(start.plus_nanos(nanos(d))),
            _ => None,
        };
        let id = self.id;
        self.h().with(|ep, now| ep.inner_mut().start(id, d, now));
        let (node, ch, peer) = (self.node, self.node.channel(), self.peer);
        let timeout = nanos(self.timeout);
        let (mut steps, mut last_step) = (0, start);
        let mut finishing = false;
        let outcome = loop {
            let now = self.h().now();
            let mut until = last_step.plus_nanos(timeout);
            if let Some(end) = end_at.filter(|_| !finishing) {
                until = until.min(end);
            }
            if let Some(next) = self.live.next_line_at() {
                until = until.min(next);
            }
            self.h().wait_until(until - now, |ep| {
                ep.inner().data_settled(id)
                    || ep.inner().data_lines(Some(id))
                    || ep.inner().has_mail(id)
                    || ep.inner().host().cm().pending_events(ch) > 0
                    || interrupt::requested()
            });
            let signal = self.interrupted();
            let now = self.h().now();
            // The client ends the run after the iteration in progress: at the end of
            // `--duration`, or on a signal.
            let finish = !finishing
                && self.role == Role::Client
                && (signal.is_some() || end_at.is_some_and(|e| now >= e));
            finishing |= finish;
            let (outcome, now_steps, iterations, lines, own_events) = self.h().with(|ep, now| {
                // This connection's CM events end the data phase; another client's (a
                // CONNECT_REQUEST while the server is busy) wait for the next session.
                let own = node.own_events(ep, now, Some(id));
                let h = ep.inner_mut();
                if finish {
                    if let Some(d) = h.data.get_mut(&id) {
                        d.finish_early();
                    }
                    h.step(now);
                }
                let d = h.data.get_mut(&id);
                let outcome = d.as_ref().and_then(|d| d.outcome.clone());
                let iterations = d.as_ref().map_or(0, |d| d.iterations);
                let lines: Vec<String> = d
                    .and_then(|d| d.lines.as_mut())
                    .map(|l| l.drain(..).collect())
                    .unwrap_or_default();
                if outcome == Some(Outcome::Paused) {
                    if let Some(d) = h.data.get_mut(&id) {
                        d.resume();
                    }
                    ep.kill_peer();
                    ep.inner_mut().step(now);
                }
                // Progress: the peer's datagrams (the iterations, and a WRITE stream's
                // packets), not another client's.
                let n = ep.inner().peer_datagrams(peer) + u64::from(iterations);
                (outcome, n, iterations, lines, (own, now))
            });
            self.live.print_lines(&lines);
            self.progress_line(now, iterations, start);
            let (own, at) = own_events;
            let disconnected = !own.is_empty();
            self.take_events(own, at);
            if now_steps != steps {
                (steps, last_step) = (now_steps, now);
            }
            match outcome {
                Some(Outcome::Paused) => {
                    let (now, at) = (self.h().now(), self.kill_after.unwrap_or(0));
                    self.note(
                        now,
                        format!("--kill-peer-after: the peer is dead from iteration {at} on"),
                    );
                }
                Some(o) => break o,
                // A CM event (DISCONNECTED) during the data phase.
                None if disconnected => break Outcome::Stopped(Stop::PeerDisconnected),
                // The server stops at once on a signal (its rdma_disconnect tells the
                // client).
                None if self.role == Role::Server && signal.is_some() => {
                    break Outcome::Stopped(Stop::Interrupted(signal.unwrap_or("a signal")))
                }
                None if now >= last_step.plus_nanos(timeout) => {
                    break Outcome::Stopped(Stop::Timeout(format!(
                        "iteration traffic ({iterations} of {count} done, nothing for {:.1} s)",
                        self.timeout.as_secs_f64()
                    )))
                }
                None => {}
            }
        };
        let Some(d) = self.h().with(|ep, _| ep.inner_mut().data.remove(&id)) else {
            return Err(Stop::Failed("the data phase vanished".into()));
        };
        self.live
            .print_lines(&d.lines.iter().flatten().cloned().collect::<Vec<_>>());
        if d.lines_lost > 0 {
            eprintln!(
                "rnic ping {}: {} per-iteration lines not printed (the terminal was slower than the iterations)",
                self.role.name(),
                d.lines_lost
            );
        }
        self.data_ns = Some((start.as_nanos(), self.h().now().as_nanos()));
        self.l = d.ledger;
        self.iterations = d.iterations;
        self.bytes_verified += d.bytes_verified;
        self.rtts_ns = d.rtts_ns;
        if finishing && self.iterations < count {
            let now = self.h().now();
            let why = match self.interrupted {
                Some(sig) => sig.to_string(),
                None => "--duration".to_string(),
            };
            self.note(
                now,
                format!(
                    "{why}: the run ends after iteration {} (its FIN says so)",
                    self.iterations
                ),
            );
        }
        match outcome {
            Outcome::Stopped(stop) => Err(stop),
            _ => Ok(()),
        }
    }

    /// The client's iterations and closing FIN / FIN-ACK. After SIGINT the FIN exchange
    /// still runs (with a short limit), so that the server ends its run cleanly too.
    pub(super) fn client_data(&mut self) -> Result<(), Stop> {
        self.run_data_phase()?;
        self.closing = true;
        // The FIN tells the server how many ran (fewer than asked if the run ended early).
        if self.iterations < self.params.count {
            self.ended_early = Some(self.iterations);
        }
        self.maybe_kill(self.iterations);
        let wr = self.send(&fin_message(self.iterations))?;
        let ack = self.next_message("FIN-ACK")?;
        if ack != FIN_ACK {
            return Err(Stop::Failed("expected FIN-ACK".into()));
        }
        self.wait_closing_send(wr, "the FIN's completion")
    }

    /// The server's side of the iterations and the closing FIN / FIN-ACK. The FIN says how
    /// many iterations the client ran (fewer than asked after its `--duration` or a signal).
    pub(super) fn server_data(&mut self) -> Result<(), Stop> {
        let (size, l) = (self.params.size, self.l.layout);
        let op = self.params.op;
        if op != PingOp::Write {
            self.run_data_phase()?;
        }
        let fin = self.next_message("FIN")?;
        let Some(ran) = parse_fin(&fin) else {
            return Err(Stop::Failed("expected FIN".into()));
        };
        if ran > self.params.count {
            return Err(Stop::Failed(format!(
                "the client's FIN says {ran} iterations, more than the {} asked",
                self.params.count
            )));
        }
        if ran < self.params.count {
            let now = self.h().now();
            self.note(
                now,
                format!(
                    "the client ended the run after {ran} of {} iterations",
                    self.params.count
                ),
            );
            self.ended_early = Some(ran);
        }
        if op == PingOp::Write {
            if let Some(k) = self.kill_after.filter(|k| *k < ran) {
                let now = self.h().now();
                self.note(
                    now,
                    format!("--kill-peer-after {k}: a WRITE stream's server sees no iterations, so the peer dies at the close"),
                );
            }
            if let Some(last) = ran.checked_sub(1) {
                let got = self.load(l.write_target, size)?;
                self.verify("last RDMA WRITE", &got, &pattern(last, b'W', size))?;
            }
            self.iterations = ran;
        }
        self.closing = true;
        self.maybe_kill(ran);
        let wr = self.send(FIN_ACK)?;
        self.wait_closing_send(wr, "the FIN-ACK's completion")
    }

    /// The progress line, when one is due ([`Live`](super::live::Live)).
    pub(super) fn progress_line(&mut self, now: SimTime, iterations: u32, start: SimTime) {
        if !self.live.line_due(now) {
            return;
        }
        let w = self.node.wire_now();
        let who = match self.params.group {
            Some(g) => format!("{} qp {}", self.role.name(), g.index),
            None => self.role.name().to_string(),
        };
        self.live.print_progress(
            &who,
            now,
            start,
            iterations,
            self.params,
            w.rc_retransmits + w.cm_retransmits,
        );
    }
}

/// `d` in ns, saturating.
pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
