//! wirebench-stats: everything wirebench computes from timestamps and byte
//! counts, and nothing that touches sockets, clocks or files.
//!
//! It owns the per-flow accumulators ([`RecvAccumulator`], [`SendAccumulator`]),
//! the Ethernet framing model that turns payload bytes into IP, Ethernet and
//! on-the-wire bytes ([`udp_datagram`], [`tcp_stream`], the upper bounds), the
//! 32-bit sequence unwrapper, run aggregation ([`aggregate`]), and the
//! typed result document ([`result::ResultDoc`]) every layer above shares. Keeping it
//! pure lets the engine feed it from the hot path and the campaign layer reuse
//! it, and lets every formula be unit-tested with hand-computed numbers.
//! Definitions and sources: `docs/metrics.md`.

#![warn(missing_docs)]

use serde::{Deserialize, Serialize};

pub mod aggregate;
pub mod dist;
pub mod flow;
pub mod framing;
mod hist;
pub mod live;
pub mod opts;
pub mod result;
pub mod seq;
mod tdist;

pub use aggregate::{aggregate, pct_change, student_t_975, Agg};
pub use dist::Dist;
pub use flow::{
    loss_text, DelayStats, FlowConfig, Frames, Interval, Jitter, LossBursts, Quantiles,
    RecvAccumulator, RecvCounts, RecvSummary, SendAccumulator, SendSummary, Throughput,
};
pub use framing::{
    tcp_mss, tcp_stream, udp_datagram, upper_bound_tcp_bps, upper_bound_udp_bps, LayerBytes,
};
pub use live::{LiveCutter, LiveInterval, LiveTotals};
pub use opts::{MarksSeen, MarksTally, SockOpts};
pub use seq::SeqUnwrapper;

/// IP version of a flow; decides the IP header size in the framing model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IpVersion {
    /// IPv4 (20-byte header); the default, as on the command line.
    #[default]
    V4,
    /// IPv6 (40-byte header).
    V6,
}

impl IpVersion {
    /// 4 or 6.
    pub fn number(self) -> u8 {
        match self {
            IpVersion::V4 => 4,
            IpVersion::V6 => 6,
        }
    }

    /// Fixed IP header length in bytes (no options / extension headers).
    pub fn header_len(self) -> u32 {
        match self {
            IpVersion::V4 => 20,
            IpVersion::V6 => 40,
        }
    }
}

/// Which way a flow's packets travel: `forward` from the sender (the side
/// that runs `wirebench send`) to the receiver daemon, `reverse` from the
/// receiver daemon back to the sender (`-R`; `--bidir` is one of each).
/// The sender always measures and writes the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Sender to receiver.
    #[default]
    Forward,
    /// Receiver to sender (`-R`).
    Reverse,
}

impl Direction {
    /// "forward" or "reverse", as in the result document.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Reverse => "reverse",
        }
    }
}

/// Transport of a flow: one type from the command line through the control
/// protocol and the framing model to the result document ("udp"/"tcp").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// User Datagram Protocol; the default, as on the command line.
    #[default]
    Udp,
    /// Transmission Control Protocol.
    Tcp,
    /// ICMP echo (`-T icmp`, D-ITG's `-T ICMP`): echo requests answered by
    /// the destination's own stack, no receiver daemon; framed like UDP
    /// (an 8-byte header after IP).
    Icmp,
}

impl Transport {
    /// The name used on the command line, in the control protocol and in
    /// the result document.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Icmp => "icmp",
        }
    }

    /// A datagram per packet (UDP and ICMP echo), as opposed to TCP's stream.
    pub fn is_datagram(self) -> bool {
        self != Transport::Tcp
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    /// "udp", "tcp" or "icmp", any case (D-ITG writes `-T UDP`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "udp" => Ok(Transport::Udp),
            "tcp" => Ok(Transport::Tcp),
            "icmp" => Ok(Transport::Icmp),
            _ => Err(format!("transport must be udp, tcp or icmp, got {s:?}")),
        }
    }
}

/// What a session measures ("owd"/"rtt").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MeterMode {
    /// One-way delay: the receiver measures; the default, as on the command line.
    #[default]
    Owd,
    /// Round trip: the receiver reflects, the sender measures.
    Rtt,
}

impl MeterMode {
    /// "owd" or "rtt", as in the control protocol and the result document.
    pub fn as_str(self) -> &'static str {
        match self {
            MeterMode::Owd => "owd",
            MeterMode::Rtt => "rtt",
        }
    }
}

impl std::fmt::Display for MeterMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MeterMode {
    type Err = String;
    /// "owd" or "rtt", or D-ITG's "owdm"/"rttm", any case (`-m RTTM`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "owd" | "owdm" => Ok(MeterMode::Owd),
            "rtt" | "rttm" => Ok(MeterMode::Rtt),
            _ => Err(format!(
                "meter must be owd or rtt (D-ITG: owdm, rttm), got {s:?}"
            )),
        }
    }
}

#[cfg(test)]
mod names {
    use super::{MeterMode, Transport};

    #[test]
    fn meter_and_transport_names_as_ditg_writes_them() {
        for (s, m) in [
            ("RTTM", MeterMode::Rtt),
            ("owdm", MeterMode::Owd),
            ("Rtt", MeterMode::Rtt),
        ] {
            assert_eq!(s.parse::<MeterMode>(), Ok(m));
        }
        assert!("rtm".parse::<MeterMode>().is_err());
        assert_eq!("UDP".parse::<Transport>(), Ok(Transport::Udp));
    }
}
