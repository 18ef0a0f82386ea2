//! Ethernet / IPv4 / IPv6 / UDP framing for the AF_XDP path: the sender
//! writes a frame's headers once per UMEM frame and patches only the
//! lengths and checksums per packet; the receiver parses a frame back to
//! its UDP payload and marks. Layouts: RFC 791 (IPv4), RFC 8200 (IPv6),
//! RFC 768 (UDP; checksum 0 = none over IPv4), RFC 1071 (checksum).

use std::net::{IpAddr, SocketAddr};

const ETH_LEN: usize = 14;
const ETHERTYPE_V4: [u8; 2] = [0x08, 0x00];
const ETHERTYPE_V6: [u8; 2] = [0x86, 0xdd];
const V4_LEN: usize = 20;
const V6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const PROTO_UDP: u8 = 17;
/// Hop limit of the frames we build, as the kernel's default.
const TTL: u8 = 64;

/// Named byte ranges of the headers (offsets from the frame start).
mod field {
    pub const ETH_DST: std::ops::Range<usize> = 0..6;
    pub const ETH_SRC: std::ops::Range<usize> = 6..12;
    pub const ETH_TYPE: std::ops::Range<usize> = 12..14;
    pub const V4_VER_IHL: usize = 14;
    pub const V4_TOS: usize = 15;
    pub const V4_TOTAL: std::ops::Range<usize> = 16..18;
    pub const V4_FRAG: std::ops::Range<usize> = 20..22;
    pub const V4_TTL: usize = 22;
    pub const V4_PROTO: usize = 23;
    pub const V4_SUM: std::ops::Range<usize> = 24..26;
    pub const V4_SRC: std::ops::Range<usize> = 26..30;
    pub const V4_DST: std::ops::Range<usize> = 30..34;
    pub const V6_VTF: std::ops::Range<usize> = 14..18;
    pub const V6_PAYLOAD: std::ops::Range<usize> = 18..20;
    pub const V6_NEXT: usize = 20;
    pub const V6_HOPS: usize = 21;
    pub const V6_SRC: std::ops::Range<usize> = 22..38;
    pub const V6_DST: std::ops::Range<usize> = 38..54;
}

/// Who a flow's frames go from and to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// This interface's MAC address.
    pub src_mac: [u8; 6],
    /// The next hop's MAC address.
    pub dst_mac: [u8; 6],
    /// The flow's source address and port.
    pub src: SocketAddr,
    /// The receiver's data address and port.
    pub dst: SocketAddr,
}

impl Endpoints {
    /// Whether the frames are IPv6.
    pub fn v6(&self) -> bool {
        self.dst.is_ipv6()
    }

    /// Bytes of headers before the UDP payload.
    pub fn header_len(&self) -> usize {
        header_len(self.v6())
    }
}

/// Bytes of headers before the UDP payload.
pub(crate) fn header_len(v6: bool) -> usize {
    ETH_LEN + if v6 { V6_LEN } else { V4_LEN } + UDP_LEN
}

/// Writes every header field that does not depend on the payload length.
/// `buf` is at least [`header_len`] long.
pub(crate) fn write_headers(buf: &mut [u8], ep: &Endpoints) {
    buf[field::ETH_DST].copy_from_slice(&ep.dst_mac);
    buf[field::ETH_SRC].copy_from_slice(&ep.src_mac);
    let udp = match (ep.src.ip(), ep.dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            buf[field::ETH_TYPE].copy_from_slice(&ETHERTYPE_V4);
            buf[field::V4_VER_IHL] = 0x45;
            buf[field::V4_TOS] = 0;
            buf[18..20].fill(0);
            buf[field::V4_FRAG].copy_from_slice(&[0x40, 0]);
            buf[field::V4_TTL] = TTL;
            buf[field::V4_PROTO] = PROTO_UDP;
            buf[field::V4_SRC].copy_from_slice(&s.octets());
            buf[field::V4_DST].copy_from_slice(&d.octets());
            ETH_LEN + V4_LEN
        }
        (s, d) => {
            let (s, d) = (v6_of(s), v6_of(d));
            buf[field::ETH_TYPE].copy_from_slice(&ETHERTYPE_V6);
            buf[field::V6_VTF].copy_from_slice(&[0x60, 0, 0, 0]);
            buf[field::V6_NEXT] = PROTO_UDP;
            buf[field::V6_HOPS] = TTL;
            buf[field::V6_SRC].copy_from_slice(&s.octets());
            buf[field::V6_DST].copy_from_slice(&d.octets());
            ETH_LEN + V6_LEN
        }
    };
    buf[udp..udp + 2].copy_from_slice(&ep.src.port().to_be_bytes());
    buf[udp + 2..udp + 4].copy_from_slice(&ep.dst.port().to_be_bytes());
}

fn v6_of(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

/// Sets the lengths and checksums of a frame whose headers
/// [`write_headers`] wrote and whose `payload` bytes follow them; `frame`
/// is exactly headers + payload long.
pub(crate) fn finish(frame: &mut [u8], v6: bool) {
    let hl = header_len(v6);
    let udp_len = (frame.len() - hl + UDP_LEN) as u16;
    let udp = hl - UDP_LEN;
    frame[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
    frame[udp + 6..udp + 8].fill(0);
    if v6 {
        frame[field::V6_PAYLOAD].copy_from_slice(&udp_len.to_be_bytes());
        // Mandatory over IPv6: pseudo header (addresses, length, next
        // header) plus the UDP header and payload.
        let mut sum = add_words(0, &frame[field::V6_SRC.start..field::V6_DST.end]);
        sum += u32::from(udp_len) + u32::from(PROTO_UDP);
        sum = add_words(sum, &frame[udp..]);
        let c = match fold(sum) {
            0 => 0xffff,
            c => c,
        };
        frame[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
    } else {
        let total = (frame.len() - ETH_LEN) as u16;
        frame[field::V4_TOTAL].copy_from_slice(&total.to_be_bytes());
        frame[field::V4_SUM].fill(0);
        let c = fold(add_words(0, &frame[ETH_LEN..ETH_LEN + V4_LEN]));
        frame[field::V4_SUM].copy_from_slice(&c.to_be_bytes());
    }
}

fn add_words(mut sum: u32, b: &[u8]) -> u32 {
    let mut chunks = b.chunks_exact(2);
    for w in &mut chunks {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([w[0], w[1]])));
    }
    if let [last] = chunks.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A received UDP frame: who sent it, where to, where its payload lies,
/// and the IP marks the socket path would report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub src: SocketAddr,
    pub dst_port: u16,
    pub payload: (usize, usize),
    pub tos: u8,
    pub ttl: u8,
    pub flow_label: Option<u32>,
}

/// Parses an Ethernet frame carrying UDP (what the XDP program steers);
/// None for anything else or a length that does not add up.
pub(crate) fn parse(f: &[u8]) -> Option<Parsed> {
    let et = f.get(field::ETH_TYPE)?;
    let (ip_end, src, tos, ttl, label, ip_payload_end) = if et == ETHERTYPE_V4 {
        let h = f.get(ETH_LEN..ETH_LEN + V4_LEN)?;
        let ihl = usize::from(h[0] & 0x0f) * 4;
        if h[0] >> 4 != 4 || ihl < V4_LEN || f[field::V4_PROTO] != PROTO_UDP {
            return None;
        }
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let s: [u8; 4] = f.get(field::V4_SRC)?.try_into().ok()?;
        (
            ETH_LEN + ihl,
            IpAddr::from(s),
            h[1],
            h[8],
            None,
            ETH_LEN + total,
        )
    } else if et == ETHERTYPE_V6 {
        let h = f.get(ETH_LEN..ETH_LEN + V6_LEN)?;
        if h[0] >> 4 != 6 || f[field::V6_NEXT] != PROTO_UDP {
            return None;
        }
        let vtf = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let plen = usize::from(u16::from_be_bytes([h[4], h[5]]));
        let s: [u8; 16] = f.get(field::V6_SRC)?.try_into().ok()?;
        (
            ETH_LEN + V6_LEN,
            IpAddr::from(s),
            ((vtf >> 20) & 0xff) as u8,
            h[7],
            Some(vtf & 0xfffff),
            ETH_LEN + V6_LEN + plen,
        )
    } else {
        return None;
    };
    let u = f.get(ip_end..ip_end + UDP_LEN)?;
    let udp_len = usize::from(u16::from_be_bytes([u[4], u[5]]));
    let end = ip_end + udp_len;
    if udp_len < UDP_LEN || end > f.len() || end > ip_payload_end {
        return None;
    }
    Some(Parsed {
        src: SocketAddr::new(src, u16::from_be_bytes([u[0], u[1]])),
        dst_port: u16::from_be_bytes([u[2], u[3]]),
        payload: (ip_end + UDP_LEN, end),
        tos,
        ttl,
        flow_label: label,
    })
}

/// Endpoints from `src` to `dst` (socket addresses) between two local
/// MACs, for the XDP modules' tests.
#[cfg(test)]
pub(crate) fn test_endpoints(src: &str, dst: &str) -> Endpoints {
    Endpoints {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
    }
}

#[cfg(test)]
mod tests {
    use super::test_endpoints as ep;
    use super::*;

    fn frame(e: &Endpoints, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; e.header_len() + payload.len()];
        write_headers(&mut f, e);
        f[e.header_len()..].copy_from_slice(payload);
        finish(&mut f, e.v6());
        f
    }

    #[test]
    fn ipv4_frame_round_trips_with_a_valid_header_checksum() {
        let e = ep("10.0.0.1:4000", "10.0.0.2:5000");
        let f = frame(&e, b"hello wirebench");
        // A correct header sums to 0xffff, so its fold is 0.
        assert_eq!(fold(add_words(0, &f[14..34])), 0);
        let p = parse(&f).unwrap();
        assert_eq!(p.src, e.src);
        assert_eq!(p.dst_port, 5000);
        assert_eq!(&f[p.payload.0..p.payload.1], b"hello wirebench");
        assert_eq!(p.ttl, 64);
    }

    #[test]
    fn ipv6_frame_has_a_udp_checksum_that_verifies() {
        let e = ep("[fd00::1]:4000", "[fd00::2]:5000");
        let f = frame(&e, b"odd length!");
        let udp = 14 + 40;
        let len = (f.len() - udp) as u32;
        // Receiver's check: pseudo header + UDP with its checksum folds to 0.
        let mut s = add_words(0, &f[22..54]);
        s += len + 17;
        s = add_words(s, &f[udp..]);
        assert_eq!(fold(s), 0);
        let p = parse(&f).unwrap();
        assert_eq!(p.src, e.src);
        assert_eq!(p.flow_label, Some(0));
        assert_eq!(&f[p.payload.0..p.payload.1], b"odd length!");
    }

    #[test]
    fn short_or_inconsistent_frames_are_not_parsed() {
        let e = ep("10.0.0.1:4000", "10.0.0.2:5000");
        let f = frame(&e, b"0123456789");
        assert!(parse(&f[..40]).is_none());
        let mut g = f.clone();
        g[38..40].copy_from_slice(&200u16.to_be_bytes());
        assert!(parse(&g).is_none());
        let mut t = f;
        t[12] = 0x88;
        assert!(parse(&t).is_none());
    }
}
