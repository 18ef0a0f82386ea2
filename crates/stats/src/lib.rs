//! wirebench-stats: everything wirebench computes from timestamps and byte
//! counts, and nothing that touches sockets, clocks or files.
//!
//! It owns the per-flow accumulators ([`RecvAccumulator`], [`SendAccumulator`]),
//! the live-interval cutter, the 32-bit sequence unwrapper and run
//! aggregation ([`aggregate`]). What they produce (the result document, the
//! flow reports, the framing model's layer bytes) is the contract crate
//! `wirebench-schema`, re-exported here under its old paths. Keeping it
//! pure lets the engine feed it from the hot path and the campaign layer reuse
//! it, and lets every formula be unit-tested with hand-computed numbers.
//! Definitions and sources: `docs/metrics.md`.

#![warn(missing_docs)]

pub mod aggregate;
pub mod flow;
mod hist;
pub mod live;
pub mod seq;
mod tdist;

/// The contract types this crate's accumulators produce, at the paths
/// their users have always named.
pub use wirebench_schema::{dist, framing, opts, result};
pub use wirebench_schema::{Direction, IpVersion, MeterMode, Transport};

pub use aggregate::{aggregate, pct_change, student_t_975, Agg};
pub use dist::Histogram;
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
