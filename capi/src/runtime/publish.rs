//! The RNIC under `rnic exec`: the socket the supervisor bound and the state file where this
//! process publishes its connections, so that the supervisor can finish them as the kernel's CM
//! would when the process dies ([`crate::state_file`], docs/capi.md "Process death").
//!
//! `rnic exec` sets `RNIC_SUPERVISOR=<its pid>:<socket fd>:<state file fd>` and starts the
//! program, both descriptors inherited. The runtime checks that the socket is a UDP socket bound
//! to an address this configuration accepts (`RNIC_ADDR`, else a 127.0.0.x, port 4791) and that
//! the state file is the supervisor's, then claims the RNIC ([`StateFile::claim`]): the first
//! process of the program's tree to start its runtime owns it — the program, or a process it
//! forked or started (a forking server such as qperf, a shell running the RDMA program) — one
//! at a time, as one process at a time could bind the address; the claim ends with the owner's
//! life. Another process that starts while the RNIC is owned runs stand-alone, as without `rnic
//! exec`. The owner marks the socket close-on-exec (a program it starts must not hold the RNIC's
//! socket) and, when it is `rnic exec`'s own child, asks to be killed if the supervisor dies
//! (`PR_SET_PDEATHSIG`: the RNIC's kernel side is gone, as on a host that lost power).
//!
//! Connections left in the file by an earlier owner that died (a forked child killed while its
//! parent, rnic exec's child, lives on) stay: the supervisor finishes them when its child dies.
//! A new owner publishes into the free slots.
//!
//! Publishing: the CM notes every connection whose state changes
//! (`RdmaCm::track_conn_changes`); after each step of the node the changed ones are written to
//! their slots ([`Node::publish`]). A step that changed no connection — the whole data path —
//! costs one look at an empty set.

use super::Node;
use crate::config::{Config, ROCE_PORT};
use crate::state_file::{Owner, Slot, StateFile};
use cm_core::engine::{ConnSnapshot, IbCmId};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, IntoRawFd, OwnedFd, RawFd};
use verbs_core::Gid;

/// The variable `rnic exec` sets: `<supervisor pid>:<socket fd>:<state file fd>`.
pub const SUPERVISOR_ENV: &str = "RNIC_SUPERVISOR";

/// Takes ownership of an inherited descriptor by number (the only `unsafe` step; it lives in
/// the `ffi` module): `None` when the number is not an open descriptor.
pub type FdTaker = fn(RawFd) -> Option<OwnedFd>;

/// Parses [`SUPERVISOR_ENV`]'s value.
pub fn parse_supervisor(v: &str) -> Option<(u32, RawFd, RawFd)> {
    let mut it = v.trim().split(':');
    let pid = it.next()?.parse().ok()?;
    let socket = it.next()?.parse().ok()?;
    let state = it.next()?.parse().ok()?;
    (it.next().is_none() && socket >= 0 && state >= 0).then_some((pid, socket, state))
}

/// The socket and state file the supervisor gave this process, if it is the supervisor's
/// child and they are what they should be (see the module docs); `None` otherwise (a warning
/// says why when the variable is set but unusable).
pub fn inherited(config: &Config, take_fd: FdTaker) -> Option<(UdpSocket, StateFile)> {
    let v = std::env::var(SUPERVISOR_ENV).ok()?;
    let Some((pid, socket_fd, state_fd)) = parse_supervisor(&v) else {
        tracing::warn!("{SUPERVISOR_ENV}={v:?} is not PID:FD:FD; running stand-alone");
        return None;
    };
    let (Some(socket), Some(state)) = (take_fd(socket_fd), take_fd(state_fd)) else {
        tracing::warn!("{SUPERVISOR_ENV}={v}: descriptors not open; running stand-alone");
        return None;
    };
    match check(config, &socket, &state, pid) {
        Ok((addr, file)) => {
            // The state file is used through `file`, a close-on-exec duplicate. (Closing a
            // descriptor of the file drops this process's record locks: before the claim.)
            drop(state);
            if let Err(holder) = file.claim() {
                let who = holder.map_or("another process".into(), |p| format!("process {p}"));
                tracing::warn!(
                    "{SUPERVISOR_ENV}: rnic exec's RNIC ({addr}) is owned by {who}; running \
                     stand-alone"
                );
                let _ = socket.into_raw_fd();
                return None;
            }
            let socket = UdpSocket::from(socket);
            if let Err(e) = close_on_exec(&socket) {
                tracing::warn!("{SUPERVISOR_ENV}: cannot set FD_CLOEXEC: {e}");
            }
            if nix::unistd::getppid().as_raw() as u32 == pid {
                // rnic exec's own child: dies with it (the RNIC's kernel side is gone).
                if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL) {
                    tracing::warn!("{SUPERVISOR_ENV}: PR_SET_PDEATHSIG: {e}");
                }
                if nix::unistd::getppid().as_raw() as u32 != pid {
                    // The supervisor died before PR_SET_PDEATHSIG took effect.
                    eprintln!("librnic: rnic exec (pid {pid}) is gone, and the RNIC with it");
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                }
            }
            tracing::debug!(%addr, supervisor = pid, "RNIC socket from rnic exec");
            Some((socket, file))
        }
        Err(why) => {
            tracing::warn!("{SUPERVISOR_ENV}={v}: {why}; running stand-alone");
            // Not ours after all: leave the descriptors open, as they were.
            let _ = socket.into_raw_fd();
            let _ = state.into_raw_fd();
            None
        }
    }
}

/// Checks the socket and the state file (opened through a duplicate of `state`).
fn check(
    config: &Config,
    socket: &OwnedFd,
    state: &OwnedFd,
    pid: u32,
) -> Result<(SocketAddr, StateFile), String> {
    use nix::sys::socket::{getsockopt, sockopt, SockType};
    match getsockopt(socket, sockopt::SockType) {
        Ok(SockType::Datagram) => {}
        Ok(t) => return Err(format!("socket of type {t:?}, not UDP")),
        Err(e) => return Err(format!("not a socket ({e})")),
    }
    // A duplicate gives std's view of the address; it is closed again at once.
    let addr = socket
        .try_clone()
        .map(UdpSocket::from)
        .and_then(|s| s.local_addr())
        .map_err(|e| format!("socket without an IP address ({e})"))?;
    if addr.port() != ROCE_PORT || !config.candidate_addrs().contains(&addr.ip()) {
        return Err(format!(
            "socket bound to {addr}, not to a RoCEv2 address this RNIC_ADDR allows"
        ));
    }
    let dup = state.try_clone().map_err(|e| format!("state file: {e}"))?;
    let file = StateFile::open(std::fs::File::from(dup))?;
    if file.geometry().supervisor_pid != pid {
        return Err(format!(
            "state file of supervisor {}, not {pid}",
            file.geometry().supervisor_pid
        ));
    }
    Ok((addr, file))
}

fn close_on_exec(fd: &impl AsFd) -> nix::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map(drop)
}

/// Writes the connections of this process's CM to the state file (see the module docs).
/// Bounded: at most the file's slot count; a connection that finds no free slot is counted in
/// the owner record ([`Owner::unpublished`]).
#[derive(Debug)]
pub struct Publisher {
    file: StateFile,
    owner: Owner,
    /// The slot of each published connection.
    slots: BTreeMap<IbCmId, u32>,
    /// Freed slots, reused first.
    free: Vec<u32>,
    /// Slots never used start here.
    next: u32,
    /// Failed writes (logged once).
    write_errors: u64,
}

impl Publisher {
    /// A publisher into `file`, which it tells who owns the RNIC now.
    ///
    /// # Errors
    /// What `pwrite` returns.
    pub fn new(file: StateFile, owner: Owner) -> std::io::Result<Publisher> {
        // Slots an earlier owner left (it died) stay theirs: the supervisor finishes them.
        let left = file.read_slots()?;
        let end = left.indices.last().map_or(0, |i| i + 1);
        let taken: std::collections::BTreeSet<u32> = left.indices.iter().copied().collect();
        if !taken.is_empty() {
            tracing::info!(
                connections = taken.len(),
                "connections an earlier owner of rnic exec's RNIC left, for rnic exec to finish"
            );
        }
        file.write_owner(&owner)?;
        Ok(Publisher {
            file,
            owner,
            slots: BTreeMap::new(),
            free: (0..end).rev().filter(|i| !taken.contains(i)).collect(),
            next: end,
            write_errors: 0,
        })
    }

    /// The state file (for other records, e.g. a report).
    pub fn file(&self) -> &StateFile {
        &self.file
    }

    /// Connections published now.
    pub fn published(&self) -> usize {
        self.slots.len()
    }

    /// Records that the RNIC was removed: the supervisor then sends nothing for it (a removed
    /// device cannot).
    pub fn device_removed(&mut self) {
        if !self.owner.device_removed {
            self.owner.device_removed = true;
            let r = self.file.write_owner(&self.owner);
            self.note(r);
        }
    }

    /// Writes the changed connections: one that a teardown would send for
    /// ([`ConnSnapshot::needs_teardown`]) to its slot, one that is gone or idle frees its slot.
    /// `route` is where a GID's datagrams go.
    pub fn publish(
        &mut self,
        changes: Vec<(IbCmId, Option<ConnSnapshot>)>,
        route: impl Fn(Gid) -> SocketAddr,
    ) {
        for (id, snap) in changes {
            match snap.filter(ConnSnapshot::needs_teardown) {
                Some(conn) => {
                    let Some(index) = self.slot_for(id) else {
                        continue;
                    };
                    let slot = Slot {
                        conn,
                        peer: Some(route(conn.remote_gid)),
                    };
                    let r = self.file.write_slot(index, Some(&slot));
                    self.note(r);
                }
                None => {
                    if let Some(index) = self.slots.remove(&id) {
                        let r = self.file.write_slot(index, None);
                        self.note(r);
                        self.free.push(index);
                    }
                }
            }
        }
    }

    fn slot_for(&mut self, id: IbCmId) -> Option<u32> {
        if let Some(&i) = self.slots.get(&id) {
            return Some(i);
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None if self.next < self.file.geometry().slot_count => {
                self.next += 1;
                self.next - 1
            }
            None => {
                self.owner.unpublished += 1;
                if self.owner.unpublished == 1 {
                    tracing::warn!(
                        "rnic exec: all {} state file slots in use; a connection is not \
                         published (the supervisor cannot finish it if this process dies)",
                        self.file.geometry().slot_count
                    );
                }
                let r = self.file.write_owner(&self.owner);
                self.note(r);
                return None;
            }
        };
        self.slots.insert(id, i);
        Some(i)
    }

    fn note(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            self.write_errors += 1;
            if self.write_errors == 1 {
                tracing::warn!("rnic exec: cannot write the state file: {e}");
            }
        }
    }
}

impl Node {
    /// Publishes the connections that changed in this step, if the process runs under
    /// `rnic exec` (see the module docs).
    pub(super) fn publish(&mut self) {
        if let Some(p) = self.publisher.as_mut() {
            // A silent RNIC (a `silence:` fault, a host without power) sends nothing after the
            // death either.
            if self.cm.cma().device_removed() || self.faults.silent() {
                p.device_removed();
            }
            let changes = self.cm.take_conn_changes();
            if !changes.is_empty() {
                let nic = &self.nic;
                p.publish(changes, |gid| nic.peer_addr(gid));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_is_pid_and_two_descriptors() {
        assert_eq!(parse_supervisor("12:3:4"), Some((12, 3, 4)));
        assert_eq!(parse_supervisor(" 12:3:4\n"), Some((12, 3, 4)));
        for bad in ["", "12:3", "12:3:4:5", "x:3:4", "12:-1:4", "12:3:"] {
            assert_eq!(parse_supervisor(bad), None, "{bad:?}");
        }
    }
}
