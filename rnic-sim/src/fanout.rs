//! A [`SimNic`](crate::nic::SimNic)'s side of UD multicast ([`crate::multicast`]): the copies
//! of a multicast datagram it sends to the other members of the group, and the group a
//! received one is for.

use crate::device::SimDevice;
use crate::multicast::{GroupDirectory, MAX_GROUP_MEMBERS, MULTICAST_QPN};
use crate::roce::{decode_bytes, Flow, Packet, ROCE_V2_UDP_DPORT};
use bytes::Bytes;
use std::collections::VecDeque;
use std::net::SocketAddr;
use verbs_core::{Gid, QPN_MASK};

/// A [`SimNic`](crate::nic::SimNic)'s multicast: its group directory, and the copies of the
/// multicast datagram being sent that are still to go.
#[derive(Debug, Default)]
pub(crate) struct NicMulticast {
    dir: Option<Box<dyn GroupDirectory>>,
    /// Copies not sent yet: (member socket, datagram).
    out: VecDeque<(SocketAddr, Bytes)>,
    members: Vec<SocketAddr>,
    /// Copies of multicast datagrams handed to the wire.
    pub(crate) copies: u64,
    /// Multicast datagrams that went to no other RNIC (no directory, or no other member).
    pub(crate) no_members: u64,
    /// Members left out of a fan-out past [`MAX_GROUP_MEMBERS`].
    pub(crate) members_cut: u64,
}

impl NicMulticast {
    /// Uses `dir` as the fabric's group directory from now on (joining it to the groups the
    /// device is in already is the caller's next [`sync`](Self::sync)).
    pub(crate) fn set_directory(&mut self, dir: Box<dyn GroupDirectory>) {
        self.dir = Some(dir);
    }

    /// Tells the directory which groups the device joined or left since the last call.
    pub(crate) fn sync(&mut self, dev: &mut SimDevice, me: SocketAddr) {
        for (mgid, joined) in dev.take_multicast_changes() {
            if let Some(d) = self.dir.as_mut() {
                if joined {
                    d.join(mgid, me);
                } else {
                    d.leave(mgid, me);
                }
            }
        }
    }

    /// Queues one copy of `bytes` (a datagram to group `mgid`) for each other member.
    pub(crate) fn fan_out(&mut self, mgid: Gid, me: SocketAddr, bytes: &Bytes) {
        let Some(d) = self.dir.as_mut() else {
            self.no_members += 1;
            return;
        };
        d.members(mgid, &mut self.members);
        let mut sent = 0;
        for &m in &self.members {
            if m == me {
                continue;
            }
            if sent == MAX_GROUP_MEMBERS {
                self.members_cut += 1;
                continue;
            }
            self.out.push_back((m, bytes.clone()));
            sent += 1;
        }
        self.copies += sent as u64;
        if sent == 0 {
            self.no_members += 1;
        }
    }

    /// The next copy to send.
    pub(crate) fn pop(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.out.pop_front()
    }

    /// A received datagram from `src` that is not for this RNIC's own address (its ICRC does
    /// not verify for it, or it names QPN 0xFFFFFF): the group among those the device is in
    /// whose address its ICRC was computed over, and the packet decoded on that flow.
    pub(crate) fn match_group(
        dev: &SimDevice,
        bytes: &Bytes,
        src: SocketAddr,
    ) -> Option<(Gid, Packet)> {
        dev.multicast_groups().into_iter().find_map(|mgid| {
            let group = SocketAddr::new(mgid.to_ip(), ROCE_V2_UDP_DPORT);
            decode_bytes(bytes, &Flow::new(src, group), true)
                .ok()
                .filter(|p| p.bth.dest_qp & QPN_MASK == MULTICAST_QPN)
                .map(|p| (mgid, p))
        })
    }
}
