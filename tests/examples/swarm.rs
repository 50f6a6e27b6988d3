//! Runs seeds `0..n` and prints failures and the "sometimes" counts (development aid).
#![allow(missing_docs)]
use rnic_testbed::scenario::{run_seed, Sometimes};
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10000);
    let mut counts = [0u64; 7];
    let mut fails = 0;
    for seed in 0..n {
        let r = run_seed(seed);
        for (c, f) in counts.iter_mut().zip(r.sometimes.flags()) {
            *c += u64::from(f);
        }
        if !r.passed() {
            fails += 1;
            if fails <= 3 {
                println!("FAIL seed {} q={} {}", seed, r.quiescent, r.faults);
                for v in &r.violations {
                    println!("  {v}");
                }
            }
        }
    }
    println!("{fails} of {n} failed");
    for (name, c) in Sometimes::NAMES.iter().zip(counts) {
        println!("{name}: {c}");
    }
}
