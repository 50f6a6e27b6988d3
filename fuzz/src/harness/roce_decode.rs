//! Target `roce_decode`: the RoCEv2 decoder of rnic-sim (`rnic_sim::roce::codec`).
//!
//! The input is one UDP payload (BTH … ICRC), decoded on the fixed flow [`FLOW`] with the ICRC
//! check off and on, through [`decode`], [`decode_bytes`] and [`decode_verbose`]. Checked:
//!
//! * no panic; the three decoders agree (same packet or same error);
//! * with the check on, a packet decodes only if it also decodes with the check off, to the
//!   same packet;
//! * a decoded packet is consistent with its opcode, has TVer 0 and the PadCnt of its payload,
//!   and is exactly as long as the input says;
//! * round trip (what `tests/roce_codec.rs` claims for encoder-made packets, checked here for
//!   any decodable bytes): `encode` accepts the decoded packet, on [`FLOW`], and the result
//!   decodes — ICRC checked — to the same packet;
//! * canonical inputs are byte-exact: with no reserved bit set and zero pad bytes, the
//!   re-encoding equals the input (the ICRC too, when it was checked).
//!
//! The seed corpus holds captured datagrams with their ICRC recomputed for [`FLOW`], so the
//! checked path is reachable from every seed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use bytes::Bytes;
use rnic_sim::roce::codec::{encoded_len, pad_cnt_for};
use rnic_sim::roce::{decode, decode_bytes, decode_verbose, encode, Flow, ICRC_BYTES};

/// The flow every input is decoded on (the ICRC covers its pseudo IP/UDP header).
pub const FLOW: Flow = Flow::new(
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 49152),
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791),
);

/// The target body.
pub fn run(data: &[u8]) {
    let flow = FLOW;
    let shared = Bytes::copy_from_slice(data);
    let unchecked = decode(data, &flow, false);
    for check in [false, true] {
        let verbose = decode_verbose(data, &flow, check);
        let plain = decode(data, &flow, check);
        let zero_copy = decode_bytes(&shared, &flow, check);
        assert_eq!(
            plain,
            verbose.clone().map(|d| d.packet),
            "decode and decode_verbose disagree (check_icrc {check})"
        );
        assert_eq!(
            plain, zero_copy,
            "decode and decode_bytes disagree (check_icrc {check})"
        );
        let Ok(d) = verbose else { continue };
        if check {
            assert_eq!(
                unchecked.as_ref().ok(),
                Some(&d.packet),
                "decodes with the ICRC checked but not without"
            );
        }
        let p = &d.packet;
        assert!(p.is_consistent(), "decoded packet inconsistent: {p:?}");
        assert_eq!(p.bth.tver, 0, "decoded TVer");
        assert_eq!(
            p.bth.pad_cnt,
            pad_cnt_for(p.payload.len()),
            "decoded PadCnt"
        );
        assert_eq!(encoded_len(p), data.len(), "decoded length");

        let wire = match encode(p, &flow) {
            Ok(w) => w,
            Err(e) => panic!("a decoded packet does not encode: {e} ({p:?})"),
        };
        assert_eq!(wire.len(), data.len(), "re-encoded length");
        match decode(&wire, &flow, true) {
            Ok(back) => assert_eq!(&back, p, "decode(encode(p)) != p"),
            Err(e) => panic!("a re-encoded packet does not decode: {e} ({p:?})"),
        }

        let body = data.len() - ICRC_BYTES;
        let pad = usize::from(p.bth.pad_cnt);
        let pad_zero = data
            .get(body - pad..body)
            .is_some_and(|b| b.iter().all(|&x| x == 0));
        if !d.reserved_bits_set && pad_zero {
            let n = if check { data.len() } else { body };
            assert_eq!(
                wire.get(..n),
                data.get(..n),
                "canonical input not reproduced byte for byte (check_icrc {check})"
            );
        }
    }
}
