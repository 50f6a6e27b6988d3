//! What goes on the wire is what tshark decodes as RoCEv2 (ARCHITECTURE.md): a pcap with one
//! packet of every opcode, over IPv4 and over IPv6, must dissect as InfiniBand BTH with the
//! right fields, valid IP/UDP checksums and no malformed or expert error.
//!
//! Needs `tshark` on PATH (CI installs it). Without it the test prints `SKIP` and passes.
//! Wireshark 4.0 shows the ICRC but does not verify it; a version that does would report a bad
//! one as expert info, which the test rejects. `rpcordma` is disabled because its heuristic
//! dissector claims RC SEND payloads and flags our arbitrary test payloads as malformed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use bytes::Bytes;
use rnic_sim::roce::codec::pad_cnt_for;
use rnic_sim::roce::pcap::PcapWriter;
use rnic_sim::roce::{
    encode, Aeth, AethKind, AtomicAckEth, AtomicEth, Bth, Deth, Flow, NakCode, Opcode, Packet, Reth,
};
use verbs_core::SimTime;

/// tshark's options shared by every run.
const TSHARK_OPTS: [&str; 6] = [
    "--disable-protocol",
    "rpcordma",
    "-o",
    "ip.check_checksum:TRUE",
    "-o",
    "udp.check_checksum:TRUE",
];

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One packet of `opcode`, with distinctive field values and a 13-byte payload (PadCnt 3)
/// where the opcode carries one.
fn packet(opcode: Opcode, i: u32) -> Packet {
    let h = opcode.headers();
    let payload = if opcode.has_payload() {
        Bytes::from(
            (0..13u8)
                .map(|b| b.wrapping_mul(17).wrapping_add(i as u8))
                .collect::<Vec<_>>(),
        )
    } else {
        Bytes::new()
    };
    let aeth_kind = match i % 3 {
        0 => AethKind::Ack(0x1F),
        1 => AethKind::RnrNak(14),
        _ => AethKind::Nak(NakCode::RemoteAccessError),
    };
    Packet {
        bth: Bth {
            opcode,
            se: i.is_multiple_of(2),
            mig_req: false,
            pad_cnt: pad_cnt_for(payload.len()),
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: i.is_multiple_of(5),
            dest_qp: 0x12 + i,
            ack_req: i % 2 == 1,
            psn: 0x00AB_0000 + i,
        },
        reth: h.reth.then_some(Reth {
            va: 0x7f00_0000_1000 + u64::from(i),
            rkey: 0x1234,
            dma_len: 13,
        }),
        deth: h.deth.then_some(Deth {
            qkey: 0x1111_0000,
            src_qp: 0x22,
        }),
        atomic_eth: h.atomic_eth.then_some(AtomicEth {
            va: 0x7f00_0000_2000,
            rkey: 0x5678,
            swap_add: 5,
            compare: 9,
        }),
        aeth: h.aeth.then_some(Aeth {
            syndrome: if opcode == Opcode::RcAcknowledge {
                aeth_kind
            } else {
                AethKind::Ack(0x1F)
            },
            msn: 0x33 + i,
        }),
        atomic_ack_eth: h.atomic_ack_eth.then_some(AtomicAckEth { orig: 0x42 }),
        imm: h.imm.then_some(0xDEAD_BEEF),
        payload,
    }
}

struct Expect {
    packet: Packet,
    icrc_as_shown: u32,
    time: SimTime,
    ipv6: bool,
}

/// A tshark field value as a number: `0x…` hex or decimal; `None` when absent (empty). Only
/// the first occurrence counts (tshark lists a field that appears twice as `a,a`).
fn num(field: &str) -> Option<u64> {
    let field = field.split(',').next().unwrap_or("");
    match field.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None if field.is_empty() => None,
        None => field.parse().ok(),
    }
}

/// The AETH syndrome byte the packet carries (IBTA Table 43).
fn syndrome_byte(kind: AethKind) -> u64 {
    u64::from(match kind {
        AethKind::Ack(c) => c,
        AethKind::RnrNak(t) => 0x20 | t,
        AethKind::Nak(code) => 0x60 | code as u8,
    })
}

/// The extension-header fields tshark shows for `p`, in the order of `EXT_FIELDS`.
fn ext_values(p: &Packet) -> [Option<u64>; 11] {
    [
        // Wireshark shows the AtomicETH VA and R_Key under the RETH field names.
        p.reth.map(|r| r.va).or(p.atomic_eth.map(|a| a.va)),
        p.reth
            .map(|r| r.rkey.into())
            .or(p.atomic_eth.map(|a| a.rkey.into())),
        p.reth.map(|r| r.dma_len.into()),
        p.deth.map(|d| d.qkey.into()),
        p.deth.map(|d| d.src_qp.into()),
        p.atomic_eth.map(|a| a.swap_add),
        p.atomic_eth.map(|a| a.compare),
        p.aeth.map(|a| syndrome_byte(a.syndrome)),
        p.aeth.map(|a| a.msn.into()),
        p.atomic_ack_eth.map(|a| a.orig),
        p.imm.map(u64::from),
    ]
}

const EXT_FIELDS: [&str; 11] = [
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
];

#[test]
fn tshark_decodes_every_opcode_as_infiniband_bth() {
    if !tshark_available() {
        assert!(
            std::env::var_os("RNIC_REQUIRE_TSHARK").is_none(),
            "RNIC_REQUIRE_TSHARK is set but tshark is not on PATH"
        );
        println!("SKIP tshark_decodes_every_opcode_as_infiniband_bth: tshark not found on PATH");
        return;
    }
    let flows = [
        Flow::new(
            SocketAddr::from(([10, 0, 0, 1], 49152)),
            SocketAddr::from(([10, 0, 0, 2], 4791)),
        ),
        Flow::new(
            "[2001:db8::1]:49153".parse().unwrap(),
            "[2001:db8::2]:4791".parse().unwrap(),
        ),
    ];
    let path: PathBuf =
        std::env::temp_dir().join(format!("rnic_tshark_roce_{}.pcap", std::process::id()));
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let mut expect = Vec::new();
    let mut i = 0u32;
    for flow in &flows {
        for opcode in Opcode::ALL {
            let p = packet(opcode, i);
            let wire = encode(&p, flow).unwrap();
            let time = SimTime::from_nanos(1_000_000_000 + u64::from(i) * 1_001);
            w.write_datagram(time, flow, &wire).unwrap();
            let icrc: [u8; 4] = wire[wire.len() - 4..].try_into().unwrap();
            expect.push(Expect {
                packet: p,
                // Wireshark shows the four ICRC bytes as a big-endian number.
                icrc_as_shown: u32::from_be_bytes(icrc),
                time,
                ipv6: flow.dst.is_ipv6(),
            });
            i += 1;
        }
    }
    drop(w.into_inner());

    let fields = [
        "frame.number",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.bth.padcnt",
        "infiniband.invariant.crc",
        "frame.time_epoch",
        "ip.checksum.status",
        "udp.checksum.status",
        "_ws.expert.severity",
        "_ws.malformed",
    ];
    let fields: Vec<&str> = fields.iter().chain(&EXT_FIELDS).copied().collect();
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(&path).args(TSHARK_OPTS);
    cmd.args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=a"]);
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "tshark failed: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), expect.len(), "tshark output:\n{text}");

    for (row, e) in rows.iter().zip(&expect) {
        let bth = &e.packet.bth;
        let ctx = format!("{:?}, row {row:?}", bth.opcode);
        assert_eq!(row.len(), fields.len(), "{ctx}");
        assert_eq!(num(row[1]), Some(bth.opcode as u64), "BTH opcode: {ctx}");
        assert_eq!(num(row[2]), Some(bth.dest_qp.into()), "DestQP: {ctx}");
        assert_eq!(num(row[3]), Some(bth.psn.into()), "PSN: {ctx}");
        assert_eq!(num(row[4]), Some(bth.pad_cnt.into()), "PadCnt: {ctx}");
        assert_eq!(num(row[5]), Some(e.icrc_as_shown.into()), "ICRC: {ctx}");
        let ns = e.time.as_nanos();
        let epoch = format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
        assert_eq!(row[6], epoch, "ns timestamp: {ctx}");
        if e.ipv6 {
            assert_eq!(row[7], "", "no IPv4 header: {ctx}");
            assert_eq!(row[8], "1", "IPv6 UDP checksum good: {ctx}");
        } else {
            assert_eq!(row[7], "1", "IPv4 header checksum good: {ctx}");
            assert_eq!(row[8], "3", "IPv4 UDP checksum 0 = not present: {ctx}");
        }
        assert_eq!(row[9], "", "expert info: {ctx}");
        assert_eq!(row[10], "", "malformed: {ctx}");
        // ImmDt is a byte field: tshark prints it as bare hex.
        let (imm, ints) = row[11..].split_last().unwrap();
        let mut shown: Vec<Option<u64>> = ints.iter().map(|f| num(f)).collect();
        shown.push(num(&format!("0x{}", imm.split(',').next().unwrap())));
        assert_eq!(shown, ext_values(&e.packet), "extension headers: {ctx}");
    }

    // Nothing anywhere in the capture at expert level note or above.
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(TSHARK_OPTS)
        .args(["-q", "-z", "expert,note"])
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&out.stdout);
    for level in ["Errors", "Warns", "Notes"] {
        assert!(!summary.contains(level), "tshark expert info:\n{summary}");
    }
    std::fs::remove_file(&path).ok();
}
