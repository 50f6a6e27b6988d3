//! Whether a range of this process's address space can be registered: what the kernel's
//! `ib_umem_get` finds when it pins the pages (`pin_user_pages_fast` with `FOLL_WRITE` when the
//! access is writable, `ib_access_writable`: LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC or
//! MW_BIND). A page not mapped, or mapped without the protection the pin needs (`check_vma_flags`
//! in mm/gup.c: `VM_WRITE` for a write pin, `VM_READ` otherwise), fails the pin with `EFAULT`,
//! which `ibv_reg_mr` returns as NULL with `errno` EFAULT. Read from `/proc/self/maps`: safe
//! code, and a registration is not on a fast path.

use std::io;

/// The page size the check rounds to (x86-64).
const PAGE: u64 = 4096;

/// Why a range cannot be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfit {
    /// Some page of it is not mapped.
    Unmapped,
    /// Some page is mapped without the protection asked (read, or write).
    Protection,
}

/// Checks that every page of `[addr, addr + len)` is mapped readable (and writable when
/// `write`). `Ok` when the maps cannot be read (nothing to say: the registration goes on, as it
/// did before this check).
///
/// # Errors
/// [`Unfit`] naming the first problem, for `EFAULT`.
pub fn check(addr: u64, len: u64, write: bool) -> Result<(), Unfit> {
    match std::fs::read_to_string("/proc/self/maps") {
        Ok(maps) => check_in(&maps, addr, len, write),
        Err(e) => {
            note_unreadable(&e);
            Ok(())
        }
    }
}

fn note_unreadable(e: &io::Error) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| tracing::warn!(error = %e, "/proc/self/maps unreadable: ibv_reg_mr cannot check that its range is mapped"));
}

/// [`check`] against the text of a maps file.
fn check_in(maps: &str, addr: u64, len: u64, write: bool) -> Result<(), Unfit> {
    if len == 0 {
        return Ok(());
    }
    let start = addr & !(PAGE - 1);
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_add(PAGE - 1))
        .map(|e| e & !(PAGE - 1))
        .ok_or(Unfit::Unmapped)?;
    let mut at = start;
    for (lo, hi, perms) in maps.lines().filter_map(parse) {
        if hi <= at {
            continue;
        }
        if lo > at {
            break; // a hole before `at` is covered
        }
        let ok = if write {
            perms.as_bytes().get(1) == Some(&b'w')
        } else {
            perms.as_bytes().first() == Some(&b'r')
        };
        if !ok {
            return Err(Unfit::Protection);
        }
        at = hi;
        if at >= end {
            return Ok(());
        }
    }
    Err(Unfit::Unmapped)
}

/// `start-end perms …` → (start, end, perms).
fn parse(line: &str) -> Option<(u64, u64, &str)> {
    let mut words = line.split_ascii_whitespace();
    let (lo, hi) = words.next()?.split_once('-')?;
    let perms = words.next()?;
    Some((
        u64::from_str_radix(lo, 16).ok()?,
        u64::from_str_radix(hi, 16).ok()?,
        perms,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00401000 r-xp 00000000 08:01 1 /bin/x
10000000-10002000 rw-p 00000000 00:00 0
10002000-10003000 r--p 00000000 00:00 0
10003000-10004000 ---p 00000000 00:00 0
10004000-10005000 rw-p 00000000 00:00 0 [heap]
";

    #[test]
    fn ranges_are_checked_page_by_page_across_mappings() {
        assert_eq!(check_in(MAPS, 0x1000_0010, 0x1ff0, true), Ok(()));
        assert_eq!(check_in(MAPS, 0x1000_0000, 0x3000, false), Ok(()));
        assert_eq!(
            check_in(MAPS, 0x1000_1000, 0x2000, true),
            Err(Unfit::Protection)
        );
        assert_eq!(
            check_in(MAPS, 0x1000_2800, 0x1000, false),
            Err(Unfit::Protection)
        );
        assert_eq!(
            check_in(MAPS, 0x1000_4000, 0x2000, true),
            Err(Unfit::Unmapped)
        );
        assert_eq!(check_in(MAPS, 0x2000_0000, 1, false), Err(Unfit::Unmapped));
        assert_eq!(check_in(MAPS, 0x0040_0000, 16, false), Ok(()));
        assert_eq!(
            check_in(MAPS, 0x0040_0000, 16, true),
            Err(Unfit::Protection)
        );
        assert_eq!(
            check_in(MAPS, u64::MAX - 5, 10, false),
            Err(Unfit::Unmapped)
        );
    }

    #[test]
    fn this_process_has_its_stack_and_not_page_zero() {
        let x = [1u8; 64];
        assert_eq!(check(x.as_ptr() as u64, 64, true), Ok(()));
        assert_eq!(check(16, 64, false), Err(Unfit::Unmapped));
    }
}
