//! External memory that goes away after registration (the application unmapped it): every
//! access the device makes to it fails ([`ExternalMemory`] returns false), and each kind of
//! access ends in the error completion an access outside the region gets — never a panic, and
//! nothing written (docs/capi.md, "Memory unmapped after registration").

use crate::testutil::*;
use crate::ExternalMemory;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use verbs_core::*;

/// Memory of `len` bytes that fails every access once [`gone`](Self::gone) was called.
#[derive(Debug)]
struct Vanishing {
    len: usize,
    gone: AtomicBool,
}

impl Vanishing {
    fn new(len: usize) -> Arc<Self> {
        Arc::new(Vanishing {
            len,
            gone: AtomicBool::new(false),
        })
    }

    fn gone(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }

    fn here(&self) -> bool {
        !self.gone.load(Ordering::Relaxed)
    }
}

impl ExternalMemory for Vanishing {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, _offset: usize, buf: &mut [u8]) -> bool {
        buf.fill(0x5a);
        self.here()
    }

    fn write(&self, _offset: usize, _data: &[u8]) -> bool {
        self.here()
    }

    fn readable(&self, _offset: usize, _len: usize) -> bool {
        self.here()
    }
}

const USER_VA: u64 = 0x7f00_beef_0000;

fn reg_gone(n: &mut Node, len: usize) -> (Arc<Vanishing>, Mr) {
    let m = Vanishing::new(len);
    let mr = n
        .dev
        .reg_mr_external(n.pd, m.clone(), USER_VA, ALL_ACCESS)
        .unwrap();
    m.gone();
    (m, mr)
}

/// `n`'s send (`send`) or receive completions, as (wr_id, status).
fn completions(n: &mut Node, send: bool) -> Vec<(u64, WcStatus)> {
    let cq = if send { n.scq } else { n.rcq };
    statuses(&poll(&mut n.dev, cq))
}

#[test]
fn a_remote_write_into_memory_unmapped_after_registration_is_rem_access_err() {
    let (mut a, mut b) = pair();
    let (_m, dm) = reg_gone(&mut b, 4096);
    let w = SendWr::rdma_write(1, vec![a.mr.sge(0, 1000)], dm.addr, dm.rkey);
    a.dev.post_send(a.qp.handle, &[w]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(completions(&mut a, true), [(1, WcStatus::RemAccessErr)]);
    // The responder's QP went to ERR (a class C error, as for a bad rkey).
    assert_eq!(
        b.dev.query_qp(b.qp.handle).unwrap().0.qp_state,
        QpState::Err
    );
}

#[test]
fn a_remote_read_of_memory_unmapped_after_registration_is_rem_access_err() {
    let (mut a, mut b) = pair();
    let (_m, rm) = reg_gone(&mut b, 4096);
    let w = SendWr::rdma_read(1, vec![a.mr.sge(0, 700)], rm.addr, rm.rkey);
    a.dev.post_send(a.qp.handle, &[w]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(completions(&mut a, true), [(1, WcStatus::RemAccessErr)]);
    // Nothing of the vanished memory reached the reader's buffer.
    let mut got = vec![0; 700];
    a.dev.mr_read(a.mr.handle, 0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0));
}

#[test]
fn a_remote_atomic_on_memory_unmapped_after_registration_is_rem_access_err() {
    let (mut a, mut b) = pair();
    let (_m, rm) = reg_gone(&mut b, 64);
    let w = SendWr::atomic_fetch_and_add(1, a.mr.sge(0, 8), rm.addr + 8, rm.rkey, 1);
    a.dev.post_send(a.qp.handle, &[w]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(completions(&mut a, true), [(1, WcStatus::RemAccessErr)]);
}

#[test]
fn a_send_from_memory_unmapped_after_registration_is_loc_prot_err() {
    let (mut a, mut b) = pair();
    let (_m, sm) = reg_gone(&mut a, 4096);
    b.dev.post_recv(b.qp.handle, &[recv_wr(&b)]).unwrap();
    let w = SendWr::send(1, vec![sm.sge(0, 100)]);
    a.dev.post_send(a.qp.handle, &[w]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(completions(&mut a, true), [(1, WcStatus::LocProtErr)]);
    assert!(completions(&mut b, false).is_empty());
}

#[test]
fn a_send_into_a_receive_buffer_unmapped_after_registration_fails_the_receive() {
    let (mut a, mut b) = pair();
    let (_m, rm) = reg_gone(&mut b, 4096);
    b.dev
        .post_recv(b.qp.handle, &[RecvWr::new(9, vec![rm.sge(0, 512)])])
        .unwrap();
    let w = SendWr::send(1, vec![a.mr.sge(0, 100)]);
    a.dev.post_send(a.qp.handle, &[w]).unwrap();
    pump(&mut a, &mut b);
    let got = completions(&mut b, false);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 9);
    assert_ne!(got[0].1, WcStatus::Success);
    assert_ne!(completions(&mut a, true), [(1, WcStatus::Success)]);
}

fn recv_wr(n: &Node) -> RecvWr {
    RecvWr::new(5, vec![n.mr.sge(0, 4096)])
}
