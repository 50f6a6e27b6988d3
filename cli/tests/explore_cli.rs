//! `rnic explore` and `rnic replay` as a user runs them: separate processes, JSON summaries,
//! merged shards, and the CI determinism check of TESTING.md (a batch of seeds run twice, in
//! two processes and with different `--jobs`, must give the same trace hashes).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use rnic_testbed::explore::Summary;
use rnic_testbed::scenario;
use std::path::PathBuf;
use std::process::{Command, Output};

fn rnic(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rnic"))
        .args(args)
        .output()
        .expect("run rnic")
}

fn explore_json(args: &[&str]) -> Summary {
    let out = rnic(&[&["explore", "--json"], args].concat());
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "{out:?}"
    );
    let s: Summary = serde_json::from_slice(&out.stdout).expect("one JSON summary on stdout");
    assert_eq!(
        out.status.code() == Some(0),
        s.passed(),
        "exit code follows the verdict"
    );
    s
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

#[test]
fn determinism_a_batch_of_seeds_run_twice_gives_the_same_trace_hashes() {
    let a = explore_json(&["--start", "1000", "--seeds", "400", "--jobs", "1"]);
    let b = explore_json(&["--start", "1000", "--seeds", "400", "--jobs", "2"]);
    assert_eq!(a.campaign, b.campaign);
    assert_eq!(a.campaign.scenarios, 400);
    // And seed by seed, in this process: the same hashes as a second run.
    for seed in 1000..1100 {
        assert_eq!(
            scenario::run_seed(seed).trace_hash,
            scenario::run_seed(seed).trace_hash,
            "seed {seed}"
        );
    }
    assert!(a.passed(), "{}", a.render());
}

#[test]
fn shard_summaries_merge_into_the_summary_of_the_whole_range() {
    let whole = explore_json(&["--seeds", "300"]);
    let mut files = Vec::new();
    for (i, (start, n)) in [(0, 120), (120, 180)].into_iter().enumerate() {
        let out = rnic(&[
            "explore",
            "--json",
            "--start",
            &start.to_string(),
            "--seeds",
            &n.to_string(),
        ]);
        let path = tmp(&format!("shard-{i}.json"));
        std::fs::write(&path, &out.stdout).unwrap();
        files.push(path);
    }
    let args: Vec<&str> = ["explore", "--json", "--merge"]
        .into_iter()
        .chain(files.iter().map(|p| p.to_str().unwrap()))
        .collect();
    let out = rnic(&args);
    let merged: Summary = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(merged.campaign, whole.campaign);
    // The same shard twice overlaps: refused with exit code 2.
    let f0 = files[0].to_str().unwrap();
    let out = rnic(&["explore", "--merge", f0, f0]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("overlap"));
}

#[test]
fn text_summary_names_every_sometimes_counter_and_the_verdict() {
    let out = rnic(&["explore", "--seeds", "50", "--jobs", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("— 50 scenarios"), "{text}");
    for name in scenario::Sometimes::NAMES {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(text.contains("campaign digest: "), "{text}");
    let verdict = if out.status.success() {
        "verdict: PASS"
    } else {
        "verdict: FAIL"
    };
    assert!(text.contains(verdict), "{text}");
}

#[test]
fn replay_prints_the_trace_hash_explore_digested_and_writes_a_mermaid_diagram() {
    let seed = 77;
    let mmd = tmp("replay-77.mmd");
    let out = rnic(&["replay", "--seed", "77", "--mermaid", mmd.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let expected = scenario::run_seed(seed);
    assert!(
        text.contains(&format!("trace hash: {:016x}", expected.trace_hash)),
        "{text}"
    );
    assert_eq!(
        out.status.success(),
        expected.violations.is_empty() && expected.quiescent
    );
    let diagram = std::fs::read_to_string(&mmd).unwrap();
    assert!(diagram.starts_with("sequenceDiagram"), "{diagram}");
}

/// `tshark -r path -T fields -e …` rows, or `None` (after printing SKIP) when tshark is not
/// installed and RNIC_REQUIRE_TSHARK is unset.
fn tshark_fields(path: &std::path::Path, fields: &[&str]) -> Option<Vec<Vec<String>>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(path)
        .args(["-T", "fields", "-E", "occurrence=f"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let Ok(out) = cmd.output() else {
        assert!(
            std::env::var_os("RNIC_REQUIRE_TSHARK").is_none(),
            "RNIC_REQUIRE_TSHARK is set but tshark is not on PATH"
        );
        println!("SKIP replay pcap check: tshark not found on PATH");
        return None;
    };
    assert!(out.status.success(), "tshark failed: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect(),
    )
}

#[test]
fn replay_pcap_decodes_in_tshark_with_the_cm_messages_of_the_history() {
    use rnic_testbed::world::Record;
    // The first seeds whose hosts sent a whole handshake and an orderly disconnect.
    let full = |seed: u64| {
        let r = scenario::replay_seed(seed);
        let sent: Vec<(u16, u32)> = r
            .history
            .entries
            .iter()
            .filter_map(|e| match e.rec {
                Record::Wire { tx: true, msg, .. } if msg.attr != 0 => {
                    Some((msg.attr, msg.local_comm_id))
                }
                _ => None,
            })
            .collect();
        let attrs: Vec<u16> = sent.iter().map(|s| s.0).collect();
        [0x10, 0x13, 0x14, 0x15, 0x16]
            .iter()
            .all(|a| attrs.contains(a))
            .then_some((seed, sent))
    };
    let (seed, sent) = (0..200).find_map(full).expect("a seed with REQ…DREP");
    let pcap = tmp(&format!("replay-{seed}.pcap"));
    let out = rnic(&[
        "replay",
        "--seed",
        &seed.to_string(),
        "--quiet",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert!(out.status.code().is_some(), "{out:?}");
    let fields = [
        "infiniband.bth.destqp",
        "infiniband.mad.attributeid",
        "infiniband.cm.req",
        "infiniband.cm.rep",
        "infiniband.cm.rtu.localcommid",
        "infiniband.cm.dreq.localcommid",
    ];
    let Some(rows) = tshark_fields(&pcap, &fields) else {
        return;
    };
    let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let decoded: Vec<(u16, Option<u32>)> = rows
        .iter()
        .filter(|r| r[0] == "0x000001")
        .map(|r| {
            let attr = hex(&r[1]) as u16;
            let comm = r[2..].iter().find(|f| !f.is_empty()).map(|f| hex(f));
            (attr, comm)
        })
        .collect();
    assert_eq!(
        decoded.len(),
        sent.len(),
        "seed {seed}: {decoded:x?} vs {sent:x?}"
    );
    for ((attr, comm), (want_attr, want_comm)) in decoded.iter().zip(&sent) {
        assert_eq!(attr, want_attr, "seed {seed}");
        if [0x10, 0x13, 0x14, 0x15].contains(attr) {
            assert_eq!(*comm, Some(*want_comm), "seed {seed}, attribute {attr:#x}");
        }
    }
}

mod signals;

use nix::sys::signal::Signal;
use std::time::Duration;

const RNIC: &str = env!("CARGO_BIN_EXE_rnic");
/// Seeds no test waits for: an explore of them ends only when interrupted.
const ENDLESS: u64 = 100_000_000;

/// `rnic explore --seeds ENDLESS --jobs 2 ARGS`, interrupted by `sig` once it has used
/// 0.3 s of CPU (so it has run seeds); what it printed.
fn interrupted_explore(args: &[&str], sig: Signal) -> signals::Ended {
    let seeds = ENDLESS.to_string();
    let mut p = signals::start(
        RNIC,
        &[&["explore", "--seeds", &seeds, "--jobs", "2"], args].concat(),
    );
    p.wait_until("busy", Duration::from_secs(60), |pid| {
        signals::cpu_ticks(pid) >= 30
    });
    p.signal(sig);
    p.end(Duration::from_secs(30))
}

/// The `resume with:` commands of a text summary, each as program and arguments.
fn resume_commands(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter_map(|l| l.strip_prefix("resume with: "))
        .map(|c| c.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Runs `cmd` (a resume command) with `--seeds` replaced by `seeds`, plus `--json`.
fn run_resumed(cmd: &[String], seeds: u64) -> Summary {
    let mut args: Vec<String> = cmd[1..].to_vec();
    let at = args.iter().position(|a| a == "--seeds").unwrap();
    args[at + 1] = seeds.to_string();
    args.push("--json".into());
    let out = Command::new(&cmd[0]).args(&args).output().unwrap();
    serde_json::from_slice(&out.stdout).expect("a JSON summary")
}

#[test]
fn sigint_prints_the_partial_summary_with_a_resume_command_and_exits_130() {
    let out = interrupted_explore(&[], Signal::SIGINT);
    let text = &out.stdout;
    assert_eq!(out.status.code(), Some(130), "{text}\n{}", out.stderr);
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("rnic explore: PARTIAL summary (interrupted by SIGINT): "),
        "{text}"
    );
    assert!(
        first.ends_with(&format!(" of {ENDLESS} seeds run")),
        "{text}"
    );
    // Workers take one seed at a time and finish it: the seeds run are 0..K.
    let k: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("every seed of 0.."))
        .and_then(|l| l.split(' ').next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no `every seed of 0..K` line:\n{text}"));
    assert!(k > 0, "{text}");
    assert!(first.contains(&format!("): {k} of ")), "{text}");
    assert!(text.contains(&format!("— {k} scenarios in ")), "{text}");
    assert!(text.contains("campaign digest: "), "{text}");
    assert!(text.contains("verdict: INCOMPLETE") || text.contains("verdict: FAIL (PARTIAL"));
    let resume = resume_commands(text);
    assert_eq!(resume.len(), 1, "{text}");
    let expected = format!("{RNIC} explore --start {k} --seeds {}", ENDLESS - k);
    assert_eq!(resume[0].join(" "), expected, "{text}");
    // The resume command starts where the interrupted run stopped.
    let next = run_resumed(&resume[0], 20);
    assert_eq!(next.campaign.ranges, [[k, k + 20]]);
    assert!(!next.partial);
}

#[test]
fn sigterm_with_json_prints_a_partial_summary_that_merges_with_its_resumed_run() {
    let out = interrupted_explore(&["--json"], Signal::SIGTERM);
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(v["partial"], true, "{v}");
    assert_eq!(v["interruption"]["signal"], "SIGTERM", "{v}");
    let cut: Summary = serde_json::from_value(v).unwrap();
    let k = cut.campaign.scenarios;
    assert!(k > 0);
    assert_eq!(cut.campaign.ranges, [[0, k]]);
    let i = cut.interruption.clone().unwrap();
    assert_eq!(i.not_run, [[k, ENDLESS]]);
    assert!(out.stderr.contains(&i.resume[0]), "{}", out.stderr);
    // Merged with 20 seeds of its resume command: exactly the campaign of 0..k+20, still
    // partial (the rest is not run), and refused by nothing.
    let cmd: Vec<String> = i.resume[0].split_whitespace().map(str::to_string).collect();
    let next = run_resumed(&cmd, 20);
    let shards = [tmp("cut.json"), tmp("next.json")];
    std::fs::write(&shards[0], &out.stdout).unwrap();
    std::fs::write(&shards[1], serde_json::to_string(&next).unwrap()).unwrap();
    let merged = rnic(&[
        "explore",
        "--json",
        "--merge",
        shards[0].to_str().unwrap(),
        shards[1].to_str().unwrap(),
    ]);
    assert_eq!(merged.status.code(), Some(1), "a partial merge: {merged:?}");
    let merged: Summary = serde_json::from_slice(&merged.stdout).unwrap();
    assert!(merged.partial);
    assert_eq!(merged.interruption.unwrap().not_run, [[k + 20, ENDLESS]]);
    let whole = explore_json(&["--seeds", &(k + 20).to_string()]);
    assert_eq!(merged.campaign, whole.campaign);
}
