//! Why a client got no connection, in words that name the cause and the address: no answer
//! (how many REQs went out), rejected (the REJ's reason, and the server's own words), or a
//! busy server (it acknowledged the REQ with an MRA but has not accepted it yet).

use super::*;
use cm_core::wire::RejectReason;

impl<N: PingNic> Session<'_, N> {
    /// `stop` (why the wait for ESTABLISHED ended, with the event that ended it if one did)
    /// restated with its cause, from the CM's counters and the id's IB CM state.
    pub(super) fn no_connection(&self, stop: Stop, ev: Option<&CmEvent>) -> Stop {
        let (peer, id) = (self.peer, self.id);
        let (sent, retries, received, state) = self.h().with_quiet(|ep, _| {
            let cm = ep.inner().host().cm();
            let c = cm.counters();
            (c.tx_mads, c.tx_retransmits, c.rx_mads, cm.ib_cm_state(id))
        });
        let reqs = format!(
            "{sent} REQ{} sent ({retries} retransmission{})",
            plural(sent),
            plural(retries)
        );
        match (ev.map(|e| e.event), stop) {
            (Some(CmEventType::Rejected), _) => {
                let Some(e) = ev else {
                    return Stop::Failed("no event".into());
                };
                Stop::Failed(format!(
                    "rejected by {peer}: REJ reason {} ({}){}",
                    e.status,
                    reject_reason_name(e.status),
                    peer_says(e)
                ))
            }
            (Some(CmEventType::Unreachable), _) if received > 0 => Stop::Failed(format!(
                "server busy: {peer} acknowledged our request (MRA) but did not accept it \
                 before our REQ's retries ran out ({reqs})"
            )),
            (Some(CmEventType::Unreachable), _) => Stop::Failed(format!(
                "no answer from {peer}: {reqs}, none answered (UNREACHABLE, status {}); {}",
                ev.map_or(0, |e| e.status),
                self.why_no_answer()
            )),
            (None, Stop::Timeout(_)) if state == Some(IbCmState::MraReqRcvd) => {
                Stop::Failed(format!(
                    "server busy: {peer} acknowledged our request (MRA) but has not accepted it \
                     within --timeout {:.1} s (it serves one client per IP address at a time)",
                    self.timeout.as_secs_f64()
                ))
            }
            (None, Stop::Timeout(_)) if received == 0 => Stop::Failed(format!(
                "no answer from {peer}: {reqs} in --timeout {:.1} s, nothing came back; {}",
                self.timeout.as_secs_f64(),
                self.why_no_answer()
            )),
            (_, stop) => stop,
        }
    }

    /// The likely cause of a REQ nobody answered. When another UDP socket of this machine is
    /// bound to our IP — another RNIC with our GID, e.g. two clients given one `--bind` — it
    /// is named: a server takes a GID's datagrams from the one socket it connected first and
    /// drops any other port's as foreign (its `nic.foreign_socket`), silently. Else: is the
    /// server running?
    fn why_no_answer(&self) -> String {
        let (peer, local) = (self.peer, self.node.local_addr());
        match other_sockets_on(local) {
            Some(port) => format!(
                "another UDP socket of this machine is bound to our IP {} (port {port}): if it \
                 is an RNIC connected to {peer}, the server takes that IP's (GID's) traffic from \
                 it alone and drops ours (its counter nic.foreign_socket); give each client its \
                 own IP (--bind, RNIC_ADDR)",
                local.ip()
            ),
            None => format!("is `rnic ping --listen {peer}` running?"),
        }
    }
}

/// The port of another process's UDP socket bound to `local`'s IPv4 address (from
/// `/proc/net/udp`; this process's own sockets, e.g. the other QPs of `--qps`, left out), if
/// there is one.
fn other_sockets_on(local: std::net::SocketAddr) -> Option<u16> {
    let std::net::IpAddr::V4(ip) = local.ip() else {
        return None;
    };
    let ours: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            Some(
                l.to_str()?
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    // "sl local_address rem_address st … inode …", local_address as "0100007F:1F90": the
    // address's bytes in memory order printed as a host-order u32, then the port.
    table.lines().skip(1).find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        let (addr, port) = fields.get(1)?.split_once(':')?;
        let addr = u32::from_str_radix(addr, 16).ok()?;
        let port = u16::from_str_radix(port, 16).ok()?;
        let theirs = !ours.iter().any(|i| Some(&i.as_str()) == fields.get(9));
        (std::net::Ipv4Addr::from(addr.to_ne_bytes()) == ip && port != local.port() && theirs)
            .then_some(port)
    })
}

/// The IBTA name of a REJ reason (table 112), as Linux's `ib_cm_rej_reason` spells it
/// without the `IB_CM_REJ_` prefix; `UNKNOWN` for a code it does not define.
pub(super) fn reject_reason_name(status: i32) -> String {
    RejectReason::ALL
        .iter()
        .find(|r| **r as i32 == status)
        .map_or_else(|| "UNKNOWN".into(), |r| upper_snake(&format!("{r:?}")))
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
