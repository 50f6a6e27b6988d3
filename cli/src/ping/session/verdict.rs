//! The end of a session: the checks on what happened and the report.

use super::*;

impl<N: PingNic> Session<'_, N> {
    /// The checks on the finished session and its report: `status` of its DISCONNECTED,
    /// whether TIMEWAIT_EXIT came, the QP's state at the end, and whether this side
    /// disconnected first.
    pub(super) fn report(
        mut self,
        status: Option<i32>,
        exited: bool,
        final_state: Option<QpState>,
        we_disconnect: bool,
    ) -> PingReport {
        let mut checks = Vec::new();
        let mut check = |what: String, ok: bool| checks.push(CheckRecord { what, ok });
        let killed = self.kill_after.is_some();
        check("connection ESTABLISHED".into(), self.established);
        if killed {
            let retry = self.l.errors.contains_key("RETRY_EXC_ERR");
            check(
                "after --kill-peer-after, an RC operation ended with RETRY_EXC_ERR (12)".into(),
                retry,
            );
            check(
                format!(
                    "DREQ retries ran out: DISCONNECTED with status {STATUS_ETIMEDOUT} (ETIMEDOUT), got {status:?}"
                ),
                status == Some(STATUS_ETIMEDOUT),
            );
        } else {
            let stop = self.stopped.as_ref().map(|s| format!(" (stopped: {s})"));
            let (want, done) = match self.ended_early {
                Some(ran) => (
                    ran,
                    format!("the run ended after {ran} iterations (the FIN says so), all done"),
                ),
                // A --duration run stopped before its end (a signal): say what ran.
                None if self.params.duration.is_some() => (
                    self.params.count,
                    format!("{} iterations of a --duration run done", self.iterations),
                ),
                None => (
                    self.params.count,
                    format!("all {} iterations done", self.params.count),
                ),
            };
            check(
                format!(
                    "{done}, every byte verified ({} bytes){}",
                    self.bytes_verified,
                    stop.unwrap_or_default()
                ),
                self.stopped.is_none() && self.iterations == want,
            );
            check(
                format!("DISCONNECTED with status 0, got {status:?}"),
                status == Some(0),
            );
            check(
                "no completion with an error other than WR_FLUSH_ERR".into(),
                self.l.errors.is_empty(),
            );
        }
        check("TIMEWAIT_EXIT after DISCONNECTED".into(), exited);
        check(
            format!(
                "QP in ERR after {}rdma_disconnect, got {}",
                if we_disconnect {
                    "our "
                } else {
                    "answering with "
                },
                final_state.map_or("?".into(), qp_state_name)
            ),
            final_state == Some(QpState::Err),
        );
        let posted = self.l.tally.recvs_posted_at_err;
        check(
            format!(
                "every still-posted receive ({posted}) flushed with WR_FLUSH_ERR exactly once ({} flushed, {} unexpected, {} still outstanding)",
                self.l.tally.flushed_recvs,
                self.l.tally.unexpected,
                self.l.recv_out.len()
            ),
            posted > 0
                && self.l.tally.flushed_recvs == posted
                && self.l.tally.unexpected == 0
                && self.l.recv_out.is_empty(),
        );
        for f in &self.failures {
            check(f.clone(), false);
        }
        if !self.established {
            // Nothing after the handshake happened: the one check that failed says it all
            // (the report's `stopped` says why).
            checks.truncate(1);
        }
        self.l.tally.errors = std::mem::take(&mut self.l.errors).into_iter().collect();
        let latency = latency(&mut self.rtts_ns);
        let throughput = self.data_ns.and_then(|(a, b)| {
            // Payload bytes the iterations carried, both directions: WRITE; SEND and its
            // reply; WRITE, SEND, reply and READ.
            let per_iteration = match self.params.op {
                PingOp::Write => 1,
                PingOp::Send => 2,
                PingOp::All => 4,
            };
            let moved = u64::from(self.iterations) * u64::from(self.params.size) * per_iteration;
            let seconds = b.saturating_sub(a) as f64 / 1e9;
            (seconds > 0.0).then(|| Throughput {
                bytes: moved,
                seconds,
                mbit_per_s: moved as f64 * 8.0 / seconds / 1e6,
            })
        });
        let mut wire = self.node.wire_since_report();
        // The datagram counters are the process's (one socket for every QP); the RC ones are
        // this connection's QP's own totals where the device keeps them.
        if let Some((retries, timeouts)) = self.qp_rc {
            wire.rc_retransmits = retries;
            wire.rc_timeouts = timeouts;
        }
        let passed = checks.iter().all(|c| c.ok);
        PingReport {
            role: self.role.name().into(),
            device: self.node.described().to_string(),
            seed: self.node.seed(),
            path_mtu: self.path_mtu.map(Mtu::bytes),
            local: self.node.local_addr().to_string(),
            peer: self.peer.to_string(),
            op: self.params.op.name().into(),
            count: self.params.count,
            depth: (self.role == Role::Client && self.params.op == PingOp::Write)
                .then_some(self.write_depth),
            size: self.params.size,
            disconnect_by: self.params.disconnect_by.role().name().into(),
            iterations: self.iterations,
            bytes_verified: self.bytes_verified,
            events: self.events,
            completions: self.l.tally,
            qp_states: self.qp_states,
            timeline: self.timeline,
            latency,
            throughput,
            wire,
            stopped: self.stopped.map(|s| s.to_string()),
            checks,
            verdict: match (self.interrupted, passed) {
                (Some(_), _) => "INTERRUPTED",
                (None, true) => "PASS",
                (None, false) => "FAIL",
            }
            .into(),
            interrupted: self.interrupted.map(str::to_string),
            duration_s: self.params.duration.map(|d| d.as_secs_f64()),
            t0_ns: self.t0.as_nanos(),
        }
    }
}

fn latency(ns: &mut [u64]) -> Option<Latency> {
    if ns.is_empty() {
        return None;
    }
    ns.sort_unstable();
    let us = |v: u64| v as f64 / 1e3;
    let n = ns.len();
    Some(Latency {
        samples: n,
        min_us: us(ns[0]),
        median_us: us(ns[n / 2]),
        mean_us: ns.iter().sum::<u64>() as f64 / n as f64 / 1e3,
        p99_us: us(ns[(n * 99 / 100).min(n - 1)]),
    })
}
