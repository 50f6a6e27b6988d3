//! cargo-fuzz target `cm_engine`: the body is `rnic_fuzz::harness::cm_engine::run` (fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rnic_fuzz::harness::cm_engine::run(data));
