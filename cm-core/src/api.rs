//! The rdma_cm-shaped API (cm-spec §4): the public path for [`RdmaCm`] and the types an
//! application sees.
//!
//! rdma_cm is two layers, as on Linux (docs/design/ARCHITECTURE.md, "Kernel side and library
//! side of rdma_cm"):
//!
//! * [`crate::cma`] — the kernel side (`cma.c` reached through `ucma.c`): the IB CM engine, the
//!   ids and their `enum rdma_cm_state`, the event channels and queues. It sends MADs through
//!   the device's GSI endpoint and never touches a QP.
//! * [`crate::librdmacm`] — [`RdmaCm`], the library side (rdma-core's `librdmacm/cma.c`): the
//!   ids' QPs and every QP transition (`rdma_create_qp`, `rdma_accept`, `rdma_disconnect`),
//!   the work done when the application fetches an event (`rdma_get_cm_event`: the
//!   CONNECT_RESPONSE → RTR/RTS → RTU → ESTABLISHED step, QP to ERR on REJECTED), and the
//!   acks `rdma_destroy_id` waits for.
//!
//! Ids are named by [`CmIdHandle`], channels by [`EventChannel`]. Every call that can send a
//! MAD, arm a timer or move a QP takes the device (`&mut dyn CmDevice`) and the current time;
//! nothing blocks. Events are read with [`RdmaCm::get_cm_event`] (non-blocking, `EAGAIN` when
//! empty) and acked with [`RdmaCm::ack_cm_event`]. The blocking and async waits are in
//! [`crate::blocking`].

pub use crate::librdmacm::RdmaCm;
pub use crate::shared::{
    CmDevice, CmEvent, CmEventType, CmIdHandle, ConnEventParam, ConnParam, EventChannel,
    RdmaCmState, UdParam, MULTICAST_QPN, RDMA_UDP_QKEY,
};
