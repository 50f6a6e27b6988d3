//! The faults the history records.

use super::wire::WireMsg;
use rnic_sim::fabric::DropReason;

/// A fault the network or the World injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The fabric dropped a datagram this host sent.
    Dropped {
        /// Why.
        reason: DropReason,
        /// What it was.
        msg: WireMsg,
    },
    /// The fabric delivers a datagram this host sent twice.
    Duplicated {
        /// What it was.
        msg: WireMsg,
    },
    /// A datagram arrived at this host corrupted and its NIC dropped it (bad ICRC or
    /// undecodable: counted, never a panic); `msg` is what the damaged bytes read as.
    Corrupted {
        /// What it was (as read from the damaged bytes).
        msg: WireMsg,
    },
    /// A targeted fault ([`MsgFault`](crate::world::MsgFault)) dropped this message the host sent,
    /// the `nth` of its kind in this life, before it entered the network.
    TargetedDrop {
        /// What it was.
        msg: WireMsg,
        /// Its occurrence number (1 = the first).
        nth: u32,
    },
    /// A targeted fault held this message the host sent, the `nth` of its kind in this life,
    /// for `by_ns`: it enters the network then (its send is recorded when the host sent it).
    Delayed {
        /// What it was.
        msg: WireMsg,
        /// Its occurrence number (1 = the first).
        nth: u32,
        /// The hold, ns.
        by_ns: u64,
    },
    /// The host crashed; it comes back with amnesia at `restart_ns` (virtual ns), or never
    /// (`None`).
    Crash {
        /// Restart time in ns.
        restart_ns: Option<u64>,
    },
    /// The host's device was removed ([`World::remove_device`](crate::world::World::remove_device)):
    /// `SimDevice::remove` then `RdmaCm::device_removal`. `rc_sent` is the number of RC
    /// packets the host had sent until then ([`History::rc_packets`](super::History)): it
    /// sends none afterwards.
    DeviceRemoved {
        /// RC packets sent before the removal (all lives of the host).
        rc_sent: u64,
    },
    /// The hardware address under the host's CM changed
    /// ([`World::address_change`](crate::world::World::address_change)): `RdmaCm::address_change`.
    AddressChange,
}
