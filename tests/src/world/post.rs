//! Posting WRs: the S6 data pattern written at the source, and what to check on completion.

use super::config::{DST_OFF, READ_SRC_OFF, RECV_OFF, SEND_OFF, SLOTS, SLOT_BYTES};
use super::payload::fill_pattern;
use super::{Call, End, Op, Pending, Queue, Record, World};
use verbs_core::{Device, RecvWr, SendWr};

impl World {
    /// Posts `n` receives of [`SLOT_BYTES`] on `e`'s QP; returns their `wr_id`s.
    pub fn post_recvs(&mut self, e: End, n: usize) -> Vec<u64> {
        self.post(e, Op::Recv, n)
    }

    /// Posts `n` signaled WRs of `op` on `e`'s QP (SEND/WRITE: 8 bytes of `wr_id` + pattern,
    /// 16..=128 bytes; READ: a slot of the peer's READ region). The call and each accepted WR
    /// are recorded; returns the accepted `wr_id`s (a refused post returns fewer).
    pub fn post(&mut self, e: End, op: Op, n: usize) -> Vec<u64> {
        self.observe();
        if self.current(e).is_err() {
            return Vec::new();
        }
        let seed = self.data_seed;
        let ids = self.next_wr..self.next_wr + n as u64;
        self.next_wr += n as u64;
        let mr = self.apps[e.host].mr;
        let peer = self.apps.get(e.peer).copied();
        let peer_epoch = peer.map_or(0, |p| p.epoch);
        let slot = |id: u64| (id % SLOTS) * SLOT_BYTES;
        let len_of = |id: u64| 16 + (id * 37 % (SLOT_BYTES - 15)) as u32;
        // Where WR `id` lands (what `check_data` reads) and its length.
        let info = |id: u64| match op {
            Op::Recv => (RECV_OFF + slot(id), SLOT_BYTES as u32),
            Op::Send => (0, len_of(id)),
            Op::Write | Op::Read => (DST_OFF + slot(id), len_of(id)),
        };
        if op == Op::Read {
            // The READ source: the peer's slot holds the pattern of (seed, peer) at the slot's
            // offset (filled here, before the READ can reach it, not at boot: cheaper).
            if let (Some(p), Ok(node)) = (peer, self.node_mut(e.peer)) {
                let dev = node.host.nic_mut().device_mut();
                for id in ids.clone() {
                    let mut buf = [0u8; SLOT_BYTES as usize];
                    fill_pattern(seed, 1 << 63 | e.peer as u64, slot(id), &mut buf);
                    let _ = dev.mr_write(p.mr.handle, READ_SRC_OFF + slot(id), &buf);
                }
            }
        }
        let Ok(node) = self.node_mut(e.host) else {
            return Vec::new();
        };
        let nic = node.host.nic_mut();
        let r = match op {
            Op::Recv => {
                let wrs: Vec<RecvWr> = ids
                    .clone()
                    .map(|id| RecvWr::new(id, vec![mr.sge(RECV_OFF + slot(id), SLOT_BYTES as u32)]))
                    .collect();
                nic.post_recv(e.qp.handle, &wrs)
            }
            Op::Send | Op::Write => {
                let mut wrs = Vec::with_capacity(n);
                for id in ids.clone() {
                    let len = len_of(id);
                    let mut buf = [0u8; SLOT_BYTES as usize];
                    let buf = &mut buf[..len as usize];
                    fill_pattern(seed, id, 0, buf);
                    buf[..8].copy_from_slice(&id.to_le_bytes());
                    let _ = nic.mr_write(mr.handle, SEND_OFF + slot(id), buf);
                    let sge = vec![mr.sge(SEND_OFF + slot(id), len)];
                    if op == Op::Send {
                        wrs.push(SendWr::send(id, sge));
                    } else {
                        let (addr, rkey) =
                            peer.map_or((0, 0), |p| (p.mr.addr + DST_OFF + slot(id), p.mr.rkey));
                        wrs.push(SendWr::rdma_write(id, sge, addr, rkey));
                    }
                }
                nic.post_send(e.qp.handle, &wrs)
            }
            Op::Read => {
                let wrs: Vec<SendWr> = ids
                    .clone()
                    .map(|id| {
                        let len = len_of(id);
                        let (addr, rkey) = peer
                            .map_or((0, 0), |p| (p.mr.addr + READ_SRC_OFF + slot(id), p.mr.rkey));
                        SendWr::rdma_read(id, vec![mr.sge(DST_OFF + slot(id), len)], addr, rkey)
                    })
                    .collect();
                nic.post_send(e.qp.handle, &wrs)
            }
        };
        let (accepted, errno) = match &r {
            Ok(()) => (n, 0),
            Err(pe) => (pe.bad_wr.min(n), pe.errno() as i32),
        };
        self.record(
            e.host,
            Record::Call {
                call: Call::Post {
                    qpn: e.qp.qp_num,
                    op,
                    n: n as u32,
                },
                errno,
            },
        );
        let qp_err = self.qp_in_err(e.host, e.qp.qp_num);
        let queue = if op == Op::Recv {
            Queue::Recv
        } else {
            Queue::Send
        };
        for id in ids.clone().take(accepted) {
            let (off, len) = info(id);
            self.pending.insert(
                id,
                Pending {
                    op,
                    off,
                    len,
                    peer: e.peer,
                    epoch: e.epoch,
                    peer_epoch,
                },
            );
            self.record(
                e.host,
                Record::Posted {
                    qpn: e.qp.qp_num,
                    wr_id: id,
                    queue,
                    op,
                    len,
                    qp_err,
                },
            );
        }
        self.refresh_qp_states();
        self.observe();
        ids.take(accepted).collect()
    }
}
