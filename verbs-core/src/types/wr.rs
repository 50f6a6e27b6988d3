//! Work requests: `struct ibv_sge`, `struct ibv_send_wr`, `struct ibv_recv_wr`.

use super::*;

/// `struct ibv_sge` [verbs.h]: a scatter/gather element in a registered MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address (the MR's `addr` plus an offset).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR that holds `[addr, addr + length)`.
    pub lkey: u32,
}

/// The RDMA part of a send WR (`wr.rdma` of `ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaWr {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// Remote key of the target MR.
    pub rkey: u32,
}

/// The atomic part of a send WR (`wr.atomic` of `ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicWr {
    /// Remote virtual address, 8-byte aligned.
    pub remote_addr: u64,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP only).
    pub swap: u64,
    /// Remote key of the target MR.
    pub rkey: u32,
}

/// The UD part of a send WR (`wr.ud` of `ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdWr {
    /// Address vector of the destination.
    pub ah: AhAttr,
    /// Destination QP number (24 bits).
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// `struct ibv_send_wr` [verbs.h, man:ibv_post_send.3]: a send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Local buffers (gathered for SEND/WRITE, scattered into for READ/atomics).
    pub sg_list: Vec<Sge>,
    /// The operation.
    pub opcode: WrOpcode,
    /// Flags (SIGNALED, SOLICITED, INLINE, FENCE).
    pub send_flags: SendFlags,
    /// Immediate data (network order value) for `*_WITH_IMM`.
    pub imm_data: u32,
    /// RDMA WRITE/READ target.
    pub rdma: RdmaWr,
    /// Atomic target and operands.
    pub atomic: AtomicWr,
    /// UD destination.
    pub ud: UdWr,
}

impl SendWr {
    fn base(wr_id: u64, opcode: WrOpcode, sg_list: Vec<Sge>) -> Self {
        SendWr {
            wr_id,
            sg_list,
            opcode,
            send_flags: SendFlags::SIGNALED,
            imm_data: 0,
            rdma: RdmaWr::default(),
            atomic: AtomicWr::default(),
            ud: UdWr::default(),
        }
    }

    /// A signaled SEND of `sg_list`.
    pub fn send(wr_id: u64, sg_list: Vec<Sge>) -> Self {
        SendWr::base(wr_id, WrOpcode::Send, sg_list)
    }

    /// A signaled SEND_WITH_IMM.
    pub fn send_with_imm(wr_id: u64, sg_list: Vec<Sge>, imm_data: u32) -> Self {
        SendWr {
            imm_data,
            ..SendWr::base(wr_id, WrOpcode::SendWithImm, sg_list)
        }
    }

    /// A signaled RDMA WRITE of `sg_list` to `remote_addr`/`rkey`.
    pub fn rdma_write(wr_id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            rdma: RdmaWr { remote_addr, rkey },
            ..SendWr::base(wr_id, WrOpcode::RdmaWrite, sg_list)
        }
    }

    /// A signaled RDMA_WRITE_WITH_IMM.
    pub fn rdma_write_with_imm(
        wr_id: u64,
        sg_list: Vec<Sge>,
        remote_addr: u64,
        rkey: u32,
        imm_data: u32,
    ) -> Self {
        SendWr {
            imm_data,
            rdma: RdmaWr { remote_addr, rkey },
            ..SendWr::base(wr_id, WrOpcode::RdmaWriteWithImm, sg_list)
        }
    }

    /// A signaled RDMA READ of `remote_addr`/`rkey` into `sg_list`.
    pub fn rdma_read(wr_id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            rdma: RdmaWr { remote_addr, rkey },
            ..SendWr::base(wr_id, WrOpcode::RdmaRead, sg_list)
        }
    }

    /// A signaled 8-byte compare-and-swap; the original value lands in `sge` (8 bytes).
    pub fn atomic_cmp_and_swp(
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendWr {
            atomic: AtomicWr {
                remote_addr,
                compare_add: compare,
                swap,
                rkey,
            },
            ..SendWr::base(wr_id, WrOpcode::AtomicCmpAndSwp, vec![sge])
        }
    }

    /// A signaled 8-byte fetch-and-add; the original value lands in `sge` (8 bytes).
    pub fn atomic_fetch_and_add(
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> Self {
        SendWr {
            atomic: AtomicWr {
                remote_addr,
                compare_add: add,
                swap: 0,
                rkey,
            },
            ..SendWr::base(wr_id, WrOpcode::AtomicFetchAndAdd, vec![sge])
        }
    }

    /// This WR with `send_flags` replaced.
    pub fn with_flags(mut self, send_flags: SendFlags) -> Self {
        self.send_flags = send_flags;
        self
    }

    /// Total bytes described by the SGEs.
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// `struct ibv_recv_wr` [verbs.h, man:ibv_post_recv.3]: a receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffers an incoming SEND is scattered into.
    pub sg_list: Vec<Sge>,
}

impl RecvWr {
    /// A receive WR.
    pub fn new(wr_id: u64, sg_list: Vec<Sge>) -> Self {
        RecvWr { wr_id, sg_list }
    }

    /// Total bytes described by the SGEs.
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}
