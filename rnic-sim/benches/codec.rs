//! RoCEv2 codec throughput: encode + decode of an RC RDMA WRITE Only packet with a 4096-byte
//! payload, with and without ICRC checking, against a plain memcpy of the same bytes.

// A benchmark is not library code: a failed encode/decode should abort it loudly.
#![allow(clippy::expect_used)]
// criterion_group! generates an undocumented public fn.
#![allow(missing_docs)]

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rnic_sim::roce::{decode, decode_bytes, encode, encode_into, Bth, Flow, Opcode, Packet, Reth};

const PAYLOAD: usize = 4096;

fn packet() -> Packet {
    Packet {
        bth: Bth {
            opcode: Opcode::RcRdmaWriteOnly,
            se: false,
            mig_req: false,
            pad_cnt: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: 0x12_3456,
        },
        reth: Some(Reth {
            va: 0x7f00_0000_1000,
            rkey: 0x1234,
            dma_len: PAYLOAD as u32,
        }),
        deth: None,
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        imm: None,
        payload: Bytes::from((0..PAYLOAD).map(|i| i as u8).collect::<Vec<u8>>()),
    }
}

fn bench(c: &mut Criterion) {
    let flow = Flow::new(
        "10.0.0.1:49152".parse().expect("addr"),
        "10.0.0.2:4791".parse().expect("addr"),
    );
    let pkt = packet();
    let wire = encode(&pkt, &flow).expect("encode").freeze();
    let mut g = c.benchmark_group("roce_codec_4096");
    g.throughput(Throughput::Bytes(wire.len() as u64));

    g.bench_function("memcpy_baseline", |b| {
        let mut dst = vec![0u8; wire.len()];
        b.iter(|| {
            dst.copy_from_slice(black_box(&wire));
            black_box(&dst);
        })
    });
    g.bench_function("encode_icrc", |b| {
        let mut out = BytesMut::with_capacity(wire.len());
        b.iter(|| {
            out.clear();
            encode_into(black_box(&pkt), &flow, &mut out).expect("encode");
            black_box(&out);
        })
    });
    g.bench_function("decode_icrc_on", |b| {
        b.iter(|| decode(black_box(&wire), &flow, true).expect("decode"))
    });
    g.bench_function("decode_icrc_off", |b| {
        b.iter(|| decode(black_box(&wire), &flow, false).expect("decode"))
    });
    g.bench_function("decode_bytes_zero_copy_icrc_off", |b| {
        b.iter(|| decode_bytes(black_box(&wire), &flow, false).expect("decode"))
    });
    g.bench_function("encode_decode_icrc_on", |b| {
        let mut out = BytesMut::with_capacity(wire.len());
        b.iter(|| {
            out.clear();
            encode_into(black_box(&pkt), &flow, &mut out).expect("encode");
            decode(&out, &flow, true).expect("decode")
        })
    });
    g.bench_function("encode_decode_icrc_off", |b| {
        let mut out = BytesMut::with_capacity(wire.len());
        b.iter(|| {
            out.clear();
            encode_into(black_box(&pkt), &flow, &mut out).expect("encode");
            decode(&out, &flow, false).expect("decode")
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
