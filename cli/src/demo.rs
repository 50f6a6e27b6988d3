//! `rnic demo`: the [`ping`](crate::ping) exchange with both ends in one process — two
//! simulated RNICs, each with its own CM, on two UDP sockets on loopback. The client connects
//! through the CM, both exchange buffer addresses and keys by SEND, run RDMA WRITE, SEND and
//! RDMA READ with every byte checked, then the client disconnects with receives still posted.
//! The transcript shows each side's report and ends with a timeline of the disconnect on
//! both sides, on one clock.
//!
//! Everything printed comes from the objects themselves: CM events as the application got
//! them, completions as polled, QP states as `query_qp` reports them, bytes read back from
//! the MRs.

use crate::ping::report::PingReport;
use crate::ping::{
    Client, DisconnectBy, Params, PingError, PingOp, Server, SideOptions, WireOptions, MAX_RECVS,
    MAX_SIZE,
};
use rnic_sim::nic::SimNic;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use verbs_core::Mtu;

/// What the demo is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoOptions {
    /// Bytes moved by each SEND, reply, WRITE and READ (1 ..= 1 MiB).
    pub size: u32,
    /// Receives each side keeps posted; all are flushed at the disconnect (1 ..= 1024).
    pub recvs: u32,
    /// Path MTU of the connection.
    pub mtu: Mtu,
    /// Iterations of WRITE + SEND + reply + READ.
    pub count: u32,
    /// Who disconnects.
    pub disconnect_by: DisconnectBy,
    /// Short CM timers (TimeWait 8 ms instead of 512 ms).
    pub fast_timers: bool,
    /// Longest time without progress before a side gives up (`--timeout`).
    pub timeout: Duration,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            size: 4096,
            recvs: 4,
            mtu: Mtu::Mtu1024,
            count: 3,
            disconnect_by: DisconnectBy::Client,
            fast_timers: false,
            timeout: Duration::from_secs(10),
        }
    }
}

/// One check the demo made and whether it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked (prefixed with the side).
    pub what: String,
    /// True when it held.
    pub ok: bool,
}

/// The outcome of a demo run.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// Human-readable transcript, ending with the disconnect timeline and the verdict.
    pub transcript: String,
    /// Both sides' checks.
    pub checks: Vec<Check>,
    /// The client's report.
    pub client: PingReport,
    /// The server's report.
    pub server: PingReport,
    /// Bytes compared equal, both sides together (per iteration: the server checks the WRITE
    /// and the SEND, the client the reply and the READ).
    pub bytes_verified: u64,
    /// Datagrams the two NICs sent.
    pub packets: u64,
}

impl DemoReport {
    /// True when every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Options out of range.
    #[error("invalid option: {0}")]
    Options(String),
    /// The ping machinery failed (socket, device).
    #[error("{0}")]
    Ping(#[from] PingError),
    /// The server did not see the client.
    #[error("the server saw no connection")]
    NoConnection,
}

/// One line of the merged timeline: ms on the client's clock, side, what.
fn merged_timeline(client: &PingReport, server: &PingReport, server_offset_ns: i128) -> String {
    let mut rows: Vec<(f64, &str, String)> = Vec::new();
    let c0 = client.t0_ns as i128;
    let shift = |t0: i128, t_ms: f64| ((t0 - c0) as f64) / 1e6 + t_ms;
    for t in &client.timeline {
        rows.push((shift(c0, t.t_ms), "client", t.what.clone()));
    }
    for t in &server.timeline {
        rows.push((
            shift(server.t0_ns as i128 + server_offset_ns, t.t_ms),
            "server",
            t.what.clone(),
        ));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut s = String::from("disconnect timeline (ms since the client started connecting):\n");
    for (t, who, what) in rows {
        let _ = writeln!(s, "  {t:>10.3}  {who:<6}  {what}");
    }
    s
}

/// Runs the demo and returns its report.
///
/// # Errors
/// [`DemoError::Options`] for options out of range; [`DemoError::Ping`] when a socket or the
/// device fails; [`DemoError::NoConnection`] when the server saw no client.
pub fn run(opts: &DemoOptions) -> Result<DemoReport, DemoError> {
    if opts.size == 0 || opts.size > MAX_SIZE {
        return Err(DemoError::Options(format!(
            "--size must be 1..={MAX_SIZE} bytes, got {}",
            opts.size
        )));
    }
    if opts.recvs == 0 || opts.recvs > MAX_RECVS {
        return Err(DemoError::Options(format!(
            "--recvs must be 1..={MAX_RECVS}, got {}",
            opts.recvs
        )));
    }
    let side = SideOptions {
        recvs: opts.recvs,
        timeout: opts.timeout,
        ..SideOptions::default()
    };
    let wire = WireOptions {
        fast_timers: opts.fast_timers,
        mtu: opts.mtu,
        // Real sockets: identifiers a peer cannot guess, as `rnic ping` draws them.
        seed: rnic_sim::fabric::udp::os_seed(),
        ..WireOptions::default()
    };
    let mut server =
        Server::<SimNic>::bind(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0), &side, &wire)?;
    let addr = server.local_addr();
    let mut client = Client::<SimNic>::bind(addr, &side, &wire)?;
    let params = Params {
        op: PingOp::All,
        count: opts.count,
        size: opts.size,
        disconnect_by: opts.disconnect_by,
        duration: None,
        group: None,
    };
    // Two applications in one process: the server's runs on a scoped thread while the
    // client's runs here; each blocks on its own node's driver.
    let (c, s) = std::thread::scope(|scope| {
        // The client may take its whole --timeout to connect or to give up.
        let wait = (2 * opts.timeout).max(Duration::from_secs(30));
        let srv = &mut server;
        let srv = scope.spawn(move || srv.serve_one(wait));
        let c = client.run(addr, params);
        let s = srv
            .join()
            .unwrap_or_else(|_| Err(PingError::Options("server thread panicked".into())));
        (c, s)
    });
    let (c, s) = (c?, s?.ok_or(DemoError::NoConnection)?);
    let offset = match server
        .node()
        .epoch()
        .checked_duration_since(client.node().epoch())
    {
        Some(d) => d.as_nanos() as i128,
        None => {
            -(client
                .node()
                .epoch()
                .duration_since(server.node().epoch())
                .as_nanos() as i128)
        }
    };
    let mut t = String::new();
    let _ = writeln!(
        t,
        "rnic demo: two simulated RNICs, each with its own connection manager, on UDP sockets {} (client) and {} (server)",
        c.local, s.local
    );
    let _ = writeln!(
        t,
        "{} iterations of RDMA WRITE + SEND + reply + RDMA READ of {} bytes, {} receives posted, then the {} disconnects\n",
        opts.count,
        opts.size,
        opts.recvs,
        c.disconnect_by
    );
    t.push_str(&c.to_text());
    t.push('\n');
    t.push_str(&s.to_text());
    t.push('\n');
    t.push_str(&merged_timeline(&c, &s, offset));
    let checks: Vec<Check> = [("client", &c), ("server", &s)]
        .iter()
        .flat_map(|(who, r)| {
            r.checks.iter().map(move |k| Check {
                what: format!("{who}: {}", k.what),
                ok: k.ok,
            })
        })
        .collect();
    let passed = checks.iter().all(|k| k.ok);
    let interrupted = c.interrupted.as_ref().or(s.interrupted.as_ref());
    let verdict = match (interrupted, passed) {
        (Some(sig), _) => format!("INTERRUPTED by {sig}"),
        (None, true) => "PASS".into(),
        (None, false) => "FAIL".into(),
    };
    let _ = writeln!(t, "verdict: {verdict}");
    client.shutdown()?;
    server.shutdown()?;
    Ok(DemoReport {
        transcript: t,
        checks,
        bytes_verified: c.bytes_verified + s.bytes_verified,
        packets: c.wire.nic_tx + s.wire.nic_tx,
        client: c,
        server: s,
    })
}
