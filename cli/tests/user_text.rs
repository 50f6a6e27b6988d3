//! What a user reads — README.md, docs/ (but docs/design/, copies of the design documents),
//! the help and messages of `rnic` (cli/src) and the docs of librnic (capi/src) — names no
//! issue of the tracker ("issue 12"), no work round ("round 2"), no file outside the
//! repository (`shared/…`, `/work/…`) and no placeholder URL (`example.invalid`): none of them
//! means anything to a reader of this repository. Plain `//` comments in the code are for its
//! developers and are not checked.

use std::path::{Path, PathBuf};

/// Why `line` is not for a user, if it is not.
fn offence(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    for (word, why) in [
        ("issue", "an issue number"),
        ("issues", "issue numbers"),
        ("round", "a work round"),
        ("deliverable", "a deliverable of an issue"),
    ] {
        let mut rest = lower.as_str();
        while let Some(at) = rest.find(word) {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + word.len()..];
            let whole_word = !before.is_some_and(char::is_alphanumeric);
            let number = after
                .strip_prefix([' ', '-', '#'])
                .map(|a| a.trim_start_matches('#'))
                .is_some_and(|a| a.starts_with(|c: char| c.is_ascii_digit()));
            if whole_word && number {
                return Some(why);
            }
            rest = &rest[at + word.len()..];
        }
    }
    if lower.contains("example.invalid") {
        return Some("a placeholder URL");
    }
    let outside = ["../shared", "`shared/", " shared/", "(shared/", "/work/"];
    if outside.iter().any(|o| lower.contains(o)) {
        return Some("a file outside the repository");
    }
    None
}

fn files(dir: &Path, ext: &str, skip: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let path = e
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path == skip {
            continue;
        }
        if path.is_dir() {
            files(&path, ext, skip, out);
        } else if path.extension().is_some_and(|x| x == ext) {
            out.push(path);
        }
    }
}

#[test]
fn user_facing_text_names_no_issue_round_outside_file_or_placeholder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs = vec![root.join("README.md")];
    files(
        &root.join("docs"),
        "md",
        &root.join("docs/design"),
        &mut docs,
    );
    let mut code = Vec::new();
    for dir in ["cli/src", "capi/src"] {
        files(&root.join(dir), "rs", Path::new(""), &mut code);
    }
    assert!(docs.len() > 5 && code.len() > 20, "{docs:?} {code:?}");
    let mut found = Vec::new();
    for (path, is_code) in docs
        .iter()
        .map(|p| (p, false))
        .chain(code.iter().map(|p| (p, true)))
    {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if is_code && t.starts_with("//") && !t.starts_with("///") && !t.starts_with("//!") {
                continue; // a developer's comment
            }
            if let Some(why) = offence(line) {
                let shown = path.strip_prefix(&root).unwrap_or(path);
                found.push(format!("{}:{}: {why}: {}", shown.display(), n + 1, t));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_check_finds_what_it_is_for() {
    for bad in [
        "Measures issue 13's goals",
        "(Issue 25) from the peer",
        "before the issue-13 work",
        "as in round 2",
        "see `shared/docs/TESTING.md`",
        "cross-check with ../shared/bench",
        "https://example.invalid/rnic",
    ] {
        assert!(offence(bad).is_some(), "{bad}");
    }
    for good in [
        "a known issue: the kernel",
        "round trips: 4",
        "rounds 1..3",
        "the round's figures",
        "shared receive queue",
        "rnic-shared/",
    ] {
        assert_eq!(offence(good), None, "{good}");
    }
}
