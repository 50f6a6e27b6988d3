//! The address vector back to the sender of a received UD datagram, from its work completion
//! and the 40-byte GRH in front of its payload — what libibverbs's `ibv_init_ah_from_wc`
//! computes on a RoCE port (`verbs.c`: `get_grh_header_version`, `set_ah_attr_by_ipv4`,
//! `set_ah_attr_by_ipv6`).

use crate::consts::IBV_WC_GRH;
use verbs_core::{AhAttr, Gid, GlobalRoute};

/// The GID types libibverbs tells apart here (`enum ibv_gid_type_sysfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1`.
    IbRoceV1,
    /// `IBV_GID_TYPE_SYSFS_ROCE_V2`.
    RoceV2,
}

/// The fields of `struct ibv_wc` the address vector is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WcRoute {
    /// `wc_flags` (`IBV_WC_GRH` says the GRH is valid).
    pub wc_flags: u32,
    /// `slid`.
    pub slid: u16,
    /// `sl`.
    pub sl: u8,
    /// `dlid_path_bits`.
    pub dlid_path_bits: u8,
}

/// The standard Internet checksum (RFC 1071) of a 20-byte IPv4 header whose checksum field is
/// taken as 0.
fn ipv4_header_checksum(h: &[u8; 20]) -> u16 {
    let mut sum: u32 = h
        .chunks_exact(2)
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// `get_grh_header_version`: 4 when the GRH holds a RoCEv2 IPv4 header (at byte 20, IHL 5,
/// valid checksum) and the first nibble is not 6 or is 6 by chance; 6 for an IPv6 header;
/// `None` (EPROTONOSUPPORT) for neither.
fn grh_version(grh: &[u8; 40]) -> Option<u8> {
    let ip4: [u8; 20] = grh[20..].try_into().ok()?;
    let v4 = ip4[0] >> 4 == 4;
    if grh[0] >> 4 != 6 {
        return v4.then_some(4);
    }
    if ip4[0] & 0x0F != 5 {
        return Some(6);
    }
    let carried = u16::from_be_bytes([ip4[10], ip4[11]]);
    Some(if carried == ipv4_header_checksum(&ip4) {
        4
    } else {
        6
    })
}

/// `ibv_init_ah_from_wc`: the address vector that answers the datagram of `wc` whose GRH is
/// `grh`, on port `port_num` whose GID table is `gids` (index → GID and type). Without
/// `IBV_WC_GRH` it has no GRH (`is_global` false: a RoCE port then refuses the AH).
///
/// # Errors
/// The errno libibverbs leaves: `EPROTONOSUPPORT` for a GRH that is neither IPv4 nor IPv6;
/// `EINVAL` when the datagram was sent to a multicast group (libibverbs: "no point searching
/// multicast GIDs in GID table") or to a GID the table does not hold with the datagram's type.
pub fn ah_from_wc(
    wc: &WcRoute,
    grh: &[u8; 40],
    port_num: u8,
    gids: &[(Gid, GidType)],
) -> Result<AhAttr, i32> {
    let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
    let mut ah = AhAttr {
        grh: GlobalRoute {
            flow_label: vtf & 0xF_FFFF,
            ..GlobalRoute::default()
        },
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        port_num,
        ..AhAttr::default()
    };
    if wc.wc_flags & IBV_WC_GRH == 0 {
        return Ok(ah);
    }
    ah.is_global = true;
    let find = |gid: Gid, ty: GidType| {
        gids.iter()
            .position(|&(g, t)| g == gid && t == ty)
            .and_then(|i| u8::try_from(i).ok())
            .ok_or(libc::EINVAL)
    };
    match grh_version(grh).ok_or(libc::EPROTONOSUPPORT)? {
        4 => {
            let ip4 = &grh[20..];
            let addr =
                |at: usize| std::net::Ipv4Addr::new(ip4[at], ip4[at + 1], ip4[at + 2], ip4[at + 3]);
            let (saddr, daddr) = (addr(12), addr(16));
            if daddr.is_multicast() {
                return Err(libc::EINVAL);
            }
            ah.grh.sgid_index = find(Gid::from_ipv4(daddr), GidType::RoceV2)?;
            ah.grh.dgid = Gid::from_ipv4(saddr);
            ah.grh.hop_limit = ip4[8];
            ah.grh.traffic_class = ip4[1];
        }
        _ => {
            let gid = |at: usize| {
                let mut g = [0u8; 16];
                g.copy_from_slice(&grh[at..at + 16]);
                Gid(g)
            };
            let (sgid, dgid) = (gid(8), gid(24));
            if dgid.0[0] == 0xFF {
                return Err(libc::EINVAL);
            }
            let ty = match grh[6] {
                17 => GidType::RoceV2,
                0x1B => GidType::IbRoceV1,
                _ => return Err(libc::EPROTONOSUPPORT),
            };
            ah.grh.sgid_index = find(dgid, ty)?;
            ah.grh.dgid = sgid;
            ah.grh.hop_limit = grh[7];
            ah.grh.traffic_class = u8::try_from((vtf >> 20) & 0xFF).unwrap_or(0);
        }
    }
    Ok(ah)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn v4_grh(src: [u8; 4], dst: [u8; 4], ttl: u8, tos: u8) -> [u8; 40] {
        let mut g = [0u8; 40];
        let h = &mut g[20..];
        h[0] = 0x45;
        h[1] = tos;
        h[2..4].copy_from_slice(&60u16.to_be_bytes());
        h[6] = 0x40;
        h[8] = ttl;
        h[9] = 17;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        let ip4: [u8; 20] = g[20..].try_into().unwrap();
        let c = ipv4_header_checksum(&ip4);
        g[30..32].copy_from_slice(&c.to_be_bytes());
        g
    }

    const GRH: WcRoute = WcRoute {
        wc_flags: IBV_WC_GRH,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    };

    fn table() -> Vec<(Gid, GidType)> {
        vec![(Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2)), GidType::RoceV2)]
    }

    #[test]
    fn an_ipv4_grh_answers_the_sender_from_the_gid_it_was_sent_to() {
        let g = v4_grh([10, 0, 0, 1], [10, 0, 0, 2], 63, 0x20);
        let ah = ah_from_wc(&GRH, &g, 1, &table()).unwrap();
        assert!(ah.is_global);
        assert_eq!(ah.grh.dgid, Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(
            (ah.grh.sgid_index, ah.grh.hop_limit, ah.grh.traffic_class),
            (0, 63, 0x20)
        );
        assert_eq!(ah.port_num, 1);
    }

    #[test]
    fn a_multicast_destination_or_a_foreign_one_is_einval() {
        let mc = v4_grh([10, 0, 0, 1], [239, 1, 1, 1], 64, 0);
        assert_eq!(ah_from_wc(&GRH, &mc, 1, &table()), Err(libc::EINVAL));
        let other = v4_grh([10, 0, 0, 1], [10, 0, 0, 3], 64, 0);
        assert_eq!(ah_from_wc(&GRH, &other, 1, &table()), Err(libc::EINVAL));
    }

    #[test]
    fn a_bad_checksum_reads_as_ipv6_and_junk_as_unsupported() {
        let mut g = v4_grh([10, 0, 0, 1], [10, 0, 0, 2], 64, 0);
        g[0] = 0x60; // an IPv6 version nibble in front: now the checksum decides
        g[31] ^= 1;
        g[6] = 0x1B; // next header IB: RoCE v1, which the table does not hold
        assert_eq!(ah_from_wc(&GRH, &g, 1, &table()), Err(libc::EINVAL));
        let junk = [0u8; 40];
        assert_eq!(
            ah_from_wc(&GRH, &junk, 1, &table()),
            Err(libc::EPROTONOSUPPORT)
        );
    }

    #[test]
    fn without_grh_the_address_vector_is_not_global() {
        let ah = ah_from_wc(&WcRoute::default(), &[0; 40], 1, &table()).unwrap();
        assert!(!ah.is_global);
    }
}
