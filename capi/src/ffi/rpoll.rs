//! `rpoll` and `rselect` of `<rdma/rsocket.h>`: poll(2) and select(2) over a mix of rsockets
//! and other descriptors ([`api::rpoll`]); with no rsocket among them they are `ppoll(2)`.
//! librspreload's `poll`/`select` call them for every descriptor set of the program.
//!
//! The descriptors are polled with `ppoll(2)`, not `poll(2)`: with librspreload loaded after
//! this library, the symbol `poll` is librspreload's, which would call `rpoll` again.

use super::{fail, guard, rt};
use crate::runtime::rsocket::api;
use libc::{c_int, fd_set, nfds_t, pollfd, timeval};

/// `ppoll(2)` on `list` with a timeout in ms (−1: none).
fn sys_ppoll(list: &mut [pollfd], timeout_ms: i32) -> Result<usize, i32> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::from(timeout_ms.max(0) / 1000),
        tv_nsec: libc::c_long::from(timeout_ms.max(0) % 1000) * 1_000_000,
    };
    let tsp = if timeout_ms < 0 {
        std::ptr::null()
    } else {
        &ts as *const libc::timespec
    };
    // SAFETY: `list` is a valid slice of pollfds for its length; `tsp` is NULL or points to
    // `ts`, alive for the call; no signal mask.
    let n = unsafe {
        libc::ppoll(
            list.as_mut_ptr(),
            list.len() as nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if n < 0 {
        Err(nix::errno::Errno::last_raw())
    } else {
        Ok(n as usize)
    }
}

/// poll(2) over `fds`, rsockets included.
fn poll_all(fds: &mut [pollfd], timeout: c_int) -> Result<usize, i32> {
    let r = rt()?;
    api::rpoll(r, fds, timeout, &mut sys_ppoll)
}

#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    guard("rpoll", -1, || {
        let fds: &mut [pollfd] = if nfds == 0 {
            &mut []
        } else if fds.is_null() {
            return fail(libc::EFAULT);
        } else {
            // SAFETY: poll(2)'s contract: `fds` holds `nfds` pollfds.
            unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
        };
        match poll_all(fds, timeout) {
            Ok(n) => n as c_int,
            Err(e) => fail(e),
        }
    })
}

/// select(2) over rsockets and other descriptors, through `rpoll`: a descriptor in `readfds`
/// is polled for `POLLIN`, in `writefds` for `POLLOUT`, in `exceptfds` for `POLLPRI`, and is
/// reported as Linux's select does (readable: `POLLIN`, `POLLHUP` or `POLLERR`; writable:
/// `POLLOUT` or `POLLERR`; exceptional: `POLLPRI`). The timeout is not updated.
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    guard("rselect", -1, || {
        if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
            return fail(libc::EINVAL);
        }
        // SAFETY: select(2)'s contract: each set is NULL or a valid fd_set.
        let isset =
            |set: *mut fd_set, fd: c_int| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
        let mut fds: Vec<pollfd> = Vec::new();
        for fd in 0..nfds {
            let mut events = 0;
            if isset(readfds, fd) {
                events |= libc::POLLIN;
            }
            if isset(writefds, fd) {
                events |= libc::POLLOUT;
            }
            if isset(exceptfds, fd) {
                events |= libc::POLLPRI;
            }
            if events != 0 {
                fds.push(pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        }
        let ms = if timeout.is_null() {
            -1
        } else {
            // SAFETY: a valid timeval (select(2)'s contract).
            let t = unsafe { &*timeout };
            if t.tv_sec < 0 || t.tv_usec < 0 {
                return fail(libc::EINVAL);
            }
            let ms = t.tv_sec.saturating_mul(1000) + (t.tv_usec as u64).div_ceil(1000) as i64;
            i32::try_from(ms).unwrap_or(i32::MAX)
        };
        if let Err(e) = poll_all(&mut fds, ms) {
            return fail(e);
        }
        if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
            return fail(libc::EBADF);
        }
        for set in [readfds, writefds, exceptfds] {
            if !set.is_null() {
                // SAFETY: a valid fd_set (above).
                unsafe { libc::FD_ZERO(set) };
            }
        }
        let mut count = 0;
        for p in &fds {
            let ask = |bit: i16| p.events & bit != 0;
            let marks = [
                (
                    readfds,
                    ask(libc::POLLIN)
                        && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0,
                ),
                (
                    writefds,
                    ask(libc::POLLOUT) && p.revents & (libc::POLLOUT | libc::POLLERR) != 0,
                ),
                (
                    exceptfds,
                    ask(libc::POLLPRI) && p.revents & libc::POLLPRI != 0,
                ),
            ];
            for (set, on) in marks {
                if on {
                    // SAFETY: a valid fd_set (above); `p.fd` < FD_SETSIZE.
                    unsafe { libc::FD_SET(p.fd, set) };
                    count += 1;
                }
            }
        }
        count
    })
}
