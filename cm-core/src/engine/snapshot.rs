//! Connection snapshots: what the kernel's IB CM knows of one connection — enough for another
//! engine to finish it as `cm_destroy_id` would.
//!
//! On Linux the IB CM lives in the kernel and outlives the process: when a program dies, the
//! kernel closes its rdma_cm file (`ucma_close`) and destroys every id, so each connection
//! sends what its state calls for (cm-spec §3.3 "Destroy": REJ in a handshake, one DREQ when
//! ESTABLISHED, DREP in DREQ_RCVD). A simulated RNIC dies with its process, so `rnic exec`
//! keeps that part outside it: the program's engine publishes a [`ConnSnapshot`] of every
//! connection whose state changed ([`CmEngine::track_changes`], [`CmEngine::take_changed`]),
//! and when the program dies the supervisor [`adopt`](CmEngine::adopt)s each one into an
//! engine of its own and destroys it there.
//!
//! A snapshot is plain data with a fixed little-endian encoding ([`ConnSnapshot::encode`],
//! [`SNAPSHOT_LEN`] bytes) so it can be written where the program's death cannot tear it; its
//! decoder refuses anything malformed (it is read back from memory a crashing program shared).

use super::*;

/// Bytes of an encoded [`ConnSnapshot`].
pub const SNAPSHOT_LEN: usize = 96;

/// Format tag in the first byte of an encoded snapshot: bumped with any change of the layout.
const SNAPSHOT_VERSION: u8 = 1;

/// One connection as the IB CM holds it (the fields of `struct cm_id_private` that destroying
/// it needs). See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnSnapshot {
    /// `enum ib_cm_state`.
    pub state: IbCmState,
    /// Local Comm ID.
    pub local_comm_id: u32,
    /// Remote Comm ID (0 before the peer's first message).
    pub remote_comm_id: u32,
    /// This side's GID.
    pub local_gid: Gid,
    /// The peer's GID: where the connection's MADs go.
    pub remote_gid: Gid,
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// This side's QPN (24 bits).
    pub local_qpn: u32,
    /// The peer's QPN (24 bits): a DREQ carries it.
    pub remote_qpn: u32,
    /// Address-vector local ACK timeout exponent: the TimeWait duration (cm-spec §3.2).
    pub av_timeout: u8,
    /// Retransmission timeout of this id's REQ/REP/DREQ, ms.
    pub timeout_ms: u64,
    /// Retries of this id's REQ/REP/DREQ.
    pub max_cm_retries: u8,
    /// Transaction ID of the REQ (sent or received), which REJ, REP, MRA and RTU reuse.
    pub tid: u64,
    /// Transaction ID of the DREQ received, which the DREP reuses.
    pub dreq_tid: u64,
}

impl ConnSnapshot {
    /// The fixed encoding: version, state, then the fields in declaration order, little-endian;
    /// the rest zero.
    pub fn encode(&self) -> [u8; SNAPSHOT_LEN] {
        let mut b = [0u8; SNAPSHOT_LEN];
        b[0] = SNAPSHOT_VERSION;
        b[1] = self.state as u8;
        b[2] = self.av_timeout;
        b[3] = self.max_cm_retries;
        b[4..8].copy_from_slice(&self.local_comm_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.remote_comm_id.to_le_bytes());
        b[12..28].copy_from_slice(&self.local_gid.0);
        b[28..44].copy_from_slice(&self.remote_gid.0);
        b[44..52].copy_from_slice(&self.remote_ca_guid.to_le_bytes());
        b[52..56].copy_from_slice(&self.local_qpn.to_le_bytes());
        b[56..60].copy_from_slice(&self.remote_qpn.to_le_bytes());
        b[60..68].copy_from_slice(&self.timeout_ms.to_le_bytes());
        b[68..76].copy_from_slice(&self.tid.to_le_bytes());
        b[76..84].copy_from_slice(&self.dreq_tid.to_le_bytes());
        b
    }

    /// Decodes [`encode`](Self::encode)'s output; `None` for anything else (wrong length or
    /// version, an unknown state, a Local Comm ID of 0, a QPN over 24 bits).
    pub fn decode(b: &[u8]) -> Option<ConnSnapshot> {
        let b: &[u8; SNAPSHOT_LEN] = b.try_into().ok()?;
        if b[0] != SNAPSHOT_VERSION {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let gid_at = |i: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[i..i + 16]);
            Gid(a)
        };
        let s = ConnSnapshot {
            state: IbCmState::from_u8(b[1])?,
            av_timeout: b[2].min(31),
            max_cm_retries: b[3],
            local_comm_id: u32_at(4),
            remote_comm_id: u32_at(8),
            local_gid: gid_at(12),
            remote_gid: gid_at(28),
            remote_ca_guid: u64_at(44),
            local_qpn: u32_at(52),
            remote_qpn: u32_at(56),
            timeout_ms: u64_at(60),
            tid: u64_at(68),
            dreq_tid: u64_at(76),
        };
        let ok = s.local_comm_id != 0 && s.local_qpn <= QPN_MASK && s.remote_qpn <= QPN_MASK;
        ok.then_some(s)
    }

    /// True for the states in which destroying the id sends something or still answers the
    /// peer (everything but IDLE, LISTEN and SIDR_REQ_SENT): the ones worth handing over. An
    /// adopted SIDR_REQ_RCVD id answers with SIDR_REP status 2 (reject), as `cm_destroy_id`
    /// does, with service ID 0 (a snapshot does not keep it; the active side matches the
    /// SIDR_REP by its Request ID alone, `cm_sidr_rep_handler`).
    pub fn needs_teardown(&self) -> bool {
        use IbCmState as S;
        !matches!(self.state, S::Idle | S::Listen | S::SidrReqSent)
    }
}

impl IbCmState {
    /// The state numbered `n` in `enum ib_cm_state`.
    pub fn from_u8(n: u8) -> Option<IbCmState> {
        use IbCmState as S;
        Some(match n {
            0 => S::Idle,
            1 => S::Listen,
            2 => S::ReqSent,
            3 => S::ReqRcvd,
            4 => S::MraReqSent,
            5 => S::MraReqRcvd,
            6 => S::RepSent,
            7 => S::RepRcvd,
            8 => S::MraRepSent,
            9 => S::MraRepRcvd,
            10 => S::Established,
            11 => S::DreqSent,
            12 => S::DreqRcvd,
            13 => S::Timewait,
            14 => S::SidrReqSent,
            15 => S::SidrReqRcvd,
            _ => return None,
        })
    }
}

impl CmEngine {
    /// Starts (or stops) noting which ids changed, for [`take_changed`](Self::take_changed).
    /// Off by default: the notes are only bounded while somebody takes them.
    pub fn track_changes(&mut self, on: bool) {
        self.changed = on.then(BTreeSet::new);
    }

    /// The ids whose connection may have changed since the last call (with change tracking
    /// on), each with its snapshot now — `None` for an id that is gone.
    pub fn take_changed(&mut self) -> Vec<(IbCmId, Option<ConnSnapshot>)> {
        let Some(changed) = self.changed.as_mut() else {
            return Vec::new();
        };
        let ids = std::mem::take(changed);
        ids.into_iter().map(|id| (id, self.snapshot(id))).collect()
    }

    /// Notes that `id` may have changed (with change tracking on).
    pub(super) fn note_changed(&mut self, id: IbCmId) {
        if let Some(c) = self.changed.as_mut() {
            c.insert(id);
        }
    }

    /// A snapshot of `id`'s connection.
    pub fn snapshot(&self, id: IbCmId) -> Option<ConnSnapshot> {
        let c = self.conns.get(&id)?;
        Some(ConnSnapshot {
            state: c.state,
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            local_gid: c.local_gid,
            remote_gid: c.remote_gid,
            remote_ca_guid: c.remote_ca_guid,
            local_qpn: c.local_qpn,
            remote_qpn: c.remote_qpn,
            av_timeout: c.av_timeout,
            timeout_ms: c.timeout_ms,
            max_cm_retries: c.max_cm_retries,
            tid: c.tid,
            dreq_tid: c.dreq_tid,
        })
    }

    /// Takes over a connection another engine held (see the module docs): a new id in the
    /// snapshot's state with its identifiers, found by its Local Comm ID as the original was.
    /// Destroy it ([`destroy_id`](Self::destroy_id)) to send what `cm_destroy_id` sends.
    ///
    /// # Errors
    /// `EEXIST` when this engine already has an id with that Local Comm ID; `EINVAL` for a
    /// state that cannot be taken over (IDLE, LISTEN, SIDR_REQ_SENT).
    pub fn adopt(&mut self, s: &ConnSnapshot) -> Result<IbCmId, Error> {
        if !s.needs_teardown() {
            return Err(wrong_state("adopting a connection", s.state));
        }
        if self.by_local.contains_key(&s.local_comm_id) {
            return Err(Error::new(
                Errno::EEXIST,
                "an id with that Local Comm ID exists",
            ));
        }
        let id = self.create_id();
        let generated = self.local_comm_id(id);
        if let Some(c) = generated {
            self.by_local.remove(&c);
        }
        self.by_local.insert(s.local_comm_id, id);
        let Some(c) = conn_mut!(self, id) else {
            return Err(no_id(id));
        };
        c.local_comm_id = s.local_comm_id;
        c.remote_comm_id = s.remote_comm_id;
        c.local_gid = s.local_gid;
        c.remote_ca_guid = s.remote_ca_guid;
        c.local_qpn = s.local_qpn;
        c.remote_qpn = s.remote_qpn;
        c.av_timeout = s.av_timeout.min(31);
        c.timeout_ms = s.timeout_ms;
        c.max_cm_retries = s.max_cm_retries;
        c.tid = s.tid;
        c.dreq_tid = s.dreq_tid;
        c.set_state(id, s.state);
        self.set_peer(id, s.remote_gid);
        self.note_changed(id);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(state: IbCmState) -> ConnSnapshot {
        ConnSnapshot {
            state,
            local_comm_id: 0x1234_5678,
            remote_comm_id: 0x9abc_def0,
            local_gid: Gid::from_ipv4([127, 0, 0, 2].into()),
            remote_gid: Gid::from_ipv4([127, 0, 0, 1].into()),
            remote_ca_guid: 0x0002_c903_0000_0042,
            local_qpn: 0x11,
            remote_qpn: 0x22,
            av_timeout: 17,
            timeout_ms: 4608,
            max_cm_retries: 15,
            tid: 0xdead_beef_0000_0001,
            dreq_tid: 7,
        }
    }

    #[test]
    fn a_snapshot_decodes_to_itself_and_junk_to_nothing() {
        let s = sample(IbCmState::Established);
        assert_eq!(ConnSnapshot::decode(&s.encode()), Some(s));
        let mut bad = s.encode();
        bad[0] = 0;
        assert_eq!(ConnSnapshot::decode(&bad), None, "version");
        let mut bad = s.encode();
        bad[1] = 16;
        assert_eq!(ConnSnapshot::decode(&bad), None, "state");
        assert_eq!(ConnSnapshot::decode(&s.encode()[..95]), None, "length");
        let zero = ConnSnapshot {
            local_comm_id: 0,
            ..s
        };
        assert_eq!(ConnSnapshot::decode(&zero.encode()), None, "comm ID 0");
    }

    fn decoded(mad: &[u8]) -> CmMessage {
        match wire::decode(mad) {
            Ok((_, m)) => m,
            Err(e) => panic!("undecodable MAD: {e}"),
        }
    }

    #[test]
    fn an_adopted_established_connection_sends_one_dreq_when_destroyed() {
        let mut e = CmEngine::new(CmConfig::default());
        let s = sample(IbCmState::Established);
        let id = e.adopt(&s).unwrap_or_else(|e| panic!("{e}"));
        e.destroy_id(SimTime::ZERO, id);
        let (dst, mad) = e.poll_transmit().unwrap_or_else(|| panic!("no MAD"));
        assert_eq!(dst, s.remote_gid);
        match decoded(&mad) {
            CmMessage::Dreq(d) => {
                assert_eq!(d.local_comm_id, s.local_comm_id);
                assert_eq!(d.remote_comm_id, s.remote_comm_id);
                assert_eq!(d.remote_qpn_eecn, s.remote_qpn);
            }
            m => panic!("expected a DREQ, got {m:?}"),
        }
        assert!(e.poll_transmit().is_none(), "one DREQ, no retries");
        assert_eq!(e.poll_timeout(), None, "nothing armed after destroy");
    }

    #[test]
    fn an_adopted_handshake_is_rejected_and_a_dreq_rcvd_answered() {
        let mut e = CmEngine::new(CmConfig::default());
        let id = e
            .adopt(&sample(IbCmState::RepSent))
            .unwrap_or_else(|e| panic!("{e}"));
        e.destroy_id(SimTime::ZERO, id);
        let (_, mad) = e.poll_transmit().unwrap_or_else(|| panic!("no MAD"));
        match decoded(&mad) {
            CmMessage::Rej(r) => assert_eq!(r.reason, u16::from(RejectReason::ConsumerDefined)),
            m => panic!("expected a REJ, got {m:?}"),
        }
        let s = ConnSnapshot {
            local_comm_id: 99,
            ..sample(IbCmState::DreqRcvd)
        };
        let id = e.adopt(&s).unwrap_or_else(|e| panic!("{e}"));
        e.destroy_id(SimTime::ZERO, id);
        let (_, mad) = e.poll_transmit().unwrap_or_else(|| panic!("no MAD"));
        assert!(matches!(decoded(&mad), CmMessage::Drep(_)));
    }

    #[test]
    fn adoption_refuses_a_taken_comm_id_and_idle_states() {
        let mut e = CmEngine::new(CmConfig::default());
        let s = sample(IbCmState::Established);
        assert!(e.adopt(&s).is_ok());
        assert_eq!(
            e.adopt(&s).map_err(|e| e.errno),
            Err(Errno::EEXIST),
            "same Local Comm ID"
        );
        assert_eq!(
            e.adopt(&sample(IbCmState::Listen)).map_err(|e| e.errno),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn changes_are_noted_only_when_tracked_and_a_destroyed_id_reads_as_gone() {
        let mut e = CmEngine::new(CmConfig::default());
        let id = e.create_id();
        assert!(e.take_changed().is_empty(), "not tracked");
        e.track_changes(true);
        let _ = e.listen(id, 42, 8);
        let changed = e.take_changed();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].0, id);
        assert_eq!(changed[0].1.map(|s| s.state), Some(IbCmState::Listen));
        assert!(e.take_changed().is_empty(), "taken");
        e.destroy_id(SimTime::ZERO, id);
        assert_eq!(e.take_changed(), vec![(id, None)]);
    }
}
