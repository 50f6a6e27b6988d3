//! Copies of payload bytes on the data path (MR → datagram, datagram → MR), made in pieces of
//! at most [`PIECE`] bytes.
//!
//! Why pieces: glibc's `memcpy` switches to `rep movsb` from `x86_rep_movsb_threshold` (2112
//! bytes on CPUs with FSRM, 2048–8192 elsewhere, by vector width) up to the non-temporal
//! threshold. On the x86-64 machine of docs/performance.md ("The in-process data path"),
//! `rep movsb` between two buffers that are not 64-byte aligned relative to each other runs
//! at ~11 GB/s instead of ~120 GB/s for some allocations (about 1 in 100, depending on where
//! the allocator put them, so a run is either fast or slow throughout): the bimodal WRITE
//! figures of issue 13. A packet payload sits 12 or 28 bytes into its datagram, so
//! datagram ↔ MR copies are misaligned in general. Pieces below the threshold take glibc's
//! vector loop instead, which has no such mode and is as fast as `rep movsb` at its best
//! (measured: 4 KiB at 120–190 GB/s either way, misaligned or not).

use bytes::{BufMut, BytesMut};

/// The largest piece copied at once: below every glibc `rep movsb` threshold on FSRM CPUs
/// (2112) and equal to the lowest default elsewhere (2048 × vector bytes / 16, SSE2).
pub(crate) const PIECE: usize = 2048;

/// Copies `src` into `dst` (equal lengths; the shorter one bounds the copy).
pub(crate) fn copy(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        let n = d.len().min(s.len());
        if let (Some(d), Some(s)) = (d.get_mut(..n), s.get(..n)) {
            d.copy_from_slice(s);
        }
    }
}

/// Appends `src` to `out`.
pub(crate) fn append(out: &mut BytesMut, src: &[u8]) {
    out.reserve(src.len());
    for s in src.chunks(PIECE) {
        out.put_slice(s);
    }
}

/// Appends `src` to `out`.
pub(crate) fn append_vec(out: &mut Vec<u8>, src: &[u8]) {
    out.reserve(src.len());
    for s in src.chunks(PIECE) {
        out.extend_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_copy_every_byte() {
        let src: Vec<u8> = (0..3 * PIECE + 5).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        copy(&mut dst, &src);
        assert_eq!(dst, src);
        let mut out = BytesMut::from(&b"head"[..]);
        append(&mut out, &src);
        assert_eq!(&out[..4], b"head");
        assert_eq!(&out[4..], &src[..]);
        let mut v = vec![1u8];
        append_vec(&mut v, &src);
        assert_eq!(&v[1..], &src[..]);
    }
}
