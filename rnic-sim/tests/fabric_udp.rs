//! The real UDP fabric on loopback: the same sans-IO endpoints as in the simulation, over real
//! sockets on ports the OS picks (bind to port 0). Waits are bounded by generous timeouts and
//! end as soon as the condition holds; nothing here measures speed.

// Test helpers outside #[test] fns may unwrap too (clippy.toml allows it only inside tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use bytes::Bytes;
use rnic_sim::fabric::udp::{SpawnedUdpDriver, UdpDriver};
use rnic_sim::fabric::Endpoint;
use verbs_core::SimTime;

const WAIT: Duration = Duration::from_secs(20);

/// Echoes every datagram back to its sender.
struct Echo {
    addr: SocketAddr,
    outbox: VecDeque<(SocketAddr, Bytes)>,
    echoed: u64,
}

impl Echo {
    fn new(addr: SocketAddr) -> Self {
        Echo {
            addr,
            outbox: VecDeque::new(),
            echoed: 0,
        }
    }
}

impl Endpoint for Echo {
    fn handle_datagram(&mut self, _now: SimTime, src: SocketAddr, bytes: Bytes) {
        self.echoed += 1;
        self.outbox.push_back((src, bytes));
    }
    fn poll_transmit(&mut self, _now: SimTime) -> Option<(SocketAddr, Bytes)> {
        self.outbox.pop_front()
    }
    fn poll_timeout(&self) -> Option<SimTime> {
        None
    }
    fn handle_timeout(&mut self, _now: SimTime) {}
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Sends `remaining` pings to `server`, one per timer tick 1 ms apart, and records the replies.
struct Pinger {
    addr: SocketAddr,
    server: SocketAddr,
    remaining: u32,
    sent: u32,
    next_tick: Option<SimTime>,
    outbox: VecDeque<(SocketAddr, Bytes)>,
    replies: Vec<Bytes>,
}

impl Pinger {
    fn new(addr: SocketAddr, server: SocketAddr, count: u32) -> Self {
        Pinger {
            addr,
            server,
            remaining: count,
            sent: 0,
            next_tick: Some(SimTime::ZERO),
            outbox: VecDeque::new(),
            replies: Vec::new(),
        }
    }

    fn ping(&mut self) {
        let payload = Bytes::from(format!("ping {}", self.sent));
        self.sent += 1;
        self.outbox.push_back((self.server, payload));
    }
}

impl Endpoint for Pinger {
    fn handle_datagram(&mut self, _now: SimTime, _src: SocketAddr, bytes: Bytes) {
        self.replies.push(bytes);
    }
    fn poll_transmit(&mut self, _now: SimTime) -> Option<(SocketAddr, Bytes)> {
        self.outbox.pop_front()
    }
    fn poll_timeout(&self) -> Option<SimTime> {
        self.next_tick
    }
    fn handle_timeout(&mut self, now: SimTime) {
        self.ping();
        self.remaining -= 1;
        self.next_tick = (self.remaining > 0).then(|| now.plus_nanos(1_000_000));
    }
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn loopback_socket() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

fn sorted(mut v: Vec<Bytes>) -> Vec<Bytes> {
    v.sort();
    v
}

fn pings(n: u32) -> Vec<Bytes> {
    sorted((0..n).map(|i| Bytes::from(format!("ping {i}"))).collect())
}

#[test]
fn echo_endpoints_exchange_datagrams_over_real_udp_on_loopback() {
    let server_socket = loopback_socket();
    let server_addr = server_socket.local_addr().unwrap();
    let client_socket = loopback_socket();
    let client_addr = client_socket.local_addr().unwrap();

    let server = UdpDriver::spawn(Echo::new(server_addr), server_socket).unwrap();
    let client = UdpDriver::spawn(Pinger::new(client_addr, server_addr, 5), client_socket).unwrap();
    assert_eq!(server.local_addr(), server_addr);

    // Five timer-driven pings come back.
    assert!(client.handle().wait_until(WAIT, |p| p.replies.len() == 5));
    // A ping queued through the handle goes out at once (the handle wakes the driver).
    client.handle().with(|p, _now| p.ping());
    assert!(client.handle().wait_until(WAIT, |p| p.replies.len() == 6));

    let replies = client.handle().with(|p, _| p.replies.clone());
    assert_eq!(sorted(replies), pings(6));
    assert_eq!(server.handle().with(|e, _| e.echoed), 6);
    let (client_handle, server_handle) = (client.handle().clone(), server.handle().clone());
    client.shutdown().unwrap();
    server.shutdown().unwrap();
    assert!(client_handle.is_stopped());
    // Read the counters once both loops have ended: a driver counts a send after its
    // `send_to` returns, which can be after the peer has already seen the datagram.
    let (cs, ss) = (client_handle.stats(), server_handle.stats());
    assert_eq!((cs.sent, cs.received, ss.received, ss.sent), (6, 6, 6, 6));
}

#[test]
fn async_driver_runs_in_the_callers_tokio_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let server = UdpDriver::bind(Echo::new(any_port), any_port)
            .await
            .unwrap();
        let server_addr = server.local_addr();
        let client_socket = tokio::net::UdpSocket::bind(any_port).await.unwrap();
        let client_addr = client_socket.local_addr().unwrap();
        let client =
            UdpDriver::from_socket(Pinger::new(client_addr, server_addr, 3), client_socket)
                .unwrap();
        let (sh, ch) = (server.handle(), client.handle());
        let server_task = tokio::spawn(server.run());
        let client_task = tokio::spawn(client.run());

        let done = tokio::time::timeout(WAIT, ch.wait_until_async(|p| p.replies.len() == 3));
        assert!(done.await.unwrap());
        assert_eq!(sorted(ch.with(|p, _| p.replies.clone())), pings(3));

        ch.stop();
        sh.stop();
        client_task.await.unwrap().unwrap();
        server_task.await.unwrap().unwrap();
        assert!(ch.is_stopped() && sh.is_stopped());
    });
}

/// Queues datagrams through the handle and keeps what comes back, in arrival order.
struct Burst {
    addr: SocketAddr,
    outbox: VecDeque<(SocketAddr, Bytes)>,
    back: Vec<Bytes>,
}

impl Endpoint for Burst {
    fn handle_datagram(&mut self, _now: SimTime, _src: SocketAddr, bytes: Bytes) {
        self.back.push(bytes);
    }
    fn poll_transmit(&mut self, _now: SimTime) -> Option<(SocketAddr, Bytes)> {
        self.outbox.pop_front()
    }
    fn poll_timeout(&self) -> Option<SimTime> {
        None
    }
    fn handle_timeout(&mut self, _now: SimTime) {}
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// 40 datagrams of 1400 bytes and a short one, queued at once: they leave in GSO batches of
/// several datagrams per system call and come back from the echo (batched again) byte for
/// byte and in order. Both drivers asked for 4 MiB socket buffers and report what they got.
#[test]
fn a_burst_leaves_in_batches_and_arrives_whole_and_in_order() {
    let server_socket = loopback_socket();
    let server_addr = server_socket.local_addr().unwrap();
    let client_socket = loopback_socket();
    let client_addr = client_socket.local_addr().unwrap();
    let server = UdpDriver::spawn(Echo::new(server_addr), server_socket).unwrap();
    let burst = Burst {
        addr: client_addr,
        outbox: VecDeque::new(),
        back: Vec::new(),
    };
    let client = UdpDriver::spawn(burst, client_socket).unwrap();
    let sent: Vec<Bytes> = (0..41u8)
        .map(|i| Bytes::from(vec![i; if i == 40 { 100 } else { 1400 }]))
        .collect();
    client.handle().with(|b, _| {
        b.outbox
            .extend(sent.iter().map(|d| (server_addr, d.clone())));
    });
    assert!(client.handle().wait_until(WAIT, |b| b.back.len() == 41));
    assert_eq!(client.handle().with(|b, _| b.back.clone()), sent);
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    client.shutdown().unwrap();
    server.shutdown().unwrap();
    let (cs, ss) = (ch.stats(), sh.stats());
    assert_eq!(
        (cs.sent, ss.received, ss.sent, cs.received),
        (41, 41, 41, 41)
    );
    assert!(cs.send_calls * 4 <= cs.sent, "batched sends: {cs:?}");
    assert!(cs.recv_calls < cs.received, "batched receives: {cs:?}");
    let b = ch.socket_buffers();
    assert_eq!(b.requested, rnic_sim::fabric::udp::SOCKET_BUFFER_BYTES);
    assert!(b.recv > 0 && b.send > 0, "{b:?}");
}

/// Records every datagram it is handed, in order.
struct Collector {
    addr: SocketAddr,
    got: Vec<Bytes>,
}

impl Endpoint for Collector {
    fn handle_datagram(&mut self, _now: SimTime, _src: SocketAddr, bytes: Bytes) {
        self.got.push(bytes);
    }
    fn poll_transmit(&mut self, _now: SimTime) -> Option<(SocketAddr, Bytes)> {
        None
    }
    fn poll_timeout(&self) -> Option<SimTime> {
        None
    }
    fn handle_timeout(&mut self, _now: SimTime) {}
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// `UdpHandle::progress`: a caller that polls receives datagrams itself, and whichever thread
/// (the caller or the driver) read a datagram, the endpoint gets them in the order sent.
#[test]
// A second thread sends while this one polls, and the poll loop has a wall-clock deadline.
#[allow(clippy::disallowed_methods)]
fn caller_progress_delivers_in_order_alongside_the_driver() {
    const N: u32 = 3000;
    let socket = loopback_socket();
    let addr = socket.local_addr().unwrap();
    let driver = UdpDriver::spawn(
        Collector {
            addr,
            got: Vec::new(),
        },
        socket,
    )
    .unwrap();
    let handle = driver.handle().clone();
    assert!(!handle.progress(), "nothing was sent yet");

    let sender = std::thread::spawn(move || {
        let s = loopback_socket();
        for i in 0..N {
            s.send_to(&i.to_be_bytes(), addr).unwrap();
            if i % 64 == 0 {
                std::thread::yield_now(); // let both receivers take turns
            }
        }
    });
    let mut delivered_here = 0u32;
    let deadline = std::time::Instant::now() + WAIT;
    while handle.with_quiet(|c, _| c.got.len()) < N as usize && std::time::Instant::now() < deadline
    {
        if handle.progress() {
            delivered_here += 1;
        }
    }
    sender.join().unwrap();
    let got = handle.with_quiet(|c, _| c.got.clone());
    assert_eq!(got.len(), N as usize, "every datagram delivered");
    let seq: Vec<u32> = got
        .iter()
        .map(|b| u32::from_be_bytes(b[..4].try_into().unwrap()))
        .collect();
    assert!(
        seq.windows(2).all(|w| w[0] < w[1]),
        "delivered out of order: the receive lock must cover receive and delivery"
    );
    let stats = handle.stats();
    assert_eq!(stats.received, u64::from(N));
    assert!(
        delivered_here > 0 && stats.caller_recv_calls > 0,
        "the polling caller received nothing itself ({stats:?})"
    );
}

/// An [`Echo`] on a spawned driver and a peer socket to talk to it, for the stand-by tests.
struct EchoRig {
    driver: SpawnedUdpDriver<Echo>,
    addr: SocketAddr,
    peer: UdpSocket,
}

fn echo_rig() -> EchoRig {
    let socket = loopback_socket();
    let addr = socket.local_addr().unwrap();
    let driver = UdpDriver::spawn(Echo::new(addr), socket).unwrap();
    let peer = loopback_socket();
    peer.set_read_timeout(Some(WAIT)).unwrap();
    EchoRig { driver, addr, peer }
}

/// While a caller spins on `progress`, the driver stands by and the answer to what the caller
/// received waits for the caller's next call: `with` sends it before its closure runs (a call
/// may destroy the QP whose ACK it is), and when the caller goes quiet the driver sends it.
#[test]
// The spin loops have a wall-clock deadline.
#[allow(clippy::disallowed_methods)]
fn a_spinning_callers_answer_waits_for_its_next_call_or_the_driver() {
    let EchoRig { driver, addr, peer } = echo_rig();
    let handle = driver.handle().clone();
    // The spin loops' wall-clock deadline.
    let deadline = std::time::Instant::now() + WAIT;
    let spin_until = |what: &str, done: &dyn Fn() -> bool| {
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}: timed out");
            handle.progress();
        }
    };
    spin_until("the driver stands by", &|| handle.stats().standbys > 0);

    // A datagram the spinning caller receives: its echo is deferred...
    peer.send_to(b"first", addr).unwrap();
    spin_until("the caller receives", &|| {
        handle.with_quiet(|e, _| e.echoed) == 1
    });
    assert!(
        handle.stats().deferred_answers >= 1,
        "the answer was sent from inside progress: {:?}",
        handle.stats()
    );
    // ...and `with` sends it before its closure sees the endpoint.
    let waiting_in_f = handle.with(|e, _| e.outbox.len());
    assert_eq!(
        waiting_in_f, 0,
        "the deferred answer was still queued when `with` ran"
    );
    let mut buf = [0u8; 16];
    let (n, _) = peer.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"first");

    // A caller that goes quiet after its receive: the driver sends the answer.
    spin_until("the driver stands by again", &|| {
        handle.stats().standbys > 1
    });
    peer.send_to(b"second", addr).unwrap();
    spin_until("the caller receives again", &|| {
        handle.with_quiet(|e, _| e.echoed) == 2
    });
    let (n, _) = peer.recv_from(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"second",
        "the standing-by driver never sent the answer"
    );
}

/// A caller that spun and then stopped polling (a program spinning on memory for its peer's
/// RDMA WRITE): the driver receives the next datagram itself and holds its answer for the
/// caller's next call, at most a moment, and then sends it: it is never lost. A caller that
/// said it sleeps (armed a CQ, blocks) gets its answers at once.
#[test]
// The spin loops have a wall-clock deadline.
#[allow(clippy::disallowed_methods)]
fn the_driver_holds_its_answer_for_a_caller_that_just_stopped_spinning() {
    let EchoRig { driver, addr, peer } = echo_rig();
    let handle = driver.handle().clone();
    // The spin loops' wall-clock deadline.
    let deadline = std::time::Instant::now() + WAIT;
    let wait_for = |what: &str, done: &dyn Fn() -> bool, spin: bool| {
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}: timed out");
            if spin {
                handle.progress();
            } else {
                std::thread::yield_now();
            }
        }
    };
    let mut buf = [0u8; 16];
    // The hold needs the driver to receive within a few ms of the caller's last poll: on a
    // loaded machine it may not, so try a few times; it must happen.
    let mut held = false;
    for echoed in 1..=20 {
        let standbys = handle.stats().standbys;
        wait_for(
            "the driver stands by",
            &|| handle.stats().standbys > standbys,
            true,
        );
        let before = handle.stats().deferred_answers;
        peer.send_to(b"held", addr).unwrap();
        // No call from the caller from here on: the driver receives, holds, sends.
        wait_for(
            "the driver receives",
            &|| handle.with_quiet(|e, _| e.echoed) == echoed,
            false,
        );
        let (n, _) = peer.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"held", "the held answer was never sent");
        if handle.stats().deferred_answers > before {
            held = true;
            break;
        }
    }
    assert!(
        held,
        "the driver never held an answer: {:?}",
        handle.stats()
    );

    // A caller that sleeps: nothing is held.
    wait_for("callers spin again", &|| handle.stats().standbys > 0, true);
    handle.caller_sleeps();
    let before = handle.stats().deferred_answers;
    peer.send_to(b"at once", addr).unwrap();
    let (n, _) = peer.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"at once");
    assert_eq!(
        handle.stats().deferred_answers,
        before,
        "an answer was held for a caller that sleeps"
    );
}
