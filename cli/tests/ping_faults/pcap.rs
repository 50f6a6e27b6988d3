//! Reading the pcap files `rnic ping --pcap` writes, in tests: records, frames, addresses.

#![allow(clippy::unwrap_used, dead_code)] // test helpers

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;

/// The file header of `rnic_sim::roce::pcap::PcapWriter`: magic of big-endian nanosecond
/// pcap, then version 2.4.
const MAGIC_NS_BE: [u8; 4] = [0xa1, 0xb2, 0x3c, 0x4d];

/// A capture read back: its frames (Ethernet) in file order, and how many bytes at the end
/// are a record cut short (0 when the file ends on a whole record).
pub struct Capture {
    pub frames: Vec<Vec<u8>>,
    pub whole_len: usize,
    pub partial_tail: usize,
}

/// Reads `path` as `rnic ping --pcap` writes it; panics unless it has the file header and
/// whole records, the last possibly cut short.
pub fn read(path: &Path) -> Capture {
    let b = std::fs::read(path).unwrap();
    assert!(b.len() >= 24, "{}: {} bytes", path.display(), b.len());
    assert_eq!(b[..4], MAGIC_NS_BE, "{}", path.display());
    let mut o = 24;
    let mut frames = Vec::new();
    while o + 16 <= b.len() {
        let incl = u32::from_be_bytes(b[o + 8..o + 12].try_into().unwrap()) as usize;
        let orig = u32::from_be_bytes(b[o + 12..o + 16].try_into().unwrap()) as usize;
        assert!(incl <= orig, "{}: record at {o}", path.display());
        assert!(incl <= 262_144, "{}: record at {o}", path.display());
        if o + 16 + incl > b.len() {
            break;
        }
        frames.push(b[o + 16..o + 16 + incl].to_vec());
        o += 16 + incl;
    }
    Capture {
        frames,
        whole_len: o,
        partial_tail: b.len() - o,
    }
}

/// The source socket of an Ethernet + IPv4 + UDP frame.
pub fn source(frame: &[u8]) -> SocketAddr {
    let ip: [u8; 4] = frame[26..30].try_into().unwrap();
    let port = u16::from_be_bytes([frame[34], frame[35]]);
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port))
}

/// Each distinct frame `from` sent (the sender's capture has them all, those the fault layer
/// then dropped included) → (copies sent, copies the receiver's capture has).
pub fn fates(
    sender: &Capture,
    receiver: &Capture,
    from: SocketAddr,
) -> BTreeMap<Vec<u8>, (u32, u32)> {
    let mut f: BTreeMap<Vec<u8>, (u32, u32)> = BTreeMap::new();
    for fr in sender.frames.iter().filter(|fr| source(fr) == from) {
        f.entry(fr.clone()).or_default().0 += 1;
    }
    for fr in receiver.frames.iter().filter(|fr| source(fr) == from) {
        f.entry(fr.clone()).or_default().1 += 1;
    }
    f
}

/// A UDP port free on `ip` a moment ago (bound and released).
pub fn free_udp_port(ip: &str) -> u16 {
    let s = std::net::UdpSocket::bind(format!("{ip}:0")).unwrap();
    s.local_addr().unwrap().port()
}
