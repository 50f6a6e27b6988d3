//! UD ids and multicast as librdmacm runs them in the application (rdma-core
//! `librdmacm/cma.c`): the UD QP of `rdma_create_qp` goes straight to RTS with the id's Q_Key
//! (`ucma_init_ud_qp`); a join keeps its flags, the MULTICAST_JOIN attaches the id's QP to the
//! group when it is fetched (`ucma_process_join`), and a leave detaches it
//! (`rdma_leave_multicast`).

use super::*;
use verbs_core::{QpAttr, QpAttrMask, QpState};

/// One multicast join as librdmacm keeps it (`struct cma_multicast`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct UserJoin {
    /// The address given to `rdma_join_multicast`.
    addr: SocketAddr,
    /// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`: the QP is not attached (it only sends).
    send_only: bool,
    /// The group's GID and LID, once its MULTICAST_JOIN was fetched (`mc->mgid`, `mc->mlid`).
    group: Option<(Gid, u16)>,
}

impl RdmaCm {
    /// `ucma_init_ud_qp`: the UD QP `qp` of `id` to INIT with P_Key index 0, port 1 and the
    /// id's Q_Key (`rdma_init_qp_attr`: [`RDMA_UDP_QKEY`](crate::api::RDMA_UDP_QKEY) unless
    /// the id has another), then RTR, then RTS with SQ PSN 0. [`RdmaCm::create_qp`] does it for
    /// a UD id; a C library that made the QP itself calls it.
    ///
    /// # Errors
    /// `EINVAL` for an unknown or non-UD id; `ENXIO` once its device was removed; the device's
    /// error for a transition (e.g. `EINVAL` for an RC QP, which takes no Q_Key).
    pub fn init_ud_qp(
        &mut self,
        dev: &mut dyn CmDevice,
        id: CmIdHandle,
        qp: Qp,
    ) -> Result<(), Error> {
        let qkey = self.cma.ud_qkey(id)?;
        use QpAttrMask as M;
        let init = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qkey,
            ..QpAttr::default()
        };
        dev.modify_qp(
            qp.handle,
            &init,
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
        )?;
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        };
        dev.modify_qp(qp.handle, &rtr, M::STATE)?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0,
            ..QpAttr::default()
        };
        dev.modify_qp(qp.handle, &rts, M::STATE | M::SQ_PSN)
    }

    /// `rdma_init_qp_attr` of a UD id (kernel `cma_ib_init_qp_attr`): the Q_Key its QP takes
    /// (the id's, [`RDMA_UDP_QKEY`](crate::api::RDMA_UDP_QKEY) unless it has another), with
    /// P_Key index 0 and port 1 — whatever state is asked for.
    ///
    /// # Errors
    /// `EINVAL` for an unknown or non-UD id; `ENXIO` once its device was removed.
    pub fn ud_qkey(&mut self, id: CmIdHandle) -> Result<u32, Error> {
        self.cma.ud_qkey(id)
    }

    /// `rdma_join_multicast` / `rdma_join_multicast_ex`: the kernel joins `id` to the group of
    /// `addr` and queues MULTICAST_JOIN ([`Cma::join_multicast`]); when it is fetched, the id's
    /// QP (if it has one by then, and unless `send_only`) is attached to the group.
    ///
    /// # Errors
    /// As [`Cma::join_multicast`]: `EINVAL` for an id not bound to the device or in a state
    /// other than ADDR_BOUND or ADDR_RESOLVED, or for the zero address; `EOPNOTSUPP` for an
    /// IPv6 group; `ENOMEM`; `ENXIO` once the device was removed.
    pub fn join_multicast(
        &mut self,
        id: CmIdHandle,
        addr: SocketAddr,
        send_only: bool,
    ) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        self.user(id)?;
        self.cma.join_multicast(id, addr)?;
        self.user(id)?.joins.push(UserJoin {
            addr,
            send_only,
            group: None,
        });
        Ok(())
    }

    /// `rdma_leave_multicast`: the first join of `addr` goes: the id's QP is detached from the
    /// group (unless the join was send-only or its MULTICAST_JOIN was never fetched; a detach
    /// error is ignored, as librdmacm ignores it), then the kernel leaves it, dropping its
    /// events not fetched yet. librdmacm then waits until every event of the join it returned
    /// is acked: [`RdmaCm::multicast_unacked`] says how many are left (a blocking caller waits
    /// for them after this returns).
    ///
    /// # Errors
    /// `EADDRNOTAVAIL` when the id has no join of `addr`; `EINVAL` for an unknown id.
    pub fn leave_multicast(
        &mut self,
        dev: &mut dyn CmDevice,
        id: CmIdHandle,
        addr: SocketAddr,
    ) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        let qp = self.qp(id);
        let u = self.user(id)?;
        let Some(i) = u.joins.iter().position(|j| j.addr == addr) else {
            return Err(Error::new(
                Errno::EADDRNOTAVAIL,
                "rdma_leave_multicast: not joined to this address",
            ));
        };
        let join = u.joins.remove(i);
        if let (Some(qp), Some((mgid, mlid)), false) = (qp, join.group, join.send_only) {
            let _ = dev.detach_mcast(qp.handle, mgid, mlid);
        }
        self.cma.leave_multicast(id, addr)
    }

    /// Events of `id`'s join of `addr` returned by `get_cm_event` and not acked yet (what
    /// librdmacm's `rdma_leave_multicast` waits on).
    pub fn multicast_unacked(&self, id: CmIdHandle, addr: SocketAddr) -> usize {
        self.ids.get(&id).map_or(0, |u| {
            u.unacked
                .values()
                .filter(|(_, mc)| *mc == Some(addr))
                .count()
        })
    }

    /// `ucma_process_join`, when MULTICAST_JOIN is fetched: the join keeps the group's GID and
    /// LID, and the id's QP is attached to it unless the join is send-only; if the attach
    /// fails, the event becomes MULTICAST_ERROR with status −1 (librdmacm's `rdma_seterrno`).
    pub(super) fn process_join(&mut self, dev: &mut dyn CmDevice, ev: &mut CmEvent) {
        let Some(ud) = ev.ud.as_deref().copied() else {
            return;
        };
        let group = (ud.ah_attr.grh.dgid, ud.ah_attr.dlid);
        let qp = self.qp(ev.id);
        let Some(u) = self.ids.get_mut(&ev.id) else {
            return;
        };
        let Some(join) = u
            .joins
            .iter_mut()
            .find(|j| Some(j.addr) == ev.multicast && j.group.is_none())
        else {
            return;
        };
        join.group = Some(group);
        let send_only = join.send_only;
        if let (Some(qp), false) = (qp, send_only) {
            if let Err(e) = dev.attach_mcast(qp.handle, group.0, group.1) {
                tracing::debug!(error = %e, "MULTICAST_JOIN: attaching the QP failed");
                ev.event = CmEventType::MulticastError;
                ev.status = -1;
            }
        }
    }
}
