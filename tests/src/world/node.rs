//! A host as a fabric endpoint: the [`Host`] plus the wire tap.

use super::config::{host_index, host_ip, WorldConfig};
use super::targeted::{MsgAction, Rules};
use super::WireMsg;
use crate::host::Host;
use bytes::Bytes;
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::cell::Cell;
use std::net::SocketAddr;
use verbs_core::{Error, Gid, SimTime};

/// A host as a fabric endpoint: the [`Host`] plus the cheap wire tap (see the module docs).
#[derive(Debug)]
pub struct Node {
    pub(super) host: Host,
    /// (time, direction, other host, message) since the World last drained it.
    pub(super) wire: Vec<(SimTime, Dir, u8, WireMsg)>,
    /// Something may have changed since the World last observed the host (`world/observe.rs`).
    pub(super) dirty: bool,
    /// `host.poll_timeout()` as last asked (the simulation asks several times per event);
    /// `None` once the host may have changed: every `&mut` path to it clears it.
    pub(super) timeout: Cell<Option<Option<SimTime>>>,
    /// The host's targeted faults ([`MsgFault`](super::MsgFault)s sent by it).
    pub(super) rules: Rules,
    /// Datagrams a targeted delay holds: (release time, send order, destination, bytes).
    held: Vec<(SimTime, u64, SocketAddr, Bytes)>,
    held_seq: u64,
    /// The World's last host: the only one that sends from a socket other than an RNIC's (a
    /// hostile host speaking from another port of a peer's IP, [`World::inject_as`]), so what
    /// comes from such a socket is its.
    ///
    /// [`World::inject_as`]: super::World::inject_as
    last: u8,
}

/// The host a datagram from `src` is from: the one whose IP it is, unless it came from a port
/// other than the RNICs' (4791), which only the World's last host (a hostile one) uses.
pub(super) fn sender(src: SocketAddr, last: u8) -> u8 {
    if src.port() == rnic_sim::roce::ROCE_V2_UDP_DPORT {
        host_index(src.ip()) as u8
    } else {
        last
    }
}

/// What the wire tap saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    Tx,
    /// Sent, and dropped by a targeted fault (the `nth` of its kind) before the network.
    TxDropped {
        nth: u32,
    },
    /// Sent, and held by a targeted fault (the `nth` of its kind) for `ns`.
    TxDelayed {
        nth: u32,
        ns: u64,
    },
    /// A held datagram entered the network (already recorded as sent).
    TxReleased,
    Rx,
    /// Received, and dropped by the NIC: undecodable, or from a socket it does not take
    /// (`rnic_sim::peers`).
    RxDropped,
}

impl Node {
    /// The host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The host, mutably.
    pub fn host_mut(&mut self) -> &mut Host {
        self.touch();
        &mut self.host
    }

    /// Marks the host changed: observed again, its timer asked again.
    pub(super) fn touch(&mut self) {
        self.dirty = true;
        self.timeout.set(None);
    }
}

impl Node {
    /// The earliest held datagram due at `now` (by release time, then send order).
    fn release(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        let i = (0..self.held.len())
            .filter(|&i| self.held[i].0 <= now)
            .min_by_key(|&i| (self.held[i].0, self.held[i].1))?;
        self.touch();
        let (_, _, dst, bytes) = self.held.remove(i);
        let msg = WireMsg::parse(&bytes);
        self.wire
            .push((now, Dir::TxReleased, host_index(dst.ip()) as u8, msg));
        Some((dst, bytes))
    }
}

impl Endpoint for Node {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        self.touch();
        let msg = WireMsg::parse(&bytes);
        let refused = |n: &Self| {
            let c = n.host.nic().datagram_counters();
            c.rx_decode_errors + c.rx_foreign_socket
        };
        let bad_before = refused(self);
        self.host.handle_datagram(now, src, bytes);
        let dropped = refused(self) != bad_before;
        if msg.attr != 0 || dropped {
            let dir = if dropped { Dir::RxDropped } else { Dir::Rx };
            self.wire.push((now, dir, sender(src, self.last), msg));
        }
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        if !self.held.is_empty() {
            if let Some(d) = self.release(now) {
                return Some(d);
            }
        }
        loop {
            // A transmit pass can complete WRs (and move QPs to ERR) without sending anything,
            // and arms timers; without work it sends and changes nothing (asked after every
            // event).
            if !self.host.nic().device().transmit_pending() {
                return None;
            }
            self.touch();
            let (dst, bytes) = self.host.poll_transmit(now)?;
            let msg = WireMsg::parse(&bytes);
            let peer = host_index(dst.ip()) as u8;
            if !self.rules.is_empty() {
                match self.rules.hit(&msg) {
                    Some((MsgAction::Drop, nth)) => {
                        self.wire.push((now, Dir::TxDropped { nth }, peer, msg));
                        continue;
                    }
                    Some((MsgAction::Delay { ns }, nth)) => {
                        self.wire.push((now, Dir::TxDelayed { nth, ns }, peer, msg));
                        self.held
                            .push((now.plus_nanos(ns), self.held_seq, dst, bytes));
                        self.held_seq += 1;
                        continue;
                    }
                    None => {}
                }
            }
            self.wire.push((now, Dir::Tx, peer, msg));
            return Some((dst, bytes));
        }
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        if let Some(t) = self.timeout.get() {
            return t;
        }
        let mut t = self.host.poll_timeout();
        if let Some(h) = self.held.iter().map(|h| h.0).min() {
            t = Some(t.map_or(h, |t| t.min(h)));
        }
        self.timeout.set(Some(t));
        t
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.touch();
        // A held datagram's release is this node's timer too: it leaves on the next transmit
        // poll; the host's own timers run only when due.
        if self.held.is_empty() || self.host.poll_timeout().is_some_and(|t| t <= now) {
            self.host.handle_timeout(now)
        }
    }

    fn addr(&self) -> SocketAddr {
        self.host.addr()
    }
}

pub(super) fn new_node(cfg: &WorldConfig, h: usize, epoch: u8) -> Result<Node, Error> {
    let mut dcfg = SimDeviceConfig::new("sim", Gid::from_ip(host_ip(h)));
    dcfg.seed = cfg.device_seed(h);
    // The World reads only the defined fields of an error completion (`wr_id`, `status`,
    // `qp_num`; man:ibv_poll_cq.3): junk in the others must change nothing.
    dcfg.poison_undefined_wc_fields = true;
    let dev = SimDevice::new(dcfg);
    let mut nic = SimNic::at_gid(dev);
    if cfg.capture {
        nic.start_capture();
    }
    Ok(Node {
        host: Host::new(nic, cfg.cm_config(h, epoch))?,
        wire: Vec::new(),
        dirty: true,
        timeout: Cell::new(None),
        rules: Rules::new(h, &cfg.msg_faults),
        held: Vec::new(),
        held_seq: 0,
        last: u8::try_from(cfg.hosts.saturating_sub(1)).unwrap_or(u8::MAX),
    })
}
