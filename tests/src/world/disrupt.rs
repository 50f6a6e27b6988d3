//! Faults the World injects: crashes (with restart and amnesia), partitions, targeted message
//! faults ([`MsgFault`]), device removal, address change, and healing.
//!
//! A new kind of fault plugs in here: a `World` method that changes the simulation now (or
//! schedules it in the fabric's plan), records a [`Fault`] variant for the history (with its
//! text in `history/record.rs` and its hash tag in `history.rs`), and, for the generator,
//! an `Action` of `scenario/mod.rs` that calls it.

use super::config::host_ip;
use super::node::new_node;
use super::{Fault, MsgFault, Record, World};
use rnic_sim::fabric::{Crash, Partition};
use verbs_core::Error;

impl World {
    /// Crashes host `h` now; with `restart_after_ns`, it comes back that much later with
    /// amnesia (a fresh device and CM with the same address and CA GUID, so its first QP
    /// reuses the first QPN; a new CM seed; a new application). Without, it stays down.
    ///
    /// # Errors
    /// Creating the new host's objects failed.
    pub fn crash(&mut self, h: usize, restart_after_ns: Option<u64>) -> Result<(), Error> {
        self.observe();
        let now = self.now();
        let restart = restart_after_ns.map(|d| now.plus_nanos(d.max(1)));
        self.sim.fabric.plan_mut().crashes.push(Crash {
            host: host_ip(h),
            at: now,
            restart,
        });
        self.record(
            h,
            Record::Fault(Fault::Crash {
                restart_ns: restart.map(|t| t.as_nanos()),
            }),
        );
        if restart.is_some() {
            let epoch = self.apps[h].epoch.wrapping_add(1);
            let node = new_node(&self.cfg, h, epoch)?;
            *self.node_mut(h)? = node;
            let mode = self.apps[h].mode;
            self.apps[h] = self.create_app(h, epoch)?;
            self.apps[h].mode = mode;
        }
        Ok(())
    }

    /// Removes host `h`'s device now (hot-unplug): `SimDevice::remove` (DEVICE_FATAL, every QP
    /// to ERR with its WRs flushed, every later verbs call but `poll_cq` EIO, nothing sent or
    /// received) then `RdmaCm::device_removal` (DEVICE_REMOVAL to every attached id, every
    /// later call on it but `rdma_destroy_id` ENXIO, no MAD sent). Recorded as
    /// [`Fault::DeviceRemoved`]; the application goes on reading its events and CQs. The peers
    /// hear nothing (docs/cm-semantics.md "Device removal and address change"). A crash with
    /// restart brings a fresh device.
    ///
    /// # Errors
    /// EINVAL for an unknown host.
    pub fn remove_device(&mut self, h: usize) -> Result<(), Error> {
        self.observe();
        let rc_sent = self.history.rc_packets.get(h).copied().unwrap_or(0);
        let node = self.node_mut(h)?;
        let (cm, dev) = node.host.split();
        dev.remove();
        cm.device_removal();
        self.record(h, Record::Fault(Fault::DeviceRemoved { rc_sent }));
        self.observe();
        Ok(())
    }

    /// Whether host `h`'s device (this life) was removed ([`remove_device`](Self::remove_device)).
    pub fn is_removed(&self, h: usize) -> bool {
        self.sim
            .endpoint(h)
            .is_some_and(|n| n.host.cm().device_removed())
    }

    /// The hardware address under host `h`'s CM changes now (a bonding failover):
    /// `RdmaCm::address_change` gives every attached, accepted id ADDR_CHANGE (status 0) and
    /// changes nothing else. Recorded as [`Fault::AddressChange`].
    ///
    /// # Errors
    /// EINVAL for an unknown host.
    pub fn address_change(&mut self, h: usize) -> Result<(), Error> {
        self.observe();
        self.node_mut(h)?.host.split().0.address_change();
        self.record(h, Record::Fault(Fault::AddressChange));
        self.observe();
        Ok(())
    }

    /// Adds a targeted message fault from now on (also in later lives of its host). Counting
    /// starts now: `Occurrence::Nth(1)` is the next such message the host sends.
    ///
    /// # Errors
    /// EINVAL for an unknown sending host.
    pub fn add_msg_fault(&mut self, f: MsgFault) -> Result<(), Error> {
        f.check(self.cfg.hosts)?;
        self.observe();
        self.node_mut(f.from)?.rules.push(f);
        self.cfg.msg_faults.push(f);
        Ok(())
    }

    /// Marks the network healed from now on: loss, duplication and corruption off, every
    /// partition healed now, every targeted message fault removed (delays stay, and so do
    /// messages a targeted delay holds). Liveness checks apply from here.
    pub fn heal(&mut self) {
        let now = self.now();
        if !self.cfg.msg_faults.is_empty() {
            self.cfg.msg_faults.clear();
            for h in 0..self.apps.len() {
                if let Ok(n) = self.node_mut(h) {
                    n.rules.clear();
                }
            }
        }
        let plan = self.sim.fabric.plan_mut();
        plan.default.loss = 0.0;
        plan.default.duplicate = 0.0;
        plan.default.corrupt = 0.0;
        for p in plan.paths.values_mut() {
            p.loss = 0.0;
            p.duplicate = 0.0;
            p.corrupt = 0.0;
        }
        for p in &mut plan.partitions {
            if p.heal.is_none_or(|t| t > now) {
                p.heal = Some(now);
            }
        }
        self.history.healed_at = Some(now);
    }

    /// Cuts the network from host `from` to host `to` (one way; call twice for both) from now
    /// for `for_ns` nanoseconds of virtual time, or until [`heal`](Self::heal) if `None`.
    /// Virtual time makes a window around one instant drop exactly the datagrams sent in it.
    pub fn partition_one_way(&mut self, from: usize, to: usize, for_ns: Option<u64>) {
        let now = self.now();
        let heal = for_ns.map(|d| now.plus_nanos(d));
        self.sim
            .fabric
            .plan_mut()
            .partitions
            .push(Partition::one_way(host_ip(from), host_ip(to), now, heal));
    }
}
