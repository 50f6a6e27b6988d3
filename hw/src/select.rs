//! Which GID of a port [`crate::HwDevice::open`] uses: the rule, separate from the libibverbs
//! calls that feed it.
//!
//! RoCE ports list every IP address of their netdev twice, once per RoCE version (rxe: index 0
//! and 1 the link-local IPv6 address as v1 and v2, then each IPv4 address as v1 and v2). The CM
//! of this repository speaks RoCE v2 with IPv4-mapped GIDs, so the first GID that is RoCE v2 and
//! stands for the wanted address is taken.

use std::net::IpAddr;
use std::path::PathBuf;
use verbs_core::Gid;

/// What is known of a GID's RoCE version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GidKind {
    /// RoCE v2 (`IBV_GID_TYPE_SYSFS_ROCE_V2`, sysfs `RoCE v2`).
    RoceV2,
    /// IB or RoCE v1.
    Other,
    /// Neither `ibv_query_gid_type` nor sysfs answered: accepted, since an IPv4-mapped GID is
    /// RoCE v2 on every device that has one of each type (and the only one on v2-only NICs).
    Unknown,
}

/// `IBV_GID_TYPE_SYSFS_ROCE_V2` of `enum ibv_gid_type_sysfs` [driver.h].
pub(crate) const GID_TYPE_SYSFS_ROCE_V2: u32 = 1;

/// The kind of a GID from `ibv_query_gid_type`'s answer, falling back to sysfs (`sysfs` reads
/// the type file) when the call failed (`EOPNOTSUPP` from an rdma-core without the symbol).
pub(crate) fn kind_of(
    queried: Result<u32, i32>,
    sysfs: impl FnOnce() -> Option<String>,
) -> GidKind {
    match queried {
        Ok(GID_TYPE_SYSFS_ROCE_V2) => GidKind::RoceV2,
        Ok(_) => GidKind::Other,
        Err(_) => sysfs().map_or(GidKind::Unknown, |t| kind_from_sysfs(&t)),
    }
}

/// The kind the kernel's `gid_attrs/types/<index>` file states (`RoCE v2`, `IB/RoCE v1`).
pub(crate) fn kind_from_sysfs(text: &str) -> GidKind {
    match text.trim() {
        "RoCE v2" => GidKind::RoceV2,
        "IB/RoCE v1" | "IB" | "RoCE v1" => GidKind::Other,
        _ => GidKind::Unknown,
    }
}

/// `/sys/class/infiniband/<device>/ports/<port>/gid_attrs/types/<index>`.
pub(crate) fn sysfs_type_path(device: &str, port: u8, index: u32) -> PathBuf {
    PathBuf::from(format!(
        "/sys/class/infiniband/{device}/ports/{port}/gid_attrs/types/{index}"
    ))
}

/// True when `gid` is the one asked for: equal to `ip`'s GID (IPv4 addresses mapped), or with
/// no `ip` any IPv4-mapped GID (`::ffff:a.b.c.d`).
pub(crate) fn address_matches(gid: Gid, ip: Option<IpAddr>) -> bool {
    match ip {
        Some(ip) => gid == Gid::from_ip(ip),
        None => std::net::Ipv6Addr::from(gid.0).to_ipv4_mapped().is_some(),
    }
}

/// The first index below `table_len` whose GID (`query`; `None` for an empty or unreadable
/// entry) matches `ip` and whose kind (`kind`, asked only for matching GIDs) is not
/// [`GidKind::Other`].
pub(crate) fn pick_gid(
    table_len: u32,
    ip: Option<IpAddr>,
    mut query: impl FnMut(u32) -> Option<Gid>,
    mut kind: impl FnMut(u32) -> GidKind,
) -> Option<(u32, Gid)> {
    (0..table_len).find_map(|i| {
        let gid = query(i)?;
        if !address_matches(gid, ip) {
            return None;
        }
        (kind(i) != GidKind::Other).then_some((i, gid))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: u8) -> Gid {
        Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, a))
    }

    /// rxe's table for a netdev with fe80::1 and 10.0.0.1, 10.0.0.2: v1, v2 of each.
    fn rxe_table() -> Vec<(Gid, GidKind)> {
        let ll = Gid(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1).octets());
        vec![
            (ll, GidKind::Other),
            (ll, GidKind::RoceV2),
            (v4(1), GidKind::Other),
            (v4(1), GidKind::RoceV2),
            (v4(2), GidKind::Other),
            (v4(2), GidKind::RoceV2),
        ]
    }

    fn pick(t: &[(Gid, GidKind)], ip: Option<IpAddr>) -> Option<(u32, Gid)> {
        let len = t.len() as u32;
        pick_gid(
            len + 2, // past the table: entries that fail to read
            ip,
            |i| t.get(i as usize).map(|e| e.0),
            |i| t.get(i as usize).map_or(GidKind::Unknown, |e| e.1),
        )
    }

    #[test]
    fn first_ipv4_mapped_roce_v2() {
        assert_eq!(pick(&rxe_table(), None), Some((3, v4(1))));
    }

    #[test]
    fn the_asked_ip() {
        let ip = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(pick(&rxe_table(), ip), Some((5, v4(2))));
        let absent = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)));
        assert_eq!(pick(&rxe_table(), absent), None);
        let ll = Some(IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)));
        assert_eq!(pick(&rxe_table(), ll).map(|p| p.0), Some(1));
    }

    #[test]
    fn unknown_kind_is_accepted_v1_is_not() {
        let t = vec![(v4(1), GidKind::Unknown)];
        assert_eq!(pick(&t, None), Some((0, v4(1))));
        let t = vec![(v4(1), GidKind::Other)];
        assert_eq!(pick(&t, None), None);
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_of(Ok(1), || None), GidKind::RoceV2);
        assert_eq!(kind_of(Ok(0), || None), GidKind::Other);
        assert_eq!(kind_of(Err(95), || None), GidKind::Unknown);
        assert_eq!(
            kind_of(Err(95), || Some("RoCE v2\n".into())),
            GidKind::RoceV2
        );
        assert_eq!(kind_from_sysfs("IB/RoCE v1\n"), GidKind::Other);
        assert_eq!(kind_from_sysfs(""), GidKind::Unknown);
        assert_eq!(
            sysfs_type_path("rxe0", 1, 3),
            PathBuf::from("/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/3")
        );
    }
}
