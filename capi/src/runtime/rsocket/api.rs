//! The rsocket calls as the application makes them: each runs its step on the node
//! ([`Runtime::with`]) and, when that step would block and the socket is blocking, waits on
//! the socket's readiness descriptor outside the lock and tries again — the blocking and
//! `O_NONBLOCK`/`MSG_DONTWAIT` behaviours of rsocket.c. Errors are errno values; the C entry
//! points (`ffi`) turn them into −1 + `errno`.

use super::{How, Rsockets};
use crate::runtime::{Ends, Node, Runtime, Signal};
use cm_core::api::RdmaCm;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rnic_sim::{ExternalMemory, SimDevice};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use verbs_core::SimTime;

/// How long `rshutdown`/`rclose` wait for queued bytes to reach the peer before they give up
/// and disconnect anyway (rsocket.c waits for its posted sends without bound; here bytes may
/// also wait for credits, which a peer that stops reading never returns).
pub const LINGER_NS: u64 = 10_000_000_000;

/// `ppoll(2)` as `rpoll` is given it: descriptors, a timeout in ms (−1: none) → how many
/// have events, or the errno.
pub type Ppoll<'a> = &'a mut dyn FnMut(&mut [libc::pollfd], i32) -> Result<usize, i32>;

/// Which readiness descriptor a blocked call waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// `POLLIN` (reads, accepts).
    In,
    /// `POLLOUT` (writes, connects, the drain of a shutdown).
    Out,
}

fn layer(n: &mut Node) -> (&mut Rsockets, &mut RdmaCm, &mut SimDevice) {
    n.rsockets()
}

/// Waits until `ends` is readable, at most `timeout_ms` (−1: no bound).
///
/// # Errors
/// `EINTR` when a signal interrupts the wait; another `poll(2)` error.
fn wait(ends: &Ends, timeout_ms: i32) -> Result<(), i32> {
    let mut fds = [PollFd::new(ends.app_fd(), PollFlags::POLLIN)];
    let t = PollTimeout::try_from(timeout_ms).unwrap_or(PollTimeout::NONE);
    poll(&mut fds, t).map(|_| ()).map_err(|e| e as i32)
}

/// Runs `op` on the layer until it does not fail with `EAGAIN`, waiting on `fd`'s `dir`
/// descriptor between tries; with `nonblock` (or `O_NONBLOCK` on the socket) `EAGAIN` is
/// returned.
fn blocking<T>(
    r: &Runtime,
    fd: RawFd,
    nonblock: bool,
    dir: Dir,
    mut op: impl FnMut(&mut Rsockets, &mut RdmaCm, &mut SimDevice, SimTime) -> Result<T, i32>,
) -> Result<T, i32> {
    loop {
        let (res, ends) = r.with(|n, now| {
            let (rs, cm, dev) = layer(n);
            let res = op(rs, cm, dev, now);
            let block = matches!(res, Err(libc::EAGAIN))
                && !nonblock
                && rs.get(fd).is_ok_and(|s| !s.nonblocking());
            let ends = if block { rs.ends(fd).ok() } else { None };
            (res, ends)
        });
        match (res, ends) {
            (Err(libc::EAGAIN), Some((rd, wr))) => {
                wait(if dir == Dir::In { &rd } else { &wr }, -1)?
            }
            (Err(libc::EAGAIN), None) => {
                // A non-blocking caller usually tries again at once (rstream spins): let the
                // progress thread, which moves the data, have the CPU first.
                std::thread::yield_now();
                return Err(libc::EAGAIN);
            }
            (res, _) => return res,
        }
    }
}

/// Two readiness descriptors for a new socket.
fn signals() -> Result<(Signal, Signal), i32> {
    let e = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EMFILE);
    Ok((Signal::new().map_err(e)?, Signal::new().map_err(e)?))
}

/// `rsocket(domain, type, protocol)`: `AF_INET`/`AF_INET6` stream sockets (`SOCK_NONBLOCK`
/// and `SOCK_CLOEXEC` accepted in `type`; protocol 0 or `IPPROTO_TCP`). Returns the socket's
/// number.
///
/// # Errors
/// `ENOTSUP` for another domain, type or protocol (`SOCK_DGRAM` included: UD rsockets are not
/// implemented), as rsocket.c for what it does not know; `EMFILE` when no descriptor is left.
pub fn rsocket(r: &Runtime, domain: i32, ty: i32, protocol: i32) -> Result<RawFd, i32> {
    let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let v6 = match domain {
        libc::AF_INET => false,
        libc::AF_INET6 => true,
        _ => return Err(libc::ENOTSUP),
    };
    if base != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
        return Err(libc::ENOTSUP);
    }
    let flags = if ty & libc::SOCK_NONBLOCK != 0 {
        libc::O_NONBLOCK | libc::O_RDWR
    } else {
        libc::O_RDWR
    };
    let sig = signals()?;
    r.with(|n, _| {
        let (rs, cm, dev) = layer(n);
        rs.create(cm, dev, v6, flags, sig)
    })
}

/// `rbind`.
///
/// # Errors
/// [`Rsockets::bind`]'s.
pub fn rbind(r: &Runtime, fd: RawFd, addr: SocketAddr) -> Result<(), i32> {
    r.with(|n, _| {
        let (rs, cm, _) = layer(n);
        rs.bind(cm, fd, addr)
    })
}

/// `rlisten`.
///
/// # Errors
/// [`Rsockets::listen`]'s.
pub fn rlisten(r: &Runtime, fd: RawFd, backlog: i32) -> Result<(), i32> {
    r.with(|n, _| {
        let (rs, cm, _) = layer(n);
        rs.listen(cm, fd, backlog)
    })
}

/// `raccept`: the next established connection (waiting for one unless non-blocking) with its
/// number and peer address.
///
/// # Errors
/// `EBADF` (also for a socket that is not listening); `EAGAIN` on a non-blocking listener with
/// no connection; `EINTR`; `EMFILE`.
pub fn raccept(r: &Runtime, fd: RawFd) -> Result<(RawFd, Option<SocketAddr>), i32> {
    let h = blocking(r, fd, false, Dir::In, |rs, _, _, _| rs.take_accepted(fd))?;
    let sig = match signals() {
        Ok(s) => s,
        Err(e) => {
            // Without a number the connection cannot be used: close it.
            r.with(|n, now| {
                let (rs, cm, dev) = layer(n);
                rs.destroy(cm, dev, now, h);
            });
            return Err(e);
        }
    };
    Ok(r.with(|n, _| {
        let (rs, cm, _) = layer(n);
        rs.attach_accepted(cm, h, sig)
    }))
}

/// `rconnect`: connects (waiting unless non-blocking: then `EINPROGRESS`, and `rpoll` reports
/// `POLLOUT` once it is done, with `SO_ERROR` set on failure).
///
/// # Errors
/// [`Rsockets::connect`]'s; `EINPROGRESS`; the connect's error (`ECONNREFUSED`,
/// `ETIMEDOUT`, …); `EINTR`.
pub fn rconnect(r: &Runtime, fd: RawFd, addr: SocketAddr) -> Result<(), i32> {
    let (done, nonblock) = r.with(|n, _| {
        let (rs, cm, _) = layer(n);
        let done = rs.connect(cm, fd, addr);
        (done, rs.get(fd).is_ok_and(|s| s.nonblocking()))
    });
    if done? {
        return Ok(());
    }
    if nonblock {
        // rsocket.c: the resolution is under way (its channel is non-blocking).
        return Err(libc::EINPROGRESS);
    }
    let status = |rs: &mut Rsockets, _: &mut RdmaCm, _: &mut SimDevice, _: SimTime| match rs
        .connect_status(fd)
    {
        Ok(true) => Ok(()),
        Ok(false) => Err(libc::EAGAIN),
        Err(e) => Err(e),
    };
    blocking(r, fd, false, Dir::Out, status)
}

/// `rrecv`/`rread` (`MSG_PEEK`, `MSG_DONTWAIT`, `MSG_WAITALL`): at least one byte (all of
/// them with `MSG_WAITALL`, unless end-of-file comes first), 0 at end-of-file.
///
/// # Errors
/// [`Rsockets::recv`]'s (`EAGAIN` only when non-blocking); `EINTR`.
pub fn rrecv(r: &Runtime, fd: RawFd, buf: &mut [u8], flags: i32) -> Result<usize, i32> {
    let peek = flags & libc::MSG_PEEK != 0;
    let nonblock = flags & libc::MSG_DONTWAIT != 0;
    let all = flags & libc::MSG_WAITALL != 0 && !peek;
    let mut done = 0;
    loop {
        let rest = &mut buf[done..];
        let res = blocking(r, fd, nonblock, Dir::In, |rs, _, dev, _| {
            rs.recv(dev, fd, rest, peek)
        });
        match res {
            Ok(0) => return Ok(done),
            Ok(n) => {
                done += n;
                if !all || done == buf.len() {
                    return Ok(done);
                }
            }
            Err(e) if done > 0 && e != libc::EBADF => return Ok(done),
            Err(e) => return Err(e),
        }
    }
}

/// `rsend`/`rwrite` (`MSG_DONTWAIT`): blocking, every byte is queued before it returns;
/// non-blocking, as many as fit (`EAGAIN` if none).
///
/// # Errors
/// [`Rsockets::send`]'s; `EINTR`.
pub fn rsend(r: &Runtime, fd: RawFd, data: &[u8], flags: i32) -> Result<usize, i32> {
    rsendv(r, fd, &[data], flags)
}

/// `rsendmsg`/`rwritev`: the buffers in order, as one stream write.
///
/// # Errors
/// As [`rsend`].
pub fn rsendv(r: &Runtime, fd: RawFd, bufs: &[&[u8]], flags: i32) -> Result<usize, i32> {
    let nonblock = flags & libc::MSG_DONTWAIT != 0;
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0;
    for b in bufs {
        let mut off = 0;
        while off < b.len() {
            let rest = &b[off..];
            match blocking(r, fd, nonblock, Dir::Out, |rs, _, dev, _| {
                rs.send(dev, fd, rest)
            }) {
                Ok(n) => {
                    off += n;
                    done += n;
                }
                Err(e) if done > 0 && e != libc::EBADF => return Ok(done),
                Err(e) => return Err(e),
            }
        }
    }
    if total == 0 {
        // A zero-length send still reports a closed or unconnected socket.
        r.with(|n, _| {
            let (rs, _, dev) = layer(n);
            rs.send(dev, fd, &[])
        })?;
    }
    Ok(done)
}

/// Waits (whatever the socket's flags) until `fd`'s queue is drained or [`LINGER_NS`] passed.
fn drain(r: &Runtime, fd: RawFd) -> Result<(), i32> {
    let mut deadline = None;
    loop {
        let (done, ends, now) = r.with(|n, now| {
            let rs = layer(n).0;
            (rs.drained(fd), rs.ends(fd).ok(), now)
        });
        let until = *deadline.get_or_insert(now.as_nanos().saturating_add(LINGER_NS));
        let left = until.saturating_sub(now.as_nanos());
        let Some((_, wr)) = ends else {
            return Err(libc::EBADF);
        };
        if done || left == 0 {
            if !done {
                tracing::warn!(
                    fd,
                    "rsocket: data not delivered within {} s of shutdown: disconnecting",
                    LINGER_NS / 1_000_000_000
                );
            }
            return Ok(());
        }
        let ms = i32::try_from(left.div_ceil(1_000_000)).unwrap_or(i32::MAX);
        match wait(&wr, ms) {
            Ok(()) | Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `rshutdown`: closes the directions `how` says, tells the peer, and waits (even on a
/// non-blocking socket, as rsocket.c) until what was queued before has been delivered.
///
/// # Errors
/// `EBADF`.
pub fn rshutdown(r: &Runtime, fd: RawFd, how: How) -> Result<(), i32> {
    let wait_needed = r.with(|n, _| {
        let (rs, _, dev) = layer(n);
        rs.shutdown(dev, fd, how)
    })?;
    if wait_needed {
        drain(r, fd)?;
        r.with(|n, now| {
            let (rs, cm, dev) = layer(n);
            rs.shutdown_done(cm, dev, now, fd);
        });
    }
    Ok(())
}

/// `rclose`: a connected socket is shut down both ways first (queued bytes delivered, at most
/// [`LINGER_NS`]), then everything is freed and the CM sends what the id's state calls for.
///
/// # Errors
/// `EBADF`.
pub fn rclose(r: &Runtime, fd: RawFd) -> Result<(), i32> {
    rshutdown(r, fd, How::Both)?;
    r.with(|n, now| {
        let (rs, cm, dev) = layer(n);
        rs.close(cm, dev, now, fd)
    })
}

/// `rgetpeername`.
///
/// # Errors
/// [`Rsockets::peer_addr`]'s.
pub fn rgetpeername(r: &Runtime, fd: RawFd) -> Result<SocketAddr, i32> {
    r.with_quiet(|n, _| {
        let (rs, cm, _) = layer(n);
        rs.peer_addr(cm, fd)
    })
}

/// `rgetsockname`.
///
/// # Errors
/// [`Rsockets::local_addr`]'s.
pub fn rgetsockname(r: &Runtime, fd: RawFd) -> Result<SocketAddr, i32> {
    r.with_quiet(|n, _| {
        let (rs, cm, _) = layer(n);
        rs.local_addr(cm, fd)
    })
}

/// `rsetsockopt`.
///
/// # Errors
/// [`Rsockets::set_option`]'s.
pub fn rsetsockopt(r: &Runtime, fd: RawFd, level: i32, name: i32, val: &[u8]) -> Result<(), i32> {
    let res = r.with(|n, _| layer(n).0.set_option(fd, level, name, val));
    if res == Err(libc::ENOTSUP) {
        tracing::debug!(
            fd,
            level,
            name,
            "rsetsockopt: option not supported (ENOTSUP)"
        );
    }
    res
}

/// `rgetsockopt`: the value's bytes.
///
/// # Errors
/// [`Rsockets::get_option`]'s.
pub fn rgetsockopt(r: &Runtime, fd: RawFd, level: i32, name: i32) -> Result<Vec<u8>, i32> {
    let mtu = r.config().mtu.bytes();
    let res = r.with(|n, _| layer(n).0.get_option(fd, level, name, mtu));
    if res == Err(libc::ENOTSUP) {
        tracing::debug!(
            fd,
            level,
            name,
            "rgetsockopt: option not supported (ENOTSUP)"
        );
    }
    res
}

/// `rfcntl(F_GETFL)`.
///
/// # Errors
/// `EBADF`.
pub fn getfl(r: &Runtime, fd: RawFd) -> Result<i32, i32> {
    r.with_quiet(|n, _| layer(n).0.flags(fd))
}

/// `rfcntl(F_SETFL)`.
///
/// # Errors
/// `EBADF`.
pub fn setfl(r: &Runtime, fd: RawFd, flags: i32) -> Result<(), i32> {
    r.with(|n, _| layer(n).0.set_flags(fd, flags))
}

/// `riomap`: `mem` is the application's `len` bytes at `addr`.
///
/// # Errors
/// [`Rsockets::iomap`]'s.
pub fn riomap(
    r: &Runtime,
    fd: RawFd,
    mem: Arc<dyn ExternalMemory>,
    addr: u64,
    writable: bool,
    offset: i64,
) -> Result<u64, i32> {
    r.with(|n, _| {
        let (rs, _, dev) = layer(n);
        rs.iomap(dev, fd, mem, addr, writable, offset)
    })
}

/// `riounmap`.
///
/// # Errors
/// [`Rsockets::iounmap`]'s.
pub fn riounmap(r: &Runtime, fd: RawFd, addr: u64, len: u64) -> Result<(), i32> {
    r.with(|n, _| {
        let (rs, _, dev) = layer(n);
        rs.iounmap(dev, fd, addr, len)
    })
}

/// `riowrite` (`MSG_DONTWAIT`): `data` to the peer's map at `offset`, in order with the stream.
///
/// # Errors
/// [`Rsockets::iowrite`]'s; `EINTR`.
pub fn riowrite(
    r: &Runtime,
    fd: RawFd,
    data: &[u8],
    offset: u64,
    flags: i32,
) -> Result<usize, i32> {
    let nonblock = flags & libc::MSG_DONTWAIT != 0;
    let mut done = 0;
    while done < data.len() {
        let rest = &data[done..];
        let at = offset + done as u64;
        match blocking(r, fd, nonblock, Dir::Out, |rs, _, dev, _| {
            rs.iowrite(dev, fd, rest, at)
        }) {
            Ok(n) => done += n,
            Err(e) if done > 0 && e != libc::EBADF => return Ok(done),
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// `rpoll` over a mix of rsockets and other descriptors. `ppoll` is `ppoll(2)` on a list of
/// descriptors with a timeout in ms (−1: none), returning how many have events.
///
/// Each rsocket's events are computed under the node's lock (rsocket.c `rs_poll_rs`:
/// `POLLHUP`/`POLLERR` whether asked or not); when nothing is ready and the timeout allows,
/// one `ppoll` waits for the other descriptors and the rsockets' readiness descriptors
/// together, then everything is checked again.
///
/// # Errors
/// `ppoll`'s (`EINTR`, `EINVAL`, `ENOMEM`).
pub fn rpoll(
    r: &Runtime,
    fds: &mut [libc::pollfd],
    timeout_ms: i32,
    ppoll: Ppoll<'_>,
) -> Result<usize, i32> {
    let mut deadline: Option<u64> = None;
    loop {
        // Rsockets, under the lock; the descriptors to wait on for those not ready.
        let (rs_ready, is_rs, waits, now) = r.with(|n, now| {
            let rs = layer(n).0;
            let mut ready = 0;
            let mut is_rs = vec![false; fds.len()];
            let mut waits: Vec<Arc<Ends>> = Vec::new();
            for (i, p) in fds.iter_mut().enumerate() {
                let Some(m) = rs.poll_mask(p.fd) else {
                    continue;
                };
                is_rs[i] = true;
                p.revents = m & (p.events | libc::POLLHUP | libc::POLLERR);
                if p.revents != 0 {
                    ready += 1;
                } else if let Ok((rd, wr)) = rs.ends(p.fd) {
                    if p.events & libc::POLLIN != 0 {
                        waits.push(rd);
                    }
                    if p.events & libc::POLLOUT != 0 {
                        waits.push(wr);
                    }
                }
            }
            (ready, is_rs, waits, now.as_nanos())
        });
        let left = match (timeout_ms, deadline) {
            (t, _) if t < 0 => -1,
            (t, None) => {
                deadline = Some(now.saturating_add(u64::from(t.unsigned_abs()) * 1_000_000));
                t
            }
            (_, Some(d)) => {
                i32::try_from(d.saturating_sub(now).div_ceil(1_000_000)).unwrap_or(i32::MAX)
            }
        };
        // The other descriptors: at once when something is ready or no wait is left, else
        // together with the rsockets' readiness descriptors.
        let others: Vec<usize> = (0..fds.len()).filter(|i| !is_rs[*i]).collect();
        let wait = rs_ready == 0 && left != 0;
        let mut list: Vec<libc::pollfd> = others.iter().map(|&i| fds[i]).collect();
        if wait {
            list.extend(waits.iter().map(|e| libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&e.app_fd()),
                events: libc::POLLIN,
                revents: 0,
            }));
        }
        for p in &mut list {
            p.revents = 0;
        }
        let n = if list.is_empty() && !wait {
            0
        } else {
            ppoll(&mut list, if wait { left } else { 0 })?
        };
        let mut others_ready = 0;
        for (k, &i) in others.iter().enumerate() {
            fds[i].revents = list[k].revents;
            if list[k].revents != 0 {
                others_ready += 1;
            }
        }
        drop(waits);
        if !wait || others_ready > 0 {
            if wait && rs_ready == 0 {
                // Woken by another descriptor: the rsockets' state as it is now.
                let again = r.with_quiet(|n, _| {
                    let rs = layer(n).0;
                    let mut k = 0;
                    for p in fds.iter_mut().filter(|p| rs.contains(p.fd)) {
                        p.revents = rs.poll_mask(p.fd).unwrap_or(0)
                            & (p.events | libc::POLLHUP | libc::POLLERR);
                        k += usize::from(p.revents != 0);
                    }
                    k
                });
                return Ok(others_ready + again);
            }
            return Ok(rs_ready + others_ready);
        }
        if n == 0 && left >= 0 {
            // Timed out.
            return Ok(0);
        }
        // An rsocket's descriptor became readable: check again.
    }
}
