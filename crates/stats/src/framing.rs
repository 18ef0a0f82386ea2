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
