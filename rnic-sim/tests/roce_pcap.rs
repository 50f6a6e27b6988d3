//! The pcap export: file header, frame layout, checksums, timestamps — read back with
//! pcap-file's reader (no tshark needed; `tshark_roce.rs` checks the dissection).

// Test helpers outside #[test] fns: CONVENTIONS allow unwrap in tests.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use bytes::Bytes;
use pcap_file::pcap::PcapReader;
use pcap_file::{DataLink, TsResolution};
use rnic_sim::roce::icrc::icrc_for_ip_udp;
use rnic_sim::roce::pcap::{datagram_record, mac_for_ip, PcapWriter};
use rnic_sim::roce::{decode, encode, Bth, Deth, Flow, Opcode, Packet};
use verbs_core::SimTime;

fn mad() -> Packet {
    Packet {
        bth: Bth {
            opcode: Opcode::UdSendOnly,
            se: false,
            mig_req: false,
            pad_cnt: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: 1,
            ack_req: false,
            psn: 0,
        },
        reth: None,
        deth: Some(Deth {
            qkey: 0x8001_0000,
            src_qp: 1,
        }),
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        imm: None,
        payload: Bytes::from(vec![7; 256]),
    }
}

/// RFC 1071 checksum, written independently of the crate's.
fn ones_complement_sum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

fn write_one(flow: &Flow, time: SimTime) -> (Vec<u8>, Vec<u8>) {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    w.write_packet(time, flow, &mad()).unwrap();
    (w.into_inner(), encode(&mad(), flow).unwrap().to_vec())
}

#[test]
fn pcap_ipv4_frame_is_ethernet_ipv4_udp_4791_with_valid_checksums_and_icrc() {
    let flow = Flow::new(
        SocketAddr::from(([192, 168, 1, 10], 49152)),
        SocketAddr::from(([192, 168, 1, 20], 4791)),
    );
    let time = SimTime::from_nanos(3_000_000_123);
    let (file, udp_payload) = write_one(&flow, time);
    let mut r = PcapReader::new(&file[..]).unwrap();
    let h = r.header();
    assert_eq!(h.datalink, DataLink::ETHERNET);
    assert_eq!(h.ts_resolution, TsResolution::NanoSecond);
    let pkt = r.next_packet().unwrap().unwrap();
    assert_eq!(pkt.timestamp.as_nanos(), 3_000_000_123);
    let f = &pkt.data[..];
    // cm-spec §1.1: 14 + 20 + 8 + 280 bytes; UDP length 288, IPv4 total length 308.
    assert_eq!(f.len(), 14 + 20 + 8 + 280);
    assert_eq!(&f[0..6], &[0x02, 0, 192, 168, 1, 20]);
    assert_eq!(&f[6..12], &[0x02, 0, 192, 168, 1, 10]);
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    let ip = &f[14..34];
    assert_eq!(ip[0], 0x45);
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 308);
    assert_eq!(ip[9], 17);
    assert_eq!(ones_complement_sum(ip), 0, "IPv4 header checksum");
    let udp = &f[34..42];
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4791);
    assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 288);
    assert_eq!(&udp[6..8], &[0, 0], "IPv4 UDP checksum 0");
    assert_eq!(&f[42..], &udp_payload[..]);
    // The ICRC is valid for the headers shown in the capture.
    let (transport, crc) = f[42..].split_at(f.len() - 42 - 4);
    let shown = icrc_for_ip_udp(&f[14..42], transport).unwrap();
    assert_eq!(crc, shown.to_le_bytes());
    assert_eq!(decode(&f[42..], &flow, true).unwrap(), mad());
}

#[test]
fn pcap_ipv6_frame_has_valid_udp_checksum_and_icrc() {
    let flow = Flow::new(
        "[2001:db8::10]:49152".parse().unwrap(),
        "[2001:db8::20]:4791".parse().unwrap(),
    );
    let (file, udp_payload) = write_one(&flow, SimTime::ZERO);
    let mut r = PcapReader::new(&file[..]).unwrap();
    let pkt = r.next_packet().unwrap().unwrap();
    let f = &pkt.data[..];
    assert_eq!(f.len(), 14 + 40 + 8 + 280);
    assert_eq!(&f[12..14], &[0x86, 0xDD]);
    assert_eq!(&f[0..6], &mac_for_ip(flow.dst.ip()));
    let ip = &f[14..54];
    assert_eq!(ip[0] >> 4, 6);
    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 288);
    assert_eq!(ip[6], 17);
    // UDP checksum over the IPv6 pseudo header (RFC 8200 §8.1) verifies to zero.
    let mut pseudo = ip[8..40].to_vec();
    pseudo.extend_from_slice(&288u32.to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    pseudo.extend_from_slice(&f[54..]);
    assert_ne!(&f[60..62], &[0, 0]);
    assert_eq!(ones_complement_sum(&pseudo), 0, "IPv6 UDP checksum");
    assert_eq!(&f[62..], &udp_payload[..]);
    let (transport, crc) = f[62..].split_at(f.len() - 62 - 4);
    assert_eq!(
        crc,
        icrc_for_ip_udp(&f[14..62], transport)
            .unwrap()
            .to_le_bytes()
    );
}

#[test]
fn mac_for_ip_is_locally_administered_unicast_and_maps_ipv4_mapped_like_ipv4() {
    let v4 = mac_for_ip("10.1.2.3".parse().unwrap());
    assert_eq!(v4, [0x02, 0, 10, 1, 2, 3]);
    assert_eq!(mac_for_ip("::ffff:10.1.2.3".parse().unwrap()), v4);
    let v6 = mac_for_ip("2001:db8::a:b:c".parse().unwrap());
    assert_eq!(v6[0] & 0x03, 0x02);
}

/// `datagram_record` is exactly what `write_datagram` appends after the file header, so a
/// file of one header and such records (each appended with one write) reads back the same.
#[test]
fn datagram_record_is_the_bytes_write_datagram_appends() {
    let v4 = Flow::new(
        SocketAddr::from(([10, 0, 0, 1], 50000)),
        SocketAddr::from(([10, 0, 0, 2], 4791)),
    );
    let v6 = Flow::new(
        "[fd00::1]:50000".parse().unwrap(),
        "[fd00::2]:4791".parse().unwrap(),
    );
    let header = PcapWriter::new(Vec::new()).unwrap().into_inner();
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    let mut appended = header.clone();
    for (i, flow) in [v4, v6, v4].iter().enumerate() {
        let time = SimTime::from_nanos(5_000_000_007 * (i as u64 + 1));
        let payload = encode(&mad(), flow).unwrap();
        w.write_datagram(time, flow, &payload).unwrap();
        appended.extend(datagram_record(time, flow, &payload).unwrap());
    }
    assert_eq!(w.into_inner(), appended);
    let mut r = PcapReader::new(&appended[..]).unwrap();
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        p.unwrap();
        n += 1;
    }
    assert_eq!(n, 3);
}
