//! Frame sizes and rates. RFC 2544 §9.1 names the Ethernet frame sizes (64,
//! 128, 256, 512, 1024, 1280, 1518 B, frame check sequence included, preamble
//! and gap not); RFC 5180 §5.1.1 keeps them for IPv6 (1280 is the IPv6
//! minimum MTU) and adds jumbo sizes. A test frame here is one UDP datagram
//! in one Ethernet frame: payload = frame − 18 (MAC header + FCS) − IP
//! header (20 / 40) − 8 (UDP). The byte counts per layer come from
//! [`crate::framing`], so the line rate here and the upper bound the
//! campaign reports are one model.

use crate::framing::{self, ETH_FCS, ETH_HEADER, TCP_HEADER, TCP_TIMESTAMPS, UDP_HEADER};
use crate::{IpVersion, Transport};
use serde::{Deserialize, Serialize};
use thiserror::Error;

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
    #[error("IMIX: {0}")]
    BadMix(String),
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

/// Transport payload carried by an Ethernet frame of `frame` bytes (FCS
/// included): frame − 18 − IP header − transport header (UDP and ICMP 8;
/// TCP 20 + 12 of timestamps, as Linux sends them). None when the headers
/// alone do not fit.
pub fn frame_to_payload(frame: u32, ip: IpVersion, transport: Transport) -> Option<u32> {
    let l4 = match transport {
        Transport::Tcp => TCP_HEADER + TCP_TIMESTAMPS,
        Transport::Udp | Transport::Icmp => UDP_HEADER,
    };
    frame.checked_sub(ETH_OVERHEAD + ip.header_len() + l4 as u32)
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
        let payload = frame_to_payload(nominal, ip, Transport::Udp)
            .unwrap_or(0)
            .max(min_payload);
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

/// The simple IMIX: 7 : 4 : 1 frames of 64, 594 and 1518 B, i.e. IP
/// packets of 40, 576 and 1500 B (TCP acknowledgements, the classic 576 B
/// datagram, full-MTU packets) — the industry's de-facto mix (RFC 6985
/// gives a notation for such mixes, not this one). Some testers use 570 B
/// for the middle size (`imix = "64:7,570:4,1518:1"` for theirs).
pub const SIMPLE_IMIX: [(u32, u32); 3] = [(64, 7), (594, 4), (1518, 1)];

/// The name of the IMIX entry in a list of frame sizes.
pub const IMIX_NAME: &str = "imix";

/// Largest sum of an IMIX's weights (one cycle of the sender's mix).
pub const MAX_MIX_WEIGHT: u32 = 10_000;

/// One frame-size entry of a search as configured: one size, or a mix of
/// sizes (IMIX) as (nominal frame, weight) parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameEntry {
    Size(u32),
    Mix(Vec<(u32, u32)>),
}

impl FrameEntry {
    /// The simple IMIX ([`SIMPLE_IMIX`]).
    pub fn simple_imix() -> FrameEntry {
        FrameEntry::Mix(SIMPLE_IMIX.to_vec())
    }

    /// Reads a mix `FRAME:WEIGHT,...` such as `64:7,570:4,1518:1`.
    pub fn parse_mix(text: &str) -> Result<FrameEntry, FrameError> {
        let bad = |m: String| FrameError::BadMix(m);
        let mut parts = Vec::new();
        for item in text.split(',').map(str::trim) {
            let (f, w) = item
                .split_once(':')
                .ok_or_else(|| bad(format!("{item:?}: write FRAME:WEIGHT, e.g. 64:7")))?;
            let f: u32 = f
                .trim()
                .parse()
                .map_err(|_| bad(format!("{item:?}: {f:?} is not a frame size")))?;
            let w: u32 =
                w.trim().parse().ok().filter(|w| *w >= 1).ok_or_else(|| {
                    bad(format!("{item:?}: the weight must be a whole number ≥ 1"))
                })?;
            parts.push((f, w));
        }
        let total: u64 = parts.iter().map(|p| u64::from(p.1)).sum();
        if total > u64::from(MAX_MIX_WEIGHT) {
            return Err(bad(format!(
                "weights add up to {total}, more than {MAX_MIX_WEIGHT}"
            )));
        }
        Ok(FrameEntry::Mix(parts))
    }

    /// The entry's name in scenario keys and tables: the size, or `imix`.
    pub fn key(&self) -> String {
        match self {
            FrameEntry::Size(f) => f.to_string(),
            FrameEntry::Mix(_) => IMIX_NAME.to_string(),
        }
    }
}

fn mix_text(parts: impl Iterator<Item = (u32, u32)>) -> String {
    parts
        .map(|(v, w)| format!("{v}:{w}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// One part of a mix as sent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MixPart {
    pub spec: FrameSpec,
    pub weight: u32,
}

/// An IMIX as tested: its parts (each grown to carry the probe header like
/// a single size) and the mean frame, weighted by frame count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixSpec {
    /// `imix`.
    pub name: String,
    /// The nominal mix, `64:7,594:4,1518:1`.
    pub mix: String,
    pub parts: Vec<MixPart>,
    pub ip: IpVersion,
    /// Mean Ethernet frame sent (FCS included).
    pub mean_frame: f64,
}

/// One frame-size entry as tested: a single frame size or an IMIX. The
/// rates of a mix are per mean frame: its line rate is link rate / (8 ×
/// mean wire bytes), and its bit rates at each layer are those of the mix's
/// frames in their proportions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TestFrame {
    Size(FrameSpec),
    Mix(MixSpec),
}

/// Mean bytes of one frame at each layer.
struct MeanBytes {
    payload: f64,
    ip: f64,
    ethernet: f64,
    wire: f64,
}

impl TestFrame {
    /// The entry at this IP version and MTU (see [`FrameSpec::new`]).
    pub fn new(
        entry: &FrameEntry,
        ip: IpVersion,
        mtu: u32,
        min_payload: u32,
    ) -> Result<TestFrame, FrameError> {
        Ok(match entry {
            FrameEntry::Size(f) => TestFrame::Size(FrameSpec::new(*f, ip, mtu, min_payload)?),
            FrameEntry::Mix(parts) => {
                if parts.is_empty() {
                    return Err(FrameError::BadMix("an empty mix".into()));
                }
                let parts = parts
                    .iter()
                    .map(|&(f, weight)| {
                        Ok(MixPart {
                            spec: FrameSpec::new(f, ip, mtu, min_payload)?,
                            weight,
                        })
                    })
                    .collect::<Result<Vec<_>, FrameError>>()?;
                let n: f64 = parts.iter().map(|p| f64::from(p.weight)).sum();
                let mean_frame = parts
                    .iter()
                    .map(|p| f64::from(p.weight) * f64::from(p.spec.frame))
                    .sum::<f64>()
                    / n;
                TestFrame::Mix(MixSpec {
                    name: IMIX_NAME.to_string(),
                    mix: mix_text(parts.iter().map(|p| (p.spec.nominal, p.weight))),
                    parts,
                    ip,
                    mean_frame,
                })
            }
        })
    }

    /// Name in scenario keys: the nominal size, or `imix`.
    pub fn key(&self) -> String {
        match self {
            TestFrame::Size(s) => s.nominal.to_string(),
            TestFrame::Mix(m) => m.name.clone(),
        }
    }

    /// The frame column of a table: `64`, `64 (sent 70)`, or `imix 64:7,594:4,1518:1 (mean 365.3)`.
    pub fn label(&self) -> String {
        match self {
            TestFrame::Size(s) if s.frame == s.nominal => s.nominal.to_string(),
            TestFrame::Size(s) => format!("{} (sent {})", s.nominal, s.frame),
            TestFrame::Mix(m) => format!("{} {} (mean {:.1})", m.name, m.mix, m.mean_frame),
        }
    }

    pub fn ip(&self) -> IpVersion {
        match self {
            TestFrame::Size(s) => s.ip,
            TestFrame::Mix(m) => m.ip,
        }
    }

    /// The frame sent; for a mix the mean frame.
    pub fn mean_frame(&self) -> f64 {
        match self {
            TestFrame::Size(s) => f64::from(s.frame),
            TestFrame::Mix(m) => m.mean_frame,
        }
    }

    /// The single size, when this is not a mix.
    pub fn single(&self) -> Option<&FrameSpec> {
        match self {
            TestFrame::Size(s) => Some(s),
            TestFrame::Mix(_) => None,
        }
    }

    /// The UDP payload of a single size.
    pub fn payload(&self) -> Option<u32> {
        self.single().map(|s| s.payload)
    }

    /// The sender's payload mix for a mix, `PAYLOAD:WEIGHT,...` (the form
    /// `wirebench send --size-mix` takes).
    pub fn payload_mix(&self) -> Option<String> {
        match self {
            TestFrame::Size(_) => None,
            TestFrame::Mix(m) => Some(mix_text(m.parts.iter().map(|p| (p.spec.payload, p.weight)))),
        }
    }

    fn mean_bytes(&self) -> MeanBytes {
        let parts: Vec<(f64, framing::LayerBytes)> = match self {
            TestFrame::Size(s) => vec![(1.0, s.bytes())],
            TestFrame::Mix(m) => m
                .parts
                .iter()
                .map(|p| (f64::from(p.weight), p.spec.bytes()))
                .collect(),
        };
        let n: f64 = parts.iter().map(|p| p.0).sum();
        let mean = |f: &dyn Fn(&framing::LayerBytes) -> u64| {
            parts.iter().map(|(w, b)| w * f(b) as f64).sum::<f64>() / n
        };
        MeanBytes {
            payload: mean(&|b| b.payload),
            ip: mean(&|b| b.ip),
            ethernet: mean(&|b| b.ethernet),
            wire: mean(&|b| b.wire),
        }
    }

    /// RFC 2544 Appendix A's maximum frame rate, for the mean frame of a mix.
    pub fn line_rate_fps(&self, link_bps: f64) -> f64 {
        link_bps / (8.0 * self.mean_bytes().wire)
    }

    /// Bit rates at every layer for `fps` frames per second.
    pub fn rates(&self, fps: f64) -> LayerRates {
        let b = self.mean_bytes();
        LayerRates {
            fps,
            payload_bps: fps * 8.0 * b.payload,
            ip_bps: fps * 8.0 * b.ip,
            ethernet_bps: fps * 8.0 * b.ethernet,
            wire_bps: fps * 8.0 * b.wire,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpVersion::{V4, V6};

    #[test]
    fn frame_payload_round_trip() {
        for ip in [V4, V6] {
            for f in [128, 256, 512, 1024, 1280, 1518] {
                let p = frame_to_payload(f, ip, Transport::Udp).unwrap();
                assert_eq!(payload_to_frame(p, ip), f, "{ip:?} {f}");
            }
        }
        let udp = |f, ip| frame_to_payload(f, ip, Transport::Udp);
        assert_eq!(udp(1518, V4), Some(1472));
        assert_eq!(udp(1518, V6), Some(1452));
        assert_eq!(udp(64, V4), Some(18));
        assert_eq!(udp(64, V6), None);
        assert_eq!(frame_to_payload(1518, V4, Transport::Tcp), Some(1448));
        assert_eq!(frame_to_payload(1518, V6, Transport::Tcp), Some(1428));
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
    fn simple_imix_mean_frame_and_rates() {
        // 64 B grows to 70 (IPv4) / 90 (IPv6) like a single size.
        let m = TestFrame::new(&FrameEntry::simple_imix(), V4, 1500, 24).unwrap();
        assert_eq!(m.key(), "imix");
        let mean = (7.0 * 70.0 + 4.0 * 594.0 + 1518.0) / 12.0;
        assert!((m.mean_frame() - mean).abs() < 1e-9);
        assert_eq!(m.payload_mix().as_deref(), Some("24:7,548:4,1472:1"));
        assert_eq!(m.payload(), None);
        assert_eq!(m.label(), "imix 64:7,594:4,1518:1 (mean 365.3)");
        // Line rate of the mean frame (+ 20 B preamble and gap per frame).
        let line = m.line_rate_fps(100e6);
        assert!(
            (line - 100e6 / (8.0 * (mean + 20.0))).abs() < 1e-6,
            "{line}"
        );
        let r = m.rates(line);
        assert!((r.wire_bps - 100e6).abs() < 1e-3);
        assert!((r.ethernet_bps - line * 8.0 * mean).abs() < 1e-3);
        assert!((r.ip_bps - line * 8.0 * (mean - 18.0)).abs() < 1e-3);
        assert!((r.payload_bps - line * 8.0 * (mean - 46.0)).abs() < 1e-3);
        let m6 = TestFrame::new(&FrameEntry::simple_imix(), V6, 1500, 24).unwrap();
        assert_eq!(m6.payload_mix().as_deref(), Some("24:7,528:4,1452:1"));
        assert!((m6.mean_frame() - (7.0 * 90.0 + 4.0 * 594.0 + 1518.0) / 12.0).abs() < 1e-9);
        // A single size is the same through either type.
        let s = TestFrame::new(&FrameEntry::Size(1518), V4, 1500, 24).unwrap();
        let f = FrameSpec::new(1518, V4, 1500, 24).unwrap();
        assert_eq!(s.line_rate_fps(1e9), f.line_rate_fps(1e9));
        assert_eq!(s.rates(1000.0), f.rates(1000.0));
        assert_eq!((s.key(), s.payload()), ("1518".to_string(), Some(1472)));
    }

    #[test]
    fn custom_mixes_are_checked() {
        assert_eq!(
            FrameEntry::parse_mix("64:7, 570:4,1518:1").unwrap(),
            FrameEntry::Mix(vec![(64, 7), (570, 4), (1518, 1)])
        );
        for bad in ["", "64", "64:0", "x:1", "64:1,", "64:10001"] {
            assert!(FrameEntry::parse_mix(bad).is_err(), "{bad:?}");
        }
        // Every part must fit the MTU.
        let big = FrameEntry::parse_mix("64:1,9018:1").unwrap();
        assert!(matches!(
            TestFrame::new(&big, V4, 1500, 24),
            Err(FrameError::AboveMtu { frame: 9018, .. })
        ));
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
