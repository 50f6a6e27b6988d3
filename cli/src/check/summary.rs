//! `rnic check`'s summary: the failing seeds with the commands that rerun them, the fault
//! classes that fired and the code paths the programs reached ("sometimes" counters), as
//! text or JSON.

use super::draw::Side;
use super::run::{verdict, SideResult};
use super::{quote, CheckOptions, Plan};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

/// What the summary says about the setup.
#[derive(Debug, Clone)]
pub struct Info {
    /// This program's path.
    pub rnic: String,
    /// Where the logs are.
    pub dir: PathBuf,
    /// This command line, to make `--rerun` commands from.
    pub rerun_prefix: Vec<String>,
}

/// One run's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    /// Its seed.
    pub seed: u64,
    /// The faults asked for, by side.
    pub faults: Vec<(Side, String)>,
    /// Why it failed (empty: it passed).
    pub reasons: Vec<String>,
    /// The server's end.
    pub server: SideResult,
    /// The client's end.
    pub client: SideResult,
    /// The server's `rnic exec` arguments.
    #[serde(skip)]
    pub server_args: Vec<String>,
    /// The client's.
    #[serde(skip)]
    pub client_args: Vec<String>,
    /// The logs.
    pub logs: [PathBuf; 2],
}

/// Classes of a fault that fired: its name and, for a CM fault, its kind (`drop:REQ`).
fn class(fired: &str) -> String {
    let mut p = fired.split([':', ' ']);
    match (p.next(), p.next()) {
        (Some(a @ ("drop" | "dup" | "delay")), Some(b)) => format!("{a}:{b}"),
        (Some(a), _) => a.to_string(),
        _ => String::new(),
    }
}

impl Outcome {
    /// The outcome of `plan`, judged (`run::verdict`).
    pub fn of(
        plan: &Plan,
        r: Result<(SideResult, SideResult), String>,
        opts: &CheckOptions,
    ) -> Outcome {
        let (server, client, mut reasons) = match r {
            Ok((s, c)) => (s, c, Vec::new()),
            Err(e) => (SideResult::default(), SideResult::default(), vec![e]),
        };
        let faulted = server.fired.iter().chain(&client.fired).any(|f| {
            ["kill:", "remove:", "silence:"]
                .iter()
                .any(|p| f.starts_with(p))
        });
        if reasons.is_empty() {
            reasons.extend(verdict(&plan.server, &server, opts, faulted));
            reasons.extend(verdict(&plan.client, &client, opts, faulted));
        }
        Outcome {
            seed: plan.seed,
            faults: plan.faults.clone(),
            reasons,
            server,
            client,
            server_args: plan.server.args.clone(),
            client_args: plan.client.args.clone(),
            logs: [plan.server.log.clone(), plan.client.log.clone()],
        }
    }
}

/// The summary of every run.
#[derive(Debug)]
pub struct Summary {
    info: Info,
    runs: Vec<Outcome>,
    /// The signal that stopped the campaign, and how many runs it was to have.
    interrupted: Option<(&'static str, u64)>,
}

impl Summary {
    /// Over `runs`.
    pub fn new(info: &Info, runs: Vec<Outcome>) -> Summary {
        Summary {
            info: info.clone(),
            runs,
            interrupted: None,
        }
    }

    /// Marks it partial: `signal` (`SIGINT`, …) stopped a campaign of `planned` runs; the
    /// runs it stopped are not among those counted.
    pub fn interrupted(self, signal: &'static str, planned: u64) -> Summary {
        Summary {
            interrupted: Some((signal, planned)),
            ..self
        }
    }

    /// Runs of the campaign not counted: not started, or stopped by the interrupt.
    fn not_done(&self) -> u64 {
        self.interrupted.map_or(0, |(_, planned)| {
            planned.saturating_sub(self.runs.len() as u64)
        })
    }

    /// Runs that failed.
    pub fn failed(&self) -> usize {
        self.runs.iter().filter(|o| !o.reasons.is_empty()).count()
    }

    fn command(&self, args: &[String]) -> String {
        std::iter::once(quote(&self.info.rnic))
            .chain(args.iter().map(|a| quote(a)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn rerun(&self, seed: u64) -> String {
        let mut a = self.info.rerun_prefix.clone();
        if let Some(first) = a.first_mut() {
            first.clone_from(&self.info.rnic);
        }
        // An earlier --rerun goes: this one replaces it.
        let options = a.iter().position(|w| w == "--").unwrap_or(a.len());
        if let Some(i) = a[..options].iter().position(|w| w == "--rerun") {
            a.drain(i..(i + 2).min(a.len()));
        }
        a.retain(|w| !w.starts_with("--rerun="));
        if let Some(i) = a.iter().position(|w| w == "check") {
            a.insert(i + 1, seed.to_string());
            a.insert(i + 1, "--rerun".into());
        }
        a.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
    }

    /// Runs in which each fault class fired, and in which each count of the reports
    /// (`cm_event.*`, `wc.*`, …) was non-zero on either side.
    fn sometimes(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let (mut fired, mut reached) = (BTreeMap::new(), BTreeMap::new());
        for o in &self.runs {
            let mut f: Vec<String> = o
                .server
                .fired
                .iter()
                .chain(&o.client.fired)
                .map(|s| class(s))
                .collect();
            f.sort();
            f.dedup();
            for c in f {
                *fired.entry(c).or_insert(0) += 1;
            }
            let mut k: Vec<&String> = o
                .server
                .counts
                .iter()
                .chain(&o.client.counts)
                .filter(|(k, v)| **v > 0 && k.contains('.'))
                .map(|(k, _)| k)
                .collect();
            k.sort();
            k.dedup();
            for c in k {
                *reached.entry(c.clone()).or_insert(0) += 1;
            }
        }
        (fired, reached)
    }

    /// The summary as text; `detail`: also where each side's output is (a `--rerun`).
    pub fn text(&self, detail: bool) -> String {
        let mut t = String::new();
        let n = self.runs.len();
        let (first, last) = (
            self.runs.first().map_or(0, |o| o.seed),
            self.runs.last().map_or(0, |o| o.seed),
        );
        let seeds = if n == 0 {
            String::new()
        } else {
            format!(" (seeds {first}…{last})")
        };
        let _ = writeln!(
            t,
            "rnic check: {n} runs{seeds}: {} passed, {} failed",
            n - self.failed(),
            self.failed()
        );
        if let Some((signal, planned)) = self.interrupted {
            let _ = writeln!(
                t,
                "interrupted ({signal}): {} of {planned} runs not done (the runs in progress \
                 were stopped, their programs killed, and are not counted)",
                self.not_done()
            );
        }
        for o in self.runs.iter().filter(|o| !o.reasons.is_empty() || detail) {
            let faults: Vec<String> = o
                .faults
                .iter()
                .map(|(s, f)| {
                    format!(
                        "{} {f}",
                        if *s == Side::Server {
                            "server"
                        } else {
                            "client"
                        }
                    )
                })
                .collect();
            let verdict = if o.reasons.is_empty() {
                "passed".to_string()
            } else {
                o.reasons.join("; ")
            };
            let _ = writeln!(t, "seed {}: {verdict}", o.seed);
            let _ = writeln!(
                t,
                "  faults: {}",
                if faults.is_empty() {
                    "none".into()
                } else {
                    faults.join(", ")
                }
            );
            let fired: Vec<&String> = o.server.fired.iter().chain(&o.client.fired).collect();
            if !fired.is_empty() {
                let _ = writeln!(
                    t,
                    "  fired: {}",
                    fired
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            } else if !faults.is_empty() {
                // A fault at a time after the programs' traffic (or after the deadline), or on
                // an event that never came: what happened in the run is not the fault's doing.
                let _ = writeln!(t, "  fired: none (not before the run ended)");
            }
            let _ = writeln!(t, "  server: {}", self.command(&o.server_args));
            let _ = writeln!(t, "  client: {}", self.command(&o.client_args));
            let _ = writeln!(t, "  rerun:  {}", self.rerun(o.seed));
            let _ = writeln!(
                t,
                "  logs:   {} {}",
                o.logs[0].display(),
                o.logs[1].display()
            );
        }
        let (fired, reached) = self.sometimes();
        let line = |m: &BTreeMap<String, u64>| {
            if m.is_empty() {
                "none".to_string()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}/{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let _ = writeln!(t, "faults fired (runs): {}", line(&fired));
        let _ = writeln!(t, "code paths reached (runs): {}", line(&reached));
        t
    }

    /// The summary as one JSON object.
    pub fn json(&self) -> String {
        let (fired, reached) = self.sometimes();
        let failing: Vec<serde_json::Value> = self
            .runs
            .iter()
            .filter(|o| !o.reasons.is_empty())
            .map(|o| {
                serde_json::json!({
                    "seed": o.seed,
                    "reasons": o.reasons,
                    "faults": o.faults,
                    "server_command": self.command(&o.server_args),
                    "client_command": self.command(&o.client_args),
                    "rerun": self.rerun(o.seed),
                    "server": o.server,
                    "client": o.client,
                })
            })
            .collect();
        serde_json::json!({
            "runs": self.runs.len(),
            "passed": self.runs.len() - self.failed(),
            "failed": self.failed(),
            "failing": failing,
            "faults_fired": fired,
            "code_paths": reached,
            "logs": self.info.dir,
            "interrupted": self.interrupted.map(|(signal, _)| signal),
            "not_done": self.not_done(),
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fired_fault_has_a_class() {
        assert_eq!(class("drop:REQ:1-2 (REQ #1 sent)"), "drop:REQ");
        assert_eq!(class("drop:rc:1s:2s (first: an RC packet sent)"), "drop:rc");
        assert_eq!(class("kill:on:DISCONNECTED"), "kill");
        assert_eq!(
            class("partition:1s:1s (first: a datagram sent)"),
            "partition"
        );
    }

    #[test]
    fn a_failing_seed_says_whether_its_fault_fired() {
        let info = Info {
            rnic: "rnic".into(),
            dir: PathBuf::from("/tmp/x"),
            rerun_prefix: vec!["rnic".into(), "check".into()],
        };
        let run = |seed: u64, fired: &[&str]| Outcome {
            seed,
            faults: vec![(Side::Client, "partition:80ms:30ms".into())],
            reasons: vec!["client: exit 1".into()],
            server: SideResult::default(),
            client: SideResult {
                fired: fired.iter().map(|f| f.to_string()).collect(),
                ..SideResult::default()
            },
            server_args: Vec::new(),
            client_args: Vec::new(),
            logs: [PathBuf::from("s.log"), PathBuf::from("c.log")],
        };
        let fired = "partition:80ms:30ms (first: a datagram sent)";
        let text = Summary::new(&info, vec![run(1, &[]), run(2, &[fired])]).text(false);
        let (one, two) = text.split_once("seed 2:").unwrap_or_default();
        assert!(
            one.contains(
                "seed 1: client: exit 1\n  faults: client partition:80ms:30ms\n  fired: none"
            ),
            "{text}"
        );
        assert!(two.contains(&format!("  fired: {fired}\n")), "{text}");
    }
}
