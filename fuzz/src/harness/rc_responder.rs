//! Target `rc_responder`: two simulated RNICs ([`SimDevice`]) with an RC QP each, connected
//! (A 10.0.0.1 requester, B 10.0.0.2 responder, MTU 256, PSNs from 0), fed forged packets
//! between real traffic.
//!
//! Each device has three 4 KiB memory regions: `rw` (local write, remote read/write/atomic:
//! every receive, READ target and remote access goes here), `ro` (remote read only) and
//! `local` (local write only, never named by any work request). Records (see [`Record`]):
//!
//! * `Packet`: a RoCEv2 datagram (decoded with the ICRC unchecked) delivered to B or A, from
//!   the peer's GID or a foreign one, optionally retargeted at the live QP, its PSN rebased on
//!   the target's expected PSN, its rkey/address rebound to one of the target's regions;
//! * `App`: post a receive, SEND, WRITE (with immediate), READ or fetch-and-add; move a QP to
//!   ERR;
//! * `Advance`: virtual time moves 2^k ns; due transport timers fire.
//!
//! After every record the devices exchange what they have to send, and every CQ is polled.
//! Checked, besides "no panic":
//!
//! * no write outside a writable region: `ro` and `local` of both devices never change;
//! * nothing completes twice, nothing completes that was not posted, per queue completions
//!   come in post order (oracle S2, S3), and after an error completion a queue completes only
//!   with `WR_FLUSH_ERR` (S4); a successful receive reports no more bytes than it posted;
//! * a packet from a foreign GID changes nothing: no completion, no byte of `rw`, no PSN or
//!   QP state of its target;
//! * timers: after `handle_timeout(now)` and the transmissions it causes, no timer is still
//!   due at `now`; the devices fall silent at one instant.

use std::collections::{BTreeMap, BTreeSet};

use rnic_sim::roce::{decode, encode, Opcode, Packet};
use rnic_sim::{SimDevice, SimDeviceConfig};
use verbs_core::manual::{connect_rc, RcParams, RcPeerInfo};
use verbs_core::{
    AccessFlags, CqHandle, Device, Gid, Mr, Mtu, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    QpState, RecvWr, SendWr, SimTime, WcOpcode, WcStatus, WorkCompletion, PSN_MASK,
};

use super::input::{Input, Output, Route};
use super::roce_decode::FLOW;

/// Host A (requester).
pub const A: usize = 0;
/// Host B (responder).
pub const B: usize = 1;
/// Bytes of each memory region.
pub const MR_LEN: usize = 4096;
/// Largest datagram a `Packet` record carries.
pub const MAX_PACKET: usize = 2048;
const MAX_ROUNDS: usize = 1000;
const MAX_TIMER_STEPS: usize = 2000;

fn gid(h: usize) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, [1, 2, 66][h.min(2)]))
}

/// How a packet is adjusted before delivery (control bits 2–4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rewrite {
    /// BTH DestQP := the target's QP number.
    pub retarget: bool,
    /// PSN := base + (PSN's low byte as a signed offset); the base is the target's expected
    /// PSN (requests to B) or its next send PSN (responses to A).
    pub rebase_psn: bool,
    /// RETH/AtomicETH rkey := one of the target's regions (rkey mod 4: 0–1 `rw`, 2 `ro`,
    /// 3 `local`), address := that region's start + (address mod 8 KiB) − 2 KiB.
    pub rebind_keys: bool,
}

/// Work requests the input can post (`App` record); the byte is taken modulo 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppCall {
    /// A receive on B.
    RecvB = 0,
    /// A receive on A.
    RecvA = 1,
    /// A SEND from A (with immediate when the argument is odd).
    SendA = 2,
    /// An RDMA WRITE from A into B's `rw` (with immediate when the argument is odd).
    WriteA = 3,
    /// An RDMA READ by A of B's `rw`.
    ReadA = 4,
    /// A fetch-and-add by A on B's `rw`.
    FetchAddA = 5,
    /// A SEND from B.
    SendB = 6,
    /// `modify_qp` to ERR (of A when the argument is odd, else of B).
    ToErr = 7,
}

impl AppCall {
    fn from_byte(b: u8) -> AppCall {
        match b % 8 {
            0 => AppCall::RecvB,
            1 => AppCall::RecvA,
            2 => AppCall::SendA,
            3 => AppCall::WriteA,
            4 => AppCall::ReadA,
            5 => AppCall::FetchAddA,
            6 => AppCall::SendB,
            _ => AppCall::ToErr,
        }
    }
}

/// One record of an `rc_responder` input. Control byte: bits 6–7 the kind (0–1 packet, 2 app,
/// 3 advance); for a packet, bits 0–1 the [`Route`] and bits 2–4 the [`Rewrite`], then a
/// 2-byte little-endian length (mod [`MAX_PACKET`]) and the datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A datagram (UDP payload: BTH … ICRC).
    Packet {
        /// Destination and claimed source.
        route: Route,
        /// Adjustments.
        rewrite: Rewrite,
        /// The datagram.
        bytes: Vec<u8>,
    },
    /// A work request or QP call, with its argument byte (sizes, offsets).
    App(AppCall, u8),
    /// Advance virtual time by 2^(`exp` mod 34) ns.
    Advance(u8),
}

impl Record {
    /// Reads the next record; `None` at the end of the input.
    pub fn read(inp: &mut Input<'_>) -> Option<Record> {
        let ctl = inp.u8()?;
        Some(match ctl >> 6 {
            0 | 1 => {
                let len = usize::from(inp.u16()?) % MAX_PACKET;
                Record::Packet {
                    route: Route::from_bits(ctl),
                    rewrite: Rewrite {
                        retarget: ctl & 4 != 0,
                        rebase_psn: ctl & 8 != 0,
                        rebind_keys: ctl & 16 != 0,
                    },
                    bytes: inp.bytes(len).to_vec(),
                }
            }
            2 => Record::App(AppCall::from_byte(inp.u8()?), inp.u8()?),
            _ => Record::Advance(inp.u8()?),
        })
    }

    /// Appends this record in the form [`Record::read`] reads.
    pub fn write(&self, out: &mut Output) {
        match self {
            Record::Packet {
                route,
                rewrite,
                bytes,
            } => {
                let flags = u8::from(rewrite.retarget) << 2
                    | u8::from(rewrite.rebase_psn) << 3
                    | u8::from(rewrite.rebind_keys) << 4;
                let n = bytes.len().min(MAX_PACKET - 1);
                out.u8(*route as u8 | flags).u16(n as u16);
                out.bytes(bytes.get(..n).unwrap_or_default());
            }
            Record::App(call, arg) => {
                out.u8(0x80).u8(*call as u8).u8(*arg);
            }
            Record::Advance(exp) => {
                out.u8(0xC0).u8(*exp);
            }
        }
    }
}

/// What one queue (send or receive of one QP) has outstanding and has completed.
#[derive(Debug, Clone, Default)]
struct Queue {
    /// Posted and not completed: wr_id → bytes posted.
    outstanding: BTreeMap<u64, u32>,
    /// Every wr_id ever completed.
    completed: BTreeSet<u64>,
    last: Option<u64>,
    errored: bool,
}

#[derive(Debug, Clone)]
struct Node {
    dev: SimDevice,
    qp: Qp,
    rw: Mr,
    ro: Mr,
    local: Mr,
    scq: CqHandle,
    rcq: CqHandle,
    send: Queue,
    recv: Queue,
}

fn setup<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("rc_responder set-up: {what}: {e}"),
    }
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..MR_LEN)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

impl Node {
    fn new(h: usize) -> Node {
        let mut dev = SimDevice::new(SimDeviceConfig::new(format!("rc{h}"), gid(h)));
        let pd = setup("alloc_pd", dev.alloc_pd());
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let rw = setup("reg_mr rw", dev.reg_mr(pd, MR_LEN, all));
        let ro = setup(
            "reg_mr ro",
            dev.reg_mr(pd, MR_LEN, AccessFlags::REMOTE_READ),
        );
        let local = setup(
            "reg_mr local",
            dev.reg_mr(pd, MR_LEN, AccessFlags::LOCAL_WRITE),
        );
        for (i, mr) in [rw, ro, local].iter().enumerate() {
            setup(
                "mr_write",
                dev.mr_write(mr.handle, 0, &pattern(i as u8 + 16 * h as u8)),
            );
        }
        let scq = setup("create_cq", dev.create_cq(1024, None));
        let rcq = setup("create_cq", dev.create_cq(1024, None));
        let init = QpInitAttr::rc(scq, rcq, QpCap::uniform(16, 2, 0), true);
        let qp = setup("create_qp", dev.create_qp(pd, &init));
        Node {
            dev,
            qp,
            rw,
            ro,
            local,
            scq,
            rcq,
            send: Queue::default(),
            recv: Queue::default(),
        }
    }

    fn read_mr(&self, mr: &Mr) -> Vec<u8> {
        let mut buf = vec![0u8; MR_LEN];
        setup("mr_read", self.dev.mr_read(mr.handle, 0, &mut buf));
        buf
    }

    fn attr(&self) -> QpAttr {
        setup("query_qp", self.dev.query_qp(self.qp.handle)).0
    }
}

/// The two connected devices and the clock.
#[derive(Debug, Clone)]
pub struct World {
    now: SimTime,
    nodes: [Node; 2],
    next_wr_id: u64,
    /// The untouched contents of `ro` and `local`, per node.
    guard: [[Vec<u8>; 2]; 2],
}

impl World {
    /// The connected pair (built once, then cloned).
    pub fn connected() -> World {
        // Per thread: the CM is not `Sync` (libFuzzer runs one thread; the replay test several).
        thread_local! {
            static WORLD: World = World::build();
        }
        WORLD.with(World::clone)
    }

    fn build() -> World {
        let mut nodes = [Node::new(A), Node::new(B)];
        let p = RcParams {
            mtu: Mtu::Mtu256,
            timeout: 10,
            retry_cnt: 3,
            rnr_retry: 3,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        };
        let info = |n: &Node, h: usize| RcPeerInfo {
            gid: gid(h),
            qpn: n.qp.qp_num,
            psn: 0,
        };
        let infos = [info(&nodes[A], A), info(&nodes[B], B)];
        for h in [A, B] {
            let n = &mut nodes[h];
            setup(
                "connect_rc",
                connect_rc(&mut n.dev, n.qp.handle, &infos[h], &infos[1 - h], &p),
            );
        }
        let guard = [A, B].map(|h| {
            [
                nodes[h].read_mr(&nodes[h].ro),
                nodes[h].read_mr(&nodes[h].local),
            ]
        });
        World {
            now: SimTime::ZERO,
            nodes,
            next_wr_id: 1,
            guard,
        }
    }

    /// Applies one record, lets the devices talk, and checks the completions.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Packet {
                route,
                rewrite,
                bytes,
            } => self.deliver(*route, *rewrite, bytes),
            Record::App(call, arg) => self.call(*call, *arg),
            Record::Advance(exp) => self.advance(1u64 << (exp % 34)),
        }
        self.pump();
        self.poll_all();
        self.check_guards();
    }

    fn deliver(&mut self, route: Route, rw: Rewrite, bytes: &[u8]) {
        let Ok(mut p) = decode(bytes, &FLOW, false) else {
            return; // the decoder's own target covers bad bytes
        };
        let (to, from) = route.hosts();
        self.rewrite(&mut p, to, rw);
        if from == 2 {
            self.deliver_foreign(to, p);
        } else {
            self.nodes[to].dev.handle_packet(self.now, gid(from), p);
        }
    }

    fn rewrite(&self, p: &mut Packet, to: usize, rw: Rewrite) {
        let n = &self.nodes[to];
        if rw.retarget {
            p.bth.dest_qp = n.qp.qp_num;
        }
        if rw.rebase_psn {
            let a = n.attr();
            let base = if to == B { a.rq_psn } else { a.sq_psn };
            let off = i32::from(p.bth.psn as u8 as i8);
            p.bth.psn = base.wrapping_add_signed(off) & PSN_MASK;
        }
        if rw.rebind_keys {
            let rebind = |rkey: &mut u32, va: &mut u64| {
                let mr = match *rkey % 4 {
                    0 | 1 => &n.rw,
                    2 => &n.ro,
                    _ => &n.local,
                };
                *rkey = mr.rkey;
                *va = mr.addr.wrapping_add(*va % 0x2000).wrapping_sub(0x800);
            };
            if let Some(r) = &mut p.reth {
                rebind(&mut r.rkey, &mut r.va);
            }
            if let Some(a) = &mut p.atomic_eth {
                rebind(&mut a.rkey, &mut a.va);
            }
        }
    }

    /// A packet from a foreign GID must leave its target exactly as it was.
    fn deliver_foreign(&mut self, to: usize, p: Packet) {
        let n = &self.nodes[to];
        let before = (n.read_mr(&n.rw), n.attr());
        let pkt = format!("{p:?}");
        self.nodes[to].dev.handle_packet(self.now, gid(2), p);
        let n = &mut self.nodes[to];
        let after = (n.read_mr(&n.rw), n.attr());
        assert!(
            before.0 == after.0,
            "host {to}: a packet from a foreign GID wrote memory: {pkt}"
        );
        let key = |a: &QpAttr| (a.qp_state, a.rq_psn, a.sq_psn);
        assert_eq!(
            key(&before.1),
            key(&after.1),
            "host {to}: a packet from a foreign GID changed the QP: {pkt}"
        );
        let mut wcs = Vec::new();
        for cq in [n.scq, n.rcq] {
            let _ = n.dev.poll_cq(cq, 64, &mut wcs);
        }
        assert!(
            wcs.is_empty(),
            "host {to}: a packet from a foreign GID completed work: {wcs:?} ({pkt})"
        );
    }

    fn call(&mut self, call: AppCall, arg: u8) {
        let id = self.next_wr_id;
        self.next_wr_id += 1;
        let off = u64::from(arg) * 37 % 2048;
        let len = u32::from(arg) * 16 % 1200;
        let (h, is_send) = match call {
            AppCall::RecvB => (B, false),
            AppCall::RecvA => (A, false),
            AppCall::SendB => (B, true),
            AppCall::ToErr => {
                let h = if arg % 2 == 1 { A } else { B };
                let n = &mut self.nodes[h];
                let attr = QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                };
                let _ = n.dev.modify_qp(n.qp.handle, &attr, QpAttrMask::STATE);
                return;
            }
            _ => (A, true),
        };
        let peer_rw = self.nodes[1 - h].rw;
        let n = &mut self.nodes[h];
        let sge = n.rw.sge(off, len);
        let posted = if is_send {
            let wr = match call {
                AppCall::SendA | AppCall::SendB if arg % 2 == 1 => {
                    SendWr::send_with_imm(id, vec![sge], u32::from(arg))
                }
                AppCall::SendA | AppCall::SendB => SendWr::send(id, vec![sge]),
                AppCall::WriteA if arg % 2 == 1 => SendWr::rdma_write_with_imm(
                    id,
                    vec![sge],
                    peer_rw.addr + off,
                    peer_rw.rkey,
                    u32::from(arg),
                ),
                AppCall::WriteA => {
                    SendWr::rdma_write(id, vec![sge], peer_rw.addr + off, peer_rw.rkey)
                }
                AppCall::ReadA => {
                    SendWr::rdma_read(id, vec![sge], peer_rw.addr + off, peer_rw.rkey)
                }
                _ => SendWr::atomic_fetch_and_add(
                    id,
                    n.rw.sge(off & !7, 8),
                    peer_rw.addr + (off & !7),
                    peer_rw.rkey,
                    u64::from(arg),
                ),
            };
            n.dev.post_send(n.qp.handle, &[wr]).is_ok()
        } else {
            n.dev
                .post_recv(n.qp.handle, &[RecvWr::new(id, vec![sge])])
                .is_ok()
        };
        if posted {
            let q = if is_send { &mut n.send } else { &mut n.recv };
            q.outstanding.insert(id, len);
        }
    }

    /// Carries packets between the devices until both are idle (time stands still).
    fn pump(&mut self) {
        let now = self.now;
        for _ in 0..MAX_ROUNDS {
            let mut moved = false;
            for from in [A, B] {
                let to = 1 - from;
                let mut out = Vec::new();
                while let Some(t) = self.nodes[from].dev.poll_transmit(now) {
                    out.push(t);
                }
                for t in out {
                    moved = true;
                    // A device only ever sends to its peer: the foreign GID has no QP of its own.
                    if t.dst == gid(to) {
                        self.nodes[to].dev.handle_packet(now, gid(from), t.packet);
                    }
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the devices still exchange packets after {MAX_ROUNDS} rounds at one instant");
    }

    /// Moves the clock forward, firing the transport timers due meanwhile.
    fn advance(&mut self, delta_ns: u64) {
        let target = self.now.plus_nanos(delta_ns);
        for _ in 0..MAX_TIMER_STEPS {
            let next = self.nodes.iter().filter_map(|n| n.dev.poll_timeout()).min();
            let Some(next) = next.filter(|t| *t <= target) else {
                break;
            };
            self.now = self.now.max(next);
            let now = self.now;
            for n in &mut self.nodes {
                if n.dev.poll_timeout().is_some_and(|t| t <= now) {
                    n.dev.handle_timeout(now);
                }
            }
            self.pump();
            for (h, n) in self.nodes.iter().enumerate() {
                if let Some(t) = n.dev.poll_timeout().filter(|t| *t <= now) {
                    panic!("host {h}: transport timer due at {t:?} still armed at {now:?}");
                }
            }
            self.poll_all();
        }
        self.now = self.now.max(target);
    }

    /// Polls every CQ and checks each completion (module docs).
    fn poll_all(&mut self) {
        for (h, n) in self.nodes.iter_mut().enumerate() {
            for (cq, is_send) in [(n.scq, true), (n.rcq, false)] {
                let mut wcs = Vec::new();
                while n.dev.poll_cq(cq, 64, &mut wcs).unwrap_or(0) > 0 {}
                let q = if is_send { &mut n.send } else { &mut n.recv };
                for wc in wcs {
                    check_completion(h, is_send, n.qp.qp_num, q, &wc);
                }
            }
        }
    }

    fn check_guards(&self) {
        for (h, n) in self.nodes.iter().enumerate() {
            assert!(
                n.read_mr(&n.ro) == self.guard[h][0],
                "host {h}: the remote-read-only region was written"
            );
            assert!(
                n.read_mr(&n.local) == self.guard[h][1],
                "host {h}: the local-only region (named by no work request) was written"
            );
        }
    }
}

fn check_completion(h: usize, is_send: bool, qpn: u32, q: &mut Queue, wc: &WorkCompletion) {
    let which = if is_send { "send" } else { "receive" };
    assert!(
        !q.completed.contains(&wc.wr_id),
        "host {h}: {which} WR {} completed twice (S2): {wc:?}",
        wc.wr_id
    );
    let Some(len) = q.outstanding.remove(&wc.wr_id) else {
        panic!("host {h}: completion of a {which} WR never posted: {wc:?}");
    };
    q.completed.insert(wc.wr_id);
    assert_eq!(
        wc.qp_num, qpn,
        "host {h}: completion names another QP: {wc:?}"
    );
    assert!(
        q.last.is_none_or(|l| l < wc.wr_id),
        "host {h}: {which} completions out of post order (S3): {} after {:?}",
        wc.wr_id,
        q.last
    );
    q.last = Some(wc.wr_id);
    if q.errored {
        assert_eq!(
            wc.status,
            WcStatus::WrFlushErr,
            "host {h}: {which} completion after an error is not a flush (S4): {wc:?}"
        );
    }
    if wc.status != WcStatus::Success {
        q.errored = true;
    } else if !is_send && wc.opcode == WcOpcode::Recv {
        // (RECV_RDMA_WITH_IMM reports the WRITE's length, which the receive does not hold.)
        assert!(
            wc.byte_len <= len,
            "host {h}: receive of {} bytes into {len} posted: {wc:?}",
            wc.byte_len
        );
    }
}

/// The opcodes of requests (what a responder receives), for the corpus generator.
pub fn is_request(op: Opcode) -> bool {
    !matches!(
        op,
        Opcode::RcRdmaReadResponseFirst
            | Opcode::RcRdmaReadResponseMiddle
            | Opcode::RcRdmaReadResponseLast
            | Opcode::RcRdmaReadResponseOnly
            | Opcode::RcAcknowledge
            | Opcode::RcAtomicAcknowledge
    )
}

/// `p` re-encoded on the harness's flow with its PSN's low byte set to `psn_offset` (what
/// [`Rewrite::rebase_psn`] adds to the base), for the corpus generator.
pub fn with_psn_offset(p: &Packet, psn_offset: i8) -> Option<Vec<u8>> {
    let mut p = p.clone();
    p.bth.psn = u32::from(psn_offset as u8);
    encode(&p, &FLOW).ok().map(|b| b.to_vec())
}

/// The target body.
pub fn run(data: &[u8]) {
    let mut w = World::connected();
    let mut inp = Input::new(data);
    while let Some(r) = Record::read(&mut inp) {
        w.apply(&r);
    }
}
