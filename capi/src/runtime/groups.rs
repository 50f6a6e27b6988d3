//! Multicast groups across the processes of one machine: a [`GroupDirectory`] kept in a
//! directory of files, which every librnic process's RNIC reads to know where copies of a
//! multicast datagram go (rnic-sim's `multicast` module sends one to each member's socket).
//!
//! Why files: each process is an RNIC with a UDP socket bound to its own loopback address
//! (127.0.N.x:4791); real IP multicast would need every process to receive on a second socket
//! bound to the group's address with `SO_REUSEADDR` and the loopback interface to carry
//! multicast, which it does not by default (no `MULTICAST` flag on `lo`, and no route for
//! 224.0.0.0/4 in a container without a network). A directory needs nothing but a writable
//! place, works unprivileged, and its entries say exactly which sockets belong to which group.
//!
//! Layout: `DIR/<group GID, 32 hex digits>/<member IP>@<port>`, each entry holding the process
//! ID of the member. `DIR` is `$RNIC_MCAST_DIR`, else `$XDG_RUNTIME_DIR/rnic-multicast`, else
//! `/dev/shm/rnic-multicast-<uid>`, else `<temp dir>/rnic-multicast-<uid>`: one per user, as
//! an RNIC's peers are that user's processes. An entry whose process is gone (a program killed
//! before it left its groups) is removed by the next reader. At most
//! [`MAX_DIRECTORY_ENTRIES`] entries of a group are read.

use rnic_sim::multicast::GroupDirectory;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use verbs_core::Gid;

/// Entries of one group read at most (an upper bound on the work of one send).
pub const MAX_DIRECTORY_ENTRIES: usize = 4096;

/// The directory of groups (see the module docs).
#[derive(Debug)]
pub struct FileGroups {
    dir: PathBuf,
    pid: u32,
    /// The groups this process joined, to leave them when it drops the directory.
    joined: BTreeSet<(Gid, SocketAddr)>,
}

fn hex(g: Gid) -> String {
    g.0.iter().map(|b| format!("{b:02x}")).collect()
}

fn entry_name(member: SocketAddr) -> String {
    format!("{}@{}", member.ip(), member.port())
}

fn parse_entry(name: &str) -> Option<SocketAddr> {
    let (ip, port) = name.rsplit_once('@')?;
    Some(SocketAddr::new(ip.parse().ok()?, port.parse().ok()?))
}

/// Whether process `pid` exists (its `/proc` entry).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

impl FileGroups {
    /// The directory for this process: `$RNIC_MCAST_DIR` or the per-user default (module
    /// docs). Made on first use.
    pub fn from_env() -> FileGroups {
        // The real user's ID: the owner of this process's /proc entry.
        let uid = std::fs::metadata("/proc/self").map_or(0, |m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        });
        let dir = std::env::var_os("RNIC_MCAST_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("XDG_RUNTIME_DIR")
                    .map(PathBuf::from)
                    .filter(|d| d.is_dir())
                    .map(|d| d.join("rnic-multicast"))
            })
            .or_else(|| {
                let shm = Path::new("/dev/shm");
                shm.is_dir()
                    .then(|| shm.join(format!("rnic-multicast-{uid}")))
            })
            .unwrap_or_else(|| std::env::temp_dir().join(format!("rnic-multicast-{uid}")));
        FileGroups::at(dir)
    }

    /// The directory `dir`.
    pub fn at(dir: PathBuf) -> FileGroups {
        FileGroups {
            dir,
            pid: std::process::id(),
            joined: BTreeSet::new(),
        }
    }

    fn group_dir(&self, mgid: Gid) -> PathBuf {
        self.dir.join(hex(mgid))
    }
}

impl GroupDirectory for FileGroups {
    fn join(&mut self, mgid: Gid, member: SocketAddr) {
        let group = self.group_dir(mgid);
        let entry = group.join(entry_name(member));
        let tmp = group.join(format!(".{}.{}", entry_name(member), self.pid));
        // Written aside and renamed: a reader sees the whole entry or none.
        let res = std::fs::create_dir_all(&group)
            .and_then(|()| std::fs::write(&tmp, format!("{}\n", self.pid)))
            .and_then(|()| std::fs::rename(&tmp, &entry));
        match res {
            Ok(()) => {
                self.joined.insert((mgid, member));
                // Tests wait for this line (`RUST_LOG=rnic=info`) before starting a sender.
                tracing::info!(
                    group = %mgid.to_ip(),
                    entry = %entry.display(),
                    "multicast group joined"
                );
            }
            Err(e) => tracing::warn!(
                group = %mgid.to_ip(),
                dir = %group.display(),
                "cannot join the multicast group in the group directory (RNIC_MCAST_DIR): {e}; \
                 other processes will not send to this RNIC"
            ),
        }
    }

    fn leave(&mut self, mgid: Gid, member: SocketAddr) {
        let group = self.group_dir(mgid);
        let _ = std::fs::remove_file(group.join(entry_name(member)));
        let _ = std::fs::remove_dir(&group); // only when empty
        self.joined.remove(&(mgid, member));
    }

    fn members(&mut self, mgid: Gid, out: &mut Vec<SocketAddr>) {
        out.clear();
        let group = self.group_dir(mgid);
        let Ok(entries) = std::fs::read_dir(&group) else {
            return;
        };
        for e in entries.flatten().take(MAX_DIRECTORY_ENTRIES) {
            let name = e.file_name();
            let Some(member) = name.to_str().and_then(parse_entry) else {
                continue;
            };
            let pid = std::fs::read_to_string(e.path())
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            match pid {
                Some(pid) if alive(pid) => out.push(member),
                Some(_) => {
                    // A member that died without leaving.
                    let _ = std::fs::remove_file(e.path());
                }
                None => {}
            }
        }
        out.sort_unstable();
    }
}

impl Drop for FileGroups {
    fn drop(&mut self) {
        for (mgid, member) in std::mem::take(&mut self.joined) {
            self.leave(mgid, member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn members_are_listed_sorted_and_dead_ones_removed() {
        let dir = std::env::temp_dir().join(format!("rnic-groups-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let g = Gid::from_ipv4(Ipv4Addr::new(239, 0, 0, 7));
        let a: SocketAddr = "127.0.90.2:4791".parse().unwrap();
        let b: SocketAddr = "127.0.90.1:4791".parse().unwrap();
        let mut one = FileGroups::at(dir.clone());
        let mut two = FileGroups::at(dir.clone());
        one.join(g, a);
        two.join(g, b);
        let mut out = Vec::new();
        one.members(g, &mut out);
        assert_eq!(out, vec![b, a]);
        // An entry of a process that is gone (pid 0 has no /proc entry) is dropped on sight.
        let ghost: SocketAddr = "127.0.90.3:4791".parse().unwrap();
        std::fs::write(dir.join(hex(g)).join(entry_name(ghost)), "0\n").unwrap();
        one.members(g, &mut out);
        assert_eq!(out, vec![b, a]);
        assert!(!dir.join(hex(g)).join(entry_name(ghost)).exists());
        two.leave(g, b);
        one.members(g, &mut out);
        assert_eq!(out, vec![a]);
        drop(one);
        assert!(
            !dir.join(hex(g)).exists(),
            "the last member took the group with it"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
