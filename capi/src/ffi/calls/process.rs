//! What the process shares across every [`Calls`](super::Calls): the event channels, and
//! the library's object counts.

use super::CM_CHANNELS;
use crate::ffi::cm;
use crate::ffi::objects::{registry, ChannelBox};
use libc::c_int;
use std::sync::OnceLock;

/// How many objects the library holds, process-wide: after a [`Calls`](super::Calls) is torn
/// down they are back to what they were before it made anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// The simulated device's PDs, MRs, CQs and QPs.
    pub device: rnic_sim::ObjectCounts,
    /// rdma_cm ids of the connection manager.
    pub cm_ids: usize,
    /// CQs, QPs and ids in the handle → pointer registry.
    pub registry: (usize, usize, usize),
    /// Completion channels of the node.
    pub comp_channels: usize,
    /// Async events queued and not read.
    pub async_events: usize,
    /// CM events queued on the shared channels and not read.
    pub cm_events: usize,
}

/// The library's object counts ([`Counts`]); `None` when the runtime is not running.
pub fn counts() -> Option<Counts> {
    let r = crate::runtime::runtime().ok()?;
    let chans: Vec<cm_core::api::EventChannel> = channel_pool()
        .iter()
        .filter(|&&p| p != 0)
        // SAFETY: a non-zero pool entry is a `ChannelBox` made by `rdma_create_event_channel`,
        // never destroyed (see `channel_pool`).
        .map(|&p| unsafe { (*(p as *const ChannelBox)).handle })
        .collect();
    let reg = {
        let g = registry();
        (g.cqs.len(), g.qps.len(), g.ids.len())
    };
    Some(r.with_quiet(|n, _| Counts {
        device: n.device().object_counts(),
        cm_ids: n.cm().ids().len(),
        registry: reg,
        comp_channels: n.comp.len(),
        async_events: n.device().pending_async_events(),
        cm_events: chans.iter().map(|&c| n.cm().pending_events(c)).sum(),
    }))
}

/// The shared event channels (addresses of their `ChannelBox`es; 0 if one could not be made),
/// made once, non-blocking, never destroyed.
pub(super) fn channel_pool() -> &'static [usize; CM_CHANNELS] {
    static POOL: OnceLock<[usize; CM_CHANNELS]> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool = [0; CM_CHANNELS];
        for p in &mut pool {
            // SAFETY: no arguments; returns a new channel or NULL.
            let ch = unsafe { cm::rdma_create_event_channel() };
            if !ch.is_null() {
                // SAFETY: `ch` was just made: its `fd` is its descriptor.
                nonblocking(unsafe { (*ch).fd });
                *p = ch as usize;
            }
        }
        pool
    })
}

/// Sets `O_NONBLOCK` on `fd` (one of the library's descriptors; -1 is ignored).
pub(super) fn nonblocking(fd: c_int) {
    if fd < 0 {
        return;
    }
    // SAFETY: `fcntl` on a descriptor number; an invalid one fails with EBADF, nothing else.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}
