//! wirebench-schema: the data every layer of wirebench exchanges, and
//! nothing that computes it.
//!
//! It owns the result document `wirebench.result/1` ([`result::ResultDoc`])
//! and the per-flow reports in it ([`flow`]), the live intervals and
//! socket options the control protocol carries ([`live`], [`opts`]), the
//! enums one flow is described by ([`Transport`], [`MeterMode`],
//! [`Direction`], [`IpVersion`]), the Ethernet framing model the
//! document's layer figures are defined by ([`framing`]), delay histograms
//! ([`dist`]), and the campaign summary the report draws ([`summary`],
//! [`series`], [`rfc2544`]). A crate of its own so that the wire format,
//! the report and the store agree on one definition without depending on
//! the arithmetic (`wirebench-stats`) or the campaign runner. Renaming a
//! field here breaks stored results: `tests/result_doc.rs` checks every key
//! against stored documents.

#![warn(missing_docs)]

use serde::{Deserialize, Serialize};

pub mod dist;
pub mod flow;
pub mod framing;
pub mod live;
#[allow(missing_docs)]
pub mod metrics;
pub mod opts;
pub mod result;
#[allow(missing_docs)]
pub mod rfc2544;
pub mod series;
#[allow(missing_docs)]
pub mod summary;

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
