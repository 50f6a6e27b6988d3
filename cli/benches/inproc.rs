//! Criterion's view of `rnic bench --only inproc`: the same in-process 64 KiB RDMA WRITE
//! (`rnic_cli::bench::inproc::WritePair`, ICRC checked, path MTU 4096) and the same
//! page-aligned memcpy baselines (`AlignedBuf`), with criterion's statistics instead of the
//! CLI's own timing — a cross-check of the table's in-process rows.
//!
//! Run: `cargo bench -p rnic-cli --bench inproc -- --warm-up-time 1 --measurement-time 3`.
//! (`rnic-sim/benches/transport.rs` has the data path's variants: ICRC off, `Simulation`,
//! 64-byte SENDs.)

// A benchmark is not library code: a failed setup should abort it loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]
// criterion_group! generates an undocumented public fn.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rnic_cli::bench::baseline::AlignedBuf;
use rnic_cli::bench::inproc::WritePair;

const WRITE_LEN: usize = 64 * 1024;
const MEMCPY_BIG: usize = 64 << 20;

fn memcpy(c: &mut Criterion, name: &str, len: usize) {
    let mut g = c.benchmark_group("inproc_baselines");
    g.throughput(Throughput::Bytes(len as u64));
    let src = AlignedBuf::new(len, 0x5a);
    let mut dst = AlignedBuf::new(len, 0xa5);
    g.bench_function(name, |b| {
        b.iter(|| {
            dst.as_mut_slice()
                .copy_from_slice(black_box(src.as_slice()));
            black_box(dst.as_slice());
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("inproc_write_64k");
    g.throughput(Throughput::Bytes(WRITE_LEN as u64));
    g.bench_function("rdma_write_icrc_on", |b| {
        let mut pair = WritePair::new(WRITE_LEN).expect("pair");
        b.iter(|| pair.write().expect("write"));
    });
    g.finish();
    memcpy(c, "memcpy_64k_aligned", WRITE_LEN);
    memcpy(c, "memcpy_64m_aligned", MEMCPY_BIG);
}

criterion_group!(benches, bench);
criterion_main!(benches);
