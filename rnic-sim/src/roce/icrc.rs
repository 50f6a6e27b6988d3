//! The RoCEv2 Invariant CRC (ICRC) and the canonical pseudo IP/UDP header it is computed over
//! (cm-spec §1.5 [rxe_icrc.c, rxe_hdr.h]; design note: `docs/roce-wire.md`).
//!
//! The ICRC covers the IP and UDP headers with their variant fields masked to all-ones. The
//! IPv4 Identification and total length are *not* masked, so a simulator that sends through an
//! ordinary UDP socket cannot know the header the OS will emit. We therefore compute the ICRC
//! over a **canonical pseudo header** derived only from the [`Flow`] (the two socket addresses)
//! and the datagram length — see [`Flow::ip_udp_header`]. Two peers that both use this crate
//! agree; a hardware RNIC or rxe receiving our datagrams would compute over the real IP header
//! and (unless it happens to match: ID 0, DF set) reject the ICRC. The pcap export writes exactly
//! this canonical header, so every ICRC in a capture is valid for the headers it shows.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{BTH_BYTES, ICRC_BYTES};

/// The CRC-32 register value rxe starts from (`0xdebb20e3`): the raw register after feeding
/// 8 bytes of 0xFF (the fully masked IB LRH stand-in) from the standard initial value
/// 0xFFFF_FFFF. Equal to `!crc32(&[0xFF; 8])` [rxe_icrc.c; cm-spec §1.5 step 1].
pub const ICRC_SEED_REGISTER: u32 = 0xDEBB_20E3;

/// IPv4 header length in bytes (no options).
pub const IPV4_HEADER_BYTES: usize = 20;
/// IPv6 fixed header length in bytes.
pub const IPV6_HEADER_BYTES: usize = 40;
/// UDP header length in bytes.
pub const UDP_HEADER_BYTES: usize = 8;
/// Time-to-live / hop limit written into the canonical header (masked out of the ICRC).
pub const CANONICAL_TTL: u8 = 64;

/// The pseudo IP/UDP addressing of one RoCEv2 datagram: the UDP source and destination socket
/// addresses. The ICRC is computed over the canonical IP + UDP header built from it
/// ([`Flow::ip_udp_header`]).
///
/// Address families: IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, as a dual-stack socket
/// reports IPv4 peers) are treated as IPv4. If, after that, both addresses are IPv4 the header
/// is IPv4; otherwise it is IPv6, an IPv4 address being written in its mapped form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// Source address and UDP source port (rxe uses 0xC000 + QPN hash; cm-spec §1.1).
    pub src: SocketAddr,
    /// Destination address and UDP destination port (normally 4791).
    pub dst: SocketAddr,
}

/// A built IP + UDP header (IPv4: 28 bytes, IPv6: 48 bytes) as written on the wire / in pcap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpUdpHeader {
    buf: [u8; IPV6_HEADER_BYTES + UDP_HEADER_BYTES],
    len: usize,
    ipv6: bool,
}

impl IpUdpHeader {
    /// The header bytes (IP header then UDP header).
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// True for an IPv6 header, false for IPv4.
    pub fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// Length of the IP header alone in bytes (20 or 40).
    pub fn ip_len(&self) -> usize {
        if self.ipv6 {
            IPV6_HEADER_BYTES
        } else {
            IPV4_HEADER_BYTES
        }
    }

    /// A copy with the fields the ICRC masks forced to all ones (see [`mask_ip_udp`]).
    pub fn masked_for_icrc(&self) -> IpUdpHeader {
        let mut m = *self;
        let len = m.len;
        if let Some(b) = m.buf.get_mut(..len) {
            mask_ip_udp(b);
        }
        m
    }

    /// Store a UDP checksum (big-endian) into the UDP header.
    pub(crate) fn set_udp_checksum(&mut self, csum: u16) {
        let at = self.ip_len() + 6;
        self.buf[at..at + 2].copy_from_slice(&csum.to_be_bytes());
    }
}

/// The IPv4 address inside an IPv4-mapped IPv6 address, or the address itself.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The standard Internet checksum (RFC 1071) of `chunks` concatenated, as if each chunk
/// started at an even offset (all our chunks have even length except possibly the last).
pub(crate) fn internet_checksum(chunks: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    for chunk in chunks {
        let mut pairs = chunk.chunks_exact(2);
        for p in &mut pairs {
            sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
        }
        if let [last] = pairs.remainder() {
            sum += u64::from(*last) << 8;
        }
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

impl Flow {
    /// A flow from source to destination socket address.
    pub const fn new(src: SocketAddr, dst: SocketAddr) -> Flow {
        Flow { src, dst }
    }

    /// The same flow seen from the other end (source and destination swapped).
    pub const fn reversed(&self) -> Flow {
        Flow {
            src: self.dst,
            dst: self.src,
        }
    }

    /// The canonical IP + UDP header of a datagram on this flow whose UDP payload (BTH …
    /// ICRC) is `udp_payload_len` bytes. This is the header the ICRC is computed over (after
    /// [`IpUdpHeader::masked_for_icrc`]) and the header the pcap export writes:
    ///
    /// * IPv4: version 4, IHL 5, TOS 0, total length = 28 + `udp_payload_len`,
    ///   **Identification 0**, flags DF (0x4000), fragment offset 0, TTL 64, protocol 17 (UDP),
    ///   header checksum computed (RFC 791), then the addresses.
    /// * IPv6: version 6, traffic class 0, flow label 0, payload length = 8 +
    ///   `udp_payload_len`, next header 17, hop limit 64, then the addresses.
    /// * UDP: ports from the flow, length = 8 + `udp_payload_len`, checksum 0 (for IPv6 the
    ///   pcap writer fills in the real checksum; the ICRC masks it either way).
    ///
    /// Returns `None` when the lengths do not fit the 16-bit length fields (IPv4: payload over
    /// 65 507 bytes; IPv6: over 65 527 bytes).
    pub fn ip_udp_header(&self, udp_payload_len: usize) -> Option<IpUdpHeader> {
        let src = canonical_ip(self.src.ip());
        let dst = canonical_ip(self.dst.ip());
        let mut buf = [0u8; IPV6_HEADER_BYTES + UDP_HEADER_BYTES];
        let udp_len = u16::try_from(UDP_HEADER_BYTES + udp_payload_len).ok()?;
        let (ipv6, ip_len) = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = u16::try_from(IPV4_HEADER_BYTES + usize::from(udp_len)).ok()?;
                write_ipv4(&mut buf, total, s, d);
                (false, IPV4_HEADER_BYTES)
            }
            (s, d) => {
                buf[0] = 0x60;
                buf[4..6].copy_from_slice(&udp_len.to_be_bytes());
                buf[6] = 17;
                buf[7] = CANONICAL_TTL;
                buf[8..24].copy_from_slice(&as_v6(s).octets());
                buf[24..40].copy_from_slice(&as_v6(d).octets());
                (true, IPV6_HEADER_BYTES)
            }
        };
        let udp = &mut buf[ip_len..ip_len + UDP_HEADER_BYTES];
        udp[0..2].copy_from_slice(&self.src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst.port().to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        Some(IpUdpHeader {
            buf,
            len: ip_len + UDP_HEADER_BYTES,
            ipv6,
        })
    }
}

fn write_ipv4(buf: &mut [u8; 48], total: u16, src: Ipv4Addr, dst: Ipv4Addr) {
    buf[0] = 0x45;
    buf[2..4].copy_from_slice(&total.to_be_bytes());
    // Identification 0, flags DF.
    buf[6] = 0x40;
    buf[8] = CANONICAL_TTL;
    buf[9] = 17;
    buf[12..16].copy_from_slice(&src.octets());
    buf[16..20].copy_from_slice(&dst.octets());
    // RFC 1071 over the 16-bit words just written, summed from the values rather than read
    // back from `buf` (the byte stores would not forward to the word loads: a stall per word,
    // on every packet sent and received).
    let word = |b: [u8; 4]| {
        u32::from(u16::from_be_bytes([b[0], b[1]])) + u32::from(u16::from_be_bytes([b[2], b[3]]))
    };
    let mut sum = 0x4500 + u32::from(total) + 0x4000 + (u32::from(CANONICAL_TTL) << 8 | 17);
    sum += word(src.octets()) + word(dst.octets());
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    let csum = !(sum as u16);
    buf[10..12].copy_from_slice(&csum.to_be_bytes());
}

/// Force the fields the ICRC does not cover to all ones, in place, in an IP (no options) +
/// UDP header (cm-spec §1.5 steps 2–3, [rxe_icrc.c]): IPv4 TOS, TTL and header checksum; IPv6
/// traffic class, flow label and hop limit; the UDP checksum. The IP version is read from the
/// first nibble. Returns false (and leaves `ip_udp` unchanged) unless it is exactly a 28-byte
/// IPv4 + UDP or a 48-byte IPv6 + UDP header.
pub fn mask_ip_udp(ip_udp: &mut [u8]) -> bool {
    let version = ip_udp.first().map(|b| b >> 4);
    match (version, ip_udp.len()) {
        (Some(4), 28) => {
            ip_udp[1] = 0xFF; // TOS
            ip_udp[8] = 0xFF; // TTL
            ip_udp[10..12].fill(0xFF); // header checksum
        }
        (Some(6), 48) => {
            // Version (4 bits) is kept; traffic class (8) + flow label (20) become ones.
            ip_udp[0] |= 0x0F;
            ip_udp[1..4].fill(0xFF);
            ip_udp[7] = 0xFF; // hop limit
        }
        _ => return false,
    }
    let n = ip_udp.len();
    ip_udp[n - 2..].fill(0xFF); // UDP checksum
    true
}

/// The ICRC of a RoCEv2 transport packet carried under the real IP + UDP header `ip_udp`
/// (28 bytes for IPv4 without options, 48 for IPv6): `crc32(0xFF×8 ‖ masked IP ‖ masked UDP ‖
/// BTH with byte 4 = 0xFF ‖ rest)`, the standard reflected CRC-32 (IEEE 802.3), cm-spec §1.5
/// [rxe_icrc.c]. Use this to check captured hardware traffic; the simulator itself uses
/// [`icrc`].
///
/// `transport` is the UDP payload *without* its trailing 4 ICRC bytes (BTH, extension headers,
/// payload, pad). Returns `None` if `transport` is shorter than a BTH or `ip_udp` is not a
/// header [`mask_ip_udp`] accepts.
///
/// On the wire the value is stored least-significant byte first (`to_le_bytes`): checked
/// against a ConnectX-4 Lx capture (test `icrc_matches_connectx4_cnp_capture`), which resolves
/// the byte-order question cm-spec §1.5 step 7 leaves open.
pub fn icrc_for_ip_udp(ip_udp: &[u8], transport: &[u8]) -> Option<u32> {
    let (bth, rest) = transport.split_first_chunk::<BTH_BYTES>()?;
    let mut hdr = [0u8; IPV6_HEADER_BYTES + UDP_HEADER_BYTES];
    let hdr = hdr.get_mut(..ip_udp.len())?;
    hdr.copy_from_slice(ip_udp);
    if !mask_ip_udp(hdr) {
        return None;
    }
    let mut bth = *bth;
    bth[4] = 0xFF; // FECN, BECN, resv6a: variant, masked.
    let mut h = crc32fast::Hasher::new_with_initial(!ICRC_SEED_REGISTER);
    h.update(hdr);
    h.update(&bth);
    h.update(rest);
    Some(h.finalize())
}

/// The ICRC of a RoCEv2 transport packet on `flow`: [`icrc_for_ip_udp`] over the canonical
/// header [`Flow::ip_udp_header`] of a datagram of `transport.len() + 4` bytes.
///
/// Returns `None` if `transport` is shorter than a BTH or the datagram is too long for the
/// IP/UDP length fields.
pub fn icrc(flow: &Flow, transport: &[u8]) -> Option<u32> {
    let header = flow.ip_udp_header(transport.len() + ICRC_BYTES)?;
    icrc_for_ip_udp(header.as_bytes(), transport)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4flow() -> Flow {
        Flow::new(
            "192.168.1.10:49152".parse().unwrap(),
            "192.168.1.20:4791".parse().unwrap(),
        )
    }

    #[test]
    fn icrc_seed_is_not_of_crc32_of_eight_ff_bytes() {
        assert_eq!(!crc32fast::hash(&[0xFF; 8]), ICRC_SEED_REGISTER);
        assert_eq!(ICRC_SEED_REGISTER, 0xDEBB_20E3);
    }

    #[test]
    fn icrc_equals_plain_crc32_over_lrh_stand_in_and_masked_headers() {
        let flow = v4flow();
        let transport = [0x64u8, 0, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 7, 1, 2, 3, 4];
        let hdr = flow.ip_udp_header(transport.len() + 4).unwrap();
        let mut all = vec![0xFF; 8];
        all.extend_from_slice(hdr.masked_for_icrc().as_bytes());
        let mut bth = transport;
        bth[4] = 0xFF;
        all.extend_from_slice(&bth);
        assert_eq!(icrc(&flow, &transport), Some(crc32fast::hash(&all)));
    }

    /// A RoCEv2 CNP captured on a ConnectX-4 Lx (hardware), published as a test vector in
    /// scapy's `test/contrib/roce.uts`: IPv4 TOS 0xC2, ID 0x718C, TTL 64, UDP checksum 0,
    /// BTH opcode 0x81 with BECN, 16 reserved bytes, ICRC bytes `82 fd 00 2a`.
    #[test]
    fn icrc_matches_connectx4_cnp_capture() {
        let frame: [u8; 74] = [
            0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00,
            0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00,
            0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00,
            0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x82, 0xfd, 0x00, 0x2a,
        ];
        let ip_udp = &frame[14..42];
        let transport = &frame[42..70];
        let crc = icrc_for_ip_udp(ip_udp, transport).unwrap();
        assert_eq!(crc.to_le_bytes(), [0x82, 0xfd, 0x00, 0x2a]);
    }

    #[test]
    fn mask_ip_udp_rejects_other_lengths_and_versions() {
        assert!(!mask_ip_udp(&mut [0x45; 27]));
        assert!(!mask_ip_udp(&mut [0x65; 28]));
        assert!(!mask_ip_udp(&mut []));
        assert!(icrc_for_ip_udp(&[0x45; 60], &[0; 12]).is_none());
    }

    #[test]
    fn ipv4_canonical_header_has_id_zero_df_and_valid_checksum() {
        let h = v4flow().ip_udp_header(300).unwrap();
        let b = h.as_bytes();
        assert_eq!(b.len(), 28);
        assert_eq!(&b[2..4], &(328u16).to_be_bytes());
        assert_eq!(&b[4..8], &[0, 0, 0x40, 0]);
        assert_eq!(internet_checksum(&[&b[..20]]), 0);
        assert_eq!(&b[20..22], &49152u16.to_be_bytes());
        assert_eq!(&b[22..24], &4791u16.to_be_bytes());
        assert_eq!(&b[24..26], &308u16.to_be_bytes());
        assert_eq!(&b[26..28], &[0, 0]);
    }

    #[test]
    fn ipv4_header_checksum_is_valid_for_any_addresses_and_length() {
        for (src, dst) in [
            ("0.0.0.0:0", "0.0.0.0:0"),
            ("255.255.255.255:65535", "255.255.255.254:4791"),
            ("10.1.2.3:49152", "192.168.200.250:4791"),
        ] {
            let f = Flow::new(src.parse().unwrap(), dst.parse().unwrap());
            for len in [0, 1, 16, 4124, 65_507] {
                let h = f.ip_udp_header(len).unwrap();
                assert_eq!(
                    internet_checksum(&[&h.as_bytes()[..20]]),
                    0,
                    "{src} {dst} {len}"
                );
            }
        }
    }

    #[test]
    fn ipv4_mapped_addresses_are_treated_as_ipv4() {
        let mapped = Flow::new(
            "[::ffff:192.168.1.10]:49152".parse().unwrap(),
            "[::ffff:192.168.1.20]:4791".parse().unwrap(),
        );
        assert_eq!(mapped.ip_udp_header(16), v4flow().ip_udp_header(16));
        assert_eq!(icrc(&mapped, &[0u8; 12]), icrc(&v4flow(), &[0u8; 12]));
    }

    #[test]
    fn mixed_families_use_ipv6() {
        let f = Flow::new(
            "192.168.1.10:1".parse().unwrap(),
            "[2001:db8::1]:4791".parse().unwrap(),
        );
        let h = f.ip_udp_header(16).unwrap();
        assert!(h.is_ipv6());
        assert_eq!(
            &h.as_bytes()[8..24],
            &"::ffff:192.168.1.10".parse::<Ipv6Addr>().unwrap().octets()
        );
    }

    #[test]
    fn masking_covers_exactly_the_variant_fields() {
        let h = v4flow().ip_udp_header(16).unwrap();
        let m = h.masked_for_icrc();
        let diff: Vec<usize> = (0..28)
            .filter(|&i| h.as_bytes()[i] != m.as_bytes()[i])
            .collect();
        assert_eq!(diff, vec![1, 8, 10, 11, 26, 27]);
    }

    #[test]
    fn ipv4_length_fields_overflow_is_none() {
        assert!(v4flow().ip_udp_header(65_507).is_some());
        assert!(v4flow().ip_udp_header(65_508).is_none());
    }
}
