//! The `rnic` command-line tool.
fn main() {}
