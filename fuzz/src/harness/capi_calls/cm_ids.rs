//! rdma_cm ids: create, forget, addresses, bind, resolve address and route.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use rnic::abi::*;
use rnic::calls::{Kind, Ret, SockAddr, CM_CHANNELS};

use super::{
    want, Cm, Harness, IdM, AF_IB, AF_INET, AF_INET6, EADDRINUSE, EADDRNOTAVAIL, EAFNOSUPPORT,
    EINVAL,
};

impl Harness {
    // ---- rdma_cm ------------------------------------------------------------------------------

    pub(super) fn create_id(&mut self, ch: u8, ps: u8, null: u8) {
        if self.full(Kind::Id) {
            return;
        }
        let chan = (usize::from(ch % 3) < CM_CHANNELS).then(|| usize::from(ch % 3));
        let psv = match ps % 8 {
            0..=2 => RDMA_PS_TCP,
            3 => RDMA_PS_UDP,
            4 => RDMA_PS_IB,
            5 => RDMA_PS_IPOIB,
            6 => 0,
            _ => u32::from(ps) << 4,
        };
        let null = null % 8 == 7;
        let Some(m) = self.c.create_id(chan, psv, null) else {
            return;
        };
        let known = [RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB, RDMA_PS_IPOIB].contains(&psv);
        // A NULL channel makes a synchronous id (librdmacm `ucma_alloc_id`), destroyed again
        // below.
        let w = if null || !known {
            want(&[EINVAL])
        } else {
            want(&[0])
        };
        // rdma_create_id is 0 / -1 + errno: `Made` carries errno, the slot for 0.
        let r = Ret {
            rc: if m.slot.is_some() { 0 } else { -1 },
            errno: m.errno,
        };
        self.neg1_ret("rdma_create_id", r, &w);
        if chan.is_none() && m.slot.is_some() {
            // The model follows ids with a channel only: a synchronous id goes at once, and
            // its destroy (no event kept yet, its private channel with it) succeeds.
            if let Some(d) = self.c.destroy_id(m.slot) {
                self.neg1_ret("rdma_destroy_id (synchronous)", d, &want(&[0]));
            }
            return;
        }
        if let (Some(s), Some(ch)) = (m.slot, chan) {
            self.ids.insert(
                s,
                IdM {
                    ps: psv,
                    channel: ch,
                    state: Cm::Idle,
                    bound: false,
                    src_port: None,
                    dst_port: None,
                    cm_id: false,
                    qp: None,
                },
            );
        }
    }

    /// Forgets a destroyed id: its events, held and queued, and its QP.
    pub(super) fn forget_id(&mut self, s: usize) {
        if let Some(mut i) = self.ids.remove(&s) {
            if let Some(q) = i.qp.take() {
                self.retire(&q);
            }
        }
        for q in &mut self.queues {
            q.retain(|&(id, _)| id != s);
        }
        self.events.retain(|_, &mut id| id != s);
    }

    pub(super) fn unknown(&mut self, s: Option<usize>) {
        if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
            i.state = Cm::Unknown;
        }
    }

    pub(super) fn unknown_if_not(&mut self, s: Option<usize>, keep: &[Cm]) {
        if let Some(i) = s.and_then(|s| self.ids.get_mut(&s)) {
            if !keep.contains(&i.state) {
                i.state = Cm::Unknown;
            }
        }
    }

    /// An address: `(argument, family is IP, IP is this RNIC's or the wildcard)`.
    fn addr(&self, b: u8, port: u16) -> (SockAddr, bool, bool) {
        let own = self.env.ip;
        let (a, local) = match b % 12 {
            0 | 1 => (SockAddr::Ip(SocketAddr::new(own.into(), port)), true),
            2 => (
                SockAddr::Ip(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)),
                true,
            ),
            3 => (
                SockAddr::Ip(SocketAddr::new(Ipv4Addr::new(10, 9, 8, 7).into(), port)),
                false,
            ),
            4 => (
                SockAddr::Ip(SocketAddr::V6(SocketAddrV6::new(
                    own.to_ipv6_mapped(),
                    port,
                    0,
                    0,
                ))),
                true,
            ),
            5 => (
                SockAddr::Ip(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)),
                true,
            ),
            6 => (
                SockAddr::Ip(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port)),
                false,
            ),
            7 => (SockAddr::Family(AF_IB), false),
            8 => (SockAddr::Family(0), false),
            9 => (SockAddr::Family(u16::from(b)), false),
            10 => {
                let other = Ipv4Addr::from(u32::from(own) ^ 1);
                (SockAddr::Ip(SocketAddr::new(other.into(), port)), false)
            }
            _ => (
                SockAddr::Ip(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)),
                own == Ipv4Addr::LOCALHOST,
            ),
        };
        let ip = matches!(a, SockAddr::Ip(_))
            || matches!(a, SockAddr::Family(f) if f == AF_INET || f == AF_INET6);
        (a, ip, local)
    }

    fn port(p: u16) -> u16 {
        match p % 8 {
            0..=2 => 0,
            3 => 7471,
            4 => 7472,
            5 => 32768,
            _ => p,
        }
    }

    pub(super) fn bind_addr(&mut self, id: u8, addr: u8, port: u16) {
        let s = self.pick(Kind::Id, id);
        let null = addr >= 0xF8;
        let port = Self::port(port);
        let (a, ip, local) = self.addr(addr, port);
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let w = match &i {
            _ if null => want(&[EINVAL]),
            None => want(&[EINVAL]),
            Some(_) if !ip => {
                if a == SockAddr::Family(AF_IB) {
                    want(&[EINVAL, EAFNOSUPPORT])
                } else {
                    want(&[EINVAL])
                }
            }
            Some(i) if i.state == Cm::Unknown => want(&[0, EINVAL, EADDRINUSE, EADDRNOTAVAIL]),
            Some(i) if i.state != Cm::Idle => want(&[EINVAL]),
            Some(i) => {
                let clash: Vec<&IdM> = self
                    .ids
                    .iter()
                    .filter(|&(&o, x)| {
                        Some(o) != s && x.ps == i.ps && port != 0 && x.src_port == Some(port)
                    })
                    .map(|(_, x)| x)
                    .collect();
                // The kernel checks the address before the port; cm-core the port first. A
                // port taken by an id that resolved an address is free for cm-core.
                let mut w = Vec::new();
                if !local {
                    w.push(EADDRNOTAVAIL);
                    if !clash.is_empty() {
                        w.push(EADDRINUSE);
                    }
                } else if clash.iter().any(|x| x.dst_port.is_none()) {
                    w.push(EADDRINUSE);
                } else if !clash.is_empty() {
                    w.extend([0, EADDRINUSE]);
                } else if i.ps == RDMA_PS_IB || self.ids.values().any(|x| x.state == Cm::Unknown) {
                    // RDMA_PS_IB shares the TCP and UDP port spaces in the kernel.
                    w.extend([0, EADDRINUSE]);
                } else {
                    w.push(0);
                }
                w
            }
        };
        let Some(r) = self.c.bind_addr(s, (!null).then_some(&a)) else {
            return;
        };
        if self.neg1_ret("rdma_bind_addr", r, &w) == 0 {
            let Some(s) = s else { return };
            let (sp, _) = self.c.ports(Some(s)).unwrap_or((0, 0));
            if sp == 0 || (port != 0 && sp != port) {
                self.fail(format!(
                    "rdma_bind_addr to port {port}: the id has port {sp}"
                ));
            }
            let wildcard = matches!(a, SockAddr::Ip(x) if x.ip().is_unspecified());
            if let Some(i) = self.ids.get_mut(&s) {
                if i.state != Cm::Unknown {
                    i.state = Cm::AddrBound;
                }
                i.src_port = Some(sp);
                i.bound = !wildcard;
            }
            let info = self.c.id_info(s);
            if info.map(|x| x.bound) != Some(!wildcard) {
                self.fail(format!(
                    "rdma_bind_addr: id->verbs {info:?} after binding {a:?}"
                ));
            }
        }
    }

    pub(super) fn resolve_addr(&mut self, id: u8, src: u8, dst: u8, port: u16) {
        let s = self.pick(Kind::Id, id);
        let port = Self::port(port).max(1);
        let (d, dip, _) = self.addr(dst, port);
        let (sa, sip, slocal) = self.addr(src, 0);
        let dnull = dst >= 0xF8;
        let snull = src >= 0xF0;
        let i = s.and_then(|s| self.ids.get(&s)).cloned();
        let fam = |a: &SockAddr| match a {
            SockAddr::Ip(x) => {
                x.is_ipv4()
                    || matches!(x.ip(), std::net::IpAddr::V6(v) if v.to_ipv4_mapped().is_some())
            }
            SockAddr::Family(_) => true,
        };
        let w = if dnull || !dip || i.is_none() {
            want(&[EINVAL])
        } else if !snull && !sip {
            // librdmacm: a source of no family it knows is EINVAL (AF_IB it knows; librnic
            // does not).
            want(&[EINVAL])
        } else {
            let i = i.as_ref().map_or(Cm::Idle, |i| i.state);
            match i {
                Cm::Unknown => want(&[0, EINVAL, EADDRNOTAVAIL]),
                Cm::Idle | Cm::AddrBound => {
                    let mut w = Vec::new();
                    if !snull && !slocal {
                        w.push(EADDRNOTAVAIL);
                        if i == Cm::AddrBound {
                            // The kernel ignores the source of a bound id.
                            w.push(0);
                        }
                    } else {
                        w.push(0);
                    }
                    if !snull && fam(&sa) != fam(&d) {
                        w.push(EINVAL);
                        w.push(0);
                    }
                    if matches!(d, SockAddr::Ip(x) if x.is_ipv6() && !fam(&d)) {
                        w.push(EADDRNOTAVAIL);
                        w.push(0);
                    }
                    w
                }
                _ => want(&[EINVAL]),
            }
        };
        let Some(r) = self
            .c
            .resolve_addr(s, (!snull).then_some(&sa), (!dnull).then_some(&d), 2000)
        else {
            return;
        };
        if self.neg1_ret("rdma_resolve_addr", r, &w) == 0 {
            let Some(s) = s else { return };
            let (sp, dp) = self.c.ports(Some(s)).unwrap_or((0, 0));
            if let Some(i) = self.ids.get_mut(&s) {
                if i.state != Cm::Unknown {
                    i.state = Cm::AddrResolved;
                }
                i.bound = true;
                i.src_port = Some(sp);
                i.dst_port = Some(dp);
                let ch = i.channel;
                self.queues[ch].push_back((s, RDMA_CM_EVENT_ADDR_RESOLVED));
            }
            if dp != port {
                self.fail(format!("rdma_resolve_addr to port {port}: dst port {dp}"));
            }
        }
    }
}
