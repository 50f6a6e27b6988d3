//! cargo-fuzz target `roce_decode`: the body is `rnic_fuzz::harness::roce_decode::run` (fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rnic_fuzz::harness::roce_decode::run(data));
