//! How a ping node at a socket address is configured: its CM ([`cm_config`]: CA GUID, seed,
//! timers, path MTU) and the simulated RNIC's seed forked from the CM's ([`device_seed`]).

use super::WireOptions;
use cm_core::engine::CmConfig;
use rnic_sim::rng::Rng;
use std::net::SocketAddr;

/// [`Rng::fork`] label of the simulated RNIC's seed ("dev").
const DEVICE_SEED_STREAM: u64 = 0x0064_6576;

/// The CM configuration of a node at `addr`: a CA GUID unique to the socket (two processes on
/// one IP differ by port), a seed from the socket and `w.seed` (unguessable when `w.seed` is,
/// distinct for two nodes of one process), Linux timers or short ones (`--fast-timers`).
pub fn cm_config(addr: SocketAddr, w: &WireOptions) -> CmConfig {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => (u128::from(v6) & 0xffff_ffff) as u64,
    };
    let unique = (ip << 16) | u64::from(addr.port());
    let cfg = CmConfig {
        ca_guid: 0x0002_c900_0000_0000 | (unique & 0xffff_ffff_ffff),
        seed: unique.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ w.seed,
        path_mtu: w.mtu,
        ..CmConfig::default()
    };
    if w.fast_timers {
        cfg.with_fast_timers()
    } else {
        cfg
    }
}

/// The [`SimDeviceConfig::seed`](rnic_sim::SimDeviceConfig::seed) of a node at `addr`: a fork
/// of its CM seed ([`cm_config`]), so its QPNs, keys and MR addresses are as unguessable as
/// `w.seed`, and two nodes of one process differ.
pub fn device_seed(addr: SocketAddr, w: &WireOptions) -> u64 {
    Rng::new(cm_config(addr, w).seed)
        .fork(DEVICE_SEED_STREAM)
        .key()
}
