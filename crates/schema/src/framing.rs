//! The Ethernet framing model: how many bytes each layer puts on the link for
//! a given transport payload, and from that the physical throughput limit.
//!
//! Numbers are the IEEE 802.3 ones (14 B MAC header, 4 B FCS, 64 B minimum
//! frame, 8 B preamble + SFD, 12 B inter-frame gap) and the IPv4/IPv6
//! fragmentation rules (RFC 791, RFC 8200); the upper-bound formula is the
//! Gamess & Suros model used by the studies wirebench reproduces.

use crate::IpVersion;
use serde::{Deserialize, Serialize};

/// Ethernet MAC header (dst, src, ethertype).
pub const ETH_HEADER: u64 = 14;
/// Ethernet frame check sequence.
pub const ETH_FCS: u64 = 4;
/// Smallest Ethernet frame (header + payload padded to 46 B + FCS).
pub const ETH_MIN_FRAME: u64 = 64;
/// Preamble (7 B) + start-of-frame delimiter (1 B).
pub const PREAMBLE: u64 = 8;
/// Minimum inter-frame gap, in byte times.
pub const IFG: u64 = 12;
/// UDP header.
pub const UDP_HEADER: u64 = 8;
/// TCP header without options.
pub const TCP_HEADER: u64 = 20;
/// TCP timestamp option (10 B) padded to 12 B; Linux sends it on every segment.
pub const TCP_TIMESTAMPS: u64 = 12;
/// IPv6 fragment extension header.
pub const IPV6_FRAG_HEADER: u64 = 8;

/// Bytes of one piece of traffic at each layer.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LayerBytes {
    /// Transport payload (what the application wrote).
    pub payload: u64,
    /// IP packets: payload + transport header + IP header(s) of every fragment.
    pub ip: u64,
    /// Ethernet frames: ip + 14 + 4 per frame, each frame at least 64 B.
    pub ethernet: u64,
    /// On the wire: ethernet + 8 preamble + 12 inter-frame gap per frame.
    pub wire: u64,
    /// Ethernet frames needed.
    pub frames: u64,
}

impl LayerBytes {
    /// Adds `other` into `self` (saturating: arbitrary inputs never panic).
    pub fn add(&mut self, other: &LayerBytes) {
        self.payload = self.payload.saturating_add(other.payload);
        self.ip = self.ip.saturating_add(other.ip);
        self.ethernet = self.ethernet.saturating_add(other.ethernet);
        self.wire = self.wire.saturating_add(other.wire);
        self.frames = self.frames.saturating_add(other.frames);
    }
}

fn eth_frame(ip_packet: u64) -> u64 {
    (ip_packet + ETH_HEADER + ETH_FCS).max(ETH_MIN_FRAME)
}

/// `count` frames carrying IP packets of `full` bytes each, plus one last
/// packet of `last` bytes.
fn frames(payload: u64, full: u64, count_full: u64, last: u64) -> LayerBytes {
    let n = count_full.saturating_add(1);
    let ip = full.saturating_mul(count_full).saturating_add(last);
    let ethernet = eth_frame(full)
        .saturating_mul(count_full)
        .saturating_add(eth_frame(last));
    let wire = ethernet.saturating_add((PREAMBLE + IFG).saturating_mul(n));
    LayerBytes {
        payload,
        ip,
        ethernet,
        wire,
        frames: n,
    }
}

/// One UDP datagram of `payload` bytes sent over a link with this MTU.
///
/// If payload + 8 + IP header fits the MTU it is one frame; otherwise the IP
/// layer fragments the UDP datagram (its 8 B header travels in the first
/// fragment). IPv4 fragments carry floor((M−20)/8)×8 data bytes behind a 20 B
/// header; IPv6 fragments floor((M−48)/8)×8 behind 40 + 8 B (fixed header and
/// fragment header). `frames > 1` means fragmented. MTUs too small to carry
/// 8 data bytes per fragment are treated as carrying 8.
pub fn udp_datagram(payload: u32, mtu: u32, ip: IpVersion) -> LayerBytes {
    let payload = u64::from(payload);
    let m = u64::from(mtu);
    let h = u64::from(ip.header_len());
    let data = payload + UDP_HEADER;
    if data + h <= m {
        return frames(payload, 0, 0, data + h);
    }
    let frag_hdr = match ip {
        IpVersion::V4 => h,
        IpVersion::V6 => h + IPV6_FRAG_HEADER,
    };
    let per_frag = (m.saturating_sub(frag_hdr) / 8 * 8).max(8);
    let n = data.div_ceil(per_frag);
    let last_data = data - (n - 1) * per_frag;
    frames(payload, per_frag + frag_hdr, n - 1, last_data + frag_hdr)
}

/// TCP maximum segment size at this MTU with timestamps on:
/// M − IP header − 20 − 12 (0 if the MTU cannot carry a header).
pub fn tcp_mss(mtu: u32, ip: IpVersion) -> u32 {
    mtu.saturating_sub(ip.header_len() + (TCP_HEADER + TCP_TIMESTAMPS) as u32)
}

/// A TCP byte stream of `payload` bytes cut into MSS-sized segments (the
/// last one shorter). Pure data segments; ACKs and handshake are not counted.
/// An MSS of 0 (MTU below the headers) is treated as 1 so the model stays
/// finite.
pub fn tcp_stream(payload: u64, mtu: u32, ip: IpVersion) -> LayerBytes {
    if payload == 0 {
        return LayerBytes::default();
    }
    let mss = u64::from(tcp_mss(mtu, ip).max(1));
    let ov = u64::from(ip.header_len()) + TCP_HEADER + TCP_TIMESTAMPS;
    let n = payload.div_ceil(mss);
    let last = payload - (n - 1) * mss;
    let mut lb = frames(payload, mss + ov, n - 1, last + ov);
    lb.payload = payload;
    lb
}

/// The best UDP payload throughput a link of `link_bps` can give for
/// datagrams of `payload` bytes: R × payload / wire bytes per datagram.
pub fn upper_bound_udp_bps(link_bps: f64, mtu: u32, ip: IpVersion, payload: u32) -> f64 {
    let lb = udp_datagram(payload, mtu, ip);
    link_bps * lb.payload as f64 / lb.wire as f64
}

/// The best TCP payload throughput: R × MSS / wire bytes of a full segment
/// (MSS + 32 + IP header + 38).
pub fn upper_bound_tcp_bps(link_bps: f64, mtu: u32, ip: IpVersion) -> f64 {
    let mss = u64::from(tcp_mss(mtu, ip).max(1));
    let lb = tcp_stream(mss, mtu, ip);
    link_bps * lb.payload as f64 / lb.wire as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpVersion::{V4, V6};

    fn lb(payload: u64, ip: u64, ethernet: u64, wire: u64, frames: u64) -> LayerBytes {
        LayerBytes {
            payload,
            ip,
            ethernet,
            wire,
            frames,
        }
    }

    #[test]
    fn udp_v4_mtu1500_edge() {
        // 1472 + 8 + 20 = 1500 = MTU: one frame; eth 1500+18; wire +20.
        assert_eq!(udp_datagram(1472, 1500, V4), lb(1472, 1500, 1518, 1538, 1));
        // 1473: 1481 B of UDP data; fragments carry floor(1480/8)*8 = 1480,
        // so 1480 + 1. ip = 1481 + 2*20 = 1521. eth = 1518 + max(21+18, 64)
        // = 1582. wire = 1582 + 2*20 = 1622.
        assert_eq!(udp_datagram(1473, 1500, V4), lb(1473, 1521, 1582, 1622, 2));
    }

    #[test]
    fn udp_v6_mtu1500_edge() {
        // 1452 + 8 + 40 = 1500.
        assert_eq!(udp_datagram(1452, 1500, V6), lb(1452, 1500, 1518, 1538, 1));
        // 1453: data 1461, per fragment floor((1500-48)/8)*8 = 1448 -> 1448 + 13.
        // ip = 1461 + 2*48 = 1557; eth = (1496+18) + (61+18) = 1593; wire 1633.
        assert_eq!(udp_datagram(1453, 1500, V6), lb(1453, 1557, 1593, 1633, 2));
    }

    #[test]
    fn udp_jumbo_edges() {
        assert_eq!(udp_datagram(8972, 9000, V4), lb(8972, 9000, 9018, 9038, 1));
        // data 8981, per fragment floor(8980/8)*8 = 8976 -> 8976 + 5;
        // ip = 8981 + 40 = 9021; eth = 8996+18 + max(25+18, 64) = 9078.
        assert_eq!(udp_datagram(8973, 9000, V4), lb(8973, 9021, 9078, 9118, 2));
        assert_eq!(udp_datagram(8952, 9000, V6), lb(8952, 9000, 9018, 9038, 1));
        // data 8961, per fragment floor(8952/8)*8 = 8952 -> 8952 + 9;
        // ip = 8961 + 96 = 9057; eth = 9000+18 + max(57+18, 64) = 9093.
        assert_eq!(udp_datagram(8953, 9000, V6), lb(8953, 9057, 9093, 9133, 2));
    }

    #[test]
    fn udp_largest_v4_datagram() {
        // 65507 B: data 65515 = 44*1480 + 395 -> 45 fragments.
        // ip = 65515 + 45*20 = 66415; eth = 44*1518 + (415+18) = 67225.
        let got = udp_datagram(65507, 1500, V4);
        assert_eq!(got, lb(65507, 66415, 67225, 67225 + 45 * 20, 45));
    }

    #[test]
    fn ethernet_minimum_frame() {
        // 0 B payload: ip 28, 28+18 = 46 < 64 -> padded to 64.
        assert_eq!(udp_datagram(0, 1500, V4), lb(0, 28, 64, 84, 1));
        // 18 B: ip 46 -> exactly 64; 19 B -> 65.
        assert_eq!(udp_datagram(18, 1500, V4).ethernet, 64);
        assert_eq!(udp_datagram(19, 1500, V4).ethernet, 65);
        // IPv6 0 B: ip 48 -> 66, above the minimum.
        assert_eq!(udp_datagram(0, 1500, V6).ethernet, 66);
    }

    #[test]
    fn tcp_mss_values() {
        assert_eq!(tcp_mss(1500, V4), 1448); // 1500-20-20-12
        assert_eq!(tcp_mss(1500, V6), 1428); // 1500-40-20-12
        assert_eq!(tcp_mss(9000, V4), 8948);
        assert_eq!(tcp_mss(40, V6), 0);
    }

    #[test]
    fn tcp_stream_segments() {
        // 10000 B at MSS 1448: 6 full + 1312. ip = 10000 + 7*52 = 10364;
        // eth = 6*1518 + (1312+52+18) = 10490; wire = 10490 + 7*20 = 10630.
        assert_eq!(
            tcp_stream(10000, 1500, V4),
            lb(10000, 10364, 10490, 10630, 7)
        );
        assert_eq!(tcp_stream(0, 1500, V4), LayerBytes::default());
        // silly MTU: no panic, finite.
        assert_eq!(tcp_stream(3, 10, V4).frames, 3);
    }

    #[test]
    fn upper_bounds() {
        // The design's check: 100e6 * 1408 / (1408+8+20+38) = 95.522388e6.
        let ub = upper_bound_udp_bps(100e6, 1500, V4, 1408);
        assert!((ub - 100e6 * 1408.0 / 1474.0).abs() < 1e-3, "{ub}");
        assert!((ub - 95.52e6).abs() < 0.01e6);
        // TCP: 100e6 * 1448 / (1448+52+38) = 94.148244e6.
        let ub = upper_bound_tcp_bps(100e6, 1500, V4);
        assert!((ub - 100e6 * 1448.0 / 1538.0).abs() < 1e-3, "{ub}");
        // 1 Gbit/s, v6, 9000: 8928 / (8928+72+38)
        let ub = upper_bound_tcp_bps(1e9, 9000, V6);
        assert!((ub - 1e9 * 8928.0 / 9038.0).abs() < 1e-3, "{ub}");
        // fragmented UDP 1473 B: 1473 / 1622 of the link.
        let ub = upper_bound_udp_bps(1e9, 1500, V4, 1473);
        assert!((ub - 1e9 * 1473.0 / 1622.0).abs() < 1e-3, "{ub}");
    }

    #[test]
    fn tiny_mtu_does_not_panic() {
        for mtu in [0, 1, 20, 27, 28, 47, 48, 68] {
            for ip in [V4, V6] {
                let l = udp_datagram(u32::MAX, mtu, ip);
                assert!(l.frames >= 1 && l.wire > l.payload);
                let _ = upper_bound_tcp_bps(1e9, mtu, ip);
            }
        }
    }
}
