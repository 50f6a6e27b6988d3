//! [`Replay`]: one seed's run with everything kept — the scenario, the history, the NICs'
//! captures — and what `rnic replay` makes of it: the trace, a Mermaid sequence diagram, a pcap.

use super::{failed_world, report, run, scenario_of, Scenario, SeedReport, US};
use crate::world::{Fault, History, Record};
use rnic_sim::roce::pcap::PcapWriter;
use std::fmt::Write as _;

/// The same run as [`run_seed`](super::run_seed), keeping everything: the scenario, the history and the NICs'
/// captures.
pub fn replay_seed(seed: u64) -> Replay {
    let scenario = scenario_of(seed);
    match run(&scenario, true) {
        Ok(mut w) => {
            let report = report(seed, &scenario, &w);
            let captures = w.captures().to_vec();
            Replay {
                report,
                scenario,
                history: w.take_history(),
                captures,
            }
        }
        Err(e) => Replay {
            report: failed_world(seed, &scenario, &e),
            scenario,
            history: History::default(),
            captures: Vec::new(),
        },
    }
}

/// A seed's run with everything kept (see [`replay_seed`]).
#[derive(Debug, Clone)]
pub struct Replay {
    /// The report, identical to [`run_seed`](super::run_seed)'s.
    pub report: SeedReport,
    /// The scenario that ran.
    pub scenario: Scenario,
    /// The history.
    pub history: History,
    /// Every datagram the hosts sent (time, flow, RoCEv2 UDP payload).
    pub captures: Vec<rnic_sim::nic::Captured>,
}

impl Replay {
    /// Human-readable: a header (seed, faults, hash, verdict), one line per record (time in µs,
    /// host.life), then the violations.
    pub fn trace(&self) -> String {
        let r = &self.report;
        let mut s = format!(
            "seed {} hash {:016x} {}\n{}\n",
            r.seed,
            r.trace_hash,
            if r.passed() { "PASS" } else { "FAIL" },
            self.scenario.describe()
        );
        for e in &self.history.entries {
            let _ = writeln!(s, "{e}");
        }
        for v in &r.violations {
            let _ = writeln!(s, "{v}");
        }
        s
    }

    /// A Mermaid `sequenceDiagram`: one participant per host, CM MADs sent as arrows (dropped
    /// ones crossed), CM events and crashes as notes.
    pub fn mermaid(&self) -> String {
        let mut s = String::from("sequenceDiagram\n");
        for h in 0..self.scenario.hosts.len() {
            let _ = writeln!(s, "    participant H{h} as host {h}");
        }
        if self.scenario.hostile.is_some() {
            let h = self.scenario.hosts.len();
            let _ = writeln!(s, "    participant H{h} as host {h} (hostile)");
        }
        let entries = &self.history.entries;
        for (i, e) in entries.iter().enumerate() {
            let h = e.host;
            match e.rec {
                Record::Wire {
                    tx: true,
                    peer,
                    msg,
                } => {
                    // A drop of this MAD is recorded later at the same time; cross it then.
                    let dropped = entries[i + 1..]
                        .iter()
                        .take_while(|x| x.at == e.at)
                        .any(|x| matches!(x.rec, Record::Fault(Fault::Dropped { msg: m, .. } | Fault::TargetedDrop { msg: m, .. }) if m == msg && x.host == h));
                    let _ = writeln!(
                        s,
                        "    H{h}{}H{peer}: {} {}us",
                        if dropped { "-x" } else { "->>" },
                        msg.name(),
                        e.at.as_nanos() / US
                    );
                }
                Record::Event { event, status, .. } => {
                    let _ = writeln!(s, "    Note over H{h}: {event:?}({status})");
                }
                Record::Fault(Fault::Delayed { msg, by_ns, .. }) => {
                    let name = msg.name();
                    let _ = writeln!(s, "    Note over H{h}: {name} held {}us", by_ns / US);
                }
                Record::Fault(Fault::Crash { .. }) => {
                    let _ = writeln!(s, "    Note over H{h}: CRASH");
                }
                Record::Call {
                    call: crate::world::Call::Disconnect { .. },
                    errno,
                } => {
                    let _ = writeln!(s, "    Note over H{h}: rdma_disconnect = {errno}");
                }
                _ => {}
            }
        }
        s
    }

    /// A pcap file (Ethernet/IPv4/UDP 4791/RoCEv2, readable by tshark) of every datagram sent.
    pub fn pcap(&self) -> Vec<u8> {
        let Ok(mut w) = PcapWriter::new(Vec::new()) else {
            return Vec::new();
        };
        let mut caps: Vec<&rnic_sim::nic::Captured> = self.captures.iter().collect();
        caps.sort_by_key(|c| c.at);
        for c in caps {
            let _ = w.write_datagram(c.at, &c.flow, &c.bytes);
        }
        w.into_inner()
    }
}
