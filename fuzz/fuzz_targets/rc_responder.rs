//! cargo-fuzz target `rc_responder`: the body is `rnic_fuzz::harness::rc_responder::run` (fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rnic_fuzz::harness::rc_responder::run(data));
