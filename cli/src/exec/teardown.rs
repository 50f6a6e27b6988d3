//! What the kernel does when an RDMA program dies, done by `rnic exec` for its program: the
//! connections the program published in the state file are destroyed as `ucma_close` →
//! `rdma_destroy_id` → `cm_destroy_id` destroys them on Linux (REJ in a handshake, one DREQ
//! when ESTABLISHED, DREP in DREQ_RCVD, nothing in DREQ_SENT or TIMEWAIT), and the RNIC keeps
//! answering as a CM with no ids (a DREQ for an unknown connection gets a DREP, a REQ with no
//! listener a REJ 8) for the TimeWait, on the program's own socket.
//!
//! The CM is cm-core's [`CmEngine`] with the program's CA GUID and timers, each connection
//! taken over with [`CmEngine::adopt`] and destroyed with [`CmEngine::destroy_id`]; its MADs
//! travel through a [`SimDevice`] with no QPs on a [`SimNic`] on the real-time UDP driver, as
//! the program's did. RC packets for the dead program's QPs find no QP and are dropped, as a
//! destroyed QP's are.

use bytes::Bytes;
use cm_core::engine::{cm_ack_timeout, cm_convert_to_ms, CmEngine};
use cm_core::wire::{self, CmMessage};
use nix::sys::signal::Signal;
use rnic::state_file::{Owner, Slot, StateFile};
use rnic_sim::fabric::udp::{os_seed, UdpDriver};
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;
use verbs_core::{GsiEndpoint, SimTime};

/// The CM that speaks for the dead program: an engine with no QPs on the program's socket.
struct Kernel {
    nic: SimNic,
    cm: CmEngine,
    /// MADs sent, by message name.
    sent: BTreeMap<&'static str, u64>,
}

fn name(m: &CmMessage) -> &'static str {
    match m {
        CmMessage::Req(_) => "REQ",
        CmMessage::Mra(_) => "MRA",
        CmMessage::Rej(_) => "REJ",
        CmMessage::Rep(_) => "REP",
        CmMessage::Rtu(_) => "RTU",
        CmMessage::Dreq(_) => "DREQ",
        CmMessage::Drep(_) => "DREP",
        _ => "other",
    }
}

impl Kernel {
    /// Hands the MADs the device received to the CM and sends what it answers.
    fn pump(&mut self, now: SimTime) {
        while let Some(d) = GsiEndpoint::gsi_recv(self.nic.device_mut()) {
            self.cm.handle_datagram(now, d.peer, &d.mad);
        }
        self.flush();
    }

    /// Sends the CM's MADs; its events have nobody to go to.
    fn flush(&mut self) {
        loop {
            while let Some((dst, mad)) = self.cm.poll_transmit() {
                if let Ok((_, m)) = wire::decode(&mad) {
                    *self.sent.entry(name(&m)).or_default() += 1;
                }
                // UD is unreliable: a send error is a lost datagram.
                let _ = GsiEndpoint::gsi_send(self.nic.device_mut(), dst, &mad);
            }
            if self.cm.poll_event().is_none() {
                break;
            }
        }
    }

    /// Takes over and destroys every published connection; returns how many were taken over
    /// and how many refused (a Local Comm ID twice: a corrupt file).
    fn take_over(&mut self, now: SimTime, slots: &[Slot]) -> (usize, usize) {
        let (mut adopted, mut refused) = (0, 0);
        for s in slots {
            if let Some(peer) = s.peer {
                self.nic.set_peer_addr(s.conn.remote_gid, peer);
            }
            match self.cm.adopt(&s.conn) {
                Ok(id) => {
                    tracing::debug!(state = ?s.conn.state, comm_id = s.conn.local_comm_id,
                        "destroying the dead program's connection");
                    self.cm.destroy_id(now, id);
                    adopted += 1;
                }
                Err(e) => {
                    tracing::warn!("connection {:?} not taken over: {e}", s.conn);
                    refused += 1;
                }
            }
            self.flush();
        }
        (adopted, refused)
    }
}

impl Endpoint for Kernel {
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        Endpoint::handle_datagram(&mut self.nic, now, src, bytes);
        self.pump(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        Endpoint::poll_transmit(&mut self.nic, now)
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        [Endpoint::poll_timeout(&self.nic), self.cm.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: SimTime) {
        if Endpoint::poll_timeout(&self.nic).is_some_and(|t| t <= now) {
            Endpoint::handle_timeout(&mut self.nic, now);
        }
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            self.cm.handle_timeout(now);
        }
        self.pump(now);
    }

    fn addr(&self) -> SocketAddr {
        Endpoint::addr(&self.nic)
    }
}

/// How long the RNIC answers after the program's death by default: the longest TimeWait of its
/// connections, and at least that of a new one with the program's timers (the kernel would
/// answer for ever; the supervisor cannot outlive the program by much).
pub fn default_linger(owner: &Owner, slots: &[Slot]) -> Duration {
    let cm = &owner.cm;
    let fresh = cm_convert_to_ms(cm_ack_timeout(cm.ack_delay, cm.packet_life_time));
    let ms = slots
        .iter()
        .map(|s| cm_convert_to_ms(s.conn.av_timeout))
        .fold(fresh, u64::max);
    Duration::from_millis(ms)
}

/// What [`run`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Connections taken over and destroyed.
    pub destroyed: usize,
    /// Slots that could not be used (junk, or refused by the CM).
    pub invalid: u64,
    /// Connections the program had no slot for.
    pub unpublished: u64,
    /// MADs sent, by message name.
    pub sent: BTreeMap<&'static str, u64>,
}

/// After the program's death: reads the state file, destroys its connections and answers its
/// peers on `socket` for `linger` (default [`default_linger`]), or until SIGINT, SIGTERM, SIGHUP
/// or SIGQUIT comes through `signals` (the ones `rnic exec` received). Nothing happens when the
/// program never took the RNIC, when another process of its tree owns it still, when the RNIC was
/// removed, nor by default when it `exited` (rather than being killed) leaving no connection and
/// no datagram unanswered.
///
/// # Errors
/// The state file cannot be read, or the driver not started (the message says which).
pub fn run(
    socket: UdpSocket,
    state: &StateFile,
    linger: Option<Duration>,
    exited: bool,
    signals: &Receiver<Signal>,
) -> Result<Outcome, String> {
    if let Some(pid) = state.owner_pid() {
        // A process the program started owns the RNIC and lives on: its RNIC is alive.
        tracing::info!("rnic exec: process {pid} still owns the RNIC; nothing to finish");
        return Ok(Outcome::default());
    }
    let owner = match state.read_owner() {
        // A removed RNIC sends nothing, alive or dead.
        Ok(Some(o)) if !o.device_removed => o,
        Ok(_) => return Ok(Outcome::default()),
        Err(e) => return Err(format!("cannot read the state file: {e}")),
    };
    let read = state
        .read_slots()
        .map_err(|e| format!("cannot read the state file: {e}"))?;
    let addr = socket
        .local_addr()
        .map_err(|e| format!("the RNIC's socket has no address: {e}"))?;
    let mut dcfg = SimDeviceConfig::new("rnic-exec", owner.local_gid);
    dcfg.node_guid = owner.cm.ca_guid;
    dcfg.seed = os_seed();
    let mut cfg = owner.cm;
    cfg.seed = os_seed();
    let kernel = Kernel {
        nic: SimNic::new(SimDevice::new(dcfg), addr),
        cm: CmEngine::new(cfg),
        sent: BTreeMap::new(),
    };
    let linger = match linger {
        Some(l) => l,
        // The program exited on its own: its librnic destroyed every id itself, as `ucma_close`
        // would (`close_at_exit`). Nothing left to answer: no reason to keep its caller waiting.
        None if exited && read.slots.is_empty() && !has_datagram(&socket) => {
            return Ok(Outcome::default());
        }
        None => default_linger(&owner, &read.slots),
    };
    let driver = UdpDriver::spawn(kernel, socket)
        .map_err(|e| format!("cannot answer for the dead program: {e}"))?;
    let (destroyed, refused) = driver.handle().with(|k, now| k.take_over(now, &read.slots));
    wait(signals, linger);
    let sent = driver.handle().with_quiet(|k, _| k.sent.clone());
    if let Err(e) = driver.shutdown() {
        tracing::warn!("the dead program's RNIC: {e}");
    }
    Ok(Outcome {
        destroyed,
        invalid: read.invalid + refused as u64,
        unpublished: owner.unpublished,
        sent,
    })
}

/// Whether a datagram waits on `socket` (it is left there).
fn has_datagram(socket: &UdpSocket) -> bool {
    let mut b = [0u8; 1];
    socket.set_nonblocking(true).is_ok() && socket.peek_from(&mut b).is_ok()
}

/// Sleeps for `linger`, or until SIGINT, SIGTERM, SIGHUP or SIGQUIT comes through `signals`
/// (others are ignored).
#[allow(clippy::disallowed_methods)] // a driver: the linger is wall-clock time
fn wait(signals: &Receiver<Signal>, linger: Duration) {
    let deadline = std::time::Instant::now() + linger;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match signals.recv_timeout(left) {
            Ok(Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP | Signal::SIGQUIT) => return,
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => return,
            // No signal thread: just sleep.
            Err(RecvTimeoutError::Disconnected) => return std::thread::sleep(left),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cm_core::engine::CmConfig;

    fn owner(cm: CmConfig) -> Owner {
        Owner {
            pid: 1,
            addr: SocketAddr::from(([127, 0, 50, 1], 4791)),
            local_gid: verbs_core::Gid::from_ipv4([127, 0, 50, 1].into()),
            cm,
            unpublished: 0,
            device_removed: false,
        }
    }

    #[test]
    fn the_linger_is_the_timewait() {
        let linux = owner(CmConfig::default());
        assert_eq!(default_linger(&linux, &[]), Duration::from_millis(512));
        let fast = owner(CmConfig::default().with_fast_timers());
        assert_eq!(default_linger(&fast, &[]), Duration::from_millis(16));
    }
}
