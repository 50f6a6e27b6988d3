//! The faults of one `rnic check` run, drawn from its seed: a class from those asked for, a
//! side, and the class's parameters (docs/check.md, "rnic check").

use rnic_sim::rng::Rng;

/// The fault classes a run may draw from (`--faults`).
pub const CLASSES: [&str; 9] = [
    "none",
    "cm-drop",
    "cm-dup",
    "cm-delay",
    "rc",
    "partition",
    "kill",
    "remove",
    "silence",
];

/// The longest cut (partition, RC window) drawn, ms: shorter than the RC retry budget of
/// `--fast-timers` (measured with rping: a 100 ms partition survived, a 150 ms one not), so that a
/// correct program survives it.
const SHORT_CUT_MS: u64 = 50;

/// The default mix: faults a correct program survives (its connection is established, or the
/// CM retries), and a SIGKILL.
pub const DEFAULT: &str = "none,cm-drop,cm-dup,cm-delay,rc,partition,kill";

/// The classes of `--faults`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes(pub Vec<String>);

/// Parses `--faults` (comma-separated classes).
///
/// # Errors
/// An unknown class (the message lists them).
pub fn parse_classes(s: &str) -> Result<Classes, String> {
    s.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| {
            if CLASSES.contains(&c) {
                Ok(c.to_string())
            } else {
                Err(format!(
                    "{c:?} is not a fault class: {}",
                    CLASSES.join(", ")
                ))
            }
        })
        .collect::<Result<_, _>>()
        .map(Classes)
}

/// Which program a fault is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The first program.
    Server,
    /// The second.
    Client,
}

fn pick<'a>(rng: &mut Rng, of: &[&'a str]) -> &'a str {
    of[rng.below(of.len() as u64) as usize]
}

fn when(rng: &mut Rng, window_ms: u64) -> String {
    match rng.below(4) {
        0 => "on:ESTABLISHED".into(),
        1 => "on:DISCONNECTED".into(),
        2 => format!("after:{}:completions", rng.range_u64(1..=10)),
        _ => format!("{}ms", rng.range_u64(0..=window_ms)),
    }
}

/// The faults of the run with seed `seed` (none, or one on one side), drawn from `classes`;
/// a fault at a time starts in the first `window_ms` ms of the RNIC's life.
pub fn draw(seed: u64, classes: &[String], window_ms: u64) -> Vec<(Side, String)> {
    let mut rng = Rng::new(seed).fork(0x6472_6177); // "draw"
    if classes.is_empty() {
        return Vec::new();
    }
    let class = classes[rng.below(classes.len() as u64) as usize].as_str();
    let side = if rng.chance(0.5) {
        Side::Server
    } else {
        Side::Client
    };
    let kind = pick(&mut rng, &["REQ", "REP", "RTU", "DREQ", "DREP"]);
    let spec = match class {
        "cm-drop" => format!("drop:{kind}:{}", pick(&mut rng, &["1", "1", "2", "1-2"])),
        "cm-dup" => format!("dup:{kind}:1"),
        "cm-delay" => format!("delay:{kind}:1:{}ms", rng.range_u64(10..=500)),
        "rc" => {
            let (t, d) = (
                rng.range_u64(0..=window_ms),
                rng.range_u64(10..=SHORT_CUT_MS),
            );
            if rng.chance(0.5) {
                format!(
                    "drop:rc:{t}ms:{d}ms:{}",
                    pick(&mut rng, &["1", "0.5", "0.1"])
                )
            } else {
                format!("delay:rc:{t}ms:{d}ms:{}ms", rng.range_u64(1..=50))
            }
        }
        "partition" => format!(
            "partition:{}ms:{}ms",
            rng.range_u64(0..=window_ms),
            rng.range_u64(10..=SHORT_CUT_MS)
        ),
        "kill" | "remove" | "silence" => format!("{class}:{}", when(&mut rng, window_ms)),
        _ => return Vec::new(),
    };
    vec![(side, spec)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_drawn_fault_parses_and_a_seed_draws_the_same() {
        let all = parse_classes(&CLASSES.join(",")).map_or_else(|_| Vec::new(), |c| c.0);
        for seed in 0..500 {
            let d = draw(seed, &all, 200);
            assert_eq!(d, draw(seed, &all, 200));
            for (_, spec) in d {
                assert!(rnic::inject::spec::parse(&spec).is_ok(), "{spec}");
            }
        }
        assert!(parse_classes("cm-drop,bogus").is_err());
    }
}
