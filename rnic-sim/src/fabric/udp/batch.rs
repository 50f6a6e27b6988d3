//! Batched datagram I/O for the UDP driver, through quinn-udp (the crate QUIC's quinn sends and
//! receives with): consecutive datagrams to one destination leave in one `sendmsg` with UDP
//! generic segmentation offload (GSO, `UDP_SEGMENT`), and one `recvmmsg` reads up to
//! [`RECV_SLOTS`] messages, each of which may hold several datagrams the kernel coalesced (GRO,
//! `UDP_GRO`). On loopback a GSO send reaches a GRO socket as one buffer: 15 packets of a
//! 64 KiB RDMA WRITE cost one system call on each side instead of 15. Where the kernel has no
//! GSO, quinn-udp finds out at the first failed send and every later transmit is one datagram.
//!
//! Also here: the socket buffer sizes the driver asks for, reads back and reports.
//!
//! Datagrams are sent with "don't fragment" (quinn-udp sets `IP_PMTUDISC_PROBE`): a datagram
//! larger than the path's IP MTU fails with `EMSGSIZE` and is counted as a send error. RoCE
//! never fragments either; the network must carry the path MTU the QPs use.

use std::collections::VecDeque;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsFd;

use bytes::Bytes;
use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};

use super::UdpStats;

/// Messages one receive call reads at most (`recvmmsg`'s batch; quinn-udp's `BATCH_SIZE`).
pub(super) const RECV_SLOTS: usize = quinn_udp::BATCH_SIZE;

/// Bytes of one receive slot: the largest UDP payload, which also bounds what GRO coalesces
/// into one message.
const SLOT_BYTES: usize = super::MAX_DATAGRAM + 1;

/// The largest payload of one GSO send: the segments and their headers must fit one IP
/// packet's 64 KiB before the kernel cuts them.
const MAX_GSO_BYTES: usize = 65_000;

/// The most segments one GSO send carries (the kernel's `UDP_MAX_SEGMENTS` is 64 or more).
const MAX_GSO_SEGMENTS: usize = 64;

/// The socket buffer size the driver asks for, each direction, in bytes: room for the largest
/// burst a few QPs emit at once. One RC QP keeps at most `max_unacked_psns` packets in flight
/// (128 by default: 128 × 4 KiB ≈ 0.5 MiB of payload at path MTU 4096, about twice that in
/// kernel accounting, which charges a buffer's whole allocation); 4 MiB holds four such
/// windows. The kernel caps the request at `net.core.rmem_max` / `wmem_max` (208 KiB on a
/// default Linux: raise them with `sysctl` to give the driver what it asks for).
pub const SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// What the kernel granted for a socket's buffers (read back after setting them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketBuffers {
    /// The size asked for, each direction, in bytes.
    pub requested: usize,
    /// The receive buffer granted, in bytes (`SO_RCVBUF` read back, halved: Linux reports
    /// twice the size it grants, counting its own overhead).
    pub recv: usize,
    /// The send buffer granted, in bytes (`SO_SNDBUF` read back, halved).
    pub send: usize,
}

impl SocketBuffers {
    /// The RC requester window in bytes ([`SimDeviceConfig::max_unacked_bytes`]) that fits
    /// this receive buffer: half of it, as the kernel charges a datagram's whole allocation
    /// (up to twice its payload) and other QPs and ACKs share the socket. It assumes the peer
    /// was granted the same buffer as this side — the same software under the same `sysctl`
    /// limits. At least 16 KiB.
    ///
    /// [`SimDeviceConfig::max_unacked_bytes`]: crate::SimDeviceConfig::max_unacked_bytes
    pub fn rc_window_bytes(&self) -> u64 {
        (self.recv as u64 / 2).max(16 << 10)
    }

    /// Whether the kernel gave less than asked for in either direction (bursts larger than
    /// the buffer may then be dropped by the receiving kernel and retransmitted).
    pub fn capped(&self) -> bool {
        self.recv < self.requested || self.send < self.requested
    }
}

/// Asks for `bytes` of receive and send buffer on `socket` and reads back what the kernel
/// granted. Without `CAP_NET_ADMIN` the kernel caps the request at `net.core.rmem_max` /
/// `wmem_max`; a capped result is logged (`tracing` warning) and visible in the returned
/// value. Errors of the socket options are not fatal: the result then shows the sizes the
/// socket has.
pub fn size_socket_buffers(socket: &impl AsFd, bytes: usize) -> SocketBuffers {
    let sock = socket2::SockRef::from(socket);
    // Linux reports twice what it granted.
    let read = |r: io::Result<usize>| r.map_or(0, |n| n / 2);
    if read(sock.recv_buffer_size()) < bytes {
        let _ = sock.set_recv_buffer_size(bytes);
    }
    if read(sock.send_buffer_size()) < bytes {
        let _ = sock.set_send_buffer_size(bytes);
    }
    let got = SocketBuffers {
        requested: bytes,
        recv: read(sock.recv_buffer_size()),
        send: read(sock.send_buffer_size()),
    };
    if got.capped() {
        tracing::warn!(
            requested = bytes,
            recv = got.recv,
            send = got.send,
            "UDP socket buffers capped by the kernel (net.core.rmem_max / wmem_max): \
             bursts larger than the receive buffer may be dropped and retransmitted"
        );
    }
    got
}

/// quinn-udp's state of one socket (GSO support, learned send errors), shared by every thread
/// that sends on it.
pub(super) fn socket_state(socket: &impl AsFd) -> io::Result<UdpSocketState> {
    UdpSocketState::new(UdpSockRef::from(socket))
}

/// Sends the datagrams of `queue` in order, as GSO batches where consecutive datagrams go to
/// one destination and none is longer than the first of its batch. Stops, leaving the rest
/// queued, when the socket would block. A batch the kernel refuses is counted in
/// [`UdpStats::send_errors`] and dropped, as the network would drop it.
pub(super) fn send_all(
    queue: &mut VecDeque<(SocketAddr, Bytes)>,
    stats: &mut UdpStats,
    gso: &mut Vec<u8>,
    state: &UdpSocketState,
    socket: &impl AsFd,
) {
    while let Some((dst, first)) = queue.front() {
        let (dst, seg) = (*dst, first.len());
        let max = state.max_gso_segments().min(MAX_GSO_SEGMENTS);
        let mut n = 1;
        let mut total = seg;
        while n < max {
            let Some((d, b)) = queue.get(n) else { break };
            if *d != dst || b.len() > seg || total + b.len() > MAX_GSO_BYTES {
                break;
            }
            total += b.len();
            n += 1;
            if b.len() < seg {
                break; // Only the last segment of a batch may be shorter.
            }
        }
        let contents: &[u8] = if n == 1 {
            first
        } else {
            gso.clear();
            for (_, b) in queue.iter().take(n) {
                gso.extend_from_slice(b);
            }
            gso
        };
        let transmit = Transmit {
            destination: dst,
            ecn: None,
            contents,
            segment_size: (n > 1).then_some(seg),
            src_ip: None,
        };
        match state.try_send(UdpSockRef::from(socket), &transmit) {
            Ok(()) => {
                stats.sent += n as u64;
                stats.send_calls += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            // quinn-udp turned GSO off after this failure: send the batch again, one by one.
            Err(_) if n > 1 && state.max_gso_segments() == 1 => continue,
            Err(_) => stats.send_errors += n as u64,
        }
        queue.drain(..n);
    }
}

/// The receive side: [`RECV_SLOTS`] buffers of 64 KiB, filled by one `recvmmsg`.
pub(super) struct RecvBufs {
    slots: Vec<u8>,
    meta: [RecvMeta; RECV_SLOTS],
    filled: usize,
}

impl RecvBufs {
    pub(super) fn new() -> Self {
        RecvBufs {
            slots: vec![0; RECV_SLOTS * SLOT_BYTES],
            meta: [RecvMeta::default(); RECV_SLOTS],
            filled: 0,
        }
    }

    /// One `recvmmsg` (non-blocking): returns the number of messages read (each may hold
    /// several datagrams), or the error (`WouldBlock` when none is waiting).
    pub(super) fn recv(&mut self, state: &UdpSocketState, socket: &impl AsFd) -> io::Result<usize> {
        self.filled = 0;
        let mut bufs: Vec<IoSliceMut<'_>> = self
            .slots
            .chunks_exact_mut(SLOT_BYTES)
            .map(IoSliceMut::new)
            .collect();
        let n = state.recv(UdpSockRef::from(socket), &mut bufs, &mut self.meta)?;
        self.filled = n.min(RECV_SLOTS);
        Ok(self.filled)
    }

    /// The datagrams of the last [`recv`](Self::recv), in arrival order, with their sources: a
    /// coalesced message is cut at its stride.
    pub(super) fn datagrams(&self) -> impl Iterator<Item = (SocketAddr, &[u8])> + '_ {
        self.meta[..self.filled]
            .iter()
            .zip(self.slots.chunks_exact(SLOT_BYTES))
            .flat_map(|(m, slot)| {
                let data = &slot[..m.len.min(SLOT_BYTES)];
                let stride = if m.stride == 0 {
                    data.len().max(1)
                } else {
                    m.stride
                };
                data.chunks(stride).map(move |d| (m.addr, d))
            })
    }
}
