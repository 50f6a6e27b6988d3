//! `rnic explore`: a swarm over seeds, and the summaries it writes.
//!
//! Each seed is one independent scenario ([`scenario::run_seed`]): the seed draws its own fault
//! rates and workload, runs them on the deterministic World and checks the oracle. A campaign
//! is a range of seeds `start..start + seeds`; [`explore`] runs it on `jobs` threads and returns
//! a [`Summary`] whose [`Campaign`] part — scenarios run, failures, the "sometimes" counters of
//! docs/design/TESTING.md, a digest of every trace hash — depends only on the seed range, never
//! on the number of jobs or on scheduling. Only [`Timing`] varies from run to run.
//!
//! A seed range is also the unit of sharding: a campaign too big for one machine runs as many
//! `--start/--seeds` shards (a Kubernetes Indexed Job, a Slurm array), each writing its JSON
//! summary; [`Summary::merge`] (`rnic explore --merge a.json b.json …`) adds them up into the
//! summary the whole range would have given (docs/explore.md).
//!
//! An interrupted run ([`explore_until`]: `rnic explore` stops on SIGINT or SIGTERM) stops
//! handing out seeds, lets every worker finish the seed it is on, and returns a partial
//! summary: its campaign covers exactly the seeds run, and [`Summary::interruption`] lists the
//! seeds left out with the commands that run them ([`partial`]).
//!
//! This module is a driver: it starts threads and reads the wall clock (for the throughput
//! figure only). The scenarios themselves never see either.

pub mod partial;

pub use partial::{resume_command, Interruption};

use crate::scenario::{self, SeedReport, Sometimes};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The progress bar's message: the failing seeds so far.
fn failing_text(n: u64) -> String {
    if n == 0 {
        "0 failing".into()
    } else {
        format!("{n} FAILING")
    }
}

/// Version of the JSON summary format ([`Summary::format`]); bumped on incompatible changes.
pub const SUMMARY_FORMAT: u32 = 1;

/// At most this many violations are kept per failing seed (the replay shows them all).
const VIOLATIONS_KEPT: usize = 4;

/// What [`explore`] runs.
#[derive(Debug, Clone)]
pub struct ExploreOptions {
    /// First seed.
    pub start: u64,
    /// Number of seeds (scenarios); the range is `start..start + seeds`.
    pub seeds: u64,
    /// Worker threads (≥ 1). The [`Campaign`] does not depend on it.
    pub jobs: usize,
    /// Show a progress bar on stderr, with the count of failing seeds so far (hidden anyway
    /// when stderr is not a terminal: indicatif's stderr target draws nothing then).
    pub progress: bool,
    /// The command that runs this program (`argv[0]`), used to print exact replay commands.
    pub program: String,
}

impl Default for ExploreOptions {
    fn default() -> Self {
        ExploreOptions {
            start: 0,
            seeds: 1000,
            jobs: default_jobs(),
            progress: false,
            program: "rnic".into(),
        }
    }
}

/// The number of cores this process may use (1 if unknown): `--jobs`' default.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One failing seed: what it drew and what the oracle said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The fault options and workload the seed drew ([`SeedReport::faults`]).
    pub faults: String,
    /// The run did not reach quiescence (timers still armed or messages in flight at the end).
    pub not_quiescent: bool,
    /// The first violations, as the oracle prints them (invariant, host, time, events).
    pub violations: Vec<String>,
    /// How many violations the oracle reported in all.
    pub violation_count: usize,
    /// The command that replays this seed.
    pub replay: String,
}

/// The deterministic part of a summary: a function of the seed range alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Campaign {
    /// Seed ranges covered, `[start, end)`, sorted, disjoint and coalesced.
    pub ranges: Vec<[u64; 2]>,
    /// Scenarios run (one per seed).
    pub scenarios: u64,
    /// Seeds with at least one invariant violation or no quiescence.
    pub failures: u64,
    /// Every failing seed, by seed.
    pub failing: Vec<Failure>,
    /// For each "sometimes" situation of TESTING.md ([`Sometimes::NAMES`]), how many seeds
    /// reached it. A zero after a long run means the generator never goes there.
    pub sometimes: BTreeMap<String, u64>,
    /// Digest of every (seed, trace hash) pair, order-independent so that shards merge:
    /// the wrapping sum of `mix(seed, trace_hash)`, as 16 hex digits. Two runs of the same
    /// range agree on it exactly when every seed's trace hash agrees (up to collisions).
    pub digest: String,
}

impl Campaign {
    /// Checks that the numbers of a campaign (read back from JSON) add up: every range
    /// non-empty, as many scenarios as seeds in the ranges (and no digest without them), as
    /// many failing seeds listed as failures counted, each inside a range, every "sometimes"
    /// counter present, none unknown, none above the scenarios.
    ///
    /// # Errors
    /// What does not add up, in words.
    pub fn check_consistent(&self) -> Result<(), String> {
        let mut seeds: u64 = 0;
        for r in &self.ranges {
            if r[0] >= r[1] {
                return Err(format!("empty or reversed range {}..{}", r[0], r[1]));
            }
            seeds = seeds
                .checked_add(r[1] - r[0])
                .ok_or_else(|| "ranges cover more than 2^64 seeds".to_string())?;
        }
        if seeds != self.scenarios {
            return Err(format!(
                "{} scenarios for {seeds} seeds in its ranges",
                self.scenarios
            ));
        }
        if self.failing.len() as u64 != self.failures {
            return Err(format!(
                "{} failures counted, {} listed",
                self.failures,
                self.failing.len()
            ));
        }
        if let Some(f) = self
            .failing
            .iter()
            .find(|f| !self.ranges.iter().any(|r| (r[0]..r[1]).contains(&f.seed)))
        {
            return Err(format!("failing seed {} outside its ranges", f.seed));
        }
        if self.scenarios == 0 && self.digest != format!("{:016x}", 0) {
            return Err("a digest without scenarios".into());
        }
        if let Some(name) = Sometimes::NAMES
            .iter()
            .find(|name| !self.sometimes.contains_key(**name))
        {
            return Err(format!("counter {name} missing"));
        }
        if let Some(name) = self
            .sometimes
            .keys()
            .find(|k| !Sometimes::NAMES.contains(&k.as_str()))
        {
            return Err(format!("unknown counter {name}"));
        }
        if let Some((name, n)) = self.sometimes.iter().find(|(_, &n)| n > self.scenarios) {
            return Err(format!(
                "{name} = {n} is more than the {} scenarios",
                self.scenarios
            ));
        }
        Ok(())
    }
}

/// How long a run took: varies between runs and machines, so kept out of [`Campaign`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Worker threads.
    pub jobs: usize,
    /// Wall-clock time of the run, in seconds.
    pub elapsed_s: f64,
    /// Scenarios per second of wall-clock time.
    pub scenarios_per_s: f64,
}

/// The summary `rnic explore` prints, and writes with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// [`SUMMARY_FORMAT`].
    pub format: u32,
    /// What was run and found.
    pub campaign: Campaign,
    /// How long it took; `None` for a merge of shards.
    pub timing: Option<Timing>,
    /// True when seeds asked for were not run (the run was interrupted, or merged shards
    /// leave seeds out): `campaign` covers only the seeds of `campaign.ranges`, and
    /// [`interruption`](Self::interruption) says what is missing. Absent (false) in summaries
    /// written before it existed.
    #[serde(default)]
    pub partial: bool,
    /// What a partial summary left out and the commands that run it; `None` when complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption: Option<Interruption>,
}

/// Why [`Summary::merge`] refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    /// No summary given.
    #[error("no summaries to merge")]
    Empty,
    /// A summary of another format version.
    #[error("summary format {0} is not {SUMMARY_FORMAT}")]
    Format(u32),
    /// Two shards cover the same seed.
    #[error("seed ranges overlap: {0}..{1} and {2}..{3}")]
    Overlap(u64, u64, u64, u64),
    /// A digest that is not 16 hex digits.
    #[error("bad digest {0:?}")]
    Digest(String),
    /// A summary whose numbers do not add up (edited or truncated).
    #[error("inconsistent summary: {0}")]
    Inconsistent(String),
}

/// The per-seed term of [`Campaign::digest`] (a splitmix64 finaliser of seed and hash).
fn mix(seed: u64, trace_hash: u64) -> u64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ trace_hash;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A campaign being accumulated (by one worker, or by a merge).
#[derive(Debug, Default)]
struct Tally {
    scenarios: u64,
    failing: Vec<Failure>,
    sometimes: [u64; Sometimes::COUNT],
    digest: u64,
}

impl Tally {
    fn add(&mut self, r: &SeedReport, program: &str) {
        self.scenarios += 1;
        self.digest = self.digest.wrapping_add(mix(r.seed, r.trace_hash));
        for (n, hit) in self.sometimes.iter_mut().zip(r.sometimes.flags()) {
            *n += u64::from(hit);
        }
        if !r.violations.is_empty() || !r.quiescent {
            self.failing.push(Failure {
                seed: r.seed,
                faults: r.faults.clone(),
                not_quiescent: !r.quiescent,
                violations: r
                    .violations
                    .iter()
                    .take(VIOLATIONS_KEPT)
                    .map(|v| v.to_string())
                    .collect(),
                violation_count: r.violations.len(),
                replay: replay_command(program, r.seed),
            });
        }
    }

    fn absorb(&mut self, other: Tally) {
        self.scenarios += other.scenarios;
        self.failing.extend(other.failing);
        for (a, b) in self.sometimes.iter_mut().zip(other.sometimes) {
            *a += b;
        }
        self.digest = self.digest.wrapping_add(other.digest);
    }

    fn into_campaign(mut self, ranges: Vec<[u64; 2]>) -> Campaign {
        self.failing.sort_by_key(|f| f.seed);
        Campaign {
            ranges,
            scenarios: self.scenarios,
            failures: self.failing.len() as u64,
            failing: self.failing,
            sometimes: Sometimes::NAMES
                .iter()
                .zip(self.sometimes)
                .map(|(name, n)| ((*name).to_string(), n))
                .collect(),
            digest: format!("{:016x}", self.digest),
        }
    }
}

/// The exact command that replays `seed` with the program at `program`.
pub fn replay_command(program: &str, seed: u64) -> String {
    format!("{program} replay --seed {seed}")
}

/// The seed range of `opts` (saturating at `u64::MAX`).
fn range_of(opts: &ExploreOptions) -> Range<u64> {
    opts.start..opts.start.saturating_add(opts.seeds)
}

/// Runs every seed of `opts.start..opts.start + opts.seeds` on `opts.jobs` threads and sums
/// up what the oracle found; the campaign part of the result is the same for every `jobs`
/// (only [`Timing`] differs). Never stops early: [`explore_until`] does.
pub fn explore(opts: &ExploreOptions) -> Summary {
    explore_until(opts, || false, || None)
}

/// [`explore`], stopping early when `stop` returns true (`rnic explore`: when SIGINT or
/// SIGTERM arrived). Workers take one seed at a time from a shared counter and call `stop`
/// before taking each; a worker that sees true takes no more seeds, and every seed taken is
/// run to its end. The summary then covers exactly the seeds run (`campaign.ranges`), is
/// [`partial`](Summary::partial), and its [`interruption`](Summary::interruption) lists the
/// seeds not run, with the name of the signal that stopped the run (`"SIGINT"`), which
/// `signal` gives when asked once at the end, if any. A run that `stop` did not cut short
/// gives the same summary as [`explore`].
#[allow(clippy::disallowed_methods)] // a driver: worker threads and the wall clock for Timing
pub fn explore_until(
    opts: &ExploreOptions,
    stop: impl Fn() -> bool + Sync,
    signal: impl FnOnce() -> Option<String>,
) -> Summary {
    let range = range_of(opts);
    let jobs = opts.jobs.max(1);
    let bar = if opts.progress {
        let bar = indicatif::ProgressBar::new(range.end - range.start);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {pos}/{len} seeds, {msg}, {per_sec}, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(failing_text(0));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let next = AtomicU64::new(range.start);
    let failing = AtomicU64::new(0);
    let total = Mutex::new((Tally::default(), Vec::new()));
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                let mut tally = Tally::default();
                // The seeds this worker ran, as ranges.
                let mut ran: Vec<[u64; 2]> = Vec::new();
                while !stop() {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    // (`< start`: the counter wrapped past 2^64 − 1.)
                    if seed >= range.end || seed < range.start {
                        break;
                    }
                    let before = tally.failing.len();
                    tally.add(&scenario::run_seed(seed), &opts.program);
                    if tally.failing.len() > before {
                        let n = failing.fetch_add(1, Ordering::Relaxed) + 1;
                        bar.set_message(failing_text(n));
                    }
                    match ran.last_mut() {
                        Some(r) if r[1] == seed => r[1] = seed + 1,
                        _ => ran.push([seed, seed + 1]),
                    }
                    bar.inc(1);
                }
                // A poisoned lock means another worker panicked: its panic is re-raised by
                // the scope, so this worker's tally may be dropped.
                if let Ok(mut t) = total.lock() {
                    t.0.absorb(tally);
                    t.1.extend(ran);
                }
            });
        }
    });
    bar.finish_and_clear();
    let elapsed_s = started.elapsed().as_secs_f64();
    let (tally, ran) = total.into_inner().unwrap_or_else(|p| p.into_inner());
    let scenarios = tally.scenarios;
    let ran = partial::coalesce(ran);
    let requested = partial::coalesce(vec![[range.start, range.end]]);
    let interruption = Interruption::of(&requested, &ran, signal(), &opts.program);
    Summary {
        format: SUMMARY_FORMAT,
        partial: interruption.is_some(),
        interruption,
        campaign: tally.into_campaign(ran),
        timing: Some(Timing {
            jobs,
            elapsed_s,
            scenarios_per_s: if elapsed_s > 0.0 {
                scenarios as f64 / elapsed_s
            } else {
                0.0
            },
        }),
    }
}

impl Summary {
    /// True when no seed failed (of those run: see [`partial`](Self::partial)).
    pub fn passed(&self) -> bool {
        self.campaign.failures == 0
    }

    /// The names of the "sometimes" counters still at zero.
    pub fn blind_spots(&self) -> Vec<&str> {
        self.campaign
            .sometimes
            .iter()
            .filter(|(_, &n)| n == 0)
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// [`merge_as`](Self::merge_as) with `rnic` as the program of resume commands.
    ///
    /// # Errors
    /// As [`merge_as`](Self::merge_as).
    pub fn merge(summaries: &[Summary]) -> Result<Summary, MergeError> {
        Self::merge_as(summaries, "rnic")
    }

    /// Adds up shard summaries into the summary of the union of their seed ranges: counts and
    /// counters summed, failing seeds merged in seed order, digests added. The result has no
    /// [`Timing`].
    ///
    /// Partial shards (interrupted runs) are accepted: their `campaign.ranges` are exactly
    /// the seeds they ran, so the sums stay right. The result is partial when a seed some
    /// shard asked for was run by none (its [`Interruption`] lists those, with resume
    /// commands for `program`, and no signal); a partial shard merged with the shards its
    /// resume commands wrote gives exactly the summary of the whole range.
    ///
    /// # Errors
    /// [`MergeError::Empty`] for no summaries, [`MergeError::Format`] for another format
    /// version, [`MergeError::Overlap`] when two shards cover the same seed (the sums would
    /// count it twice), [`MergeError::Digest`] for a malformed digest,
    /// [`MergeError::Inconsistent`] for numbers that do not add up (a partial flag without
    /// the seeds left out, seeds both run and not run, …).
    pub fn merge_as(summaries: &[Summary], program: &str) -> Result<Summary, MergeError> {
        if summaries.is_empty() {
            return Err(MergeError::Empty);
        }
        let mut tally = Tally::default();
        let mut ranges: Vec<[u64; 2]> = Vec::new();
        let mut requested: Vec<[u64; 2]> = Vec::new();
        for s in summaries {
            if s.format != SUMMARY_FORMAT {
                return Err(MergeError::Format(s.format));
            }
            let c = &s.campaign;
            c.check_consistent().map_err(MergeError::Inconsistent)?;
            match (&s.interruption, s.partial) {
                (Some(i), true) => {
                    i.check(&c.ranges).map_err(MergeError::Inconsistent)?;
                    requested.extend(i.not_run.iter().copied());
                }
                (None, false) => {}
                _ => {
                    return Err(MergeError::Inconsistent(
                        "`partial` and `interruption` disagree".into(),
                    ))
                }
            }
            requested.extend(c.ranges.iter().copied());
            let digest = u64::from_str_radix(&c.digest, 16)
                .map_err(|_| MergeError::Digest(c.digest.clone()))?;
            let mut sometimes = [0u64; Sometimes::COUNT];
            for (slot, name) in sometimes.iter_mut().zip(Sometimes::NAMES) {
                *slot = c.sometimes.get(name).copied().unwrap_or(0);
            }
            tally.absorb(Tally {
                scenarios: c.scenarios,
                failing: c.failing.clone(),
                sometimes,
                digest,
            });
            ranges.extend(c.ranges.iter().copied());
        }
        ranges.sort_unstable();
        let mut merged: Vec<[u64; 2]> = Vec::new();
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r[0] < last[1] => {
                    return Err(MergeError::Overlap(last[0], last[1], r[0], r[1]))
                }
                Some(last) if r[0] == last[1] => last[1] = r[1],
                _ => merged.push(r),
            }
        }
        let interruption = Interruption::of(&partial::coalesce(requested), &merged, None, program);
        Ok(Summary {
            format: SUMMARY_FORMAT,
            campaign: tally.into_campaign(merged),
            timing: None,
            partial: interruption.is_some(),
            interruption,
        })
    }

    /// The human-readable summary `rnic explore` prints; its verdict is [`passed`](Self::passed).
    pub fn render(&self) -> String {
        self.render_requiring(false)
    }

    /// [`render`](Self::render), with a verdict that also fails on a "sometimes" counter at
    /// zero when `require_sometimes` (`--require-sometimes`).
    pub fn render_requiring(&self, require_sometimes: bool) -> String {
        let c = &self.campaign;
        let mut s = String::new();
        if let Some(i) = &self.interruption {
            s.push_str(&partial::header(i, c.scenarios));
        }
        let _ = write!(s, "rnic explore: seeds {}", partial::ranges_text(&c.ranges));
        let _ = write!(s, " — {} scenarios", c.scenarios);
        if let Some(t) = &self.timing {
            let _ = write!(
                s,
                " in {:.2} s on {} job{} ({:.0} scenarios/s)",
                t.elapsed_s,
                t.jobs,
                if t.jobs == 1 { "" } else { "s" },
                t.scenarios_per_s
            );
        }
        s.push('\n');
        if let Some(i) = &self.interruption {
            s.push_str(&partial::details(i, &c.ranges));
        }
        let _ = writeln!(s, "invariant failures: {} seed(s)", c.failures);
        for f in &c.failing {
            let _ = writeln!(s, "  FAIL seed {} [{}]", f.seed, f.faults);
            if f.not_quiescent {
                let _ = writeln!(s, "    not quiescent at the end of the run");
            }
            for v in &f.violations {
                let _ = writeln!(s, "    {v}");
            }
            if f.violation_count > f.violations.len() {
                let more = f.violation_count - f.violations.len();
                let _ = writeln!(s, "    … and {more} more");
            }
            let _ = writeln!(s, "    replay: {}", f.replay);
        }
        let _ = writeln!(s, "sometimes (seeds that reached each rare situation):");
        for name in Sometimes::NAMES {
            let n = c.sometimes.get(name).copied().unwrap_or(0);
            let pct = if c.scenarios > 0 {
                100.0 * n as f64 / c.scenarios as f64
            } else {
                0.0
            };
            let _ = writeln!(s, "  {name:<37} {n:>10}  ({pct:.2} %)");
        }
        let blind = self.blind_spots();
        if !blind.is_empty() && c.scenarios > 0 {
            let _ = writeln!(
                s,
                "WARNING: never reached: {} (the generator is blind there, or the run is too short)",
                blind.join(", ")
            );
        }
        let _ = writeln!(s, "campaign digest: {}", c.digest);
        let mut verdict = if !self.passed() {
            "FAIL".to_string()
        } else if require_sometimes && !blind.is_empty() {
            "FAIL (--require-sometimes: a counter is zero)".to_string()
        } else {
            "PASS".to_string()
        };
        if let Some(i) = &self.interruption {
            let not_run = i.seeds_not_run();
            verdict = if self.passed() {
                format!(
                    "INCOMPLETE (no failure in the {} seeds run; {not_run} not run)",
                    c.scenarios
                )
            } else {
                format!("{verdict} (PARTIAL: {not_run} seeds not run)")
            };
        }
        let _ = writeln!(s, "verdict: {verdict}");
        s
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(start: u64, seeds: u64, jobs: usize) -> ExploreOptions {
        ExploreOptions {
            start,
            seeds,
            jobs,
            ..ExploreOptions::default()
        }
    }

    #[test]
    fn campaign_does_not_depend_on_jobs() {
        let one = explore(&opts(10, 300, 1));
        let three = explore(&opts(10, 300, 3));
        assert_eq!(one.campaign, three.campaign);
        assert_eq!(one.campaign.scenarios, 300);
        assert_eq!(one.campaign.ranges, [[10, 310]]);
    }

    #[test]
    fn shards_merge_into_the_whole_range() {
        let whole = explore(&opts(0, 500, 2));
        let a = explore(&opts(0, 200, 1));
        let b = explore(&opts(200, 300, 2));
        let merged = Summary::merge(&[b, a]).unwrap();
        assert_eq!(merged.campaign, whole.campaign);
        assert_eq!(merged.timing, None);
    }

    #[test]
    fn merge_refuses_overlapping_shards() {
        let a = explore(&opts(0, 100, 1));
        let b = explore(&opts(50, 100, 1));
        assert_eq!(
            Summary::merge(&[a, b]),
            Err(MergeError::Overlap(0, 100, 50, 150))
        );
        assert_eq!(Summary::merge(&[]), Err(MergeError::Empty));
    }

    #[test]
    fn merge_refuses_summaries_whose_numbers_do_not_add_up() {
        let good = explore(&opts(0, 20, 1));
        let edits: [fn(&mut Campaign); 7] = [
            |c| c.ranges = vec![[20, 0]],
            |c| c.scenarios = 5,
            |c| c.failures = 1,
            |c| {
                c.sometimes.insert("drep_lost".into(), 21);
            },
            |c| {
                c.sometimes.remove("drep_lost");
            },
            |c| {
                c.sometimes.insert("made_up".into(), 1);
            },
            |c| {
                c.ranges.clear();
                c.scenarios = 0;
            },
        ];
        for edit in edits {
            let mut bad = good.clone();
            edit(&mut bad.campaign);
            let r = Summary::merge(&[bad]);
            assert!(matches!(r, Err(MergeError::Inconsistent(_))), "{r:?}");
        }
        assert!(Summary::merge(&[good]).is_ok());
    }

    #[test]
    fn merge_keeps_disjoint_ranges_apart() {
        let a = explore(&opts(0, 10, 1));
        let b = explore(&opts(20, 10, 1));
        let m = Summary::merge(&[a, b]).unwrap();
        assert_eq!(m.campaign.ranges, [[0, 10], [20, 30]]);
        assert_eq!(m.campaign.scenarios, 20);
    }

    /// Regression: serde_json parses floats fast but not always exactly unless its
    /// `float_roundtrip` feature is on; this timing value came back one ULP off, and
    /// `summary_round_trips_through_json` failed now and then (its timing varies per run).
    #[test]
    fn json_round_trips_an_f64_exactly() {
        let x = 9077.540349666853_f64;
        let back: f64 = serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap();
        assert_eq!(back.to_bits(), x.to_bits());
    }

    #[test]
    fn summary_round_trips_through_json() {
        let s = explore(&opts(0, 50, 1));
        let json = serde_json::to_string(&s).unwrap();
        let back: Summary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn digest_changes_with_any_trace_hash() {
        let mut t = Tally::default();
        let mut u = Tally::default();
        for seed in 0..5 {
            let r = scenario::run_seed(seed);
            t.add(&r, "rnic");
            let mut r2 = r.clone();
            if seed == 3 {
                r2.trace_hash ^= 1;
            }
            u.add(&r2, "rnic");
        }
        assert_ne!(t.digest, u.digest);
    }

    #[test]
    fn a_failing_seed_is_listed_with_its_replay_command_and_fails_the_verdict() {
        let mut r = scenario::run_seed(7);
        r.quiescent = false;
        let mut t = Tally::default();
        t.add(&r, "./target/release/rnic");
        let s = Summary {
            format: SUMMARY_FORMAT,
            campaign: t.into_campaign(vec![[7, 8]]),
            timing: None,
            partial: false,
            interruption: None,
        };
        assert!(!s.passed());
        assert_eq!(
            s.campaign.failing[0].replay,
            "./target/release/rnic replay --seed 7"
        );
        let text = s.render();
        assert!(text.contains("FAIL seed 7"), "{text}");
        assert!(
            text.contains("replay: ./target/release/rnic replay --seed 7"),
            "{text}"
        );
        assert!(text.contains("verdict: FAIL"), "{text}");
    }
}
