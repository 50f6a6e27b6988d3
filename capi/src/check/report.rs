//! The checker's report: what it found, the counts, the faults that fired; as text for stderr
//! and as the JSON of `--check-report` (docs/check.md, "JSON report").

use super::rules::Rule;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One broken rule, as seen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The rule's name ([`Rule::name`]).
    pub rule: &'static str,
    /// What was seen: the call, the objects, the event or `wr_id`.
    pub message: String,
    /// The rule's source ([`Rule::source`]).
    pub source: &'static str,
    /// When, in ms since the checker started (the program's first verbs or rdma_cm call).
    pub at_ms: u64,
    /// The call that broke the rule, when one did (`None` for the rules checked at exit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<&'static str>,
}

impl Finding {
    /// A finding of `rule`.
    pub fn new(rule: Rule, at_ms: u64, call: Option<&'static str>, message: String) -> Finding {
        Finding {
            rule: rule.name(),
            message,
            source: rule.source(),
            at_ms,
            call,
        }
    }
}

/// A fault that fired on the program's RNIC (filled by the fault layer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    /// What was done (e.g. "dropped the 1st DREQ").
    pub description: String,
    /// When, in ms since the checker started.
    pub at_ms: u64,
}

/// The whole report. Its JSON form is the `--check-report` file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The program (`argv[0]`).
    pub program: String,
    /// Its process ID.
    pub pid: u32,
    /// Every finding, in the order seen.
    pub findings: Vec<Finding>,
    /// `calls` (entry points called by the program), `cm_event.<RDMA_CM_EVENT_…>` (events
    /// fetched), `wc.<IBV_WC_…>` (completions polled, by status).
    pub counts: BTreeMap<String, u64>,
    /// Faults that fired, in order.
    pub faults: Vec<Fault>,
    /// Why the report is incomplete (the program died of a signal: the rules checked at exit
    /// were not), if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

impl Report {
    /// The text printed on stderr: a header line, each finding with its source, the counts.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let who = format!("{} (pid {})", self.program, self.pid);
        if self.findings.is_empty() {
            let _ = writeln!(s, "rnic check: no findings in {who}");
        } else {
            let _ = writeln!(s, "rnic check: {} finding(s) in {who}", self.findings.len());
        }
        for f in &self.findings {
            let _ = writeln!(s, "  [{}] at {} ms: {}", f.rule, f.at_ms, f.message);
            let _ = writeln!(s, "      source: {}", f.source);
        }
        for f in &self.faults {
            let _ = writeln!(s, "  fault at {} ms: {}", f.at_ms, f.description);
        }
        if let Some(why) = &self.incomplete {
            let _ = writeln!(s, "  incomplete: {why}");
        }
        let counts: Vec<String> = self
            .counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "  counts: {}", counts.join(", "));
        s
    }

    /// The JSON of `--check-report`.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_string())
    }
}

/// Records that a fault fired on the program's RNIC, `at_ms` after the checker started
/// ([`super::now_ms`]); it appears in the report's `faults`. Does nothing when the checker is
/// off.
pub fn note_fault(description: String, at_ms: u64) {
    super::with_state(|s| s.faults.push(Fault { description, at_ms }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(findings: Vec<Finding>) -> Report {
        Report {
            program: "./prog".into(),
            pid: 7,
            findings,
            counts: BTreeMap::from([("calls".to_string(), 3)]),
            faults: Vec::new(),
            incomplete: None,
        }
    }

    #[test]
    fn the_json_has_the_contract_fields() {
        let r = report(vec![Finding::new(
            Rule::Leak,
            5,
            None,
            "1 QP leaked".into(),
        )]);
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["program"], "./prog");
        assert_eq!(v["pid"], 7);
        assert_eq!(v["findings"][0]["rule"], "leak");
        assert_eq!(v["findings"][0]["at_ms"], 5);
        assert!(v["findings"][0]["source"].is_string());
        assert_eq!(v["counts"]["calls"], 3);
        assert_eq!(v["faults"], serde_json::json!([]));
        assert!(v.get("incomplete").is_none());
    }

    #[test]
    fn no_finding_is_an_empty_array_and_one_line() {
        let r = report(Vec::new());
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["findings"], serde_json::json!([]));
        assert!(r
            .text()
            .starts_with("rnic check: no findings in ./prog (pid 7)\n"));
    }
}
