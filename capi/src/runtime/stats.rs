//! The RNIC's counters as `RNIC_STATS` prints them on stderr: a table of the counters that
//! are not zero, group by group, or one JSON object a line with every counter (serde).

use super::rsocket::RsocketStats;
use super::DropStats;
use cm_core::engine::CmCounters;
use rnic_sim::fabric::udp::UdpStats;
use rnic_sim::nic::NicCounters;
use rnic_sim::peers::RouteCounters;
use rnic_sim::Counters;
use std::fmt::Write;

/// Every counter of one RNIC at one moment.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// The RNIC's socket address (its GID's IP, port 4791).
    pub librnic: String,
    /// When, in seconds since the library started.
    pub t_s: f64,
    /// The UDP socket: datagrams and system calls.
    pub udp: UdpStats,
    /// Datagrams the NIC refused before the device, by reason.
    pub datagrams: NicCounters,
    /// The route table's decisions (which socket speaks for which GID).
    pub routes: RouteCounters,
    /// The device's transport: drops by reason, ACKs, NAKs, retries.
    pub transport: Counters,
    /// The CM's MADs.
    pub cm: CmCounters,
    /// Datagrams the fault layer (`RNIC_DROP_RATE`) dropped.
    pub fault_drops: DropStats,
    /// The rsockets layer.
    pub rsockets: RsocketStats,
}

impl Stats {
    /// One JSON object, one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self)
            .map_or_else(|e| format!("{{\"error\":\"{e}\"}}\n"), |s| s + "\n")
    }

    /// A table: a header line, then one line a counter not zero, its group named on the
    /// group's first line; a group whose counters are all zero is left out.
    pub fn to_table(&self) -> String {
        let mut s = format!("librnic {} at {:.3} s\n", self.librnic, self.t_s);
        let _ = writeln!(s, "  {:<12}{:<28}{:>14}", "group", "counter", "value");
        let groups = [
            ("udp", serde_json::to_value(self.udp)),
            ("datagrams", serde_json::to_value(self.datagrams)),
            ("routes", serde_json::to_value(self.routes)),
            ("transport", serde_json::to_value(self.transport)),
            ("cm", serde_json::to_value(self.cm)),
            ("fault_drops", serde_json::to_value(self.fault_drops)),
            ("rsockets", serde_json::to_value(self.rsockets)),
        ];
        let mut zero = Vec::new();
        for (group, value) in groups {
            let Ok(serde_json::Value::Object(counters)) = value else {
                continue;
            };
            let mut name = group;
            for (counter, v) in &counters {
                if v.as_u64() != Some(0) {
                    // serde_json's Display pads nothing: pad the text.
                    let v = v.to_string();
                    let _ = writeln!(s, "  {name:<12}{counter:<28}{v:>14}");
                    name = "";
                }
            }
            if name == group {
                zero.push(group);
            }
        }
        if !zero.is_empty() {
            let _ = writeln!(s, "  (all 0: {})", zero.join(", "));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> Stats {
        Stats {
            librnic: "127.0.0.9:4791".into(),
            t_s: 1.5,
            udp: UdpStats {
                sent: 3,
                received: 2,
                ..UdpStats::default()
            },
            datagrams: NicCounters::default(),
            routes: RouteCounters::default(),
            transport: Counters::default(),
            cm: CmCounters {
                tx_mads: 1,
                ..CmCounters::default()
            },
            fault_drops: DropStats::default(),
            rsockets: RsocketStats::default(),
        }
    }

    #[test]
    fn the_table_lists_the_counters_not_zero_by_group() {
        let t = stats().to_table();
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            lines[0],
            ["librnic", "127.0.0.9:4791", "at", "1.500", "s"],
            "{t}"
        );
        assert_eq!(lines[1], ["group", "counter", "value"], "{t}");
        assert_eq!(lines[2], ["udp", "received", "2"], "{t}");
        assert_eq!(lines[3], ["sent", "3"], "{t}");
        assert_eq!(lines[4], ["cm", "tx_mads", "1"], "{t}");
        assert!(lines[5].starts_with(&["(all", "0:", "datagrams,"]), "{t}");
        assert_eq!(lines.len(), 6, "{t}");
        // The values line up, right-aligned.
        let ends: Vec<usize> = t.lines().skip(1).take(4).map(str::len).collect();
        assert!(ends.windows(2).all(|w| w[0] == w[1]), "{t}");
        assert!(!t.contains('{'), "no Debug structs: {t}");
    }

    #[test]
    fn json_is_one_line_with_every_counter() {
        let j = stats().to_json();
        assert_eq!(j.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap_or_default();
        assert_eq!(v["librnic"], "127.0.0.9:4791");
        assert_eq!(v["udp"]["sent"], 3);
        assert_eq!(v["cm"]["rx_mads"], 0);
        assert_eq!(v["rsockets"]["refused"], 0);
    }
}
