//! Partial summaries: what an interrupted `rnic explore` (SIGINT, SIGTERM) ran and what it
//! left out, precisely enough to resume — and to merge the resumed shards with it into the
//! summary of the whole range.
//!
//! Workers take one seed at a time and check for an interruption before each, and every seed
//! handed out is run to its end; so the seeds run are `start..K` for some K, but the summary
//! does not rely on it: it records the seeds each worker ran as ranges, and
//! [`Interruption::not_run`] is the exact complement in the range asked for. A JSON partial
//! summary says `"partial": true`; `--merge` accepts it (its `campaign.ranges` are exactly the
//! seeds run, so the sums stay right) and its result is itself partial unless other shards
//! ran the seeds it left out ([`Summary::merge_as`](super::Summary::merge_as)).

use serde::{Deserialize, Serialize};

/// What a partial summary left out, and how to run it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interruption {
    /// The signal that stopped the run (`"SIGINT"`, `"SIGTERM"`); `None` when the run was
    /// stopped otherwise ([`explore_until`](super::explore_until)) or for merged shards that
    /// leave seeds out.
    pub signal: Option<String>,
    /// The seeds asked for and not run: `[start, end)` ranges, sorted, disjoint, coalesced,
    /// none empty, none overlapping `campaign.ranges`.
    pub not_run: Vec<[u64; 2]>,
    /// The commands that run exactly the seeds of `not_run`, one per range
    /// ([`resume_command`]); their `--json` summaries merge with this one.
    pub resume: Vec<String>,
}

impl Interruption {
    /// The interruption of a run that asked for `requested` and ran `ran` (both sorted,
    /// disjoint ranges), stopped by `signal`: `None` when every seed asked for was run.
    pub(crate) fn of(
        requested: &[[u64; 2]],
        ran: &[[u64; 2]],
        signal: Option<String>,
        program: &str,
    ) -> Option<Interruption> {
        let not_run = subtract(requested, ran);
        (!not_run.is_empty()).then(|| Interruption {
            signal,
            resume: not_run
                .iter()
                .map(|r| resume_command(program, *r))
                .collect(),
            not_run,
        })
    }

    /// Seeds not run.
    pub fn seeds_not_run(&self) -> u64 {
        seeds_in(&self.not_run)
    }

    /// Checks what was read back from JSON: `not_run` non-empty, sorted, disjoint, every
    /// range non-empty and outside `ran`; as many resume commands as ranges.
    pub(crate) fn check(&self, ran: &[[u64; 2]]) -> Result<(), String> {
        if self.not_run.is_empty() {
            return Err("partial, but no seed not run".into());
        }
        let mut end = None;
        for r in &self.not_run {
            if r[0] >= r[1] {
                return Err(format!(
                    "empty or reversed range not run {}..{}",
                    r[0], r[1]
                ));
            }
            if end.is_some_and(|e| r[0] <= e) {
                return Err("ranges not run out of order or touching".into());
            }
            end = Some(r[1]);
            if let Some(x) = ran.iter().find(|x| x[0] < r[1] && r[0] < x[1]) {
                return Err(format!(
                    "seeds {}..{} both run and not run ({}..{})",
                    r[0], r[1], x[0], x[1]
                ));
            }
        }
        if self.resume.len() != self.not_run.len() {
            return Err(format!(
                "{} resume commands for {} ranges not run",
                self.resume.len(),
                self.not_run.len()
            ));
        }
        Ok(())
    }
}

/// The command that runs exactly the seeds `range` (`[start, end)`, non-empty) with the
/// program at `program`: `PROGRAM explore --start START --seeds END-START`.
pub fn resume_command(program: &str, range: [u64; 2]) -> String {
    format!(
        "{program} explore --start {} --seeds {}",
        range[0],
        range[1] - range[0]
    )
}

/// `ranges` sorted, with overlapping or touching ranges joined and empty ones dropped.
pub(crate) fn coalesce(mut ranges: Vec<[u64; 2]>) -> Vec<[u64; 2]> {
    ranges.retain(|r| r[0] < r[1]);
    ranges.sort_unstable();
    let mut out: Vec<[u64; 2]> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r[0] <= last[1] => last[1] = last[1].max(r[1]),
            _ => out.push(r),
        }
    }
    out
}

/// The seeds of `from` not in `minus` (both sorted, disjoint), as sorted disjoint ranges.
pub(crate) fn subtract(from: &[[u64; 2]], minus: &[[u64; 2]]) -> Vec<[u64; 2]> {
    let mut out = Vec::new();
    for r in from {
        let mut at = r[0];
        for m in minus.iter().filter(|m| m[0] < r[1] && r[0] < m[1]) {
            if m[0] > at {
                out.push([at, m[0]]);
            }
            at = at.max(m[1]);
        }
        if at < r[1] {
            out.push([at, r[1]]);
        }
    }
    out
}

/// The number of seeds in `ranges` (saturating at 2^64 − 1).
pub(crate) fn seeds_in(ranges: &[[u64; 2]]) -> u64 {
    ranges
        .iter()
        .fold(0u64, |n, r| n.saturating_add(r[1].saturating_sub(r[0])))
}

/// `ranges` as `a..b, c..d`.
pub(crate) fn ranges_text(ranges: &[[u64; 2]]) -> String {
    ranges
        .iter()
        .map(|r| format!("{}..{}", r[0], r[1]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The lines a partial summary starts with (before the usual first line): what was run of
/// what was asked for, and why it stopped.
pub(crate) fn header(i: &Interruption, run: u64) -> String {
    let why = i.signal.as_ref().map_or_else(
        || "not every seed asked for was run".into(),
        |s| format!("interrupted by {s}"),
    );
    let asked = run.saturating_add(i.seeds_not_run());
    format!("rnic explore: PARTIAL summary ({why}): {run} of {asked} seeds run\n")
}

/// The lines a partial summary adds after the usual first line: the seeds run and not run,
/// and the commands that run the rest.
pub(crate) fn details(i: &Interruption, ran: &[[u64; 2]]) -> String {
    let mut s = String::new();
    match ran {
        [] => s.push_str("no seed was run\n"),
        [r] if i.not_run.first().is_some_and(|n| n[0] == r[1]) && i.not_run.len() == 1 => {
            s.push_str(&format!(
                "every seed of {}..{} was run, none of {}..{}\n",
                r[0], r[1], i.not_run[0][0], i.not_run[0][1]
            ));
        }
        _ => s.push_str(&format!(
            "seeds run: {}; not run: {}\n",
            ranges_text(ran),
            ranges_text(&i.not_run)
        )),
    }
    for cmd in &i.resume {
        s.push_str(&format!("resume with: {cmd}\n"));
    }
    s.push_str(
        "(this run's `--json` summary and the resumed runs' merge into the whole range's: \
         `rnic explore --merge`)\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_and_subtract_give_the_seeds_left_out() {
        assert_eq!(
            coalesce(vec![[5, 6], [0, 3], [3, 4], [8, 8], [2, 3]]),
            [[0, 4], [5, 6]]
        );
        assert_eq!(
            subtract(&[[0, 100]], &[[0, 10], [64, 70]]),
            [[10, 64], [70, 100]]
        );
        assert_eq!(
            subtract(&[[0, 10], [20, 30]], &[[5, 25]]),
            [[0, 5], [25, 30]]
        );
        assert_eq!(subtract(&[[0, 10]], &[[0, 10]]), Vec::<[u64; 2]>::new());
        assert_eq!(seeds_in(&[[0, 10], [20, 25]]), 15);
    }

    #[test]
    fn an_interruption_lists_one_resume_command_per_gap() {
        let i = Interruption::of(&[[0, 100]], &[[0, 10], [64, 70]], None, "rnic").unwrap();
        assert_eq!(i.not_run, [[10, 64], [70, 100]]);
        assert_eq!(
            i.resume,
            [
                "rnic explore --start 10 --seeds 54",
                "rnic explore --start 70 --seeds 30"
            ]
        );
        assert_eq!(i.check(&[[0, 10], [64, 70]]), Ok(()));
        assert!(i.check(&[[0, 11]]).is_err());
        assert_eq!(Interruption::of(&[[0, 5]], &[[0, 5]], None, "rnic"), None);
    }

    fn opts(start: u64, seeds: u64, jobs: usize) -> crate::explore::ExploreOptions {
        crate::explore::ExploreOptions {
            start,
            seeds,
            jobs,
            ..Default::default()
        }
    }

    /// A run stopped after `n` seeds were handed out (`stop` is asked once before each).
    fn stopped_after(start: u64, seeds: u64, jobs: usize, n: u64) -> crate::explore::Summary {
        let asked = std::sync::atomic::AtomicU64::new(0);
        crate::explore::explore_until(
            &opts(start, seeds, jobs),
            || asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= n,
            || None,
        )
    }

    #[test]
    fn an_interrupted_run_covers_the_seeds_run_and_resumes_to_the_whole_campaign() {
        use crate::explore::{explore, Summary};
        let whole = explore(&opts(0, 400, 2));
        let cut = stopped_after(0, 400, 2, 130);
        assert!(cut.partial);
        assert_eq!(cut.campaign.scenarios, 130);
        assert_eq!(cut.campaign.ranges, [[0, 130]]);
        let i = cut.interruption.clone().unwrap();
        assert_eq!(i.not_run, [[130, 400]]);
        assert_eq!(i.resume, ["rnic explore --start 130 --seeds 270"]);
        assert_eq!(i.signal, None);
        let text = cut.render();
        assert!(text.starts_with("rnic explore: PARTIAL summary"), "{text}");
        assert!(text.contains("130 of 400 seeds run"), "{text}");
        assert!(
            text.contains("every seed of 0..130 was run, none of 130..400"),
            "{text}"
        );
        assert!(
            text.contains("resume with: rnic explore --start 130 --seeds 270"),
            "{text}"
        );
        assert!(text.contains("verdict: INCOMPLETE"), "{text}");
        // Through JSON, merged with the run of its resume command: the whole campaign.
        let back: Summary = serde_json::from_str(&serde_json::to_string(&cut).unwrap()).unwrap();
        assert_eq!(back, cut);
        let rest = explore(&opts(130, 270, 1));
        let merged = Summary::merge(&[rest, back]).unwrap();
        assert_eq!(merged.campaign, whole.campaign);
        assert!(!merged.partial && merged.interruption.is_none());
        // An uncut run is not partial, and its summary says nothing of it.
        assert!(!whole.partial && whole.interruption.is_none());
        assert!(!whole.render().contains("PARTIAL"));
        assert!(!serde_json::to_string(&whole)
            .unwrap()
            .contains("interruption"));
    }

    #[test]
    fn a_merge_that_leaves_seeds_out_is_partial_and_bad_partial_flags_are_refused() {
        use crate::explore::{MergeError, Summary};
        let cut = stopped_after(100, 50, 1, 20);
        let other = stopped_after(300, 10, 1, 0);
        assert_eq!(other.campaign.scenarios, 0);
        let m = Summary::merge_as(&[cut.clone(), other], "./rnic").unwrap();
        assert!(m.partial);
        let i = m.interruption.clone().unwrap();
        assert_eq!(i.not_run, [[120, 150], [300, 310]]);
        assert_eq!(
            i.resume,
            [
                "./rnic explore --start 120 --seeds 30",
                "./rnic explore --start 300 --seeds 10"
            ]
        );
        let text = m.render();
        assert!(text.contains("not every seed asked for was run"), "{text}");
        assert!(
            text.contains("seeds run: 100..120; not run: 120..150, 300..310"),
            "{text}"
        );
        let mut flag_only = cut.clone();
        flag_only.interruption = None;
        let mut unflagged = cut.clone();
        unflagged.partial = false;
        let mut overlapping = cut;
        if let Some(i) = overlapping.interruption.as_mut() {
            i.not_run = vec![[110, 150]];
        }
        for bad in [flag_only, unflagged, overlapping] {
            let r = Summary::merge(&[bad]);
            assert!(matches!(r, Err(MergeError::Inconsistent(_))), "{r:?}");
        }
    }
}
