//! Runs seeds 0..n with run_seed, for profilers (development aid).
#![allow(missing_docs)]
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50000);
    let mut f = 0;
    for s in 0..n {
        f += u32::from(!rnic_testbed::scenario::run_seed(s).passed());
    }
    println!("{f}");
}
