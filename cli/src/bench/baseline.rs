//! The kernel's and the memory's figures each rnic figure is compared with, in Rust
//! (`std::net`): a TCP stream, a UDP ping-pong, TCP connect+close, and `memcpy`.
//!
//! Each socket baseline has two halves: the serving half ([`tcp_sink`], [`udp_echo`],
//! [`tcp_accept`]) runs in a peer process (`rnic bench-peer …`, [`super::peer`]) and calls
//! `ready` with its bound address once it can be reached; the measuring half
//! ([`tcp_stream`], [`udp_pingpong`], [`tcp_connect_close`]) runs in the measuring process
//! against that address.

// A benchmark's baselines: they time themselves on the wall clock (`Instant::now`), which the
// workspace's clippy.toml forbids in the simulated, deterministic path only.
#![allow(clippy::disallowed_methods)]

use super::stats::{mean, median, per_second};
use super::BenchError;
use std::hint::black_box;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Deadline of one blocking socket operation of a baseline.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// What a serving half calls once it listens: with its bound address.
pub type Ready<'a> = &'a mut dyn FnMut(SocketAddr) -> Result<(), BenchError>;

/// A zeroed-then-filled buffer of a fixed length that starts on a 4 KiB boundary. This
/// CPU's `rep movsb` copies up to 18× slower at some relative alignments of source and
/// destination; page-aligned buffers give the same speed from run to run (and as the C
/// references).
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` bytes of `fill`, page aligned. Every page is written, so none faults later.
    pub fn new(len: usize, fill: u8) -> AlignedBuf {
        let storage = vec![fill; len + 4096];
        let off = storage.as_ptr().align_offset(4096).min(4096);
        AlignedBuf { storage, off, len }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.off..self.off + self.len]
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.off..self.off + self.len]
    }
}

// ---------------------------------------------------------------------------------------------
// TCP stream

/// Serving half of [`tcp_stream`]: binds `addr`, accepts one connection, reads until EOF,
/// answers with the number of bytes read (8 bytes, little endian) and closes.
///
/// # Errors
/// [`BenchError::Io`] on a socket error or when a read waits more than [`IO_TIMEOUT`].
pub fn tcp_sink(addr: SocketAddr, ready: Ready<'_>) -> Result<(), BenchError> {
    let listener =
        TcpListener::bind(addr).map_err(|e| BenchError::io(format!("bind {addr}"), e))?;
    ready(local(listener.local_addr())?)?;
    let (mut s, _) = listener
        .accept()
        .map_err(|e| BenchError::io("tcp-sink: accept", e))?;
    s.set_nodelay(true)
        .and_then(|()| s.set_read_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| BenchError::io("tcp-sink: socket options", e))?;
    let mut buf = AlignedBuf::new(4 << 20, 0);
    let mut total: u64 = 0;
    loop {
        match s.read(buf.as_mut_slice()) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(BenchError::io("tcp-sink: read", e)),
        }
    }
    s.write_all(&total.to_le_bytes())
        .map_err(|e| BenchError::io("tcp-sink: write the count", e))
}

/// One TCP stream to a [`tcp_sink`] at `sink`: `chunks` writes of `chunk` bytes (a
/// page-aligned buffer), timed from the first write until the sink's byte count arrives (it
/// sends it after reading our FIN). Returns payload bytes per second.
///
/// # Errors
/// [`BenchError::Io`] on a socket error; [`BenchError::Measure`] when the sink counted
/// another number of bytes.
pub fn tcp_stream(sink: SocketAddr, chunk: usize, chunks: u64) -> Result<f64, BenchError> {
    let mut s =
        TcpStream::connect(sink).map_err(|e| BenchError::io(format!("connect {sink}"), e))?;
    s.set_nodelay(true)
        .and_then(|()| s.set_write_timeout(Some(IO_TIMEOUT)))
        .and_then(|()| s.set_read_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| BenchError::io("tcp stream: socket options", e))?;
    let buf = AlignedBuf::new(chunk, 0x5a);
    let start = Instant::now();
    for _ in 0..chunks {
        s.write_all(buf.as_slice())
            .map_err(|e| BenchError::io("tcp stream: write", e))?;
    }
    s.shutdown(Shutdown::Write)
        .map_err(|e| BenchError::io("tcp stream: shutdown", e))?;
    let mut count = [0u8; 8];
    s.read_exact(&mut count)
        .map_err(|e| BenchError::io("tcp stream: the sink's byte count", e))?;
    let elapsed = start.elapsed();
    let sent = chunks * chunk as u64;
    let got = u64::from_le_bytes(count);
    if got != sent {
        return Err(BenchError::Measure(format!(
            "tcp stream: sent {sent} bytes, the sink read {got}"
        )));
    }
    Ok(per_second(sent, elapsed))
}

// ---------------------------------------------------------------------------------------------
// UDP ping-pong

/// Serving half of [`udp_pingpong`]: binds `addr` and echoes every datagram to its sender
/// until a 1-byte `Q`.
///
/// # Errors
/// [`BenchError::Io`] on a socket error or after [`IO_TIMEOUT`] without a datagram.
pub fn udp_echo(addr: SocketAddr, ready: Ready<'_>) -> Result<(), BenchError> {
    let s = UdpSocket::bind(addr).map_err(|e| BenchError::io(format!("bind {addr}"), e))?;
    s.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| BenchError::io("udp-echo: timeout", e))?;
    ready(local(s.local_addr())?)?;
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = s
            .recv_from(&mut buf)
            .map_err(|e| BenchError::io("udp-echo: receive", e))?;
        if n == 1 && buf[0] == b'Q' {
            return Ok(());
        }
        s.send_to(&buf[..n], from)
            .map_err(|e| BenchError::io("udp-echo: send", e))?;
    }
}

/// Round trips of a [`udp_pingpong`], µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rtts {
    /// Median round trip, µs.
    pub median_us: f64,
    /// Mean round trip, µs.
    pub mean_us: f64,
}

/// A UDP ping-pong with a [`udp_echo`] at `echo`, from a socket bound to `bind`: datagrams of
/// `size` bytes, one in flight, blocking sockets; `warmup` round trips, then `count` timed
/// ones. Tells the echo to stop (`Q`) at the end.
///
/// # Errors
/// [`BenchError::Io`] on a socket error or a lost datagram ([`IO_TIMEOUT`]);
/// [`BenchError::Measure`] when an answer has another length, or `count` is 0.
pub fn udp_pingpong(
    echo: SocketAddr,
    bind: SocketAddr,
    size: usize,
    warmup: u64,
    count: u64,
) -> Result<Rtts, BenchError> {
    if count == 0 || size == 0 || size > 1472 {
        return Err(BenchError::Measure(format!(
            "udp ping-pong of {count} × {size} B: give at least one round trip of 1..=1472 bytes"
        )));
    }
    let s = UdpSocket::bind(bind).map_err(|e| BenchError::io(format!("bind {bind}"), e))?;
    s.connect(echo)
        .and_then(|()| s.set_read_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| BenchError::io(format!("connect {echo}"), e))?;
    let msg = vec![0xabu8; size];
    let mut buf = [0u8; 2048];
    let mut rtts = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for i in 0..warmup + count {
        let t = Instant::now();
        s.send(&msg)
            .map_err(|e| BenchError::io("udp ping-pong: send", e))?;
        let n = s
            .recv(&mut buf)
            .map_err(|e| BenchError::io("udp ping-pong: receive", e))?;
        let rtt = t.elapsed();
        if n != size {
            return Err(BenchError::Measure(format!(
                "udp ping-pong: sent {size} bytes, the echo answered {n}"
            )));
        }
        if i >= warmup {
            rtts.push(rtt.as_secs_f64() * 1e6);
        }
    }
    s.send(b"Q")
        .map_err(|e| BenchError::io("udp ping-pong: send the stop", e))?;
    Ok(Rtts {
        median_us: median(&rtts),
        mean_us: mean(&rtts),
    })
}

// ---------------------------------------------------------------------------------------------
// TCP connect + close

/// Serving half of [`tcp_connect_close`]: binds `addr` and serves `count` connections one
/// after the other: accept, read until the client's FIN, close.
///
/// # Errors
/// [`BenchError::Io`] on a socket error or a read that waits more than [`IO_TIMEOUT`].
pub fn tcp_accept(addr: SocketAddr, count: u64, ready: Ready<'_>) -> Result<(), BenchError> {
    let listener =
        TcpListener::bind(addr).map_err(|e| BenchError::io(format!("bind {addr}"), e))?;
    ready(local(listener.local_addr())?)?;
    for _ in 0..count {
        let (mut s, _) = listener
            .accept()
            .map_err(|e| BenchError::io("tcp-accept: accept", e))?;
        s.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| BenchError::io("tcp-accept: timeout", e))?;
        let mut byte = [0u8; 1];
        loop {
            match s.read(&mut byte) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(BenchError::io("tcp-accept: read", e)),
            }
        }
    }
    Ok(())
}

/// TCP connect+close cycles against a [`tcp_accept`] at `server` (which must serve
/// `warmup + cycles` connections): connect (the 3-way handshake), `shutdown(Write)`, read the
/// server's FIN. `warmup` cycles, then `cycles` timed ones: cycles per second.
///
/// # Errors
/// [`BenchError::Io`] on a socket error; [`BenchError::Measure`] when the server sends data
/// or `cycles` is 0.
pub fn tcp_connect_close(server: SocketAddr, warmup: u64, cycles: u64) -> Result<f64, BenchError> {
    if cycles == 0 {
        return Err(BenchError::Measure("tcp connect+close: 0 cycles".into()));
    }
    let cycle = || -> Result<(), BenchError> {
        let mut s = TcpStream::connect(server)
            .map_err(|e| BenchError::io(format!("connect {server}"), e))?;
        s.shutdown(Shutdown::Write)
            .and_then(|()| s.set_read_timeout(Some(IO_TIMEOUT)))
            .map_err(|e| BenchError::io("tcp connect+close: shutdown", e))?;
        match s.read(&mut [0u8; 1]) {
            Ok(0) => Ok(()),
            Ok(_) => Err(BenchError::Measure(
                "tcp connect+close: the server sent data".into(),
            )),
            Err(e) => Err(BenchError::io("tcp connect+close: read the FIN", e)),
        }
    };
    for _ in 0..warmup {
        cycle()?;
    }
    let start = Instant::now();
    for _ in 0..cycles {
        cycle()?;
    }
    Ok(per_second(cycles, start.elapsed()))
}

// ---------------------------------------------------------------------------------------------
// memcpy

/// `memcpy` speed, bytes per second: `copy_from_slice` of `len` bytes between two
/// page-aligned buffers ([`AlignedBuf`]; both the same alignment every run), `copies` copies
/// per timed batch, the best batch of `batches` (after one untimed copy that warms caches and
/// page tables). The best, not the median: the baseline should be the machine's, not the
/// moment's load.
pub fn memcpy_bytes_per_s(len: usize, copies: u32, batches: u32) -> f64 {
    let src = AlignedBuf::new(len, 0x5a);
    let mut dst = AlignedBuf::new(len, 0xa5);
    dst.as_mut_slice()
        .copy_from_slice(black_box(src.as_slice()));
    let copies = copies.max(1);
    let mut best = Duration::MAX;
    for _ in 0..batches.max(1) {
        let start = Instant::now();
        for _ in 0..copies {
            dst.as_mut_slice()
                .copy_from_slice(black_box(src.as_slice()));
            black_box(dst.as_slice());
        }
        best = best.min(start.elapsed());
    }
    per_second(u64::from(copies) * len as u64, best)
}

/// A socket's bound address, or the error.
fn local(addr: std::io::Result<SocketAddr>) -> Result<SocketAddr, BenchError> {
    addr.map_err(|e| BenchError::io("local_addr", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_start_on_a_page_and_hold_their_fill() {
        let b = AlignedBuf::new(10_000, 7);
        assert_eq!(b.as_slice().as_ptr() as usize % 4096, 0);
        assert_eq!(b.as_slice().len(), 10_000);
        assert!(b.as_slice().iter().all(|&x| x == 7));
    }

    #[test]
    fn memcpy_rate_is_positive() {
        assert!(memcpy_bytes_per_s(4096, 10, 2) > 0.0);
    }
}
