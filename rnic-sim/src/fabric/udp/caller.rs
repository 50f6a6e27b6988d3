//! Progress from the caller's thread: [`UdpHandle::progress`] receives what is waiting on the
//! socket and hands it to the endpoint, from whichever thread calls it.
//!
//! A program that spins on a completion queue (`ibv_poll_cq` in a loop, as perftest's latency
//! tests and `ibv_rc_pingpong` without `-e` do) keeps its CPU busy; on a machine where the
//! program's threads outnumber the cores, the driver's thread then waits for a time slice
//! before it can receive the peer's answer — milliseconds instead of microseconds. A thread
//! that finds nothing to do calls `progress` instead, and receives its own answer, as a
//! user-space RDMA provider's poll reads the hardware's queue directly.
//!
//! The driver keeps running (its timers — RC retransmission, the CM's — still fire from it),
//! and both receive under one lock held from the `recvmmsg` to the last datagram's delivery,
//! so datagrams reach the endpoint in the order the socket gave them whichever thread read
//! them. What the endpoint queues in answer (an ACK, a response) leaves from the caller's
//! thread, as after [`UdpHandle::with`].

use std::io;
use std::sync::atomic::Ordering;
use std::sync::TryLockError;

use bytes::Bytes;

use super::batch::RecvBufs;
use super::{is_icmp_error, Endpoint, UdpHandle};

impl<E: Endpoint> UdpHandle<E> {
    /// Receives, without blocking, what is waiting on the socket (one `recvmmsg`: up to 32
    /// messages, each possibly several coalesced datagrams) and hands it to the endpoint, then
    /// sends what the endpoint queued in answer — unless the driver stands by, where the
    /// answer waits for this caller's next call (see `standby`). Returns whether any datagram
    /// was delivered.
    ///
    /// Does nothing (returns `false`) on a driver that is not [`spawn`](super::UdpDriver::spawn)ed
    /// (no socket to read from another thread), after the driver stopped, and while the
    /// driver itself is receiving (it delivers what it read). A receive error is left to the
    /// driver, which meets it on its next read (ICMP-induced errors are counted).
    pub fn progress(&self) -> bool {
        let shared = &self.shared;
        let Some(socket) = &shared.direct else {
            return false;
        };
        shared.caller_polls(shared.now().as_nanos().max(1));
        let _rx = match shared.rx.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let (wake, got) = {
            let mut st = shared.lock();
            if st.stopped {
                return false;
            }
            let mut recv = st
                .caller_recv
                .take()
                .unwrap_or_else(|| Box::new(RecvBufs::new()));
            let got = match recv.recv(&shared.udp, socket) {
                Ok(_) => true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                Err(e) => {
                    if is_icmp_error(&e) {
                        st.stats.recv_errors += 1;
                    }
                    false
                }
            };
            if got {
                let now = shared.now();
                for (src, d) in recv.datagrams() {
                    st.endpoint
                        .handle_datagram(now, src, Bytes::copy_from_slice(d));
                    st.stats.received += 1;
                }
                st.stats.recv_calls += 1;
                st.stats.caller_recv_calls += 1;
            }
            st.caller_recv = Some(recv);
            if got && shared.standing_by.load(Ordering::Acquire) {
                // The answer waits for this caller's next call (see `standby`).
                shared.answer_waits.store(true, Ordering::Relaxed);
                st.stats.deferred_answers += 1;
                (false, got)
            } else if got || shared.answer_waits.load(Ordering::Relaxed) {
                (self.flush(&mut st), got)
            } else {
                return false;
            }
        };
        if wake {
            shared.poke();
        }
        shared.notify_changed();
        got
    }
}
