//! Reading a fuzz input as a stream of small fields. Every read is total: past the end it
//! returns `None` (or fewer bytes), so any byte string is a well-formed input.

/// A cursor over the fuzz input.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// The next byte.
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> Option<u16> {
        let (b, rest) = self.data.split_first_chunk::<2>()?;
        self.data = rest;
        Some(u16::from_le_bytes(*b))
    }

    /// The next `n` bytes, or all that are left if fewer.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }
}

/// Builds inputs for [`Input`] (the corpus generator writes seeds with it).
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// The bytes written so far.
    pub bytes: Vec<u8>,
}

impl Output {
    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }

    /// Appends two bytes, little-endian.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends `b`.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(b);
        self
    }
}

/// Where a forged datagram or packet goes and whom it claims to come from: host A is 0, B is 1,
/// the foreign sender 2 (the `cm_engine` and `rc_responder` harnesses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To B, from A's GID.
    ToBFromA = 0,
    /// To A, from B's GID.
    ToAFromB = 1,
    /// To B, from the foreign GID.
    ToBFromForeign = 2,
    /// To A, from the foreign GID.
    ToAFromForeign = 3,
}

impl Route {
    /// The route the low two bits of `b` name.
    pub fn from_bits(b: u8) -> Route {
        match b & 3 {
            0 => Route::ToBFromA,
            1 => Route::ToAFromB,
            2 => Route::ToBFromForeign,
            _ => Route::ToAFromForeign,
        }
    }

    /// (receiving host, source host: 0, 1 or 2 for the foreign GID).
    pub fn hosts(self) -> (usize, usize) {
        match self {
            Route::ToBFromA => (1, 0),
            Route::ToAFromB => (0, 1),
            Route::ToBFromForeign => (1, 2),
            Route::ToAFromForeign => (0, 2),
        }
    }
}
