//! The fuzz targets' bodies ([`harness`]), shared with the stable corpus-replay test
//! `tests/tests/fuzz_corpus.rs`. The targets in `fuzz_targets/` only call
//! [`harness::run`]-style entry points. See `fuzz/README.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod harness;
