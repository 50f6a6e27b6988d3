//! [`Params`]: what a ping client asks for, carried in its REQ's private data, and the magic
//! bytes that also mark the buffer-info message; the rdma_cm connection parameters both sides
//! use ([`conn_param`]).

use super::{DisconnectBy, PingOp};
use cm_core::api::ConnParam;

/// The connection parameters the client sends in the REQ's private data (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// What each iteration does.
    pub op: PingOp,
    /// Iterations.
    pub count: u32,
    /// Bytes per SEND/WRITE/READ.
    pub size: u32,
    /// Who calls `rdma_disconnect` first.
    pub disconnect_by: DisconnectBy,
    /// Run for this long instead of `count` iterations (`--duration`; `count` is then a
    /// bound, and the client's FIN says how many it ran). Millisecond resolution.
    pub duration: Option<std::time::Duration>,
    /// The connection's place in a client's group of connections run at once (`--qps`),
    /// `None` for a single connection.
    pub group: Option<Group>,
}

/// One of the connections a `--qps N` client runs at once (perftest's `-q` with `-R`: one
/// rdma_cm connection per QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// Connections in the group (2 ..= [`MAX_QPS`](super::MAX_QPS)).
    pub qps: u16,
    /// This connection's index, 0 ..= `qps - 1`.
    pub index: u16,
    /// Tells one client's group from another's (the client's socket port and process ID).
    pub nonce: u32,
}

/// The first bytes of a ping REQ's private data and of the buffer-info message.
pub(super) const MAGIC: &[u8; 4] = b"RNPG";

impl Params {
    /// The REQ private data (28 bytes): `RNPG`, version 1, op, disconnect-by, flags (bit 0:
    /// the client runs on a hardware RNIC, `hardware`; bit 1: a duration is given; bit 2: a
    /// group), count (LE u32), size (LE u32), duration in ms (LE u32), the group's QPs,
    /// index (LE u16 each) and nonce (LE u32).
    pub fn encode(&self, hardware: bool) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        let flags = u8::from(hardware)
            | u8::from(self.duration.is_some()) << 1
            | u8::from(self.group.is_some()) << 2;
        v.extend_from_slice(&[1, self.op as u8, self.disconnect_by as u8, flags]);
        v.extend_from_slice(&self.count.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        let ms = self.duration.map_or(0, |d| d.as_millis());
        v.extend_from_slice(&u32::try_from(ms).unwrap_or(u32::MAX).to_le_bytes());
        let g = self.group.unwrap_or(Group {
            qps: 1,
            index: 0,
            nonce: 0,
        });
        v.extend_from_slice(&g.qps.to_le_bytes());
        v.extend_from_slice(&g.index.to_le_bytes());
        v.extend_from_slice(&g.nonce.to_le_bytes());
        v
    }

    /// Parses [`encode`](Self::encode)'s bytes into the parameters and whether the client
    /// runs on hardware; `None` for anything else (not a ping client).
    pub fn decode(b: &[u8]) -> Option<(Params, bool)> {
        if b.len() < 16 || &b[..4] != MAGIC || b[4] != 1 {
            return None;
        }
        let op = PingOp::from_u8(b[5])?;
        let disconnect_by = DisconnectBy::from_u8(b[6])?;
        let count = u32::from_le_bytes(b[8..12].try_into().ok()?);
        let size = u32::from_le_bytes(b[12..16].try_into().ok()?);
        let duration = match b.get(16..20) {
            Some(ms) if b[7] & 2 != 0 => Some(std::time::Duration::from_millis(u64::from(
                u32::from_le_bytes(ms.try_into().ok()?),
            ))),
            _ => None,
        };
        let group = match b.get(20..28) {
            Some(g) if b[7] & 4 != 0 => {
                let qps = u16::from_le_bytes(g[0..2].try_into().ok()?);
                let index = u16::from_le_bytes(g[2..4].try_into().ok()?);
                let nonce = u32::from_le_bytes(g[4..8].try_into().ok()?);
                if !(2..=super::MAX_QPS).contains(&qps) || index >= qps {
                    return None;
                }
                Some(Group { qps, index, nonce })
            }
            _ => None,
        };
        let params = Params {
            op,
            count,
            size,
            disconnect_by,
            duration,
            group,
        };
        (1..=super::MAX_SIZE)
            .contains(&size)
            .then_some((params, b[7] & 1 != 0))
    }
}

/// The connection parameters both sides use: one RDMA READ in flight, retry_cnt 7, RNR retry
/// 7 (infinite).
pub fn conn_param() -> ConnParam {
    ConnParam::rping_defaults()
}
