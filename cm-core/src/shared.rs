//! Types the kernel-side rdma_cm ([`crate::cma`]) and the librdmacm side
//! ([`crate::librdmacm`]) exchange, and that applications see: event and id handles, event
//! types and states numbered as Linux numbers them, connection parameters. A leaf module (it
//! names only `verbs-core`), re-exported from [`crate::api`], the public path for all of them.

use std::net::SocketAddr;
use verbs_core::{AhAttr, Device, GsiEndpoint};

/// `RDMA_UDP_QKEY` [rdma_cma.h]: the Q_Key of rdma_cm's UD QPs and multicast groups
/// (`cma_set_qkey`); a UD QP made on an rdma_cm id gets it (`ucma_init_ud_qp`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// The QPN a UD send to a multicast group names (`event->param.ud.qp_num` of
/// `RDMA_CM_EVENT_MULTICAST_JOIN`, IBTA vol. 1 §10.5.2.1).
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// A device the CM can drive: verbs for the QP (used by the librdmacm side only) and the GSI
/// endpoint for the MADs (all the kernel side needs).
pub trait CmDevice: Device + GsiEndpoint {}
impl<T: Device + GsiEndpoint + ?Sized> CmDevice for T {}

/// `enum rdma_cm_state` \[cma_priv\] (cm-spec §4.1), same names and numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // each variant is the Linux name of its value
pub enum RdmaCmState {
    Idle = 0,
    AddrQuery = 1,
    AddrResolved = 2,
    RouteQuery = 3,
    RouteResolved = 4,
    Connect = 5,
    Disconnect = 6,
    AddrBound = 7,
    Listen = 8,
    DeviceRemoval = 9,
    Destroying = 10,
}

/// `enum rdma_cm_event_type` [rdma_cma.h] (cm-spec §4.7), same names and numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // each variant is the librdmacm name of its value
pub enum CmEventType {
    AddrResolved = 0,
    AddrError = 1,
    RouteResolved = 2,
    RouteError = 3,
    ConnectRequest = 4,
    ConnectResponse = 5,
    ConnectError = 6,
    Unreachable = 7,
    Rejected = 8,
    Established = 9,
    Disconnected = 10,
    DeviceRemoval = 11,
    MulticastJoin = 12,
    MulticastError = 13,
    AddrChange = 14,
    TimewaitExit = 15,
    AddrinfoResolved = 16,
    AddrinfoError = 17,
    User = 18,
    Internal = 19,
}

impl RdmaCmState {
    /// The state's name without its `RDMA_CM_` prefix (`enum rdma_cm_state`,
    /// `drivers/infiniband/core/cma_priv.h`), e.g. `"ROUTE_RESOLVED"`, `"DISCONNECT"`.
    pub const fn name(self) -> &'static str {
        use RdmaCmState as S;
        match self {
            S::Idle => "IDLE",
            S::AddrQuery => "ADDR_QUERY",
            S::AddrResolved => "ADDR_RESOLVED",
            S::RouteQuery => "ROUTE_QUERY",
            S::RouteResolved => "ROUTE_RESOLVED",
            S::Connect => "CONNECT",
            S::Disconnect => "DISCONNECT",
            S::AddrBound => "ADDR_BOUND",
            S::Listen => "LISTEN",
            S::DeviceRemoval => "DEVICE_REMOVAL",
            S::Destroying => "DESTROYING",
        }
    }
}

impl CmEventType {
    /// The event's name as the kernel's rdma_cm tracepoints print it (`rdma_show_cm_event`,
    /// `include/trace/misc/rdma.h`): `rdma_event_str()`'s text without its `RDMA_CM_EVENT_`
    /// prefix, e.g. `"ESTABLISHED"`, `"TIMEWAIT_EXIT"`.
    pub const fn name(self) -> &'static str {
        use CmEventType as E;
        match self {
            E::AddrResolved => "ADDR_RESOLVED",
            E::AddrError => "ADDR_ERROR",
            E::RouteResolved => "ROUTE_RESOLVED",
            E::RouteError => "ROUTE_ERROR",
            E::ConnectRequest => "CONNECT_REQUEST",
            E::ConnectResponse => "CONNECT_RESPONSE",
            E::ConnectError => "CONNECT_ERROR",
            E::Unreachable => "UNREACHABLE",
            E::Rejected => "REJECTED",
            E::Established => "ESTABLISHED",
            E::Disconnected => "DISCONNECTED",
            E::DeviceRemoval => "DEVICE_REMOVAL",
            E::MulticastJoin => "MULTICAST_JOIN",
            E::MulticastError => "MULTICAST_ERROR",
            E::AddrChange => "ADDR_CHANGE",
            E::TimewaitExit => "TIMEWAIT_EXIT",
            E::AddrinfoResolved => "ADDRINFO_RESOLVED",
            E::AddrinfoError => "ADDRINFO_ERROR",
            E::User => "USER",
            E::Internal => "INTERNAL",
        }
    }
}

/// An rdma_cm id (`struct rdma_cm_id *`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CmIdHandle(pub u32);

/// An event channel (`struct rdma_event_channel *`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventChannel(pub u32);

/// `struct rdma_conn_param` for `connect` and `accept` [man:rdma_connect.3].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnParam {
    /// User private data: ≤ 56 bytes for connect (after the 36-byte IP-CM header), ≤ 196 for
    /// accept; longer is EINVAL.
    pub private_data: Vec<u8>,
    /// RDMA READ/atomic requests this side accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests this side issues.
    pub initiator_depth: u8,
    /// Transport retry count (clamped to 7).
    pub retry_count: u8,
    /// RNR retry count (clamped to 7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// QPN to advertise when no QP is attached to the id (ignored otherwise).
    pub qp_num: u32,
}

impl ConnParam {
    /// What rdma-core's `rping` passes to `rdma_connect`/`rdma_accept`: one RDMA READ in
    /// flight each way (`responder_resources = initiator_depth = 1`), `retry_count` 7,
    /// `rnr_retry_count` 7 (retry RNR NAKs forever), no private data [rping.c].
    pub fn rping_defaults() -> ConnParam {
        ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }
    }
}

/// The connection parameters an event carries (`event->param.conn`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnEventParam {
    /// Private data: CONNECT_REQUEST 56 bytes (past the IP-CM header), ESTABLISHED/
    /// CONNECT_RESPONSE 196 (the REP's) on the active side, REJECTED 148, DISCONNECTED the
    /// DREQ/DREP's; empty otherwise.
    pub private_data: Vec<u8>,
    /// The peer's view, in this side's perspective.
    pub responder_resources: u8,
    /// The peer's view, in this side's perspective.
    pub initiator_depth: u8,
    /// Retry count from the REQ.
    pub retry_count: u8,
    /// RNR retry count from the REQ/REP.
    pub rnr_retry_count: u8,
    /// SRQ flag.
    pub srq: bool,
    /// The peer's QPN.
    pub qp_num: u32,
}

/// `struct rdma_ud_param` [rdma_cma.h] but its private data (the event's
/// `param.private_data`): what a UD id's ESTABLISHED (from the SIDR_REP) and a
/// MULTICAST_JOIN report, and (zero) a UD id's other events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdParam {
    /// The address vector to reach the peer or the group with (`ibv_create_ah`).
    pub ah_attr: AhAttr,
    /// The peer's UD QPN, or [`MULTICAST_QPN`] for a group.
    pub qp_num: u32,
    /// The Q_Key to send with.
    pub qkey: u32,
}

/// `struct rdma_cm_event`. Must be handed back to
/// [`RdmaCm::ack_cm_event`](crate::api::RdmaCm::ack_cm_event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    /// What happened.
    pub event: CmEventType,
    /// The id (for CONNECT_REQUEST: the new passive id).
    pub id: CmIdHandle,
    /// For CONNECT_REQUEST: the listening id.
    pub listen_id: Option<CmIdHandle>,
    /// 0, −errno (−110 for timeouts) or a positive REJ reason (cm-spec §4.7).
    pub status: i32,
    /// Connection parameters and private data (for a UD id: the private data only, and
    /// `qp_num`).
    pub param: ConnEventParam,
    /// The UD parameters (`param.ud`) of an event of a UD (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`) id
    /// that has them: ESTABLISHED after SIDR, MULTICAST_JOIN; `None` otherwise (zeros in C).
    /// (Boxed: most events have none, and an event is moved around by value.)
    pub ud: Option<Box<UdParam>>,
    /// For MULTICAST_JOIN and MULTICAST_ERROR: the address given to `rdma_join_multicast`
    /// (librdmacm finds its join, and the join's `context`, from it).
    pub multicast: Option<SocketAddr>,
    /// Queue order of the event on its host (the kernel's), the key under which librdmacm
    /// tracks it until it is acked.
    pub(crate) seq: u64,
}
