//! The ratio table: each [`Row`] gathers an rnic figure and its baseline round by round;
//! [`Row::summary`] takes the medians, the ratio and whether the goal is met
//! ([`RowSummary`], serialisable), and [`render`] lays the summaries out as a Markdown table,
//! followed by every round's figures ([`render_rounds`]).

use super::stats::median;
use serde::Serialize;
use std::fmt::Write as _;

/// What a row's figure must reach.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Goal {
    /// rnic / baseline ≥ the value (higher is better: bandwidth, rate).
    RatioAtLeast(f64),
    /// rnic / baseline ≤ the value (lower is better: latency).
    RatioAtMost(f64),
    /// The rnic figure itself ≥ the value (no baseline).
    AtLeast(f64),
    /// Every round passed with no RC retransmission and no RC timeout (the rounds'
    /// [`Check`]s).
    Clean,
    /// None: the row is shown for reference.
    None,
}

impl Goal {
    /// The goal in words, for the table.
    pub fn describe(&self, unit: &str) -> String {
        match self {
            Goal::RatioAtLeast(x) => format!("≥ {x}×"),
            Goal::RatioAtMost(x) => format!("≤ {x}×"),
            Goal::AtLeast(x) => format!("≥ {x} {unit}"),
            Goal::Clean => "all pass, 0 retransmissions".into(),
            Goal::None => "—".into(),
        }
    }
}

/// What a round of a run that must be clean ([`Goal::Clean`]) ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Both sides' verdicts were PASS.
    pub passed: bool,
    /// RC retransmissions, both sides.
    pub rc_retransmits: u64,
    /// RC retransmission-timer expiries, both sides.
    pub rc_timeouts: u64,
}

/// One line of the table: what is compared, and the figures of every round so far.
#[derive(Debug, Clone)]
pub struct Row {
    /// A short stable name (`write-stream`, …; the JSON's `key`).
    pub key: &'static str,
    /// The rnic measure, in words.
    pub what: String,
    /// The baseline, in words (`None`: the row has none).
    pub baseline_what: Option<String>,
    /// The unit of both figures (`MB/s`, `µs`, …).
    pub unit: &'static str,
    /// Decimals shown.
    pub digits: usize,
    /// The goal.
    pub goal: Goal,
    /// The rnic figure of each round.
    pub rnic: Vec<f64>,
    /// The baseline figure of each round (empty without a baseline).
    pub baseline: Vec<f64>,
    /// The check of each round (for [`Goal::Clean`]).
    pub checks: Vec<Check>,
}

/// A row's result: medians of the rounds, ratio, goal, and every round's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowSummary {
    /// A short stable name.
    pub key: &'static str,
    /// The rnic measure, in words.
    pub measure: String,
    /// The unit of `rnic` and `baseline`.
    pub unit: &'static str,
    /// Decimals shown in the text table.
    #[serde(skip)]
    pub digits: usize,
    /// The median of the rounds' rnic figures.
    pub rnic: f64,
    /// The baseline, in words.
    pub baseline_measure: Option<String>,
    /// The median of the rounds' baseline figures.
    pub baseline: Option<f64>,
    /// `rnic / baseline` (of the medians).
    pub ratio: Option<f64>,
    /// The goal.
    pub goal: Goal,
    /// The goal in words.
    pub goal_text: String,
    /// Whether the goal is met (`None` for [`Goal::None`]).
    pub met: Option<bool>,
    /// Every round's rnic figure.
    pub rnic_rounds: Vec<f64>,
    /// Every round's baseline figure.
    pub baseline_rounds: Vec<f64>,
    /// Every round's check ([`Goal::Clean`] rows).
    pub checks: Vec<Check>,
}

impl Row {
    /// A row without figures yet.
    pub fn new(
        key: &'static str,
        what: impl Into<String>,
        baseline_what: Option<&str>,
        unit: &'static str,
        digits: usize,
        goal: Goal,
    ) -> Row {
        Row {
            key,
            what: what.into(),
            baseline_what: baseline_what.map(str::to_string),
            unit,
            digits,
            goal,
            rnic: Vec::new(),
            baseline: Vec::new(),
            checks: Vec::new(),
        }
    }

    /// Medians, ratio and verdict of the rounds so far.
    pub fn summary(&self) -> RowSummary {
        let rnic = median(&self.rnic);
        let baseline = self.baseline_what.as_ref().map(|_| median(&self.baseline));
        let ratio = baseline.map(|b| rnic / b);
        let clean = !self.checks.is_empty()
            && self
                .checks
                .iter()
                .all(|c| c.passed && c.rc_retransmits == 0 && c.rc_timeouts == 0);
        let met = match self.goal {
            Goal::RatioAtLeast(x) => Some(ratio.is_some_and(|r| r >= x)),
            Goal::RatioAtMost(x) => Some(ratio.is_some_and(|r| r <= x)),
            Goal::AtLeast(x) => Some(rnic >= x),
            Goal::Clean => Some(clean),
            Goal::None => None,
        };
        RowSummary {
            key: self.key,
            measure: self.what.clone(),
            unit: self.unit,
            digits: self.digits,
            rnic,
            baseline_measure: self.baseline_what.clone(),
            baseline,
            ratio,
            goal: self.goal,
            goal_text: self.goal.describe(self.unit),
            met,
            rnic_rounds: self.rnic.clone(),
            baseline_rounds: self.baseline.clone(),
            checks: self.checks.clone(),
        }
    }
}

/// `x` with 3 significant digits (a ratio can be 0.00x).
pub fn ratio_text(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        return format!("{x}");
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0..=2 + a small log
    let digits = (2.0 - x.log10().floor()).max(0.0) as usize;
    format!("{x:.digits$}")
}

/// The checks of a [`Goal::Clean`] row in words: `3/3 passed, 0 retransmissions, 0 timeouts`.
fn checks_text(checks: &[Check]) -> String {
    let passed = checks.iter().filter(|c| c.passed).count();
    let retx: u64 = checks.iter().map(|c| c.rc_retransmits).sum();
    let timeouts: u64 = checks.iter().map(|c| c.rc_timeouts).sum();
    format!(
        "{passed}/{} passed, {retx} retransmissions, {timeouts} timeouts",
        checks.len()
    )
}

/// The ratio table (Markdown) of `rows`: measure, rnic figure, baseline, its figure, ratio
/// (for a [`Goal::Clean`] row: its checks), and — when a row has a goal — goal and met.
pub fn render(rows: &[RowSummary]) -> String {
    let goals = rows.iter().any(|r| r.goal != Goal::None);
    let mut header = vec!["measure", "rnic", "baseline", "baseline figure", "ratio"];
    if goals {
        header.extend(["goal", "met"]);
    }
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let figure = |x: f64| format!("{x:.*} {}", r.digits, r.unit);
        let mut cells = vec![
            r.measure.clone(),
            figure(r.rnic),
            r.baseline_measure.clone().unwrap_or_else(|| "—".into()),
            r.baseline.map_or_else(|| "—".into(), figure),
            match (r.goal, r.ratio) {
                (Goal::Clean, _) => checks_text(&r.checks),
                (_, Some(x)) => ratio_text(x),
                (_, None) => "—".into(),
            },
        ];
        if goals {
            cells.push(r.goal_text.clone());
            cells.push(
                match r.met {
                    Some(true) => "met",
                    Some(false) => "NOT met",
                    None => "—",
                }
                .into(),
            );
        }
        lines.push(cells);
    }
    let mut width = vec![0usize; lines[0].len()];
    for l in &lines {
        for (w, c) in width.iter_mut().zip(l) {
            *w = (*w).max(c.chars().count());
        }
    }
    // Text columns left-aligned, figures right-aligned.
    let left = |c: usize| c == 0 || c == 2 || c >= 5;
    let mut s = String::new();
    for (i, l) in lines.iter().enumerate() {
        let cells: Vec<String> = l
            .iter()
            .enumerate()
            .map(|(c, text)| {
                let pad = " ".repeat(width[c] - text.chars().count());
                if left(c) {
                    format!("{text}{pad}")
                } else {
                    format!("{pad}{text}")
                }
            })
            .collect();
        let _ = writeln!(s, "| {} |", cells.join(" | "));
        if i == 0 {
            let dashes: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
            let _ = writeln!(s, "|-{}-|", dashes.join("-|-"));
        }
    }
    s
}

/// Every round's figures of `rows`, one line per measure and per baseline.
pub fn render_rounds(rows: &[RowSummary]) -> String {
    let list = |v: &[f64], digits: usize| {
        v.iter()
            .map(|x| format!("{x:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = String::from("rounds:\n");
    for r in rows {
        let _ = writeln!(
            s,
            "  {} ({}): {}",
            r.measure,
            r.unit,
            list(&r.rnic_rounds, r.digits)
        );
        if let Some(b) = &r.baseline_measure {
            let _ = writeln!(
                s,
                "  {b} ({}): {}",
                r.unit,
                list(&r.baseline_rounds, r.digits)
            );
        }
        if !r.checks.is_empty() {
            let each: Vec<String> = r
                .checks
                .iter()
                .map(|c| {
                    format!(
                        "{} {}/{}",
                        if c.passed { "PASS" } else { "FAIL" },
                        c.rc_retransmits,
                        c.rc_timeouts
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "  {} (verdict retransmissions/timeouts): {}",
                r.measure,
                each.join(", ")
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_row_and_a_clean_row_render_with_goals() {
        let mut a = Row::new(
            "a",
            "rnic x",
            Some("tcp x"),
            "MB/s",
            1,
            Goal::RatioAtLeast(0.5),
        );
        a.rnic = vec![10.0, 30.0, 20.0];
        a.baseline = vec![40.0, 40.0, 40.0];
        let mut b = Row::new("b", "rnic big", None, "MB/s", 1, Goal::Clean);
        b.rnic = vec![5.0];
        b.checks = vec![Check {
            passed: true,
            rc_retransmits: 0,
            rc_timeouts: 0,
        }];
        let rows = [a.summary(), b.summary()];
        assert_eq!(rows[0].ratio, Some(0.5));
        assert_eq!(rows[0].met, Some(true));
        assert_eq!(rows[1].met, Some(true));
        let t = render(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[2].contains("20.0 MB/s") && lines[2].contains("0.500"),
            "{t}"
        );
        assert!(lines[3].contains("1/1 passed, 0 retransmissions"), "{t}");
        assert!(render_rounds(&rows).contains("10.0, 30.0, 20.0"));
    }

    #[test]
    fn rows_without_goals_have_no_goal_columns() {
        let mut a = Row::new("a", "x", Some("y"), "µs", 2, Goal::None);
        a.rnic = vec![2.0];
        a.baseline = vec![1.0];
        let t = render(&[a.summary()]);
        assert_eq!(t.lines().next().map(|l| l.matches('|').count()), Some(6));
    }
}
