//! Connections and their ends, as the World's calls hand them out.

use cm_core::api::CmIdHandle;
use verbs_core::Qp;

/// One end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// Host index.
    pub host: usize,
    /// The host's life the end belongs to.
    pub epoch: u8,
    /// The rdma_cm id.
    pub id: CmIdHandle,
    /// Its QP.
    pub qp: Qp,
    /// The peer host (for RDMA READ/WRITE targets).
    pub peer: usize,
}

/// A connection: the end that called connect and the end that accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// The active end.
    pub active: End,
    /// The passive end.
    pub passive: End,
}
