//! cargo-fuzz target `mad_decode`: the body is `rnic_fuzz::harness::mad_decode::run` (fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rnic_fuzz::harness::mad_decode::run(data));
