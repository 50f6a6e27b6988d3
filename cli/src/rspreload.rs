//! `rnic exec --rsockets`: rdma-core's `librspreload.so`, which turns an unmodified program's
//! TCP sockets into rsockets (`<rdma/rsocket.h>`), preloaded after `librnic.so`, so that those
//! rsockets run on the program's simulated RNIC (docs/capi.md, "rsockets").
//!
//! Order: `librnic.so` first. librspreload finds the rsocket calls with `dlsym(RTLD_DEFAULT)`,
//! which sees librnic's (both orders work for that); with librnic first, every libibverbs
//! and librdmacm symbol of the program resolves to librnic whatever librspreload pulls in.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// The library's file name.
pub const RSPRELOAD_NAME: &str = "librspreload.so";

/// Overrides where `--rsockets` finds the library.
pub const RSPRELOAD_ENV: &str = "RNIC_RSPRELOAD";

/// The directories distributions install it in (Debian/Ubuntu multiarch, Fedora/RHEL, others).
fn candidates() -> Vec<PathBuf> {
    let arch = std::env::consts::ARCH;
    [
        format!("/usr/lib/{arch}-linux-gnu/rsocket"),
        "/usr/lib64/rsocket".to_string(),
        "/usr/lib/rsocket".to_string(),
        "/usr/local/lib/rsocket".to_string(),
    ]
    .into_iter()
    .map(|d| PathBuf::from(d).join(RSPRELOAD_NAME))
    .collect()
}

/// Where `librspreload.so` is: `$RNIC_RSPRELOAD`, else the first of the usual places.
///
/// # Errors
/// Not found: the message names the package and the variable.
pub fn find_rspreload() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(RSPRELOAD_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{RSPRELOAD_ENV}={}: no such file", p.display()))
        };
    }
    let tried = candidates();
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "--rsockets: {RSPRELOAD_NAME} not found (tried {}); install rdma-core's librdmacm \
             (Debian: librdmacm1) or name it with {RSPRELOAD_ENV}",
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// The `LD_PRELOAD` entries that follow librnic's: librspreload first, then what the
/// environment already preloads.
pub fn after_librnic(rspreload: &OsStr, existing: Option<OsString>) -> OsString {
    match existing.filter(|e| !e.is_empty()) {
        Some(e) => [rspreload, e.as_os_str()].join(OsStr::new(":")),
        None => rspreload.to_os_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rspreload_comes_right_after_librnic_and_before_the_rest() {
        let rs = OsStr::new("/r/librspreload.so");
        assert_eq!(
            after_librnic(rs, None),
            OsString::from("/r/librspreload.so")
        );
        assert_eq!(
            after_librnic(rs, Some("".into())),
            OsString::from("/r/librspreload.so")
        );
        assert_eq!(
            after_librnic(rs, Some("/y/other.so".into())),
            OsString::from("/r/librspreload.so:/y/other.so")
        );
    }
}
