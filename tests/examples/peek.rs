//! Prints one seed's replay trace (development aid).
#![allow(missing_docs)]
fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let r = rnic_testbed::scenario::replay_seed(seed);
    print!("{}", r.trace());
}
