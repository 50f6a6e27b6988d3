//! Posting WRs: the S6 data pattern written at the source, and what to check on completion.

use super::config::{SLOTS, SLOT_BYTES};
use super::payload::fill_pattern;
use super::slots::{slot_off, Held, Region};
use super::{Call, End, Op, Pending, Queue, Record, World, WorldError, SRQ_QPN};
use verbs_core::{Device, RecvWr, SendWr};

/// Where one WR's bytes go: its slots and offsets.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// The source (SEND/WRITE: own send region) or receive slot.
    own: Option<Held>,
    /// The destination slot (WRITE: the peer's destination region; READ: own).
    dst: Option<Held>,
}

impl World {
    /// Posts `n` receives of [`SLOT_BYTES`] on `e`'s QP (on a host with an SRQ,
    /// [`HostApp::srq`](super::HostApp): on its SRQ, recorded under [`SRQ_QPN`]); returns
    /// their `wr_id`s.
    pub fn post_recvs(&mut self, e: End, n: usize) -> Vec<u64> {
        self.post(e, Op::Recv, n)
    }

    /// Posts `n` signaled WRs of `op` on `e`'s QP (SEND/WRITE: 8 bytes of `wr_id` + pattern,
    /// 16..=128 bytes; READ: a slot of the peer's READ region). The call and each accepted WR
    /// are recorded; returns the accepted `wr_id`s (a refused post returns fewer). A post the
    /// World cannot give buffer slots returns none: see [`try_post`](Self::try_post).
    pub fn post(&mut self, e: End, op: Op, n: usize) -> Vec<u64> {
        self.try_post(e, op, n).unwrap_or_default()
    }

    /// [`post`](Self::post), saying why the World posted nothing.
    ///
    /// # Errors
    /// [`WorldError::OutOfSlots`] if the WRs would not each get a free buffer slot
    /// ([`WorldConfig::wr_slots`](super::WorldConfig::wr_slots)): nothing is posted or
    /// recorded. (An `End` of an earlier life returns `Ok` with no `wr_id`.)
    pub fn try_post(&mut self, e: End, op: Op, n: usize) -> Result<Vec<u64>, WorldError> {
        self.observe();
        if self.current(e).is_err() {
            return Ok(Vec::new());
        }
        let places = self.take_slots(e, op, n)?;
        let slots = self.slots_per_region();
        let seed = self.data_seed;
        let ids = self.next_wr..self.next_wr + n as u64;
        self.next_wr += n as u64;
        let mr = self.apps[e.host].mr;
        let srq = self.apps[e.host].srq.filter(|_| op == Op::Recv);
        // Where the WRs are recorded as posted: the QP, or the host's SRQ.
        let qpn = if srq.is_some() { SRQ_QPN } else { e.qp.qp_num };
        let peer = self.apps.get(e.peer).copied();
        let peer_epoch = peer.map_or(0, |p| p.epoch);
        let len_of = |id: u64| 16 + (id * 37 % (SLOT_BYTES - 15)) as u32;
        let off = |h: Option<Held>, r: Region| h.map_or(0, |(_, _, _, i)| slot_off(r, i, slots));
        let index = |h: Option<Held>| h.map_or(0, |(_, _, _, i)| i);
        if op == Op::Read {
            // The READ source: the peer's slot holds the pattern of (seed, peer) at the slot's
            // base (filled here, before the READ can reach it, not at boot: cheaper).
            if let (Some(p), Ok(node)) = (peer, self.node_mut(e.peer)) {
                let dev = node.host.nic_mut().device_mut();
                for pl in &places {
                    let i = index(pl.dst);
                    let mut buf = [0u8; SLOT_BYTES as usize];
                    let base = u64::from(i) * SLOT_BYTES;
                    fill_pattern(seed, 1 << 63 | e.peer as u64, base, &mut buf);
                    let _ = dev.mr_write(p.mr.handle, slot_off(Region::ReadSrc, i, slots), &buf);
                }
            }
        }
        let Ok(node) = self.node_mut(e.host) else {
            self.give_back(&places);
            return Ok(Vec::new());
        };
        let nic = node.host.nic_mut();
        let r = match op {
            Op::Recv => {
                let wrs: Vec<RecvWr> = ids
                    .clone()
                    .zip(&places)
                    .map(|(id, pl)| {
                        let at = off(pl.own, Region::Recv);
                        RecvWr::new(id, vec![mr.sge(at, SLOT_BYTES as u32)])
                    })
                    .collect();
                match srq {
                    Some(srq) => nic.device_mut().post_srq_recv(srq, &wrs),
                    None => nic.post_recv(e.qp.handle, &wrs),
                }
            }
            Op::Send | Op::Write => {
                let mut wrs = Vec::with_capacity(n);
                for (id, pl) in ids.clone().zip(&places) {
                    let len = len_of(id);
                    let mut buf = [0u8; SLOT_BYTES as usize];
                    let buf = &mut buf[..len as usize];
                    fill_pattern(seed, id, 0, buf);
                    buf[..8].copy_from_slice(&id.to_le_bytes());
                    let src = off(pl.own, Region::Send);
                    let _ = nic.mr_write(mr.handle, src, buf);
                    let sge = vec![mr.sge(src, len)];
                    if op == Op::Send {
                        wrs.push(SendWr::send(id, sge));
                    } else {
                        let dst = off(pl.dst, Region::Dst);
                        let (addr, rkey) = peer.map_or((0, 0), |p| (p.mr.addr + dst, p.mr.rkey));
                        wrs.push(SendWr::rdma_write(id, sge, addr, rkey));
                    }
                }
                nic.post_send(e.qp.handle, &wrs)
            }
            Op::Read => {
                let wrs: Vec<SendWr> = ids
                    .clone()
                    .zip(&places)
                    .map(|(id, pl)| {
                        let len = len_of(id);
                        let src = slot_off(Region::ReadSrc, index(pl.dst), slots);
                        let (addr, rkey) = peer.map_or((0, 0), |p| (p.mr.addr + src, p.mr.rkey));
                        let dst = off(pl.dst, Region::Dst);
                        SendWr::rdma_read(id, vec![mr.sge(dst, len)], addr, rkey)
                    })
                    .collect();
                nic.post_send(e.qp.handle, &wrs)
            }
        };
        let (accepted, errno) = match &r {
            Ok(()) => (n, 0),
            Err(pe) => (pe.bad_wr.min(n), pe.errno() as i32),
        };
        self.give_back(&places[accepted..]);
        self.record(
            e.host,
            Record::Call {
                call: Call::Post {
                    qpn,
                    op,
                    n: n as u32,
                },
                errno,
            },
        );
        let qp_err = srq.is_none() && self.qp_in_err(e.host, e.qp.qp_num);
        let queue = if op == Op::Recv {
            Queue::Recv
        } else {
            Queue::Send
        };
        for (id, pl) in ids.clone().zip(&places).take(accepted) {
            // Where WR `id` lands (what `check_data` reads) and its length.
            let (off, len) = match op {
                Op::Recv => (off(pl.own, Region::Recv), SLOT_BYTES as u32),
                Op::Send => (0, len_of(id)),
                Op::Write | Op::Read => (off(pl.dst, Region::Dst), len_of(id)),
            };
            self.pending.insert(
                id,
                Pending {
                    op,
                    off,
                    base: u64::from(index(pl.dst)) * SLOT_BYTES,
                    len,
                    peer: e.peer,
                    epoch: e.epoch,
                    peer_epoch,
                    held: [pl.own, pl.dst],
                },
            );
            self.record(
                e.host,
                Record::Posted {
                    qpn,
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
        Ok(ids.take(accepted).collect())
    }

    /// Slots per region of every host's memory region.
    pub(super) fn slots_per_region(&self) -> u32 {
        self.cfg.wr_slots.max(SLOTS as u32)
    }

    /// Takes the slots of `n` WRs of `op` on `e` (all or none).
    fn take_slots(&mut self, e: End, op: Op, n: usize) -> Result<Vec<Place>, WorldError> {
        let own = match op {
            Op::Recv => Some((e.host, Region::Recv)),
            Op::Send | Op::Write => Some((e.host, Region::Send)),
            Op::Read => None,
        };
        let dst = match op {
            Op::Write => Some((e.peer, Region::Dst)),
            Op::Read => Some((e.host, Region::Dst)),
            Op::Send | Op::Recv => None,
        };
        let slots = self.slots_per_region();
        for (h, r) in [own, dst].into_iter().flatten() {
            let free = self.pools.get(h).map_or(usize::MAX, |p| p.free(r));
            if free < n {
                return Err(WorldError::OutOfSlots {
                    host: h,
                    wanted: n,
                    slots,
                });
            }
        }
        let take = |w: &mut World, at: Option<(usize, Region)>| -> Option<Held> {
            let (h, r) = at?;
            let p = w.pools.get_mut(h)?;
            let i = p.take(r)?;
            Some((h, p.epoch, r, i))
        };
        Ok((0..n)
            .map(|_| Place {
                own: take(self, own),
                dst: take(self, dst),
            })
            .collect())
    }

    fn give_back(&mut self, places: &[Place]) {
        for pl in places {
            self.free_slots([pl.own, pl.dst]);
        }
    }

    /// Frees the slots a WR held (those of a host life that is over are gone with it).
    pub(super) fn free_slots(&mut self, held: [Option<Held>; 2]) {
        for (h, epoch, r, i) in held.into_iter().flatten() {
            if let Some(p) = self.pools.get_mut(h).filter(|p| p.epoch == epoch) {
                p.give_back(r, i);
            }
        }
    }
}
