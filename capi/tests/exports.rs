//! librnic.so exports every public symbol of the installed librdmacm and libibverbs, so that
//! no call of a program reaches the real libraries with librnic's objects (docs/capi.md,
//! "Exports"). Compares `nm -D --defined-only` of librnic.so with that of
//! `librdmacm.so.1` and `libibverbs.so.1` (Debian 12: rdma-core 44) and prints what is
//! missing:
//!
//! * every symbol of a public version (`RDMACM_1.*`, `IBVERBS_1.*`) must be exported;
//! * the providers' interface (version `IBVERBS_PRIVATE_*`: `ibv_cmd_*`, `verbs_*`,
//!   `execute_ioctl`, …) must NOT be exported, but for [`PRIVATE_EXPORTED`]: a provider
//!   library a program loads (libefa through libfabric, libmlx5 through UCX) binds its calls
//!   to them, and a stub here would swallow a real provider's registration and commands in a
//!   process that also drives real hardware through a libibverbs of its own; none of them is
//!   called with an object of librnic.
//!
//! Without the libraries or `nm` it prints `SKIP`, unless `RNIC_REQUIRE_RDMA_TOOLS=1` (CI).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Symbols of `IBVERBS_PRIVATE_*` librnic does export: `ibv_devinfo -v` calls it, and it
/// takes the application's context, not a provider's.
const PRIVATE_EXPORTED: [&str; 1] = ["ibv_query_gid_type"];

/// The installed libraries, by the directories distributions use.
fn library(name: &str) -> Option<PathBuf> {
    let arch = std::env::consts::ARCH;
    [
        format!("/usr/lib/{arch}-linux-gnu"),
        "/usr/lib64".to_string(),
        "/usr/lib".to_string(),
    ]
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|p| p.exists())
}

/// `librnic.so`: `RNIC_LIB`, else the cdylib cargo built with this test.
fn librnic() -> PathBuf {
    if let Some(lib) = std::env::var_os("RNIC_LIB") {
        return PathBuf::from(lib);
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let deps = exe
        .parent()
        .unwrap_or_else(|| panic!("{} has no parent", exe.display()));
    let found = [Some(deps), deps.parent()]
        .into_iter()
        .flatten()
        .map(|d| d.join("librnic.so"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| {
        panic!(
            "librnic.so not found beside {}; build rnic-capi",
            deps.display()
        )
    })
}

/// Defined dynamic symbols of `lib`: name → version (empty when unversioned). Version nodes
/// (type `A`) are left out.
fn symbols(lib: &Path) -> Result<BTreeMap<String, String>, String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .map_err(|e| format!("cannot run nm (binutils): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nm -D {}: {}",
            lib.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let (kind, sym) = (*w.get(1)?, *w.get(2)?);
            if kind == "A" {
                return None;
            }
            let (name, ver) = match sym.split_once('@') {
                Some((n, v)) => (n, v.trim_start_matches('@')),
                None => (sym, ""),
            };
            Some((name.to_string(), ver.to_string()))
        })
        .collect())
}

fn required() -> bool {
    std::env::var("RNIC_REQUIRE_RDMA_TOOLS").is_ok_and(|v| !v.is_empty() && v != "0")
}

#[test]
fn librnic_exports_the_public_rdma_core_symbols() {
    let libs: Vec<(&str, Option<PathBuf>)> = ["librdmacm.so.1", "libibverbs.so.1"]
        .iter()
        .map(|n| (*n, library(n)))
        .collect();
    let missing_libs: Vec<&str> = libs
        .iter()
        .filter(|(_, p)| p.is_none())
        .map(|(n, _)| *n)
        .collect();
    if !missing_libs.is_empty() {
        assert!(
            !required(),
            "{} not installed and RNIC_REQUIRE_RDMA_TOOLS is set",
            missing_libs.join(", ")
        );
        println!(
            "SKIP exports: {} not installed (librdmacm1, libibverbs1)",
            missing_libs.join(", ")
        );
        return;
    }
    let ours = match symbols(&librnic()) {
        Ok(s) => s,
        Err(e) if !required() => {
            println!("SKIP exports: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let mut missing = Vec::new();
    let mut wrongly_exported = Vec::new();
    for (name, path) in &libs {
        let Some(path) = path else { continue };
        let theirs = symbols(path).unwrap_or_else(|e| panic!("{e}"));
        let (mut public, mut private) = (0, 0);
        for (sym, ver) in &theirs {
            let exported = ours.contains_key(sym);
            if ver.contains("PRIVATE") {
                private += 1;
                if exported && !PRIVATE_EXPORTED.contains(&sym.as_str()) {
                    wrongly_exported.push(format!("{sym}@{ver} ({name})"));
                }
                continue;
            }
            public += 1;
            if exported {
                continue;
            }
            missing.push(format!("{sym}@{ver} ({name})"));
        }
        println!(
            "{name}: {public} public symbols, {} exported by librnic.so; {private} provider-private, \
             {} of them exported ({})",
            public - missing.iter().filter(|m| m.ends_with(&format!("({name})"))).count(),
            PRIVATE_EXPORTED.iter().filter(|p| theirs.contains_key(**p)).count(),
            PRIVATE_EXPORTED.join(", ")
        );
    }
    assert!(
        missing.is_empty(),
        "librnic.so does not export {} public symbol(s) of the installed libraries (a program \
         calling one runs the real library on librnic's objects):\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
    assert!(
        wrongly_exported.is_empty(),
        "librnic.so exports provider-private symbols (docs/capi.md, \"Exports\": a stub would \
         capture a real provider's calls):\n  {}",
        wrongly_exported.join("\n  ")
    );
}
