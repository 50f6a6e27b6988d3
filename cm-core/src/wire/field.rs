//! Big-endian field access on a CM message's 232-byte data area.
//!
//! Offsets are *msg offsets* (cm-spec §0: from the first byte after the 24-byte MAD header).
//! Every accessor is total: an out-of-range offset reads as zero and writes nothing, so no input
//! can make the codec panic. Bit-field placement follows the IBTA `Byte[Bit]` notation that
//! Linux's `IBA_FIELD_BLOC` uses (cm-spec §2.1 "Field-location rules" \[iba\]): `bit_offset`
//! counts from the most significant bit of the byte.

/// `N` bytes at `off`, or zeros when out of range.
pub(crate) fn bytes<const N: usize>(d: &[u8], off: usize) -> [u8; N] {
    d.get(off..off.saturating_add(N))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .unwrap_or([0; N])
}

/// Writes `v` at `off`; does nothing when out of range.
pub(crate) fn put_bytes<const N: usize>(d: &mut [u8], off: usize, v: [u8; N]) {
    if let Some(s) = d.get_mut(off..off.saturating_add(N)) {
        s.copy_from_slice(&v);
    }
}

pub(crate) fn u8_at(d: &[u8], off: usize) -> u8 {
    let [b] = bytes::<1>(d, off);
    b
}

pub(crate) fn u16_at(d: &[u8], off: usize) -> u16 {
    u16::from_be_bytes(bytes(d, off))
}

pub(crate) fn u32_at(d: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(bytes(d, off))
}

pub(crate) fn u64_at(d: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(bytes(d, off))
}

/// A 24-bit field: the top 24 bits of the dword at `off` (`CM_FIELD32_LOC(off, 24)`).
pub(crate) fn u24_at(d: &[u8], off: usize) -> u32 {
    let [a, b, c] = bytes::<3>(d, off);
    u32::from_be_bytes([0, a, b, c])
}

pub(crate) fn put_u8(d: &mut [u8], off: usize, v: u8) {
    put_bytes(d, off, [v]);
}

pub(crate) fn put_u16(d: &mut [u8], off: usize, v: u16) {
    put_bytes(d, off, v.to_be_bytes());
}

pub(crate) fn put_u32(d: &mut [u8], off: usize, v: u32) {
    put_bytes(d, off, v.to_be_bytes());
}

pub(crate) fn put_u64(d: &mut [u8], off: usize, v: u64) {
    put_bytes(d, off, v.to_be_bytes());
}

/// Writes the low 24 bits of `v` at `off..off + 3` (higher bits are masked off).
pub(crate) fn put_u24(d: &mut [u8], off: usize, v: u32) {
    let [_, a, b, c] = v.to_be_bytes();
    put_bytes(d, off, [a, b, c]);
}

/// The 20-bit flow label: the top 20 bits of the dword at `off` (`CM_FIELD32_LOC(off, 20)`).
pub(crate) fn flow_label_at(d: &[u8], off: usize) -> u32 {
    u32_at(d, off) >> 12
}

/// Writes the low 20 bits of `v` as the top 20 bits of the dword at `off`, keeping its low 12.
pub(crate) fn put_flow_label(d: &mut [u8], off: usize, v: u32) {
    let keep = u32_at(d, off) & 0xFFF;
    put_u32(d, off, ((v & 0xF_FFFF) << 12) | keep);
}

/// Mask of the low `width` bits (`width` ≤ 8).
fn low_mask(width: u32) -> u8 {
    u8::try_from((1u16 << width.min(8)) - 1).unwrap_or(u8::MAX)
}

/// Shift that places a `width`-bit field starting `bit_offset` bits below the MSB.
fn shift(bit_offset: u32, width: u32) -> u32 {
    8u32.saturating_sub(bit_offset.saturating_add(width))
}

/// The `width`-bit field of byte `off` that starts `bit_offset` bits below its MSB.
pub(crate) fn bits_at(d: &[u8], off: usize, bit_offset: u32, width: u32) -> u8 {
    u8_at(d, off)
        .checked_shr(shift(bit_offset, width))
        .unwrap_or(0)
        & low_mask(width)
}

/// Writes the low `width` bits of `v` into that field, keeping the byte's other bits.
pub(crate) fn put_bits(d: &mut [u8], off: usize, bit_offset: u32, width: u32, v: u8) {
    let s = shift(bit_offset, width);
    let m = low_mask(width).checked_shl(s).unwrap_or(0);
    let b = (u8_at(d, off) & !m) | (v.checked_shl(s).unwrap_or(0) & m);
    put_u8(d, off, b);
}

/// Writes a flag as a 1-bit field.
pub(crate) fn put_flag(d: &mut [u8], off: usize, bit_offset: u32, v: bool) {
    put_bits(d, off, bit_offset, 1, u8::from(v));
}

/// Reads a 1-bit field as a flag.
pub(crate) fn flag_at(d: &[u8], off: usize, bit_offset: u32) -> bool {
    bits_at(d, off, bit_offset, 1) != 0
}

/// `len` bytes at `off` as a vector (empty when out of range).
pub(crate) fn vec_at(d: &[u8], off: usize, len: usize) -> Vec<u8> {
    d.get(off..off.saturating_add(len))
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// Copies `src` to `off`; the caller has checked that it fits.
pub(crate) fn put_slice(d: &mut [u8], off: usize, src: &[u8]) {
    if let Some(s) = d.get_mut(off..off.saturating_add(src.len())) {
        s.copy_from_slice(src);
    }
}
