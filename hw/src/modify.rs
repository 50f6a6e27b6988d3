//! What the device fills in of an `ibv_modify_qp` that the connection manager cannot know: the
//! port, the source GID index and the path MTU's ceiling ([`verbs_core::Device::modify_qp`] of
//! [`crate::HwDevice`]).

use verbs_abi::ibv_qp_attr;
use verbs_core::{Mtu, QpAttrMask};

/// The local facts of a modify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Local {
    /// The port chosen at open.
    pub(crate) port: u8,
    /// The GID index chosen at open.
    pub(crate) sgid_index: u8,
    /// The port's active MTU now, if it could be queried.
    pub(crate) active_mtu: Option<Mtu>,
}

/// Overrides the CM's values in `c` (the [`verbs_abi::convert::qp_attr_to_c`] of its
/// attributes) with the local facts, for the bits of `mask`:
///
/// * `AV`: `is_global` = 1, `grh.sgid_index` = the GID chosen at open, `port_num` = the port:
///   RoCE requires a GRH, and rdma_cm fills the same from its bound device (librdmacm's
///   `rdma_init_qp_attr`).
/// * `PORT`: `port_num` = the port.
/// * `PATH_MTU`: at most the port's active MTU, as the path record rdma_cm resolves carries
///   `min(path MTU, active MTU)` (a QP with a larger MTU than the netdev's would send frames
///   the link drops).
pub(crate) fn fill_local(c: &mut ibv_qp_attr, mask: QpAttrMask, local: &Local) {
    if mask.contains(QpAttrMask::AV) {
        c.ah_attr.is_global = 1;
        c.ah_attr.grh.sgid_index = local.sgid_index;
        c.ah_attr.port_num = local.port;
    }
    if mask.contains(QpAttrMask::PORT) {
        c.port_num = local.port;
    }
    if let Some(active) = local
        .active_mtu
        .filter(|_| mask.contains(QpAttrMask::PATH_MTU))
    {
        if u32::from(active.raw()) < c.path_mtu {
            c.path_mtu = u32::from(active.raw());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_abi::convert::qp_attr_to_c;
    use verbs_core::{Gid, QpAttr};

    #[test]
    fn modify_fills_in_the_local_port_gid_and_mtu() {
        let mut a = QpAttr {
            path_mtu: Mtu::Mtu4096,
            port_num: 9,
            ..QpAttr::default()
        };
        a.ah_attr.grh.dgid = Gid([7; 16]);
        a.ah_attr.grh.hop_limit = 64;
        let local = Local {
            port: 2,
            sgid_index: 3,
            active_mtu: Some(Mtu::Mtu1024),
        };
        let m = QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::PORT;
        let mut c = qp_attr_to_c(&a);
        fill_local(&mut c, m, &local);
        assert_eq!(c.ah_attr.is_global, 1);
        assert_eq!(c.ah_attr.grh.sgid_index, 3);
        assert_eq!(c.ah_attr.port_num, 2);
        assert_eq!(c.ah_attr.grh.hop_limit, 64);
        assert_eq!(c.port_num, 2);
        assert_eq!(c.path_mtu, 3);
        // Without the bits, the CM's values pass through.
        let mut c = qp_attr_to_c(&a);
        fill_local(&mut c, QpAttrMask::STATE, &local);
        assert_eq!((c.ah_attr.is_global, c.port_num, c.path_mtu), (0, 9, 5));
        // A smaller MTU than the port's stays as it is.
        let small = QpAttr {
            path_mtu: Mtu::Mtu512,
            ..a
        };
        let mut c = qp_attr_to_c(&small);
        fill_local(&mut c, m, &local);
        assert_eq!(c.path_mtu, 2);
    }
}
