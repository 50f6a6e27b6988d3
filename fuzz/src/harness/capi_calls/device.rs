//! The device queries and memory regions.

use rnic::calls::{Kind, MrAddr, ARENA_LEN};

use super::{want, Harness, MrM, EINVAL, EOPNOTSUPP};

impl Harness {
    pub(super) fn query(&mut self, ctx: usize, what: u8, port: u8, index: u8, null: bool) {
        let port = if port < 0xC0 { port % 3 } else { port };
        let index = match index {
            0..=0x7F => i32::from(index % 3),
            0x80..=0xBF => -1,
            _ => i32::from(index) << 8,
        };
        match what % 4 {
            0 => {
                let Some((r, a)) = self.c.query_device(ctx, null) else {
                    return;
                };
                let w = if null { [EINVAL] } else { [0] };
                if self.int_ret("ibv_query_device", r, &w) == 0 {
                    if let Some(a) = a {
                        let e = self.env;
                        if (a.max_qp_wr, a.max_sge, a.max_cqe, a.phys_port_cnt)
                            != (e.max_qp_wr as i32, e.max_sge as i32, e.max_cqe as i32, 1)
                        {
                            self.fail("ibv_query_device: limits changed".to_string());
                        }
                    }
                }
            }
            1 => {
                let Some((r, a)) = self.c.query_port(ctx, port, null) else {
                    return;
                };
                let w = if null || port != 1 { [EINVAL] } else { [0] };
                if self.int_ret("ibv_query_port", r, &w) == 0 {
                    if let Some(a) = a {
                        // IBV_PORT_ACTIVE 4, IBV_LINK_LAYER_ETHERNET 2, IBV_MTU_1024 3.
                        if (a.state, a.link_layer, a.active_mtu) != (4, 2, 3) {
                            self.fail("ibv_query_port: not an active Ethernet port".to_string());
                        }
                    }
                }
            }
            2 => {
                let Some((r, g)) = self.c.query_gid(ctx, port, index, null) else {
                    return;
                };
                let w = if null || port != 1 || index != 0 {
                    [EINVAL]
                } else {
                    [0]
                };
                if self.neg1_ret("ibv_query_gid", r, &w) == 0 {
                    let own = self.env.ip.to_ipv6_mapped().octets();
                    if g != Some(own) {
                        self.fail(format!("ibv_query_gid: {g:?}, not the RNIC's address"));
                    }
                }
            }
            _ => {
                let Some((r, k)) = self.c.query_pkey(ctx, port, index, null) else {
                    return;
                };
                let w = if null || port != 1 || index != 0 {
                    [EINVAL]
                } else {
                    [0]
                };
                if self.neg1_ret("ibv_query_pkey", r, &w) == 0 && k != Some(0xFFFF) {
                    self.fail(format!("ibv_query_pkey: {k:?}"));
                }
            }
        }
    }

    pub(super) fn reg_mr(&mut self, pd: u8, off: u16, len: u16, iova: u8, v: u32, access: u32) {
        if self.full(Kind::Mr) {
            return;
        }
        let s = self.pick(Kind::Pd, pd);
        let (addr, addr_val, len) = if off == 0xFFFF {
            (MrAddr::Null, 0u64, usize::from(len % 4))
        } else {
            let o = usize::from(off) % ARENA_LEN;
            let l = usize::from(len).min(ARENA_LEN - o);
            (MrAddr::Arena(o), self.c.arena_addr() + o as u64, l)
        };
        let page_off = addr_val & 0xFFF;
        let iova_v = match iova % 5 {
            0 => None,
            1 => Some(addr_val),
            2 => Some(u64::from(v) << 12 | page_off),
            3 => Some(u64::from(v)),
            _ => Some(0xFFFF_FFFF_FFFF_F000 | page_off),
        };
        let access = if access & 0x8000_0000 != 0 {
            access as i32
        } else {
            // Mostly the bits that mean something.
            (access & 0x0F) as i32 | if access & 0x10 != 0 { 1 << 20 } else { 0 }
        };
        let the_iova = iova_v.unwrap_or(addr_val);
        let bits = access as u32;
        let len64 = len as u64;
        // rdma-core: libibverbs drops the optional range (bits 20-29) when the kernel lacks
        // it, else the kernel ignores them; the kernel: `ib_check_mr_access` (unknown bits,
        // REMOTE_WRITE/ATOMIC without LOCAL_WRITE), `ib_uverbs_reg_mr` (the iova's offset in
        // its page is the address's), `ib_umem_get` (a range of no page, a NULL buffer).
        let supported = 0x0000_03FF | 0x3FF0_0000;
        let refused = s.is_none()
            || bits & !supported != 0
            || (bits & 0b1010 != 0 && bits & 1 == 0)
            || the_iova & 0xFFF != page_off
            || (len64 == 0 && addr_val & 0xFFF == 0);
        let mut w = if refused {
            want(&[EINVAL])
        } else if addr == MrAddr::Null && len > 0 {
            // The kernel cannot pin page 0: EFAULT; librnic refuses NULL first.
            want(&[EINVAL, 14])
        } else if the_iova.checked_add(len64).is_none() {
            // Provider-dependent (rxe takes it; the simulated device refuses the wrap).
            want(&[0, EINVAL])
        } else {
            want(&[0])
        };
        // ON_DEMAND without ODP support: EOPNOTSUPP from the kernel.
        if s.is_some() && bits & (1 << 6) != 0 && w != [EINVAL] {
            w.push(EOPNOTSUPP);
        }
        let Some(m) = self.c.reg_mr(s, addr, len, iova_v, access) else {
            return;
        };
        self.made_ret("ibv_reg_mr", m, &w);
        if let (Some(mr), Some(pd)) = (m.slot, s) {
            let Some(info) = self.c.mr_info(mr) else {
                return;
            };
            if info.length != len || info.addr != addr_val {
                self.fail(format!(
                    "ibv_reg_mr: {info:?} for {len} bytes at {addr_val:#x}"
                ));
            }
            self.mrs.insert(
                mr,
                MrM {
                    pd,
                    iova: the_iova,
                    len: len64,
                    lkey: info.lkey,
                    rkey: info.rkey,
                },
            );
        }
    }
}
