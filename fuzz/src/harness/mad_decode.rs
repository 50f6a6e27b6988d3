//! Target `mad_decode`: the CM MAD decoder of cm-core (`cm_core::wire`).
//!
//! The input is one MAD (256 bytes when well formed; any length is fed). Checked:
//!
//! * no panic in [`decode`], [`IpCmHeader::decode`] or [`parse_ip_service_id`];
//! * only 256-byte MADs decode;
//! * decode → encode → decode is stable (what `cm-core/tests/wire_props.rs` claims): the
//!   message re-encodes with its transaction ID and attribute modifier, the result decodes
//!   to the same message under the header Linux writes ([`MadHeader::cm`]), and encoding
//!   that again gives the same 256 bytes (a fixed point);
//! * for a REQ or a SIDR_REQ, the IP-CM header of its private data (if it parses) re-encodes
//!   and parses to itself.

use cm_core::wire::{decode, parse_ip_service_id, CmMessage, IpCmHeader, MadHeader, MAD_SIZE};

/// The target body.
pub fn run(data: &[u8]) {
    // The IP-CM header parser on any bytes (it is handed REQ private data in practice).
    ip_cm_stable(data);
    let Ok((hdr, msg)) = decode(data) else {
        return;
    };
    assert_eq!(
        data.len(),
        MAD_SIZE,
        "a MAD of {} bytes decoded",
        data.len()
    );
    assert_eq!(hdr.attribute_id, msg.attribute_id(), "attribute ID");
    let again = match msg.encode(hdr.transaction_id, hdr.attribute_modifier) {
        Ok(m) => m,
        Err(e) => panic!("a decoded message does not encode: {e} ({msg:?})"),
    };
    let (hdr2, msg2) = match decode(&again) {
        Ok(x) => x,
        Err(e) => panic!("a re-encoded MAD does not decode: {e} ({msg:?})"),
    };
    assert_eq!(msg2, msg, "decode(encode(decode(mad))) != decode(mad)");
    assert_eq!(
        hdr2,
        MadHeader::cm(hdr.attribute_id, hdr.transaction_id, hdr.attribute_modifier),
        "re-encoded header"
    );
    match msg2.encode(hdr.transaction_id, hdr.attribute_modifier) {
        Ok(third) => assert_eq!(third, again, "encode is not a fixed point"),
        Err(e) => panic!("second encode failed: {e}"),
    }
    match &msg {
        CmMessage::Req(req) => {
            let _ = parse_ip_service_id(req.service_id);
            ip_cm_stable(&req.private_data);
        }
        CmMessage::SidrReq(req) => {
            let _ = parse_ip_service_id(req.service_id);
            ip_cm_stable(&req.private_data);
        }
        _ => {}
    }
}

/// The IP-CM header parser is total, and what it parses re-encodes to itself.
fn ip_cm_stable(private_data: &[u8]) {
    if let Ok(h) = IpCmHeader::decode(private_data) {
        match IpCmHeader::decode(&h.encode()) {
            Ok(back) => assert_eq!(back, h, "IP-CM header round trip"),
            Err(e) => panic!("a re-encoded IP-CM header does not parse: {e} ({h:?})"),
        }
    }
}
