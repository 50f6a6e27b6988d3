//! The fabric's trace: every datagram event in order, and a pinned 64-bit hash over a canonical
//! byte encoding of them (FNV-1a, written here; `std`'s `DefaultHasher` is not pinned across
//! Rust versions). Same seed + same scenario ⇒ same events ⇒ same hash, on every machine.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use verbs_core::SimTime;

/// The FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// The FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// `FNV_PRIME^k` (wrapping), `k = 0..=8`: feeding `k` zero bytes multiplies the state by it.
const FNV_PRIME_POW: [u64; 9] = {
    let mut p = [1u64; 9];
    let mut k = 1;
    while k < 9 {
        p[k] = p[k - 1].wrapping_mul(FNV_PRIME);
        k += 1;
    }
    p
};

/// An incremental FNV-1a 64-bit hasher (Fowler, Noll, Vo; the IETF draft
/// `draft-eastlake-fnv`). Not cryptographic; pinned forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a::new()
    }
}

impl Fnv1a {
    /// A hasher at the offset basis (the hash of no bytes).
    pub const fn new() -> Self {
        Fnv1a(FNV_OFFSET)
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }

    /// Feeds one byte.
    pub fn write_u8(&mut self, v: u8) {
        self.write(&[v]);
    }

    /// Feeds a `u16` as 2 little-endian bytes.
    pub fn write_u16(&mut self, v: u16) {
        self.write(&v.to_le_bytes());
    }

    /// Feeds a `u64` as 8 little-endian bytes.
    ///
    /// A zero byte only multiplies the state by the prime, so the high zero bytes (fed last)
    /// are one multiplication by a power of it: the same hash, in fewer dependent steps (times,
    /// packet ids and lengths are mostly zero bytes).
    pub fn write_u64(&mut self, v: u64) {
        let n = 8 - (v.leading_zeros() / 8) as usize;
        self.write(&v.to_le_bytes()[..n]);
        self.0 = self.0.wrapping_mul(FNV_PRIME_POW[8 - n]);
    }

    /// Feeds a socket address: family byte (4 or 6), the address octets, the port (LE).
    pub fn write_addr(&mut self, addr: SocketAddr) {
        match addr.ip() {
            IpAddr::V4(v4) => {
                self.write_u8(4);
                self.write(&v4.octets());
            }
            IpAddr::V6(v6) => {
                self.write_u8(6);
                self.write(&v6.octets());
            }
        }
        self.write_u16(addr.port());
    }

    /// The hash of everything fed so far.
    pub const fn finish(&self) -> u64 {
        self.0
    }
}

/// FNV-1a 64 of `bytes` in one call.
/// The digest of a datagram's payload in [`FabricEvent`]s: a 64-bit fingerprint, written here
/// and pinned (the same bytes give the same value on every machine and Rust version).
///
/// Not a CRC: a CRC-32 of a datagram that ends in its own CRC-32 (RoCEv2's ICRC) depends only
/// on the length and the masked header fields, so it would not tell payloads apart. Four
/// independent multiply-rotate lanes over little-endian 64-bit words (so it runs at a fraction
/// of a cycle per byte on every datagram), then a splitmix64 finaliser over the lanes and the
/// length. A fingerprint for traces, not a security hash.
pub fn payload_digest(bytes: &[u8]) -> u64 {
    const K: [u64; 4] = [
        0x9E37_79B9_7F4A_7C15,
        0xC2B2_AE3D_27D4_EB4F,
        0x1656_67B1_9E37_79F9,
        0x85EB_CA77_C2B2_AE63,
    ];
    fn round(lanes: &mut [u64; 4], block: &[u8]) {
        for (i, (lane, word)) in lanes.iter_mut().zip(block.chunks_exact(8)).enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            *lane = (*lane ^ u64::from_le_bytes(w))
                .wrapping_mul(K[i])
                .rotate_left(31);
        }
    }
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    let mut lanes = K;
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        round(&mut lanes, block);
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 32];
        last[..rest.len()].copy_from_slice(rest);
        round(&mut lanes, &last);
    }
    lanes
        .iter()
        .fold(mix(bytes.len() as u64), |h, lane| mix(h ^ lane))
}

/// FNV-1a (64 bits) of `bytes`, the hash the trace hash is built with.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::new();
    h.write(bytes);
    h.finish()
}

/// Why the fabric dropped a datagram. The numbers are part of the trace hash: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Lost by the path's loss probability (at send).
    Lost = 1,
    /// A partition cut the path when it was sent or when it would have arrived.
    Partitioned = 2,
    /// The sending host was down when it sent.
    SourceCrashed = 3,
    /// The receiving host was down when it would have arrived.
    DestinationCrashed = 4,
    /// Nothing was bound to the destination address when it arrived (a closed UDP port).
    NoListener = 5,
}

impl DropReason {
    /// A short lower-case name, e.g. `"lost"`.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Lost => "lost",
            DropReason::Partitioned => "partitioned",
            DropReason::SourceCrashed => "source crashed",
            DropReason::DestinationCrashed => "destination crashed",
            DropReason::NoListener => "no listener",
        }
    }
}

/// What happened to a datagram. The tags (1–5) are part of the trace hash: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricEventKind {
    /// An endpoint handed the datagram to the fabric (tag 1).
    Sent {
        /// Payload length in bytes.
        len: usize,
        /// [`payload_digest`] of the payload.
        digest: u64,
    },
    /// The fabric dropped the datagram (tag 2).
    Dropped(DropReason),
    /// The fabric made a second copy, the datagram `copy` (tag 3).
    Duplicated {
        /// The packet id of the copy.
        copy: u64,
    },
    /// The fabric flipped bit `bit` of the payload (bit `i` is `1 << (i % 8)` of byte `i / 8`)
    /// (tag 4).
    Corrupted {
        /// Index of the flipped bit.
        bit: u64,
    },
    /// The datagram reached its destination (tag 5).
    Delivered {
        /// [`payload_digest`] of the payload as delivered.
        digest: u64,
    },
}

/// One entry of the fabric trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricEvent {
    /// When it happened (virtual time).
    pub at: SimTime,
    /// The packet id: send order, a fresh one for each duplicate copy.
    pub packet: u64,
    /// The sender's address.
    pub src: SocketAddr,
    /// The destination address.
    pub dst: SocketAddr,
    /// What happened.
    pub kind: FabricEventKind,
}

impl FabricEvent {
    /// Feeds the canonical encoding of this event to `h`: time, packet id, addresses, tag and
    /// fields, all little-endian. This encoding defines the trace hash.
    pub fn hash_into(&self, h: &mut Fnv1a) {
        h.write_u64(self.at.as_nanos());
        h.write_u64(self.packet);
        h.write_addr(self.src);
        h.write_addr(self.dst);
        match self.kind {
            FabricEventKind::Sent { len, digest } => {
                h.write_u8(1);
                h.write_u64(len as u64);
                h.write_u64(digest);
            }
            FabricEventKind::Dropped(reason) => {
                h.write_u8(2);
                h.write_u8(reason as u8);
            }
            FabricEventKind::Duplicated { copy } => {
                h.write_u8(3);
                h.write_u64(copy);
            }
            FabricEventKind::Corrupted { bit } => {
                h.write_u8(4);
                h.write_u64(bit);
            }
            FabricEventKind::Delivered { digest } => {
                h.write_u8(5);
                h.write_u64(digest);
            }
        }
    }
}

impl fmt::Display for FabricEvent {
    /// One line, e.g. `0.000010s #3 10.0.0.1:4791 -> 10.0.0.2:4791 delivered`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} #{} {} -> {} ",
            self.at, self.packet, self.src, self.dst
        )?;
        match self.kind {
            FabricEventKind::Sent { len, digest } => write!(f, "sent {len} B {digest:016x}"),
            FabricEventKind::Dropped(r) => write!(f, "dropped ({})", r.name()),
            FabricEventKind::Duplicated { copy } => write!(f, "duplicated as #{copy}"),
            FabricEventKind::Corrupted { bit } => write!(f, "corrupted (bit {bit})"),
            FabricEventKind::Delivered { digest } => write!(f, "delivered {digest:016x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_digest_is_pinned() {
        // Golden values: a change of the algorithm changes every recorded trace hash.
        let golden = [
            payload_digest(b""),
            payload_digest(b"a"),
            payload_digest(&[7u8; 100]),
        ];
        assert_eq!(golden, PAYLOAD_DIGEST_GOLDEN);
    }

    const PAYLOAD_DIGEST_GOLDEN: [u64; 3] = [
        0x712a_c462_d140_b0df,
        0x947c_9c86_fdae_6004,
        0xc685_48ea_681a_c1c9,
    ];

    #[test]
    fn payload_digest_tells_apart_datagrams_that_end_in_their_own_crc() {
        // The shape of RoCEv2: a body followed by a CRC-32 of it. A CRC of such datagrams is the
        // same for every body of one length; the digest must not be.
        let framed = |body: &[u8]| {
            let mut v = body.to_vec();
            v.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
            v
        };
        let a = framed(&[1u8; 276]);
        let b = framed(&[2u8; 276]);
        assert_eq!(
            crc32fast::hash(&a),
            crc32fast::hash(&b),
            "the CRC residue property"
        );
        assert_ne!(payload_digest(&a), payload_digest(&b));
    }

    #[test]
    fn payload_digest_changes_with_any_single_bit_and_with_length() {
        let base: Vec<u8> = (0..77u8).collect();
        let d = payload_digest(&base);
        for bit in 0..base.len() * 8 {
            let mut m = base.clone();
            m[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(payload_digest(&m), d, "bit {bit}");
        }
        let mut longer = base.clone();
        longer.push(0);
        assert_ne!(payload_digest(&longer), d, "a trailing zero byte counts");
    }

    #[test]
    fn fnv1a64_matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn write_u64_equals_feeding_its_eight_bytes() {
        for v in [
            0,
            1,
            0xff,
            0x100,
            0x0001_0000_0000_0000,
            0x00ff_0000_0000_0001,
            u64::MAX,
            0x1234_5678_9abc_def0,
        ] {
            let (mut a, mut b) = (Fnv1a::new(), Fnv1a::new());
            a.write(b"x");
            b.write(b"x");
            a.write_u64(v);
            b.write(&v.to_le_bytes());
            assert_eq!(a.finish(), b.finish(), "{v:#x}");
        }
    }

    #[test]
    fn incremental_hashing_equals_one_shot() {
        let mut h = Fnv1a::new();
        h.write(b"foo");
        h.write(b"bar");
        assert_eq!(h.finish(), fnv1a64(b"foobar"));
    }
}
