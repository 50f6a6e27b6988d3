//! rdma_cm's use of the REQ: the IP service ID and the 36-byte IP-CM private-data header
//! (cm-spec §2.10 [cma.c `cma_get_service_id`, `cma_format_hdr`, `struct cma_hdr`; ws]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::field::{bytes, put_bytes, put_u16, put_u8, u16_at, u8_at};
use super::{
    WireError, CM_REQ_ATTR_ID, CM_SIDR_REQ_ATTR_ID, IB_CM_REQ_PRIVATE_DATA_SIZE,
    IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE,
};

/// rdma_cm port spaces, numbered as `enum rdma_ucm_port_space` \[rdma_cma.h\].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u16)]
pub enum RdmaPortSpace {
    /// `RDMA_PS_IPOIB` (0x0002).
    Ipoib = 0x0002,
    /// `RDMA_PS_TCP` (0x0106): reliable connected ids.
    Tcp = 0x0106,
    /// `RDMA_PS_UDP` (0x0111): UD ids, resolved with SIDR.
    Udp = 0x0111,
    /// `RDMA_PS_IB` (0x013F).
    Ib = 0x013F,
}

impl TryFrom<u16> for RdmaPortSpace {
    /// The unknown value itself.
    type Error = u16;

    fn try_from(v: u16) -> Result<Self, u16> {
        match v {
            0x0002 => Ok(RdmaPortSpace::Ipoib),
            0x0106 => Ok(RdmaPortSpace::Tcp),
            0x0111 => Ok(RdmaPortSpace::Udp),
            0x013F => Ok(RdmaPortSpace::Ib),
            other => Err(other),
        }
    }
}

/// Mask of the port-space part of an IP service ID (`RDMA_IB_IP_PS_MASK`).
pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
/// Service-ID prefix of the TCP port space (`RDMA_IB_IP_PS_TCP`).
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
/// Service-ID prefix of the UDP port space (`RDMA_IB_IP_PS_UDP`).
pub const RDMA_IB_IP_PS_UDP: u64 = 0x0000_0000_0111_0000;
/// Service-ID prefix of the IB port space (`RDMA_IB_IP_PS_IB`).
pub const RDMA_IB_IP_PS_IB: u64 = 0x0000_0000_013F_0000;

/// The service ID rdma_cm puts in a REQ/SIDR_REQ for an IP-addressed id:
/// `(port_space << 16) | port` (cm-spec §2.10 [cma.c `cma_get_service_id`]).
///
/// Example: TCP port 4791 → `0x0000_0000_0106_12B7`, wire bytes `00 00 00 00 01 06 12 B7`.
pub fn ip_service_id(port_space: RdmaPortSpace, port: u16) -> u64 {
    (u64::from(port_space as u16) << 16) | u64::from(port)
}

/// Splits an IP service ID into port space and port, the passive side's decode
/// (cm-spec §2.10). `None` when the top 32 bits are not zero or the port space is not one of
/// [`RdmaPortSpace`]: such a service ID is not an rdma_cm IP service ID (e.g. AF_IB).
pub fn parse_ip_service_id(service_id: u64) -> Option<(RdmaPortSpace, u16)> {
    if service_id >> 32 != 0 {
        return None;
    }
    let ps = RdmaPortSpace::try_from(u16::try_from((service_id >> 16) & 0xFFFF).ok()?).ok()?;
    let port = u16::try_from(service_id & 0xFFFF).ok()?;
    Some((ps, port))
}

/// Size of the IP-CM private-data header, bytes (`sizeof(struct cma_hdr)`).
pub const IP_CM_HEADER_SIZE: usize = 36;
/// `CMA_VERSION`: the only header version Linux accepts.
pub const CMA_VERSION: u8 = 0x00;
/// User private data an `rdma_connect` in the TCP port space may carry in the REQ:
/// 92 − 36 = 56 bytes \[man:rdma_connect.3\].
pub const RDMA_TCP_REQ_USER_PRIVATE_DATA_MAX: usize =
    IB_CM_REQ_PRIVATE_DATA_SIZE - IP_CM_HEADER_SIZE;
/// User private data in a UDP-port-space SIDR_REQ: 216 − 36 = 180 bytes.
pub const RDMA_UDP_SIDR_REQ_USER_PRIVATE_DATA_MAX: usize =
    IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE - IP_CM_HEADER_SIZE;

/// The 36-byte header rdma_cm prepends to REQ and SIDR_REQ private data (`struct cma_hdr`).
///
/// Layout: byte 0 cma version (0), byte 1 IP version in bits 7..4 (4 or 6), bytes 2–3 source
/// port, bytes 4–19 source address, bytes 20–35 destination address. An IPv4 address is
/// stored as Linux's `union cma_ip_addr` does: 12 zero bytes, then the 4 address bytes
/// (cm-spec §2.10). The version byte is always written as [`CMA_VERSION`] and checked on
/// decode, so it is not a field here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpCmHeader {
    /// The active side's local port (the destination port travels in the service ID).
    pub src_port: u16,
    /// The active side's address.
    pub src_addr: IpAddr,
    /// The passive side's address; listeners bound to an address match it against this.
    pub dst_addr: IpAddr,
}

impl IpCmHeader {
    /// The IP version the header carries: 4 when both addresses are IPv4, else 6 (an IPv4
    /// address in an IPv6 header is written IPv4-mapped, `::ffff:a.b.c.d`).
    pub fn ip_version(&self) -> u8 {
        match (self.src_addr, self.dst_addr) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            _ => 6,
        }
    }

    /// The 36 wire bytes.
    pub fn encode(&self) -> [u8; IP_CM_HEADER_SIZE] {
        let v4 = self.ip_version() == 4;
        let mut h = [0u8; IP_CM_HEADER_SIZE];
        put_u8(&mut h, 0, CMA_VERSION);
        put_u8(&mut h, 1, self.ip_version() << 4);
        put_u16(&mut h, 2, self.src_port);
        put_bytes(&mut h, 4, addr_bytes(self.src_addr, v4));
        put_bytes(&mut h, 20, addr_bytes(self.dst_addr, v4));
        h
    }

    /// Parses the header at the start of REQ/SIDR_REQ private data, as Linux
    /// `cma_save_ip_info` does: only the last 4 bytes of each address count for IPv4.
    ///
    /// Errors: [`WireError::IpCmTooShort`] under 36 bytes; [`WireError::BadCmaVersion`] when
    /// byte 0 is not 0 (Linux: -EINVAL); [`WireError::BadIpVersion`] when the IP version is
    /// not 4 or 6 (Linux: -EAFNOSUPPORT).
    pub fn decode(private_data: &[u8]) -> Result<Self, WireError> {
        if private_data.len() < IP_CM_HEADER_SIZE {
            return Err(WireError::IpCmTooShort {
                len: private_data.len(),
            });
        }
        let version = u8_at(private_data, 0);
        if version != CMA_VERSION {
            return Err(WireError::BadCmaVersion(version));
        }
        let ip_version = u8_at(private_data, 1) >> 4;
        let addr = |off: usize| -> IpAddr {
            let raw: [u8; 16] = bytes(private_data, off);
            if ip_version == 4 {
                let [.., a, b, c, d] = raw;
                IpAddr::V4(Ipv4Addr::new(a, b, c, d))
            } else {
                IpAddr::V6(Ipv6Addr::from(raw))
            }
        };
        match ip_version {
            4 | 6 => Ok(IpCmHeader {
                src_port: u16_at(private_data, 2),
                src_addr: addr(4),
                dst_addr: addr(20),
            }),
            other => Err(WireError::BadIpVersion(other)),
        }
    }

    /// REQ private data for `rdma_connect` in the TCP port space: this header followed by
    /// `user` (cm-spec §2.10).
    ///
    /// Errors: [`WireError::PrivateDataTooLong`] with `max` 56 when `user` is longer than
    /// [`RDMA_TCP_REQ_USER_PRIVATE_DATA_MAX`] (librdmacm fails `rdma_connect` with EINVAL).
    pub fn req_private_data(&self, user: &[u8]) -> Result<Vec<u8>, WireError> {
        self.prepend(user, RDMA_TCP_REQ_USER_PRIVATE_DATA_MAX, CM_REQ_ATTR_ID)
    }

    /// SIDR_REQ private data for a UDP-port-space id: this header followed by `user`, at most
    /// [`RDMA_UDP_SIDR_REQ_USER_PRIVATE_DATA_MAX`] = 180 bytes ([`WireError::PrivateDataTooLong`]).
    pub fn sidr_req_private_data(&self, user: &[u8]) -> Result<Vec<u8>, WireError> {
        self.prepend(
            user,
            RDMA_UDP_SIDR_REQ_USER_PRIVATE_DATA_MAX,
            CM_SIDR_REQ_ATTR_ID,
        )
    }

    fn prepend(&self, user: &[u8], max: usize, attribute_id: u16) -> Result<Vec<u8>, WireError> {
        if user.len() > max {
            return Err(WireError::PrivateDataTooLong {
                attribute_id,
                len: user.len(),
                max,
            });
        }
        let mut pd = self.encode().to_vec();
        pd.extend_from_slice(user);
        Ok(pd)
    }

    /// Splits received REQ/SIDR_REQ private data into the header and the user part that the
    /// passive application sees (for a decoded REQ, always 56 bytes, zero-padded).
    pub fn split(private_data: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let hdr = IpCmHeader::decode(private_data)?;
        let user = private_data.get(IP_CM_HEADER_SIZE..).unwrap_or_default();
        Ok((hdr, user))
    }
}

fn addr_bytes(addr: IpAddr, v4_header: bool) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) if v4_header => {
            let mut b = [0u8; 16];
            put_bytes(&mut b, 12, a.octets());
            b
        }
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}
