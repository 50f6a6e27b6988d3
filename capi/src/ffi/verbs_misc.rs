//! The rest of libibverbs's public calls that have an answer here: `ibv_get_device_index`,
//! `ibv_get_pkey_index`, the fork calls (`ibv_is_fork_initialized`, `ibv_dontfork_range`,
//! `ibv_dofork_range`), sysfs (`ibv_get_sysfs_path`, `ibv_read_sysfs_file`), the rate
//! conversions, `ibv_query_qp_data_in_order`, the legacy `ibv_register_driver`, and the GID
//! entry queries behind `ibv_query_gid_ex`/`ibv_query_gid_table`. Each as rdma-core 44's
//! `libibverbs` (and, for the GID entries, the kernel's `UVERBS_METHOD_QUERY_GID_*`) answers
//! for this device: one port, one RoCE v2 GID, no kernel side.

use super::{fail, guard};
use crate::abi::{__be16, ibv_context, ibv_device, ibv_gid, ibv_qp};
use libc::{c_char, c_int, c_void, size_t};
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// `ibv_get_device_index` (device.c): the kernel's index of the device, −1 for a device with
/// no sysfs entry — as this one, which the kernel does not know.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(_device: *mut ibv_device) -> c_int {
    -1
}

/// `ibv_get_pkey_index` (verbs.c): the index of `pkey` in the port's table, by
/// `ibv_query_pkey` from index 0 until a match or an error (−1 with `errno`).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: __be16,
) -> c_int {
    guard("ibv_get_pkey_index", -1, || {
        for i in 0.. {
            let mut p: __be16 = 0;
            // SAFETY: our own export, with a valid out-pointer.
            let ret = unsafe { super::verbs::ibv_query_pkey(context, port_num, i, &mut p) };
            if ret < 0 {
                return ret;
            }
            if p == pkey {
                return i;
            }
        }
        fail(libc::EINVAL)
    })
}

/// `enum ibv_fork_status`: `IBV_FORK_UNNEEDED`.
const IBV_FORK_UNNEEDED: c_int = 2;

/// `ibv_is_fork_initialized` (memory.c): `IBV_FORK_UNNEEDED` — the simulated RNIC pins
/// nothing, so a fork child never loses registered pages (`ibv_fork_init` is 0 for the same
/// reason).
#[no_mangle]
pub unsafe extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

/// `ibv_dontfork_range` (memory.c): 0, nothing to protect (see [`ibv_is_fork_initialized`]).
#[no_mangle]
pub unsafe extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: size_t) -> c_int {
    0
}

/// `ibv_dofork_range` (memory.c): 0.
#[no_mangle]
pub unsafe extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: size_t) -> c_int {
    0
}

/// `ibv_register_driver` (compat-1_0.c): a no-op, as in rdma-core since version 13.
#[no_mangle]
pub unsafe extern "C" fn ibv_register_driver(_name: *const c_char, _init: *mut c_void) {}

/// `ibv_get_sysfs_path` (sysfs.c): `$SYSFS_PATH` without its trailing slashes (not for a
/// set-uid program), else `/sys`; computed once.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    guard("ibv_get_sysfs_path", c"/sys".as_ptr(), || {
        PATH.get_or_init(|| {
            // SAFETY: getuid/geteuid cannot fail.
            let suid = unsafe { libc::getuid() != libc::geteuid() };
            let env = (!suid)
                .then(|| std::env::var_os("SYSFS_PATH"))
                .flatten()
                .map(|v| {
                    use std::os::unix::ffi::OsStrExt;
                    let mut b = v.as_bytes().to_vec();
                    b.truncate(256); // IBV_SYSFS_PATH_MAX
                    while b.last() == Some(&b'/') {
                        b.pop();
                    }
                    b
                });
            env.and_then(|b| CString::new(b).ok())
                .unwrap_or_else(|| c"/sys".to_owned())
        })
        .as_ptr()
    })
}

/// `ibv_read_sysfs_file` (sysfs.c): reads `dir/file` into `buf` (at most `size` bytes), drops
/// one trailing newline and NUL-terminates; the length, or −1 when the file cannot be read or
/// does not fit with its terminator.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> c_int {
    guard("ibv_read_sysfs_file", -1, || {
        if dir.is_null() || file.is_null() || buf.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: NUL-terminated strings (the caller's contract).
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let data = match std::fs::read(&path) {
            Ok(v) => v,
            Err(e) => return fail(e.raw_os_error().unwrap_or(libc::EIO)),
        };
        let mut len = data.len().min(size);
        let mut out = data[..len].to_vec();
        if len > 0 {
            if out[len - 1] == b'\n' {
                len -= 1;
                out[len] = 0;
            } else if len < size {
                out.push(0);
            } else {
                return -1; // no room for the terminator
            }
        }
        // SAFETY: `buf` is writable for `size` bytes and `out` is at most `size` long.
        unsafe {
            std::ptr::copy_nonoverlapping(out.as_ptr(), buf.cast::<u8>(), out.len().min(size))
        };
        len as c_int
    })
}

/// `enum ibv_rate` and its multiple of 2.5 Gb/s and its Mb/s (verbs.c `ibv_rate_to_mult`,
/// `ibv_rate_to_mbps`; 0 where the rate has no multiple).
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 0, 25781),
    (16, 0, 103125),
    (17, 0, 206250),
    (18, 0, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

/// `ibv_rate_to_mult`: the multiple of 2.5 Gb/s, −1 for a rate without one.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 != 0)
        .map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`: the rate of a multiple of 2.5 Gb/s, `IBV_RATE_MAX` (0) if none.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && r.1 != 0)
        .map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`: the rate in Mb/s, −1 for an unknown rate.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`: the rate of exactly `mbps`, `IBV_RATE_MAX` (0) if none.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// `ibv_query_qp_data_in_order` (verbs.c): 0 — no in-order guarantee is promised, what
/// libibverbs answers for a provider without the op (rxe).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: c_int,
    _flags: u32,
) -> c_int {
    0
}

/// `struct ibv_gid_entry` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

const _: () = assert!(std::mem::size_of::<ibv_gid_entry>() == 32);

/// `IBV_GID_TYPE_ROCE_V2`.
const GID_TYPE_ROCE_V2: u32 = 2;

/// GID entry `index` of `port`, or the errno: `EINVAL` for another port or index (the table
/// has one entry), as the kernel's GID entry query.
fn gid_entry(context: *mut ibv_context, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    let (Ok(p), Ok(i)) = (u8::try_from(port), c_int::try_from(index)) else {
        return Err(libc::EINVAL);
    };
    let mut gid = ibv_gid { raw: [0; 16] };
    // SAFETY: our own export, with a valid out-pointer.
    if unsafe { super::verbs::ibv_query_gid(context, p, i, &mut gid) } != 0 {
        return Err(nix::errno::Errno::last_raw());
    }
    Ok(ibv_gid_entry {
        gid,
        gid_index: index,
        port_num: port,
        gid_type: GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    })
}

/// Copies `e` to `out` as `entry_size` bytes (the caller's struct may be older and shorter).
///
/// # Safety
/// `out` is writable for `entry_size` bytes.
unsafe fn put_entry(e: &ibv_gid_entry, out: *mut u8, entry_size: usize) {
    let n = entry_size.min(std::mem::size_of::<ibv_gid_entry>());
    // SAFETY: `e` is `n` readable bytes; `out` writable for `entry_size` ≥ `n` (caller).
    unsafe { std::ptr::copy_nonoverlapping((e as *const ibv_gid_entry).cast::<u8>(), out, n) };
}

/// `_ibv_query_gid_ex` (`ibv_query_gid_ex`): the GID entry, 0 or the errno (`EINVAL` for
/// flags, which no kernel defines yet, another port or index, or a NULL entry).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: size_t,
) -> c_int {
    guard("_ibv_query_gid_ex", libc::EIO, || {
        if flags != 0 || entry.is_null() {
            return libc::EINVAL;
        }
        match gid_entry(context, port_num, gid_index) {
            // SAFETY: `entry` holds `entry_size` bytes (ibv_query_gid_ex(3)).
            Ok(e) => unsafe {
                put_entry(&e, entry.cast::<u8>(), entry_size);
                0
            },
            Err(e) => e,
        }
    })
}

/// `_ibv_query_gid_table` (`ibv_query_gid_table`): the valid GID entries of every port (one
/// here), or a negative errno (`-EINVAL` for flags, no room, or entries smaller than the
/// kernel's).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: size_t,
    flags: u32,
    entry_size: size_t,
) -> libc::ssize_t {
    guard(
        "_ibv_query_gid_table",
        -(libc::EIO as libc::ssize_t),
        || {
            if flags != 0
                || entries.is_null()
                || max_entries < 1
                || entry_size < std::mem::size_of::<ibv_gid_entry>()
            {
                return -(libc::EINVAL as libc::ssize_t);
            }
            match gid_entry(context, 1, 0) {
                // SAFETY: `entries` holds `max_entries` ≥ 1 entries of `entry_size` bytes.
                Ok(e) => unsafe {
                    put_entry(&e, entries.cast::<u8>(), entry_size);
                    1
                },
                Err(e) => -(e as libc::ssize_t),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_conversions_match_rdma_core() {
        assert_eq!(ibv_rate_to_mult(3), 4); // 10 Gb/s
        assert_eq!(ibv_rate_to_mult(11), -1); // 14 Gb/s: FDR, no multiple
        assert_eq!(mult_to_ibv_rate(12), 4); // 30 Gb/s
        assert_eq!(mult_to_ibv_rate(3), 0);
        assert_eq!(ibv_rate_to_mbps(16), 103125);
        assert_eq!(ibv_rate_to_mbps(0), -1);
        assert_eq!(mbps_to_ibv_rate(2500), 2);
        assert_eq!(mbps_to_ibv_rate(1), 0);
    }
}
