//! Why [`crate::HwDevice::open`] failed, with what to do about it.

use std::net::IpAddr;
use verbs_core::Errno;

/// The soft-RoCE hint: how to get an RDMA device on any Linux host with an Ethernet netdev.
const RXE_HINT: &str = "create a soft-RoCE one with `rdma link add rxe0 type rxe netdev eth0` \
                        (iproute2's `rdma`, kernel module rdma_rxe, replace eth0 by the netdev)";

/// A failure of [`crate::HwDevice::open`]. Each message names the case and how to fix it;
/// [`HwError::errno`] gives the errno a C program would have seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HwError {
    /// The crate was built without its `hw` feature, so it has no libibverbs backend.
    #[error(
        "this build has no hardware backend (the `hw` feature of rnic-hw) and cannot use an \
         RDMA NIC: rebuild with `--features hw`, e.g. `cargo run --release --features hw \
         --bin rnic`"
    )]
    NotBuilt,
    /// `libibverbs.so.1` could not be loaded (`dlopen` failed: not installed, not on the
    /// library path, not a shared object), or it lacks one of the functions the backend calls.
    #[error(
        "libibverbs.so.1 could not be loaded (install rdma-core's libibverbs1, e.g. \
         `apt-get install libibverbs1 ibverbs-providers`, or put its directory on \
         LD_LIBRARY_PATH)"
    )]
    NoLibrary,
    /// libibverbs loaded but lists no device (`ibv_get_device_list` gave none, or failed with
    /// `ENOSYS` because the kernel has no RDMA support loaded).
    #[error("no RDMA device found; {RXE_HINT}")]
    NoDevice,
    /// No device has the name asked for.
    #[error(
        "RDMA device {name:?} not found; available: {} (pick one of them, or ask for no \
         name — `--device any` on rnic's command line — to take the first with an ACTIVE \
         port)",
        available.join(", ")
    )]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The names libibverbs lists.
        available: Vec<String>,
    },
    /// The device (or, with no name given, every device) has no ACTIVE port, or the port asked
    /// for is not ACTIVE.
    #[error(
        "no ACTIVE port on RDMA device {device} (see `ibv_devinfo`; bring its netdev up with \
         `ip link set eth0 up`, or {RXE_HINT})"
    )]
    NoActivePort {
        /// The device name (with no name given: every device's, comma-separated).
        device: String,
    },
    /// The port has no RoCE v2 GID for the address asked for (or, with none, no IPv4-mapped
    /// RoCE v2 GID at all).
    #[error("{}", no_gid_message(device, *port, *ip))]
    NoRoceV2Gid {
        /// The device name.
        device: String,
        /// The port, 1-based.
        port: u8,
        /// The IP address the GID had to stand for, if one was given.
        ip: Option<IpAddr>,
    },
    /// A libibverbs call failed while opening the device.
    #[error("libibverbs: {0}")]
    Verbs(#[from] verbs_core::Error),
}

fn no_gid_message(device: &str, port: u8, ip: Option<IpAddr>) -> String {
    let wanted = match ip {
        Some(ip) => format!("for IP {ip}"),
        None => "with an IPv4-mapped address".to_string(),
    };
    format!(
        "no RoCE v2 GID {wanted} on RDMA device {device} port {port} (see \
         `show_gids` or /sys/class/infiniband/{device}/ports/{port}/gids; give the device's \
         netdev that IPv4 address, or {RXE_HINT})"
    )
}

impl HwError {
    /// The errno this failure stands for: `EOPNOTSUPP` (no backend, no library), `ENODEV` (no
    /// device, unknown name), `EADDRNOTAVAIL` (no ACTIVE port, no usable GID), or the failed
    /// call's own.
    pub fn errno(&self) -> Errno {
        match self {
            HwError::NotBuilt | HwError::NoLibrary => Errno::EOPNOTSUPP,
            HwError::NoDevice | HwError::DeviceNotFound { .. } => Errno::ENODEV,
            HwError::NoActivePort { .. } | HwError::NoRoceV2Gid { .. } => Errno::EADDRNOTAVAIL,
            HwError::Verbs(e) => e.errno,
        }
    }
}

/// The [`verbs_core::Error`] of a libibverbs call `call` that failed with errno `raw`. A number
/// [`Errno`] does not list becomes `EIO`; the message keeps the number and its text.
#[cfg(feature = "hw")]
pub(crate) fn verbs_error(call: &str, raw: i32) -> verbs_core::Error {
    let errno = Errno::from_raw(raw).unwrap_or(Errno::EIO);
    let text = std::io::Error::from_raw_os_error(raw);
    verbs_core::Error::new(errno, format!("{call}: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_to_do() {
        assert!(HwError::NoLibrary.to_string().contains("libibverbs1"));
        assert!(HwError::NoDevice
            .to_string()
            .contains("rdma link add rxe0 type rxe"));
        let nf = HwError::DeviceNotFound {
            name: "nosuch0".into(),
            available: vec!["rnic0".into(), "rxe0".into()],
        };
        assert!(nf.to_string().contains("\"nosuch0\""), "{nf}");
        assert!(nf.to_string().contains("rnic0, rxe0"), "{nf}");
        let ng = HwError::NoRoceV2Gid {
            device: "rxe0".into(),
            port: 1,
            ip: Some("10.0.0.7".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
        };
        assert!(ng.to_string().contains("10.0.0.7"), "{ng}");
        assert!(ng.to_string().contains("rdma link add"), "{ng}");
    }

    #[test]
    fn errnos() {
        assert_eq!(HwError::NotBuilt.errno(), Errno::EOPNOTSUPP);
        assert_eq!(HwError::NoLibrary.errno(), Errno::EOPNOTSUPP);
        assert_eq!(HwError::NoDevice.errno(), Errno::ENODEV);
        let e = verbs_core::Error::new(Errno::EBUSY, "x");
        assert_eq!(HwError::from(e).errno(), Errno::EBUSY);
        let p = HwError::NoActivePort { device: "d".into() };
        assert_eq!(p.errno(), Errno::EADDRNOTAVAIL);
    }
}
