//! The S6 data pattern: what a SEND/WRITE payload and a host's READ region hold.

use super::config::SLOT_BYTES;

/// Word `k` (bytes `8k..8k+8`, little-endian) of the S6 data pattern of stream `(seed, tag)`:
/// SplitMix64's finaliser of the three. `tag` is a WR id for SEND/WRITE payloads and
/// `1 << 63 | host` for a host's READ region.
pub fn payload_word(seed: u64, tag: u64, k: u64) -> u64 {
    let mut z =
        seed ^ tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Byte `i` of the S6 data pattern of stream `(seed, tag)` (see [`payload_word`]).
pub fn payload_byte(seed: u64, tag: u64, i: u64) -> u8 {
    (payload_word(seed, tag, i >> 3) >> ((i & 7) * 8)) as u8
}

/// Fills `buf` with the pattern of `(seed, tag)` starting at pattern byte `start` (a multiple
/// of 8), a word at a time.
pub(super) fn fill_pattern(seed: u64, tag: u64, start: u64, buf: &mut [u8]) {
    for (k, chunk) in buf.chunks_mut(8).enumerate() {
        let w = payload_word(seed, tag, (start >> 3) + k as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Whether `got` equals the pattern of `(seed, tag)` from pattern byte `base + skip` on (`base`
/// a multiple of 8).
pub(super) fn matches_pattern(seed: u64, tag: u64, base: u64, got: &[u8], skip: usize) -> bool {
    let mut want = [0u8; SLOT_BYTES as usize + 8];
    let n = got.len() + skip;
    if n > want.len() {
        return false;
    }
    fill_pattern(seed, tag, base, &mut want[..n]);
    want[skip..n] == *got
}
