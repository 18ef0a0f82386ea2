//! wirebench-stats: everything wirebench computes from timestamps and byte
//! counts, and nothing that touches sockets, clocks or files.
//!
//! It owns the per-flow accumulators ([`RecvAccumulator`], [`SendAccumulator`]),
//! the Ethernet framing model that turns payload bytes into IP, Ethernet and
//! on-the-wire bytes ([`udp_datagram`], [`tcp_stream`], the upper bounds), the
//! 32-bit sequence unwrapper, and run aggregation ([`aggregate`]). Keeping it
//! pure lets the engine feed it from the hot path and the campaign layer reuse
//! it, and lets every formula be unit-tested with hand-computed numbers.
//! Definitions and sources: `docs/metrics.md`.

use serde::{Deserialize, Serialize};

pub mod aggregate;
pub mod flow;
pub mod framing;
mod hist;
pub mod seq;
mod tdist;

pub use aggregate::{aggregate, pct_change, student_t_975, Agg};
pub use flow::{
    DelayStats, FlowConfig, Frames, Interval, Jitter, LossBursts, Quantiles, RecvAccumulator,
    RecvSummary, SendAccumulator, SendSummary, Throughput,
};
pub use framing::{
    tcp_mss, tcp_stream, udp_datagram, upper_bound_tcp_bps, upper_bound_udp_bps, LayerBytes,
};
pub use seq::SeqUnwrapper;

/// IP version of a flow; decides the IP header size in the framing model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IpVersion {
    V4,
    V6,
}

impl IpVersion {
    /// Fixed IP header length in bytes (no options / extension headers).
    pub fn header_len(self) -> u32 {
        match self {
            IpVersion::V4 => 20,
            IpVersion::V6 => 40,
        }
    }
}

/// Transport of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum L4 {
    Udp,
    Tcp,
}
