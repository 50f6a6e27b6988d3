//! The files a program may look for before it uses an RDMA device: `/dev/infiniband/uverbsN`
//! and `/sys/class/infiniband/<device>` (`--device-files`, docs/capi.md "Device files").
//!
//! librnic.so answers the verbs, but some libraries look at the file system first. UCX 1.13
//! lists a device only if `/dev/infiniband/<dev_name>` is a character device it may read and
//! write (`uct_ib_device_is_accessible`, src/uct/ib/base/ib_md.c: `stat`, `S_ISCHR`,
//! `access(R_OK | W_OK)`), and reads the port's GID type and network device under
//! `/sys/class/infiniband/<device>/ports/1/gid_attrs/`. So `rnic exec` gives its program a
//! mount namespace of its own in which those paths exist, and changes nothing outside it:
//!
//! * the namespace: `unshare(CLONE_NEWNS)` as root; otherwise `CLONE_NEWUSER | CLONE_NEWNS` with
//!   the caller's uid and gid mapped to themselves (the program keeps its ids), which needs
//!   unprivileged user namespaces (`kernel.unprivileged_userns_clone`, and a seccomp profile
//!   that allows `unshare`); every mount made private first, so nothing propagates out;
//! * `/dev` and `/sys/class`: a tmpfs over each, holding every entry of the original bound
//!   back (recursively: `/dev/shm`, `/dev/pts` stay the host's) or, for a symbolic link, copied,
//!   plus the device's entries. In a user namespace no device node can be made (`mknod` needs
//!   `CAP_MKNOD` in the initial namespace), so `uverbs0` is `/dev/null` bound there: a
//!   character device every user may read and write, as the real one is; librnic.so never
//!   opens it (the verbs are its own).
//!
//! The work is done by `rnic exec` itself before it starts the program (a user namespace can
//! only be entered by a single-threaded process, which the supervisor still is then), so the
//! program, its children and the supervisor share the view. Nothing is made when the real file
//! exists (a host with RDMA devices).

use std::fs;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// The uverbs file name librnic.so gives its device (`ibv_device.dev_name`).
pub const UVERBS: &str = "uverbs0";

/// Whether `rnic exec` makes the device files (`--device-files`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceFiles {
    /// Make them when they are missing; if namespaces are not allowed, say so in one line and
    /// run the program without them.
    #[default]
    Auto,
    /// Make them when they are missing, and do not start the program if that fails.
    Require,
    /// Never: the program sees the host's `/dev` and `/sys`.
    Off,
}

/// What describes the device in `/sys/class/infiniband` (librnic.so's values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `ibv_get_device_name` (`RNIC_DEVICE`, default `rnic0`).
    pub name: String,
    /// The RNIC's address: its GID, and the network device that holds it.
    pub addr: Option<IpAddr>,
}

/// What [`make_visible`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The files are visible to the program (in its own mount namespace).
    Made,
    /// `/dev/infiniband/uverbs0` exists already: nothing was changed.
    AlreadyThere,
}

/// Makes `/dev/infiniband/uverbs0` and `/sys/class/infiniband/<device>` visible to this
/// process and the children it starts from now on (see the module docs).
///
/// # Errors
/// The namespace cannot be made (`EPERM`, `EINVAL` from `unshare`; `EPERM` writing the uid
/// map) or a mount fails; the message names the step. A failed step leaves `/dev` and `/sys`
/// as they were (in the new namespace, if it was made).
pub fn make_visible(dev: &Device) -> Result<Outcome, String> {
    if Path::new("/dev/infiniband").join(UVERBS).exists() {
        return Ok(Outcome::AlreadyThere);
    }
    enter_namespace()?;
    let netdev = dev.addr.and_then(netdev_of);
    overlay("/dev", |dev_dir, old| {
        let ib = dev_dir.join("infiniband");
        fs::create_dir(&ib)?;
        let file = ib.join(UVERBS);
        fs::File::create(&file)?;
        bind(&old.join("null"), &file)
    })?;
    overlay("/sys/class", |class, _| {
        write_sysfs(class, dev, netdev.as_deref())
    })?;
    Ok(Outcome::Made)
}

/// A private mount namespace (and a user namespace when not root).
fn enter_namespace() -> Result<(), String> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    if uid.is_root() {
        unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
    } else {
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS).map_err(|e| {
            format!("unshare(CLONE_NEWUSER | CLONE_NEWNS): {e} (unprivileged user namespaces not allowed here?)")
        })?;
        // The kernel wants setgroups denied before an unprivileged gid_map (user_namespaces(7)).
        let maps = [
            ("/proc/self/setgroups", "deny".to_string()),
            ("/proc/self/uid_map", format!("{uid} {uid} 1")),
            ("/proc/self/gid_map", format!("{gid} {gid} 1")),
        ];
        for (file, line) in maps {
            fs::write(file, line).map_err(|e| format!("writing {file}: {e}"))?;
        }
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making the mounts private: {e}"))
}

/// Puts a tmpfs over `dir` holding every entry of the original `dir` (bound back, or copied
/// for a symbolic link), then lets `extra` add to it; `extra` gets the new directory and a
/// path to the original one. Undone if any step fails.
fn overlay(dir: &str, extra: impl FnOnce(&Path, &Path) -> io::Result<()>) -> Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{dir}: {what}: {e}");
    let entries: Vec<fs::DirEntry> = fs::read_dir(dir)
        .and_then(|it| it.collect())
        .map_err(|e| fail("reading it", &e))?;
    // Kept open, the original stays reachable under /proc/self/fd once it is covered.
    let original = fs::File::open(dir).map_err(|e| fail("opening it", &e))?;
    let old = PathBuf::from(format!("/proc/self/fd/{}", original.as_raw_fd()));
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=755"),
    )
    .map_err(|e| fail("mounting a tmpfs over it", &e))?;
    let new = Path::new(dir);
    let filled = entries
        .iter()
        .try_for_each(|e| restore(e, new, &old))
        .and_then(|()| extra(new, &old));
    filled.map_err(|e| {
        let _ = umount2(dir, MntFlags::MNT_DETACH);
        fail("filling the tmpfs over it", &e)
    })
}

/// Puts the original entry `e` back in `new`: a symbolic link copied, anything else bound.
fn restore(e: &fs::DirEntry, new: &Path, old: &Path) -> io::Result<()> {
    let name = e.file_name();
    let (from, to) = (old.join(&name), new.join(&name));
    let kind = e.file_type()?;
    if kind.is_symlink() {
        return std::os::unix::fs::symlink(fs::read_link(&from)?, &to);
    }
    if kind.is_dir() {
        fs::create_dir(&to)?;
    } else {
        fs::File::create(&to)?;
    }
    bind(&from, &to)
}

/// `mount --rbind from to`.
fn bind(from: &Path, to: &Path) -> io::Result<()> {
    mount(
        Some(from),
        to,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(io::Error::from)
}

/// The entries a RoCE device of the kernel has that programs read, with librnic.so's values:
/// `infiniband/<name>/` (node type, port 1's state, link layer, GID 0, its type and network
/// device) and `infiniband_verbs/uverbs0/ibdev` (drivers/infiniband/core/sysfs.c,
/// uverbs_main.c).
fn write_sysfs(class: &Path, dev: &Device, netdev: Option<&str>) -> io::Result<()> {
    let ibdev = class.join("infiniband").join(&dev.name);
    let port = ibdev.join("ports").join("1");
    let mut files: Vec<(PathBuf, String)> = vec![
        (ibdev.join("node_type"), "1: CA".into()),
        (port.join("state"), "4: ACTIVE".into()),
        (port.join("phys_state"), "5: LinkUp".into()),
        (port.join("link_layer"), "Ethernet".into()),
        (port.join("gid_attrs/types/0"), "RoCE v2".into()),
        (
            class.join("infiniband_verbs").join(UVERBS).join("ibdev"),
            dev.name.clone(),
        ),
        (class.join("infiniband_verbs/abi_version"), "6".into()),
    ];
    if let Some(addr) = dev.addr {
        files.push((port.join("gids/0"), gid_text(addr)));
    }
    if let Some(n) = netdev {
        files.push((port.join("gid_attrs/ndevs/0"), n.to_string()));
    }
    for (path, text) in files {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, format!("{text}\n"))?;
    }
    Ok(())
}

/// A GID as sysfs prints it: eight groups of four hex digits (an IPv4 address mapped, as
/// RoCE v2 does: `::ffff:a.b.c.d`).
pub fn gid_text(addr: IpAddr) -> String {
    let v6 = match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    v6.segments()
        .iter()
        .map(|s| format!("{s:04x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The network device that holds `addr` (`getifaddrs(3)`).
fn netdev_of(addr: IpAddr) -> Option<String> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        let a = ifa.address?;
        let ip = a
            .as_sockaddr_in()
            .map(|s| IpAddr::V4(s.ip()))
            .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))?;
        (ip == addr).then_some(ifa.interface_name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gid_reads_as_sysfs_prints_it() {
        assert_eq!(
            gid_text("192.0.2.1".parse().unwrap_or_else(|e| panic!("{e}"))),
            "0000:0000:0000:0000:0000:ffff:c000:0201"
        );
    }
}
