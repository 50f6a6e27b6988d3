//! One `librnic.so`, whatever the command that built it: a dependency that rnic-capi shares
//! with another member of the workspace is declared once, in the workspace's
//! `[workspace.dependencies]` (`name.workspace = true` in each member), so that
//! `cargo build --release -p rnic-capi` and `cargo build --release` (the README's) give it the
//! same features and build the same library — not two that differ (e.g. one whose log writes
//! ANSI colours) and rebuild each other's on every switch.

use std::collections::BTreeMap;
use std::path::Path;

/// The `[dependencies]` of a manifest (and of its `[target.….dependencies]`): name → the text
/// after the name (`.workspace = true`, `= { version = … }`, …).
fn dependencies(manifest: &Path) -> BTreeMap<String, String> {
    let text =
        std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut deps = BTreeMap::new();
    let mut in_deps = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]"
                || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let end = line.find(['.', ' ', '=']).unwrap_or(line.len());
        let (name, rest) = line.split_at(end);
        deps.insert(name.to_string(), rest.trim().to_string());
    }
    deps
}

#[test]
fn dependencies_rnic_capi_shares_are_declared_once_in_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let capi = dependencies(&root.join("capi/Cargo.toml"));
    assert!(capi.contains_key("nix"), "{capi:?}");
    let members = [
        "cli",
        "rnic-sim",
        "cm-core",
        "verbs-core",
        "verbs-abi",
        "tests",
        "hw",
    ];
    let mut bad = Vec::new();
    for member in members {
        let theirs = dependencies(&root.join(member).join("Cargo.toml"));
        for (name, spec) in &capi {
            let Some(other) = theirs.get(name) else {
                continue;
            };
            // `.workspace = true`, `{ workspace = true, optional = true }`, a path.
            let shared = |s: &str| s.contains("workspace = true") || s.contains("path =");
            if !(shared(spec) && shared(other)) && spec != other {
                bad.push(format!("{name}: rnic-capi `{spec}`, {member} `{other}`"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "declare these in [workspace.dependencies] (one set of features):\n{}",
        bad.join("\n")
    );
}
