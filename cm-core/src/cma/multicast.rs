//! Multicast joins on the kernel side, as on a RoCE port (cma.c `rdma_join_multicast` →
//! `cma_iboe_join_multicast`, `cma_iboe_set_mgid`, `cma_make_mc_event`;
//! `rdma_leave_multicast`; ucma.c `ucma_leave_multicast`). No SA is asked: the group's GID
//! is derived from the IP address, and MULTICAST_JOIN is queued by the join itself.
//! Attaching the id's QP to the group is librdmacm's (`ucma_process_join`, when the event is
//! fetched).

use super::*;
use crate::shared::{UdParam, MULTICAST_QPN, RDMA_UDP_QKEY};
use std::net::IpAddr;
use verbs_core::{AhAttr, GlobalRoute};

/// At most this many joins per id (Linux has no limit but memory; an application that joins
/// more gets `ENOMEM`).
pub const MAX_JOINS_PER_ID: usize = 256;

/// The hop limit of a RoCEv2 multicast group (`IPV6_DEFAULT_HOPLIMIT`, set by
/// `cma_iboe_join_multicast` for IPv4 groups).
const MULTICAST_HOP_LIMIT: u8 = 64;

/// The GID of the multicast group of IPv4 address `ip` on a RoCEv2 port (`cma_iboe_set_mgid`
/// with `IB_GID_TYPE_ROCE_UDP_ENCAP`): `::ffff:a.b.c.d`. `None` for the unspecified address
/// (`cma_zero_addr`: EINVAL) and for IPv6 (Linux: `-ENOTSUPP` on a RoCEv2 port).
pub fn multicast_gid(ip: IpAddr) -> Option<Gid> {
    let v4 = match ip {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => v6.to_ipv4_mapped()?,
    };
    (!v4.is_unspecified()).then(|| Gid::from_ipv4(v4))
}

/// One join of an id (`struct cma_multicast`): the address the application gave and the
/// group's GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Join {
    pub(super) addr: SocketAddr,
    pub(super) mgid: Gid,
}

impl Cma {
    /// `rdma_join_multicast(id, addr)` as the kernel runs it on a RoCEv2 port: the id must be
    /// bound to the device and in ADDR_BOUND or ADDR_RESOLVED; the group is
    /// [`multicast_gid`]`(addr)` (any non-zero IPv4 address: Linux does not check that it is
    /// a class D one). `RDMA_CM_EVENT_MULTICAST_JOIN` is queued at once with the UD
    /// parameters of the group: QPN 0xFFFFFF, the id's Q_Key ([`RDMA_UDP_QKEY`], which the id
    /// keeps from then on) and an address vector to the group's GID (hop limit 64, port 1);
    /// `RDMA_CM_EVENT_MULTICAST_ERROR` with −EINVAL instead when the id has another Q_Key
    /// (`cma_set_qkey`). Both name `addr` ([`CmEvent::multicast`]).
    ///
    /// # Errors
    /// `EINVAL` for an id not bound to the device or in another state, or for the unspecified
    /// address; `EOPNOTSUPP` for an IPv6 group (Linux: `-ENOTSUPP`, 524, on a RoCEv2 port);
    /// `ENOMEM` past [`MAX_JOINS_PER_ID`] joins; `ENXIO` once the device was removed.
    pub fn join_multicast(&mut self, id: CmIdHandle, addr: SocketAddr) -> Result<(), Error> {
        let r = self.rec(id)?;
        if !r.bound {
            return Err(inval("rdma_join_multicast: id not bound to a device"));
        }
        if !matches!(r.state, RdmaCmState::AddrBound | RdmaCmState::AddrResolved) {
            return Err(inval(
                "rdma_join_multicast: id not ADDR_BOUND or ADDR_RESOLVED",
            ));
        }
        if addr.ip().is_unspecified() {
            return Err(inval("rdma_join_multicast: the zero address"));
        }
        let Some(mgid) = multicast_gid(addr.ip()) else {
            return Err(Error::new(
                Errno::EOPNOTSUPP,
                "rdma_join_multicast: IPv6 groups are not supported on a RoCEv2 port",
            ));
        };
        if r.joins.len() >= MAX_JOINS_PER_ID {
            return Err(Error::new(Errno::ENOMEM, "too many multicast joins"));
        }
        let want = if r.ps == RdmaPortSpace::Udp {
            RDMA_UDP_QKEY
        } else {
            0
        };
        r.joins.push(Join { addr, mgid });
        tracing::debug!(id = id.0, %addr, "multicast group joined");
        match self.set_qkey(id, want) {
            Ok(qkey) => {
                let ud = UdParam {
                    ah_attr: AhAttr {
                        grh: GlobalRoute {
                            dgid: mgid,
                            hop_limit: MULTICAST_HOP_LIMIT,
                            ..GlobalRoute::default()
                        },
                        is_global: true,
                        port_num: 1,
                        ..AhAttr::default()
                    },
                    qp_num: MULTICAST_QPN,
                    qkey,
                };
                let param = ConnEventParam {
                    qp_num: MULTICAST_QPN,
                    ..ConnEventParam::default()
                };
                self.deliver_ud(
                    id,
                    CmEventType::MulticastJoin,
                    0,
                    None,
                    param,
                    Some(ud),
                    Some(addr),
                );
            }
            Err(e) => {
                let status = -e.errno.code();
                let none = ConnEventParam::default();
                self.deliver_ud(
                    id,
                    CmEventType::MulticastError,
                    status,
                    None,
                    none,
                    None,
                    Some(addr),
                );
            }
        }
        Ok(())
    }

    /// `rdma_leave_multicast(id, addr)`, the kernel's half (`ucma_leave_multicast`): the first
    /// join of `addr` goes, with its events not read yet (`ucma_cleanup_mc_events`).
    ///
    /// # Errors
    /// `EADDRNOTAVAIL` when the id has no join of `addr`; `EINVAL` for an unknown id.
    pub fn leave_multicast(&mut self, id: CmIdHandle, addr: SocketAddr) -> Result<(), Error> {
        let r = self
            .ids
            .get_mut(&id)
            .ok_or_else(|| inval("unknown rdma_cm id"))?;
        let Some(i) = r.joins.iter().position(|j| j.addr == addr) else {
            return Err(Error::new(
                Errno::EADDRNOTAVAIL,
                "rdma_leave_multicast: not joined to this address",
            ));
        };
        r.joins.remove(i);
        let channel = r.channel;
        if let Some(q) = self.channels.get_mut(&channel) {
            q.retain(|e| !(e.id == id && e.multicast == Some(addr)));
        }
        tracing::debug!(id = id.0, %addr, "multicast group left");
        Ok(())
    }

    /// The groups `id` has joined, in join order: the address given and the group's GID.
    pub fn joins(&self, id: CmIdHandle) -> Vec<(SocketAddr, Gid)> {
        self.ids
            .get(&id)
            .map(|r| r.joins.iter().map(|j| (j.addr, j.mgid)).collect())
            .unwrap_or_default()
    }
}
