//! Timing experiments for the swarm (development aid).
#![allow(missing_docs, clippy::disallowed_methods, clippy::unwrap_used)] // wall clock: a measurement tool
use rnic_testbed::scenario::{run, run_seed, scenario_of};
use rnic_testbed::world::{World, WorldConfig};
use std::time::Instant;
fn main() {
    let n = 20000u64;
    let t = Instant::now();
    for s in 0..n {
        std::hint::black_box(World::new(WorldConfig::two_hosts(s)).unwrap());
    }
    println!(
        "World::new: {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for s in 0..n {
        std::hint::black_box(scenario_of(s));
    }
    println!(
        "generate: {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for s in 0..n {
        std::hint::black_box(scenario_of(s).describe());
    }
    println!(
        "generate+describe: {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    let mut recs = 0;
    let mut steps = 0u64;
    for s in 0..n {
        let w = run(&scenario_of(s), false).unwrap();
        recs += w.history().entries.len();
        steps += w.sim().steps();
    }
    println!(
        "generate+run: {:.2} us, {:.1} records/seed",
        t.elapsed().as_secs_f64() * 1e6 / n as f64,
        recs as f64 / n as f64
    );
    println!("steps/seed {:.1}", steps as f64 / n as f64);
    let mut per: Vec<(u64, u64, u128)> = Vec::new();
    for s in 0..n {
        let t = Instant::now();
        let w = run(&scenario_of(s), false).unwrap();
        per.push((w.sim().steps(), s, t.elapsed().as_nanos()));
    }
    per.sort_by_key(|p| std::cmp::Reverse(p.2));
    let total: u128 = per.iter().map(|p| p.2).sum();
    let top: u128 = per.iter().take((n / 100) as usize).map(|p| p.2).sum();
    println!(
        "top 1% of seeds take {:.1}% of the time; worst: {:?}",
        top as f64 * 100.0 / total as f64,
        &per[..5]
    );
    let mut by_steps = per.clone();
    by_steps.sort_by_key(|p| p.0);
    println!(
        "median steps {} p90 {} p99 {}",
        by_steps[per.len() / 2].0,
        by_steps[per.len() * 9 / 10].0,
        by_steps[per.len() * 99 / 100].0
    );
    let t = Instant::now();
    for s in 0..n {
        std::hint::black_box(run_seed(s));
    }
    println!(
        "run_seed: {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
#[allow(dead_code)]
fn unused() {}
