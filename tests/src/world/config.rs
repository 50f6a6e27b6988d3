//! The World's configuration ([`WorldConfig`]), its fixed layout (the CM port, the memory
//! region's slots) and host addressing.

use super::host_app::HostApp;
use super::targeted::MsgFault;
use cm_core::engine::CmConfig;
use rnic_sim::fabric::{FaultPlan, PathFaults};
use rnic_sim::rng::Rng;
use std::net::{IpAddr, Ipv4Addr};
use verbs_core::Error;

/// The rdma_cm port every listener binds (the `rping`/`ib_send_bw` default, 7471).
pub const CM_PORT: u16 = 7471;
/// Bytes of one WR buffer slot in a host's memory region.
pub const SLOT_BYTES: u64 = 128;
/// Slots per region (send, receive, READ source, READ/WRITE destination) in the base layout;
/// [`WorldConfig::wr_slots`] above this adds slots after the base layout (see `world/slots.rs`).
pub const SLOTS: u64 = 32;
/// The destination region's start (the base layout, `world/slots.rs`).
pub(super) const DST_OFF: u64 = 3 * SLOT_BYTES * SLOTS;
pub(super) const MR_BYTES: u64 = 4 * SLOT_BYTES * SLOTS;
/// 1 ms in ns.
pub(super) const MS: u64 = 1_000_000;

/// How long [`World::run_to_quiescence`] may run past now before giving up: 400 s of virtual
/// time (the default DREQ give-up is ~74 s, TimeWait 0.5 s).
///
/// [`World::run_to_quiescence`]: super::World::run_to_quiescence
pub const QUIESCE_LIMIT_NS: u64 = 400_000 * MS;

/// Host `h`'s IPv4 address: 10.0.0.(h+1).
pub fn host_ip(h: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, (h as u8).wrapping_add(1)))
}

pub(super) fn host_index(ip: IpAddr) -> usize {
    match ip {
        IpAddr::V4(v4) => usize::from(v4.octets()[3]).saturating_sub(1),
        IpAddr::V6(_) => 0,
    }
}

/// Configuration of a [`World`].
///
/// [`World`]: super::World
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// Number of hosts (1..=250); host `h` is at [`host_ip`]`(h)`.
    pub hosts: usize,
    /// The one seed: the fabric's fault stream, each host's CM and device seeds and the data
    /// pattern are [`Rng::fork`]s of it.
    pub seed: u64,
    /// The network's faults (the World adds crashes to it).
    pub faults: FaultPlan,
    /// Short CM timers (packet lifetime 10, response timeout 10: DREQ timeout 12 ms, TimeWait
    /// 128 ms, cm-spec §3.2) instead of Linux's defaults (4608 ms, 512 ms).
    pub fast_timers: bool,
    /// Keep the NICs' packet captures (for [`World::captures`], pcap output). Slower.
    ///
    /// [`World::captures`]: super::World::captures
    pub capture: bool,
    /// `rnr_retry_count` of connect/accept (0–7; 7 = retry RNR NAKs forever, as rdma_cm's
    /// default users set it).
    pub rnr_retry: u8,
    /// Entries (CQEs) of each host's send CQ and receive CQ, shared by all its QPs (default
    /// 1024). A small value lets a burst of completions overrun a CQ ([`Record::CqErr`]).
    ///
    /// [`Record::CqErr`]: super::Record::CqErr
    pub cq_entries: u32,
    /// Per-host CM timer overrides, by host index (a host past the end, or a `None` field,
    /// keeps the default of [`fast_timers`](Self::fast_timers)). Applied by
    /// [`cm_config`](Self::cm_config), in every life of the host.
    pub host_cm: Vec<HostCm>,
    /// Targeted message faults from the start ([`MsgFault`]; more can be added while running
    /// with [`World::add_msg_fault`](super::World::add_msg_fault)).
    pub msg_faults: Vec<MsgFault>,
    /// `max_send_wr` and `max_recv_wr` of every QP the World creates (default 64): a post
    /// beyond the free entries fails with ENOMEM, as `ibv_post_send` does.
    pub qp_depth: u32,
    /// WR buffer slots per region of each host's memory region (default and minimum 32,
    /// [`SLOTS`]): each outstanding WR holds one slot (a SEND/WRITE: one of its send region;
    /// a receive: one of its receive region; a WRITE or READ: one of the destination host's
    /// destination region) from its post to its completion. A post that finds too few free
    /// slots is refused by the World ([`WorldError::OutOfSlots`](super::WorldError)); size it
    /// to the WRs you keep outstanding, e.g. with [`with_qp_depth`](Self::with_qp_depth).
    pub wr_slots: u32,
    /// Per-host application behaviours ([`HostApp`]: an SRQ, `rdma_notify` on COMM_EST), by
    /// host index (a host past the end has the default), in every life of the host.
    pub host_app: Vec<HostApp>,
}

/// Per-host overrides of the CM's timers ([`WorldConfig::host_cm`]), as a Linux host's
/// rdma_cm would be tuned (`CMA_CM_RESPONSE_TIMEOUT`, `CMA_MAX_CM_RETRIES`; the packet life
/// time is the path record's). `None` keeps the World's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCm {
    /// `max_cm_retries` (0–15): REQ, REP and DREQ are sent 1 + this many times before the
    /// send times out (UNREACHABLE −110 for REQ/REP, DISCONNECTED −110 for DREQ; cm-spec §3.2).
    pub max_cm_retries: Option<u8>,
    /// The CM response timeout exponent (4.096 µs × 2^t; Linux 20): with the packet life
    /// time, how long a REQ/DREQ waits for its answer before it is sent again
    /// (`2·ms(packet life time) + ms(response timeout)`, cm-spec §3.2).
    pub cm_response_timeout: Option<u8>,
    /// The path packet life time exponent (Linux RoCE 16).
    pub packet_life_time: Option<u8>,
}

impl WorldConfig {
    /// Two hosts, a perfect network, Linux's default timers, no capture.
    pub fn two_hosts(seed: u64) -> Self {
        WorldConfig {
            hosts: 2,
            seed,
            faults: FaultPlan::new(PathFaults::perfect()),
            fast_timers: false,
            capture: false,
            rnr_retry: 7,
            cq_entries: 1024,
            host_cm: Vec::new(),
            msg_faults: Vec::new(),
            qp_depth: 64,
            wr_slots: SLOTS as u32,
            host_app: Vec::new(),
        }
    }

    /// Checks what [`World::new`](super::World::new) cannot honour: 1 … 250 hosts, per-host
    /// settings only for hosts that exist, a QP depth of 1 … 16384 (`max_qp_wr` of rxe), and
    /// every [`MsgFault::check`](super::MsgFault::check).
    ///
    /// # Errors
    /// `EINVAL` naming the setting.
    pub fn check(&self) -> Result<(), Error> {
        let inval = |m: String| Err(Error::inval(m));
        if !(1..=250).contains(&self.hosts) {
            return inval(format!("{} hosts: 1 … 250", self.hosts));
        }
        if self.host_cm.len() > self.hosts || self.host_app.len() > self.hosts {
            return inval(format!(
                "per-host settings for {} hosts in a World of {}",
                self.host_cm.len().max(self.host_app.len()),
                self.hosts
            ));
        }
        if !(1..=16_384).contains(&self.qp_depth) {
            return inval(format!("QP depth {}: 1 … 16384", self.qp_depth));
        }
        for f in &self.msg_faults {
            f.check(self.hosts)?;
        }
        Ok(())
    }

    /// The same with host `h`'s CM timers overridden by `cm`.
    pub fn with_host_cm(mut self, h: usize, cm: HostCm) -> Self {
        if self.host_cm.len() <= h {
            self.host_cm.resize(h + 1, HostCm::default());
        }
        self.host_cm[h] = cm;
        self
    }

    /// The same with one more targeted message fault.
    pub fn with_msg_fault(mut self, f: MsgFault) -> Self {
        self.msg_faults.push(f);
        self
    }

    /// The same with host `h`'s application built as `app` says.
    pub fn with_host_app(mut self, h: usize, app: HostApp) -> Self {
        if self.host_app.len() <= h {
            self.host_app.resize(h + 1, HostApp::default());
        }
        self.host_app[h] = app;
        self
    }

    /// Host `h`'s application behaviours (the default past the end of
    /// [`host_app`](Self::host_app)).
    pub fn app_of(&self, h: usize) -> HostApp {
        self.host_app.get(h).copied().unwrap_or_default()
    }

    /// The same with QPs of `depth` send and receive WRs and enough WR slots
    /// ([`wr_slots`](Self::wr_slots)) for one QP's full queues.
    pub fn with_qp_depth(mut self, depth: u32) -> Self {
        self.qp_depth = depth;
        self.wr_slots = depth.max(SLOTS as u32);
        self
    }

    /// The same with [`fast_timers`](Self::fast_timers) on.
    pub fn fast(mut self) -> Self {
        self.fast_timers = true;
        self
    }

    /// Host `h`'s [`SimDeviceConfig::seed`]: its QPNs, lkeys/rkeys and MR addresses are
    /// seeded, as a real-time driver's are, so every scenario runs with identifiers that are
    /// not the sequential defaults. The same in every life of the host: a restart with amnesia
    /// hands out the same first QPN again, as a rebooted rxe does (the stale-connection rules
    /// of cm-spec §2.9 depend on it).
    ///
    /// [`SimDeviceConfig::seed`]: rnic_sim::SimDeviceConfig::seed
    pub fn device_seed(&self, h: usize) -> u64 {
        Rng::new(self.seed)
            .fork(0x686f_7374)
            .fork(h as u64)
            .fork(0x0064_6576) // "dev"; the CM's forks are the epochs, 0..=255
            .key()
    }

    /// Host `h`'s CM configuration in life `epoch` (a restart with amnesia gets a new seed but
    /// the same CA GUID).
    pub fn cm_config(&self, h: usize, epoch: u8) -> CmConfig {
        let rng = Rng::new(self.seed).fork(0x686f_7374).fork(h as u64);
        let base = CmConfig {
            ca_guid: 0x0002_c903_0000_0000 | (h as u64 + 1),
            seed: rng.fork(u64::from(epoch)).key(),
            ..CmConfig::default()
        };
        let mut c = if self.fast_timers {
            CmConfig {
                packet_life_time: 10,
                cm_response_timeout: 10,
                ..base
            }
        } else {
            base
        };
        if let Some(o) = self.host_cm.get(h) {
            c.max_cm_retries = o.max_cm_retries.unwrap_or(c.max_cm_retries).min(15);
            c.cm_response_timeout = o.cm_response_timeout.unwrap_or(c.cm_response_timeout);
            c.packet_life_time = o.packet_life_time.unwrap_or(c.packet_life_time);
        }
        c
    }
}
