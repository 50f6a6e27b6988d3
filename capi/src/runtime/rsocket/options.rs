//! Socket options of an rsocket (`rsetsockopt`/`rgetsockopt`), as rsocket.c keeps them, and
//! the sizes of a connection's resources they decide.
//!
//! Levels and names (rsocket.c): `SOL_SOCKET` `SO_REUSEADDR`, `SO_KEEPALIVE`, `SO_OOBINLINE`
//! (flags), `SO_RCVBUF`/`SO_SNDBUF` (the value given × 2, as Linux), `SO_LINGER`, `SO_ERROR`
//! (read and cleared); `IPPROTO_TCP` `TCP_NODELAY`, `TCP_KEEPIDLE`, `TCP_KEEPCNT`,
//! `TCP_KEEPINTVL`, `TCP_MAXSEG`; `IPPROTO_IPV6` `IPV6_V6ONLY`; `SOL_RDMA` `RDMA_SQSIZE`,
//! `RDMA_RQSIZE`, `RDMA_INLINE`, `RDMA_IOMAPSIZE`, `RDMA_ROUTE` (before the socket connects
//! or listens, else `EINVAL`). Anything else is `ENOTSUP`. Keep-alive is recorded, not sent:
//! the RC transport and the CM notice a dead peer.

use super::conn::{Sizes, SNDLOWAT};

/// `SOL_RDMA` of `<rdma/rsocket.h>`.
pub const SOL_RDMA: i32 = 0x10000;
/// `RDMA_SQSIZE`.
pub const RDMA_SQSIZE: i32 = 0;
/// `RDMA_RQSIZE`.
pub const RDMA_RQSIZE: i32 = 1;
/// `RDMA_INLINE`.
pub const RDMA_INLINE: i32 = 2;
/// `RDMA_IOMAPSIZE`.
pub const RDMA_IOMAPSIZE: i32 = 3;
/// `RDMA_ROUTE`.
pub const RDMA_ROUTE: i32 = 4;

/// rsocket.c's defaults (`def_sqsize`, `def_rqsize`, `def_inline`, `def_mem`, `def_wmem`).
const DEF_SQSIZE: u32 = 384;
const DEF_RQSIZE: u32 = 384;
const DEF_INLINE: u32 = 64;
const DEF_MEM: u32 = 1 << 17;
/// `RS_QP_MIN_SIZE`, `RS_QP_MAX_SIZE`.
const QP_MIN: u32 = 16;
const QP_MAX: u32 = 0xFFFE;

/// The options of one rsocket (inherited by the sockets a listener accepts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Receive buffer bytes (`SO_RCVBUF` × 2).
    pub rbuf: u32,
    /// Send buffer bytes (`SO_SNDBUF` × 2).
    pub sbuf: u32,
    /// `RDMA_SQSIZE`.
    pub sq_size: u32,
    /// `RDMA_RQSIZE`.
    pub rq_size: u32,
    /// `RDMA_INLINE` (recorded; the simulated device copies every send at post time).
    pub inline: u32,
    /// `RDMA_IOMAPSIZE`: iomap announcements this side keeps.
    pub iomap_size: u16,
    /// `RDMA_ROUTE` as given (not used: the fabric is flat).
    pub route: Option<Vec<u8>>,
    /// `SOL_SOCKET` flags by option number (`SO_LINGER` inverted, as rsocket.c).
    pub so_opts: u64,
    /// `IPPROTO_TCP` flags by option number.
    pub tcp_opts: u64,
    /// `IPPROTO_IPV6` flags by option number.
    pub ipv6_opts: u64,
    /// `TCP_KEEPIDLE`, seconds.
    pub keepalive_time: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rbuf: DEF_MEM,
            sbuf: DEF_MEM,
            sq_size: DEF_SQSIZE,
            rq_size: DEF_RQSIZE,
            inline: DEF_INLINE,
            iomap_size: 0,
            route: None,
            so_opts: 0,
            tcp_opts: 0,
            ipv6_opts: 0,
            keepalive_time: 7200,
        }
    }
}

/// rsocket.c `rs_value_to_scale`.
fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}

/// rsocket.c `rs_scale_to_value`.
fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

/// An `int`-sized option value (rsocket.c reads `*(int *)optval`); `EINVAL` when shorter.
fn int(v: &[u8]) -> Result<i32, i32> {
    let b: [u8; 4] = v
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .ok_or(libc::EINVAL)?;
    Ok(i32::from_ne_bytes(b))
}

impl Options {
    /// The sizes of a connection made with these options: the send ring is `sbuf`; the
    /// receive side is `rbuf` cut into at most 16 slots of 1–64 KiB (bounded by
    /// `RDMA_RQSIZE`); the send queue is `RDMA_SQSIZE` within rsocket.c's bounds and the
    /// device's `max_qp_wr`.
    pub fn sizes(&self, max_qp_wr: u32) -> Sizes {
        let rbuf = self.rbuf.max(16 << 10);
        let slot_size = (rbuf / 16).clamp(1 << 10, 64 << 10);
        let max_wr = max_qp_wr.min(QP_MAX);
        let rq = self.rq_size.clamp(QP_MIN, max_wr);
        let slots = (rbuf / slot_size).clamp(2, rq.saturating_sub(super::wire::SPARE_SLOTS));
        Sizes {
            ring: u64::from(self.sbuf).max(2 * SNDLOWAT),
            slots,
            slot_size,
            sq_depth: self.sq_size.clamp(QP_MIN, max_wr),
            iomap_entries: self.iomap_size,
        }
    }

    fn flag(opts: &mut u64, name: i32, on: bool) {
        if (0..64).contains(&name) {
            if on {
                *opts |= 1 << name;
            } else {
                *opts &= !(1 << name);
            }
        }
    }

    fn has(opts: u64, name: i32) -> bool {
        (0..64).contains(&name) && opts & (1 << name) != 0
    }

    /// `rsetsockopt`. `opening`: the socket connects, listens or is connected (`SOL_RDMA`
    /// options are then `EINVAL`); `resources`: its buffers exist (`SO_RCVBUF`/`SO_SNDBUF` are
    /// then accepted and ignored, as rsocket.c).
    ///
    /// # Errors
    /// `ENOTSUP` for an option rsocket.c does not know; `EINVAL` for a short value, a
    /// `TCP_KEEPIDLE` ≤ 0, or a `SOL_RDMA` option once opening.
    pub fn set(
        &mut self,
        level: i32,
        name: i32,
        val: &[u8],
        opening: bool,
        resources: bool,
    ) -> Result<(), i32> {
        match level {
            libc::SOL_SOCKET => {
                let on = match name {
                    libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE => int(val)? != 0,
                    libc::SO_RCVBUF => {
                        if !resources {
                            self.rbuf = (int(val)? as u32).saturating_mul(2);
                        }
                        return Ok(());
                    }
                    libc::SO_SNDBUF => {
                        if !resources {
                            self.sbuf = (int(val)? as u32).saturating_mul(2);
                        }
                        if u64::from(self.sbuf) < SNDLOWAT {
                            self.sbuf = (SNDLOWAT << 1) as u32;
                        }
                        return Ok(());
                    }
                    // Inverted, so that the default (0) is "on" (rsocket.c).
                    libc::SO_LINGER => int(val)? == 0,
                    _ => return Err(libc::ENOTSUP),
                };
                Self::flag(&mut self.so_opts, name, on);
            }
            libc::IPPROTO_TCP => match name {
                libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG => {}
                libc::TCP_KEEPIDLE => {
                    let t = int(val)?;
                    if t <= 0 {
                        return Err(libc::EINVAL);
                    }
                    self.keepalive_time = t as u32;
                }
                libc::TCP_NODELAY => Self::flag(&mut self.tcp_opts, name, int(val)? != 0),
                _ => return Err(libc::ENOTSUP),
            },
            libc::IPPROTO_IPV6 => match name {
                libc::IPV6_V6ONLY => Self::flag(&mut self.ipv6_opts, name, int(val)? != 0),
                _ => return Err(libc::ENOTSUP),
            },
            SOL_RDMA => {
                if opening {
                    return Err(libc::EINVAL);
                }
                match name {
                    RDMA_SQSIZE => self.sq_size = (int(val)? as u32).min(QP_MAX),
                    RDMA_RQSIZE => self.rq_size = (int(val)? as u32).min(QP_MAX),
                    RDMA_INLINE => self.inline = (int(val)? as u32).min(QP_MAX),
                    RDMA_IOMAPSIZE => {
                        let v = (int(val)? as u32) & 0xFF;
                        self.iomap_size = scale_to_value(value_to_scale(v, 8) & 0xFF, 8) as u16;
                    }
                    RDMA_ROUTE => self.route = Some(val.to_vec()),
                    _ => return Err(libc::ENOTSUP),
                }
            }
            _ => return Err(libc::ENOTSUP),
        }
        Ok(())
    }

    /// `rgetsockopt` of everything but `SO_ERROR` and `TCP_MAXSEG` (the socket's): the value's
    /// bytes.
    ///
    /// # Errors
    /// `ENOTSUP` for an unknown option.
    pub fn get(&self, level: i32, name: i32) -> Result<Vec<u8>, i32> {
        let i = |v: i64| (v as i32).to_ne_bytes().to_vec();
        Ok(match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
                i(i64::from(Self::has(self.so_opts, name)))
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => i(i64::from(self.rbuf)),
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => i(i64::from(self.sbuf)),
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                let mut v = i(i64::from(!Self::has(self.so_opts, name)));
                v.extend(i(0)); // l_linger
                v
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => i(1),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => i(i64::from(self.keepalive_time)),
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => i(i64::from(Self::has(self.tcp_opts, name))),
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
                i(i64::from(Self::has(self.ipv6_opts, name)))
            }
            (SOL_RDMA, RDMA_SQSIZE) => i(i64::from(self.sq_size)),
            (SOL_RDMA, RDMA_RQSIZE) => i(i64::from(self.rq_size)),
            (SOL_RDMA, RDMA_INLINE) => i(i64::from(self.inline)),
            (SOL_RDMA, RDMA_IOMAPSIZE) => i(i64::from(self.iomap_size)),
            // No path records here (the fabric is flat): the route as set, else none.
            (SOL_RDMA, RDMA_ROUTE) => self.route.clone().unwrap_or_default(),
            _ => return Err(libc::ENOTSUP),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int_bytes(v: i32) -> [u8; 4] {
        v.to_ne_bytes()
    }

    #[test]
    fn buffers_are_doubled_and_fixed_once_resources_exist() {
        let mut o = Options::default();
        assert_eq!(
            o.set(
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &int_bytes(1 << 19),
                false,
                false
            ),
            Ok(())
        );
        assert_eq!(
            o.get(libc::SOL_SOCKET, libc::SO_RCVBUF),
            Ok(int_bytes(1 << 20).to_vec())
        );
        assert_eq!(
            o.set(
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                &int_bytes(4),
                false,
                true
            ),
            Ok(())
        );
        assert_eq!(o.sbuf, DEF_MEM);
        assert_eq!(
            o.set(
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                &int_bytes(4),
                false,
                false
            ),
            Ok(())
        );
        assert_eq!(u64::from(o.sbuf), SNDLOWAT << 1);
    }

    #[test]
    fn rdma_options_only_before_connecting() {
        let mut o = Options::default();
        assert_eq!(
            o.set(SOL_RDMA, RDMA_IOMAPSIZE, &int_bytes(1), false, false),
            Ok(())
        );
        assert_eq!(o.get(SOL_RDMA, RDMA_IOMAPSIZE), Ok(int_bytes(1).to_vec()));
        assert_eq!(
            o.set(SOL_RDMA, RDMA_SQSIZE, &int_bytes(64), true, false),
            Err(libc::EINVAL)
        );
        assert_eq!(
            o.set(SOL_RDMA, 99, &int_bytes(1), false, false),
            Err(libc::ENOTSUP)
        );
        assert_eq!(
            o.set(
                libc::IPPROTO_TCP,
                libc::TCP_KEEPIDLE,
                &int_bytes(0),
                false,
                false
            ),
            Err(libc::EINVAL)
        );
        assert_eq!(
            o.set(libc::SOL_SOCKET, libc::SO_REUSEADDR, &[1], false, false),
            Err(libc::EINVAL)
        );
        assert_eq!(o.get(libc::SOL_SOCKET, libc::SO_TYPE), Err(libc::ENOTSUP));
    }

    #[test]
    fn flags_and_linger_read_back() {
        let mut o = Options::default();
        assert_eq!(
            o.get(libc::SOL_SOCKET, libc::SO_LINGER).map(|v| v[0]),
            Ok(1)
        );
        assert!(o
            .set(
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                &int_bytes(1),
                false,
                false
            )
            .is_ok());
        assert!(o
            .set(
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                &int_bytes(1),
                false,
                false
            )
            .is_ok());
        assert_eq!(
            o.get(libc::SOL_SOCKET, libc::SO_REUSEADDR),
            Ok(int_bytes(1).to_vec())
        );
        assert_eq!(
            o.get(libc::IPPROTO_TCP, libc::TCP_NODELAY),
            Ok(int_bytes(1).to_vec())
        );
    }

    #[test]
    fn sizes_follow_the_buffers() {
        let s = Options::default().sizes(0x4000);
        assert_eq!(
            (s.slots, s.slot_size, s.ring, s.sq_depth),
            (16, 8192, 1 << 17, 384)
        );
        let big = Options {
            rbuf: 1 << 20,
            ..Options::default()
        };
        assert_eq!(big.sizes(0x4000).slot_size, 64 << 10);
        let tiny = Options {
            rq_size: 4,
            ..Options::default()
        };
        assert_eq!(tiny.sizes(0x4000).slots, 14);
    }
}
