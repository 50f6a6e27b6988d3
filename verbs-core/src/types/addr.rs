//! Addresses and QP attributes: `union ibv_gid`, `struct ibv_ah_attr`, `struct ibv_qp_cap`, `struct ibv_qp_attr`, the PSN and QPN masks.

use super::*;

/// A 128-bit global identifier (`union ibv_gid`), in network byte order.
///
/// On RoCEv2 over IPv4 the GID is the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID `::ffff:a.b.c.d` of an IPv4 address.
    pub fn from_ipv4(addr: std::net::Ipv4Addr) -> Self {
        Gid(addr.to_ipv6_mapped().octets())
    }

    /// The GID of an IP address (IPv4 addresses are mapped).
    pub fn from_ip(addr: std::net::IpAddr) -> Self {
        match addr {
            std::net::IpAddr::V4(v4) => Gid::from_ipv4(v4),
            std::net::IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for (an IPv4-mapped GID gives the IPv4 address).
    pub fn to_ip(self) -> std::net::IpAddr {
        let v6 = std::net::Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(v6),
        }
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", self)
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::net::Ipv6Addr::from(self.0))
    }
}

/// `struct ibv_global_route` [verbs.h]: the GRH part of an address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Index of the source GID in the local port's GID table.
    pub sgid_index: u8,
    /// Hop limit (IP TTL on RoCEv2).
    pub hop_limit: u8,
    /// Traffic class (IP TOS/DSCP on RoCEv2).
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` [verbs.h]: an address vector. RoCE requires `is_global` with a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// The global route (destination GID etc.).
    pub grh: GlobalRoute,
    /// Destination LID (unused on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// True when `grh` is valid (always on RoCE).
    pub is_global: bool,
    /// Local port number (1-based).
    pub port_num: u8,
}

/// `struct ibv_qp_cap` [verbs.h]: queue sizes of a QP, in work requests and SGEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Maximum outstanding send WRs.
    pub max_send_wr: u32,
    /// Maximum outstanding receive WRs.
    pub max_recv_wr: u32,
    /// Maximum SGEs per send WR.
    pub max_send_sge: u32,
    /// Maximum SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Maximum inline payload in bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr` [verbs.h, man:ibv_modify_qp.3]: QP attributes; the fields a modify
/// reads are chosen by a [`QpAttrMask`].
///
/// Units: `timeout` is the IBTA exponent (4.096 µs × 2^timeout, 0 = infinite); `min_rnr_timer`
/// the IBTA RNR-timer code (0 = 655.36 ms, 1 = 0.01 ms … 31 = 491.52 ms); PSNs are 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state (`IBV_QP_STATE`).
    pub qp_state: QpState,
    /// Assumed current state (`IBV_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU (`IBV_QP_PATH_MTU`).
    pub path_mtu: Mtu,
    /// Q_Key for UD (`IBV_QP_QKEY`).
    pub qkey: u32,
    /// Expected PSN of the next incoming request, 24 bits (`IBV_QP_RQ_PSN`).
    pub rq_psn: u32,
    /// PSN of the next outgoing request, 24 bits (`IBV_QP_SQ_PSN`).
    pub sq_psn: u32,
    /// Remote QP number, 24 bits (`IBV_QP_DEST_QPN`).
    pub dest_qp_num: u32,
    /// What remote peers may do (`IBV_QP_ACCESS_FLAGS`).
    pub qp_access_flags: AccessFlags,
    /// Queue sizes (read-only here; reported by query).
    pub cap: QpCap,
    /// Primary path address vector (`IBV_QP_AV`).
    pub ah_attr: AhAttr,
    /// P_Key index (`IBV_QP_PKEY_INDEX`).
    pub pkey_index: u16,
    /// SQ-drained async event on entering SQD (`IBV_QP_EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
    /// True while the SQ drains in SQD (query only).
    pub sq_draining: bool,
    /// Outstanding RDMA READ/atomic requests this QP may issue (`IBV_QP_MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomic requests this QP accepts (`IBV_QP_MAX_DEST_RD_ATOMIC`).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder advertises (`IBV_QP_MIN_RNR_TIMER`).
    pub min_rnr_timer: u8,
    /// Port number, 1-based (`IBV_QP_PORT`).
    pub port_num: u8,
    /// Local ACK timeout exponent (`IBV_QP_TIMEOUT`).
    pub timeout: u8,
    /// Transport retries, 0–7 (`IBV_QP_RETRY_CNT`).
    pub retry_cnt: u8,
    /// RNR retries, 0–7, 7 = infinite (`IBV_QP_RNR_RETRY`).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::empty(),
            cap: QpCap::default(),
            ah_attr: AhAttr::default(),
            pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

impl QpCap {
    /// Both queues holding `wr` work requests of up to `sge` scatter/gather elements each, and
    /// up to `max_inline_data` bytes of inline data.
    pub const fn uniform(wr: u32, sge: u32, max_inline_data: u32) -> Self {
        QpCap {
            max_send_wr: wr,
            max_recv_wr: wr,
            max_send_sge: sge,
            max_recv_sge: sge,
            max_inline_data,
        }
    }
}

/// Mask of valid PSN bits (PSNs are 24 bits wide).
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// Mask of valid QP-number bits (QPNs are 24 bits wide).
pub const QPN_MASK: u32 = 0x00FF_FFFF;
