//! Seed-swarm throughput: [`run_seed`] = generate a two-host scenario (its own fault rates),
//! run it on the full simulated RNIC with real RoCEv2 encoding, tear it down, and check the
//! history with the oracle. Throughput is in scenarios per second on one core.
//!
//! Run: `cargo bench -p rnic-testbed --bench explore -- --warm-up-time 1 --measurement-time 5`.

// criterion_group! generates an undocumented public fn.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rnic_testbed::scenario::run_seed;

const BATCH: u64 = 1000;

fn explore(c: &mut Criterion) {
    let mut g = c.benchmark_group("explore");
    g.throughput(Throughput::Elements(BATCH));
    let mut base = 0u64;
    g.bench_function("run_seed x1000", |b| {
        b.iter(|| {
            let mut fails = 0u32;
            for s in base..base + BATCH {
                fails += u32::from(!run_seed(s).passed());
            }
            base += BATCH;
            fails
        })
    });
    g.finish();
}

criterion_group!(benches, explore);
criterion_main!(benches);
