//! cargo-fuzz target `capi_calls`: the body is `rnic_fuzz::harness::capi_calls::run` (fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rnic_fuzz::harness::capi_calls::run(data));
