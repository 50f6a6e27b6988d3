//! TEMPORARY STUB of the contract the `world` branch provides; replaced at merge.
#![allow(missing_docs)]
use rnic_sim::rng::Rng;
use std::fmt;

#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: &'static str,
    pub host: usize,
    pub message: String,
}
impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} host {}: {}", self.invariant, self.host, self.message)
    }
}

#[derive(Debug, Clone)]
pub struct SeedReport {
    pub seed: u64,
    pub faults: String,
    pub trace_hash: u64,
    pub violations: Vec<Violation>,
    pub sometimes: Sometimes,
    pub quiescent: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sometimes {
    pub dreqs_crossed: bool,
    pub dreq_retries_exhausted: bool,
    pub drep_lost: bool,
    pub dup_dreq_in_timewait: bool,
    pub wr_posted_after_err: bool,
    pub disconnect_during_setup: bool,
    pub stale_connection_rej: bool,
}
impl Sometimes {
    pub const NAMES: [&'static str; 7] = [
        "dreqs_crossed",
        "dreq_retries_exhausted",
        "drep_lost",
        "dup_dreq_in_timewait",
        "wr_posted_after_err",
        "disconnect_during_setup",
        "stale_connection_rej",
    ];
    pub fn flags(&self) -> [bool; 7] {
        [
            self.dreqs_crossed,
            self.dreq_retries_exhausted,
            self.drep_lost,
            self.dup_dreq_in_timewait,
            self.wr_posted_after_err,
            self.disconnect_during_setup,
            self.stale_connection_rej,
        ]
    }
}

pub fn run_seed(seed: u64) -> SeedReport {
    let mut r = Rng::new(seed);
    let v = r.next_u64();
    SeedReport {
        seed,
        faults: format!("loss={}%", v % 30),
        trace_hash: v,
        violations: if v.is_multiple_of(997) {
            vec![Violation {
                invariant: "S1",
                host: 0,
                message: "stub".into(),
            }]
        } else {
            vec![]
        },
        sometimes: Sometimes {
            dreqs_crossed: v.is_multiple_of(3),
            ..Sometimes::default()
        },
        quiescent: true,
    }
}

pub struct Replay {
    pub report: SeedReport,
}
impl Replay {
    pub fn trace(&self) -> String {
        format!("trace of {}\n", self.report.seed)
    }
    pub fn mermaid(&self) -> String {
        "sequenceDiagram\n".into()
    }
    pub fn pcap(&self) -> Vec<u8> {
        Vec::new()
    }
}
pub fn replay_seed(seed: u64) -> Replay {
    Replay {
        report: run_seed(seed),
    }
}
