//! `rnic demo`: two simulated RNICs on a lossless wire exchange a SEND, an RDMA WRITE and an
//! RDMA READ, then one QP is moved to ERR with receives outstanding and the flush is polled.
//!
//! Everything printed comes from the objects themselves: completions as polled from the CQs,
//! QP states as `query_qp` reports them, bytes compared by reading the MRs back.

use rnic_sim::pump::pump_pair;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use verbs_core::manual::{
    modify_to_init, modify_to_rtr, modify_to_rts, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo,
};
use verbs_core::{
    AccessFlags, CqHandle, Device, Gid, Mr, Mtu, Qp, QpAttr, QpAttrMask, QpState, RecvWr, SendWr,
    SimTime, WcStatus, WorkCompletion,
};

/// What the demo is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoOptions {
    /// Bytes moved by each of the SEND, WRITE and READ (1 ..= 1 MiB).
    pub size: u32,
    /// Receives left outstanding on the QP that is moved to ERR (0 ..= 1024).
    pub recvs: u32,
    /// Path MTU of the connection.
    pub mtu: Mtu,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            size: 4096,
            recvs: 4,
            mtu: Mtu::Mtu1024,
        }
    }
}

/// One check the demo made and whether it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub what: String,
    /// True when it held.
    pub ok: bool,
}

/// The outcome of a demo run: the printed transcript and every check made.
#[derive(Debug, Clone, Default)]
pub struct DemoReport {
    /// Human-readable transcript.
    pub transcript: String,
    /// Checks in the order they were made.
    pub checks: Vec<Check>,
    /// Every completion polled, as `(device name, completion)`.
    pub completions: Vec<(String, WorkCompletion)>,
    /// Bytes compared equal after the SEND, WRITE and READ.
    pub bytes_verified: u64,
    /// Packets that crossed the wire.
    pub packets: usize,
}

impl DemoReport {
    /// True when every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    fn line(&mut self, s: impl AsRef<str>) {
        self.transcript.push_str(s.as_ref());
        self.transcript.push('\n');
    }

    fn check(&mut self, what: impl Into<String>, ok: bool) {
        let what = what.into();
        self.line(format!(
            "  check: {what} ... {}",
            if ok { "ok" } else { "FAILED" }
        ));
        self.checks.push(Check { what, ok });
    }
}

/// Errors that stop the demo before it can report (a verbs call refused).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Options out of range.
    #[error("invalid option: {0}")]
    Options(String),
    /// A verbs call failed.
    #[error("{step}: {source}")]
    Verbs {
        /// What the demo was doing.
        step: &'static str,
        /// The verbs error (with its errno).
        source: verbs_core::Error,
    },
}

trait Step<T> {
    fn step(self, step: &'static str) -> Result<T, DemoError>;
}

impl<T> Step<T> for verbs_core::Result<T> {
    fn step(self, step: &'static str) -> Result<T, DemoError> {
        self.map_err(|source| DemoError::Verbs { step, source })
    }
}

impl<T> Step<T> for Result<T, verbs_core::PostError> {
    fn step(self, step: &'static str) -> Result<T, DemoError> {
        self.map_err(|e| DemoError::Verbs {
            step,
            source: e.error,
        })
    }
}

/// One side: a device with a PD, one MR, a send CQ, a receive CQ and an RC QP.
struct Side {
    dev: SimDevice,
    mr: Mr,
    scq: CqHandle,
    rcq: CqHandle,
    qp: Qp,
}

/// What the peer may do to each side's MR (and local write).
const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

/// Regions of each side's MR, each `size` bytes: what SEND/WRITE read from, where SEND lands,
/// where WRITE lands / READ reads from, where READ lands.
const SRC: u64 = 0;
const RECV: u64 = 1;
const RDMA: u64 = 2;
const READ_DST: u64 = 3;
const REGIONS: u64 = 4;

fn side(name: &str, ip: Ipv4Addr, opts: &DemoOptions) -> Result<Side, DemoError> {
    let mut dev = SimDevice::new(SimDeviceConfig::new(name, Gid::from_ipv4(ip)));
    let mr_len = usize::try_from(u64::from(opts.size) * REGIONS)
        .map_err(|_| DemoError::Options("size too large".into()))?;
    let depth = opts.recvs.max(1) + 4;
    let spec = RcEndpointSpec {
        mr_len,
        mr_access: ACCESS,
        cqe: depth * 2,
        ..RcEndpointSpec::default()
    }
    .queues(depth, 1, 0);
    let ep = RcEndpoint::create(&mut dev, &spec)
        .step("ibv_alloc_pd/ibv_reg_mr/ibv_create_cq/ibv_create_qp")?;
    Ok(Side {
        dev,
        mr: ep.mr,
        scq: ep.send_cq,
        rcq: ep.recv_cq,
        qp: ep.qp,
    })
}

fn state(s: &Side) -> Result<QpState, DemoError> {
    Ok(s.dev.query_qp(s.qp.handle).step("ibv_query_qp")?.0.qp_state)
}

/// Walks `s`'s QP RESET → INIT → RTR → RTS towards `peer`, as an `ibv_modify_qp` program does
/// (masks of cm-spec §5.2), printing the state `query_qp` reports after each step.
fn connect(
    s: &mut Side,
    peer: &RcPeerInfo,
    opts: &DemoOptions,
    report: &mut DemoReport,
) -> Result<(), DemoError> {
    let p = RcParams {
        mtu: opts.mtu,
        access: ACCESS,
        ..RcParams::default()
    };
    let qp = s.qp.handle;
    let mut states = vec![state(s)?];
    modify_to_init(&mut s.dev, qp, &p).step("ibv_modify_qp(INIT)")?;
    states.push(state(s)?);
    modify_to_rtr(&mut s.dev, qp, peer, DEMO_PSN, &p).step("ibv_modify_qp(RTR)")?;
    states.push(state(s)?);
    modify_to_rts(&mut s.dev, qp, peer.psn, &p).step("ibv_modify_qp(RTS)")?;
    states.push(state(s)?);
    let path: Vec<String> = states
        .iter()
        .map(|st| format!("{st:?}").to_uppercase())
        .collect();
    report.line(format!(
        "  {} QP {:#08x}: {}  (dest QPN {:#08x}, path MTU {} B)",
        s.dev.name(),
        s.qp.qp_num,
        path.join(" -> "),
        peer.qpn,
        opts.mtu.bytes()
    ));
    Ok(())
}

/// Both sides receive from this PSN, so both send from it; a 10 KiB exchange at MTU 256
/// crosses the 24-bit wrap.
const DEMO_PSN: u32 = 0x00FF_FFF0;

fn fmt_wc(wc: &WorkCompletion) -> String {
    if wc.status == WcStatus::Success {
        format!(
            "wr_id {:>3}  status {:<26} ({:>2})  opcode {:?}  byte_len {}",
            wc.wr_id,
            wc.status.as_str(),
            wc.status.raw(),
            wc.opcode,
            wc.byte_len
        )
    } else {
        format!(
            "wr_id {:>3}  status {:<26} ({:>2})  qp_num {:#08x}  vendor_err {}",
            wc.wr_id,
            wc.status.as_str(),
            wc.status.raw(),
            wc.qp_num,
            wc.vendor_err
        )
    }
}

fn poll_all(
    s: &mut Side,
    cq: CqHandle,
    label: &str,
    report: &mut DemoReport,
) -> Result<Vec<WorkCompletion>, DemoError> {
    let mut out = Vec::new();
    while s.dev.poll_cq(cq, 16, &mut out).step("ibv_poll_cq")? > 0 {}
    for wc in &out {
        report.line(format!("    {} {label} CQ: {}", s.dev.name(), fmt_wc(wc)));
        report.completions.push((s.dev.name().to_string(), *wc));
    }
    Ok(out)
}

/// A byte pattern that differs per `seed` and per position, so misplaced bytes are caught.
fn pattern(seed: u8, len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i % 251) as u8) ^ (i >> 8) as u8)
        .collect()
}

fn verify(
    s: &Side,
    region: u64,
    expected: &[u8],
    what: &str,
    report: &mut DemoReport,
) -> Result<(), DemoError> {
    let mut got = vec![0u8; expected.len()];
    s.dev
        .mr_read(s.mr.handle, region * expected.len() as u64, &mut got)
        .step("read MR")?;
    let equal = got.iter().zip(expected).filter(|(a, b)| a == b).count();
    report.bytes_verified += equal as u64;
    report.check(
        format!(
            "{what}: {equal}/{} bytes in {}'s MR equal what was sent",
            expected.len(),
            s.dev.name()
        ),
        equal == expected.len(),
    );
    Ok(())
}

fn one_completion(
    wcs: &[WorkCompletion],
    wr_id: u64,
    status: WcStatus,
    byte_len: Option<u32>,
    what: &str,
    report: &mut DemoReport,
) {
    let ok = wcs.len() == 1
        && wcs[0].wr_id == wr_id
        && wcs[0].status == status
        && byte_len.is_none_or(|l| wcs[0].byte_len == l);
    report.check(
        format!("{what}: one completion, wr_id {wr_id}, {}", status.as_str()),
        ok,
    );
}

/// Runs the demo and returns its report.
///
/// # Errors
/// [`DemoError::Options`] for options out of range; [`DemoError::Verbs`] when a verbs call the
/// demo relies on fails (the report would be meaningless).
pub fn run(opts: &DemoOptions) -> Result<DemoReport, DemoError> {
    if opts.size == 0 || opts.size > 1 << 20 {
        return Err(DemoError::Options(format!(
            "--size must be 1..=1048576 bytes, got {}",
            opts.size
        )));
    }
    if opts.recvs > 1024 {
        return Err(DemoError::Options(format!(
            "--recvs must be 0..=1024, got {}",
            opts.recvs
        )));
    }
    let now = SimTime::ZERO;
    let size = opts.size;
    let mut r = DemoReport::default();
    r.line(format!(
        "rnic demo: two simulated RNICs on a lossless wire, {size}-byte transfers, {} receives left outstanding",
        opts.recvs
    ));
    let mut a = side("sim0", Ipv4Addr::new(10, 0, 0, 1), opts)?;
    let mut b = side("sim1", Ipv4Addr::new(10, 0, 0, 2), opts)?;
    for s in [&a, &b] {
        r.line(format!(
            "  {}: GID {}  MR addr {:#x} len {} lkey {:#x} rkey {:#x}",
            s.dev.name(),
            s.dev.gid(),
            s.mr.addr,
            s.mr.length,
            s.mr.lkey,
            s.mr.rkey
        ));
    }

    r.line("\n[1] connect the RC QPs with ibv_modify_qp");
    let info = |s: &Side| RcPeerInfo {
        gid: s.dev.gid(),
        qpn: s.qp.qp_num,
        psn: DEMO_PSN,
    };
    let (ia, ib) = (info(&a), info(&b));
    let qb = ib.qpn;
    connect(&mut a, &ib, opts, &mut r)?;
    connect(&mut b, &ia, opts, &mut r)?;
    let both_rts = state(&a)? == QpState::Rts && state(&b)? == QpState::Rts;
    r.check("both QPs report RTS", both_rts);

    r.line(format!("\n[2] SEND {size} B sim0 -> sim1"));
    let data = pattern(1, size);
    a.dev
        .mr_write(a.mr.handle, SRC * u64::from(size), &data)
        .step("write MR")?;
    b.dev
        .post_recv(
            b.qp.handle,
            &[RecvWr::new(
                100,
                vec![b.mr.sge(RECV * u64::from(size), size)],
            )],
        )
        .step("ibv_post_recv")?;
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::send(1, vec![a.mr.sge(SRC * u64::from(size), size)])],
        )
        .step("ibv_post_send(SEND)")?;
    r.packets += pump_pair(&mut a.dev, &mut b.dev, now);
    let (scq_a, rcq_b) = (a.scq, b.rcq);
    let s = poll_all(&mut a, scq_a, "send", &mut r)?;
    one_completion(
        &s,
        1,
        WcStatus::Success,
        None,
        "SEND completes on sim0",
        &mut r,
    );
    let rv = poll_all(&mut b, rcq_b, "recv", &mut r)?;
    one_completion(
        &rv,
        100,
        WcStatus::Success,
        Some(size),
        "RECV completes on sim1",
        &mut r,
    );
    verify(&b, RECV, &data, "SEND payload", &mut r)?;

    r.line(format!(
        "\n[3] RDMA WRITE {size} B sim0 -> sim1 (rkey {:#x})",
        b.mr.rkey
    ));
    let data = pattern(2, size);
    a.dev
        .mr_write(a.mr.handle, SRC * u64::from(size), &data)
        .step("write MR")?;
    let remote = b.mr.addr + RDMA * u64::from(size);
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write(
                2,
                vec![a.mr.sge(SRC * u64::from(size), size)],
                remote,
                b.mr.rkey,
            )],
        )
        .step("ibv_post_send(RDMA_WRITE)")?;
    r.packets += pump_pair(&mut a.dev, &mut b.dev, now);
    let s = poll_all(&mut a, scq_a, "send", &mut r)?;
    one_completion(
        &s,
        2,
        WcStatus::Success,
        None,
        "RDMA WRITE completes on sim0",
        &mut r,
    );
    let rv = poll_all(&mut b, rcq_b, "recv", &mut r)?;
    r.check("RDMA WRITE consumes no receive on sim1", rv.is_empty());
    verify(&b, RDMA, &data, "RDMA WRITE payload", &mut r)?;

    r.line(format!("\n[4] RDMA READ {size} B sim0 <- sim1"));
    let data = pattern(3, size);
    b.dev
        .mr_write(b.mr.handle, RDMA * u64::from(size), &data)
        .step("write MR")?;
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_read(
                3,
                vec![a.mr.sge(READ_DST * u64::from(size), size)],
                remote,
                b.mr.rkey,
            )],
        )
        .step("ibv_post_send(RDMA_READ)")?;
    r.packets += pump_pair(&mut a.dev, &mut b.dev, now);
    let s = poll_all(&mut a, scq_a, "send", &mut r)?;
    one_completion(
        &s,
        3,
        WcStatus::Success,
        Some(size),
        "RDMA READ completes on sim0",
        &mut r,
    );
    verify(&a, READ_DST, &data, "RDMA READ payload", &mut r)?;

    r.line(format!(
        "\n[5] sim1 posts {} receives, then ibv_modify_qp(sim1 QP, IBV_QPS_ERR)",
        opts.recvs
    ));
    let recvs: Vec<RecvWr> = (0..u64::from(opts.recvs))
        .map(|i| RecvWr::new(200 + i, vec![b.mr.sge(RECV * u64::from(size), size)]))
        .collect();
    b.dev.post_recv(b.qp.handle, &recvs).step("ibv_post_recv")?;
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    b.dev
        .modify_qp(b.qp.handle, &err, QpAttrMask::STATE)
        .step("ibv_modify_qp(ERR)")?;
    let st = state(&b)?;
    r.line(format!(
        "  sim1 QP state now {}",
        format!("{st:?}").to_uppercase()
    ));
    r.check("sim1 QP reports ERR", st == QpState::Err);
    let flushed = poll_all(&mut b, rcq_b, "recv", &mut r)?;
    let ids: Vec<u64> = flushed.iter().map(|w| w.wr_id).collect();
    let expected: Vec<u64> = recvs.iter().map(|w| w.wr_id).collect();
    r.check(
        format!(
            "{} receives flushed with IBV_WC_WR_FLUSH_ERR (5), in post order",
            opts.recvs
        ),
        ids == expected && flushed.iter().all(|w| w.status == WcStatus::WrFlushErr),
    );
    r.check(
        "flush completions carry only wr_id/status/qp_num/vendor_err (byte_len 0)",
        flushed.iter().all(|w| w.byte_len == 0 && w.qp_num == qb),
    );
    b.dev
        .post_recv(b.qp.handle, &[RecvWr::new(999, vec![b.mr.sge(0, size)])])
        .step("ibv_post_recv in ERR")?;
    let late = poll_all(&mut b, rcq_b, "recv", &mut r)?;
    one_completion(
        &late,
        999,
        WcStatus::WrFlushErr,
        None,
        "a receive posted in ERR is accepted and flushed",
        &mut r,
    );
    r.line(format!(
        "  sim0 QP state {} (moving the local QP to ERR does not notify the peer)",
        format!("{:?}", state(&a)?).to_uppercase()
    ));

    let ok = r.checks.iter().filter(|c| c.ok).count();
    let total = r.checks.len();
    let mut summary = String::new();
    let _ = write!(
        summary,
        "\nsummary: {} completions polled ({} success, {} flushed), {} bytes verified, {} packets on the wire, {ok}/{total} checks held",
        r.completions.len(),
        r.completions.iter().filter(|(_, w)| w.status == WcStatus::Success).count(),
        r.completions.iter().filter(|(_, w)| w.status == WcStatus::WrFlushErr).count(),
        r.bytes_verified,
        r.packets
    );
    r.line(summary);
    r.line(if r.passed() {
        "verdict: PASS"
    } else {
        "verdict: FAIL"
    });
    Ok(r)
}
