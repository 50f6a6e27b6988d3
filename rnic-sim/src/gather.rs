//! Payloads read from registered memory when their packet leaves the device, as an RNIC reads
//! them by DMA: RC SEND/WRITE request packets (the send WQE's SGE list) and RDMA READ
//! responses (the target region). No copy of the message is kept: a (re)transmitted packet
//! reads the bytes again [rxe_req.c: `finish_packet` → `copy_data` per packet, also on
//! retry]. The rule that makes this indistinguishable from a snapshot taken when the WQE
//! starts: "The buffers used by a WR can only be safely reused after … the request is fully
//! executed and a work completion has been retrieved from the corresponding completion queue"
//! [man:ibv_post_send.3, NOTES] (INLINE data is the exception: copied at post time). The
//! choice and its consequences: docs/semantics-verbs.md, "Payload read at transmit time".
//!
//! Three moments, all inside one drain of the device:
//!
//! * the requester builds a packet and resolves its byte range of the message to region spans
//!   ([`Gather::of_sges`]: each SGE's lkey, PD and bounds checked again, as rxe checks them per
//!   packet; a region deregistered since the WQE started fails here, LOC_PROT_ERR);
//! * [`SimDevice::poll_transmit`](crate::SimDevice::poll_transmit) pops it and finds the
//!   regions again ([`Gather::resolve`]);
//! * the bytes are copied once: by [`SimNic`](crate::nic::SimNic) straight into the encoded
//!   datagram ([`Payload`] is the codec's `PayloadSource`), or into the packet's own
//!   `payload` for callers of `SimDevice::poll_transmit`.
//!
//! The fabric drivers drain `poll_transmit` after every input (the `Endpoint` contract), so no
//! verbs call runs between the first and the last moment.

use crate::memory::Source;
use crate::mr::MrTable;
use crate::roce::codec::PayloadSource;
use bytes::{Bytes, BytesMut};
use verbs_core::{AccessFlags, Sge};

/// `len` bytes at byte `off` of the region with handle `mr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    mr: u32,
    off: usize,
    len: usize,
}

/// The payload of one outgoing packet: spans of registered regions, in order, not yet read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gather {
    first: Span,
    /// Further spans when the packet's bytes come from several SGEs (no allocation otherwise).
    rest: Vec<Span>,
}

impl Gather {
    /// `len` bytes at `off` of region `mr` (a READ response: the region was checked by rkey).
    pub fn span(mr: u32, off: usize, len: usize) -> Self {
        Gather {
            first: Span { mr, off, len },
            rest: Vec::new(),
        }
    }

    /// Bytes `[start, start + len)` of the message the SGE list `sges` describes, `len > 0`.
    /// Each SGE touched must still be a live region of `pd` containing it (lkey, PD, bounds, as
    /// [`MrTable::check_readable`] checked when the WQE started); `None` otherwise, or when the
    /// list is shorter than `start + len`.
    pub fn of_sges(mrs: &MrTable, pd: u32, sges: &[Sge], start: u64, len: usize) -> Option<Self> {
        let mut spans = Vec::new();
        let mut first = None;
        let mut skip = start;
        let mut left = len as u64;
        for s in sges {
            if left == 0 {
                break;
            }
            let sl = u64::from(s.length);
            if skip >= sl {
                skip -= sl;
                continue;
            }
            let take = (sl - skip).min(left);
            let addr = s.addr.wrapping_add(skip);
            let (mr, off) = mrs.check_local(pd, s.lkey, addr, take, AccessFlags::empty())?;
            let span = Span {
                mr,
                off,
                len: usize::try_from(take).ok()?,
            };
            if first.is_none() {
                first = Some(span);
            } else {
                spans.push(span);
            }
            left -= take;
            skip = 0;
        }
        if left > 0 {
            return None;
        }
        Some(Gather {
            first: first?,
            rest: spans,
        })
    }

    /// Finds the regions again and bounds-checks the spans: `None` when a region was
    /// deregistered since the packet was built.
    pub fn resolve<'a>(&self, mrs: &'a MrTable) -> Option<Payload<'a>> {
        let source = |s: &Span| mrs.get(s.mr)?.memory.source(s.off, s.len);
        Some(Payload {
            first: source(&self.first)?,
            rest: self.rest.iter().map(source).collect::<Option<Vec<_>>>()?,
        })
    }
}

/// A [`Gather`] whose regions were found: their bytes, borrowed until the packet is encoded.
#[derive(Debug)]
pub(crate) struct Payload<'a> {
    first: Source<'a>,
    rest: Vec<Source<'a>>,
}

impl Payload<'_> {
    /// The bytes, copied into a buffer of their own.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(PayloadSource::len(self));
        self.append_to(&mut out);
        out.freeze()
    }
}

impl PayloadSource for Payload<'_> {
    fn len(&self) -> usize {
        self.first.len() + self.rest.iter().map(Source::len).sum::<usize>()
    }

    fn append_to(&self, out: &mut BytesMut) {
        self.first.append_to(out);
        for s in &self.rest {
            s.append_to(out);
        }
    }
}
