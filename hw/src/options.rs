//! What [`crate::HwDevice::open`] selects: device, port, GID.

use std::net::IpAddr;

/// Which RDMA device, port and GID [`crate::HwDevice::open`] uses. Every field is optional; the
/// default picks the first device with an ACTIVE port, its first ACTIVE port and that port's
/// first IPv4-mapped RoCE v2 GID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HwOptions {
    /// Device name as `ibv_devices` lists it (`ibv_get_device_name`), e.g. `"rxe0"` or
    /// `"mlx5_0"`. `None`: the first device, in libibverbs' order, with an ACTIVE port.
    pub device: Option<String>,
    /// Port number, 1-based. `None`: the first ACTIVE port. A given port must be ACTIVE too.
    pub port: Option<u8>,
    /// Index into the port's GID table (`ibv_query_gid`), 0..=255, used as given (no check of
    /// its type or address). `None`: the first index whose GID is RoCE v2 and matches `ip`.
    pub gid_index: Option<u32>,
    /// The IP address the GID must stand for: an IPv4 address selects the GID `::ffff:a.b.c.d`,
    /// an IPv6 address the GID equal to it. `None`: any IPv4-mapped GID. Ignored when
    /// `gid_index` is given.
    pub ip: Option<IpAddr>,
}
