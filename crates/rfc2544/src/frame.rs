//! Frame sizes and rates. RFC 2544 §9.1 names the Ethernet frame sizes (64,
//! 128, 256, 512, 1024, 1280, 1518 B, frame check sequence included, preamble
//! and gap not); RFC 5180 §5.1.1 keeps them for IPv6 (1280 is the IPv6
//! minimum MTU) and adds jumbo sizes. A test frame here is one UDP datagram
//! in one Ethernet frame: payload = frame − 18 (MAC header + FCS) − IP
//! header (20 / 40) − 8 (UDP). The byte counts per layer come from
//! `wirebench_stats::framing`, so the line rate here and the upper bound the
//! campaign reports are one model.

use serde::{Deserialize, Serialize};
use thiserror::Error;
use wirebench_stats::framing::{self, ETH_FCS, ETH_HEADER, UDP_HEADER};
use wirebench_stats::IpVersion;

/// RFC 2544 §9.1 Ethernet frame sizes.
pub const RFC2544_SIZES: [u32; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// Largest Ethernet frame wirebench tests: a 65 535 B IP packet + 18.
pub const MAX_FRAME: u32 = 65_535 + 18;

#[derive(Debug, Error, PartialEq)]
pub enum FrameError {
    #[error("frame size {frame} B is larger than the MTU {mtu} allows ({max} B frames); raise the MTU for jumbo frames")]
    AboveMtu { frame: u32, mtu: u32, max: u32 },
    #[error("frame size {0} B is outside 64..={MAX_FRAME}")]
    OutOfRange(u32),
}

/// One frame size as tested.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FrameSpec {
    /// The size asked for (an RFC 2544 size, or any 64..=65553).
    pub nominal: u32,
    /// The Ethernet frame actually sent (FCS included). Above `nominal`
    /// only when `nominal` cannot carry the probe header (see [`FrameSpec::new`]).
    pub frame: u32,
    /// UDP payload (probe header included) that makes this frame.
    pub payload: u32,
    pub ip: IpVersion,
}

/// Bytes an Ethernet frame adds around the IP packet: MAC header and FCS.
const ETH_OVERHEAD: u32 = (ETH_HEADER + ETH_FCS) as u32;

/// UDP payload carried by an Ethernet frame of `frame` bytes (FCS included);
/// None when the headers alone do not fit.
pub fn frame_to_payload(frame: u32, ip: IpVersion) -> Option<u32> {
    frame.checked_sub(ETH_OVERHEAD + ip.header_len() + UDP_HEADER as u32)
}

/// The Ethernet frame (FCS included, padded to 64 B) that carries a UDP
/// datagram of `payload` bytes unfragmented.
pub fn payload_to_frame(payload: u32, ip: IpVersion) -> u32 {
    let lb = framing::udp_datagram(payload, u32::MAX, ip);
    u32::try_from(lb.ethernet).unwrap_or(u32::MAX)
}

impl FrameSpec {
    /// The frame for `nominal` at this IP version and link MTU, carrying at
    /// least `min_payload` bytes of UDP payload (wirebench's probe header is
    /// 24 B). When `nominal` is too small for that — 64 B leaves 18 B after
    /// IPv4 + UDP and nothing after IPv6 + UDP — the frame grows to the
    /// smallest that carries it (70 B for IPv4, 90 B for IPv6) and
    /// `frame != nominal` says so; every rate is computed for the frame
    /// really sent, never for the nominal one.
    pub fn new(
        nominal: u32,
        ip: IpVersion,
        mtu: u32,
        min_payload: u32,
    ) -> Result<Self, FrameError> {
        if !(64..=MAX_FRAME).contains(&nominal) {
            return Err(FrameError::OutOfRange(nominal));
        }
        let payload = frame_to_payload(nominal, ip).unwrap_or(0).max(min_payload);
        let frame = payload_to_frame(payload, ip).max(nominal);
        let max = mtu.saturating_add(ETH_OVERHEAD);
        if frame > max {
            return Err(FrameError::AboveMtu { frame, mtu, max });
        }
        Ok(FrameSpec {
            nominal,
            frame,
            payload,
            ip,
        })
    }

    /// Bytes of one frame at each layer (one frame: the spec never fragments).
    pub fn bytes(&self) -> framing::LayerBytes {
        framing::udp_datagram(self.payload, u32::MAX, self.ip)
    }

    /// Bytes on the wire per frame: frame + 8 preamble + 12 inter-frame gap.
    pub fn wire_bytes(&self) -> u64 {
        self.bytes().wire
    }

    /// The most frames per second a link of `link_bps` carries (RFC 2544
    /// Appendix A's "theoretical maximum frame rate"): R / (8 × wire bytes).
    pub fn line_rate_fps(&self, link_bps: f64) -> f64 {
        link_bps / (8.0 * self.wire_bytes() as f64)
    }

    /// Bit rates at every layer for `fps` frames per second.
    pub fn rates(&self, fps: f64) -> LayerRates {
        let b = self.bytes();
        let bits = |n: u64| fps * 8.0 * n as f64;
        LayerRates {
            fps,
            payload_bps: bits(b.payload),
            ip_bps: bits(b.ip),
            ethernet_bps: bits(b.ethernet),
            wire_bps: bits(b.wire),
        }
    }
}

/// A frame rate and what it is in bit/s at each layer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerRates {
    pub fps: f64,
    /// UDP payload (probe header included).
    pub payload_bps: f64,
    pub ip_bps: f64,
    /// Ethernet frames, MAC header and FCS included.
    pub ethernet_bps: f64,
    /// On the wire: preamble and inter-frame gap included (what a link rate means).
    pub wire_bps: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpVersion::{V4, V6};

    #[test]
    fn frame_payload_round_trip() {
        for ip in [V4, V6] {
            for f in [128, 256, 512, 1024, 1280, 1518] {
                let p = frame_to_payload(f, ip).unwrap();
                assert_eq!(payload_to_frame(p, ip), f, "{ip:?} {f}");
            }
        }
        assert_eq!(frame_to_payload(1518, V4), Some(1472));
        assert_eq!(frame_to_payload(1518, V6), Some(1452));
        assert_eq!(frame_to_payload(64, V4), Some(18));
        assert_eq!(frame_to_payload(64, V6), None);
    }

    #[test]
    fn small_frames_grow_to_carry_the_probe() {
        let s = FrameSpec::new(64, V4, 1500, 24).unwrap();
        assert_eq!((s.frame, s.payload), (70, 24));
        let s = FrameSpec::new(64, V6, 1500, 24).unwrap();
        assert_eq!((s.frame, s.payload), (90, 24));
        // Without a probe header to carry, 64 B stays 64 B (payload 18).
        let s = FrameSpec::new(64, V4, 1500, 0).unwrap();
        assert_eq!((s.frame, s.payload), (64, 18));
        // IPv6 with no payload still needs 66 B.
        assert_eq!(FrameSpec::new(64, V6, 1500, 0).unwrap().frame, 66);
        let s = FrameSpec::new(128, V6, 1500, 24).unwrap();
        assert_eq!((s.frame, s.payload), (128, 62));
    }

    #[test]
    fn mtu_and_range_checked() {
        assert_eq!(
            FrameSpec::new(1519, V4, 1500, 24),
            Err(FrameError::AboveMtu {
                frame: 1519,
                mtu: 1500,
                max: 1518
            })
        );
        assert!(FrameSpec::new(9018, V6, 9000, 24).is_ok());
        assert_eq!(
            FrameSpec::new(63, V4, 1500, 24),
            Err(FrameError::OutOfRange(63))
        );
    }

    #[test]
    fn line_rates_match_rfc2544_appendix() {
        // RFC 2544 Appendix A.1, 10 Mbit/s Ethernet: 64 B -> 14880 fps,
        // 1518 B -> 812 fps (rounded down there).
        let f64b = FrameSpec::new(64, V4, 1500, 0).unwrap();
        assert_eq!(f64b.line_rate_fps(10e6).floor(), 14880.0);
        let f1518 = FrameSpec::new(1518, V4, 1500, 24).unwrap();
        assert_eq!(f1518.line_rate_fps(10e6).floor(), 812.0);
        // 100 Mbit/s, 64 B: 148 809.5 fps; the wire rate is the link rate.
        let r = f64b.rates(f64b.line_rate_fps(100e6));
        assert!((r.fps - 148_809.52).abs() < 0.01);
        assert!((r.wire_bps - 100e6).abs() < 1e-3);
        assert!((r.ethernet_bps - 100e6 * 64.0 / 84.0).abs() < 1e-3);
        assert!((r.ip_bps - 100e6 * 46.0 / 84.0).abs() < 1e-3);
        assert!((r.payload_bps - 100e6 * 18.0 / 84.0).abs() < 1e-3);
    }
}
