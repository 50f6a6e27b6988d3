//! The World's configuration ([`WorldConfig`]), its fixed layout (the CM port, the memory
//! region's slots) and host addressing.

use cm_core::engine::CmConfig;
use rnic_sim::fabric::{FaultPlan, PathFaults};
use rnic_sim::rng::Rng;
use std::net::{IpAddr, Ipv4Addr};

/// The rdma_cm port every listener binds (the `rping`/`ib_send_bw` default, 7471).
pub const CM_PORT: u16 = 7471;
/// Bytes of one WR buffer slot in a host's memory region.
pub const SLOT_BYTES: u64 = 128;
/// Slots per region (send, receive, READ source, READ/WRITE destination).
pub const SLOTS: u64 = 32;
pub(super) const SEND_OFF: u64 = 0;
pub(super) const RECV_OFF: u64 = SLOT_BYTES * SLOTS;
pub(super) const READ_SRC_OFF: u64 = 2 * SLOT_BYTES * SLOTS;
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
        }
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
        if self.fast_timers {
            CmConfig {
                packet_life_time: 10,
                cm_response_timeout: 10,
                ..base
            }
        } else {
            base
        }
    }
}
