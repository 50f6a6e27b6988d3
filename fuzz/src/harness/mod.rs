//! The bodies of the fuzz targets, as plain functions over bytes.
//!
//! Two callers compile this module: the cargo-fuzz targets in `fuzz/fuzz_targets/` (through
//! the `rnic-fuzz` library, `fuzz/src/lib.rs`) and the stable corpus-replay test
//! `tests/tests/fuzz_corpus.rs` (through `#[path]`), which runs every file under
//! `fuzz/corpus/<target>/` and `fuzz/artifacts/<target>/` as a regular test. So this module
//! names only crates both have: `rnic-sim`, `cm-core`, `verbs-core`, `bytes`, and for
//! `capi_calls` `rnic-capi` (`rnic`) and `tracing`; and it has no `unsafe` (`rnic-testbed`
//! forbids it).
//!
//! Every body is total on its input: any byte string is a valid input, and a panic means a
//! bug was found (in the code under test, or in the harness's own checks). See
//! `fuzz/README.md` for what each target feeds and checks.

pub mod capi_calls;
pub mod cm_engine;
pub mod input;
pub mod mad_decode;
pub mod rc_responder;
pub mod roce_decode;

/// The targets, by the name of their `fuzz/fuzz_targets/<name>.rs` and corpus directory.
pub const TARGETS: [&str; 5] = [
    "roce_decode",
    "mad_decode",
    "cm_engine",
    "rc_responder",
    "capi_calls",
];

/// Runs target `name` on `data`; `false` when no target has that name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "roce_decode" => roce_decode::run(data),
        "mad_decode" => mad_decode::run(data),
        "cm_engine" => cm_engine::run(data),
        "rc_responder" => rc_responder::run(data),
        "capi_calls" => capi_calls::run(data),
        _ => return false,
    }
    true
}
