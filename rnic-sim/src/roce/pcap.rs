//! pcap export of RoCEv2 datagrams, for Wireshark/tshark (LINKTYPE_ETHERNET, nanosecond
//! timestamps). Each datagram is written as Ethernet II + IPv4/IPv6 + UDP + the RoCE UDP
//! payload, the IP/UDP header being exactly the canonical pseudo header the ICRC was computed
//! over ([`Flow::ip_udp_header`]), so the ICRC shown is valid for the headers shown.
//!
//! This writes to any [`std::io::Write`]; the caller (a driver, a test, the `rnic replay` CLI)
//! owns the file. Time is the simulated time passed in ([`SimTime`]).

use std::io::Write;
use std::net::IpAddr;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket};
use pcap_file::{DataLink, Endianness, TsResolution};
use verbs_core::SimTime;

use super::codec::{encode, CodecError};
use super::icrc::{internet_checksum, Flow};
use super::Packet;

/// Ethernet II header length in bytes.
pub const ETHERNET_HEADER_BYTES: usize = 14;
/// The snap length of [`PcapWriter`]'s files: no datagram is cut.
pub const SNAPLEN: u32 = 262_144;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;

/// Why a datagram could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The underlying writer failed (errno in the `io::Error`).
    #[error("pcap write failed: {0}")]
    Pcap(#[from] pcap_file::PcapError),
    /// The packet could not be encoded.
    #[error("cannot encode packet: {0}")]
    Codec(#[from] CodecError),
}

/// The MAC address the capture shows for `ip`: locally administered, unicast (`02:…`), then
/// the IPv4 address (`02:00:a:b:c:d`), or the last 5 bytes of an IPv6 address. IPv4-mapped
/// IPv6 addresses map as their IPv4 address. Deterministic; not a real neighbour lookup.
pub fn mac_for_ip(ip: IpAddr) -> [u8; 6] {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    match v6.to_ipv4_mapped() {
        Some(v4) => {
            let [a, b, c, d] = v4.octets();
            [0x02, 0x00, a, b, c, d]
        }
        None => {
            let o = v6.octets();
            [0x02, o[11], o[12], o[13], o[14], o[15]]
        }
    }
}

/// Writes RoCEv2 datagrams into a pcap stream (LINKTYPE_ETHERNET, nanosecond timestamps,
/// big-endian file header, snap length 262 144 bytes so no datagram is cut).
pub struct PcapWriter<W: Write> {
    inner: pcap_file::pcap::PcapWriter<W>,
}

impl<W: Write> std::fmt::Debug for PcapWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapWriter").finish_non_exhaustive()
    }
}

impl<W: Write> PcapWriter<W> {
    /// Start a capture: writes the pcap global header to `writer`.
    ///
    /// Errors: [`PcapError::Pcap`] if the writer fails.
    pub fn new(writer: W) -> Result<Self, PcapError> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Big,
            snaplen: SNAPLEN,
            ..PcapHeader::default()
        };
        Ok(PcapWriter {
            inner: pcap_file::pcap::PcapWriter::with_header(writer, header)?,
        })
    }

    /// Write one datagram whose UDP payload (BTH … ICRC, as [`encode`] made it) is
    /// `udp_payload`, sent at `time` on `flow`. IPv4: header checksum computed, UDP checksum 0;
    /// IPv6: UDP checksum computed (zero is not allowed there).
    ///
    /// Errors: [`PcapError::Codec`] ([`CodecError::TooLong`]) if the datagram does not fit the
    /// IP/UDP length fields; [`PcapError::Pcap`] if the writer fails.
    pub fn write_datagram(
        &mut self,
        time: SimTime,
        flow: &Flow,
        udp_payload: &[u8],
    ) -> Result<(), PcapError> {
        let frame = ethernet_frame(flow, udp_payload)?;
        let len = frame.len() as u32;
        let ts = Duration::from_nanos(time.as_nanos());
        self.inner
            .write_packet(&PcapPacket::new_owned(ts, len, frame))?;
        Ok(())
    }

    /// Encode `packet` on `flow` (ICRC included) and write it as [`write_datagram`] does.
    ///
    /// Errors: [`PcapError::Codec`] if the packet cannot be encoded (see [`encode`]);
    /// [`PcapError::Pcap`] if the writer fails.
    ///
    /// [`write_datagram`]: PcapWriter::write_datagram
    pub fn write_packet(
        &mut self,
        time: SimTime,
        flow: &Flow,
        packet: &Packet,
    ) -> Result<(), PcapError> {
        let bytes = encode(packet, flow)?;
        self.write_datagram(time, flow, &bytes)
    }

    /// Finish and return the underlying writer (not flushed: flush it if it buffers).
    pub fn into_inner(self) -> W {
        self.inner.into_writer()
    }
}

/// The bytes [`PcapWriter::write_datagram`] appends for this datagram: the per-packet record
/// of pcap-savefile(5) (seconds, nanoseconds, captured and original length, big-endian, as
/// the file header [`PcapWriter::new`] writes declares) followed by the frame. For a caller
/// that appends each record to the file with one `write(2)`, so that a reader, or a process
/// killed mid-capture, never leaves half a record behind.
///
/// Errors: [`PcapError::Codec`] ([`CodecError::TooLong`]) if the datagram does not fit the
/// IP/UDP length fields; [`PcapError::Pcap`] if `time` is past the year 2106 (the record's
/// seconds are 32 bits).
pub fn datagram_record(
    time: SimTime,
    flow: &Flow,
    udp_payload: &[u8],
) -> Result<Vec<u8>, PcapError> {
    datagram_record_cut(
        Duration::from_nanos(time.as_nanos()),
        flow,
        udp_payload,
        SNAPLEN,
    )
}

/// As [`datagram_record`], at `ts` since the Unix epoch (a wall-clock time, or a simulated
/// one), with the frame cut to its first `snaplen` bytes (the record's original length stays
/// the whole frame's, as tcpdump's `-s` does). The file header keeps its snap length,
/// [`SNAPLEN`]: some readers (the `pcap-file` crate) refuse a record whose original length
/// is larger than the header's.
///
/// Errors: as [`datagram_record`]; [`PcapError::Pcap`] if `ts` is past 2106.
pub fn datagram_record_cut(
    ts: Duration,
    flow: &Flow,
    udp_payload: &[u8],
    snaplen: u32,
) -> Result<Vec<u8>, PcapError> {
    let frame = ethernet_frame(flow, udp_payload)?;
    let secs = u32::try_from(ts.as_secs())
        .map_err(|_| pcap_file::PcapError::InvalidField("PcapPacket: timestamp_secs > u32::MAX"))?;
    let len = frame.len() as u32;
    let cut = len.min(snaplen);
    let mut rec = Vec::with_capacity(16 + cut as usize);
    rec.extend_from_slice(&secs.to_be_bytes());
    rec.extend_from_slice(&ts.subsec_nanos().to_be_bytes());
    rec.extend_from_slice(&cut.to_be_bytes());
    rec.extend_from_slice(&len.to_be_bytes());
    rec.extend_from_slice(frame.get(..cut as usize).unwrap_or(&frame));
    Ok(rec)
}

/// The Ethernet frame a capture shows for a datagram of `flow` whose UDP payload is
/// `udp_payload`: Ethernet II + IPv4/IPv6 + UDP + payload. IPv4: header checksum computed,
/// UDP checksum 0; IPv6: UDP checksum computed (zero is not allowed there).
fn ethernet_frame(flow: &Flow, udp_payload: &[u8]) -> Result<Vec<u8>, PcapError> {
    let mut ip_udp = flow
        .ip_udp_header(udp_payload.len())
        .ok_or(CodecError::TooLong(udp_payload.len()))?;
    if ip_udp.is_ipv6() {
        let hdr = ip_udp.as_bytes();
        let (ip, udp) = hdr.split_at(ip_udp.ip_len());
        let udp_len = (udp.len() + udp_payload.len()) as u32;
        // RFC 8200 §8.1 pseudo header: src, dst, upper-layer length, zeros, next header.
        let pseudo_tail = [&udp_len.to_be_bytes()[..], &[0, 0, 0, 17]].concat();
        let src_dst = ip.get(8..40).unwrap_or(&[]);
        let csum = match internet_checksum(&[src_dst, &pseudo_tail, udp, udp_payload]) {
            0 => 0xFFFF,
            c => c,
        };
        ip_udp.set_udp_checksum(csum);
    }
    let ethertype = if ip_udp.is_ipv6() {
        ETHERTYPE_IPV6
    } else {
        ETHERTYPE_IPV4
    };
    let hdr = ip_udp.as_bytes();
    let mut frame = Vec::with_capacity(ETHERNET_HEADER_BYTES + hdr.len() + udp_payload.len());
    frame.extend_from_slice(&mac_for_ip(flow.dst.ip()));
    frame.extend_from_slice(&mac_for_ip(flow.src.ip()));
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(hdr);
    frame.extend_from_slice(udp_payload);
    Ok(frame)
}
